// POSIX permission rules, done in nasgwd with the caller's credentials (the
// heads pass them on every request; docs/head-protocol.md). Pure functions
// of attributes and credentials, so every rule is unit-tested here and the
// same code serves every head and, later, requests forwarded from another
// node. Results are Linux errno values (0: allowed), because EPERM and
// EACCES mean different things to clients.
#pragma once

#include <cstdint>

#include "fs/domain.h"
#include "proto/head.h"

namespace nasgw::daemon {

bool InGroup(const proto::Creds& c, uint32_t gid);

// Which of the rwx bits in `want` (proto::kAccess*) the caller has on `a`,
// by its mode or, when it has one, its access ACL (each bit on its own).
// Root has all, except execute on a non-directory with no x bit at all.
uint32_t Granted(const fs::Attr& a, const proto::Creds& c, uint32_t want);
// 0 or EACCES. With an access ACL, one entry must grant all of `want`
// (Linux's posix_acl_permission).
int CheckAccess(const fs::Attr& a, const proto::Creds& c, uint32_t want);
// Data access to an object the caller may have opened: the owner may always
// read and write its own file (as knfsd's owner override: a file created
// 0444 stays writable through the descriptor that created it), and who may
// execute a regular file may read it (a program is paged in by reads:
// knfsd's read-if-exec; opening it to read is still CheckAccess's).
int CheckData(const fs::Attr& a, const proto::Creds& c, uint32_t want);

// Removing or replacing `victim` in `dir`: write and search on the directory
// (EACCES), and with the sticky bit only the owner of the file or of the
// directory, or root (EPERM).
int CheckRemove(const fs::Attr& dir, const fs::Attr& victim, const proto::Creds& c);

// The setuid and setgid bits a write or a truncation by `c` clears from `a`
// (Linux's should_remove_suid): setuid always, setgid when the file is
// group-executable (without group execute, setgid marks mandatory locking
// and stays), on regular files only; nothing for root, who holds
// CAP_FSETID. 0: nothing to clear.
uint32_t KillPrivBits(const fs::Attr& a, const proto::Creds& c);

// SETATTR: owner rules (chmod, chown, chgrp, times: EPERM), truncation
// (write access, owner override), "now" times (owner or write access).
// A mode change by someone else than the owner is allowed when it only
// clears setuid and/or setgid and the caller may write the file (writing
// or truncating would clear them anyway: it is what Linux's FUSE client
// sends, as the writer, before a write or truncation). Adjusts `s` as
// Linux does: chmod by a caller outside the file's group drops setgid; a
// change of owner or group drops setuid (and setgid when group-executable)
// on non-directories; a truncation (size set, mode not) drops
// KillPrivBits.
int CheckSetAttr(const fs::Attr& a, const proto::Creds& c, uint32_t mask, fs::SetAttr& s);

// Owner and mode for a new object in `dir`: the caller's uid; the
// directory's group when it is setgid (and a new directory inherits
// setgid), else the caller's gid; setgid dropped from a new file whose group
// the caller is not in.
void NewOwner(const fs::Attr& dir, const proto::Creds& c, fs::FileType type, uint32_t& mode, uint32_t& uid,
              uint32_t& gid);

}  // namespace nasgw::daemon
