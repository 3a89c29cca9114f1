#include "daemon/access.h"

#include <cerrno>

#include <gtest/gtest.h>

#include "fs/acl.h"

namespace nasgw::daemon {
namespace {

fs::Attr File(uint32_t mode, uint32_t uid = 1000, uint32_t gid = 100, fs::FileType t = fs::FileType::kRegular) {
  fs::Attr a;
  a.type = t;
  a.mode = mode;
  a.uid = uid;
  a.gid = gid;
  return a;
}
proto::Creds User(uint32_t uid, uint32_t gid = 500, std::vector<uint32_t> groups = {}) {
  return {uid, gid, std::move(groups)};
}

TEST(Access, OwnerGroupOtherAndRoot) {
  fs::Attr f = File(0640);
  EXPECT_EQ(CheckAccess(f, User(1000), proto::kAccessRead | proto::kAccessWrite), 0);
  EXPECT_EQ(CheckAccess(f, User(1001, 100), proto::kAccessRead), 0);
  EXPECT_EQ(CheckAccess(f, User(1001, 100), proto::kAccessWrite), EACCES);
  EXPECT_EQ(CheckAccess(f, User(1001, 7, {100}), proto::kAccessRead), 0);  // supplementary group
  EXPECT_EQ(CheckAccess(f, User(1001), proto::kAccessRead), EACCES);
  // The owner class decides even when group or other would allow more.
  EXPECT_EQ(CheckAccess(File(0077), User(1000, 100), proto::kAccessRead), EACCES);
  EXPECT_EQ(CheckAccess(f, User(0), proto::kAccessRead | proto::kAccessWrite), 0);
  EXPECT_EQ(Granted(File(0644), User(0), 7), 6u);  // root: no exec without any x bit
  EXPECT_EQ(Granted(File(0700, 1, 1, fs::FileType::kDirectory), User(0), 7), 7u);
  // The owner's data override (a file created 0444 stays writable to its owner).
  EXPECT_EQ(CheckData(File(0444), User(1000), proto::kAccessWrite), 0);
  EXPECT_EQ(CheckData(File(0444), User(1001), proto::kAccessWrite), EACCES);
  // Execute-only: a program may be read to be run, not written; an open
  // for reading is still refused.
  EXPECT_EQ(CheckData(File(0711), User(1001), proto::kAccessRead), 0);
  EXPECT_EQ(CheckData(File(0711), User(1001), proto::kAccessWrite), EACCES);
  EXPECT_EQ(CheckAccess(File(0711), User(1001), proto::kAccessRead), EACCES);
  EXPECT_EQ(CheckData(File(0700), User(1001), proto::kAccessRead), EACCES);
  EXPECT_EQ(CheckData(File(0711, 1, 1, fs::FileType::kDirectory), User(1001), proto::kAccessRead), EACCES);
}

// With an access ACL, named users and groups get what their entry and the
// mask allow; ACCESS answers each bit on its own, an open needs one entry
// that grants all it asks; root's override is as without.
TEST(Access, AccessAclsGrantNamedUsersAndGroups) {
  fs::Attr f = File(0640);  // owner 1000, group 100; mask r-x below
  f.acl_access = fs::EncodeAcl({{fs::kAclUserObj, 6},
                                {fs::kAclUser, 7, 2000},
                                {fs::kAclGroupObj, 4},
                                {fs::kAclGroup, 2, 300},
                                {fs::kAclMask, 5},
                                {fs::kAclOther, 0}});
  EXPECT_EQ(CheckAccess(f, User(2000), proto::kAccessRead | proto::kAccessExec), 0) << "named user, through mask";
  EXPECT_EQ(CheckAccess(f, User(2000), proto::kAccessWrite), EACCES) << "the mask takes write away";
  EXPECT_EQ(Granted(f, User(2000), 7), 5u);
  EXPECT_EQ(CheckAccess(f, User(3000, 300), proto::kAccessWrite), EACCES) << "group:300:-w- masked to nothing";
  EXPECT_EQ(CheckAccess(f, User(3000, 7, {100}), proto::kAccessRead), 0) << "owning group r--";
  EXPECT_EQ(CheckAccess(f, User(3000), proto::kAccessRead), EACCES) << "others: nothing";
  EXPECT_EQ(CheckAccess(f, User(1000), proto::kAccessRead | proto::kAccessWrite), 0) << "the owner, unmasked";
  EXPECT_EQ(CheckAccess(f, User(0), proto::kAccessRead | proto::kAccessWrite), 0) << "root";
  // Two groups that each grant a part: ACCESS shows both bits, an open of
  // both is refused (one entry must grant all).
  f.acl_access = fs::EncodeAcl(
      {{fs::kAclUserObj, 6}, {fs::kAclGroupObj, 4}, {fs::kAclGroup, 2, 300}, {fs::kAclMask, 7}, {fs::kAclOther, 0}});
  EXPECT_EQ(Granted(f, User(3000, 100, {300}), 6), 6u);
  EXPECT_EQ(CheckAccess(f, User(3000, 100, {300}), proto::kAccessRead | proto::kAccessWrite), EACCES);
}

TEST(Access, StickyDirectories) {
  fs::Attr tmp = File(01777, 0, 0, fs::FileType::kDirectory);
  EXPECT_EQ(CheckRemove(tmp, File(0644, 1000), User(1000)), 0);  // own file
  EXPECT_EQ(CheckRemove(tmp, File(0644, 1000), User(1001)), EPERM);
  EXPECT_EQ(CheckRemove(tmp, File(0644, 1000), User(0)), 0);
  fs::Attr owned = File(01777, 1001, 0, fs::FileType::kDirectory);
  EXPECT_EQ(CheckRemove(owned, File(0644, 1000), User(1001)), 0);  // the directory's owner
  EXPECT_EQ(CheckRemove(File(0755, 0, 0, fs::FileType::kDirectory), File(0644, 1000), User(1000)), EACCES);
}

TEST(Access, SetAttrOwnerRules) {
  fs::Attr f = File(06755);
  fs::SetAttr s;
  s.mode = 0600;
  EXPECT_EQ(CheckSetAttr(f, User(1001), proto::kSetMode, s), EPERM);
  EXPECT_EQ(CheckSetAttr(f, User(1000), proto::kSetMode, s), 0);
  s.uid = 1001;
  EXPECT_EQ(CheckSetAttr(f, User(1000), proto::kSetUid, s), EPERM);  // giving away
  s.uid = 1000;
  EXPECT_EQ(CheckSetAttr(f, User(1000), proto::kSetUid, s), 0);  // a no-op chown
  s.gid = 200;
  EXPECT_EQ(CheckSetAttr(f, User(1000, 100), proto::kSetGid, s), EPERM);
  fs::SetAttr g;
  g.gid = 200;
  EXPECT_EQ(CheckSetAttr(f, User(1000, 100, {200}), proto::kSetGid, g), 0);
  // chgrp drops setuid and (group-executable) setgid.
  EXPECT_TRUE(g.set_mode);
  EXPECT_EQ(g.mode, 0755u);
  // chmod g+s by someone outside the group drops it.
  fs::SetAttr m;
  m.mode = 02755;
  EXPECT_EQ(CheckSetAttr(File(0755, 1000, 300), User(1000, 100), proto::kSetMode, m), 0);
  EXPECT_EQ(m.mode, 0755u);
  // Times: explicit values for the owner only; "now" for anyone who may write.
  fs::SetAttr t;
  EXPECT_EQ(CheckSetAttr(File(0666), User(1001), proto::kSetMtime, t), EPERM);
  EXPECT_EQ(CheckSetAttr(File(0666), User(1001), proto::kSetMtimeNow, t), 0);
  EXPECT_EQ(CheckSetAttr(File(0644), User(1001), proto::kSetMtimeNow, t), EACCES);
  EXPECT_EQ(CheckSetAttr(File(0644), User(1001), proto::kSetSize, t), EACCES);
  EXPECT_EQ(CheckSetAttr(File(0444), User(1000), proto::kSetSize, t), 0);
}

// A write or truncation by a caller without CAP_FSETID clears setuid, and
// setgid when group-executable (Linux's should_remove_suid); anyone who may
// write the file may clear them with a mode change (the FUSE kernel client
// does, as the writer).
TEST(Access, SetuidAndSetgidGoWithWritesAndTruncation) {
  EXPECT_EQ(KillPrivBits(File(06777), User(1001)), 06000u);
  EXPECT_EQ(KillPrivBits(File(06777), User(1000)), 06000u);  // the owner too
  EXPECT_EQ(KillPrivBits(File(06777), User(0)), 0u);         // root holds CAP_FSETID
  EXPECT_EQ(KillPrivBits(File(06767), User(1001)), 04000u);  // setgid without group execute stays
  EXPECT_EQ(KillPrivBits(File(02767), User(1001)), 0u);
  EXPECT_EQ(KillPrivBits(File(0777), User(1001)), 0u);
  EXPECT_EQ(KillPrivBits(File(06777, 1000, 100, fs::FileType::kDirectory), User(1001)), 0u);

  // Truncation: the same bits go, in the same change; a mode set with it wins.
  fs::SetAttr t;
  t.set_size = true;
  ASSERT_EQ(CheckSetAttr(File(06777), User(1001), proto::kSetSize, t), 0);
  EXPECT_TRUE(t.set_mode);
  EXPECT_EQ(t.mode, 0777u);
  fs::SetAttr r;
  ASSERT_EQ(CheckSetAttr(File(06777), User(0), proto::kSetSize, r), 0);
  EXPECT_FALSE(r.set_mode);  // root keeps them
  fs::SetAttr m;
  m.set_mode = true;
  m.mode = 06700;
  ASSERT_EQ(CheckSetAttr(File(06777), User(1000, 100), proto::kSetSize | proto::kSetMode, m), 0);
  EXPECT_EQ(m.mode, 06700u);

  // A mode change by someone else: only clearing setuid/setgid, only with
  // write access.
  auto chmod = [](const fs::Attr& f, uint32_t uid, uint32_t mode) {
    fs::SetAttr s;
    s.set_mode = true;
    s.mode = mode;
    return CheckSetAttr(f, User(uid), proto::kSetMode, s);
  };
  EXPECT_EQ(chmod(File(06777), 1001, 0777), 0);
  EXPECT_EQ(chmod(File(06777), 1001, 02777), 0);      // setuid only (setgid then goes as in any chmod from outside
                                                      // the group)
  EXPECT_EQ(chmod(File(06777), 1001, 06777), EPERM);  // no change is no clearing
  EXPECT_EQ(chmod(File(06777), 1001, 0776), EPERM);   // more than the bits
  EXPECT_EQ(chmod(File(04777), 1001, 06777), EPERM);  // setting one
  EXPECT_EQ(chmod(File(06755), 1001, 0755), EPERM);   // may not write the file
  EXPECT_EQ(chmod(File(06775), 1001, 0775), EPERM);
  EXPECT_EQ(chmod(File(06775, 1000, 500), 1001, 0775), 0);  // writes through its group
}

TEST(Access, NewObjectsInSetgidDirectories) {
  uint32_t mode = 0755, uid = 0, gid = 0;
  NewOwner(File(02775, 0, 300, fs::FileType::kDirectory), User(1000, 100), fs::FileType::kDirectory, mode, uid, gid);
  EXPECT_EQ(uid, 1000u);
  EXPECT_EQ(gid, 300u);
  EXPECT_EQ(mode, 02755u);
  mode = 0644;
  NewOwner(File(0755, 0, 300, fs::FileType::kDirectory), User(1000, 100), fs::FileType::kRegular, mode, uid, gid);
  EXPECT_EQ(gid, 100u);
  EXPECT_EQ(mode, 0644u);
}

}  // namespace
}  // namespace nasgw::daemon
