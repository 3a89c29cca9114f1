// Blocking whole-message I/O on a stream socket, shared by both ends of the
// head protocol (nasgwd's server, the client library).
#pragma once

#include <cstddef>

#include <sys/uio.h>

namespace nasgw::proto {

// Reads exactly n bytes; false on EOF, error or a receive timeout.
bool ReadFull(int fd, void* buf, size_t n);

// Writes every byte of the iovecs (which it advances); false on error.
// Uses sendmsg with MSG_NOSIGNAL: a peer that went away is an error here,
// never a SIGPIPE for the whole process.
bool WriteFull(int fd, struct iovec* iov, int n);

}  // namespace nasgw::proto
