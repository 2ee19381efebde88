#include "bench/ckpt_bench.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>

#include "backend/backend_factory.h"
#include "bench/timed_regions.h"
#include "core/output_file.h"
#include "core/wall_clock.h"
#include "data/random_batch.h"
#include "train/async_save.h"
#include "train/checkpointing.h"
#include "train/trainer.h"

namespace tripod::bench {
namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

namespace {

double mean(const std::vector<double>& v) {
  double sum = 0;
  for (double x : v) sum += x;
  return sum / static_cast<double>(v.size());
}

// The disk's sequential write rate as a save sees it: one file of `bytes`, written in 4 MiB
// pieces from memory and fsynced.
double disk_write_seconds(const fs::path& file, uint64_t bytes) {
  constexpr std::size_t kPiece = 4 << 20;
  const std::vector<char> piece(kPiece, 'x');
  const auto start = Clock::now();
  const int fd = ::open(file.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  TRIPOD_CHECK(fd >= 0, "cannot create ", file.string());
  for (uint64_t done = 0; done < bytes;) {
    const std::size_t n = static_cast<std::size_t>(std::min<uint64_t>(kPiece, bytes - done));
    const ssize_t written = ::write(fd, piece.data(), n);
    if (written <= 0) {
      ::close(fd);
      fail("cannot write ", file.string());
    }
    done += static_cast<uint64_t>(written);
  }
  const bool synced = ::fsync(fd) == 0;
  ::close(fd);
  TRIPOD_CHECK(synced, "cannot fsync ", file.string());
  const double seconds = seconds_since(start);
  fs::remove(file);
  return seconds;
}

}  // namespace

void run_bench_ckpt(const BenchCkptOptions& o) {
  check(o.repeats >= 1, "--repeats must be at least 1");
  std::vector<std::string> overrides = {"model.vocab_size=8192"};  // the presets take theirs from data
  overrides.insert(overrides.end(), o.overrides.begin(), o.overrides.end());
  overrides.push_back("train.batch_size=" + std::to_string(o.batch));
  overrides.push_back("train.seq_len=" + std::to_string(o.seq_len));
  overrides.push_back("train.micro_batches=1");
  overrides.push_back("train.keep_checkpoints=2");
  RunConfig config = parse_run_config(load_config_json(o.config, overrides));
  auto backend = make_backend(o.backend);
  Trainer trainer(config, *backend);
  trainer.initialise();

  const bool own_dir = o.dir.empty();
  const fs::path dir = own_dir ? fs::temp_directory_path() / ("tripod-bench-ckpt-" + std::to_string(::getpid())) : fs::path(o.dir);
  const fs::path root = dir / "ckpt";
  std::error_code ec;
  fs::create_directories(dir, ec);
  TRIPOD_CHECK(!ec, "bench ckpt --dir ", dir.string(), ": cannot make the folder: ", ec.message());
  TRIPOD_CHECK(!fs::exists(root), root.string(), " exists: give --dir an empty or new folder");
  const uint64_t bytes = checkpoint_bytes(nullptr, trainer.state_regions());
  const double mb = static_cast<double>(bytes) / 1e6;
  std::printf("tripod bench ckpt: %s, %.1f MB of state (parameters, AdamW m and v, %s), %lld repeats, into %s\n",
              o.config.c_str(), mb, dtype_name(config.train.dtype).c_str(), static_cast<long long>(o.repeats),
              dir.string().c_str());
  std::fflush(stdout);

  // As in a run: the update of a step waits for an async save's copy of the state (if any).
  AsyncSave* in_flight = nullptr;
  StepGuard guard;
  auto step = [&, s = int64_t{0}]() mutable {
    const data::Batch batch = data::random_token_batch(o.batch, o.seq_len, config.model.vocab_size, s++, "bench.ckpt");
    return trainer.train_step(batch, [&](double loss, double norm) {
      if (in_flight) in_flight->wait_for_snapshot();
      return guard.judge(loss, norm);
    }).seconds;
  };
  step();  // warm-up
  int64_t saved_step = 0;
  auto meta = [&] { return CheckpointMeta{++saved_step, &config, "single process", 0, ""}; };

  std::vector<double> disk, sync, plain_steps, stalls, snapshots, copy_waits, polls, slowdowns, write_times, publish_times, steps_during;
  StateSnapshot buffers;
  for (int64_t r = 0; r < o.repeats; ++r) {
    // Each write timing starts with no dirty pages of an earlier one still going to the disk.
    ::sync();
    disk.push_back(disk_write_seconds(dir / "disk-rate.bin", bytes));
    ::sync();
    auto start = Clock::now();
    save_checkpoint(nullptr, root, trainer.state_regions(), *backend, meta());
    sync.push_back(seconds_since(start));
    for (int i = 0; i < 5; ++i) plain_steps.push_back(step());

    // An asynchronous save with training going on, polled after each step as the training loop
    // does, until it is published. The buffers of the previous async save are reused, as in a run.
    start = Clock::now();
    AsyncSave save(nullptr, root, trainer.state_regions(), *backend, meta(), std::move(buffers));
    const double before_training = seconds_since(start);  // staging, and the copy where it is not overlapped
    in_flight = &save;
    std::vector<double> during;
    double polling = 0;
    for (bool published = false; !published;) {
      during.push_back(step());
      start = Clock::now();
      published = save.poll();
      polling += seconds_since(start);
    }
    save.finish();
    in_flight = nullptr;
    const double copy_wait = save.copy_wait_seconds();  // inside a step: part of `slower`
    buffers = save.release_buffers();
    // Against the mean of the steps without a save (a sum of max(0, step - median) would count
    // the ordinary noise of the steps as stall).
    double slower = 0;
    for (double s : during) slower += s - mean(plain_steps);
    snapshots.push_back(before_training);
    copy_waits.push_back(copy_wait);
    polls.push_back(polling);
    slowdowns.push_back(slower);
    write_times.push_back(save.write_seconds());
    publish_times.push_back(save.publish_seconds());
    steps_during.push_back(static_cast<double>(during.size()));
    stalls.push_back(before_training + polling + slower);
  }
  // What the bench wrote is scratch, in --dir too unless --keep: left there, it filled the disk
  // being measured and made the next run with the same --dir refuse to start.
  fs::remove(dir / "disk-rate.bin");
  if (!o.keep) fs::remove_all(own_dir ? dir : root);

  const double disk_mbs = mb / median(disk), sync_mbs = mb / median(sync);
  const double stall_ratio = median(stalls) / median(sync);
  std::printf("  disk sequential write (4 MiB writes + fsync): %8.1f MB/s  (%.3f s)\n", disk_mbs, median(disk));
  std::printf("  synchronous save:                            %8.1f MB/s  (%.3f s) = %.0f%% of the disk's rate\n",
              sync_mbs, median(sync), 100 * sync_mbs / disk_mbs);
  std::printf("  asynchronous save: written in %.3f s and published in %.3f s behind %.0f training steps (median step "
              "%.3f s without a save)\n", median(write_times), median(publish_times), median(steps_during),
              median(plain_steps));
  std::printf("    training stalled %.4f s: before the next step %.4f s (staging%s) + entry exchange %.4f s + slower "
              "steps %.4f s (of which waiting for the copy %.4f s)\n", median(stalls), median(snapshots),
              backend->device() == Device::Host ? "; the copy overlaps the next step" : " and the copy", median(polls),
              median(slowdowns), median(copy_waits));
  std::printf("    stall / synchronous save = %.1f%%  (target < 10%%)\n", 100 * stall_ratio);
  // The slower-steps term is a difference of step times: on a noisy machine it can come out below
  // zero, which is not a gain but a sign that the stall is under the noise. Say so next to it.
  if (median(stalls) < 0)
    std::printf("    (a negative stall: the steps during the save ran faster than the mean step without a save; "
                "the stall is below this machine's noise: raise --repeats)\n");
  if (!o.json_out.empty()) {
    const nlohmann::json j = {{"benchmark", "checkpoint"}, {"config", o.config}, {"bytes", bytes},
                              {"repeats", o.repeats}, {"disk_write_seconds", median(disk)},
                              {"disk_write_mb_per_s", disk_mbs}, {"sync_save_seconds", median(sync)},
                              {"sync_save_mb_per_s", sync_mbs}, {"sync_fraction_of_disk", sync_mbs / disk_mbs},
                              {"async_write_seconds", median(write_times)}, {"async_snapshot_seconds", median(snapshots)},
                              {"async_copy_wait_seconds", median(copy_waits)},
                              {"async_publish_seconds", median(publish_times)},
                              {"async_poll_seconds", median(polls)}, {"async_slower_steps_seconds", median(slowdowns)}, {"async_stall_seconds", median(stalls)},
                              {"async_stall_fraction_of_sync", stall_ratio}, {"median_step_seconds", median(plain_steps)},
                              {"backend", o.backend}, {"backend_name", backend->name()}};
    write_output_file(o.json_out, j.dump(2) + "\n", "the results file (--json)");
  }
}

}  // namespace tripod::bench
