// The end of a conformance row on every rank: whether it passed everywhere, and why not.
#pragma once
#include <string>

#include "comm/communicator.h"
#include "conform/report.h"

namespace tripod::conform {

// Collective over `world`: `o` becomes the row as every rank sees it - failed if it failed
// anywhere, with the first failing rank's reason ("rank 3: ..." when not this rank's own), and the
// largest time per step and memory figures over the ranks.
void agree(Communicator& world, Outcome& o, const std::string& my_failure);

}  // namespace tripod::conform
