#include "base/coding.h"

#include <gtest/gtest.h>

namespace nasgw {
namespace {

TEST(Coding, EncoderDecoderRoundTrip) {
  Encoder e;
  e.U8(0xAB);
  e.U16(0xBEEF);
  e.U32(0xDEADBEEF);
  e.U64(0x0123456789ABCDEFull);
  e.Str16("name");
  e.Str32(std::string(70000, 'x'));
  const std::string bytes = e.Release();
  EXPECT_EQ(static_cast<uint8_t>(bytes[1]), 0xEF) << "little-endian";
  Decoder d(bytes);
  EXPECT_EQ(d.U8(), 0xAB);
  EXPECT_EQ(d.U16(), 0xBEEF);
  EXPECT_EQ(d.U32(), 0xDEADBEEFu);
  EXPECT_EQ(d.U64(), 0x0123456789ABCDEFull);
  EXPECT_EQ(d.Str16(), "name");
  EXPECT_EQ(d.Str32().size(), 70000u);
  EXPECT_TRUE(d.ok());
  EXPECT_EQ(d.U8(), 0);
  EXPECT_FALSE(d.ok()) << "reading past the end is remembered";
}

TEST(Coding, TruncatedInputNeverReadsPastTheEnd) {
  Encoder e;
  e.Str32("0123456789");
  const std::string full = e.Release();
  for (size_t n = 0; n < full.size(); n++) {
    Decoder d(std::string_view(full).substr(0, n));
    std::string s = d.Str32();
    EXPECT_FALSE(d.ok()) << n;
    EXPECT_TRUE(s.empty());
  }
}

}  // namespace
}  // namespace nasgw
