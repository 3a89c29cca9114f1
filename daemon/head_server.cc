#include "daemon/head_server.h"

#include <fcntl.h>
#include <poll.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <list>
#include <map>
#include <mutex>
#include <random>
#include <thread>
#include <vector>

#include "base/clock.h"
#include "base/log.h"
#include "proto/stream.h"

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

}  // namespace

struct Conn;
bool ActsAsItself(const Conn& c, const proto::Creds& creds);

namespace {

bool Inline(Op op) {
  return op == Op::kGetAttr || op == Op::kAccess || op == Op::kLookup;
}

}  // namespace

struct SessionEntry {
  std::shared_ptr<HeadSession> session;
  uint32_t connections = 0;
  uint64_t detached_ns = 0;  // when the last connection went
};

struct Conn {
  int fd = -1;
  bool trusted = false;  // may state any credentials
  uint32_t peer_uid = 0;
  std::vector<uint32_t> peer_gids;  // the peer's group and supplementary groups (SO_PEERGROUPS)
  int peer_pid = 0;
  std::mutex write_mu;
  std::mutex mu;
  std::condition_variable cv;
  uint32_t inflight = 0;  // GUARDED_BY(mu)
  std::shared_ptr<HeadSession> session;
  std::thread reader;
  std::atomic<bool> done{false};
  // The head is gone (it closed, or a reply could not be sent): requests it
  // queued are not executed. Its client has resent them (or failed them as
  // "may or may not have been done"); executing them late could undo the
  // resent ones.
  std::atomic<bool> dead{false};
};

// An untrusted peer's stated credentials must be its own: its uid, and only
// groups it is in.
bool ActsAsItself(const Conn& c, const proto::Creds& creds) {
  auto member = [&](uint32_t g) { return std::find(c.peer_gids.begin(), c.peer_gids.end(), g) != c.peer_gids.end(); };
  if (creds.uid != c.peer_uid || !member(creds.gid)) return false;
  return std::all_of(creds.groups.begin(), creds.groups.end(), member);
}

struct Task {
  std::shared_ptr<Conn> conn;
  proto::FrameHeader header;
  std::string payload;  // owns the bytes the request views
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
  std::thread acceptor;
  std::vector<std::thread> workers;

  std::mutex mu;
  std::condition_variable queue_cv;                   // workers wait for tasks
  std::condition_variable space_cv;                   // readers wait for queue space
  std::deque<Task> queue;                             // GUARDED_BY(mu)
  bool stopping = false;                              // GUARDED_BY(mu)
  std::list<std::shared_ptr<Conn>> conns;             // GUARDED_BY(mu)
  std::map<proto::SessionId, SessionEntry> sessions;  // GUARDED_BY(mu)
  bool shut = false;                                  // GUARDED_BY(mu)

  std::mutex count_mu;  // orders connection counts as the observer sees them
  std::atomic<uint32_t> n_conns{0};
  std::atomic<uint64_t> n_requests{0};
  std::atomic<uint64_t> n_protocol_errors{0};
  std::atomic<bool> accepting{true};
  std::atomic<bool> reading_stopped{false};  // Shutdown() stopped the readers: a drain, not a dead head

  size_t QueueMax() const { return static_cast<size_t>(opt.workers) * 4 + 64; }

  void AcceptLoop();
  void ReaderLoop(std::shared_ptr<Conn> c);
  void WorkerLoop();
  // Counts a connection in or out and tells the observer, in order.
  void CountConnection(int delta) {
    std::lock_guard<std::mutex> l(count_mu);
    const uint32_t n = delta > 0 ? ++n_conns : --n_conns;
    if (observer != nullptr) observer->OnConnections(n);
  }
  void Execute(Task& t);
  bool Hello(Conn& c, const proto::FrameHeader& h, std::string_view payload);
  void Send(Conn& c, const proto::FrameHeader& req, const HeadOutcome& out);
  void Finish(Conn& c);
  void ReapSessions(bool all);
};

void HeadServer::Impl::AcceptLoop() {
  while (accepting.load()) {
    pollfd p[2] = {{listen_fd, POLLIN, 0}, {stop_fd, POLLIN, 0}};
    int n = ::poll(p, 2, 1000);
    ReapSessions(false);
    {
      // Join readers that have finished.
      std::lock_guard<std::mutex> l(mu);
      for (auto it = conns.begin(); it != conns.end();) {
        if ((*it)->done.load()) {
          if ((*it)->reader.joinable()) (*it)->reader.join();
          it = conns.erase(it);
        } else {
          ++it;
        }
      }
    }
    if (n <= 0 || (p[1].revents & POLLIN)) continue;
    if (!(p[0].revents & POLLIN)) continue;
    int fd = ::accept4(listen_fd, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) continue;
    if (n_conns.load() >= opt.max_connections) {
      NASGW_LOG(kWarn, "head") << "connection refused: limit reached" << Kv("max", opt.max_connections);
      ::close(fd);
      continue;
    }
    // A head has hello_timeout_ms to say hello (a silent connection must not
    // hold a slot), and a reply may wait send_timeout_ms for a head that
    // does not read (it must not hold a worker): then the connection is cut.
    struct timeval rcv {};
    rcv.tv_sec = opt.hello_timeout_ms / 1000;
    rcv.tv_usec = (opt.hello_timeout_ms % 1000) * 1000;
    struct timeval snd {};
    snd.tv_sec = opt.send_timeout_ms / 1000;
    snd.tv_usec = (opt.send_timeout_ms % 1000) * 1000;
    ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &rcv, sizeof(rcv));
    ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &snd, sizeof(snd));
    auto c = std::make_shared<Conn>();
    c->fd = fd;
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
    }
    CountConnection(+1);
    std::lock_guard<std::mutex> l(mu);
    conns.push_back(c);
    c->reader = std::thread([this, c] { ReaderLoop(c); });
  }
}

bool HeadServer::Impl::Hello(Conn& c, const proto::FrameHeader& h, std::string_view payload) {
  auto r = proto::DecodeRequest(Op::kHello, payload);
  if (!r.ok()) return false;
  bool resumed = false;
  {
    std::lock_guard<std::mutex> l(mu);
    SessionEntry& e = sessions[r->session];
    // A session that said goodbye is over, even if its id comes back.
    resumed = e.session != nullptr && !e.session->ended.load();
    if (!resumed) {
      e.session = std::make_shared<HeadSession>();
      e.session->id = r->session;
    }
    e.connections++;
    c.session = e.session;
  }
  HeadOutcome out;
  out.reply.hello.node_name = opt.node_name;
  out.reply.hello.instance = instance;
  out.reply.hello.payload_max = proto::kPayloadMax;
  out.reply.hello.inflight_max = opt.max_inflight;
  out.reply.hello.resumed = resumed;
  NASGW_LOG(kDebug, "head") << "hello" << Kv("client", r->name2) << Kv("pid", c.peer_pid);
  Send(c, h, out);
  return true;
}

void HeadServer::Impl::ReaderLoop(std::shared_ptr<Conn> c) {
  std::string why;
  for (;;) {
    uint8_t hb[proto::kHeaderBytes];
    if (!ReadFull(c->fd, hb, sizeof(hb))) break;  // EOF, error, or shutdown
    auto h = proto::DecodeHeader(hb, false);
    if (!h.ok()) {
      why = h.status().ToString();
      break;
    }
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
      struct timeval none {};  // the hello deadline is over
      ::setsockopt(c->fd, SOL_SOCKET, SO_RCVTIMEO, &none, sizeof(none));
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
    if (!c->trusted && t.request.reject == 0 && !ActsAsItself(*c, t.request.creds)) {
      t.request.reject = EPERM;
      t.request.reject_why = "an unprivileged head may only act as itself (its uid and groups)";
    }
    // Attribute reads are answered here, on the reader: a hand-off to a
    // worker costs two thread wake-ups, several times the work itself (a
    // metadata point read, from cache). Anything that may write or move
    // data goes to the workers.
    if (Inline(t.request.op)) {
      {
        std::lock_guard<std::mutex> l(c->mu);
        c->inflight++;
      }
      Execute(t);
      continue;
    }
    // Backpressure: at most max_inflight per connection, and a bounded queue.
    {
      std::unique_lock<std::mutex> l(c->mu);
      c->cv.wait(l, [&] { return c->inflight < opt.max_inflight; });
      c->inflight++;
    }
    std::unique_lock<std::mutex> l(mu);
    space_cv.wait(l, [&] { return stopping || queue.size() < QueueMax(); });
    if (stopping) {
      Finish(*c);
      break;
    }
    queue.push_back(std::move(t));
    queue_cv.notify_one();
  }
  if (!reading_stopped.load()) c->dead = true;  // not nasgwd's own drain: the head is gone
  if (!why.empty()) {
    n_protocol_errors++;
    NASGW_LOG(kWarn, "head") << "closing connection: protocol error" << Kv("pid", c->peer_pid) << Kv("why", why);
  }
  // A dead head gets nothing more; in nasgwd's own drain the replies to
  // what it already sent still go out.
  if (c->dead.load()) ::shutdown(c->fd, SHUT_RDWR);
  {
    // Replies still being produced need the descriptor: wait for them, then
    // close it under both locks (Shutdown() shuts it down under c->mu).
    std::unique_lock<std::mutex> l(c->mu);
    c->cv.wait(l, [&] { return c->inflight == 0; });
    std::lock_guard<std::mutex> w(c->write_mu);
    ::close(c->fd);
    c->fd = -1;
  }
  if (c->session != nullptr) {
    std::lock_guard<std::mutex> l(mu);
    auto it = sessions.find(c->session->id);
    if (it != sessions.end() && --it->second.connections == 0) it->second.detached_ns = NowNs();
  }
  CountConnection(-1);
  c->done = true;
}

void HeadServer::Impl::Finish(Conn& c) {
  std::lock_guard<std::mutex> l(c.mu);
  c.inflight--;
  c.cv.notify_all();
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
  std::lock_guard<std::mutex> l(c.write_mu);
  if (c.fd >= 0 && !c.dead.load() && !WriteFull(c.fd, iov, n)) {
    c.dead = true;
    ::shutdown(c.fd, SHUT_RDWR);  // the reader sees it and closes
  }
}

void HeadServer::Impl::Execute(Task& t) {
  if (t.conn->dead.load()) {
    Finish(*t.conn);
    return;
  }
  HeadOutcome out = service->Execute(*t.conn->session, t.request);
  Send(*t.conn, t.header, out);
  const uint64_t ns = NowNs() - t.start_ns;
  n_requests++;
  // GOODBYE is the session's, not a volume's.
  if (observer != nullptr && t.header.op != Op::kGoodbye) {
    observer->OnRequest(t.header.op, out.volume, out.bytes, ns, out.err);
  }
  Finish(*t.conn);
}

void HeadServer::Impl::WorkerLoop() {
  for (;;) {
    Task t;
    {
      std::unique_lock<std::mutex> l(mu);
      queue_cv.wait(l, [&] { return stopping || !queue.empty(); });
      if (queue.empty()) return;  // stopping, and drained
      t = std::move(queue.front());
      queue.pop_front();
      space_cv.notify_one();
    }
    Execute(t);
  }
}

void HeadServer::Impl::ReapSessions(bool all) {
  std::vector<std::shared_ptr<HeadSession>> ended;
  {
    std::lock_guard<std::mutex> l(mu);
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
  for (uint32_t i = 0; i < options.workers; i++) impl->workers.emplace_back([p] { p->WorkerLoop(); });
  impl->acceptor = std::thread([p] { p->AcceptLoop(); });
  NASGW_LOG(kInfo, "head") << "listening" << Kv("socket", options.socket_path) << Kv("workers", options.workers);
  return std::unique_ptr<HeadServer>(new HeadServer(std::move(impl)));
}

HeadServer::HeadServer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

HeadServer::~HeadServer() {
  Shutdown(std::chrono::milliseconds(0));
}

void HeadServer::Shutdown(std::chrono::milliseconds drain) {
  Impl& m = *impl_;
  {
    std::lock_guard<std::mutex> l(m.mu);
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
  ::unlink(m.opt.socket_path.c_str());
  // Stop reading new requests; those queued or running finish and reply.
  std::list<std::shared_ptr<Conn>> conns;
  {
    std::lock_guard<std::mutex> l(m.mu);
    conns = m.conns;
  }
  // c->mu, not write_mu: a worker may be blocked writing to a head that
  // does not read (for up to send_timeout_ms).
  m.reading_stopped = true;
  for (auto& c : conns) {
    std::lock_guard<std::mutex> l(c->mu);
    if (c->fd >= 0) ::shutdown(c->fd, SHUT_RD);
  }
  const auto deadline = std::chrono::steady_clock::now() + drain;
  for (auto& c : conns) {
    std::unique_lock<std::mutex> l(c->mu);
    if (!c->cv.wait_until(l, deadline, [&] { return c->inflight == 0; })) break;
  }
  // Past the drain time, cut the connections: replies not yet sent are lost
  // and the clients resend (or fail with a retryable error).
  for (auto& c : conns) {
    std::lock_guard<std::mutex> l(c->mu);
    c->dead = true;
    if (c->fd >= 0) ::shutdown(c->fd, SHUT_RDWR);
  }
  {
    std::lock_guard<std::mutex> l(m.mu);
    m.stopping = true;
    m.queue_cv.notify_all();
    m.space_cv.notify_all();
  }
  for (auto& w : m.workers) w.join();
  for (auto& c : conns) {
    if (c->reader.joinable()) c->reader.join();
  }
  m.ReapSessions(true);
  ::close(m.stop_fd);
  NASGW_LOG(kInfo, "head") << "stopped" << Kv("requests", m.n_requests.load());
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
uint32_t HeadServer::queued() const {
  std::lock_guard<std::mutex> l(impl_->mu);
  return static_cast<uint32_t>(impl_->queue.size());
}

}  // namespace nasgw::daemon
