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
// N = --tokens rows, C = --channels, V = --vocab. The bytes are the minimum any implementation
// reads and writes once; % of copy says how close a kernel comes to the memory system's rate.
// Timing: bench/timed_regions.h.
#pragma once
#include <cstdint>
#include <string>

namespace tripod::bench {

struct KernelRateOptions {
  std::string backend = "cpu";
  std::string dtype = "fp32";  // fp32 or fp64
  int64_t tokens = 8192, channels = 768, vocab = 50257;
  int repeat = 10;
  double min_time_ms = 5;
  std::string json_out;
};

void run_kernel_rate(const KernelRateOptions& options);

}  // namespace tripod::bench
