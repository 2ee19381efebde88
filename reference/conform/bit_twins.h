// Layouts that must agree bit for bit, not only within the tolerance: rows of one run whose
// layouts differ only in what cannot change an arithmetic result.
//   - ZeRO-2 and ZeRO-3: the same buckets, the same reduce-scatter every micro-batch, the same
//     sharded update; ZeRO-3's gathers copy values (prefetch, -pfN, only changes when).
//   - ZeRO-1 too, when a step is one micro-batch: its one reduction after backward is then ZeRO-2's.
//   - `-gfp32`: bf16-mixed gathers the GEMM weights as bf16, whose rounding is all the model reads.
//   - `-opg`: ZeRO-1/2's after-step gathers waited for in the next forward, not in the step.
// ZeRO-0 all-reduces instead (another summation order beyond two ranks): it has no twins.
// The tolerance cannot see a bug that moves results by less than rounding does (bf16-mixed's
// rounding floor hid fp32 master weights rounded to bf16 at every step); a twin that disagrees can.
#pragma once
#include <functional>
#include <string>
#include <vector>

#include "conform/report.h"

namespace tripod::conform {

// The rows (indices) of one group of twins whose fingerprints are not all equal, and what they are.
struct TwinDisagreement {
  std::vector<std::size_t> rows;
  std::string reason;  // "tp1-pp1-dp2-z1-mb1 a1b2... and tp1-pp1-dp2-z3-mb1 c3d4... must agree bit for bit (...)"
};

// The key of a layout's twins (rows with equal keys and heads must agree), or "" for a row without
// twins (an operator check, a checkpoint row, ZeRO-0).
std::string bit_twin_key(const Outcome& row);
std::string bit_twin_key(const ParallelLayout& layout);  // "" for ZeRO-0

// Each layout of `layouts` followed, where the list holds it to no other twin with its head and its
// gathers can have one (ZeRO 1-3 over more than one DP rank, bf16 gathers), by its -gfp32 twin.
// conform's default list under bf16-mixed: without them, fp32 masters rounded to bf16 at every
// step (the rounded-masters fault) passed within the tolerance every layout without a twin: the
// ZeRO-1 layouts of more than one micro-batch a step, the recomputing and padded variants (each of
// one ZeRO stage only) and any layout whose twins run another head.
std::vector<ParallelLayout> with_gather_twins(const std::vector<ParallelLayout>& layouts,
                                              const std::function<bool(const ParallelLayout&)>& tied_head);

struct BitTwinCheck {
  std::size_t groups = 0;  // of two or more passing rows with one key and head
  std::vector<TwinDisagreement> disagreements;  // those whose fingerprints differ
};
BitTwinCheck check_bit_twins(const std::vector<Outcome>& rows);

}  // namespace tripod::conform
