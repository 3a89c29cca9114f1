#include "daemon/node.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <fstream>
#include <iterator>
#include <sstream>
#include <thread>

#include "base/clock.h"
#include "base/limits.h"
#include "base/log.h"
#include "base/mutex.h"
#include "block/iscsi_device.h"
#include "block/iscsi_url.h"
#include "daemon/export_rules.h"
#include "daemon/nfs_exports.h"
#include "daemon/nfs_recovery.h"
#include "daemon/nlm_notify.h"
#include "daemon/smb_shares.h"

#include <sys/file.h>
#include <sys/random.h>
#include <sys/stat.h>

#ifndef NASGW_VERSION
#define NASGW_VERSION "0.1.0-dev"
#endif

namespace nasgw::daemon {

// The partner takes a stream per domain and a fetch or two (MirrorLoop,
// OpenReserveLocked).
static_assert(cluster::MirrorServer::kConnectionsMax >= static_cast<int>(fs::kReserveDomainsMax) + 2);

// The heartbeat's state byte is ReserveState's number (cluster/message.h).
static_assert(static_cast<uint8_t>(ReserveState::kOnline) == cluster::kStateOnline);
static_assert(static_cast<uint8_t>(ReserveState::kStandby) == cluster::kStateStandby);
static_assert(static_cast<uint8_t>(ReserveState::kFenced) == cluster::kStateFenced);

const char* ReserveStateName(ReserveState s) {
  switch (s) {
    case ReserveState::kUnformatted:
      return "unformatted";
    case ReserveState::kOnline:
      return "online";
    case ReserveState::kFailed:
      return "failed";
    case ReserveState::kStandby:
      return "standby";
    case ReserveState::kFenced:
      return "fenced";
  }
  return "unknown";
}

namespace {

int64_t NowUnix() {
  return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

// A URL as it may be shown: as configured, with the CHAP secret replaced.
std::string Redact(const std::string& url) {
  const size_t scheme = url.find("://");
  if (scheme == std::string::npos) return url;
  const size_t at = url.rfind('@');
  if (at == std::string::npos || at < scheme) return url;
  const size_t pct = url.find('%', scheme + 3);
  if (pct == std::string::npos || pct > at) return url;  // a user without a secret
  return url.substr(0, pct + 1) + "***" + url.substr(at);
}

// The configured CHAP credentials added to a URL that has none, as the
// configured LUNs get them.
std::string WithChap(const Config& config, const std::string& url) {
  auto u = block::ParseIscsiUrl(url);
  if (!u.ok() || !u->user.empty() || config.chap_user.empty()) return url;
  Config one = config;
  one.luns = {url};
  auto urls = one.LunUrlsWithChap();
  return urls.size() == 1 ? urls[0] : url;
}

std::string LunsFile(const Config& config) {
  return config.state_dir + "/luns";
}

Status ErrnoStatus(const std::string& what, int err) {
  const std::string m = what + ": " + std::strerror(err);
  if (err == ENOENT) return Status::NotFound(m);
  if (err == EACCES || err == EPERM) return Status::PermissionDenied(m);
  if (err == ENOSPC) return Status::NoSpace(m);
  return Status::IoError(m);
}

// <state_dir>/luns: one URL a line; blank lines and '#' comments ignored.
Result<std::vector<std::string>> ReadRememberedLuns(const Config& config) {
  const std::string path = LunsFile(config);
  std::ifstream in(path);
  if (!in) {
    if (errno == ENOENT) return std::vector<std::string>{};
    return ErrnoStatus("read " + path, errno);
  }
  std::vector<std::string> out;
  std::string line;
  while (std::getline(in, line)) {
    const size_t b = line.find_first_not_of(" \t\r");
    if (b == std::string::npos || line[b] == '#') continue;
    const size_t e = line.find_last_not_of(" \t\r");
    out.push_back(line.substr(b, e - b + 1));
  }
  if (in.bad()) return Status::IoError("read " + path);
  return out;
}

Status MakeStateDir(const std::string& dir) {
  if (dir.empty()) return Status::InvalidArgument("state_dir is empty");
  // Each missing component is created 0700: the directory holds LUN URLs.
  for (size_t pos = 1; pos <= dir.size(); pos++) {
    if (pos != dir.size() && dir[pos] != '/') continue;
    const std::string part = dir.substr(0, pos);
    if (::mkdir(part.c_str(), 0700) != 0 && errno != EEXIST) return ErrnoStatus("create " + part, errno);
  }
  struct stat st {};
  if (::stat(dir.c_str(), &st) != 0) return ErrnoStatus("stat " + dir, errno);
  if (!S_ISDIR(st.st_mode)) return Status::InvalidArgument(dir + " is not a directory");
  return Status();
}

// Replaces <state_dir>/<name> atomically: temp file (0600), fsync, rename,
// fsync of the directory.
Status WriteStateFile(const Config& config, const std::string& path, const std::string& text) {
  NASGW_RETURN_IF_ERROR(MakeStateDir(config.state_dir));
  const std::string tmp = path + ".tmp";
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) return ErrnoStatus("create " + tmp, errno);
  size_t done = 0;
  while (done < text.size()) {
    ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      Status s = ErrnoStatus("write " + tmp, errno);
      ::close(fd);
      ::unlink(tmp.c_str());
      return s;
    }
    done += static_cast<size_t>(n);
  }
  if (::fsync(fd) != 0) {
    Status s = ErrnoStatus("fsync " + tmp, errno);
    ::close(fd);
    ::unlink(tmp.c_str());
    return s;
  }
  ::close(fd);
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    Status s = ErrnoStatus("rename " + tmp, errno);
    ::unlink(tmp.c_str());
    return s;
  }
  int dfd = ::open(config.state_dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    ::fsync(dfd);
    ::close(dfd);
  }
  return Status();
}

Status WriteRememberedLuns(const Config& config, const std::vector<std::string>& urls) {
  std::string text = "# LUNs added to the reserve at run time (nasgw reserve add-lun); written by nasgwd\n";
  for (const auto& u : urls) text += u + "\n";
  return WriteStateFile(config, LunsFile(config), text);
}

// The node's persistent id: <state_dir>/node-id, made at the first start. It
// keys the node's persistent-reservation key and names it in owner records,
// so a restart of the same node reclaims its reserve, and a config copied to
// another machine (with its own state dir) is another node.
Result<Uuid> LoadNodeId(const Config& config) {
  const std::string path = config.state_dir + "/node-id";
  std::ifstream in(path);
  if (in) {
    std::string line;
    std::getline(in, line);
    auto id = Uuid::Parse(line);
    if (!id || id->IsNil()) return Status::Corruption(path + ": not a node id: '" + line + "'");
    return *id;
  }
  if (errno != ENOENT) return ErrnoStatus("read " + path, errno);
  Uuid id = Uuid::Random();
  NASGW_RETURN_IF_ERROR(WriteStateFile(config, path, id.ToString() + "\n"));
  return id;
}

// One nasgwd per state dir: an exclusive lock on <state_dir>/lock, held for
// the process's life (the kernel drops it when the process dies, however it
// dies). Its content is the holder's pid, for the message.
Result<int> LockStateDir(const Config& config) {
  NASGW_RETURN_IF_ERROR(MakeStateDir(config.state_dir));
  const std::string path = config.state_dir + "/lock";
  int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  if (fd < 0) return ErrnoStatus("open " + path, errno);
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    char buf[32] = {};
    ssize_t n = ::pread(fd, buf, sizeof buf - 1, 0);
    ::close(fd);
    if (err == EWOULDBLOCK) {
      std::string pid = n > 0 ? std::string(buf, static_cast<size_t>(n)) : "?";
      while (!pid.empty() && (pid.back() == '\n' || pid.back() == ' ')) pid.pop_back();
      return Status(Code::kBusy, "another nasgwd (pid " + pid + ") runs with state dir " + config.state_dir);
    }
    return ErrnoStatus("lock " + path, err);
  }
  const std::string pid = std::to_string(::getpid()) + "\n";
  if (::ftruncate(fd, 0) != 0 || ::pwrite(fd, pid.data(), pid.size(), 0) != static_cast<ssize_t>(pid.size())) {
    Status s = ErrnoStatus("write " + path, errno);
    ::close(fd);
    return s;
  }
  return fd;
}

bool IsBlank(block::BlockDevice& dev, Status* error) {
  auto copies = fs::ReadLabels(dev);
  if (!copies.ok()) {
    *error = copies.status();
    return false;
  }
  return copies->primary.status().code() == Code::kNotFound && copies->backup.status().code() == Code::kNotFound;
}

LunOpener IscsiOpener(const Config& config) {
  return [config](const std::string& url) -> Result<std::shared_ptr<block::BlockDevice>> {
    block::IscsiOptions o;
    o.urls = {url};
    o.initiator_name = config.initiator;
    o.queue_depth = config.queue_depth;
    o.bulk_target_ms = config.bulk_target_ms;
    o.io_timeout_ms = config.io_timeout_ms;
    o.connect_timeout_ms = config.connect_timeout_ms;
    NASGW_RETURN_IF_ERROR(o.Validate());
    auto d = block::IscsiDevice::Open(o);
    if (!d.ok()) return d.status();
    return std::shared_ptr<block::BlockDevice>(std::move(d.value()));
  };
}

// A write verifier: 64 bits from the kernel's CSPRNG, never 0 (0 means "no
// domain open" to the heads). Random rather than a counter or a clock, so
// that it differs after a restart on this node and on any other node.
uint64_t NewWriteVerifier() {
  uint64_t v = 0;
  while (v == 0) {
    if (::getrandom(&v, sizeof(v), 0) != static_cast<ssize_t>(sizeof(v))) v = 0;
  }
  return v;
}

}  // namespace

Result<std::unique_ptr<Node>> Node::Start(const Config& config, LunOpener opener,
                                          const fs::DomainOptions& domain_options,
                                          std::unique_ptr<cluster::Interconnect> interconnect) {
  std::unique_ptr<Node> node(new Node());
  node->config_ = config;
  node->opener_ = opener ? std::move(opener) : IscsiOpener(config);
  node->domain_options_ = domain_options;
  if (node->domain_options_.store.cache == nullptr) {
    node->domain_options_.store.cache =
        fs::MetaCache::New(limits::SharesOf(uint64_t{config.cache_memory_mib} << 20).meta);
  }
  node->started_unix_ = NowUnix();
  node->ownership_options_.renew_interval_ms = config.renew_interval_ms;
  node->ownership_options_.lease_ms = config.lease_ms;
  node->ownership_options_.preempt_settle_ms = config.preempt_settle_ms;
  node->ownership_options_.shared = config.cluster_enabled && !config.cluster_home_domains.empty();
  NASGW_RETURN_IF_ERROR(node->ownership_options_.Validate().WithContext("[reserve]"));
  auto lock_fd = LockStateDir(config);
  if (!lock_fd.ok()) return lock_fd.status();
  node->state_lock_fd_ = *lock_fd;
  auto node_id = LoadNodeId(config);
  if (!node_id.ok()) return node_id.status();
  node->identity_ = fs::NodeIdentity::ForProcess(config.node_name, *node_id);

  auto remembered = ReadRememberedLuns(config);
  if (!remembered.ok()) return remembered.status();

  std::vector<std::string> urls = config.LunUrlsWithChap();
  const size_t configured = urls.size();
  for (const auto& u : *remembered) urls.push_back(WithChap(config, u));

  // No one else has the node yet; the locks are taken for the analysis.
  MutexLock admin(node->admin_mu_);
  WriterLock lock(node->mu_);
  for (size_t i = 0; i < urls.size(); i++) {
    const std::string shown = Redact(urls[i]);
    bool duplicate = false;
    for (const auto& u : node->urls_) duplicate |= Redact(u) == shown;
    if (duplicate) continue;  // remembered, and configured since: forgotten at the next add
    auto dev = node->opener_(urls[i]);
    if (!dev.ok()) {
      return dev.status().WithContext("LUN " + shown + (i < configured ? "" : " (from " + LunsFile(config) + ")"));
    }
    if (i >= configured) {
      // Remembered before an add that never committed: not a member.
      nasgw::Status err;
      if (IsBlank(**dev, &err)) {
        NASGW_LOG(kWarn, "node") << "remembered LUN carries no label; left out" << Kv("lun", shown);
        continue;
      }
      node->added_urls_.push_back((*remembered)[i - configured]);
    }
    node->urls_.push_back(urls[i]);
    node->devices_.push_back(std::move(dev.value()));
  }
  if (config.cluster_enabled && !config.cluster_mirror_listen.empty()) {
    auto m = cluster::MirrorServer::Start(config.cluster_mirror_listen, config.cluster_mirror_peer);
    if (!m.ok()) return m.status().WithContext("[cluster] mirror");
    node->mirror_server_ = std::move(m.value());
  }
  node->OpenReserveLocked();
  NASGW_LOG(kInfo, "node") << "started" << Kv("node", config.node_name) << Kv("luns", node->devices_.size())
                           << Kv("reserve", ReserveStateName(node->state_)) << Kv("reason", node->reason_)
                           << Kv("key", fs::OwnerKeyText(node->identity_.key()));
  lock.Unlock();
  admin.Unlock();
  node->owner_thread_ = std::thread([n = node.get()] { n->OwnerLoop(); });
  if (node->mirror_server_) node->MirrorDomains(0);  // at least domain 0's (the reserve read above set the count)
  if (config.cluster_enabled) {
    node->interconnect_ = interconnect ? std::move(interconnect)
                                       : cluster::NewCorosyncInterconnect(config.cluster_group, /*retry_ms=*/1000);
    cluster::MonitorOptions mo;
    mo.network_dead_ms = config.cluster_network_dead_ms;
    // Our own reads of the owner record happen every renewal interval.
    mo.disk_read_fresh_ms = 3 * config.renew_interval_ms;
    Node* n = node.get();
    n->LoadPartnerRecovery();
    {
      MutexLock cl(n->cluster_mu_);
      n->monitor_ = std::make_unique<cluster::PeerMonitor>(n->identity_.id, mo, MonotonicNanos());
    }
    n->interconnect_->Start(
        {[n](const cluster::Member& from, std::string_view msg) {
           MutexLock cl(n->cluster_mu_);
           if (auto h = cluster::DecodeHeartbeat(msg)) {
             n->monitor_->OnHeartbeat(from, *h, MonotonicNanos());
           } else if (auto g = cluster::DecodeGiveBack(msg); g && g->to == n->identity_.id) {
             // Acted on by the cluster thread (a giveback closes the domain).
             n->giveback_request_ = *g;
             n->cluster_cv_.NotifyAll();
           } else if (auto cat = cluster::DecodeCatalog(msg); cat && cat->from != n->identity_.id) {
             n->catalog_ = std::move(*cat);  // published by the cluster thread at its next step
           } else if (auto conns = cluster::DecodeConnections(msg); conns && conns->from != n->identity_.id) {
             n->partner_conns_ = std::move(*conns);  // tickled if this node takes their addresses
           } else if (auto rec = cluster::DecodeRecovery(msg); rec && rec->from != n->identity_.id) {
             if (!n->partner_recovery_ || n->partner_recovery_->entries != rec->entries) {
               n->partner_recovery_dirty_ = true;  // written by the cluster thread at its next step
             }
             if (!n->partner_recovery_ || n->partner_recovery_->nlm_clients != rec->nlm_clients) {
               n->partner_nlm_dirty_ = true;  // the same
             }
             n->partner_nlm_clients_ = rec->nlm_clients.size();
             n->partner_recovery_ = std::move(*rec);
           }  // else another kind, or a newer version: not ours
         },
         [n](const std::vector<cluster::Member>& members, const std::vector<cluster::Member>& left) {
           MutexLock cl(n->cluster_mu_);
           const uint64_t now = MonotonicNanos();
           if (left.empty() && members.size() > 1) {
             // Maybe a partner that (re)started: what it must know at once.
             n->conns_out_.resend = true;
             n->catalog_out_.resend = true;
             n->recovery_out_.resend = true;
           }
           if (members.empty()) n->monitor_->OnDisconnected(now);
           for (const auto& m : left) n->monitor_->OnLeft(m, now);
           n->membership_changed_ = true;
           n->cluster_cv_.NotifyAll();  // judge at once: a leave is the fast path of detection
         }});
    NASGW_LOG(kInfo, "cluster") << "controller pair enabled" << Kv("interconnect", n->interconnect_->Describe())
                                << Kv("heartbeat_ms", config.cluster_heartbeat_interval_ms)
                                << Kv("network_dead_ms", config.cluster_network_dead_ms)
                                << Kv("lease_ms", config.lease_ms) << Kv("auto_takeover", config.cluster_auto_takeover);
    if (!config.cluster_vips.empty()) {
      std::vector<cluster::Vip> vips;
      for (const auto& t : config.cluster_vips) {
        auto v = cluster::ParseVip(t);
        if (v.ok()) vips.push_back(*v);  // checked by ParseConfig
      }
      n->vips_ = std::make_unique<cluster::VipSet>(config.cluster_vip_interface, std::move(vips));
      // Addresses an earlier incarnation of this node left (it was killed
      // while the machine lived): not ours until we serve again, and gone
      // before anything of this node answers (the partner may hold them).
      MutexLock vip_lock(n->vip_mu_);
      nasgw::Status released = n->vips_->Release();
      if (!released.ok()) {
        NASGW_LOG(kWarn, "cluster") << "cannot remove client addresses left from before"
                                    << Kv("error", released.ToString());
      }
      n->vips_mask_ = released.ok() ? 0 : n->vips_->all();  // removed again by the cluster thread
    }
    n->cluster_thread_ = std::thread([n] { n->ClusterLoop(); });
  }
  if (config.cluster_enabled && !node->domain()) {
    // In a pair, a node that does not serve withdraws what an earlier
    // incarnation left in the files before it says it is ready: a ganesha
    // or smbd started after it must find no exports it cannot answer.
    node->WithdrawExportsUnlessOnline(false);
    node->RouteHeadsByState();  // before the head server starts: no hook yet
  } else {
    // A failure is logged; the file is written again at the next change.
    node->PublishExports().IgnoreError();
    node->PublishShares().IgnoreError();
  }
  return node;
}

Node::~Node() {
  Shutdown();
}

void Node::OpenReserveLocked(fs::AcquireMode mode) {
  pending_open_.reset();
  domains_.reset();
  reserve_.reset();
  owner_.reset();
  gated_.clear();
  if (devices_.empty()) {
    state_ = ReserveState::kUnformatted;
    reason_ = "no LUNs configured";
    return;
  }
  size_t blank = 0;
  for (const auto& dev : devices_) {
    nasgw::Status err;
    if (IsBlank(*dev, &err)) blank++;
    if (!err.ok()) {
      state_ = ReserveState::kFailed;
      reason_ = err.WithContext("read labels of " + dev->info().name).ToString();
      return;
    }
  }
  if (blank == devices_.size()) {
    state_ = ReserveState::kUnformatted;
    reason_ = "no LUN carries a nasgw label; format the reserve";
    return;
  }
  // Every LUN behind a new gate: closed by a refusal below, by a
  // reservation conflict on any LUN, or by a lost lease.
  gate_ = std::make_shared<block::WriteGate>();
  auto gated = block::Gate(devices_, gate_);
  // Look before owning: the labels say which reserve this is and its LUN
  // order; nothing is written until we own it.
  auto ro = fs::Reserve::Open(gated, /*read_only=*/true);
  if (!ro.ok()) {
    gate_->Close(nasgw::Status::FailedPrecondition("reserve not opened"));
    state_ = ReserveState::kFailed;
    reason_ = ro.status().WithContext("open reserve").ToString();
    return;
  }
  const uint32_t domain_count = (*ro)->domains();
  if (mirror_server_) MirrorDomains(domain_count);  // each domain's stream, taken or given
  for (uint32_t i = 0; i < (*ro)->lun_count(); i++) gated_.push_back((*ro)->lun(i));
  // Shared: the domains this opening may own, its home ones first (the
  // first is acquired with the registration); the others are the partner's
  // until it is taken over.
  std::vector<uint32_t> targets;
  if (Shared()) {
    for (uint32_t id : config_.cluster_home_domains) {
      if (id >= domain_count) {
        gate_->Close(nasgw::Status::FailedPrecondition("reserve not opened"));
        state_ = ReserveState::kFailed;
        reason_ = "[cluster] home_domains names domain " + std::to_string(id) + ", but reserve '" + (*ro)->name() +
                  "' has " + std::to_string(domain_count) + " (nasgw reserve format --domains)";
        gated_.clear();
        return;
      }
      targets.push_back(id);
    }
    for (uint32_t id = 0; id < domain_count; id++) {
      if (std::find(targets.begin(), targets.end(), id) != targets.end()) continue;
      if (mode != fs::AcquireMode::kNormal) {
        targets.push_back(id);  // a takeover: every domain
        continue;
      }
      // The partner's domains this node held when it stopped (a takeover
      // before a crash): its record names this node, so the partner would
      // not take it. Taken back here, and given back by failback.
      auto v = fs::ReadOwner(gated_, (*ro)->uuid(), id);
      if (v.ok() && v->held() && v->record->node_id == identity_.id) targets.push_back(id);
    }
  } else {
    for (uint32_t id = 0; id < domain_count; id++) targets.push_back(id);
  }
  reserve_uuid_ = (*ro)->uuid();
  // What the partner's memory holds of each domain's log (brief decision
  // 5): entries this node's partner answered that the array may lack. A
  // standby takes what it holds, and stops taking the owner's streams
  // first, before it fences the owner (so that nothing more is answered
  // from them); a node starting asks the partner.
  Tails tails(domain_count);
  bool asked_in_vain = false;
  for (uint32_t id : targets) {
    if (!mirror_server_) break;
    cluster::MirrorServer::Frozen frozen = mirror_server_->Freeze(reserve_uuid_, id);
    tails[id] = frozen.tail;
    if (!frozen.streamed && mode == fs::AcquireMode::kNormal && !asked_in_vain) {
      // Not this node's stream: the partner may hold this node's own
      // answers (a restart), or this node's copy was never fed (a takeover
      // back). Not when this opening fences the partner (a takeover): all
      // it can hold is this node's log of an earlier opening, which its own
      // opening replayed onto the array; and a hung partner would hold the
      // takeover for the fetch's whole timeout (the lab's hang took 10 s
      // longer). A partner that did not answer is not asked for the other
      // domains either (each would wait as long).
      auto f = cluster::FetchMirror(config_.cluster_mirror_peer, reserve_uuid_, id);
      if (f.ok()) {
        tails[id] = *f;
      } else {
        asked_in_vain = true;
        NASGW_LOG(kWarn, "node") << "the partner's mirror could not be asked; opening with the array's log alone"
                                 << Kv("domain", id) << Kv("error", f.status().ToString());
      }
    }
  }
  auto unfreeze = [this, reserve = reserve_uuid_, &targets](const std::vector<uint32_t>& keep = {}) {
    for (uint32_t id : targets) {
      if (mirror_server_ && std::find(keep.begin(), keep.end(), id) == keep.end())
        mirror_server_->Unfreeze(reserve, id);
    }
  };
  auto o = fs::Ownership::Acquire(gated_, gate_, reserve_uuid_, targets.front(), identity_, ownership_options_, mode,
                                  [this](const nasgw::Status& why) { OnOwnershipLost(why); });
  if (!o.ok()) {
    unfreeze();
    if (o.status().code() == Code::kFenced) {
      state_ = ReserveState::kStandby;
      reason_ = std::string(o.status().message());
      watch_ = fs::OwnerWatch();
      ObserveOwnerLocked();
      NASGW_LOG(kWarn, "node") << "reserve owned by another node; standing by, writing nothing"
                               << Kv("reserve", (*ro)->name()) << Kv("owner", owner_text_);
    } else if (config_.cluster_enabled) {
      // Not owned here (a PR command or the record's I/O failed): in a pair
      // this node stands by again, so that the cluster thread judges and
      // tries again after its hold-off. Failed, it would never try, and a
      // takeover that already preempted the owner would leave nobody
      // serving.
      state_ = ReserveState::kStandby;
      reason_ = o.status().WithContext("take ownership of reserve '" + (*ro)->name() + "'").ToString();
      watch_ = fs::OwnerWatch();
      ObserveOwnerLocked();
      NASGW_LOG(kError, "node") << "could not take ownership of the reserve; standing by to try again"
                                << Kv("reserve", (*ro)->name()) << Kv("error", o.status().ToString());
    } else {
      state_ = ReserveState::kFailed;
      reason_ = o.status().WithContext("take ownership of reserve '" + (*ro)->name() + "'").ToString();
    }
    owner_cv_.NotifyAll();
    return;
  }
  owner_ = std::move(o.value());
  std::vector<uint32_t> ids;  // shared: the domains owned here
  if (Shared()) {
    for (size_t i = 1; i < targets.size(); i++) {
      nasgw::Status a = owner_->AcquireDomain(targets[i], mode);
      if (!a.ok()) {
        NASGW_LOG(kWarn, "node") << "domain left to its owner" << Kv("domain", targets[i]) << Kv("why", a.ToString());
      }
    }
    ids = owner_->domains();
    unfreeze(ids);  // the partner's: it streams them here still
  }
  auto r = fs::Reserve::Open(gated_);
  if (!r.ok()) {
    state_ = ReserveState::kFailed;
    reason_ = r.status().WithContext("open reserve").ToString();
    owner_->Release().IgnoreError();  // we wrote nothing but the record: give it back
    owner_.reset();
    unfreeze();
    return;
  }
  std::shared_ptr<fs::Reserve> reserve = std::move(r.value());
  for (const auto& repair : reserve->repairs()) NASGW_LOG(kWarn, "node") << "label repaired" << Kv("what", repair);
  DomainSet opened;
  if (nasgw::Status s = OpenDomains(reserve, tails, &opened, ids); !s.ok()) {
    // Kept frozen: this node owns the reserve, and what the mirror held is
    // needed by whoever opens the domain next (the next attempt here).
    // Kept owned: a domain that does not open must not be opened elsewhere
    // by accident either. The owner thread tries again (pending_open_); the
    // admin may also act (fsck --repair, takeover).
    state_ = ReserveState::kFailed;
    pending_open_ = PendingOpen{reserve, tails, std::move(opened), 0, 0, ids};
    OpenFailedLocked(s);
    return;
  }
  FinishOpenLocked(std::move(reserve), std::move(opened), tails);
}

nasgw::Status Node::OpenDomains(const std::shared_ptr<fs::Reserve>& reserve, const Tails& tails, DomainSet* opened,
                                const std::vector<uint32_t>& ids) const {
  opened->resize(reserve->domains());
  for (uint32_t id = 0; id < reserve->domains(); id++) {
    if ((*opened)[id] || (!ids.empty() && std::find(ids.begin(), ids.end(), id) == ids.end())) continue;
    fs::DomainOptions options = domain_options_;
    if (id < tails.size()) options.log.tail = tails[id];
    auto d = fs::Domain::Open(reserve, id, options);
    if (!d.ok()) {
      return reserve->domains() == 1
                 ? d.status()
                 : d.status().WithContext("domain " + std::to_string(id) + " of " + std::to_string(reserve->domains()));
    }
    (*opened)[id] = std::move(d.value());
  }
  return nasgw::Status();
}

void Node::FinishOpenLocked(std::shared_ptr<fs::Reserve> reserve, DomainSet domains, const Tails& tails) {
  pending_open_.reset();
  for (uint32_t id = 0; mirror_server_ && id < domains.size(); id++) {
    if (!domains[id]) continue;  // the partner's (shared)
    if (id < tails.size() && tails[id]) {
      NASGW_LOG(kInfo, "node") << "the partner's mirror of the log taken" << Kv("domain", id)
                               << Kv("held", tails[id]->entries.size())
                               << Kv("replayed", domains[id]->LogStats().tail_replayed);
    }
    mirror_server_->Drop(reserve_uuid_, id);  // on the array now; frozen while this node serves the domain
  }
  // Completes an AddLun that labelled the LUN but stopped before the
  // domains took their groups; nothing to do otherwise.
  for (size_t id = 0; id < domains.size(); id++) {
    if (!domains[id]) continue;
    auto grew = domains[id]->Grow();
    if (!grew.ok()) {
      NASGW_LOG(kWarn, "node") << "grow at open failed" << Kv("domain", id) << Kv("error", grew.status().ToString());
    } else if (*grew > 0) {
      NASGW_LOG(kInfo, "node") << "domain took the groups of an interrupted LUN add" << Kv("domain", id)
                               << Kv("bytes", *grew);
    }
  }
  reserve_ = std::move(reserve);
  domains_ = std::make_shared<const DomainSet>(std::move(domains));
  write_verifier_ = NewWriteVerifier();
  state_ = ReserveState::kOnline;
  reason_.clear();
  owner_text_ = "this node";
  ChooseWatchDomainLocked();
}

void Node::ChooseWatchDomainLocked() {
  uint32_t want = Shared() ? config_.cluster_home_domains.front() : 0;
  if (Shared() && state_ == ReserveState::kOnline && domains_) {
    want = kNoWatch;
    for (uint32_t id = 0; id < domains_->size(); id++) {
      if (!(*domains_)[id]) {
        want = id;
        break;
      }
    }
  }
  if (want != watch_domain_) {
    watch_domain_ = want;
    watch_ = fs::OwnerWatch();
  }
}

bool Node::RetryOpenIfDue() {
  {
    ReaderLock lock(mu_);
    if (!pending_open_ || state_ != ReserveState::kFailed || !owner_ ||
        MonotonicNanos() < pending_open_->next_try_mono_ns) {
      return false;
    }
  }
  // No other opening of the reserve meanwhile (a takeover, a format, the
  // shutdown hold admin_mu_); the node's own lock is not held while the
  // domain opens: on a SAN that keeps failing that lasts its I/O timeouts,
  // and heartbeats, heads and status calls must not wait for it.
  MutexLock admin(admin_mu_);
  PendingOpen p;
  std::shared_ptr<fs::Lease> lease;
  {
    ReaderLock lock(mu_);
    if (!pending_open_ || state_ != ReserveState::kFailed || !owner_) return false;
    p = *pending_open_;
    lease = owner_->lease();
  }
  nasgw::Status s = OpenDomains(p.reserve, p.tails, &p.opened, p.ids);
  DomainSet discard;  // closed after the lock is given up
  WriterLock lock(mu_);
  if (!pending_open_ || pending_open_->reserve != p.reserve || state_ != ReserveState::kFailed || !owner_ ||
      owner_->lease() != lease) {
    discard = std::move(p.opened);  // (also those of the pending opening: only it could have opened them)
    return false;
  }
  if (s.ok()) {
    if (nasgw::Status held = lease->Check(); !held.ok()) {
      discard = std::move(p.opened);  // lost meanwhile: the owner loop fences the node at its next round
      return false;
    }
    NASGW_LOG(kWarn, "node") << "the domains opened on a later attempt; serving" << Kv("attempts", p.attempts + 1);
    FinishOpenLocked(std::move(p.reserve), std::move(p.opened), p.tails);
    return true;
  }
  pending_open_->opened = std::move(p.opened);  // those that did open stay open
  OpenFailedLocked(s);
  return false;
}

void Node::OpenFailedLocked(const nasgw::Status& why) {
  PendingOpen& pending = *pending_open_;
  pending.attempts++;
  const uint64_t backoff_ms =
      std::min<uint64_t>(kOpenRetryMaxMs, kOpenRetryMinMs << std::min<uint32_t>(pending.attempts - 1, 5));
  pending.next_try_mono_ns = MonotonicNanos() + backoff_ms * kNanosPerMilli;
  reason_ = why.WithContext((pending.reserve->domains() == 1 ? "open domain 0" : "open the domains") +
                            (" of reserve '" + pending.reserve->name() + "'"))
                .ToString() +
            (pending.attempts == 1 ? "" : "; tried " + std::to_string(pending.attempts) + " times") + "; trying again";
  NASGW_LOG(kError, "node") << "the domain did not open; owning the reserve, trying again"
                            << Kv("attempts", pending.attempts) << Kv("next_in_ms", backoff_ms)
                            << Kv("error", why.ToString());
}

void Node::OnOwnershipLost(const nasgw::Status& why) {
  {
    MutexLock lock(lost_mu_);
    if (!lost_) lost_ = why;
  }
  owner_cv_.NotifyAll();
}

void Node::ObserveOwnerLocked() {
  ChooseWatchDomainLocked();
  if (gated_.empty() || watch_domain_ == kNoWatch) return;
  ApplyOwnerLocked(fs::ReadOwner(gated_, reserve_uuid_, watch_domain_));
}

void Node::ApplyOwnerLocked(const Result<fs::OwnerView>& v) {
  if (!v.ok()) {
    owner_text_ = "unknown: " + v.status().ToString();
    return;
  }
  watch_.Observe(*v, MonotonicNanos(), WallNanos());
  owner_read_ok_mono_ns_ = MonotonicNanos();
  owner_text_ = v->Describe(WallNanos());
}

void Node::ClusterLoop() {
  uint64_t seq = 0;
  MutexLock lock(cluster_mu_);
  while (!cluster_stop_) {
    cluster_cv_.WaitFor(
        cluster_mu_, std::chrono::milliseconds(config_.cluster_heartbeat_interval_ms),
        [&]() REQUIRES(cluster_mu_) { return cluster_stop_ || giveback_request_.has_value() || membership_changed_; });
    if (cluster_stop_) break;
    membership_changed_ = false;  // this step judges the new membership
    std::optional<cluster::GiveBackRequest> giveback = giveback_request_;
    giveback_request_.reset();
    lock.Unlock();
    if (giveback) {
      bool ours = false;
      {
        ReaderLock node_lock(mu_);
        ours = state_ == ReserveState::kOnline && giveback->reserve == reserve_uuid_;
      }
      if (ours) {
        NASGW_LOG(kWarn, "cluster") << "the partner asks for the reserve (planned takeover)"
                                    << Kv("from", giveback->from.ToString());
        nasgw::Status s = GiveBack(/*partner_asked=*/true);
        if (!s.ok()) NASGW_LOG(kWarn, "cluster") << "planned giveback refused" << Kv("error", s.ToString());
      }
    }
    ClusterStep(++seq);
    lock.Lock();
  }
}

void Node::ClusterStep(uint64_t seq) {
  cluster::Heartbeat h;
  h.node_id = identity_.id;
  h.incarnation = identity_.incarnation;
  h.name = config_.node_name;
  h.seq = seq;
  cluster::DiskView disk;
  bool standby = false, judge_partner = false;
  uint32_t disk_domain = 0;
  const uint64_t now = MonotonicNanos();
  {
    ReaderLock lock(mu_);
    h.state = static_cast<uint8_t>(state_);
    h.reserve = reserve_uuid_;
    if (state_ == ReserveState::kFenced || state_ == ReserveState::kFailed) h.reason = reason_;
    standby = state_ == ReserveState::kStandby;
    // Shared, an online node judges the partner too, by the record of a
    // domain it holds (ChooseWatchDomainLocked).
    judge_partner = Shared() && state_ == ReserveState::kOnline && watch_domain_ != kNoWatch;
    disk_domain = watch_domain_;
    if ((standby || judge_partner) && owner_read_ok_mono_ns_ != 0) {
      const auto& v = watch_.view();
      disk.have = true;
      disk.held = v.held();
      if (v.record) {
        disk.owner = v.record->node_id;
        disk.lease_ms = v.record->lease_ms;
      }
      // Silence as of our last good read, never beyond it: reads that fail
      // (our own SAN path) must not look like the owner going quiet.
      disk.silent_ms = watch_.SilentMs(owner_read_ok_mono_ns_);
      disk.read_age_ms = now > owner_read_ok_mono_ns_ ? (now - owner_read_ok_mono_ns_) / 1'000'000 : 0;
    }
  }
  const bool online = h.state == static_cast<uint8_t>(ReserveState::kOnline);
  RouteHeadsByState();
  if (online) SendCatalog(seq);
  KeepPartnerRecovery();  // on disk before ReconcileVips may start a grace period with it
  ReconcileVips();
  if (cut_forwarded_.exchange(false)) {
    MutexLock lock(reroute_mu_);
    if (reroute_hook_) {
      reroute_hook_(HeadsMove::kCutForwarded,
                    "the partner is gone: its relayed heads' sessions end, and their "
                    "clients may reclaim their locks here");
    }
  }
  SendConnections(seq);
  SendRecovery(seq);
  WithdrawExportsUnlessOnline(online);
  h.lan_up = !vips_ || vips_->InterfaceUp();
  VipMasks(&h.vips_assigned, &h.vips_held);
  h.forwards = Forwarding();
  h.takes_over = config_.cluster_auto_takeover;
  h.vips_digest = vips_ ? vips_->Digest() : 0;
  if (online && LanDownLongEnough(h.lan_up, now)) {
    // Clients cannot reach this node; a partner that stands by and can
    // reach them takes the service (GiveBack checks it is heard standing by).
    // A partner with auto_takeover off would not take it: the node stays
    // (said once per outage).
    bool partner_lan_up = false, partner_takes = false;
    {
      MutexLock lock(cluster_mu_);
      for (const auto& [id, p] : monitor_->peers()) {
        if (monitor_->Heard(id, now) && p.last.state == cluster::kStateStandby && p.last.lan_up) {
          partner_lan_up = true;
          partner_takes |= p.last.takes_over;
        }
      }
    }
    if (partner_lan_up && !partner_takes && !lan_stay_said_) {
      lan_stay_said_ = true;
      NASGW_LOG(kWarn, "cluster") << "the clients' LAN is down here and up on the partner, which does not take the "
                                     "reserve by itself ([cluster] auto_takeover = false there): staying; "
                                     "'nasgw cluster takeover' on the partner moves it"
                                  << Kv("interface", vips_->interface());
    }
    if (partner_lan_up && partner_takes) {
      NASGW_LOG(kWarn, "cluster") << "the clients' LAN is down here and up on the partner: giving the reserve to it"
                                  << Kv("interface", vips_->interface());
      nasgw::Status g = GiveBack();
      if (!g.ok()) NASGW_LOG(kWarn, "cluster") << "giveback for the LAN failed" << Kv("error", g.ToString());
      return;
    }
  }
  nasgw::Status sent = interconnect_->Send(cluster::EncodeHeartbeat(h));
  cluster::Judgement j;
  {
    MutexLock lock(cluster_mu_);
    if (standby || judge_partner) {
      j = monitor_->Judge(disk, now);
      if (judge_partner && j.verdict == cluster::Verdict::kNoOwner) {
        // A free domain of the partner's (it stopped cleanly, or has not
        // started yet) is left to it: taken only by `nasgw reserve
        // takeover` here.
        j.verdict = cluster::Verdict::kOwnerAlive;
        j.why = "this node serves its domains; the partner's domain " + std::to_string(disk_domain) +
                " is free (taken here only by 'nasgw reserve takeover')";
      }
    } else {
      j.verdict = cluster::Verdict::kOwnerAlive;
      j.why = h.state == static_cast<uint8_t>(ReserveState::kOnline)
                  ? "this node owns the reserve"
                  : std::string("this node is ") + ReserveStateName(ReserveState(h.state));
    }
    if (j.verdict != judgement_.verdict) {
      const std::string sent_text = sent.ok() ? std::string("yes") : sent.ToString();
      if (j.verdict == cluster::Verdict::kOwnerAlive) {
        NASGW_LOG(kInfo, "cluster") << "verdict on the owner" << Kv("verdict", cluster::VerdictName(j.verdict))
                                    << Kv("why", j.why) << Kv("heartbeat_sent", sent_text);
      } else {
        NASGW_LOG(kWarn, "cluster") << "verdict on the owner" << Kv("verdict", cluster::VerdictName(j.verdict))
                                    << Kv("why", j.why) << Kv("heartbeat_sent", sent_text);
      }
    }
    judgement_ = j;
  }
  if (Shared() && online && config_.cluster_auto_failback) FailBackIfDue(now);
  if (Shared() && online && seq % 5 == 0) TakeFreeHomeDomains();
  if (!standby && !judge_partner) return;
  bool requested = false;
  {
    MutexLock lock(cluster_mu_);
    requested = takeover_requested_;
  }
  // An admin's `cluster takeover` takes the reserve its owner gave back,
  // whatever auto_takeover says; the rest needs auto_takeover.
  const bool asked = requested && j.verdict == cluster::Verdict::kNoOwner;
  if (!config_.cluster_auto_takeover && !asked) return;
  if (!cluster::ShouldTakeOver(j.verdict) && j.verdict != cluster::Verdict::kNoOwner) return;
  {
    // After a failed attempt, the next waits a lease: no storm of preempts
    // and log lines while something is wrong with this node's SAN path.
    MutexLock lock(cluster_mu_);
    if (now < next_takeover_mono_ns_) return;
    next_takeover_mono_ns_ = now + uint64_t{config_.lease_ms} * 1'000'000;
  }
  AutoTakeover(j);
}

bool Node::LanDownLongEnough(bool lan_up, uint64_t now) {
  // A link that flaps for less than the network bound is not a reason to
  // move the service.
  if (lan_up) {
    lan_down_since_mono_ns_ = 0;
    lan_stay_said_ = false;
    return false;
  }
  if (lan_down_since_mono_ns_ == 0) lan_down_since_mono_ns_ = now;
  return now - lan_down_since_mono_ns_ >= uint64_t{config_.cluster_network_dead_ms} * 1'000'000;
}

void Node::SendCatalog(uint64_t seq) {
  if (!Forwarding()) return;  // a partner that does not relay has nothing to publish
  {
    // What an earlier owner sent is stale once this node serves: a later
    // giveback publishes the new owner's, not that.
    MutexLock lock(cluster_mu_);
    catalog_.reset();
  }
  auto all = OnlineDomains();
  if (!all.ok()) return;
  cluster::Catalog cat;
  cat.from = identity_.id;
  {
    ReaderLock lock(mu_);
    cat.reserve = reserve_uuid_;
  }
  auto exports = ExportsOf(**all);
  auto shares = SharesOf(**all);
  if (!exports.ok() || !shares.ok()) return;  // the domain's own errors are reported where they are used
  cat.exports = std::move(*exports);
  cat.shares = std::move(*shares);
  std::string bytes = cluster::EncodeCatalog(cat);
  if (bytes.empty()) {
    if (catalog_out_.sent != "too large") {
      NASGW_LOG(kWarn, "cluster") << "the exports and shares are too many to send to the partner; its ganesha and "
                                     "smbd keep what they had"
                                  << Kv("exports", cat.exports.size()) << Kv("shares", cat.shares.size())
                                  << Kv("limit_bytes", cluster::kCatalogBytesMax);
      catalog_out_.sent = "too large";
    }
    return;
  }
  SendIfDue(catalog_out_, std::move(bytes), seq);
}

void Node::SendIfDue(Repeated& r, std::string bytes, uint64_t seq) {
  // On a change at once; else every few heartbeats, for a partner that
  // (re)started since; at the next step after it joined.
  const bool joined = r.resend.exchange(false);
  if (!joined && bytes == r.sent && seq < r.sent_seq + kCatalogEvery) return;
  if (interconnect_->Send(bytes).ok()) {
    r.sent = std::move(bytes);
    r.sent_seq = seq;
  } else if (joined) {
    r.resend = true;
  }
}

void Node::SendConnections(uint64_t seq) {
  if (!vips_) return;
  // The connections to every one of the addresses, held here or not: those
  // to an address this node let go (a giveback, an address moved to the
  // partner) stay established here until their client hears of the move,
  // and that is what the node that takes the address tickles.
  cluster::Connections c;
  c.from = identity_.id;
  size_t more = 0;
  auto conns = vips_->Connections(vips_->all(), &more);
  if (!conns.ok()) return;  // the kernel's refusal: again at the next heartbeat
  c.conns = std::move(*conns);
  if (more != 0 && !conns_truncated_logged_) {
    NASGW_LOG(kWarn, "cluster") << "more client connections than the partner is told of; the rest reconnect on their "
                                   "own timers after a move"
                                << Kv("listed", c.conns.size()) << Kv("left_out", more);
    conns_truncated_logged_ = true;
  }
  // At once on a change: the partner must know the clients of the moment
  // a node dies.
  SendIfDue(conns_out_, cluster::EncodeConnections(c), seq);
}

void Node::SendRecovery(uint64_t seq) {
  if (config_.nfs_ganesha_recovery_dir.empty() && config_.nfs_statd_dir.empty()) return;
  // A list that cannot be read now is sent as last read (and the error
  // logged once): the other goes on being sent.
  cluster::Recovery& r = recovery_last_;
  r.from = identity_.id;
  using Lister = Result<std::vector<std::string>> (*)(const std::string&, bool*);
  auto refresh = [](const std::string& dir, Lister list, std::vector<std::string>* into, const char* what,
                    bool* failed_logged, bool* truncated_logged) {
    if (dir.empty()) return;
    bool truncated = false;
    auto got = list(dir, &truncated);
    if (!got.ok()) {
      if (!*failed_logged) {
        NASGW_LOG(kError, "cluster") << "cannot list the NFS clients the partner must know of for reclaims after a "
                                        "takeover; sending the last list read"
                                     << Kv("what", what) << Kv("error", got.status().ToString());
      }
      *failed_logged = true;
      return;
    }
    if (truncated && !*truncated_logged) {
      NASGW_LOG(kWarn, "cluster") << "more NFS clients than the partner is told of; the rest cannot reclaim their "
                                     "state after a takeover"
                                  << Kv("what", what) << Kv("listed", got->size());
      *truncated_logged = true;
    }
    *into = std::move(*got);
  };
  refresh(config_.nfs_ganesha_recovery_dir, daemon::ListRecovery, &r.entries, "ganesha's NFSv4 client records",
          &recovery_failed_logged_, &recovery_truncated_logged_);
  refresh(config_.nfs_statd_dir, daemon::ListStatdClients, &r.nlm_clients, "rpc.statd's NLM clients",
          &nlm_failed_logged_, &nlm_truncated_logged_);
  SendIfDue(recovery_out_, cluster::EncodeRecovery(r), seq);
}

void Node::LoadPartnerRecovery() {
  cluster::Recovery kept;
  if (!config_.nfs_ganesha_recovery_dir.empty()) {
    auto entries = daemon::ListPartnerRecovery(config_.nfs_ganesha_recovery_dir);
    if (entries.ok()) {
      kept.entries = std::move(*entries);
    } else {
      NASGW_LOG(kWarn, "cluster") << "cannot read the partner's NFSv4 client records kept here"
                                  << Kv("error", entries.status().ToString());
    }
  }
  if (!config_.nfs_statd_dir.empty()) {
    const std::string path = config_.state_dir + "/" + daemon::kPartnerNlmFile;
    std::ifstream in(path);
    if (in) {
      std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
      auto names = daemon::DecodePartnerNlm(text);
      if (names.ok()) {
        kept.nlm_clients = std::move(*names);
      } else {
        NASGW_LOG(kWarn, "cluster") << "the partner's NLM clients kept here cannot be read; none are known until "
                                       "the partner sends them"
                                    << Kv("path", path) << Kv("error", names.status().ToString());
      }
    }
  }
  if (kept.entries.empty() && kept.nlm_clients.empty()) return;
  // What the partner last sent before this nasgwd stopped: its clients,
  // should it be dead now, are told to reclaim here all the same. Its next
  // list replaces this one.
  partner_records_ = daemon::CountRecoveryClients(kept.entries);
  partner_nlm_clients_ = kept.nlm_clients.size();
  NASGW_LOG(kInfo, "cluster") << "the partner's NFS clients as kept here, until it sends them anew"
                              << Kv("nfs4_clients", partner_records_.load())
                              << Kv("nlm_clients", kept.nlm_clients.size());
  MutexLock lock(cluster_mu_);
  partner_recovery_ = std::move(kept);
}

void Node::KeepPartnerRecovery() {
  std::vector<std::string> nlm;
  bool keep_nlm = false;
  {
    MutexLock lock(cluster_mu_);
    if (partner_nlm_dirty_ && partner_recovery_ && !config_.nfs_statd_dir.empty()) {
      nlm = partner_recovery_->nlm_clients;
      keep_nlm = true;
      partner_nlm_dirty_ = false;
    }
  }
  if (keep_nlm) {
    nasgw::Status s =
        WriteStateFile(config_, config_.state_dir + "/" + daemon::kPartnerNlmFile, daemon::EncodePartnerNlm(nlm));
    if (!s.ok()) {
      NASGW_LOG(kWarn, "cluster") << "cannot keep the partner's NLM clients; they are notified only while this "
                                     "nasgwd runs"
                                  << Kv("error", s.ToString());
      MutexLock lock(cluster_mu_);
      partner_nlm_dirty_ = true;  // again at the next heartbeat
    }
  }
  if (config_.nfs_ganesha_recovery_dir.empty()) return;
  std::vector<std::string> entries;
  {
    MutexLock lock(cluster_mu_);
    if (!partner_recovery_dirty_ || !partner_recovery_) return;
    entries = partner_recovery_->entries;
    partner_recovery_dirty_ = false;
  }
  nasgw::Status s = daemon::WritePartnerRecovery(config_.nfs_ganesha_recovery_dir, entries);
  if (!s.ok()) {
    NASGW_LOG(kWarn, "cluster") << "cannot keep the partner's NFSv4 client records; its clients cannot reclaim here"
                                << Kv("error", s.ToString());
    MutexLock lock(cluster_mu_);
    partner_recovery_dirty_ = true;  // again at the next heartbeat
    return;
  }
  partner_records_ = daemon::CountRecoveryClients(entries);
}

void Node::StartTakeoverGraceAsync(std::vector<uint32_t> moved) {
  std::vector<std::string> nlm;
  {
    MutexLock lock(cluster_mu_);
    if (!config_.nfs_statd_dir.empty() && partner_recovery_) nlm = partner_recovery_->nlm_clients;
    const bool v4 = !config_.nfs_ganesha_recovery_dir.empty() && partner_records_.load() > 0;
    if (!v4 && nlm.empty()) return;
    if (grace_running_) {
      // One is being started or its clients told: it tells these
      // addresses' too (the records are the same) before it ends.
      // Each address once: at most the configured VIPs (64), however often
      // they are added meanwhile.
      for (uint32_t a : moved) {
        if (std::find(grace_pending_.begin(), grace_pending_.end(), a) == grace_pending_.end()) {
          grace_pending_.push_back(a);
        }
      }
      return;
    }
    grace_running_ = true;
  }
  if (grace_thread_.joinable()) grace_thread_.join();  // one that ended
  grace_thread_ = std::thread([this, nlm = std::move(nlm), moved = std::move(moved)]() mutable {
    const uint64_t t0 = MonotonicNanos();
    nasgw::Status s = daemon::StartTakeoverGrace(config_.nfs_ganesha_dbus, kGraceCallTimeoutMs);
    const uint64_t ms = (MonotonicNanos() - t0) / 1'000'000;
    if (s.ok()) {
      takeover_graces_++;
      NASGW_LOG(kWarn, "cluster") << "ganesha is in a grace period: the partner's NFS clients reclaim their state"
                                  << Kv("nfs4_clients", partner_records_.load()) << Kv("nlm_clients", nlm.size())
                                  << Kv("ms", ms);
    } else {
      NASGW_LOG(kError, "cluster") << "cannot start ganesha's grace period; the partner's NFS clients lose their "
                                      "opens and locks (their reclaims are refused)"
                                   << Kv("error", s.ToString());
    }
    // The partner's NLM clients are told the moved addresses' server came
    // back, so that they reclaim their locks (in the grace period; refused,
    // without one, which tells them their locks are lost rather than
    // leaving them to believe in locks nobody holds). Then those of
    // addresses added meanwhile.
    for (;;) {
      if (!nlm.empty() && !moved.empty()) NotifyNlmClients(nlm, moved);
      MutexLock lock(cluster_mu_);
      if (grace_pending_.empty() || grace_stop_) {
        grace_pending_.clear();
        grace_running_ = false;
        return;
      }
      moved.swap(grace_pending_);
      grace_pending_.clear();
    }
  });
}

void Node::NotifyNlmClients(const std::vector<std::string>& nlm, const std::vector<uint32_t>& moved) {
  const daemon::NlmNotifyResult r =
      daemon::NotifyNlmClients(nlm, moved, daemon::NsmStateNow(), kNlmNotifyTimeoutMs, 111, &grace_stop_);
  // Counted in (client, address) pairs, as sent.
  const size_t lost = r.unreachable + r.skipped * moved.size();
  nlm_notified_ += r.notified;
  nlm_unreachable_ += lost;
  if (lost == 0) {
    NASGW_LOG(kWarn, "cluster") << "told the partner's NLM clients to reclaim their locks (SM_NOTIFY)"
                                << Kv("clients", nlm.size()) << Kv("addresses", moved.size())
                                << Kv("notified", r.notified);
  } else {
    NASGW_LOG(kError, "cluster") << "some of the partner's NLM clients were not told to reclaim their locks "
                                    "(SM_NOTIFY unanswered, or a client named by no IPv4 address)"
                                 << Kv("clients", nlm.size()) << Kv("addresses", moved.size())
                                 << Kv("notified", r.notified) << Kv("unreachable", r.unreachable)
                                 << Kv("not_an_address", r.skipped);
  }
}

void Node::WithdrawExportsUnlessOnline(bool online) {
  // With head forwarding, a node that does not serve publishes the owner's
  // exports and shares (its heads' calls are relayed to the owner).
  std::optional<cluster::Catalog> cat;
  if (!online && HeadsGoToPartner()) {
    Uuid reserve;
    {
      ReaderLock lock(mu_);
      reserve = reserve_uuid_;
    }
    MutexLock lock(cluster_mu_);
    if (catalog_ && catalog_->reserve == reserve) cat = catalog_;
  }
  MutexLock vip_lock(vip_mu_);
  // A single node keeps its exports file while the reserve is away (a
  // restart of nasgwd is not a reason for ganesha to drop its exports). In a
  // pair, a node that does not serve must not offer exports it cannot
  // answer: its heads would refuse every call, and its partner serves them.
  MutexLock lock(exports_mu_);
  if (cat) {
    std::string bytes = cluster::EncodeCatalog(*cat);
    if (bytes == catalog_published_) return;
    nasgw::Status s;
    if (!config_.nfs_exports_file.empty()) {
      s = daemon::PublishExports(config_.nfs_exports_file, config_.nfs_ganesha_pid_file, config_.node_name,
                                 cat->exports);
    }
    if (s.ok() && !config_.smb_shares_file.empty()) {
      s = daemon::PublishShares(config_.smb_shares_file, config_.smb_smbd_pid_file, config_.head_socket,
                                config_.smb_vfs_objects, config_.node_name, cat->shares);
    }
    if (!s.ok()) {
      NASGW_LOG(kWarn, "cluster") << "cannot publish the partner's exports" << Kv("error", s.ToString());
      return;  // again at the next heartbeat
    }
    catalog_published_ = std::move(bytes);
    exports_withdrawn_ = true;  // not the domain's own: published from it again when this node serves
    NASGW_LOG(kInfo, "cluster") << "the partner's exports and shares published here (heads relayed to it)"
                                << Kv("exports", cat->exports.size()) << Kv("shares", cat->shares.size());
    return;
  }
  if (online) catalog_published_.clear();
  if (online) {
    if (exports_withdrawn_) {
      // Serving again (a takeover whose own publish may have raced this
      // thread's withdrawal): the files follow the domain once more.
      nasgw::Status p = PublishExportsLocked();
      if (p.ok()) p = PublishSharesLocked();
      if (!p.ok()) return;  // again at the next heartbeat
      exports_withdrawn_ = false;
    }
    return;
  }
  if (exports_withdrawn_) return;
  nasgw::Status s;
  if (!config_.nfs_exports_file.empty()) {
    s = daemon::PublishExports(config_.nfs_exports_file, config_.nfs_ganesha_pid_file, config_.node_name, {});
  }
  if (s.ok() && !config_.smb_shares_file.empty()) {
    s = daemon::PublishShares(config_.smb_shares_file, config_.smb_smbd_pid_file, config_.head_socket,
                              config_.smb_vfs_objects, config_.node_name, {});
  }
  if (!s.ok()) {
    NASGW_LOG(kWarn, "cluster") << "cannot withdraw the exports of a node that does not serve"
                                << Kv("error", s.ToString());
    return;  // again at the next heartbeat
  }
  exports_withdrawn_ = true;
  NASGW_LOG(kInfo, "cluster") << "exports and shares withdrawn: this node does not serve the reserve";
}

void Node::VipMasks(uint64_t* assigned, uint64_t* held) {
  MutexLock vip_lock(vip_mu_);
  *assigned = vips_assigned_;
  *held = vips_mask_;
}

void Node::ReconcileVips() {
  MutexLock vip_lock(vip_mu_);
  if (!vips_) return;
  // The state now, under the VIP lock: one read before (a heartbeat's, just
  // before a giveback removed the addresses) would put them back while the
  // partner takes them.
  ReserveState state;
  cluster::VipMask held_domains_vips = 0;  // shared: the addresses of the domains served here
  {
    ReaderLock lock(mu_);
    state = state_;
    if (Shared() && state_ == ReserveState::kOnline && domains_) {
      for (size_t i = 0; i < vips_->vips().size(); i++) {
        if ((*domains_)[i % domains_->size()]) held_domains_vips |= cluster::VipMask{1} << i;
      }
    }
  }
  const bool online = state == ReserveState::kOnline;
  const cluster::VipMask all = vips_->all();
  const uint64_t now = MonotonicNanos();
  const uint64_t dead_ns = uint64_t{config_.cluster_network_dead_ms} * 1'000'000;
  // The partner, as its last heartbeat says.
  bool heard = false, partner_online = false, partner_standby = false, partner_lan = false, partner_relays = false;
  uint64_t silent_ms = UINT64_MAX;
  cluster::VipMask partner_held = 0, partner_assigned = 0;
  uint64_t partner_digest = 0;
  {
    MutexLock lock(cluster_mu_);
    if (monitor_) {
      for (const auto& [id, p] : monitor_->peers()) {
        heard = monitor_->Heard(id, now);
        silent_ms = monitor_->SilentMs(id, now).value_or(UINT64_MAX);
        partner_online = p.last.state == cluster::kStateOnline;
        partner_standby = p.last.state == cluster::kStateStandby;
        partner_lan = p.last.lan_up;
        partner_relays = p.last.forwards;
        partner_held = p.last.vips_held;
        partner_assigned = p.last.vips_assigned;
        partner_digest = p.last.vips_digest;
        break;  // a pair: one partner
      }
    }
  }
  // The masks index each node's own [cluster] vips: addresses are spread
  // only when both lists are the same (a partner from before the digest
  // sends 0, and is trusted as before).
  const bool same_list = partner_digest == 0 || partner_digest == vips_->Digest();
  if (heard && !same_list && !vips_mismatch_.load()) {
    NASGW_LOG(kError, "cluster") << "the partner's [cluster] vips differ from this node's (addresses, prefixes or "
                                    "order): client addresses are not spread between the nodes until they agree";
  }
  vips_mismatch_.store(heard && !same_list);
  cluster::VipMask want = 0;
  cluster::VipMask give = 0;  // the owner: addresses to give the partner once this node has let them go
  if (online && Shared()) {
    // Active/active: address i belongs to domain i mod D, and is held by
    // the node that serves that domain.
    want = held_domains_vips;
    vips_assigned_ = 0;
  } else if (online && (!Forwarding() || vips_->vips().size() < 2)) {
    want = all;  // the owner holds them all: the partner cannot relay its clients' calls
    vips_assigned_ = 0;
  } else if (online) {
    // Spread: the odd addresses of the list go to a partner that stands by,
    // is heard and reaches the clients' LAN, once it has been so for two
    // network bounds, and each only when its clients are quiet (not in the
    // middle of a burst) or vip_move_max_ms has passed.
    if (!(heard && partner_standby && partner_lan && partner_relays && same_list)) {
      if (vips_assigned_ != 0) {
        NASGW_LOG(kWarn, "cluster") << "the partner cannot hold client addresses now: taking them back"
                                    << Kv("heard", heard) << Kv("standby", partner_standby) << Kv("lan_up", partner_lan)
                                    << Kv("relays", partner_relays) << Kv("same_vips", same_list);
      }
      partner_fit_since_mono_ns_ = 0;
      vips_assigned_ = 0;
    } else {
      if (partner_fit_since_mono_ns_ == 0) partner_fit_since_mono_ns_ = now;
      const cluster::VipMask unheld = vips_assigned_ & ~partner_held;
      if (unheld != 0 && now - vips_assigned_mono_ns_ >= 2 * dead_ns) {
        // Given, and not taken within two network bounds (its own error is
        // in its status): this node holds them again, and tries once more
        // after two more bounds.
        NASGW_LOG(kWarn, "cluster") << "the partner did not take the client addresses given to it: taking them back"
                                    << Kv("vips", std::to_string(std::popcount(unheld)));
        vips_assigned_ &= ~unheld;
        partner_fit_since_mono_ns_ = now;
      }
      const uint64_t fit_ms = (now - partner_fit_since_mono_ns_) / 1'000'000;
      if (fit_ms * 1'000'000 >= 2 * dead_ns) {
        for (size_t i = 1; i < vips_->vips().size(); i += 2) {
          const cluster::VipMask bit = cluster::VipMask{1} << i;
          if (vips_assigned_ & bit) continue;
          auto quiet = vips_->QuietMs(i);
          if ((quiet.ok() && *quiet >= config_.cluster_vip_idle_ms) || fit_ms >= config_.cluster_vip_move_max_ms) {
            give |= bit;
            NASGW_LOG(kInfo, "cluster") << "moving a client address to the partner" << Kv("vip", vips_->vips()[i].text)
                                        << Kv("quiet_ms",
                                              quiet.ok() ? std::to_string(*quiet) : quiet.status().ToString())
                                        << Kv("partner_ready_ms", fit_ms);
          }
        }
      }
    }
    // What a standing-by partner still says it holds stays its own until it
    // says otherwise; one silent for two network bounds holds nothing (it
    // lets them go after one: it cannot relay without the interconnect). An
    // owner this node took over from is fenced: its addresses are taken at
    // once (docs/cluster.md, "Virtual IPs when nasgwd dies").
    const bool may_hold = partner_standby && silent_ms < 2 * uint64_t{config_.cluster_network_dead_ms};
    want = all & ~vips_assigned_ & ~give & ~(may_hold ? partner_held : 0);
  } else if (state == ReserveState::kStandby && Forwarding() && heard && partner_online && same_list) {
    // What the owner gives this node to hold, once the owner says it let
    // each go: never both at once. Only while this node stands by: a
    // fenced or failed node holds nothing (the owner, which no longer sees
    // it standing by, takes its addresses back at once).
    want = partner_assigned & all & ~partner_held;
  }
  if (!online) vips_assigned_ = 0;
  if (vips_mask_ != 0) {
    // An address removed behind nasgwd's back (an admin's `ip addr flush`,
    // a network manager, a link bounced by hand) is added again below.
    auto present = vips_->PresentMask();
    if (present.ok() && (vips_mask_ & ~*present) != 0) {
      NASGW_LOG(kWarn, "cluster") << "client addresses this node holds are gone from the interface: adding them again"
                                  << Kv("interface", vips_->interface())
                                  << Kv("vips", std::to_string(std::popcount(vips_mask_ & ~*present)));
      vips_mask_ &= *present;
    }
  }
  const cluster::VipMask drop = vips_mask_ & ~want, add = want & ~vips_mask_;
  auto count = [](cluster::VipMask m) { return std::to_string(std::popcount(m)); };
  nasgw::Status s;
  if (drop != 0) {
    s = vips_->Release(drop);
    if (s.ok()) {
      vips_mask_ &= ~drop;
      announce_mask_ &= ~drop;
      NASGW_LOG(kWarn, "cluster") << "client addresses removed" << Kv("interface", vips_->interface())
                                  << Kv("vips", count(drop)) << Kv("held", count(vips_mask_));
    }
  }
  if (s.ok() && give != 0) {
    // Removed here (or never held): the partner may take them now.
    vips_assigned_ |= give & ~vips_mask_;
    vips_assigned_mono_ns_ = now;
  }
  if (s.ok() && add != 0) {
    // This node's own connections to these addresses are from when it
    // held them before: stale. A client back from the partner on the
    // same port would meet one and never be reset by the tickle. Ended
    // before the addresses are announced, so that no client's new
    // connection is among them.
    auto kept = vips_->DropStale(add);
    if (!kept.ok() || !kept->empty()) {
      NASGW_LOG(kWarn, "cluster") << "cannot end this node's stale connections to the addresses it takes; their "
                                     "clients reconnect on their own timers"
                                  << Kv("error", kept.ok() ? std::to_string(kept->size()) +
                                                                 " left (the kernel "
                                                                 "lacks SOCK_DESTROY?)"
                                                           : kept.status().ToString());
    }
    cluster::VipMask added = 0;
    s = vips_->Hold(add, &added);
    // What is on the interface is held, whatever failed: it is removed
    // again when this node lets it go (and announced again meanwhile).
    vips_mask_ |= added;
    announce_mask_ |= added;
    if (added != 0) {
      announce_left_ = kVipAnnounceRepeats;
      // The partner's clients of these addresses still have connections to
      // it: a tickle ACK has each reset at once (it would otherwise wait
      // for its own retransmission or RPC timer), sent now and at the next
      // heartbeats.
      const cluster::VipMask held = vips_mask_;
      std::erase_if(tickle_, [held](const cluster::TcpConn& t) { return !(held >> t.vip & 1); });
      if (config_.cluster_tickle_acks) {
        MutexLock lock(cluster_mu_);  // after vip_mu_, as above
        if (partner_conns_) {
          for (const cluster::TcpConn& t : partner_conns_->conns) {
            if (t.vip < 64 && (added >> t.vip & 1)) tickle_.push_back(t);
          }
        }
      }
      tickle_mask_ = vips_mask_;
      tickle_left_ = tickle_.empty() ? 0 : kTickleRepeats;
      tickle_next_mono_ns_ = 0;  // the first at once, with the addresses' ARPs
      NASGW_LOG(kWarn, "cluster") << "client addresses added and announced" << Kv("interface", vips_->interface())
                                  << Kv("vips", count(added)) << Kv("held", count(vips_mask_))
                                  << Kv("partner_connections_tickled", tickle_.size());
      // A partner that is not heard (its machine died, or it is cut off):
      // the connections it relayed here are cut (its heads' sessions then
      // have none, and give their locks to reclaims), and its NFSv4
      // clients of these addresses, coming here now, reclaim in a grace
      // period of this node's ganesha. Not for addresses taken from a
      // partner that is heard: its ganesha still holds their state.
      if (online && !heard) {
        cut_forwarded_ = true;
        std::vector<uint32_t> moved;
        for (size_t i = 0; i < vips_->vips().size() && i < 64; i++) {
          if (added >> i & 1) moved.push_back(vips_->vips()[i].addr);
        }
        StartTakeoverGraceAsync(std::move(moved));
      }
    }
  } else if (s.ok() && announce_left_ > 0 && announce_mask_ != 0) {
    // Announced again at the next few heartbeats: one ARP can be missed.
    vips_->Announce(announce_mask_).IgnoreError();  // the first announcement's error was logged
    if (--announce_left_ == 0) announce_mask_ = 0;
  }
  if (s.ok() && tickle_left_ > 0 && now >= tickle_next_mono_ns_) {
    tickle_mask_ &= vips_mask_;  // only from addresses still here
    tickle_next_mono_ns_ = now + kTickleSpacingMs * 1'000'000;
    size_t failed = 0;
    nasgw::Status why;
    auto sent = vips_->Tickle(tickle_, tickle_mask_, &failed, &why);
    if (sent.ok()) tickles_sent_ += *sent;
    if ((!sent.ok() || failed != 0) && tickle_left_ == kTickleRepeats) {
      NASGW_LOG(kWarn, "cluster") << "cannot send some tickle ACKs to the partner's clients; they reconnect on their "
                                     "own timers"
                                  << Kv("failed", failed)
                                  << Kv("error", sent.ok() ? why.ToString() : sent.status().ToString());
    }
    if (--tickle_left_ == 0) tickle_.clear();
  }
  MutexLock lock(cluster_mu_);
  if (!s.ok()) {
    if (s.ToString() != vip_error_) {
      NASGW_LOG(kError, "cluster") << "cannot change the client addresses" << Kv("interface", vips_->interface())
                                   << Kv("error", s.ToString());
    }
    vip_error_ = s.ToString();
    return;  // again at the next heartbeat
  }
  vip_error_.clear();
  if (online && takeover_start_mono_ns_ != 0 && (vips_mask_ | vips_assigned_) == all) {
    ClusterEventLocked(takeover_start_mono_ns_, "vips: " + count(add) + " addresses added on " + vips_->interface() +
                                                    " and announced (gratuitous ARP), " + count(vips_mask_) +
                                                    " held here, " + std::to_string(tickle_.size()) +
                                                    " client connections of the partner tickled");
    takeover_start_mono_ns_ = 0;
  }
}

void Node::ClusterEventLocked(uint64_t start_mono_ns, std::string what) {
  ClusterEvent e;
  e.wall_ns = static_cast<int64_t>(WallNanos());
  const uint64_t now = MonotonicNanos();
  e.after_ms = now > start_mono_ns ? (now - start_mono_ns) / 1'000'000 : 0;
  e.what = std::move(what);
  NASGW_LOG(kWarn, "cluster") << "takeover" << Kv("after_ms", e.after_ms) << Kv("event", e.what);
  last_takeover_.push_back(std::move(e));
}

void Node::AutoTakeover(const cluster::Judgement& j) {
  const uint64_t start = MonotonicNanos();
  const bool force = cluster::ShouldTakeOver(j.verdict);
  {
    MutexLock lock(cluster_mu_);
    last_takeover_.clear();
    first_served_pending_ = false;
    ClusterEventLocked(start, std::string("detected: ") + cluster::VerdictName(j.verdict) + ": " + j.why);
  }
  nasgw::Status s = TakeoverReserve(force);
  uint64_t preempted = 0, settled = 0;
  {
    ReaderLock lock(mu_);
    if (owner_) {
      preempted = owner_->preempted_key();
      settled = owner_->settled_ms();
    }
  }
  if (s.ok()) RouteHeadsByState();  // relays to the old owner end: serve here (unless fenced since)
  MutexLock lock(cluster_mu_);
  if (!s.ok()) {
    ClusterEventLocked(start, "failed: " + s.ToString());
    return;
  }
  takeovers_++;
  takeover_start_mono_ns_ = start;  // ReconcileVips adds the addresses' event
  judgement_.verdict = cluster::Verdict::kOwnerAlive;
  judgement_.why = "this node owns the reserve (taken over)";
  judgement_.network_silent_ms = 0;
  ClusterEventLocked(start, std::string("fenced: ") +
                                (preempted ? "preempted key " + fs::OwnerKeyText(preempted) : "nothing to preempt") +
                                (settled ? ", waited " + std::to_string(settled) + " ms for its queued commands" : ""));
  ClusterEventLocked(start, "online: the domain is open here (its intent log replayed) and the exports published");
  first_served_start_mono_ns_ = start;
  first_served_pending_ = true;
}

void Node::NoteServed(std::string_view op) {
  if (!first_served_pending_.load(std::memory_order_relaxed)) return;
  MutexLock lock(cluster_mu_);
  if (!first_served_pending_.exchange(false)) return;  // another request's
  ClusterEventLocked(first_served_start_mono_ns_,
                     "first op served: " + std::string(op) + " answered to a head (clients are served again)");
}

void Node::MirrorDomains(uint32_t count) {
  MutexLock lock(mirror_mu_);
  if (count > 0) mirror_domains_ = count;
  while (mirror_threads_.size() < std::max<uint32_t>(count, 1) && !mirror_stop_) {
    const auto id = static_cast<uint32_t>(mirror_threads_.size());
    mirror_threads_.emplace_back([this, id] { MirrorLoop(id); });
  }
}

void Node::MirrorLoop(uint32_t id) {
  const std::string& peer = config_.cluster_mirror_peer;
  // The opening of the domain a stream is for: its write verifier, drawn
  // anew at every opening. The loop holds no reference to the domain (its
  // end must happen where the node closes it); it acts on domains_ under
  // mu_.
  auto serving = [this, id](uint64_t verifier) REQUIRES_SHARED(mu_) {
    return state_ == ReserveState::kOnline && domains_ && id < domains_->size() && (*domains_)[id] &&
           write_verifier_ == verifier;
  };
  MutexLock lock(mirror_mu_);
  while (!mirror_stop_) {
    uint64_t verifier = 0;
    Uuid reserve;
    {
      lock.Unlock();
      ReaderLock node_lock(mu_);
      if (serving(write_verifier_)) verifier = write_verifier_;
      reserve = reserve_uuid_;
      // A node that does not serve the domain holds the owner's stream
      // (under mu_: a takeover freezes it under mu_ too). One that failed
      // to open it while owning it keeps its copy for the next attempt.
      // Shared, an online node holds the partner's streams of its domains
      // (not of one it took and owns but could not open: that copy is
      // kept, frozen, for the next attempt).
      bool owned_unopened = false;
      if (owner_) {
        const auto held = owner_->domains();
        owned_unopened = std::find(held.begin(), held.end(), id) != held.end();
      }
      if (state_ == ReserveState::kStandby || state_ == ReserveState::kFenced || state_ == ReserveState::kUnformatted ||
          (Shared() && state_ == ReserveState::kOnline && domains_ && id < domains_->size() && !(*domains_)[id] &&
           !owned_unopened)) {
        mirror_server_->Unfreeze(reserve, id);
      }
      node_lock.Unlock();
      lock.Lock();
    }
    if (verifier == 0) {
      mirror_why_[id] = "not serving the domain";
      mirror_cv_.WaitFor(mirror_mu_, std::chrono::milliseconds(200),
                         [&]() REQUIRES(mirror_mu_) { return mirror_stop_; });
      continue;
    }
    // Each domain's share of what an owner queues for the partner.
    const uint64_t queue_max =
        std::min(cluster::kMirrorBytesMax, cluster::kMirrorTotalBytesMax / std::max<uint32_t>(mirror_domains_, 1));
    lock.Unlock();
    auto s = cluster::MirrorStream::Connect(peer, queue_max);
    lock.Lock();
    if (!s.ok()) {
      if (mirror_why_[id] != s.status().ToString()) {
        NASGW_LOG(kWarn, "cluster") << "no cache mirror: writes are answered from the SAN" << Kv("domain", id)
                                    << Kv("error", s.status().ToString());
      }
      mirror_why_[id] = s.status().ToString();
      mirror_cv_.WaitFor(mirror_mu_, std::chrono::milliseconds(1000),
                         [&]() REQUIRES(mirror_mu_) { return mirror_stop_; });
      continue;
    }
    std::shared_ptr<cluster::MirrorStream> stream = *s;
    Result<fs::Domain::MirrorStart> start = nasgw::Status::Unavailable("the domain closed");
    lock.Unlock();
    {
      ReaderLock node_lock(mu_);
      if (serving(verifier)) start = (*domains_)[id]->AttachLogMirror(stream);
    }
    lock.Lock();
    if (!start.ok()) {
      mirror_why_[id] = start.status().ToString();
      stream->Close();
      mirror_cv_.WaitFor(mirror_mu_, std::chrono::milliseconds(1000),
                         [&]() REQUIRES(mirror_mu_) { return mirror_stop_; });
      continue;
    }
    cluster::MirrorHello h;
    h.reserve = reserve;
    h.domain = id;
    h.salt = start->salt;
    h.session = start->session;
    h.first_lsn = start->first_lsn;
    h.sender = config_.node_name;
    // The stream's threads hold no reference to the domain either: they
    // answer through the log's MirrorAcks, which does nothing once the log
    // has let the stream go or closed.
    stream->Start(h, start->acks);
    mirror_stream_[id] = stream;
    mirror_why_[id].clear();
    NASGW_LOG(kInfo, "cluster") << "cache mirror: writes are answered once the partner holds them" << Kv("domain", id)
                                << Kv("partner", peer) << Kv("first_lsn", h.first_lsn);
    // Until the stream breaks, the domain closes, or the node stops.
    for (;;) {
      lock.Unlock();
      const bool broken = stream->WaitBroken(200);
      bool same = false;
      {
        ReaderLock node_lock(mu_);
        same = serving(verifier);
      }
      lock.Lock();
      if (broken || !same || mirror_stop_) {
        mirror_why_[id] = broken ? stream->stats().why : !same ? "the domain closed" : "stopping";
        break;
      }
    }
    mirror_stream_[id].reset();
    lock.Unlock();
    {
      // A domain that closed lets its log's mirror go as it ends.
      ReaderLock node_lock(mu_);
      if (serving(verifier)) (*domains_)[id]->DetachLogMirror(stream.get());
    }
    stream->Close();
    stream.reset();
    lock.Lock();
    mirror_cv_.WaitFor(mirror_mu_, std::chrono::milliseconds(500), [&]() REQUIRES(mirror_mu_) { return mirror_stop_; });
  }
}

ClusterStatus Node::GetCluster() const {
  ClusterStatus c;
  c.enabled = config_.cluster_enabled;
  c.auto_takeover = config_.cluster_auto_takeover;
  c.mirror = "none: writes are acknowledged once in the SAN intent log ([cluster] mirror_peer not set)";
  if (!c.enabled) return c;
  c.mirror_configured = mirror_server_ != nullptr;
  const uint64_t now = MonotonicNanos();
  cluster::InterconnectStatus is = interconnect_->status();
  c.interconnect = interconnect_->Describe();
  c.connected = is.connected;
  c.quorate = is.quorate;
  c.interconnect_reason = is.reason;
  c.ring_node = is.local_node;
  c.members = static_cast<uint32_t>(is.members.size());
  {
    ReaderLock lock(mu_);
    c.owned_here = state_ == ReserveState::kOnline;
    c.owner = state_ == ReserveState::kOnline ? "this node" : owner_text_;
    if (state_ != ReserveState::kOnline) {
      c.disk_silent_ms = watch_.SilentMs(now);
      if (watch_.view().record) c.lease_ms = watch_.view().record->lease_ms;
    }
  }
  std::string present_error;
  if (vips_) {
    c.vip_interface = vips_->interface();
    for (const auto& v : vips_->vips()) c.vips.push_back(v.text);
    auto present = vips_->Present();
    if (present.ok()) c.vips_held = *present;
    if (!present.ok()) present_error = "cannot list the interface's addresses: " + present.status().ToString();
  }
  MutexLock lock(cluster_mu_);
  c.vip_error = !vip_error_.empty()      ? vip_error_
                : !present_error.empty() ? present_error
                : vips_mismatch_.load()  ? "the partner's [cluster] vips differ from this node's: not spread"
                                         : "";
  bool peer_live = false;
  for (const auto& [id, p] : monitor_->peers()) {
    ClusterPeerStatus ps;
    ps.name = p.last.name;
    ps.node_id = id.ToString();
    ps.state = p.last.state <= static_cast<uint8_t>(ReserveState::kFenced)
                   ? ReserveStateName(static_cast<ReserveState>(p.last.state))
                   : "unknown(" + std::to_string(p.last.state) + ")";
    ps.reason = p.last.reason;
    ps.ring_node = p.from.node;
    ps.heard_ms_ago = now > p.heard_mono_ns ? (now - p.heard_mono_ns) / 1'000'000 : 0;
    ps.heartbeats = p.heartbeats;
    ps.left = p.left;
    if (vips_ && monitor_->Heard(id, now)) {
      for (size_t i = 0; i < vips_->vips().size() && i < 64; i++) {
        if (p.last.vips_held >> i & 1) c.vips_partner.push_back(vips_->vips()[i].text);
      }
    }
    // Only a partner that stands by could take over: a fenced or failed
    // one leaves this node alone.
    peer_live |= monitor_->Heard(id, now) && p.last.state == cluster::kStateStandby;
    c.peers.push_back(std::move(ps));
  }
  c.verdict = cluster::VerdictName(judgement_.verdict);
  c.why = judgement_.why;
  c.network_silent_ms = judgement_.network_silent_ms;
  c.degraded = c.owned_here ? !peer_live : judgement_.verdict != cluster::Verdict::kOwnerAlive;
  lock.Unlock();
  if (!Forwarding()) {
    c.forwarding = "off: a node that does not own the reserve refuses its heads ([cluster] forward_peer not set)";
  } else if (HeadsGoToPartner()) {
    c.forwarding =
        "this node's heads are relayed to the partner (" + config_.cluster_forward_peer + "), which owns the reserve";
  } else {
    c.forwarding =
        "this node's heads are served here; the partner relays its heads here (" + config_.cluster_forward_listen + ")";
  }
  if (c.mirror_configured) {
    std::string why;
    {
      // Streaming: every domain's log streams (one that does not answers
      // its writes from the SAN: degraded).
      std::vector<bool> served;  // shared: only the domains served here stream from here
      if (Shared()) {
        uint64_t verifier = 0;
        if (auto all = domains(&verifier, nullptr)) {
          for (const auto& d : *all) served.push_back(d != nullptr);
        }
      }
      MutexLock m(mirror_mu_);
      c.mirror_streaming = true;
      for (uint32_t id = 0; id < mirror_domains_; id++) {
        if (mirror_stream_[id] != nullptr || (id < served.size() && !served[id])) continue;
        c.mirror_streaming = false;
        if (why.empty()) why = (mirror_domains_ == 1 ? "" : "domain " + std::to_string(id) + ": ") + mirror_why_[id];
      }
    }
    for (const auto& h : mirror_server_->held()) {
      c.mirror_held_entries += h.entries;
      c.mirror_held_bytes += h.bytes;
    }
    if (c.owned_here) {
      uint64_t verifier = 0;
      if (auto all = domains(&verifier, nullptr)) {
        for (const auto& d : *all) c.mirror_acks += d ? d->LogStats().mirror_acks : 0;
      }
      c.mirror = c.mirror_streaming ? "the partner's memory (" + config_.cluster_mirror_peer +
                                          "): writes are acknowledged once the partner holds them"
                                    : "the SAN intent log (degraded: no mirror: " + why + ")";
      c.degraded |= !c.mirror_streaming;
    } else {
      c.mirror = "holding " + std::to_string(c.mirror_held_entries) + " entries (" +
                 std::to_string(c.mirror_held_bytes) + " bytes) of the owner's log not yet on the SAN";
    }
  }
  MutexLock again(cluster_mu_);
  c.takeovers = takeovers_;
  c.partner_connections = partner_conns_ ? partner_conns_->conns.size() : 0;
  c.tickles_sent = tickles_sent_.load();
  c.partner_nfs_clients = config_.nfs_ganesha_recovery_dir.empty() ? -1 : static_cast<int64_t>(partner_records_.load());
  c.takeover_graces = takeover_graces_.load();
  if (!config_.nfs_statd_dir.empty()) {
    c.partner_nlm_clients = static_cast<int64_t>(partner_nlm_clients_.load());
    c.nlm_notified = nlm_notified_.load();
    c.nlm_unreachable = nlm_unreachable_.load();
  }
  c.last_takeover = last_takeover_;
  return c;
}

void Node::OwnerLoop() {
  MutexLock lock(lost_mu_);
  while (!owner_stop_) {
    owner_cv_.WaitFor(lost_mu_, std::chrono::milliseconds(ownership_options_.renew_interval_ms),
                      [&]() REQUIRES(lost_mu_) { return owner_stop_ || lost_.has_value(); });
    if (owner_stop_) break;
    std::optional<nasgw::Status> lost = std::move(lost_);
    lost_.reset();
    lock.Unlock();
    // Destroyed after the node's lock is given up: closing waits for I/O in
    // flight, which on a dead SAN path takes the I/O timeout, and the state
    // must say fenced (to admins and to the partner's heartbeats) at once.
    std::shared_ptr<const DomainSet> old_domains;
    DomainSet old_pending;
    std::shared_ptr<fs::Reserve> old_reserve;
    std::unique_ptr<fs::Ownership> old_owner;
    // A node that does not own the reserve watches its owner record. Read
    // without the node's lock: on a SAN path that hangs the read lasts the
    // I/O timeout, and admins' and heads' calls must not wait for it.
    std::optional<Result<fs::OwnerView>> seen;
    bool reopened = false;  // RetryOpenIfDue, below
    uint32_t seen_domain = 0;
    {
      std::vector<std::shared_ptr<block::BlockDevice>> luns;
      Uuid uuid;
      {
        WriterLock node_lock(mu_);
        ChooseWatchDomainLocked();
        const bool watching = state_ == ReserveState::kStandby || state_ == ReserveState::kFenced ||
                              (Shared() && state_ == ReserveState::kOnline);
        if (watching && watch_domain_ != kNoWatch) {
          luns = gated_;
          uuid = reserve_uuid_;
          seen_domain = watch_domain_;
        }
      }
      if (!luns.empty()) seen = fs::ReadOwner(luns, uuid, seen_domain);
    }
    {
      WriterLock node_lock(mu_);
      if (lost && state_ == ReserveState::kOnline) {
        // Heads in flight keep the domain object until they finish; every
        // write they make fails at the closed gate. Nothing is flushed.
        old_domains = std::move(domains_);
        old_reserve = std::move(reserve_);
        old_owner = std::move(owner_);
        state_ = ReserveState::kFenced;
        reason_ = "this node lost the reserve and stopped writing: " + lost->ToString();
        fenced_total_++;
        watch_ = fs::OwnerWatch();
        NASGW_LOG(kError, "node") << "fenced: ownership of the reserve lost; no more writes"
                                  << Kv("reason", lost->ToString());
      }
      if (lost && state_ == ReserveState::kFailed && pending_open_) {
        // Lost while its domain would not open: nothing was served. Those
        // that did open close outside the lock.
        old_pending = std::move(pending_open_->opened);
        pending_open_.reset();
        old_owner = std::move(owner_);
        state_ = ReserveState::kFenced;
        reason_ = "this node lost the reserve while its domain would not open: " + lost->ToString();
        fenced_total_++;
        watch_ = fs::OwnerWatch();
        NASGW_LOG(kError, "node") << "fenced before the domain opened" << Kv("reason", lost->ToString());
      }
      // (Just fenced: watched from the next round on, read unlocked.)
      const bool watching = state_ == ReserveState::kStandby || state_ == ReserveState::kFenced ||
                            (Shared() && state_ == ReserveState::kOnline);
      if (seen && watching && seen_domain == watch_domain_) ApplyOwnerLocked(*seen);
      // In a pair, a fenced node whose old domain is gone and that sees
      // another node renewing the reserve is that node's standby: it writes
      // nothing and may take over again when that one fails.
      if (state_ == ReserveState::kFenced && config_.cluster_enabled && !old_domains && !owner_ &&
          watch_.view().held() && watch_.view().record->node_id != identity_.id && !watch_.Expired(MonotonicNanos())) {
        state_ = ReserveState::kStandby;
        reason_ = "fenced earlier; standing by for " + owner_text_;
        NASGW_LOG(kWarn, "cluster") << "fenced node stands by for the new owner" << Kv("owner", owner_text_);
      }
    }
    // Fenced: this node's heads go to the partner from now on, not at the
    // next heartbeat (in between they would be told "not online").
    if (old_domains) RouteHeadsByState();
    reopened = RetryOpenIfDue();
    if (reopened) {
      RouteHeadsByState();
      PublishExports().IgnoreError();  // logged; written again at the next change
      PublishShares().IgnoreError();
    }
    old_domains.reset();
    old_pending.clear();
    old_reserve.reset();
    old_owner.reset();
    lock.Lock();
  }
}

nasgw::Status Node::TakeoverReserve(bool force) {
  MutexLock admin(admin_mu_);
  WriterLock lock(mu_);
  if (state_ == ReserveState::kOnline && Shared()) {
    // Active/active: the partner's domains, from the partner.
    ObserveOwnerLocked();
    if (watch_domain_ == kNoWatch) {
      return nasgw::Status::FailedPrecondition("every domain of the reserve is served here already");
    }
    const uint64_t now = MonotonicNanos();
    // (A domain this node took but could not open is held by it: tried
    // again without waiting.)
    const bool held = watch_.view().held() && watch_.view().record->node_id != identity_.id;
    if (!force && held && !watch_.Expired(now)) {
      return nasgw::Status::FailedPrecondition(
          "domain " + std::to_string(watch_domain_) + " is owned by " + owner_text_ + "; it last renewed " +
          std::to_string(watch_.SilentMs(now)) +
          " ms ago, within its lease: wait for the lease to run out, or --force to preempt a node that may still "
          "be running (it is fenced off the LUNs and stops serving its domains)");
    }
    NASGW_LOG(kWarn, "node") << "taking over the partner's domains" << Kv("force", force) << Kv("from", owner_text_);
    nasgw::Status s = TakePartnerDomainsLocked(force  ? fs::AcquireMode::kForce
                                               : held ? fs::AcquireMode::kTakeover
                                                      : fs::AcquireMode::kNormal);
    lock.Unlock();
    PublishExports().IgnoreError();  // logged; written again at the next change
    PublishShares().IgnoreError();
    return s;
  }
  if (state_ == ReserveState::kOnline) {
    return nasgw::Status::FailedPrecondition("reserve is already online on this node");
  }
  if (state_ != ReserveState::kStandby && state_ != ReserveState::kFenced) {
    return nasgw::Status::FailedPrecondition(std::string("nothing to take over: the reserve is ") +
                                             ReserveStateName(state_) + ": " + reason_);
  }
  ObserveOwnerLocked();
  const uint64_t now = MonotonicNanos();
  // (Shared, a free home domain is free whoever holds the reservation.)
  const bool free_home = Shared() && !watch_.view().held();
  if (!force && !free_home && !watch_.Expired(now)) {
    return nasgw::Status::FailedPrecondition(
        "the reserve is owned by " + owner_text_ + "; it last renewed " + std::to_string(watch_.SilentMs(now)) +
        " ms ago, within its lease: wait for the lease to run out, or "
        "--force to preempt a node that may still be running (it is fenced off the LUNs)");
  }
  NASGW_LOG(kWarn, "node") << "taking over the reserve" << Kv("force", force) << Kv("from", owner_text_);
  // A free reserve is acquired as at start: whoever reserves it first wins,
  // and a node that just took it is not preempted.
  // (Shared, the partner's reservation is no claim on this node's domains.)
  const bool free = !watch_.view().held() && (Shared() || !watch_.view().reservation.reserved);
  OpenReserveLocked(force ? fs::AcquireMode::kForce : free ? fs::AcquireMode::kNormal : fs::AcquireMode::kTakeover);
  if (state_ != ReserveState::kOnline) {
    return nasgw::Status::Unavailable("takeover failed: " + std::string(ReserveStateName(state_)) + ": " + reason_);
  }
  lock.Unlock();
  PublishExports().IgnoreError();  // logged; written again at the next change
  PublishShares().IgnoreError();
  return nasgw::Status();
}

nasgw::Status Node::TakePartnerDomainsLocked(fs::AcquireMode mode, const std::vector<uint32_t>& only) {
  const uint32_t count = reserve_->domains();
  std::vector<uint32_t> take;
  for (uint32_t id = 0; id < count; id++) {
    if (!(*domains_)[id] && (only.empty() || std::find(only.begin(), only.end(), id) != only.end())) {
      take.push_back(id);
    }
  }
  Tails tails(count);
  for (uint32_t id : take) {
    // What this node holds of the partner's log of it (its stream here
    // stops being answered first: nothing more is acknowledged from it).
    if (mirror_server_) tails[id] = mirror_server_->Freeze(reserve_uuid_, id).tail;
  }
  std::vector<uint32_t> acquired;
  nasgw::Status first_error;
  for (uint32_t id : take) {
    nasgw::Status a = owner_->AcquireDomain(id, mode);
    if (a.ok()) {
      acquired.push_back(id);
      continue;
    }
    if (mirror_server_) mirror_server_->Unfreeze(reserve_uuid_, id);
    NASGW_LOG(kWarn, "node") << "partner's domain not taken" << Kv("domain", id) << Kv("error", a.ToString());
    if (first_error.ok()) first_error = a.WithContext("take domain " + std::to_string(id));
  }
  if (acquired.empty()) return first_error;
  DomainSet opened(count);
  nasgw::Status s = OpenDomains(reserve_, tails, &opened, acquired);
  DomainSet next = *domains_;
  for (uint32_t id : acquired) {
    if (!opened[id]) {
      // Owned, its log kept frozen here (MirrorLoop leaves an owned
      // domain's copy frozen), not served: said; `nasgw reserve takeover`
      // tries again with the same copy (a restart of this node too).
      NASGW_LOG(kError, "node") << "a domain taken over did not open" << Kv("domain", id) << Kv("error", s.ToString());
      continue;
    }
    if (mirror_server_) mirror_server_->Drop(reserve_uuid_, id);
    if (id < tails.size() && tails[id]) {
      NASGW_LOG(kInfo, "node") << "the partner's mirror of the log taken" << Kv("domain", id)
                               << Kv("held", tails[id]->entries.size())
                               << Kv("replayed", opened[id]->LogStats().tail_replayed);
    }
    next[id] = std::move(opened[id]);
  }
  domains_ = std::make_shared<const DomainSet>(std::move(next));
  ChooseWatchDomainLocked();
  NASGW_LOG(kWarn, "node") << "serving the partner's domains" << Kv("taken", acquired.size());
  if (!s.ok()) return s.WithContext("open the domains taken over");
  return first_error.ok() || acquired.size() == take.size() ? nasgw::Status() : first_error;
}

NodeStatus Node::Status() const {
  NodeStatus s;
  s.node_name = config_.node_name;
  s.version = NASGW_VERSION;
  s.started_unix = started_unix_;
  const int64_t now = NowUnix();
  s.uptime_s = now > started_unix_ ? static_cast<uint64_t>(now - started_unix_) : 0;
  {
    ReaderLock lock(mu_);
    s.reserve_state = state_;
  }
  s.head_connections = head_connections.load();
  s.head_requests = head_requests.load();
  return s;
}

LunStatus Node::LunStatusLocked(uint32_t index, const std::shared_ptr<block::BlockDevice>& lun) const {
  LunStatus l;
  l.index = index;
  auto* gated = dynamic_cast<block::GatedDevice*>(lun.get());
  const std::shared_ptr<block::BlockDevice>& dev = gated ? gated->inner() : lun;
  for (size_t i = 0; i < devices_.size(); i++) {
    if (devices_[i] == dev) l.url = Redact(urls_[i]);
  }
  if (l.url.empty()) l.url = dev->info().name;
  const auto& in = dev->info();
  l.serial = !in.serial.empty() ? in.serial : in.designator;
  // SCSI pads the unit serial number with spaces (tgtd on the left).
  const size_t b = l.serial.find_first_not_of(' '), e = l.serial.find_last_not_of(' ');
  l.serial = b == std::string::npos ? std::string() : l.serial.substr(b, e - b + 1);
  l.size_bytes = in.size_bytes();
  if (reserve_ && state_ == ReserveState::kOnline && index < reserve_->lun_count()) {
    l.ag_count = reserve_->ag_count(index);
  }
  l.stats = dev->Stats();
  if (l.stats.paths.empty()) {
    // A device without paths of its own (in memory): one path, always up.
    l.paths_total = l.paths_up = 1;
  } else {
    l.paths_total = static_cast<uint32_t>(l.stats.paths.size());
    for (const auto& p : l.stats.paths) l.paths_up += p.up ? 1 : 0;
  }
  l.healthy = l.paths_up > 0;
  return l;
}

ReserveStatus Node::GetReserve() const {
  ReaderLock lock(mu_);
  ReserveStatus r;
  r.state = state_;
  r.reason = reason_;
  if (state_ == ReserveState::kOnline && reserve_ && domains_) {
    r.name = reserve_->name();
    r.uuid = reserve_->uuid().ToString();
    r.domains = reserve_->domains();
    r.ag_bytes = reserve_->ag_bytes();
    r.generation = reserve_->generation();
    for (const auto& d : *domains_) {
      if (!d) continue;  // the partner's: counted there
      const fs::StatFs st = d->Statfs();
      r.capacity_bytes += st.total_bytes;
      r.free_bytes += st.free_bytes;
      r.files += st.files;
    }
    for (uint32_t i = 0; i < reserve_->lun_count(); i++) r.luns.push_back(LunStatusLocked(i, reserve_->lun(i)));
  } else {
    for (size_t i = 0; i < devices_.size(); i++) {
      r.luns.push_back(LunStatusLocked(static_cast<uint32_t>(i), devices_[i]));
    }
  }
  r.fenced_total = fenced_total_;
  if (owner_) {
    r.owned_here = true;
    const fs::OwnerRecord rec = owner_->record();
    r.owner = "this node ('" + identity_.name + "', key " + fs::OwnerKeyText(rec.key) + ")";
    r.lease_ms = rec.lease_ms;
    r.renewals = owner_->renewals();
  } else if (state_ == ReserveState::kStandby || state_ == ReserveState::kFenced) {
    r.owner = owner_text_;
    r.holder_silent_ms = watch_.SilentMs(MonotonicNanos());
    if (watch_.view().record) r.lease_ms = watch_.view().record->lease_ms;
  }
  return r;
}

nasgw::Status Node::FormatReserve(const std::string& name, uint64_t ag_bytes, bool force, uint32_t domains) {
  MutexLock admin(admin_mu_);
  std::shared_ptr<const DomainSet> old_domains;
  DomainSet old_pending;
  std::shared_ptr<fs::Reserve> old_reserve;
  std::unique_ptr<fs::Ownership> old_owner;
  std::vector<std::shared_ptr<block::BlockDevice>> devices;
  {
    WriterLock lock(mu_);
    if (devices_.empty()) return nasgw::Status::Unavailable("the node has no LUNs (shut down, or none configured)");
    if (state_ == ReserveState::kStandby || state_ == ReserveState::kFenced) {
      // Even with force: formatting LUNs another node writes to would corrupt
      // what it serves. Taking the reserve over first fences that node.
      return nasgw::Status::FailedPrecondition("the reserve on these LUNs is owned by " + owner_text_ +
                                               "; take it over first ('nasgw reserve takeover')");
    }
    if (state_ == ReserveState::kOnline && !force) {
      return nasgw::Status(Code::kFailedPrecondition,
                           "reserve '" + reserve_->name() +
                               "' is online on these LUNs; formatting destroys it and every volume on "
                               "it (force formats over it)");
    }
    old_domains = std::move(domains_);
    old_reserve = std::move(reserve_);
    old_owner = std::move(owner_);
    // Formatted over: the domains that would not open go (those that did
    // close outside the lock).
    if (pending_open_) old_pending = std::move(pending_open_->opened);
    pending_open_.reset();
    devices = devices_;
    if (old_domains) {
      state_ = ReserveState::kFailed;
      reason_ = "being formatted";
    }
  }
  old_pending.clear();  // closed before their LUNs are overwritten
  if (old_domains) {
    // Heads in flight hold the domains; they must be closed before their
    // LUNs are overwritten.
    if (!WaitDrained(old_domains)) {
      WriterLock lock(mu_);
      RestoreOnlineLocked(std::move(old_domains), std::move(old_reserve), std::move(old_owner));
      return nasgw::Status::Busy("the domain is still in use by head requests; try again");
    }
    NASGW_LOG(kWarn, "node") << "closing the online domain to format over it" << Kv("reserve", old_reserve->name());
    old_domains.reset();
    old_reserve.reset();
  }
  // The old reserve is given up before its LUNs are relabelled; the new one
  // is owned before its domain is written.
  if (old_owner) old_owner->Release().IgnoreError();  // logged; the new owner is this node anyway
  old_owner.reset();

  fs::ReserveOptions o;
  o.name = name;
  o.ag_bytes = ag_bytes == 0 ? fs::kAgBytesDefault : ag_bytes;
  o.force = force;
  o.domains = domains == 0 ? 1 : domains;
  nasgw::Status failed;
  std::shared_ptr<fs::Reserve> reserve;
  DomainSet created;
  std::unique_ptr<fs::Ownership> owner;
  auto gate = std::make_shared<block::WriteGate>();
  std::vector<std::shared_ptr<block::BlockDevice>> gated;
  auto r = fs::Reserve::Format(block::Gate(devices, gate), o);
  if (!r.ok()) {
    failed = r.status();
  } else {
    reserve = std::move(r.value());
    for (uint32_t i = 0; i < reserve->lun_count(); i++) gated.push_back(reserve->lun(i));
    auto own =
        fs::Ownership::Acquire(gated, gate, reserve->uuid(), 0, identity_, ownership_options_, fs::AcquireMode::kNormal,
                               [this](const nasgw::Status& why) { OnOwnershipLost(why); });
    if (own.ok()) {
      owner = std::move(own.value());
    } else {
      failed = own.status().WithContext("take ownership").WithContext("create domain");
    }
    for (uint32_t id = 0; failed.ok() && id < reserve->domains(); id++) {
      auto d = fs::Domain::Create(reserve, id, domain_options_);
      if (!d.ok()) {
        failed = d.status().WithContext(reserve->domains() == 1 ? std::string("create domain")
                                                                : "create domain " + std::to_string(id));
      } else {
        created.push_back(std::move(d.value()));
      }
    }
  }

  // The domains made before one failed are closed before the LUNs are
  // read again, and outside the node's lock.
  if (!failed.ok()) created.clear();
  // Shared (active/active), the new reserve is opened as at start: this
  // node serves its home domains, the partner takes its own.
  const bool reopen = failed.ok() && Shared();
  if (reopen) {
    created.clear();
    reserve.reset();
    nasgw::Status released = owner->Release();
    if (!released.ok()) NASGW_LOG(kWarn, "node") << "release after format failed" << Kv("error", released.ToString());
    owner.reset();
  }
  {
    WriterLock lock(mu_);
    if (!failed.ok() || reopen) {
      owner.reset();
      // Whatever the LUNs hold now decides the state.
      OpenReserveLocked();
    } else {
      reserve_ = std::move(reserve);
      domains_ = std::make_shared<const DomainSet>(std::move(created));
      write_verifier_ = NewWriteVerifier();
      owner_ = std::move(owner);
      gate_ = gate;
      gated_ = gated;
      reserve_uuid_ = reserve_->uuid();
      owner_text_ = "this node";
      state_ = ReserveState::kOnline;
      reason_.clear();
      NASGW_LOG(kInfo, "node") << "reserve formatted" << Kv("name", name) << Kv("luns", devices.size())
                               << Kv("domains", domains_->size());
      if (mirror_server_) MirrorDomains(static_cast<uint32_t>(domains_->size()));
    }
  }
  // The reserve came online (a new one without exports, or the old one
  // again): the exports file follows it.
  PublishExports().IgnoreError();
  PublishShares().IgnoreError();
  return failed;
}

Result<LunStatus> Node::AddLun(const std::string& url, bool force) {
  if (Shared()) {
    // The partner must register on a new LUN before its domains grow onto
    // it, and nothing tells it to yet.
    return nasgw::Status::FailedPrecondition(
        "adding a LUN is not supported with [cluster] home_domains yet: remove it on both nodes, add the LUN, and "
        "put it back");
  }
  MutexLock admin(admin_mu_);
  const std::string shown = Redact(url);
  std::shared_ptr<fs::Reserve> reserve;
  std::shared_ptr<const DomainSet> domains;
  std::shared_ptr<block::WriteGate> gate;
  fs::Ownership* owner = nullptr;
  {
    ReaderLock lock(mu_);
    if (state_ != ReserveState::kOnline) {
      return nasgw::Status::Unavailable(std::string("reserve is not online: ") + ReserveStateName(state_) + ": " +
                                        reason_);
    }
    for (const auto& u : urls_) {
      if (Redact(u) == shown) return nasgw::Status::Exists("LUN " + shown + " is already in use by this node");
    }
    reserve = reserve_;
    domains = domains_;
    gate = gate_;
    owner = owner_.get();  // stays while admin_mu_ is held: only a loss (fenced) resets it, under mu_
  }
  auto opened = opener_(WithChap(config_, url));
  if (!opened.ok()) return opened.status().WithContext("LUN " + shown);
  std::shared_ptr<block::BlockDevice> raw = std::move(opened.value());
  std::shared_ptr<block::BlockDevice> dev = std::make_shared<block::GatedDevice>(raw, gate);
  // Ours before anything of the reserve is written to it.
  {
    ReaderLock lock(mu_);
    if (owner_.get() != owner || owner == nullptr) return nasgw::Status::Fenced("the reserve was lost meanwhile");
    NASGW_RETURN_IF_ERROR(owner->AddLun(dev).WithContext("take ownership of LUN " + shown));
  }

  // Remembered first: a LUN that joined the reserve must be opened at the
  // next start, or the reserve would be missing a member.
  std::vector<std::string> added = added_urls_;
  added.push_back(url);
  NASGW_RETURN_IF_ERROR(WriteRememberedLuns(config_, added).WithContext("remember LUN in " + LunsFile(config_)));
  nasgw::Status s = reserve->AddLun(dev, force);
  if (!s.ok()) {
    WriteRememberedLuns(config_, added_urls_).IgnoreError();  // at start a blank remembered LUN is left out anyway
    return s;
  }
  added_urls_ = std::move(added);
  uint32_t index = 0;
  {
    WriterLock lock(mu_);
    urls_.push_back(WithChap(config_, url));
    devices_.push_back(raw);
    gated_.push_back(dev);
    for (uint32_t i = 0; i < reserve->lun_count(); i++) {
      if (reserve->lun(i) == dev) index = i;
    }
  }
  uint64_t bytes = 0;
  for (size_t id = 0; id < domains->size(); id++) {
    if (!(*domains)[id]) continue;
    auto grew = (*domains)[id]->Grow();
    if (!grew.ok()) {
      // The LUN is a member; the domain takes its groups at the next open.
      return grew.status().WithContext(
          "LUN " + shown + " joined the reserve but " +
          (domains->size() == 1 ? std::string("the domain") : "domain " + std::to_string(id)) +
          " did not grow onto it");
    }
    bytes += *grew;
  }
  NASGW_LOG(kInfo, "node") << "LUN added" << Kv("lun", shown) << Kv("bytes", bytes);
  ReaderLock lock(mu_);
  return LunStatusLocked(index, raw);
}

Result<std::shared_ptr<const DomainSet>> Node::OnlineDomains() const {
  ReaderLock lock(mu_);
  if (state_ != ReserveState::kOnline || !domains_) {
    return nasgw::Status::Unavailable(std::string("reserve is not online: ") + ReserveStateName(state_) + ": " +
                                      reason_);
  }
  return domains_;
}

Result<std::shared_ptr<fs::Domain>> Node::DomainOfVolume(const std::string& name) const {
  auto all = OnlineDomains();
  if (!all.ok()) return all.status();
  const DomainSet& domains = **all;
  if (domains.size() == 1) return domains[0];  // its own call says NotFound
  for (const auto& d : domains) {
    if (!d) continue;
    auto v = d->FindVolume(name);
    if (v.ok()) return d;
    if (v.status().code() != Code::kNotFound) return v.status();
  }
  return nasgw::Status::NotFound("volume '" + name + "' does not exist");
}

Result<std::shared_ptr<fs::Domain>> Node::DomainOfExport(uint32_t id) const {
  auto all = OnlineDomains();
  if (!all.ok()) return all.status();
  const DomainSet& domains = **all;
  const auto count = static_cast<uint32_t>(domains.size());
  for (uint32_t d = 0; d < count; d++) {
    const fs::ExportIdRange ids = fs::ExportIds(d, count);
    if (id >= ids.first && id <= ids.last && domains[d]) return domains[d];
    if (id >= ids.first && id <= ids.last) {
      return nasgw::Status::Unavailable("export " + std::to_string(id) + " is of domain " + std::to_string(d) +
                                        ", which the partner serves: ask it");
    }
  }
  for (const auto& d : domains) {
    if (d) return d;  // no domain's: its own call says NotFound
  }
  return nasgw::Status::Unavailable("no domain is served here");
}

Result<std::vector<fs::Export>> Node::ExportsOf(const DomainSet& domains) {
  std::vector<fs::Export> all;
  for (const auto& d : domains) {
    if (!d) continue;
    auto e = d->ListExports();
    if (!e.ok()) return e.status();
    all.insert(all.end(), std::make_move_iterator(e->begin()), std::make_move_iterator(e->end()));
  }
  return all;  // by id: each domain's ids are above the previous one's (fs::ExportIds)
}

Result<std::vector<fs::Share>> Node::SharesOf(const DomainSet& domains) {
  std::vector<fs::Share> all;
  for (const auto& d : domains) {
    if (!d) continue;
    auto sh = d->ListShares();
    if (!sh.ok()) return sh.status();
    all.insert(all.end(), std::make_move_iterator(sh->begin()), std::make_move_iterator(sh->end()));
  }
  if (domains.size() > 1) {
    // As one domain lists them: by name, ignoring case.
    auto lower = [](std::string n) {
      for (char& c : n) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
      return n;
    };
    std::stable_sort(all.begin(), all.end(),
                     [&](const fs::Share& a, const fs::Share& b) { return lower(a.name) < lower(b.name); });
  }
  return all;
}

Result<std::vector<fs::VolumeInfo>> Node::ListVolumes() {
  auto all = OnlineDomains();
  if (!all.ok()) return all.status();
  std::vector<fs::VolumeInfo> volumes;
  for (const auto& d : **all) {
    if (!d) continue;  // the partner's (shared)
    auto v = d->ListVolumes();
    if (!v.ok()) return v.status();
    volumes.insert(volumes.end(), v->begin(), v->end());
  }
  return volumes;
}

Result<fs::VolumeInfo> Node::GetVolume(const std::string& name) {
  auto d = DomainOfVolume(name);
  if (!d.ok()) return d.status();
  return (*d)->FindVolume(name);
}

Result<fs::VolumeInfo> Node::CreateVolume(const std::string& name, uint32_t record_bytes,
                                          std::optional<uint32_t> domain) {
  MutexLock names(names_mu_);
  auto all = OnlineDomains();
  if (!all.ok()) return all.status();
  const DomainSet& domains = **all;
  if (domain && *domain >= domains.size()) {
    return nasgw::Status::InvalidArgument(
        "domain " + std::to_string(*domain) + " does not exist: reserve has " + std::to_string(domains.size()) +
        " domain" + (domains.size() == 1 ? "" : "s") + " (0-" + std::to_string(domains.size() - 1) + ")");
  }
  if (domain && !domains[*domain]) {
    return nasgw::Status::FailedPrecondition("domain " + std::to_string(*domain) +
                                             " is served by the partner: create the volume there");
  }
  if (domains.size() == 1) return domains[0]->CreateVolume(name, record_bytes);
  uint64_t most_free = 0;
  std::optional<uint32_t> into;
  for (uint32_t d = 0; d < domains.size(); d++) {
    if (!domains[d]) continue;  // the partner's (shared): its names are not seen here
    auto v = domains[d]->FindVolume(name);
    if (v.ok()) return nasgw::Status::Exists("volume '" + name + "' exists");
    if (v.status().code() != Code::kNotFound) return v.status();
    const uint64_t free = domains[d]->Statfs().free_bytes;
    if (!into || free > most_free) {
      most_free = free;
      into = d;
    }
  }
  if (!into) return nasgw::Status::Unavailable("no domain is served here");
  return domains[domain.value_or(*into)]->CreateVolume(name, record_bytes);
}

Result<fs::VolumeInfo> Node::SetVolumeRecordBytes(const std::string& name, uint32_t record_bytes) {
  auto d = DomainOfVolume(name);
  if (!d.ok()) return d.status();
  return (*d)->SetVolumeRecordBytes(name, record_bytes);
}

Result<fs::VolumeInfo> Node::SetVolumeWriteThrough(const std::string& name, bool on) {
  auto d = DomainOfVolume(name);
  if (!d.ok()) return d.status();
  return (*d)->SetVolumeWriteThrough(name, on);
}

Result<fs::VolumeInfo> Node::SetVolumeAtime(const std::string& name, fs::Atime atime) {
  auto d = DomainOfVolume(name);
  if (!d.ok()) return d.status();
  return (*d)->SetVolumeAtime(name, atime);
}

nasgw::Status Node::DeleteVolume(const std::string& name, bool force) {
  auto d = DomainOfVolume(name);
  if (!d.ok()) return d.status();
  return (*d)->DeleteVolume(name, force);
}

Result<std::vector<fs::SnapshotInfo>> Node::ListSnapshots(const std::string& volume) {
  auto d = DomainOfVolume(volume);
  if (!d.ok()) return d.status();
  return (*d)->ListSnapshots(volume);
}

Result<std::vector<fs::SnapshotInfo>> Node::ListSnapshotsOf(const std::string& volume) {
  auto d = DomainOfVolume(volume);
  if (!d.ok()) return d.status();
  auto v = (*d)->FindVolume(volume);
  if (!v.ok()) return v.status();
  return (*d)->ListSnapshotsOf(v->id);
}

Result<fs::SnapshotInfo> Node::GetSnapshot(const std::string& volume, const std::string& name) {
  auto d = DomainOfVolume(volume);
  if (!d.ok()) return d.status();
  return (*d)->FindSnapshot(volume, name);
}

Result<fs::SnapshotInfo> Node::CreateSnapshot(const std::string& volume, const std::string& name) {
  auto d = DomainOfVolume(volume);
  if (!d.ok()) return d.status();
  return (*d)->CreateSnapshot(volume, name);
}

Result<fs::SnapshotInfo> Node::DeleteSnapshot(const std::string& volume, const std::string& name) {
  auto d = DomainOfVolume(volume);
  if (!d.ok()) return d.status();
  return (*d)->DeleteSnapshot(volume, name);
}

Result<fs::RollbackInfo> Node::RollbackSnapshot(const std::string& volume, const std::string& name) {
  auto d = DomainOfVolume(volume);
  if (!d.ok()) return d.status();
  return (*d)->RollbackSnapshot(volume, name);
}

Result<fs::VolumeInfo> Node::CloneSnapshot(const std::string& volume, const std::string& snapshot,
                                           const std::string& clone) {
  MutexLock names(names_mu_);
  auto d = DomainOfVolume(volume);  // the clone shares the origin's data, so its domain
  if (!d.ok()) return d.status();
  auto all = OnlineDomains();
  if (!all.ok()) return all.status();
  for (const auto& other : **all) {
    if (!other || other == *d) continue;  // its own call says Exists (null: the partner's)
    auto taken = other->FindVolume(clone);
    if (taken.ok()) return nasgw::Status::Exists("volume '" + clone + "' exists");
    if (taken.status().code() != Code::kNotFound) return taken.status();
  }
  return (*d)->CloneSnapshot(volume, snapshot, clone);
}

Result<fs::SnapshotSchedule> Node::AddSnapshotSchedule(const std::string& volume, const fs::SnapshotSchedule& s) {
  auto d = DomainOfVolume(volume);
  if (!d.ok()) return d.status();
  return (*d)->AddSnapshotSchedule(volume, s);
}

Result<std::vector<fs::SnapshotSchedule>> Node::ListSnapshotSchedules() {
  auto all = OnlineDomains();
  if (!all.ok()) return all.status();
  std::vector<fs::SnapshotSchedule> schedules;  // by volume id: each domain's ids are above the previous one's
  for (const auto& d : **all) {
    if (!d) continue;
    auto sc = d->ListSnapshotSchedules();
    if (!sc.ok()) return sc.status();
    schedules.insert(schedules.end(), sc->begin(), sc->end());
  }
  return schedules;
}

Result<fs::SnapshotSchedule> Node::RemoveSnapshotSchedule(const std::string& volume, const std::string& name) {
  MutexLock lock(schedule_mu_);  // after a run under way
  auto d = DomainOfVolume(volume);
  if (!d.ok()) return d.status();
  auto all = (*d)->ListSnapshotSchedules();
  if (!all.ok()) return all.status();
  fs::SnapshotSchedule gone;
  for (const fs::SnapshotSchedule& s : *all) {
    if (s.volume == volume && s.name == name) gone = s;
  }
  // An unknown volume or schedule: the domain's NotFound.
  NASGW_RETURN_IF_ERROR((*d)->RemoveSnapshotSchedule(volume, name));
  return gone;
}

nasgw::Status Node::RunSnapshotSchedule(const std::string& volume, const std::string& name,
                                        const std::function<nasgw::Status(const fs::SnapshotSchedule&)>& run) {
  MutexLock lock(schedule_mu_);
  auto all = ListSnapshotSchedules();
  if (!all.ok()) return all.status();
  for (const fs::SnapshotSchedule& s : *all) {
    if (s.volume == volume && s.name == name) return run(s);
  }
  return nasgw::Status::NotFound("volume '" + volume + "' has no schedule '" + name + "'");
}

nasgw::Status Node::MarkScheduleRun(const std::string& volume, const std::string& name, int64_t when) {
  auto d = DomainOfVolume(volume);
  if (!d.ok()) return d.status();
  return (*d)->MarkScheduleRun(volume, name, when);
}

Result<std::vector<fs::Export>> Node::ListExports() {
  auto all = OnlineDomains();
  if (!all.ok()) return all.status();
  return ExportsOf(**all);
}

Result<fs::Export> Node::GetExport(uint32_t id) {
  auto d = DomainOfExport(id);
  if (!d.ok()) return d.status();
  return (*d)->GetExport(id);
}

Result<fs::Export> Node::FindExport(const std::string& pseudo) {
  auto p = NormalizeExportPath("pseudo path", pseudo);
  if (!p.ok()) return p.status();
  auto all = OnlineDomains();
  if (!all.ok()) return all.status();
  Result<fs::Export> e = nasgw::Status::NotFound("no export at '" + *p + "'");
  for (const auto& d : **all) {
    if (!d) continue;
    e = d->FindExport(*p);
    if (e.status().code() != Code::kNotFound) break;
  }
  return e;
}

Result<fs::Export> Node::AddExport(const fs::Export& spec, std::string* publish_error) {
  // The fields' rules (what Ganesha's configuration needs) are nasgwd's; the
  // domain checks the rest (the volume, the sub-path, the pseudo path free).
  fs::Export normal = spec;
  NASGW_RETURN_IF_ERROR(NormalizeExport(&normal));
  MutexLock lock(exports_mu_);
  auto d = DomainOfVolume(normal.volume);
  if (!d.ok()) return d.status();
  auto all = OnlineDomains();
  if (!all.ok()) return all.status();
  for (const auto& other : **all) {
    if (!other || other == *d) continue;  // its own call checks its pseudo paths
    auto taken = other->FindExport(normal.pseudo);
    if (taken.ok()) {
      return nasgw::Status::Exists("pseudo path '" + normal.pseudo + "' is taken by export " +
                                   std::to_string(taken->id));
    }
    if (taken.status().code() != Code::kNotFound) return taken.status();
  }
  auto e = (*d)->AddExport(normal);
  if (!e.ok()) return e.status();
  NASGW_LOG(kInfo, "node") << "export added" << Kv("id", e->id) << Kv("volume", e->volume) << Kv("path", e->path)
                           << Kv("pseudo", e->pseudo);
  nasgw::Status p = PublishExportsLocked();
  if (publish_error) *publish_error = p.ok() ? "" : p.ToString();
  return e;
}

Result<fs::Export> Node::RemoveExport(uint32_t id, std::string* publish_error) {
  MutexLock lock(exports_mu_);
  auto d = DomainOfExport(id);
  if (!d.ok()) return d.status();
  auto e = (*d)->RemoveExport(id);
  if (!e.ok()) return e.status();
  NASGW_LOG(kInfo, "node") << "export removed" << Kv("id", e->id) << Kv("pseudo", e->pseudo);
  nasgw::Status p = PublishExportsLocked();
  if (publish_error) *publish_error = p.ok() ? "" : p.ToString();
  return e;
}

nasgw::Status Node::PublishExports() {
  MutexLock lock(exports_mu_);
  return PublishExportsLocked();
}

nasgw::Status Node::PublishExportsLocked() {
  if (config_.nfs_exports_file.empty()) return nasgw::Status();
  auto all = OnlineDomains();
  if (!all.ok()) return nasgw::Status();  // not online: the file keeps what it last had
  auto exports = ExportsOf(**all);
  if (!exports.ok()) {
    NASGW_LOG(kError, "nfs") << "cannot read the exports; the exports file is left as it was"
                             << Kv("error", exports.status().ToString());
    return exports.status().WithContext("read the exports");
  }
  return daemon::PublishExports(config_.nfs_exports_file, config_.nfs_ganesha_pid_file, config_.node_name, *exports);
}

Result<std::vector<fs::Share>> Node::ListShares() {
  auto all = OnlineDomains();
  if (!all.ok()) return all.status();
  return SharesOf(**all);
}

Result<fs::Share> Node::GetShare(const std::string& name) {
  auto all = OnlineDomains();
  if (!all.ok()) return all.status();
  Result<fs::Share> sh = nasgw::Status::NotFound("no share named '" + name + "'");
  for (const auto& d : **all) {
    if (!d) continue;
    sh = d->GetShare(name);
    if (sh.status().code() != Code::kNotFound) break;
  }
  return sh;
}

Result<fs::Share> Node::AddShare(const fs::Share& spec, std::string* publish_error) {
  fs::Share normal = spec;
  NASGW_RETURN_IF_ERROR(NormalizeShare(&normal));
  MutexLock lock(exports_mu_);
  auto d = DomainOfVolume(normal.volume);
  if (!d.ok()) return d.status();
  auto all = OnlineDomains();
  if (!all.ok()) return all.status();
  for (const auto& other : **all) {
    if (!other || other == *d) continue;  // its own call checks its names
    auto taken = other->GetShare(normal.name);
    if (taken.ok()) {
      return nasgw::Status::Exists(
          "share name '" + normal.name + "' is taken" +
          (taken->name != normal.name ? " (by '" + taken->name + "': names ignore case)" : ""));
    }
    if (taken.status().code() != Code::kNotFound) return taken.status();
  }
  auto s = (*d)->AddShare(normal);
  if (!s.ok()) return s.status();
  NASGW_LOG(kInfo, "node") << "share added" << Kv("name", s->name) << Kv("volume", s->volume) << Kv("path", s->path);
  nasgw::Status p = PublishSharesLocked();
  if (publish_error) *publish_error = p.ok() ? "" : p.ToString();
  return s;
}

Result<fs::Share> Node::RemoveShare(const std::string& name, std::string* publish_error) {
  MutexLock lock(exports_mu_);
  auto all = OnlineDomains();
  if (!all.ok()) return all.status();
  std::shared_ptr<fs::Domain> d;  // none holds it: the first one's own call says NotFound
  for (const auto& each : **all) {
    if (!each) continue;  // the partner's (active/active)
    if (!d) d = each;
    if (each->GetShare(name).ok()) {
      d = each;
      break;
    }
  }
  if (!d) return nasgw::Status::Unavailable("no domain is served here");
  auto s = d->RemoveShare(name);
  if (!s.ok()) return s.status();
  NASGW_LOG(kInfo, "node") << "share removed" << Kv("name", s->name);
  nasgw::Status p = PublishSharesLocked();
  if (publish_error) *publish_error = p.ok() ? "" : p.ToString();
  return s;
}

nasgw::Status Node::PublishShares() {
  MutexLock lock(exports_mu_);
  return PublishSharesLocked();
}

nasgw::Status Node::PublishSharesLocked() {
  if (config_.smb_shares_file.empty()) return nasgw::Status();
  auto all = OnlineDomains();
  if (!all.ok()) return nasgw::Status();  // not online: the file keeps what it last had
  auto shares = SharesOf(**all);
  if (!shares.ok()) {
    NASGW_LOG(kError, "smb") << "cannot read the shares; the shares file is left as it was"
                             << Kv("error", shares.status().ToString());
    return shares.status().WithContext("read the shares");
  }
  return daemon::PublishShares(config_.smb_shares_file, config_.smb_smbd_pid_file, config_.head_socket,
                               config_.smb_vfs_objects, config_.node_name, *shares);
}

std::shared_ptr<fs::Domain> Node::domain() const {
  ReaderLock lock(mu_);
  if (state_ != ReserveState::kOnline || !domains_) return nullptr;
  for (const auto& d : *domains_) {
    if (d) return d;  // (shared: the first this node serves)
  }
  return nullptr;
}

std::shared_ptr<const DomainSet> Node::domains(uint64_t* write_verifier, std::shared_ptr<fs::Lease>* lease) const {
  ReaderLock lock(mu_);
  const bool online = state_ == ReserveState::kOnline && domains_ != nullptr;
  *write_verifier = online ? write_verifier_ : 0;
  if (lease != nullptr) *lease = online && owner_ ? owner_->lease() : nullptr;
  return online ? domains_ : nullptr;
}

void Node::RestoreOnlineLocked(std::shared_ptr<const DomainSet> domains, std::shared_ptr<fs::Reserve> reserve,
                               std::unique_ptr<fs::Ownership> owner) {
  domains_ = std::move(domains);
  reserve_ = std::move(reserve);
  owner_ = std::move(owner);
  state_ = ReserveState::kOnline;
  reason_.clear();
  owner_text_ = "this node";
  // Ownership lost while it was out of the node's hands (a giveback's drain
  // on a SAN path that hung: the watchdog closed the gate, and the owner
  // loop, seeing no online node, let the loss go): said again now, so that
  // this node is fenced and the partner takes over, instead of serving
  // online with a closed gate and a record nobody renews.
  if (gate_ && !gate_->is_open()) OnOwnershipLost(gate_->reason());
}

bool Node::WaitDrained(const std::shared_ptr<const DomainSet>& domains) const {
  // Heads hold the set, or a domain of it (a cache's flush, a session's end).
  auto held = [&domains] {
    if (!domains) return false;
    if (domains.use_count() > 1) return true;
    return std::any_of(domains->begin(), domains->end(), [](const auto& d) { return d.use_count() > 1; });
  };
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(config_.drain_ms);
  while (held() && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));  // heads hold it; no event for their last release
  }
  return !held();
}

nasgw::Status Node::CloseAndRelease(std::shared_ptr<const DomainSet> domains, std::shared_ptr<fs::Reserve> reserve,
                                    std::unique_ptr<fs::Ownership> owner) {
  // Outside the node's lock: closing flushes. A head request still holding
  // a domain keeps it open until it finishes; the reserve is released only
  // once nothing can write to it any more (else it stays owned, and this
  // node reclaims it at its next start).
  const bool drained = WaitDrained(domains);
  domains.reset();
  reserve.reset();
  nasgw::Status result;
  if (owner) {
    if (drained) {
      result = owner->Release();
      if (!result.ok()) NASGW_LOG(kWarn, "node") << "reserve release failed" << Kv("error", result.ToString());
    } else {
      result = nasgw::Status::Busy("head requests still hold the domain after " + std::to_string(config_.drain_ms) +
                                   " ms; the reserve stays owned by this node");
      NASGW_LOG(kWarn, "node") << result.ToString();
    }
    owner.reset();
  }
  return result;
}

void Node::SetRerouteHook(std::function<void(HeadsMove move, const std::string& why)> hook) {
  MutexLock lock(reroute_mu_);
  reroute_hook_ = std::move(hook);
}

void Node::RouteHeadsByState() {
  MutexLock route(route_mu_);
  if (giving_back_) return;
  ReserveState state;
  {
    ReaderLock lock(mu_);
    state = state_;
  }
  RouteHeadsLocked(state);
}

void Node::RouteHeadsLocked(ReserveState state) {
  const bool to_partner = config_.cluster_enabled && !config_.cluster_forward_peer.empty() &&
                          (state == ReserveState::kStandby || state == ReserveState::kFenced);
  if (heads_to_partner_.exchange(to_partner) == to_partner) return;
  const std::string why = to_partner
                              ? std::string("this node is ") + ReserveStateName(state) +
                                    ": heads go to the partner, which serves the reserve"
                              : std::string("this node is ") + ReserveStateName(state) + ": heads are served here";
  NASGW_LOG(kInfo, "cluster") << "head routing changed" << Kv("why", why);
  MutexLock lock(reroute_mu_);
  if (reroute_hook_) reroute_hook_(HeadsMove::kReroute, why);
}

void Node::SetFlushHook(std::function<nasgw::Status()> hook) {
  MutexLock lock(flush_hook_mu_);  // waits for a call in progress
  flush_hook_ = std::move(hook);
}

nasgw::Status Node::GiveBack(bool partner_asked) {
  if (!config_.cluster_enabled) {
    return nasgw::Status::FailedPrecondition("no partner to give the reserve to: [cluster] enabled = false");
  }
  Uuid reserve_uuid;
  {
    ReaderLock lock(mu_);
    reserve_uuid = reserve_uuid_;
    // Said first: a node that does not serve the reserve has nothing to
    // give (and nothing to flush).
    if (state_ != ReserveState::kOnline) {
      return nasgw::Status::FailedPrecondition(std::string("the reserve is not online here (") +
                                               ReserveStateName(state_) +
                                               "): only the node that serves it gives it back");
    }
  }
  {
    // Only to a partner that stands by and is heard: else the service
    // would stop with nobody to take it.
    // And to one that takes it: a partner with auto_takeover off leaves a
    // free reserve free, unless it asked for it (`cluster takeover` there).
    MutexLock lock(cluster_mu_);
    const uint64_t now = MonotonicNanos();
    bool ready = false, takes = false;
    std::string name;
    for (const auto& [id, p] : monitor_->peers()) {
      if (monitor_->Heard(id, now) && p.last.state == cluster::kStateStandby && p.last.reserve == reserve_uuid) {
        ready = true;
        takes |= partner_asked || p.last.takes_over;
        name = p.last.name;
      }
    }
    if (!ready) {
      return nasgw::Status::FailedPrecondition(
          "no partner stands by for this reserve and is heard on the interconnect: nobody would take it over");
    }
    if (!takes) {
      return nasgw::Status::FailedPrecondition(
          "the partner '" + name +
          "' does not take a free reserve by itself ([cluster] auto_takeover = false there), so nobody would serve "
          "it: run 'nasgw cluster takeover' on that node instead");
    }
  }
  if (Shared()) return GiveBackDomains();
  {
    // What the write-back cache holds goes to the SAN now, while the domain
    // is still online here (the flush needs it), so the partner replays
    // little. A failure is no loss: what was answered is in the intent log.
    MutexLock hook_lock(flush_hook_mu_);
    if (flush_hook_) {
      nasgw::Status f = flush_hook_();
      if (!f.ok()) NASGW_LOG(kWarn, "cluster") << "cache flush before the giveback failed" << Kv("error", f.ToString());
    }
  }
  MutexLock admin(admin_mu_);
  std::shared_ptr<const DomainSet> domains;
  std::shared_ptr<fs::Reserve> reserve;
  std::unique_ptr<fs::Ownership> owner;
  // Heads go to the partner before this node stops serving: a request that
  // meets the reserve not online here is then resent by its head (to the
  // partner, once it serves), never answered EHOSTUNREACH, as it was when
  // it came between the state's change and the heads' routing. Heads
  // connected here are cut (requests in flight finish, still served here)
  // and connect again to be relayed to the partner. Until the giveback
  // ends, only it routes them (a heartbeat that read the state online just
  // before would route them back here); at its end they go where the state
  // then says (the partner's; here again when the giveback was refused).
  {
    MutexLock route(route_mu_);
    giving_back_ = true;
    RouteHeadsLocked(ReserveState::kStandby);
  }
  struct EndGiveBack {
    Node* node;
    ~EndGiveBack() {
      {
        MutexLock route(node->route_mu_);
        node->giving_back_ = false;
      }
      node->RouteHeadsByState();
    }
  } end_giveback{this};
  {
    WriterLock lock(mu_);
    if (state_ != ReserveState::kOnline) {
      return nasgw::Status::FailedPrecondition(std::string("the reserve is not online here (") +
                                               ReserveStateName(state_) + ")");
    }
    domains = std::move(domains_);
    reserve = std::move(reserve_);
    owner = std::move(owner_);
    state_ = ReserveState::kStandby;  // heads are refused from here on
    reason_ = "gave the reserve back to the partner (planned)";
    watch_ = fs::OwnerWatch();
  }
  {
    // This node does not take the free reserve back while the partner takes it.
    // Shared, it takes its own home domains back at once: the partner
    // takes only its own (free ones are never taken from a node heard).
    MutexLock lock(cluster_mu_);
    next_takeover_mono_ns_ = Shared() ? 0
                                      : MonotonicNanos() + 2 * uint64_t{config_.lease_ms} * 1'000'000 +
                                            4 * uint64_t{config_.cluster_network_dead_ms} * 1'000'000;
  }
  NASGW_LOG(kWarn, "cluster") << "giving the reserve back to the partner";
  // The addresses and exports go first, so that the partner finds them free.
  ReconcileVips();  // standby now: the addresses go
  WithdrawExportsUnlessOnline(false);
  if (!WaitDrained(domains)) {
    // Heads still hold the domain: it stays here, online, still owned and
    // renewed (the ownership was never given up); the next heartbeat puts
    // the addresses and exports back.
    {
      WriterLock lock(mu_);
      RestoreOnlineLocked(std::move(domains), std::move(reserve), std::move(owner));
    }
    {
      MutexLock lock(cluster_mu_);
      next_takeover_mono_ns_ = 0;
    }
    return nasgw::Status::Busy("head requests still hold the domain after " + std::to_string(config_.drain_ms) +
                               " ms; the reserve stays online on this node");
  }
  nasgw::Status s = CloseAndRelease(std::move(domains), std::move(reserve), std::move(owner));
  {
    WriterLock lock(mu_);
    ObserveOwnerLocked();
  }
  return s;
}

nasgw::Status Node::GiveBackDomains() {
  {
    // As GiveBack: the cache to the SAN first, while the domains are open.
    MutexLock hook_lock(flush_hook_mu_);
    if (flush_hook_) {
      nasgw::Status f = flush_hook_();
      if (!f.ok()) NASGW_LOG(kWarn, "cluster") << "cache flush before the giveback failed" << Kv("error", f.ToString());
    }
  }
  MutexLock admin(admin_mu_);
  std::vector<uint32_t> give;
  auto removed = std::make_shared<DomainSet>();
  std::shared_ptr<const DomainSet> before;
  {
    WriterLock lock(mu_);
    if (state_ != ReserveState::kOnline || !domains_) {
      return nasgw::Status::FailedPrecondition(std::string("the reserve is not online here (") +
                                               ReserveStateName(state_) + ")");
    }
    const auto& home = config_.cluster_home_domains;
    DomainSet keep = *domains_;
    for (uint32_t id = 0; id < keep.size(); id++) {
      if (!keep[id] || std::find(home.begin(), home.end(), id) != home.end()) continue;
      give.push_back(id);
      removed->push_back(std::move(keep[id]));
    }
    if (give.empty()) {
      return nasgw::Status::FailedPrecondition(
          "this node serves only its home domains ([cluster] home_domains): nothing to give back");
    }
    before = domains_;
    domains_ = std::make_shared<const DomainSet>(std::move(keep));
    ChooseWatchDomainLocked();
  }
  std::string ids;
  for (uint32_t id : give) ids += (ids.empty() ? "" : ",") + std::to_string(id);
  NASGW_LOG(kWarn, "cluster") << "giving the partner its domains back" << Kv("domains", ids);
  // Their addresses and exports go first, then the heads' caches of them
  // (flushed into them, still open), so that nothing holds them.
  ReconcileVips();
  PublishExports().IgnoreError();  // logged; written again at the next change
  PublishShares().IgnoreError();
  {
    MutexLock hook_lock(flush_hook_mu_);
    if (flush_hook_) flush_hook_().IgnoreError();
  }
  std::shared_ptr<const DomainSet> given = std::move(removed);
  before.reset();
  if (!WaitDrained(given)) {
    // Heads still hold one: all stay here, online and owned (nothing was
    // given up); the next heartbeat puts the addresses and exports back.
    WriterLock lock(mu_);
    if (state_ == ReserveState::kOnline && domains_) {
      DomainSet back = *domains_;
      for (size_t i = 0; i < give.size(); i++) back[give[i]] = (*given)[i];
      domains_ = std::make_shared<const DomainSet>(std::move(back));
      ChooseWatchDomainLocked();
    }
    return nasgw::Status::Busy("head requests still hold a domain after " + std::to_string(config_.drain_ms) +
                               " ms; the domains stay online on this node");
  }
  // Closed here (each flushes what it holds) unless something took a
  // reference since the drain (a cache's flusher holds its domain while it
  // flushes): the records are freed only once every domain is closed, so
  // that no write of this node lands after the partner may have opened it.
  std::vector<std::weak_ptr<fs::Domain>> closing(given->begin(), given->end());
  given.reset();
  auto all_closed = [&closing] {
    return std::all_of(closing.begin(), closing.end(), [](const auto& w) { return w.expired(); });
  };
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(config_.drain_ms);
  while (!all_closed() && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));  // no event for a reference's end
  }
  nasgw::Status result;
  if (!all_closed()) {
    // Those still held are served here again, still owned; the others
    // (closed) are released below.
    WriterLock lock(mu_);
    std::vector<uint32_t> closed;
    DomainSet back = domains_ ? *domains_ : DomainSet();
    for (size_t i = 0; i < give.size(); i++) {
      if (auto d = closing[i].lock(); d && give[i] < back.size()) {
        back[give[i]] = std::move(d);
      } else {
        closed.push_back(give[i]);
      }
    }
    if (state_ == ReserveState::kOnline && domains_) {
      domains_ = std::make_shared<const DomainSet>(std::move(back));
      ChooseWatchDomainLocked();
    }
    result = nasgw::Status::Busy("a domain given back was still held after " + std::to_string(config_.drain_ms) +
                                 " ms; it stays on this node");
    give = std::move(closed);
  }
  {
    ReaderLock lock(mu_);
    for (uint32_t id : give) {
      nasgw::Status s = owner_ ? owner_->ReleaseDomain(id) : nasgw::Status::Fenced("the reserve was lost meanwhile");
      if (!s.ok()) {
        // Its record stays held, unrenewed: the partner takes it once its
        // lease has run out, as a dead node's.
        NASGW_LOG(kWarn, "cluster") << "domain release failed" << Kv("domain", id) << Kv("error", s.ToString());
        if (result.ok()) result = s;
      }
    }
  }
  {
    WriterLock lock(mu_);
    ObserveOwnerLocked();
  }
  return result;
}

void Node::TakeFreeHomeDomains() {
  std::vector<std::shared_ptr<block::BlockDevice>> luns;
  Uuid reserve;
  std::vector<uint32_t> want;
  {
    ReaderLock lock(mu_);
    if (state_ != ReserveState::kOnline || !domains_) return;
    for (uint32_t id : config_.cluster_home_domains) {
      if (id < domains_->size() && !(*domains_)[id]) want.push_back(id);
    }
    luns = gated_;
    reserve = reserve_uuid_;
  }
  if (want.empty() || luns.empty()) return;
  std::vector<uint32_t> free;
  for (uint32_t id : want) {
    auto v = fs::ReadOwner(luns, reserve, id);  // without the node's lock: SAN reads
    if (v.ok() && !v->held()) free.push_back(id);
  }
  if (free.empty()) return;
  MutexLock admin(admin_mu_);
  nasgw::Status s;
  {
    WriterLock lock(mu_);
    if (state_ != ReserveState::kOnline || !domains_) return;
    NASGW_LOG(kInfo, "node") << "taking this node's free home domains" << Kv("count", free.size());
    s = TakePartnerDomainsLocked(fs::AcquireMode::kNormal, free);
  }
  if (!s.ok()) NASGW_LOG(kWarn, "node") << "home domains not taken" << Kv("error", s.ToString());
  PublishExports().IgnoreError();  // logged; written again at the next change
  PublishShares().IgnoreError();
}

void Node::FailBackIfDue(uint64_t now) {
  std::vector<uint32_t> give;
  uint32_t count = 1;
  Uuid reserve;
  {
    ReaderLock lock(mu_);
    const auto& home = config_.cluster_home_domains;
    for (uint32_t id = 0; domains_ && id < domains_->size(); id++) {
      if ((*domains_)[id] && std::find(home.begin(), home.end(), id) == home.end()) give.push_back(id);
    }
    count = domains_ ? static_cast<uint32_t>(domains_->size()) : 1;
    reserve = reserve_uuid_;
  }
  bool partner_ready = false;
  {
    MutexLock lock(cluster_mu_);
    for (const auto& [id, p] : monitor_->peers()) {
      // And takes a free domain by itself (auto_takeover there): else the
      // domains would be given to nobody.
      // Standing by, or online without all of its home domains (it takes
      // a free home domain by itself: TakeFreeHomeDomains).
      partner_ready |= monitor_->Heard(id, now) &&
                       (p.last.state == cluster::kStateStandby || p.last.state == cluster::kStateOnline) &&
                       p.last.lan_up && p.last.takes_over && p.last.reserve == reserve;
    }
  }
  if (!partner_ready || give.empty()) {
    failback_fit_since_mono_ns_ = 0;
    return;
  }
  if (failback_fit_since_mono_ns_ == 0) failback_fit_since_mono_ns_ = now;
  const uint64_t fit_ms = (now - failback_fit_since_mono_ns_) / 1'000'000;
  if (fit_ms < 2 * uint64_t{config_.cluster_network_dead_ms}) return;
  // Not in the middle of a burst: the given domains' addresses quiet.
  if (vips_ && fit_ms < config_.cluster_vip_move_max_ms) {
    for (size_t i = 0; i < vips_->vips().size(); i++) {
      if (std::find(give.begin(), give.end(), i % count) == give.end()) continue;
      auto quiet = vips_->QuietMs(i);
      if (quiet.ok() && *quiet < config_.cluster_vip_idle_ms) return;
    }
  }
  NASGW_LOG(kInfo, "cluster") << "the partner stands by again: giving it its domains back" << Kv("ready_ms", fit_ms);
  nasgw::Status s = GiveBackDomains();
  if (!s.ok()) NASGW_LOG(kWarn, "cluster") << "giving the domains back failed" << Kv("error", s.ToString());
  failback_fit_since_mono_ns_ = 0;  // tried: again after two more bounds
}

nasgw::Status Node::RequestTakeover(uint32_t timeout_ms) {
  if (!config_.cluster_enabled) {
    return nasgw::Status::FailedPrecondition("not in a pair ([cluster] enabled = false): use 'reserve takeover'");
  }
  cluster::GiveBackRequest req;
  req.from = identity_.id;
  {
    ReaderLock lock(mu_);
    if (state_ == ReserveState::kOnline)
      return nasgw::Status::FailedPrecondition("this node already serves the reserve");
    if (state_ != ReserveState::kStandby) {
      return nasgw::Status::FailedPrecondition(std::string("this node is ") + ReserveStateName(state_) + ": " +
                                               reason_);
    }
    if (!watch_.view().held()) {
      return nasgw::Status::FailedPrecondition("nobody holds the reserve: 'reserve takeover' takes it");
    }
    req.to = watch_.view().record->node_id;
    req.reserve = reserve_uuid_;
  }
  {
    MutexLock lock(cluster_mu_);
    // Heard, and not reported gone by the interconnect since.
    if (!monitor_->Heard(req.to, MonotonicNanos())) {
      return nasgw::Status::Unavailable(
          "the owner is not heard on the interconnect, so it cannot be asked; if it is dead this node takes over by "
          "itself, else 'reserve takeover --force' fences it");
    }
    // A hold-off from this node's own giveback does not apply: it asks.
    next_takeover_mono_ns_ = 0;
    takeover_requested_ = true;
  }
  struct ClearRequest {
    Node* n;
    ~ClearRequest() {
      MutexLock lock(n->cluster_mu_);
      n->takeover_requested_ = false;
    }
  } clear_request{this};
  NASGW_RETURN_IF_ERROR(interconnect_->Send(cluster::EncodeGiveBack(req)).WithContext("ask the owner"));
  NASGW_LOG(kWarn, "cluster") << "asked the owner to give the reserve back (planned takeover)"
                              << Kv("owner", req.to.ToString());
  // The owner flushes, closes and releases; this node's cluster thread then
  // takes the free reserve. Polled: the takeover is another thread's.
  const uint64_t deadline = MonotonicNanos() + uint64_t{timeout_ms} * 1'000'000;
  for (;;) {
    {
      ReaderLock lock(mu_);
      if (state_ == ReserveState::kOnline) return nasgw::Status();
      if (state_ != ReserveState::kStandby) {
        return nasgw::Status::Unavailable(std::string("takeover failed: ") + ReserveStateName(state_) + ": " + reason_);
      }
    }
    if (MonotonicNanos() > deadline) {
      return nasgw::Status::TimedOut("the reserve did not come over within " + std::to_string(timeout_ms) +
                                     " ms (the owner may have refused: see its log)");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

void Node::Shutdown() {
  {
    MutexLock lock(cluster_mu_);
    cluster_stop_ = true;
  }
  cluster_cv_.NotifyAll();
  if (cluster_thread_.joinable()) cluster_thread_.join();
  grace_stop_ = true;  // SM_NOTIFYs still being sent stop (the DBus call is bounded by itself)
  if (grace_thread_.joinable()) grace_thread_.join();
  if (interconnect_) interconnect_->Stop();
  {
    MutexLock lock(mirror_mu_);
    mirror_stop_ = true;
  }
  mirror_cv_.NotifyAll();
  std::vector<std::thread> mirror_threads;
  {
    MutexLock lock(mirror_mu_);  // no more are started: mirror_stop_
    mirror_threads.swap(mirror_threads_);
  }
  for (std::thread& t : mirror_threads) t.join();
  // A node that stops serves nothing: its client addresses go before the
  // domain is released, so that the partner's takeover finds them free.
  if (vips_) {
    MutexLock vip_lock(vip_mu_);
    nasgw::Status s = vips_->Release();
    if (!s.ok()) NASGW_LOG(kWarn, "cluster") << "cannot remove the client addresses" << Kv("error", s.ToString());
    vips_mask_ = vips_assigned_ = announce_mask_ = 0;
  }
  {
    MutexLock lock(lost_mu_);
    owner_stop_ = true;
  }
  owner_cv_.NotifyAll();
  if (owner_thread_.joinable()) owner_thread_.join();
  MutexLock admin(admin_mu_);
  std::shared_ptr<const DomainSet> domains;
  DomainSet pending;
  std::shared_ptr<fs::Reserve> reserve;
  std::unique_ptr<fs::Ownership> owner;
  std::vector<std::shared_ptr<block::BlockDevice>> devices;
  {
    WriterLock lock(mu_);
    if (state_ == ReserveState::kFailed && reason_ == "shut down") return;
    if (pending_open_) pending = std::move(pending_open_->opened);  // closed below, outside the lock
    pending_open_.reset();
    domains = std::move(domains_);
    reserve = std::move(reserve_);
    owner = std::move(owner_);
    gated_.clear();
    devices = std::move(devices_);
    devices_.clear();
    urls_.clear();
    state_ = ReserveState::kFailed;
    reason_ = "shut down";
  }
  pending.clear();  // closed before the reserve is released
  CloseAndRelease(std::move(domains), std::move(reserve), std::move(owner)).IgnoreError();  // logged
  devices.clear();
  if (state_lock_fd_ >= 0) {
    ::close(state_lock_fd_);
    state_lock_fd_ = -1;
  }
  NASGW_LOG(kInfo, "node") << "shut down" << Kv("node", config_.node_name);
}

}  // namespace nasgw::daemon
