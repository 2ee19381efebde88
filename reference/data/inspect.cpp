#include "data/inspect.h"

#include <algorithm>

#include "core/error.h"
#include "data/shard_format.h"
#include "data/token_dataset.h"
#include "data/tokenizer.h"

namespace tripod::data {

InspectReport inspect_dataset(const std::filesystem::path& dir, std::size_t preview_tokens) {
  InspectReport report;
  report.meta = TokenDataset::read_meta(dir);
  const auto meta_vocab = report.meta["vocab_size"].get<int64_t>();
  // read_shard checks size, checksum and token range; then every count meta.json states is held
  // against the shards (an edited meta.json passed inspection and failed only in training).
  for (const auto& [split, shards] : report.meta["splits"].items()) {
    SplitReport r{split, shards.size(), 0};
    for (const auto& name : shards) {
      ShardHeader header;
      read_shard(dir / name.get<std::string>(), &header);
      check_shard_vocab(dir, dir / name.get<std::string>(), header.vocab_size, meta_vocab);
      r.tokens += header.token_count;
    }
    const std::string key = split + "_tokens";
    if (report.meta.contains(key))
      check(report.meta[key].is_number_integer() && report.meta[key].get<int64_t>() == static_cast<int64_t>(r.tokens),
            dir / "meta.json", ": ", key, " is ", report.meta[key].dump(), " but the split's shards hold ", r.tokens,
            " tokens");
    report.splits.push_back(r);
  }
  const auto& splits = report.meta["splits"];
  // `tripod train` refuses a directory without training tokens: inspect said "checksums OK".
  check(splits.contains("train") && !splits["train"].empty(), dir / "meta.json",
        ": no training split (\"splits\": {\"train\": [...]}): tripod train cannot use this directory");
  // Read, not indexed: a missing "tokenizer" was printed as null, a key meta.json does not have.
  const nlohmann::json tokenizer_name = report.meta.value("tokenizer", nlohmann::json());
  if (tokenizer_name.is_string()) {
    const std::filesystem::path tokenizer_file = dir / tokenizer_name.get<std::string>();
    const auto tokenizer = Tokenizer::load(tokenizer_file);
    check(tokenizer.vocab_size() == meta_vocab, dir / tokenizer_name.get<std::string>(), " has ",
          tokenizer.vocab_size(), " pieces but ", dir / "meta.json", " says vocab_size ", meta_vocab,
          " (a tokenizer from another preparation?)");
    check_tokenizer_identity(tokenizer_file, report.meta);  // same size, another preparation's
    const auto first_shard = read_shard(dir / splits["train"][0].get<std::string>());
    report.preview_tokens = std::min(preview_tokens, first_shard.size());
    report.preview = tokenizer.decode({first_shard.data(), report.preview_tokens});
  }
  return report;
}

}  // namespace tripod::data
