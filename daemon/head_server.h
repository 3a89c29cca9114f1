// HeadServer: the head protocol's transport. A Unix-domain socket (mode and
// group from the config) accepts heads; each connection has a reader thread
// that decodes frames and hands requests to fixed pools of workers, which
// execute them (HeadService) and write the replies, in any order. Two lanes:
// data operations (READ, WRITE, COMMIT: they may wait on the array) have
// `workers` threads, namespace operations half as many (at least 2) of their
// own, so a saturated array never queues another client's MOUNT, READDIR or
// CREATE behind reads. Attribute reads (GETATTR, ACCESS, LOOKUP) are
// executed on the reader itself: the hand-off would cost more than the work.
//
// Limits: at most max_connections connections, and max_connections_per_uid
// of one peer uid (SO_PEERCRED); a connection past either is answered with a
// failed HELLO (ENFILE, EMFILE) and closed. At most max_inflight requests per
// connection (past that the reader stops reading that socket:
// backpressure); the worker queue is bounded too. A connection with nothing
// in flight that sends nothing for idle_timeout_ms is closed, with a notice
// that tells its client nothing it sent since was executed. A malformed
// frame closes that connection only. Refusals and malformed frames are
// counted and logged at most once per log_interval_ms per peer uid
// (LogLimiter), with the count since the last line.
//
// Callers the socket lets in are trusted to state their credentials when
// they run as root or as nasgwd's own user (Ganesha, smbd); any other peer
// may only act as itself: its uid, and groups it is in (SO_PEERCRED,
// SO_PEERGROUPS).
//
// Forwarding: in a pair, a connection a head makes to the node that does not
// own the reserve is relayed, byte for byte, to the owner's forward
// listener over the interconnect, with the head's credentials as this node
// read them (SO_PEERCRED); the owner serves it as if the head had
// connected there. Reroute() cuts every connection when the node starts or
// stops serving, so that heads connect again and are routed anew.
//
// Sessions: a connection's first frame is HELLO with a session id; the
// session (its open files) outlives a broken connection by kSessionGraceMs
// so a client that reconnects keeps its opens.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "base/limits.h"
#include "base/status.h"
#include "daemon/head_service.h"

namespace nasgw::daemon {

constexpr uint32_t kSessionGraceMs = 30'000;

struct HeadServerOptions {
  std::string socket_path;
  uint32_t socket_mode = 0660;
  int socket_gid = -1;    // -1: leave the group
  uint32_t workers = 16;  // the data lane's; the namespace lane has max(2, workers / 2)
  uint32_t max_connections = 256;
  uint32_t max_connections_per_uid = 128;
  uint32_t max_inflight = 64;
  // Request buffers of every connection together (the payloads of frames
  // over 64 KiB: WRITE data): the head's share of the node's memory budget.
  // A reader that finds it used up stops reading its socket until requests
  // finish (backpressure). At least one largest frame. (Smaller frames are
  // bounded by max_inflight, READ replies by the workers.)
  uint64_t request_bytes = limits::SharesOf(limits::kMemoryBytesDefault).requests;
  // A connection with no request in flight and nothing received for this
  // long is closed (its client reconnects when it needs to).
  uint32_t idle_timeout_ms = 300'000;
  // Refusals and malformed frames: at most one log line per peer uid per
  // interval, with the count since the last.
  uint32_t log_interval_ms = 10'000;
  std::string node_name;
  uint32_t session_grace_ms = kSessionGraceMs;
  // A head must say hello within hello_timeout_ms, and read a reply within
  // send_timeout_ms: else its connection is cut (it must not hold a
  // connection slot or a worker).
  uint32_t hello_timeout_ms = 10'000;
  uint32_t send_timeout_ms = 10'000;
  // Forwarding between the nodes of a pair (docs/head-protocol.md,
  // "Node-to-node forwarding"; "" for both: none). forward_listen is this
  // node's interconnect address, where the partner relays the heads it
  // does not serve itself; only forward_peer's address may connect there.
  // forward_peer is where this node relays its own heads' connections
  // while forward_route() says so (the partner owns the reserve).
  std::string forward_listen;
  std::string forward_peer;
  std::function<bool()> forward_route;
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

  // Closes every connection, served here or relayed, and every connection
  // the partner relayed here, so that their heads connect again and are
  // routed as forward_route() now says (the node calls it when it starts
  // or stops serving the reserve). Requests in flight finish; their
  // replies may be lost, and the heads resend them (or fail a
  // non-idempotent one with EAGAIN), as after a restart of nasgwd.
  void Reroute(const std::string& why);

  // Cuts at once (no notice, no waiting for replies) every connection the
  // partner relayed here: the node calls it when the partner is gone (its
  // machine died: no FIN or RST would come for minutes). Their sessions
  // are then without a connection, and their clients' reclaims through
  // this node's heads may take their locks (LOCK, kLockReclaim).
  void CutForwarded(const std::string& why);

  // Stops accepting and reading, lets requests in flight finish (at most
  // `drain`; then connections are cut), and closes everything. Idempotent.
  void Shutdown(std::chrono::milliseconds drain);

  uint32_t connections() const;
  uint64_t requests() const;
  uint32_t queued() const;                   // requests waiting for a worker
  uint64_t request_bytes() const;            // request buffers held now
  uint64_t request_bytes_capacity() const;   // HeadServerOptions::request_bytes
  uint64_t request_waits() const;            // frames whose reader waited for request buffers
  uint64_t protocol_errors() const;          // malformed frames (each closed its connection)
  uint64_t refused_connections() const;      // refused at max_connections
  uint64_t refused_connections_uid() const;  // refused at max_connections_per_uid
  uint64_t idle_closed() const;              // connections closed for idleness
  uint32_t relays() const;                   // heads' connections relayed to the partner now
  uint64_t relayed_total() const;            // ... since start
  uint64_t relay_failures() const;           // the partner could not be reached for one
  uint32_t forwarded_in() const;             // connections the partner relays here now
  uint16_t forward_port() const;             // the forward listener's port (0: none)

  struct Impl;

 private:
  explicit HeadServer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace nasgw::daemon
