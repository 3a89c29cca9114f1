// HeadService: executes head-protocol requests against the file system with
// the caller's credentials. Transport-free (the HeadServer feeds it from
// sockets), so its rules are tested directly.
//
// Permission checks (daemon/access.h) are made here, against attributes
// read just before the change; the domain then enforces the file system's
// own rules. (A concurrent chmod between the check and the change can let
// one request through on the old mode, as in most NAS servers; the check
// moves under the domain's lock when the cache brings finer locking.)
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "daemon/locks.h"
#include "fs/domain.h"
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
  std::mutex mu;
  std::map<std::pair<uint32_t, uint64_t>, std::set<uint64_t>> opens;  // GUARDED_BY(mu): file -> open ids
  std::atomic<bool> ended{false};                                     // set under mu by EndSession
};

struct HeadOutcome {
  int err = 0;  // Linux errno; 0 on success
  std::string why;
  proto::Reply reply;
  std::vector<uint8_t> data;  // READ: the bytes read (reply.eof says whether at the end)
  uint32_t volume = 0;        // for per-volume statistics
  uint64_t bytes = 0;         // bytes read or written
};

class HeadService {
 public:
  using DomainSource = std::function<std::shared_ptr<fs::Domain>()>;
  explicit HeadService(DomainSource domain, LockLimits locks = {}) : domain_(std::move(domain)), locks_(locks) {}

  // HELLO is the transport's; every other op is executed here (GOODBYE
  // ends the session: EndSession).
  HeadOutcome Execute(HeadSession& session, const proto::Request& r);
  // Releases every file the session still has open and every lock it
  // holds, and marks it ended. Idempotent.
  void EndSession(HeadSession& session);

  const LockTable& locks() const { return locks_; }

 private:
  DomainSource domain_;
  LockTable locks_;
};

// The errno a head sees for a file-system status.
int ErrnoOf(const Status& s);

}  // namespace nasgw::daemon
