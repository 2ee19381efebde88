// Collectives on a few host values - a pass/fail flag, a time, a count - for reports and
// agreements between ranks, without a device round trip (host tensors pass every communicator).
#pragma once
#include <string>
#include <vector>

#include "comm/communicator.h"

namespace tripod {

double all_reduce_value(Communicator& group, double value, ReduceOp op);
// Element-wise over the group: every rank passes the same number of values.
std::vector<double> all_reduce_values(Communicator& group, std::vector<double> values, ReduceOp op);
// Every rank's values, rank by rank: [rank 0's..., rank 1's..., ...].
std::vector<double> all_gather_values(Communicator& group, const std::vector<double>& values);
// Every rank's text (at most max_bytes - 1 bytes of each; longer is cut), rank by rank.
std::vector<std::string> all_gather_text(Communicator& group, const std::string& text, std::size_t max_bytes = 512);

}  // namespace tripod
