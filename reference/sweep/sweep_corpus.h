// The corpus of a sweep: a prepared directory, or the synthetic Markov corpus that the driver
// generates into OUT/corpus (and reuses on a rerun only if it was made with the same settings).
#pragma once
#include <filesystem>

#include "sweep/sweep_grid.h"
#include "sweep/sweep_spec.h"

namespace tripod::sweep {

// What the grid needs, without generating anything (for --dry-run).
CorpusInfo describe_corpus(const SweepSpec& spec, const std::filesystem::path& out_dir);

// Generates the synthetic corpus when it is absent; checks an existing one matches the spec. Reads
// the training split once for its tokens' XXH64 (run_sweep holds it against the sweep's record).
CorpusInfo prepare_corpus(const SweepSpec& spec, const std::filesystem::path& out_dir);

}  // namespace tripod::sweep
