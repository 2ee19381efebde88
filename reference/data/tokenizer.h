// Byte-level BPE tokenizer (SentencePiece). Models are trained so that decode(encode(text)) == text
// for any UTF-8 or binary input: identity normalisation, no dummy prefix, no whitespace folding,
// and byte fallback so that newlines and unseen characters become byte pieces, never <unk>.
#pragma once
#include <cstdint>
#include <filesystem>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace tripod::data {

// Trains a BPE model on `text_file` (one sentence per line) and writes model_prefix + ".model"
// and ".vocab". Deterministic for a given file and vocab_size.
void train_bpe_tokenizer(const std::filesystem::path& text_file, const std::filesystem::path& model_prefix,
                         int vocab_size);

class Tokenizer {
 public:
  static Tokenizer load(const std::filesystem::path& model_file);
  Tokenizer(Tokenizer&&) noexcept;
  Tokenizer& operator=(Tokenizer&&) noexcept;
  ~Tokenizer();

  std::vector<int32_t> encode(std::string_view text) const;
  std::string decode(std::span<const int32_t> ids) const;
  int vocab_size() const;
  const std::filesystem::path& model_file() const;

 private:
  struct Impl;  // holds the sentencepiece::SentencePieceProcessor
  explicit Tokenizer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace tripod::data
