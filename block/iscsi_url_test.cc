#include "block/iscsi_url.h"

#include <gtest/gtest.h>

namespace nasgw::block {
namespace {

TEST(IscsiUrl, Plain) {
  auto u = ParseIscsiUrl("iscsi://127.0.0.1:3261/iqn.2026-11.org.nasgw:a0/3");
  ASSERT_TRUE(u.ok()) << u.status().ToString();
  EXPECT_EQ(u->host, "127.0.0.1");
  EXPECT_EQ(u->port, 3261);
  EXPECT_EQ(u->target, "iqn.2026-11.org.nasgw:a0");
  EXPECT_EQ(u->lun, 3u);
  EXPECT_TRUE(u->user.empty());
  EXPECT_EQ(u->Portal(), "127.0.0.1:3261");
}

TEST(IscsiUrl, DefaultPortAndChap) {
  auto u = ParseIscsiUrl("iscsi://alice%s3cr%t@@array1/iqn.x:t/0");
  ASSERT_TRUE(u.ok()) << u.status().ToString();
  EXPECT_EQ(u->user, "alice");
  EXPECT_EQ(u->password, "s3cr%t@");
  EXPECT_EQ(u->host, "array1");
  EXPECT_EQ(u->port, 3260);
  EXPECT_EQ(u->ToString(), "iscsi://alice%***@array1:3260/iqn.x:t/0");
}

TEST(IscsiUrl, Ipv6) {
  auto u = ParseIscsiUrl("iscsi://[fd00::1]:3262/iqn.x:t/1");
  ASSERT_TRUE(u.ok()) << u.status().ToString();
  EXPECT_EQ(u->host, "fd00::1");
  EXPECT_EQ(u->port, 3262);
  EXPECT_EQ(u->Portal(), "[fd00::1]:3262");
  auto v = ParseIscsiUrl("iscsi://[fd00::1]/iqn.x:t/1");
  ASSERT_TRUE(v.ok());
  EXPECT_EQ(v->port, 3260);
}

TEST(IscsiUrl, RejectsMalformed) {
  const char* bad[] = {
      "",
      "http://h/iqn/0",
      "iscsi://",
      "iscsi://host",
      "iscsi://host/iqn",
      "iscsi://host/iqn/",
      "iscsi:///iqn/0",
      "iscsi://host:/iqn/0",
      "iscsi://host:0/iqn/0",
      "iscsi://host:65536/iqn/0",
      "iscsi://host:12ab/iqn/0",
      "iscsi://host//0",
      "iscsi://host/iqn/x",
      "iscsi://host/iqn/-1",
      "iscsi://host/iqn/16384",
      "iscsi://host/iqn/0/extra",
      "iscsi://user@host/iqn/0",
      "iscsi://%pw@host/iqn/0",
      "iscsi://user%@host/iqn/0",
      "iscsi://[fd00::1/iqn/0",
      "iscsi://[fd00::1]x/iqn/0",
  };
  for (const char* s : bad) {
    auto u = ParseIscsiUrl(s);
    EXPECT_FALSE(u.ok()) << s;
    if (!u.ok()) {
      EXPECT_EQ(u.status().code(), Code::kInvalidArgument) << s;
    }
  }
}

TEST(IscsiUrl, ErrorNeverShowsPassword) {
  auto u = ParseIscsiUrl("iscsi://bob%hunter2@host/iqn/zz");
  ASSERT_FALSE(u.ok());
  EXPECT_EQ(u.status().ToString().find("hunter2"), std::string::npos) << u.status().ToString();
}

}  // namespace
}  // namespace nasgw::block
