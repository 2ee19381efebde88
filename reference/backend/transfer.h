// Moving values between the host and a backend's device, for the few places that need them on the
// host: initial values, checkpoints, comparisons, and the scalars a training step reads back.
#pragma once
#include <vector>

#include "backend/backend.h"

namespace tripod {

// Host copies in fp64 (fp32, bf16 and int32 widen exactly); writing rounds to the tensor's dtype
// (fp32 and bf16: to nearest even).
std::vector<double> to_host_f64(Backend& backend, const Tensor& t);
void from_host_f64(Backend& backend, const std::vector<double>& values, const Tensor& t);

// A one-element fp64 tensor on the backend's device, zeroed: where device scalars accumulate.
Tensor alloc_scalar(Backend& backend);
// The value of a one-element fp64 device tensor (waits for the work that writes it).
double read_scalar(Backend& backend, const Tensor& scalar);

// Normal(0, 1) values (never constants: some libraries and chips run faster on zeros): a block of
// up to 2^20 drawn on the host and uploaded, then copied on the device over the rest.
void fill_random(Backend& backend, const Tensor& t, uint64_t seed);

}  // namespace tripod
