// The command lines of the bare-MPI baselines (programs with nothing of Tripod in them, so not the
// CLI's parser): nccl-tests' size flags -b, -e, -f ("8", "128K", "8M", "1G") and each program's own
// integer flags. Every value is read whole: "-b 1X" was taken as 1 byte, a flag given last without
// a value was ignored, and -b 2 (a 0-float all-reduce) or -b 64 -e 8 (no row) ran and exited 0.
#pragma once
#include <cerrno>
#include <cstdlib>
#include <map>
#include <string>

// Bytes, or -1 for text that is not a size.
inline long long parse_size(const char* text) {
  char* end = nullptr;
  errno = 0;
  const double number = std::strtod(text, &end);
  if (end == text || errno != 0 || !(number >= 0)) return -1;
  double unit = 1.0;
  if (*end == 'K' || *end == 'k') unit = 1024.0;
  else if (*end == 'M' || *end == 'm') unit = 1048576.0;
  else if (*end == 'G' || *end == 'g') unit = 1073741824.0;
  if (unit != 1.0) ++end;
  if (*end != '\0' || number * unit > 9e18) return -1;
  return static_cast<long long>(number * unit);
}

// A whole decimal integer, or false.
inline bool parse_whole(const char* text, long long& value) {
  char* end = nullptr;
  errno = 0;
  value = std::strtoll(text, &end, 10);
  return end != text && *end == '\0' && errno == 0;
}

// The size sweep of both baselines, with nccl-tests' flags: -b first size, -e last, -f factor.
struct SizeSweep {
  long long min_bytes, max_bytes, factor;
};

// Reads `argv` into the sweep and `integers` (the program's own flags, e.g. "-n", with their
// defaults); `min_bytes`: the smallest -b the program can time (a float per rank). Returns "" or
// what is wrong, for the program to print before it stops.
inline std::string read_command_line(int argc, char** argv, SizeSweep& sweep, std::map<std::string, long long>& integers,
                                     long long min_bytes) {
  for (int i = 1; i < argc; i += 2) {
    const std::string flag = argv[i];
    if (i + 1 >= argc) return flag + " needs a value";
    const char* value = argv[i + 1];
    if (flag == "-b" || flag == "-e") {
      const long long bytes = parse_size(value);
      if (bytes < 0) return flag + " " + value + ": not a size (such as 8, 128K, 8M, 1G)";
      (flag == "-b" ? sweep.min_bytes : sweep.max_bytes) = bytes;
    } else if (flag == "-f" || integers.count(flag)) {
      long long number = 0;
      if (!parse_whole(value, number)) return flag + " " + value + ": not a whole number";
      (flag == "-f" ? sweep.factor : integers[flag]) = number;
    } else {
      return "unknown flag " + flag;
    }
  }
  if (sweep.min_bytes < min_bytes) return "-b must be at least " + std::to_string(min_bytes) + " bytes (a float per rank)";
  if (sweep.max_bytes < sweep.min_bytes) return "-e must be at least -b (the sweep would time nothing)";
  if (sweep.max_bytes > (1LL << 32)) return "-e must be at most 4G (element counts are ints)";
  if (sweep.factor < 2) return "-f must be at least 2";
  for (const auto& [flag, number] : integers)
    if (number < 0 || number > 1000000) return flag + " must be 0 to 1000000";
  return "";
}
