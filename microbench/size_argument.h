// Byte sizes as nccl-tests' -b/-e take them ("8", "128K", "8M", "1G"), for the bare-MPI baselines
// (programs with nothing of Tripod in them, so not the CLI's parser).
#pragma once
#include <cstdlib>
#include <string>

inline long long parse_size(const char* text) {
  char* end = nullptr;
  const double number = std::strtod(text, &end);
  const double unit = *end == 'K' || *end == 'k' ? 1024.0 : *end == 'M' || *end == 'm' ? 1048576.0
                      : *end == 'G' || *end == 'g' ? 1073741824.0 : 1.0;
  return static_cast<long long>(number * unit);
}

// The size sweep of both baselines, with nccl-tests' flags: -b first size, -e last, -f factor.
struct SizeSweep {
  long long min_bytes, max_bytes, factor;
};

// Reads `flag value` into the sweep when the flag is -b, -e or -f; false for any other flag.
inline bool read_sweep_flag(const std::string& flag, const char* value, SizeSweep& sweep) {
  if (flag == "-b") sweep.min_bytes = parse_size(value);
  else if (flag == "-e") sweep.max_bytes = parse_size(value);
  else if (flag == "-f") sweep.factor = std::atoll(value);
  else return false;
  return true;
}
