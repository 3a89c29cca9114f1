#include "cluster/mirror.h"

#include <fcntl.h>
#include <poll.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "base/clock.h"
#include "base/coding.h"
#include "base/log.h"
#include "base/sockaddr.h"
#include "cluster/message.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/ioctl.h>

namespace nasgw::cluster {
namespace {

constexpr uint16_t kMirrorVersion = 1;
constexpr uint8_t kModeStream = 1, kModeFetch = 2;
enum Frame : uint8_t { kHello = 1, kEntry = 2, kRelease = 3, kAck = 4, kRefuse = 5, kTail = 6 };
constexpr size_t kFrameHeader = 5;  // u32 length (of type and payload), u8 type
// A frame holds one entry (at most an intent log record), a hello, or a
// fetch's answer (everything held).
constexpr uint32_t kFrameMax = static_cast<uint32_t>(2 * kMirrorBytesMax);  // entries and their 12-byte headers
// A partner answers what arrived together, and at least every this many
// entries under a steady stream.
constexpr uint64_t kAckEvery = 64;
// Entries one write of the sender carries at most.
constexpr size_t kSendBatchBytes = 1u << 20;

std::string Errno(int e) {
  return std::strerror(e);
}

void AppendFrame(std::string* out, Frame type, std::string_view payload) {
  uint8_t h[kFrameHeader];
  PutFixed32(h, static_cast<uint32_t>(payload.size() + 1));
  h[4] = type;
  out->append(reinterpret_cast<const char*>(h), kFrameHeader);
  out->append(payload);
}

bool WriteAll(int fd, std::string_view b) {
  while (!b.empty()) {
    const ssize_t n = ::send(fd, b.data(), b.size(), MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    b.remove_prefix(static_cast<size_t>(n));
  }
  return true;
}

bool ReadAll(int fd, char* p, size_t n) {
  while (n > 0) {
    const ssize_t r = ::recv(fd, p, n, 0);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return false;
    p += r;
    n -= static_cast<size_t>(r);
  }
  return true;
}

// One frame; false at the end of the stream or a frame too large.
bool ReadFrame(int fd, Frame* type, std::string* payload) {
  char h[kFrameHeader];
  if (!ReadAll(fd, h, sizeof(h))) return false;
  const uint32_t len = GetFixed32(reinterpret_cast<const uint8_t*>(h));
  if (len < 1 || len > kFrameMax) return false;
  *type = static_cast<Frame>(static_cast<uint8_t>(h[4]));
  payload->resize(len - 1);
  return ReadAll(fd, payload->data(), payload->size());
}

std::string EncodeHello(uint8_t mode, const MirrorHello& h) {
  Encoder e;
  e.U16(kMirrorVersion);
  e.U8(mode);
  PutUuid(e, h.reserve);
  e.U32(h.domain);
  e.U64(h.salt);
  e.U64(h.session);
  e.U64(h.first_lsn);
  e.Str16(h.sender);
  return e.Release();
}

// A connected socket to `peer`, at most kMirrorConnectTimeoutMs.
Result<int> Dial(const std::string& peer) {
  return DialTcp(peer, kMirrorConnectTimeoutMs, kMirrorSendTimeoutMs, "mirror partner");
}

}  // namespace

// ---- the partner's side ----------------------------------------------------

struct MirrorServer::Store {
  std::string sender;
  uint64_t salt = 0, session = 0;
  std::map<uint64_t, std::string> entries;  // by LSN
  uint64_t bytes = 0, received = 0;
  int fd = -1;  // the stream feeding it (-1: none)
  bool frozen = false;
  bool streamed = false;  // a stream was taken since the last Drop
  void Release(uint64_t durable) {
    while (!entries.empty() && entries.begin()->first <= durable) {
      bytes -= entries.begin()->second.size();
      entries.erase(entries.begin());
    }
  }
};

Result<std::unique_ptr<MirrorServer>> MirrorServer::Start(const std::string& listen, const std::string& peer,
                                                          uint32_t hello_timeout_ms) {
  std::unique_ptr<MirrorServer> s(new MirrorServer());
  s->hello_timeout_ms_ = hello_timeout_ms;
  socklen_t plen = 0;
  auto p = ParseSockAddr(peer, &plen, "[cluster] mirror_peer");
  if (!p.ok()) return p.status();
  s->peer_ = *p;
  auto fd = ListenTcp(listen, 8, "mirror listen", &s->port_);
  if (!fd.ok()) return fd.status();
  s->listen_fd_ = *fd;
  s->accept_thread_ = std::thread([srv = s.get()] { srv->AcceptLoop(); });
  return s;
}

MirrorServer::~MirrorServer() {
  {
    MutexLock l(mu_);
    stop_ = true;
    for (int fd : conns_) ::shutdown(fd, SHUT_RDWR);
  }
  if (listen_fd_ >= 0) ::shutdown(listen_fd_, SHUT_RDWR);
  if (accept_thread_.joinable()) accept_thread_.join();
  MutexLock l(mu_);
  cv_.Wait(mu_, [&]() REQUIRES(mu_) { return serving_ == 0; });
  if (listen_fd_ >= 0) ::close(listen_fd_);
}

void MirrorServer::AcceptLoop() {
  for (;;) {
    sockaddr_storage from{};
    socklen_t fl = sizeof(from);
    const int fd = ::accept4(listen_fd_, reinterpret_cast<sockaddr*>(&from), &fl, SOCK_CLOEXEC);
    {
      MutexLock l(mu_);
      if (stop_) {
        if (fd >= 0) ::close(fd);
        return;
      }
    }
    if (fd < 0) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      NASGW_LOG(kWarn, "cluster") << "mirror accept failed" << Kv("error", Errno(errno));
      std::this_thread::sleep_for(std::chrono::milliseconds(100));  // out of descriptors: do not spin
      continue;
    }
    if (!SameHost(from, peer_)) {
      NASGW_LOG(kWarn, "cluster") << "mirror connection refused: not the partner" << Kv("from", HostText(from));
      ::close(fd);
      continue;
    }
    MutexLock l(mu_);
    if (stop_ || serving_ >= kConnectionsMax) {
      ::close(fd);
      if (stop_) return;
      continue;
    }
    serving_++;
    conns_.push_back(fd);
    std::thread([this, fd] {
      Serve(fd);
      MutexLock done(mu_);
      std::erase(conns_, fd);
      ::close(fd);
      serving_--;
      cv_.NotifyAll();
    }).detach();
  }
}

MirrorServer::Store* MirrorServer::StoreLocked(const Uuid& reserve, uint32_t domain) {
  auto& s = stores_[{reserve, domain}];
  if (!s) s = std::make_unique<Store>();
  return s.get();
}

void MirrorServer::Serve(int fd) {
  SetSocketTimeout(fd, SO_SNDTIMEO, kMirrorSendTimeoutMs);
  // The hello comes at once or not at all: a partner that died in the
  // handshake must not hold one of the few connections for ever.
  SetSocketTimeout(fd, SO_RCVTIMEO, hello_timeout_ms_);
  Frame type{};
  std::string payload;
  auto refuse = [&](const std::string& why) {
    std::string out;
    AppendFrame(&out, kRefuse, why);
    WriteAll(fd, out);
    NASGW_LOG(kWarn, "cluster") << "mirror refused" << Kv("why", why);
  };
  if (!ReadFrame(fd, &type, &payload) || type != kHello) return;
  Decoder d(payload);
  const uint16_t version = d.U16();
  const uint8_t mode = d.U8();
  MirrorHello h;
  h.reserve = GetUuid(d);
  h.domain = d.U32();
  h.salt = d.U64();
  h.session = d.U64();
  h.first_lsn = d.U64();
  h.sender = d.Str16();
  if (version != kMirrorVersion) return refuse("mirror protocol version " + std::to_string(version));
  if (!d.ok()) return refuse("bad hello");
  if (mode == kModeFetch) {
    uint64_t salt = 0, session = 0;
    std::vector<std::pair<uint64_t, std::string>> entries;
    {
      MutexLock l(mu_);
      auto it = stores_.find({h.reserve, h.domain});
      if (it != stores_.end()) {
        salt = it->second->salt;
        session = it->second->session;
        entries.assign(it->second->entries.begin(), it->second->entries.end());
      }
    }
    Encoder e;
    e.U64(salt);
    e.U64(session);
    e.U32(static_cast<uint32_t>(entries.size()));
    for (const auto& [lsn, entry] : entries) {
      e.U64(lsn);
      e.Str32(entry);
    }
    std::string out;
    AppendFrame(&out, kTail, e.str());
    WriteAll(fd, out);
    return;
  }
  if (mode != kModeStream) return refuse("unknown mirror mode " + std::to_string(mode));
  // A stream may be idle for long (no writes): no read timeout, but
  // keepalives end it when the owner's machine is gone.
  SetSocketTimeout(fd, SO_RCVTIMEO, 0);
  SetKeepalive(fd, /*idle_s=*/5, /*interval_s=*/2, /*probes=*/3);
  Stream(fd, h);
}

void MirrorServer::Stream(int fd, const MirrorHello& h) {
  {
    MutexLock l(mu_);
    Store* s = StoreLocked(h.reserve, h.domain);
    if (s->frozen) {
      std::string out;
      AppendFrame(&out, kRefuse, "the partner is taking the domain over or serves it");
      WriteAll(fd, out);
      return;
    }
    if (s->fd >= 0) ::shutdown(s->fd, SHUT_RDWR);  // an older stream of the owner's
    // A new opening of the log: what the last one left is on the array (the
    // new opening replayed it) or was never answered.
    if (s->salt != h.salt || s->session != h.session) {
      s->entries.clear();
      s->bytes = 0;
    }
    s->salt = h.salt;
    s->session = h.session;
    s->sender = h.sender;
    s->received = 0;
    s->fd = fd;
    s->streamed = true;
    // A node serves one reserve: what is held of another (formatted over
    // since) that no stream feeds and no takeover froze is never asked for
    // again.
    std::erase_if(stores_, [&h](const auto& kv) {
      return kv.first.first != h.reserve && kv.second->fd < 0 && !kv.second->frozen;
    });
  }
  NASGW_LOG(kInfo, "cluster") << "mirror stream from the owner" << Kv("sender", h.sender)
                              << Kv("reserve", h.reserve.ToString()) << Kv("session", h.session)
                              << Kv("first_lsn", h.first_lsn);
  Frame type{};
  std::string payload;
  uint64_t last = 0, acked = 0;
  std::string why = "the owner closed it";
  while (ReadFrame(fd, &type, &payload)) {
    Decoder d(payload);
    bool refused = false;
    {
      MutexLock l(mu_);
      Store* s = StoreLocked(h.reserve, h.domain);
      if (s->fd != fd || s->frozen) {
        why = s->frozen ? "frozen for a takeover" : "replaced by a newer stream";
        break;
      }
      if (type == kEntry) {
        const uint64_t lsn = d.U64(), durable = d.U64();
        std::string_view entry = d.View(d.remaining());
        if (!d.ok() || (last != 0 && lsn != last + 1) || (last == 0 && lsn != h.first_lsn)) {
          why = "entry out of order";
          refused = true;
        } else if (s->bytes + entry.size() > kMirrorBytesMax ||
                   HeldBytesLocked(h.reserve) + entry.size() > kMirrorTotalBytesMax) {
          why = "the partner's mirror is full";
          refused = true;
        } else {
          s->entries[lsn] = std::string(entry);
          s->bytes += entry.size();
          s->received++;
          s->Release(durable);
          last = lsn;
        }
      } else if (type == kRelease) {
        s->Release(d.U64());
      }
      cv_.NotifyAll();
    }
    if (refused) {
      std::string out;
      AppendFrame(&out, kRefuse, why);
      WriteAll(fd, out);
      break;
    }
    // One answer for everything that arrived together.
    int pending = 0;
    if (last != acked && (last - acked >= kAckEvery || (::ioctl(fd, FIONREAD, &pending) == 0 && pending == 0))) {
      Encoder e;
      e.U64(last);
      std::string out;
      AppendFrame(&out, kAck, e.str());
      if (!WriteAll(fd, out)) break;
      acked = last;
    }
  }
  MutexLock l(mu_);
  Store* s = StoreLocked(h.reserve, h.domain);
  if (s->fd == fd) s->fd = -1;
  cv_.NotifyAll();
  NASGW_LOG(kInfo, "cluster") << "mirror stream ended" << Kv("sender", h.sender) << Kv("why", why)
                              << Kv("domain", h.domain) << Kv("held_entries", s->entries.size())
                              << Kv("held_first", s->entries.empty() ? 0 : s->entries.begin()->first)
                              << Kv("held_last", s->entries.empty() ? 0 : s->entries.rbegin()->first);
}

MirrorServer::Frozen MirrorServer::Freeze(const Uuid& reserve, uint32_t domain) {
  MutexLock l(mu_);
  Store* s = StoreLocked(reserve, domain);
  s->frozen = true;
  if (s->fd >= 0) ::shutdown(s->fd, SHUT_RDWR);
  // Every entry the stream answered is in the store: answers are sent by
  // the stream's thread after the entries went in, under this lock.
  Frozen f;
  f.streamed = s->streamed;
  if (s->entries.empty()) return f;
  f.tail = std::make_shared<fs::LogTail>();
  f.tail->salt = s->salt;
  f.tail->session = s->session;
  f.tail->entries.assign(s->entries.begin(), s->entries.end());
  return f;
}

void MirrorServer::Unfreeze(const Uuid& reserve, uint32_t domain) {
  MutexLock l(mu_);
  StoreLocked(reserve, domain)->frozen = false;
}

void MirrorServer::Drop(const Uuid& reserve, uint32_t domain) {
  MutexLock l(mu_);
  auto it = stores_.find({reserve, domain});
  if (it == stores_.end()) return;
  if (it->second->fd >= 0) ::shutdown(it->second->fd, SHUT_RDWR);
  it->second->entries.clear();
  it->second->bytes = 0;
  it->second->salt = it->second->session = 0;
  it->second->streamed = false;
}

std::vector<MirrorServer::Held> MirrorServer::held() const {
  MutexLock l(mu_);
  return HeldLocked();
}

bool MirrorServer::WaitHeld(const std::function<bool(const std::vector<Held>&)>& until, uint32_t ms) const {
  MutexLock l(mu_);
  return cv_.WaitFor(mu_, std::chrono::milliseconds(ms), [&]() REQUIRES(mu_) { return until(HeldLocked()); });
}

uint64_t MirrorServer::HeldBytesLocked(const Uuid& reserve) const {
  uint64_t n = 0;
  for (const auto& [key, s] : stores_) {
    if (key.first == reserve) n += s->bytes;
  }
  return n;
}

std::vector<MirrorServer::Held> MirrorServer::HeldLocked() const {
  std::vector<Held> out;
  for (const auto& [key, s] : stores_) {
    Held h;
    h.reserve = key.first;
    h.domain = key.second;
    h.sender = s->sender;
    h.session = s->session;
    h.entries = s->entries.size();
    h.bytes = s->bytes;
    h.first_lsn = s->entries.empty() ? 0 : s->entries.begin()->first;
    h.last_lsn = s->entries.empty() ? 0 : s->entries.rbegin()->first;
    h.received = s->received;
    h.connected = s->fd >= 0;
    h.frozen = s->frozen;
    out.push_back(std::move(h));
  }
  return out;
}

// ---- the owner's side -------------------------------------------------------

Result<std::shared_ptr<MirrorStream>> MirrorStream::Connect(const std::string& peer, uint64_t queue_bytes_max) {
  auto fd = Dial(peer);
  if (!fd.ok()) return fd.status();
  return std::shared_ptr<MirrorStream>(new MirrorStream(*fd, queue_bytes_max));
}

MirrorStream::~MirrorStream() {
  Close();
  ::close(fd_);
}

void MirrorStream::Start(const MirrorHello& hello, std::shared_ptr<fs::MirrorAcks> acks) {
  acks_ = std::move(acks);
  {
    MutexLock l(mu_);
    AppendFrame(&hello_, kHello, EncodeHello(kModeStream, hello));
    started_ = true;
    cv_.NotifyAll();
  }
  send_thread_ = std::thread([this] { SendLoop(); });
  receive_thread_ = std::thread([this] { ReceiveLoop(); });
}

void MirrorStream::Mirror(uint64_t lsn, std::string_view entry) {
  MutexLock l(mu_);
  if (broken_ || closed_) return;
  if (queued_bytes_ + entry.size() > queue_bytes_max_) {
    Break("more than " + std::to_string(queue_bytes_max_ >> 20) + " MiB queued for the partner");
    return;
  }
  queue_.emplace_back(lsn, std::string(entry));
  queued_bytes_ += entry.size();
  cv_.NotifyAll();
}

void MirrorStream::Durable(uint64_t lsn) {
  durable_.store(lsn, std::memory_order_relaxed);
}

void MirrorStream::Break(const std::string& why) {
  if (!broken_) {
    broken_ = true;
    why_ = why;
    NASGW_LOG(kWarn, "cluster") << "mirror stream broken: answers wait for the array" << Kv("why", why);
  }
  queue_.clear();
  queued_bytes_ = 0;
  ::shutdown(fd_, SHUT_RDWR);
  cv_.NotifyAll();
}

void MirrorStream::SendLoop() {
  std::string out;
  uint64_t released = 0;
  MutexLock l(mu_);
  out = std::move(hello_);
  for (;;) {
    if (!out.empty()) {
      l.Unlock();
      const bool ok = WriteAll(fd_, out);
      l.Lock();
      out.clear();
      if (!ok) {
        Break("send to the partner: " + Errno(errno));
        return;
      }
    }
    if (broken_ || closed_) return;
    if (queue_.empty()) {
      // Idle: tell the partner how far the array's log is, so it lets go.
      cv_.WaitFor(mu_, std::chrono::milliseconds(100),
                  [&]() REQUIRES(mu_) { return broken_ || closed_ || !queue_.empty(); });
      if (queue_.empty() && !broken_ && !closed_) {
        const uint64_t d = durable_.load(std::memory_order_relaxed);
        if (d > released) {
          Encoder e;
          e.U64(d);
          AppendFrame(&out, kRelease, e.str());
          released = d;
        }
      }
      continue;
    }
    const uint64_t durable = durable_.load(std::memory_order_relaxed);
    while (!queue_.empty() && out.size() < kSendBatchBytes) {
      auto& [lsn, entry] = queue_.front();
      Encoder e;
      e.U64(lsn);
      e.U64(durable);
      std::string payload = e.Release();
      payload.append(entry);
      AppendFrame(&out, kEntry, payload);
      queued_bytes_ -= entry.size();
      queue_.pop_front();
      sent_++;
    }
    released = durable;
  }
}

void MirrorStream::ReceiveLoop() {
  Frame type{};
  std::string payload;
  std::string why = "the partner closed the stream";
  while (ReadFrame(fd_, &type, &payload)) {
    if (type == kAck) {
      Decoder d(payload);
      const uint64_t lsn = d.U64();
      {
        MutexLock l(mu_);
        if (broken_ || closed_) break;
        acked_lsn_ = std::max(acked_lsn_, lsn);
      }
      acks_->Acked(lsn);
    } else if (type == kRefuse) {
      why = "the partner refused: " + payload;
      break;
    }
  }
  MutexLock l(mu_);
  if (!closed_) Break(why);
}

void MirrorStream::Close() {
  {
    MutexLock l(mu_);
    if (!closed_) {
      closed_ = true;
      ::shutdown(fd_, SHUT_RDWR);
      cv_.NotifyAll();
    }
  }
  if (send_thread_.joinable() && send_thread_.get_id() != std::this_thread::get_id()) send_thread_.join();
  if (receive_thread_.joinable() && receive_thread_.get_id() != std::this_thread::get_id()) receive_thread_.join();
}

bool MirrorStream::WaitBroken(uint32_t ms) {
  MutexLock l(mu_);
  return cv_.WaitFor(mu_, std::chrono::milliseconds(ms), [&]() REQUIRES(mu_) { return broken_ || closed_; });
}

MirrorStream::Stats MirrorStream::stats() const {
  MutexLock l(mu_);
  return Stats{sent_, acked_lsn_, queued_bytes_, broken_, why_};
}

Result<std::shared_ptr<fs::LogTail>> FetchMirror(const std::string& peer, const Uuid& reserve, uint32_t domain) {
  auto fd = Dial(peer);
  if (!fd.ok()) return fd.status();
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{*fd};
  SetSocketTimeout(*fd, SO_RCVTIMEO, 10'000);
  MirrorHello h;
  h.reserve = reserve;
  h.domain = domain;
  std::string out;
  AppendFrame(&out, kHello, EncodeHello(kModeFetch, h));
  if (!WriteAll(*fd, out)) return Status::Unavailable("mirror fetch from " + peer + ": " + Errno(errno));
  Frame type{};
  std::string payload;
  if (!ReadFrame(*fd, &type, &payload)) return Status::Unavailable("mirror fetch from " + peer + ": no answer");
  if (type == kRefuse) return Status::Unavailable("mirror fetch from " + peer + ": refused: " + payload);
  if (type != kTail) return Status::Corruption("mirror fetch from " + peer + ": unexpected frame");
  Decoder d(payload);
  auto t = std::make_shared<fs::LogTail>();
  t->salt = d.U64();
  t->session = d.U64();
  const uint32_t n = d.U32();
  for (uint32_t i = 0; i < n && d.ok(); i++) {
    const uint64_t lsn = d.U64();
    t->entries.emplace_back(lsn, d.Str32());
  }
  if (!d.done()) return Status::Corruption("mirror fetch from " + peer + ": bad answer");
  if (t->entries.empty()) return std::shared_ptr<fs::LogTail>();
  return t;
}

}  // namespace nasgw::cluster
