#include "daemon/admin_service.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include "base/log.h"
#include "base/text.h"
#include "block/iscsi_url.h"
#include "fs/domain.h"
#include "fs/handle.h"
#include "fs/label.h"
#include "fs/reserve.h"
#include "proto/admin.grpc.pb.h"

#include <grpcpp/grpcpp.h>
#include <grpcpp/security/server_credentials.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>

namespace nasgw::daemon {

namespace pb = ::nasgw::admin::v1;

int GrpcCodeOf(Code code) {
  switch (code) {
    case Code::kOk:
      return grpc::StatusCode::OK;
    case Code::kNotFound:
      return grpc::StatusCode::NOT_FOUND;
    case Code::kExists:
      return grpc::StatusCode::ALREADY_EXISTS;
    case Code::kInvalidArgument:
      return grpc::StatusCode::INVALID_ARGUMENT;
    // Refusals that force overrides: a non-empty volume, an online reserve.
    case Code::kNotEmpty:
    case Code::kFailedPrecondition:
      return grpc::StatusCode::FAILED_PRECONDITION;
    // Busy is "try again later", which is what UNAVAILABLE tells a client.
    case Code::kUnavailable:
    case Code::kBusy:
      return grpc::StatusCode::UNAVAILABLE;
    case Code::kNoSpace:
      return grpc::StatusCode::RESOURCE_EXHAUSTED;
    case Code::kPermissionDenied:
      return grpc::StatusCode::PERMISSION_DENIED;
    default:
      return grpc::StatusCode::INTERNAL;
  }
}

namespace {

grpc::Status ToGrpc(const nasgw::Status& s) {
  if (s.ok()) return grpc::Status::OK;
  return grpc::Status(static_cast<grpc::StatusCode>(GrpcCodeOf(s.code())), std::string(s.message()));
}

// ClusterTakeover's wait for the reserve: timeout_ms 0 and its bound.
constexpr uint32_t kClusterTakeoverTimeoutMsDefault = 30'000;
constexpr uint32_t kClusterTakeoverTimeoutMsMax = 600'000;

grpc::Status Invalid(const std::string& m) {
  return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, m);
}

// ---- request checks (the same bounds as fs/, said in the client's words)

bool PowerOfTwo(uint64_t v) {
  return v != 0 && (v & (v - 1)) == 0;
}

// Text an admin types (names, paths, addresses) is shown on terminals and
// written into logs and Ganesha's configuration: no control characters, and
// valid UTF-8 (what a proto3 string carries; a client that is not the CLI
// may not check).
grpc::Status CheckText(const std::string& what, const std::string& value) {
  const std::string problem = TextProblem(value);
  if (problem.empty()) return grpc::Status::OK;
  return Invalid(what + " '" + EscapeForTerminal(value) + "' holds " + problem +
                 ": control characters and invalid UTF-8 are refused");
}

// A name that is a path component: the file system's rules for a directory
// entry. `what` names it in the message ("volume name").
grpc::Status CheckComponentName(const std::string& what, const std::string& name, size_t max) {
  if (name.empty()) return Invalid(what + " is empty");
  if (auto s = CheckText(what, name); !s.ok()) return s;
  if (name == "." || name == "..") return Invalid(what + " cannot be '" + name + "'");
  if (name.size() > max) {
    return Invalid(what + " is " + std::to_string(name.size()) + " bytes; at most " + std::to_string(max));
  }
  if (name.find('/') != std::string::npos || name.find('\0') != std::string::npos) {
    return Invalid(what + " cannot contain '/' or NUL");
  }
  return grpc::Status::OK;
}

grpc::Status CheckVolumeName(const std::string& name) {
  // A volume is a path component (/<volume>/...).
  return CheckComponentName("volume name", name, fs::kNameMax);
}

grpc::Status CheckSnapshotName(const std::string& name) {
  // A snapshot is reached as a directory entry (.snapshot/<name>).
  return CheckComponentName("snapshot name", name, fs::kSnapshotNameMax);
}

grpc::Status CheckScheduleName(const std::string& name) {
  // The domain has the rules ([A-Za-z0-9._-], 1..64); what cannot be shown
  // as typed is refused here first, in the words the other names get.
  if (name.empty()) return Invalid("schedule name is empty");
  return CheckText("schedule name", name);
}

grpc::Status CheckReserveName(const std::string& name) {
  if (name.empty()) return Invalid("reserve name is empty");
  if (auto s = CheckText("reserve name", name); !s.ok()) return s;
  if (name.size() > fs::kLabelTextMax) {
    return Invalid("reserve name is " + std::to_string(name.size()) + " bytes; at most " +
                   std::to_string(fs::kLabelTextMax));
  }
  for (char c : name) {
    const bool ok =
        (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' || c == '_' || c == '-';
    if (!ok) return Invalid("reserve name may hold only letters, digits, '.', '_' and '-'");
  }
  return grpc::Status::OK;
}

grpc::Status CheckRecordBytes(uint64_t record_bytes) {
  if (record_bytes < fs::kRecordBytesMin || record_bytes > fs::kRecordBytesMax || !PowerOfTwo(record_bytes)) {
    return Invalid("record size " + std::to_string(record_bytes) + " is not a power of two from " +
                   std::to_string(fs::kRecordBytesMin >> 10) + " KiB to " + std::to_string(fs::kRecordBytesMax >> 20) +
                   " MiB");
  }
  return grpc::Status::OK;
}

grpc::Status CheckAgBytes(uint64_t ag_bytes) {
  if (ag_bytes == 0) return grpc::Status::OK;  // the default
  if (ag_bytes < fs::kAgBytesMin || ag_bytes > fs::kAgBytesMax || !PowerOfTwo(ag_bytes)) {
    return Invalid("allocation group size " + std::to_string(ag_bytes) + " is not a power of two from " +
                   std::to_string(fs::kAgBytesMin >> 20) + " MiB to " + std::to_string(fs::kAgBytesMax >> 30) + " GiB");
  }
  return grpc::Status::OK;
}

grpc::Status CheckDomains(uint32_t domains) {
  if (domains == 0) return grpc::Status::OK;  // one
  if (domains > fs::kReserveDomainsMax) {
    return Invalid("a reserve is split into 1 to " + std::to_string(fs::kReserveDomainsMax) + " domains, not " +
                   std::to_string(domains));
  }
  return grpc::Status::OK;
}

// ---- Node structs to messages

pb::ReserveState ToProto(ReserveState s) {
  switch (s) {
    case ReserveState::kUnformatted:
      return pb::RESERVE_STATE_UNFORMATTED;
    case ReserveState::kOnline:
      return pb::RESERVE_STATE_ONLINE;
    case ReserveState::kFailed:
      return pb::RESERVE_STATE_FAILED;
    case ReserveState::kStandby:
      return pb::RESERVE_STATE_STANDBY;
    case ReserveState::kFenced:
      return pb::RESERVE_STATE_FENCED;
  }
  return pb::RESERVE_STATE_UNSPECIFIED;
}

void Fill(const NodeStatus& n, pb::Node* out) {
  out->set_name(n.node_name);
  out->set_version(n.version);
  out->set_started_unix(n.started_unix);
  out->set_uptime_seconds(n.uptime_s);
  out->set_reserve_state(ToProto(n.reserve_state));
  out->set_head_connections(n.head_connections);
  out->set_head_requests(n.head_requests);
}

void Fill(const block::OpStats& s, pb::OpStats* out) {
  out->set_ops(s.ops);
  out->set_bytes(s.bytes);
  out->set_errors(s.errors);
  out->set_latency_p50_us(s.latency_ns.Percentile(0.50) / 1000);
  out->set_latency_p99_us(s.latency_ns.Percentile(0.99) / 1000);
  out->set_latency_max_us(s.latency_ns.max / 1000);
  out->set_latency_mean_us(s.latency_ns.Mean() / 1000.0);
}

void Fill(const block::BlockStats& s, pb::LunIo* out) {
  Fill(s.read, out->mutable_read());
  Fill(s.write, out->mutable_write());
  Fill(s.other, out->mutable_other());
  out->set_in_flight(s.in_flight);
  out->set_queued(s.queued);
  out->set_retries(s.retries);
  out->set_timeouts(s.timeouts);
}

void Fill(const LunStatus& l, pb::Lun* out) {
  out->set_index(l.index);
  out->set_url(l.url);
  out->set_serial(l.serial);
  out->set_size_bytes(l.size_bytes);
  out->set_allocation_groups(l.ag_count);
  out->set_healthy(l.healthy);
  out->set_paths_up(l.paths_up);
  out->set_paths_total(l.paths_total);
  Fill(l.stats, out->mutable_io());
  for (const auto& p : l.stats.paths) {
    auto* q = out->add_paths();
    q->set_portal(p.portal);
    q->set_up(p.up);
    q->set_ops(p.ops);
    q->set_failures(p.failures);
    q->set_last_error(p.last_error);
  }
}

void Fill(const ReserveStatus& r, pb::Reserve* out) {
  out->set_state(ToProto(r.state));
  out->set_reason(r.reason);
  out->set_name(r.name);
  out->set_uuid(r.uuid);
  out->set_ag_bytes(r.ag_bytes);
  out->set_capacity_bytes(r.capacity_bytes);
  out->set_free_bytes(r.free_bytes);
  out->set_files(r.files);
  out->set_generation(r.generation);
  for (const auto& l : r.luns) Fill(l, out->add_luns());
  out->set_owner(r.owner);
  out->set_owned_here(r.owned_here);
  out->set_holder_silent_ms(r.holder_silent_ms);
  out->set_lease_ms(r.lease_ms);
  out->set_renewals(r.renewals);
  out->set_fenced_total(r.fenced_total);
  out->set_domains(r.domains);
}

void Fill(const fs::VolumeInfo& v, pb::Volume* out) {
  out->set_id(v.id);
  out->set_name(v.name);
  out->set_record_bytes(v.record_bytes);
  out->set_files(v.files);
  out->set_bytes(v.bytes);
  out->set_write_through(v.write_through);
  out->set_atime(fs::AtimeName(v.atime));
  out->set_snapshots(v.snapshots);
  out->set_snapshot_bytes(v.snapshot_bytes);
  out->set_origin_volume(v.origin_volume);
  out->set_origin_snapshot(v.origin_snapshot);
  out->set_domain(fs::VolumeDomain(v.id));
}

void Fill(const fs::SnapshotInfo& sn, const std::string& volume, pb::Snapshot* out) {
  out->set_id(sn.id);
  out->set_name(sn.name);
  out->set_volume(volume);
  out->set_txg(sn.txg);
  out->set_created_unix(sn.created.sec);
  out->set_frees_bytes(sn.frees_bytes);
  out->set_frees_meta_bytes(sn.frees_meta_bytes);
}

void Fill(const fs::SnapshotSchedule& s, pb::SnapshotSchedule* out) {
  out->set_volume(s.volume);
  out->set_name(s.name);
  out->set_every_seconds(s.every_s);
  out->set_keep(s.keep);
  out->set_last_run_unix(s.last_run);
  // Never run: due at once (the scheduler's next tick), said as 0.
  out->set_next_run_unix(s.last_run == 0 ? 0 : s.last_run + static_cast<int64_t>(s.every_s));
}

void Fill(const fs::Export& e, pb::Export* out) {
  out->set_id(e.id);
  out->set_volume(e.volume);
  out->set_path(e.path);
  out->set_pseudo(e.pseudo);
  for (const auto& c : e.clients) out->add_clients(c);
  out->set_read_only(e.read_only);
  out->set_root_squash(e.root_squash);
  for (const auto& f : e.sec) out->add_sec(f);
  for (uint32_t p : e.protocols) out->add_protocols(p);
  out->set_show_snapshot_dir(e.show_snapshot_dir);
}

void Fill(const fs::Share& s, pb::Share* out) {
  out->set_name(s.name);
  out->set_volume(s.volume);
  out->set_path(s.path);
  out->set_comment(s.comment);
  out->set_read_only(s.read_only);
  out->set_browseable(s.browseable);
  out->set_encrypt(s.encrypt);
  out->set_guest_ok(s.guest_ok);
  for (const auto& u : s.valid_users) out->add_valid_users(u);
}

void Fill(const ClusterStatus& c, pb::Cluster* out) {
  out->set_enabled(c.enabled);
  out->set_interconnect(c.interconnect);
  out->set_connected(c.connected);
  out->set_quorate(c.quorate);
  out->set_interconnect_reason(c.interconnect_reason);
  out->set_ring_node(c.ring_node);
  out->set_members(c.members);
  for (const auto& p : c.peers) {
    auto* q = out->add_peers();
    q->set_name(p.name);
    q->set_node_id(p.node_id);
    q->set_state(p.state);
    q->set_reason(p.reason);
    q->set_ring_node(p.ring_node);
    q->set_heard_ms_ago(p.heard_ms_ago);
    q->set_heartbeats(p.heartbeats);
    q->set_left(p.left);
  }
  out->set_owner(c.owner);
  out->set_owned_here(c.owned_here);
  out->set_verdict(c.verdict);
  out->set_why(c.why);
  out->set_network_silent_ms(c.network_silent_ms);
  out->set_disk_silent_ms(c.disk_silent_ms);
  out->set_lease_ms(c.lease_ms);
  out->set_auto_takeover(c.auto_takeover);
  out->set_degraded(c.degraded);
  out->set_mirror(c.mirror);
  out->set_takeovers(c.takeovers);
  out->set_vip_interface(c.vip_interface);
  for (const auto& v : c.vips) out->add_vips(v);
  for (const auto& v : c.vips_held) out->add_vips_held(v);
  out->set_vip_error(c.vip_error);
  for (const auto& v : c.vips_partner) out->add_vips_partner(v);
  out->set_forwarding(c.forwarding);
  out->set_partner_connections(c.partner_connections);
  out->set_tickles_sent(c.tickles_sent);
  out->set_partner_nfs_clients(c.partner_nfs_clients);
  out->set_takeover_graces(c.takeover_graces);
  out->set_partner_nlm_clients(c.partner_nlm_clients);
  out->set_nlm_notified(c.nlm_notified);
  out->set_nlm_unreachable(c.nlm_unreachable);
  for (const auto& e : c.last_takeover) {
    auto* q = out->add_last_takeover();
    q->set_wall_unix_ns(e.wall_ns);
    q->set_after_ms(e.after_ms);
    q->set_what(e.what);
  }
}

class AdminService final : public pb::Admin::Service {
 public:
  AdminService(Node* node, AdminServer::CacheStatsFn cache_stats, AdminServer::CacheFlushFn cache_flush,
               AdminServer::CacheForgetFn cache_forget)
      : node_(node),
        cache_stats_(std::move(cache_stats)),
        cache_flush_(std::move(cache_flush)),
        cache_forget_(std::move(cache_forget)) {}

  grpc::Status GetNode(grpc::ServerContext*, const pb::GetNodeRequest*, pb::GetNodeResponse* out) override {
    Fill(node_->Status(), out->mutable_node());
    return grpc::Status::OK;
  }

  grpc::Status GetReserve(grpc::ServerContext*, const pb::GetReserveRequest*, pb::GetReserveResponse* out) override {
    Fill(node_->GetReserve(), out->mutable_reserve());
    return grpc::Status::OK;
  }

  grpc::Status GetCluster(grpc::ServerContext*, const pb::GetClusterRequest*, pb::GetClusterResponse* out) override {
    Fill(node_->GetCluster(), out->mutable_cluster());
    return grpc::Status::OK;
  }

  grpc::Status ClusterGiveBack(grpc::ServerContext*, const pb::ClusterGiveBackRequest*,
                               pb::ClusterGiveBackResponse* out) override {
    NASGW_LOG(kInfo, "admin") << "cluster giveback";
    // A planned move: what the write-back cache holds dirty goes to the
    // domain first (as before a snapshot), so that the domain closes with
    // every write answered so far in it and the partner has no intent log
    // to replay. Only when there is something to give back: a refusal (a
    // single node, a standby) is the node's, not held up by a flush.
    if (cache_flush_ && node_->config().cluster_enabled && node_->Status().reserve_state == ReserveState::kOnline) {
      if (nasgw::Status s = cache_flush_(); !s.ok()) {
        return ToGrpc(s.WithContext("the reserve was not given back: the write-back cache could not be flushed"));
      }
    }
    auto st = node_->GiveBack();
    if (!st.ok()) return ToGrpc(st);
    Fill(node_->GetCluster(), out->mutable_cluster());
    return grpc::Status::OK;
  }

  grpc::Status ClusterTakeover(grpc::ServerContext*, const pb::ClusterTakeoverRequest* req,
                               pb::ClusterTakeoverResponse* out) override {
    if (req->timeout_ms() > kClusterTakeoverTimeoutMsMax) {
      return Invalid("timeout_ms " + std::to_string(req->timeout_ms()) + " is beyond " +
                     std::to_string(kClusterTakeoverTimeoutMsMax) + " (10 minutes)");
    }
    const uint32_t timeout_ms = req->timeout_ms() == 0 ? kClusterTakeoverTimeoutMsDefault : req->timeout_ms();
    NASGW_LOG(kInfo, "admin") << "cluster takeover" << Kv("timeout_ms", timeout_ms);
    auto st = node_->RequestTakeover(timeout_ms);
    if (!st.ok()) return ToGrpc(st);
    Fill(node_->GetCluster(), out->mutable_cluster());
    return grpc::Status::OK;
  }

  grpc::Status FormatReserve(grpc::ServerContext*, const pb::FormatReserveRequest* req,
                             pb::FormatReserveResponse* out) override {
    if (auto s = CheckReserveName(req->name()); !s.ok()) return s;
    if (auto s = CheckAgBytes(req->ag_bytes()); !s.ok()) return s;
    if (auto s = CheckDomains(req->domains()); !s.ok()) return s;
    NASGW_LOG(kInfo, "admin") << "format reserve" << Kv("name", req->name()) << Kv("ag_bytes", req->ag_bytes())
                              << Kv("domains", req->domains()) << Kv("force", req->force());
    auto st = node_->FormatReserve(req->name(), req->ag_bytes(), req->force(), req->domains());
    if (!st.ok()) return ToGrpc(st);
    Fill(node_->GetReserve(), out->mutable_reserve());
    return grpc::Status::OK;
  }

  grpc::Status TakeoverReserve(grpc::ServerContext*, const pb::TakeoverReserveRequest* req,
                               pb::TakeoverReserveResponse* out) override {
    NASGW_LOG(kWarn, "admin") << "take over reserve" << Kv("force", req->force());
    auto st = node_->TakeoverReserve(req->force());
    if (!st.ok()) return ToGrpc(st);
    Fill(node_->GetReserve(), out->mutable_reserve());
    return grpc::Status::OK;
  }

  grpc::Status AddLun(grpc::ServerContext*, const pb::AddLunRequest* req, pb::AddLunResponse* out) override {
    if (!TextProblem(req->url()).empty()) {
      // Not echoed: a URL may carry a CHAP secret.
      return Invalid("LUN URL holds " + TextProblem(req->url()) + ": control characters and invalid UTF-8 are refused");
    }
    auto url = block::ParseIscsiUrl(req->url());
    if (!url.ok()) return ToGrpc(url.status());  // its message never shows the secret
    NASGW_LOG(kInfo, "admin") << "add LUN" << Kv("url", url->ToString()) << Kv("force", req->force());
    auto lun = node_->AddLun(req->url(), req->force());
    if (!lun.ok()) return ToGrpc(lun.status());
    Fill(*lun, out->mutable_lun());
    Fill(node_->GetReserve(), out->mutable_reserve());
    return grpc::Status::OK;
  }

  grpc::Status ListVolumes(grpc::ServerContext*, const pb::ListVolumesRequest*, pb::ListVolumesResponse* out) override {
    auto vols = node_->ListVolumes();
    if (!vols.ok()) return ToGrpc(vols.status());
    for (const auto& v : *vols) Fill(v, out->add_volumes());
    return grpc::Status::OK;
  }

  grpc::Status GetVolume(grpc::ServerContext*, const pb::GetVolumeRequest* req, pb::GetVolumeResponse* out) override {
    if (auto s = CheckVolumeName(req->name()); !s.ok()) return s;
    auto v = node_->GetVolume(req->name());
    if (!v.ok()) return ToGrpc(v.status());
    Fill(*v, out->mutable_volume());
    return grpc::Status::OK;
  }

  grpc::Status CreateVolume(grpc::ServerContext*, const pb::CreateVolumeRequest* req,
                            pb::CreateVolumeResponse* out) override {
    if (auto s = CheckVolumeName(req->name()); !s.ok()) return s;
    // Unset: the default. Set, even to 0: it must be valid (0 is not "the default").
    const uint32_t rs = req->has_record_bytes() ? req->record_bytes() : fs::kRecordBytesDefault;
    if (auto s = CheckRecordBytes(rs); !s.ok()) return s;
    NASGW_LOG(kInfo, "admin") << "create volume" << Kv("name", req->name()) << Kv("record_bytes", rs)
                              << Kv("domain", req->has_domain() ? std::to_string(req->domain()) : "any");
    auto v =
        node_->CreateVolume(req->name(), rs, req->has_domain() ? std::optional<uint32_t>(req->domain()) : std::nullopt);
    if (!v.ok()) return ToGrpc(v.status());
    Fill(*v, out->mutable_volume());
    return grpc::Status::OK;
  }

  grpc::Status UpdateVolume(grpc::ServerContext*, const pb::UpdateVolumeRequest* req,
                            pb::UpdateVolumeResponse* out) override {
    if (auto s = CheckVolumeName(req->name()); !s.ok()) return s;
    if (req->has_record_bytes()) {
      if (auto s = CheckRecordBytes(req->record_bytes()); !s.ok()) return s;
      NASGW_LOG(kInfo, "admin") << "set volume record size" << Kv("name", req->name())
                                << Kv("record_bytes", req->record_bytes());
      auto set = node_->SetVolumeRecordBytes(req->name(), req->record_bytes());
      if (!set.ok()) return ToGrpc(set.status());
    }
    if (req->has_write_through()) {
      NASGW_LOG(kInfo, "admin") << "set volume write-through" << Kv("name", req->name())
                                << Kv("on", req->write_through());
      auto set = node_->SetVolumeWriteThrough(req->name(), req->write_through());
      if (!set.ok()) return ToGrpc(set.status());
    }
    if (req->has_atime()) {
      fs::Atime atime;
      if (!fs::ParseAtime(req->atime(), &atime)) {
        return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                            "atime is relatime, strictatime or noatime, not '" + req->atime() + "'");
      }
      NASGW_LOG(kInfo, "admin") << "set volume atime" << Kv("name", req->name()) << Kv("atime", req->atime());
      auto set = node_->SetVolumeAtime(req->name(), atime);
      if (!set.ok()) return ToGrpc(set.status());
    }
    // The volume as it is now (as it was, when nothing was asked to change).
    auto v = node_->GetVolume(req->name());
    if (!v.ok()) return ToGrpc(v.status());
    Fill(*v, out->mutable_volume());
    return grpc::Status::OK;
  }

  grpc::Status DeleteVolume(grpc::ServerContext*, const pb::DeleteVolumeRequest* req,
                            pb::DeleteVolumeResponse*) override {
    if (auto s = CheckVolumeName(req->name()); !s.ok()) return s;
    NASGW_LOG(kInfo, "admin") << "delete volume" << Kv("name", req->name()) << Kv("force", req->force());
    return ToGrpc(node_->DeleteVolume(req->name(), req->force()));
  }

  grpc::Status AddExport(grpc::ServerContext*, const pb::AddExportRequest* req, pb::AddExportResponse* out) override {
    if (auto s = CheckVolumeName(req->volume()); !s.ok()) return s;
    if (auto s = CheckText("export path", req->path()); !s.ok()) return s;
    if (auto s = CheckText("pseudo path", req->pseudo()); !s.ok()) return s;
    for (const auto& x : req->clients()) {
      if (auto s = CheckText("client", x); !s.ok()) return s;
    }
    for (const auto& x : req->sec()) {
      if (auto s = CheckText("security flavour", x); !s.ok()) return s;
    }
    // The other fields' rules are nasgwd's (daemon::NormalizeExport, which
    // Node::AddExport applies), whose messages name the value.
    fs::Export e;
    e.volume = req->volume();
    e.path = req->path();
    e.pseudo = req->pseudo();
    e.clients.assign(req->clients().begin(), req->clients().end());
    e.read_only = req->read_only();
    e.root_squash = req->has_root_squash() ? req->root_squash() : true;
    e.sec.assign(req->sec().begin(), req->sec().end());
    e.protocols.assign(req->protocols().begin(), req->protocols().end());
    e.show_snapshot_dir = req->show_snapshot_dir();
    NASGW_LOG(kInfo, "admin") << "add export" << Kv("volume", e.volume) << Kv("path", e.path) << Kv("pseudo", e.pseudo)
                              << Kv("clients", e.clients.size()) << Kv("read_only", e.read_only);
    std::string publish_error;
    auto added = node_->AddExport(e, &publish_error);
    if (!added.ok()) return ToGrpc(added.status());
    Fill(*added, out->mutable_export_());
    out->set_publish_error(publish_error);
    return grpc::Status::OK;
  }

  grpc::Status ListExports(grpc::ServerContext*, const pb::ListExportsRequest*, pb::ListExportsResponse* out) override {
    auto exports = node_->ListExports();
    if (!exports.ok()) return ToGrpc(exports.status());
    for (const auto& e : *exports) Fill(e, out->add_exports());
    return grpc::Status::OK;
  }

  grpc::Status GetExport(grpc::ServerContext*, const pb::GetExportRequest* req, pb::GetExportResponse* out) override {
    Result<fs::Export> e = nasgw::Status::InvalidArgument("give an export id or a pseudo path");
    switch (req->key_case()) {
      case pb::GetExportRequest::kId:
        if (req->id() == 0) return Invalid("export id 0 names no export (ids start at 1)");
        e = node_->GetExport(req->id());
        break;
      case pb::GetExportRequest::kPseudo:
        if (auto s = CheckText("pseudo path", req->pseudo()); !s.ok()) return s;
        e = node_->FindExport(req->pseudo());
        break;
      case pb::GetExportRequest::KEY_NOT_SET:
        break;
    }
    if (!e.ok()) return ToGrpc(e.status());
    Fill(*e, out->mutable_export_());
    return grpc::Status::OK;
  }

  grpc::Status RemoveExport(grpc::ServerContext*, const pb::RemoveExportRequest* req,
                            pb::RemoveExportResponse* out) override {
    if (req->id() == 0) return Invalid("export id 0 names no export (ids start at 1)");
    NASGW_LOG(kInfo, "admin") << "remove export" << Kv("id", req->id());
    std::string publish_error;
    auto removed = node_->RemoveExport(req->id(), &publish_error);
    if (!removed.ok()) return ToGrpc(removed.status());
    Fill(*removed, out->mutable_export_());
    out->set_publish_error(publish_error);
    return grpc::Status::OK;
  }

  grpc::Status AddShare(grpc::ServerContext*, const pb::AddShareRequest* req, pb::AddShareResponse* out) override {
    if (auto s = CheckVolumeName(req->volume()); !s.ok()) return s;
    if (auto s = CheckText("share name", req->name()); !s.ok()) return s;
    if (auto s = CheckText("share path", req->path()); !s.ok()) return s;
    if (auto s = CheckText("share comment", req->comment()); !s.ok()) return s;
    for (const auto& u : req->valid_users()) {
      if (auto s = CheckText("valid user", u); !s.ok()) return s;
    }
    // The fields' rules are nasgwd's (daemon::NormalizeShare, which
    // Node::AddShare applies), whose messages name the value.
    fs::Share sh;
    sh.name = req->name();
    sh.volume = req->volume();
    sh.path = req->path();
    sh.comment = req->comment();
    sh.read_only = req->read_only();
    sh.browseable = req->has_browseable() ? req->browseable() : true;
    sh.encrypt = req->encrypt();
    sh.guest_ok = req->guest_ok();
    sh.valid_users.assign(req->valid_users().begin(), req->valid_users().end());
    NASGW_LOG(kInfo, "admin") << "add share" << Kv("name", sh.name) << Kv("volume", sh.volume) << Kv("path", sh.path)
                              << Kv("read_only", sh.read_only) << Kv("users", sh.valid_users.size());
    std::string publish_error;
    auto added = node_->AddShare(sh, &publish_error);
    if (!added.ok()) return ToGrpc(added.status());
    Fill(*added, out->mutable_share());
    out->set_publish_error(publish_error);
    return grpc::Status::OK;
  }

  grpc::Status ListShares(grpc::ServerContext*, const pb::ListSharesRequest*, pb::ListSharesResponse* out) override {
    auto shares = node_->ListShares();
    if (!shares.ok()) return ToGrpc(shares.status());
    for (const auto& sh : *shares) Fill(sh, out->add_shares());
    return grpc::Status::OK;
  }

  grpc::Status GetShare(grpc::ServerContext*, const pb::GetShareRequest* req, pb::GetShareResponse* out) override {
    if (auto s = CheckText("share name", req->name()); !s.ok()) return s;
    if (req->name().empty()) return Invalid("give a share name");
    auto sh = node_->GetShare(req->name());
    if (!sh.ok()) return ToGrpc(sh.status());
    Fill(*sh, out->mutable_share());
    return grpc::Status::OK;
  }

  grpc::Status RemoveShare(grpc::ServerContext*, const pb::RemoveShareRequest* req,
                           pb::RemoveShareResponse* out) override {
    if (auto s = CheckText("share name", req->name()); !s.ok()) return s;
    if (req->name().empty()) return Invalid("give a share name");
    NASGW_LOG(kInfo, "admin") << "remove share" << Kv("name", req->name());
    std::string publish_error;
    auto removed = node_->RemoveShare(req->name(), &publish_error);
    if (!removed.ok()) return ToGrpc(removed.status());
    Fill(*removed, out->mutable_share());
    out->set_publish_error(publish_error);
    return grpc::Status::OK;
  }

  grpc::Status CreateSnapshot(grpc::ServerContext*, const pb::CreateSnapshotRequest* req,
                              pb::CreateSnapshotResponse* out) override {
    if (auto s = CheckVolumeName(req->volume()); !s.ok()) return s;
    if (auto s = CheckSnapshotName(req->name()); !s.ok()) return s;
    NASGW_LOG(kInfo, "admin") << "create snapshot" << Kv("volume", req->volume()) << Kv("name", req->name());
    // An unknown volume (or a reserve that is not online) is told before
    // the flush below, which it would only slow down.
    if (auto v = node_->GetVolume(req->volume()); !v.ok()) return ToGrpc(v.status());
    // Everything answered to clients before this create began must be in
    // the snapshot: what the write-back cache holds dirty goes to the domain
    // first, and the flush waits for it (a file's flush already in progress
    // included). The cache has no per-volume flush, so this is the whole
    // cache's (every volume's dirty data), as at shutdown. The domain then
    // takes the snapshot at a transaction-group boundary, after these
    // flushes' transactions.
    if (cache_flush_) {
      if (nasgw::Status s = cache_flush_(); !s.ok()) {
        return ToGrpc(s.WithContext("snapshot '" + req->name() + "' of volume '" + req->volume() +
                                    "' not taken: the write-back cache could not be flushed"));
      }
    }
    auto sn = node_->CreateSnapshot(req->volume(), req->name());
    if (!sn.ok()) return ToGrpc(sn.status());
    Fill(*sn, req->volume(), out->mutable_snapshot());
    return grpc::Status::OK;
  }

  grpc::Status ListSnapshots(grpc::ServerContext*, const pb::ListSnapshotsRequest* req,
                             pb::ListSnapshotsResponse* out) override {
    if (auto s = CheckVolumeName(req->volume()); !s.ok()) return s;
    auto snaps = node_->ListSnapshots(req->volume());
    if (!snaps.ok()) return ToGrpc(snaps.status());
    for (const auto& sn : *snaps) Fill(sn, req->volume(), out->add_snapshots());
    return grpc::Status::OK;
  }

  grpc::Status GetSnapshot(grpc::ServerContext*, const pb::GetSnapshotRequest* req,
                           pb::GetSnapshotResponse* out) override {
    if (auto s = CheckVolumeName(req->volume()); !s.ok()) return s;
    if (auto s = CheckSnapshotName(req->name()); !s.ok()) return s;
    auto sn = node_->GetSnapshot(req->volume(), req->name());
    if (!sn.ok()) return ToGrpc(sn.status());
    Fill(*sn, req->volume(), out->mutable_snapshot());
    return grpc::Status::OK;
  }

  grpc::Status DeleteSnapshot(grpc::ServerContext*, const pb::DeleteSnapshotRequest* req,
                              pb::DeleteSnapshotResponse* out) override {
    if (auto s = CheckVolumeName(req->volume()); !s.ok()) return s;
    if (auto s = CheckSnapshotName(req->name()); !s.ok()) return s;
    NASGW_LOG(kInfo, "admin") << "delete snapshot" << Kv("volume", req->volume()) << Kv("name", req->name());
    auto sn = node_->DeleteSnapshot(req->volume(), req->name());
    if (!sn.ok()) return ToGrpc(sn.status());
    Fill(*sn, req->volume(), out->mutable_snapshot());
    return grpc::Status::OK;
  }

  grpc::Status RollbackSnapshot(grpc::ServerContext*, const pb::RollbackSnapshotRequest* req,
                                pb::RollbackSnapshotResponse* out) override {
    if (auto s = CheckVolumeName(req->volume()); !s.ok()) return s;
    if (auto s = CheckSnapshotName(req->name()); !s.ok()) return s;
    NASGW_LOG(kInfo, "admin") << "rollback snapshot" << Kv("volume", req->volume()) << Kv("name", req->name());
    // An unknown volume or snapshot (or a reserve that is not online) is
    // told before the flush below, which it would only slow down.
    auto v = node_->GetVolume(req->volume());
    if (!v.ok()) return ToGrpc(v.status());
    {
      auto snaps = node_->ListSnapshotsOf(req->volume());  // without the space figures: no scan
      if (!snaps.ok()) return ToGrpc(snaps.status());
      if (std::none_of(snaps->begin(), snaps->end(),
                       [&](const fs::SnapshotInfo& s) { return s.name == req->name(); })) {
        return ToGrpc(nasgw::Status::NotFound("volume '" + req->volume() + "' has no snapshot '" + req->name() + "'"));
      }
    }
    // As for a create: what the write-back cache holds dirty goes to the
    // domain first (every volume's: the cache has no per-volume flush), so
    // that the rollback undoes every write answered before it began, and
    // no flush of such a write lands after it. A write that arrives while
    // the rollback runs is flushed after it (over the rolled-back volume).
    if (cache_flush_) {
      if (nasgw::Status s = cache_flush_(); !s.ok()) {
        return ToGrpc(s.WithContext("volume '" + req->volume() + "' not rolled back to snapshot '" + req->name() +
                                    "': the write-back cache could not be flushed"));
      }
    }
    auto rb = node_->RollbackSnapshot(req->volume(), req->name());
    // What nasgwd caches of the volume is stale once the rollback committed:
    // dropped, also after a failure whose outcome is unknown (an I/O error
    // may come after the commit); a refusal changed nothing.
    const bool refused =
        !rb.ok() && (rb.status().code() == Code::kNotFound || rb.status().code() == Code::kFailedPrecondition ||
                     rb.status().code() == Code::kInvalidArgument);
    uint64_t dropped = 0;
    if (cache_forget_ && !refused) dropped = cache_forget_(v->id);
    if (!rb.ok()) {
      if (!refused) {
        NASGW_LOG(kWarn, "snapshots") << "snapshot rollback failed" << Kv("volume", req->volume())
                                      << Kv("snapshot", req->name()) << Kv("error", rb.status().ToString());
      }
      return ToGrpc(rb.status());
    }
    NASGW_LOG(kInfo, "snapshots") << "snapshot rollback" << Kv("volume", req->volume())
                                  << Kv("snapshot", rb->snapshot.name) << Kv("id", rb->snapshot.id)
                                  << Kv("txg", rb->snapshot.txg) << Kv("removed_keys", rb->removed_keys)
                                  << Kv("restored_keys", rb->restored_keys) << Kv("freed_bytes", rb->freed_bytes)
                                  << Kv("orphans", rb->orphans) << Kv("cache_dropped_bytes", dropped);
    Fill(rb->snapshot, req->volume(), out->mutable_snapshot());
    out->set_removed_keys(rb->removed_keys);
    out->set_restored_keys(rb->restored_keys);
    out->set_freed_bytes(rb->freed_bytes);
    out->set_orphans(rb->orphans);
    return grpc::Status::OK;
  }

  grpc::Status CloneSnapshot(grpc::ServerContext*, const pb::CloneSnapshotRequest* req,
                             pb::CloneSnapshotResponse* out) override {
    if (auto s = CheckVolumeName(req->volume()); !s.ok()) return s;
    if (auto s = CheckSnapshotName(req->snapshot()); !s.ok()) return s;
    if (auto s = CheckVolumeName(req->clone()); !s.ok()) return s;  // a new volume: volume create's rules
    NASGW_LOG(kInfo, "admin") << "clone snapshot" << Kv("volume", req->volume()) << Kv("snapshot", req->snapshot())
                              << Kv("clone", req->clone());
    // No flush of the write-back cache, unlike a create or a rollback: the
    // clone is made from the snapshot, which already holds everything
    // answered before it was taken (its create flushed the cache) and
    // nothing after, so what the cache holds now is not the clone's. Nor is
    // there anything to drop after: the clone is a new volume id (ids are
    // never reused), of which nothing is cached yet.
    auto v = node_->CloneSnapshot(req->volume(), req->snapshot(), req->clone());
    if (!v.ok()) {
      const Code c = v.status().code();
      if (c != Code::kNotFound && c != Code::kExists && c != Code::kInvalidArgument && c != Code::kFailedPrecondition) {
        NASGW_LOG(kWarn, "snapshots") << "snapshot clone failed" << Kv("volume", req->volume())
                                      << Kv("snapshot", req->snapshot()) << Kv("clone", req->clone())
                                      << Kv("error", v.status().ToString());
      }
      return ToGrpc(v.status());
    }
    NASGW_LOG(kInfo, "snapshots") << "snapshot clone" << Kv("volume", req->volume()) << Kv("snapshot", req->snapshot())
                                  << Kv("clone", v->name) << Kv("id", v->id) << Kv("files", v->files)
                                  << Kv("bytes", v->bytes);
    Fill(*v, out->mutable_volume());
    return grpc::Status::OK;
  }

  grpc::Status AddSnapshotSchedule(grpc::ServerContext*, const pb::AddSnapshotScheduleRequest* req,
                                   pb::AddSnapshotScheduleResponse* out) override {
    if (auto s = CheckVolumeName(req->volume()); !s.ok()) return s;
    if (auto s = CheckScheduleName(req->name()); !s.ok()) return s;
    // The domain checks the name's characters and the bounds.
    NASGW_LOG(kInfo, "admin") << "add snapshot schedule" << Kv("volume", req->volume()) << Kv("name", req->name())
                              << Kv("every_s", req->every_seconds()) << Kv("keep", req->keep());
    fs::SnapshotSchedule spec;
    spec.name = req->name();
    spec.every_s = req->every_seconds();
    spec.keep = req->keep();
    auto added = node_->AddSnapshotSchedule(req->volume(), spec);
    if (!added.ok()) return ToGrpc(added.status());
    Fill(*added, out->mutable_schedule());
    return grpc::Status::OK;
  }

  grpc::Status ListSnapshotSchedules(grpc::ServerContext*, const pb::ListSnapshotSchedulesRequest* req,
                                     pb::ListSnapshotSchedulesResponse* out) override {
    if (!req->volume().empty()) {
      if (auto s = CheckVolumeName(req->volume()); !s.ok()) return s;
      // An unknown volume is NOT_FOUND, as ListSnapshots says it.
      if (auto v = node_->GetVolume(req->volume()); !v.ok()) return ToGrpc(v.status());
    }
    auto all = node_->ListSnapshotSchedules();
    if (!all.ok()) return ToGrpc(all.status());
    for (const auto& s : *all) {
      if (req->volume().empty() || s.volume == req->volume()) Fill(s, out->add_schedules());
    }
    return grpc::Status::OK;
  }

  grpc::Status RemoveSnapshotSchedule(grpc::ServerContext*, const pb::RemoveSnapshotScheduleRequest* req,
                                      pb::RemoveSnapshotScheduleResponse* out) override {
    if (auto s = CheckVolumeName(req->volume()); !s.ok()) return s;
    if (auto s = CheckScheduleName(req->name()); !s.ok()) return s;
    NASGW_LOG(kInfo, "admin") << "remove snapshot schedule" << Kv("volume", req->volume()) << Kv("name", req->name());
    auto gone = node_->RemoveSnapshotSchedule(req->volume(), req->name());
    if (!gone.ok()) return ToGrpc(gone.status());
    Fill(*gone, out->mutable_schedule());
    return grpc::Status::OK;
  }

  grpc::Status GetStats(grpc::ServerContext*, const pb::GetStatsRequest*, pb::GetStatsResponse* out) override {
    Fill(node_->Status(), out->mutable_node());
    const ReserveStatus r = node_->GetReserve();
    for (const auto& l : r.luns) {
      auto* s = out->add_luns();
      s->set_index(l.index);
      s->set_url(l.url);
      Fill(l.stats, s->mutable_io());
    }
    FillCache(r, out->mutable_cache());
    return grpc::Status::OK;
  }

 private:
  void FillCache(const ReserveStatus& r, pb::CacheStats* c) {
    const Config& cfg = node_->config();
    c->set_memory_budget_bytes(uint64_t{cfg.cache_memory_mib} << 20);
    c->set_dirty_limit_bytes(uint64_t{cfg.cache_dirty_mib} << 20);
    const fs::MetaCache& mc = node_->meta_cache();
    c->set_meta_bytes(mc.usage());
    c->set_meta_capacity_bytes(mc.capacity());
    c->set_meta_hits(mc.hits());
    c->set_meta_misses(mc.misses());
    c->set_array_write_bytes(ArrayWriteBytes(r));
    if (!cache_stats_) return;
    const cache::DataCacheStats d = cache_stats_();
    c->set_dirty_bytes(d.dirty_bytes);
    c->set_dirty_files(d.dirty_files);
    c->set_clean_bytes(d.read.bytes);
    c->set_clean_capacity_bytes(d.read.capacity);
    c->set_read_hit_bytes(d.read.hit_bytes);
    c->set_read_miss_bytes(d.read.miss_bytes);
    c->set_read_ahead_bytes(d.read.prefetched_bytes);
    c->set_client_write_bytes(d.bytes_written);
    c->set_writes_cached(d.writes_cached);
    c->set_writes_logged(d.writes_logged);
    c->set_writes_stable(d.writes_stable);
    c->set_writes_log_slow(d.writes_log_slow);
    c->set_commits_logged(d.commits_logged);
    c->set_commits_flushed(d.commits_flushed);
    c->set_flushes(d.flushes);
    c->set_flush_bytes(d.flush_bytes);
    c->set_flush_microseconds(d.flush_nanos_total / 1000);
    c->set_stalls(d.stalls);
    c->set_stall_timeouts(d.stall_timeouts);
    c->set_no_space(d.no_space);
  }

  Node* const node_;
  const AdminServer::CacheStatsFn cache_stats_;
  const AdminServer::CacheFlushFn cache_flush_;
  const AdminServer::CacheForgetFn cache_forget_;
};

Result<std::string> ReadFile(const std::string& path, const char* what) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    const int err = errno;
    const std::string m = std::string(what) + " " + path + ": " + std::strerror(err);
    return err == EACCES ? nasgw::Status::PermissionDenied(m) : nasgw::Status::NotFound(m);
  }
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

nasgw::Status ErrnoStatus(const std::string& what, int err) {
  const std::string m = what + ": " + std::strerror(err);
  if (err == EACCES || err == EPERM) return nasgw::Status::PermissionDenied(m);
  return nasgw::Status::IoError(m);
}

// Removes a socket nobody listens on; refuses a live one or a non-socket.
nasgw::Status ClearStaleSocket(const std::string& path) {
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0) {
    if (errno == ENOENT) return nasgw::Status();
    return ErrnoStatus("stat " + path, errno);
  }
  if (!S_ISSOCK(st.st_mode)) {
    return nasgw::Status::Exists(path + " exists and is not a socket; refusing to replace it");
  }
  int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return ErrnoStatus("socket", errno);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::memcpy(addr.sun_path, path.data(), path.size());
  const int rc = ::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
  const int err = errno;
  ::close(fd);
  if (rc == 0) return nasgw::Status::Exists("another process (a running nasgwd?) serves " + path);
  if (err != ECONNREFUSED) return ErrnoStatus("probe " + path, err);
  if (::unlink(path.c_str()) != 0 && errno != ENOENT) return ErrnoStatus("remove stale socket " + path, errno);
  NASGW_LOG(kInfo, "admin") << "removed stale socket" << Kv("path", path);
  return nasgw::Status();
}

std::string DirOf(const std::string& path) {
  const size_t slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  return slash == 0 ? "/" : path.substr(0, slash);
}

}  // namespace

struct AdminServer::Impl {
  Node* node = nullptr;
  std::string socket_path;
  std::string bind_dir;  // the private 0700 directory the socket was bound in
  int tcp_port = 0;
  std::unique_ptr<AdminService> service;
  std::unique_ptr<grpc::Server> server;
  bool shut_down = false;
};

AdminServer::AdminServer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

AdminServer::~AdminServer() {
  Shutdown();
}

const std::string& AdminServer::socket_path() const {
  return impl_->socket_path;
}
int AdminServer::tcp_port() const {
  return impl_->tcp_port;
}

Result<std::unique_ptr<AdminServer>> AdminServer::Start(Node* node, const Config& config, CacheStatsFn cache_stats,
                                                        CacheFlushFn cache_flush, CacheForgetFn cache_forget) {
  auto impl = std::make_unique<Impl>();
  impl->node = node;
  impl->socket_path = !config.admin_socket.empty() ? config.admin_socket : config.run_dir + "/admin.sock";
  const std::string& path = impl->socket_path;
  const std::string dir = DirOf(path);
  // The bind path is <dir>/.admin-XXXXXX/s: it must fit sun_path too.
  if (path.size() >= sizeof(sockaddr_un::sun_path) || dir.size() + 16 >= sizeof(sockaddr_un::sun_path)) {
    return nasgw::Status::InvalidArgument("admin socket path " + path + " is too long for a Unix socket (at most " +
                                          std::to_string(sizeof(sockaddr_un::sun_path) - 17) + " bytes)");
  }
  if (::mkdir(dir.c_str(), 0750) != 0 && errno != EEXIST) return ErrnoStatus("create " + dir, errno);
  NASGW_RETURN_IF_ERROR(ClearStaleSocket(path));

  std::string tmpl = dir + "/.admin-XXXXXX";
  if (::mkdtemp(tmpl.data()) == nullptr) return ErrnoStatus("create a private directory in " + dir, errno);
  impl->bind_dir = tmpl;
  const std::string bind_path = tmpl + "/s";
  auto cleanup_bind_dir = [&] {
    ::unlink(bind_path.c_str());
    ::rmdir(tmpl.c_str());
  };

  impl->service =
      std::make_unique<AdminService>(node, std::move(cache_stats), std::move(cache_flush), std::move(cache_forget));
  grpc::ServerBuilder builder;
  builder.RegisterService(impl->service.get());
  builder.AddListeningPort("unix:" + bind_path, grpc::InsecureServerCredentials());
  int selected_port = 0;
  if (!config.admin_tcp.empty()) {
    if (config.tls_cert.empty() || config.tls_key.empty()) {
      cleanup_bind_dir();
      return nasgw::Status::InvalidArgument("admin.tcp requires admin.tls_cert and admin.tls_key");
    }
    if (config.tls_client_ca.empty() && !config.admin_insecure_no_client_auth) {
      cleanup_bind_dir();
      return nasgw::Status::InvalidArgument(
          "admin.tcp requires admin.tls_client_ca, or admin.insecure_no_client_auth = true to serve without client "
          "authentication");
    }
    grpc::SslServerCredentialsOptions tls;
    auto cert = ReadFile(config.tls_cert, "admin.tls_cert");
    auto key = ReadFile(config.tls_key, "admin.tls_key");
    if (!cert.ok() || !key.ok()) {
      cleanup_bind_dir();
      return !cert.ok() ? cert.status() : key.status();
    }
    tls.pem_key_cert_pairs.push_back({*key, *cert});
    if (!config.tls_client_ca.empty()) {
      auto ca = ReadFile(config.tls_client_ca, "admin.tls_client_ca");
      if (!ca.ok()) {
        cleanup_bind_dir();
        return ca.status();
      }
      tls.pem_root_certs = *ca;
      tls.client_certificate_request = GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY;
    } else {
      tls.client_certificate_request = GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE;
    }
    builder.AddListeningPort(config.admin_tcp, grpc::SslServerCredentials(tls), &selected_port);
  }
  impl->server = builder.BuildAndStart();
  if (!impl->server) {
    cleanup_bind_dir();
    return nasgw::Status::Unavailable("cannot serve the admin API on unix:" + path +
                                      (config.admin_tcp.empty() ? "" : " and " + config.admin_tcp) +
                                      " (gRPC refused to start; see its log above)");
  }
  if (!config.admin_tcp.empty() && selected_port == 0) {
    impl->server->Shutdown();
    cleanup_bind_dir();
    return nasgw::Status::Unavailable("cannot listen on " + config.admin_tcp + " for the admin API");
  }
  impl->tcp_port = selected_port;
  // Nobody but us can reach the socket inside the 0700 directory; make it
  // 0600, then move it into place (a bound socket keeps working when renamed).
  if (::chmod(bind_path.c_str(), 0600) != 0 || ::rename(bind_path.c_str(), path.c_str()) != 0) {
    nasgw::Status s = ErrnoStatus("place the admin socket at " + path, errno);
    impl->server->Shutdown();
    cleanup_bind_dir();
    return s;
  }
  ::rmdir(tmpl.c_str());
  NASGW_LOG(kInfo, "admin") << "serving" << Kv("socket", path) << Kv("tcp", config.admin_tcp)
                            << Kv("tcp_port", selected_port) << Kv("client_certs", !config.tls_client_ca.empty());
  if (!config.admin_tcp.empty() && config.tls_client_ca.empty()) {
    NASGW_LOG(kWarn, "admin") << "admin TCP without client certificates (admin.insecure_no_client_auth): anyone "
                                 "who reaches the port can administer this node; set admin.tls_client_ca"
                              << Kv("tcp", config.admin_tcp);
  }
  return std::unique_ptr<AdminServer>(new AdminServer(std::move(impl)));
}

void AdminServer::Shutdown() {
  if (!impl_ || impl_->shut_down) return;
  impl_->shut_down = true;
  // RPCs in flight get a short grace, then are cancelled.
  impl_->server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(5));
  impl_->server->Wait();
  ::unlink(impl_->socket_path.c_str());
  NASGW_LOG(kInfo, "admin") << "stopped" << Kv("socket", impl_->socket_path);
}

}  // namespace nasgw::daemon
