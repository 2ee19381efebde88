// data prepare's UTF-8 check (data/utf8_check.h): SentencePiece turned non-UTF-8 bytes into
// U+FFFD silently, so the prepared tokens no longer decoded back to the input.
#include <gtest/gtest.h>

#include "data/utf8_check.h"

namespace tripod::data {
namespace {

TEST(Utf8Check, WellFormedTextPasses) {
  EXPECT_EQ(first_invalid_utf8("plain ascii\n"), std::nullopt);
  EXPECT_EQ(first_invalid_utf8("caf\xC3\xA9 \xE4\xB8\x80 \xF0\x9F\x98\x80 \xF4\x8F\xBF\xBF"), std::nullopt);
  EXPECT_EQ(first_invalid_utf8(""), std::nullopt);
}

TEST(Utf8Check, TheFirstBadByteIsFound) {
  EXPECT_EQ(first_invalid_utf8("caf\xE9 au lait"), 3u);     // Latin-1: a lead without its continuation
  EXPECT_EQ(first_invalid_utf8("ab\xFF"), 2u);              // never valid
  EXPECT_EQ(first_invalid_utf8("\x80"), 0u);                // a continuation without a lead
  EXPECT_EQ(first_invalid_utf8("x\xC0\xAF"), 1u);           // an overlong '/'
  EXPECT_EQ(first_invalid_utf8("\xE0\x80\xAF"), 0u);        // overlong, three bytes
  EXPECT_EQ(first_invalid_utf8("\xED\xA0\x80"), 0u);        // a surrogate, U+D800
  EXPECT_EQ(first_invalid_utf8("\xF4\x90\x80\x80"), 0u);    // past U+10FFFF
  EXPECT_EQ(first_invalid_utf8("ok \xE4\xB8"), 3u);         // cut short at the end
  EXPECT_EQ(first_invalid_utf8("\xE4\xB8x"), 0u);           // a bad third byte
}

TEST(Utf8Check, SentencePiecesMarkForASpaceIsFound) {
  EXPECT_EQ(first_space_marker("t\xE2\x96\x81he"), 1u);
  EXPECT_EQ(first_space_marker("the \xE2\x96\x80\xE2\x96\x82"), std::nullopt);  // its neighbours are fine
  EXPECT_EQ(first_space_marker(""), std::nullopt);
}

TEST(Utf8Check, TheOffsetIsDescribedByLineAndColumn) {
  const std::string text = "first\nsecond caf\xE9";
  EXPECT_EQ(describe_text_offset(text, *first_invalid_utf8(text)), "line 2, column 11 (byte offset 16, 0xE9)");
}

}  // namespace
}  // namespace tripod::data
