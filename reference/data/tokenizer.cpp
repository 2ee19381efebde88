#include "data/tokenizer.h"

#include <sentencepiece_processor.h>
#include <sentencepiece_trainer.h>

#include <regex>
#include <string>
#include <unordered_map>

#include "core/error.h"

namespace tripod::data {
namespace fs = std::filesystem;

namespace {
// SentencePiece samples at most this many lines for training; more only slows training down.
constexpr int kMaxTrainingSentences = 4'000'000;
constexpr unsigned kTrainingSeed = 1234;
}  // namespace

std::size_t sentence_end(std::string_view text, std::size_t begin, std::size_t max_bytes) {
  // Only the next max_bytes + 1 bytes are looked at: a line of 100 MB is cut in linear time.
  const std::string_view window = text.substr(begin, max_bytes + 1);
  const std::size_t newline = window.find('\n');
  if (newline != std::string_view::npos) return begin + newline + 1;
  if (window.size() <= max_bytes) return text.size();  // the last line, without a newline
  // A line longer than max_bytes (a space at max_bytes itself ends a whole piece)
  const std::size_t space = window.rfind(' ');
  if (space != std::string_view::npos && space > 0) return begin + space;
  std::size_t cut = begin + max_bytes;
  while (cut > begin && (static_cast<unsigned char>(text[cut]) & 0xC0) == 0x80) --cut;  // a continuation byte
  return cut > begin ? cut : begin + max_bytes;
}

namespace {

// The text's sentences (sentence_end), each without its newline, for SentencePiece's trainer: what
// it would read from a file of them, one a line, with no copy of the text made.
class TextSentences : public sentencepiece::SentenceIterator {
 public:
  explicit TextSentences(std::string_view text) : text_(text) { load(); }
  bool done() const override { return done_; }
  void Next() override { load(); }
  const std::string& value() const override { return value_; }
  sentencepiece::util::Status status() const override { return {}; }

 private:
  void load() {
    done_ = next_ >= text_.size();
    if (done_) return;
    const std::size_t end = sentence_end(text_, next_);
    std::string_view sentence = text_.substr(next_, end - next_);
    if (!sentence.empty() && sentence.back() == '\n') sentence.remove_suffix(1);
    value_.assign(sentence);
    next_ = end;
  }
  std::string_view text_;
  std::size_t next_ = 0;
  std::string value_;
  bool done_ = false;
};

}  // namespace

void train_bpe_tokenizer(std::string_view text, const fs::path& source, const fs::path& model_prefix,
                         int vocab_size) {
  check(vocab_size >= 257, "tokenizer for ", source, ": vocab_size ", vocab_size,
        " is too small (byte fallback alone needs 256 byte pieces plus <unk>)");
  const std::unordered_map<std::string, std::string> options = {
      {"model_prefix", model_prefix.string()},
      {"model_type", "bpe"},
      {"vocab_size", std::to_string(vocab_size)},
      {"character_coverage", "1.0"},
      {"byte_fallback", "true"},
      // Exact round trips: keep the text as it is (no NFKC, no whitespace folding, no "▁" prefix
      // on every line, which would decode to a space after each newline).
      {"normalization_rule_name", "identity"},
      {"remove_extra_whitespaces", "false"},
      {"add_dummy_prefix", "false"},
      // split_by_whitespace keeps its default (true): a piece begins at a space ("▁") and holds
      // none inside, which is why sentence_end may cut a long line before any space.
      {"unk_id", "0"},
      {"bos_id", "-1"},
      {"eos_id", "-1"},
      {"pad_id", "-1"},
      {"input_sentence_size", std::to_string(kMaxTrainingSentences)},
      {"shuffle_input_sentence", "true"},
      {"max_sentence_length", std::to_string(kMaxSentenceBytes)},
      {"num_threads", "2"},
      {"minloglevel", "2"},  // warnings and errors only; errors also come back in the status
  };
  // The line sampling above draws from SentencePiece's global generator; fix it for determinism.
  sentencepiece::SetRandomGeneratorSeed(kTrainingSeed);
  TextSentences sentences(text);
  const auto status = sentencepiece::SentencePieceTrainer::Train(options, &sentences);
  if (status.ok()) return;
  // SentencePiece's own advice names its option --character_coverage, which `data prepare` does not
  // have: it keeps every character (coverage 1.0), so the way out is a larger --vocab-size.
  std::smatch needed;
  const std::string message = status.ToString();
  static const std::regex too_small(R"(smaller than required_chars\. \d+ vs (\d+))");
  if (std::regex_search(message, needed, too_small))
    fail("training the tokenizer on ", source, " failed: its text holds more distinct characters than --vocab-size ",
         vocab_size, " can give a piece each (every character is kept, so that the tokens decode to the exact text): "
         "give --vocab-size ", needed[1].str(), " or more (the characters, 256 byte pieces and <unk>)");
  // And too large: the text cannot give that many pieces (SentencePiece's internal error, as it was).
  static const std::regex too_large(R"(Vocabulary size too high \(\d+\)\. Please set it to a value <= (\d+))");
  if (std::regex_search(message, needed, too_large))
    fail("training the tokenizer on ", source, " failed: its text supports at most --vocab-size ", needed[1].str(),
         " (asked: ", vocab_size, "); give a smaller one, or more text");
  fail("training the tokenizer on ", source, " (vocab_size ", vocab_size, ") failed: ", message);
}

struct Tokenizer::Impl {
  sentencepiece::SentencePieceProcessor processor;
  fs::path model_file;
};

Tokenizer::Tokenizer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Tokenizer::Tokenizer(Tokenizer&&) noexcept = default;
Tokenizer& Tokenizer::operator=(Tokenizer&&) noexcept = default;
Tokenizer::~Tokenizer() = default;

Tokenizer Tokenizer::load(const fs::path& model_file) {
  check(fs::is_regular_file(model_file), "tokenizer model ", model_file, " does not exist");
  auto impl = std::make_unique<Impl>();
  impl->model_file = model_file;
  const auto status = impl->processor.Load(model_file.string());
  TRIPOD_CHECK(status.ok(), "cannot load tokenizer model ", model_file, ": ", status.ToString());
  return Tokenizer(std::move(impl));
}

std::vector<int32_t> Tokenizer::encode(std::string_view text) const {
  std::vector<int> ids;
  const auto status = impl_->processor.Encode(text, &ids);
  TRIPOD_CHECK(status.ok(), "tokenizer ", impl_->model_file, ": encode failed: ", status.ToString());
  return {ids.begin(), ids.end()};
}

std::string Tokenizer::decode(std::span<const int32_t> ids) const {
  const int vocab = vocab_size();
  for (std::size_t i = 0; i < ids.size(); ++i)
    TRIPOD_CHECK(ids[i] >= 0 && ids[i] < vocab, "tokenizer ", impl_->model_file, ": cannot decode id ", ids[i],
                 " at position ", i, " (vocab_size ", vocab, ")");
  std::string text;
  const auto status = impl_->processor.Decode(std::vector<int>(ids.begin(), ids.end()), &text);
  TRIPOD_CHECK(status.ok(), "tokenizer ", impl_->model_file, ": decode failed: ", status.ToString());
  return text;
}

int Tokenizer::vocab_size() const { return impl_->processor.GetPieceSize(); }

const fs::path& Tokenizer::model_file() const { return impl_->model_file; }

}  // namespace tripod::data
