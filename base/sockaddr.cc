#include "base/sockaddr.h"

#include <charconv>

#include <arpa/inet.h>
#include <netinet/in.h>

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

}  // namespace nasgw
