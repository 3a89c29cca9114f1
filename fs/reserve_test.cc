#include "fs/reserve.h"

#include <algorithm>
#include <random>

#include <gtest/gtest.h>

#include "block/mem_device.h"

namespace nasgw::fs {
namespace {

using block::MemDevice;
using block::MemLun;

constexpr uint64_t kMiB = 1 << 20;

struct Lun {
  std::shared_ptr<MemLun> medium;
  std::shared_ptr<MemDevice> dev;
};

Lun NewLun(const std::string& id, uint64_t mib = 8, uint32_t bs = 512) {
  Lun l;
  l.medium = std::make_shared<MemLun>(bs, mib * kMiB / bs, "naa." + id);
  l.dev = std::make_shared<MemDevice>(l.medium);
  return l;
}

std::vector<Reserve::Device> Devs(const std::vector<Lun>& luns) {
  std::vector<Reserve::Device> v;
  v.reserve(luns.size());
  for (const auto& l : luns) v.push_back(l.dev);
  return v;
}

ReserveOptions Small(const std::string& name = "tank") {
  ReserveOptions o;
  o.name = name;
  o.ag_bytes = kMiB;
  return o;
}

TEST(Reserve, FormatThenOpenInAnyOrder) {
  std::vector<Lun> luns = {NewLun("a1"), NewLun("a2", 16), NewLun("a3", 10)};
  auto r = Reserve::Format(Devs(luns), Small());
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ((*r)->lun_count(), 3u);
  // 8 MiB LUN: 6 groups of 1 MiB between the 1 MiB header and trailer.
  EXPECT_EQ((*r)->ag_count(0), 6u);
  EXPECT_EQ((*r)->capacity_bytes(), (6 + 14 + 8) * kMiB);
  const Uuid id = (*r)->uuid();

  std::vector<Reserve::Device> shuffled = {luns[2].dev, luns[0].dev, luns[1].dev};
  auto o = Reserve::Open(shuffled);
  ASSERT_TRUE(o.ok()) << o.status().ToString();
  EXPECT_EQ((*o)->uuid(), id);
  EXPECT_EQ((*o)->name(), "tank");
  EXPECT_EQ((*o)->lun(0), luns[0].dev) << "members come back in their reserve order";
  EXPECT_EQ((*o)->lun(2), luns[2].dev);
  EXPECT_TRUE((*o)->repairs().empty());
}

TEST(Reserve, LabelsSurviveAPowerCut) {
  std::vector<Lun> luns = {NewLun("p1")};
  ASSERT_TRUE(Reserve::Format(Devs(luns), Small()).ok());
  luns[0].medium->PowerCut();
  EXPECT_TRUE(Reserve::Open(Devs(luns)).ok()) << "labels are written with FUA and flushed";
}

TEST(Reserve, RefusesBlankForeignMixedDuplicateAndMissing) {
  std::vector<Lun> a = {NewLun("m1"), NewLun("m2")};
  std::vector<Lun> b = {NewLun("m3")};
  ASSERT_TRUE(Reserve::Format(Devs(a), Small("alpha")).ok());
  ASSERT_TRUE(Reserve::Format(Devs(b), Small("beta")).ok());
  Lun blank = NewLun("m4");

  auto foreign = Reserve::Open({a[0].dev, a[1].dev, blank.dev});
  EXPECT_EQ(foreign.status().code(), Code::kNotFound);
  EXPECT_NE(foreign.status().ToString().find("mem:naa.m4 carries no nasgw label"), std::string::npos)
      << foreign.status().ToString();

  auto mixed = Reserve::Open({a[0].dev, a[1].dev, b[0].dev});
  EXPECT_EQ(mixed.status().code(), Code::kInvalidArgument);
  EXPECT_NE(mixed.status().ToString().find("two reserves"), std::string::npos) << mixed.status().ToString();
  EXPECT_NE(mixed.status().ToString().find("'beta'"), std::string::npos);

  // The same LUN reached twice (two initiator handles on one medium).
  auto twice = std::make_shared<MemDevice>(a[0].medium);
  auto dup = Reserve::Open({a[0].dev, a[1].dev, twice});
  EXPECT_EQ(dup.status().code(), Code::kInvalidArgument);
  EXPECT_NE(dup.status().ToString().find("same LUN label"), std::string::npos) << dup.status().ToString();

  auto missing = Reserve::Open({a[1].dev});
  EXPECT_EQ(missing.status().code(), Code::kNotFound);
  EXPECT_NE(missing.status().ToString().find("missing LUN 0"), std::string::npos) << missing.status().ToString();
}

TEST(Reserve, FormatRefusesLabelledLunsUnlessForced) {
  std::vector<Lun> luns = {NewLun("f1")};
  ASSERT_TRUE(Reserve::Format(Devs(luns), Small("first")).ok());
  auto again = Reserve::Format(Devs(luns), Small("second"));
  EXPECT_EQ(again.status().code(), Code::kExists);
  EXPECT_NE(again.status().ToString().find("already belongs to reserve 'first'"), std::string::npos);
  ReserveOptions force = Small("second");
  force.force = true;
  ASSERT_TRUE(Reserve::Format(Devs(luns), force).ok());
  auto o = Reserve::Open(Devs(luns));
  ASSERT_TRUE(o.ok());
  EXPECT_EQ((*o)->name(), "second");
}

TEST(Reserve, FormatRefusesBadInput) {
  Lun tiny = NewLun("t1", 2);  // header + trailer, no room for a group
  EXPECT_EQ(Reserve::Format({tiny.dev}, Small()).status().code(), Code::kInvalidArgument);
  Lun ok = NewLun("t2");
  EXPECT_EQ(Reserve::Format({ok.dev, ok.dev}, Small()).status().code(), Code::kInvalidArgument);
  ReserveOptions bad_ag = Small();
  bad_ag.ag_bytes = 1000;
  EXPECT_EQ(Reserve::Format({ok.dev}, bad_ag).status().code(), Code::kInvalidArgument);
  EXPECT_EQ(Reserve::Format({}, Small()).status().code(), Code::kInvalidArgument);
  EXPECT_EQ(Reserve::Format({ok.dev}, Small(std::string(64, 'x'))).status().code(), Code::kInvalidArgument);
}

// The split into domains is fixed at format, carried by every label
// (including a LUN's added later) and checked on open.
TEST(Reserve, TheDomainCountIsKeptByEveryLabel) {
  std::vector<Lun> luns = {NewLun("d1"), NewLun("d2", 12)};
  ReserveOptions o = Small();
  o.domains = 3;
  auto r = Reserve::Format(Devs(luns), o);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ((*r)->domains(), 3u);
  Lun extra = NewLun("d3");
  ASSERT_TRUE((*r)->AddLun(extra.dev).ok());
  EXPECT_EQ((*r)->label(2).domains, 3u);
  auto back = Reserve::Open({extra.dev, luns[0].dev, luns[1].dev});
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ((*back)->domains(), 3u);
  auto one = Reserve::Format({NewLun("d4").dev}, Small());
  ASSERT_TRUE(one.ok());
  EXPECT_EQ((*one)->domains(), 1u);

  // A LUN whose (valid) labels say another count is not this reserve's.
  LunLabel l = (*back)->label(1);
  l.domains = 2;
  ASSERT_TRUE(WriteLabels(*luns[1].dev, l).ok());
  auto mixed = Reserve::Open({luns[0].dev, luns[1].dev, extra.dev}, /*read_only=*/true);
  ASSERT_FALSE(mixed.ok());
  EXPECT_EQ(mixed.status().code(), Code::kCorruption) << mixed.status().ToString();
  EXPECT_NE(mixed.status().ToString().find("has 2 domains"), std::string::npos) << mixed.status().ToString();
}

TEST(Reserve, FormatRefusesMoreDomainsThanTheLunsHold) {
  Lun lun = NewLun("s1");  // 6 groups: 3 domains of 2, not 4
  ReserveOptions o = Small();
  for (uint32_t bad : {0u, 4u, kReserveDomainsMax + 1}) {
    o.domains = bad;
    auto r = Reserve::Format({lun.dev}, o);
    EXPECT_EQ(r.status().code(), Code::kInvalidArgument) << bad;
  }
  o.domains = 4;
  EXPECT_NE(Reserve::Format({lun.dev}, o).status().ToString().find("domain 0 would get at most 1 group of each LUN"),
            std::string::npos);
  EXPECT_EQ(ReadLabels(*lun.dev)->primary.status().code(), Code::kNotFound) << "nothing written";
  // Two groups in all are not enough when they are one on each of two LUNs:
  // both would go to metadata.
  std::vector<Lun> two = {NewLun("s2", 4), NewLun("s3", 4)};  // 2 groups each
  o.domains = 2;
  EXPECT_EQ(Reserve::Format(Devs(two), o).status().code(), Code::kInvalidArgument);
  o.domains = 3;
  EXPECT_TRUE(Reserve::Format({lun.dev}, o).ok());
}

// Each domain gets a contiguous share of every LUN; the shares cover the LUN
// exactly, whatever the counts.
TEST(Reserve, AgSlicesCoverEachLunOnceAndEvenly) {
  for (uint32_t n : {0u, 1u, 2u, 5u, 6u, 97u, 1000u}) {
    for (uint32_t domains = 1; domains <= kReserveDomainsMax; domains++) {
      uint32_t next = 0, least = UINT32_MAX, most = 0;
      for (uint32_t d = 0; d < domains; d++) {
        const Reserve::Slice s = Reserve::AgSlice(n, d, domains);
        ASSERT_EQ(s.first, next) << n << " " << d << "/" << domains;
        next += s.count;
        least = std::min(least, s.count);
        most = std::max(most, s.count);
      }
      EXPECT_EQ(next, n);
      EXPECT_LE(most - least, 1u) << n << " groups in " << domains;
    }
  }
}

TEST(Reserve, DamagedCopyIsRepairedFromTheOther) {
  std::vector<Lun> luns = {NewLun("d1"), NewLun("d2")};
  ASSERT_TRUE(Reserve::Format(Devs(luns), Small()).ok());
  std::vector<uint8_t> junk(kLabelBytes, 0xEE);
  ASSERT_TRUE(block::WriteSync(*luns[1].dev, 0, junk.data(), junk.size()).ok());  // primary of LUN 1
  auto o = Reserve::Open(Devs(luns));
  ASSERT_TRUE(o.ok()) << o.status().ToString();
  ASSERT_EQ((*o)->repairs().size(), 1u);
  EXPECT_NE((*o)->repairs()[0].find("primary copy rewritten"), std::string::npos) << (*o)->repairs()[0];
  auto copies = ReadLabels(*luns[1].dev);
  ASSERT_TRUE(copies.ok());
  EXPECT_TRUE(copies->primary.ok());

  // Both copies gone: refused, with both reasons.
  const uint64_t last = luns[0].dev->info().num_blocks - kLabelBytes / 512;
  ASSERT_TRUE(block::WriteSync(*luns[0].dev, 0, junk.data(), junk.size()).ok());
  ASSERT_TRUE(block::WriteSync(*luns[0].dev, last, junk.data(), junk.size()).ok());
  auto bad = Reserve::Open(Devs(luns));
  EXPECT_EQ(bad.status().code(), Code::kNotFound) << bad.status().ToString();  // junk has no magic
}

TEST(Reserve, CorruptLabelBehindValidMagicIsCorruption) {
  std::vector<Lun> luns = {NewLun("c1")};
  ASSERT_TRUE(Reserve::Format(Devs(luns), Small()).ok());
  const uint64_t last = luns[0].dev->info().num_blocks - kLabelBytes / 512;
  for (uint64_t lba : {uint64_t{0}, last}) {
    std::vector<uint8_t> b(kLabelBytes);
    ASSERT_TRUE(block::ReadSync(*luns[0].dev, lba, b.data(), b.size()).ok());
    b[100] ^= 0xff;
    ASSERT_TRUE(block::WriteSync(*luns[0].dev, lba, b.data(), b.size()).ok());
  }
  auto r = Reserve::Open(Devs(luns));
  EXPECT_EQ(r.status().code(), Code::kCorruption);
  EXPECT_NE(r.status().ToString().find("both labels"), std::string::npos) << r.status().ToString();
}

TEST(Reserve, AddLunGrowsOnlineAndPersists) {
  std::vector<Lun> luns = {NewLun("g1"), NewLun("g2")};
  auto r = Reserve::Format(Devs(luns), Small());
  ASSERT_TRUE(r.ok());
  const uint64_t before = (*r)->capacity_bytes();
  Lun extra = NewLun("g3", 12);
  ASSERT_TRUE((*r)->AddLun(extra.dev).ok());
  EXPECT_EQ((*r)->lun_count(), 3u);
  EXPECT_EQ((*r)->capacity_bytes(), before + 10 * kMiB);
  EXPECT_EQ((*r)->generation(), 2u);
  EXPECT_EQ((*r)->AddLun(extra.dev).code(), Code::kExists);

  auto o = Reserve::Open({extra.dev, luns[1].dev, luns[0].dev});
  ASSERT_TRUE(o.ok()) << o.status().ToString();
  EXPECT_EQ((*o)->lun_count(), 3u);
  EXPECT_EQ((*o)->lun(2), extra.dev);
  auto without = Reserve::Open(Devs(luns));
  EXPECT_EQ(without.status().code(), Code::kNotFound) << "the added LUN is now required";
}

TEST(Reserve, InterruptedAddResolvesToOldOrNewReserve) {
  // Crash after the new LUN is labelled but before any old label changes:
  // without it the old reserve opens; with it, the add completes.
  std::vector<Lun> luns = {NewLun("i1"), NewLun("i2")};
  auto r = Reserve::Format(Devs(luns), Small());
  ASSERT_TRUE(r.ok());
  Lun extra = NewLun("i3");
  for (auto& l : luns) {
    l.dev->SetFault([](const block::IoRequest& req) {
      return req.op == block::Op::kWrite ? Status::IoError("injected: node died") : Status();
    });
  }
  EXPECT_FALSE((*r)->AddLun(extra.dev).ok());
  for (auto& l : luns) l.dev->SetFault(nullptr);

  auto old = Reserve::Open(Devs(luns));
  ASSERT_TRUE(old.ok()) << old.status().ToString();
  EXPECT_EQ((*old)->lun_count(), 2u);

  auto completed = Reserve::Open({luns[0].dev, luns[1].dev, extra.dev});
  ASSERT_TRUE(completed.ok()) << completed.status().ToString();
  EXPECT_EQ((*completed)->lun_count(), 3u);
  EXPECT_EQ((*completed)->repairs().size(), 2u) << "both old members are brought to the new generation";
  auto again = Reserve::Open(Devs(luns));
  EXPECT_EQ(again.status().code(), Code::kNotFound) << "once completed, the add sticks";
}

TEST(Reserve, RemovedOrCopiedLunIsRefused) {
  std::vector<Lun> luns = {NewLun("r1")};
  ASSERT_TRUE(Reserve::Format(Devs(luns), Small()).ok());
  // A block-level copy of the LUN onto another LUN: same label, other identity.
  Lun copy = NewLun("r2");
  std::vector<uint8_t> all(luns[0].dev->info().size_bytes());
  ASSERT_TRUE(block::ReadSync(*luns[0].dev, 0, all.data(), all.size()).ok());
  ASSERT_TRUE(block::WriteSync(*copy.dev, 0, all.data(), all.size()).ok());
  auto r = Reserve::Open({copy.dev});
  EXPECT_EQ(r.status().code(), Code::kInvalidArgument);
  EXPECT_NE(r.status().ToString().find("a copy of a reserve LUN"), std::string::npos) << r.status().ToString();
}

TEST(Reserve, FourKBlockLuns) {
  std::vector<Lun> luns = {NewLun("k1", 8, 4096), NewLun("k2", 8, 4096)};
  ASSERT_TRUE(Reserve::Format(Devs(luns), Small()).ok());
  auto o = Reserve::Open(Devs(luns));
  ASSERT_TRUE(o.ok()) << o.status().ToString();
  EXPECT_EQ((*o)->label(1).block_size, 4096u);
}

}  // namespace
}  // namespace nasgw::fs
