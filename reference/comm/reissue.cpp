#include "comm/reissue.h"

#include "core/error.h"

namespace tripod {

std::unique_ptr<CommRequest> reissue(Communicator& h, const CommCall& c, bool blocking) {
  if (blocking) {
    switch (c.op) {
      case CommOp::AllReduce: h.all_reduce(c.in, c.out, c.reduce); break;
      case CommOp::ReduceScatter: h.reduce_scatter(c.in, c.out, c.reduce); break;
      case CommOp::AllGather: h.all_gather(c.in, c.out); break;
      case CommOp::Broadcast: h.broadcast(c.in, c.peer); break;
      case CommOp::Reduce: h.reduce(c.in, c.out, c.reduce, c.peer); break;
      case CommOp::AllToAll: h.all_to_all(c.in, c.out); break;
      case CommOp::Send: h.send(c.in, c.peer, c.tag); break;
      case CommOp::Recv: h.recv(c.out, c.peer, c.tag); break;
      case CommOp::Barrier: h.barrier(); break;
    }
    return std::make_unique<CompletedRequest>();
  }
  switch (c.op) {
    case CommOp::AllReduce: return h.all_reduce_async(c.in, c.out, c.reduce);
    case CommOp::ReduceScatter: return h.reduce_scatter_async(c.in, c.out, c.reduce);
    case CommOp::AllGather: return h.all_gather_async(c.in, c.out);
    case CommOp::Broadcast: return h.broadcast_async(c.in, c.peer);
    case CommOp::Reduce: return h.reduce_async(c.in, c.out, c.reduce, c.peer);
    case CommOp::AllToAll: return h.all_to_all_async(c.in, c.out);
    case CommOp::Send: return h.send_async(c.in, c.peer, c.tag);
    case CommOp::Recv: return h.recv_async(c.out, c.peer, c.tag);
    case CommOp::Barrier: return h.barrier_async();
  }
  fail("staged communicator: unknown operation");
}

}  // namespace tripod
