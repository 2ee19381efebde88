// After a pipelined run: the last step's schedule timing from every pipeline rank - measured bubble
// next to the theory, micro-batches in flight and activation memory per rank - printed by the
// reporting rank and, if asked, written as a JSON timeline (parallel/pipeline_executor.h's format
// plus "in_flight" and "activation_bytes" per rank). Collective over the trainer's pipeline group.
#pragma once
#include <string>

#include "train/distributed_trainer.h"

namespace tripod {

void report_pipeline(DistributedTrainer& trainer, bool print, const std::string& trace_path);

}  // namespace tripod
