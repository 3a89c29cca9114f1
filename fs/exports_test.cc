// NFS exports as a domain keeps them (fs/domain.h: ids, the volume and
// sub-path checks, the structural checks of what it stores, the pseudo-path
// index, persistence, the volume-delete refusal, fsck). The rules of the
// fields are nasgwd's (daemon/export_rules_test.cc); exports here are given
// as nasgwd hands them over, normalised.
#include <gtest/gtest.h>

#include "block/mem_device.h"
#include "fs/domain.h"

namespace nasgw::fs {
namespace {

constexpr uint64_t kMiB = 1 << 20;

// An export as nasgwd's rules leave it: the pseudo path defaults to
// "/<volume><path>".
Export Spec(const std::string& volume, const std::string& path = "/") {
  Export e;
  e.volume = volume;
  e.path = path;
  e.pseudo = "/" + volume + (path == "/" ? std::string() : path);
  return e;
}

class ExportDomainTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::vector<Reserve::Device> devs;
    for (int i = 0; i < 2; i++) {
      media_.push_back(std::make_shared<block::MemLun>(512, 32 * kMiB / 512, "naa.exp" + std::to_string(i)));
      devs.push_back(std::make_shared<block::MemDevice>(media_.back()));
    }
    ReserveOptions o;
    o.name = "exp";
    o.ag_bytes = 4 * kMiB;
    reserve_ = std::move(Reserve::Format(devs, o).value());
    auto d = Domain::Create(reserve_, 0, Options());
    ASSERT_TRUE(d.ok()) << d.status().ToString();
    dom_ = std::move(d.value());
  }
  static DomainOptions Options() {
    DomainOptions o;
    o.store.write_buffer_bytes = 256 << 10;
    o.store.block_cache_bytes = 1 << 20;
    o.metafs.log_compact_bytes = 512 << 10;
    return o;
  }
  void Reopen(bool power_cut) {
    dom_.reset();
    if (power_cut) {
      for (auto& m : media_) m->PowerCut();
    }
    std::vector<Reserve::Device> devs;
    for (uint32_t i = 0; i < reserve_->lun_count(); i++) devs.push_back(reserve_->lun(i));
    reserve_ = std::move(Reserve::Open(devs).value());
    auto d = Domain::Open(reserve_, 0, Options());
    ASSERT_TRUE(d.ok()) << d.status().ToString();
    dom_ = std::move(d.value());
  }
  void ExpectClean() {
    auto problems = dom_->Check();
    ASSERT_TRUE(problems.ok()) << problems.status().ToString();
    EXPECT_TRUE(problems->empty()) << (*problems)[0];
  }

  std::vector<std::shared_ptr<block::MemLun>> media_;
  std::shared_ptr<Reserve> reserve_;
  std::unique_ptr<Domain> dom_;
};

TEST_F(ExportDomainTest, AddListFindRemove) {
  auto v = dom_->CreateVolume("vol1");
  ASSERT_TRUE(v.ok());
  auto a = dom_->Create(v->id, kRootIno, "a", FileType::kDirectory, 0755, 0, 0);
  ASSERT_TRUE(a.ok());
  ASSERT_TRUE(dom_->Create(v->id, a->ino, "b", FileType::kDirectory, 0755, 0, 0).ok());
  ASSERT_TRUE(dom_->Create(v->id, a->ino, "file", FileType::kRegular, 0644, 0, 0).ok());

  auto e1 = dom_->AddExport(Spec("vol1"));
  ASSERT_TRUE(e1.ok()) << e1.status().ToString();
  EXPECT_EQ(e1->id, 1u);
  EXPECT_EQ(e1->pseudo, "/vol1");
  Export spec = Spec("vol1", "/a/b");
  spec.clients = {"198.18.2.0/24"};
  spec.read_only = true;
  spec.root_squash = false;
  spec.sec = {"krb5p", "krb5i"};
  spec.protocols = {4};
  auto e2 = dom_->AddExport(spec);
  ASSERT_TRUE(e2.ok()) << e2.status().ToString();
  EXPECT_EQ(e2->id, 2u);
  EXPECT_EQ(e2->path, "/a/b");
  EXPECT_EQ(e2->pseudo, "/vol1/a/b");

  auto list = dom_->ListExports();
  ASSERT_TRUE(list.ok());
  ASSERT_EQ(list->size(), 2u);
  EXPECT_EQ((*list)[0], *e1);
  EXPECT_EQ((*list)[1], *e2);
  EXPECT_EQ(dom_->GetExport(2).value(), *e2);
  EXPECT_EQ(dom_->FindExport("/vol1/a/b").value(), *e2);
  EXPECT_EQ(dom_->FindExport("/vol1/a/b/").status().code(), Code::kNotFound) << "exactly as stored";
  EXPECT_EQ(dom_->GetExport(3).status().code(), Code::kNotFound);
  EXPECT_EQ(dom_->FindExport("/nope").status().code(), Code::kNotFound);

  // The domain's own checks.
  auto s = dom_->AddExport(Spec("nope"));
  EXPECT_EQ(s.status().code(), Code::kNotFound);
  EXPECT_NE(s.status().message().find("'nope'"), std::string::npos) << s.status().ToString();
  s = dom_->AddExport(Spec("vol1", "/a/missing/deeper"));
  EXPECT_EQ(s.status().code(), Code::kNotFound);
  EXPECT_NE(s.status().message().find("'/a/missing'"), std::string::npos) << s.status().ToString();
  s = dom_->AddExport(Spec("vol1", "/a/file"));
  EXPECT_EQ(s.status().code(), Code::kNotFound);
  EXPECT_NE(s.status().message().find("not a directory"), std::string::npos) << s.status().ToString();
  s = dom_->AddExport(Spec("vol1", "/a/b"));
  EXPECT_EQ(s.status().code(), Code::kExists) << "same default pseudo path";
  EXPECT_NE(s.status().message().find("export 2"), std::string::npos) << s.status().ToString();
  Export other = Spec("vol1", "/a/b");
  other.pseudo = "/other";
  auto e3 = dom_->AddExport(other);
  ASSERT_TRUE(e3.ok()) << "the same directory under another pseudo path: " << e3.status().ToString();
  EXPECT_EQ(e3->id, 3u) << "failed adds take no id";
  ExpectClean();

  auto removed = dom_->RemoveExport(3);
  ASSERT_TRUE(removed.ok());
  EXPECT_EQ(*removed, *e3);
  EXPECT_EQ(dom_->RemoveExport(3).status().code(), Code::kNotFound);
  auto e4 = dom_->AddExport(other);
  ASSERT_TRUE(e4.ok()) << "the pseudo path is free again";
  EXPECT_EQ(e4->id, 4u) << "ids are never reused";
  ExpectClean();
}

TEST_F(ExportDomainTest, ExportsPersistAndIdsAreNeverReused) {
  ASSERT_TRUE(dom_->CreateVolume("vol1").ok());
  ASSERT_TRUE(dom_->CreateVolume("vol2").ok());
  ASSERT_TRUE(dom_->AddExport(Spec("vol1")).ok());
  Export spec = Spec("vol2");
  spec.clients = {"2001:db8::/48", "198.18.3.7"};
  spec.read_only = true;
  auto e2 = dom_->AddExport(spec);
  ASSERT_TRUE(e2.ok());
  ASSERT_TRUE(dom_->RemoveExport(1).ok());
  Reopen(/*power_cut=*/true);  // every change is durable when it returns
  auto list = dom_->ListExports();
  ASSERT_TRUE(list.ok());
  ASSERT_EQ(list->size(), 1u);
  EXPECT_EQ((*list)[0], *e2);
  auto e3 = dom_->AddExport(Spec("vol1"));
  ASSERT_TRUE(e3.ok());
  EXPECT_EQ(e3->id, 3u) << "the counter survived; removed id 1 stays unused";
  ExpectClean();
}

TEST_F(ExportDomainTest, AnExportedVolumeCannotBeDeleted) {
  ASSERT_TRUE(dom_->CreateVolume("vol1").ok());
  ASSERT_TRUE(dom_->CreateVolume("vol2").ok());
  ASSERT_TRUE(dom_->AddExport(Spec("vol1")).ok());
  ASSERT_TRUE(dom_->AddExport(Spec("vol2")).ok());
  Export again = Spec("vol1");
  again.pseudo = "/again";
  ASSERT_TRUE(dom_->AddExport(again).ok());
  for (bool force : {false, true}) {
    Status s = dom_->DeleteVolume("vol1", force);
    EXPECT_EQ(s.code(), Code::kFailedPrecondition) << s.ToString();
    EXPECT_NE(s.message().find("exports 1, 3"), std::string::npos) << s.ToString();
  }
  ASSERT_TRUE(dom_->FindVolume("vol1").ok());
  ASSERT_TRUE(dom_->RemoveExport(1).ok());
  ASSERT_TRUE(dom_->RemoveExport(3).ok());
  ASSERT_TRUE(dom_->DeleteVolume("vol1", false).ok());
  ExpectClean();
}

TEST_F(ExportDomainTest, WhatItCannotStoreIsRefused) {
  auto v = dom_->CreateVolume("vol1");
  ASSERT_TRUE(v.ok());
  ASSERT_TRUE(dom_->Create(v->id, kRootIno, "a", FileType::kDirectory, 0755, 0, 0).ok());
  std::vector<std::pair<Export, std::string>> bad;
  auto add = [&](Export e, std::string named) { bad.emplace_back(std::move(e), std::move(named)); };
  for (std::string path : {"", "a", "/a/", "//a", "/./a", "/a/.", "/a/../a"}) {
    Export e = Spec("vol1");
    e.path = path;
    add(e, "export path");
  }
  for (std::string pseudo : {"", "p", "/p/", "/p//q", "/p/.."}) {
    Export e = Spec("vol1");
    e.pseudo = pseudo;
    add(e, "pseudo path");
  }
  Export e = Spec("vol1", "/" + std::string(70000, 'x'));
  add(e, "too long");
  e = Spec("vol1");
  e.protocols = {3, 256};
  add(e, "256");
  e = Spec("vol1");
  e.sec.assign(256, "sys");
  add(e, "too many");
  e = Spec("vol1");
  e.clients = {std::string(70000, '1')};
  add(e, "too long");
  for (const auto& [x, named] : bad) {
    auto r = dom_->AddExport(x);
    ASSERT_FALSE(r.ok()) << "path '" << x.path << "' pseudo '" << x.pseudo << "'";
    EXPECT_EQ(r.status().code(), Code::kInvalidArgument) << r.status().ToString();
    EXPECT_NE(r.status().message().find(named), std::string::npos) << r.status().ToString();
  }
  auto list = dom_->ListExports();
  ASSERT_TRUE(list.ok());
  EXPECT_TRUE(list->empty()) << "nothing was stored";
  // What the domain does not judge (Ganesha's rules) it stores as given.
  e = Spec("vol1", "/a");
  e.pseudo = "/";
  e.sec.clear();
  e.protocols.clear();
  auto stored = dom_->AddExport(e);
  ASSERT_TRUE(stored.ok()) << stored.status().ToString();
  EXPECT_EQ(stored->id, 1u) << "refused adds take no id";
  e.id = 1;
  EXPECT_EQ(dom_->GetExport(1).value(), e);
  ExpectClean();
}

// ---- SMB shares, kept the same way (fs/shares.cc)

Share ShareSpec(const std::string& name, const std::string& volume, const std::string& path = "/") {
  Share s;
  s.name = name;
  s.volume = volume;
  s.path = path;
  return s;
}

TEST_F(ExportDomainTest, SharesAreKeptByNameInAnyCase) {
  auto v = dom_->CreateVolume("vol1");
  ASSERT_TRUE(v.ok());
  ASSERT_TRUE(dom_->Create(v->id, kRootIno, "proj", FileType::kDirectory, 0755, 0, 0).ok());
  ASSERT_TRUE(dom_->Create(v->id, kRootIno, "file", FileType::kRegular, 0644, 0, 0).ok());

  Share a = ShareSpec("Projects", "vol1", "/proj");
  a.comment = "the team's projects";
  a.valid_users = {"alice", "@staff"};
  a.encrypt = true;
  a.browseable = false;
  auto added = dom_->AddShare(a);
  ASSERT_TRUE(added.ok()) << added.status().ToString();
  EXPECT_EQ(*added, a);
  ASSERT_TRUE(dom_->AddShare(ShareSpec("data", "vol1")).ok());

  // Names are unique without regard to case, and found in any case.
  auto again = dom_->AddShare(ShareSpec("PROJECTS", "vol1"));
  EXPECT_EQ(again.status().code(), Code::kExists);
  EXPECT_NE(again.status().message().find("'Projects'"), std::string::npos) << again.status().ToString();
  auto got = dom_->GetShare("projects");
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(*got, a);
  EXPECT_EQ(dom_->GetShare("nope").status().code(), Code::kNotFound);

  // What the share names must exist, as a directory.
  EXPECT_EQ(dom_->AddShare(ShareSpec("x", "vol9")).status().code(), Code::kNotFound);
  EXPECT_EQ(dom_->AddShare(ShareSpec("x", "vol1", "/missing")).status().code(), Code::kNotFound);
  EXPECT_EQ(dom_->AddShare(ShareSpec("x", "vol1", "/file")).status().code(), Code::kNotFound);
  // ... and be storable.
  EXPECT_EQ(dom_->AddShare(ShareSpec("", "vol1")).status().code(), Code::kInvalidArgument);
  EXPECT_EQ(dom_->AddShare(ShareSpec(std::string(kShareNameMax + 1, 'n'), "vol1")).status().code(),
            Code::kInvalidArgument);
  EXPECT_EQ(dom_->AddShare(ShareSpec("x", "vol1", "proj")).status().code(), Code::kInvalidArgument);
  EXPECT_EQ(dom_->AddShare(ShareSpec("x", "vol1", "/proj/../file")).status().code(), Code::kInvalidArgument);

  // Durable when the call returns; listed by lower-cased name.
  Reopen(/*power_cut=*/true);
  auto list = dom_->ListShares();
  ASSERT_TRUE(list.ok());
  ASSERT_EQ(list->size(), 2u);
  EXPECT_EQ((*list)[0].name, "data");
  EXPECT_EQ((*list)[1], a);
  ExpectClean();

  // A shared volume cannot be deleted, even with force.
  auto del = dom_->DeleteVolume("vol1", true);
  EXPECT_EQ(del.code(), Code::kFailedPrecondition);
  EXPECT_NE(del.message().find("'Projects'"), std::string::npos) << del.ToString();
  auto removed = dom_->RemoveShare("PROJECTS");
  ASSERT_TRUE(removed.ok());
  EXPECT_EQ(removed->name, "Projects");
  EXPECT_EQ(dom_->RemoveShare("projects").status().code(), Code::kNotFound);
  ASSERT_TRUE(dom_->RemoveShare("data").ok());
  EXPECT_TRUE(dom_->DeleteVolume("vol1", true).ok());
  ExpectClean();
}

}  // namespace
}  // namespace nasgw::fs
