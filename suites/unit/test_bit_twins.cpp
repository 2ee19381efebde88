// conform's bit twins (conform/bit_twins.h): which rows must agree bit for bit, and the groups that
// do not.
#include <gtest/gtest.h>

#include "conform/bit_twins.h"

namespace tripod::conform {
namespace {

Outcome row(const std::string& name, const std::string& head, const std::string& fingerprint) {
  Outcome o;
  o.layout = ParallelLayout::parse(name);
  o.name = o.layout.name();
  o.head = head;
  o.fingerprint = fingerprint;
  o.errors.pass = true;
  return o;
}

TEST(BitTwins, KeysJoinWhatChangesNoArithmetic) {
  auto key = [](const std::string& name) { return bit_twin_key(row(name, "tied", "f")); };
  EXPECT_EQ(key("tp1-pp1-dp2-z2-mb2"), key("tp1-pp1-dp2-z3-mb2"));
  EXPECT_EQ(key("tp1-pp1-dp2-z3-mb2"), key("tp1-pp1-dp2-z3-mb2-pf0"));
  EXPECT_EQ(key("tp1-pp1-dp2-z3-mb2"), key("tp1-pp1-dp2-z3-mb2-gfp32"));
  EXPECT_EQ(key("tp1-pp1-dp2-z1-mb1"), key("tp1-pp1-dp2-z3-mb1"));  // one micro-batch a step
  EXPECT_NE(key("tp1-pp1-dp2-z1-mb2"), key("tp1-pp1-dp2-z2-mb2"));  // reduces once, after both
  EXPECT_EQ(key("tp1-pp1-dp2-z1-mb2"), key("tp1-pp1-dp2-z1-mb2-gfp32"));
  EXPECT_NE(key("tp1-pp1-dp2-z2-mb1"), key("tp1-pp1-dp4-z2-mb1"));
  EXPECT_NE(key("tp2-pp1-dp2-z2-mb1"), key("tp2-pp1-dp2-z2-mb1-sp"));
  EXPECT_NE(key("tp1-pp2-dp2-z2-mb2-afab"), key("tp1-pp2-dp2-z2-mb2-1f1b"));
  EXPECT_EQ(key("tp1-pp1-dp2-z0-mb1"), "");  // ZeRO-0 all-reduces: no twins
  Outcome check = row("tp1-pp1-dp1-z0-mb1", "", "f");
  check.name = "op:vocab-parallel-loss-tp2";
  EXPECT_EQ(bit_twin_key(check), "");
  Outcome reshard = row("tp1-pp1-dp2-z3-mb1", "tied", "f");
  reshard.name = "ckpt:tp1-pp1-dp2-z1-mb1>tp1-pp1-dp2-z3-mb1";
  EXPECT_EQ(bit_twin_key(reshard), "");
}

TEST(BitTwins, AGroupThatDisagreesIsNamedWithEveryMember) {
  std::vector<Outcome> rows = {row("tp1-pp1-dp2-z1-mb1", "untied", "aaaa"), row("tp1-pp1-dp2-z2-mb1", "tied", "bbbb"),
                               row("tp1-pp1-dp2-z3-mb1", "untied", "cccc"), row("tp1-pp1-dp2-z3-mb1-pf0", "untied", "cccc"),
                               row("tp1-pp1-dp2-z2-mb2", "tied", "dddd"), row("tp1-pp1-dp2-z3-mb2", "tied", "dddd")};
  const BitTwinCheck check = check_bit_twins(rows);
  EXPECT_EQ(check.groups, 2u);  // z1/z3/z3-pf0 untied at mb1, z2/z3 tied at mb2
  const std::vector<TwinDisagreement>& d = check.disagreements;
  ASSERT_EQ(d.size(), 1u);  // the untied ZeRO 1-3 at one micro-batch; the tied z2-mb1 has no twin
  EXPECT_EQ(d[0].rows, (std::vector<std::size_t>{0, 2, 3}));
  EXPECT_NE(d[0].reason.find("tp1-pp1-dp2-z1-mb1 aaaa and tp1-pp1-dp2-z3-mb1 cccc and tp1-pp1-dp2-z3-mb1-pf0 cccc "
                             "must agree bit for bit (untied head"),
            std::string::npos);
  rows[0].fingerprint = "cccc";
  EXPECT_TRUE(check_bit_twins(rows).disagreements.empty());
  rows[5].errors.pass = false;  // a failed row is already said; it is no twin
  rows[5].fingerprint = "eeee";
  EXPECT_TRUE(check_bit_twins(rows).disagreements.empty());
  EXPECT_EQ(check_bit_twins(rows).groups, 1u);
}

TEST(BitTwins, LayoutsWithoutATwinOfTheirHeadGetTheirGatherTwin) {
  std::vector<ParallelLayout> layouts;
  for (const char* name : {"tp1-pp1-dp2-z0-mb1", "tp1-pp1-dp1-z1-mb1", "tp1-pp1-dp2-z1-mb1", "tp1-pp1-dp2-z1-mb2",
                           "tp1-pp1-dp2-z2-mb1", "tp1-pp1-dp2-z3-mb1", "tp1-pp1-dp2-z3-mb1-pf0"})
    layouts.push_back(ParallelLayout::parse(name));
  auto names = [](const std::vector<ParallelLayout>& list) {
    std::vector<std::string> out;
    for (const ParallelLayout& l : list) out.push_back(l.name());
    return out;
  };
  // Heads by ZeRO stage (tied on even ones): ZeRO-2 tied has no twin (ZeRO-3 is untied); ZeRO-1 at
  // two micro-batches has none either; ZeRO-1 at one and ZeRO-3 are twins. ZeRO-0 and one DP rank
  // gather nothing.
  auto by_stage = [](const ParallelLayout& l) { return l.zero % 2 == 0; };
  EXPECT_EQ(names(with_gather_twins(layouts, by_stage)),
            (std::vector<std::string>{"tp1-pp1-dp2-z0-mb1", "tp1-pp1-dp1-z1-mb1", "tp1-pp1-dp2-z1-mb1",
                                      "tp1-pp1-dp2-z1-mb2", "tp1-pp1-dp2-z1-mb2-gfp32", "tp1-pp1-dp2-z2-mb1",
                                      "tp1-pp1-dp2-z2-mb1-gfp32", "tp1-pp1-dp2-z3-mb1", "tp1-pp1-dp2-z3-mb1-pf0"}));
  // One head for all: ZeRO-2 is ZeRO-3's twin.
  auto tied = [](const ParallelLayout&) { return true; };
  EXPECT_EQ(names(with_gather_twins(layouts, tied)).size(), layouts.size() + 1);  // z1-mb2's alone
}

}  // namespace
}  // namespace tripod::conform
