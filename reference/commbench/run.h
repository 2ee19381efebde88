// tripod bench comm [COLLECTIVE] (under mpirun): nccl-tests for the Communicator. Same flags, same
// table, same bus-bandwidth arithmetic (bus_bandwidth.h), every result checked, and optionally the
// groups of a 3D layout (--tp/--pp/--dp with --group) all running at once, which is how training
// loads the network. The run loop is here; the collectives are described one per file
// (collective_spec.h), driven by the harness in collective_bench.*, and printed by report.*.
#pragma once
#include "commbench/plan.h"

namespace tripod::commbench {

// Checks the options before MPI starts (every rank fails alike), then starts MPI, runs every plan
// and prints nccl-tests' text on world rank 0 (and writes -J's JSON there). A failure is reported
// on stderr where it happens and then thrown as a tripod::Error with an empty message; wrong
// results make every rank throw after rank 0 has said so.
void run_bench_comm(const CommBenchOptions& options);

}  // namespace tripod::commbench
