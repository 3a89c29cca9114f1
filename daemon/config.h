// nasgwd's configuration: a TOML file (deploy/nasgwd.toml is the documented
// example). Every field is checked when the file is loaded; a bad file is
// refused with a message that names the field (as "section.key") and, for
// numbers, the allowed range. Unknown keys are refused too (a typo must not
// silently become a default).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "base/limits.h"
#include "base/status.h"

namespace nasgw::daemon {

// Limits of the configurable values (documented in deploy/nasgwd.toml).
constexpr uint32_t kHeadWorkersDefault = 16;
constexpr uint32_t kHeadWorkersMax = 256;
constexpr uint32_t kHeadConnectionsDefault = 256;
constexpr uint32_t kHeadConnectionsMax = 4096;
// Connections of one peer uid (SO_PEERCRED), so that one user (or one
// runaway head) cannot take every connection: half of the default total.
// Heads running as root (Ganesha, nasgw-fuse) share root's allowance.
constexpr uint32_t kHeadConnectionsPerUidDefault = 128;
// A head connection with nothing in flight that sends nothing for this long
// is closed (the client library reconnects at once, keeping its session).
// Long enough that a quiet head costs nothing; short enough that sockets a
// dead or stuck process holds do not pile up. Up to a day.
constexpr uint32_t kHeadIdleTimeoutMsDefault = 300'000;
constexpr uint32_t kHeadIdleTimeoutMsMin = 1'000;
constexpr uint32_t kHeadIdleTimeoutMsMax = 86'400'000;
// Requests one head connection may have outstanding; past this nasgwd stops
// reading that socket (backpressure) until replies drain.
constexpr uint32_t kHeadInflightDefault = 64;
constexpr uint32_t kHeadInflightMax = 1024;
// Byte-range locks (ranges) nasgwd holds for all heads, and for one session.
// A range costs about 100 bytes with the maps around it: 100 MiB at the
// default. One head session (Ganesha: every NFS client's locks) may hold a
// quarter, so that a runaway head cannot take every lock from the others.
constexpr uint32_t kHeadLocksDefault = 1u << 20;
constexpr uint32_t kHeadLocksMax = 1u << 24;
constexpr uint32_t kHeadLocksPerSessionDefault = 1u << 18;
constexpr uint32_t kShutdownDrainMsDefault = 10'000;
constexpr uint32_t kShutdownDrainMsMax = 600'000;
constexpr uint32_t kClusterHeartbeatMsMin = 50;
constexpr uint32_t kClusterHeartbeatMsMax = 10'000;
constexpr uint32_t kClusterDeadMsMax = 600'000;
constexpr size_t kClusterVipsMax = 64;
constexpr uint32_t kClusterVipIdleMsMax = 600'000;
constexpr uint32_t kClusterVipMoveMaxMsMax = 86'400'000;

struct Config {
  // [node]
  std::string node_name;                     // required; [A-Za-z0-9._-], 1..63 bytes
  std::string run_dir = "/run/nasgw";        // sockets live here (created 0750)
  std::string state_dir = "/var/lib/nasgw";  // node-local state (the LUN cache)
  std::string log_level = "info";            // debug|info|warn|error

  // [reserve]
  std::vector<std::string> luns;    // required, 1..96 iSCSI URLs (fs::kReserveLunsMax) (iscsi://host[:port]/iqn/lun)
  std::string initiator;            // empty: iqn.2026-11.org.nasgw:<node_name>
  std::string chap_user;            // both or neither
  std::string chap_secret;          // 12..16 bytes (RFC 3720); or chap_secret_file
  uint32_t io_timeout_ms = 30'000;  // limits::kIoTimeoutMs{Min,Max}
  uint32_t queue_depth = 64;        // 1..limits::kQueueDepthMax
  // How long file data may queue in front of metadata and the intent log on
  // a LUN (block/bulk_window.h); 0: no limit. 0..limits::kBulkTargetMsMax
  uint32_t bulk_target_ms = limits::kBulkTargetMsDefault;
  uint32_t connect_timeout_ms = 5'000;
  // Ownership of the reserve (fs/ownership.h): the owner renews its lease
  // every renew_interval_ms; another node may take the reserve over without
  // force once the owner has been silent for lease_ms (>= 3 intervals).
  uint32_t renew_interval_ms = 2'000;  // fs::kRenewIntervalMs{Min,Max}
  uint32_t lease_ms = 10'000;          // 3 * renew_interval_ms .. fs::kLeaseMsMax
  // After preempting another node's key with plain PREEMPT (the LUN has no
  // PREEMPT AND ABORT, as tgt), wait this long before the first write: the
  // commands the old owner had queued at the array are done by then.
  uint32_t preempt_settle_ms = 2'000;  // 0..fs::kPreemptSettleMsMax

  // [cluster]: the controller pair (docs/cluster.md). Off: a single node.
  bool cluster_enabled = false;
  std::string cluster_group = "nasgw";           // Corosync CPG group; [A-Za-z0-9._-], 1..127 bytes
  uint32_t cluster_heartbeat_interval_ms = 500;  // kClusterHeartbeatMs{Min,Max}
  uint32_t cluster_network_dead_ms = 3'000;      // >= 3 heartbeats, <= kClusterDeadMsMax
  bool cluster_auto_takeover = true;             // a standby takes over an owner silent on both heartbeats
  // Client-access addresses ("A.B.C.D/N"): held by the node that serves the
  // reserve, on vip_interface; moved on takeover (docs/cluster.md).
  std::vector<std::string> cluster_vips;  // at most kClusterVipsMax
  std::string cluster_vip_interface;      // required with vips
  // With head forwarding the VIPs are spread over both nodes (the odd ones
  // of the list to the node that stands by). One moves to the partner once
  // its clients have sent nothing for vip_idle_ms (not in the middle of a
  // burst), or after vip_move_max_ms at the latest.
  uint32_t cluster_vip_idle_ms = 2'000;        // 0..kClusterVipIdleMsMax
  uint32_t cluster_vip_move_max_ms = 300'000;  // 0..kClusterVipMoveMaxMsMax
  // Tickle ACKs to the partner's clients of an address this node takes, so
  // that they reconnect at once (docs/cluster.md, "Clients of a moved
  // address"). Off only where the LAN drops such packets anyway.
  bool cluster_tickle_acks = true;
  // The cache mirror (cluster/mirror.h): this node's "ip:port" on the
  // interconnect, and the partner's. Both or neither; neither: every write
  // is acknowledged from the SAN intent log, as on a single node.
  std::string cluster_mirror_listen;
  std::string cluster_mirror_peer;
  // Head forwarding (daemon/head_server.h): this node's "ip:port" on the
  // interconnect, where the partner relays the heads it does not serve, and
  // the partner's, where this node relays its heads while the partner owns
  // the reserve. Both or neither; neither: a node that does not own the
  // reserve refuses its heads' calls (and withdraws its exports).
  std::string cluster_forward_listen;
  std::string cluster_forward_peer;
  // Active/active (docs/cluster.md, "Both nodes serving"): the domains of a
  // split reserve this node serves while the partner is up (ids, distinct,
  // < fs::kReserveDomainsMax). Empty: the node serves the whole reserve or
  // stands by for it. Both nodes share the reservation (fs::Ownership's
  // `shared`); not with head forwarding yet.
  std::vector<uint32_t> cluster_home_domains;
  // With home_domains: the partner's domains held here go back to it on
  // their own once it stands by again (and their clients are quiet);
  // false: only `nasgw cluster giveback` (or `cluster takeover` there).
  bool cluster_auto_failback = true;

  // [head]
  std::string head_socket;                                                // default: <run_dir>/head.sock
  uint32_t head_socket_mode = 0660;                                       // 0600..0777 (octal string "0660" or integer)
  std::string head_socket_group;                                          // empty: nasgwd's group
  uint32_t head_workers = kHeadWorkersDefault;                            // 1..kHeadWorkersMax
  uint32_t head_max_connections = kHeadConnectionsDefault;                // 1..kHeadConnectionsMax
  uint32_t head_max_connections_per_uid = kHeadConnectionsPerUidDefault;  // 1..kHeadConnectionsMax
  uint32_t head_max_inflight = kHeadInflightDefault;                      // 1..kHeadInflightMax per connection
  uint32_t head_idle_timeout_ms = kHeadIdleTimeoutMsDefault;              // kHeadIdleTimeoutMs{Min,Max}
  uint32_t head_max_locks = kHeadLocksDefault;                            // 1..kHeadLocksMax
  uint32_t head_max_locks_per_session = kHeadLocksPerSessionDefault;      // 1..kHeadLocksMax

  // [admin]
  std::string admin_socket;   // default: <run_dir>/admin.sock (mode 0600)
  std::string admin_tcp;      // optional "host:port"; requires tls_cert and tls_key
  std::string tls_cert;       // PEM server certificate chain (file)
  std::string tls_key;        // PEM private key (file), mode 0600 or 0400
  std::string tls_client_ca;  // PEM CA bundle: clients must present a certificate it signed
  // admin.tcp without tls_client_ca is refused unless this is true.
  bool admin_insecure_no_client_auth = false;

  // [cache] (cache/data_cache.h; bounds in base/limits.h)
  // The node's memory budget (limits::SharesOf cuts it: metadata cache,
  // request buffers, data cache).
  uint32_t cache_memory_mib = limits::kMemoryBytesDefault >> 20;         // kMemoryBytes{Min,Max} in MiB
  uint32_t cache_dirty_mib = limits::kCacheDirtyBytesDefault >> 20;      // kCacheDirtyBytes{Min,Max}; <= data share / 2
  uint32_t cache_read_ahead_kib = limits::kReadAheadBytesDefault >> 10;  // 0..kReadAheadBytesMax in KiB
  uint32_t cache_flush_after_ms = limits::kCacheFlushAfterMsDefault;     // kCacheFlushAfterMs{Min,Max}
  uint32_t cache_stall_timeout_ms = limits::kCacheStallTimeoutMsDefault;  // kCacheStallTimeoutMs{Min,Max}
  bool cache_write_through = false;                        // strict: every write flushed before its answer
  bool cache_log_stable_writes = true;                     // small stable writes answered once in the intent log
  uint32_t cache_log_slow_ms = limits::kLogSlowMsDefault;  // ... while its records take at most this; 0..kLogSlowMsMax
  bool cache_log_commits = true;                           // COMMIT/fsync log a file's small dirty data

  // [metrics]
  std::string metrics_listen;  // optional "host:port" for the Prometheus text endpoint

  // [shutdown]
  uint32_t drain_ms = kShutdownDrainMsDefault;  // 0..kShutdownDrainMsMax

  // [nfs]
  // Optional: where nasgwd writes the NFS exports as NFS-Ganesha EXPORT
  // blocks (ganesha.conf %includes it); empty: nasgwd writes nothing. An
  // absolute path of [A-Za-z0-9._/-] (what %include takes) whose directory
  // exists.
  std::string nfs_exports_file;
  // Optional: ganesha.nfsd's pid file. After writing exports_file nasgwd
  // sends SIGHUP to that pid if it is a live ganesha.nfsd. Needs exports_file.
  std::string nfs_ganesha_pid_file;
  // Optional: ganesha's NFSv4 recovery root (NFSV4 { RecoveryRoot }, its fs
  // backend's). In a pair nasgwd sends its ganesha's client records to the
  // partner, keeps the partner's beside them, and after taking the
  // partner's addresses starts a grace period in its ganesha (over DBus)
  // in which those clients reclaim their opens and locks
  // (daemon/nfs_recovery.h). Empty: none of this.
  std::string nfs_ganesha_recovery_dir;
  // The DBus bus ganesha's admin interface is on: an address
  // ("unix:path=..."); empty: the system bus.
  std::string nfs_ganesha_dbus;
  // Optional: the state directory of the rpc.statd ganesha's NLM registers
  // its clients with (rpc.statd -P; its sm/ holds a record per client). In a
  // pair nasgwd sends the partner the list of those clients, and after
  // taking the partner's addresses starts ganesha's grace period and sends
  // each of the partner's an SM_NOTIFY from them, so that they reclaim their
  // NLM locks (daemon/nlm_notify.h). Empty: none of this.
  std::string nfs_statd_dir;

  // [smb]
  // Optional: where nasgwd writes the SMB shares as smb.conf sections (the
  // smb.conf smbd runs with includes it: `include = FILE`); empty: nasgwd
  // writes nothing. An absolute path of [A-Za-z0-9._/-] whose directory
  // exists.
  std::string smb_shares_file;
  // Optional: smbd's pid file. After writing shares_file nasgwd sends SIGHUP
  // to that pid if it is a live smbd, which then serves the new shares.
  // Needs shares_file.
  std::string smb_smbd_pid_file;
  // Samba's VFS modules stacked above vfs_nasgw in every share nasgwd
  // writes (smb.conf's "vfs objects", top first): alternate data streams
  // and NT ACLs kept in nasgw's extended attributes. Module names of
  // [A-Za-z0-9_], space separated; "" stacks none.
  std::string smb_vfs_objects = "acl_xattr streams_xattr";

  // The reserve LUN URLs with the CHAP credentials filled in.
  std::vector<std::string> LunUrlsWithChap() const;
};

// Parses and validates TOML text. `origin` names the file in messages. Files
// the config names are checked too (chap_secret_file is read; tls_* must be
// readable). Every problem found is reported, "; "-separated, in one
// InvalidArgument; syntax errors as "<origin>:<line>:<column>: ...".
Result<Config> ParseConfig(const std::string& text, const std::string& origin = "config");
// Reads and parses a file (NotFound / PermissionDenied naming the path).
Result<Config> LoadConfig(const std::string& path);

}  // namespace nasgw::daemon
