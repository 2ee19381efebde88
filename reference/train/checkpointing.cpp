#include "train/checkpointing.h"

#include <algorithm>
#include <set>

#include "ckpt/checkpoint_reader.h"
#include "ckpt/checkpoint_root.h"
#include "ckpt/durable_file.h"
#include "ckpt/legacy_checkpoint.h"
#include "ckpt/shard_file.h"
#include "comm/host_collectives.h"
#include "model/param_spec.h"
#include "train/fault_injection.h"

namespace tripod {
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

// Whether every rank succeeded at a step of a collective save or load; if not, the same error on
// every rank, naming each rank that failed and why.
void agree(Communicator* world, const std::string& what, const std::string& error) {
  const double ok = world ? all_reduce_value(*world, error.empty() ? 1.0 : 0.0, ReduceOp::Min) : (error.empty() ? 1 : 0);
  if (ok == 1.0) return;
  const std::vector<std::string> errors = world ? all_gather_text(*world, error, 1024) : std::vector<std::string>{error};
  std::vector<std::string> failed;
  for (const std::string& e : errors)
    if (!e.empty()) failed.push_back(e);
  // One message when every rank failed alike (a manifest all of them read); else each rank's own.
  if (failed.size() == errors.size() && std::all_of(failed.begin(), failed.end(), [&](auto& e) { return e == failed[0]; }))
    fail(what, " failed", errors.size() > 1 ? " on every rank: " : ": ", failed[0]);
  std::string why;
  for (std::size_t r = 0; r < errors.size(); ++r)
    if (!errors[r].empty()) why += "\n  rank " + std::to_string(r) + ": " + errors[r];
  fail(what, " failed:", why);
}

template <class F>
std::string attempt(F&& action) {
  try {
    action();
    return "";
  } catch (const std::exception& e) {
    return e.what();
  }
}

// A rank's file entry plus the logical shapes of the tensors it wrote (the manifest lists them all).
json file_entry_json(const ckpt::ShardFile& f, const std::vector<StateRegion>& regions) {
  json entry = ckpt::shard_file_to_json(f);
  entry["tensors"] = json::object();
  for (const StateRegion& r : regions)
    if (r.saves) entry["tensors"][r.tensor] = r.logical_shape;
  return entry;
}

}  // namespace

uint64_t checkpoint_bytes(Communicator* world, const std::vector<StateRegion>& regions) {
  double bytes = 0;
  for (const StateRegion& r : regions)
    if (r.saves) bytes += static_cast<double>(r.local.bytes());
  return static_cast<uint64_t>(world ? all_reduce_value(*world, bytes, ReduceOp::Sum) : bytes);
}

fs::path stage_checkpoint(Communicator* world, const fs::path& root, int64_t step) {
  const fs::path staged = ckpt::partial_dir(root, step);
  const bool root_rank = !world || world->rank() == 0;
  agree(world, "checkpoint save (preparing " + staged.string() + "; the previous checkpoint is untouched)",
        !root_rank ? "" : attempt([&] {
          fs::remove_all(staged);
          fs::create_directories(staged);
        }));
  return staged;
}

StateSnapshot snapshot_state(const std::vector<StateRegion>& regions, Backend& backend, StateSnapshot reuse) {
  // Reused buffers keep their pages: a repeated snapshot is a copy, not a round of page faults.
  StateSnapshot snapshot = std::move(reuse);
  snapshot.regions.clear();
  std::size_t n = 0;
  for (const StateRegion& r : regions) {
    if (!r.saves) continue;
    snapshot.regions.push_back(r);
    if (snapshot.bytes.size() == n) snapshot.bytes.emplace_back();
    snapshot.bytes[n].resize(r.local.bytes());
    backend.download(r.local, snapshot.bytes[n].data());
    ++n;
  }
  snapshot.bytes.resize(n);
  backend.synchronize();
  return snapshot;
}

ckpt::ShardFile write_shard(const fs::path& staged, int rank, int64_t step, const StateSnapshot& snapshot) {
  ckpt::ShardWriter writer(staged, rank, step);
  for (std::size_t i = 0; i < snapshot.regions.size(); ++i) writer.add(snapshot.regions[i], snapshot.bytes[i].data());
  return writer.finish();
}

std::vector<std::string> gather_shard_entries(Communicator* world, const fs::path& staged, const ckpt::ShardFile& mine,
                                              const std::string& shard_error, const std::vector<StateRegion>& regions,
                                              int64_t step) {
  const int rank = world ? world->rank() : 0;
  try {
    agree(world, "checkpoint save (writing the shard files; the previous checkpoint is untouched)", shard_error);
    maybe_inject_fault(FaultPoint::DuringSave, rank, step);
    // Rank 0 learns every rank's file entry: sizes first, so the text gather is exact.
    const std::string entry = file_entry_json(mine, regions).dump();
    if (!world) return {entry};
    const std::vector<double> sizes = all_gather_values(*world, {static_cast<double>(entry.size())});
    const double longest = *std::max_element(sizes.begin(), sizes.end());
    std::vector<std::string> entries = all_gather_text(*world, entry, static_cast<std::size_t>(longest) + 1);
    if (rank != 0) entries.clear();
    return entries;
  } catch (const Error&) {
    // Every rank has agreed that the save failed: what it wrote goes, so a full disk is not fuller.
    std::error_code ignored;
    if (rank == 0) fs::remove_all(staged, ignored);
    throw;
  }
}

void publish_manifest(const fs::path& root, const fs::path& staged, const std::vector<std::string>& entries,
                      const CheckpointMeta& meta, int world_size) {
  try {
    ckpt::Manifest m;
    m.step = meta.step;
    m.dtype = meta.config->train.dtype;
    m.config = meta.config->json;
    m.layout = meta.layout;
    m.world_size = world_size;
    m.data = {meta.next_sample, meta.config->train.seed, meta.config->train.batch_size, meta.config->train.seq_len,
              meta.train_tokens_xxh64, meta.tokens_trained};
    m.recent_losses = meta.recent_losses;
    m.updates = meta.updates;
    for (const std::string& e : entries) {
      const json f = json::parse(e);
      for (const auto& [name, shape] : f.at("tensors").items()) m.tensors[name] = shape.get<Shape>();
      m.files.push_back(ckpt::shard_file_from_json(f));
    }
    ckpt::write_text_durably(staged / ckpt::kManifestFile, ckpt::manifest_text(m));
    ckpt::publish_checkpoint(root, staged, meta.step, meta.config->train.keep_checkpoints);
  } catch (const std::exception&) {
    std::error_code ignored;
    fs::remove_all(staged, ignored);
    throw;
  }
}

void agree_publication(Communicator* world, const std::string& error) {
  agree(world, "checkpoint save (writing the manifest; the previous checkpoint is untouched)", error);
}

fs::path save_checkpoint(Communicator* world, const fs::path& root, const std::vector<StateRegion>& regions,
                         Backend& backend, const CheckpointMeta& meta) {
  const fs::path staged = stage_checkpoint(world, root, meta.step);
  // One region at a time through one host buffer: a synchronous save needs no copy of the state.
  ckpt::ShardFile mine;
  const std::string error = attempt([&] {
    ckpt::ShardWriter writer(staged, world ? world->rank() : 0, meta.step);
    std::vector<std::byte> host;
    for (const StateRegion& r : regions) {
      if (!r.saves) continue;
      host.resize(r.local.bytes());
      backend.download(r.local, host.data());
      writer.add(r, host.data());
    }
    mine = writer.finish();
  });
  const std::vector<std::string> entries = gather_shard_entries(world, staged, mine, error, regions, meta.step);
  const bool root_rank = !world || world->rank() == 0;
  agree_publication(world, !root_rank ? "" : attempt([&] {
    publish_manifest(root, staged, entries, meta, world ? world->size() : 1);
  }));
  return root / ckpt::step_dir_name(meta.step);
}

void record_data_position(Communicator* world, const fs::path& dir, int64_t next_sample) {
  const bool root_rank = !world || world->rank() == 0;
  agree(world, str_cat("recording the data position in ", (dir / ckpt::kManifestFile).string()),
        !root_rank ? "" : attempt([&] {
          const fs::path file = dir / ckpt::kManifestFile;
          ckpt::Manifest m = ckpt::parse_manifest(ckpt::read_text(file), file.string());
          if (m.data.next_sample == next_sample) return;
          m.data.next_sample = next_sample;
          ckpt::write_text_durably(file, ckpt::manifest_text(m));  // the state files are untouched
        }));
}

fs::path upgrade_legacy_checkpoint(const fs::path& old_dir, const fs::path& new_root, Backend& backend) {
  const ckpt::LegacyCheckpoint old = ckpt::read_legacy_checkpoint(old_dir);
  RunConfig config;
  try {
    // A version-1 config lacks the keys added since (train.recompute, keep_checkpoints,
    // pipeline_split, anomaly, ...), and parsing it failed on the first: every real version-1
    // checkpoint was refused. They take today's defaults; the state upgraded does not depend on them.
    nlohmann::json full = default_config_json();
    full.merge_patch(old.config);
    config = parse_run_config(full);
  } catch (const nlohmann::json::exception& e) {  // a config of another version: name the file
    fail((old_dir / "state.json").string(), ": its config cannot be read (", e.what(), ")");
  }
  // The tensors must be the model its config describes, in its precision: a mismatch was
  // upgraded as it was and only refused by the resume after it, naming the new checkpoint.
  const std::vector<ParamSpec> specs = gpt_param_specs(config.model);
  TRIPOD_CHECK(old.model.tensors().size() == specs.size(), old_dir.string(), ": model.safetensors holds ",
               old.model.tensors().size(), " tensors but its config's model has ", specs.size());
  std::vector<StateRegion> regions;
  auto add = [&](const ckpt::HostTensor& t, const ParamSpec& spec, const char* kind) {
    TRIPOD_CHECK(t.dtype == old.dtype, old_dir.string(), ": tensor '", t.name, "' is ", dtype_name(t.dtype),
                 " but state.json says ", dtype_name(old.dtype));
    TRIPOD_CHECK(t.dtype == DType::F32 || t.dtype == DType::F64, old_dir.string(), ": tensor '", t.name, "' is ",
                 dtype_name(t.dtype), ", not fp32 or fp64");
    if (t.shape != spec.shape)
      fail(old_dir.string(), ": tensor '", t.name, "' has shape ", shape_str(t.shape), " but its config's model makes ",
           spec.name, " ", shape_str(spec.shape));
    const Tensor local = backend.alloc({t.numel()}, t.dtype);
    backend.upload(t.data.data(), local);
    regions.push_back({spec.name, t.shape, kind, local, {{0, 0, t.numel()}}, true});
  };
  for (const ParamSpec& spec : specs) {
    TRIPOD_CHECK(old.model.contains(spec.name), old_dir.string(), ": model.safetensors has no tensor '", spec.name,
                 "', which its config's model has");
    add(old.model.get(spec.name), spec, "param");
    add(old.optimizer.get("m." + spec.name), spec, "adam_m");
    add(old.optimizer.get("v." + spec.name), spec, "adam_v");
  }
  // As documented: the upgraded checkpoint is the new root's only one (an existing root's `latest`
  // would otherwise move to it, and its other steps belong to another run).
  std::error_code ec;
  TRIPOD_CHECK(!fs::exists(new_root, ec) || (fs::is_directory(new_root, ec) && fs::is_empty(new_root, ec)),
               "ckpt upgrade: NEW_ROOT ", new_root.string(), " must be absent or an empty folder");
  ckpt::check_save_root(new_root, 0, "ckpt upgrade's NEW_ROOT");
  // Version 1 read the data at step * batch_size, as every resume of it did; it recorded no
  // fingerprint of the tokens.
  return save_checkpoint(nullptr, new_root, regions, backend,
                         {old.step, &config, "single process", old.step * config.train.batch_size, ""});
}

ckpt::Manifest resume_from_checkpoint(Communicator* world, const fs::path& dir, const std::vector<StateRegion>& regions,
                                      Backend& backend, const RunConfig& config, bool allow_changes,
                                      const std::string& train_tokens_xxh64) {
  ckpt::Manifest manifest;
  agree(world, "resuming from " + dir.string(), attempt([&] {
    ckpt::CheckpointReader reader(dir);
    check_resume_compatible(reader.manifest(), config, allow_changes, train_tokens_xxh64);
    for (const StateRegion& r : regions) reader.load(r, backend);
    manifest = reader.manifest();
  }));
  return manifest;
}

void check_resume_compatible(const ckpt::Manifest& manifest, const RunConfig& config, bool allow_changes,
                             const std::string& train_tokens_xxh64) {
  const json& saved = manifest.config;
  const json& now = config.json;
  auto value = [](const json& j, const char* section, const std::string& key) {
    return j.contains(section) && j.at(section).contains(key) ? j.at(section).at(key).dump() : std::string("absent");
  };
  // The model must be the same, always.
  for (auto it = now.at("model").begin(); it != now.at("model").end(); ++it)
    check(value(saved, "model", it.key()) == it.value().dump(), "model.", it.key(), " is ",
          it.value().dump(), " here but ", value(saved, "model", it.key()), " in the checkpoint");
  check(manifest.dtype == config.train.dtype, "the checkpoint holds ", dtype_name(manifest.dtype),
        " state but train.dtype is ", dtype_name(config.train.dtype));
  check(manifest.step <= config.train.steps, "the checkpoint is at step ", manifest.step,
        ", beyond train.steps = ", config.train.steps);
  // What decides the data order and the learning-rate schedule.
  const std::string& saved_tokens = manifest.data.train_tokens_xxh64;
  const bool tokens_known = !saved_tokens.empty() && !train_tokens_xxh64.empty();
  // Every optimizer setting: the schedule, and AdamW's betas, eps, weight decay (and which tensors
  // take it) and clipping, which changed the run's updates on a resume without a word.
  std::vector<std::pair<const char*, std::string>> watched = {
      {"train", "seed"}, {"train", "batch_size"}, {"train", "seq_len"}, {"train", "steps"}};
  if (!tokens_known) watched.insert(watched.begin() + 3, {"data", "dir"});
  for (auto it = now.at("optim").begin(); it != now.at("optim").end(); ++it) watched.push_back({"optim", it.key()});
  std::string changes;
  for (const auto& [section, key] : watched) {
    const std::string before = value(saved, section, key), after = value(now, section, key);
    if (before != after) changes += str_cat("\n  ", section, ".", key, ": ", before, " in the checkpoint, ", after, " now");
  }
  // The precision policy: fp32 and bf16-mixed both save fp32 state, so the state's dtype agreed
  // and a resume under another policy (other GEMM operands, other rounding) passed without a word.
  // By the policy, not the text: "float32" is "fp32".
  if (saved.contains("train") && saved.at("train").contains("dtype") && saved.at("train").at("dtype").is_string()) {
    const std::string before = saved.at("train").at("dtype").get<std::string>();
    const std::string policy = before == "float32" ? "fp32" : before == "float64" ? "fp64" : before;
    if (policy != precision_name(config.train))
      changes += str_cat("\n  train.dtype: \"", before, "\" in the checkpoint, \"", precision_name(config.train),
                         "\" now (another precision policy)");
  }
  if (tokens_known && saved_tokens != train_tokens_xxh64)
    changes += str_cat("\n  the training tokens: XXH64 ", saved_tokens, " in the checkpoint (data.dir ",
                       value(saved, "data", "dir"), "), ", train_tokens_xxh64, " in data.dir ",
                       value(now, "data", "dir"), " now (another corpus)");
  if (changes.empty() || allow_changes) return;
  fail("the run would not continue as it was (data order, learning-rate schedule or optimizer):",
       changes, "\n(pass --allow-resume-changes to resume anyway)");
}

}  // namespace tripod
