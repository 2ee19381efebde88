// Whether an applied update left the training state infinite or NaN while its loss and gradient
// norm were finite: in fp32 at optim.lr=1e39 every weight overflows, and the anomaly guard, which
// judges losses and norms, sees nothing until the next step. A save refuses such a state
// (ckpt/finite_values.h); under anomaly.policy=rollback the training loop asks this first, before
// a save, and rolls the step back instead of stopping at the refused save.
#pragma once
#include <string>
#include <vector>

#include "backend/backend.h"
#include "comm/communicator.h"
#include "core/state_region.h"

namespace tripod {

// Collective over `world` (null: one process). Counts the infinite and NaN values in the saved
// runs of each rank's `regions` (the elements a checkpoint writes: padding and replicas are not
// counted) and describes them for this rank: "65536 infinite or NaN values in the parameters and
// AdamW moments (held by ranks 0, 1; rank 0's in wte.weight (param), ...)", without the ranks in
// one process. Empty when every rank's are finite.
std::string describe_nonfinite_state(Backend& backend, const std::vector<StateRegion>& regions, Communicator* world);

// TRIPOD_FAULT=inf-update (train/fault_injection.h): sets the first element of this rank's first
// saved parameter region to +inf, as an overflowing update leaves it. False when the rank saves no
// parameter (each one it holds is a replica another rank writes): the fault would change nothing checked.
bool overflow_first_saved_parameter(Backend& backend, const std::vector<StateRegion>& regions);

}  // namespace tripod
