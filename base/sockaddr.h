// Socket addresses as configured: "host:port", "[v6]:port" or ":port" (any
// IPv4 address), numeric only (no name lookup: a configured address must not
// depend on DNS).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "base/status.h"

#include <sys/socket.h>

namespace nasgw {

// InvalidArgument naming `what` (e.g. "metrics listen address") and the text.
Result<sockaddr_storage> ParseSockAddr(const std::string& listen, socklen_t* len, std::string_view what);

// The TCP links between the nodes of a pair (the cache mirror, head
// forwarding) use these.
//
// A blocking TCP socket connected to `peer` within `timeout_ms`, with
// TCP_NODELAY and a send timeout of `send_timeout_ms`; Unavailable naming
// `what` and the reason otherwise. `what` also names the setting in a parse
// error (e.g. "[cluster] mirror_peer").
Result<int> DialTcp(const std::string& peer, uint32_t timeout_ms, uint32_t send_timeout_ms, std::string_view what);
// A listening TCP socket on `listen` (SO_REUSEADDR); *port is the bound port
// (the configured one, or the kernel's choice for port 0).
Result<int> ListenTcp(const std::string& listen, int backlog, std::string_view what, uint16_t* port);
// Same IP address (ports are not compared).
bool SameHost(const sockaddr_storage& a, const sockaddr_storage& b);
// The IP address as text ("?" if not IPv4 or IPv6).
std::string HostText(const sockaddr_storage& a);
// SO_RCVTIMEO or SO_SNDTIMEO (`opt`) in milliseconds.
void SetSocketTimeout(int fd, int opt, uint32_t ms);
// TCP keepalives on `fd`: probes after `idle_s` seconds of silence, every
// `interval_s`, the connection failing after `probes` unanswered ones (a
// peer whose machine died sends no RST).
void SetKeepalive(int fd, int idle_s, int interval_s, int probes);

}  // namespace nasgw
