#include "sweep/sweep_spec.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <initializer_list>
#include <iterator>
#include <limits>
#include <optional>
#include <string>

#include "core/bounded_json.h"
#include "core/error.h"
#include "core/preset_file.h"

namespace tripod::sweep {
namespace fs = std::filesystem;
using nlohmann::json;

std::string param_count_name(ParamCount c) { return c == ParamCount::Total ? "total" : "non_embedding"; }
std::string flop_convention_name(FlopConvention c) { return c == FlopConvention::SixN ? "6N" : "6N+attention"; }

namespace {

// Typed access to one JSON object of the spec, with errors that name the file and the key path.
class Section {
 public:
  Section(const json& j, std::string where, const fs::path& file) : j_(j), where_(std::move(where)), file_(file) {
    TRIPOD_CHECK(j_.is_object(), file_.string(), ": '", where_.empty() ? "<top level>" : where_, "' must be an object");
  }
  // Every key present must be one of `allowed`.
  void allow_only(std::initializer_list<const char*> allowed) const {
    for (auto it = j_.begin(); it != j_.end(); ++it) {
      const bool known = std::any_of(allowed.begin(), allowed.end(), [&](const char* k) { return it.key() == k; });
      TRIPOD_CHECK(known, file_.string(), ": unknown key '", path(it.key()), "'");
    }
  }
  bool has(const char* key) const { return j_.contains(key); }
  const json& raw(const char* key) const {
    TRIPOD_CHECK(has(key), file_.string(), ": missing key '", path(key), "'");
    return j_.at(key);
  }
  Section section(const char* key) const { return Section(raw(key), path(key), file_); }
  double number(const char* key, std::optional<double> fallback = std::nullopt) const {
    if (!has(key) && fallback) return *fallback;
    const json& v = raw(key);
    TRIPOD_CHECK(v.is_number(), file_.string(), ": '", path(key), "' must be a number, got ", v.dump());
    return v.get<double>();
  }
  double positive(const char* key, std::optional<double> fallback = std::nullopt) const {
    const double v = number(key, fallback);
    TRIPOD_CHECK(std::isfinite(v) && v > 0, file_.string(), ": '", path(key), "' must be > 0, got ", v);
    return v;
  }
  int64_t integer(const char* key, std::optional<int64_t> fallback = std::nullopt, int64_t min = 1,
                  int64_t max = std::numeric_limits<int64_t>::max()) const {
    if (!has(key) && fallback) return *fallback;
    const json& v = raw(key);
    TRIPOD_CHECK(v.is_number_integer(), file_.string(), ": '", path(key), "' must be an integer, got ", v.dump());
    const bool past_int64 = v.is_number_unsigned() && v.get<uint64_t>() > static_cast<uint64_t>(max);
    TRIPOD_CHECK(v.get<int64_t>() >= min || past_int64, file_.string(), ": '", path(key), "' must be >= ", min, ", got ",
                 v.dump());
    TRIPOD_CHECK(!past_int64 && v.get<int64_t>() <= max, file_.string(), ": '", path(key), "' must be <= ", max,
                 ", got ", v.dump());
    return v.get<int64_t>();
  }
  // An integer the program keeps as an int (4294967312 was cut to 16 without a word).
  int int32(const char* key, std::optional<int64_t> fallback = std::nullopt, int64_t min = 1) const {
    return static_cast<int>(integer(key, fallback, min, std::numeric_limits<int>::max()));
  }
  std::string text(const char* key, std::optional<std::string> fallback = std::nullopt) const {
    if (!has(key) && fallback) return *fallback;
    const json& v = raw(key);
    TRIPOD_CHECK(v.is_string(), file_.string(), ": '", path(key), "' must be a string, got ", v.dump());
    return v.get<std::string>();
  }
  std::string path(const std::string& key) const { return where_.empty() ? key : where_ + "." + key; }
  const fs::path& file() const { return file_; }

 private:
  const json& j_;
  std::string where_;
  const fs::path& file_;
};

CorpusSpec parse_corpus(const Section& s) {
  CorpusSpec corpus;
  s.allow_only({"dir", "synthetic"});
  TRIPOD_CHECK(s.has("dir") != s.has("synthetic"), s.file().string(),
               ": 'corpus' needs exactly one of 'dir' (a prepared directory) and 'synthetic'");
  if (s.has("dir")) {
    corpus.dir = s.text("dir");
    return corpus;
  }
  const Section m = s.section("synthetic");
  m.allow_only({"vocab", "order", "sharpness", "tokens", "seed"});
  SyntheticCorpusSpec syn;
  syn.vocab = m.int32("vocab", std::nullopt, 2);
  syn.order = m.int32("order", 1);
  syn.sharpness = m.number("sharpness", 2.0);
  syn.tokens = m.integer("tokens", std::nullopt, 2);
  syn.seed = static_cast<uint64_t>(m.integer("seed", 1, 0));
  corpus.synthetic = syn;
  return corpus;
}

ModelsSpec parse_models(const Section& s) {
  ModelsSpec models;
  s.allow_only({"rule", "shapes", "sizes_per_budget", "span", "tokens_per_param"});
  TRIPOD_CHECK(s.has("rule") != s.has("shapes"), s.file().string(),
               ": 'models' needs exactly one of 'rule' (shapes derived from target N) and 'shapes' (an explicit list)");
  models.span = s.positive("span", 8.0);
  TRIPOD_CHECK(models.span >= 1, s.file().string(), ": 'models.span' must be >= 1");
  models.tokens_per_param = s.positive("tokens_per_param", 20.0);
  if (s.has("rule")) {
    const Section r = s.section("rule");
    r.allow_only({"aspect_ratio", "aspect_tolerance", "head_dim", "d_ff_ratio", "max_layers", "max_d_model"});
    ShapeRule rule;
    rule.aspect_ratio = r.positive("aspect_ratio", rule.aspect_ratio);
    rule.aspect_tolerance = r.positive("aspect_tolerance", rule.aspect_tolerance);
    TRIPOD_CHECK(rule.aspect_tolerance >= 1, s.file().string(), ": 'models.rule.aspect_tolerance' must be >= 1");
    rule.head_dim = r.integer("head_dim", rule.head_dim);
    rule.d_ff_ratio = r.integer("d_ff_ratio", rule.d_ff_ratio);
    rule.max_layers = r.integer("max_layers", rule.max_layers);
    rule.max_d_model = r.integer("max_d_model", rule.max_d_model);
    // The shape search counts every (width, depth) pair for every size of every budget: bounded, or a
    // dry run hung (max_layers 10^10); d_ff_ratio x d_model past int64 gave d_ff 0.
    TRIPOD_CHECK(rule.d_ff_ratio <= 64, s.file().string(), ": 'models.rule.d_ff_ratio' must be <= 64, got ",
                 rule.d_ff_ratio);
    const double candidates = static_cast<double>(rule.max_d_model / rule.head_dim) * static_cast<double>(rule.max_layers);
    TRIPOD_CHECK(candidates <= 1e5, s.file().string(), ": 'models.rule': max_d_model / head_dim x max_layers = ",
                 candidates, " shapes to try for each size, more than 100000: lower max_d_model or max_layers, or "
                 "raise head_dim");
    models.rule = rule;
    models.sizes_per_budget = s.integer("sizes_per_budget");
    // An IsoFLOP profile needs a handful of sizes; 1000 took minutes to plan before failing.
    TRIPOD_CHECK(models.sizes_per_budget <= 64, s.file().string(), ": 'models.sizes_per_budget' must be <= 64, got ",
                 models.sizes_per_budget);
  } else {
    const json& list = s.raw("shapes");
    TRIPOD_CHECK(list.is_array() && !list.empty(), s.file().string(), ": 'models.shapes' must be a non-empty list");
    for (std::size_t i = 0; i < list.size(); ++i) {
      const Section e(list[i], "models.shapes[" + std::to_string(i) + "]", s.file());
      e.allow_only({"n_layer", "d_model", "n_head", "d_ff"});
      ExplicitShape shape;
      shape.n_layer = e.integer("n_layer");
      shape.d_model = e.integer("d_model");
      shape.n_head = e.integer("n_head");
      shape.d_ff = e.integer("d_ff", 4 * shape.d_model);
      models.shapes.push_back(shape);
    }
    models.sizes_per_budget = s.integer("sizes_per_budget", 0, 0);
  }
  return models;
}

// "optim.lr" style keys with scalar values (checked against the config schema when runs are built).
json parse_settings(const json& j, const std::string& where, const fs::path& file) {
  TRIPOD_CHECK(j.is_object(), file.string(), ": '", where, "' must be an object of \"section.key\": value");
  for (auto it = j.begin(); it != j.end(); ++it) {
    TRIPOD_CHECK(it.key().find('.') != std::string::npos, file.string(), ": '", where, "' key '", it.key(),
                 "' must name a config key as section.key (e.g. optim.weight_decay)");
    TRIPOD_CHECK(it.value().is_primitive() && !it.value().is_null(), file.string(), ": '", where, ".", it.key(),
                 "' must be a number, string or boolean");
  }
  return j;
}

// Which parameter count and FLOP formula the budgets are measured in.
void parse_conventions(const Section& c, SweepSpec& spec) {
  c.allow_only({"param_count", "flops"});
  const std::string count = c.text("param_count", "total"), flops = c.text("flops", "6N+attention");
  TRIPOD_CHECK(count == "total" || count == "non_embedding", c.file().string(),
               ": 'conventions.param_count' must be \"total\" or \"non_embedding\", got \"", count, "\"");
  TRIPOD_CHECK(flops == "6N" || flops == "6N+attention", c.file().string(),
               ": 'conventions.flops' must be \"6N\" or \"6N+attention\", got \"", flops, "\"");
  spec.param_count = count == "total" ? ParamCount::Total : ParamCount::NonEmbedding;
  spec.flops = flops == "6N" ? FlopConvention::SixN : FlopConvention::SixNPlusAttention;
}

// Ascending and distinct: run names carry the budget, so a repeated one would plan the same runs twice.
std::vector<double> parse_budgets(const json& budgets, const fs::path& file) {
  TRIPOD_CHECK(budgets.is_array() && !budgets.empty(), file.string(), ": 'budgets' must be a non-empty list of FLOPs");
  std::vector<double> sorted;
  for (const json& b : budgets) {
    TRIPOD_CHECK(b.is_number() && b.get<double>() > 0 && std::isfinite(b.get<double>()), file.string(),
                 ": 'budgets' must hold positive numbers (FLOPs), got ", b.dump());
    sorted.push_back(b.get<double>());
  }
  std::sort(sorted.begin(), sorted.end());
  TRIPOD_CHECK(std::adjacent_find(sorted.begin(), sorted.end()) == sorted.end(), file.string(),
               ": 'budgets' lists a budget twice");
  return sorted;
}

// Keys absent from the spec keep the defaults already in `lr`; only the base rate is required.
void parse_lr(const Section& l, LrRule& lr) {
  l.allow_only({"base", "reference_d_model", "width_exponent", "min_lr_ratio"});
  lr.base = l.positive("base");
  lr.reference_d_model = l.positive("reference_d_model", lr.reference_d_model);
  lr.width_exponent = l.number("width_exponent", lr.width_exponent);
  lr.min_lr_ratio = l.number("min_lr_ratio", lr.min_lr_ratio);
  TRIPOD_CHECK(lr.min_lr_ratio >= 0 && lr.min_lr_ratio <= 1, l.file().string(),
               ": 'lr.min_lr_ratio' must be in [0, 1]");
}

void parse_warmup(const Section& w, WarmupRule& warmup) {
  w.allow_only({"fraction", "max_steps"});
  warmup.fraction = w.number("fraction", warmup.fraction);
  TRIPOD_CHECK(warmup.fraction >= 0 && warmup.fraction < 1, w.file().string(), ": 'warmup.fraction' must be in [0, 1)");
  warmup.max_steps = w.integer("max_steps", warmup.max_steps, 0);
}

std::vector<uint64_t> parse_seeds(const json& seeds, const fs::path& file) {
  TRIPOD_CHECK(seeds.is_array() && !seeds.empty(), file.string(), ": 'seeds' must be a non-empty list of integers");
  std::vector<uint64_t> list;
  for (const json& s : seeds) {
    TRIPOD_CHECK(s.is_number_unsigned(), file.string(), ": 'seeds' must hold non-negative integers, got ", s.dump());
    list.push_back(s.get<uint64_t>());
  }
  return list;
}

std::vector<RunOverride> parse_overrides(const json& list, const fs::path& file) {
  TRIPOD_CHECK(list.is_array(), file.string(), ": 'overrides' must be a list of {\"runs\": GLOB, \"set\": {...}}");
  std::vector<RunOverride> overrides;
  for (std::size_t i = 0; i < list.size(); ++i) {
    const std::string where = "overrides[" + std::to_string(i) + "]";
    const Section o(list[i], where, file);
    o.allow_only({"runs", "set"});
    overrides.push_back({o.text("runs"), parse_settings(o.raw("set"), where + ".set", file)});
  }
  return overrides;
}

}  // namespace

SweepSpec parse_sweep_spec(const json& j, const fs::path& file) {
  SweepSpec spec;
  spec.file = file;
  spec.json = j;
  const Section top(j, "", file);
  top.allow_only({"name", "description", "corpus", "conventions", "budgets", "models", "context", "batch_size",
                  "lr", "warmup", "seeds", "min_steps", "eval_batches", "checkpoint_every", "settings",
                  "overrides", "max_epochs"});
  spec.name = top.text("name", file.stem().string());
  spec.corpus = parse_corpus(top.section("corpus"));
  if (top.has("conventions")) parse_conventions(top.section("conventions"), spec);
  spec.budgets = parse_budgets(top.raw("budgets"), file);
  spec.models = parse_models(top.section("models"));
  spec.context = top.integer("context", spec.context);
  spec.batch_size = top.integer("batch_size", spec.batch_size);
  if (top.has("lr")) parse_lr(top.section("lr"), spec.lr);
  if (top.has("warmup")) parse_warmup(top.section("warmup"), spec.warmup);
  if (top.has("seeds")) spec.seeds = parse_seeds(top.raw("seeds"), file);
  spec.min_steps = top.integer("min_steps", spec.min_steps);
  spec.eval_batches = top.integer("eval_batches", spec.eval_batches);
  spec.max_epochs = top.number("max_epochs", spec.max_epochs);
  TRIPOD_CHECK(spec.max_epochs >= 0, file.string(), ": 'max_epochs' must be >= 0 (0: no limit), got ", spec.max_epochs);
  spec.checkpoint_every = top.integer("checkpoint_every", spec.checkpoint_every);
  if (top.has("settings")) spec.settings = parse_settings(top.raw("settings"), "settings", file);
  if (top.has("overrides")) spec.overrides = parse_overrides(top.raw("overrides"), file);
  return spec;
}

fs::path resolve_spec_path(const std::string& name_or_path) {
  return resolve_preset_file(name_or_path, "scaling/specs", "sweep spec");
}

SweepSpec load_sweep_spec(const std::string& name_or_path) {
  const fs::path path = resolve_spec_path(name_or_path);
  std::ifstream in(path);
  TRIPOD_CHECK(in.good(), "cannot read sweep spec ", path.string());
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  // A syntax error by line and column, and a key given twice (JSON keeps the last without a word).
  check_no_repeated_keys(text, "sweep spec " + path.string(), /*comments=*/true);
  const json j = json::parse(text, nullptr, false, /*ignore_comments=*/true);
  TRIPOD_CHECK(!j.is_discarded(), "sweep spec ", path.string(), " is not valid JSON");
  return parse_sweep_spec(j, path);
}

fs::path resolve_data_dir(const fs::path& dir) {
  if (dir.is_absolute() || fs::exists(dir)) return fs::absolute(dir);
  const fs::path in_source = fs::path(TRIPOD_SOURCE_DIR) / dir;
  return fs::exists(in_source) ? in_source : fs::absolute(dir);
}

}  // namespace tripod::sweep
