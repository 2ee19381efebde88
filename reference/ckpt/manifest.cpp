#include "ckpt/manifest.h"

#include <cmath>
#include <cstdio>
#include <limits>
#include <set>

#include "core/bounded_json.h"
#include "core/error.h"

namespace tripod::ckpt {
using nlohmann::json;

namespace {

json block_json(const Block& b) {
  return {{"tensor", b.tensor}, {"kind", b.kind},     {"dtype", dtype_name(b.dtype)},
          {"start", b.start},   {"length", b.length}, {"stride", b.stride},
          {"count", b.count},   {"offset", b.offset}, {"xxh64", b.xxh64}};
}

}  // namespace

json shard_file_to_json(const ShardFile& f) {
  json blocks = json::array();
  for (const Block& b : f.blocks) blocks.push_back(block_json(b));
  return {{"name", f.name}, {"rank", f.rank}, {"bytes", f.bytes}, {"xxh64", f.xxh64}, {"blocks", blocks}};
}

ShardFile shard_file_from_json(const json& f) {
  ShardFile file{f.at("name"), f.at("rank"), f.at("bytes"), f.at("xxh64"), {}};
  for (const json& b : f.at("blocks"))
    file.blocks.push_back({b.at("tensor"), b.at("kind"), parse_dtype(b.at("dtype")), b.at("start"), b.at("length"),
                           b.at("stride"), b.at("count"), b.at("offset"), b.at("xxh64")});
  return file;
}

namespace {

json body_json(const Manifest& m) {
  json tensors = json::object();
  for (const auto& [name, shape] : m.tensors) tensors[name] = shape;
  json files = json::array();
  for (const ShardFile& f : m.files) files.push_back(shard_file_to_json(f));
  json data = {{"next_sample", m.data.next_sample}, {"seed", m.data.seed}, {"batch_size", m.data.batch_size},
               {"seq_len", m.data.seq_len}};
  if (!m.data.train_tokens_xxh64.empty()) data["train_tokens_xxh64"] = m.data.train_tokens_xxh64;
  if (m.data.tokens_trained >= 0) data["tokens_trained"] = m.data.tokens_trained;
  json body = {{"format", kCheckpointFormat},
               {"version", m.version},
               {"step", m.step},
               {"dtype", dtype_name(m.dtype)},
               {"config", m.config},
               {"layout", m.layout},
               {"world_size", m.world_size},
               {"data", data},
               {"tensors", tensors},
               {"files", files}};
  if (!m.recent_losses.empty()) body["anomaly"] = {{"recent_losses", m.recent_losses}};
  if (m.updates >= 0 && m.updates != m.step) body["updates"] = m.updates;
  return body;
}

// Typed field access that names the manifest and the field on any mismatch.
class Fields {
 public:
  Fields(const json& object, std::string where, const std::string& origin) : j_(object), where_(std::move(where)), origin_(origin) {
    check(j_.is_object(), origin_, ": ", where_, " is not a JSON object");
  }
  const json& at(const char* key) const {
    check(j_.contains(key), origin_, ": ", where_, " has no field '", key, "'");
    return j_.at(key);
  }
  std::string text(const char* key) const {
    const json& v = at(key);
    check(v.is_string(), origin_, ": ", where_, ".", key, " is not a string");
    return v.get<std::string>();
  }
  int64_t integer(const char* key, int64_t lo, int64_t hi = std::numeric_limits<int64_t>::max()) const {
    const json& v = at(key);
    check(v.is_number_integer(), origin_, ": ", where_, ".", key, " is not an integer");
    const bool negative = v.is_number_unsigned() ? false : v.get<int64_t>() < 0;
    check(!(v.is_number_unsigned() && v.get<uint64_t>() > static_cast<uint64_t>(hi)), origin_, ": ", where_, ".", key,
          " is out of range");
    const int64_t x = negative ? v.get<int64_t>() : static_cast<int64_t>(v.get<uint64_t>());
    check(x >= lo && x <= hi, origin_, ": ", where_, ".", key, " = ", x, " is out of range [", lo, ", ", hi, "]");
    return x;
  }

 private:
  const json& j_;
  std::string where_;
  const std::string& origin_;
};

constexpr int64_t kMaxElements = int64_t{1} << 50;  // far beyond any model, far from overflow

Shape parse_shape(const json& j, const std::string& where, const std::string& origin) {
  check(j.is_array() && j.size() <= 8, origin, ": ", where, " is not a shape (an array of at most 8 sizes)");
  Shape shape;
  int64_t numel = 1;
  for (const json& d : j) {
    check(d.is_number_integer() && d.get<int64_t>() >= 0 && d.get<int64_t>() <= kMaxElements, origin, ": ", where,
          " has a dimension that is not a size");
    shape.push_back(d.get<int64_t>());
    numel *= std::max<int64_t>(shape.back(), 1);
    check(numel <= kMaxElements, origin, ": ", where, " has too many elements");
  }
  return shape;
}

DType parse_state_dtype(const std::string& name, const std::string& where, const std::string& origin) {
  check(name == "fp32" || name == "fp64" || name == "bf16", origin, ": ", where, " has dtype '", name,
        "' (expected fp32, fp64 or bf16)");
  return parse_dtype(name);
}

Block parse_block(const json& j, const std::string& where, const std::string& origin, const Manifest& m,
                  uint64_t file_bytes) {
  const Fields f(j, where, origin);
  Block b;
  b.tensor = f.text("tensor");
  b.kind = f.text("kind");
  b.dtype = parse_state_dtype(f.text("dtype"), where, origin);
  const auto shape = m.tensors.find(b.tensor);
  check(shape != m.tensors.end(), origin, ": ", where, " is a piece of tensor '", b.tensor,
        "', which the manifest's tensor list does not have");
  check(b.kind == "param" || b.kind == "adam_m" || b.kind == "adam_v", origin, ": ", where, " (", b.tensor,
        ") has kind '", b.kind, "' (expected param, adam_m or adam_v)");
  const int64_t numel = shape_numel(shape->second);
  b.start = f.integer("start", 0, numel);
  b.length = f.integer("length", 1, numel);
  b.count = f.integer("count", 1, numel);
  b.stride = f.integer("stride", b.count > 1 ? b.length : 0, numel);
  // The last run must end inside the tensor; asked by division, so no product can overflow. With
  // stride >= length the runs do not overlap, so the block holds at most numel elements.
  const int64_t room = numel - b.start - b.length;  // how far the last run may start after the first
  check(room >= 0 && (b.count == 1 || (b.stride > 0 && b.count - 1 <= room / b.stride)), origin, ": ", where, " (",
        b.tensor, ") reaches past the end of the tensor's ", numel, " elements");
  b.offset = static_cast<uint64_t>(f.integer("offset", 0, static_cast<int64_t>(file_bytes)));
  check(b.bytes() <= file_bytes - b.offset, origin, ": ", where, " (", b.tensor, ") reaches past the end of its ",
        file_bytes, "-byte file");
  b.xxh64 = f.text("xxh64");
  return b;
}

}  // namespace

std::string manifest_text(const Manifest& manifest) {
  json body = body_json(manifest);
  const std::string canonical = body.dump();
  body["checksum"] = xxh64_hex(canonical.data(), canonical.size());
  return body.dump(1) + "\n";
}

Manifest parse_manifest(std::string_view text, const std::string& origin) {
  // A manifest nests five deep (files, blocks; the run configuration); 32 refuses a damaged or
  // hostile file long before a deep value could exhaust the stack.
  json j = parse_bounded_json(text, origin, /*max_depth=*/32);
  const Fields top(j, "the manifest", origin);
  check(top.text("format") == kCheckpointFormat, origin, " is not a Tripod checkpoint manifest");
  Manifest m;
  m.version = static_cast<int>(top.integer("version", 0));
  check(m.version == kManifestVersion, origin, ": checkpoint format version ", m.version,
        m.version > kManifestVersion ? " was written by a newer Tripod; this one reads version "
                                     : " is not supported; this Tripod reads version ",
        kManifestVersion);
  // The checksum covers every other field: anything altered after the save is caught here.
  const std::string recorded = top.text("checksum");
  j.erase("checksum");
  const std::string canonical = j.dump();
  const std::string actual = xxh64_hex(canonical.data(), canonical.size());
  check(actual == recorded, origin, " is damaged: its checksum is ", actual, " but it records ", recorded);

  m.step = top.integer("step", 0);
  m.updates = j.contains("updates") ? top.integer("updates", 0, m.step) : m.step;
  m.dtype = parse_state_dtype(top.text("dtype"), "the manifest", origin);
  m.config = top.at("config");
  check(m.config.is_object(), origin, ": config is not an object");
  m.layout = top.text("layout");
  m.world_size = static_cast<int>(top.integer("world_size", 1, 1 << 24));
  const Fields data(top.at("data"), "data", origin);
  m.data.next_sample = data.integer("next_sample", 0);
  m.data.seed = static_cast<uint64_t>(data.integer("seed", 0));
  m.data.batch_size = data.integer("batch_size", 1);
  m.data.seq_len = data.integer("seq_len", 1);
  if (top.at("data").contains("tokens_trained")) m.data.tokens_trained = data.integer("tokens_trained", 0);
  if (top.at("data").contains("train_tokens_xxh64")) {
    m.data.train_tokens_xxh64 = data.text("train_tokens_xxh64");
    check(m.data.train_tokens_xxh64.size() == 16 &&
              m.data.train_tokens_xxh64.find_first_not_of("0123456789abcdef") == std::string::npos,
          origin, ": data.train_tokens_xxh64 is not 16 hex digits");
  }

  if (j.contains("anomaly")) {
    const json& losses = Fields(top.at("anomaly"), "anomaly", origin).at("recent_losses");
    check(losses.is_array() && losses.size() <= (std::size_t{1} << 20), origin,
          ": anomaly.recent_losses is not a list of at most 2^20 losses");
    for (const json& loss : losses) {
      TRIPOD_CHECK(loss.is_number() && std::isfinite(loss.get<double>()), origin, ": anomaly.recent_losses holds ",
                   loss.dump(), ", not a finite loss");
      m.recent_losses.push_back(loss.get<double>());
    }
  }

  const json& tensors = top.at("tensors");
  check(tensors.is_object() && !tensors.empty(), origin, ": tensors is not a non-empty object");
  for (const auto& [name, shape] : tensors.items()) m.tensors[name] = parse_shape(shape, "tensor '" + name + "'", origin);

  const json& files = top.at("files");
  check(files.is_array() && static_cast<int64_t>(files.size()) == m.world_size, origin, ": files lists ",
        files.is_array() ? files.size() : 0, " shard files for a world of ", m.world_size, " ranks");
  std::set<std::string> names;
  for (std::size_t i = 0; i < files.size(); ++i) {
    const std::string where = "files[" + std::to_string(i) + "]";
    const Fields f(files[i], where, origin);
    ShardFile file;
    file.name = f.text("name");
    check(!file.name.empty() && file.name.find('/') == std::string::npos && file.name[0] != '.', origin, ": ", where,
          " names '", file.name, "', not a plain file name in the checkpoint directory");
    check(names.insert(file.name).second, origin, ": shard file ", file.name, " is listed twice");
    file.rank = static_cast<int>(f.integer("rank", 0, m.world_size - 1));
    check(file.rank == static_cast<int>(i), origin, ": ", where, " is rank ", file.rank, "'s file, expected rank ", i);
    file.bytes = static_cast<uint64_t>(f.integer("bytes", 0));
    file.xxh64 = f.text("xxh64");
    const json& blocks = f.at("blocks");
    check(blocks.is_array(), origin, ": ", where, ".blocks is not an array");
    for (std::size_t k = 0; k < blocks.size(); ++k)
      file.blocks.push_back(parse_block(blocks[k], where + ".blocks[" + std::to_string(k) + "]", origin, m, file.bytes));
    m.files.push_back(std::move(file));
  }
  return m;
}

}  // namespace tripod::ckpt
