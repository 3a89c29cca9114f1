#include "fs/acl.h"

namespace nasgw::fs {
namespace {

constexpr size_t kHeaderBytes = 4, kEntryBytes = 8;

uint32_t Le32(std::string_view s, size_t at) {
  uint32_t v = 0;
  for (int i = 3; i >= 0; i--) v = (v << 8) | static_cast<uint8_t>(s[at + static_cast<size_t>(i)]);
  return v;
}

void PutLe(std::string* s, uint32_t v, int bytes) {
  for (int i = 0; i < bytes; i++) s->push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

bool Named(uint16_t tag) {
  return tag == kAclUser || tag == kAclGroup;
}

// Linux's posix_acl_valid: the base entries once each, in order, a mask
// when there are named entries.
Status Valid(const Acl& acl) {
  enum { kWantUserObj, kUsers, kGroups, kWantOther, kDone } state = kWantUserObj;
  bool needs_mask = false;
  for (const AclEntry& e : acl) {
    if (e.perm & ~7u) return Status::InvalidArgument("ACL permission bits beyond rwx");
    switch (e.tag) {
      case kAclUserObj:
        if (state != kWantUserObj) return Status::InvalidArgument("ACL owner entry out of place or repeated");
        state = kUsers;
        break;
      case kAclUser:
        if (state != kUsers) return Status::InvalidArgument("ACL named user entry out of place");
        needs_mask = true;
        break;
      case kAclGroupObj:
        if (state != kUsers) return Status::InvalidArgument("ACL owning group entry out of place or repeated");
        state = kGroups;
        break;
      case kAclGroup:
        if (state != kGroups) return Status::InvalidArgument("ACL named group entry out of place");
        needs_mask = true;
        break;
      case kAclMask:
        if (state != kGroups) return Status::InvalidArgument("ACL mask entry out of place or repeated");
        state = kWantOther;
        break;
      case kAclOther:
        if (state != kWantOther && !(state == kGroups && !needs_mask)) {
          return Status::InvalidArgument(state == kGroups ? "ACL with named entries and no mask"
                                                          : "ACL others entry out of place or repeated");
        }
        state = kDone;
        break;
      default:
        return Status::InvalidArgument("unknown ACL entry tag " + std::to_string(e.tag));
    }
  }
  if (state != kDone) return Status::InvalidArgument("ACL without its owner, owning group or others entry");
  return Status();
}

}  // namespace

Result<Acl> ParseAcl(std::string_view x) {
  Acl acl;
  if (x.empty()) return acl;
  if (x.size() < kHeaderBytes) return Status::InvalidArgument("ACL shorter than its header");
  if (Le32(x, 0) != kAclXattrVersion) {
    return Status::NotSupported("ACL version " + std::to_string(Le32(x, 0)) + " (only version 2 is known)");
  }
  if ((x.size() - kHeaderBytes) % kEntryBytes != 0) return Status::InvalidArgument("ACL not whole entries");
  const size_t n = (x.size() - kHeaderBytes) / kEntryBytes;
  if (n > kAclEntriesMax) {
    return Status::OutOfRange("ACL of " + std::to_string(n) + " entries (at most " + std::to_string(kAclEntriesMax) +
                              ")");
  }
  acl.reserve(n);
  for (size_t i = 0; i < n; i++) {
    const size_t at = kHeaderBytes + i * kEntryBytes;
    const uint32_t tp = Le32(x, at);
    AclEntry e;
    e.tag = static_cast<uint16_t>(tp & 0xffff);
    e.perm = static_cast<uint16_t>(tp >> 16);
    e.id = Le32(x, at + 4);
    if (Named(e.tag)) {
      if (e.id == kAclUndefinedId) return Status::InvalidArgument("ACL named entry without an id");
    } else {
      e.id = kAclUndefinedId;
    }
    acl.push_back(e);
  }
  if (n == 0) return acl;
  NASGW_RETURN_IF_ERROR(Valid(acl));
  return acl;
}

std::string EncodeAcl(const Acl& acl) {
  std::string s;
  s.reserve(kHeaderBytes + acl.size() * kEntryBytes);
  PutLe(&s, kAclXattrVersion, 4);
  for (const AclEntry& e : acl) {
    PutLe(&s, e.tag, 2);
    PutLe(&s, e.perm, 2);
    PutLe(&s, Named(e.tag) ? e.id : kAclUndefinedId, 4);
  }
  return s;
}

Acl DecodeKeptAcl(std::string_view x) {
  auto a = ParseAcl(x);
  return a.ok() ? *std::move(a) : Acl{};
}

bool AclBeyondMode(const Acl& acl, uint32_t* mode) {
  uint32_t bits = 0;
  bool beyond = false;
  const AclEntry* mask = nullptr;
  for (const AclEntry& e : acl) {
    switch (e.tag) {
      case kAclUserObj:
        bits |= (e.perm & 7u) << 6;
        break;
      case kAclGroupObj:
        bits |= (e.perm & 7u) << 3;
        break;
      case kAclOther:
        bits |= e.perm & 7u;
        break;
      case kAclMask:
        mask = &e;
        beyond = true;
        break;
      default:
        beyond = true;
        break;
    }
  }
  if (mask != nullptr) bits = (bits & ~070u) | ((mask->perm & 7u) << 3);
  *mode = (*mode & ~0777u) | bits;
  return beyond;
}

void AclChmod(Acl& acl, uint32_t mode) {
  AclEntry *group = nullptr, *mask = nullptr;
  for (AclEntry& e : acl) {
    switch (e.tag) {
      case kAclUserObj:
        e.perm = static_cast<uint16_t>((mode >> 6) & 7u);
        break;
      case kAclGroupObj:
        group = &e;
        break;
      case kAclMask:
        mask = &e;
        break;
      case kAclOther:
        e.perm = static_cast<uint16_t>(mode & 7u);
        break;
      default:
        break;
    }
  }
  AclEntry* g = mask != nullptr ? mask : group;
  if (g != nullptr) g->perm = static_cast<uint16_t>((mode >> 3) & 7u);
}

Acl AclCreate(const Acl& dflt, uint32_t* mode) {
  Acl acl = dflt;
  uint32_t m = *mode;
  AclEntry *group = nullptr, *mask = nullptr;
  bool beyond = false;
  for (AclEntry& e : acl) {
    switch (e.tag) {
      case kAclUserObj:
        e.perm &= static_cast<uint16_t>((m >> 6) & 7u);
        m &= (static_cast<uint32_t>(e.perm) << 6) | ~0700u;
        break;
      case kAclUser:
      case kAclGroup:
        beyond = true;
        break;
      case kAclGroupObj:
        group = &e;
        break;
      case kAclOther:
        e.perm &= static_cast<uint16_t>(m & 7u);
        m &= static_cast<uint32_t>(e.perm) | ~07u;
        break;
      case kAclMask:
        mask = &e;
        beyond = true;
        break;
      default:
        break;
    }
  }
  AclEntry* g = mask != nullptr ? mask : group;
  if (g != nullptr) {
    g->perm &= static_cast<uint16_t>((m >> 3) & 7u);
    m &= (static_cast<uint32_t>(g->perm) << 3) | ~070u;
  }
  *mode = m;
  if (!beyond) acl.clear();
  return acl;
}

bool AclPermits(const Acl& acl, uint32_t owner, uint32_t group, uint32_t uid,
                const std::function<bool(uint32_t)>& in_group, uint32_t want) {
  want &= 7u;
  uint16_t mask = 7;
  for (const AclEntry& e : acl) {
    if (e.tag == kAclMask) mask = e.perm;
  }
  bool found = false;
  for (const AclEntry& e : acl) {
    switch (e.tag) {
      case kAclUserObj:
        if (uid == owner) return (e.perm & want) == want;
        break;
      case kAclUser:
        if (uid == e.id) return (e.perm & mask & want) == want;
        break;
      case kAclGroupObj:
      case kAclGroup:
        if (in_group(e.tag == kAclGroupObj ? group : e.id)) {
          found = true;
          if ((e.perm & want) == want) return (e.perm & mask & want) == want;
        }
        break;
      case kAclOther:
        return !found && (e.perm & want) == want;
      default:
        break;
    }
  }
  return false;
}

std::string AclText(const Acl& acl) {
  std::string s;
  for (const AclEntry& e : acl) {
    if (!s.empty()) s += ",";
    switch (e.tag) {
      case kAclUserObj:
        s += "user::";
        break;
      case kAclUser:
        s += "user:" + std::to_string(e.id) + ":";
        break;
      case kAclGroupObj:
        s += "group::";
        break;
      case kAclGroup:
        s += "group:" + std::to_string(e.id) + ":";
        break;
      case kAclMask:
        s += "mask::";
        break;
      case kAclOther:
        s += "other::";
        break;
      default:
        s += "?" + std::to_string(e.tag) + ":";
        break;
    }
    s += (e.perm & 4) ? "r" : "-";
    s += (e.perm & 2) ? "w" : "-";
    s += (e.perm & 1) ? "x" : "-";
  }
  return s;
}

}  // namespace nasgw::fs
