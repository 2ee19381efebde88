// Collectives on a few host values - a pass/fail flag, a time, a count - for reports and
// agreements between ranks, without a device round trip (host tensors pass every communicator).
#pragma once
#include <vector>

#include "comm/communicator.h"

namespace tripod {

double all_reduce_value(Communicator& group, double value, ReduceOp op);
// Element-wise over the group: every rank passes the same number of values.
std::vector<double> all_reduce_values(Communicator& group, std::vector<double> values, ReduceOp op);
// Every rank's values, rank by rank: [rank 0's..., rank 1's..., ...].
std::vector<double> all_gather_values(Communicator& group, const std::vector<double>& values);

}  // namespace tripod
