// The collectives of `tripod bench comm`, each described once, in the spirit of nccl-tests' one
// file per collective (src/all_reduce.cu, ...): all_reduce.cpp, all_gather.cpp, reduce_scatter.cpp,
// broadcast.cpp, reduce.cpp, alltoall.cpp and sendrecv.cpp each define a CollectiveSpec, and the
// rest of the benchmark (plan, harness, report) asks it instead of switching over Collective.
//
// A description says: the names nccl-tests uses, the element counts and bus-bandwidth factor
// (bus_bandwidth.h), which of the harness's buffers the call reads, writes and checks, out of
// place and in place (comm/communicator.h describes the in-place forms), where the expected value
// of each checked element comes from, and how to make the call through the Communicator.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "comm/communicator.h"
#include "commbench/bus_bandwidth.h"

namespace tripod::commbench {

enum class Collective { AllReduce, AllGather, ReduceScatter, Broadcast, Reduce, AllToAll, SendRecv };

struct CollectiveCall {
  ReduceOp op = ReduceOp::Sum;  // reductions only
  int root = 0;                 // broadcast and reduce only (a rank of the group)
  bool in_place = false;
};

// A call as one rank of the group sees it.
struct CallContext {
  CollectiveCall call;
  int rank = 0, size = 1;  // in the group
  int64_t block = 0;       // the printed count: the per-rank block of the blocked collectives
};

// The harness's views for the current size (CollectiveBench allocates them for the largest).
enum class Buffer {
  None,     // nothing: a rank that sends or checks nothing
  Send,     // the send buffer, CollectiveCounts::send elements
  Recv,     // the receive buffer, CollectiveCounts::recv elements
  Whole,    // the receive buffer's max(send, recv) elements: an in-place input that fills it
  Block,    // block `rank` of the receive buffer (blocked collectives only)
  Scratch,  // a second receive buffer of recv elements (only where `needs_scratch`)
};

struct BufferRoles {
  Buffer input = Buffer::None;    // what this rank sends, filled with its inputs
  Buffer output = Buffer::None;   // what the call writes
  Buffer checked = Buffer::None;  // what this rank checks afterwards
  int64_t first_index = 0;        // the group-wide index of the input's first element
};

// Where the expected value of a checked element comes from: rank `rank`'s input at group-wide
// `index`, or, with rank == kReduced, the reduction over the group of every input at `index`.
struct Source {
  static constexpr int kReduced = -1;
  int rank = kReduced;
  int64_t index = 0;
};

struct RunArgs {
  Communicator& group;
  Backend& backend;  // where the buffers live
  const Tensor& in;
  const Tensor& out;
  const CollectiveCall& call;
  bool blocking;  // the blocking forms, or `_async` + wait()
};

struct CollectiveSpec {
  Collective collective;
  const char* name;     // nccl-tests' name: "all_reduce", ..., "alltoall", "sendrecv"
  const char* program;  // the nccl-tests program: "all_reduce_perf"
  bool reduction;       // takes a reduction op
  bool rooted;          // takes a root
  bool blocked;         // buffers of per-rank blocks: the Block view exists
  bool needs_scratch;   // allocates the Scratch buffer
  double (*bus_factor)(int n);
  CollectiveCounts (*counts)(int64_t requested_bytes, int element_size, int n);
  BufferRoles (*roles)(const CallContext& context);
  Source (*expected)(int64_t checked_index, const CallContext& context);
  void (*run)(const RunArgs& args);
};

const CollectiveSpec& collective_spec(Collective c);
const std::vector<Collective>& all_collectives();  // in nccl-tests' usual order

// Defined one per file.
const CollectiveSpec& all_reduce_spec();
const CollectiveSpec& all_gather_spec();
const CollectiveSpec& reduce_scatter_spec();
const CollectiveSpec& broadcast_spec();
const CollectiveSpec& reduce_spec();
const CollectiveSpec& alltoall_spec();
const CollectiveSpec& sendrecv_spec();

// Shorthands for the description's fields, checked where they need checking.
std::string collective_name(Collective c);             // nccl-tests' names
Collective parse_collective(const std::string& name);  // throws tripod::Error listing the names
bool is_reduction(Collective c);  // takes a reduction op (all_reduce, reduce_scatter, reduce)
bool has_root(Collective c);      // broadcast, reduce
CollectiveCounts collective_counts(Collective c, int64_t requested_bytes, int element_size, int n);
double bus_factor(Collective c, int n);
Bandwidth collective_bandwidth(Collective c, int64_t bytes, double seconds, int n);

}  // namespace tripod::commbench
