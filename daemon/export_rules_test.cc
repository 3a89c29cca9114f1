// The rules of an NFS export's fields (daemon/export_rules.h): normalisation
// and defaults, and every bad value refused with a message naming it.
#include "daemon/export_rules.h"

#include <gtest/gtest.h>

namespace nasgw::daemon {
namespace {

using fs::Export;

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

}  // namespace
}  // namespace nasgw::daemon
