#include "base/sockaddr.h"

#include <fcntl.h>
#include <poll.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cstring>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>

namespace nasgw {

Result<sockaddr_storage> ParseSockAddr(const std::string& listen, socklen_t* len, std::string_view what) {
  auto bad = [&](const std::string& why) {
    return Status::InvalidArgument(std::string(what) + " \"" + listen + "\": " + why);
  };
  std::string host, port_text;
  if (listen.starts_with("[")) {
    const size_t close = listen.find(']');
    if (close == std::string::npos || close + 1 >= listen.size() || listen[close + 1] != ':') {
      return bad("expected [IPv6]:port");
    }
    host = listen.substr(1, close - 1);
    port_text = listen.substr(close + 2);
  } else {
    const size_t colon = listen.rfind(':');
    if (colon == std::string::npos) return bad("expected host:port");
    host = listen.substr(0, colon);
    port_text = listen.substr(colon + 1);
    if (host.find(':') != std::string::npos) return bad("an IPv6 address must be in brackets: [addr]:port");
  }
  uint32_t port = 0;
  auto [end, ec] = std::from_chars(port_text.data(), port_text.data() + port_text.size(), port);
  if (port_text.empty() || ec != std::errc() || end != port_text.data() + port_text.size() || port > 65535) {
    return bad("port must be a number in 0..65535");
  }
  sockaddr_storage ss{};
  if (listen.starts_with("[")) {
    auto* a6 = reinterpret_cast<sockaddr_in6*>(&ss);
    a6->sin6_family = AF_INET6;
    a6->sin6_port = htons(static_cast<uint16_t>(port));
    if (inet_pton(AF_INET6, host.c_str(), &a6->sin6_addr) != 1) return bad("not an IPv6 address");
    *len = sizeof(sockaddr_in6);
  } else {
    auto* a4 = reinterpret_cast<sockaddr_in*>(&ss);
    a4->sin_family = AF_INET;
    a4->sin_port = htons(static_cast<uint16_t>(port));
    if (host.empty()) {
      a4->sin_addr.s_addr = htonl(INADDR_ANY);
    } else if (inet_pton(AF_INET, host.c_str(), &a4->sin_addr) != 1) {
      return bad("not an IPv4 address (use [addr] for IPv6)");
    }
    *len = sizeof(sockaddr_in);
  }
  return ss;
}

void SetSocketTimeout(int fd, int opt, uint32_t ms) {
  timeval tv{};
  tv.tv_sec = ms / 1000;
  tv.tv_usec = static_cast<suseconds_t>((ms % 1000) * 1000);
  ::setsockopt(fd, SOL_SOCKET, opt, &tv, sizeof(tv));
}

void SetKeepalive(int fd, int idle_s, int interval_s, int probes) {
  const int on = 1;
  ::setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &on, sizeof(on));
  ::setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle_s, sizeof(idle_s));
  ::setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &interval_s, sizeof(interval_s));
  ::setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &probes, sizeof(probes));
}

Result<int> DialTcp(const std::string& peer, uint32_t timeout_ms, uint32_t send_timeout_ms, std::string_view what) {
  socklen_t len = 0;
  auto addr = ParseSockAddr(peer, &len, what);
  if (!addr.ok()) return addr.status();
  const int fd = ::socket(addr->ss_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) return Status::Unavailable(std::string(what) + ": socket: " + std::strerror(errno));
  int r = ::connect(fd, reinterpret_cast<const sockaddr*>(&*addr), len);
  if (r < 0 && errno == EINPROGRESS) {
    pollfd p{fd, POLLOUT, 0};
    r = ::poll(&p, 1, static_cast<int>(timeout_ms));
    int err = 0;
    socklen_t el = sizeof(err);
    if (r == 1 && ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &el) == 0 && err == 0) {
      r = 0;
    } else {
      errno = r == 0 ? ETIMEDOUT : err;
      r = -1;
    }
  }
  if (r < 0) {
    const int e = errno;
    ::close(fd);
    return Status::Unavailable(std::string(what) + " " + peer + ": " + std::strerror(e));
  }
  ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) & ~O_NONBLOCK);
  const int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  SetSocketTimeout(fd, SO_SNDTIMEO, send_timeout_ms);
  return fd;
}

Result<int> ListenTcp(const std::string& listen, int backlog, std::string_view what, uint16_t* port) {
  socklen_t len = 0;
  auto addr = ParseSockAddr(listen, &len, what);
  if (!addr.ok()) return addr.status();
  const int fd = ::socket(addr->ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return Status::Unavailable(std::string(what) + ": socket: " + std::strerror(errno));
  const int one = 1;
  ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  if (::bind(fd, reinterpret_cast<const sockaddr*>(&*addr), len) < 0 || ::listen(fd, backlog) < 0) {
    const int e = errno;
    ::close(fd);
    return Status::Unavailable(std::string(what) + " " + listen + ": " + std::strerror(e));
  }
  sockaddr_storage bound{};
  socklen_t bl = sizeof(bound);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&bound), &bl);
  if (port != nullptr) {
    *port = ntohs(bound.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6&>(bound).sin6_port
                                              : reinterpret_cast<sockaddr_in&>(bound).sin_port);
  }
  return fd;
}

bool SameHost(const sockaddr_storage& a, const sockaddr_storage& b) {
  if (a.ss_family != b.ss_family) return false;
  if (a.ss_family == AF_INET) {
    return reinterpret_cast<const sockaddr_in&>(a).sin_addr.s_addr ==
           reinterpret_cast<const sockaddr_in&>(b).sin_addr.s_addr;
  }
  if (a.ss_family == AF_INET6) {
    return std::memcmp(&reinterpret_cast<const sockaddr_in6&>(a).sin6_addr,
                       &reinterpret_cast<const sockaddr_in6&>(b).sin6_addr, sizeof(in6_addr)) == 0;
  }
  return false;
}

std::string HostText(const sockaddr_storage& a) {
  char text[INET6_ADDRSTRLEN] = "?";
  if (a.ss_family == AF_INET) {
    ::inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in&>(a).sin_addr, text, sizeof(text));
  } else if (a.ss_family == AF_INET6) {
    ::inet_ntop(AF_INET6, &reinterpret_cast<const sockaddr_in6&>(a).sin6_addr, text, sizeof(text));
  }
  return text;
}

}  // namespace nasgw
