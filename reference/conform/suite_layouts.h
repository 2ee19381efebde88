// What a conform run checks, decided before any rank talks to another: the conformance model (the
// user's config file and overrides on top, in the asked precision) and the list of layouts with
// their heads. `tripod conform --list-layouts N` prints the list for N ranks without MPI.
#pragma once
#include <vector>

#include "conform/suite.h"
#include "parallel/parallel_layout.h"
#include "train/run_config.h"

namespace tripod::conform {

// The conformance model with the tied LM head or an untied one.
RunConfig suite_config(const SuiteOptions& o, bool tied);

// --layouts as named (each validated, none twice), or every layout `world` ranks allow for this
// model and step (enumerate_layouts), with -gfp32 twins under bf16-mixed (conform/bit_twins.h).
std::vector<ParallelLayout> suite_layouts(const SuiteOptions& o, const RunConfig& config, int world);

// One line per layout: its name, ranks and head (conform/lm_heads.h), then a count by head.
void print_suite_layouts(const SuiteOptions& o, int world);

}  // namespace tripod::conform
