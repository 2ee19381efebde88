#include "ckpt/legacy_checkpoint.h"

#include "ckpt/durable_file.h"
#include "ckpt/manifest.h"

namespace tripod::ckpt {
namespace fs = std::filesystem;
using nlohmann::json;

LegacyCheckpoint read_legacy_checkpoint(const fs::path& dir) {
  const fs::path state_path = dir / "state.json";
  TRIPOD_CHECK(fs::is_directory(dir), "checkpoint directory ", dir.string(), " does not exist");
  TRIPOD_CHECK(fs::exists(state_path), "checkpoint ", dir.string(), " has no state.json: not a version-1 checkpoint");
  const json meta = json::parse(read_text(state_path), nullptr, false);
  TRIPOD_CHECK(!meta.is_discarded() && meta.is_object(), state_path.string(), " is not valid JSON");
  TRIPOD_CHECK(meta.value("format", "") == kCheckpointFormat, state_path.string(), " is not a Tripod checkpoint");
  TRIPOD_CHECK(meta.value("version", 0) == 1, state_path.string(), ": not a version-1 checkpoint");
  TRIPOD_CHECK(meta.contains("files") && meta["files"].is_object() && meta["files"].contains("model.safetensors") &&
                   meta["files"].contains("optimizer.safetensors"),
               state_path.string(), " does not list model.safetensors and optimizer.safetensors");
  for (const auto& [name, expected] : meta.at("files").items()) {
    const std::string data = read_text(dir / name);
    const std::string actual = xxh64_hex(data.data(), data.size());
    TRIPOD_CHECK(expected.is_string() && actual == expected.get<std::string>(), "checkpoint file ",
                 (dir / name).string(), " is corrupt: checksum ", actual, " but state.json records ", expected.dump());
  }
  int64_t step = 0;
  std::string dtype;
  try {  // a missing or mistyped field was an "internal error" naming no file
    step = meta.at("step").get<int64_t>();
    dtype = meta.at("dtype").get<std::string>();
    TRIPOD_CHECK(meta.at("config").is_object(), state_path.string(), ": 'config' is not an object");
  } catch (const json::exception& e) {
    fail(state_path.string(), ": ", e.what());
  }
  TRIPOD_CHECK(step >= 0, state_path.string(), ": step ", step, " is negative");
  return {step, parse_dtype(dtype), meta.at("config"), SafetensorsFile::read(dir / "model.safetensors"),
          SafetensorsFile::read(dir / "optimizer.safetensors")};
}

}  // namespace tripod::ckpt
