// The SMB share rules and the smb.conf sections nasgwd writes for smbd
// (daemon/smb_shares.h). smbd itself reads them in tests/integration/smb_lab.py.
#include "daemon/smb_shares.h"

#include <gtest/gtest.h>

namespace nasgw::daemon {
namespace {

fs::Share Spec(const std::string& name, const std::string& path = "/") {
  fs::Share s;
  s.name = name;
  s.volume = "vol1";
  s.path = path;
  return s;
}

Code NormalizeCode(fs::Share s) {
  return NormalizeShare(&s).code();
}

TEST(SmbSharesTest, NamesFollowWindowsAndSmbConfRules) {
  for (const std::string& good :
       std::vector<std::string>{"data", "Team-Share_2", "a.b", "hidden$", std::string(80, 'x')}) {
    fs::Share s = Spec(good);
    EXPECT_TRUE(NormalizeShare(&s).ok()) << good;
  }
  for (const std::string& bad :
       std::vector<std::string>{"", std::string(81, 'x'), ".dot", "sp ace", "a/b", "a%b", "[x]", "$", "a$b", "GLOBAL",
                                "homes", "Printers", "print$", "IPC$", "tab\t", "ünï"}) {
    EXPECT_EQ(NormalizeCode(Spec(bad)), Code::kInvalidArgument) << bad;
  }
}

TEST(SmbSharesTest, PathsCommentsAndUsersAreNormalisedOrRefused) {
  fs::Share s = Spec("x", "//proj/./a/");
  s.comment = "  the team's projects\t";
  s.valid_users = {"alice", "@staff", "alice", "_svc1"};
  ASSERT_TRUE(NormalizeShare(&s).ok());
  EXPECT_EQ(s.path, "/proj/a");
  EXPECT_EQ(s.comment, "the team's projects");
  EXPECT_EQ(s.valid_users, (std::vector<std::string>{"alice", "@staff", "_svc1"}));

  EXPECT_EQ(NormalizeCode(Spec("x", "/a/../b")), Code::kInvalidArgument);
  EXPECT_EQ(NormalizeCode(Spec("x", "/100%")), Code::kInvalidArgument);
  EXPECT_EQ(NormalizeCode(Spec("x", "/trailing ")), Code::kInvalidArgument);
  for (const std::string& bad : std::vector<std::string>{"line\nbreak", "50%", "continued\\", std::string(257, 'c')}) {
    fs::Share c = Spec("x");
    c.comment = bad;
    EXPECT_EQ(NormalizeShare(&c).code(), Code::kInvalidArgument) << bad;
  }
  for (const std::string& bad :
       std::vector<std::string>{"", "@", "-x", "a b", "dom\\user", "x,y", "@.g", std::string(65, 'u')}) {
    fs::Share u = Spec("x");
    u.valid_users = {bad};
    EXPECT_EQ(NormalizeShare(&u).code(), Code::kInvalidArgument) << bad;
  }
}

TEST(SmbSharesTest, RendersOneSectionPerShareForVfsNasgw) {
  fs::Share a = Spec("Projects", "/proj");
  a.comment = "the team's projects";
  a.valid_users = {"alice", "@staff"};
  a.encrypt = true;
  a.browseable = false;
  fs::Share b = Spec("data");
  b.read_only = true;
  const std::string text = RenderSmbShares({a, b}, "/run/nasgw/head.sock", "acl_xattr streams_xattr", "node-a");
  EXPECT_NE(text.find("node node-a"), std::string::npos);
  EXPECT_NE(text.find("[Projects]\n"
                      "    comment = the team's projects\n"
                      "    path = /nasgw/vol1/proj\n"
                      "    vfs objects = acl_xattr streams_xattr nasgw\n"
                      "    nasgw:socket = /run/nasgw/head.sock\n"
                      "    nasgw:volume = vol1\n"
                      "    nasgw:subpath = proj\n"
                      "    read only = no\n"
                      "    browseable = no\n"
                      "    guest ok = no\n"
                      "    smb encrypt = required\n"
                      "    valid users = alice @staff\n"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("[data]\n"
                      "    path = /nasgw/vol1\n"
                      "    vfs objects = acl_xattr streams_xattr nasgw\n"
                      "    nasgw:socket = /run/nasgw/head.sock\n"
                      "    nasgw:volume = vol1\n"
                      "    read only = yes\n"),
            std::string::npos)
      << text;
  EXPECT_EQ(text.find("nasgw:subpath = \n"), std::string::npos);
}

TEST(SmbSharesTest, WhatSmbConfWouldReadDifferentlyIsLeftOutAndReported) {
  fs::Share bad = Spec("ok");
  bad.volume = "vol%U";  // a stored volume name smbd would substitute into
  fs::Share worse = Spec("x\n[global]");
  std::vector<std::string> problems;
  const std::string text = RenderSmbShares({bad, worse, Spec("good")}, "/s", "", "n", &problems);
  ASSERT_EQ(problems.size(), 2u);
  EXPECT_NE(problems[0].find("'%'"), std::string::npos) << problems[0];
  EXPECT_EQ(text.find("[ok]"), std::string::npos);
  EXPECT_EQ(text.find("[global]"), std::string::npos);
  EXPECT_NE(text.find("[good]"), std::string::npos);
  EXPECT_NE(text.find("    vfs objects = nasgw\n"), std::string::npos) << "nothing stacked: nasgw alone";
}

}  // namespace
}  // namespace nasgw::daemon
