// A checked call made again on another communicator of the same group, through its public
// operations (so that one validates and watches it as any caller's): the staged communicator sends
// its host copies this way, the NCCL communicator its host tensors and barriers. `blocking` picks
// the blocking forms (Open MPI serves those with other, tuned algorithms); the request is then
// already complete.
#pragma once
#include <memory>

#include "comm/communicator.h"

namespace tripod {

std::unique_ptr<CommRequest> reissue(Communicator& on, const CommCall& call, bool blocking);

}  // namespace tripod
