// TRIPOD_CUDA_ATTENTION=flash (or the value given: flash-mma) while an instance lives (a backend
// reads it when it is made), the variable's old value (or its absence) restored after: for the
// tests of the flash attention.
#pragma once
#include <cstdlib>
#include <optional>
#include <string>

namespace tripod::testing {

class FlashAttentionAsked {
 public:
  explicit FlashAttentionAsked(const char* value = "flash") {
    if (const char* v = std::getenv(kName)) old_ = v;
    setenv(kName, value, 1);
  }
  ~FlashAttentionAsked() {
    if (old_) setenv(kName, old_->c_str(), 1);
    else unsetenv(kName);
  }
  FlashAttentionAsked(const FlashAttentionAsked&) = delete;
  FlashAttentionAsked& operator=(const FlashAttentionAsked&) = delete;

 private:
  static constexpr const char* kName = "TRIPOD_CUDA_ATTENTION";
  std::optional<std::string> old_;
};

}  // namespace tripod::testing
