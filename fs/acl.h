// POSIX access control lists as Linux keeps them (acl(5)): the rules of
// fs/posix_acl.c, as pure functions, so that every head (FUSE's
// system.posix_acl_* attributes, FSAL_NASGW's NFSv4 ACLs mapped onto them,
// later Samba) and nasgwd's permission checks share one implementation.
//
// An ACL travels, and is kept in the inode record, in Linux's extended
// attribute form (the value of system.posix_acl_access and
// system.posix_acl_default): a little-endian u32 version (2), then per entry
// a u16 tag, a u16 permission (rwx bits) and a u32 id (a uid for a named
// user, a gid for a named group, 0xffffffff for the others). Entries are in
// Linux's order: the owner, named users, the owning group, named groups, the
// mask, others.
//
// A file's access ACL and its mode agree: the mode's owner bits are the
// owner entry's, its group bits the mask's (the owning group's when there is
// no mask), its other bits the others entry's. Setting one changes the other
// (AclUpdateMode, AclChmod). An ACL that says no more than a mode (the three
// base entries alone) is not kept: the mode says it.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"

namespace nasgw::fs {

inline constexpr char kAclAccessXattr[] = "system.posix_acl_access";
inline constexpr char kAclDefaultXattr[] = "system.posix_acl_default";

// Tags (as <linux/posix_acl.h>).
constexpr uint16_t kAclUserObj = 0x01, kAclUser = 0x02, kAclGroupObj = 0x04, kAclGroup = 0x08, kAclMask = 0x10,
                   kAclOther = 0x20;
constexpr uint32_t kAclUndefinedId = 0xffffffffu;
constexpr uint32_t kAclXattrVersion = 2;
// Entries in one ACL at most: 8 KiB in the inode record, which every
// operation on the file reads. (XFS allows about 5,400; an ACL this long
// answers E2BIG, as XFS does past its limit.)
constexpr size_t kAclEntriesMax = 1024;

struct AclEntry {
  uint16_t tag = 0;
  uint16_t perm = 0;  // rwx bits (4, 2, 1)
  uint32_t id = kAclUndefinedId;
  bool operator==(const AclEntry&) const = default;
};
using Acl = std::vector<AclEntry>;

// The xattr form to entries. An empty value, or a header alone, is an empty
// ACL (setting it removes the ACL, as Linux does). InvalidArgument for a
// value that is not a whole number of entries, an unknown tag, permission
// bits beyond rwx, a named entry with id 0xffffffff, or entries out of
// Linux's order or missing one of the base entries or a mask that named
// entries need (posix_acl_valid); NotSupported for another version (as
// Linux's EOPNOTSUPP); OutOfRange past kAclEntriesMax.
Result<Acl> ParseAcl(std::string_view xattr);
// Entries to the xattr form (ids of the base entries and the mask written
// as 0xffffffff, as Linux writes them).
std::string EncodeAcl(const Acl& acl);
// A kept ACL (one EncodeAcl made, from a valid Acl) back to entries; for
// checks that cannot fail on what was validated when it was set: an
// invalid value reads as an empty ACL (nothing granted beyond the mode).
Acl DecodeKeptAcl(std::string_view xattr);

// The mode's rwx bits an access ACL gives (owner, mask or owning group,
// others), the other bits of `mode` kept; whether the ACL says more than
// that (named entries or a mask: it must be kept). posix_acl_equiv_mode.
bool AclBeyondMode(const Acl& acl, uint32_t* mode);
// chmod of a file with an access ACL: the owner, mask (or owning group
// without one) and others entries take the mode's bits. posix_acl_chmod.
void AclChmod(Acl& acl, uint32_t mode);
// A new object in a directory with default ACL `dflt`: its access ACL is
// the default narrowed by the requested `mode`'s bits and `*mode` narrowed
// by the ACL (the owner, the mask or owning group, others); returns the
// access ACL, empty when it says no more than the mode. (A new directory
// also takes `dflt` as its own default.) posix_acl_create_masq.
Acl AclCreate(const Acl& dflt, uint32_t* mode);

// Whether an access ACL grants all of `want` (rwx bits) to user `uid` whose
// groups are those `in_group` says yes to, on a file owned by `owner`
// (group: the file's group, which the owning-group entry is for).
// posix_acl_permission; root's override is the caller's.
bool AclPermits(const Acl& acl, uint32_t owner, uint32_t group, uint32_t uid,
                const std::function<bool(uint32_t)>& in_group, uint32_t want);

// getfacl-like text for messages and tests ("user::rw-,user:1000:r--,...").
std::string AclText(const Acl& acl);

}  // namespace nasgw::fs
