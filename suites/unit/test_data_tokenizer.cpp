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
    train_bpe_tokenizer(dir_ / "text.txt", dir_ / "bpe", kVocab);
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
  train_bpe_tokenizer(dir_ / "text.txt", dir_ / "again", kVocab);
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
    train_bpe_tokenizer(dir_ / "text.txt", dir_ / "small", 300);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find((dir_ / "text.txt").string()), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("ocabulary size"), std::string::npos) << e.what();
  }
  EXPECT_THROW(tokenizer_->decode(std::vector<int32_t>{kVocab}), Error);
  EXPECT_THROW(train_bpe_tokenizer(dir_ / "no_such.txt", dir_ / "x", 512), Error);
}

TEST(DataPrepare, EndToEndProducesShardsThatDecodeToTheInput) {
  const fs::path dir = fs::temp_directory_path() / ("tripod_prepare_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  const std::string text = generated_text();
  write_file(dir / "corpus.txt", text);

  PrepareOptions options;
  options.input = dir / "corpus.txt";
  options.out_dir = dir / "prepared";
  options.vocab_size = kVocab;
  options.val_fraction = 0.1;
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

  std::vector<int32_t> all(train.tokens(), train.tokens() + train.size());
  all.insert(all.end(), val.tokens(), val.tokens() + val.size());
  const Tokenizer tokenizer = Tokenizer::load(options.out_dir / "tokenizer.model");
  EXPECT_EQ(tokenizer.decode(all), text) << "the token stream must decode back to the exact input";
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
