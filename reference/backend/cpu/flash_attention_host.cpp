// The emulated device's flash attention (TRIPOD_CUDA_ATTENTION=flash): the CUDA kernels' block
// algorithms (backend/kernels/flash_attention_block.h) run by the host executor, blocks in
// parallel (OpenMP, each thread with its own shared memory), so that CI trains through what the
// CUDA flash attention computes, up to the order of its tile products' sums, and through the
// state it keeps (the rows' logsumexp, then a copy of out). The kernels' launchers in
// backend/cuda/kernels/flash_attention.cu do the same with the device executor.
#include <cstring>
#include <memory>
#include <vector>

#include "backend/cpu/flash_host_block.h"
#include "backend/cpu/flash_host_warp.h"
#include "backend/cpu/kernels.h"
#include "backend/kernels/attention_math.h"
#include "backend/kernels/flash_attention_backward.h"
#include "backend/kernels/flash_backward_warp.h"
#include "backend/kernels/flash_forward_warp.h"
#include "core/error.h"

namespace tripod::cpu {
namespace {

namespace flash = kernels::flash;

// run(shared, block) for every block of the grid, in parallel, each OpenMP thread with its own
// Shared (as each device block has its own shared memory), NaN bytes to begin with (the device's
// is whatever it held): a block that read what it never wrote would show as NaN.
template <class Shared, class Run>
void for_each_block(int64_t blocks, const Run& run) {
#pragma omp parallel
  {
    auto shared = std::make_unique<Shared>();
    std::memset(static_cast<void*>(shared.get()), 0xFF, sizeof(Shared));
#pragma omp for schedule(dynamic)
    for (int64_t block = 0; block < blocks; ++block) run(*shared, block);
  }
}

// delta = rowsum(bf16(dout) * out) of every row, out the copy kept in the state after the lse.
template <typename DOut>
std::vector<float> deltas(const flash::Problem& p, const DOut* dout, const float* state) {
  const float* kept_out = state + p.pairs() * p.seq_len;
  std::vector<float> delta(static_cast<std::size_t>(p.pairs() * p.seq_len));
  const auto rows = static_cast<int64_t>(delta.size());
#pragma omp parallel for schedule(static)
  for (int64_t row = 0; row < rows; ++row)
    delta[static_cast<std::size_t>(row)] = flash::delta_of_row(p, dout, kept_out, row);
  return delta;
}

// The register kernels' bf16 copy of x[0, n) (flash_warp_tiles.h), as the CUDA launchers make it.
std::vector<bf16> bf16_copy(const float* x, int64_t n) {
  std::vector<bf16> copy(static_cast<std::size_t>(n));
  convert<float, bf16>(x, copy.data(), n);
  return copy;
}

}  // namespace

void flash_attention_forward(float* out, float* state, const float* qkv, int64_t batch, int64_t seq_len,
                             int64_t channels, int64_t n_head) {
  const flash::Problem p{batch, seq_len, channels, n_head, kernels::attention_scale<float>(channels / n_head)};
  float* lse = state;
  flash::with_head_dim(p.head_dim(), [&](auto hd) {
    constexpr int HD = decltype(hd)::value;
    for_each_block<flash::ForwardShared<HD>>(p.pairs() * p.tiles(), [&](flash::ForwardShared<HD>& sh, int64_t block) {
      const flash::BlockPlace at = flash::place_of_block(block, p, true);
      flash::forward_block<HD>(FlashHostBlock{}, sh, p, qkv, out, state + p.pairs() * seq_len, lse, at.pair,
                               at.tile);
    });
  });
}

void flash_attention_forward_mma(float* out, float* state, const float* qkv, int64_t batch, int64_t seq_len,
                                 int64_t channels, int64_t n_head, bf16* out16) {
  const std::vector<bf16> qkv16 = bf16_copy(qkv, batch * seq_len * 3 * channels);
  flash_attention_forward_mma(out, state, qkv16.data(), batch, seq_len, channels, n_head, out16);
}

void flash_attention_forward_mma(float* out, float* state, const bf16* qkv16, int64_t batch, int64_t seq_len,
                                 int64_t channels, int64_t n_head, bf16* out16) {
  namespace fm = kernels::flash_mma;
  const flash::Problem p{batch, seq_len, channels, n_head, kernels::attention_scale<float>(channels / n_head)};
  float* lse = state;
  float* kept_out = state + p.pairs() * seq_len;
  flash::with_head_dim(p.head_dim(), [&](auto hd) {
    constexpr int HD = decltype(hd)::value;
    // A block's shared memory and its four warps' registers (32 lanes each on the host).
    struct Block {
      fm::Shared<HD> shared;
      fm::WarpState<HD, FlashHostWarp::kLanes> warps[fm::kWarps];
    };
    for_each_block<Block>(p.pairs() * p.tiles(), [&](Block& b, int64_t block) {
      const flash::BlockPlace at = flash::place_of_block(block, p, true);
      const FlashHostWarp w;
      const int64_t row0 = at.tile * flash::kTile;
      for (int warp = 0; warp < fm::kWarps; ++warp)
        fm::start_rows<HD>(w, b.warps[warp], p, qkv16, at.pair, row0 + warp * fm::kRowsPerWarp);
      for (int64_t kt = 0; kt <= at.tile; ++kt) {  // the device's two barriers bracket the load
        for (int thread = 0; thread < fm::kThreads; ++thread)
          fm::load_key_tile<HD>(thread, b.shared, p, qkv16, at.pair, kt * flash::kTile, p.rows_in_tile(kt));
        for (int warp = 0; warp < fm::kWarps; ++warp) {  // the diagonal tile masked, as the kernel peels it
          const int64_t rows = row0 + warp * fm::kRowsPerWarp;
          if (kt < at.tile) fm::forward_tile<HD, false>(w, b.warps[warp], b.shared, p, rows, kt * flash::kTile);
          else fm::forward_tile<HD, true>(w, b.warps[warp], b.shared, p, rows, kt * flash::kTile);
        }
      }
      for (int warp = 0; warp < fm::kWarps; ++warp)
        fm::finish_rows<HD>(w, b.warps[warp], p, out, out16, kept_out, lse, at.pair, row0 + warp * fm::kRowsPerWarp);
    });
  });
}

void flash_attention_backward(float* dqkv, const float* dout, const float* qkv, const float* state, int64_t batch,
                              int64_t seq_len, int64_t channels, int64_t n_head) {
  const flash::Problem p{batch, seq_len, channels, n_head, kernels::attention_scale<float>(channels / n_head)};
  const float* lse = state;
  const std::vector<float> delta = deltas(p, dout, state);
  flash::with_head_dim(p.head_dim(), [&](auto hd) {
    constexpr int HD = decltype(hd)::value;
    // The two kernels write different thirds of dqkv (dk and dv; dq): one after the other, as on
    // the device's stream.
    for_each_block<flash::KeyGradsShared<HD>>(p.pairs() * p.tiles(), [&](flash::KeyGradsShared<HD>& sh, int64_t block) {
      const flash::BlockPlace at = flash::place_of_block(block, p, false);
      flash::key_grads_block<HD>(FlashHostBlock{}, sh, p, qkv, dout, lse, delta.data(), dqkv, at.pair, at.tile);
    });
    for_each_block<flash::BackwardShared<HD>>(p.pairs() * p.tiles(), [&](flash::BackwardShared<HD>& sh, int64_t block) {
      const flash::BlockPlace at = flash::place_of_block(block, p, true);
      flash::query_grads_block<HD>(FlashHostBlock{}, sh, p, qkv, dout, lse, delta.data(), dqkv, at.pair, at.tile);
    });
  });
}

void flash_attention_backward_mma(float* dqkv, const float* dout, const float* qkv, const float* state,
                                  int64_t batch, int64_t seq_len, int64_t channels, int64_t n_head, bf16* dqkv16,
                                  float* partials) {
  if (n_head <= 0 || channels % n_head != 0 || !kernels::flash_mma::register_backward_head_dim(channels / n_head)) {
    check(dqkv16 == nullptr, "flash_attention_backward_mma: dqkv as its bf16 operand at head size ",
          n_head > 0 ? channels / n_head : 0, ", which the register backward does not take (up to 64)");
    flash_attention_backward(dqkv, dout, qkv, state, batch, seq_len, channels, n_head);
    return;
  }
  const std::vector<bf16> qkv16 = bf16_copy(qkv, batch * seq_len * 3 * channels);
  flash_attention_backward_mma(dqkv, dout, qkv16.data(), state, batch, seq_len, channels, n_head, dqkv16, partials);
}

void flash_attention_backward_mma(float* dqkv, const float* dout, const bf16* qkv16, const float* state,
                                  int64_t batch, int64_t seq_len, int64_t channels, int64_t n_head, bf16* dqkv16,
                                  float* partials) {
  // The kernels read dout's bf16 copy, and delta rounds dout as that copy does: the copy is all
  // of dout they use (flash::delta_of_row).
  const std::vector<bf16> dout16 = bf16_copy(dout, batch * seq_len * channels);
  flash_attention_backward_mma(dqkv, dout16.data(), qkv16, state, batch, seq_len, channels, n_head, dqkv16, partials);
}

void flash_attention_backward_mma(float* dqkv, const bf16* dout16, const bf16* qkv16, const float* state,
                                  int64_t batch, int64_t seq_len, int64_t channels, int64_t n_head, bf16* dqkv16,
                                  float* partials) {
  namespace fm = kernels::flash_mma;
  check(n_head > 0 && channels % n_head == 0 && fm::register_backward_head_dim(channels / n_head),
        "flash_attention_backward_mma: a bf16 qkv at head size ", n_head > 0 ? channels / n_head : 0,
        ", which the register backward does not take (up to 64)");
  if (batch * seq_len == 0) return;  // (an empty tensor's data may be no pointer at all)
  check((dqkv == nullptr) == (dqkv16 != nullptr) && (dqkv16 == nullptr) == (partials == nullptr),
        "flash_attention_backward_mma: dqkv is written in fp32, or as its bf16 operand with the bias gradient's "
        "partial sums");
  const fm::OperandOut operand{dqkv16, partials};
  const flash::Problem p{batch, seq_len, channels, n_head, kernels::attention_scale<float>(channels / n_head)};
  const float* lse = state;
  const std::vector<float> delta = deltas(p, dout16, state);
  flash::with_head_dim(p.head_dim(), [&](auto hd) {
    constexpr int HD = decltype(hd)::value;
    if constexpr (HD <= 64) {  // register_backward_head_dim
      constexpr int L = FlashHostWarp::kLanes;
      const FlashHostWarp w;
      struct KeyBlock {  // a block's shared memory and its four warps' registers (every lane's)
        fm::KeyGradsShared<HD> shared;
        fm::KeyWarp<HD, L> warps[fm::kWarps];
      };
      struct QueryBlock {
        fm::QueryGradsShared<HD> shared;
        fm::QueryWarp<HD, L> warps[fm::kWarps];
      };
      // The two kernels write different thirds of dqkv (dk and dv; dq): one after the other.
      for_each_block<KeyBlock>(p.pairs() * p.tiles(), [&](KeyBlock& b, int64_t block) {
        const flash::BlockPlace at = flash::place_of_block(block, p, false);
        const int64_t key0 = at.tile * flash::kTile;
        for (int warp = 0; warp < fm::kWarps; ++warp)
          fm::key_warp_start<HD>(w, b.warps[warp], p, qkv16, at.pair, key0 + warp * fm::kRowsPerWarp);
        for (int64_t qt = at.tile; qt < p.tiles(); ++qt) {
          for (int thread = 0; thread < fm::kThreads; ++thread)
            fm::load_query_tile<HD>(thread, b.shared, p, qkv16, dout16, lse, delta.data(), at.pair, qt);
          for (int warp = 0; warp < fm::kWarps; ++warp)
            fm::key_warp_tile<HD>(w, b.warps[warp], b.shared, p, key0 + warp * fm::kRowsPerWarp, qt * flash::kTile);
        }
        for (int warp = 0; warp < fm::kWarps; ++warp) {
          const int64_t keys = key0 + warp * fm::kRowsPerWarp;
          fm::store_gradient_rows<HD>(w, b.warps[warp].dk, p, dqkv, operand, at.pair, keys, 1);
          fm::store_gradient_rows<HD>(w, b.warps[warp].dv, p, dqkv, operand, at.pair, keys, 2);
        }
      });
      for_each_block<QueryBlock>(p.pairs() * p.tiles(), [&](QueryBlock& b, int64_t block) {
        const flash::BlockPlace at = flash::place_of_block(block, p, true);
        const int64_t row0 = at.tile * flash::kTile;
        for (int warp = 0; warp < fm::kWarps; ++warp)
          fm::query_warp_start<HD>(w, b.warps[warp], p, qkv16, dout16, lse, delta.data(), at.pair,
                                   row0 + warp * fm::kRowsPerWarp);
        for (int64_t kt = 0; kt <= at.tile; ++kt) {
          for (int thread = 0; thread < fm::kThreads; ++thread)
            fm::load_key_tile<HD>(thread, b.shared, p, qkv16, at.pair, kt);
          for (int warp = 0; warp < fm::kWarps; ++warp)
            fm::query_warp_tile<HD>(w, b.warps[warp], b.shared, p, row0 + warp * fm::kRowsPerWarp, kt * flash::kTile);
        }
        for (int warp = 0; warp < fm::kWarps; ++warp)
          fm::store_gradient_rows<HD>(w, b.warps[warp].dq, p, dqkv, operand, at.pair,
                                      row0 + warp * fm::kRowsPerWarp, 0);
      });
    }
  });
}

}  // namespace tripod::cpu
