// Where a text stops being UTF-8. `data prepare` promises that its tokens decode back to the exact
// input; SentencePiece reads UTF-8 only and turned any other byte (Latin-1's 0xE9, a stray 0xFF)
// into U+FFFD without a word, so the input is checked first and refused at the first bad byte.
#pragma once
#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

namespace tripod::data {

// The offset of the first byte that does not begin a well-formed UTF-8 sequence (a stray byte, or
// the lead of a broken, overlong, surrogate or past-U+10FFFF one); nullopt for valid text.
std::optional<std::size_t> first_invalid_utf8(std::string_view text);

// The offset of the first U+2581 (LOWER ONE EIGHTH BLOCK, "▁"): SentencePiece's own mark for a
// space, which it cannot tell from a space in the text, so a "t▁he" decoded as "t he" (the tokens
// of the two were the same); nullopt where there is none.
std::optional<std::size_t> first_space_marker(std::string_view text);

// "line 3, column 7 (byte offset 41, 0xE9)" for that offset, for a message.
std::string describe_text_offset(std::string_view text, std::size_t offset);

}  // namespace tripod::data
