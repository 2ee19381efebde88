#include "data/tokenizer.h"

#include <sentencepiece_processor.h>
#include <sentencepiece_trainer.h>

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

void train_bpe_tokenizer(const fs::path& text_file, const fs::path& model_prefix, int vocab_size) {
  check(fs::is_regular_file(text_file), "tokenizer training text ", text_file, " does not exist");
  check(vocab_size >= 257, "tokenizer for ", text_file, ": vocab_size ", vocab_size,
        " is too small (byte fallback alone needs 256 byte pieces plus <unk>)");
  const std::unordered_map<std::string, std::string> options = {
      {"input", text_file.string()},
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
      {"unk_id", "0"},
      {"bos_id", "-1"},
      {"eos_id", "-1"},
      {"pad_id", "-1"},
      {"input_sentence_size", std::to_string(kMaxTrainingSentences)},
      {"shuffle_input_sentence", "true"},
      {"max_sentence_length", "16384"},
      {"num_threads", "2"},
      {"minloglevel", "2"},  // warnings and errors only; errors also come back in the status
  };
  // The line sampling above draws from SentencePiece's global generator; fix it for determinism.
  sentencepiece::SetRandomGeneratorSeed(kTrainingSeed);
  const auto status = sentencepiece::SentencePieceTrainer::Train(options);
  TRIPOD_CHECK(status.ok(), "training the tokenizer on ", text_file, " (vocab_size ", vocab_size,
               ") failed: ", status.ToString());
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
