// NFS exports: the rules of their fields (fs/export.h) and how a domain keeps
// them (fs/domain.h: ids, the volume and sub-path checks, the pseudo-path
// index, persistence, the volume-delete refusal, fsck).
#include "fs/export.h"

#include <gtest/gtest.h>

#include "block/mem_device.h"
#include "fs/domain.h"

namespace nasgw::fs {
namespace {

constexpr uint64_t kMiB = 1 << 20;

Export Spec(const std::string& volume, const std::string& path = "/") {
  Export e;
  e.volume = volume;
  e.path = path;
  return e;
}

TEST(ExportRulesTest, DefaultsAndNormalisation) {
  Export e = Spec("vol1");
  e.sec.clear();
  e.protocols.clear();
  ASSERT_TRUE(NormalizeExport(&e).ok());
  EXPECT_EQ(e.path, "/");
  EXPECT_EQ(e.pseudo, "/vol1");
  EXPECT_EQ(e.sec, std::vector<std::string>{"sys"});
  EXPECT_EQ(e.protocols, (std::vector<uint32_t>{3, 4}));
  EXPECT_TRUE(e.root_squash);
  EXPECT_FALSE(e.read_only);
  EXPECT_EQ(ExportFsalPath(e), "/vol1");

  e = Spec("vol1", "//a/./b//c/");
  e.clients = {"198.18.2.0/24", "198.18.3.7", "198.18.3.7/32", "2001:DB8:0:0::/32", "198.18.2.0/24"};
  e.sec = {"KRB5", "sys", "krb5"};
  e.protocols = {4, 3, 4};
  ASSERT_TRUE(NormalizeExport(&e).ok());
  EXPECT_EQ(e.path, "/a/b/c");
  EXPECT_EQ(e.pseudo, "/vol1/a/b/c");
  EXPECT_EQ(ExportFsalPath(e), "/vol1/a/b/c");
  EXPECT_EQ(e.clients, (std::vector<std::string>{"198.18.2.0/24", "198.18.3.7", "2001:db8::/32"}));
  EXPECT_EQ(e.sec, (std::vector<std::string>{"krb5", "sys"}));
  EXPECT_EQ(e.protocols, (std::vector<uint32_t>{3, 4}));

  e = Spec("vol1", "");
  e.pseudo = "/exports//v1/";
  ASSERT_TRUE(NormalizeExport(&e).ok());
  EXPECT_EQ(e.path, "/");
  EXPECT_EQ(e.pseudo, "/exports/v1");
  e = Spec("vol1", "/");
  e.protocols = {4};
  ASSERT_TRUE(NormalizeExport(&e).ok());
  EXPECT_EQ(e.protocols, std::vector<uint32_t>{4});
}

TEST(ExportRulesTest, BadValuesAreNamed) {
  struct Case {
    Export e;
    std::string named;
  };
  std::vector<Case> cases;
  auto add = [&](Export e, std::string named) { cases.push_back({std::move(e), std::move(named)}); };
  add(Spec(""), "volume name");
  add(Spec("vol1", "a/b"), "'a/b'");
  add(Spec("vol1", "/a/../b"), "'..'");
  add(Spec("vol1", "/a\"b"), "'\"'");
  add(Spec("vol1", "/a\\b"), "'\\'");
  add(Spec("vol1", std::string("/a\nb")), "control character");
  add(Spec("vol1", "/" + std::string(256, 'x')), "255");
  add(Spec("vol\"1"), "vol\"1");
  Export e = Spec("vol1");
  e.pseudo = "/";
  add(e, "pseudo root");
  e.pseudo = "//./";
  add(e, "pseudo root");
  e.pseudo = "relative";
  add(e, "'relative'");
  for (std::string c : {"198.18.2.5/24", "198.18.2.0/33", "198.18.2.0/", "198.18.2.0/x", "nfs.example.com", "@netgroup",
                        "*", "198.18.2", "2001:db8::1/129", "fe80::1%eth0", "198.18.2.0/024", ""}) {
    e = Spec("vol1");
    e.clients = {"198.18.9.9", c};
    add(e, "'" + c + "'");
  }
  e = Spec("vol1");
  e.sec = {"sys", "ntlm"};
  add(e, "'ntlm'");
  e = Spec("vol1");
  e.protocols = {3, 2};
  add(e, "version 2");
  e = Spec("vol1");
  for (int i = 0; i <= static_cast<int>(kExportClientsMax); i++)
    e.clients.push_back("198.18.0." + std::to_string(i % 250));
  add(e, "at most 256");
  for (auto& c : cases) {
    Status s = NormalizeExport(&c.e);
    EXPECT_EQ(s.code(), Code::kInvalidArgument) << c.named << ": " << s.ToString();
    EXPECT_NE(s.message().find(c.named), std::string::npos) << s.ToString();
  }
  // The host bits message names the network meant.
  auto r = CanonicalClient("198.18.2.5/24");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("198.18.2.0/24"), std::string::npos) << r.status().ToString();
  EXPECT_EQ(CanonicalClient("::ffff:198.18.0.1").value(), "::ffff:198.18.0.1");
  EXPECT_EQ(CanonicalClient("0.0.0.0/0").value(), "0.0.0.0/0");
  EXPECT_EQ(CanonicalClient("2001:0db8:0000:0000:0000:0000:0000:0001/128").value(), "2001:db8::1");
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
  Export spec = Spec("vol1", "/a/b/");
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
  EXPECT_EQ(dom_->FindExport("/vol1/a/b/").value(), *e2) << "the pseudo path is normalised before the lookup";
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

}  // namespace
}  // namespace nasgw::fs
