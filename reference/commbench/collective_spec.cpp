#include "commbench/collective_spec.h"

#include "core/error.h"

namespace tripod::commbench {

const std::vector<Collective>& all_collectives() {
  static const std::vector<Collective> order = {Collective::AllReduce, Collective::AllGather, Collective::ReduceScatter,
                                                Collective::Broadcast, Collective::Reduce,    Collective::AllToAll,
                                                Collective::SendRecv};
  return order;
}

const CollectiveSpec& collective_spec(Collective c) {
  switch (c) {
    case Collective::AllReduce: return all_reduce_spec();
    case Collective::AllGather: return all_gather_spec();
    case Collective::ReduceScatter: return reduce_scatter_spec();
    case Collective::Broadcast: return broadcast_spec();
    case Collective::Reduce: return reduce_spec();
    case Collective::AllToAll: return alltoall_spec();
    case Collective::SendRecv: return sendrecv_spec();
  }
  fail("collective_spec: unknown collective ", static_cast<int>(c));
}

std::string collective_name(Collective c) { return collective_spec(c).name; }

Collective parse_collective(const std::string& name) {
  std::string known;
  for (Collective c : all_collectives()) {
    if (collective_name(c) == name) return c;
    known += (known.empty() ? "" : ", ") + collective_name(c);
  }
  fail("unknown collective '", name, "' (expected one of ", known, ")");
}

bool is_reduction(Collective c) { return collective_spec(c).reduction; }

bool has_root(Collective c) { return collective_spec(c).rooted; }

CollectiveCounts collective_counts(Collective c, int64_t requested_bytes, int element_size, int n) {
  return collective_spec(c).counts(requested_bytes, element_size, n);
}

double bus_factor(Collective c, int n) {
  check(n > 0, "bus_factor: a group needs at least one rank, got ", n);
  return collective_spec(c).bus_factor(n);
}

Bandwidth collective_bandwidth(Collective c, int64_t bytes, double seconds, int n) {
  return bandwidth(bytes, seconds, bus_factor(c, n));
}

}  // namespace tripod::commbench
