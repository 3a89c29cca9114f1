// LockTable: nasgwd's byte-range locks and share reservations, one table
// for every head, so that NFS (NLM and NFSv4 through Ganesha), SMB and FUSE
// clients see each other's. Heads take locks with LOCK, UNLOCK and TESTLOCK
// and set share reservations with SHARE (head protocol).
//
// A lock belongs to an owner: a (session, owner) pair, the session being
// nasgwd's number for the head's session and the owner a u64 the head
// chose (an NLM or NFSv4 lock owner, a Samba file handle...). Within one
// owner the rules are POSIX's (proto/lock_range.h): a new lock replaces the
// owner's overlapping ranges, merges with adjacent ones of its type, and an
// unlock splits. Two owners conflict when their ranges overlap and either
// lock is a write lock. Locks are non-blocking: a conflict is reported at
// once (the head retries, or blocks its own client); there is no wait queue.
//
// Locks are advisory: READ and WRITE do not look at them. They are keyed by
// (volume, inode) (inode numbers are never reused) and are not tied to
// opens; they end when their owner unlocks them or when the session ends
// (ReleaseSession).
//
// Share reservations (SMB share modes, NFSv4 share_access/share_deny):
// an owner holds at most one per file, its access and deny bits
// (proto::kShare*); setting one replaces the owner's (NFSv4 OPEN_UPGRADE
// and OPEN_DOWNGRADE, an SMB open's), and access 0 with deny 0 releases it.
// Two owners' reservations conflict when either's access meets the other's
// deny: the Windows rule (IoCheckShareAccess) and NFSv4's (RFC 8881
// 9.7). Like locks they end with the owner's release or the session.
//
// Bounded: at most `per_session` ranges (a share reservation counts as one)
// per session and `total` in the table; an operation that would go past
// either (a lock, a new reservation, or an unlock that splits a range) is
// refused with kNoLocks (ENOLCK, as fcntl).
//
// Cost: the ranges of a file are scanned linearly for conflicts (as Linux's
// fs/locks.c walks an inode's POSIX locks), so an operation costs in
// proportion to the locks held on that one file.
//
// Thread-safe: one mutex, a leaf (held alone, and nothing is called under it).
#pragma once

#include <compare>
#include <cstddef>
#include <cstdint>
#include <map>
#include <utility>
#include <vector>

#include "base/mutex.h"
#include "daemon/config.h"
#include "proto/lock_range.h"

namespace nasgw::daemon {

// Limits of the lock table: head.max_locks, head.max_locks_per_session
// (daemon/config.h says why these defaults).
struct LockLimits {
  uint32_t total = kHeadLocksDefault;
  uint32_t per_session = kHeadLocksPerSessionDefault;
};

struct LockOwner {
  uint64_t session = 0;
  uint64_t owner = 0;
  auto operator<=>(const LockOwner&) const =
      default;  // NOLINT(modernize-use-nullptr): clang-tidy 14 misreads a defaulted <=>
};

using LockFile = std::pair<uint32_t, uint64_t>;  // volume, inode

struct HeldLock {
  LockOwner who;
  proto::LockRange range;
};

struct ShareMode {
  uint32_t access = 0;  // proto::kShareRead | kShareWrite | kShareDelete
  uint32_t deny = 0;
  bool operator==(const ShareMode&) const = default;
};

struct HeldShare {
  LockOwner who;
  ShareMode mode;
};

enum class LockResult {
  kOk,
  kConflict,  // another owner holds a conflicting lock (EAGAIN)
  kNoLocks,   // past a limit (ENOLCK); nothing changed
};

class LockTable {
 public:
  explicit LockTable(LockLimits limits = {});

  // Locks `lock` for `who`. On kConflict, *conflict (if given) is the
  // conflicting lock with the lowest start; nothing changed.
  LockResult Lock(const LockFile& file, const LockOwner& who, const proto::LockRange& lock, HeldLock* conflict);
  // Unlocks [start, end] of who's locks (nothing held there is fine).
  LockResult Unlock(const LockFile& file, const LockOwner& who, uint64_t start, uint64_t end);
  // Whether `lock` would conflict with another owner's; *conflict as Lock.
  bool Test(const LockFile& file, const LockOwner& who, const proto::LockRange& lock, HeldLock* conflict) const;
  // Sets who's share reservation on `file` to `mode` (access 0 and deny 0:
  // releases it). On kConflict, *conflict (if given) is a reservation of
  // another owner that `mode` conflicts with; nothing changed.
  LockResult Share(const LockFile& file, const LockOwner& who, ShareMode mode, HeldShare* conflict);
  // Releases every lock and share reservation of the session.
  void ReleaseSession(uint64_t session);

  size_t size() const;                                        // ranges held, all sessions
  size_t SessionSize(uint64_t session) const;                 // ranges held by one session
  std::vector<HeldLock> Locks(const LockFile& file) const;    // by owner, then start
  std::vector<HeldShare> Shares(const LockFile& file) const;  // by owner

 private:
  struct File {
    std::map<LockOwner, std::vector<proto::LockRange>> owners;  // never an empty vector
    std::map<LockOwner, ShareMode> shares;                      // never access 0 with deny 0
    bool empty() const { return owners.empty() && shares.empty(); }
  };
  struct Session {
    size_t ranges = 0;                 // and share reservations
    std::map<LockFile, size_t> files;  // ranges and reservations per file, never 0
  };

  bool FindConflict(const File& f, const LockOwner& who, const proto::LockRange& lock, HeldLock* conflict) const
      REQUIRES(mu_);
  // Replaces who's ranges in `file` with `ranges` if the limits allow.
  LockResult Commit(const LockFile& file, const LockOwner& who, std::vector<proto::LockRange> ranges) REQUIRES(mu_);
  // Accounts `before` -> `after` entries of who's in `file` if the limits
  // allow (false: past one; nothing changed). Creates the session's entry.
  bool Account(const LockFile& file, const LockOwner& who, size_t before, size_t after) REQUIRES(mu_);

  const LockLimits limits_;
  // A leaf: held alone, nothing is called under it (docs/architecture.md).
  mutable Mutex mu_;
  std::map<LockFile, File> files_ GUARDED_BY(mu_);
  std::map<uint64_t, Session> sessions_ GUARDED_BY(mu_);
  size_t total_ GUARDED_BY(mu_) = 0;
};

}  // namespace nasgw::daemon
