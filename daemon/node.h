// Node: nasgwd's composition root. It owns the reserve's LUNs, the reserve,
// and its domains, and is what the head server, the admin service and the
// metrics endpoint all act on.
//
// A reserve split into several domains at format (fs/reserve.h, "Domains")
// is served whole by the node that owns it: it opens every domain, heads
// reach a volume's domain by its id (fs::VolumeDomain), and the admin's
// calls find a volume, an export or a share in whichever domain holds it.
// Names (of volumes, shares, export pseudo paths) are unique across the
// domains. The reserve's ownership is one (the reservation on every LUN and
// the owner record of domain 0: docs/cluster.md, "Several domains per
// reserve"), and so is the write verifier: a head sees one node.
//
// A node starts even when its LUNs carry no reserve yet (state kUnformatted:
// the admin formats it) or a reserve it cannot open (state kFailed, with the
// reason: the admin can inspect it, or format over it with force). It does
// not start when a configured LUN cannot be reached at all: that is a
// configuration error.
//
// Node-local state: <state_dir>/luns lists the LUNs added at run time (one
// URL a line, as given, so it may hold a CHAP secret: the directory is 0700
// and the file 0600), rewritten atomically (temp file, fsync, rename).
//
// NFS exports live in the domain (every node that opens it sees them); the
// node renders them into [nfs] exports_file for NFS-Ganesha
// (daemon/nfs_exports.h) whenever the reserve comes online and after every
// export change, and signals ganesha.nfsd to reload.
//
// Thread-safety: all methods may be called concurrently. Format and AddLun
// are serialised with each other; the domain pointer handed to heads stays
// valid until Shutdown().
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "base/mutex.h"
#include "base/status.h"
#include "block/block_device.h"
#include "block/gated_device.h"
#include "cluster/interconnect.h"
#include "cluster/mirror.h"
#include "cluster/peer_monitor.h"
#include "cluster/vip.h"
#include "daemon/config.h"
#include "fs/domain.h"
#include "fs/label.h"
#include "fs/ownership.h"
#include "fs/reserve.h"

namespace nasgw::daemon {

// kStandby: the reserve is owned by another node (named in the reason); this
// node writes nothing to it and watches the holder's lease. kFenced: this
// node owned it and lost it (preempted, taken over, or its lease could not
// be renewed); it stopped writing at once and stays so until a takeover.
enum class ReserveState { kUnformatted, kOnline, kFailed, kStandby, kFenced };
const char* ReserveStateName(ReserveState s);

struct LunStatus {
  uint32_t index = 0;  // member index in the reserve (order of AddLun)
  std::string url;     // without the CHAP secret
  std::string serial;  // SCSI unit serial / identity
  uint64_t size_bytes = 0;
  uint32_t ag_count = 0;  // allocation groups on this LUN
  bool healthy = false;   // at least one path up
  uint32_t paths_up = 0, paths_total = 0;
  block::BlockStats stats;
};

struct ReserveStatus {
  ReserveState state = ReserveState::kUnformatted;
  std::string reason;  // why kFailed / kUnformatted
  std::string name;
  std::string uuid;
  uint32_t domains = 0;  // online: the domains it is split into (1: not split)
  uint64_t ag_bytes = 0;
  uint64_t capacity_bytes = 0;  // data allocation groups, all LUNs
  uint64_t free_bytes = 0;
  uint64_t files = 0;
  uint64_t generation = 0;
  std::vector<LunStatus> luns;
  // Ownership (fs/ownership.h): who holds the reserve, as the SAN says.
  std::string owner;              // "node 'a' on host h (pid 1, key 0x4e47...), last renewed 0.4 s ago, lease 10.0 s"
  bool owned_here = false;        // this node holds it
  uint64_t holder_silent_ms = 0;  // standby/fenced: how long the holder's record has not changed
  uint64_t lease_ms = 0;          // the holder's lease
  uint64_t renewals = 0;          // this node's lease renewals
  uint64_t fenced_total = 0;      // times this node lost the reserve since it started
};

// Bytes written to every LUN of the reserve (data, intent log, metadata)
// since it was opened: the numerator of write amplification.
inline uint64_t ArrayWriteBytes(const ReserveStatus& r) {
  uint64_t n = 0;
  for (const LunStatus& l : r.luns) n += l.stats.write.bytes;
  return n;
}

struct NodeStatus {
  std::string node_name;
  std::string version;
  int64_t started_unix = 0;
  uint64_t uptime_s = 0;
  ReserveState reserve_state = ReserveState::kUnformatted;
  uint32_t head_connections = 0;
  uint64_t head_requests = 0;
};

// The controller pair as this node sees it (docs/cluster.md; `nasgw cluster
// status`).
struct ClusterPeerStatus {
  std::string name;
  std::string node_id;
  std::string state;  // the peer's reserve state, as it says
  std::string reason;
  uint32_t ring_node = 0;     // Corosync node id
  uint64_t heard_ms_ago = 0;  // since its last heartbeat
  uint64_t heartbeats = 0;
  bool left = false;  // CPG saw it leave since
};
struct ClusterEvent {
  int64_t wall_ns = 0;
  uint64_t after_ms = 0;  // since the takeover's first event (detection)
  std::string what;
};
struct ClusterStatus {
  bool enabled = false;
  std::string interconnect;  // "corosync cpg group 'nasgw'"
  bool connected = false;
  bool quorate = false;
  std::string interconnect_reason;  // why not connected
  uint32_t ring_node = 0;
  uint32_t members = 0;
  std::vector<ClusterPeerStatus> peers;
  // The owner of the reserve and the verdict on it (cluster::PeerMonitor).
  std::string owner;  // as in ReserveStatus
  bool owned_here = false;
  std::string verdict;  // cluster::VerdictName
  std::string why;
  uint64_t network_silent_ms = 0;  // the owner's interconnect heartbeat (standby)
  uint64_t disk_silent_ms = 0;     // the owner's record (standby)
  uint64_t lease_ms = 0;
  bool auto_takeover = false;
  // Degraded: the partner is not heard on the interconnect or, with the
  // mirror configured, the log does not stream to it (an owner: writes are
  // then acknowledged from the SAN only); or one of the owner's heartbeats
  // is silent (a standby).
  bool degraded = false;
  std::string mirror;  // what acknowledges a write
  // The cache mirror ([cluster] mirror_listen/mirror_peer; cluster/mirror.h).
  bool mirror_configured = false;
  bool mirror_streaming = false;     // owner: its log streams to the partner, which answers
  uint64_t mirror_acks = 0;          // owner: answers the partner gave before the array (this opening)
  uint64_t mirror_held_entries = 0;  // standby: entries of the owner's log held here
  uint64_t mirror_held_bytes = 0;
  // Client-access addresses ([cluster] vips): held here while online.
  std::string vip_interface;
  std::vector<std::string> vips;
  std::vector<std::string> vips_held;     // on the interface now
  std::string vip_error;                  // the last failure to add or remove them
  std::vector<std::string> vips_partner;  // held by the partner, as its heartbeat says
  std::string forwarding;                 // head forwarding: where this node's heads go
  uint64_t takeovers = 0;                 // automatic takeovers by this node since it started
  // Tickle ACKs (docs/cluster.md, "Clients of a moved address"): the
  // partner's client connections to its addresses, as it last listed them,
  // and the tickles this node sent to clients of addresses it took.
  uint64_t partner_connections = 0;
  uint64_t tickles_sent = 0;
  // NFSv4 reclaims after a takeover: the partner's client records kept here
  // (-1: [nfs] ganesha_recovery_dir not set), grace periods started.
  int64_t partner_nfs_clients = -1;
  uint64_t takeover_graces = 0;
  // NLM reclaims after a takeover: the partner's NLM clients as it last
  // listed them (-1: [nfs] statd_dir not set), the SM_NOTIFYs they
  // answered, and those that went unanswered (or named no address).
  int64_t partner_nlm_clients = -1;
  uint64_t nlm_notified = 0;
  uint64_t nlm_unreachable = 0;
  std::vector<ClusterEvent> last_takeover;  // its timeline
};

// The domains of the reserve a node serves, by id (index d is domain d).
// Never changed once made: a head request holds the whole set, and a new
// opening makes a new one.
using DomainSet = std::vector<std::shared_ptr<fs::Domain>>;

// Opens one LUN by URL (the real one: IscsiDevice). Tests inject MemDevices.
using LunOpener = std::function<Result<std::shared_ptr<block::BlockDevice>>(const std::string& url)>;

class Node {
 public:
  // Opens every configured LUN and every LUN remembered in
  // <state_dir>/luns (fails naming the first unreachable one, without its
  // secret), then the reserve and its domain if there is one. `opener`
  // defaults to IscsiDevice::Open with the config's [reserve] settings;
  // `domain_options` lets tests run with tiny limits.
  // With [cluster] enabled, `interconnect` is the group the node joins
  // (null: Corosync's CPG group [cluster] group; tests give a MemHub member).
  static Result<std::unique_ptr<Node>> Start(const Config& config, LunOpener opener = {},
                                             const fs::DomainOptions& domain_options = {},
                                             std::unique_ptr<cluster::Interconnect> interconnect = nullptr);
  ~Node();

  const Config& config() const { return config_; }
  // The metadata memory every domain this node opens shares (its share of
  // [cache] memory_mib, unless the caller's domain options gave one).
  const fs::MetaCache& meta_cache() const { return *domain_options_.store.cache; }
  NodeStatus Status() const;

  // ---- reserve
  ReserveStatus GetReserve() const;
  // Labels the node's LUNs as a new reserve split into `domains` domains
  // (fs::ReserveOptions::domains; 0 means 1) and creates them.
  // `ag_bytes` 0 means fs::kAgBytesDefault. Refused with FailedPrecondition
  // when the reserve is online, and with Exists when a
  // LUN carries another label, unless `force`: then the online domain is
  // closed first (Busy if heads still hold it after the drain time) and any
  // LUN content is overwritten. On failure the state is read again from the
  // LUNs.
  nasgw::Status FormatReserve(const std::string& name, uint64_t ag_bytes, bool force, uint32_t domains = 1);
  // Opens the LUN at `url` (the configured CHAP credentials are added when
  // the URL has none), adds it to the reserve and grows the domain onto it.
  // Remembered in <state_dir>/luns (written before the add, removed again if
  // the add fails) so the next start opens it too; a remembered LUN that
  // carries no label at start (a crash between the two) is left out.
  Result<LunStatus> AddLun(const std::string& url, bool force);

  // ---- volumes (Unavailable unless the reserve is online). Every domain's,
  // in domain order; by name in whichever domain holds it.
  Result<std::vector<fs::VolumeInfo>> ListVolumes();
  Result<fs::VolumeInfo> GetVolume(const std::string& name);
  // In domain `domain` (InvalidArgument past the reserve's domains); unset:
  // the domain with the most free space (the lowest id among equals). Exists
  // when any domain has a volume of that name.
  Result<fs::VolumeInfo> CreateVolume(const std::string& name, uint32_t record_bytes,
                                      std::optional<uint32_t> domain = std::nullopt);
  Result<fs::VolumeInfo> SetVolumeRecordBytes(const std::string& name, uint32_t record_bytes);
  Result<fs::VolumeInfo> SetVolumeWriteThrough(const std::string& name, bool on);
  Result<fs::VolumeInfo> SetVolumeAtime(const std::string& name, fs::Atime atime);
  nasgw::Status DeleteVolume(const std::string& name, bool force);

  // ---- snapshots (Unavailable unless the reserve is online; the rules are
  // fs::Domain's). CreateSnapshot takes what the domain holds: the caller
  // flushes the write-back cache first (the admin service does).
  Result<std::vector<fs::SnapshotInfo>> ListSnapshots(const std::string& volume);  // oldest first
  // The same without the space figures (which cost a scan of the volume's
  // dead entries): for the schedules' retention.
  Result<std::vector<fs::SnapshotInfo>> ListSnapshotsOf(const std::string& volume);
  Result<fs::SnapshotInfo> GetSnapshot(const std::string& volume, const std::string& name);
  Result<fs::SnapshotInfo> CreateSnapshot(const std::string& volume, const std::string& name);
  Result<fs::SnapshotInfo> DeleteSnapshot(const std::string& volume, const std::string& name);
  // The volume back to its newest snapshot `name` (fs::Domain::
  // RollbackSnapshot). As for CreateSnapshot the caller flushes the
  // write-back cache first; it also drops what it caches of the volume
  // after (the admin service does both).
  Result<fs::RollbackInfo> RollbackSnapshot(const std::string& volume, const std::string& name);
  // A writable clone of `snapshot`: the new volume `clone`, sharing the
  // snapshot's data (fs::Domain::CloneSnapshot). Unlike CreateSnapshot and
  // RollbackSnapshot nothing is flushed or dropped around it: the snapshot
  // already holds what it holds, and the clone's volume id is new.
  Result<fs::VolumeInfo> CloneSnapshot(const std::string& volume, const std::string& snapshot,
                                       const std::string& clone);

  // ---- snapshot schedules (Unavailable unless the reserve is online; the
  // rules are fs::Domain's; daemon/snapshot_scheduler.h runs them). A
  // schedule's run and its removal exclude each other: once
  // RemoveSnapshotSchedule returns, no run of the schedule is under way, and
  // none begins.
  Result<fs::SnapshotSchedule> AddSnapshotSchedule(const std::string& volume, const fs::SnapshotSchedule& s);
  Result<std::vector<fs::SnapshotSchedule>> ListSnapshotSchedules();  // every volume's, by volume id then name
  // Returns the schedule as it was when removed.
  Result<fs::SnapshotSchedule> RemoveSnapshotSchedule(const std::string& volume, const std::string& name);
  // Calls `run` with the schedule `volume`/`name` as it is stored now,
  // holding it against removal (and other runs); NotFound, without calling
  // `run`, when it is gone. Returns what `run` returns.
  nasgw::Status RunSnapshotSchedule(const std::string& volume, const std::string& name,
                                    const std::function<nasgw::Status(const fs::SnapshotSchedule&)>& run);
  nasgw::Status MarkScheduleRun(const std::string& volume, const std::string& name, int64_t when);

  // ---- NFS exports (Unavailable unless the reserve is online; the rules
  // are fs::Domain's). A change that committed stays committed even if the
  // exports file cannot be written then: *publish_error (when given) says
  // why, and the next change or start writes it again.
  Result<std::vector<fs::Export>> ListExports();
  Result<fs::Export> GetExport(uint32_t id);
  Result<fs::Export> FindExport(const std::string& pseudo);
  Result<fs::Export> AddExport(const fs::Export& spec, std::string* publish_error = nullptr);
  Result<fs::Export> RemoveExport(uint32_t id, std::string* publish_error = nullptr);
  // Writes [nfs] exports_file from the online domain's exports and signals
  // ganesha.nfsd ([nfs] ganesha_pid_file). Nothing when exports_file is not
  // configured or the reserve is not online.
  nasgw::Status PublishExports();

  // ---- SMB shares, as exports (Unavailable unless the reserve is online;
  // the rules are NormalizeShare's and fs::Domain's).
  Result<std::vector<fs::Share>> ListShares();
  Result<fs::Share> GetShare(const std::string& name);
  Result<fs::Share> AddShare(const fs::Share& spec, std::string* publish_error = nullptr);
  Result<fs::Share> RemoveShare(const std::string& name, std::string* publish_error = nullptr);
  // Writes [smb] shares_file from the online domain's shares and signals
  // smbd ([smb] smbd_pid_file). Nothing when shares_file is not configured
  // or the reserve is not online.
  nasgw::Status PublishShares();

  // Domain 0, null unless online. Shared so a head request in flight keeps
  // it alive through a concurrent Shutdown.
  std::shared_ptr<fs::Domain> domain() const;
  // Every domain heads act on (null unless online), with the write verifier
  // of this opening of them: a random value (never 0) drawn every time the
  // node opens or creates them, so it changes whenever data heads wrote
  // unstable may have been lost (a restart, a crash, a takeover); 0 unless
  // online. One for all the domains: a head sees one node. The head service
  // puts it in WRITE, FSYNC and HELLO replies. `lease`, when given, gets the
  // owner's lease (null unless online).
  std::shared_ptr<const DomainSet> domains(uint64_t* write_verifier, std::shared_ptr<fs::Lease>* lease) const;

  // Flushes and closes the domain and the reserve, and closes the LUNs. The
  // state then reads kFailed, "shut down". Idempotent.
  void Shutdown();

  // Takes the reserve from the node that holds it: without `force`, only
  // once the holder's lease has run out as this node observed it (it has
  // not renewed for a whole lease) or the holder released it; with `force`,
  // from any holder, which is fenced off the LUNs (its key preempted) and
  // stops writing. Then opens the reserve here (replaying what the holder
  // left). FailedPrecondition when the holder's lease still runs, or the
  // reserve is already online here.
  nasgw::Status TakeoverReserve(bool force);

  ClusterStatus GetCluster() const;
  // A planned move: flushes and closes the domain, removes the VIPs and
  // exports, releases the reserve and stands by, so that the partner (which
  // must stand by and be heard) takes it over. FailedPrecondition without
  // such a partner or when not online, and when the partner does not take
  // a free reserve by itself ([cluster] auto_takeover = false there) unless
  // `partner_asked` (its `cluster takeover`); Busy when heads still hold the
  // domain after [shutdown] drain_ms (then the reserve stays owned here).
  nasgw::Status GiveBack(bool partner_asked = false);
  // Shared ([cluster] home_domains): what GiveBack does, giving the partner
  // the domains that are not this node's home ones and keeping those
  // online (FailedPrecondition when it serves only its own).
  nasgw::Status GiveBackDomains();
  // A head's request was answered from the domain here (HeadService's
  // served hook): the first after an automatic takeover ends its timeline
  // ("first op served"). Cheap otherwise: one atomic load.
  void NoteServed(std::string_view op);
  // What GiveBack calls first to flush the write-back cache (nasgwd's head
  // service); nullptr clears it and waits for a call in progress.
  void SetFlushHook(std::function<nasgw::Status()> hook);
  // Head forwarding ([cluster] forward_peer): true while this node's heads
  // are relayed to the partner, i.e. while it stands by or was fenced
  // (docs/cluster.md, "Forwarding").
  bool HeadsGoToPartner() const { return heads_to_partner_.load(); }
  // Called, with no lock of the node held, whenever that changes (nasgwd:
  // the head server cuts its connections, so that heads connect again and
  // are routed anew: HeadsMove::kReroute), and when the partner is gone
  // while this node serves (kCutForwarded: the connections the partner
  // relayed here are cut at once, HeadServer::CutForwarded). Null to
  // unset; waits for a call in progress.
  enum class HeadsMove { kReroute, kCutForwarded };
  void SetRerouteHook(std::function<void(HeadsMove move, const std::string& why)> hook);
  // A planned move the other way, on the standby: asks the owner (heard on
  // the interconnect) to give the reserve back, and waits at most
  // `timeout_ms` for it to come online here.
  nasgw::Status RequestTakeover(uint32_t timeout_ms);

  // Head server statistics feed NodeStatus.
  std::atomic<uint32_t> head_connections{0};
  std::atomic<uint64_t> head_requests{0};

 private:
  Node() = default;
  // What the partner's memory held of each domain's log, by domain id
  // (null: nothing).
  using Tails = std::vector<std::shared_ptr<const fs::LogTail>>;
  // Reads the state from the LUNs and, for a reserve, takes ownership in
  // `mode` and opens it: sets reserve_, domain_, owner_, state_, reason_.
  // With the cache mirror, the partner's copy of the domain's log is taken
  // first: this node's own (frozen: no more answers to the owner) or, when
  // this node was not fed the owner's stream, the partner's (FetchMirror).
  void OpenReserveLocked(fs::AcquireMode mode = fs::AcquireMode::kNormal) REQUIRES(mu_);
  // Opens the domains of `reserve` that `opened` lacks (all at first; only
  // those of `ids` when given), into it; the first failure, naming the
  // domain.
  nasgw::Status OpenDomains(const std::shared_ptr<fs::Reserve>& reserve, const Tails& tails, DomainSet* opened,
                            const std::vector<uint32_t>& ids = {}) const;
  // Active/active ([cluster] home_domains; docs/cluster.md, "Both nodes
  // serving"): both nodes share the reservation and each owns the domains
  // it serves. A DomainSet then holds null for the partner's domains.
  bool Shared() const { return config_.cluster_enabled && !config_.cluster_home_domains.empty(); }
  // An online node of a shared pair takes the domains it does not serve
  // (the partner's: preempting its key unless `mode` is kNormal, which takes
  // only free ones), replaying what the partner's mirror held of them.
  // `only`: just those (empty: every domain not served here).
  nasgw::Status TakePartnerDomainsLocked(fs::AcquireMode mode, const std::vector<uint32_t>& only = {}) REQUIRES(mu_);
  // Shared, online: this node's home domains that are free (given back
  // one record at a time, or released by a partner stopping) are taken
  // (cluster thread, every few heartbeats).
  void TakeFreeHomeDomains() EXCLUDES(mu_);
  // Which domain's owner record the owner thread watches: domain 0 (the
  // reserve's), or, shared, this node's first home domain while it does not
  // serve, and the first domain it does not serve (the partner's) while it
  // does; kNoWatch: none (it serves them all).
  static constexpr uint32_t kNoWatch = UINT32_MAX;
  void ChooseWatchDomainLocked() REQUIRES(mu_);
  // The end of an opening whose domains opened: the mirror copy dropped, an
  // interrupted LUN add completed, the node online.
  void FinishOpenLocked(std::shared_ptr<fs::Reserve> reserve, DomainSet domains, const Tails& tails) REQUIRES(mu_);
  // Opens the domain again after a failed opening (pending_open_), once
  // due, from the owner thread (takes admin_mu_, then mu_ only around the
  // opening). True when it is online now.
  bool RetryOpenIfDue();
  // Notes a failed opening in pending_open_ (one more attempt, the next one
  // backed off), the reason and the log.
  void OpenFailedLocked(const nasgw::Status& why) REQUIRES(mu_);
  // The owner's side of the cache mirror: streams online domain `id`'s
  // intent log to the partner, again after every break; the partner's
  // side: takes the owner's stream of it again once this node stands by
  // (own thread).
  void MirrorLoop(uint32_t id);
  // LUN status for member `index` of the reserve (or device position when
  // not online).
  LunStatus LunStatusLocked(uint32_t index, const std::shared_ptr<block::BlockDevice>& lun) const REQUIRES_SHARED(mu_);
  // The online domains (Unavailable, saying why, unless online); the one
  // holding volume `name` (NotFound when none does); the one whose export
  // ids hold `id`.
  Result<std::shared_ptr<const DomainSet>> OnlineDomains() const;
  Result<std::shared_ptr<fs::Domain>> DomainOfVolume(const std::string& name) const;
  Result<std::shared_ptr<fs::Domain>> DomainOfExport(uint32_t id) const;
  // Every domain's exports or shares, in domain order.
  static Result<std::vector<fs::Export>> ExportsOf(const DomainSet& domains);
  static Result<std::vector<fs::Share>> SharesOf(const DomainSet& domains);
  nasgw::Status PublishExportsLocked() REQUIRES(exports_mu_);
  nasgw::Status PublishSharesLocked() REQUIRES(exports_mu_);
  // Called by the gate when ownership is lost (any thread, must not block).
  void OnOwnershipLost(const nasgw::Status& why);
  // Waits for heads to let go of `domains` (at most drain_ms), closes them
  // and releases the reserve (Busy, and kept, if they did not).
  bool WaitDrained(const std::shared_ptr<const DomainSet>& domains) const;
  // Puts back domains that were being closed but that heads still hold (the
  // ownership was never given up): online again, as before.
  void RestoreOnlineLocked(std::shared_ptr<const DomainSet> domains, std::shared_ptr<fs::Reserve> reserve,
                           std::unique_ptr<fs::Ownership> owner) REQUIRES(mu_);
  nasgw::Status CloseAndRelease(std::shared_ptr<const DomainSet> domains, std::shared_ptr<fs::Reserve> reserve,
                                std::unique_ptr<fs::Ownership> owner);
  // The owner thread: turns a loss into kFenced, watches the holder while
  // standby or fenced.
  void OwnerLoop();
  // Reads the owner record for the watch (the SAN read under the node's
  // lock: admin paths that act on what it says), or applies one read
  // without it (the owner thread).
  void ObserveOwnerLocked() REQUIRES(mu_);
  void ApplyOwnerLocked(const Result<fs::OwnerView>& v) REQUIRES(mu_);
  // The cluster thread: sends this node's heartbeat every interval and, on
  // a standby, takes over when the peer monitor says so.
  void ClusterLoop();
  void ClusterStep(uint64_t seq);
  void AutoTakeover(const cluster::Judgement& j);
  void ClusterEventLocked(uint64_t start_mono_ns, std::string what) REQUIRES(cluster_mu_);
  // Adds the VIPs while online, holds those the owner gives it while it
  // stands by, removes them otherwise (cluster thread; GiveBack), by the
  // state read under vip_mu_.
  void ReconcileVips() EXCLUDES(mu_);
  // In a pair, a node that does not serve offers no exports or shares.
  void WithdrawExportsUnlessOnline(bool online);
  // The VIP interface has been down for network_dead_ms (cluster thread).
  bool LanDownLongEnough(bool lan_up, uint64_t now);
  // Shared: the partner's domains go back to it once it has stood by, heard
  // and reaching the clients' LAN, for two network bounds and their
  // addresses' clients are quiet (vip_idle_ms), or vip_move_max_ms has
  // passed (cluster thread).
  void FailBackIfDue(uint64_t now);
  uint64_t failback_fit_since_mono_ns_ = 0;  // the cluster thread's own

  Config config_;
  LunOpener opener_;
  fs::DomainOptions domain_options_;
  int64_t started_unix_ = 0;
  // The lock order (docs/architecture.md): admin_mu_, exports_mu_ (or
  // schedule_mu_), mu_, then the reserve's and the domain's locks; lost_mu_
  // is a leaf.
  mutable Mutex admin_mu_ ACQUIRED_BEFORE(exports_mu_);  // Format, AddLun, takeover, shutdown
  // Export and share changes and their files, one at a time, so that each
  // file always follows the last change.
  Mutex exports_mu_ ACQUIRED_BEFORE(mu_);
  // A schedule's run (a cache flush, a snapshot, deletions) or removal, one
  // at a time.
  Mutex schedule_mu_ ACQUIRED_BEFORE(mu_);
  // Volume creations and clones, one at a time, so that a name is found
  // free in every domain and taken in one.
  Mutex names_mu_ ACQUIRED_AFTER(exports_mu_, schedule_mu_) ACQUIRED_BEFORE(mu_);
  mutable SharedMutex mu_;
  std::vector<std::string> added_urls_ GUARDED_BY(admin_mu_);  // <state_dir>/luns, as given
  std::vector<std::string> urls_ GUARDED_BY(mu_);              // configured + added, as opened (may hold secrets)
  std::vector<std::shared_ptr<block::BlockDevice>> devices_ GUARDED_BY(mu_);  // same order as urls_
  std::shared_ptr<fs::Reserve> reserve_ GUARDED_BY(mu_);
  std::shared_ptr<const DomainSet> domains_ GUARDED_BY(mu_);  // online: every domain of reserve_
  uint64_t write_verifier_ GUARDED_BY(mu_) = 0;               // drawn with every domains_ opened or created
  ReserveState state_ GUARDED_BY(mu_) = ReserveState::kUnformatted;
  std::string reason_ GUARDED_BY(mu_);

  // Ownership. The identity is fixed at Start; the gate and the gated LUNs
  // are new for every attempt to own the reserve.
  fs::NodeIdentity identity_;
  fs::OwnershipOptions ownership_options_;
  int state_lock_fd_ = -1;  // <state_dir>/lock, held for life
  std::shared_ptr<block::WriteGate> gate_ GUARDED_BY(mu_);
  std::vector<std::shared_ptr<block::BlockDevice>> gated_ GUARDED_BY(mu_);  // in reserve index order
  Uuid reserve_uuid_ GUARDED_BY(mu_);                                       // of the labels seen
  std::unique_ptr<fs::Ownership> owner_ GUARDED_BY(mu_);
  fs::OwnerWatch watch_ GUARDED_BY(mu_);  // standby and fenced (and shared online: the partner's)
  uint32_t watch_domain_ GUARDED_BY(mu_) = 0;
  std::string owner_text_ GUARDED_BY(mu_);
  uint64_t fenced_total_ GUARDED_BY(mu_) = 0;
  Mutex lost_mu_ ACQUIRED_AFTER(mu_);  // a leaf: the gate's close callback may run under mu_
  CondVar owner_cv_;
  bool owner_stop_ GUARDED_BY(lost_mu_) = false;
  std::optional<nasgw::Status> lost_ GUARDED_BY(lost_mu_);
  std::thread owner_thread_;
  uint64_t owner_read_ok_mono_ns_ GUARDED_BY(mu_) = 0;  // the last successful read of the owner record
  // A domain that did not open although this node owns the reserve (state
  // kFailed): a start's or a takeover's opening that met a SAN error. The
  // owner thread tries again, backing off from 1 s to 30 s, with the same
  // copy of the partner's mirror (kept frozen meanwhile: this node owns the
  // reserve, so it alone may open the domain, and it alone holds what the
  // old owner acknowledged from the mirror). A pair would otherwise stand
  // with nobody serving: the partner sees this node alive and owning.
  // The domains that did open are kept open meanwhile (each replayed its
  // log: never opened twice), and only the others are tried again.
  struct PendingOpen {
    std::shared_ptr<fs::Reserve> reserve;
    Tails tails;
    DomainSet opened;  // by id; null: not open yet
    uint64_t next_try_mono_ns = 0;
    uint32_t attempts = 0;      // failed so far
    std::vector<uint32_t> ids;  // the domains owned (shared); empty: all
  };
  std::optional<PendingOpen> pending_open_ GUARDED_BY(mu_);
  static constexpr uint64_t kOpenRetryMinMs = 1000, kOpenRetryMaxMs = 30'000;

  // The controller pair ([cluster] enabled). cluster_mu_ is a leaf: the
  // interconnect's handlers take it from their own thread.
  std::unique_ptr<cluster::Interconnect> interconnect_;
  mutable Mutex cluster_mu_ ACQUIRED_AFTER(mu_);
  CondVar cluster_cv_;
  bool cluster_stop_ GUARDED_BY(cluster_mu_) = false;
  std::unique_ptr<cluster::PeerMonitor> monitor_ GUARDED_BY(cluster_mu_);
  cluster::Judgement judgement_ GUARDED_BY(cluster_mu_);
  uint64_t takeovers_ GUARDED_BY(cluster_mu_) = 0;
  uint64_t next_takeover_mono_ns_ GUARDED_BY(cluster_mu_) = 0;
  std::optional<cluster::GiveBackRequest> giveback_request_ GUARDED_BY(cluster_mu_);
  // CPG's membership changed (a node left, joined, the ring broke): the
  // cluster thread steps at once instead of at the next interval.
  bool membership_changed_ GUARDED_BY(cluster_mu_) = false;
  bool takeover_requested_ GUARDED_BY(cluster_mu_) = false;  // RequestTakeover waits for the free reserve
  std::vector<ClusterEvent> last_takeover_ GUARDED_BY(cluster_mu_);
  std::thread cluster_thread_;
  // The VIPs and whether exports are withdrawn: changed by the cluster
  // thread, a giveback and Shutdown, one at a time.
  Mutex vip_mu_ ACQUIRED_BEFORE(exports_mu_, cluster_mu_);
  std::unique_ptr<cluster::VipSet> vips_;  // set at Start
  // Which addresses this node holds; on the owner, which it gave the
  // partner (head forwarding spreads them: docs/cluster.md); the addresses
  // still to be announced again, for announce_left_ more heartbeats.
  cluster::VipMask vips_mask_ GUARDED_BY(vip_mu_) = 0;
  cluster::VipMask vips_assigned_ GUARDED_BY(vip_mu_) = 0;
  cluster::VipMask announce_mask_ GUARDED_BY(vip_mu_) = 0;
  uint64_t partner_fit_since_mono_ns_ GUARDED_BY(vip_mu_) = 0;  // the partner could hold addresses since
  uint64_t vips_assigned_mono_ns_ GUARDED_BY(vip_mu_) = 0;      // when vips_assigned_ last grew
  // The masks for this node's heartbeat.
  void VipMasks(uint64_t* assigned, uint64_t* held);
  bool exports_withdrawn_ GUARDED_BY(vip_mu_) = false;
  // Head forwarding: the owner's exports and shares as it last sent them
  // (received on the interconnect's thread), what this node published of
  // them (its ganesha's and smbd's calls are relayed to the owner), and, on
  // the owner, what it last sent and when.
  std::optional<cluster::Catalog> catalog_ GUARDED_BY(cluster_mu_);
  std::string catalog_published_ GUARDED_BY(vip_mu_);
  // A message sent again and again (the catalog, the connections, the NFSv4
  // records): what the cluster thread last sent and at which step, and
  // `resend`, set when a node joined the interconnect's group (the
  // callback's thread), so that it goes out at the next step, not up to
  // kCatalogEvery later.
  struct Repeated {
    std::string sent;
    uint64_t sent_seq = 0;
    std::atomic<bool> resend{false};
  };
  // Sends `bytes` if they changed, kCatalogEvery steps passed, or a node
  // joined (cluster thread).
  void SendIfDue(Repeated& r, std::string bytes, uint64_t seq);
  Repeated catalog_out_, conns_out_, recovery_out_;
  static constexpr uint64_t kCatalogEvery = 10;          // heartbeats between two sendings of an unchanged catalog
  static constexpr uint32_t kGraceCallTimeoutMs = 5000;  // ganesha's DBus answer to a grace request
  // SM_NOTIFYs to the partner's NLM clients are sent again until then: well
  // within ganesha's grace period (90 s by default), after which their
  // reclaims would be refused anyway.
  static constexpr uint32_t kNlmNotifyTimeoutMs = 30'000;
  bool Forwarding() const { return config_.cluster_enabled && !config_.cluster_forward_peer.empty(); }
  void SendCatalog(uint64_t seq);
  static constexpr int kVipAnnounceRepeats = 5;  // gratuitous ARPs again at the next heartbeats
  int announce_left_ GUARDED_BY(vip_mu_) = 0;
  // Tickle ACKs: the partner's client connections as it last sent them
  // (kConnections, on the interconnect's thread); the ones of addresses
  // this node took, tickled kTickleRepeats times kTickleSpacingMs apart (a
  // Linux client answers at most one out-of-window segment per
  // tcp_invalid_ratelimit, 500 ms, so closer repeats would be ignored when
  // the first answer went astray); this node's own list as last sent (the
  // cluster thread's).
  std::optional<cluster::Connections> partner_conns_ GUARDED_BY(cluster_mu_);
  std::vector<cluster::TcpConn> tickle_ GUARDED_BY(vip_mu_);
  cluster::VipMask tickle_mask_ GUARDED_BY(vip_mu_) = 0;
  int tickle_left_ GUARDED_BY(vip_mu_) = 0;
  uint64_t tickle_next_mono_ns_ GUARDED_BY(vip_mu_) = 0;
  static constexpr int kTickleRepeats = 3;
  static constexpr uint64_t kTickleSpacingMs = 600;
  std::atomic<uint64_t> tickles_sent_{0};
  bool conns_truncated_logged_ = false;
  // NFSv4 reclaims after a takeover (daemon/nfs_recovery.h), when [nfs]
  // ganesha_recovery_dir is set. Sent: this node's ganesha's records, as
  // last sent (cluster thread). The partner's, as received, written to
  // disk by the cluster thread when dirty.
  void SendRecovery(uint64_t seq);
  void KeepPartnerRecovery();
  // Starts ganesha's takeover grace period (on grace_thread_, not the
  // cluster thread: DBus may be slow), unless one is being started; then
  // sends the partner's NLM clients an SM_NOTIFY from each address of
  // `moved` (daemon/nlm_notify.h), when [nfs] statd_dir is set.
  void StartTakeoverGraceAsync(std::vector<uint32_t> moved);
  void NotifyNlmClients(const std::vector<std::string>& nlm, const std::vector<uint32_t>& moved);
  bool nlm_truncated_logged_ = false;
  bool nlm_failed_logged_ = false;
  bool recovery_failed_logged_ = false;
  cluster::Recovery recovery_last_;  // as last listed (cluster thread)
  std::atomic<size_t> partner_nlm_clients_{0};
  std::atomic<uint64_t> nlm_notified_{0};
  std::atomic<uint64_t> nlm_unreachable_{0};
  bool recovery_truncated_logged_ = false;
  std::optional<cluster::Recovery> partner_recovery_ GUARDED_BY(cluster_mu_);
  bool partner_recovery_dirty_ GUARDED_BY(cluster_mu_) = false;
  bool partner_nlm_dirty_ GUARDED_BY(cluster_mu_) = false;  // kept in <state_dir>/partner-nlm-clients
  // At start: what KeepPartnerRecovery kept before this nasgwd stopped.
  void LoadPartnerRecovery();
  std::atomic<size_t> partner_records_{0};  // on disk, the partner's clients that may reclaim here
  std::thread grace_thread_;                // the cluster thread's (started and joined by it, and at Shutdown)
  // Whether grace_thread_ runs; addresses added meanwhile, whose NLM
  // clients it tells before it ends.
  bool grace_running_ GUARDED_BY(cluster_mu_) = false;
  std::vector<uint32_t> grace_pending_ GUARDED_BY(cluster_mu_);
  std::atomic<bool> grace_stop_{false};  // set by Shutdown
  std::atomic<uint64_t> takeover_graces_{0};
  void SendConnections(uint64_t seq);
  uint64_t lan_down_since_mono_ns_ = 0;  // the cluster thread's own
  bool lan_stay_said_ = false;           // the same
  // Held across the hook's call; taken before exports_mu_ (GiveBack holds
  // admin_mu_ only).
  Mutex flush_hook_mu_ ACQUIRED_AFTER(admin_mu_) ACQUIRED_BEFORE(vip_mu_);
  std::function<nasgw::Status()> flush_hook_ GUARDED_BY(flush_hook_mu_);
  // Where heads go (HeadsGoToPartner), and what to call when it changes.
  // RouteHeadsByState routes as the state is now, read under route_mu_ (a
  // state read earlier, by a heartbeat or before a fencing, would route
  // them wrong for an interval), and not while a giveback moves the heads
  // itself (RouteHeadsLocked: it routes them before the state changes).
  void RouteHeadsByState() EXCLUDES(mu_, route_mu_);
  void RouteHeadsLocked(ReserveState state) REQUIRES(route_mu_);
  Mutex route_mu_ ACQUIRED_AFTER(admin_mu_, flush_hook_mu_) ACQUIRED_BEFORE(mu_);
  bool giving_back_ GUARDED_BY(route_mu_) = false;
  std::atomic<bool> heads_to_partner_{false};
  Mutex reroute_mu_ ACQUIRED_AFTER(admin_mu_);  // no other lock of the node is taken under it
  std::function<void(HeadsMove, const std::string&)> reroute_hook_ GUARDED_BY(reroute_mu_);
  // Set by ReconcileVips when it takes addresses of a partner that is not
  // heard; the cluster thread then cuts the partner's relayed heads
  // (HeadsMove::kCutForwarded), outside the VIP lock.
  std::atomic<bool> cut_forwarded_{false};
  std::string vip_error_ GUARDED_BY(cluster_mu_);
  // The partner's [cluster] vips differ from ours (heard so at the last
  // heartbeat): logged once, shown in status.
  std::atomic<bool> vips_mismatch_{false};
  // The cache mirror: the partner's side (what this node holds of the
  // owner's log) and the owner's (the stream MirrorLoop keeps).
  std::unique_ptr<cluster::MirrorServer> mirror_server_;  // set at Start
  mutable Mutex mirror_mu_;                               // a leaf
  CondVar mirror_cv_;
  bool mirror_stop_ GUARDED_BY(mirror_mu_) = false;
  // Per domain (one stream each: the partner holds each domain's log
  // apart), by id, for the domains of the reserve last seen.
  uint32_t mirror_domains_ GUARDED_BY(mirror_mu_) = 1;
  std::array<std::shared_ptr<cluster::MirrorStream>, fs::kReserveDomainsMax> mirror_stream_
      GUARDED_BY(mirror_mu_);                                                          // streaming now
  std::array<std::string, fs::kReserveDomainsMax> mirror_why_ GUARDED_BY(mirror_mu_);  // why not streaming
  std::vector<std::thread> mirror_threads_ GUARDED_BY(mirror_mu_);                     // MirrorLoop(id), by id
  // With the mirror: a MirrorLoop for each of `count` domains (the reserve
  // seen has that many).
  void MirrorDomains(uint32_t count) EXCLUDES(mirror_mu_);
  // The takeover whose first answered request is still to come (NoteServed).
  std::atomic<bool> first_served_pending_{false};
  uint64_t first_served_start_mono_ns_ GUARDED_BY(cluster_mu_) = 0;
  uint64_t takeover_start_mono_ns_ GUARDED_BY(cluster_mu_) = 0;  // of the takeover whose VIPs are not added yet
};

}  // namespace nasgw::daemon
