#include "fs/label.h"

#include <gtest/gtest.h>

#include "base/coding.h"
#include "base/crc32c.h"

namespace nasgw::fs {
namespace {

LunLabel Sample(uint32_t members = 3) {
  LunLabel l;
  l.reserve_uuid = Uuid::Random();
  l.generation = 7;
  l.lun_size_bytes = 64ull << 20;
  l.block_size = 512;
  l.ag_bytes = 1 << 20;
  l.created_ns = 1234567890123;
  l.designator = "naa.6000000000000000000000de68e0c801";
  l.reserve_name = "tank";
  for (uint32_t i = 0; i < members; i++) l.members.push_back({Uuid::Random(), (64ull + i) << 20, i});
  l.lun_index = 1;
  l.lun_uuid = l.members[1].lun_uuid;
  l.lun_size_bytes = l.members[1].size_bytes;
  return l;
}

TEST(Label, RoundTrip) {
  LunLabel l = Sample();
  auto bytes = EncodeLabel(l);
  ASSERT_EQ(bytes.size(), kLabelBytes);
  auto back = DecodeLabel(bytes);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back.value(), l);
}

TEST(Label, FullMemberTableRoundTrips) {
  LunLabel l = Sample(kReserveLunsMax);
  auto back = DecodeLabel(EncodeLabel(l));
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->members.size(), kReserveLunsMax);
}

TEST(Label, BlankIsNotFound) {
  std::vector<uint8_t> zeros(kLabelBytes, 0);
  EXPECT_EQ(DecodeLabel(zeros).status().code(), Code::kNotFound);
}

TEST(Label, EveryFlippedBitIsCaught) {
  const auto good = EncodeLabel(Sample());
  for (size_t byte = 8; byte < kLabelBytes; byte += 7) {  // past the magic
    auto bad = good;
    bad[byte] ^= 0x10;
    auto r = DecodeLabel(bad);
    ASSERT_FALSE(r.ok()) << "flip at byte " << byte << " went unnoticed";
    EXPECT_EQ(r.status().code(), Code::kCorruption) << byte;
  }
}

// Re-seals bytes with a valid checksum, to test the invariants behind it.
std::vector<uint8_t> Reseal(std::vector<uint8_t> b) {
  PutFixed32(&b[12], 0);
  PutFixed32(&b[12], Crc32c(b.data(), b.size()));
  return b;
}

TEST(Label, InvariantsCheckedBehindTheChecksum) {
  auto b = EncodeLabel(Sample());
  auto v3 = b;
  PutFixed32(&v3[8], 3);
  EXPECT_EQ(DecodeLabel(Reseal(v3)).status().code(), Code::kNotSupported);
  auto no_members = b;
  PutFixed32(&no_members[60], 0);
  EXPECT_EQ(DecodeLabel(Reseal(no_members)).status().code(), Code::kCorruption);
  auto odd_bs = b;
  PutFixed32(&odd_bs[72], 1000);
  EXPECT_EQ(DecodeLabel(Reseal(odd_bs)).status().code(), Code::kCorruption);
  auto not_self = b;
  not_self[32] ^= 1;  // LUN UUID no longer in the member table
  EXPECT_EQ(DecodeLabel(Reseal(not_self)).status().code(), Code::kCorruption);
  auto unterminated = b;
  for (int i = 0; i < 64; i++) unterminated[160 + i] = 'x';
  EXPECT_EQ(DecodeLabel(Reseal(unterminated)).status().code(), Code::kCorruption);
}

// A reserve of one domain keeps the label every nasgw reads (version 1, the
// count field zero); a split one says so in version 2, so that a reader of
// version 1 only refuses it rather than take every allocation group.
TEST(Label, TheDomainCountRaisesTheVersionOnlyWhenThereAreSeveral) {
  LunLabel one = Sample();
  auto b1 = EncodeLabel(one);
  EXPECT_EQ(GetFixed32(&b1[8]), kLabelFormatVersion);
  EXPECT_EQ(GetFixed32(&b1[224]), 0u);
  EXPECT_EQ(DecodeLabel(b1)->domains, 1u);
  for (uint32_t d : {2u, 5u, kReserveDomainsMax}) {
    LunLabel split = Sample();
    split.domains = d;
    auto b = EncodeLabel(split);
    EXPECT_EQ(GetFixed32(&b[8]), kLabelFormatVersionDomains);
    auto back = DecodeLabel(b);
    ASSERT_TRUE(back.ok()) << back.status().ToString();
    EXPECT_EQ(*back, split);
  }
  // Behind a valid checksum: a version 1 label with a count, a version 2
  // one with one domain or too many.
  auto v1_count = b1;
  PutFixed32(&v1_count[224], 2);
  EXPECT_EQ(DecodeLabel(Reseal(v1_count)).status().code(), Code::kCorruption);
  for (uint32_t bad : {0u, 1u, kReserveDomainsMax + 1}) {
    auto v2 = b1;
    PutFixed32(&v2[8], kLabelFormatVersionDomains);
    PutFixed32(&v2[224], bad);
    EXPECT_EQ(DecodeLabel(Reseal(v2)).status().code(), Code::kCorruption) << bad;
  }
}

}  // namespace
}  // namespace nasgw::fs
