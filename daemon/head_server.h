// HeadServer: the head protocol's transport. A Unix-domain socket (mode and
// group from the config) accepts heads; each connection has a reader thread
// that decodes frames and hands requests to a fixed pool of workers, which
// execute them (HeadService) and write the replies, in any order. Attribute
// reads (GETATTR, ACCESS, LOOKUP) are executed on the reader itself: the
// hand-off would cost more than the work.
//
// Limits: at most max_connections connections (more are closed at accept);
// at most max_inflight requests per connection (past that the reader stops
// reading that socket: backpressure); the worker queue is bounded too. A
// malformed frame closes that connection only.
//
// Callers the socket lets in are trusted to state their credentials when
// they run as root or as nasgwd's own user (Ganesha, smbd); any other peer
// may only act as itself: its uid, and groups it is in (SO_PEERCRED,
// SO_PEERGROUPS).
//
// Sessions: a connection's first frame is HELLO with a session id; the
// session (its open files) outlives a broken connection by kSessionGraceMs
// so a client that reconnects keeps its opens.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

#include "base/status.h"
#include "daemon/head_service.h"

namespace nasgw::daemon {

constexpr uint32_t kSessionGraceMs = 30'000;

struct HeadServerOptions {
  std::string socket_path;
  uint32_t socket_mode = 0660;
  int socket_gid = -1;  // -1: leave the group
  uint32_t workers = 16;
  uint32_t max_connections = 256;
  uint32_t max_inflight = 64;
  std::string node_name;
  uint32_t session_grace_ms = kSessionGraceMs;
  // A head must say hello within hello_timeout_ms, and read a reply within
  // send_timeout_ms: else its connection is cut (it must not hold a
  // connection slot or a worker).
  uint32_t hello_timeout_ms = 10'000;
  uint32_t send_timeout_ms = 10'000;
};

// Called after every request (from workers and readers): statistics.
class HeadObserver {
 public:
  virtual ~HeadObserver() = default;
  virtual void OnRequest(proto::Op op, uint32_t volume, uint64_t bytes, uint64_t latency_ns, int err) = 0;
  // The number of open connections changed (from the acceptor or a reader).
  virtual void OnConnections(uint32_t open) {}
};

class HeadServer {
 public:
  static Result<std::unique_ptr<HeadServer>> Start(HeadService* service, const HeadServerOptions& options,
                                                   HeadObserver* observer = nullptr);
  ~HeadServer();

  // Stops accepting and reading, lets requests in flight finish (at most
  // `drain`; then connections are cut), and closes everything. Idempotent.
  void Shutdown(std::chrono::milliseconds drain);

  uint32_t connections() const;
  uint64_t requests() const;
  uint32_t queued() const;  // requests waiting for a worker
  uint64_t protocol_errors() const;

  struct Impl;

 private:
  explicit HeadServer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace nasgw::daemon
