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
// Leases (SMB oplocks and leases, NFSv4 delegations): what a head lets its
// client cache, read (kLeaseRead) or read and write (with kLeaseWrite). An
// owner holds at most one per file; setting one replaces it, 0 releases it.
// Leases belong to a coherence domain: the heads that arbitrate caching
// among themselves (every smbd process of a node shares locking.tdb; one
// Ganesha arbitrates its clients). An operation of another domain contends
// with them (Contend): a write with every lease, a read with write leases.
// A contended lease is recalled once (its holder is told, through the head
// protocol's RECALL, to give back what the operation needs) and the
// operation waits (the head retries) until the holder releases or
// downgrades it; one not given back within `lease_break_ms` of its recall
// is revoked. Two leases of different domains conflict as an operation
// would: a new one that does is refused (SetLease).
//
// Bounded: at most `per_session` ranges (a share reservation or a lease counts as one)
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

#include <atomic>
#include <compare>
#include <cstddef>
#include <cstdint>
#include <map>
#include <set>
#include <string>
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
  // How long a recalled lease may take to come back before it is revoked:
  // longer than Samba's own lease break timeout (35 s), which downgrades
  // a silent SMB client first.
  uint32_t lease_break_ms = 40000;
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

struct HeldLease {
  LockOwner who;
  uint32_t type = 0;   // proto::kLeaseRead, with kLeaseWrite or not
  std::string domain;  // its coherence domain
  bool recalled = false;
  uint32_t break_to = 0;  // when recalled: what it may keep
};

// A lease an operation contends with, to be recalled: tell `who` to give
// back all but `break_to`.
struct RecallNote {
  LockOwner who;
  uint32_t break_to = 0;
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
  //
  // `reclaim`: a lock its client held before its head (or nasgwd) went
  // away, taken again in the head's grace period (an NFSv4 or NLM
  // reclaim). It is granted over conflicting ranges of *detached* sessions
  // (SetAttached: a head whose connections are all gone, its session kept
  // for kSessionGraceMs): those ranges are taken from them first. Those
  // sessions' heads are gone and their clients are the reclaimers; the
  // lock is one the dead head held for this client. A conflict with an
  // attached session's lock is a conflict still, and then nothing changed.
  // A reclaim past the limits (kNoLocks) may have taken the detached
  // sessions' overlapping ranges already.
  LockResult Lock(const LockFile& file, const LockOwner& who, const proto::LockRange& lock, HeldLock* conflict,
                  bool reclaim = false);
  // Whether `session` has a connection (true) or is waiting out its grace
  // with none (false). Sessions start attached; an ended session's mark
  // goes with ReleaseSession.
  void SetAttached(uint64_t session, bool attached);
  // Unlocks [start, end] of who's locks (nothing held there is fine).
  LockResult Unlock(const LockFile& file, const LockOwner& who, uint64_t start, uint64_t end);
  // Whether `lock` would conflict with another owner's; *conflict as Lock.
  bool Test(const LockFile& file, const LockOwner& who, const proto::LockRange& lock, HeldLock* conflict) const;
  // Sets who's share reservation on `file` to `mode` (access 0 and deny 0:
  // releases it). On kConflict, *conflict (if given) is a reservation of
  // another owner that `mode` conflicts with; nothing changed.
  LockResult Share(const LockFile& file, const LockOwner& who, ShareMode mode, HeldShare* conflict);
  // Sets who's lease on `file` (type 0 releases it; a release never fails).
  // kConflict when another domain's lease conflicts (*conflict, if given,
  // is one): nothing changed. A lease that gives back what its recall asked
  // for is no longer being recalled.
  LockResult SetLease(const LockFile& file, const LockOwner& who, const std::string& domain, uint32_t type,
                      HeldLease* conflict);
  // An operation of `domain` on `file` (`write`: it changes the data or the
  // size, or opens for writing; else it reads): whether it must wait for a
  // lease of another domain. Leases it contends with that were not yet
  // recalled are marked recalled at `now_ns` and added to *recall; leases
  // recalled more than lease_break_ms before `now_ns` are revoked (removed)
  // and added to *revoked, and do not hold it up.
  bool Contend(const LockFile& file, const std::string& domain, bool write, uint64_t now_ns,
               std::vector<RecallNote>* recall, std::vector<HeldLease>* revoked);
  // Releases every lock, share reservation and lease of the session.
  void ReleaseSession(uint64_t session);

  size_t size() const;                                        // ranges held, all sessions
  size_t SessionSize(uint64_t session) const;                 // ranges held by one session
  std::vector<HeldLock> Locks(const LockFile& file) const;    // by owner, then start
  std::vector<HeldShare> Shares(const LockFile& file) const;  // by owner
  std::vector<HeldLease> Leases(const LockFile& file) const;  // by owner
  size_t LeaseCount() const { return leases_.load(); }

 private:
  struct Lease {
    uint32_t type = 0;
    std::string domain;
    uint64_t recalled_ns = 0;  // 0: not being recalled
    uint32_t break_to = 0;
  };
  struct File {
    std::map<LockOwner, std::vector<proto::LockRange>> owners;  // never an empty vector
    std::map<LockOwner, ShareMode> shares;                      // never access 0 with deny 0
    std::map<LockOwner, Lease> leases;                          // never type 0
    bool empty() const { return owners.empty() && shares.empty() && leases.empty(); }
  };
  struct Session {
    size_t ranges = 0;                 // and share reservations
    std::map<LockFile, size_t> files;  // ranges and reservations per file, never 0
  };

  bool FindConflict(const File& f, const LockOwner& who, const proto::LockRange& lock, HeldLock* conflict) const
      REQUIRES(mu_);
  // A reclaim's first step: takes the ranges that conflict with `lock` from
  // owners of detached sessions. kConflict (*conflict, nothing changed)
  // when an attached session's owner conflicts.
  LockResult YieldDetached(const LockFile& file, const LockOwner& who, const proto::LockRange& lock, HeldLock* conflict)
      REQUIRES(mu_);
  // Replaces who's ranges in `file` with `ranges` if the limits allow.
  LockResult Commit(const LockFile& file, const LockOwner& who, std::vector<proto::LockRange> ranges) REQUIRES(mu_);
  // What add(file's entry, out) collects, under the lock (empty for a file
  // with nothing held).
  template <typename T, typename Fn>
  std::vector<T> Collect(const LockFile& file, Fn add) const;
  // Accounts `before` -> `after` entries of who's in `file` if the limits
  // allow (false: past one; nothing changed). Creates the session's entry.
  bool Account(const LockFile& file, const LockOwner& who, size_t before, size_t after) REQUIRES(mu_);

  const LockLimits limits_;
  // A leaf: held alone, nothing is called under it (docs/architecture.md).
  mutable Mutex mu_;
  std::map<LockFile, File> files_ GUARDED_BY(mu_);
  std::map<uint64_t, Session> sessions_ GUARDED_BY(mu_);
  size_t total_ GUARDED_BY(mu_) = 0;
  std::set<uint64_t> detached_ GUARDED_BY(mu_);  // sessions with no connection
  // Leases held, all files: read without mu_ so that reads and writes of
  // a table without leases (the common case) skip the lock.
  std::atomic<size_t> leases_{0};
};

}  // namespace nasgw::daemon
