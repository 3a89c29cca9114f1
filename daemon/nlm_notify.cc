#include "daemon/nlm_notify.h"

#include <poll.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <random>
#include <system_error>

#include "base/log.h"
#include "cluster/message.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

namespace nasgw::daemon {

namespace fsys = std::filesystem;

Result<std::vector<std::string>> ListStatdClients(const std::string& statd_dir, bool* truncated) {
  if (truncated != nullptr) *truncated = false;
  std::vector<std::string> out;
  const fsys::path dir = fsys::path(statd_dir) / "sm";
  std::error_code ec;
  const bool there = fsys::exists(dir, ec);
  if (ec) return Status::IoError("look at " + dir.string() + ": " + ec.message());
  if (!there) return out;
  fsys::directory_iterator it(dir, ec);
  if (ec) return Status::IoError("list " + dir.string() + ": " + ec.message());
  for (const fsys::directory_iterator end; it != end; it.increment(ec)) {
    const auto st = it->symlink_status(ec);
    if (ec || !fsys::is_regular_file(st)) continue;
    std::string name = it->path().filename().string();
    if (!cluster::NlmClientOk(name)) continue;
    if (out.size() >= cluster::kNlmClientsMax) {
      if (truncated != nullptr) *truncated = true;
      break;
    }
    out.push_back(std::move(name));
  }
  // A failed step ends the iteration as if it were done: not a whole list.
  if (ec) return Status::IoError("list " + dir.string() + ": " + ec.message());
  std::sort(out.begin(), out.end());
  return out;
}

std::string EncodePartnerNlm(const std::vector<std::string>& names) {
  std::string out = std::string(kPartnerNlmHeader) + "\n";
  for (const std::string& n : names) {
    if (cluster::NlmClientOk(n)) out += n + "\n";
  }
  return out;
}

Result<std::vector<std::string>> DecodePartnerNlm(std::string_view text) {
  const std::string_view header = kPartnerNlmHeader;
  if (text.substr(0, header.size()) != header || text.substr(header.size(), 1) != "\n") {
    return Status::Corruption("not a list of the partner's NLM clients (its first line is not '" + std::string(header) +
                              "')");
  }
  text.remove_prefix(header.size() + 1);
  std::vector<std::string> out;
  while (!text.empty() && out.size() < cluster::kNlmClientsMax) {
    const size_t nl = text.find('\n');
    const std::string_view line = text.substr(0, nl);
    text.remove_prefix(nl == std::string_view::npos ? text.size() : nl + 1);
    if (cluster::NlmClientOk(line)) out.emplace_back(line);
  }
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

uint32_t NsmStateNow() {
  return static_cast<uint32_t>(std::time(nullptr)) | 1u;
}

namespace rpc {

namespace {

void Put32(std::string* s, uint32_t v) {
  const char b[4] = {static_cast<char>(v >> 24), static_cast<char>(v >> 16), static_cast<char>(v >> 8),
                     static_cast<char>(v)};
  s->append(b, 4);
}

// XDR reading: big-endian words, strings padded to four bytes.
class Xdr {
 public:
  explicit Xdr(std::string_view s) : s_(s) {}
  uint32_t U32() {
    if (!ok_ || s_.size() - at_ < 4) {
      ok_ = false;
      return 0;
    }
    const auto* p = reinterpret_cast<const unsigned char*>(s_.data() + at_);
    at_ += 4;
    return static_cast<uint32_t>(p[0]) << 24 | static_cast<uint32_t>(p[1]) << 16 | static_cast<uint32_t>(p[2]) << 8 |
           p[3];
  }
  // Variable-length opaque data of at most `max` bytes.
  std::string_view Opaque(size_t max) {
    const uint32_t n = U32();
    const size_t padded = (static_cast<size_t>(n) + 3) & ~size_t{3};
    if (!ok_ || n > max || s_.size() - at_ < padded) {
      ok_ = false;
      return {};
    }
    std::string_view v = s_.substr(at_, n);
    at_ += padded;
    return v;
  }
  std::string_view Rest() const { return ok_ ? s_.substr(at_) : std::string_view(); }
  bool ok() const { return ok_; }

 private:
  std::string_view s_;
  size_t at_ = 0;
  bool ok_ = true;
};

constexpr uint32_t kCall = 0, kReply = 1, kRpcVersion = 2, kMsgAccepted = 0, kSuccess = 0, kAuthNull = 0;
constexpr size_t kAuthBytesMax = 400;  // RFC 5531

}  // namespace

std::string Call(uint32_t xid, uint32_t prog, uint32_t vers, uint32_t proc, std::string_view args) {
  std::string s;
  for (uint32_t v : {xid, kCall, kRpcVersion, prog, vers, proc, kAuthNull, 0u, kAuthNull, 0u}) Put32(&s, v);
  s.append(args);
  return s;
}

std::string GetportArgs(uint32_t prog, uint32_t vers, uint32_t prot) {
  std::string s;
  for (uint32_t v : {prog, vers, prot, 0u}) Put32(&s, v);
  return s;
}

std::string NotifyArgs(std::string_view mon_name, uint32_t state) {
  std::string s;
  Put32(&s, static_cast<uint32_t>(mon_name.size()));
  s.append(mon_name);
  s.append((4 - mon_name.size() % 4) % 4, '\0');
  Put32(&s, state);
  return s;
}

std::optional<Reply> ParseReply(std::string_view bytes) {
  Xdr x(bytes);
  Reply r;
  r.xid = x.U32();
  if (x.U32() != kReply || !x.ok()) return std::nullopt;
  if (x.U32() != kMsgAccepted) return x.ok() ? std::optional<Reply>(r) : std::nullopt;  // denied: not a success
  x.U32();                                                                              // the verifier's flavour
  x.Opaque(kAuthBytesMax);                                                              // and body
  r.success = x.U32() == kSuccess;
  if (!x.ok()) return std::nullopt;
  if (r.success) r.results = std::string(x.Rest());
  return r;
}

std::optional<CallMsg> ParseCall(std::string_view bytes) {
  Xdr x(bytes);
  CallMsg c;
  c.xid = x.U32();
  if (x.U32() != kCall || x.U32() != kRpcVersion) return std::nullopt;
  c.prog = x.U32();
  c.vers = x.U32();
  c.proc = x.U32();
  for (int i = 0; i < 2; i++) {  // credentials, verifier
    x.U32();
    x.Opaque(kAuthBytesMax);
  }
  if (!x.ok()) return std::nullopt;
  c.args = std::string(x.Rest());
  return c;
}

std::string SuccessReply(uint32_t xid, std::string_view results) {
  std::string s;
  for (uint32_t v : {xid, kReply, kMsgAccepted, kAuthNull, 0u, kSuccess}) Put32(&s, v);
  s.append(results);
  return s;
}

}  // namespace rpc

namespace {

// A UDP socket bound to `addr` (host order), on a reserved port when one is
// free (as statd's peers expect of a server's notifications), else any.
int BoundSocket(uint32_t addr) {
  const int fd = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) return -1;
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_addr.s_addr = htonl(addr);
  for (int port = 1023; port >= 600; port--) {
    sa.sin_port = htons(static_cast<uint16_t>(port));
    if (::bind(fd, reinterpret_cast<sockaddr*>(&sa), sizeof(sa)) == 0) return fd;
    if (errno != EADDRINUSE) break;  // EACCES (no privilege), EADDRNOTAVAIL: no use trying others
  }
  sa.sin_port = 0;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&sa), sizeof(sa)) == 0) return fd;
  ::close(fd);
  return -1;
}

std::string Dotted(uint32_t addr) {
  in_addr a{htonl(addr)};
  char buf[INET_ADDRSTRLEN] = {};
  ::inet_ntop(AF_INET, &a, buf, sizeof(buf));
  return buf;
}

}  // namespace

NlmNotifyResult NotifyNlmClients(const std::vector<std::string>& clients, const std::vector<uint32_t>& from,
                                 uint32_t state, uint32_t timeout_ms, uint16_t pmap_port,
                                 const std::atomic<bool>* stop) {
  using Clock = std::chrono::steady_clock;
  NlmNotifyResult res;
  std::vector<uint32_t> addrs;
  for (size_t i = 0; i < clients.size() && i < cluster::kNlmClientsMax; i++) {
    in_addr a{};
    if (::inet_pton(AF_INET, clients[i].c_str(), &a) == 1) {
      addrs.push_back(ntohl(a.s_addr));
    } else {
      res.skipped++;
    }
  }
  if (addrs.empty() || from.empty()) return res;

  struct Pair {
    uint32_t client = 0;
    uint32_t from = 0;
    int fd = -1;
    uint16_t statd_port = 0;  // 0 until the client's portmapper has answered
    bool done = false;
    Clock::time_point due;
    Clock::duration interval = std::chrono::milliseconds(500);
  };
  std::vector<int> socks;
  std::vector<Pair> pairs;
  const Clock::time_point t0 = Clock::now();
  for (uint32_t f : from) {
    const int fd = BoundSocket(f);
    if (fd < 0) {
      const int e = errno;
      NASGW_LOG(kWarn, "nlm") << "cannot send SM_NOTIFY from an address (not on this machine?)"
                              << Kv("address", Dotted(f)) << Kv("error", std::strerror(e));
      res.unreachable += addrs.size();
      continue;
    }
    socks.push_back(fd);
    for (uint32_t c : addrs) {
      Pair p;
      p.client = c;
      p.from = f;
      p.fd = fd;
      p.due = t0;
      pairs.push_back(p);
    }
  }
  // xid = base + 2 * pair + (0: GETPORT, 1: SM_NOTIFY).
  const uint32_t base = static_cast<uint32_t>(std::random_device{}());  // (xid - base) is modular
  const Clock::time_point deadline = t0 + std::chrono::milliseconds(timeout_ms);
  size_t left = pairs.size();
  std::vector<pollfd> pfds;
  pfds.reserve(socks.size());
  for (int fd : socks) pfds.push_back({fd, POLLIN, 0});
  while (left > 0) {
    const Clock::time_point now = Clock::now();
    if (now >= deadline || (stop != nullptr && stop->load())) break;
    Clock::time_point next = deadline;
    for (size_t i = 0; i < pairs.size(); i++) {
      Pair& p = pairs[i];
      if (p.done) continue;
      if (p.due <= now) {
        sockaddr_in to{};
        to.sin_family = AF_INET;
        to.sin_addr.s_addr = htonl(p.client);
        const uint32_t xid = base + 2 * static_cast<uint32_t>(i);
        std::string msg;
        if (p.statd_port == 0) {
          to.sin_port = htons(pmap_port);
          msg = rpc::Call(xid, rpc::kPmapProg, rpc::kPmapVers, rpc::kPmapGetport,
                          rpc::GetportArgs(rpc::kNsmProg, rpc::kNsmVers, rpc::kIpprotoUdp));
        } else {
          to.sin_port = htons(p.statd_port);
          msg =
              rpc::Call(xid + 1, rpc::kNsmProg, rpc::kNsmVers, rpc::kNsmNotify, rpc::NotifyArgs(Dotted(p.from), state));
        }
        // A send that fails (no route yet, a full buffer) is retried as a
        // lost datagram is.
        (void)::sendto(p.fd, msg.data(), msg.size(), MSG_NOSIGNAL, reinterpret_cast<sockaddr*>(&to), sizeof(to));
        p.due = now + p.interval;
        p.interval = std::min<Clock::duration>(p.interval * 2, std::chrono::seconds(4));
      }
      next = std::min(next, p.due);
    }
    auto wait = std::chrono::duration_cast<std::chrono::milliseconds>(next - Clock::now()).count();
    if (stop != nullptr) wait = std::min<int64_t>(wait, 100);
    const int r = ::poll(pfds.data(), pfds.size(), static_cast<int>(std::clamp<int64_t>(wait, 0, 4000) + 1));
    if (r < 0 && errno != EINTR) break;
    for (const pollfd& pf : pfds) {
      if (r <= 0 || (pf.revents & POLLIN) == 0) continue;
      char buf[1024];
      // At most a few datagrams at a time: a flood of them must not keep
      // this loop from its deadline.
      for (int got = 0; got < 64; got++) {
        sockaddr_in src{};
        socklen_t len = sizeof(src);
        const ssize_t n = ::recvfrom(pf.fd, buf, sizeof(buf), 0, reinterpret_cast<sockaddr*>(&src), &len);
        if (n < 0) break;  // EAGAIN: all read
        auto reply = rpc::ParseReply(std::string_view(buf, static_cast<size_t>(n)));
        if (!reply || reply->xid - base >= 2 * pairs.size()) continue;
        const size_t i = (reply->xid - base) / 2;
        const bool notify = ((reply->xid - base) & 1) != 0;
        Pair& p = pairs[i];
        // From the client, and from the port asked (the portmapper's, then
        // its statd's): not just anyone who guessed an xid.
        if (p.done || p.fd != pf.fd || ntohl(src.sin_addr.s_addr) != p.client || notify != (p.statd_port != 0) ||
            ntohs(src.sin_port) != (notify ? p.statd_port : pmap_port)) {
          continue;
        }
        if (!notify) {
          // PMAPPROC_GETPORT's result: the port, 0 when statd is not registered
          // (asked again at the next retransmission).
          if (!reply->success || reply->results.size() < 4) continue;
          const auto* b = reinterpret_cast<const unsigned char*>(reply->results.data());
          const uint32_t port = static_cast<uint32_t>(b[0]) << 24 | static_cast<uint32_t>(b[1]) << 16 |
                                static_cast<uint32_t>(b[2]) << 8 | b[3];
          if (port == 0 || port > 65535) continue;
          p.statd_port = static_cast<uint16_t>(port);
          p.due = Clock::now();  // the notification at once
          p.interval = std::chrono::milliseconds(500);
        } else if (reply->success) {
          p.done = true;
          left--;
          res.notified++;
        }
      }
    }
  }
  for (int fd : socks) ::close(fd);
  res.unreachable += left;
  return res;
}

}  // namespace nasgw::daemon
