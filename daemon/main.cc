// nasgwd: one per controller node. Owns the reserve's LUNs and its file
// system, serves the heads (head protocol on a Unix socket), the admin API
// (gRPC) and the metrics endpoint, and stops cleanly on SIGTERM: it stops
// taking requests, lets those in flight finish (up to [shutdown] drain_ms),
// then flushes and closes the file system and the LUNs.
//
//   nasgwd --config FILE [--check-config]
//
// Runs in the foreground (systemd, or the lab) and logs one line per event
// to stderr. Exit status: 0 after a clean stop, 2 for a bad configuration,
// 1 when it cannot start (an unreachable LUN, a socket it cannot bind,
// another nasgwd holding <run_dir>/nasgwd.lock).
#include <fcntl.h>
#include <grp.h>
#include <malloc.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>

#include "base/limits.h"
#include "base/log.h"
#include "daemon/admin_service.h"
#include "daemon/config.h"
#include "daemon/head_server.h"
#include "daemon/metrics.h"
#include "daemon/node.h"
#include "daemon/node_metrics.h"
#include "daemon/snapshot_scheduler.h"

#include <sys/file.h>
#include <sys/stat.h>

namespace nasgw::daemon {
namespace {

int Usage(const char* why) {
  std::fprintf(stderr,
               "nasgwd: %s\n"
               "usage: nasgwd --config FILE [--check-config]\n"
               "  --config FILE    the TOML configuration (see deploy/nasgwd.toml)\n"
               "  --check-config   validate the file and exit (0: valid, 2: not)\n",
               why);
  return 2;
}

Status MakeDir(const std::string& path, mode_t mode) {
  if (::mkdir(path.c_str(), mode) == 0 || errno == EEXIST) {
    struct stat st {};
    if (::stat(path.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
      return Status::InvalidArgument(path + " exists and is not a directory");
    }
    return Status();
  }
  return Status::IoError("cannot create " + path + ": " + std::strerror(errno));
}

cache::DataCacheOptions CacheOptions(const Config& cfg) {
  cache::DataCacheOptions o;
  o.memory_bytes = limits::SharesOf(uint64_t{cfg.cache_memory_mib} << 20).data;
  o.dirty_bytes = uint64_t{cfg.cache_dirty_mib} << 20;
  o.read_ahead_bytes = uint64_t{cfg.cache_read_ahead_kib} << 10;
  o.flush_after_ms = cfg.cache_flush_after_ms;
  o.stall_timeout_ms = cfg.cache_stall_timeout_ms;
  o.write_through = cfg.cache_write_through;
  o.log_stable_writes = cfg.cache_log_stable_writes;
  o.log_slow_ms = cfg.cache_log_slow_ms;
  o.log_commits = cfg.cache_log_commits;
  return o;
}

int Run(const Config& cfg) {
  if (Status s = MakeDir(cfg.run_dir, 0750); !s.ok()) {
    NASGW_LOG(kError, "nasgwd") << "cannot start" << Kv("why", s.ToString());
    return 1;
  }
  // One nasgwd per run directory: a second one must not open the reserve or
  // take over the sockets of the first. The lock lives as long as we do.
  const std::string lock_path = cfg.run_dir + "/nasgwd.lock";
  int lock_fd = ::open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (lock_fd < 0 || ::flock(lock_fd, LOCK_EX | LOCK_NB) != 0) {
    char pid[32] = {};
    if (lock_fd >= 0 && ::pread(lock_fd, pid, sizeof(pid) - 1, 0) < 0) pid[0] = 0;
    std::fprintf(stderr, "nasgwd: cannot start: another nasgwd (pid %s) runs with run_dir %s\n", pid[0] ? pid : "?",
                 cfg.run_dir.c_str());
    return 1;
  }
  const std::string me = std::to_string(::getpid());
  if (::ftruncate(lock_fd, 0) != 0 || ::pwrite(lock_fd, me.data(), me.size(), 0) < 0) {
    NASGW_LOG(kWarn, "nasgwd") << "cannot write the pid into the lock file" << Kv("path", lock_path);
  }
  int gid = -1;
  if (!cfg.head_socket_group.empty()) {
    struct group* g = ::getgrnam(cfg.head_socket_group.c_str());
    if (g == nullptr) {
      NASGW_LOG(kError, "nasgwd") << "cannot start: head.socket_group: no such group"
                                  << Kv("group", cfg.head_socket_group);
      return 2;
    }
    gid = static_cast<int>(g->gr_gid);
  }

  NASGW_LOG(kInfo, "nasgwd") << "starting" << Kv("node", cfg.node_name) << Kv("luns", cfg.luns.size());
  auto node = Node::Start(cfg);
  if (!node.ok()) {
    NASGW_LOG(kError, "nasgwd") << "cannot start" << Kv("why", node.status().ToString());
    std::fprintf(stderr, "nasgwd: cannot start: %s\n", node.status().ToString().c_str());
    return 1;
  }
  Node* n = node->get();

  Metrics metrics;
  HeadMetrics head_metrics(&metrics, n);
  HeadService service(
      [n] {
        HeadDomain d;
        d.domains = n->domains(&d.write_verifier, &d.lease);
        // Any domain served here says the reserve is online (shared, domain
        // 0 may be the partner's).
        for (size_t i = 0; d.domains && !d.domain && i < d.domains->size(); i++) d.domain = (*d.domains)[i];
        return d;
      },
      LockLimits{cfg.head_max_locks, cfg.head_max_locks_per_session}, CacheOptions(cfg));
  service.SetServed([n](proto::Op op) { n->NoteServed(proto::OpName(op)); });
  HeadServerOptions ho;
  ho.socket_path = cfg.head_socket;
  ho.socket_mode = cfg.head_socket_mode;
  ho.socket_gid = gid;
  ho.workers = cfg.head_workers;
  ho.max_connections = cfg.head_max_connections;
  ho.max_connections_per_uid = cfg.head_max_connections_per_uid;
  ho.max_inflight = cfg.head_max_inflight;
  ho.request_bytes = limits::SharesOf(uint64_t{cfg.cache_memory_mib} << 20).requests;
  ho.idle_timeout_ms = cfg.head_idle_timeout_ms;
  ho.node_name = cfg.node_name;
  if (cfg.cluster_enabled) {
    // In a pair, heads of the node that does not serve are relayed to the
    // one that does (docs/cluster.md, "Forwarding").
    ho.forward_listen = cfg.cluster_forward_listen;
    ho.forward_peer = cfg.cluster_forward_peer;
    ho.forward_route = [n] { return n->HeadsGoToPartner(); };
  }
  auto head = HeadServer::Start(&service, ho, &head_metrics);
  if (!head.ok()) {
    std::fprintf(stderr, "nasgwd: cannot start: %s\n", head.status().ToString().c_str());
    (*node)->Shutdown();
    return 1;
  }
  auto admin = AdminServer::Start(
      n, cfg, [&service] { return service.CacheStats(); }, [&service] { return service.FlushCache(); },
      [&service](uint32_t vol) { return service.ForgetVolume(vol); });
  if (!admin.ok()) {
    std::fprintf(stderr, "nasgwd: cannot start: %s\n", admin.status().ToString().c_str());
    (*head)->Shutdown(std::chrono::milliseconds(0));
    (*node)->Shutdown();
    return 1;
  }
  // A giveback (asked by the partner or by an admin) flushes the cache first.
  n->SetFlushHook([&service] { return service.FlushCache(); });
  // Serving starts or stops here: heads connect again and are routed anew.
  n->SetRerouteHook([h = head->get()](Node::HeadsMove move, const std::string& why) {
    if (move == Node::HeadsMove::kReroute) {
      h->Reroute(why);
    } else {
      h->CutForwarded(why);
    }
  });
  AddNodeCollectors(&metrics, n, head->get(), &service);
  // The snapshot schedules: flushed through the same cache as the admin
  // CreateSnapshot. Stopped first at shutdown, before the cache closes.
  std::unique_ptr<SnapshotScheduler> scheduler = SnapshotScheduler::Start(
      n, [&service] { return service.FlushCache(); }, &metrics);
  std::unique_ptr<MetricsHttpServer> http;
  if (!cfg.metrics_listen.empty()) {
    auto h = MetricsHttpServer::Start(cfg.metrics_listen, &metrics);
    if (!h.ok()) {
      std::fprintf(stderr, "nasgwd: cannot start: %s\n", h.status().ToString().c_str());
      scheduler->Stop();
      (*admin)->Shutdown();
      n->SetRerouteHook(nullptr);
      (*head)->Shutdown(std::chrono::milliseconds(0));
      (*node)->Shutdown();
      return 1;
    }
    http = std::move(h.value());
    NASGW_LOG(kInfo, "nasgwd") << "metrics" << Kv("listen", cfg.metrics_listen) << Kv("port", http->port());
  }
  NASGW_LOG(kInfo, "nasgwd") << "ready" << Kv("node", cfg.node_name)
                             << Kv("reserve", ReserveStateName(n->GetReserve().state)) << Kv("head", cfg.head_socket)
                             << Kv("admin", cfg.admin_socket);

  // Signals were blocked in every thread before any was created; this one
  // takes them.
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGHUP);
  for (;;) {
    int sig = 0;
    if (sigwait(&set, &sig) != 0) continue;
    if (sig == SIGHUP) {
      NASGW_LOG(kInfo, "nasgwd") << "SIGHUP: nothing to reload (the configuration is read at start)";
      continue;
    }
    NASGW_LOG(kInfo, "nasgwd") << "stopping" << Kv("signal", strsignal(sig)) << Kv("drain_ms", cfg.drain_ms);
    break;
  }
  // No scheduled snapshot begins from here on; one under way finishes first.
  scheduler->Stop();
  (*admin)->Shutdown();
  n->SetRerouteHook(nullptr);
  (*head)->Shutdown(std::chrono::milliseconds(cfg.drain_ms));
  // What the cache holds goes to the SAN before the domain closes.
  n->SetFlushHook(nullptr);
  if (Status s = service.Close(); !s.ok()) {
    NASGW_LOG(kError, "nasgwd") << "the write-back cache could not be flushed at shutdown; clients resend what "
                                   "they had not committed"
                                << Kv("error", s.ToString());
  }
  if (http != nullptr) http->Stop();
  (*node)->Shutdown();
  NASGW_LOG(kInfo, "nasgwd") << "stopped" << Kv("node", cfg.node_name);
  return 0;
}

int Main(int argc, char** argv) {
  // Before any thread exists, so that every thread inherits the mask and
  // only sigwait() sees these signals. SIGPIPE: sockets use MSG_NOSIGNAL,
  // but a library's stray write must not kill the daemon.
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGHUP);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  signal(SIGPIPE, SIG_IGN);
  // glibc gives busy threads arenas of their own (up to 8 per core), and
  // each keeps memory freed into it that it cannot give back: under
  // memory_lab's write flood that was ~100 MiB past a 128 MiB budget. Two
  // arenas bound that waste (docs/cache.md "Memory"); the cache's blocks are
  // allocated under its own locks anyway.
  mallopt(M_ARENA_MAX, limits::kMallocArenas);

  std::string config_path;
  bool check = false;
  for (int i = 1; i < argc; i++) {
    std::string a = argv[i];
    if (a == "--config" && i + 1 < argc) {
      config_path = argv[++i];
    } else if (a == "--check-config") {
      check = true;
    } else if (a == "-h" || a == "--help") {
      Usage("help");
      return 0;
    } else {
      return Usage(("unknown argument " + a).c_str());
    }
  }
  if (config_path.empty()) return Usage("--config is required");
  auto cfg = LoadConfig(config_path);
  if (!cfg.ok()) {
    std::fprintf(stderr, "nasgwd: %s\n", std::string(cfg.status().message()).c_str());
    return 2;
  }
  if (check) {
    std::printf("%s: valid\n", config_path.c_str());
    return 0;
  }
  if (std::getenv("NASGW_LOG") == nullptr) setenv("NASGW_LOG", cfg->log_level.c_str(), 1);
  return Run(*cfg);
}

}  // namespace
}  // namespace nasgw::daemon

int main(int argc, char** argv) {
  return nasgw::daemon::Main(argc, argv);
}
