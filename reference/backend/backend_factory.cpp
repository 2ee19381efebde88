#include "backend/backend_factory.h"

namespace tripod {

std::vector<std::string> backend_names() {
#ifdef TRIPOD_HAVE_CUDA_BACKEND
  return {"cpu", "emulated", "cuda"};
#else
  return {"cpu", "emulated"};
#endif
}

std::string backend_names_text() {
  std::string text;
  for (const std::string& name : backend_names()) text += (text.empty() ? "" : ", ") + name;
  return text;
}

std::string fp32_matmul_name(Fp32Matmul mode) {
  switch (mode) {
    case Fp32Matmul::Tf32Operands: return "tf32 operands, fp32 accumulation";
    case Fp32Matmul::Bf16Operands: return "bf16 operands, fp32 accumulation";
    case Fp32Matmul::Exact: break;
  }
  return "exact fp32";
}

std::vector<std::string> backend_library_versions() {
  std::vector<std::string> lines = {"cpu, emulated: " + cpu_blas_version()};
#ifdef TRIPOD_HAVE_CUDA_BACKEND
  lines.push_back("cuda: " + cuda_versions_text());
#endif
  return lines;
}

Device backend_device(const std::string& name) {
  if (name == "cpu") return Device::Host;
  if (name == "emulated") return Device::Emulated;
  if (name == "cuda") return Device::Cuda;
  fail("unknown backend '", name, "' (built into this binary: ", backend_names_text(), ")");
}

std::unique_ptr<Backend> make_backend(const std::string& name) {
  if (name == "cpu") return make_cpu_backend();
  if (name == "emulated") return make_emulated_backend();
#ifdef TRIPOD_HAVE_CUDA_BACKEND
  if (name == "cuda") return make_cuda_backend();
#else
  if (name == "cuda")
    fail("backend 'cuda' is not built into this binary (it is built where CMake finds nvcc: see the README's "
         "GPU section); built: ", backend_names_text());
#endif
  fail("unknown backend '", name, "' (built into this binary: ", backend_names_text(), ")");
}

}  // namespace tripod
