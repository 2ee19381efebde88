#include "conform/suite_layouts.h"

#include <cstdio>

#include "conform/bit_twins.h"
#include "conform/conformance.h"
#include "conform/lm_heads.h"

namespace tripod::conform {

RunConfig suite_config(const SuiteOptions& o, bool tied) {
  // tf32 trains, but has no justified conformance bound yet: its operand rounding (2^-11) flips
  // the sign of Adam's smallest updates differently per layout, moving single parameters by up to
  // 2 lr per step, while the reference's own distance from fp64 (the floor) saw fewer such flips.
  check(o.dtype != "tf32", "conform --dtype tf32: no justified tolerance for TF32 runs yet (Adam turns TF32's "
        "2^-11 operand rounding into lr-sized steps of single parameters, beyond the measured rounding floor); "
        "check fp64, fp32 or bf16-mixed");
  check(o.dtype == "fp64" || o.dtype == "fp32" || o.dtype == "bf16-mixed",
        "conform --dtype: fp64, fp32 or bf16-mixed, not '", o.dtype, "'");
  nlohmann::json base = default_conformance_config(o.dtype).json;
  base["model"]["tie_embeddings"] = tied;
  std::vector<std::string> overrides = o.overrides;
  overrides.push_back("train.dtype=" + o.dtype);
  // The learning-rate schedule spans the steps the suite runs: fixed at 5, --steps 60 trained 55
  // steps at min_lr (1/100 of the lr) while the fp32 bound's Adam slack grew with every step.
  overrides.push_back("train.steps=" + std::to_string(o.steps));
  const RunConfig config = parse_run_config(load_config_json(base, o.config, overrides));
  check(config.model.vocab_size > 0, "conform needs model.vocab_size set (it trains on random tokens)");
  return config;
}

std::vector<ParallelLayout> suite_layouts(const SuiteOptions& o, const RunConfig& config, int world) {
  std::vector<ParallelLayout> layouts;
  for (const auto& name : o.layouts) {
    layouts.push_back(ParallelLayout::parse(name));
    for (std::size_t i = 0; i + 1 < layouts.size(); ++i)  // by canonical name: "tp1-..-1f1b" and its default
      check(layouts[i].name() != layouts.back().name(), "--layouts lists ", layouts.back().name(), " twice");
  }
  if (layouts.empty()) {
    layouts = enumerate_layouts(world, config.model, conformance_step(config));
    // Under bf16-mixed a layout without a bit twin gets its -gfp32 one (conform/bit_twins.h).
    if (config.train.bf16_mixed)
      layouts = with_gather_twins(layouts, [&](const ParallelLayout& l) { return runs_tied_head(o.heads, l); });
  }
  for (const ParallelLayout& l : layouts) {
    check(world % l.ranks() == 0, "layout ", l.name(), " needs a multiple of ", l.ranks(), " ranks, launched with ",
          world);
    try {
      l.validate(config.model, conformance_step(config));
    } catch (const Error& e) {
      fail("layout ", l.name(), ": ", e.what());
    }
  }
  return layouts;
}

void print_suite_layouts(const SuiteOptions& o, int world) {
  check_heads_choice(o.heads);
  TRIPOD_CHECK(world >= 1 && world <= 4096, "--list-layouts: a world of 1-4096 ranks (got ", world, ")");
  const std::vector<ParallelLayout> layouts = suite_layouts(o, suite_config(o, true), world);
  int tied = 0;
  for (const ParallelLayout& l : layouts) {
    const bool t = runs_tied_head(o.heads, l);
    tied += t ? 1 : 0;
    std::printf("%-48s %3d rank%s  %s\n", l.name().c_str(), l.ranks(), l.ranks() == 1 ? " " : "s",
                t ? "tied" : "untied");
  }
  std::printf("%zu layout%s for %d rank%s (%s, --heads %s): %d tied, %zu untied\n", layouts.size(),
              layouts.size() == 1 ? "" : "s", world, world == 1 ? "" : "s", o.dtype.c_str(), o.heads.c_str(), tied,
              layouts.size() - static_cast<std::size_t>(tied));
}

}  // namespace tripod::conform
