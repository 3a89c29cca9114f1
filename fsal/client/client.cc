// The client library: a pool of head-protocol connections with pipelining,
// reconnection and re-opening, under the C API of nasgw_client.h.
#include <poll.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "base/clock.h"
#include "base/log.h"
#include "base/mutex.h"
#include "fsal/client/nasgw_client.h"
#include "proto/head.h"
#include "proto/lock_range.h"
#include "proto/stream.h"

#include <sys/socket.h>
#include <sys/time.h>
#include <sys/uio.h>
#include <sys/un.h>

namespace nasgw::client {
namespace {

using proto::Op;
using proto::ReadFull;
using proto::WriteFull;

thread_local std::string t_message;
// Set on the connections' reader threads: they must never block writing to
// nasgwd (nasgwd may be blocked writing replies they are to read), so what
// they (re)submit goes to the client's sender thread.
thread_local bool t_reader = false;
// The client whose own thread (a connection's reader, or the sender) this
// is: async callbacks run there, and a synchronous call made from one on
// the same client could wait for itself (Client::Sync).
thread_local const void* t_library_of = nullptr;

constexpr uint32_t kResendMax = 8;
// Write verifiers remembered (one per opening of the domain this client saw).
constexpr size_t kVerifiersKept = 1024;
// Files held (NASGW_HOLD_UNSTABLE) one by one at most, by default: about
// 64 MiB of table.
constexpr uint32_t kHeldFilesMax = 1u << 20;
constexpr int kHandshakeTimeoutS = 10;
// How long nasgw_client_close waits for nasgwd to end the session.
constexpr int kGoodbyeTimeoutMs = 2000;

struct Call {
  Op op = Op::kHello;
  std::string payload;          // the encoded request (WRITE: without its bytes)
  const void* wdata = nullptr;  // WRITE bytes, the caller's
  uint32_t wlen = 0;
  uint8_t* rbuf = nullptr;  // READ destination, the caller's
  uint32_t rlen = 0;
  uint64_t deadline_ns = 0;  // for a call waiting for a connection
  uint32_t resends = 0;      // times it was sent again after a broken connection
  // EINPROGRESS (a lease being recalled) with recall_wait_ms: when it gives
  // up, and how many times it was sent again.
  uint64_t recall_deadline_ns = 0;
  uint32_t recall_tries = 0;
  int invalid = 0;  // an errno when the request fails the codec's own checks
  std::string invalid_why;
  // WRITE with NASGW_HOLD_UNSTABLE: held until an FSYNC covers it. FSYNC:
  // the hold sequence when it was made (it covers the holds up to there).
  bool hold = false;
  uint64_t hold_seq = 0;
  std::pair<uint32_t, uint64_t> file{};  // WRITE, FSYNC: (volume, inode)
  // Result.
  int err = 0;
  std::string why;
  proto::Reply reply;
  uint32_t nread = 0;
  std::function<void(Call&)> done;

  void Complete(int e, std::string w) {
    err = e;
    why = std::move(w);
    auto d = std::move(done);
    d(*this);
  }
};
using CallPtr = std::shared_ptr<Call>;

bool SendFrame(int fd, Op op, uint64_t id, const std::string& payload, const void* data, uint32_t dlen) {
  uint8_t hb[proto::kHeaderBytes];
  proto::EncodeHeader({op, id, static_cast<uint32_t>(payload.size() + dlen), 0}, hb);
  struct iovec iov[3] = {
      {hb, sizeof(hb)}, {const_cast<char*>(payload.data()), payload.size()}, {const_cast<void*>(data), dlen}};
  return WriteFull(fd, iov, dlen > 0 ? 3 : 2);
}

}  // namespace

class Client;

// A file this client holds open: one id per open, as nasgwd knows them.
struct OpenEntry {
  std::vector<uint64_t> ids;
  proto::Handle handle;  // as nasgwd issued it (MAC included): re-opens send it back
  proto::Creds creds;
};

// The byte-range locks one owner holds on one file, as nasgwd granted them
// (the same arithmetic as nasgwd's table: proto/lock_range.h).
struct OwnerLocks {
  std::vector<proto::LockRange> ranges;
  proto::Creds creds;  // of the owner's latest lock call: taking the locks again uses them
  bool lost = false;   // they could not be taken again on a nasgwd that lost the session
};
struct LockedFile {
  proto::Handle handle;                   // as nasgwd issued it: re-locks send it back
  std::map<uint64_t, OwnerLocks> owners;  // by owner; never empty ranges unless lost
};

// What this client holds per (file, owner) that nasgwd forgets with the
// session and the client sets again after a restart: share reservations
// (nasgw_share) and leases (nasgw_lease), as nasgwd granted them.
struct HeldShare {
  proto::Creds creds;
  uint32_t access = 0;
  uint32_t deny = 0;
  static constexpr Op kOp = Op::kShare;
  void Fill(proto::Request& r) const {
    r.share_access = access;
    r.share_deny = deny;
  }
};
struct HeldLease {
  proto::Creds creds;
  uint32_t type = 0;
  static constexpr Op kOp = Op::kLease;
  void Fill(proto::Request& r) const { r.lease = type; }
};
template <typename T>
struct HeldOnFile {
  proto::Handle handle;
  std::map<uint64_t, T> owners;  // never empty
};
template <typename T>
using HeldFiles = std::map<std::pair<uint32_t, uint64_t>, HeldOnFile<T>>;

// Errors with which nasgwd refuses a lock for good (it stays lost); any
// other error while re-locking is nasgwd not being ready, and the next
// connection tries again.
bool LockRefused(int err) {
  return err == EAGAIN || err == ENOLCK || err == EACCES || err == EPERM || err == EINVAL;
}

void Lost(Client* client, const CallPtr& call);

class Conn {
 public:
  explicit Conn(Client* c) : client_(c) {}
  void Start() {
    thread_ = std::thread([this] { Loop(); });
  }
  void Join() {
    if (thread_.joinable()) thread_.join();
  }
  void Kick();                     // shut the socket down (close)
  bool Send(const CallPtr& call);  // false: not up

 private:
  void Loop();
  bool Connect();
  using Exchange = std::function<bool(Op, const std::string&, uint64_t, proto::Reply*, int*)>;
  // Takes the client's byte-range locks again on a nasgwd that lost the
  // session; false when the connection must be dropped (and tried again).
  // REQUIRES(client_->open_mu), annotated at the definition (Client is defined below).
  bool Relock(const Exchange& exchange, uint64_t& id, const std::string& error_payload);
  template <typename T>
  bool Retake(HeldFiles<T>& files, const char* what, const Exchange& exchange, uint64_t& id,
              const std::string& error_payload);
  bool ReadReplies();
  void Fail();
  // Notes why this connection could not be made (errno, message), for the
  // client's errors; 0 clears it.
  void NoteConnectError(int err, const std::string& why);
  void Forget(int fd);  // closes a socket whose handshake failed

  Client* client_;
  std::thread thread_;
  Mutex mu_ ACQUIRED_BEFORE(wmu_);          // released before Client::mu is taken
  int fd_ GUARDED_BY(mu_) = -1;             // for changes; writers hold wmu_
  int connecting_fd_ GUARDED_BY(mu_) = -1;  // the socket of a handshake in progress
  bool up_ GUARDED_BY(mu_) = false;
  uint64_t next_id_ GUARDED_BY(mu_) = 1;
  // Bumped when fd_ is closed, under mu_ and wmu_; read under either (not
  // annotated: a field has one GUARDED_BY).
  uint64_t gen_ = 0;
  bool kicked_ GUARDED_BY(mu_) = false;  // the client is closing
  std::map<uint64_t, CallPtr> pending_ GUARDED_BY(mu_);
  Mutex wmu_;  // one frame at a time on the socket
  // nasgwd closed the connection for idleness (its notice, a reply with id
  // 0): nothing sent after the replies before it was executed, so Fail()
  // sends every pending call again, as if it had never been sent.
  bool idle_closed_ = false;  // the reader's own
  // ... and the notice said the node does not serve the reserve now (a pair
  // moving the service): the next connection waits the backoff first, so
  // that heads do not spin on a node that does not serve.
  bool moved_ = false;
};

class Client {
 public:
  nasgw_client_options opt{};
  std::string socket_path, client_name;
  proto::SessionId session{};
  std::vector<std::unique_ptr<Conn>> conns;
  std::atomic<uint32_t> rr{0};

  Mutex mu;
  CondVar cv;
  std::deque<CallPtr> waiting GUARDED_BY(mu);  // no connection up
  std::deque<CallPtr> outbox GUARDED_BY(mu);   // for the sender thread
  // Calls to send again at a time (EINPROGRESS, recall_wait_ms), by time.
  std::multimap<uint64_t, CallPtr> delayed GUARDED_BY(mu);
  std::thread sender;
  bool closing GUARDED_BY(mu) = false;
  uint32_t up GUARDED_BY(mu) = 0;
  std::string node_name GUARDED_BY(mu);
  // nasgwd's write verifier from the latest HELLO, WRITE or FSYNC reply.
  std::atomic<uint64_t> write_verifier{0};
  // The verifiers seen, and the files with writes answered unstable under
  // one of them that no FSYNC covered yet (NASGW_HOLD_UNSTABLE).
  struct Held {
    uint64_t seq = 0;  // when it was held: an FSYNC made later covers it
    uint64_t verifier = 0;
  };
  Mutex vmu;
  std::set<uint64_t> seen GUARDED_BY(vmu);
  std::deque<uint64_t> seen_order GUARDED_BY(vmu);  // oldest first, to bound `seen`
  uint64_t newest GUARDED_BY(vmu) = 0;              // the verifier seen first most recently
  uint64_t hold_seq GUARDED_BY(vmu) = 0;
  std::map<std::pair<uint32_t, uint64_t>, Held> held GUARDED_BY(vmu);
  // Past held_files_max files the table takes no more: what comes after is
  // held under this verifier as a whole (no FSYNC releases it, a new
  // verifier loses it), so memory stays bounded and a loss is never missed.
  uint64_t held_overflow GUARDED_BY(vmu) = 0;
  // A loss is being reported (verifier_changed with lost = 1 has not
  // returned): no other reply carrying a verifier is delivered, and no
  // connection takes calls, until it returns (FSAL_NASGW's never does).
  bool reporting GUARDED_BY(vmu) = false;
  CondVar vcv;
  // Why the latest attempt to connect failed (0 and "" after a success): an
  // errno (EACCES: the socket's permissions; EMFILE, ENFILE: nasgwd refused
  // the HELLO at a connection limit; ENOTCONN otherwise) and a message
  // naming the socket.
  int connect_err GUARDED_BY(mu) = 0;
  std::string connect_why GUARDED_BY(mu);

  std::atomic<uint64_t> next_open_id{1};
  bool reopen_pending GUARDED_BY(open_mu) = false;  // opens still to be sent to a nasgwd that lost them
  // The nasgwd instance (HELLO) the last re-open was made on: a HELLO that
  // names another one needs a re-open even if it resumed the session (see
  // the handshake).
  proto::SessionId reopened_instance GUARDED_BY(open_mu){};
  // Goodbye began: the session is ending, so nothing is opened, locked,
  // shared or leased again. A connection that reconnects meanwhile (nasgwd
  // closes the session's connections when it ends it) would otherwise
  // HELLO into a new session and take the closing client's share
  // reservations and leases again, held until that session's grace ran out.
  bool left GUARDED_BY(open_mu) = false;
  Mutex open_mu ACQUIRED_BEFORE(mu);
  std::map<std::pair<uint32_t, uint64_t>, OpenEntry> opens GUARDED_BY(open_mu);
  std::map<std::pair<uint32_t, uint64_t>, LockedFile> locks GUARDED_BY(open_mu);
  HeldFiles<HeldShare> shares GUARDED_BY(open_mu);
  HeldFiles<HeldLease> leases GUARDED_BY(open_mu);
  // Bumped (under open_mu) when opens and locks start being taken again on
  // a nasgwd that lost the session: a lock call that was out meanwhile may
  // have been granted by the old nasgwd and missed by the re-lock, so it is
  // sent again (nasgw_lock, nasgw_unlock).
  uint64_t relock_epoch GUARDED_BY(open_mu) = 0;

  void Submit(const CallPtr& call) {
    if (call->invalid != 0) {
      call->Complete(call->invalid, call->invalid_why);
      return;
    }
    if (t_reader) {
      MutexLock l(mu);
      outbox.push_back(call);
      cv.NotifyAll();
      return;
    }
    for (;;) {
      const size_t n = conns.size();
      const uint32_t first = rr.fetch_add(1);
      for (size_t i = 0; i < n; i++) {
        if (conns[(first + i) % n]->Send(call)) return;
      }
      MutexLock l(mu);
      if (closing) {
        l.Unlock();
        call->Complete(ESHUTDOWN, "client closing");
        return;
      }
      // A connection that came up since the sends failed has drained
      // `waiting` already: try it rather than wait for the next one.
      if (up > 0) {
        l.Unlock();
        std::this_thread::yield();
        continue;
      }
      if (call->deadline_ns == 0) call->deadline_ns = MonotonicNanos() + uint64_t{opt.reconnect_timeout_ms} * 1'000'000;
      waiting.push_back(call);
      cv.NotifyAll();
      return;
    }
  }

  // A verifier from a HELLO (call null), WRITE or FSYNC reply, before the
  // reply is delivered or the connection takes calls. One never seen before
  // names a newer opening of the domain than every one seen (a reply of an
  // earlier opening comes late at most, never from the future): the held
  // writes of the older ones may be lost, and verifier_changed says so.
  void Saw(uint64_t v, const Call* call) {
    if (v == 0) return;  // no domain open
    uint64_t old = 0, now = v, lost = 0;
    bool changed = false;
    {
      MutexLock l(vmu);
      while (reporting) vcv.Wait(vmu);
      write_verifier = v;
      if (seen.insert(v).second) {
        seen_order.push_back(v);
        if (seen_order.size() > kVerifiersKept) {
          seen.erase(seen_order.front());
          seen_order.pop_front();
        }
        changed = newest != 0;
        old = newest;
        newest = v;
        for (auto it = held.begin(); it != held.end();) {
          if (it->second.verifier != v) {
            lost = it->second.verifier;
            it = held.erase(it);
          } else {
            ++it;
          }
        }
        if (held_overflow != 0 && held_overflow != v) {
          lost = held_overflow;
          held_overflow = 0;
        }
      }
      if (call != nullptr && call->op == Op::kWrite && call->hold && call->reply.stable == NASGW_UNSTABLE) {
        if (v != newest) {
          // Answered by an opening already superseded: may be lost.
          changed = true;
          lost = v;
          now = newest;
        } else if (held.size() < opt.held_files_max || held.contains(call->file)) {
          held[call->file] = Held{++hold_seq, v};
        } else {
          held_overflow = v;
        }
      } else if (call != nullptr && call->op == Op::kFsync) {
        auto it = held.find(call->file);
        if (it != held.end() && it->second.seq <= call->hold_seq && it->second.verifier == v) held.erase(it);
      }
      reporting = changed && lost != 0;
    }
    if (lost != 0) old = lost;
    if (changed && opt.verifier_changed != nullptr) opt.verifier_changed(opt.verifier_arg, old, now, lost != 0 ? 1 : 0);
    if (changed && lost != 0) {
      MutexLock l(vmu);
      reporting = false;
      vcv.NotifyAll();
    }
  }

  // A WRITE or FSYNC of a file that is gone (ESTALE): nothing of it can be
  // committed any more, so it is held no longer.
  void Unhold(const std::pair<uint32_t, uint64_t>& file) {
    MutexLock l(vmu);
    held.erase(file);
  }

  // A connection came up: what waited goes to the sender.
  void Drain() {
    MutexLock l(mu);
    for (auto& c : waiting) outbox.push_back(std::move(c));
    waiting.clear();
    cv.NotifyAll();
  }

  // The sender thread: sends what readers handed over, and fails waiting
  // calls whose reconnect time ran out.
  void SenderLoop() {
    t_library_of = this;
    for (;;) {
      std::deque<CallPtr> batch;
      std::vector<CallPtr> shut;
      {
        MutexLock l(mu);
        uint64_t wait_ns = 100'000'000;
        if (!delayed.empty()) {
          const uint64_t now = MonotonicNanos();
          wait_ns = std::min(wait_ns, delayed.begin()->first > now ? delayed.begin()->first - now : 0);
        }
        cv.WaitFor(mu, std::chrono::nanoseconds(wait_ns), [&]() REQUIRES(mu) { return closing || !outbox.empty(); });
        batch.swap(outbox);
        const uint64_t now = MonotonicNanos();
        while (!delayed.empty() && (closing || delayed.begin()->first <= now)) {
          (closing ? shut.push_back(delayed.begin()->second) : batch.push_back(delayed.begin()->second));
          delayed.erase(delayed.begin());
        }
        if (closing && batch.empty() && shut.empty()) break;
      }
      for (auto& c : shut) c->Complete(ESHUTDOWN, "client closing");
      for (auto& c : batch) Submit(c);
      Expire();
    }
    Expire();
  }

  // A call answered EINPROGRESS (another head's lease is being recalled):
  // sent again later while recall_wait_ms allows, else answered.
  void Recalling(const CallPtr& call, std::string why) {
    const uint64_t now = MonotonicNanos();
    if (opt.recall_wait_ms == 0) {
      call->Complete(EINPROGRESS, std::move(why));
      return;
    }
    if (call->recall_deadline_ns == 0) call->recall_deadline_ns = now + uint64_t{opt.recall_wait_ms} * 1'000'000;
    if (now >= call->recall_deadline_ns) {
      call->Complete(EINPROGRESS, std::move(why) + " (gave up after " + std::to_string(opt.recall_wait_ms) + " ms)");
      return;
    }
    const uint64_t backoff_ms = std::min<uint64_t>(100, uint64_t{5} << std::min<uint32_t>(call->recall_tries, 5));
    call->recall_tries++;
    MutexLock l(mu);
    if (closing) {
      l.Unlock();
      call->Complete(ESHUTDOWN, "client closing");
      return;
    }
    delayed.emplace(now + backoff_ms * 1'000'000, call);
    cv.NotifyAll();
  }

  // Fails waiting calls whose time ran out.
  void Expire() {
    std::vector<CallPtr> dead;
    {
      MutexLock l(mu);
      const uint64_t now = MonotonicNanos();
      for (auto it = waiting.begin(); it != waiting.end();) {
        if ((*it)->deadline_ns <= now || closing) {
          dead.push_back(*it);
          it = waiting.erase(it);
        } else {
          ++it;
        }
      }
    }
    std::string why = "nasgwd unreachable at " + socket_path;
    {
      MutexLock l(mu);
      if (!connect_why.empty()) why += ": " + connect_why;
    }
    for (auto& c : dead) c->Complete(ENOTCONN, why);
  }

  int Sync(const CallPtr& call) {
    if (t_library_of == this) {
      // An async callback (or the recall or verifier callback) calling us
      // back synchronously. On a reader thread the reply may come on its
      // own connection, which nobody else reads: that connection, and every
      // call later sent on it, would hang for good. On the sender thread, a
      // call that had to wait for a connection would wait for this thread.
      // So it fails at once, whatever connection it would have taken.
      t_message = std::string("synchronous ") + proto::OpName(call->op) +
                  " refused on the client library's own thread (an async callback): it could wait for itself";
      NASGW_LOG(kError, "client") << "synchronous call made from an async callback refused"
                                  << Kv("op", proto::OpName(call->op));
      return -EDEADLK;
    }
    Mutex m;
    CondVar done_cv;
    bool finished = false;
    call->done = [&](Call&) {
      MutexLock l(m);
      finished = true;
      done_cv.NotifyOne();
    };
    Submit(call);
    MutexLock l(m);
    while (!finished) done_cv.Wait(m);
    if (call->err != 0) t_message = call->why;
    return -call->err;
  }

  // Ends the session on nasgwd (its opens and locks are released at once),
  // over a connection that is up now, waiting at most kGoodbyeTimeoutMs.
  // With none up there is nobody to tell: nasgwd ends the session when its
  // grace time runs out.
  void Goodbye();
};

void Client::Goodbye() {
  {
    MutexLock l(open_mu);
    left = true;
  }
  proto::Request r;
  r.op = Op::kGoodbye;
  r.creds.uid = ::geteuid();  // our own: nasgwd accepts them from any peer
  r.creds.gid = ::getegid();
  auto call = std::make_shared<Call>();
  call->op = Op::kGoodbye;
  call->payload = proto::EncodeRequest(r);
  // The call may complete after we stopped waiting (a resend failed by the
  // close): the state it touches is shared, not on this stack.
  struct Wait {
    Mutex m;
    CondVar cv;
    bool done GUARDED_BY(m) = false;
  };
  auto w = std::make_shared<Wait>();
  call->done = [w](Call&) {
    MutexLock l(w->m);
    w->done = true;
    w->cv.NotifyAll();
  };
  bool sent = false;
  for (auto& k : conns) {
    if ((sent = k->Send(call))) break;
  }
  if (!sent) return;
  MutexLock l(w->m);
  w->cv.WaitFor(w->m, std::chrono::milliseconds(kGoodbyeTimeoutMs), [&]() REQUIRES(w->m) { return w->done; });
}

void Conn::Kick() {
  MutexLock l(mu_);
  kicked_ = true;
  if (fd_ >= 0) ::shutdown(fd_, SHUT_RDWR);
  if (connecting_fd_ >= 0) ::shutdown(connecting_fd_, SHUT_RDWR);
}

bool Conn::Send(const CallPtr& call) {
  int fd;
  uint64_t id, gen;
  {
    MutexLock l(mu_);
    if (!up_) return false;
    fd = fd_;
    gen = gen_;
    id = next_id_++;
    pending_[id] = call;
  }
  MutexLock w(wmu_);
  // The connection failed (and its descriptor may be reused by now) since
  // we took it: Fail() took this call with the others, and has resent or
  // failed it.
  if (gen_ != gen) return true;
  if (!SendFrame(fd, call->op, id, call->payload, call->wdata, call->wlen)) {
    ::shutdown(fd, SHUT_RDWR);  // the reader fails over every pending call, this one too
  }
  return true;
}

// Connects, says hello, and re-opens files on a restarted nasgwd, all on
// this thread before the connection takes calls.
bool Conn::Connect() {
  int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return false;
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::memcpy(addr.sun_path, client_->socket_path.c_str(),
              std::min(client_->socket_path.size(), sizeof(addr.sun_path) - 1));
  {
    // Visible to Kick(), so that a close does not wait for a handshake.
    MutexLock l(mu_);
    if (kicked_) {
      ::close(fd);
      return false;
    }
    connecting_fd_ = fd;
  }
  // The handshake (hello, re-opens) is bounded: a nasgwd that accepts but
  // never answers must not hold this thread, or open_mu, forever.
  struct timeval limit {};
  limit.tv_sec = kHandshakeTimeoutS;
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &limit, sizeof(limit));
  ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &limit, sizeof(limit));
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    const int e = errno;
    const std::string& path = client_->socket_path;
    if (e == EACCES || e == EPERM) {
      NoteConnectError(EACCES, "permission denied: cannot connect to nasgwd's head socket " + path +
                                   " (head.socket_mode and head.socket_group decide who may)");
    } else if (e == ENOENT) {
      NoteConnectError(ENOTCONN, "no socket at " + path + " (is nasgwd running?)");
    } else if (e == ECONNREFUSED) {
      NoteConnectError(ENOTCONN, "nothing listens on " + path + " (is nasgwd running?)");
    } else {
      NoteConnectError(ENOTCONN, "cannot connect to " + path + ": " + std::strerror(e));
    }
    Forget(fd);
    return false;
  }
  // A synchronous exchange on the new socket.
  std::string error_payload;  // the last error reply's payload
  auto exchange = [&](Op op, const std::string& payload, uint64_t id, proto::Reply* reply, int* err) {
    if (!SendFrame(fd, op, id, payload, nullptr, 0)) return false;
    uint8_t hb[proto::kHeaderBytes];
    if (!ReadFull(fd, hb, sizeof(hb))) return false;
    auto h = proto::DecodeHeader(hb, true);
    if (!h.ok() || h->id != id || h->op != op) return false;
    std::string p(h->length, '\0');
    if (!ReadFull(fd, p.data(), p.size())) return false;
    *err = static_cast<int>(h->status);
    if (*err != 0) {
      error_payload = std::move(p);
      return true;
    }
    auto r = proto::DecodeReply(op, p);
    if (!r.ok()) return false;
    *reply = std::move(*r);
    return true;
  };
  proto::Request hello;
  hello.op = Op::kHello;
  hello.session = client_->session;
  hello.name2 = client_->client_name;
  proto::Reply reply;
  int err = 0;
  if (!exchange(Op::kHello, proto::EncodeRequest(hello), 0, &reply, &err) || err != 0) {
    if (err != 0) {
      // Refused (a connection limit: EMFILE, ENFILE): nasgwd says why.
      NoteConnectError(err, "nasgwd refused the connection: " + proto::DecodeError(error_payload));
    } else {
      NoteConnectError(ENOTCONN, "nasgwd at " + client_->socket_path + " closed the connection during the handshake");
    }
    Forget(fd);
    return false;
  }
  NoteConnectError(0, {});
  {
    MutexLock l(client_->mu);
    client_->node_name = reply.hello.node_name;
  }
  client_->Saw(reply.hello.write_verifier, nullptr);
  MutexLock opens_lock(client_->open_mu);
  // A new nasgwd (another instance) lost every session. The HELLO that
  // recreated ours may have been another connection's, answered first:
  // this one then reads "resumed", but it must not take calls before the
  // opens, locks, share reservations and leases are back (taking them
  // twice is harmless: they are idempotent).
  if (!reply.hello.resumed || reply.hello.instance != client_->reopened_instance) client_->reopen_pending = true;
  if (client_->reopen_pending && client_->left) {
    Forget(fd);  // closing: nothing to take again (Loop stops once `closing` is set)
    return false;
  }
  if (client_->reopen_pending) {
    client_->relock_epoch++;
    // nasgwd does not know this session (it restarted, or the session's
    // grace time ran out), or an earlier re-open did not finish: open again
    // what we hold open (opens are idempotent by id). A file deleted
    // meanwhile stays gone: its handle is stale. Any failure here drops the
    // connection, and the next connection tries again.
    uint64_t id = 1;
    for (const auto& [key, e] : client_->opens) {
      for (uint64_t open_id : e.ids) {
        proto::Request o;
        o.op = Op::kOpen;
        o.creds = e.creds;
        o.h = e.handle;
        o.open_id = open_id;
        proto::Reply ignored;
        int oerr = 0;
        if (!exchange(Op::kOpen, proto::EncodeRequest(o), id++, &ignored, &oerr) ||
            (oerr != 0 && oerr != ESTALE && oerr != ENOENT && oerr != EBADMSG)) {
          Forget(fd);
          return false;
        }
      }
    }
    if (!Relock(exchange, id, error_payload) ||
        !Retake(client_->shares, "share reservation", exchange, id, error_payload) ||
        !Retake(client_->leases, "lease", exchange, id, error_payload)) {
      Forget(fd);
      return false;
    }
    client_->reopen_pending = false;
    client_->reopened_instance = reply.hello.instance;
  }
  opens_lock.Unlock();
  // The handshake was bounded; calls are not (a long write may take long).
  struct timeval none {};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &none, sizeof(none));
  ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &none, sizeof(none));
  MutexLock l(mu_);
  connecting_fd_ = -1;
  if (kicked_) {  // closed while we shook hands
    ::close(fd);
    return false;
  }
  fd_ = fd;
  up_ = true;
  return true;
}

bool Conn::Relock(const Exchange& exchange, uint64_t& id, const std::string& error_payload) REQUIRES(client_->open_mu) {
  auto& files = client_->locks;
  for (auto fit = files.begin(); fit != files.end();) {
    const auto [vol, ino] = fit->first;
    LockedFile& file = fit->second;
    bool gone = false;  // the file was deleted meanwhile: its locks go with it
    for (auto& [owner, held] : file.owners) {
      for (const proto::LockRange& r : held.ranges) {
        if (held.lost) break;
        proto::Request q;
        q.op = Op::kLock;
        q.creds = held.creds;
        q.h = file.handle;
        q.owner = owner;
        q.lock_type = r.type;
        q.offset = r.start;
        q.length = proto::LockLength(r);
        proto::Reply ignored;
        int err = 0;
        if (!exchange(Op::kLock, proto::EncodeRequest(q), id++, &ignored, &err)) return false;
        if (err == 0) continue;
        if (err == ESTALE || err == ENOENT || err == EBADMSG) {  // deleted, or a handle no longer honoured
          gone = true;
          break;
        }
        if (!LockRefused(err)) return false;  // nasgwd not ready (EHOSTUNREACH...): the next connection retries
        NASGW_LOG(kWarn, "client") << "lock lost: nasgwd lost the session and refused the lock again"
                                   << Kv("volume", vol) << Kv("ino", ino) << Kv("owner", owner)
                                   << Kv("type", r.type == proto::kLockWrite ? "write" : "read") << Kv("start", r.start)
                                   << Kv("length", proto::LockLength(r)) << Kv("errno", err)
                                   << Kv("why", proto::DecodeError(error_payload));
        held.lost = true;
        break;
      }
      if (gone) break;
      if (held.lost && !held.ranges.empty()) {
        // The owner holds all of its locks on the file or none: release the
        // ones taken again before the refusal (on a later connection if this
        // one fails now).
        proto::Request u;
        u.op = Op::kUnlock;
        u.creds = held.creds;
        u.h = file.handle;
        u.owner = owner;
        proto::Reply ignored;
        int err = 0;
        if (!exchange(Op::kUnlock, proto::EncodeRequest(u), id++, &ignored, &err) || err != 0) return false;
        held.ranges.clear();
      }
    }
    if (gone) {
      fit = files.erase(fit);
    } else {
      ++fit;
    }
  }
  return true;
}

// Share reservations and leases are taken again as locks are. One
// refused now (another head took a conflicting one meanwhile) is dropped
// with a WARN line: the head goes on without it.
template <typename T>
bool Conn::Retake(HeldFiles<T>& files, const char* what, const Exchange& exchange, uint64_t& id,
                  const std::string& error_payload) REQUIRES(client_->open_mu) {
  for (auto fit = files.begin(); fit != files.end();) {
    HeldOnFile<T>& file = fit->second;
    bool gone = false;
    for (auto oit = file.owners.begin(); oit != file.owners.end();) {
      proto::Request q;
      q.op = T::kOp;
      oit->second.Fill(q);
      q.creds = oit->second.creds;
      q.h = file.handle;
      q.owner = oit->first;
      proto::Reply ignored;
      int err = 0;
      if (!exchange(q.op, proto::EncodeRequest(q), id++, &ignored, &err)) return false;
      if (err == ESTALE || err == ENOENT || err == EBADMSG) {
        gone = true;
        break;
      }
      if (err == 0) {
        ++oit;
        continue;
      }
      if (err != EBUSY && !LockRefused(err)) return false;  // not ready: the next connection retries
      NASGW_LOG(kWarn, "client") << what << " lost: nasgwd lost the session and refused it again"
                                 << Kv("volume", fit->first.first) << Kv("ino", fit->first.second)
                                 << Kv("owner", oit->first) << Kv("errno", err)
                                 << Kv("why", proto::DecodeError(error_payload));
      oit = file.owners.erase(oit);
    }
    if (gone || file.owners.empty()) {
      fit = files.erase(fit);
    } else {
      ++fit;
    }
  }
  return true;
}

void Conn::NoteConnectError(int err, const std::string& why) {
  bool log = false;
  {
    MutexLock l(client_->mu);
    // A refusal is logged once until it changes or a connection succeeds,
    // not at every reconnection attempt.
    log = why != client_->connect_why && (err == EMFILE || err == ENFILE || err == EACCES);
    client_->connect_err = err;
    client_->connect_why = why;
    client_->cv.NotifyAll();  // nasgw_client_open gives up at once on EACCES
  }
  if (log) NASGW_LOG(kWarn, "client") << "cannot connect" << Kv("errno", err) << Kv("why", why);
}

void Conn::Forget(int fd) {
  MutexLock l(mu_);
  connecting_fd_ = -1;
  ::close(fd);
}

// A call whose reply was lost with the connection.
void Lost(Client* client, const CallPtr& call) {
  // A request that breaks the connection every time (nasgwd refusing it, or
  // dying on it) must not be resent forever.
  if (proto::Idempotent(call->op) && ++call->resends > kResendMax) {
    call->Complete(EIO, "the connection to nasgwd broke " + std::to_string(kResendMax) + " times under this request");
  } else if (proto::Idempotent(call->op)) {
    client->Submit(call);
  } else {
    call->Complete(EAGAIN, "connection to nasgwd lost; the request may or may not have been done");
  }
}

bool Conn::ReadReplies() {
  int fd;
  {
    MutexLock l(mu_);  // this thread is fd_'s only writer; the lock is for the analysis
    fd = fd_;
  }
  for (;;) {
    uint8_t hb[proto::kHeaderBytes];
    if (!ReadFull(fd, hb, sizeof(hb))) return false;
    auto h = proto::DecodeHeader(hb, true);
    if (!h.ok()) return false;
    if (h->id == 0 && h->op == Op::kGoodbye && h->status != 0) {
      // nasgwd's notice that it closes this connection (idle, or the
      // service moved) without executing what has no reply yet.
      std::string p(h->length, '\0');
      if (ReadFull(fd, p.data(), p.size())) {
        NASGW_LOG(kDebug, "client") << "nasgwd closed the connection" << Kv("why", proto::DecodeError(p));
      }
      idle_closed_ = true;
      moved_ = h->status == EHOSTUNREACH;
      return false;
    }
    if (h->id == 0 && h->op == Op::kRecall) {
      // nasgwd wants a lease back: the head's callback, on this thread.
      std::string p(h->length, '\0');
      if (!ReadFull(fd, p.data(), p.size())) return false;
      auto r = proto::DecodeRecall(p);
      if (!r.ok()) return false;  // a broken stream
      if (client_->opt.recall != nullptr) {
        client_->opt.recall(client_->opt.recall_arg, r->volume, r->ino, r->owner, r->break_to);
      } else {
        NASGW_LOG(kDebug, "client") << "lease recall ignored (no recall callback)" << Kv("volume", r->volume)
                                    << Kv("ino", r->ino) << Kv("owner", r->owner);
      }
      continue;
    }
    CallPtr call;
    {
      MutexLock l(mu_);
      auto it = pending_.find(h->id);
      if (it == pending_.end()) return false;  // a reply to nothing: the stream is broken
      call = it->second;
      pending_.erase(it);
    }
    if (h->op != call->op) {
      Lost(client_, call);  // a broken stream: this call is answered like the others
      return false;
    }
    if (h->status != 0) {
      std::string p(h->length, '\0');
      if (!ReadFull(fd, p.data(), p.size())) {
        Lost(client_, call);
        return false;
      }
      if ((call->op == Op::kWrite || call->op == Op::kFsync) && h->status == ESTALE) client_->Unhold(call->file);
      if (call->op == Op::kLock && h->status == EAGAIN) {  // carries the conflicting lock
        auto conflict = proto::DecodeLockDenied(p);
        if (!conflict.ok()) {
          Lost(client_, call);
          return false;
        }
        call->reply.lock = *conflict;
      }
      if (h->status == EINPROGRESS) {
        client_->Recalling(call, proto::DecodeError(p));
        continue;
      }
      call->Complete(static_cast<int>(h->status), proto::DecodeError(p));
      continue;
    }
    if (call->op == Op::kRead) {
      uint8_t pre[proto::kReadPrefixBytes];
      if (h->length < proto::kReadPrefixBytes || !ReadFull(fd, pre, sizeof(pre))) {
        Lost(client_, call);
        return false;
      }
      auto rp = proto::DecodeReadPrefix(pre, h->length, call->rlen);
      if (!rp.ok() || !ReadFull(fd, call->rbuf, rp->second)) {
        Lost(client_, call);
        return false;
      }
      call->reply.eof = rp->first;
      call->nread = rp->second;
      call->Complete(0, {});
      continue;
    }
    std::string p(h->length, '\0');
    bool got = ReadFull(fd, p.data(), p.size());
    auto r = got ? proto::DecodeReply(call->op, p) : Result<proto::Reply>(Status::IoError("short"));
    if (!r.ok()) {
      Lost(client_, call);
      return false;
    }
    call->reply = std::move(*r);
    if (call->op == Op::kWrite || call->op == Op::kFsync) client_->Saw(call->reply.verifier, call.get());
    call->Complete(0, {});
  }
}

void Conn::Fail() {
  std::map<uint64_t, CallPtr> pending;
  {
    MutexLock l(mu_);
    up_ = false;
    // A sender blocked in sendmsg on a full socket holds wmu_: the shutdown
    // makes it return before we wait for wmu_.
    if (fd_ >= 0) ::shutdown(fd_, SHUT_RDWR);
  }
  {
    MutexLock l(mu_);
    MutexLock w(wmu_);
    gen_++;  // a Send that took fd_ before now must not write to it
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
    pending.swap(pending_);
  }
  {
    MutexLock l(client_->mu);
    client_->up--;
  }
  const bool unexecuted = idle_closed_;
  idle_closed_ = false;
  for (auto& [id, call] : pending) {
    if (unexecuted) {
      client_->Submit(call);  // never executed: sent again whatever the op, and not counted as a resend
    } else {
      Lost(client_, call);
    }
  }
}

void Conn::Loop() {
  t_reader = true;
  t_library_of = client_;
  uint32_t backoff_ms = 20, moved_backoff_ms = 20;
  for (;;) {
    {
      MutexLock l(client_->mu);
      if (client_->closing) break;
    }
    if (!Connect()) {
      client_->Expire();
      MutexLock l(client_->mu);
      const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(backoff_ms);
      while (!client_->closing && client_->cv.WaitUntil(client_->mu, until)) {
      }
      backoff_ms = std::min<uint32_t>(backoff_ms * 2, 500);
      continue;
    }
    backoff_ms = 20;
    {
      MutexLock l(client_->mu);
      client_->up++;
      client_->cv.NotifyAll();
    }
    client_->Drain();
    ReadReplies();
    Fail();
    if (moved_) {
      // Backoff as after a failed connect, until a connection ends otherwise.
      moved_ = false;
      MutexLock l(client_->mu);
      const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(moved_backoff_ms);
      while (!client_->closing && client_->cv.WaitUntil(client_->mu, until)) {
      }
      moved_backoff_ms = std::min<uint32_t>(moved_backoff_ms * 2, 500);
    } else {
      moved_backoff_ms = 20;
    }
  }
}

}  // namespace nasgw::client

// ---- the C API -------------------------------------------------------------------

using nasgw::client::Call;
using nasgw::client::CallPtr;
using nasgw::proto::Op;
namespace proto = nasgw::proto;

struct nasgw_client {
  std::unique_ptr<nasgw::client::Client> c;
};

static_assert(NASGW_SHARE_READ == proto::kShareRead && NASGW_SHARE_WRITE == proto::kShareWrite &&
              NASGW_SHARE_DELETE == proto::kShareDelete);

namespace {

proto::Creds Creds(const nasgw_cred* cr) {
  proto::Creds c;
  if (cr != nullptr) {
    c.uid = cr->uid;
    c.gid = cr->gid;
    if (cr->groups != nullptr) c.groups.assign(cr->groups, cr->groups + std::min<uint32_t>(cr->ngroups, 1024));
  }
  return c;
}
proto::Handle H(const nasgw_handle* h) {
  if (h == nullptr) return {};
  proto::Handle out{h->volume, h->ino, h->gen, h->snap, h->scope, {}};
  std::memcpy(out.mac.data(), h->mac, out.mac.size());
  return out;
}
nasgw_handle ToC(const proto::Handle& h) {
  nasgw_handle out{};
  out.volume = h.volume;
  out.ino = h.ino;
  out.gen = h.gen;
  out.snap = h.snap;
  out.scope = h.scope;
  std::memcpy(out.mac, h.mac.data(), sizeof(out.mac));
  return out;
}
nasgw_time T(const proto::Time& t) {
  return {t.sec, t.nsec};
}
proto::Time T(const nasgw_time& t) {
  return {t.sec, t.nsec};
}

// `a` with the handle nasgwd issued for it in `scope` (its MAC `mac`).
void ToC(uint32_t vol, uint64_t scope, const proto::Attr& a, const proto::Mac& mac, nasgw_attr* out) {
  if (out == nullptr) return;
  *out = {};
  out->handle = ToC(proto::Handle{vol, a.ino, a.gen, a.snap, scope, mac});
  out->type = static_cast<uint32_t>(a.type);
  out->mode = a.mode;
  out->uid = a.uid;
  out->gid = a.gid;
  out->nlink = a.nlink;
  out->size = a.size;
  out->blocks = a.blocks;
  out->rdev = a.rdev;
  out->change = a.change;
  out->flags = a.flags;
  out->atime = T(a.atime);
  out->mtime = T(a.mtime);
  out->ctime = T(a.ctime);
  out->btime = T(a.btime);
}

// The same strict decoder nasgwd runs: a request it would refuse is refused
// here, without a round trip (and without costing the connection).
void Validate(Call& call, std::string_view payload) {
  auto d = proto::DecodeRequest(call.op, payload);
  if (!d.ok()) {
    call.invalid = EINVAL;
    call.invalid_why = std::string(d.status().message());
  } else if (d->reject != 0) {
    call.invalid = d->reject;
    call.invalid_why = d->reject_why;
  }
}

CallPtr Make(Op op, const nasgw_cred* cr, const nasgw_handle* h, const std::function<void(proto::Request&)>& fill) {
  proto::Request r;
  r.op = op;
  r.creds = Creds(cr);
  r.h = H(h);
  if (fill) fill(r);
  auto call = std::make_shared<Call>();
  call->op = op;
  call->payload = proto::EncodeRequest(r);
  Validate(*call, call->payload);
  if (cr == nullptr) {  // never a silent root
    call->invalid = EINVAL;
    call->invalid_why = "no credentials";
  }
  return call;
}

bool Bad(const void* p) {
  return p == nullptr;
}
bool BadName(const char* n) {
  return n == nullptr;
}

// getxattr(2)'s and listxattr(2)'s answer: size 0 asks for the length; a
// buffer too small is ERANGE.
int64_t CopyOut(std::string_view v, void* buf, size_t size) {
  if (size == 0) return static_cast<int64_t>(v.size());
  if (buf == nullptr) return -EINVAL;
  if (size < v.size()) return -ERANGE;
  std::memcpy(buf, v.data(), v.size());  // NOLINT(bugprone-not-null-terminated-result)
  return static_cast<int64_t>(v.size());
}

// An entry's attributes from a READDIR reply, packed: name, NUL, u32
// length (little endian), value. nasgwd bounds them by the same size.
void PackXattrs(const proto::Reply::EntryXattrs& in, nasgw_entry_xattrs* out) {
  out->carried = 0;
  out->len = 0;
  if (!in.carried || proto::EntryXattrBytes(in) > sizeof(out->buf)) return;
  for (const auto& [name, value] : in.list) {
    char* at = out->buf + out->len;
    std::memcpy(at, name.data(), name.size());
    at[name.size()] = '\0';
    const auto n = static_cast<uint32_t>(value.size());
    for (int b = 0; b < 4; b++) at[name.size() + 1 + b] = static_cast<char>(n >> (8 * b));
    std::memcpy(at + name.size() + 5, value.data(), value.size());
    out->len += static_cast<uint32_t>(name.size() + 5 + value.size());
  }
  out->carried = 1;
}

// Calls fn(name, value) for each packed attribute until it returns false.
template <typename Fn>
void EachPacked(const nasgw_entry_xattrs& x, Fn fn) {
  const size_t len = std::min<size_t>(x.len, sizeof(x.buf));
  for (size_t at = 0; at < len;) {
    const char* p = x.buf + at;
    const size_t nlen = strnlen(p, len - at);
    if (at + nlen + 5 > len) return;
    uint32_t vlen = 0;
    for (int b = 0; b < 4; b++) vlen |= static_cast<uint32_t>(static_cast<uint8_t>(p[nlen + 1 + b])) << (8 * b);
    if (at + nlen + 5 + vlen > len) return;
    if (!fn(std::string_view(p, nlen), std::string_view(p + nlen + 5, vlen))) return;
    at += nlen + 5 + vlen;
  }
}

int Simple(nasgw_client* c, Op op, const nasgw_cred* cr, const nasgw_handle* h,
           const std::function<void(proto::Request&)>& fill, nasgw_attr* out) {
  if (c == nullptr || (h == nullptr && op != Op::kMount && op != Op::kStatfs)) return -EINVAL;
  auto call = Make(op, cr, h, fill);
  int rc = c->c->Sync(call);
  if (rc == 0 && out != nullptr && h != nullptr) ToC(h->volume, h->scope, call->reply.attr, call->reply.mac, out);
  return rc;
}

// Every open has its own id (nasgwd keeps the set per file); the client
// remembers them to release one per nasgw_release and to open them again
// on a nasgwd that lost the session.
void NoteOpen(nasgw::client::Client& cl, const nasgw_cred* cr, const nasgw_handle& h, uint64_t open_id) {
  nasgw::MutexLock l(cl.open_mu);
  auto& e = cl.opens[{h.volume, h.ino}];
  e.ids.push_back(open_id);
  e.handle = H(&h);
  e.creds = Creds(cr);
}

void ForgetOpen(nasgw::client::Client& cl, uint32_t vol, uint64_t ino, uint64_t open_id) {
  nasgw::MutexLock l(cl.open_mu);
  auto it = cl.opens.find({vol, ino});
  if (it == cl.opens.end()) return;
  auto& ids = it->second.ids;
  ids.erase(std::remove(ids.begin(), ids.end(), open_id), ids.end());
  if (ids.empty()) cl.opens.erase(it);
}

void ToC(const proto::LockInfo& l, nasgw_lock_info* out) {
  if (out != nullptr) *out = {l.type, l.start, l.length, l.session, l.owner};
}

CallPtr LockCall(Op op, const nasgw_cred* cr, const nasgw_handle* h, uint64_t owner, uint32_t type, uint64_t start,
                 uint64_t length, uint32_t flags = 0) {
  return Make(op, cr, h, [&](proto::Request& r) {
    r.owner = owner;
    r.lock_type = type;
    r.offset = start;
    r.length = length;
    r.flags = flags;
  });
}

nasgw::client::OwnerLocks* FindOwner(nasgw::client::Client& cl, const nasgw_handle* h, uint64_t owner)
    REQUIRES(cl.open_mu) {
  auto f = cl.locks.find({h->volume, h->ino});
  if (f == cl.locks.end()) return nullptr;
  auto o = f->second.owners.find(owner);
  return o == f->second.owners.end() ? nullptr : &o->second;
}

void DropOwner(nasgw::client::Client& cl, const nasgw_handle* h, uint64_t owner) REQUIRES(cl.open_mu) {
  auto f = cl.locks.find({h->volume, h->ino});
  if (f == cl.locks.end()) return;
  f->second.owners.erase(owner);
  if (f->second.owners.empty()) cl.locks.erase(f);
}

constexpr const char* kLocksLost =
    "this owner's locks on the file were lost when nasgwd restarted (another client took the range, or nasgwd "
    "refused them); unlock the whole file (start 0, length 0) to start again";

// A WRITE call, checked without its bytes. (Here, not in the extern "C"
// block: it returns a C++ type.)
CallPtr WriteCall(const nasgw_cred* cr, const nasgw_handle* h, uint64_t offset, const void* buf, uint32_t len,
                  uint32_t stable) {
  proto::Request r;
  r.op = Op::kWrite;
  r.creds = Creds(cr);
  r.h = H(h);
  r.offset = offset;
  r.stable = stable & ~NASGW_HOLD_UNSTABLE;
  r.data = std::string_view(static_cast<const char*>(buf), len);
  auto call = std::make_shared<Call>();
  call->op = Op::kWrite;
  call->hold = (stable & NASGW_HOLD_UNSTABLE) != 0;
  if (h != nullptr) call->file = {h->volume, h->ino};
  call->payload = proto::EncodeRequest(r);
  // The arguments are checked without the bytes (a copy would defeat the
  // point); the length and the end offset are checked here.
  proto::Request args = r;
  args.data = {};
  Validate(*call, proto::EncodeRequest(args));
  if (cr == nullptr) {
    call->invalid = EINVAL;
    call->invalid_why = "no credentials";
  } else if (call->invalid == 0 && (offset > proto::kFileSizeMax || len > proto::kFileSizeMax - offset)) {
    call->invalid = EFBIG;
    call->invalid_why = "write beyond the largest file";
  }
  call->wdata = buf;
  call->wlen = len;
  return call;
}

// What a WRITE reply says, with the file's handle in the request's scope.
void ToC(const nasgw_handle& h, const proto::Reply& r, nasgw_write_result* out) {
  if (out == nullptr) return;
  out->stable = r.stable;
  out->verifier = r.verifier;
  ToC(h.volume, h.scope, r.attr, r.mac, &out->post);
}

// An FSYNC call: held writes (NASGW_HOLD_UNSTABLE) up to now are the ones
// its reply releases.
CallPtr FsyncCall(nasgw_client* c, const nasgw_cred* cr, const nasgw_handle* h) {
  auto call = Make(Op::kFsync, cr, h, {});
  call->file = {h->volume, h->ino};
  nasgw::MutexLock l(c->c->vmu);
  call->hold_seq = c->c->hold_seq;
  return call;
}
}  // namespace

namespace {

// Sets (or, with `release`, drops) what (file, owner) holds, in nasgwd and
// in the client's record of it (taken again after a restart), which `files`
// names (the client's shares or leases, under open_mu). A set is recorded
// once nasgwd granted it, and sent again if a re-take may have missed it.
template <typename T>
int SetHeld(nasgw::client::Client& cl, nasgw::client::HeldFiles<T> nasgw::client::Client::*files, const nasgw_cred* cr,
            const nasgw_handle* h, uint64_t owner, T value, bool release, const char* what) {
  const std::pair<uint32_t, uint64_t> key{h->volume, h->ino};
  auto make = [&] {
    return Make(T::kOp, cr, h, [&](proto::Request& r) {
      value.Fill(r);
      r.owner = owner;
    });
  };
  if (release) {
    // The record goes first, whatever nasgwd answers: a release that fails
    // (nasgwd unreachable past the reconnect time) must not leave a
    // reservation or lease to be taken again for an open the head closed.
    {
      nasgw::MutexLock l(cl.open_mu);
      auto& held = cl.*files;
      auto f = held.find(key);
      if (f != held.end()) {
        f->second.owners.erase(owner);
        if (f->second.owners.empty()) held.erase(f);
      }
    }
    return cl.Sync(make());
  }
  for (uint32_t attempt = 1;; attempt++) {
    uint64_t epoch = 0;
    {
      nasgw::MutexLock l(cl.open_mu);
      epoch = cl.relock_epoch;
    }
    const int rc = cl.Sync(make());
    if (rc != 0) return rc;
    nasgw::MutexLock l(cl.open_mu);
    if (cl.relock_epoch != epoch) {  // a re-take may have missed it: again
      if (attempt < nasgw::client::kResendMax) continue;
      nasgw::client::t_message = std::string("nasgwd lost the session under this ") + what + " call too many times";
      return -EIO;
    }
    auto& file = (cl.*files)[key];
    file.handle = H(h);
    value.creds = Creds(cr);
    file.owners[owner] = std::move(value);
    return 0;
  }
}

}  // namespace

extern "C" {

int nasgw_client_open(const nasgw_client_options* options, nasgw_client** out) {
  if (options == nullptr || options->socket_path == nullptr || out == nullptr) return -EINVAL;
  if (std::strlen(options->socket_path) >= sizeof(sockaddr_un::sun_path)) {
    nasgw::client::t_message = "socket path longer than 107 bytes";
    return -ENAMETOOLONG;
  }
  if (options->connections > 16) return -EINVAL;
  auto cl = std::make_unique<nasgw::client::Client>();
  cl->opt = *options;
  cl->socket_path = options->socket_path;
  cl->client_name = options->client_name != nullptr ? options->client_name : "client";
  if (cl->client_name.size() > 255) cl->client_name.resize(255);
  if (cl->opt.connections == 0) cl->opt.connections = 2;
  if (cl->opt.reconnect_timeout_ms == 0) cl->opt.reconnect_timeout_ms = 60'000;
  if (cl->opt.connect_timeout_ms == 0) cl->opt.connect_timeout_ms = 5'000;
  if (cl->opt.held_files_max == 0) cl->opt.held_files_max = nasgw::client::kHeldFilesMax;
  std::random_device rd;
  for (auto& b : cl->session) b = static_cast<uint8_t>(rd());
  for (uint32_t i = 0; i < cl->opt.connections; i++)
    cl->conns.push_back(std::make_unique<nasgw::client::Conn>(cl.get()));
  for (auto& c : cl->conns) c->Start();
  nasgw::client::Client* raw = cl.get();
  cl->sender = std::thread([raw] { raw->SenderLoop(); });
  {
    nasgw::MutexLock l(cl->mu);
    // Waiting does not help a socket we may not open (EACCES is not
    // retried); anything else (no nasgwd yet, a limit) may pass.
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(cl->opt.connect_timeout_ms);
    while (cl->up == 0 && cl->connect_err != EACCES && cl->cv.WaitUntil(cl->mu, deadline)) {
    }
    const bool ok = cl->up > 0;
    if (!ok) {
      const int err = cl->connect_err != 0 ? cl->connect_err : ENOTCONN;
      const std::string why = !cl->connect_why.empty() ? cl->connect_why : "cannot reach nasgwd at " + cl->socket_path;
      cl->closing = true;
      cl->cv.NotifyAll();
      l.Unlock();
      for (auto& c : cl->conns) c->Kick();
      for (auto& c : cl->conns) c->Join();
      cl->sender.join();
      nasgw::client::t_message = why;
      return -err;
    }
  }
  *out = new nasgw_client{std::move(cl)};
  return 0;
}

void nasgw_client_close(nasgw_client* c) {
  if (c == nullptr) return;
  c->c->Goodbye();
  {
    nasgw::MutexLock l(c->c->mu);
    c->c->closing = true;
    c->c->cv.NotifyAll();
  }
  for (auto& k : c->c->conns) k->Kick();
  for (auto& k : c->c->conns) k->Join();
  c->c->sender.join();
  c->c->Expire();
  delete c;
}

const char* nasgw_client_last_message(void) {
  return nasgw::client::t_message.c_str();
}

int nasgw_client_node_name(nasgw_client* c, char* buf, size_t size) {
  if (c == nullptr || buf == nullptr || size == 0) return -EINVAL;
  nasgw::MutexLock l(c->c->mu);
  const std::string n = c->c->node_name;
  if (n.size() >= size) return -ERANGE;
  std::memcpy(buf, n.c_str(), n.size() + 1);
  return 0;
}

uint64_t nasgw_client_write_verifier(nasgw_client* c) {
  return c == nullptr ? 0 : c->c->write_verifier.load();
}

uint32_t nasgw_client_held_files(nasgw_client* c) {
  if (c == nullptr) return 0;
  nasgw::MutexLock l(c->c->vmu);
  return static_cast<uint32_t>(c->c->held.size() + (c->c->held_overflow != 0 ? 1 : 0));
}

int nasgw_mount(nasgw_client* c, const nasgw_cred* cr, const char* volume, nasgw_attr* root) {
  return nasgw_mount_path(c, cr, volume, "", root);
}

int nasgw_mount_path(nasgw_client* c, const nasgw_cred* cr, const char* volume, const char* path, nasgw_attr* root) {
  if (c == nullptr || BadName(volume) || path == nullptr) return -EINVAL;
  auto call = Make(Op::kMount, cr, nullptr, [&](proto::Request& r) {
    r.name = volume;
    r.name2 = path;
  });
  int rc = c->c->Sync(call);
  if (rc == 0) {
    // The directory MOUNT names is a scope of its own.
    ToC(call->reply.volume.volume, call->reply.volume.root.ino, call->reply.volume.root, call->reply.mac, root);
  }
  return rc;
}

int nasgw_statfs(nasgw_client* c, const nasgw_cred* cr, uint32_t volume, nasgw_fs_stats* out) {
  if (c == nullptr || Bad(out)) return -EINVAL;
  auto call = Make(Op::kStatfs, cr, nullptr, [&](proto::Request& r) { r.h.volume = volume; });
  int rc = c->c->Sync(call);
  if (rc == 0) *out = {call->reply.statfs.total_bytes, call->reply.statfs.free_bytes, call->reply.statfs.files};
  return rc;
}

int nasgw_lookup(nasgw_client* c, const nasgw_cred* cr, const nasgw_handle* dir, const char* name, nasgw_attr* out) {
  if (BadName(name)) return -EINVAL;
  return Simple(
      c, Op::kLookup, cr, dir, [&](proto::Request& r) { r.name = name; }, out);
}

int nasgw_getattr(nasgw_client* c, const nasgw_cred* cr, const nasgw_handle* h, nasgw_attr* out) {
  return Simple(c, Op::kGetAttr, cr, h, {}, out);
}

int nasgw_get_inode(nasgw_client* c, const nasgw_cred* cr, const nasgw_handle* dir, uint64_t ino, nasgw_attr* out) {
  if (ino == 0) return -EINVAL;
  return Simple(
      c, Op::kGetInode, cr, dir, [&](proto::Request& r) { r.offset = ino; }, out);
}

int nasgw_setattr(nasgw_client* c, const nasgw_cred* cr, const nasgw_handle* h, const nasgw_sattr* s, nasgw_attr* out) {
  if (Bad(s)) return -EINVAL;
  return Simple(
      c, Op::kSetAttr, cr, h,
      [&](proto::Request& r) {
        r.set.mask = s->mask;
        r.set.mode = s->mode;
        r.set.uid = s->uid;
        r.set.gid = s->gid;
        r.set.size = s->size;
        r.set.atime = T(s->atime);
        r.set.mtime = T(s->mtime);
      },
      out);
}

int nasgw_access(nasgw_client* c, const nasgw_cred* cr, const nasgw_handle* h, uint32_t want, uint32_t* granted) {
  if (c == nullptr || h == nullptr) return -EINVAL;
  auto call = Make(Op::kAccess, cr, h, [&](proto::Request& r) { r.count = want; });
  int rc = c->c->Sync(call);
  if (rc == 0 && granted != nullptr) *granted = call->reply.u32;
  return rc;
}

int nasgw_create(nasgw_client* c, const nasgw_cred* cr, const nasgw_handle* dir, const char* name, uint32_t type,
                 uint32_t mode, uint64_t rdev, const char* symlink, uint32_t flags, nasgw_attr* out) {
  if (BadName(name) || type < 1 || type > 7) return -EINVAL;
  nasgw_attr a{};
  const uint64_t open_id = (c != nullptr && (flags & NASGW_CREATE_OPEN)) ? c->c->next_open_id++ : 0;
  int rc = Simple(
      c, Op::kCreate, cr, dir,
      [&](proto::Request& r) {
        r.name = name;
        r.type = static_cast<proto::FileType>(type);
        r.mode = mode & 07777;
        r.offset = rdev;
        r.name2 = symlink != nullptr ? symlink : "";
        r.flags = flags & 0xffffu;
        if (flags & proto::kCreateUmask) r.count = (flags >> 16) & 0777u;
        r.open_id = open_id;
      },
      &a);
  if (rc == 0 && (flags & NASGW_CREATE_OPEN)) NoteOpen(*c->c, cr, a.handle, open_id);
  if (rc == 0 && out != nullptr) *out = a;
  return rc;
}

int nasgw_link(nasgw_client* c, const nasgw_cred* cr, const nasgw_handle* h, const nasgw_handle* dir, const char* name,
               nasgw_attr* out) {
  if (BadName(name) || dir == nullptr) return -EINVAL;
  return Simple(
      c, Op::kLink, cr, h,
      [&](proto::Request& r) {
        r.h2 = H(dir);
        r.name = name;
      },
      out);
}

int nasgw_unlink(nasgw_client* c, const nasgw_cred* cr, const nasgw_handle* dir, const char* name) {
  if (BadName(name)) return -EINVAL;
  return Simple(
      c, Op::kUnlink, cr, dir, [&](proto::Request& r) { r.name = name; }, nullptr);
}

int nasgw_rmdir(nasgw_client* c, const nasgw_cred* cr, const nasgw_handle* dir, const char* name) {
  if (BadName(name)) return -EINVAL;
  return Simple(
      c, Op::kRmdir, cr, dir, [&](proto::Request& r) { r.name = name; }, nullptr);
}

int nasgw_rename(nasgw_client* c, const nasgw_cred* cr, const nasgw_handle* dir, const char* name,
                 const nasgw_handle* newdir, const char* newname, uint32_t flags) {
  if (BadName(name) || BadName(newname) || newdir == nullptr) return -EINVAL;
  return Simple(
      c, Op::kRename, cr, dir,
      [&](proto::Request& r) {
        r.name = name;
        r.h2 = H(newdir);
        r.name2 = newname;
        r.flags = flags;
      },
      nullptr);
}

namespace {
int CopyText(const std::string& t, char* buf, size_t size) {
  if (buf != nullptr && size > 0) {
    size_t n = std::min(t.size(), size - 1);
    std::memcpy(buf, t.data(), n);
    buf[n] = '\0';
  }
  return static_cast<int>(t.size());
}
}  // namespace

int nasgw_readlink(nasgw_client* c, const nasgw_cred* cr, const nasgw_handle* h, char* buf, size_t size) {
  if (c == nullptr || h == nullptr) return -EINVAL;
  auto call = Make(Op::kReadLink, cr, h, {});
  int rc = c->c->Sync(call);
  return rc != 0 ? rc : CopyText(call->reply.text, buf, size);
}

int nasgw_readdir(nasgw_client* c, const nasgw_cred* cr, const nasgw_handle* dir, uint64_t cookie, uint32_t max,
                  uint32_t flags, nasgw_dirent* entries, nasgw_attr* attrs, uint32_t* count, int* eof) {
  if (flags & NASGW_READDIR_XATTRS) return -EINVAL;
  return nasgw_readdir_xattrs(c, cr, dir, cookie, max, flags, entries, attrs, nullptr, count, eof);
}

int nasgw_readdir_xattrs(nasgw_client* c, const nasgw_cred* cr, const nasgw_handle* dir, uint64_t cookie, uint32_t max,
                         uint32_t flags, nasgw_dirent* entries, nasgw_attr* attrs, nasgw_entry_xattrs* xattrs,
                         uint32_t* count, int* eof) {
  if (c == nullptr || dir == nullptr || entries == nullptr || count == nullptr || max == 0 || max > NASGW_READDIR_MAX ||
      ((flags & NASGW_READDIR_PLUS) && attrs == nullptr) ||
      ((flags & NASGW_READDIR_XATTRS) && (xattrs == nullptr || !(flags & NASGW_READDIR_PLUS))) ||
      (flags & ~(NASGW_READDIR_PLUS | NASGW_READDIR_XATTRS | NASGW_READDIR_SNAPSHOT_DIR))) {
    return -EINVAL;
  }
  auto call = Make(Op::kReadDir, cr, dir, [&](proto::Request& r) {
    r.offset = cookie;
    r.count = max;
    r.flags = flags;
  });
  int rc = c->c->Sync(call);
  if (rc != 0) return rc;
  const auto& rep = call->reply;
  if (rep.entries.size() > max) return -EPROTO;
  *count = static_cast<uint32_t>(rep.entries.size());
  for (size_t i = 0; i < rep.entries.size(); i++) {
    const auto& e = rep.entries[i];
    nasgw_dirent& d = entries[i];
    CopyText(e.name, d.name, sizeof(d.name));
    d.ino = e.ino;
    d.type = static_cast<uint32_t>(e.type);
    d.cookie = e.cookie;
    if (flags & NASGW_READDIR_PLUS) {
      if (i >= rep.attrs.size()) return -EPROTO;  // nasgwd sends one per entry
      if (i >= rep.macs.size()) return -EPROTO;
      ToC(dir->volume, dir->scope, rep.attrs[i], rep.macs[i], &attrs[i]);
    }
    if (flags & NASGW_READDIR_XATTRS) {
      if (i >= rep.xattrs.size()) return -EPROTO;
      PackXattrs(rep.xattrs[i], &xattrs[i]);
    }
  }
  if (eof != nullptr) *eof = rep.eof ? 1 : 0;
  return 0;
}

int64_t nasgw_entry_getxattr(const nasgw_entry_xattrs* x, const char* name, void* buf, size_t size) {
  if (x == nullptr || BadName(name)) return -EINVAL;
  if (!x->carried) return -EAGAIN;
  std::optional<int64_t> got;
  EachPacked(*x, [&](std::string_view n, std::string_view v) {
    if (n != name) return true;
    got = CopyOut(v, buf, size);
    return false;
  });
  return got.value_or(-ENODATA);
}

int64_t nasgw_entry_listxattr(const nasgw_entry_xattrs* x, char* buf, size_t size) {
  if (x == nullptr) return -EINVAL;
  if (!x->carried) return -EAGAIN;
  std::string all;
  EachPacked(*x, [&](std::string_view n, std::string_view) {
    all.append(n).push_back('\0');
    return true;
  });
  return CopyOut(all, buf, size);
}

int nasgw_find_caseless(nasgw_client* c, const nasgw_cred* cr, const nasgw_handle* dir, const char* name, char* out,
                        size_t size) {
  if (c == nullptr || dir == nullptr || BadName(name)) return -EINVAL;
  auto call = Make(Op::kFindCaseless, cr, dir, [&](proto::Request& r) { r.name = name; });
  int rc = c->c->Sync(call);
  return rc != 0 ? rc : CopyText(call->reply.text, out, size);
}

int nasgw_open(nasgw_client* c, const nasgw_cred* cr, const nasgw_handle* h, uint32_t access, nasgw_attr* out) {
  if (c == nullptr || h == nullptr) return -EINVAL;
  const uint64_t open_id = c->c->next_open_id++;
  auto call = Make(Op::kOpen, cr, h, [&](proto::Request& r) {
    r.count = access & 7;
    r.open_id = open_id;
  });
  // Noted before it is sent: a re-open on a restarted nasgwd while this call
  // is in flight must include it.
  if (call->invalid == 0) NoteOpen(*c->c, cr, *h, open_id);
  int rc = c->c->Sync(call);
  if (rc != 0) {
    if (call->invalid == 0) ForgetOpen(*c->c, h->volume, h->ino, open_id);
    return rc;
  }
  ToC(h->volume, h->scope, call->reply.attr, call->reply.mac, out);
  return 0;
}

int nasgw_release(nasgw_client* c, const nasgw_cred* cr, const nasgw_handle* h) {
  if (c == nullptr || h == nullptr) return -EINVAL;
  uint64_t open_id = 0;
  {
    nasgw::MutexLock l(c->c->open_mu);
    auto it = c->c->opens.find({h->volume, h->ino});
    if (it == c->c->opens.end() || it->second.ids.empty()) return -EBADF;
    open_id = it->second.ids.back();
    it->second.ids.pop_back();
    if (it->second.ids.empty()) c->c->opens.erase(it);
  }
  auto call = Make(Op::kRelease, cr, h, [&](proto::Request& r) { r.open_id = open_id; });
  return c->c->Sync(call);
}

int64_t nasgw_read(nasgw_client* c, const nasgw_cred* cr, const nasgw_handle* h, uint64_t offset, void* buf,
                   uint32_t len, int* eof) {
  if (c == nullptr || h == nullptr || (buf == nullptr && len > 0) || len > NASGW_IO_MAX) return -EINVAL;
  auto call = Make(Op::kRead, cr, h, [&](proto::Request& r) {
    r.offset = offset;
    r.count = len;
  });
  call->rbuf = static_cast<uint8_t*>(buf);
  call->rlen = len;
  int rc = c->c->Sync(call);
  if (rc != 0) return rc;
  if (eof != nullptr) *eof = call->reply.eof ? 1 : 0;
  return call->nread;
}

int64_t nasgw_write(nasgw_client* c, const nasgw_cred* cr, const nasgw_handle* h, uint64_t offset, const void* buf,
                    uint32_t len, uint32_t stable, nasgw_write_result* out) {
  if (c == nullptr || h == nullptr || (buf == nullptr && len > 0) || len > NASGW_IO_MAX) return -EINVAL;
  auto call = WriteCall(cr, h, offset, buf, len, stable);
  int rc = c->c->Sync(call);
  if (rc != 0) return rc;
  ToC(*h, call->reply, out);
  return call->reply.u32;
}

int nasgw_fsync(nasgw_client* c, const nasgw_cred* cr, const nasgw_handle* h, uint64_t* verifier) {
  if (c == nullptr || h == nullptr) return -EINVAL;
  auto call = FsyncCall(c, cr, h);
  int rc = c->c->Sync(call);
  if (rc == 0 && verifier != nullptr) *verifier = call->reply.verifier;
  return rc;
}

int nasgw_fsync_async(nasgw_client* c, const nasgw_cred* cr, const nasgw_handle* h, nasgw_fsync_done done, void* arg) {
  if (c == nullptr || h == nullptr || done == nullptr) return -EINVAL;
  auto call = FsyncCall(c, cr, h);
  call->done = [done, arg](Call& k) { done(arg, -k.err, k.err == 0 ? k.reply.verifier : 0); };
  c->c->Submit(call);
  return 0;
}

int nasgw_fallocate(nasgw_client* c, const nasgw_cred* cr, const nasgw_handle* h, uint32_t mode, uint64_t offset,
                    uint64_t len, nasgw_attr* out) {
  return Simple(
      c, Op::kFallocate, cr, h,
      [&](proto::Request& r) {
        r.flags = mode;
        r.offset = offset;
        r.length = len;
      },
      out);
}

int nasgw_seek(nasgw_client* c, const nasgw_cred* cr, const nasgw_handle* h, uint64_t offset, int hole, uint64_t* out) {
  if (c == nullptr || h == nullptr || out == nullptr) return -EINVAL;
  auto call = Make(Op::kSeek, cr, h, [&](proto::Request& r) {
    r.flags = hole ? proto::kSeekHole : proto::kSeekData;
    r.offset = offset;
  });
  int rc = c->c->Sync(call);
  if (rc == 0) *out = call->reply.offset;
  return rc;
}

int64_t nasgw_getxattr(nasgw_client* c, const nasgw_cred* cr, const nasgw_handle* h, const char* name, void* buf,
                       size_t size) {
  if (c == nullptr || h == nullptr || BadName(name)) return -EINVAL;
  auto call = Make(Op::kGetXattr, cr, h, [&](proto::Request& r) { r.name = name; });
  int rc = c->c->Sync(call);
  if (rc != 0) return rc;
  return CopyOut(call->reply.text, buf, size);
}

int nasgw_setxattr(nasgw_client* c, const nasgw_cred* cr, const nasgw_handle* h, const char* name, const void* value,
                   size_t len, uint32_t flags) {
  if (BadName(name) || (value == nullptr && len > 0)) return -EINVAL;
  if (len > (64u << 10)) return -E2BIG;
  return Simple(
      c, Op::kSetXattr, cr, h,
      [&](proto::Request& r) {
        r.name = name;
        r.value.assign(static_cast<const char*>(value), len);
        r.flags = flags;
      },
      nullptr);
}

int64_t nasgw_listxattr(nasgw_client* c, const nasgw_cred* cr, const nasgw_handle* h, char* buf, size_t size) {
  if (c == nullptr || h == nullptr) return -EINVAL;
  auto call = Make(Op::kListXattr, cr, h, {});
  int rc = c->c->Sync(call);
  if (rc != 0) return rc;
  std::string all;
  for (const auto& n : call->reply.names) {
    all += n;
    all += '\0';
  }
  return CopyOut(all, buf, size);  // the names, each with its NUL, as listxattr(2) returns them
}

int nasgw_removexattr(nasgw_client* c, const nasgw_cred* cr, const nasgw_handle* h, const char* name) {
  if (BadName(name)) return -EINVAL;
  return Simple(
      c, Op::kRemoveXattr, cr, h, [&](proto::Request& r) { r.name = name; }, nullptr);
}

int nasgw_read_async(nasgw_client* c, const nasgw_cred* cr, const nasgw_handle* h, uint64_t offset, void* buf,
                     uint32_t len, nasgw_io_done done, void* arg) {
  if (c == nullptr || h == nullptr || done == nullptr || (buf == nullptr && len > 0) || len > NASGW_IO_MAX) {
    return -EINVAL;
  }
  auto call = Make(Op::kRead, cr, h, [&](proto::Request& r) {
    r.offset = offset;
    r.count = len;
  });
  call->rbuf = static_cast<uint8_t*>(buf);
  call->rlen = len;
  call->done = [done, arg](Call& k) {
    done(arg, k.err != 0 ? -k.err : static_cast<int64_t>(k.nread), k.err == 0 && k.reply.eof ? 1 : 0);
  };
  c->c->Submit(call);
  return 0;
}

int nasgw_write_async(nasgw_client* c, const nasgw_cred* cr, const nasgw_handle* h, uint64_t offset, const void* buf,
                      uint32_t len, uint32_t stable, nasgw_write_done done, void* arg) {
  if (c == nullptr || h == nullptr || done == nullptr || (buf == nullptr && len > 0) || len > NASGW_IO_MAX) {
    return -EINVAL;
  }
  auto call = WriteCall(cr, h, offset, buf, len, stable);
  const nasgw_handle file = *h;
  call->done = [done, arg, file](Call& k) {
    if (k.err != 0) return done(arg, -k.err, nullptr);
    nasgw_write_result r{};
    ToC(file, k.reply, &r);
    done(arg, static_cast<int64_t>(k.reply.u32), &r);
  };
  c->c->Submit(call);
  return 0;
}

int nasgw_getattr_async(nasgw_client* c, const nasgw_cred* cr, const nasgw_handle* h, nasgw_attr_done done, void* arg) {
  if (c == nullptr || h == nullptr || done == nullptr) return -EINVAL;
  auto call = Make(Op::kGetAttr, cr, h, {});
  const uint32_t vol = h->volume;
  const uint64_t scope = h->scope;
  call->done = [done, arg, vol, scope](Call& k) {
    nasgw_attr a{};
    if (k.err == 0) ToC(vol, scope, k.reply.attr, k.reply.mac, &a);
    done(arg, -k.err, k.err == 0 ? &a : nullptr);
  };
  c->c->Submit(call);
  return 0;
}

// Locks and unlocks are recorded once nasgwd granted them. A re-lock on a
// nasgwd that lost the session (Conn::Relock) may have run while the call
// was out, without it (a lock granted by the old nasgwd) or with it (a range
// unlocked meanwhile): then the call is sent again (it is idempotent) before
// it is recorded.
int nasgw_lock(nasgw_client* c, const nasgw_cred* cr, const nasgw_handle* h, uint64_t owner, uint32_t type,
               uint64_t start, uint64_t length, nasgw_lock_info* conflict) {
  return nasgw_lock_flags(c, cr, h, owner, type, start, length, 0, conflict);
}

int nasgw_lock_flags(nasgw_client* c, const nasgw_cred* cr, const nasgw_handle* h, uint64_t owner, uint32_t type,
                     uint64_t start, uint64_t length, uint32_t flags, nasgw_lock_info* conflict) {
  if (c == nullptr || h == nullptr) return -EINVAL;
  if ((flags & ~NASGW_LOCK_RECLAIM) != 0) {
    nasgw::client::t_message = "unknown lock flags";
    return -EINVAL;
  }
  nasgw::client::Client& cl = *c->c;
  for (uint32_t attempt = 1;; attempt++) {
    uint64_t epoch = 0;
    {
      nasgw::MutexLock l(cl.open_mu);
      const auto* held = FindOwner(cl, h, owner);
      if (held != nullptr && held->lost) {
        nasgw::client::t_message = kLocksLost;
        return -ENOLCK;
      }
      epoch = cl.relock_epoch;
    }
    auto call = LockCall(Op::kLock, cr, h, owner, type, start, length, flags);
    const int rc = cl.Sync(call);
    if (rc == -EAGAIN) ToC(call->reply.lock, conflict);
    if (rc != 0) return rc;
    nasgw::MutexLock l(cl.open_mu);
    if (cl.relock_epoch != epoch) {
      if (attempt < nasgw::client::kResendMax) continue;
      nasgw::client::t_message = "nasgwd lost the session under this lock call too many times";
      return -EIO;
    }
    uint64_t end = 0;
    proto::LockRangeEnd(start, length, &end);  // checked by the decoder
    auto& file = cl.locks[{h->volume, h->ino}];
    file.handle = H(h);
    auto& held = file.owners[owner];
    held.creds = Creds(cr);
    proto::AddLockRange(held.ranges, {start, end, type});
    return 0;
  }
}

int nasgw_share(nasgw_client* c, const nasgw_cred* cr, const nasgw_handle* h, uint64_t owner, uint32_t access,
                uint32_t deny) {
  if (c == nullptr || h == nullptr) return -EINVAL;
  if (((access | deny) & ~proto::kShareAll) != 0) {
    nasgw::client::t_message = "unknown share access or deny bits";
    return -EINVAL;
  }
  nasgw::client::Client& cl = *c->c;
  nasgw::client::HeldShare v;
  v.access = access;
  v.deny = deny;
  return SetHeld(cl, &nasgw::client::Client::shares, cr, h, owner, v, access == 0 && deny == 0, "share");
}

int nasgw_lease(nasgw_client* c, const nasgw_cred* cr, const nasgw_handle* h, uint64_t owner, uint32_t type) {
  if (c == nullptr || h == nullptr) return -EINVAL;
  if (!proto::LeaseTypeOk(type)) {
    nasgw::client::t_message = "lease type must be 0, NASGW_LEASE_READ or NASGW_LEASE_READ | NASGW_LEASE_WRITE";
    return -EINVAL;
  }
  nasgw::client::Client& cl = *c->c;
  nasgw::client::HeldLease v;
  v.type = type;
  return SetHeld(cl, &nasgw::client::Client::leases, cr, h, owner, v, type == 0, "lease");
}

int nasgw_unlock(nasgw_client* c, const nasgw_cred* cr, const nasgw_handle* h, uint64_t owner, uint64_t start,
                 uint64_t length) {
  if (c == nullptr || h == nullptr) return -EINVAL;
  nasgw::client::Client& cl = *c->c;
  for (uint32_t attempt = 1;; attempt++) {
    uint64_t epoch = 0;
    {
      nasgw::MutexLock l(cl.open_mu);
      const auto* held = FindOwner(cl, h, owner);
      if (held != nullptr && held->lost) {
        if (start != 0 || length != 0) {
          nasgw::client::t_message = kLocksLost;
          return -ENOLCK;
        }
        DropOwner(cl, h, owner);  // the whole file: the mark is cleared, and nasgwd told below
      }
      epoch = cl.relock_epoch;
    }
    auto call = LockCall(Op::kUnlock, cr, h, owner, 0, start, length);
    const int rc = cl.Sync(call);
    if (rc != 0) return rc;
    nasgw::MutexLock l(cl.open_mu);
    if (cl.relock_epoch != epoch) {
      if (attempt < nasgw::client::kResendMax) continue;
      nasgw::client::t_message = "nasgwd lost the session under this unlock call too many times";
      return -EIO;
    }
    auto* held = FindOwner(cl, h, owner);
    if (held != nullptr) {
      uint64_t end = 0;
      proto::LockRangeEnd(start, length, &end);
      proto::RemoveLockRange(held->ranges, start, end);
      if (held->ranges.empty() && !held->lost) DropOwner(cl, h, owner);
    }
    return 0;
  }
}

int nasgw_testlock(nasgw_client* c, const nasgw_cred* cr, const nasgw_handle* h, uint64_t owner, uint32_t type,
                   uint64_t start, uint64_t length, nasgw_lock_info* conflict) {
  if (c == nullptr || h == nullptr || conflict == nullptr) return -EINVAL;
  auto call = LockCall(Op::kTestLock, cr, h, owner, type, start, length);
  const int rc = c->c->Sync(call);
  if (rc == 0) ToC(call->reply.lock, conflict);
  return rc;
}

}  // extern "C"
