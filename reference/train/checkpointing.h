// Saving and loading the training state as a sharded checkpoint (ckpt/): the collective protocol.
//
// Save: rank 0 makes ROOT/.partial-step-N; every rank writes its own shard file of the regions it
// writes (train/training_engine.h's state_regions); every rank hears whether all succeeded; rank 0
// gathers the ranks' file entries, writes the manifest last (fsynced) and publishes the step
// directory and `latest`. A failure anywhere is an error on every rank naming the rank and what
// failed; the previous checkpoint is never touched. Single-process runs are the one-rank case.
//
// Load: every rank reads, from whatever layout wrote the checkpoint, exactly the logical elements
// its own regions hold.
#pragma once
#include <cstddef>
#include <filesystem>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "ckpt/manifest.h"
#include "comm/communicator.h"
#include "core/state_region.h"
#include "train/run_config.h"

namespace tripod {

struct CheckpointMeta {
  int64_t step = 0;
  const RunConfig* config = nullptr;
  std::string layout;        // "single process" or the layout's description
  int64_t next_sample = 0;   // the data loader's position
  std::string train_tokens_xxh64;  // the corpus it counts into (TokenDataset::tokens_xxh64); empty: none read
  int64_t tokens_trained = -1;     // the steps' tokens since step 0; -1: not counted
  int64_t updates = -1;            // the updates applied (TrainingEngine::updates); -1: as many as steps
  std::vector<double> recent_losses = {};  // the anomaly guard's window (train/step_guard.h)
};

// anomaly.policy=rollback: the checkpoint `dir` a run went back to records where its data continues
// now (after the bad batch and anomaly.skip_batches), so that a restart from it does not replay the
// bad batch (it did, and met the anomaly again). Collective; rank 0 rewrites the manifest durably.
void record_data_position(Communicator* world, const std::filesystem::path& dir, int64_t next_sample);

// Collective over `world` (null: one process). Returns the published checkpoint directory.
std::filesystem::path save_checkpoint(Communicator* world, const std::filesystem::path& root,
                                      const std::vector<StateRegion>& regions, Backend& backend,
                                      const CheckpointMeta& meta);

// The phases of save_checkpoint, apart for the asynchronous save (train/async_save.h):
//   stage_checkpoint      collective: rank 0 makes ROOT/.partial-step-N afresh; returns it
//   snapshot_state        this rank's saved regions copied to host memory, into the buffers of an
//                         earlier snapshot where their sizes fit (before the next update of them)
//   write_shard           this rank's shard file from a snapshot: no communication, so it may
//                         run on another thread while training goes on
//   gather_shard_entries  collective: every rank's shard outcome agreed (`shard_error` empty:
//                         written); rank 0 receives every rank's file entry (others: none)
//   publish_manifest      rank 0 alone, no communication (so it too may run on another thread):
//                         the manifest, then the step directory and `latest` published
//   agree_publication     collective: rank 0's publication outcome heard by every rank
// A phase that fails removes the staging directory and throws on every rank.
struct StateSnapshot {
  std::vector<StateRegion> regions;              // the regions this rank saves
  std::vector<std::vector<std::byte>> bytes;     // each one's local elements
};
std::filesystem::path stage_checkpoint(Communicator* world, const std::filesystem::path& root, int64_t step);
StateSnapshot snapshot_state(const std::vector<StateRegion>& regions, Backend& backend, StateSnapshot reuse = {});
ckpt::ShardFile write_shard(const std::filesystem::path& staged, int rank, int64_t step, const StateSnapshot& snapshot);
std::vector<std::string> gather_shard_entries(Communicator* world, const std::filesystem::path& staged,
                                              const ckpt::ShardFile& mine, const std::string& shard_error,
                                              const std::vector<StateRegion>& regions, int64_t step);
void publish_manifest(const std::filesystem::path& root, const std::filesystem::path& staged,
                      const std::vector<std::string>& entries, const CheckpointMeta& meta, int world_size);
void agree_publication(Communicator* world, const std::string& error);

// Collective: checks the checkpoint `dir` (a step directory) against the run
// (check_resume_compatible), then every rank loads its regions; one rank's failure is an error on
// every rank, naming it. Returns the manifest.
ckpt::Manifest resume_from_checkpoint(Communicator* world, const std::filesystem::path& dir,
                                      const std::vector<StateRegion>& regions, Backend& backend,
                                      const RunConfig& config, bool allow_changes,
                                      const std::string& train_tokens_xxh64 = {});

// Refuses a resume that would silently change the run: another model or dtype, a step beyond
// train.steps; and, unless `allow_changes`, another data order (seed, batch size, sequence length,
// the training tokens), schedule (learning rates, warm-up, decay, steps) or optimizer (every optim.*
// key: AdamW's betas, eps, weight decay, clipping). The message lists every
// difference; the caller names the checkpoint ("resuming from DIR failed: ...").
// `train_tokens_xxh64`: the run's training split's (TokenDataset::tokens_xxh64). Where both it and
// the checkpoint's are known they decide whether the corpus is the same (another corpus written
// into the same data.dir was resumed without a word; the same corpus moved to another folder is
// no change); otherwise the data directory's path does.
void check_resume_compatible(const ckpt::Manifest& manifest, const RunConfig& config, bool allow_changes,
                             const std::string& train_tokens_xxh64 = {});

// `tripod ckpt upgrade`: a version-1 checkpoint (single process) rewritten as a sharded checkpoint
// under `new_root` (the one-rank case of the format); returns its directory.
std::filesystem::path upgrade_legacy_checkpoint(const std::filesystem::path& old_dir,
                                                const std::filesystem::path& new_root, Backend& backend);

// Bytes every rank together writes per checkpoint (collective): for the free-space check.
uint64_t checkpoint_bytes(Communicator* world, const std::vector<StateRegion>& regions);

}  // namespace tripod
