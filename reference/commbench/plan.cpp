#include "commbench/plan.h"

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <limits>

#include "core/error.h"

namespace tripod::commbench {

std::string nccl_type_name(DType dtype) {
  switch (dtype) {
    case DType::F32: return "float";
    case DType::F64: return "double";
    case DType::I32: return "int32";
    case DType::BF16: return "bfloat16";
  }
  return dtype_name(dtype);
}

DType parse_nccl_type(const std::string& name) {
  if (name == "float" || name == "float32" || name == "fp32") return DType::F32;
  if (name == "double" || name == "float64" || name == "fp64") return DType::F64;
  if (name == "int32" || name == "int") return DType::I32;
  if (name == "bfloat16" || name == "bf16") return DType::BF16;
  fail("unsupported datatype '", name, "' (expected float, double, int32, bfloat16 or all)");
}

int64_t parse_byte_size(const std::string& flag, const std::string& text) {
  char* end = nullptr;
  const double number = std::strtod(text.c_str(), &end);
  check(end != text.c_str() && number >= 0, flag, ": bad size '", text, "' (expected e.g. 8, 64K, 128M, 1G)");
  double unit = 1;
  const std::string suffix(end);
  if (suffix == "K" || suffix == "k") unit = 1024.0;
  else if (suffix == "M" || suffix == "m") unit = 1024.0 * 1024;
  else if (suffix == "G" || suffix == "g") unit = 1024.0 * 1024 * 1024;
  else check(suffix.empty(), flag, ": bad size '", text, "' (the suffix must be K, M or G)");
  // Checked before the conversion, which is undefined past int64 (99999999999G came out negative).
  check(number * unit <= 0x1p62, flag, ": size '", text, "' is more than 2^62 bytes");
  return static_cast<int64_t>(number * unit);
}

namespace {

std::vector<ReduceOp> parse_ops(const std::string& name) {
  if (name == "all") return {ReduceOp::Sum, ReduceOp::Max, ReduceOp::Min, ReduceOp::Avg};  // nccl-tests' order
  check(name != "prod", "-o prod is not supported: the Communicator reduces with sum, avg, max and min only");
  for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Avg, ReduceOp::Max, ReduceOp::Min})
    if (reduce_op_name(op) == name) return {op};
  fail("unknown reduction op '", name, "' (expected sum, min, max, avg or all)");
}

std::vector<DType> parse_types(const std::string& name) {
  if (name == "all") return {DType::I32, DType::F32, DType::F64, DType::BF16};  // nccl-tests' order
  return {parse_nccl_type(name)};
}

std::vector<int64_t> size_steps(const CommBenchSettings& s) {
  check(s.min_bytes <= s.max_bytes, "-b ", s.min_bytes, " is larger than -e ", s.max_bytes);
  check(s.step_factor > 1 || s.step_bytes > 0, "-i must be positive (or give -f > 1)");
  check(s.step_factor >= 1, "-f must be >= 1 (got ", s.step_factor, "; 1: sizes step by -i)");
  check(s.step_factor <= 1 || s.min_bytes > 0, "-b must be positive with -f (0 times a factor stays 0)");
  // Each next size is checked against -e before it is made: size * factor (or + step) overflowed
  // int64 near 2^62, wrapped to 0 and appended sizes until memory ran out.
  constexpr std::size_t kMaxSizes = 100000;
  std::vector<int64_t> sizes;
  for (int64_t size = s.min_bytes;;) {
    sizes.push_back(size);
    check(sizes.size() <= kMaxSizes, "-b ", s.min_bytes, " to -e ", s.max_bytes, " by -i ", s.step_bytes,
          " is more than ", kMaxSizes, " sizes (give a larger -i, or -f)");
    if (s.step_factor > 1 ? size > s.max_bytes / s.step_factor : size > s.max_bytes - s.step_bytes) break;
    size = s.step_factor > 1 ? size * s.step_factor : size + s.step_bytes;
  }
  return sizes;
}

int parse_root(const std::string& text) {
  char* end = nullptr;
  errno = 0;
  const long root = std::strtol(text.c_str(), &end, 10);
  check(!text.empty() && *end == '\0' && root >= 0, "-r: bad root '", text, "' (expected a rank or all)");
  // Past int it wrapped: -r 4294967296 ran as root 0, 2147483648 printed root -2147483648.
  check(errno != ERANGE && root <= std::numeric_limits<int>::max(), "-r: root ", text, " is not a rank of any group");
  return static_cast<int>(root);
}

// Our own "# ..." lines of the header: what is measured and how the time is combined over ranks.
std::vector<std::string> header_notes(const CommBenchOptions& o) {
  std::vector<std::string> notes;
  // Buffers of a device backend are staged through host memory to MPI (comm/staged_communicator.h).
  const std::string buffers = o.backend == "cpu" ? "host buffers" : o.backend + " buffers staged through the host";
  notes.push_back(str_cat("tripod bench comm: MPI backend, ", buffers, ", ",
                          o.async ? "_async forms + wait()" : "blocking collectives",
                          "; time per iteration = ", o.average == 0 ? "rank 0's"
                                                     : o.average == 1 ? "mean over ranks"
                                                     : o.average == 2 ? "min over ranks"
                                                                      : "max over ranks",
                          " (-a ", o.average, ")"));
  if (o.inject_error) notes.push_back("DEBUG --inject-error: one received element is corrupted per check");
  return notes;
}

// `base` for the named collective, for each of them ("all"), or for each of a comma-separated list
// in its order ("all_reduce,alltoall": one launch, one start-up of the communicator, for several).
std::vector<CommBenchPlan> plans_for(const std::string& names, const CommBenchPlan& base) {
  std::vector<CommBenchPlan> plans;
  if (names == "all") {
    for (Collective c : all_collectives()) plans.push_back(base), plans.back().collective = c;
    return plans;
  }
  std::string known;
  for (Collective c : all_collectives()) known += collective_name(c) + ", ";
  std::size_t begin = 0;
  while (true) {
    const std::size_t comma = names.find(',', begin);
    const std::string name = names.substr(begin, comma == std::string::npos ? std::string::npos : comma - begin);
    check(std::find_if(all_collectives().begin(), all_collectives().end(),
                       [&](Collective c) { return collective_name(c) == name; }) != all_collectives().end(),
          "unknown collective '", name, "' (expected ", known, "all, or a comma-separated list)");
    plans.push_back(base);
    plans.back().collective = parse_collective(name);
    if (comma == std::string::npos) break;
    begin = comma + 1;
  }
  return plans;
}

}  // namespace

std::vector<ReduceOp> CommBenchPlan::ops_for(DType dtype) const {
  if (!is_reduction(collective)) return {ReduceOp::Sum};
  std::vector<ReduceOp> out;
  for (ReduceOp op : ops)
    if (!(op == ReduceOp::Avg && dtype == DType::I32)) out.push_back(op);
  return out;
}

std::vector<int> CommBenchPlan::roots_for(int group_size) const {
  if (!has_root(collective)) return {-1};
  if (!all_roots) return {root};
  std::vector<int> roots;
  for (int r = 0; r < group_size; ++r) roots.push_back(r);
  return roots;
}

std::vector<CommBenchPlan> make_plans(const CommBenchOptions& o) {
  CommBenchPlan base;
  CommBenchSettings& s = base.settings;
  s.min_bytes = parse_byte_size("-b", o.min_bytes);
  s.max_bytes = parse_byte_size("-e", o.max_bytes);
  s.step_bytes = parse_byte_size("-i", o.step_bytes);
  s.step_factor = o.step_factor;
  s.warmup_iters = o.warmup_iters;
  s.iters = o.iters;
  s.check_iters = o.check_iters;
  check(o.iters >= 1, "-n must be at least 1");
  check(o.warmup_iters >= 0 && o.check_iters >= 0, "-w and -c must not be negative");
  check(o.average >= 0 && o.average <= 3, "-a must be 0 (rank 0), 1 (mean), 2 (min) or 3 (max)");
  base.sizes = size_steps(s);
  base.types = parse_types(o.datatype);
  base.ops = parse_ops(o.op);
  check(!(base.ops == std::vector<ReduceOp>{ReduceOp::Avg} && base.types == std::vector<DType>{DType::I32}),
        "-o avg needs a floating datatype (float, double or bfloat16), not int32");
  base.all_roots = o.root == "all";
  if (!base.all_roots) base.root = parse_root(o.root);
  base.average = o.average;
  base.async = o.async;
  base.inject_error = o.inject_error;
  // A negative size was taken as "not given" (--tp -2 measured the whole world).
  check(o.tp >= 0 && o.pp >= 0 && o.dp >= 0, "--tp, --pp and --dp must be positive (got ", o.tp, ", ", o.pp, ", ",
        o.dp, "; 0: not given)");
  base.use_grid = o.tp > 0 || o.pp > 0 || o.dp > 0;
  base.grid = GridShape{std::max(o.tp, 1), std::max(o.pp, 1), std::max(o.dp, 1)};
  check(o.group == "tp" || o.group == "dp" || o.group == "pp", "--group must be tp, dp or pp, not '", o.group, "'");
  check(base.use_grid || o.group == "tp", "--group needs a layout (--tp, --pp and/or --dp)");
  base.group_axis = o.group;
  base.notes = header_notes(o);
  return plans_for(o.collective, base);
}

void check_plan_for_group(const CommBenchPlan& plan, int group_size) {
  if (!has_root(plan.collective) || plan.all_roots) return;
  check(plan.root < group_size, "-r ", plan.root, " is not a rank of a group of ", group_size);
}

nlohmann::json settings_json(const CommBenchOptions& o) {
  return {{"collective", o.collective}, {"minbytes", parse_byte_size("-b", o.min_bytes)},
          {"maxbytes", parse_byte_size("-e", o.max_bytes)}, {"stepbytes", parse_byte_size("-i", o.step_bytes)},
          {"stepfactor", o.step_factor}, {"iters", o.iters}, {"warmup_iters", o.warmup_iters},
          {"check", o.check_iters}, {"op", o.op}, {"datatype", o.datatype}, {"root", o.root},
          {"average", o.average}, {"tp", o.tp}, {"pp", o.pp}, {"dp", o.dp}, {"group", o.group},
          {"async", o.async}, {"inject_error", o.inject_error}, {"backend", o.backend}};
}

}  // namespace tripod::commbench
