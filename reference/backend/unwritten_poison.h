// Device memory a backend hands out for overwrite (Backend::alloc_for_overwrite: no zero fill) on
// the emulated device and on CUDA filled with 0xFF bytes, when TRIPOD_POISON_UNWRITTEN=1 (the CPU
// backend's host memory never: it stays the clean reference that check-backend and conform's
// fingerprints compare with). Every such fp32, fp64 and bf16 element is
// then a NaN, so an operation that reads what nobody wrote (a GEMM operand's padding, a gather's
// buffer past the pieces received) turns a result into NaN, or a fingerprint into another, where
// it would otherwise read whatever the allocator last held (zeros, often, which hides it). A
// host-side counterpart of compute-sanitizer's initcheck that runs in CI on the CPU and the
// emulated device, and on a GPU beside it. Off by default: the fill is a pass over the memory.
#pragma once
#include <functional>
#include <string>

namespace tripod {

inline constexpr unsigned char kUnwrittenPoisonByte = 0xFF;

// TRIPOD_POISON_UNWRITTEN: "" (unset) or "0" -> off, "1" -> on; anything else throws, naming the
// variable. `env` returns a variable's value, "" when unset.
bool choose_unwritten_poison(const std::function<std::string(const char*)>& env);
bool choose_unwritten_poison();  // from the process's environment

}  // namespace tripod
