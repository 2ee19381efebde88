// libFuzzer target: the safetensors reader (ckpt/safetensors.h) on arbitrary bytes.
// Seeds: files written by write_safetensors, covering every dtype, 0-d and empty tensors, metadata.
#include <cstdint>
#include <vector>

#include "ckpt/safetensors.h"
#include "fuzz_support.h"

namespace {

using namespace tripod;
using namespace tripod::ckpt;

void write_seeds(const std::filesystem::path& folder) {
  write_safetensors(folder / "every_dtype.safetensors",
                    {make_host_tensor<float>("h.0.attn.c_attn.weight", {2, 3}, {1.5f, -2.f, 3.25f, 0.f, -0.f, 1e-30f}),
                     make_host_tensor<double>("wte.weight", {4}, {1.0 / 3.0, -1e300, 2.5, 7.0}),
                     make_host_tensor<int32_t>("tokens", {2, 2}, {0, 1, -1, 50256}),
                     make_host_tensor<std::uint16_t>("bf16", {3}, {0x3f80, 0xbf80, 0x7f80}),
                     make_host_tensor<double>("scalar", {}, {42.0}),
                     make_host_tensor<float>("empty", {0, 5}, std::vector<float>{})},
                    {{"format", "pt"}, {"tripod", "checkpoint"}});
  write_safetensors(folder / "moments.safetensors",
                    {make_host_tensor<float>("m.lm_head.weight", {2, 2}, {0.f, 1.f, 2.f, 3.f}),
                     make_host_tensor<float>("v.lm_head.weight", {2, 2}, {4.f, 5.f, 6.f, 7.f})});
  write_safetensors(folder / "metadata_only.safetensors", {}, {{"step", "12"}});
  write_safetensors(folder / "nothing.safetensors", {});
}

}  // namespace

TRIPOD_FUZZ_SEEDS(write_seeds)

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, std::size_t size) {
  fuzz::expect_refusal_or_success([&] {
    const SafetensorsFile file = SafetensorsFile::parse(fuzz::as_bytes(data, size), "fuzz-input");
    std::size_t total = 0;
    for (const HostTensor& t : file.tensors()) {
      fuzz::require(file.contains(t.name) && &file.get(t.name) == &t, "every tensor is found under its name");
      fuzz::require(t.data.size() == static_cast<std::size_t>(t.numel()) * dtype_size(t.dtype),
                    "a tensor holds exactly shape x dtype bytes");
      total += t.data.size();
    }
    fuzz::require(total <= size, "the tensors hold no more bytes than the file");
  });
  return 0;
}
