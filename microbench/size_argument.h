// Byte sizes as nccl-tests' -b/-e take them ("8", "128K", "8M", "1G"), for the bare-MPI baselines
// (programs with nothing of Tripod in them, so not the CLI's parser).
#pragma once
#include <cstdlib>

inline long long parse_size(const char* text) {
  char* end = nullptr;
  const double number = std::strtod(text, &end);
  const double unit = *end == 'K' || *end == 'k' ? 1024.0 : *end == 'M' || *end == 'm' ? 1048576.0
                      : *end == 'G' || *end == 'g' ? 1073741824.0 : 1.0;
  return static_cast<long long>(number * unit);
}
