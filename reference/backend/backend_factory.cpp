#include "backend/backend_factory.h"

namespace tripod {

std::vector<std::string> backend_names() { return {"cpu", "emulated"}; }

std::string backend_names_text() {
  std::string text;
  for (const std::string& name : backend_names()) text += (text.empty() ? "" : ", ") + name;
  return text;
}

std::unique_ptr<Backend> make_backend(const std::string& name) {
  if (name == "cpu") return make_cpu_backend();
  if (name == "emulated") return make_emulated_backend();
  if (name == "cuda")
    fail("backend 'cuda' is not built into this binary (its kernels arrive with the CUDA backend issue); built: ",
         backend_names_text());
  fail("unknown backend '", name, "' (built into this binary: ", backend_names_text(), ")");
}

}  // namespace tripod
