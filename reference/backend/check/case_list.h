// The cases of backend_check, collected by concern (memory_cases.cpp, producer_cases.cpp,
// layer_cases.cpp).
#pragma once
#include <functional>
#include <initializer_list>
#include <string>
#include <vector>

#include "backend/check/backend_check.h"

namespace tripod::backend_check {

class CaseList {
 public:
  void add(const std::string& op, DType dtype, const std::string& shape,
           std::function<std::vector<Output>(Backend&)> run) {
    cases_.push_back({op, dtype, shape, std::move(run)});
  }
  std::vector<OpCase> take() { return std::move(cases_); }

 private:
  std::vector<OpCase> cases_;
};

// Runs `run` with fp32 GEMMs under the bf16-mixed policy (Fp32Matmul::Bf16Operands), the
// backend's own policy restored afterwards, when `run` throws too.
inline void with_bf16_operands(Backend& be, const std::function<void()>& run) {
  const Fp32Matmul before = be.fp32_matmul();
  be.set_fp32_matmul(Fp32Matmul::Bf16Operands);
  try {
    run();
  } catch (...) {
    be.set_fp32_matmul(before);
    throw;
  }
  be.set_fp32_matmul(before);
}

// A case's shape as "64x3072".
inline std::string dims(std::initializer_list<int64_t> d) {
  std::string s;
  for (int64_t x : d) {
    if (!s.empty()) s += 'x';
    s += std::to_string(x);
  }
  return s;
}

void add_memory_cases(CaseList& cases, const std::vector<DType>& dtypes);
void add_layer_cases(CaseList& cases, const std::vector<DType>& dtypes);
// The bf16 group's operand producers (gelu, layernorm, loss gradient) and bf16 pre-activation cases.
void add_operand_producer_cases(CaseList& cases);

}  // namespace tripod::backend_check
