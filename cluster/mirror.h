// The cache mirror of a controller pair (brief decision 5, docs/cluster.md
// "The mirror"): the owner of a domain streams every entry of its intent
// log (metadata changes, small stable writes) to the partner's memory over
// nasgwd's own TCP connection on the interconnect, and answers a change once
// the partner holds it (fs::IntentLog::WaitAcknowledged), without waiting
// for the array. The log's records still go to the array as before, a few
// milliseconds behind; the partner drops what the owner reports on the
// array, so it only ever holds that lag (bounded: kMirrorBytesMax).
//
// On takeover the partner stops taking the stream (Freeze) before it fences
// the owner, and opens the domain with what it holds as the log's tail
// (fs::LogTail): every entry the owner answered is then on the array or in
// that tail. An owner that restarts before any takeover fetches the tail
// from the partner (FetchMirror) before it opens the domain.
//
// Wire (little-endian, base/coding.h): frames of u32 length, u8 type,
// payload. Owner to partner: kHello (version, mode, reserve, domain, salt,
// session, first LSN, sender name), then kEntry (LSN, the owner's durable
// LSN on the array, the entry) and kRelease (durable LSN). Partner to owner:
// kAck (every entry up to the LSN is held), kRefuse (why, then close),
// kTail (a fetch's answer). Versioned by the hello; a partner refuses a
// version it does not know.
//
// Only the configured partner address may connect (the interconnect is a
// private link, as Corosync's is): a stream writes what a takeover replays,
// and a fetch reads file data.
//
// Thread-safety: every method may be called from any thread.
#pragma once

#include <atomic>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "base/mutex.h"
#include "base/status.h"
#include "base/uuid.h"
#include "fs/intent_log.h"

#include <sys/socket.h>

namespace nasgw::cluster {

// The most one partner holds of one domain, and the most an owner queues
// for the partner: past it the stream is given up (answers wait for the
// array again) and started anew. A partner holds at most
// kMirrorTotalBytesMax of all the domains it mirrors (a reserve split into
// several: fs/reserve.h, "Domains"), the same way.
constexpr uint64_t kMirrorBytesMax = 256ull << 20;
constexpr uint64_t kMirrorTotalBytesMax = 2 * kMirrorBytesMax;
constexpr uint32_t kMirrorConnectTimeoutMs = 1'000;
// A partner that takes nothing for this long (hung) loses the stream.
constexpr uint32_t kMirrorSendTimeoutMs = 2'000;

struct MirrorHello {
  Uuid reserve;
  uint32_t domain = 0;
  uint64_t salt = 0, session = 0, first_lsn = 0;
  std::string sender;  // node name, for status and logs
};

// The partner's side: a listening socket and what it holds per domain.
class MirrorServer {
 public:
  struct Held {
    Uuid reserve;
    uint32_t domain = 0;
    std::string sender;
    uint64_t session = 0;
    uint64_t entries = 0, bytes = 0;
    uint64_t first_lsn = 0, last_lsn = 0;  // 0: none
    uint64_t received = 0;                 // entries since the stream began
    bool connected = false, frozen = false;
  };
  // Listens on `listen` ("host:port"); only `peer`'s host may connect. It
  // serves at most kConnectionsMax connections (the partner has a stream
  // per domain, at most fs::kReserveDomainsMax, and a fetch at a time);
  // one that sends no hello within `hello_timeout_ms` is closed.
  static constexpr int kConnectionsMax = 32;
  static Result<std::unique_ptr<MirrorServer>> Start(const std::string& listen, const std::string& peer,
                                                     uint32_t hello_timeout_ms = 10'000);
  ~MirrorServer();
  MirrorServer(const MirrorServer&) = delete;
  MirrorServer& operator=(const MirrorServer&) = delete;

  struct Frozen {
    // A stream was taken since the last Drop: this node is the holder, and
    // `tail` (null: nothing held) is all the owner may have answered from
    // it. False: ask the partner (FetchMirror).
    bool streamed = false;
    std::shared_ptr<fs::LogTail> tail;
  };
  // Stops taking the domain's stream (closes it; refuses new ones) and
  // returns what is held. A node calls it before it owns the domain (a
  // takeover: before it fences the owner), and it stays so while the node
  // serves the domain: a fenced owner that does not know it yet must not
  // have anything answered here.
  Frozen Freeze(const Uuid& reserve, uint32_t domain);
  // Takes streams again (this node does not serve the domain).
  void Unfreeze(const Uuid& reserve, uint32_t domain);
  // Forgets what is held (it is on the array now); still refusing streams.
  void Drop(const Uuid& reserve, uint32_t domain);
  std::vector<Held> held() const;
  // Waits at most `ms` until `until` holds of held(); its last answer.
  bool WaitHeld(const std::function<bool(const std::vector<Held>&)>& until, uint32_t ms) const;
  uint16_t port() const { return port_; }

 private:
  struct Store;
  MirrorServer() = default;
  void AcceptLoop();
  void Serve(int fd);
  // Takes one stream's frames until it ends; false: refused.
  void Stream(int fd, const MirrorHello& hello);
  Store* StoreLocked(const Uuid& reserve, uint32_t domain) REQUIRES(mu_);
  std::vector<Held> HeldLocked() const REQUIRES(mu_);
  uint64_t HeldBytesLocked(const Uuid& reserve) const REQUIRES(mu_);  // of every domain of `reserve`

  int listen_fd_ = -1;
  uint16_t port_ = 0;
  uint32_t hello_timeout_ms_ = 10'000;
  sockaddr_storage peer_{};
  mutable Mutex mu_;
  mutable CondVar cv_;  // a store changed, a connection ended
  bool stop_ GUARDED_BY(mu_) = false;
  std::map<std::pair<Uuid, uint32_t>, std::unique_ptr<Store>> stores_ GUARDED_BY(mu_);
  std::vector<int> conns_ GUARDED_BY(mu_);  // open connections (shut down at stop)
  size_t serving_ GUARDED_BY(mu_) = 0;      // connection threads running
  std::thread accept_thread_;
};

// The owner's side: one stream to the partner for one opening of a domain,
// attached to its intent log as its mirror.
class MirrorStream final : public fs::LogMirror {
 public:
  struct Stats {
    uint64_t sent = 0, acked_lsn = 0, queued_bytes = 0;
    bool broken = false;
    std::string why;  // when broken
  };
  // Connects to the partner at `peer` (at most kMirrorConnectTimeoutMs).
  // Past `queue_bytes_max` queued for the partner the stream breaks (an
  // owner of several domains gives each its share of
  // kMirrorTotalBytesMax).
  static Result<std::shared_ptr<MirrorStream>> Connect(const std::string& peer,
                                                       uint64_t queue_bytes_max = kMirrorBytesMax);
  ~MirrorStream() override;

  // Entries queue from construction on; Start sends the hello first, then
  // them, and passes every LSN the partner confirms to `acks` (from the
  // stream's thread).
  void Start(const MirrorHello& hello, std::shared_ptr<fs::MirrorAcks> acks);
  void Mirror(uint64_t lsn, std::string_view entry) override;
  void Durable(uint64_t lsn) override;
  // Ends the stream (idempotent; waits for its threads).
  void Close();
  // Waits at most `ms` for the stream to break; true if it did.
  bool WaitBroken(uint32_t ms);
  Stats stats() const;

 private:
  MirrorStream(int fd, uint64_t queue_bytes_max) : fd_(fd), queue_bytes_max_(queue_bytes_max) {}
  void Break(const std::string& why) REQUIRES(mu_);
  void SendLoop();
  void ReceiveLoop();

  const int fd_;
  const uint64_t queue_bytes_max_;
  mutable Mutex mu_;
  CondVar cv_;
  std::deque<std::pair<uint64_t, std::string>> queue_ GUARDED_BY(mu_);
  uint64_t queued_bytes_ GUARDED_BY(mu_) = 0;
  uint64_t sent_ GUARDED_BY(mu_) = 0;
  uint64_t acked_lsn_ GUARDED_BY(mu_) = 0;
  bool started_ GUARDED_BY(mu_) = false;
  bool closed_ GUARDED_BY(mu_) = false;
  bool broken_ GUARDED_BY(mu_) = false;
  std::string why_ GUARDED_BY(mu_);
  std::string hello_ GUARDED_BY(mu_);     // the encoded hello frame
  std::shared_ptr<fs::MirrorAcks> acks_;  // set by Start, before the threads
  std::atomic<uint64_t> durable_{0};      // the array's log holds every entry up to it
  std::thread send_thread_, receive_thread_;
};

// Asks the partner at `peer` for what it holds of the domain (an owner
// that restarted, before it opens the domain). Null: nothing held.
// Unavailable when the partner cannot be reached.
Result<std::shared_ptr<fs::LogTail>> FetchMirror(const std::string& peer, const Uuid& reserve, uint32_t domain);

}  // namespace nasgw::cluster
