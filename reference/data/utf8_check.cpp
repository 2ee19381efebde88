#include "data/utf8_check.h"

#include <algorithm>
#include <cstdio>

namespace tripod::data {

std::optional<std::size_t> first_invalid_utf8(std::string_view text) {
  const auto byte = [&](std::size_t i) { return static_cast<unsigned char>(text[i]); };
  for (std::size_t i = 0; i < text.size();) {
    const unsigned char lead = byte(i);
    if (lead < 0x80) {
      ++i;
      continue;
    }
    // The sequence's length and the range its second byte must lie in (RFC 3629's table: this
    // excludes overlong forms, the surrogates D800-DFFF and everything above U+10FFFF).
    std::size_t length = 0;
    unsigned char low = 0x80, high = 0xBF;
    if (lead >= 0xC2 && lead <= 0xDF) length = 2;
    else if (lead == 0xE0) length = 3, low = 0xA0;
    else if (lead >= 0xE1 && lead <= 0xEC) length = 3;
    else if (lead == 0xED) length = 3, high = 0x9F;
    else if (lead >= 0xEE && lead <= 0xEF) length = 3;
    else if (lead == 0xF0) length = 4, low = 0x90;
    else if (lead >= 0xF1 && lead <= 0xF3) length = 4;
    else if (lead == 0xF4) length = 4, high = 0x8F;
    else return i;  // a continuation byte without a lead, or C0, C1, F5-FF
    if (i + length > text.size()) return i;  // cut short at the end
    if (byte(i + 1) < low || byte(i + 1) > high) return i;  // the offset of the broken character
    for (std::size_t k = 2; k < length; ++k)
      if (byte(i + k) < 0x80 || byte(i + k) > 0xBF) return i;
    i += length;
  }
  return std::nullopt;
}

std::optional<std::size_t> first_space_marker(std::string_view text) {
  const std::size_t at = text.find("\xE2\x96\x81");
  return at == std::string_view::npos ? std::nullopt : std::optional<std::size_t>(at);
}

std::string describe_text_offset(std::string_view text, std::size_t offset) {
  offset = std::min(offset, text.size());
  const std::string_view before = text.substr(0, offset);
  const std::size_t line = 1 + static_cast<std::size_t>(std::count(before.begin(), before.end(), '\n'));
  const std::size_t line_start = before.rfind('\n') == std::string_view::npos ? 0 : before.rfind('\n') + 1;
  char text_out[96];
  std::snprintf(text_out, sizeof text_out, "line %zu, column %zu (byte offset %zu, 0x%02X)", line,
                offset - line_start + 1, offset, offset < text.size() ? static_cast<unsigned char>(text[offset]) : 0u);
  return text_out;
}

}  // namespace tripod::data
