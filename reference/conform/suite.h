// `tripod conform`: every parallel layout the launched ranks allow (or those named) for K steps
// against the single-device reference in the same precision; per layout the largest errors of
// losses, gradient norms and final parameters, pass/fail, time per step and memory (allocator
// peak against the accounting), as a table on stdout, JSON and JUnit XML. Operator checks
// (conform/op_checks.h) run first. Layouts smaller than the world run as independent replicas on
// consecutive blocks of ranks; the heads alternate (conform/lm_heads.h, --heads) so that every ZeRO
// stage with every combination of TP, PP, DP, schedule and SP meets both.
//
// A failure is a FAIL row, never an abort: an error inside a layout (a non-finite loss, say) is
// caught on every rank and agreed; a rank that fails alone leaves the others waiting, and the
// per-layout timeout then writes a timeout row into the reports and ends the job non-zero.
// Throws (exit 1) if any row fails.
#pragma once
#include <string>
#include <vector>

#include "comm/world.h"

namespace tripod::conform {

struct SuiteOptions {
  std::string dtype = "fp64", config, json_out, junit_out, backend = "cpu";
  CommSettings comm;  // --comm, --comm-timeout
  std::string heads = "alternate";  // alternate, tied or untied
  std::vector<std::string> layouts, overrides, faults;
  int steps = 5;
  double timeout_seconds = 300;  // per layout
  bool list_faults = false;
  int list_layouts_world = 0;  // --list-layouts N: print the layouts N ranks would run, and exit
  // --reshard: after the layouts, each one's state goes through a checkpoint (conform/reshard.h)
  // into the next layout of the list (the last into the first), under checkpoint_dir (default: a
  // fresh folder in the system's temporary directory; it must be shared across nodes).
  bool reshard = false;
  std::string checkpoint_dir;
};

void run_suite(const SuiteOptions& options);

}  // namespace tripod::conform
