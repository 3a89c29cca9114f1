// Socket addresses as configured: "host:port", "[v6]:port" or ":port" (any
// IPv4 address), numeric only (no name lookup: a configured address must not
// depend on DNS).
#pragma once

#include <string>
#include <string_view>

#include "base/status.h"

#include <sys/socket.h>

namespace nasgw {

// InvalidArgument naming `what` (e.g. "metrics listen address") and the text.
Result<sockaddr_storage> ParseSockAddr(const std::string& listen, socklen_t* len, std::string_view what);

}  // namespace nasgw
