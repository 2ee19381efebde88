// Which LM head (tied to the embedding or a separate matrix) conform runs each layout with. The two
// heads take different paths through every kind of parallelism: the tied one shares wte between
// the first and the last pipeline stage (its gradients meet across them), with the vocabulary
// sharded over TP and its storage over ZeRO, the untied one has a separate LM head matrix.
#pragma once
#include <string>

#include "parallel/parallel_layout.h"

namespace tripod::conform {

// --heads: "tied", "untied", or "alternate", where the head flips each time TP × DP × micro-batches
// doubles (tied where floor(log2) of the product is even). Why that product: bit twins share all
// three (conform/bit_twins.h: ZeRO 1-3, -pfN, -gfp32 and -opg change none of them), so twins run
// one head and are compared; and since doubling any of the three flips the head, each ZeRO stage,
// schedule, SP, recomputation and padded vocabulary meets both heads with and without TP, PP and
// DP. (Alternating by ZeRO stage, tied on 0 and 2, ran ZeRO-1 and -3 only untied, ZeRO-0 and -2
// only tied, and ZeRO-2 and its ZeRO-3 twins under different heads, never compared.)
bool runs_tied_head(const std::string& heads, const ParallelLayout& layout);

// Whether `heads` is one of --heads' values: alternate, tied or untied.
bool is_heads_choice(const std::string& heads);
// Throws naming the three unless it is.
void check_heads_choice(const std::string& heads);

}  // namespace tripod::conform
