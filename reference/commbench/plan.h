// The flags of `tripod bench comm` (nccl-tests' own, plus the 3D-layout groups) and the plan they
// make: which collectives, sizes, types, ops and roots to run. Everything here is checked before
// MPI starts, from the arguments alone, so a bad flag fails identically on every rank. The flags
// themselves are registered by the CLI (cli/bench_comm_command.cpp); this library never sees CLI11.
//
// nccl-tests flags (README "Arguments"): -b minbytes, -e maxbytes (K/M/G suffixes, binary),
// -i stepbytes or -f stepfactor (a factor > 1 wins), -n iters, -w warmup iters, -c check count
// (0 = no check), -o sum|prod|min|max|avg|all, -d float|double|int32|bfloat16|all, -r root|all,
// -a 0|1|2|3 = time of rank 0 | mean | min | max over all ranks, -J json file.
#pragma once
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "comm/world.h"
#include "commbench/collective_spec.h"
#include "commbench/report.h"
#include "parallel/process_grid.h"

namespace tripod::commbench {

struct CommBenchOptions {
  std::string collective = "all_reduce";
  std::string min_bytes = "32M", max_bytes = "32M", step_bytes = "1M";  // nccl-tests' defaults
  int64_t step_factor = 1;
  int iters = 20, warmup_iters = 1, check_iters = 1, average = 1;
  std::string op = "sum", datatype = "float", root = "0";
  int tp = 0, pp = 0, dp = 0;  // 0: not given; any given builds a grid (the others default to 1)
  std::string group = "tp";
  std::string json_out;
  bool async = false;
  bool inject_error = false;  // debug: corrupt one received element per check on one rank
  std::string backend = "cpu";  // where the buffers live
  CommSettings comm;             // which communicator moves them (--comm: a device's staged, or NCCL)
};

// "8" -> 8, "64K" -> 65536, "128M", "1G", "1.5k" -> 1536 (nccl-tests' parsesize); errors name `flag`.
int64_t parse_byte_size(const std::string& flag, const std::string& text);

// nccl-tests' type names: "float", "double", "int32", "bfloat16".
std::string nccl_type_name(DType dtype);
DType parse_nccl_type(const std::string& name);  // throws for other names ("prod"-like requests)

struct CommBenchPlan {
  Collective collective = Collective::AllReduce;
  CommBenchSettings settings;
  std::vector<int64_t> sizes;  // requested sizes, -b to -e
  std::vector<DType> types;
  std::vector<ReduceOp> ops;  // reductions only
  bool all_roots = false;
  int root = 0;
  int average = 1;
  bool async = false;
  bool inject_error = false;
  bool use_grid = false;
  GridShape grid;
  std::string group_axis = "tp";
  std::vector<std::string> notes;  // extra header lines

  // The ops to run for `dtype` ({Sum} for collectives that take none: printed as "none"); avg is
  // skipped for int32 under -o all.
  std::vector<ReduceOp> ops_for(DType dtype) const;
  // Roots to run on a group of `group_size` ({-1} for collectives without a root).
  std::vector<int> roots_for(int group_size) const;
};

// One plan per collective ("all" gives seven; "a,b" two, in that order). Throws tripod::Error for a
// bad flag.
std::vector<CommBenchPlan> make_plans(const CommBenchOptions& options);
// Checks what needs the group size (the root); throws the same error on every rank.
void check_plan_for_group(const CommBenchPlan& plan, int group_size);

nlohmann::json settings_json(const CommBenchOptions& options);

}  // namespace tripod::commbench
