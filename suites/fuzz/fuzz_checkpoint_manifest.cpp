// libFuzzer target: the checkpoint manifest parser (ckpt/manifest.h) on arbitrary text.
// The manifest's own checksum guards every field, and random mutations almost never keep it valid;
// so each input that is a JSON object is read a second time with its checksum recomputed, which
// lets the fuzzer reach the validation of shapes, files and blocks behind it.
// Seeds: manifests written by manifest_text for one rank and for two ranks with strided blocks.
#include <cstdint>
#include <fstream>
#include <string>
#include <string_view>

#include "ckpt/manifest.h"
#include "core/bounded_json.h"
#include "fuzz_support.h"

namespace {

using namespace tripod;
using namespace tripod::ckpt;

Manifest seed_manifest(int world_size) {
  Manifest m;
  m.step = 10;
  m.config = {{"model", {{"n_layer", 2}, {"d_model", 8}}}, {"train", {{"seed", 1}, {"steps", 20}}}};
  m.layout = world_size == 1 ? "single process" : "tp2";
  m.world_size = world_size;
  m.data = {80, 1, 4, 16};
  m.tensors = {{"wte", {6, 8}}, {"ln_f.g", {8}}};
  for (int rank = 0; rank < world_size; ++rank) {
    ShardFile file{"shard-0000" + std::to_string(rank) + ".bin", rank, 64, "0123456789abcdef", {}};
    uint64_t offset = 64;
    for (const char* kind : {"param", "adam_m", "adam_v"}) {
      // wte split by columns across ranks: rows of 8 / world_size elements, stride 8.
      Block b{"wte", kind, DType::F32, rank * 8 / world_size, 8 / world_size, 8, 6, offset, "fedcba9876543210"};
      offset += b.bytes();
      file.blocks.push_back(b);
      if (rank == 0) {
        Block g{"ln_f.g", kind, DType::F64, 0, 8, 8, 1, offset, "0000000000000000"};
        offset += g.bytes();
        file.blocks.push_back(g);
      }
    }
    file.bytes = offset;
    m.files.push_back(file);
  }
  return m;
}

void write_seeds(const std::filesystem::path& folder) {
  for (int world : {1, 2}) std::ofstream(folder / ("manifest-" + std::to_string(world) + ".json")) << manifest_text(seed_manifest(world));
}

void read(std::string_view text) {
  fuzz::expect_refusal_or_success([&] {
    const Manifest m = parse_manifest(text, "fuzz-input");
    fuzz::require(static_cast<int>(m.files.size()) == m.world_size, "one shard file per rank");
    for (const ShardFile& file : m.files) {
      fuzz::require(file.name.find('/') == std::string::npos, "shard files stay in the checkpoint directory");
      for (const Block& b : file.blocks) {
        const auto shape = m.tensors.find(b.tensor);
        fuzz::require(shape != m.tensors.end(), "every block belongs to a listed tensor");
        const int64_t numel = shape_numel(shape->second);
        fuzz::require(b.count >= 1 && b.length >= 1, "a block holds at least one element");
        fuzz::require(b.start + (b.count - 1) * b.stride + b.length <= numel, "a block lies inside its tensor");
        fuzz::require(b.offset + b.bytes() <= file.bytes, "a block lies inside its file");
      }
    }
  });
}

}  // namespace

TRIPOD_FUZZ_SEEDS(write_seeds)

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  read(text);
  // The same document with a checksum that matches it (what a hostile writer would produce).
  nlohmann::json j;
  try {
    j = parse_bounded_json(text, "fuzz-input", 32);
  } catch (const Error&) {
    return 0;
  }
  if (j.is_object() && j.contains("checksum")) {
    j.erase("checksum");
    const std::string canonical = j.dump();
    j["checksum"] = xxh64_hex(canonical.data(), canonical.size());
    read(j.dump(1));
  }
  return 0;
}
