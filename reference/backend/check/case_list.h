// The cases of backend_check, collected by concern (memory_cases.cpp, layer_cases.cpp).
#pragma once
#include <functional>
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

void add_memory_cases(CaseList& cases, const std::vector<DType>& dtypes);
void add_layer_cases(CaseList& cases, const std::vector<DType>& dtypes);

}  // namespace tripod::backend_check
