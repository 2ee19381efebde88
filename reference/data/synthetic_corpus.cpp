#include "data/synthetic_corpus.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <numeric>
#include <span>
#include <string>
#include <utility>

#include <nlohmann/json.hpp>

#include "core/counter_rng.h"
#include "core/error.h"
#include "data/dataset_writer_lock.h"
#include "data/shard_format.h"
#include "data/token_dataset.h"

namespace tripod::data {
namespace {

constexpr double kStationaryTolerance = 1e-13;
constexpr int kMaxPowerIterations = 1'000'000;

void validate_chain(const MarkovChain& chain) {
  check(chain.order == 1 || chain.order == 2, "Markov chain: order must be 1 or 2 (got ", chain.order, ")");
  check(chain.vocab_size >= 2, "Markov chain: vocab_size must be at least 2 (got ", chain.vocab_size, ")");
  // V^k contexts x V transitions must stay small enough for exact power iteration.
  const int limit = chain.order == 1 ? 512 : 64;
  check(chain.vocab_size <= limit, "Markov chain: vocab_size ", chain.vocab_size, " is too large for order ",
        chain.order, " (at most ", limit, ")");
  const auto expected = static_cast<std::size_t>(chain.num_contexts() * chain.vocab_size);
  check(chain.transition.size() == expected, "Markov chain: transition table has ", chain.transition.size(),
        " entries, expected ", expected);
  for (int64_t s = 0; s < chain.num_contexts(); ++s) {
    double row_sum = 0;
    for (int t = 0; t < chain.vocab_size; ++t) {
      const double p = chain.transition[s * chain.vocab_size + t];
      check(p >= 0 && std::isfinite(p), "Markov chain: P(", t, " | context ", s, ") = ", p, " is not a probability");
      row_sum += p;
    }
    check(std::abs(row_sum - 1.0) < 1e-9, "Markov chain: row for context ", s, " sums to ", row_sum);
  }
}

// Draws successive tokens by inverse-CDF sampling; token i uses uniform draw i + 1 and the
// starting context uses draw 0, so the stream is a pure function of the seed.
class MarkovSampler {
 public:
  MarkovSampler(const MarkovChain& chain, uint64_t seed)
      : chain_(chain), rng_(seed, "data.synthetic.stream"), cumulative_(chain.transition) {
    const int v = chain.vocab_size;
    for (int64_t s = 0; s < chain.num_contexts(); ++s)
      std::partial_sum(&cumulative_[s * v], &cumulative_[s * v] + v, &cumulative_[s * v]);
    const std::vector<double> stationary = markov_stationary_distribution(chain);
    std::vector<double> stationary_cdf(stationary.size());
    std::partial_sum(stationary.begin(), stationary.end(), stationary_cdf.begin());
    context_ = draw(stationary_cdf.data(), static_cast<int64_t>(stationary_cdf.size()), rng_.uniform(0));
  }

  void fill(std::span<int32_t> out) {
    const int v = chain_.vocab_size;
    for (int32_t& token : out) {
      token = static_cast<int32_t>(draw(&cumulative_[context_ * v], v, rng_.uniform(++position_)));
      context_ = chain_.next_context(context_, token);
    }
  }

 private:
  static int64_t draw(const double* cdf, int64_t n, double u) {
    // Rounding can leave cdf[n-1] a hair below 1; clamp to the last outcome.
    return std::min<int64_t>(std::upper_bound(cdf, cdf + n, u) - cdf, n - 1);
  }

  const MarkovChain& chain_;
  CounterRng rng_;
  std::vector<double> cumulative_;
  int64_t context_ = 0;
  uint64_t position_ = 0;
};

}  // namespace

int64_t MarkovChain::num_contexts() const {
  return order == 1 ? vocab_size : static_cast<int64_t>(vocab_size) * vocab_size;
}

int64_t MarkovChain::next_context(int64_t context, int32_t next) const {
  return (context * vocab_size + next) % num_contexts();
}

MarkovChain make_markov_chain(int vocab_size, int order, double sharpness, uint64_t seed) {
  // Above 1e6 the logits' differences overflow exp() to inf - inf = NaN (1e308 gave "P = -nan").
  check(std::isfinite(sharpness) && sharpness >= 0 && sharpness <= 1e6,
        "Markov chain: sharpness (--sharpness) must be in [0, 1e6] (got ", sharpness, ")");
  MarkovChain chain{vocab_size, order, {}};
  check(order == 1 || order == 2, "Markov chain: order must be 1 or 2 (got ", order, ")");
  check(vocab_size >= 2 && vocab_size <= (order == 1 ? 512 : 64), "Markov chain: vocab_size ", vocab_size,
        " is outside [2, ", order == 1 ? 512 : 64, "] for order ", order);
  const CounterRng rng(seed, "data.synthetic.chain");
  const int v = vocab_size;
  chain.transition.resize(static_cast<std::size_t>(chain.num_contexts() * v));
  for (int64_t s = 0; s < chain.num_contexts(); ++s) {
    double* row = &chain.transition[s * v];
    double max_logit = -INFINITY;
    for (int t = 0; t < v; ++t) max_logit = std::max(max_logit, row[t] = sharpness * rng.normal(static_cast<uint64_t>(s * v + t)));
    double total = 0;
    for (int t = 0; t < v; ++t) total += row[t] = std::exp(row[t] - max_logit);
    for (int t = 0; t < v; ++t) row[t] = (1 - kMarkovUniformFloor) * row[t] / total + kMarkovUniformFloor / v;
  }
  return chain;
}

std::vector<double> markov_stationary_distribution(const MarkovChain& chain) {
  validate_chain(chain);
  const int64_t contexts = chain.num_contexts();
  const int v = chain.vocab_size;
  std::vector<double> pi(contexts, 1.0 / contexts), next(contexts);
  for (int iteration = 0; iteration < kMaxPowerIterations; ++iteration) {
    std::fill(next.begin(), next.end(), 0.0);
    for (int64_t s = 0; s < contexts; ++s)
      for (int t = 0; t < v; ++t) next[chain.next_context(s, t)] += pi[s] * chain.transition[s * v + t];
    double total = 0, change = 0;
    for (double p : next) total += p;
    for (int64_t s = 0; s < contexts; ++s) {
      next[s] /= total;  // renormalise so rounding cannot drift the mass away from 1
      change += std::abs(next[s] - pi[s]);
    }
    pi.swap(next);
    if (change < kStationaryTolerance) return pi;
  }
  fail("Markov chain (V=", v, ", order ", chain.order, "): power iteration did not converge to ",
       kStationaryTolerance, " in ", kMaxPowerIterations, " iterations (periodic or reducible chain?)");
}

double markov_entropy_rate(const MarkovChain& chain) {
  const std::vector<double> pi = markov_stationary_distribution(chain);
  const int v = chain.vocab_size;
  double rate = 0;
  for (int64_t s = 0; s < chain.num_contexts(); ++s) {
    double row_entropy = 0;
    for (int t = 0; t < v; ++t) {
      const double p = chain.transition[s * v + t];
      if (p > 0) row_entropy -= p * std::log(p);
    }
    rate += pi[s] * row_entropy;
  }
  return rate;
}

std::vector<int32_t> generate_markov_tokens(const MarkovChain& chain, int64_t count, uint64_t seed) {
  check(count >= 0, "Markov chain: negative token count ", count);
  std::vector<int32_t> tokens(static_cast<std::size_t>(count));
  MarkovSampler(chain, seed).fill(tokens);
  return tokens;
}

SyntheticReport write_synthetic_corpus(const SyntheticOptions& options) {
  check(!options.out_dir.empty(), "synthetic corpus: no output directory given");
  check(options.tokens >= 2, "synthetic corpus for ", options.out_dir, ": needs at least 2 tokens (got ",
        options.tokens, ")");
  check(options.val_fraction >= 0 && options.val_fraction < 1, "synthetic corpus for ", options.out_dir,
        ": val_fraction must be in [0, 1) (got ", options.val_fraction, ")");
  check(options.shard_tokens >= 1, "synthetic corpus for ", options.out_dir, ": shard_tokens must be positive");
  const MarkovChain chain = make_markov_chain(options.vocab_size, options.order, options.sharpness, options.seed);
  SyntheticReport report;
  report.entropy_rate_nats = markov_entropy_rate(chain);
  report.val_tokens = std::llround(static_cast<double>(options.tokens) * options.val_fraction);
  report.train_tokens = options.tokens - report.val_tokens;
  check(report.train_tokens >= 2, "synthetic corpus for ", options.out_dir, ": val_fraction ", options.val_fraction,
        " of ", options.tokens, " tokens leaves ", report.train_tokens, " for training (at least 2: a token and its ",
        "successor)");
  check(options.val_fraction == 0 || report.val_tokens >= 2, "synthetic corpus for ", options.out_dir,
        ": val_fraction ", options.val_fraction, " of ", options.tokens, " tokens gives ", report.val_tokens,
        " validation tokens (at least 2; or val_fraction 0 for none)");
  check_dataset_folder(options.out_dir, "data synthetic");
  const DatasetWriterLock lock(options.out_dir, "data synthetic");
  // Before the folder's dataset is touched: a corpus larger than the disk's free space wrote
  // shards until the disk was full (2.2 GB a minute), leaving no dataset at all.
  const double needed = static_cast<double>(options.tokens) * shard_token_bytes(static_cast<uint64_t>(options.vocab_size));
  std::error_code ec;
  namespace fs = std::filesystem;
  const fs::path existing = fs::exists(options.out_dir) ? options.out_dir : options.out_dir.parent_path();
  const fs::space_info space = fs::space(existing.empty() ? fs::path(".") : existing, ec);
  check(ec || needed <= static_cast<double>(space.available), "synthetic corpus for ", options.out_dir, ": ",
        options.tokens, " tokens need ", needed / 1e9, " GB of shards, and ", space.available / 1e9,
        " GB are free there");
  invalidate_dataset(options.out_dir);
  // One continuous stream, written shard by shard so memory stays bounded by the shard size;
  // validation data is the tail of the same stream.
  MarkovSampler sampler(chain, options.seed);
  std::vector<int32_t> buffer;
  nlohmann::json splits;
  for (const auto& [split, count] : {std::pair<std::string, int64_t>{"train", report.train_tokens},
                                     std::pair<std::string, int64_t>{"val", report.val_tokens}}) {
    splits[split] = nlohmann::json::array();
    for (int64_t written = 0; written < count; written += static_cast<int64_t>(buffer.size())) {
      buffer.resize(static_cast<std::size_t>(std::min(options.shard_tokens, count - written)));
      sampler.fill(buffer);
      const std::string name = shard_file_name(split, static_cast<int64_t>(splits[split].size()));
      write_shard(options.out_dir / name, buffer, static_cast<uint64_t>(options.vocab_size));
      splits[split].push_back(name);
    }
  }
  write_dataset_meta(options.out_dir,
                     {{"format", kDatasetFormat},
                      {"version", kDatasetVersion},
                      {"vocab_size", options.vocab_size},
                      {"tokenizer", nullptr},
                      {"splits", splits},
                      {"source", "synthetic-markov"},
                      {"entropy_rate_nats", report.entropy_rate_nats},
                      {"uniform_entropy_nats", std::log(static_cast<double>(options.vocab_size))},
                      {"train_tokens", report.train_tokens},
                      {"val_tokens", report.val_tokens},
                      {"synthetic",
                       {{"vocab_size", options.vocab_size},
                        {"order", options.order},
                        {"sharpness", options.sharpness},
                        {"uniform_floor", kMarkovUniformFloor},
                        {"tokens", options.tokens},
                        {"seed", options.seed},
                        {"val_fraction", options.val_fraction}}}});
  return report;
}

}  // namespace tripod::data
