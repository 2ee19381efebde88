// tripod bench ckpt: how fast checkpoints are written and how much training an asynchronous save
// stalls, against baselines measured in the same run on the same disk:
//
//   disk        sequential write of one file of the checkpoint's size (4 MiB writes, fsync): MB/s
//   sync save   save_checkpoint of the model's state (parameters, AdamW moments): MB/s and as a
//               fraction of the disk's rate
//   async save  training steps go on while the save is written (train/async_save.h); its stall is
//               the snapshot + the publication + whatever the steps during the write lost against
//               the mean step without a save (a median would count the steps' ordinary noise as
//               stall), as a fraction of the synchronous save's time
//               (target: under 10%)
//
// Single process; every figure is the median of --repeats.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace tripod::bench {

struct BenchCkptOptions {
  std::string config = "small";
  std::vector<std::string> overrides;
  int64_t batch = 4, seq_len = 64, repeats = 5;
  std::string dir;  // where to write (the disk measured); empty: a new folder in the system's temp dir
  bool keep = false;  // leave the checkpoints in DIR/ckpt (to verify them); else what was written goes
  std::string json_out, backend = "cpu";
};

void run_bench_ckpt(const BenchCkptOptions& options);

}  // namespace tripod::bench
