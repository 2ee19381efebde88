#include "core/bounded_json.h"

#include <unordered_set>

#include "core/error.h"

namespace tripod {
namespace {

using json = nlohmann::json;

// nlohmann's own DOM builder with two checks added on the way in. Its callback parser would do the
// same with less code, but it scans the whole parent object after every nested object closes
// (looking for a discarded member), which makes a header of n tensors O(n^2): 37 minutes for 200k.
// sax_parse dispatches statically, so these members hide the base's and forward to them.
class BoundedDomBuilder : public nlohmann::detail::json_sax_dom_parser<json> {
 public:
  using Base = nlohmann::detail::json_sax_dom_parser<json>;
  BoundedDomBuilder(json& root, const std::string& origin, int max_depth, std::vector<std::string>* top_level_keys)
      : Base(root), origin_(origin), max_depth_(max_depth), top_level_keys_(top_level_keys) {}

  bool start_object(std::size_t elements) { return open() && Base::start_object(elements); }
  bool start_array(std::size_t elements) { return open() && Base::start_array(elements); }
  bool end_object() { --open_containers_; return Base::end_object(); }
  bool end_array() { --open_containers_; return Base::end_array(); }

  bool key(string_t& key) {
    if (top_level_keys_ != nullptr && open_containers_ == 1) {
      check(seen_.insert(key).second, origin_, ": key '", key, "' appears twice");
      top_level_keys_->push_back(key);
    }
    return Base::key(key);
  }

 private:
  // Fires on the first container past the bound, before the parser goes any deeper.
  bool open() {
    check(++open_containers_ <= max_depth_ + 1, origin_, " nests deeper than ", max_depth_,
          " levels (not a file Tripod reads)");
    return true;
  }

  const std::string& origin_;
  const int max_depth_;
  std::vector<std::string>* top_level_keys_;
  std::unordered_set<std::string> seen_;
  int open_containers_ = 0;  // the top-level value's own container counts as one
};

// Only the keys matter: a stack of the open containers, each with the keys seen so far (arrays
// have none) and the path leading to it.
class RepeatedKeyFinder : public nlohmann::json_sax<json> {
 public:
  explicit RepeatedKeyFinder(const std::string& origin) : origin_(origin) {}
  bool null() override { return true; }
  bool boolean(bool) override { return true; }
  bool number_integer(number_integer_t) override { return true; }
  bool number_unsigned(number_unsigned_t) override { return true; }
  bool number_float(number_float_t, const string_t&) override { return true; }
  bool string(string_t&) override { return true; }
  bool binary(binary_t&) override { return true; }
  bool start_object(std::size_t) override { return open(false); }
  bool start_array(std::size_t) override { return open(true); }
  bool end_object() override { return close(); }
  bool end_array() override { return close(); }
  bool key(string_t& key) override {
    Container& c = open_.back();
    const std::string path = c.path.empty() ? key : c.path + "." + key;
    check(c.keys.insert(key).second, origin_, ": key '", path, "' appears twice (JSON keeps only the last)");
    c.last_key = path;
    return true;
  }
  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception& e) override {
    fail(origin_, ": not valid JSON (", e.what(), ")");
  }

 private:
  struct Container {
    bool array;
    std::string path, last_key;  // an array's elements share its path
    std::unordered_set<std::string> keys;
  };
  bool open(bool array) {
    const std::string path = open_.empty() ? "" : open_.back().array ? open_.back().path : open_.back().last_key;
    open_.push_back({array, path, "", {}});
    return true;
  }
  bool close() {
    open_.pop_back();
    return true;
  }
  const std::string& origin_;
  std::vector<Container> open_;
};

}  // namespace

void check_no_repeated_keys(std::string_view text, const std::string& origin, bool comments) {
  RepeatedKeyFinder finder(origin);
  json::sax_parse(text.begin(), text.end(), &finder, nlohmann::detail::input_format_t::json, true, comments);
}

nlohmann::json parse_bounded_json(std::string_view text, const std::string& origin, int max_depth,
                                  std::vector<std::string>* top_level_keys) {
  json result;
  BoundedDomBuilder builder(result, origin, max_depth, top_level_keys);
  try {
    json::sax_parse(text.begin(), text.end(), &builder);
  } catch (const json::exception& e) {
    fail(origin, ": not valid JSON (", e.what(), ")");
  }
  return result;
}

}  // namespace tripod
