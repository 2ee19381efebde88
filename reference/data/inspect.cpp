#include "data/inspect.h"

#include <algorithm>

#include "data/shard_format.h"
#include "data/token_dataset.h"
#include "data/tokenizer.h"

namespace tripod::data {

InspectReport inspect_dataset(const std::filesystem::path& dir, std::size_t preview_tokens) {
  InspectReport report;
  report.meta = TokenDataset::read_meta(dir);
  // read_shard checks size, checksum and token range.
  for (const auto& [split, shards] : report.meta["splits"].items()) {
    SplitReport r{split, shards.size(), 0};
    for (const auto& name : shards) {
      ShardHeader header;
      read_shard(dir / name.get<std::string>(), &header);
      r.tokens += header.token_count;
    }
    report.splits.push_back(r);
  }
  const auto& splits = report.meta["splits"];
  if (report.meta["tokenizer"].is_string() && splits.contains("train") && !splits["train"].empty()) {
    const auto tokenizer = Tokenizer::load(dir / report.meta["tokenizer"].get<std::string>());
    const auto first_shard = read_shard(dir / splits["train"][0].get<std::string>());
    report.preview_tokens = std::min(preview_tokens, first_shard.size());
    report.preview = tokenizer.decode({first_shard.data(), report.preview_tokens});
  }
  return report;
}

}  // namespace tripod::data
