#include "sweep/sweep_corpus.h"

#include <cmath>
#include <cstdio>

#include "core/error.h"
#include "data/synthetic_corpus.h"
#include "data/shard_format.h"
#include "data/token_dataset.h"

namespace tripod::sweep {
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

data::SyntheticOptions synthetic_options(const SyntheticCorpusSpec& s, const fs::path& dir) {
  data::SyntheticOptions o;
  o.vocab_size = s.vocab;
  o.order = s.order;
  o.sharpness = s.sharpness;
  o.tokens = s.tokens;
  o.seed = s.seed;
  o.out_dir = dir;
  return o;
}

fs::path synthetic_dir(const fs::path& out_dir) { return fs::absolute(out_dir / "corpus"); }

// The training split's tokens as its shards' headers count them (each header checked against its
// file's size): meta.json's "train_tokens" is optional and unchecked, and without it every run
// showed 0.00 epochs and max_epochs guarded nothing; as a string it was an internal error.
int64_t train_tokens_of(const fs::path& dir, const json& meta) {
  uint64_t tokens = 0;
  for (const json& shard : meta.at("splits").value("train", json::array()))
    tokens += data::read_shard_header(dir / shard.get<std::string>()).token_count;
  return static_cast<int64_t>(tokens);
}

CorpusInfo from_meta(const fs::path& dir) {
  const json meta = data::TokenDataset::read_meta(dir);
  CorpusInfo info;
  info.dir = dir;
  info.vocab = meta.at("vocab_size");
  info.train_tokens = train_tokens_of(dir, meta);
  info.entropy_rate_nats = meta.value("entropy_rate_nats", -1.0);
  return info;
}

// An existing OUT/corpus must be the corpus the spec describes, or every run would train on data
// other than the one the records claim.
void check_same_synthetic(const SweepSpec& spec, const fs::path& dir) {
  const json made = data::TokenDataset::read_meta(dir).value("synthetic", json::object());
  const SyntheticCorpusSpec& s = *spec.corpus.synthetic;
  const json wanted = {{"vocab_size", s.vocab}, {"order", s.order}, {"sharpness", s.sharpness},
                       {"tokens", s.tokens}, {"seed", s.seed}};
  for (auto it = wanted.begin(); it != wanted.end(); ++it)
    TRIPOD_CHECK(made.contains(it.key()) && made.at(it.key()) == it.value(), spec.file.string(), ": ", dir.string(),
                 " was generated with synthetic.", it.key(), " = ", made.value(it.key(), json()).dump(),
                 " but the spec says ", it.value().dump(), ": delete ", dir.string(),
                 " (and the runs trained on it) or use another --out");
}

}  // namespace

CorpusInfo describe_corpus(const SweepSpec& spec, const fs::path& out_dir) {
  if (!spec.corpus.synthetic) {
    const fs::path dir = resolve_data_dir(spec.corpus.dir);
    // The two corpora the repository's scripts prepare; it named the KJV's script for both, and the
    // natural-text script for natural-gpu's data/natural-text-large, which that script does not write.
    const bool large = dir.string().find("natural-text-large") != std::string::npos;
    const std::string script = large ? ""
                               : dir.string().find("natural-text") != std::string::npos ? "ci/prepare-natural-corpus.sh"
                               : dir.string().find("kjv") != std::string::npos       ? "ci/prepare-data.sh"
                                                                                     : "";
    TRIPOD_CHECK(fs::exists(dir / "meta.json"), spec.file.string(), ": corpus directory ", dir.string(),
                 " is not prepared (no meta.json)",
                 large ? "; it is a corpus of >= 0.4 G tokens of your own: prepare it with tripod data prepare "
                         "(ci/prepare-natural-corpus.sh writes the 14 M-token data/natural-text)"
                 : script.empty() ? "; prepare it with tripod data prepare" : "; prepare it with: bash " + script);
    return from_meta(dir);
  }
  const SyntheticCorpusSpec& s = *spec.corpus.synthetic;
  const data::SyntheticOptions options = synthetic_options(s, synthetic_dir(out_dir));
  CorpusInfo info;
  info.dir = options.out_dir;
  info.vocab = s.vocab;
  info.train_tokens = s.tokens - std::llround(static_cast<double>(s.tokens) * options.val_fraction);
  try {  // the entropy rate is cheap to compute exactly from the chain itself
    info.entropy_rate_nats = data::markov_entropy_rate(data::make_markov_chain(s.vocab, s.order, s.sharpness, s.seed));
  } catch (const Error& e) {
    fail(spec.file.string(), ": corpus.synthetic: ", e.what());
  }
  return info;
}

CorpusInfo prepare_corpus(const SweepSpec& spec, const fs::path& out_dir) {
  const CorpusInfo described = describe_corpus(spec, out_dir);
  const fs::path dir = described.dir;
  if (spec.corpus.synthetic && fs::exists(dir / "meta.json")) {
    check_same_synthetic(spec, dir);
  } else if (spec.corpus.synthetic) {
    std::printf("tripod scale: generating the synthetic corpus (%lld tokens) into %s\n",
                static_cast<long long>(spec.corpus.synthetic->tokens), dir.c_str());
    std::fflush(stdout);
    data::write_synthetic_corpus(synthetic_options(*spec.corpus.synthetic, dir));
  }
  CorpusInfo corpus = from_meta(dir);
  corpus.train_tokens_xxh64 = data::split_tokens_xxh64(dir, "train");
  return corpus;
}

}  // namespace tripod::sweep
