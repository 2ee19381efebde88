#include "golden/npy.h"

#include <charconv>
#include <cstring>
#include <fstream>
#include <iterator>
#include <limits>
#include <regex>
#include <string>

#include "core/error.h"

namespace fs = std::filesystem;

namespace tripod::golden {
namespace {

constexpr char kMagic[] = "\x93NUMPY";
constexpr std::size_t kMagicBytes = 6, kPreambleBytes = 10;  // magic, version (2), header length (2)

int64_t element_count(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

}  // namespace

void write_npy_int32(const fs::path& path, const Int32Array& array) {
  TRIPOD_CHECK(element_count(array.shape) == static_cast<int64_t>(array.values.size()), path.string(),
               ": shape and value count disagree");
  std::string shape;
  for (int64_t d : array.shape) shape += std::to_string(d) + ", ";  // "(K, B, T, )" is valid; one dim needs the comma
  std::string header = "{'descr': '<i4', 'fortran_order': False, 'shape': (" + shape + "), }";
  header.append((64 - (kPreambleBytes + header.size() + 1) % 64) % 64, ' ');
  header += '\n';
  const fs::path tmp = path.string() + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    TRIPOD_CHECK(out.good(), "cannot write ", tmp.string());
    const uint16_t length = static_cast<uint16_t>(header.size());
    const unsigned char version_and_length[4] = {1, 0, static_cast<unsigned char>(length & 0xff),
                                                  static_cast<unsigned char>(length >> 8)};
    out.write(kMagic, kMagicBytes);
    out.write(reinterpret_cast<const char*>(version_and_length), 4);
    out.write(header.data(), static_cast<std::streamsize>(header.size()));
    // x86-64 and aarch64 are little-endian, which '<i4' says.
    out.write(reinterpret_cast<const char*>(array.values.data()),
              static_cast<std::streamsize>(array.values.size() * sizeof(int32_t)));
    TRIPOD_CHECK(out.good(), "writing ", tmp.string(), " failed (disk full?)");
  }
  fs::rename(tmp, path);
}

Int32Array read_npy_int32(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  TRIPOD_CHECK(in.good(), path.string(), ": cannot open");
  const std::string bytes{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
  TRIPOD_CHECK(bytes.size() >= kPreambleBytes && bytes.compare(0, kMagicBytes, kMagic, kMagicBytes) == 0, path.string(),
               ": not a .npy file (no \\x93NUMPY magic)");
  TRIPOD_CHECK(bytes[6] == 1 && bytes[7] == 0, path.string(), ": .npy version ", int(bytes[6]), ".", int(bytes[7]),
               ", only 1.0 is read");
  const std::size_t length = static_cast<unsigned char>(bytes[8]) | (static_cast<std::size_t>(static_cast<unsigned char>(bytes[9])) << 8);
  TRIPOD_CHECK(bytes.size() >= kPreambleBytes + length, path.string(), ": truncated header");
  const std::string header = bytes.substr(kPreambleBytes, length);
  static const std::regex descr(R"('descr'\s*:\s*'([^']*)')"), order(R"('fortran_order'\s*:\s*(True|False))"),
      shape(R"('shape'\s*:\s*\(([^)]*)\))");
  // Searched one by one: a check's message parts are evaluated in an unspecified order.
  std::smatch m;
  const std::string dtype = std::regex_search(header, m, descr) ? m[1].str() : "(none)";
  if (dtype != "<i4" && dtype != "|i4") fail(path.string(), ": dtype ", dtype, ", expected int32 ('<i4')");
  if (!std::regex_search(header, m, order) || m[1] != "False") fail(path.string(), ": Fortran order is not read");
  if (!std::regex_search(header, m, shape)) fail(path.string(), ": no shape in the header");
  Int32Array array;
  const std::string dims = m[1].str();
  static const std::regex number(R"(\d+)");
  // Each dimension and their product are checked: std::stoll's out_of_range was an "internal error:
  // stoll" naming no file, and a product past int64 wrapped (to 0 for (2^62, 4): an empty payload passed).
  int64_t elements = 1;
  for (auto it = std::sregex_iterator(dims.begin(), dims.end(), number); it != std::sregex_iterator(); ++it) {
    const std::string text = it->str();
    int64_t dim = 0;
    const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), dim);
    const bool fits = error == std::errc() && end == text.data() + text.size() &&
                      !__builtin_mul_overflow(elements, dim, &elements) &&
                      elements <= std::numeric_limits<int64_t>::max() / static_cast<int64_t>(sizeof(int32_t));
    if (!fits) fail(path.string(), ": shape (", dims, ") holds more elements than any file can");
    array.shape.push_back(dim);
  }
  const std::size_t expected = static_cast<std::size_t>(elements) * sizeof(int32_t);
  const std::size_t data = bytes.size() - kPreambleBytes - length;
  TRIPOD_CHECK(data == expected, path.string(), ": ", data, " data bytes, the shape needs ", expected,
               data < expected ? " (truncated)" : " (trailing bytes)");
  array.values.resize(static_cast<std::size_t>(element_count(array.shape)));
  std::memcpy(array.values.data(), bytes.data() + kPreambleBytes + length, expected);
  return array;
}

}  // namespace tripod::golden
