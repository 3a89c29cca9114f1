#include "daemon/head_server.h"

#include <fcntl.h>
#include <poll.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <deque>
#include <list>
#include <map>
#include <random>
#include <thread>
#include <vector>

#include "base/byte_budget.h"
#include "base/clock.h"
#include "base/coding.h"
#include "base/log.h"
#include "base/log_limit.h"
#include "base/mutex.h"
#include "base/sockaddr.h"
#include "proto/stream.h"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <sys/un.h>

namespace nasgw::daemon {

using proto::Op;
using proto::ReadFull;
using proto::WriteFull;

namespace {

uint64_t NowNs() {
  return MonotonicNanos();
}

// A connection refused at accept (a limit) is answered, not just closed:
// the acceptor reads its first header, answers it as a failed HELLO with the
// reason, and keeps the socket (discarding what the head sends) until the
// head closes it or kRefusedLingerMs passes, so that the head's own write of
// its HELLO cannot fail before it reads the answer. At most kRefusedMax wait
// so at once; past that a refused connection is closed without an answer.
constexpr uint32_t kRefusedLingerMs = 2'000;
constexpr size_t kRefusedMax = 64;

struct Refused {
  int fd = -1;
  uint64_t deadline_ns = 0;
  int err = 0;
  std::string why;
  uint8_t header[proto::kHeaderBytes] = {};
  size_t got = 0;
  bool answered = false;
};

// Reads into buf[*at, n). kTimedOut: the socket's receive timeout passed
// first (*at tells how far it got); kClosed: end of stream or an error.
enum class Got { kAll, kClosed, kTimedOut };
Got ReadSome(int fd, uint8_t* buf, size_t n, size_t* at) {
  while (*at < n) {
    const ssize_t k = ::recv(fd, buf + *at, n - *at, 0);
    if (k > 0) {
      *at += static_cast<size_t>(k);
    } else if (k < 0 && errno == EINTR) {
      continue;
    } else if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      return Got::kTimedOut;
    } else {
      return Got::kClosed;
    }
  }
  return Got::kAll;
}

void SetReceiveTimeout(int fd, uint32_t ms) {
  SetSocketTimeout(fd, SO_RCVTIMEO, ms);
}

// A failed HELLO's answer: the reason a connection is refused.
std::string RefusedHello(uint64_t id, int err, const std::string& why) {
  const std::string body = proto::EncodeError(why);
  uint8_t hb[proto::kHeaderBytes];
  proto::EncodeHeader({Op::kHello, id, static_cast<uint32_t>(body.size()), static_cast<uint32_t>(err)}, hb);
  return std::string(reinterpret_cast<const char*>(hb), sizeof(hb)) + body;
}

// Forwarding (docs/head-protocol.md, "Node-to-node forwarding"). A relay
// opens its connection to the owner with a preamble: u32 magic, u16
// version, u16 body length, then the body: u8 trusted, u32 uid, u32 pid,
// u16 group count, the groups (u32 each), str16 the relaying node's name.
// Then the head's own frames follow, both ways, unchanged.
constexpr uint32_t kForwardMagic = 0x3157464E;  // "NFW1"
constexpr uint16_t kForwardVersion = 1;
constexpr uint16_t kForwardBodyMax = 8192;  // 1025 groups and a name fit
constexpr uint32_t kRelayConnectTimeoutMs = 1'000;
constexpr uint32_t kRelayUserTimeoutMs = 60'000;
constexpr uint32_t kRelayRetryMs = 100;

struct Preamble {
  bool trusted = false;
  uint32_t uid = 0;
  int pid = 0;
  std::vector<uint32_t> gids;
  std::string node;
};

std::string EncodePreamble(const Preamble& p) {
  Encoder b;
  b.U8(p.trusted ? 1 : 0);
  b.U32(p.uid);
  b.U32(static_cast<uint32_t>(p.pid));
  b.U16(static_cast<uint16_t>(p.gids.size()));
  for (uint32_t g : p.gids) b.U32(g);
  b.Str16(p.node);
  std::string body = b.Release();
  Encoder e;
  e.U32(kForwardMagic);
  e.U16(kForwardVersion);
  e.U16(static_cast<uint16_t>(body.size()));
  return e.Release() + body;
}

// Reads a preamble (the socket's receive timeout bounds it); false with
// *why on anything else.
bool ReadPreamble(int fd, Preamble* p, std::string* why) {
  uint8_t h[8];
  if (!ReadFull(fd, h, sizeof(h))) {
    *why = "closed or timed out before its preamble";
    return false;
  }
  Decoder d(std::string_view(reinterpret_cast<const char*>(h), sizeof(h)));
  const uint32_t magic = d.U32();
  const uint16_t version = d.U16(), length = d.U16();
  if (magic != kForwardMagic || version != kForwardVersion || length > kForwardBodyMax) {
    *why = "not a forwarding preamble of version " + std::to_string(kForwardVersion);
    return false;
  }
  std::string body(length, '\0');
  if (!ReadFull(fd, body.data(), body.size())) {
    *why = "closed inside its preamble";
    return false;
  }
  Decoder b(body);
  p->trusted = b.U8() != 0;
  p->uid = b.U32();
  p->pid = static_cast<int>(b.U32());
  const uint16_t n = b.U16();
  for (uint16_t i = 0; i < n && b.ok(); i++) p->gids.push_back(b.U32());
  p->node = b.Str16();
  if (!b.done() || p->gids.empty()) {
    *why = "a malformed preamble";
    return false;
  }
  return true;
}

// What a reader waiting for the next frame found.
enum class Ready { kData, kTimedOut, kMoving };

// Reads and drops what the socket holds now (a bounded amount).
void Discard(int fd) {
  char sink[16384];
  for (int i = 0; i < 64; i++) {
    if (::recv(fd, sink, sizeof(sink), MSG_DONTWAIT) <= 0) return;
  }
}

// Reads and drops until the peer closes, at most `ms`.
void DrainUntilClosed(int fd, uint32_t ms) {
  const uint64_t deadline = NowNs() + uint64_t{ms} * 1'000'000;
  char sink[16384];
  for (;;) {
    const uint64_t now = NowNs();
    if (now >= deadline) return;
    pollfd p{fd, POLLIN, 0};
    const int n = ::poll(&p, 1, static_cast<int>((deadline - now) / 1'000'000 + 1));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0 || ::recv(fd, sink, sizeof(sink), MSG_DONTWAIT) <= 0) return;
  }
}

// Copies what `from` sends to `to` until either end closes or fails.
void Pump(int from, int to) {
  std::string buf(64u << 10, '\0');
  for (;;) {
    const ssize_t k = ::recv(from, buf.data(), buf.size(), 0);
    if (k < 0 && (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK)) continue;
    if (k <= 0) return;
    iovec iov{buf.data(), static_cast<size_t>(k)};
    if (!WriteFull(to, &iov, 1)) return;
  }
}

}  // namespace

struct Conn;
bool ActsAsItself(const Conn& c, const proto::Creds& creds);

namespace {

bool Inline(Op op) {
  return op == Op::kGetAttr || op == Op::kAccess || op == Op::kLookup;
}

// Two lanes of workers, so that data operations, which wait on the array
// (a read that misses the cache, a COMMIT's flush), never hold up namespace
// operations behind them: a saturated array link must not stall another
// client's MOUNT, READDIR or CREATE.
constexpr int kDataLane = 0, kNamespaceLane = 1, kLanes = 2;
int LaneOf(Op op) {
  return op == Op::kRead || op == Op::kWrite || op == Op::kFsync || op == Op::kFallocate || op == Op::kSeek
             ? kDataLane
             : kNamespaceLane;
}

}  // namespace

struct SessionEntry {
  std::shared_ptr<HeadSession> session;
  uint32_t connections = 0;
  uint64_t detached_ns = 0;  // when the last connection went
};

struct Conn {
  // Closed by the reader (its only writer, which reads it unlocked) under
  // both mu and write_mu; others read it under either. Not annotated: a
  // field has one GUARDED_BY.
  int fd = -1;
  bool trusted = false;  // may state any credentials
  uint32_t peer_uid = 0;
  std::vector<uint32_t> peer_gids;  // the peer's group and supplementary groups (SO_PEERGROUPS)
  int peer_pid = 0;
  bool forwarded = false;              // relayed here by the partner (its preamble gave the peer's credentials)
  Mutex write_mu;                      // held alone, while writing a reply (or with mu, to close fd)
  Mutex mu ACQUIRED_BEFORE(write_mu);  // after HeadServer::Impl::mu
  CondVar cv;
  uint32_t inflight GUARDED_BY(mu) = 0;
  std::shared_ptr<HeadSession> session;
  std::thread reader;
  std::atomic<bool> done{false};
  // The head is gone (it closed, or a reply could not be sent): requests it
  // queued are not executed. Its client has resent them (or failed them as
  // "may or may not have been done"); executing them late could undo the
  // resent ones.
  std::atomic<bool> dead{false};
  // The service moved (HeadServer::Reroute, or a request found the reserve
  // not online here): nothing more is executed; once the requests running
  // have replied, a notice tells the head that what it sent since was not
  // executed, and the connection closes. Its head connects again.
  std::atomic<bool> moving{false};
  // An eventfd StartMoving writes to wake the reader waiting for a frame
  // (-1: none could be made; then it shuts the socket's reading side).
  // Closed with fd, by the reader.
  int wake_fd = -1;
};

// An untrusted peer's stated credentials must be its own: its uid, and only
// groups it is in.
bool ActsAsItself(const Conn& c, const proto::Creds& creds) {
  auto member = [&](uint32_t g) { return std::find(c.peer_gids.begin(), c.peer_gids.end(), g) != c.peer_gids.end(); };
  if (creds.uid != c.peer_uid || !member(creds.gid)) return false;
  return std::all_of(creds.groups.begin(), creds.groups.end(), member);
}

// A head's connection relayed to the partner: two pumps, one each way.
struct Relay {
  Mutex mu;                      // held alone, to shut down or close the descriptors
  int down GUARDED_BY(mu) = -1;  // the head's Unix socket
  int up GUARDED_BY(mu) = -1;    // the partner's forward listener
  bool cut GUARDED_BY(mu) = false;
  Preamble peer;
  std::thread thread;
  std::atomic<bool> done{false};
  void Cut() {
    MutexLock l(mu);
    cut = true;
    if (down >= 0) ::shutdown(down, SHUT_RDWR);
    if (up >= 0) ::shutdown(up, SHUT_RDWR);
  }
};

struct Task {
  std::shared_ptr<Conn> conn;
  proto::FrameHeader header;
  std::string payload;  // owns the bytes the request views
  BudgetHold charge;    // its payload's request-buffer bytes (a large frame's)
  proto::Request request;
  uint64_t start_ns = 0;
};

struct HeadServer::Impl {
  HeadService* service = nullptr;
  HeadObserver* observer = nullptr;
  HeadServerOptions opt;
  proto::SessionId instance{};
  int listen_fd = -1;
  int stop_fd = -1;
  int forward_fd = -1;  // opt.forward_listen (-1: none)
  uint16_t forward_port = 0;
  sockaddr_storage forward_peer{};
  std::thread acceptor;
  std::vector<std::thread> workers;

  // Before a Conn's mu (taken under it only when a reader gives back its
  // slot because the server is stopping); no server lock is held while a
  // request executes.
  Mutex mu ACQUIRED_BEFORE(Conn::mu);
  CondVar queue_cv[kLanes];  // each lane's workers wait for its tasks
  CondVar space_cv;          // readers wait for queue space
  std::deque<Task> queue[kLanes] GUARDED_BY(mu);
  bool stopping GUARDED_BY(mu) = false;
  std::list<std::shared_ptr<Conn>> conns GUARDED_BY(mu);
  std::list<std::shared_ptr<Relay>> relays GUARDED_BY(mu);
  std::map<proto::SessionId, SessionEntry> sessions GUARDED_BY(mu);
  bool shut GUARDED_BY(mu) = false;

  Mutex count_mu;  // orders connection counts as the observer sees them; held alone
  std::atomic<uint32_t> n_conns{0};
  std::map<uint32_t, uint32_t> uid_conns GUARDED_BY(count_mu);  // open connections by peer uid
  std::atomic<uint64_t> n_requests{0};
  std::atomic<uint64_t> n_protocol_errors{0};
  std::atomic<uint64_t> n_refused{0};      // at max_connections
  std::atomic<uint64_t> n_refused_uid{0};  // at max_connections_per_uid
  std::atomic<uint64_t> n_idle_closed{0};
  std::atomic<uint32_t> n_relays{0}, n_forwarded_in{0};
  std::atomic<uint64_t> n_relayed_total{0}, n_relay_failures{0};
  // One log line per peer uid per interval (created in Start()).
  std::unique_ptr<LogLimiter> protocol_log, refused_log, refused_uid_log, forward_log;
  std::atomic<bool> accepting{true};
  std::unique_ptr<ByteBudget> request_budget;  // opt.request_bytes
  std::atomic<bool> reading_stopped{false};    // Shutdown() stopped the readers: a drain, not a dead head

  size_t QueueMax() const { return static_cast<size_t>(opt.workers) * 4 + 64; }  // per lane
  uint32_t Workers(int lane) const { return lane == kDataLane ? opt.workers : std::max<uint32_t>(2, opt.workers / 2); }

  void AcceptLoop();
  void ReaderLoop(const std::shared_ptr<Conn>& c);
  // The partner's relay connected: its preamble, the limits, then ReaderLoop.
  void AcceptForwarded();
  void ForwardedLoop(const std::shared_ptr<Conn>& c);
  void RelayLoop(const std::shared_ptr<Relay>& r);
  // Closes a connection whose reader never reached ReaderLoop.
  void Abandon(Conn& c);
  void LogForward(const std::string& key, const std::string& what);
  void WorkerLoop(int lane);
  // Counts a connection of peer `uid` in, unless that would pass a limit:
  // then 0 is returned and *err, *why say which (ENFILE: max_connections,
  // EMFILE: max_connections_per_uid). Tells the observer, in order.
  bool Admit(uint32_t uid, int* err, std::string* why) {
    MutexLock l(count_mu);
    uint32_t& mine = uid_conns[uid];
    if (n_conns.load() >= opt.max_connections) {
      *err = ENFILE;
      *why = "nasgwd has its limit of " + std::to_string(opt.max_connections) +
             " head connections open (head.max_connections)";
    } else if (mine >= opt.max_connections_per_uid) {
      *err = EMFILE;
      *why = "uid " + std::to_string(uid) + " has its limit of " + std::to_string(opt.max_connections_per_uid) +
             " head connections open (head.max_connections_per_uid)";
    } else {
      mine++;
      const uint32_t n = ++n_conns;
      if (observer != nullptr) observer->OnConnections(n);
      return true;
    }
    if (mine == 0) uid_conns.erase(uid);
    return false;
  }
  void Leave(uint32_t uid) {
    MutexLock l(count_mu);
    auto it = uid_conns.find(uid);
    if (it != uid_conns.end() && --it->second == 0) uid_conns.erase(it);
    const uint32_t n = --n_conns;
    if (observer != nullptr) observer->OnConnections(n);
  }
  // Answers a refused connection and discards what it sends; false when it
  // is done with (close it).
  bool ServeRefused(Refused& r);
  // Logs the limiters' reports that are due (all of them with `all`).
  void ReportLogs(bool all);
  void Execute(Task& t);
  bool Hello(Conn& c, const proto::FrameHeader& h, std::string_view payload);
  void Send(Conn& c, const proto::FrameHeader& req, const HeadOutcome& out);
  // The frame that answers no request (GOODBYE, id 0, err): what the head
  // sent that has no reply before it was not executed.
  void SendNotice(Conn& c, int err, const std::string& why);
  void StartMoving(Conn& c);
  // Waits (at most ms; 0: no limit) for the next frame's bytes or a move.
  Ready WaitReady(Conn& c, uint32_t ms);
  void Finish(Conn& c);
  void ReapSessions(bool all);
  // RECALL to a connection of the session `serial`; false if it has none.
  bool SendRecall(uint64_t serial, const proto::Recall& r);
};

bool HeadServer::Impl::SendRecall(uint64_t serial, const proto::Recall& r) {
  std::shared_ptr<Conn> to;
  {
    MutexLock l(mu);
    for (const auto& c : conns) {
      if (c->session != nullptr && c->session->serial == serial && !c->done.load() && !c->dead.load()) {
        to = c;
        break;
      }
    }
  }
  if (to == nullptr) return false;
  const std::string body = proto::EncodeRecall(r);
  uint8_t hb[proto::kHeaderBytes];
  proto::EncodeHeader({Op::kRecall, 0, static_cast<uint32_t>(body.size()), 0}, hb);
  iovec iov[2] = {{hb, sizeof(hb)}, {const_cast<char*>(body.data()), body.size()}};
  MutexLock l(to->write_mu);
  if (to->fd < 0 || to->dead.load()) return false;
  if (!WriteFull(to->fd, iov, 2)) {
    to->dead = true;
    ::shutdown(to->fd, SHUT_RDWR);
    return false;
  }
  return true;
}

void HeadServer::Impl::AcceptLoop() {
  std::vector<Refused> refused;
  while (accepting.load()) {
    // poll() skips the forward listener's -1 when there is none.
    std::vector<pollfd> p = {{listen_fd, POLLIN, 0}, {stop_fd, POLLIN, 0}, {forward_fd, POLLIN, 0}};
    int timeout_ms = 1000;  // reaping sessions and readers, log reports
    const uint64_t before = NowNs();
    for (const Refused& r : refused) {
      p.push_back({r.fd, POLLIN, 0});
      const uint64_t left_ms = r.deadline_ns > before ? (r.deadline_ns - before) / 1'000'000 + 1 : 0;
      timeout_ms = std::min<int>(timeout_ms, static_cast<int>(left_ms));
    }
    int n = ::poll(p.data(), p.size(), timeout_ms);
    ReapSessions(false);
    ReportLogs(false);
    {
      // Join readers and relays that have finished.
      MutexLock l(mu);
      for (auto it = conns.begin(); it != conns.end();) {
        if ((*it)->done.load()) {
          if ((*it)->reader.joinable()) (*it)->reader.join();
          it = conns.erase(it);
        } else {
          ++it;
        }
      }
      for (auto it = relays.begin(); it != relays.end();) {
        if ((*it)->done.load()) {
          if ((*it)->thread.joinable()) (*it)->thread.join();
          it = relays.erase(it);
        } else {
          ++it;
        }
      }
    }
    {
      const uint64_t now = NowNs();
      std::vector<Refused> keep;
      for (size_t i = 0; i < refused.size(); i++) {
        Refused& r = refused[i];
        bool open = now < r.deadline_ns;
        if (open && n > 0 && (p[3 + i].revents & (POLLIN | POLLHUP | POLLERR)) != 0) open = ServeRefused(r);
        if (open) {
          keep.push_back(std::move(r));
        } else {
          ::close(r.fd);
        }
      }
      refused.swap(keep);
    }
    if (n <= 0 || (p[1].revents & POLLIN)) continue;
    if (p[2].revents & POLLIN) AcceptForwarded();
    if (!(p[0].revents & POLLIN)) continue;
    int fd = ::accept4(listen_fd, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) continue;
    auto c = std::make_shared<Conn>();
    c->fd = fd;
    c->wake_fd = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    struct ucred cred {};
    socklen_t len = sizeof(cred);
    if (::getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) == 0) {
      c->peer_uid = cred.uid;
      c->peer_pid = cred.pid;
      c->trusted = cred.uid == 0 || cred.uid == ::geteuid();
      c->peer_gids.push_back(cred.gid);
      if (!c->trusted) {
        gid_t groups[1024];
        socklen_t glen = sizeof(groups);
        if (::getsockopt(fd, SOL_SOCKET, SO_PEERGROUPS, groups, &glen) == 0) {
          c->peer_gids.insert(c->peer_gids.end(), groups, groups + glen / sizeof(gid_t));
        }
      }
    } else {
      // No credentials, no trust: counted as nobody, may act as nobody.
      c->peer_uid = 65534;
      c->peer_gids.push_back(65534);
    }
    int err = 0;
    std::string why;
    if (!Admit(c->peer_uid, &err, &why)) {
      (err == ENFILE ? n_refused : n_refused_uid)++;
      LogLimiter& log = err == ENFILE ? *refused_log : *refused_uid_log;
      if (auto r = log.Add(std::to_string(c->peer_uid), NowNs(), why)) {
        NASGW_LOG(kWarn, "head") << "connection refused: limit reached"
                                 << Kv("limit", err == ENFILE ? "max_connections" : "max_connections_per_uid")
                                 << Kv("uid", r->key) << Kv("pid", c->peer_pid) << Kv("refused", r->count)
                                 << Kv("why", r->note);
      }
      const int flags = ::fcntl(fd, F_GETFL);
      if (refused.size() >= kRefusedMax || flags < 0 || ::fcntl(fd, F_SETFL, flags | O_NONBLOCK) != 0) {
        ::close(fd);
        continue;
      }
      Refused r;
      r.fd = fd;
      r.deadline_ns = NowNs() + uint64_t{kRefusedLingerMs} * 1'000'000;
      r.err = err;
      r.why = std::move(why);
      refused.push_back(std::move(r));
      continue;
    }
    // A head has hello_timeout_ms to say hello (a silent connection must not
    // hold a slot), and a reply may wait send_timeout_ms for a head that
    // does not read (it must not hold a worker): then the connection is cut.
    SetReceiveTimeout(fd, opt.hello_timeout_ms);
    SetSocketTimeout(fd, SO_SNDTIMEO, opt.send_timeout_ms);
    if (!opt.forward_peer.empty() && opt.forward_route && opt.forward_route()) {
      // The partner serves the reserve: relay this head there, with its
      // credentials as we read them. The owner's hello deadline and idle
      // timeout apply; a relay itself waits on either end.
      SetReceiveTimeout(fd, 0);
      if (c->wake_fd >= 0) ::close(c->wake_fd);  // a relay has no reader to wake
      auto r = std::make_shared<Relay>();
      {
        MutexLock rl(r->mu);
        r->down = fd;
      }
      r->peer.trusted = c->trusted;
      r->peer.uid = c->peer_uid;
      r->peer.pid = c->peer_pid;
      r->peer.gids = c->peer_gids;
      r->peer.node = opt.node_name;
      n_relays++;
      n_relayed_total++;
      MutexLock l(mu);
      relays.push_back(r);
      r->thread = std::thread([this, r] { RelayLoop(r); });
      continue;
    }
    MutexLock l(mu);
    conns.push_back(c);
    c->reader = std::thread([this, c] { ReaderLoop(c); });
  }
  for (const Refused& r : refused) ::close(r.fd);
}

bool HeadServer::Impl::ServeRefused(Refused& r) {
  if (r.answered) {
    // Discard what the head still sends until it closes (a bounded amount
    // per wake-up: the acceptor has other work).
    char sink[4096];
    for (int i = 0; i < 16; i++) {
      const ssize_t k = ::recv(r.fd, sink, sizeof(sink), 0);
      if (k == 0) return false;
      if (k < 0) return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR;
    }
    return true;
  }
  const ssize_t k = ::recv(r.fd, r.header + r.got, sizeof(r.header) - r.got, 0);
  if (k == 0) return false;
  if (k < 0) return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR;
  r.got += static_cast<size_t>(k);
  if (r.got < sizeof(r.header)) return true;
  auto h = proto::DecodeHeader(r.header, false);
  if (!h.ok() || h->op != Op::kHello) return false;  // not a HELLO: nothing to answer
  const std::string frame = RefusedHello(h->id, r.err, r.why);
  // A new socket's buffer takes the small answer whole.
  if (::send(r.fd, frame.data(), frame.size(), MSG_NOSIGNAL | MSG_DONTWAIT) != static_cast<ssize_t>(frame.size())) {
    return false;
  }
  ::shutdown(r.fd, SHUT_WR);
  r.answered = true;
  return true;
}

void HeadServer::Impl::LogForward(const std::string& key, const std::string& what) {
  if (auto r = forward_log->Add(key, NowNs(), what)) {
    NASGW_LOG(kWarn, "head") << "forwarding" << Kv("peer", r->key) << Kv("count", r->count) << Kv("what", r->note);
  }
}

void HeadServer::Impl::RelayLoop(const std::shared_ptr<Relay>& r) {
  // No send timeout toward the owner: a head that connected there directly
  // would wait out the owner's backpressure (a busy array) too.
  //
  // A partner that cannot be reached (dead, restarting; this node may be
  // about to take over) is tried again every kRelayRetryMs for at most
  // hello_timeout_ms, with the head's connection held, not closed: closing
  // it made the head reconnect dozens of times during a takeover, and its
  // calls ran out of resends (EIO). A Reroute (this node now serves) cuts
  // the wait, and the head connects again to be served here.
  auto up = DialTcp(opt.forward_peer, kRelayConnectTimeoutMs, 0, "head forwarding to the partner");
  const uint64_t give_up_ns = NowNs() + uint64_t{opt.hello_timeout_ms} * 1'000'000;
  while (!up.ok() && NowNs() < give_up_ns) {
    {
      MutexLock l(r->mu);
      if (r->cut) break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(kRelayRetryMs));  // a retry interval, not a wait for an event
    {
      MutexLock l(r->mu);
      if (r->cut) break;
    }
    up = DialTcp(opt.forward_peer, kRelayConnectTimeoutMs, 0, "head forwarding to the partner");
  }
  if (!up.ok()) {
    // The head connects again, with its backoff, and is routed anew.
    n_relay_failures++;
    LogForward(opt.forward_peer, "cannot relay a head to the partner: " + up.status().ToString());
  } else {
    // A partner whose machine died sends no RST: keepalives find it on an
    // idle connection, and bytes it does not acknowledge for a minute fail
    // the relay (a takeover cuts the relays before that anyway).
    const unsigned int user_timeout_ms = kRelayUserTimeoutMs;
    SetKeepalive(*up, /*idle_s=*/5, /*interval_s=*/2, /*probes=*/3);
    ::setsockopt(*up, IPPROTO_TCP, TCP_USER_TIMEOUT, &user_timeout_ms, sizeof(user_timeout_ms));
    int down = -1;
    {
      MutexLock l(r->mu);
      r->up = *up;
      down = r->down;
      if (r->cut) ::shutdown(*up, SHUT_RDWR);
    }
    const std::string pre = EncodePreamble(r->peer);
    iovec iov{const_cast<char*>(pre.data()), pre.size()};
    if (WriteFull(*up, &iov, 1)) {
      // The descriptors stay open until both pumps are done: a pump that
      // ends shuts both down, which ends the other.
      std::thread back([&] {
        Pump(*up, down);
        r->Cut();
      });
      Pump(down, *up);
      r->Cut();
      back.join();
    }
  }
  {
    MutexLock l(r->mu);
    if (r->up >= 0) ::close(r->up);
    ::close(r->down);
    r->up = r->down = -1;
  }
  n_relays--;
  Leave(r->peer.uid);
  r->done = true;
}

void HeadServer::Impl::AcceptForwarded() {
  sockaddr_storage from{};
  socklen_t fl = sizeof(from);
  const int fd = ::accept4(forward_fd, reinterpret_cast<sockaddr*>(&from), &fl, SOCK_CLOEXEC);
  if (fd < 0) return;
  if (!SameHost(from, forward_peer)) {
    // Only the partner may state other users' credentials over TCP.
    LogForward(HostText(from), "connection refused: not the partner ([cluster] forward_peer)");
    ::close(fd);
    return;
  }
  auto c = std::make_shared<Conn>();
  c->fd = fd;
  c->wake_fd = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  c->forwarded = true;
  SetReceiveTimeout(fd, opt.hello_timeout_ms);
  SetSocketTimeout(fd, SO_SNDTIMEO, opt.send_timeout_ms);
  const int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  MutexLock l(mu);
  conns.push_back(c);
  c->reader = std::thread([this, c] { ForwardedLoop(c); });
}

void HeadServer::Impl::Abandon(Conn& c) {
  {
    MutexLock l(c.mu);
    MutexLock w(c.write_mu);
    ::close(c.fd);
    c.fd = -1;
    if (c.wake_fd >= 0) ::close(c.wake_fd);
    c.wake_fd = -1;
  }
  c.done = true;
}

void HeadServer::Impl::ForwardedLoop(const std::shared_ptr<Conn>& c) {
  Preamble p;
  std::string why;
  if (!ReadPreamble(c->fd, &p, &why)) {
    LogForward(opt.forward_peer, "closing a relayed connection: " + why);
    Abandon(*c);
    return;
  }
  c->trusted = p.trusted;
  c->peer_uid = p.uid;
  c->peer_pid = p.pid;
  c->peer_gids = std::move(p.gids);
  int err = 0;
  if (!Admit(c->peer_uid, &err, &why)) {
    // As at accept: the head reads why in its HELLO's answer.
    (err == ENFILE ? n_refused : n_refused_uid)++;
    uint8_t hb[proto::kHeaderBytes];
    auto h = ReadFull(c->fd, hb, sizeof(hb)) ? proto::DecodeHeader(hb, false) : Status::IoError("no hello");
    if (h.ok() && h->op == Op::kHello) {
      const std::string frame = RefusedHello(h->id, err, why + " (relayed by " + p.node + ")");
      iovec iov{const_cast<char*>(frame.data()), frame.size()};
      WriteFull(c->fd, &iov, 1);
    }
    Abandon(*c);
    return;
  }
  n_forwarded_in++;
  ReaderLoop(c);
  n_forwarded_in--;
}

void HeadServer::Impl::ReportLogs(bool all) {
  const uint64_t now = NowNs();
  auto take = [&](LogLimiter& l) { return all ? l.Drain() : l.Due(now); };
  for (const auto& r : take(*protocol_log)) {
    NASGW_LOG(kWarn, "head") << "closing connection: protocol error" << Kv("uid", r.key) << Kv("count", r.count)
                             << Kv("why", r.note);
  }
  for (const auto& r : take(*refused_log)) {
    NASGW_LOG(kWarn, "head") << "connection refused: limit reached" << Kv("limit", "max_connections")
                             << Kv("uid", r.key) << Kv("refused", r.count) << Kv("why", r.note);
  }
  for (const auto& r : take(*forward_log)) {
    NASGW_LOG(kWarn, "head") << "forwarding" << Kv("peer", r.key) << Kv("count", r.count) << Kv("what", r.note);
  }
  for (const auto& r : take(*refused_uid_log)) {
    NASGW_LOG(kWarn, "head") << "connection refused: limit reached" << Kv("limit", "max_connections_per_uid")
                             << Kv("uid", r.key) << Kv("refused", r.count) << Kv("why", r.note);
  }
}

bool HeadServer::Impl::Hello(Conn& c, const proto::FrameHeader& h, std::string_view payload) {
  auto r = proto::DecodeRequest(Op::kHello, payload);
  if (!r.ok()) return false;
  bool resumed = false;
  {
    MutexLock l(mu);
    SessionEntry& e = sessions[r->session];
    // A session that said goodbye is over, even if its id comes back.
    resumed = e.session != nullptr && !e.session->ended.load();
    if (!resumed) {
      e.session = std::make_shared<HeadSession>();
      e.session->id = r->session;
      e.session->domain = r->name2;  // before any request of the session runs
    }
    if (e.connections++ == 0 && resumed) service->SetAttached(*e.session, true);  // the lock table's mutex: a leaf
    c.session = e.session;
  }
  HeadOutcome out;
  out.reply.hello.node_name = opt.node_name;
  out.reply.hello.instance = instance;
  out.reply.hello.payload_max = proto::kPayloadMax;
  out.reply.hello.inflight_max = opt.max_inflight;
  out.reply.hello.resumed = resumed;
  out.reply.hello.write_verifier = service->WriteVerifier();
  NASGW_LOG(kDebug, "head") << "hello" << Kv("client", r->name2) << Kv("pid", c.peer_pid);
  Send(c, h, out);
  return true;
}

void HeadServer::Impl::ReaderLoop(const std::shared_ptr<Conn>& c) {
  std::string why;
  bool idle = false;
  for (;;) {
    uint8_t hb[proto::kHeaderBytes];
    size_t header_at = 0;
    // Past the hello, the wait is idle_timeout_ms: a connection that sent
    // nothing for that long and waits for nothing is closed. One with
    // requests in flight waits for them. A move wakes it.
    const uint32_t wait_ms = c->session == nullptr ? opt.hello_timeout_ms : opt.idle_timeout_ms;
    Ready ready = WaitReady(*c, wait_ms);
    while (ready == Ready::kTimedOut && c->session != nullptr) {
      {
        MutexLock l(c->mu);
        idle = c->inflight == 0;
      }
      if (idle) break;
      ready = WaitReady(*c, wait_ms);
    }
    if (ready != Ready::kData) break;  // moving, idle, or no hello in time
    Got got_header = ReadSome(c->fd, hb, sizeof(hb), &header_at);
    while (got_header == Got::kTimedOut && c->session != nullptr) {
      {
        MutexLock l(c->mu);
        idle = c->inflight == 0;
      }
      if (idle) break;
      got_header = ReadSome(c->fd, hb, sizeof(hb), &header_at);
    }
    if (got_header != Got::kAll) break;  // EOF, error, shutdown, idle, or no hello in time
    auto h = proto::DecodeHeader(hb, false);
    if (!h.ok()) {
      why = h.status().ToString();
      break;
    }
    // Request buffers are a share of the memory budget: a large frame's
    // bytes (a WRITE's data) are taken before its payload is read, and a
    // reader that finds none free stops reading its socket (backpressure)
    // until requests finish. Readers are the only ones that wait for them,
    // and what they wait for is held by requests that finish without taking
    // more. Small frames are not charged (bounded by max_inflight per
    // connection), so that a GETATTR never queues for bytes behind writes;
    // nor are READ replies, which workers make one at a time each (bounded
    // by the workers).
    uint64_t taken = 0;
    if (h->length > limits::kRequestChargedFrameBytesMin) {
      taken = request_budget->Acquire(h->length);
      if (taken == ByteBudget::kStopped) break;  // nasgwd's drain
    }
    BudgetHold charge(request_budget.get(), taken);
    // Grown as the bytes arrive: a header alone must not make us allocate
    // a megabyte.
    std::string payload;
    bool got = true;
    while (got && payload.size() < h->length) {
      const size_t at = payload.size();
      payload.resize(std::min<size_t>(h->length, at + (64u << 10)));
      got = ReadFull(c->fd, payload.data() + at, payload.size() - at);
    }
    if (!got) {
      why = "connection closed inside a frame";
      break;
    }
    if (c->session == nullptr) {
      if (h->op != Op::kHello || !Hello(*c, *h, payload)) {
        why = "the first frame must be a valid hello";
        break;
      }
      SetReceiveTimeout(c->fd, opt.idle_timeout_ms);  // the hello deadline is over
      continue;
    }
    if (h->op == Op::kHello) {
      why = "a second hello";
      break;
    }
    Task t;
    t.conn = c;
    t.header = *h;
    t.payload = std::move(payload);
    t.start_ns = NowNs();
    auto r = proto::DecodeRequest(h->op, t.payload);
    if (!r.ok()) {
      why = r.status().ToString();
      break;
    }
    t.request = std::move(*r);
    t.charge = std::move(charge);
    if (!c->trusted && t.request.reject == 0 && !ActsAsItself(*c, t.request.creds)) {
      t.request.reject = EPERM;
      t.request.reject_why = "an unprivileged head may only act as itself (its uid and groups)";
    }
    if (!c->trusted && t.request.reject == 0 && h->op == proto::Op::kGetInode) {
      // A bare inode number skips the directories' search permission.
      t.request.reject = EPERM;
      t.request.reject_why = "only a privileged head may find an object by inode number";
    }
    // Attribute reads are answered here, on the reader: a hand-off to a
    // worker costs two thread wake-ups, several times the work itself (a
    // metadata point read, from cache). Anything that may write or move
    // data goes to the workers.
    if (Inline(t.request.op)) {
      {
        MutexLock l(c->mu);
        c->inflight++;
      }
      Execute(t);
      continue;
    }
    // Backpressure: at most max_inflight per connection, and a bounded queue.
    {
      MutexLock l(c->mu);
      while (c->inflight >= opt.max_inflight) c->cv.Wait(c->mu);
      c->inflight++;
    }
    MutexLock l(mu);
    const int lane = LaneOf(t.request.op);
    while (!stopping && queue[lane].size() >= QueueMax()) space_cv.Wait(mu);
    if (stopping) {
      Finish(*c);
      break;
    }
    queue[lane].push_back(std::move(t));
    queue_cv[lane].NotifyOne();
  }
  if (idle) {
    // Nothing was in flight and nothing was read since: whatever the head
    // sent after this point is never executed, and the notice (a reply to
    // no request: GOODBYE, id 0) lets its client send it again safely.
    n_idle_closed++;
    NASGW_LOG(kDebug, "head") << "closing idle connection" << Kv("pid", c->peer_pid)
                              << Kv("idle_timeout_ms", opt.idle_timeout_ms);
    SendNotice(*c, ETIMEDOUT, "idle for " + std::to_string(opt.idle_timeout_ms) + " ms (head.idle_timeout_ms)");
  } else if (c->moving.load() && !reading_stopped.load()) {
    // The replies of what is running go first; what is queued is skipped.
    // What the head still sends meanwhile is read and dropped (never
    // executed), so that its writes do not fail before it reads the notice.
    for (;;) {
      {
        MutexLock l(c->mu);
        if (c->cv.WaitFor(c->mu, std::chrono::milliseconds(20), [&]() REQUIRES(c->mu) { return c->inflight == 0; })) {
          break;
        }
      }
      Discard(c->fd);
    }
    SendNotice(*c, EHOSTUNREACH, "this node does not serve the reserve now; connect again");
    // Its client closes on the notice; until then (at most a second) what
    // it sent is dropped.
    ::shutdown(c->fd, SHUT_WR);
    DrainUntilClosed(c->fd, 1000);
  }
  if (!reading_stopped.load()) c->dead = true;  // not nasgwd's own drain: the head is gone
  if (!why.empty()) {
    n_protocol_errors++;
    if (auto r = protocol_log->Add(std::to_string(c->peer_uid), NowNs(),
                                   why + " (pid " + std::to_string(c->peer_pid) + ")")) {
      NASGW_LOG(kWarn, "head") << "closing connection: protocol error" << Kv("uid", r->key) << Kv("count", r->count)
                               << Kv("why", r->note);
    }
  }
  // A dead head gets nothing more; in nasgwd's own drain the replies to
  // what it already sent still go out.
  if (c->dead.load()) ::shutdown(c->fd, SHUT_RDWR);
  {
    // Replies still being produced need the descriptor: wait for them, then
    // close it under both locks (Shutdown() shuts it down under c->mu).
    MutexLock l(c->mu);
    while (c->inflight != 0) c->cv.Wait(c->mu);
    MutexLock w(c->write_mu);
    ::close(c->fd);
    c->fd = -1;
    if (c->wake_fd >= 0) ::close(c->wake_fd);
    c->wake_fd = -1;
  }
  if (c->session != nullptr) {
    MutexLock l(mu);
    auto it = sessions.find(c->session->id);
    if (it != sessions.end() && --it->second.connections == 0) {
      it->second.detached_ns = NowNs();
      // (An ended session's marks went with its locks: nothing to note.)
      if (it->second.session != nullptr && !it->second.session->ended.load()) {
        service->SetAttached(*it->second.session, false);
      }
    }
  }
  Leave(c->peer_uid);
  c->done = true;
}

void HeadServer::Impl::Finish(Conn& c) {
  MutexLock l(c.mu);
  c.inflight--;
  c.cv.NotifyAll();
}

void HeadServer::Impl::Send(Conn& c, const proto::FrameHeader& req, const HeadOutcome& out) {
  proto::FrameHeader h;
  h.op = req.op;
  h.id = req.id;
  h.status = static_cast<uint32_t>(out.err);
  std::string body;
  uint8_t prefix[proto::kReadPrefixBytes];
  struct iovec iov[3];
  int n = 1;
  uint8_t hb[proto::kHeaderBytes];
  if (out.err == EAGAIN && req.op == Op::kLock) {
    body = proto::EncodeLockDenied(out.why, out.reply.lock);  // the conflicting lock
  } else if (out.err != 0) {
    body = proto::EncodeError(out.why);
  } else if (req.op == Op::kRead) {
    proto::EncodeReadPrefix(out.reply.eof, static_cast<uint32_t>(out.data.size()), prefix);
  } else {
    body = proto::EncodeReply(req.op, out.reply);
    if (body.size() > proto::kPayloadMax) {  // e.g. a file with a huge list of xattrs
      h.status = E2BIG;
      body =
          proto::EncodeError("the reply would exceed the protocol's " + std::to_string(proto::kPayloadMax) + " bytes");
    }
  }
  if (out.err == 0 && req.op == Op::kRead) {
    h.length = static_cast<uint32_t>(proto::kReadPrefixBytes + out.data.size());
    iov[n++] = {prefix, proto::kReadPrefixBytes};
    if (!out.data.empty()) iov[n++] = {const_cast<uint8_t*>(out.data.data()), out.data.size()};
  } else {
    h.length = static_cast<uint32_t>(body.size());
    if (!body.empty()) iov[n++] = {body.data(), body.size()};
  }
  proto::EncodeHeader(h, hb);
  iov[0] = {hb, sizeof(hb)};
  MutexLock l(c.write_mu);
  if (c.fd >= 0 && !c.dead.load() && !WriteFull(c.fd, iov, n)) {
    c.dead = true;
    ::shutdown(c.fd, SHUT_RDWR);  // the reader sees it and closes
  }
}

void HeadServer::Impl::SendNotice(Conn& c, int err, const std::string& why) {
  HeadOutcome notice;
  notice.err = err;
  notice.why = why + ": closed by nasgwd; nothing sent after the replies before this notice was executed";
  proto::FrameHeader h;
  h.op = Op::kGoodbye;
  h.id = 0;
  Send(c, h, notice);
}

void HeadServer::Impl::StartMoving(Conn& c) {
  c.moving = true;
  // Its reader stops reading frames, waits for the replies, sends the notice.
  MutexLock l(c.mu);
  if (c.wake_fd >= 0) {
    const uint64_t one = 1;
    if (::write(c.wake_fd, &one, sizeof(one)) < 0) {
      // an eventfd's counter does not fill up with 1s; the flag is set anyway
    }
  } else if (c.fd >= 0) {
    ::shutdown(c.fd, SHUT_RD);
  }
}

Ready HeadServer::Impl::WaitReady(Conn& c, uint32_t ms) {
  pollfd p[2] = {{c.fd, POLLIN, 0}, {c.wake_fd, POLLIN, 0}};  // poll skips a wake_fd of -1
  for (;;) {
    if (c.moving.load()) return Ready::kMoving;
    const int n = ::poll(p, 2, ms == 0 ? -1 : static_cast<int>(ms));
    if (n < 0 && errno == EINTR) continue;
    if (c.moving.load()) return Ready::kMoving;
    return n == 0 ? Ready::kTimedOut : Ready::kData;  // data, a hang-up or an error: recv tells which
  }
}

void HeadServer::Impl::Execute(Task& t) {
  if (t.conn->dead.load() || t.conn->moving.load()) {
    Finish(*t.conn);  // moving: not executed, and not answered; its head sends it again
    return;
  }
  HeadOutcome out = service->Execute(*t.conn->session, t.request);
  if (out.unserved && !opt.forward_peer.empty() && opt.forward_route && (out.resend || opt.forward_route())) {
    // In a pair the service is on the partner, or on its way to this
    // node: the head resends this to wherever its next connection goes.
    StartMoving(*t.conn);
    Finish(*t.conn);
    return;
  }
  Send(*t.conn, t.header, out);
  const uint64_t ns = NowNs() - t.start_ns;
  n_requests++;
  // GOODBYE is the session's, not a volume's.
  if (observer != nullptr && t.header.op != Op::kGoodbye) {
    observer->OnRequest(t.header.op, out.volume, out.bytes, ns, out.err);
  }
  Finish(*t.conn);
}

void HeadServer::Impl::WorkerLoop(int lane) {
  for (;;) {
    Task t;
    {
      MutexLock l(mu);
      while (!stopping && queue[lane].empty()) queue_cv[lane].Wait(mu);
      if (queue[lane].empty()) return;  // stopping, and drained
      t = std::move(queue[lane].front());
      queue[lane].pop_front();
      space_cv.NotifyAll();  // readers wait for either lane
    }
    Execute(t);
  }
}

void HeadServer::Impl::ReapSessions(bool all) {
  std::vector<std::shared_ptr<HeadSession>> ended;
  {
    MutexLock l(mu);
    const uint64_t now = NowNs();
    for (auto it = sessions.begin(); it != sessions.end();) {
      const bool idle =
          it->second.connections == 0 && now - it->second.detached_ns >= uint64_t{opt.session_grace_ms} * 1'000'000;
      if (all || idle) {
        ended.push_back(it->second.session);
        it = sessions.erase(it);
      } else {
        ++it;
      }
    }
  }
  for (auto& s : ended) {
    service->EndSession(*s);
  }
}

Result<std::unique_ptr<HeadServer>> HeadServer::Start(HeadService* service, const HeadServerOptions& options,
                                                      HeadObserver* observer) {
  auto impl = std::make_unique<Impl>();
  impl->service = service;
  impl->observer = observer;
  impl->opt = options;
  if (options.request_bytes < proto::kPayloadMax) {
    return Status::InvalidArgument("head request_bytes (" + std::to_string(options.request_bytes) +
                                   ") must hold at least one largest frame (" + std::to_string(proto::kPayloadMax) +
                                   ")");
  }
  impl->request_budget = std::make_unique<ByteBudget>(options.request_bytes);
  const uint64_t log_interval_ns = uint64_t{options.log_interval_ms} * 1'000'000;
  impl->protocol_log = std::make_unique<LogLimiter>(log_interval_ns);
  impl->refused_log = std::make_unique<LogLimiter>(log_interval_ns);
  impl->refused_uid_log = std::make_unique<LogLimiter>(log_interval_ns);
  impl->forward_log = std::make_unique<LogLimiter>(log_interval_ns);
  if (options.forward_listen.empty() != options.forward_peer.empty()) {
    return Status::InvalidArgument("head forwarding needs both forward_listen and forward_peer, or neither");
  }
  if (!options.forward_listen.empty()) {
    socklen_t plen = 0;
    auto peer = ParseSockAddr(options.forward_peer, &plen, "[cluster] forward_peer");
    if (!peer.ok()) return peer.status();
    impl->forward_peer = *peer;
    auto fd = ListenTcp(options.forward_listen, 64, "[cluster] forward_listen", &impl->forward_port);
    if (!fd.ok()) return fd.status();
    impl->forward_fd = *fd;
  }
  std::random_device rd;
  for (auto& b : impl->instance) b = static_cast<uint8_t>(rd());

  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (options.socket_path.size() >= sizeof(addr.sun_path)) {
    return Status::InvalidArgument("head socket path longer than " + std::to_string(sizeof(addr.sun_path) - 1) +
                                   " bytes: " + options.socket_path);
  }
  // Bind inside a fresh 0700 directory beside the final path, set the
  // configured owner and mode, then rename into place: the socket is never
  // more open than configured, and no process-wide umask is touched.
  const std::string& final_path = options.socket_path;
  const size_t slash = final_path.rfind('/');
  std::string tmpl = (slash == std::string::npos ? std::string(".") : final_path.substr(0, slash)) + "/.hXXXXXX";
  if (tmpl.size() + 2 >= sizeof(addr.sun_path) || ::mkdtemp(tmpl.data()) == nullptr) {
    return Status::IoError("cannot make a directory beside " + final_path + " to bind in: " +
                           (tmpl.size() + 2 >= sizeof(addr.sun_path) ? "path too long" : std::strerror(errno)));
  }
  const std::string bind_path = tmpl + "/s";
  std::memcpy(addr.sun_path, bind_path.c_str(), bind_path.size());
  int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    ::rmdir(tmpl.c_str());
    return Status::IoError(std::string("socket: ") + std::strerror(errno));
  }
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
      (options.socket_gid >= 0 &&
       ::chown(bind_path.c_str(), static_cast<uid_t>(-1), static_cast<gid_t>(options.socket_gid)) != 0) ||
      ::chmod(bind_path.c_str(), options.socket_mode) != 0 || ::listen(fd, 128) != 0 ||
      ::rename(bind_path.c_str(), final_path.c_str()) != 0) {  // replaces a stale socket of an earlier run
    int e = errno;
    ::close(fd);
    ::unlink(bind_path.c_str());
    ::rmdir(tmpl.c_str());
    return Status::IoError("cannot set up head socket " + final_path + ": " + std::strerror(e));
  }
  ::rmdir(tmpl.c_str());
  impl->listen_fd = fd;
  impl->stop_fd = ::eventfd(0, EFD_CLOEXEC);
  Impl* p = impl.get();
  service->SetRecaller([p](uint64_t serial, const proto::Recall& r) { return p->SendRecall(serial, r); });
  for (int lane = 0; lane < kLanes; lane++) {
    for (uint32_t i = 0; i < impl->Workers(lane); i++) impl->workers.emplace_back([p, lane] { p->WorkerLoop(lane); });
  }
  impl->acceptor = std::thread([p] { p->AcceptLoop(); });
  NASGW_LOG(kInfo, "head") << "listening" << Kv("socket", options.socket_path) << Kv("workers", options.workers)
                           << Kv("forward_listen", options.forward_listen) << Kv("forward_peer", options.forward_peer);
  return std::unique_ptr<HeadServer>(new HeadServer(std::move(impl)));
}

HeadServer::HeadServer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

HeadServer::~HeadServer() {
  Shutdown(std::chrono::milliseconds(0));
}

void HeadServer::Shutdown(std::chrono::milliseconds drain) {
  Impl& m = *impl_;
  {
    MutexLock l(m.mu);
    if (m.shut) return;
    m.shut = true;
  }
  m.accepting = false;
  uint64_t one = 1;
  if (::write(m.stop_fd, &one, sizeof(one)) < 0) {
    // the acceptor still wakes within its poll timeout
  }
  if (m.acceptor.joinable()) m.acceptor.join();
  ::close(m.listen_fd);
  if (m.forward_fd >= 0) ::close(m.forward_fd);
  std::list<std::shared_ptr<Relay>> relays;
  {
    MutexLock l(m.mu);
    relays.swap(m.relays);
  }
  for (auto& r : relays) r->Cut();
  for (auto& r : relays) {
    if (r->thread.joinable()) r->thread.join();
  }
  ::unlink(m.opt.socket_path.c_str());
  // Stop reading new requests; those queued or running finish and reply.
  std::list<std::shared_ptr<Conn>> conns;
  {
    MutexLock l(m.mu);
    conns = m.conns;
  }
  // c->mu, not write_mu: a worker may be blocked writing to a head that
  // does not read (for up to send_timeout_ms).
  m.reading_stopped = true;
  m.request_budget->Stop();  // a reader waiting for request buffers stops too
  for (auto& c : conns) {
    MutexLock l(c->mu);
    if (c->fd >= 0) ::shutdown(c->fd, SHUT_RD);
  }
  const auto deadline = std::chrono::steady_clock::now() + drain;
  for (auto& c : conns) {
    MutexLock l(c->mu);
    while (c->inflight != 0 && c->cv.WaitUntil(c->mu, deadline)) {
    }
    if (c->inflight != 0) break;
  }
  // Past the drain time, cut the connections: replies not yet sent are lost
  // and the clients resend (or fail with a retryable error).
  for (auto& c : conns) {
    MutexLock l(c->mu);
    c->dead = true;
    if (c->fd >= 0) ::shutdown(c->fd, SHUT_RDWR);
  }
  {
    MutexLock l(m.mu);
    m.stopping = true;
    for (auto& cv : m.queue_cv) cv.NotifyAll();
    m.space_cv.NotifyAll();
  }
  for (auto& w : m.workers) w.join();
  m.service->SetRecaller(nullptr);  // no request runs now
  for (auto& c : conns) {
    if (c->reader.joinable()) c->reader.join();
  }
  m.ReapSessions(true);
  m.ReportLogs(true);  // what the limiters still hold: every count gets a line
  ::close(m.stop_fd);
  NASGW_LOG(kInfo, "head") << "stopped" << Kv("requests", m.n_requests.load());
}

void HeadServer::Reroute(const std::string& why) {
  Impl& m = *impl_;
  std::list<std::shared_ptr<Conn>> conns;
  std::list<std::shared_ptr<Relay>> relays;
  {
    MutexLock l(m.mu);
    if (m.shut) return;
    conns = m.conns;
    relays = m.relays;
  }
  NASGW_LOG(kInfo, "head") << "closing head connections to route them again" << Kv("why", why)
                           << Kv("served", conns.size()) << Kv("relayed", relays.size());
  for (auto& c : conns) m.StartMoving(*c);
  for (auto& r : relays) r->Cut();
}

void HeadServer::CutForwarded(const std::string& why) {
  Impl& m = *impl_;
  std::list<std::shared_ptr<Conn>> conns;
  {
    MutexLock l(m.mu);
    if (m.shut) return;
    for (const auto& c : m.conns) {
      if (c->forwarded) conns.push_back(c);
    }
  }
  if (conns.empty()) return;
  NASGW_LOG(kWarn, "head") << "cutting the connections the partner relayed here" << Kv("why", why)
                           << Kv("connections", conns.size());
  for (auto& c : conns) {
    MutexLock l(c->mu);  // the reader closes fd under it
    if (c->fd >= 0) ::shutdown(c->fd, SHUT_RDWR);
  }
}

uint32_t HeadServer::relays() const {
  return impl_->n_relays.load();
}
uint64_t HeadServer::relayed_total() const {
  return impl_->n_relayed_total.load();
}
uint64_t HeadServer::relay_failures() const {
  return impl_->n_relay_failures.load();
}
uint16_t HeadServer::forward_port() const {
  return impl_->forward_port;
}
uint32_t HeadServer::forwarded_in() const {
  return impl_->n_forwarded_in.load();
}

uint32_t HeadServer::connections() const {
  return impl_->n_conns.load();
}
uint64_t HeadServer::requests() const {
  return impl_->n_requests.load();
}
uint64_t HeadServer::protocol_errors() const {
  return impl_->n_protocol_errors.load();
}
uint64_t HeadServer::refused_connections() const {
  return impl_->n_refused.load();
}
uint64_t HeadServer::refused_connections_uid() const {
  return impl_->n_refused_uid.load();
}
uint64_t HeadServer::idle_closed() const {
  return impl_->n_idle_closed.load();
}
uint64_t HeadServer::request_bytes() const {
  return impl_->request_budget->used();
}
uint64_t HeadServer::request_bytes_capacity() const {
  return impl_->request_budget->capacity();
}
uint64_t HeadServer::request_waits() const {
  return impl_->request_budget->waits();
}
uint32_t HeadServer::queued() const {
  MutexLock l(impl_->mu);
  return static_cast<uint32_t>(impl_->queue[kDataLane].size() + impl_->queue[kNamespaceLane].size());
}

}  // namespace nasgw::daemon
