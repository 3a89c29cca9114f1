#include <gtest/gtest.h>

#include "block/iscsi_device.h"

namespace nasgw::block {
namespace {

IscsiOptions Good() {
  IscsiOptions o;
  o.urls = {"iscsi://127.0.0.1/iqn.x:t/1"};
  return o;
}

TEST(IscsiOptions, DefaultsAreValid) {
  EXPECT_TRUE(Good().Validate().ok());
}

TEST(IscsiOptions, OutOfRangeNamesTheFieldAndRange) {
  IscsiOptions o = Good();
  o.queue_depth = 0;
  Status s = o.Validate();
  EXPECT_EQ(s.code(), Code::kInvalidArgument);
  EXPECT_NE(s.ToString().find("queue_depth = 0 is out of range [1, 512]"), std::string::npos) << s.ToString();

  o = Good();
  o.io_timeout_ms = 50;
  EXPECT_NE(o.Validate().ToString().find("io_timeout_ms"), std::string::npos);
  o = Good();
  o.path_timeout_ms = 10'000'000;
  EXPECT_NE(o.Validate().ToString().find("path_timeout_ms"), std::string::npos);
  o = Good();
  o.connect_timeout_ms = 1;
  EXPECT_NE(o.Validate().ToString().find("connect_timeout_ms"), std::string::npos);
  o = Good();
  o.bulk_target_ms = 10'001;
  EXPECT_NE(o.Validate().ToString().find("bulk_target_ms = 10001 is out of range [0, 10000]"), std::string::npos);
  o.bulk_target_ms = 0;  // no window
  EXPECT_TRUE(o.Validate().ok());
}

TEST(IscsiOptions, PathsAndNames) {
  IscsiOptions o = Good();
  o.urls.clear();
  EXPECT_EQ(o.Validate().code(), Code::kInvalidArgument);
  o.urls.assign(9, "iscsi://h/iqn.x:t/1");
  EXPECT_NE(o.Validate().ToString().find("too many paths"), std::string::npos);
  o = Good();
  o.initiator_name = "node-a";
  EXPECT_NE(o.Validate().ToString().find("must start with iqn."), std::string::npos);
  // Every iSCSI name format the daemon's config accepts is accepted here too.
  for (const char* name : {"iqn.2026-11.org.nasgw:a", "eui.02004567A425678D", "naa.52004567BA64678D"}) {
    o.initiator_name = name;
    EXPECT_TRUE(o.Validate().ok()) << name;
  }
}

TEST(IscsiDevice, OpenRefusesBadUrlsBeforeConnecting) {
  IscsiOptions o = Good();
  o.urls = {"iscsi://127.0.0.1/iqn.x:t/1", "iscsi://127.0.0.1/iqn.x:t"};
  auto d = IscsiDevice::Open(o);
  ASSERT_FALSE(d.ok());
  EXPECT_EQ(d.status().code(), Code::kInvalidArgument);
  EXPECT_NE(d.status().ToString().find("missing /lun"), std::string::npos) << d.status().ToString();
}

}  // namespace
}  // namespace nasgw::block
