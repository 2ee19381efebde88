#include "ckpt/checkpoint_verify.h"

#include <algorithm>
#include <cstdio>
#include <map>
#include <sstream>

#include "ckpt/checkpoint_reader.h"
#include "ckpt/checkpoint_root.h"
#include "ckpt/durable_file.h"
#include "ckpt/shard_file.h"
#include "core/digest.h"
#include "core/error.h"

namespace tripod::ckpt {
namespace fs = std::filesystem;

namespace {

// Every element of [0, numel) covered exactly once by the runs of (tensor, kind)'s blocks.
void check_coverage(const Manifest& m, std::vector<std::string>& problems) {
  struct Span { int64_t begin, end; std::string file; };
  std::map<std::pair<std::string, std::string>, std::vector<Span>> spans;
  for (const ShardFile& f : m.files)
    for (const Block& b : f.blocks)
      for (int64_t k = 0; k < b.count; ++k)
        spans[{b.tensor, b.kind}].push_back({b.start + k * b.stride, b.start + k * b.stride + b.length, f.name});
  for (const auto& [tensor, shape] : m.tensors)
    for (const char* kind : {"param", "adam_m", "adam_v"}) {
      auto& list = spans[{tensor, kind}];
      std::sort(list.begin(), list.end(), [](const Span& a, const Span& b) { return a.begin < b.begin; });
      int64_t at = 0;
      const int64_t numel = shape_numel(shape);
      for (const Span& s : list) {
        if (s.begin > at) {
          problems.push_back(str_cat("tensor '", tensor, "' (", kind, "): elements ", at, "..", s.begin - 1,
                                     " are written by no rank"));
        } else if (s.begin < at) {
          problems.push_back(str_cat("tensor '", tensor, "' (", kind, "): elements ", s.begin, "..",
                                     std::min(at, s.end) - 1, " are written twice (again in ", s.file, ")"));
        }
        at = std::max(at, s.end);
      }
      if (at < numel)
        problems.push_back(str_cat("tensor '", tensor, "' (", kind, "): elements ", at, "..", numel - 1,
                                   " are written by no rank"));
    }
}

}  // namespace

VerifyReport verify_checkpoint(const fs::path& path) {
  VerifyReport report;
  try {
    report.dir = resolve_checkpoint(path);
  } catch (const Error& e) {
    report.dir = path;
    report.problems.push_back(e.what());
    return report;
  }
  // A root (or ROOT/latest) whose `latest` cannot be followed: Tripod falls back to the newest
  // complete step, but the file was edited or damaged, and that is what verify is for.
  if (std::string problem = latest_pointer_problem(path); !problem.empty()) report.problems.push_back(problem);
  std::unique_ptr<CheckpointReader> reader;
  try {
    reader = std::make_unique<CheckpointReader>(report.dir);
  } catch (const Error& e) {
    report.problems.push_back(e.what());
    return report;
  }
  const Manifest& m = reader->manifest();
  report.tensors = static_cast<int>(m.tensors.size());
  for (std::size_t f = 0; f < m.files.size(); ++f) {
    const ShardFile& file = m.files[f];
    const fs::path p = report.dir / file.name;
    ++report.files;
    report.bytes += file.bytes;
    try {
      TRIPOD_CHECK(fs::exists(p), "shard file ", p.string(), " (rank ", file.rank, "'s) is missing");
      const std::string actual = file_xxh64(p);
      bool whole_ok = actual == file.xxh64;
      for (std::size_t k = 0; k < file.blocks.size(); ++k) {
        ++report.blocks;
        try {
          reader->read_block(f, k);  // also checks the header, size and the block's checksum
        } catch (const Error& e) {
          report.problems.push_back(e.what());
          whole_ok = true;  // the block's own message says more than the file's checksum
          if (std::string(e.what()).find("header") != std::string::npos ||
              std::string(e.what()).find("bytes but the manifest") != std::string::npos)
            break;  // every other block of this file would say the same
        }
      }
      if (file.blocks.empty()) reader->open_file(f);  // the header and size, at least
      if (!whole_ok)
        report.problems.push_back(str_cat("shard file ", p.string(), " is damaged outside its blocks (header?): checksum ",
                                          actual, " but the manifest records ", file.xxh64));
    } catch (const Error& e) {
      report.problems.push_back(e.what());
    }
  }
  check_coverage(m, report.problems);
  return report;
}

std::string describe_checkpoint(const fs::path& path) {
  const fs::path dir = resolve_checkpoint(path);
  CheckpointReader reader(dir);
  const Manifest& m = reader.manifest();
  std::ostringstream out;
  int64_t params = 0;
  for (const auto& [name, shape] : m.tensors) params += shape_numel(shape);
  uint64_t bytes = 0;
  for (const ShardFile& f : m.files) bytes += f.bytes;
  out << "checkpoint " << dir.string() << "\n"
      << "  step " << m.step
      << (m.updates == m.step ? "" : " (" + std::to_string(m.updates) + " updates applied, the rest skipped)")
      << ", format version " << m.version << ", " << dtype_name(m.dtype) << "\n"
      << "  saved by " << m.layout << " (" << m.world_size << (m.world_size == 1 ? " rank" : " ranks") << ")\n"
      << "  data: next sample " << m.data.next_sample << ", seed " << m.data.seed << ", batch " << m.data.batch_size
      << " x " << m.data.seq_len << " tokens"
      << (m.data.tokens_trained < 0 ? "" : ", " + std::to_string(m.data.tokens_trained) + " tokens trained")
      << (m.data.train_tokens_xxh64.empty() ? "" : ", training tokens XXH64 " + m.data.train_tokens_xxh64) << "\n"
      << "  model: " << m.tensors.size() << " tensors, " << params << " parameters";
  if (m.config.contains("model")) out << ", " << m.config["model"].dump();
  out << "\n  files: " << m.files.size() << ", " << bytes << " bytes\n";
  for (const ShardFile& f : m.files)
    out << "    " << f.name << "  rank " << f.rank << "  " << f.bytes << " bytes  " << f.blocks.size() << " blocks  xxh64 "
        << f.xxh64 << "\n";
  return out.str();
}

}  // namespace tripod::ckpt
