// Synthetic Markov corpus: the entropy rate is exact, and generated streams have that entropy.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <string>
#include <vector>

#include "core/error.h"
#include "data/synthetic_corpus.h"
#include "data/token_dataset.h"

namespace tripod::data {
namespace {
namespace fs = std::filesystem;

double binary_entropy(double p) { return -p * std::log(p) - (1 - p) * std::log(1 - p); }

double distribution_entropy(const std::vector<double>& p) {
  double h = 0;
  for (double q : p) h -= q * std::log(q);
  return h;
}

// Mean negative log-likelihood of `tokens` under the chain, and its standard error.
std::pair<double, double> mean_nll(const MarkovChain& chain, const std::vector<int32_t>& tokens) {
  int64_t context = 0;
  for (int i = 0; i < chain.order; ++i) context = chain.next_context(context, tokens[i]);
  double sum = 0, sum_sq = 0;
  const auto n = static_cast<double>(tokens.size() - chain.order);
  for (std::size_t i = chain.order; i < tokens.size(); ++i) {
    const double nll = -std::log(chain.transition[context * chain.vocab_size + tokens[i]]);
    sum += nll;
    sum_sq += nll * nll;
    context = chain.next_context(context, tokens[i]);
  }
  const double mean = sum / n;
  return {mean, std::sqrt((sum_sq / n - mean * mean) / n)};
}

TEST(DataSyntheticCorpus, TwoStateChainMatchesTheClosedForm) {
  // P(0->1) = a, P(1->0) = b: pi = (b, a) / (a + b), H = pi0 h(a) + pi1 h(b).
  const double a = 0.1, b = 0.3;
  const MarkovChain chain{2, 1, {1 - a, a, b, 1 - b}};
  const std::vector<double> pi = markov_stationary_distribution(chain);
  EXPECT_NEAR(pi[0], b / (a + b), 1e-12);
  EXPECT_NEAR(pi[1], a / (a + b), 1e-12);
  EXPECT_NEAR(markov_entropy_rate(chain), (b * binary_entropy(a) + a * binary_entropy(b)) / (a + b), 1e-12);
}

TEST(DataSyntheticCorpus, IidChainHasTheEntropyOfItsDistribution) {
  const std::vector<double> p = {0.5, 0.25, 0.125, 0.0625, 0.0625};
  for (int order : {1, 2}) {
    MarkovChain chain{5, order, {}};
    for (int64_t s = 0; s < chain.num_contexts(); ++s) chain.transition.insert(chain.transition.end(), p.begin(), p.end());
    EXPECT_NEAR(markov_entropy_rate(chain), distribution_entropy(p), 1e-12) << "order " << order;
  }
}

TEST(DataSyntheticCorpus, ZeroSharpnessIsUniformAndSharpnessLowersTheEntropy) {
  EXPECT_NEAR(markov_entropy_rate(make_markov_chain(64, 1, 0.0, 1)), std::log(64.0), 1e-12);
  const double h1 = markov_entropy_rate(make_markov_chain(64, 1, 2.0, 1));
  const double h2 = markov_entropy_rate(make_markov_chain(64, 2, 2.0, 1));
  for (double h : {h1, h2}) {
    EXPECT_GT(h, 0.5);
    EXPECT_LT(h, std::log(64.0) - 1.0) << "a model should have something to learn";
  }
}

TEST(DataSyntheticCorpus, EmpiricalNllOfAGeneratedStreamMatchesTheEntropyRate) {
  for (auto [vocab, order] : {std::pair{64, 1}, std::pair{16, 2}}) {
    const MarkovChain chain = make_markov_chain(vocab, order, 2.0, 99);
    const std::vector<int32_t> tokens = generate_markov_tokens(chain, 200'000, 5);
    const auto [nll, standard_error] = mean_nll(chain, tokens);
    // The chain mixes in a few steps, so the i.i.d. standard error is close; allow 5 of them.
    EXPECT_NEAR(nll, markov_entropy_rate(chain), 5 * standard_error) << "V=" << vocab << " order " << order;
  }
}

TEST(DataSyntheticCorpus, GenerationIsDeterministicFromTheSeed) {
  const MarkovChain a = make_markov_chain(32, 2, 1.5, 7), b = make_markov_chain(32, 2, 1.5, 7);
  EXPECT_EQ(a.transition, b.transition);
  EXPECT_NE(a.transition, make_markov_chain(32, 2, 1.5, 8).transition);
  EXPECT_EQ(generate_markov_tokens(a, 5000, 3), generate_markov_tokens(b, 5000, 3));
  EXPECT_NE(generate_markov_tokens(a, 5000, 3), generate_markov_tokens(a, 5000, 4));
  const std::vector<int32_t> long_stream = generate_markov_tokens(a, 5000, 3);
  const std::vector<int32_t> prefix = generate_markov_tokens(a, 1000, 3);
  EXPECT_TRUE(std::equal(prefix.begin(), prefix.end(), long_stream.begin()));
}

TEST(DataSyntheticCorpus, RejectsChainsTooLargeOrMalformed) {
  EXPECT_THROW(make_markov_chain(513, 1, 2.0, 1), Error);
  EXPECT_THROW(make_markov_chain(65, 2, 2.0, 1), Error);
  EXPECT_THROW(make_markov_chain(8, 3, 2.0, 1), Error);
  EXPECT_THROW(make_markov_chain(1, 1, 2.0, 1), Error);
  EXPECT_THROW(make_markov_chain(8, 1, -1.0, 1), Error);
  EXPECT_NO_THROW(make_markov_chain(512, 1, 2.0, 1));
  EXPECT_THROW(markov_entropy_rate(MarkovChain{2, 1, {0.5, 0.6, 0.5, 0.5}}), Error);  // row sums to 1.1
  EXPECT_THROW(markov_entropy_rate(MarkovChain{2, 1, {1.0}}), Error);
}

TEST(DataSyntheticCorpus, WritesADatasetWithTheEntropyRateInMeta) {
  const fs::path dir = fs::temp_directory_path() / ("tripod_synthetic_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  SyntheticOptions options;
  options.vocab_size = 24;
  options.order = 2;
  options.tokens = 20'000;
  options.val_fraction = 0.1;
  options.shard_tokens = 3000;
  options.out_dir = dir;
  const SyntheticReport report = write_synthetic_corpus(options);
  EXPECT_EQ(report.train_tokens, 18'000);
  EXPECT_EQ(report.val_tokens, 2'000);

  const TokenDataset train = TokenDataset::open(dir, "train"), val = TokenDataset::open(dir, "val");
  EXPECT_EQ(train.size(), 18'000);
  EXPECT_EQ(val.size(), 2'000);
  EXPECT_EQ(train.vocab_size(), 24);
  EXPECT_EQ(train.meta()["splits"]["train"].size(), 6u);
  EXPECT_EQ(train.meta()["source"], "synthetic-markov");
  EXPECT_EQ(train.meta()["synthetic"]["order"], 2);
  const MarkovChain chain = make_markov_chain(24, 2, options.sharpness, options.seed);
  EXPECT_DOUBLE_EQ(train.meta()["entropy_rate_nats"].get<double>(), markov_entropy_rate(chain));
  EXPECT_DOUBLE_EQ(report.entropy_rate_nats, markov_entropy_rate(chain));

  // train then val are one continuous stream of the chain.
  std::vector<int32_t> written(train.tokens(), train.tokens() + train.size());
  written.insert(written.end(), val.tokens(), val.tokens() + val.size());
  EXPECT_EQ(written, generate_markov_tokens(chain, 20'000, options.seed));
  fs::remove_all(dir);
}

}  // namespace
}  // namespace tripod::data
