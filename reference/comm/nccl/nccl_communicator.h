// NCCL backend of the Communicator: the CUDA backend's tensors moved by NCCL on the GPU, one
// process per GPU (NCCL refuses two ranks on one device: comm/world.h's `staged` serves that case).
//
// How it is put together:
//   - the world: rank 0 makes the ncclUniqueId and broadcasts it over the MPI world; sub-groups
//     come from ncclCommSplit (same color/key rules as MPI_Comm_split, ties by rank). Every NCCL
//     group keeps the matching MPI group, which moves host tensors (reports, flags) and barriers.
//   - streams: each group issues its operations on its own stream. An operation first makes that
//     stream wait for an event recorded on the backend's compute stream (so it reads what the
//     compute before it wrote); wait() makes the compute stream wait for the operation's end event
//     (so compute after it reads the result), then runs the finishing steps (Avg's scaling, the
//     rounding of a bf16 result) on the compute stream.
//   - bf16 reductions run in fp32 (contributions widened exactly, the result rounded once), as
//     every Tripod communicator promises; NCCL's own bf16 reductions round at every step.
//   - point-to-point: NCCL has no tags, runs the operations of one communicator in issue order,
//     and a send may wait for its receive (no eager buffering can be assumed). So each member of a
//     group gets its own communicator for what it sends (made by ncclCommSplit at the group's
//     first send or receive, collectively): a rank's sends run in issue order on its own stream,
//     its receives from rank q in order on q's stream, and a send whose receive comes late never
//     holds up a receive. Messages then match by order, not by tag: per ordered pair of ranks,
//     receives must be posted in the order the peer sends. suites/unit/test_pipeline_message_order.cpp
//     checks every pipeline schedule under exactly these rules (order equals tags, no deadlock),
//     and shows that one queue per rank would deadlock the interleaved schedules. A message that
//     met the wrong receive would hang or be misread; a hang ends in the timeout error below.
//   - no silent hang: wait() polls the end event together with ncclCommGetAsyncError and the
//     communication timeout (comm/comm_watchdog.h); an asynchronous error or the timeout aborts the
//     communicator (ncclCommAbort) and throws an Error naming the operation, group and rank. Calls
//     that can block on the host (initialisation, a first connection) run under the watchdog.
#pragma once
#include <memory>
#include <string>

#include "backend/backend.h"
#include "comm/communicator.h"

namespace tripod {

// Collective over `mpi_world`'s processes. `backend` must be the CUDA backend and outlive the
// communicator and its splits.
std::unique_ptr<Communicator> nccl_world(std::unique_ptr<Communicator> mpi_world, Backend& backend);

// The NCCL library this program loaded ("2.28.3"; it may differ from the headers built against,
// which are named too when they do). Touches no device.
std::string nccl_version_text();

}  // namespace tripod
