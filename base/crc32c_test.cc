#include "base/crc32c.h"

#include <cstring>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

namespace nasgw {
namespace {

// Check values from RFC 3720 appendix B.4 and the common "123456789" vector.
TEST(Crc32c, KnownVectors) {
  EXPECT_EQ(Crc32c("123456789", 9), 0xE3069283u);
  uint8_t zeros[32] = {};
  EXPECT_EQ(Crc32c(zeros, 32), 0x8A9136AAu);
  uint8_t ones[32];
  std::memset(ones, 0xff, 32);
  EXPECT_EQ(Crc32c(ones, 32), 0x62A8AB43u);
  uint8_t inc[32];
  for (int i = 0; i < 32; i++) inc[i] = static_cast<uint8_t>(i);
  EXPECT_EQ(Crc32c(inc, 32), 0x46DD794Eu);
}

TEST(Crc32c, ExtendsIncrementally) {
  std::string s = "the quick brown fox jumps over the lazy dog";
  uint32_t whole = Crc32c(s.data(), s.size());
  uint32_t part = Crc32c(Crc32c(s.data(), 10), s.data() + 10, s.size() - 10);
  EXPECT_EQ(whole, part);
}

// The instruction and the table agree at every length and alignment.
TEST(Crc32c, FastAndPortableAgree) {
  std::mt19937_64 rng(7);
  std::vector<uint8_t> buf(70000);
  for (auto& b : buf) b = static_cast<uint8_t>(rng());
  for (size_t off = 0; off < 9; off++) {
    for (size_t len :
         {size_t{0}, size_t{1}, size_t{7}, size_t{8}, size_t{9}, size_t{63}, size_t{4096}, size_t{65536} + 13}) {
      for (uint32_t seed : {0u, 0xdeadbeefu}) {
        ASSERT_EQ(Crc32c(seed, buf.data() + off, len), Crc32cPortable(seed, buf.data() + off, len))
            << "offset " << off << " length " << len;
      }
    }
  }
}

}  // namespace
}  // namespace nasgw
