// BPE tokenizer round trips and `data prepare` end to end on a small generated text.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "core/error.h"
#include "data/prepare.h"
#include "data/token_dataset.h"
#include "data/tokenizer.h"

namespace tripod::data {
namespace {
namespace fs = std::filesystem;

constexpr int kVocab = 512;  // 256 byte pieces + <unk> + ~90 characters + merges

// ~200 KB of deterministic pseudo-prose: ASCII words, punctuation, accented and non-Latin words,
// blank lines and indentation.
std::string generated_text() {
  const std::vector<std::string> words = {
      "the", "and", "of", "to", "in", "that", "he", "shall", "unto", "for", "his", "a", "they",
      "be", "is", "him", "not", "them", "with", "all", "thou", "thy", "was", "which", "my", "LORD",
      "me", "said", "but", "ye", "their", "have", "will", "thee", "from", "as", "are", "when",
      "café", "naïve", "Ελληνικά", "日本語", "Zürich", "über", "42", "1999"};
  const std::vector<std::string> endings = {" ", " ", " ", ", ", "; ", ". ", ": ", "? ", "! "};
  std::string text;
  uint64_t state = 12345;
  auto next = [&state](uint64_t n) {
    state = state * 6364136223846793005ULL + 1442695040888963407ULL;
    return (state >> 33) % n;
  };
  while (text.size() < 200'000) {
    const int line_words = 3 + static_cast<int>(next(12));
    if (next(10) == 0) text += "    ";
    for (int w = 0; w < line_words; ++w) {
      std::string word = words[next(words.size())];
      if (w == 0 && word[0] >= 'a' && word[0] <= 'z') word[0] = static_cast<char>(word[0] - 'a' + 'A');
      text += word;
      text += w + 1 == line_words ? "." : endings[next(endings.size())];
    }
    text += next(8) == 0 ? "\n\n" : "\n";
  }
  return text;
}

void write_file(const fs::path& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary);
  out << text;
}

std::string read_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// One tokenizer trained once for the whole suite (training is the slow part).
class DataTokenizer : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = fs::temp_directory_path() / ("tripod_tokenizer_" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    write_file(dir_ / "text.txt", generated_text());
    train_bpe_tokenizer(generated_text(), dir_ / "text.txt", dir_ / "bpe", kVocab);
    tokenizer_ = new Tokenizer(Tokenizer::load(dir_ / "bpe.model"));
  }
  static void TearDownTestSuite() {
    delete tokenizer_;
    fs::remove_all(dir_);
  }
  static inline fs::path dir_;
  static inline const Tokenizer* tokenizer_ = nullptr;
};

TEST_F(DataTokenizer, HasTheRequestedVocabulary) { EXPECT_EQ(tokenizer_->vocab_size(), kVocab); }

TEST_F(DataTokenizer, RoundTripsTextNewlinesAndNonAscii) {
  for (const std::string text :
       {"The LORD said unto them, that café.\n", "line one\nline two\n\n  indented\ttab\n",
        "Ελληνικά 日本語 Zürich über naïve", "never seen: 🙂 ĳ \x01 \r\n", "\n", " ", "",
        "trailing spaces   \n\n\n"}) {
    const std::vector<int32_t> ids = tokenizer_->encode(text);
    for (int32_t id : ids) ASSERT_TRUE(id >= 0 && id < kVocab) << id;
    EXPECT_EQ(tokenizer_->decode(ids), text);
  }
}

TEST_F(DataTokenizer, CompressesTheTrainingText) {
  const std::string text = read_file(dir_ / "text.txt");
  const std::vector<int32_t> ids = tokenizer_->encode(text);
  EXPECT_EQ(tokenizer_->decode(ids), text);
  EXPECT_GT(static_cast<double>(text.size()) / static_cast<double>(ids.size()), 2.0);
}

TEST_F(DataTokenizer, TrainingIsDeterministic) {
  train_bpe_tokenizer(read_file(dir_ / "text.txt"), dir_ / "text.txt", dir_ / "again", kVocab);
  // Compare the learned pieces and scores: the .model file also records the output path.
  EXPECT_TRUE(read_file(dir_ / "again.vocab") == read_file(dir_ / "bpe.vocab"));
  const std::string text = read_file(dir_ / "text.txt");
  EXPECT_TRUE(Tokenizer::load(dir_ / "again.model").encode(text) == tokenizer_->encode(text));
}

TEST_F(DataTokenizer, ErrorsNameTheFile) {
  const fs::path missing = dir_ / "missing.model";
  try {
    Tokenizer::load(missing);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(missing.string()), std::string::npos) << e.what();
  }
  try {  // too small for 256 byte pieces + <unk> + every character of the text
    train_bpe_tokenizer(read_file(dir_ / "text.txt"), dir_ / "text.txt", dir_ / "small", 300);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find((dir_ / "text.txt").string()), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("holds more distinct characters than --vocab-size 300"), std::string::npos)
        << e.what();
  }
  EXPECT_THROW(tokenizer_->decode(std::vector<int32_t>{kVocab}), Error);
}

// A long line is cut before its last space within max_bytes, a stretch without one at a UTF-8
// character boundary; lines of up to max_bytes (newline not counted) stay whole, and the spans
// cover the text in order.
TEST(DataSentences, LongLinesAreCutBeforeASpaceOrAtACharacterBoundary) {
  const auto spans = [](std::string_view text, std::size_t max_bytes) {
    std::vector<std::string> out;
    for (std::size_t begin = 0; begin < text.size();) {
      const std::size_t end = sentence_end(text, begin, max_bytes);
      EXPECT_GT(end, begin);
      out.emplace_back(text.substr(begin, end - begin));
      begin = end;
    }
    return out;
  };
  using V = std::vector<std::string>;
  EXPECT_EQ(spans("ab cd\nef\n\ngh", 5), (V{"ab cd\n", "ef\n", "\n", "gh"}));
  EXPECT_EQ(spans("ab cd ef gh\n", 5), (V{"ab cd", " ef", " gh\n"}));
  EXPECT_EQ(spans("abcde fgh", 5), (V{"abcde", " fgh"})) << "a space just past max_bytes ends a whole piece";
  EXPECT_EQ(spans("abcdefgh ij", 5), (V{"abcde", "fgh", " ij"})) << "no space: cut at max_bytes";
  EXPECT_EQ(spans(" abcdefg", 5), (V{" abcd", "efg"})) << "a space at the start is no cut";
  // "é" is two bytes (C3 A9), "日" three: never cut inside one
  EXPECT_EQ(spans("abcdé", 5), (V{"abcd", "é"}));
  EXPECT_EQ(spans("ab日本", 5), (V{"ab日", "本"}));
  EXPECT_EQ(spans("", 5), V{});
  // A line of 1 MB without a newline, cut in linear time: a piece every max_bytes at most.
  const std::string line(1 << 20, 'x');
  std::size_t pieces = 0;
  for (std::size_t begin = 0; begin < line.size(); ++pieces) begin = sentence_end(line, begin, 4096);
  EXPECT_EQ(pieces, 256u);
}

// Encoding a long line's pieces one at a time gives the tokens of the whole line: a learned piece
// never holds a space inside, so no merge spans a cut before one.
TEST_F(DataTokenizer, ALongLineEncodedInPiecesGivesTheTokensOfTheWholeLine) {
  std::string line = read_file(dir_ / "text.txt").substr(0, 20'000);
  for (char& c : line)
    if (c == '\n') c = ' ';
  std::vector<int32_t> in_pieces;
  std::size_t pieces = 0;
  for (std::size_t begin = 0; begin < line.size(); ++pieces) {
    const std::size_t end = sentence_end(line, begin, 200);
    const std::vector<int32_t> ids = tokenizer_->encode(std::string_view(line).substr(begin, end - begin));
    in_pieces.insert(in_pieces.end(), ids.begin(), ids.end());
    begin = end;
  }
  EXPECT_GT(pieces, 100u);
  EXPECT_EQ(in_pieces, tokenizer_->encode(line));
}

// `data prepare` of `text`, written to DIR/corpus.txt, into DIR/prepared (vocabulary kVocab, a tenth
// held out).
PrepareOptions prepare_options(const fs::path& dir, const std::string& text) {
  write_file(dir / "corpus.txt", text);
  PrepareOptions options;
  options.input = dir / "corpus.txt";
  options.out_dir = dir / "prepared";
  options.vocab_size = kVocab;
  options.val_fraction = 0.1;
  return options;
}

// A prepared folder's whole token stream, training then validation tokens, decoded.
std::string decoded_tokens(const fs::path& prepared) {
  const TokenDataset train = TokenDataset::open(prepared, "train");
  const TokenDataset val = TokenDataset::open(prepared, "val");
  std::vector<int32_t> all(train.tokens(), train.tokens() + train.size());
  all.insert(all.end(), val.tokens(), val.tokens() + val.size());
  return Tokenizer::load(prepared / "tokenizer.model").decode(all);
}

// Lines longer than SentencePiece's max_sentence_length (16 KiB) take part in the tokenizer's
// training: a corpus of one line without a newline (text8's form), after a few short lines of
// three letters, prepares a tokenizer that compresses it. (It failed with SentencePiece's
// "!sentences_.empty()" where every line was long, and trained on the short lines alone where some
// were not: then "Vocabulary size too high" here.)
TEST(DataPrepare, ACorpusOfLongLinesTrainsItsTokenizerOnThem) {
  const fs::path dir = fs::temp_directory_path() / ("tripod_prepare_long_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  std::string text;
  for (int i = 0; i < 20; ++i) text += "x y z\n";
  std::string line = generated_text();
  for (char& c : line)
    if (c == '\n') c = ' ';
  ASSERT_GT(line.size(), 10 * kMaxSentenceBytes);
  text += line;  // no newline at the end
  const PrepareOptions options = prepare_options(dir, text);
  const PrepareReport report = prepare_text_corpus(options);
  EXPECT_EQ(report.vocab_size, kVocab);
  EXPECT_GT(report.bytes_per_token, 2.0) << "the tokenizer learned the long line's words";
  EXPECT_EQ(decoded_tokens(options.out_dir), text);
  fs::remove_all(dir);
}

TEST(DataPrepare, EndToEndProducesShardsThatDecodeToTheInput) {
  const fs::path dir = fs::temp_directory_path() / ("tripod_prepare_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  const std::string text = generated_text();
  PrepareOptions options = prepare_options(dir, text);
  options.shard_tokens = 20'000;
  const PrepareReport report = prepare_text_corpus(options);

  EXPECT_EQ(report.vocab_size, kVocab);
  const TokenDataset train = TokenDataset::open(options.out_dir, "train");
  const TokenDataset val = TokenDataset::open(options.out_dir, "val");
  EXPECT_EQ(train.size(), report.train_tokens);
  EXPECT_EQ(val.size(), report.val_tokens);
  EXPECT_NEAR(static_cast<double>(val.size()) / static_cast<double>(train.size() + val.size()), 0.1, 1e-3);
  EXPECT_GE(train.meta()["splits"]["train"].size(), 2u) << "shard_tokens should split the train data";
  EXPECT_EQ(train.meta()["tokenizer"], "tokenizer.model");
  EXPECT_NEAR(report.bytes_per_token,
              static_cast<double>(text.size()) / static_cast<double>(train.size() + val.size()), 1e-9);

  EXPECT_EQ(decoded_tokens(options.out_dir), text) << "the token stream must decode back to the exact input";
  fs::remove_all(dir);
}

TEST(DataPrepare, RejectsMissingOrEmptyInputAndTinyVocabulary) {
  const fs::path dir = fs::temp_directory_path() / ("tripod_prepare_bad_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  PrepareOptions options;
  options.out_dir = dir / "out";
  options.input = dir / "absent.txt";
  EXPECT_THROW(prepare_text_corpus(options), Error);
  write_file(dir / "blank.txt", "  \n\n");
  options.input = dir / "blank.txt";
  try {
    prepare_text_corpus(options);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("empty"), std::string::npos) << e.what();
  }
  write_file(dir / "ok.txt", "some text\n");
  options.input = dir / "ok.txt";
  options.vocab_size = 100;
  EXPECT_THROW(prepare_text_corpus(options), Error);
  EXPECT_FALSE(fs::exists(options.out_dir / "meta.json"));
  fs::remove_all(dir);
}

}  // namespace
}  // namespace tripod::data
