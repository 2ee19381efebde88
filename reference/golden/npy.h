// NumPy's .npy format (version 1.0) for the int32 token arrays of a golden bundle: what every
// framework's Python side reads with numpy.load, without a library on the C++ side for one dtype.
//   magic "\x93NUMPY", version 1 0, uint16 header length (little-endian), then the header, a Python
//   dict literal {'descr': '<i4', 'fortran_order': False, 'shape': (K, B, T), } padded with spaces
//   and a newline so the data starts at a multiple of 64 bytes, then the data, C order.
#pragma once
#include <cstdint>
#include <filesystem>
#include <vector>

namespace tripod::golden {

struct Int32Array {
  std::vector<int64_t> shape;
  std::vector<int32_t> values;  // row-major
};

// Written to `path.tmp` and renamed, so a crash never leaves half an array under the real name.
void write_npy_int32(const std::filesystem::path& path, const Int32Array& array);
// Throws tripod::Error naming the file on anything but a little-endian int32 C-order array whose
// data size matches its shape (also truncated files and trailing bytes).
Int32Array read_npy_int32(const std::filesystem::path& path);

}  // namespace tripod::golden
