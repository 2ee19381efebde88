// ParallelLayout: names round-trip, every rule is checked once with a message naming the setting,
// and the enumeration conform runs is the one it always ran (368 layouts of 8 ranks for the
// conformance model). ZeroPolicy: the stage table.
#include <gtest/gtest.h>

#include <set>

#include "conform/conformance.h"
#include "parallel/parallel_layout.h"
#include "parallel/zero_policy.h"
#include "support/error_text.h"

namespace tripod {
namespace {

TEST(ParallelLayout, NamesRoundTripForEveryEnumeratedLayout) {
  const RunConfig config = conform::default_conformance_config("fp64");
  const std::vector<ParallelLayout> layouts = enumerate_layouts(8, config.model, conform::conformance_step(config));
  // 368, with the ZeRO-1 and ZeRO-3 ones again recomputing (552), 33 ZeRO-2 ones with a padded
  // vocabulary and 11 with overlapped parameter gathers
  EXPECT_EQ(layouts.size(), 596u);
  std::set<std::string> names;
  for (const ParallelLayout& l : layouts) {
    const ParallelLayout back = ParallelLayout::parse(l.name());
    EXPECT_EQ(back.name(), l.name());
    EXPECT_EQ(back.recompute, l.recompute) << l.name();
    EXPECT_EQ(back.zero3_prefetch, l.zero3_prefetch) << l.name();
    EXPECT_EQ(back.vocab_multiple, l.vocab_multiple) << l.name();
    EXPECT_EQ(back.overlap_param_gather, l.overlap_param_gather) << l.name();
    EXPECT_EQ(back.grid().tp * back.grid().pp * back.grid().dp, back.ranks());
    EXPECT_NO_THROW(l.validate(config.model, conform::conformance_step(config), l.ranks())) << l.name();
    names.insert(l.name());
  }
  EXPECT_EQ(names.size(), layouts.size()) << "names are unique";
  EXPECT_TRUE(names.count("tp2-pp2-dp2-z1-mb4-sp-interleaved-v2"));
  EXPECT_TRUE(names.count("tp2-pp2-dp2-z1-mb4-sp-interleaved-v2-rsel"));
  EXPECT_TRUE(names.count("tp2-pp2-dp2-z3-mb4-sp-interleaved-v2-rfull-pf2"));
  EXPECT_TRUE(names.count("tp2-pp2-dp2-z2-mb2-1f1b-pad16"));
  EXPECT_TRUE(names.count("tp4-pp1-dp2-z2-mb1-pad16"));  // 4 x 32 rows of 97: TP rank 3 holds one real row
  EXPECT_TRUE(names.count("tp1-pp1-dp4-z2-mb2-opg"));
  EXPECT_TRUE(names.count("tp2-pp2-dp2-z2-mb4-1f1b-opg"));
  EXPECT_EQ(ParallelLayout::parse("tp1-pp1-dp2-z1-mb2-gfp32-opg").describe(),
            "tp=1 pp=1 dp=2, ZeRO-1, fp32 gathers, parameter gathers overlapped with the next forward");
  EXPECT_EQ(ParallelLayout::parse("tp2-pp1-dp1-z0-mb1-pad128").describe(),
            "tp=2 pp=1 dp=1, ZeRO-0, vocabulary padded to a multiple of 128 per TP rank");
  EXPECT_TRUE(ParallelLayout::parse("tp1-pp1-dp1-z0-mb1-pad64").sharded_parameters());
  EXPECT_FALSE(ParallelLayout::parse("tp1-pp2-dp2-z3-mb2").sharded_parameters());
  EXPECT_EQ(ParallelLayout::parse("tp2-pp1-dp1-z3-mb1-rfull").describe(), "tp=2 pp=1 dp=1, ZeRO-3, full recomputation");
  EXPECT_EQ(ParallelLayout::parse("tp1-pp1-dp2-z3-mb1-pf0").describe(), "tp=1 pp=1 dp=2, ZeRO-3, prefetch 0");
  EXPECT_EQ(ParallelLayout::parse("tp1-pp1-dp2-z3-mb1-pf0-gfp32").describe(),
            "tp=1 pp=1 dp=2, ZeRO-3, prefetch 0, fp32 gathers");
  EXPECT_TRUE(ParallelLayout::parse("tp1-pp1-dp2-z3-mb1-gfp32").fp32_param_gathers);
  EXPECT_EQ(ParallelLayout::parse("tp1-pp1-dp2-z3-mb1-gfp32").name(), "tp1-pp1-dp2-z3-mb1-gfp32");
  EXPECT_EQ(ParallelLayout::parse("tp1-pp2-dp1-z0-mb2").name(), "tp1-pp2-dp1-z0-mb2-1f1b");  // the default schedule
  EXPECT_EQ(ParallelLayout::parse("tp2-pp2-dp2-z1-mb4-afab").describe(), "tp=2 pp=2 dp=2, ZeRO-1, afab m=4");
}

TEST(ParallelLayout, ParseRefusesWhatItCannotRead) {
  EXPECT_NE(error_of([] { ParallelLayout::parse("tp2-pq2"); }).find("unknown part 'pq2'"), std::string::npos);
  EXPECT_NE(error_of([] { ParallelLayout::parse("tpx"); }).find("cannot read a number in 'tpx'"), std::string::npos);
  EXPECT_NE(error_of([] { ParallelLayout::parse("tp1-pp1-dp1-z0-mb1-1f1b"); }).find("needs pp > 1"), std::string::npos);
  EXPECT_NE(error_of([] { ParallelLayout::parse("tp0-pp1"); }).find("sizes must be >= 1"), std::string::npos);
  EXPECT_NE(error_of([] { ParallelLayout::parse("tp1-padx"); }).find("cannot read a number in 'padx'"), std::string::npos);
  // A count is digits only: std::stoi read "tp2x" as 2, "z+1" as 1 and "mb4.5" as 4, silently.
  for (const char* part : {"tp2x", "z+1", "mb4.5", "pad 64", "pf1e1", "v2v", "dp99999999999"})
    EXPECT_NE(error_of([&] { ParallelLayout::parse(std::string("tp1-pp2-dp1-z0-mb2-") + part); })
                  .find(std::string("cannot read a number in '") + part + "'"),
              std::string::npos)
        << part;
  // A bare prefix is no part.
  EXPECT_NE(error_of([] { ParallelLayout::parse("tp1-pp2-v"); }).find("unknown part 'v'"), std::string::npos);
  // A setting given twice: the second part silently won (tp1-tp2 ran as TP 2).
  EXPECT_NE(error_of([] { ParallelLayout::parse("tp1-pp1-dp2-z1-mb1-tp2"); })
                .find("layout 'tp1-pp1-dp2-z1-mb1-tp2': 'tp2' sets the TP size that 'tp1' set already"),
            std::string::npos);
  EXPECT_NE(error_of([] { ParallelLayout::parse("tp1-pp1-dp2-z1-mb1-gfp32-gfp32"); }).find("fp32 gathers"),
            std::string::npos);
  EXPECT_NE(error_of([] { ParallelLayout::parse("tp1-pp2-dp1-z0-mb2-rsel-rfull"); })
                .find("'rfull' sets the recomputation that 'rsel' set already"),
            std::string::npos);
  EXPECT_NE(error_of([] { ParallelLayout::parse("tp1-pp2-dp1-z0-mb2-afab-1f1b"); }).find("pipeline schedule"),
            std::string::npos);
}

TEST(ParallelLayout, EveryRuleIsCheckedWithTheSettingNamed) {
  const RunConfig config = conform::default_conformance_config("fp64");  // 4 layers, 4 heads, batch 8
  const StepShape step = conform::conformance_step(config);
  auto message = [&](const std::string& name, int world, auto&& change) {
    ParallelLayout l = ParallelLayout::parse(name);
    change(l);
    return error_of([&] { l.validate(config.model, step, world); });
  };
  auto none = [](ParallelLayout&) {};
  EXPECT_NE(message("tp1-pp1-dp4-z0-mb1", 2, none).find("needs 4 ranks but the world has 2"), std::string::npos);
  EXPECT_NE(message("tp1-pp1-dp2-z5-mb1", 2, none).find("ZeRO stage (--zero) must be 0, 1, 2 or 3 (got 5)"),
            std::string::npos);
  EXPECT_NE(message("tp1-pp1-dp2-z0-mb1", 2, [](ParallelLayout& l) { l.bucket_bytes = 0; }).find("--bucket-mb"),
            std::string::npos);
  EXPECT_NE(message("tp1-pp1-dp2-z0-mb1-sp", 2, none).find("sequence parallelism (--sequence-parallel) needs"),
            std::string::npos);
  EXPECT_NE(message("tp1-pp1-dp2-z0-mb1-v2", 2, none).find("need pipeline parallelism"), std::string::npos);
  EXPECT_NE(message("tp1-pp1-dp2-z0-mb1-gfp32", 2, none).find("(-gfp32, --gather-fp32) are for ZeRO 1-3, whose "
                                                              "parameters are gathered; ZeRO-0 gathers none"),
            std::string::npos);
  EXPECT_EQ(message("tp1-pp1-dp2-z1-mb1-gfp32", 2, none), "no error");  // ZeRO-1/2 gather after the step
  EXPECT_EQ(message("tp1-pp1-dp2-z2-mb1-gfp32", 2, none), "no error");
  EXPECT_EQ(message("tp1-pp1-dp2-z1-mb1-opg", 2, none), "no error");
  EXPECT_NE(message("tp1-pp1-dp2-z3-mb1-opg", 2, none).find("are for ZeRO-1/2, whose updated parameters are "
                                                            "all-gathered after the step (ZeRO-3: gathers on use"),
            std::string::npos);
  EXPECT_NE(message("tp1-pp1-dp2-z0-mb1-opg", 2, none).find("(ZeRO-0: gathers none)"), std::string::npos);
  EXPECT_NE(message("tp3-pp1-dp1-z0-mb1", 3, none).find("does not divide model.n_head = 4"), std::string::npos);
  EXPECT_NE(message("tp1-pp1-dp3-z0-mb1", 3, none).find("does not divide among 3 data-parallel ranks"),
            std::string::npos);
  EXPECT_NE(message("tp1-pp1-dp2-z0-mb3", 2, none).find("which do not split into 3 micro-batches"), std::string::npos);
  EXPECT_NE(message("tp1-pp4-dp1-z0-mb4-interleaved-v2", 4, none).find("needs 8 chunks"), std::string::npos);
  EXPECT_NE(message("tp1-pp2-dp1-z0-mb1-interleaved-v2", 2, none).find("interleaved schedule needs"), std::string::npos);
  EXPECT_NE(message("tp1-pp2-dp1-z0-mb2-v2", 2, none).find("virtual stages (2) need the interleaved schedule"),
            std::string::npos);
  EXPECT_NE(message("tp1-pp1-dp1-z0-mb1", 1, [](ParallelLayout& l) { l.grid_order = "tp-tp-dp"; }).find("order"),
            std::string::npos);
  EXPECT_NE(message("tp1-pp1-dp1-z0-mb1-pad0", 1, none).find("(--make-vocab-size-divisible-by) must be 1-65536 (got 0)"),
            std::string::npos);
  EXPECT_EQ(message("tp2-pp2-dp2-z3-mb4-sp-1f1b", 8, none), "no error");
}

TEST(ZeroPolicy, WhatEachStageShardsAndWhenItReduces) {
  for (int s = 0; s <= 3; ++s) {
    const ZeroPolicy p = ZeroPolicy::for_stage(s);
    EXPECT_EQ(p.full_params, s <= 2);
    EXPECT_EQ(p.full_grads, s <= 1);
    EXPECT_EQ(p.shard_optimizer, s >= 1);
    EXPECT_EQ(p.reduce_scatter, s >= 1);
    EXPECT_EQ(p.reduce_every_microbatch, s >= 2);
    EXPECT_EQ(p.gather_params_after_step, s == 1 || s == 2);
    EXPECT_EQ(p.gather_params_on_use, s == 3);
  }
  EXPECT_NE(error_of([] { ZeroPolicy::for_stage(4); }).find("ZeRO stage must be 0, 1, 2 or 3 (got 4)"), std::string::npos);
}

}  // namespace
}  // namespace tripod
