// tripod check-backend: every Backend operation on one backend against another (the CPU backend by
// default) on the same random inputs, in fp64, fp32 and bf16 (backend_check.h's groups) -
// the first command to run on a new device:
//   tripod check-backend --backend cuda --json kernels.json
// Prints a row per operation (largest error relative to the output's largest element, its bound,
// whether the two backends agree bit for bit) and exits 1 if any operation fails.
#include <algorithm>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "backend/backend_factory.h"
#include "backend/check/backend_check.h"
#include "cli/commands.h"
#include "core/error.h"
#include "core/output_file.h"

namespace tripod::cli {
namespace {

struct CheckOptions {
  std::string backend = "emulated", against = "cpu", json_out;
  std::vector<std::string> dtypes = {"fp64", "fp32", "bf16"};
  std::vector<std::string> only;  // name substrings: a case runs when its name holds any of them
};

bool selected(const std::string& op, const std::vector<std::string>& only) {
  if (only.empty()) return true;
  for (const std::string& part : only)
    if (op.find(part) != std::string::npos) return true;
  return false;
}

nlohmann::json result_json(const backend_check::OpResult& r) {
  return {{"op", r.op},           {"dtype", dtype_name(r.dtype)}, {"shape", r.shape},
          {"max_abs", r.max_abs}, {"max_rel", r.max_rel},        {"bound", r.bound},
          {"error_over_bound", r.error_over_bound},               {"worst_output", r.worst_output},
          {"bit_identical", r.bit_identical},                     {"pass", r.pass},
          {"error", r.error}};
}

void run_check(const CheckOptions& o) {
  std::vector<DType> dtypes;
  for (const std::string& d : o.dtypes) {
    check(d == "fp64" || d == "fp32" || d == "bf16", "--dtype: fp64, fp32 or bf16, not '", d, "'");
    const DType t = parse_dtype(d);
    check(std::find(dtypes.begin(), dtypes.end(), t) == dtypes.end(), "--dtype lists ", d, " twice");
    dtypes.push_back(t);
  }
  std::vector<backend_check::OpCase> cases;
  for (auto& c : backend_check::all_op_cases(dtypes))
    if (selected(c.op, o.only)) cases.push_back(std::move(c));
  std::string only_text;
  for (const std::string& part : o.only) {
    if (!only_text.empty()) only_text += ", ";
    only_text += "'";
    only_text += part;
    only_text += "'";
  }
  std::string dtype_text;
  for (const DType t : dtypes) dtype_text += (dtype_text.empty() ? "" : ", ") + dtype_name(t);
  // adamw exists in the fp32 and fp64 groups, not bf16's: "matches no operation" sent users looking.
  TRIPOD_CHECK(!cases.empty(), "--only ", only_text, " matches no operation of the --dtype group(s) ", dtype_text);
  const auto tested = make_backend(o.backend);
  const auto reference = make_backend(o.against);
  std::printf("tripod check-backend: %s against %s, %zu cases\n", tested->name().c_str(), reference->name().c_str(),
              cases.size());
  std::printf("%-40s %-5s %-34s %10s %8s  %-9s %s\n", "operation", "dtype", "shape", "max rel", "bound", "identical",
              "result");
  const auto results = backend_check::check_backend(*tested, *reference, cases, [](const auto& r) {
    std::printf("%-40s %-5s %-34s %10.2e %8.0e  %-9s %s%s%s%s\n", r.op.c_str(), dtype_name(r.dtype).c_str(),
                r.shape.c_str(), r.max_rel, r.bound, r.bit_identical ? "yes" : "no", r.pass ? "PASS" : "FAIL",
                r.pass || r.worst_output.empty() ? "" : (" (" + r.worst_output + ")").c_str(),
                r.error.empty() ? "" : ": ", r.error.c_str());
    std::fflush(stdout);
  });
  int failed = 0, identical = 0;
  for (const auto& r : results) {
    failed += !r.pass;
    identical += r.bit_identical;
  }
  std::printf("%zu cases: %zu passed, %d failed, %d bit-identical to %s\n", results.size(), results.size() - failed,
              failed, identical, o.against.c_str());
  if (!o.json_out.empty()) {
    // As every JSON output names backends: the option's value, and the backend's own description.
    nlohmann::json j = {{"backend", o.backend},   {"backend_name", tested->name()}, {"reference", o.against},
                        {"reference_name", reference->name()}, {"results", nlohmann::json::array()}};
    for (const auto& r : results) j["results"].push_back(result_json(r));
    write_output_file(o.json_out, j.dump(1) + "\n", "the results file (--json)");
  }
  check(failed == 0, failed, " operation(s) of the ", o.backend, " backend disagree with the ", o.against, " backend");
}

}  // namespace

void add_check_backend_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("check-backend", "every backend operation against the CPU backend on random inputs");
  auto o = std::make_shared<CheckOptions>();
  add_backend_option(*cmd, o->backend);
  cmd->add_option("--against", o->against, "the reference backend")->capture_default_str();
  cmd->add_option("--dtype", o->dtypes,
                  "case groups: fp64, fp32, bf16 (bf16 tensors around fp32 arithmetic: bf16 GEMMs, GEMM operands, "
                  "conversions)")
      ->capture_default_str();
  cmd->add_option("--only", o->only, "only the operations whose name contains one of these (several may follow)");
  add_output_option(*cmd, "--json", o->json_out, "write one record per case here");
  cmd->callback([o]() { run_check(*o); });
}

}  // namespace tripod::cli
