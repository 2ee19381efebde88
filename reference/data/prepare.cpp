#include "data/prepare.h"

#include <cmath>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <span>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/digest.h"
#include "core/error.h"
#include "data/dataset_writer_lock.h"
#include "data/token_dataset.h"
#include "data/tokenizer.h"
#include "data/utf8_check.h"

namespace tripod::data {
namespace fs = std::filesystem;

namespace {

std::string read_text_file(const fs::path& path) {
  check(fs::is_regular_file(path), "input text ", path, " does not exist or is not a file");
  std::ifstream in(path, std::ios::binary);
  check(in.good(), "input text ", path, ": cannot open for reading");
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  check(!in.bad(), "input text ", path, ": read failed");
  if (const auto bad = first_invalid_utf8(text))
    fail("input text ", path, " is not UTF-8 at ", describe_text_offset(text, *bad),
         ": convert it first (e.g. iconv -f latin1 -t utf-8); its tokens would not decode back to it");
  if (const auto marker = first_space_marker(text))
    fail("input text ", path, " holds U+2581 (\xE2\x96\x81, SentencePiece's mark for a space) at ",
         describe_text_offset(text, *marker), ": its tokens would decode it as a space; replace it first (e.g. "
         "sed 's/\xE2\x96\x81/_/g')");
  return text;
}

// Encodes sentence by sentence (tokenizer.h's sentence_end: each line with its newline, a long one
// in pieces cut before a space), so the token stream decodes back to the exact text (byte fallback
// encodes "\n" as a byte piece, and no learned piece spans a newline or holds a space inside, so
// this equals encoding the whole text at once, but for a stretch of 16 KiB without a space) while
// each SentencePiece call stays small.
std::vector<int32_t> encode_by_sentences(const Tokenizer& tokenizer, const std::string& text) {
  std::vector<int32_t> tokens;
  tokens.reserve(text.size() / 3);
  for (std::size_t begin = 0; begin < text.size();) {
    const std::size_t end = sentence_end(text, begin);
    const std::vector<int32_t> sentence = tokenizer.encode(std::string_view(text).substr(begin, end - begin));
    tokens.insert(tokens.end(), sentence.begin(), sentence.end());
    begin = end;
  }
  return tokens;
}

// A tokenizer trained under a hidden name in the output directory (which exists: the writer's lock
// made it), moved to tokenizer.{model,vocab} by publish(); removed if the preparation fails before that.
struct StagedTokenizer {
  fs::path dir, prefix;
  explicit StagedTokenizer(const fs::path& out_dir) : dir(out_dir), prefix(out_dir / ".tokenizer-staging") {}
  StagedTokenizer(const StagedTokenizer&) = delete;
  StagedTokenizer& operator=(const StagedTokenizer&) = delete;
  ~StagedTokenizer() {
    std::error_code ec;
    for (const char* ext : {".model", ".vocab"}) fs::remove(fs::path(prefix.string() + ext), ec);
  }
  fs::path model() const { return prefix.string() + ".model"; }
  void publish() const {
    for (const char* ext : {".model", ".vocab"}) {
      std::error_code ec;
      fs::rename(prefix.string() + ext, dir / (std::string("tokenizer") + ext), ec);
      check(!ec, "cannot move the new tokenizer", ext, " into ", dir, ": ", ec.message());
    }
  }
};

}  // namespace

PrepareReport prepare_text_corpus(const PrepareOptions& options) {
  check(!options.out_dir.empty(), "data prepare: no output directory given");
  check(options.vocab_size >= 257, "data prepare for ", options.input, ": vocab_size ", options.vocab_size,
        " is too small (the byte-fallback tokenizer needs 256 byte pieces, <unk> and the text's characters)");
  check(options.val_fraction >= 0 && options.val_fraction < 1, "data prepare for ", options.input,
        ": val_fraction must be in [0, 1) (got ", options.val_fraction, ")");
  check(options.shard_tokens >= 1, "data prepare for ", options.input, ": shard_tokens must be positive (got ",
        options.shard_tokens, ")");
  check_dataset_folder(options.out_dir, "data prepare");
  const std::string text = read_text_file(options.input);
  check(text.find_first_not_of(" \t\r\n") != std::string::npos, "input text ", options.input,
        " is empty (no non-whitespace characters)");
  const bool own_val = !options.val_input.empty();
  // The training text as its own held-out text: every "val loss" would be measured on training data.
  std::error_code same_error;
  TRIPOD_CHECK(!own_val || !std::filesystem::equivalent(options.input, options.val_input, same_error),
               "data prepare: --val-input ", options.val_input, " is the training text ", options.input,
               " itself: the validation loss would be measured on training data");
  const std::string val_text = own_val ? read_text_file(options.val_input) : std::string();
  check(!own_val || val_text.find_first_not_of(" \t\r\n") != std::string::npos, "held-out text ",
        options.val_input, " is empty (no non-whitespace characters)");
  check(!own_val || val_text != text, "data prepare: --val-input ", options.val_input, " holds the same text as ",
        options.input, ": the validation loss would be measured on training data");

  // What can fail on the input (training the tokenizer, encoding) runs before the directory's
  // dataset is touched: a failed re-preparation leaves the previous one usable. A folder made here
  // and left with nothing goes (the lock's destructor), after the staged tokenizer.
  const DatasetWriterLock lock(options.out_dir, "data prepare");
  const StagedTokenizer staged(options.out_dir);
  train_bpe_tokenizer(text, options.input, staged.prefix, options.vocab_size);
  const Tokenizer tokenizer = Tokenizer::load(staged.model());
  std::vector<int32_t> tokens = encode_by_sentences(tokenizer, text);
  const std::vector<int32_t> val_tokens = own_val ? encode_by_sentences(tokenizer, val_text) : std::vector<int32_t>();
  const auto total = static_cast<int64_t>(tokens.size() + val_tokens.size());

  PrepareReport report;
  report.vocab_size = tokenizer.vocab_size();
  report.val_tokens = own_val ? static_cast<int64_t>(val_tokens.size())
                              : std::llround(static_cast<double>(total) * options.val_fraction);
  report.train_tokens = total - report.val_tokens;
  // (with --val-input no fraction is taken: the training text alone is too short)
  check(own_val || report.train_tokens >= 2, "data prepare for ", options.input, ": val_fraction ",
        options.val_fraction, " of ", total, " tokens leaves ", report.train_tokens,
        " for training (at least 2: a token and its successor)");
  check(!own_val || report.train_tokens >= 2, "data prepare: the training text ", options.input, " gives ",
        report.train_tokens, " token", report.train_tokens == 1 ? "" : "s", " (at least 2: a token and its successor)");
  // A fraction so small that it rounds to no held-out tokens made a dataset without validation,
  // silently ("val tokens 0").
  check(!own_val || report.val_tokens >= 2, "data prepare: the held-out text ", options.val_input, " gives ",
        report.val_tokens, " token", report.val_tokens == 1 ? "" : "s", " (at least 2: a token and its successor)");
  check(own_val || options.val_fraction == 0 || report.val_tokens >= 2, "data prepare for ", options.input,
        ": val_fraction ", options.val_fraction, " of ", total, " tokens gives ", report.val_tokens,
        " validation tokens (at least 2; or val_fraction 0 for none)");
  invalidate_dataset(options.out_dir);
  staged.publish();
  report.bytes_per_token = static_cast<double>(text.size() + val_text.size()) / static_cast<double>(total);

  const std::span<const int32_t> stream(tokens);
  const auto vocab = static_cast<uint64_t>(report.vocab_size);
  nlohmann::json splits;
  splits["train"] = write_split_shards(options.out_dir, "train", stream.first(report.train_tokens), vocab,
                                       options.shard_tokens);
  splits["val"] = write_split_shards(options.out_dir, "val",
                                     own_val ? std::span<const int32_t>(val_tokens) : stream.last(report.val_tokens),
                                     vocab, options.shard_tokens);
  write_dataset_meta(options.out_dir, {{"format", kDatasetFormat},
                                       {"version", kDatasetVersion},
                                       {"vocab_size", report.vocab_size},
                                       {"tokenizer", "tokenizer.model"},
                                       // which tokenizer: another preparation's of the same vocabulary
                                       // decoded the ids into other text, and passed every check
                                       {"tokenizer_xxh64", file_xxh64(options.out_dir / "tokenizer.model")},
                                       {"splits", splits},
                                       {"source", fs::absolute(options.input).string()},
                                       {"input_bytes", text.size() + val_text.size()},
                                       {"bytes_per_token", report.bytes_per_token},
                                       {"train_tokens", report.train_tokens},
                                       {"val_tokens", report.val_tokens},
                                       {"val_fraction", own_val ? nlohmann::json(nullptr)
                                                                : nlohmann::json(options.val_fraction)},
                                       {"val_source", own_val ? fs::absolute(options.val_input).string()
                                                              : std::string("the last val_fraction of the input")}});
  return report;
}

}  // namespace tripod::data
