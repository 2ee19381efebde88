#include "comm/host_collectives.h"

#include <algorithm>
#include <cstring>

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

std::vector<std::string> all_gather_text(Communicator& group, const std::string& text, std::size_t max_bytes) {
  const int64_t ints = static_cast<int64_t>((max_bytes + 3) / 4);  // moved as int32, NUL-padded
  Tensor mine = host_alloc({ints}, DType::I32), all = host_alloc({ints * group.size()}, DType::I32);
  std::memcpy(mine.raw(), text.data(), std::min(text.size(), static_cast<std::size_t>(ints) * 4 - 1));
  group.all_gather(mine, all);
  std::vector<std::string> out;
  for (int r = 0; r < group.size(); ++r) out.emplace_back(static_cast<const char*>(all.raw()) + r * ints * 4);
  return out;
}

}  // namespace tripod
