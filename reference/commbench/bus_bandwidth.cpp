#include "commbench/bus_bandwidth.h"

#include <algorithm>

#include "core/error.h"

namespace tripod::commbench {

namespace {

void check_count_arguments(int64_t requested_bytes, int element_size, int n) {
  check(element_size > 0 && n > 0 && requested_bytes >= 0, "collective_counts: bad arguments");
}

}  // namespace

CollectiveCounts whole_buffer_counts(int64_t requested_bytes, int element_size, int n) {
  check_count_arguments(requested_bytes, element_size, n);
  CollectiveCounts out;
  out.printed = out.send = out.recv = requested_bytes / element_size;
  out.bytes = out.send * element_size;
  return out;
}

CollectiveCounts block_counts(int64_t requested_bytes, int element_size, int n, int send_blocks, int recv_blocks) {
  check_count_arguments(requested_bytes, element_size, n);
  const int64_t count = requested_bytes / element_size;
  // nccl-tests: (count/nranks) & ~(16/eltSize - 1), i.e. blocks of whole 16-byte units.
  const int64_t align = std::max<int64_t>(1, 16 / element_size);
  const int64_t block = count / n / align * align;
  CollectiveCounts out;
  out.printed = block;
  out.send = block * send_blocks;
  out.recv = block * recv_blocks;
  out.bytes = std::max(out.send, out.recv) * element_size;
  return out;
}

Bandwidth bandwidth(int64_t bytes, double seconds, double factor) {
  check(seconds > 0, "collective_bandwidth: time must be positive, got ", seconds, " s");
  Bandwidth b;
  b.algbw = static_cast<double>(bytes) / 1.0e9 / seconds;
  b.busbw = b.algbw * factor;
  return b;
}

}  // namespace tripod::commbench
