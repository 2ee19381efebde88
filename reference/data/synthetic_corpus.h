// A built-in corpus with a known entropy rate: a stationary Markov chain of order k over V tokens.
// A model that learns the chain perfectly and sees the whole history reaches a loss equal to the
// entropy rate, so scaling-law fits on this corpus can be checked against the true irreducible loss.
// In a training window the first target sees one token: for order 1 that is the whole context, for
// order 2 the windowed floor is (H(X2|X1) + (T-1) rate) / T, 6-10 % above the rate at T = 16-64.
//
// Each context's next-token distribution is P(.|s) = (1 - floor) * softmax(sharpness * z_s) + floor / V
// with z_s standard normal draws keyed by (seed, s, token). The uniform floor makes every transition
// possible, so the chain is ergodic with a unique stationary distribution; sharpness sets how far
// the entropy rate falls below log V.
#pragma once
#include <cstdint>
#include <filesystem>
#include <vector>

namespace tripod::data {

inline constexpr double kMarkovUniformFloor = 0.01;

struct SyntheticOptions {
  int vocab_size = 64;
  int order = 1;             // 1 (V <= 512) or 2 (V <= 64)
  double sharpness = 2.0;    // standard deviation of the logits
  int64_t tokens = 1'000'000;
  uint64_t seed = 1234;
  double val_fraction = 0.05;
  std::filesystem::path out_dir;
  int64_t shard_tokens = 1 << 24;
};

struct SyntheticReport {
  double entropy_rate_nats = 0;
  int64_t train_tokens = 0, val_tokens = 0;
};

struct MarkovChain {
  int vocab_size = 0;
  int order = 1;
  // [num_contexts, vocab_size] row-major: transition[s * V + t] = P(next = t | context s), where
  // the context index of (t_1, ..., t_k), oldest first, is t_1 V^(k-1) + ... + t_k.
  std::vector<double> transition;
  int64_t num_contexts() const;
  // The context after seeing `next` in context `context`.
  int64_t next_context(int64_t context, int32_t next) const;
};

// The chain of the options (validates vocab_size, order and sharpness).
MarkovChain make_markov_chain(int vocab_size, int order, double sharpness, uint64_t seed);

// Stationary distribution over contexts, by power iteration until the L1 change is below 1e-13.
std::vector<double> markov_stationary_distribution(const MarkovChain& chain);

// Entropy rate in nats per token: sum_s pi(s) H(P(.|s)).
double markov_entropy_rate(const MarkovChain& chain);

// `count` tokens of the chain started from its stationary distribution; a pure function of
// (chain, count, seed).
std::vector<int32_t> generate_markov_tokens(const MarkovChain& chain, int64_t count, uint64_t seed);

// Generates options.tokens tokens into options.out_dir as train/val shards with meta.json.
SyntheticReport write_synthetic_corpus(const SyntheticOptions& options);

}  // namespace tripod::data
