#include "perf/bus_bandwidth.h"

#include <algorithm>

#include "core/error.h"

namespace tripod {

const std::vector<Collective>& all_collectives() {
  static const std::vector<Collective> order = {Collective::AllReduce, Collective::AllGather, Collective::ReduceScatter,
                                                Collective::Broadcast, Collective::Reduce,    Collective::AllToAll,
                                                Collective::SendRecv};
  return order;
}

std::string collective_name(Collective c) {
  switch (c) {
    case Collective::AllReduce: return "all_reduce";
    case Collective::AllGather: return "all_gather";
    case Collective::ReduceScatter: return "reduce_scatter";
    case Collective::Broadcast: return "broadcast";
    case Collective::Reduce: return "reduce";
    case Collective::AllToAll: return "alltoall";
    case Collective::SendRecv: return "sendrecv";
  }
  return "?";
}

Collective parse_collective(const std::string& name) {
  std::string known;
  for (Collective c : all_collectives()) {
    if (collective_name(c) == name) return c;
    known += (known.empty() ? "" : ", ") + collective_name(c);
  }
  fail("unknown collective '", name, "' (expected one of ", known, ")");
}

bool is_reduction(Collective c) {
  return c == Collective::AllReduce || c == Collective::ReduceScatter || c == Collective::Reduce;
}

bool has_root(Collective c) { return c == Collective::Broadcast || c == Collective::Reduce; }

CollectiveCounts collective_counts(Collective c, int64_t requested_bytes, int element_size, int n) {
  check(element_size > 0 && n > 0 && requested_bytes >= 0, "collective_counts: bad arguments");
  const int64_t count = requested_bytes / element_size;
  CollectiveCounts out;
  switch (c) {
    case Collective::AllGather:
    case Collective::ReduceScatter:
    case Collective::AllToAll: {
      // nccl-tests: (count/nranks) & ~(16/eltSize - 1), i.e. blocks of whole 16-byte units.
      const int64_t align = std::max<int64_t>(1, 16 / element_size);
      const int64_t block = count / n / align * align;
      out.printed = block;
      out.send = c == Collective::AllGather ? block : block * n;
      out.recv = c == Collective::ReduceScatter ? block : block * n;
      break;
    }
    default:
      out.printed = out.send = out.recv = count;
      break;
  }
  out.bytes = std::max(out.send, out.recv) * element_size;
  return out;
}

double bus_factor(Collective c, int n) {
  check(n > 0, "bus_factor: a group needs at least one rank, got ", n);
  switch (c) {
    case Collective::AllReduce: return 2.0 * (n - 1) / n;
    case Collective::AllGather:
    case Collective::ReduceScatter:
    case Collective::AllToAll: return static_cast<double>(n - 1) / n;
    default: return 1.0;
  }
}

Bandwidth collective_bandwidth(Collective c, int64_t bytes, double seconds, int n) {
  check(seconds > 0, "collective_bandwidth: time must be positive, got ", seconds, " s");
  Bandwidth b;
  b.algbw = static_cast<double>(bytes) / 1.0e9 / seconds;
  b.busbw = b.algbw * bus_factor(c, n);
  return b;
}

}  // namespace tripod
