// HeadService: executes head-protocol requests against the file system with
// the caller's credentials. Transport-free (the HeadServer feeds it from
// sockets), so its rules are tested directly.
//
// Permission checks (daemon/access.h) are made here, against attributes
// read just before the change; the domain then enforces the file system's
// own rules. (A concurrent chmod between the check and the change can let
// one request through on the old mode, as in most NAS servers; the check
// moves under the domain's lock when the cache brings finer locking.)
//
// Handles are checked before anything else (fs/handle.h): the MAC, with the
// domain's key (EBADMSG when it fails: the handle is forged, altered, of
// another reserve, or presented in another scope), then the snapshot, the
// generation (ESTALE for a deleted file), then the scope: a directory must
// lie inside the handle's scope (its parent chain reaches the scope's
// directory; ESTALE otherwise, e.g. after it was renamed out). A
// non-directory has no parent pointer; its handle is honoured in the scope
// it was issued in (its MAC covers the scope), as knfsd honours a file
// handle reached by lookup. Every handle a reply carries is issued in the
// scope of the request's handle, and LOOKUP of ".." at the scope's directory
// gives that directory (nothing above it is ever issued).
//
// Durability: a WRITE asks for a level (unstable, data_sync, file_sync);
// for either sync level the file is fsynced (fs::Domain::Fsync) before the
// reply, which says the level reached. FSYNC (NFS COMMIT) runs
// fs::Domain::Fsync. Replies to both carry the write verifier of the
// domain's opening that executed them (HeadDomain): it changes whenever
// data written unstable may have been lost, so heads write it again.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "base/mutex.h"
#include "cache/data_cache.h"
#include "daemon/locks.h"
#include "fs/domain.h"
#include "fs/ownership.h"
#include "proto/head.h"

namespace nasgw::daemon {

// A client session: what its connections share. Each open has the client's
// id, so OPEN and RELEASE are idempotent and may arrive in any order; a file
// is open (to the domain) while any of its ids is. Its byte-range locks are
// in the service's LockTable under `serial`. Opens and locks are released
// when the session ends (EndSession); an ended session takes no new ones.
struct HeadSession {
  HeadSession();
  proto::SessionId id{};
  // nasgwd's number for the session, unique in this process: it names the
  // session in the lock table and, for display, in lock conflicts (the id
  // itself is never shown: whoever knows it can join the session).
  const uint64_t serial;
  Mutex mu;
  std::map<std::pair<uint32_t, uint64_t>, std::set<uint64_t>> opens GUARDED_BY(mu);  // file -> open ids
  // Its coherence domain (the HELLO's client name, set before any request
  // runs): leases are recalled only for operations of another domain
  // (daemon/locks.h).
  std::string domain;
  std::atomic<bool> ended{false};  // set under mu by EndSession
};

// The parent of each directory, cached for the scope check. A directory
// changes parent only through RENAME, which every head sends through the
// HeadService, or a rollback of its volume: both call Moved(), which empties
// the cache; a walk that read a parent before that does not store it. (With several nodes serving one
// domain, the cluster issue must carry Moved() to the other nodes.)
class DirParents {
 public:
  // Whether directory `dir` of `vol` is `scope` or below it. NotFound or
  // IoError from the domain when a parent cannot be read.
  Result<bool> Within(fs::Domain& d, uint32_t vol, uint64_t dir, uint64_t scope);
  void Moved();
  size_t size() const;

  // Bounds the cache (a full cache is emptied): 65,536 directories are
  // about 3 MiB, far more than the depth of any export's working set.
  static constexpr size_t kEntriesMax = 65536;
  // A parent chain longer than this is a loop (corruption), not a path.
  static constexpr int kDepthMax = 4096;

 private:
  mutable Mutex mu_;
  uint64_t epoch_ GUARDED_BY(mu_) = 0;
  std::map<std::pair<uint32_t, uint64_t>, uint64_t> parent_ GUARDED_BY(mu_);
};

struct HeadOutcome {
  int err = 0;  // Linux errno; 0 on success
  std::string why;
  proto::Reply reply;
  std::vector<uint8_t> data;  // READ: the bytes read (reply.eof says whether at the end)
  uint32_t volume = 0;        // for per-volume statistics
  uint64_t bytes = 0;         // bytes read or written
  // The reserve is not online here: nothing was done (EHOSTUNREACH). In a
  // pair with forwarding the head server does not answer it but closes the
  // connection with a notice, and the head resends it to where the service
  // is now.
  bool unserved = false;
  // Unserved because this node's lease ran out: in a pair with forwarding
  // the head resends it even before the node's heads are routed to the
  // partner (the node is being fenced; its routing follows within a
  // moment), instead of being answered EHOSTUNREACH meanwhile.
  bool resend = false;
};

// The domain heads act on, with the write verifier of this opening of it:
// a random value the node draws every time it opens or creates the domain
// (never 0), so it changes on a restart, a crash, or the domain moving to
// another node. Data written unstable under one verifier is durable once an
// FSYNC reply carries the same one.
struct HeadDomain {
  std::shared_ptr<fs::Domain> domain;  // domain 0; null while the reserve is not online
  uint64_t write_verifier = 0;         // 0 while the reserve is not online
  // The owner's lease (fs/ownership.h); null: not checked (a domain no node
  // owns, as in tests). Checked before a request runs and before its answer
  // goes out: a node past its lease answers nothing from what it holds,
  // only what the array or the partner's memory already has (ChangesTheArray).
  std::shared_ptr<fs::Lease> lease;
  // Every domain of a reserve split into several (fs/reserve.h, "Domains"),
  // by id; null: `domain` alone. A request goes to the domain of its
  // handle's volume (fs::VolumeDomain).
  std::shared_ptr<const std::vector<std::shared_ptr<fs::Domain>>> domains;

  size_t count() const { return domains ? domains->size() : 1; }
  // Domain `id`; null when there is none.
  const std::shared_ptr<fs::Domain>& Of(uint32_t id) const;
};

// Whether a successful reply to `op` says only what is on the array (or in
// the partner's memory, which a takeover replays): the change went through
// the write gate, which a preempted key cannot pass. Those replies stand
// when the lease ran out while they ran (but an UNSTABLE write answered
// from the cache's memory does not: Execute checks it like a read); so do
// releases, which give up state. Every other answer (reads, lookups, grants of locks, shares and
// leases, and any failure) comes from what this node holds, which a new
// owner may have made stale.
bool ChangesTheArray(proto::Op op);
// Whether `op` changes a file or the namespace (a snapshot refuses it).
bool ChangesFiles(proto::Op op);

// Every opening of a domain gets its own write-back data cache (cache/):
// unstable writes are answered from it, and what it holds is dropped with
// the opening (the verifier changes with it, so clients resend). Each domain
// of a split reserve has its own cache (its writes are logged in its own
// intent log), with an equal share of the cache's memory and dirty bytes
// (no less than their minimums).
class HeadService {
 public:
  using DomainSource = std::function<HeadDomain()>;
  // Sends RECALL to a session (on one of its connections); false when it
  // has none open (the lease is then revoked at its deadline).
  using Recaller = std::function<bool(uint64_t session, const proto::Recall&)>;
  explicit HeadService(DomainSource domain, LockLimits locks = {}, cache::DataCacheOptions cache = {})
      : domain_(std::move(domain)), locks_(locks), cache_options_(cache) {}
  ~HeadService();

  // HELLO is the transport's; every other op is executed here (GOODBYE
  // ends the session: EndSession).
  HeadOutcome Execute(HeadSession& session, const proto::Request& r);
  // Releases every file the session still has open and every lock it
  // holds, and marks it ended. Idempotent.
  void EndSession(HeadSession& session);
  // The transport says whether the session has a connection now (false:
  // its last one went; the session waits out its grace). A reclaiming
  // LOCK takes ranges from sessions without one (LockTable::Lock).
  void SetAttached(const HeadSession& session, bool attached) { locks_.SetAttached(session.serial, attached); }
  // The write verifier now (HELLO tells it): 0 while no domain is open.
  uint64_t WriteVerifier() const;
  // How RECALL reaches a session: set by the transport before it serves.
  void SetRecaller(Recaller r) { recaller_ = std::move(r); }
  // Called after each request answered from the domain (not an unserved
  // one), with its op: the node's takeover timeline notes the first
  // (Node::NoteServed). Set before serving; must be cheap.
  using Served = std::function<void(proto::Op)>;
  void SetServed(Served s) { served_ = std::move(s); }

  const LockTable& locks() const { return locks_; }
  LockTable& locks() { return locks_; }  // for tests: a holder that is no session
  const DirParents& dir_parents() const { return parents_; }
  // The cache's figures (zero while no domain is open).
  cache::DataCacheStats CacheStats() const;
  // Writes what the cache of the domain's current opening holds dirty to the
  // domain and waits for it (a flush of a file already in progress
  // included): when it returns OK, every write answered before the call is
  // in the domain. A snapshot is taken after it (the admin service). The
  // whole cache, every volume's files: cache::DataCache has no per-volume
  // flush. The first error. Nothing to do while no domain is open, or when
  // the cache is an earlier opening's (its data went with that opening).
  Status FlushCache();
  // Volume `vol` was rolled back to a snapshot (the admin service, after
  // FlushCache and fs::Domain::RollbackSnapshot): drops what is cached of
  // it that the rollback made stale, the cache's clean data of its files
  // (DataCache::ForgetVolume; dirty data written meanwhile stays, to be
  // flushed after the rollback) and the directory parents (DirParents).
  // Returns the clean bytes dropped.
  uint64_t ForgetVolume(uint32_t vol);
  // Flushes the cache and stops it (orderly shutdown, before the node closes
  // the domain); later requests are written through. The first error.
  Status Close();

 private:
  // The cache of domain `id` of the opening `d` is; a new one when the
  // opening changed.
  std::shared_ptr<cache::DataCache> CacheFor(const HeadDomain& d, uint32_t id);
  // Every cache now (those of earlier openings included), by domain id.
  std::vector<std::shared_ptr<cache::DataCache>> Caches() const;

  DomainSource domain_;
  Recaller recaller_;
  Served served_;
  LockTable locks_;
  DirParents parents_;
  const cache::DataCacheOptions cache_options_;
  mutable Mutex cache_mu_;
  struct CacheSlot {
    uint64_t verifier = 0;  // of the opening it is for
    // The domain it caches (kept alive by `cache`): an active/active node
    // may close a domain and open it again within one opening, verifier
    // unchanged (docs/cluster.md, "Both nodes serving").
    const fs::Domain* domain = nullptr;
    std::shared_ptr<cache::DataCache> cache;
  };
  std::vector<CacheSlot> caches_ GUARDED_BY(cache_mu_);  // by domain id
  bool closed_ GUARDED_BY(cache_mu_) = false;
};

// The errno a head sees for a file-system status.
int ErrnoOf(const Status& s);

// The protocol's values and the file system's: one conversion per type,
// used wherever a request or a reply meets fs::Domain. (proto/ knows
// nothing of fs/; the two sets of types have the same fields.)
fs::Handle FromWire(const proto::Handle& h);
proto::Mac ToWire(const fs::HandleMac& m);
fs::FileType FromWire(proto::FileType t);
proto::FileType ToWire(fs::FileType t);
fs::Timespec FromWire(const proto::Time& t);
proto::Time ToWire(const fs::Timespec& t);
proto::Attr ToWire(const fs::Attr& a);
// SETATTR's values and mask as the file system's flags; the "now" times
// (kSetAtimeNow, kSetMtimeNow) take `now`.
fs::SetAttr FromWire(const proto::SetAttr& s, const fs::Timespec& now);
proto::DirEntry ToWire(const fs::DirEntry& e);
proto::StatFs ToWire(const fs::StatFs& s);

}  // namespace nasgw::daemon
