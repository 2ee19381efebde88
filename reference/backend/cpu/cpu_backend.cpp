// The CPU backend: host memory, OpenBLAS GEMM, OpenMP kernels, for fp32 and fp64 tensors.
#include <cmath>
#include <cstdlib>
#include <type_traits>
#include <cstring>

#include "backend/backend.h"
#include "backend/cpu/kernels.h"

namespace tripod {
namespace {

void require_same(const Tensor& a, const Tensor& b, const char* op) {
  check(a.dtype() == b.dtype(), op, ": dtype mismatch (", dtype_name(a.dtype()), " vs ", dtype_name(b.dtype()),
        ")");
}

// Calls fn with a typed null pointer selecting float or double, for the floating dtypes.
template <typename Fn>
void dispatch_float(DType dtype, const char* op, Fn&& fn) {
  switch (dtype) {
    case DType::F32: fn(static_cast<float*>(nullptr)); return;
    case DType::F64: fn(static_cast<double*>(nullptr)); return;
    default: fail(op, ": the CPU backend does not support dtype ", dtype_name(dtype));
  }
}

class CpuBackend final : public Backend {
 public:
  std::string name() const override { return "cpu (OpenBLAS + OpenMP)"; }
  Device device() const override { return Device::CPU; }

  Tensor alloc(const Shape& shape, DType dtype) override {
    std::size_t bytes = static_cast<std::size_t>(shape_numel(shape)) * dtype_size(dtype);
    std::size_t padded = (bytes + 63) / 64 * 64;  // 64-byte alignment for AVX-512 loads
    void* ptr = padded ? std::aligned_alloc(64, padded) : nullptr;
    check(padded == 0 || ptr != nullptr, "out of host memory allocating ", bytes, " bytes for a tensor of shape ",
          shape_str(shape));
    if (ptr) std::memset(ptr, 0, padded);
    auto storage = std::make_shared<Storage>(ptr, bytes, Device::CPU, [](void* p) { std::free(p); });
    return Tensor(std::move(storage), 0, shape, dtype);
  }

  void fill(const Tensor& t, double value) override {
    dispatch_float(t.dtype(), "fill", [&](auto* tag) {
      using T = std::remove_pointer_t<decltype(tag)>;
      T* p = t.data<T>();
      const int64_t n = t.numel();
#pragma omp parallel for schedule(static)
      for (int64_t i = 0; i < n; ++i) p[i] = static_cast<T>(value);
    });
  }

  void copy(const Tensor& src, const Tensor& dst) override {
    require_same(src, dst, "copy");
    check(src.numel() == dst.numel(), "copy: ", shape_str(src.shape()), " into ", shape_str(dst.shape()));
    if (src.bytes()) std::memmove(dst.raw(), src.raw(), src.bytes());
  }
  void upload(const void* host, const Tensor& dst) override {
    if (dst.bytes()) std::memcpy(dst.raw(), host, dst.bytes());
  }
  void download(const Tensor& src, void* host) override {
    if (src.bytes()) std::memcpy(host, src.raw(), src.bytes());
  }

  void gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, double alpha, const Tensor& a,
            int64_t lda, const Tensor& b, int64_t ldb, double beta, const Tensor& c, int64_t ldc) override {
    require_same(a, b, "gemm");
    require_same(a, c, "gemm");
    dispatch_float(a.dtype(), "gemm", [&](auto* tag) {
      using T = std::remove_pointer_t<decltype(tag)>;
      cpu::gemm<T>(trans_a, trans_b, m, n, k, static_cast<T>(alpha), a.data<T>(), lda, b.data<T>(), ldb,
                   static_cast<T>(beta), c.data<T>(), ldc);
    });
  }

  void add(const Tensor& out, const Tensor& a, const Tensor& b) override {
    require_same(a, b, "add");
    check(a.numel() == b.numel() && a.numel() == out.numel(), "add: shape mismatch");
    dispatch_float(a.dtype(), "add", [&](auto* tag) {
      using T = std::remove_pointer_t<decltype(tag)>;
      T* o = out.data<T>();
      const T *x = a.data<T>(), *y = b.data<T>();
      const int64_t n = a.numel();
#pragma omp parallel for schedule(static)
      for (int64_t i = 0; i < n; ++i) o[i] = x[i] + y[i];
    });
  }
  void add_inplace(const Tensor& acc, const Tensor& x) override { add(acc, acc, x); }

  void scale(const Tensor& t, double factor) override {
    dispatch_float(t.dtype(), "scale", [&](auto* tag) {
      using T = std::remove_pointer_t<decltype(tag)>;
      T* p = t.data<T>();
      const T f = static_cast<T>(factor);
      const int64_t n = t.numel();
#pragma omp parallel for schedule(static)
      for (int64_t i = 0; i < n; ++i) p[i] *= f;
    });
  }

  double sum_squares(const Tensor& t) override {
    double result = 0;
    dispatch_float(t.dtype(), "sum_squares", [&](auto* tag) {
      using T = std::remove_pointer_t<decltype(tag)>;
      result = cpu::sum_squares<T>(t.data<T>(), t.numel());
    });
    return result;
  }

  bool all_finite(const Tensor& t) override { return std::isfinite(sum_squares(t)); }

  void embedding_forward(const Tensor& out, const Tensor& tokens, const Tensor& wte, const Tensor& wpe,
                         int64_t seq_len) override {
    dispatch_float(wte.dtype(), "embedding_forward", [&](auto* tag) {
      using T = std::remove_pointer_t<decltype(tag)>;
      cpu::embedding_forward<T>(out.data<T>(), tokens.data<int32_t>(), wte.data<T>(), wpe.data<T>(),
                                tokens.numel(), seq_len, wte.dim(1), wte.dim(0));
    });
  }
  void embedding_backward(const Tensor& dwte, const Tensor& dwpe, const Tensor& dout, const Tensor& tokens,
                          int64_t seq_len) override {
    dispatch_float(dwte.dtype(), "embedding_backward", [&](auto* tag) {
      using T = std::remove_pointer_t<decltype(tag)>;
      cpu::embedding_backward<T>(dwte.data<T>(), dwpe.data<T>(), dout.data<T>(), tokens.data<int32_t>(),
                                 tokens.numel(), seq_len, dwte.dim(1));
    });
  }

  void layernorm_forward(const Tensor& out, const Tensor& mean, const Tensor& rstd, const Tensor& inp,
                         const Tensor& weight, const Tensor& bias, double eps) override {
    dispatch_float(inp.dtype(), "layernorm_forward", [&](auto* tag) {
      using T = std::remove_pointer_t<decltype(tag)>;
      const int64_t c = weight.numel();
      cpu::layernorm_forward<T>(out.data<T>(), mean.data<T>(), rstd.data<T>(), inp.data<T>(), weight.data<T>(),
                                bias.data<T>(), inp.numel() / c, c, eps);
    });
  }
  void layernorm_backward(const Tensor& dinp, const Tensor& dweight, const Tensor& dbias, const Tensor& dout,
                          const Tensor& inp, const Tensor& weight, const Tensor& mean,
                          const Tensor& rstd) override {
    dispatch_float(inp.dtype(), "layernorm_backward", [&](auto* tag) {
      using T = std::remove_pointer_t<decltype(tag)>;
      const int64_t c = weight.numel();
      cpu::layernorm_backward<T>(dinp.data<T>(), dweight.data<T>(), dbias.data<T>(), dout.data<T>(),
                                 inp.data<T>(), weight.data<T>(), mean.data<T>(), rstd.data<T>(), inp.numel() / c,
                                 c);
    });
  }

  void bias_add(const Tensor& out, const Tensor& bias) override {
    dispatch_float(out.dtype(), "bias_add", [&](auto* tag) {
      using T = std::remove_pointer_t<decltype(tag)>;
      cpu::bias_add<T>(out.data<T>(), bias.data<T>(), out.numel() / bias.numel(), bias.numel());
    });
  }
  void bias_grad(const Tensor& dbias, const Tensor& dout) override {
    dispatch_float(dout.dtype(), "bias_grad", [&](auto* tag) {
      using T = std::remove_pointer_t<decltype(tag)>;
      cpu::bias_grad<T>(dbias.data<T>(), dout.data<T>(), dout.numel() / dbias.numel(), dbias.numel());
    });
  }

  void gelu_forward(const Tensor& out, const Tensor& inp) override {
    dispatch_float(inp.dtype(), "gelu_forward", [&](auto* tag) {
      using T = std::remove_pointer_t<decltype(tag)>;
      cpu::gelu_forward<T>(out.data<T>(), inp.data<T>(), inp.numel());
    });
  }
  void gelu_backward(const Tensor& dinp, const Tensor& inp, const Tensor& dout) override {
    dispatch_float(inp.dtype(), "gelu_backward", [&](auto* tag) {
      using T = std::remove_pointer_t<decltype(tag)>;
      cpu::gelu_backward<T>(dinp.data<T>(), inp.data<T>(), dout.data<T>(), inp.numel());
    });
  }

  void attention_forward(const Tensor& out, const Tensor& probs, const Tensor& qkv, int64_t n_head) override {
    dispatch_float(qkv.dtype(), "attention_forward", [&](auto* tag) {
      using T = std::remove_pointer_t<decltype(tag)>;
      cpu::attention_forward<T>(out.data<T>(), probs.data<T>(), qkv.data<T>(), qkv.dim(0), qkv.dim(1),
                                qkv.dim(2) / 3, n_head);
    });
  }
  void attention_backward(const Tensor& dqkv, const Tensor& dout, const Tensor& qkv, const Tensor& probs,
                          int64_t n_head) override {
    dispatch_float(qkv.dtype(), "attention_backward", [&](auto* tag) {
      using T = std::remove_pointer_t<decltype(tag)>;
      cpu::attention_backward<T>(dqkv.data<T>(), dout.data<T>(), qkv.data<T>(), probs.data<T>(), qkv.dim(0),
                                 qkv.dim(1), qkv.dim(2) / 3, n_head);
    });
  }

  void cross_entropy_forward(const Tensor& losses, const Tensor& logits, const Tensor& targets) override {
    dispatch_float(logits.dtype(), "cross_entropy_forward", [&](auto* tag) {
      using T = std::remove_pointer_t<decltype(tag)>;
      cpu::cross_entropy_forward<T>(losses.data<T>(), logits.data<T>(), targets.data<int32_t>(), targets.numel(),
                                    logits.dim(-1));
    });
  }
  void cross_entropy_backward(const Tensor& logits, const Tensor& targets, double grad_scale) override {
    dispatch_float(logits.dtype(), "cross_entropy_backward", [&](auto* tag) {
      using T = std::remove_pointer_t<decltype(tag)>;
      cpu::cross_entropy_backward<T>(logits.data<T>(), targets.data<int32_t>(), targets.numel(), logits.dim(-1),
                                     grad_scale);
    });
  }

  void adamw(const Tensor& param, const Tensor& grad, const Tensor& m, const Tensor& v, double lr, double beta1,
             double beta2, double eps, double weight_decay, int64_t step, double grad_scale) override {
    dispatch_float(param.dtype(), "adamw", [&](auto* tag) {
      using T = std::remove_pointer_t<decltype(tag)>;
      cpu::adamw<T>(param.data<T>(), grad.data<T>(), m.data<T>(), v.data<T>(), param.numel(), lr, beta1, beta2,
                    eps, weight_decay, step, grad_scale);
    });
  }
};

}  // namespace

std::unique_ptr<Backend> make_cpu_backend() { return std::make_unique<CpuBackend>(); }

}  // namespace tripod
