// tripod bench kernel-rate: the memory-bound operations of a GPT-2 step through the Backend
// interface (the CUDA backend's kernels, or the CPU backend's), each in GB/s of the bytes it must
// move at least, against a device-to-device copy of the same activation measured in the same run:
//   copy        x[N,C] -> y                      2 N C      (the yardstick: read + write)
//   add         y = a + b                        3 N C
//   bias_add    y[N,C] += b[C]                   2 N C
//   layernorm   forward: read x, write y         2 N C      backward: dout, x -> dx (+=), dw, db   4 N C
//   gelu        forward on [N,4C]                2 N 4C     backward: inp, dout -> dinp            3 N 4C
//   adamw       one [N,C] tensor: p, g, m, v read, p, m, v written                                  7 N C
//   softmax-CE  forward over logits [N,V]        N V        backward, in place                     2 N V
//   attention   forward: qkv -> out, probs       4 N C + B H T^2   backward: dout, qkv, probs -> dqkv  7 N C + B H T^2
// N = --tokens rows, C = --channels, V = --vocab; attention's B = N / T sequences of T = --context
// tokens (at most N), H = --heads (default C / 64, GPT-2's head size). The bytes are the minimum
// any implementation reads and writes once; % of copy says how close a kernel comes to the memory
// system's rate. Attention also has products: its nominal FLOPs (the full T x T square, 4 B T^2 C
// forward, 8 B T^2 C backward) give a TFLOP/s column, the one figure that says how far it is from
// the GEMMs' rate.
// Timing: bench/timed_regions.h.
#pragma once
#include <cstdint>
#include <string>

namespace tripod::bench {

struct KernelRateOptions {
  std::string backend = "cpu";
  std::string dtype = "fp32";  // fp32 or fp64
  int64_t tokens = 8192, channels = 768, vocab = 50257;
  int64_t context = 1024, heads = 0;  // attention: T (at most N) and H (0: C / 64, at least 1)
  int repeat = 10;
  double min_time_ms = 5;
  std::string json_out;
};

void run_kernel_rate(const KernelRateOptions& options);

}  // namespace tripod::bench
