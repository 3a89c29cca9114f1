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
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "fs/domain.h"
#include "proto/head.h"

namespace nasgw::daemon {

// A client session: what its connections share. Each open has the client's
// id, so OPEN and RELEASE are idempotent and may arrive in any order; a file
// is open (to the domain) while any of its ids is. Released when the
// session ends.
struct HeadSession {
  proto::SessionId id{};
  std::mutex mu;
  std::map<std::pair<uint32_t, uint64_t>, std::set<uint64_t>> opens;  // GUARDED_BY(mu): file -> open ids
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
  explicit HeadService(DomainSource domain) : domain_(std::move(domain)) {}

  // HELLO is the transport's; every other op is executed here.
  HeadOutcome Execute(HeadSession& session, const proto::Request& r);
  // Releases every file the session still has open.
  void EndSession(HeadSession& session);

 private:
  DomainSource domain_;
};

// The errno a head sees for a file-system status.
int ErrnoOf(const Status& s);

}  // namespace nasgw::daemon
