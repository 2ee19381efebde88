#include "conform/bit_twins.h"

#include <map>

namespace tripod::conform {

std::string bit_twin_key(const Outcome& row) {
  if (row.name != row.layout.name()) return "";  // operator checks, checkpoint rows
  return bit_twin_key(row.layout);
}

std::string bit_twin_key(const ParallelLayout& l) {
  if (l.zero == 0) return "";
  ParallelLayout twin = l;  // what the twins share: everything but the stage, prefetch, gather precision and overlap
  twin.zero = 0;
  twin.zero3_prefetch = 1;
  twin.fp32_param_gathers = false;
  twin.overlap_param_gather = false;
  // ZeRO-1 with more than one micro-batch a step reduces once after them, the others after each.
  const bool reduces_like_zero2 = l.zero >= 2 || l.micro_batches == 1;
  return twin.name() + (reduces_like_zero2 ? " zero 1-3" : " zero 1");
}

std::vector<ParallelLayout> with_gather_twins(const std::vector<ParallelLayout>& layouts,
                                              const std::function<bool(const ParallelLayout&)>& tied_head) {
  auto key = [&](const ParallelLayout& l) { return bit_twin_key(l) + (tied_head(l) ? " tied" : " untied"); };
  std::map<std::string, int> members;  // key and head -> layouts of the list with them
  for (const ParallelLayout& l : layouts) ++members[key(l)];
  std::vector<ParallelLayout> out;
  for (const ParallelLayout& l : layouts) {
    out.push_back(l);
    if (l.zero == 0 || l.dp == 1 || l.fp32_param_gathers || members[key(l)] > 1) continue;
    ParallelLayout twin = l;
    twin.fp32_param_gathers = true;
    out.push_back(twin);
  }
  return out;
}

BitTwinCheck check_bit_twins(const std::vector<Outcome>& rows) {
  std::map<std::string, std::vector<std::size_t>> groups;  // key and head -> rows, in run order
  for (std::size_t i = 0; i < rows.size(); ++i) {
    const std::string key = bit_twin_key(rows[i]);
    if (!key.empty() && rows[i].errors.pass && !rows[i].fingerprint.empty())
      groups[key + " " + rows[i].head].push_back(i);
  }
  BitTwinCheck out;
  for (const auto& [key, members] : groups) {
    if (members.size() < 2) continue;
    ++out.groups;
    bool same = true;
    for (std::size_t i : members) same = same && rows[i].fingerprint == rows[members.front()].fingerprint;
    if (same) continue;
    TwinDisagreement d{members, ""};
    for (std::size_t i : members)
      d.reason += (d.reason.empty() ? "" : " and ") + rows[i].name + " " + rows[i].fingerprint;
    d.reason += " must agree bit for bit (" + rows[members.front()].head +
                " head; ZeRO-2 and -3, ZeRO-1 at one micro-batch a step, -gfp32 and -pfN change no arithmetic)";
    out.disagreements.push_back(d);
  }
  return out;
}

}  // namespace tripod::conform
