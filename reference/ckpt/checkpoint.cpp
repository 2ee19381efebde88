#include "ckpt/checkpoint.h"

#include <unistd.h>

#include <fstream>
#include <sstream>

#include <xxhash.h>

#include "ckpt/safetensors.h"

namespace tripod::ckpt {
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

constexpr const char* kFormat = "tripod-checkpoint";
constexpr int kVersion = 1;

std::string file_checksum(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  check(in.good(), "cannot read checkpoint file ", path.string());
  std::ostringstream bytes;
  bytes << in.rdbuf();
  const std::string data = bytes.str();
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(XXH64(data.data(), data.size(), 0)));
  return hex;
}

void load_into(const SafetensorsFile& file, const std::string& prefix, Backend& backend, const ParamSet& set) {
  for (std::size_t i = 0; i < set.size(); ++i) {
    const std::string name = prefix + set.specs()[i].name;
    const HostTensor& host = file.get(name);
    check(host.shape == set.at(i).shape(), file.path().string(), ": tensor '", name, "' has shape ",
          shape_str(host.shape), " but the model expects ", shape_str(set.at(i).shape()));
    from_host_tensor(backend, host, set.at(i), file.path().string());
  }
}

}  // namespace

HostTensor to_host_tensor(Backend& backend, const std::string& name, const Tensor& t) {
  HostTensor h{name, t.dtype(), t.shape(), std::vector<std::byte>(t.bytes())};
  backend.download(t, h.data.data());
  return h;
}

void from_host_tensor(Backend& backend, const HostTensor& host, const Tensor& t, const std::string& origin) {
  check(host.numel() == t.numel(), origin, ": tensor '", host.name, "' has ", host.numel(), " elements, expected ",
        t.numel());
  if (host.dtype == t.dtype()) {
    backend.upload(host.data.data(), t);
  } else if (host.dtype == DType::F32 && t.dtype() == DType::F64) {
    const float* src = host.as<float>();
    from_host_f64(backend, std::vector<double>(src, src + host.numel()), t);
  } else if (host.dtype == DType::F64 && t.dtype() == DType::F32) {
    const double* src = host.as<double>();
    from_host_f64(backend, std::vector<double>(src, src + host.numel()), t);
  } else {
    fail(origin, ": tensor '", host.name, "' is ", dtype_name(host.dtype), ", cannot load into ",
         dtype_name(t.dtype()));
  }
}

namespace {
bool is_tripod_checkpoint(const fs::path& dir) {
  std::ifstream in(dir / "state.json");
  if (!in) return false;
  const json state = json::parse(in, nullptr, /*allow_exceptions=*/false);
  return state.is_object() && state.value("format", "") == kFormat;
}
}  // namespace

void check_save_target(const fs::path& dir) {
  std::error_code ec;
  if (fs::exists(dir, ec)) {
    check(fs::is_directory(dir), "--save ", dir.string(), ": a file of that name exists and is not a Tripod ",
          "checkpoint; refusing to replace it (choose another path)");
    check(fs::is_empty(dir) || is_tripod_checkpoint(dir), "--save ", dir.string(),
          ": the folder exists and is not a Tripod checkpoint (no state.json of format ", kFormat,
          "); refusing to replace it and lose its files (choose another path, or empty it yourself)");
  }
  const fs::path parent = fs::absolute(dir).parent_path();
  fs::create_directories(parent, ec);
  check(fs::is_directory(parent), "--save ", dir.string(), ": cannot create its folder ", parent.string(),
        ec ? " (" + ec.message() + ")" : std::string());
  const fs::path probe = parent / (".tripod-write-test-" + std::to_string(::getpid()));
  {
    std::ofstream out(probe);
    out << "x";
    check(out.good(), "--save ", dir.string(), ": cannot write in ", parent.string());
  }
  fs::remove(probe, ec);
}

void save_checkpoint(const fs::path& dir, Backend& backend, const ParamSet& params, const AdamW* optimizer,
                     const CheckpointState& state) {
  check_save_target(dir);
  const fs::path staging = dir.string() + ".saving-" + std::to_string(::getpid());
  fs::remove_all(staging);
  fs::create_directories(staging);

  std::vector<HostTensor> model;
  for (std::size_t i = 0; i < params.size(); ++i)
    model.push_back(to_host_tensor(backend, params.specs()[i].name, params.at(i)));
  write_safetensors(staging / "model.safetensors", model, {{"format", kFormat}});
  json files = {{"model.safetensors", file_checksum(staging / "model.safetensors")}};

  if (optimizer) {
    std::vector<HostTensor> moments;
    for (std::size_t i = 0; i < params.size(); ++i) {
      moments.push_back(to_host_tensor(backend, "m." + params.specs()[i].name, optimizer->m().at(i)));
      moments.push_back(to_host_tensor(backend, "v." + params.specs()[i].name, optimizer->v().at(i)));
    }
    write_safetensors(staging / "optimizer.safetensors", moments, {{"format", kFormat}});
    files["optimizer.safetensors"] = file_checksum(staging / "optimizer.safetensors");
  }

  json meta = {{"format", kFormat}, {"version", kVersion}, {"step", state.step},
               {"dtype", dtype_name(state.dtype)}, {"config", state.config}, {"files", files}};
  {
    std::ofstream out(staging / "state.json");
    out << meta.dump(2) << "\n";
    check(out.good(), "failed writing ", (staging / "state.json").string());
  }
  // Swap the finished directory into place; the old checkpoint survives until the new one is whole.
  const fs::path old = dir.string() + ".old-" + std::to_string(::getpid());
  if (fs::exists(dir)) fs::rename(dir, old);
  fs::rename(staging, dir);
  fs::remove_all(old);
}

CheckpointState read_checkpoint_state(const fs::path& dir) {
  const fs::path state_path = dir / "state.json";
  check(fs::is_directory(dir), "checkpoint directory ", dir.string(), " does not exist");
  std::ifstream in(state_path);
  check(in.good(), "checkpoint ", dir.string(), " has no state.json");
  json meta = json::parse(in, nullptr, false);
  check(!meta.is_discarded() && meta.is_object(), state_path.string(), " is not valid JSON");
  check(meta.value("format", "") == kFormat, state_path.string(), " is not a Tripod checkpoint");
  check(meta.value("version", 0) == kVersion, state_path.string(), ": unsupported checkpoint version ",
        meta.value("version", 0));
  for (const auto& [name, expected] : meta.at("files").items()) {
    const std::string actual = file_checksum(dir / name);
    check(actual == expected.get<std::string>(), "checkpoint file ", (dir / name).string(),
          " is corrupt: checksum ", actual, " but state.json records ", expected.get<std::string>());
  }
  CheckpointState state;
  state.step = meta.at("step").get<int64_t>();
  state.dtype = parse_dtype(meta.at("dtype").get<std::string>());
  state.config = meta.at("config");
  return state;
}

CheckpointState load_checkpoint(const fs::path& dir, Backend& backend, const ParamSet& params,
                                const AdamW* optimizer) {
  CheckpointState state = read_checkpoint_state(dir);
  load_into(SafetensorsFile::read(dir / "model.safetensors"), "", backend, params);
  if (optimizer) {
    check(fs::exists(dir / "optimizer.safetensors"), "checkpoint ", dir.string(),
          " has no optimizer state, so the run cannot resume exactly");
    SafetensorsFile moments = SafetensorsFile::read(dir / "optimizer.safetensors");
    load_into(moments, "m.", backend, optimizer->m());
    load_into(moments, "v.", backend, optimizer->v());
  }
  return state;
}

}  // namespace tripod::ckpt
