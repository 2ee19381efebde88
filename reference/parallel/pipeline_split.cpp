#include "parallel/pipeline_split.h"

#include <algorithm>
#include <limits>
#include <numeric>
#include <sstream>

#include "core/error.h"

namespace tripod {

PipelineSplit::PipelineSplit(int64_t n_layer, int stages, int virtual_stages, std::vector<int64_t> layers_per_chunk)
    : n_layer_(n_layer), stages_(stages), virtual_stages_(virtual_stages), layers_(std::move(layers_per_chunk)) {
  check(stages >= 1 && virtual_stages >= 1, "pipeline needs pp >= 1 and virtual stages >= 1 (got pp=", stages,
        ", v=", virtual_stages, ")");
  const int64_t n_chunks = chunks();
  check(n_chunks <= n_layer, "pipeline of pp=", stages, " x ", virtual_stages, " virtual stages needs ", n_chunks,
        " chunks of at least one layer each, but the model has only ", n_layer, n_layer == 1 ? " layer" : " layers",
        " (model.n_layer)");
  if (layers_.empty()) {
    for (int64_t c = 0; c < n_chunks; ++c) layers_.push_back(n_layer / n_chunks + (c < n_layer % n_chunks ? 1 : 0));
  } else {
    check(static_cast<int64_t>(layers_.size()) == n_chunks, "pipeline split lists ", layers_.size(),
          " layer counts but the pipeline has ", n_chunks, " chunks (pp x virtual stages)");
    for (std::size_t c = 0; c < layers_.size(); ++c)
      check(layers_[c] >= 1, "pipeline split: chunk ", c, " gets ", layers_[c], " layers (each needs at least one)");
    const int64_t sum = std::accumulate(layers_.begin(), layers_.end(), int64_t{0});
    check(sum == n_layer, "pipeline split sums to ", sum, " layers but the model has ", n_layer);
  }
  int64_t first = 0;
  for (int64_t n : layers_) {
    first_.push_back(first);
    first += n;
  }
}

std::vector<int> PipelineSplit::chunks_of_rank(int rank) const {
  std::vector<int> out;
  for (int v = 0; v < virtual_stages_; ++v) out.push_back(v * stages_ + rank);
  return out;
}

StageSpan PipelineSplit::span(int chunk) const {
  check(chunk >= 0 && chunk < chunks(), "pipeline chunk ", chunk, " out of range [0, ", chunks(), ")");
  const std::size_t c = static_cast<std::size_t>(chunk);
  return {first_[c], first_[c] + layers_[c], chunk == 0, chunk == chunks() - 1};
}

int PipelineSplit::owner_rank(const ParamSpec& spec) const {
  if (spec.group == embedding_group()) return rank_of_chunk(0);
  if (spec.layer >= 0) {
    for (int c = 0; c < chunks(); ++c)
      if (spec.layer >= first_[static_cast<std::size_t>(c)] &&
          spec.layer < first_[static_cast<std::size_t>(c)] + layers_[static_cast<std::size_t>(c)])
        return rank_of_chunk(c);
    fail("parameter ", spec.name, ": layer ", spec.layer, " is outside the model's ", n_layer_, " layers");
  }
  return rank_of_chunk(chunks() - 1);  // the final LayerNorm and the LM head
}

std::string PipelineSplit::describe() const {
  std::ostringstream out;
  out << "[";
  for (std::size_t c = 0; c < layers_.size(); ++c) out << (c ? "," : "") << layers_[c];
  out << "]";
  return out.str();
}

std::vector<int64_t> parse_pipeline_split(const std::string& text) {
  std::vector<int64_t> out;
  if (text.empty()) return out;
  std::istringstream in(text);
  std::string item;
  while (std::getline(in, item, ',')) {
    std::size_t used = 0;
    int64_t n = 0;
    try {
      n = std::stoll(item, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    check(used == item.size() && !item.empty(), "pipeline split '", text, "': '", item,
          "' is not a layer count (expected e.g. 2,1,1)");
    out.push_back(n);
  }
  return out;
}

std::vector<int64_t> balanced_pipeline_split(const ModelConfig& c, int64_t seq_len, int chunks) {
  const int64_t L = c.n_layer;
  check(chunks >= 1 && chunks <= L, "pipeline of ", chunks, " chunks needs at least that many layers; the model has ",
        L, " (model.n_layer)");
  const double d = static_cast<double>(c.d_model), block = 6 * (4 * d * d + 2 * d * c.d_ff) + 12 * d * seq_len;
  const double head = 6 * d * c.vocab_size;
  // best[k][l]: the smallest possible largest cost when the first k chunks hold layers [0, l).
  const double inf = std::numeric_limits<double>::infinity();
  std::vector<std::vector<double>> best(static_cast<std::size_t>(chunks) + 1, std::vector<double>(L + 1, inf));
  std::vector<std::vector<int64_t>> cut(best.size(), std::vector<int64_t>(L + 1, 0));
  best[0][0] = 0;
  for (int k = 1; k <= chunks; ++k)
    for (int64_t l = k; l <= L; ++l)
      for (int64_t from = k - 1; from < l; ++from) {
        const double cost = block * static_cast<double>(l - from) + (k == chunks ? head : 0.0);
        const double worst = std::max(best[static_cast<std::size_t>(k - 1)][from], cost);
        if (worst < best[static_cast<std::size_t>(k)][l]) {
          best[static_cast<std::size_t>(k)][l] = worst;
          cut[static_cast<std::size_t>(k)][l] = from;
        }
      }
  std::vector<int64_t> layers(static_cast<std::size_t>(chunks));
  for (int64_t k = chunks, l = L; k >= 1; --k) {
    const int64_t from = cut[static_cast<std::size_t>(k)][l];
    layers[static_cast<std::size_t>(k - 1)] = l - from;
    l = from;
  }
  return layers;
}

}  // namespace tripod
