#include "comm/host_collectives.h"

#include "core/host_memory.h"

namespace tripod {

double all_reduce_value(Communicator& group, double value, ReduceOp op) {
  return all_reduce_values(group, {value}, op)[0];
}

std::vector<double> all_reduce_values(Communicator& group, std::vector<double> values, ReduceOp op) {
  const Tensor t = host_view(values);
  group.all_reduce(t, t, op);
  return values;
}

std::vector<double> all_gather_values(Communicator& group, const std::vector<double>& values) {
  std::vector<double> all(values.size() * static_cast<std::size_t>(group.size()));
  group.all_gather(host_view(values), host_view(all));
  return all;
}

}  // namespace tripod
