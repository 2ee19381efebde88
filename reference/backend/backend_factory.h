// The one place that makes a backend from its name (`--backend` on train, conform and bench).
// Nothing else constructs a backend by name: commands and tests ask here.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "backend/backend.h"

namespace tripod {

// The backends built into this binary, in the order they are listed: "cpu", "emulated" (and
// "cuda" where it is built).
std::vector<std::string> backend_names();
// "cpu, emulated"
std::string backend_names_text();
// Throws naming the backends that are built when `name` is not one of them.
std::unique_ptr<Backend> make_backend(const std::string& name);
// Where the tensors of backend `name` live, without making it (a launcher checks its steps'
// options before any of them starts a CUDA context); throws as make_backend for an unknown name.
Device backend_device(const std::string& name);

// The libraries under each backend, one line each, for `tripod --version`: "cpu, emulated:
// OpenBLAS 0.3.29 ...", and where built "cuda: CUDA runtime 13.0, driver 12.8" (no device is
// touched; "no driver" where none is installed).
std::vector<std::string> backend_library_versions();
std::string cpu_blas_version();   // backend/cpu/blas_version.cpp
std::string cuda_versions_text();  // backend/cuda/cuda_backend.cpp, where built

// The constructors behind the names (backend/cpu/cpu_backend.cpp).
std::unique_ptr<Backend> make_cpu_backend();
std::unique_ptr<Backend> make_emulated_backend();
// backend/cuda/cuda_backend.cpp, where the CUDA backend is built: the device this process's local
// rank maps to (backend/cuda/host/device_choice.h); throws when no CUDA device is usable.
std::unique_ptr<Backend> make_cuda_backend();

}  // namespace tripod
