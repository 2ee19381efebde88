// Byte-level BPE tokenizer (SentencePiece). Models are trained so that decode(encode(text)) == text
// for any UTF-8 or binary input: identity normalisation, no dummy prefix, no whitespace folding,
// and byte fallback so that newlines and unseen characters become byte pieces, never <unk>.
#pragma once
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace tripod::data {

// The longest sentence SentencePiece trains on (its max_sentence_length): it leaves longer lines out
// without a word, so a corpus of long lines (one document per line; text8, one line of 100 MB)
// trained the tokenizer on its few short lines, or failed with "sentences_.empty()".
inline constexpr std::size_t kMaxSentenceBytes = 16384;

// The end of the sentence that starts at `begin` of `text`: the end of its line, newline included,
// where the line has at most max_bytes before it; else the last space within max_bytes, cut before
// it (a learned piece begins at a space and never holds one inside, so cutting there changes no
// token: see train_bpe_tokenizer), or, in a stretch of max_bytes without a space, the last UTF-8
// character boundary. Prepare trains on these sentences and encodes them one at a time.
std::size_t sentence_end(std::string_view text, std::size_t begin, std::size_t max_bytes = kMaxSentenceBytes);

// Trains a BPE model on `text`, each of its sentences (sentence_end) without its newline one
// training sentence, and writes model_prefix + ".model" and ".vocab". Deterministic for a given
// text and vocab_size. `source` names the text in errors.
void train_bpe_tokenizer(std::string_view text, const std::filesystem::path& source,
                         const std::filesystem::path& model_prefix, int vocab_size);

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
