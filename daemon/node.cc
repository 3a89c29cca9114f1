#include "daemon/node.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <fstream>
#include <sstream>
#include <thread>

#include "base/log.h"
#include "block/iscsi_device.h"
#include "block/iscsi_url.h"
#include "daemon/nfs_exports.h"

#include <sys/stat.h>

#ifndef NASGW_VERSION
#define NASGW_VERSION "0.1.0-dev"
#endif

namespace nasgw::daemon {

const char* ReserveStateName(ReserveState s) {
  switch (s) {
    case ReserveState::kUnformatted:
      return "unformatted";
    case ReserveState::kOnline:
      return "online";
    case ReserveState::kFailed:
      return "failed";
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

// Replaces <state_dir>/luns atomically: temp file, fsync, rename, fsync dir.
Status WriteRememberedLuns(const Config& config, const std::vector<std::string>& urls) {
  NASGW_RETURN_IF_ERROR(MakeStateDir(config.state_dir));
  const std::string path = LunsFile(config);
  const std::string tmp = path + ".tmp";
  std::string text = "# LUNs added to the reserve at run time (nasgw reserve add-lun); written by nasgwd\n";
  for (const auto& u : urls) text += u + "\n";
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
    o.io_timeout_ms = config.io_timeout_ms;
    o.connect_timeout_ms = config.connect_timeout_ms;
    NASGW_RETURN_IF_ERROR(o.Validate());
    auto d = block::IscsiDevice::Open(o);
    if (!d.ok()) return d.status();
    return std::shared_ptr<block::BlockDevice>(std::move(d.value()));
  };
}

}  // namespace

Result<std::unique_ptr<Node>> Node::Start(const Config& config, LunOpener opener,
                                          const fs::DomainOptions& domain_options) {
  std::unique_ptr<Node> node(new Node());
  node->config_ = config;
  node->opener_ = opener ? std::move(opener) : IscsiOpener(config);
  node->domain_options_ = domain_options;
  node->started_unix_ = NowUnix();

  auto remembered = ReadRememberedLuns(config);
  if (!remembered.ok()) return remembered.status();

  std::vector<std::string> urls = config.LunUrlsWithChap();
  const size_t configured = urls.size();
  for (const auto& u : *remembered) urls.push_back(WithChap(config, u));

  std::unique_lock<std::shared_mutex> lock(node->mu_);
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
  node->OpenReserveLocked();
  NASGW_LOG(kInfo, "node") << "started" << Kv("node", config.node_name) << Kv("luns", node->devices_.size())
                           << Kv("reserve", ReserveStateName(node->state_)) << Kv("reason", node->reason_);
  lock.unlock();
  // A failure is logged; the file is written again at the next change.
  node->PublishExports().IgnoreError();
  return node;
}

Node::~Node() {
  Shutdown();
}

void Node::OpenReserveLocked() {
  domain_.reset();
  reserve_.reset();
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
  auto r = fs::Reserve::Open(devices_);
  if (!r.ok()) {
    state_ = ReserveState::kFailed;
    reason_ = r.status().WithContext("open reserve").ToString();
    return;
  }
  std::shared_ptr<fs::Reserve> reserve = std::move(r.value());
  for (const auto& repair : reserve->repairs()) NASGW_LOG(kWarn, "node") << "label repaired" << Kv("what", repair);
  auto d = fs::Domain::Open(reserve, 0, domain_options_);
  if (!d.ok()) {
    state_ = ReserveState::kFailed;
    reason_ = d.status().WithContext("open domain 0 of reserve '" + reserve->name() + "'").ToString();
    return;
  }
  std::shared_ptr<fs::Domain> domain = std::move(d.value());
  // Completes an AddLun that labelled the LUN but stopped before the domain
  // took its groups; nothing to do otherwise.
  auto grew = domain->Grow();
  if (!grew.ok()) {
    NASGW_LOG(kWarn, "node") << "grow at open failed" << Kv("error", grew.status().ToString());
  } else if (*grew > 0) {
    NASGW_LOG(kInfo, "node") << "domain took the groups of an interrupted LUN add" << Kv("bytes", *grew);
  }
  reserve_ = std::move(reserve);
  domain_ = std::move(domain);
  state_ = ReserveState::kOnline;
  reason_.clear();
}

NodeStatus Node::Status() const {
  NodeStatus s;
  s.node_name = config_.node_name;
  s.version = NASGW_VERSION;
  s.started_unix = started_unix_;
  const int64_t now = NowUnix();
  s.uptime_s = now > started_unix_ ? static_cast<uint64_t>(now - started_unix_) : 0;
  {
    std::shared_lock<std::shared_mutex> lock(mu_);
    s.reserve_state = state_;
  }
  s.head_connections = head_connections.load();
  s.head_requests = head_requests.load();
  return s;
}

LunStatus Node::LunStatusLocked(uint32_t index, const std::shared_ptr<block::BlockDevice>& dev) const {
  LunStatus l;
  l.index = index;
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
  std::shared_lock<std::shared_mutex> lock(mu_);
  ReserveStatus r;
  r.state = state_;
  r.reason = reason_;
  if (state_ == ReserveState::kOnline && reserve_ && domain_) {
    r.name = reserve_->name();
    r.uuid = reserve_->uuid().ToString();
    r.ag_bytes = reserve_->ag_bytes();
    r.generation = reserve_->generation();
    const fs::StatFs st = domain_->Statfs();
    r.capacity_bytes = st.total_bytes;
    r.free_bytes = st.free_bytes;
    r.files = st.files;
    for (uint32_t i = 0; i < reserve_->lun_count(); i++) r.luns.push_back(LunStatusLocked(i, reserve_->lun(i)));
  } else {
    for (size_t i = 0; i < devices_.size(); i++) {
      r.luns.push_back(LunStatusLocked(static_cast<uint32_t>(i), devices_[i]));
    }
  }
  return r;
}

nasgw::Status Node::FormatReserve(const std::string& name, uint64_t ag_bytes, bool force) {
  std::lock_guard<std::mutex> admin(admin_mu_);
  std::shared_ptr<fs::Domain> old_domain;
  std::shared_ptr<fs::Reserve> old_reserve;
  std::vector<std::shared_ptr<block::BlockDevice>> devices;
  {
    std::unique_lock<std::shared_mutex> lock(mu_);
    if (devices_.empty()) return nasgw::Status::Unavailable("the node has no LUNs (shut down, or none configured)");
    if (state_ == ReserveState::kOnline && !force) {
      return nasgw::Status(Code::kFailedPrecondition,
                           "reserve '" + reserve_->name() +
                               "' is online on these LUNs; formatting destroys it and every volume on "
                               "it (force formats over it)");
    }
    old_domain = std::move(domain_);
    old_reserve = std::move(reserve_);
    devices = devices_;
    if (old_domain) {
      state_ = ReserveState::kFailed;
      reason_ = "being formatted";
    }
  }
  if (old_domain) {
    // Heads in flight hold the domain; it must be closed before its LUNs are
    // overwritten.
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(config_.drain_ms);
    while (old_domain.use_count() > 1 && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    if (old_domain.use_count() > 1) {
      std::unique_lock<std::shared_mutex> lock(mu_);
      domain_ = std::move(old_domain);
      reserve_ = std::move(old_reserve);
      state_ = ReserveState::kOnline;
      reason_.clear();
      return nasgw::Status::Busy("the domain is still in use by head requests; try again");
    }
    NASGW_LOG(kWarn, "node") << "closing the online domain to format over it" << Kv("reserve", old_reserve->name());
    old_domain.reset();
    old_reserve.reset();
  }

  fs::ReserveOptions o;
  o.name = name;
  o.ag_bytes = ag_bytes == 0 ? fs::kAgBytesDefault : ag_bytes;
  o.force = force;
  nasgw::Status failed;
  std::shared_ptr<fs::Reserve> reserve;
  std::shared_ptr<fs::Domain> domain;
  auto r = fs::Reserve::Format(devices, o);
  if (!r.ok()) {
    failed = r.status();
  } else {
    reserve = std::move(r.value());
    auto d = fs::Domain::Create(reserve, 0, domain_options_);
    if (!d.ok()) {
      failed = d.status().WithContext("create domain");
    } else {
      domain = std::move(d.value());
    }
  }

  {
    std::unique_lock<std::shared_mutex> lock(mu_);
    if (!failed.ok()) {
      // Whatever the LUNs hold now decides the state.
      OpenReserveLocked();
    } else {
      reserve_ = std::move(reserve);
      domain_ = std::move(domain);
      state_ = ReserveState::kOnline;
      reason_.clear();
      NASGW_LOG(kInfo, "node") << "reserve formatted" << Kv("name", name) << Kv("luns", devices.size());
    }
  }
  // The reserve came online (a new one without exports, or the old one
  // again): the exports file follows it.
  PublishExports().IgnoreError();
  return failed;
}

Result<LunStatus> Node::AddLun(const std::string& url, bool force) {
  std::lock_guard<std::mutex> admin(admin_mu_);
  const std::string shown = Redact(url);
  std::shared_ptr<fs::Reserve> reserve;
  std::shared_ptr<fs::Domain> domain;
  {
    std::shared_lock<std::shared_mutex> lock(mu_);
    if (state_ != ReserveState::kOnline) {
      return nasgw::Status::Unavailable(std::string("reserve is not online: ") + ReserveStateName(state_) + ": " +
                                        reason_);
    }
    for (const auto& u : urls_) {
      if (Redact(u) == shown) return nasgw::Status::Exists("LUN " + shown + " is already in use by this node");
    }
    reserve = reserve_;
    domain = domain_;
  }
  auto opened = opener_(WithChap(config_, url));
  if (!opened.ok()) return opened.status().WithContext("LUN " + shown);
  std::shared_ptr<block::BlockDevice> dev = std::move(opened.value());

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
    std::unique_lock<std::shared_mutex> lock(mu_);
    urls_.push_back(WithChap(config_, url));
    devices_.push_back(dev);
    for (uint32_t i = 0; i < reserve->lun_count(); i++) {
      if (reserve->lun(i) == dev) index = i;
    }
  }
  auto grew = domain->Grow();
  if (!grew.ok()) {
    // The LUN is a member; the domain takes its groups at the next open.
    return grew.status().WithContext("LUN " + shown + " joined the reserve but the domain did not grow onto it");
  }
  NASGW_LOG(kInfo, "node") << "LUN added" << Kv("lun", shown) << Kv("bytes", *grew);
  std::shared_lock<std::shared_mutex> lock(mu_);
  return LunStatusLocked(index, dev);
}

Result<std::shared_ptr<fs::Domain>> Node::OnlineDomain() const {
  std::shared_lock<std::shared_mutex> lock(mu_);
  if (state_ != ReserveState::kOnline || !domain_) {
    return nasgw::Status::Unavailable(std::string("reserve is not online: ") + ReserveStateName(state_) + ": " +
                                      reason_);
  }
  return domain_;
}

Result<std::vector<fs::VolumeInfo>> Node::ListVolumes() {
  auto d = OnlineDomain();
  if (!d.ok()) return d.status();
  return (*d)->ListVolumes();
}

Result<fs::VolumeInfo> Node::GetVolume(const std::string& name) {
  auto d = OnlineDomain();
  if (!d.ok()) return d.status();
  return (*d)->FindVolume(name);
}

Result<fs::VolumeInfo> Node::CreateVolume(const std::string& name, uint32_t record_bytes) {
  auto d = OnlineDomain();
  if (!d.ok()) return d.status();
  return (*d)->CreateVolume(name, record_bytes);
}

Result<fs::VolumeInfo> Node::SetVolumeRecordBytes(const std::string& name, uint32_t record_bytes) {
  auto d = OnlineDomain();
  if (!d.ok()) return d.status();
  return (*d)->SetVolumeRecordBytes(name, record_bytes);
}

nasgw::Status Node::DeleteVolume(const std::string& name, bool force) {
  auto d = OnlineDomain();
  if (!d.ok()) return d.status();
  return (*d)->DeleteVolume(name, force);
}

Result<std::vector<fs::Export>> Node::ListExports() {
  auto d = OnlineDomain();
  if (!d.ok()) return d.status();
  return (*d)->ListExports();
}

Result<fs::Export> Node::GetExport(uint32_t id) {
  auto d = OnlineDomain();
  if (!d.ok()) return d.status();
  return (*d)->GetExport(id);
}

Result<fs::Export> Node::FindExport(const std::string& pseudo) {
  auto d = OnlineDomain();
  if (!d.ok()) return d.status();
  return (*d)->FindExport(pseudo);
}

Result<fs::Export> Node::AddExport(const fs::Export& spec, std::string* publish_error) {
  std::lock_guard<std::mutex> lock(exports_mu_);
  auto d = OnlineDomain();
  if (!d.ok()) return d.status();
  auto e = (*d)->AddExport(spec);
  if (!e.ok()) return e.status();
  NASGW_LOG(kInfo, "node") << "export added" << Kv("id", e->id) << Kv("volume", e->volume) << Kv("path", e->path)
                           << Kv("pseudo", e->pseudo);
  nasgw::Status p = PublishExportsLocked();
  if (publish_error) *publish_error = p.ok() ? "" : p.ToString();
  return e;
}

Result<fs::Export> Node::RemoveExport(uint32_t id, std::string* publish_error) {
  std::lock_guard<std::mutex> lock(exports_mu_);
  auto d = OnlineDomain();
  if (!d.ok()) return d.status();
  auto e = (*d)->RemoveExport(id);
  if (!e.ok()) return e.status();
  NASGW_LOG(kInfo, "node") << "export removed" << Kv("id", e->id) << Kv("pseudo", e->pseudo);
  nasgw::Status p = PublishExportsLocked();
  if (publish_error) *publish_error = p.ok() ? "" : p.ToString();
  return e;
}

nasgw::Status Node::PublishExports() {
  std::lock_guard<std::mutex> lock(exports_mu_);
  return PublishExportsLocked();
}

nasgw::Status Node::PublishExportsLocked() {
  if (config_.nfs_exports_file.empty()) return nasgw::Status();
  std::shared_ptr<fs::Domain> d = domain();
  if (!d) return nasgw::Status();  // not online: the file keeps what it last had
  auto exports = d->ListExports();
  if (!exports.ok()) {
    NASGW_LOG(kError, "nfs") << "cannot read the exports; the exports file is left as it was"
                             << Kv("error", exports.status().ToString());
    return exports.status().WithContext("read the exports");
  }
  return daemon::PublishExports(config_.nfs_exports_file, config_.nfs_ganesha_pid_file, config_.node_name, *exports);
}

std::shared_ptr<fs::Domain> Node::domain() const {
  std::shared_lock<std::shared_mutex> lock(mu_);
  return state_ == ReserveState::kOnline ? domain_ : nullptr;
}

void Node::Shutdown() {
  std::lock_guard<std::mutex> admin(admin_mu_);
  std::shared_ptr<fs::Domain> domain;
  std::shared_ptr<fs::Reserve> reserve;
  std::vector<std::shared_ptr<block::BlockDevice>> devices;
  {
    std::unique_lock<std::shared_mutex> lock(mu_);
    if (state_ == ReserveState::kFailed && reason_ == "shut down") return;
    domain = std::move(domain_);
    reserve = std::move(reserve_);
    devices = std::move(devices_);
    devices_.clear();
    urls_.clear();
    state_ = ReserveState::kFailed;
    reason_ = "shut down";
  }
  // Outside the lock: closing flushes. A head request still holding the
  // domain keeps it open until it finishes.
  domain.reset();
  reserve.reset();
  devices.clear();
  NASGW_LOG(kInfo, "node") << "shut down" << Kv("node", config_.node_name);
}

}  // namespace nasgw::daemon
