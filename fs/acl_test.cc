#include "fs/acl.h"

#include <algorithm>

#include <gtest/gtest.h>

namespace nasgw::fs {
namespace {

AclEntry E(uint16_t tag, uint16_t perm, uint32_t id = kAclUndefinedId) {
  return {tag, perm, id};
}

// user::rw-, user:1000:rwx, group::r--, group:2000:r-x, mask::r-x, other::---
Acl Full() {
  return {E(kAclUserObj, 6),     E(kAclUser, 7, 1000), E(kAclGroupObj, 4),
          E(kAclGroup, 5, 2000), E(kAclMask, 5),       E(kAclOther, 0)};
}

TEST(AclTest, XattrFormRoundTripsAndIsLinuxs) {
  const std::string x = EncodeAcl(Full());
  ASSERT_EQ(x.size(), 4u + 6 * 8);
  // Little-endian version 2, then the first entry: tag 1, perm 6, id -1.
  EXPECT_EQ(x.substr(0, 12), std::string("\x02\x00\x00\x00\x01\x00\x06\x00\xff\xff\xff\xff", 12));
  // The named user's id is written, little-endian.
  EXPECT_EQ(x.substr(12 + 4, 4), std::string("\xe8\x03\x00\x00", 4));
  auto back = ParseAcl(x);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(*back, Full());
  EXPECT_EQ(AclText(*back), "user::rw-,user:1000:rwx,group::r--,group:2000:r-x,mask::r-x,other::---");
}

TEST(AclTest, EmptyValueOrHeaderAloneIsNoAcl) {
  for (const std::string& x : {std::string(), std::string("\x02\x00\x00\x00", 4)}) {
    auto a = ParseAcl(x);
    ASSERT_TRUE(a.ok());
    EXPECT_TRUE(a->empty());
  }
}

TEST(AclTest, MalformedOrInvalidAclsAreRefusedAsLinuxRefusesThem) {
  auto bad = [](const Acl& a) { return ParseAcl(EncodeAcl(a)).status().code(); };
  EXPECT_EQ(bad({E(kAclUserObj, 6), E(kAclGroupObj, 4)}), Code::kInvalidArgument);                   // no other
  EXPECT_EQ(bad({E(kAclGroupObj, 4), E(kAclUserObj, 6), E(kAclOther, 4)}), Code::kInvalidArgument);  // order
  EXPECT_EQ(bad({E(kAclUserObj, 6), E(kAclUser, 7, 5), E(kAclGroupObj, 4), E(kAclOther, 4)}),
            Code::kInvalidArgument);  // named entry without a mask
  EXPECT_EQ(bad({E(kAclUserObj, 6), E(kAclUserObj, 6), E(kAclGroupObj, 4), E(kAclOther, 4)}),
            Code::kInvalidArgument);                                                                 // repeated
  EXPECT_EQ(bad({E(kAclUserObj, 8), E(kAclGroupObj, 4), E(kAclOther, 4)}), Code::kInvalidArgument);  // perm
  EXPECT_EQ(bad({E(kAclUserObj, 6), E(0x40, 4), E(kAclGroupObj, 4), E(kAclOther, 4)}), Code::kInvalidArgument);
  EXPECT_EQ(
      bad({E(kAclUserObj, 6), E(kAclUser, 4, kAclUndefinedId), E(kAclGroupObj, 4), E(kAclMask, 4), E(kAclOther, 0)}),
      Code::kInvalidArgument);  // a named user without an id
  std::string x = EncodeAcl(Full());
  EXPECT_EQ(ParseAcl(x.substr(0, x.size() - 3)).status().code(), Code::kInvalidArgument);  // torn entry
  EXPECT_EQ(ParseAcl(x.substr(0, 3)).status().code(), Code::kInvalidArgument);
  x[0] = 1;
  EXPECT_EQ(ParseAcl(x).status().code(), Code::kNotSupported);  // version 1
  Acl many = {E(kAclUserObj, 6)};
  for (uint32_t i = 0; i < kAclEntriesMax; i++) many.push_back(E(kAclUser, 4, i));
  many.insert(many.end(), {E(kAclGroupObj, 4), E(kAclMask, 4), E(kAclOther, 0)});
  EXPECT_EQ(bad(many), Code::kOutOfRange);
  // Base entries' ids are not kept (Linux writes -1).
  auto a = ParseAcl(EncodeAcl({E(kAclUserObj, 6, 7), E(kAclGroupObj, 4, 8), E(kAclOther, 4, 9)}));
  ASSERT_TRUE(a.ok());
  EXPECT_EQ((*a)[0].id, kAclUndefinedId);
}

TEST(AclTest, ModeFollowsTheOwnerMaskAndOthers) {
  uint32_t mode = 02777;
  EXPECT_TRUE(AclBeyondMode(Full(), &mode));
  EXPECT_EQ(mode, 02650u);  // the group bits are the mask's; setgid kept
  mode = 0;
  EXPECT_FALSE(AclBeyondMode({E(kAclUserObj, 7), E(kAclGroupObj, 5), E(kAclOther, 1)}, &mode));
  EXPECT_EQ(mode, 0751u);
  mode = 0;  // a mask alone is more than a mode
  EXPECT_TRUE(AclBeyondMode({E(kAclUserObj, 7), E(kAclGroupObj, 5), E(kAclMask, 1), E(kAclOther, 1)}, &mode));
  EXPECT_EQ(mode, 0711u);
}

TEST(AclTest, ChmodRewritesOwnerMaskAndOthersOnly) {
  Acl a = Full();
  AclChmod(a, 0741);
  EXPECT_EQ(AclText(a), "user::rwx,user:1000:rwx,group::r--,group:2000:r-x,mask::r--,other::--x");
  Acl b = {E(kAclUserObj, 6), E(kAclGroupObj, 4), E(kAclOther, 4)};
  AclChmod(b, 0570);
  EXPECT_EQ(AclText(b), "user::r-x,group::rwx,other::---");
}

TEST(AclTest, CreateNarrowsTheDefaultByTheModeAndTheModeByTheDefault) {
  // default: user::rwx, user:1000:rwx, group::r-x, mask::rwx, other::r-x
  const Acl dflt = {E(kAclUserObj, 7), E(kAclUser, 7, 1000), E(kAclGroupObj, 5), E(kAclMask, 7), E(kAclOther, 5)};
  uint32_t mode = 0666;  // a file
  Acl a = AclCreate(dflt, &mode);
  EXPECT_EQ(mode, 0664u);
  EXPECT_EQ(AclText(a), "user::rw-,user:1000:rwx,group::r-x,mask::rw-,other::r--");
  mode = 02777;  // a directory, setgid kept
  a = AclCreate(dflt, &mode);
  EXPECT_EQ(mode, 02775u);
  EXPECT_EQ(AclText(a), "user::rwx,user:1000:rwx,group::r-x,mask::rwx,other::r-x");
  // A default of the base entries only gives no access ACL, just the mode.
  mode = 0777;
  a = AclCreate({E(kAclUserObj, 7), E(kAclGroupObj, 0), E(kAclOther, 0)}, &mode);
  EXPECT_TRUE(a.empty());
  EXPECT_EQ(mode, 0700u);
}

TEST(AclTest, PermissionIsLinuxsPosixAclPermission) {
  const Acl a = Full();  // owner 10, group 20
  auto in = [](const std::vector<uint32_t>& gs) {
    return [gs](uint32_t g) { return std::find(gs.begin(), gs.end(), g) != gs.end(); };
  };
  // The owner: its own entry, no mask.
  EXPECT_TRUE(AclPermits(a, 10, 20, 10, in({}), 6));
  EXPECT_FALSE(AclPermits(a, 10, 20, 10, in({2000}), 1));  // owner entry decides, groups do not count
  // A named user: its entry through the mask (rwx & r-x).
  EXPECT_TRUE(AclPermits(a, 10, 20, 1000, in({}), 5));
  EXPECT_FALSE(AclPermits(a, 10, 20, 1000, in({}), 2));
  // Groups: the owning group r--, the named group r-x through the mask.
  EXPECT_TRUE(AclPermits(a, 10, 20, 30, in({20}), 4));
  EXPECT_FALSE(AclPermits(a, 10, 20, 30, in({20}), 1));
  EXPECT_TRUE(AclPermits(a, 10, 20, 30, in({20, 2000}), 5));  // one entry that grants all of it
  // A matching group that does not grant: others do not apply.
  const Acl b = {E(kAclUserObj, 7), E(kAclGroupObj, 0), E(kAclOther, 4)};
  EXPECT_FALSE(AclPermits(b, 10, 20, 30, in({20}), 4));
  EXPECT_TRUE(AclPermits(b, 10, 20, 30, in({}), 4));
  // Each of two groups grants part: not enough.
  const Acl c = {E(kAclUserObj, 7), E(kAclGroupObj, 4), E(kAclGroup, 2, 21), E(kAclMask, 7), E(kAclOther, 0)};
  EXPECT_FALSE(AclPermits(c, 10, 20, 30, in({20, 21}), 6));
  EXPECT_TRUE(AclPermits(c, 10, 20, 30, in({20, 21}), 2));
}

}  // namespace
}  // namespace nasgw::fs
