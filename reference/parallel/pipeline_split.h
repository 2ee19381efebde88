// How the model's layers are cut into pipeline chunks and which pipeline rank holds what.
//
// The model is cut into p*v chunks (v virtual stages per rank); chunk c lives on rank c % p, so
// with v = 1 rank r holds chunk r. Chunk 0 also holds the embeddings, the last chunk the final
// LayerNorm and the LM head (and, when tied, its own copy of wte, whose gradient is summed with the
// first stage's over the embedding group). The layers split evenly by default - where they do not
// divide, earlier chunks take one more, since the last carries the head - or as given.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "model/gpt.h"

namespace tripod {

class PipelineSplit {
 public:
  // layers_per_chunk: empty for the even split, else p*v positive counts summing to n_layer.
  // Throws naming the problem: fewer layers than chunks, a wrong count or sum.
  PipelineSplit(int64_t n_layer, int stages, int virtual_stages, std::vector<int64_t> layers_per_chunk = {});

  int stages() const { return stages_; }
  int virtual_stages() const { return virtual_stages_; }
  int chunks() const { return stages_ * virtual_stages_; }
  int rank_of_chunk(int chunk) const { return chunk % stages_; }
  std::vector<int> chunks_of_rank(int rank) const;  // ascending
  StageSpan span(int chunk) const;
  const std::vector<int64_t>& layers_per_chunk() const { return layers_; }
  // The pipeline rank that holds the primary copy of a parameter (wte: the first stage's).
  int owner_rank(const ParamSpec& spec) const;
  std::string describe() const;  // "[2,1,1]"

 private:
  int64_t n_layer_;
  int stages_, virtual_stages_;
  std::vector<int64_t> layers_, first_;  // per chunk: layer count, first layer
};

// "2,1,1" -> {2,1,1}; empty -> {}. Throws naming the bad item.
std::vector<int64_t> parse_pipeline_split(const std::string& text);

// Layers per chunk that minimise the most expensive chunk, counting model FLOPs per token
// (perf/flops.h): a block 6*(4d^2 + 2dF) + 12dT, the LM head 6dV on the last chunk. The even split
// ignores the head, which on small models costs more than a block. Throws as PipelineSplit does.
std::vector<int64_t> balanced_pipeline_split(const ModelConfig& config, int64_t seq_len, int chunks);

}  // namespace tripod
