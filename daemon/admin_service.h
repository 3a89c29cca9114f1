// AdminServer: the gRPC admin API (proto/admin.proto) over a Node. It is a
// translator: it checks every request field, calls the Node and maps nasgw's
// Status to a gRPC status with the message intact; it holds no state of its
// own.
//
// Endpoints:
// - always a Unix socket at config.admin_socket (default
//   <run_dir>/admin.sock), mode 0600. The socket is bound inside a fresh
//   0700 directory, made 0600 there and only then renamed into place, so it
//   is never connectable by others. A stale socket (nobody listening) is
//   replaced; a live one (another nasgwd) or a non-socket file is refused.
// - when config.admin_tcp is set, TCP with TLS (tls_cert/tls_key); when
//   tls_client_ca is set, clients must present a certificate it signed.
//
// Thread-safety: Start/Shutdown from one thread; the RPCs run on gRPC's
// threads and only call the Node, which is thread-safe.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "base/status.h"
#include "cache/data_cache.h"
#include "daemon/config.h"
#include "daemon/node.h"

namespace nasgw::daemon {

class AdminServer {
 public:
  // The write-back cache's counters (the head service holds the cache).
  using CacheStatsFn = std::function<cache::DataCacheStats()>;
  // Writes what the write-back cache holds dirty to the domain and waits for
  // it (HeadService::FlushCache): CreateSnapshot calls it first, so that
  // every write answered before the create began is in the snapshot,
  // RollbackSnapshot, so that the rollback undoes every such write, and
  // ClusterGiveBack, so that the partner has no intent log to replay.
  using CacheFlushFn = std::function<nasgw::Status()>;
  // Drops what nasgwd caches of volume `vol` (its id) that a rollback made
  // stale (HeadService::ForgetVolume): RollbackSnapshot calls it after the
  // rollback. Returns the cached bytes dropped (for the log).
  using CacheForgetFn = std::function<uint64_t(uint32_t vol)>;
  // REQUIRES: `node` outlives the server (or Shutdown()), and so does what
  // `cache_stats` reads (null: the cache section stays empty) and what
  // `cache_flush` flushes and `cache_forget` drops (null: there is no cache).
  static Result<std::unique_ptr<AdminServer>> Start(Node* node, const Config& config,
                                                    CacheStatsFn cache_stats = nullptr,
                                                    CacheFlushFn cache_flush = nullptr,
                                                    CacheForgetFn cache_forget = nullptr);
  // Stops admitting, waits for RPCs in flight, removes the socket. Idempotent.
  void Shutdown();
  ~AdminServer();

  const std::string& socket_path() const;
  // The TCP port chosen (useful with admin_tcp "host:0"); 0 without TCP.
  int tcp_port() const;

  struct Impl;

 private:
  explicit AdminServer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// The gRPC status code (grpc::StatusCode's value) for a nasgw code; the one
// mapping at this boundary.
int GrpcCodeOf(Code code);

}  // namespace nasgw::daemon
