// Several domains on one reserve (fs/reserve.h, "Domains"): each takes its
// own share of every LUN, its own volume and export ids, keeps its files
// apart from the others' across a power cut and a LUN added, and fsck
// notices a group outside its share.
#include <random>

#include <gtest/gtest.h>

#include "block/mem_device.h"
#include "fs/domain.h"
#include "fs/metafs.h"

namespace nasgw::fs {
namespace {

constexpr uint64_t kMiB = 1 << 20;
constexpr uint64_t kAg = 4 * kMiB;

DomainOptions Small() {
  DomainOptions o;
  o.store.write_buffer_bytes = 256 << 10;
  o.store.block_cache_bytes = 1 << 20;
  o.metafs.log_compact_bytes = 512 << 10;
  return o;
}

class DomainsTest : public ::testing::Test {
 protected:
  std::shared_ptr<block::MemDevice> NewLun(uint64_t mib) {
    media_.push_back(
        std::make_shared<block::MemLun>(512, mib * kMiB / 512, "naa.doms" + std::to_string(media_.size())));
    return std::make_shared<block::MemDevice>(media_.back());
  }
  void Format(uint32_t domains, const std::vector<uint64_t>& lun_mib) {
    std::vector<Reserve::Device> devs;
    devs.reserve(lun_mib.size());
    for (uint64_t mib : lun_mib) devs.push_back(NewLun(mib));
    ReserveOptions o;
    o.name = "doms";
    o.ag_bytes = kAg;
    o.domains = domains;
    auto r = Reserve::Format(devs, o);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    reserve_ = std::move(r.value());
  }
  // The reserve again from its LUNs (after a power cut when asked).
  void ReopenReserve(bool power_cut) {
    doms_.clear();
    if (power_cut) {
      for (auto& m : media_) m->PowerCut();
    }
    std::vector<Reserve::Device> devs;
    for (uint32_t i = 0; i < reserve_->lun_count(); i++) devs.push_back(reserve_->lun(i));
    auto r = Reserve::Open(devs);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    reserve_ = std::move(r.value());
  }
  static std::string Bytes(size_t n, uint32_t seed) {
    std::mt19937 rng(seed);
    std::string s(n, 0);
    for (char& c : s) c = static_cast<char>(rng());
    return s;
  }
  static std::string ReadAll(Domain& d, uint32_t vol, uint64_t ino) {
    auto a = d.GetAttr(vol, ino);
    if (!a.ok()) return "<" + a.status().ToString() + ">";
    std::string s(a->size, 0);
    auto n = d.Read(vol, ino, 0, s.size(), s.data());
    if (!n.ok()) return "<" + n.status().ToString() + ">";
    s.resize(*n);
    return s;
  }
  // Every group each open domain holds, with the domain holding it; fails
  // the test on a group held by two.
  std::map<AgId, uint32_t> Groups() {
    std::map<AgId, uint32_t> by;
    for (size_t d = 0; d < doms_.size(); d++) {
      for (const AgId& g : doms_[d]->allocation_groups()) {
        auto [it, fresh] = by.emplace(g, d);
        EXPECT_TRUE(fresh) << "group " << g.lun << "/" << g.index << " held by domains " << it->second << " and " << d;
      }
    }
    return by;
  }
  void ExpectClean(Domain& d) {
    auto problems = d.Check();
    ASSERT_TRUE(problems.ok()) << problems.status().ToString();
    for (const auto& p : *problems) ADD_FAILURE() << p;
  }

  // Relabels the (one-LUN) reserve as split into `domains`, then opens
  // `domain` and checks it. The domains must be closed.
  std::vector<std::string> CheckAfterRelabel(uint32_t domain, uint32_t domains) {
    ReopenReserve(false);
    LunLabel l = reserve_->label(0);
    l.domains = domains;
    EXPECT_TRUE(WriteLabels(*reserve_->lun(0), l).ok());
    ReopenReserve(false);
    auto d = Domain::Open(reserve_, domain, Small());
    if (!d.ok()) return {"open: " + d.status().ToString()};
    auto problems = d.value()->Check();
    if (!problems.ok()) return {"check: " + problems.status().ToString()};
    return *problems;
  }

  std::vector<std::shared_ptr<block::MemLun>> media_;
  std::shared_ptr<Reserve> reserve_;
  std::vector<std::unique_ptr<Domain>> doms_;
};

TEST_F(DomainsTest, EachDomainKeepsItsShareItsIdsAndItsFiles) {
  constexpr uint32_t kDomains = 3;
  Format(kDomains, {64, 64});  // 15 groups a LUN: 5 each
  EXPECT_EQ(Domain::Create(reserve_, kDomains, Small()).status().code(), Code::kInvalidArgument);
  struct Made {
    uint32_t vol;
    uint64_t ino;
    std::string data;
    uint32_t export_id;
  };
  std::vector<Made> made;
  for (uint32_t d = 0; d < kDomains; d++) {
    auto dom = Domain::Create(reserve_, d, Small());
    ASSERT_TRUE(dom.ok()) << d << ": " << dom.status().ToString();
    doms_.push_back(std::move(dom.value()));
    // The same volume name in each: names are the domain's.
    auto v = doms_[d]->CreateVolume("v");
    ASSERT_TRUE(v.ok()) << v.status().ToString();
    EXPECT_EQ(v->id, FirstVolumeId(d));
    EXPECT_EQ(VolumeDomain(v->id), d);
    Export spec;
    spec.volume = "v";
    spec.pseudo = "/v" + std::to_string(d);
    auto e = doms_[d]->AddExport(spec);
    ASSERT_TRUE(e.ok()) << e.status().ToString();
    EXPECT_EQ(e->id, ExportIds(d, kDomains).first);
    auto f = doms_[d]->Create(v->id, kRootIno, "f", FileType::kRegular, 0644, 0, 0);
    ASSERT_TRUE(f.ok()) << f.status().ToString();
    std::string data = Bytes(3 * kMiB + 4321, d + 1);
    ASSERT_TRUE(doms_[d]->Write(v->id, f->ino, 0, data.data(), data.size()).ok());
    made.push_back({v->id, f->ino, data, e->id});
  }
  // Each domain's groups are its share of each LUN, and only those.
  for (const auto& [g, d] : Groups()) {
    const Reserve::Slice share = Reserve::AgSlice(reserve_->ag_count(g.lun), d, kDomains);
    EXPECT_GE(g.index, share.first) << d;
    EXPECT_LT(g.index, share.first + share.count) << d;
  }
  EXPECT_EQ(Groups().size(), 30u) << "every group of the reserve is some domain's";
  // A handle of one domain names nothing in another: its volume is not
  // there (and its MAC key is another).
  auto a0 = doms_[0]->GetAttr(made[0].vol, made[0].ino);
  ASSERT_TRUE(a0.ok());
  EXPECT_FALSE(doms_[1]->GetAttr(Handle{made[0].vol, made[0].ino, a0->gen}).ok());
  EXPECT_FALSE(doms_[1]->GetAttr(made[0].vol, made[0].ino).ok());

  for (auto& d : doms_) ASSERT_TRUE(d->SyncTxg().ok());
  ReopenReserve(/*power_cut=*/true);
  ASSERT_EQ(reserve_->domains(), kDomains);
  EXPECT_EQ(Domain::Open(reserve_, kDomains, Small()).status().code(), Code::kInvalidArgument);
  for (uint32_t d = 0; d < kDomains; d++) {
    auto dom = Domain::Open(reserve_, d, Small());
    ASSERT_TRUE(dom.ok()) << d << ": " << dom.status().ToString();
    doms_.push_back(std::move(dom.value()));
    EXPECT_EQ(ReadAll(*doms_[d], made[d].vol, made[d].ino), made[d].data) << "domain " << d;
    auto e = doms_[d]->GetExport(made[d].export_id);
    ASSERT_TRUE(e.ok()) << e.status().ToString();
    EXPECT_EQ(e->pseudo, "/v" + std::to_string(d));
    ExpectClean(*doms_[d]);
  }

  // A LUN added: each domain grows by its own share of it.
  ASSERT_TRUE(reserve_->AddLun(NewLun(50)).ok());  // 12 groups: 4 each
  for (uint32_t d = 0; d < kDomains; d++) {
    auto grew = doms_[d]->Grow();
    ASSERT_TRUE(grew.ok()) << grew.status().ToString();
    EXPECT_EQ(*grew, 4 * kAg) << d;
    EXPECT_EQ(*doms_[d]->Grow(), 0u);
  }
  EXPECT_EQ(Groups().size(), 42u);
  // Fill each domain past what its first two LUNs hold: the new groups are
  // used, and each domain's data stays its own.
  for (uint32_t d = 0; d < kDomains; d++) {
    auto f = doms_[d]->Create(made[d].vol, kRootIno, "more", FileType::kRegular, 0644, 0, 0);
    ASSERT_TRUE(f.ok());
    std::string data = Bytes(20 * kMiB, 100 + d);
    ASSERT_TRUE(doms_[d]->Write(made[d].vol, f->ino, 0, data.data(), data.size()).ok()) << d;
    made[d].ino = f->ino;
    made[d].data = data;
  }
  for (uint32_t d = 0; d < kDomains; d++) {
    EXPECT_EQ(ReadAll(*doms_[d], made[d].vol, made[d].ino), made[d].data) << "domain " << d;
    ExpectClean(*doms_[d]);
  }
}

// A reserve relabelled with another count of domains moves the shares: fsck
// reports the groups a domain holds outside its share now (before, a second
// domain would have been made over them unnoticed).
TEST_F(DomainsTest, CheckFindsGroupsOutsideTheDomainsShare) {
  Format(2, {64});  // 15 groups: [0, 7) and [7, 15)
  auto d0 = Domain::Create(reserve_, 0, Small());
  ASSERT_TRUE(d0.ok()) << d0.status().ToString();
  doms_.push_back(std::move(d0.value()));
  ExpectClean(*doms_[0]);
  ASSERT_TRUE(doms_[0]->SyncTxg().ok());
  const std::vector<std::string> problems = CheckAfterRelabel(0, 3);  // shares [0, 5), [5, 10), [10, 15)
  ASSERT_EQ(problems.size(), 2u);
  EXPECT_NE(problems[0].find("data group 0/5 is outside domain 0's share of LUN 0 (groups 0..5)"), std::string::npos)
      << problems[0];
  EXPECT_NE(problems[1].find("data group 0/6 is outside"), std::string::npos) << problems[1];
}

// The same for ids: after a relabel to four domains, domain 1's export
// (the first of its range of two) is past its range of four.
TEST_F(DomainsTest, CheckFindsIdsOutsideTheDomainsRanges) {
  Format(2, {64});
  auto d1 = Domain::Create(reserve_, 1, Small());
  ASSERT_TRUE(d1.ok()) << d1.status().ToString();
  ASSERT_TRUE((*d1)->CreateVolume("v").ok());
  Export spec;
  spec.volume = "v";
  spec.pseudo = "/v";
  auto e = (*d1)->AddExport(spec);
  ASSERT_TRUE(e.ok()) << e.status().ToString();
  ASSERT_EQ(e->id, 32768u);
  ASSERT_TRUE((*d1)->SyncTxg().ok());
  d1->reset();
  std::string all;
  for (const auto& p : CheckAfterRelabel(1, 4)) all += p + "\n";  // domain 1: export ids 16384..32766
  EXPECT_NE(all.find("export id counter 32769 is outside domain 1's ids 16384..32766"), std::string::npos) << all;
  EXPECT_NE(all.find("export 32768: is not an id of this domain"), std::string::npos) << all;
}

// A LUN whose share is a single group gives it to metadata; growing later
// must not take the same group again as data (it was, before LUNs' metadata
// groups counted as covering them).
TEST_F(DomainsTest, GrowDoesNotTakeAMetadataGroupAgainAsData) {
  Format(1, {64, 6});  // the second LUN: one group, all metadata
  auto d0 = Domain::Create(reserve_, 0, Small());
  ASSERT_TRUE(d0.ok()) << d0.status().ToString();
  doms_.push_back(std::move(d0.value()));
  EXPECT_EQ(*doms_[0]->Grow(), 0u);
  Groups();
  ExpectClean(*doms_[0]);
}

}  // namespace
}  // namespace nasgw::fs
