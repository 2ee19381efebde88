// conform's choice of LM head per layout (conform/lm_heads.h): under "alternate", bit twins share
// a head, and every kind of layout of the conformance model meets both heads.
#include <gtest/gtest.h>

#include <map>
#include <set>

#include "conform/bit_twins.h"
#include "conform/conformance.h"
#include "conform/lm_heads.h"

namespace tripod::conform {
namespace {

bool tied(const std::string& name) { return runs_tied_head("alternate", ParallelLayout::parse(name)); }

TEST(LmHeads, AlternateFlipsAsTpDpAndMicroBatchesDouble) {
  EXPECT_FALSE(tied("tp1-pp1-dp2-z0-mb1"));  // 2: floor(log2) 1
  EXPECT_TRUE(tied("tp1-pp1-dp1-z0-mb1"));   // 1: 0
  EXPECT_TRUE(tied("tp2-pp1-dp2-z1-mb1"));   // 4: 2
  EXPECT_FALSE(tied("tp2-pp1-dp2-z1-mb2"));  // 8: 3
  EXPECT_FALSE(tied("tp1-pp1-dp3-z1-mb1"));  // 3: 1
  EXPECT_TRUE(tied("tp1-pp4-dp1-z3-mb4-1f1b"));  // pipeline stages do not count: 4
  EXPECT_TRUE(runs_tied_head("tied", ParallelLayout::parse("tp1-pp1-dp2-z0-mb1")));
  EXPECT_FALSE(runs_tied_head("untied", ParallelLayout::parse("tp1-pp1-dp1-z0-mb1")));
  EXPECT_TRUE(is_heads_choice("alternate") && is_heads_choice("tied") && is_heads_choice("untied"));
  EXPECT_FALSE(is_heads_choice("both") || is_heads_choice(""));
}

std::vector<ParallelLayout> conform_layouts(int world) {
  const RunConfig config = default_conformance_config("fp64");
  return enumerate_layouts(world, config.model, conformance_step(config));
}

TEST(LmHeads, BitTwinsShareAHeadUnderAlternate) {
  for (int world : {2, 4, 6, 8}) {
    std::map<std::string, std::set<bool>> heads;  // twin key -> the heads its layouts run
    for (const ParallelLayout& l : conform_layouts(world))
      if (!bit_twin_key(l).empty()) heads[bit_twin_key(l)].insert(runs_tied_head("alternate", l));
    for (const auto& [key, seen] : heads) EXPECT_EQ(seen.size(), 1u) << world << " ranks: " << key;
  }
}

// A kind of layout: its ZeRO stage, which of TP, PP and DP it has, SP, schedule, recomputation and
// padding. On 8 ranks every kind of two or more layouts meets both heads (the rule of tied on even
// ZeRO stages met one head in every kind).
TEST(LmHeads, EveryKindOfLayoutMeetsBothHeadsOnEightRanks) {
  std::map<std::string, std::set<bool>> heads;
  std::map<std::string, int> members;
  for (const ParallelLayout& l : conform_layouts(8)) {
    const std::string kind = "z" + std::to_string(l.zero) + (l.tp > 1 ? " tp" : "") + (l.pp > 1 ? " pp" : "") +
                             (l.dp > 1 ? " dp" : "") + (l.sequence_parallel ? " sp" : "") +
                             (l.pipelined() ? " " + schedule_kind_name(l.schedule) : "") + " " +
                             recompute_name(l.recompute) + (l.vocab_multiple > 1 ? " padded" : "");
    heads[kind].insert(runs_tied_head("alternate", l));
    ++members[kind];
  }
  int kinds = 0;
  for (const auto& [kind, seen] : heads) {
    if (members[kind] < 2) continue;
    ++kinds;
    EXPECT_EQ(seen.size(), 2u) << kind << " (" << members[kind] << " layouts) meets one head";
  }
  EXPECT_GT(kinds, 100);
}

}  // namespace
}  // namespace tripod::conform
