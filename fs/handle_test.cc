#include "fs/handle.h"

#include <cstring>
#include <set>

#include <gtest/gtest.h>

#include "block/mem_device.h"
#include "fs/domain.h"

namespace nasgw::fs {
namespace {

std::string Secret(uint8_t first) {
  std::string s(kHandleSecretBytes, '\0');
  for (size_t i = 0; i < s.size(); i++) s[i] = static_cast<char>(first + i);
  return s;
}

Handle Sample() {
  Handle h;
  h.volume = 7;
  h.ino = 42;
  h.gen = 0x1122334455667788ull;
  h.snap = 0;
  h.scope = 1;
  return h;
}

TEST(HandleKey, MatchesHmacSha256Truncated) {
  // python3: hmac.new(bytes(range(32)), struct.pack('<BIQQIQ', 2, 7, 42,
  //          0x1122334455667788, 0, 1), hashlib.sha256).hexdigest()[:32]
  auto k = HandleKey::FromSecret(Secret(0));
  ASSERT_TRUE(k.ok());
  const HandleMac m = k->Mac(Sample());
  const uint8_t want[16] = {0xc8, 0xc2, 0xfa, 0x60, 0x05, 0xd8, 0x2d, 0xf0,
                            0xdb, 0x52, 0x2b, 0x69, 0xd3, 0xd4, 0xbc, 0xbb};
  EXPECT_EQ(0, std::memcmp(m.data(), want, 16));
}

TEST(HandleKey, RefusesBadSecrets) {
  EXPECT_FALSE(HandleKey::FromSecret("short").ok());
  EXPECT_FALSE(HandleKey::FromSecret(std::string(33, 'x')).ok());
  HandleKey none;
  Handle h = Sample();
  EXPECT_FALSE(none.Verify(h));  // no key verifies nothing, not even an all-zero MAC
}

TEST(HandleKey, VerifiesWhatItIssued) {
  auto k = HandleKey::FromSecret(Secret(1)).value();
  Handle h = Sample();
  h.mac = k.Mac(h);
  EXPECT_TRUE(k.Verify(h));
}

TEST(HandleKey, EveryBitOfEveryFieldCounts) {
  auto k = HandleKey::FromSecret(Secret(2)).value();
  Handle good = Sample();
  good.mac = k.Mac(good);
  int tried = 0;
  for (int bit = 0; bit < 32; bit++) {
    Handle h = good;
    h.volume ^= 1u << bit;
    EXPECT_FALSE(k.Verify(h)) << "volume bit " << bit;
    h = good;
    h.snap ^= 1u << bit;
    EXPECT_FALSE(k.Verify(h)) << "snapshot bit " << bit;
    tried += 2;
  }
  for (int bit = 0; bit < 64; bit++) {
    Handle h = good;
    h.ino ^= 1ull << bit;
    EXPECT_FALSE(k.Verify(h)) << "inode bit " << bit;
    h = good;
    h.gen ^= 1ull << bit;
    EXPECT_FALSE(k.Verify(h)) << "generation bit " << bit;
    h = good;
    h.scope ^= 1ull << bit;
    EXPECT_FALSE(k.Verify(h)) << "scope bit " << bit;
    tried += 3;
  }
  for (size_t byte = 0; byte < kHandleMacBytes; byte++) {
    for (int bit = 0; bit < 8; bit++) {
      Handle h = good;
      h.mac[byte] ^= static_cast<uint8_t>(1 << bit);
      EXPECT_FALSE(k.Verify(h)) << "mac byte " << byte << " bit " << bit;
      tried++;
    }
  }
  EXPECT_EQ(tried, 64 + 192 + 128);
}

TEST(HandleKey, NoWildcardGeneration) {
  auto k = HandleKey::FromSecret(Secret(3)).value();
  Handle h = Sample();
  h.mac = k.Mac(h);
  Handle zero = h;
  zero.gen = 0;  // what "any generation" used to be
  EXPECT_FALSE(k.Verify(zero));
  Handle other = h;
  other.gen = NewGeneration();
  EXPECT_FALSE(k.Verify(other));
}

TEST(HandleKey, AnotherSecretRefuses) {
  auto a = HandleKey::FromSecret(Secret(4)).value();
  auto b = HandleKey::FromSecret(Secret(5)).value();
  auto c = HandleKey::FromSecret(NewHandleSecret()).value();
  Handle h = Sample();
  h.mac = a.Mac(h);
  EXPECT_TRUE(a.Verify(h));
  EXPECT_FALSE(b.Verify(h));
  EXPECT_FALSE(c.Verify(h));
}

TEST(HandleKey, NewSecretsDiffer) {
  std::set<std::string> seen;
  for (int i = 0; i < 64; i++) {
    std::string s = NewHandleSecret();
    EXPECT_EQ(s.size(), kHandleSecretBytes);
    EXPECT_TRUE(seen.insert(s).second);
  }
}

TEST(Generation, RandomNonZeroDistinct) {
  std::set<uint64_t> seen;
  int high = 0;
  for (int i = 0; i < 10000; i++) {
    const uint64_t g = NewGeneration();
    EXPECT_NE(g, 0u);
    EXPECT_TRUE(seen.insert(g).second);
    high += (g >> 63) != 0;
  }
  // 64 random bits, not a counter: about half have the top bit set.
  EXPECT_GT(high, 4000);
  EXPECT_LT(high, 6000);
}

// ---- the domain's side: random generations, a secret kept with the domain

class DomainHandleTest : public ::testing::Test {
 protected:
  static constexpr uint64_t kMiB = 1 << 20;
  std::shared_ptr<Reserve> Make(const std::string& naa) {
    std::vector<Reserve::Device> devs;
    media_.push_back(std::make_shared<block::MemLun>(512, 64 * kMiB / 512, naa));
    devs.push_back(std::make_shared<block::MemDevice>(media_.back()));
    ReserveOptions o;
    o.name = "h";
    o.ag_bytes = 4 * kMiB;
    return std::move(Reserve::Format(devs, o).value());
  }
  static DomainOptions Options() {
    DomainOptions o;
    o.store.write_buffer_bytes = 256 << 10;
    o.store.block_cache_bytes = 1 << 20;
    return o;
  }
  std::vector<std::shared_ptr<block::MemLun>> media_;
};

TEST_F(DomainHandleTest, GenerationsAreRandomAndStable) {
  auto reserve = Make("naa.h0");
  auto d = Domain::Create(reserve, 0, Options()).value();
  auto v = d->CreateVolume("v").value();
  auto root = d->GetAttr(v.id, kRootIno).value();
  EXPECT_NE(root.gen, 0u);
  std::set<uint64_t> gens{root.gen};
  std::vector<Attr> made;
  for (int i = 0; i < 50; i++) {
    auto a = d->Create(v.id, kRootIno, "f" + std::to_string(i), i % 5 ? FileType::kRegular : FileType::kDirectory, 0644,
                       0, 0);
    ASSERT_TRUE(a.ok()) << a.status().ToString();
    EXPECT_NE(a->gen, 0u);
    EXPECT_TRUE(gens.insert(a->gen).second) << "generation repeated";
    made.push_back(*a);
  }
  // Not the transaction-group counter any more: consecutive creates are
  // not consecutive numbers.
  int consecutive = 0;
  for (size_t i = 1; i < made.size(); i++) consecutive += made[i].gen == made[i - 1].gen + 1;
  EXPECT_LT(consecutive, 3);
  // Stable for the inode's life: changes and a reopen keep it.
  SetAttr s;
  s.set_mode = true;
  s.mode = 0600;
  ASSERT_TRUE(d->SetAttrs(v.id, made[1].ino, s).ok());
  ASSERT_TRUE(d->Rename(v.id, kRootIno, "f1", kRootIno, "g1").ok());
  EXPECT_EQ(d->GetAttr(v.id, made[1].ino)->gen, made[1].gen);
  d.reset();
  d = Domain::Open(reserve, 0, Options()).value();
  EXPECT_EQ(d->GetAttr(v.id, made[1].ino)->gen, made[1].gen);
  Handle h{v.id, made[1].ino, made[1].gen};
  EXPECT_TRUE(d->GetAttr(h).ok());
  h.gen = 0;
  EXPECT_EQ(d->GetAttr(h).status().code(), Code::kStale);  // 0 is a value like any other
}

TEST_F(DomainHandleTest, SecretKeptWithTheDomain) {
  auto r1 = Make("naa.h1");
  auto r2 = Make("naa.h2");
  auto d1 = Domain::Create(r1, 0, Options()).value();
  auto d2 = Domain::Create(r2, 0, Options()).value();
  ASSERT_TRUE(d1->handle_key().valid());
  Handle h = Sample();
  h.mac = d1->handle_key().Mac(h);
  EXPECT_TRUE(d1->handle_key().Verify(h));
  EXPECT_FALSE(d2->handle_key().Verify(h)) << "another reserve's secret";
  // Across a restart (or on another node opening the same LUNs) the key is
  // the same.
  d1.reset();
  std::vector<Reserve::Device> devs{r1->lun(0)};
  r1.reset();
  auto reopened = Reserve::Open(devs);
  ASSERT_TRUE(reopened.ok());
  auto again = Domain::Open(std::shared_ptr<Reserve>(std::move(reopened.value())), 0, Options());
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_TRUE((*again)->handle_key().Verify(h));
}

}  // namespace
}  // namespace nasgw::fs
