// The admin API end to end, without iSCSI: a Node over in-memory LUNs, its
// AdminServer on a Unix socket in a temporary directory, driven through a
// gRPC stub and through the real `nasgw` CLI binary as a subprocess; TLS on
// TCP with certificates the openssl CLI makes.
#include <fcntl.h>
#include <grp.h>
#include <signal.h>
#include <spawn.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <sstream>
#include <thread>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "base/limits.h"
#include "base/log.h"
#include "base/mutex.h"
#include "block/mem_device.h"
#include "cache/data_cache.h"
#include "daemon/admin_service.h"
#include "daemon/metrics.h"
#include "daemon/node.h"
#include "daemon/node_metrics.h"
#include "daemon/snapshot_scheduler.h"
#include "proto/admin.grpc.pb.h"

#include <grpcpp/grpcpp.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>

namespace nasgw::daemon {
namespace {

namespace pb = ::nasgw::admin::v1;
using nlohmann::json;

constexpr uint64_t kMiB = 1 << 20;
constexpr uint64_t kLunBytes = 64 * kMiB;
const std::string kUrlBase = "iscsi://198.18.0.1/iqn.2026-11.org.nasgw:lab/";

std::string ReadText(const std::string& path) {
  std::ifstream in(path);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

struct CliResult {
  int exit_code = -1;
  std::string out, err;
};

class AdminTest : public ::testing::Test {
 protected:
  void SetUp() override {
    // The pid in the name lets `sanlab gc` remove it after a crashed run.
    std::string name = "/tmp/nasgw-admin-" + std::to_string(::getpid()) + "-XXXXXX";
    char* tmpl = name.data();
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    for (int i = 0; i < 3; i++) AddMedium(i);
    config_.node_name = "n1";
    config_.run_dir = dir_;
    config_.state_dir = dir_ + "/state";
    config_.admin_socket = dir_ + "/admin.sock";
    for (int i = 0; i < 3; i++) config_.luns.push_back(Url(i));
  }

  void TearDown() override {
    scheduler_.reset();
    SetLogSink(nullptr);
    server_.reset();
    node_.reset();
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }

  static std::string Url(int i) { return kUrlBase + std::to_string(i); }

  void AddMedium(int i) {
    media_[Url(i)] = std::make_shared<block::MemLun>(512, kLunBytes / 512, "naa.admin" + std::to_string(i));
  }

  LunOpener Opener() {
    return [this](const std::string& url) -> Result<std::shared_ptr<block::BlockDevice>> {
      opened_.push_back(url);
      std::string bare = url;  // the media are keyed without CHAP credentials
      if (const size_t at = bare.rfind('@'); at != std::string::npos) bare = "iscsi://" + bare.substr(at + 1);
      auto it = media_.find(bare);
      if (it == media_.end()) return Status::Unavailable("connection refused");
      return std::shared_ptr<block::BlockDevice>(std::make_shared<block::MemDevice>(it->second));
    };
  }

  static fs::DomainOptions SmallDomain() {
    fs::DomainOptions o;
    o.store.write_buffer_bytes = 256 << 10;
    o.store.block_cache_bytes = 1 << 20;
    o.metafs.log_compact_bytes = 512 << 10;
    return o;
  }

  void StartAll() {
    auto n = Node::Start(config_, Opener(), SmallDomain());
    ASSERT_TRUE(n.ok()) << n.status().ToString();
    node_ = std::move(n.value());
    auto s = AdminServer::Start(node_.get(), config_, cache_stats_, cache_flush_, cache_forget_);
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    server_ = std::move(s.value());
    auto channel = grpc::CreateChannel("unix:" + config_.admin_socket, grpc::InsecureChannelCredentials());
    stub_ = pb::Admin::NewStub(channel);
    if (run_scheduler_) {
      KeepLog();
      scheduler_ = SnapshotScheduler::Start(
          node_.get(),
          [this]() -> nasgw::Status {
            scheduler_flushes_++;
            if (scheduler_flush_fails_) return nasgw::Status::NoSpace("no space for the flush");
            return cache_flush_ ? cache_flush_() : nasgw::Status();
          },
          &metrics_);
    }
  }

  // Polls `done` every 20 ms until it holds or `limit` passes; returns
  // whether it held.
  template <typename F>
  static bool WaitFor(F done, std::chrono::milliseconds limit = std::chrono::seconds(10)) {
    const auto deadline = std::chrono::steady_clock::now() + limit;
    while (!done()) {
      if (std::chrono::steady_clock::now() >= deadline) return false;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return true;
  }

  void StopAll() {
    scheduler_.reset();
    stub_.reset();
    server_.reset();
    node_.reset();
  }

  template <typename Req, typename Resp>
  grpc::Status Call(grpc::Status (pb::Admin::Stub::*method)(grpc::ClientContext*, const Req&, Resp*), const Req& req,
                    Resp* resp) {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
    return (stub_.get()->*method)(&ctx, req, resp);
  }

  pb::Reserve Reserve() {
    pb::GetReserveResponse r;
    auto s = Call(&pb::Admin::Stub::GetReserve, pb::GetReserveRequest(), &r);
    EXPECT_TRUE(s.ok()) << s.error_message();
    return r.reserve();
  }

  grpc::Status Format(const std::string& name, uint64_t ag_bytes = kMiB, bool force = false) {
    pb::FormatReserveRequest req;
    req.set_name(name);
    req.set_ag_bytes(ag_bytes);
    req.set_force(force);
    pb::FormatReserveResponse r;
    return Call(&pb::Admin::Stub::FormatReserve, req, &r);
  }

  // record_bytes 0: left unset (the default).
  grpc::Status CreateVolume(const std::string& name, uint32_t record_bytes = 0, pb::Volume* out = nullptr) {
    pb::CreateVolumeRequest req;
    req.set_name(name);
    if (record_bytes != 0) req.set_record_bytes(record_bytes);
    pb::CreateVolumeResponse r;
    auto s = Call(&pb::Admin::Stub::CreateVolume, req, &r);
    if (out) *out = r.volume();
    return s;
  }

  grpc::Status DeleteVolume(const std::string& name, bool force) {
    pb::DeleteVolumeRequest req;
    req.set_name(name);
    req.set_force(force);
    pb::DeleteVolumeResponse r;
    return Call(&pb::Admin::Stub::DeleteVolume, req, &r);
  }

  grpc::Status SetRecordBytes(const std::string& name, uint32_t record_bytes, pb::Volume* out = nullptr) {
    pb::UpdateVolumeRequest req;
    req.set_name(name);
    req.set_record_bytes(record_bytes);
    pb::UpdateVolumeResponse r;
    auto s = Call(&pb::Admin::Stub::UpdateVolume, req, &r);
    if (out) *out = r.volume();
    return s;
  }

  grpc::Status CreateSnapshot(const std::string& volume, const std::string& name, pb::Snapshot* out = nullptr) {
    pb::CreateSnapshotRequest req;
    req.set_volume(volume);
    req.set_name(name);
    pb::CreateSnapshotResponse r;
    auto s = Call(&pb::Admin::Stub::CreateSnapshot, req, &r);
    if (out) *out = r.snapshot();
    return s;
  }

  grpc::Status ListSnapshots(const std::string& volume, std::vector<pb::Snapshot>* out = nullptr) {
    pb::ListSnapshotsRequest req;
    req.set_volume(volume);
    pb::ListSnapshotsResponse r;
    auto s = Call(&pb::Admin::Stub::ListSnapshots, req, &r);
    if (out) out->assign(r.snapshots().begin(), r.snapshots().end());
    return s;
  }

  grpc::Status GetSnapshot(const std::string& volume, const std::string& name, pb::Snapshot* out = nullptr) {
    pb::GetSnapshotRequest req;
    req.set_volume(volume);
    req.set_name(name);
    pb::GetSnapshotResponse r;
    auto s = Call(&pb::Admin::Stub::GetSnapshot, req, &r);
    if (out) *out = r.snapshot();
    return s;
  }

  grpc::Status DeleteSnapshot(const std::string& volume, const std::string& name, pb::Snapshot* out = nullptr) {
    pb::DeleteSnapshotRequest req;
    req.set_volume(volume);
    req.set_name(name);
    pb::DeleteSnapshotResponse r;
    auto s = Call(&pb::Admin::Stub::DeleteSnapshot, req, &r);
    if (out) *out = r.snapshot();
    return s;
  }

  grpc::Status Rollback(const std::string& volume, const std::string& name,
                        pb::RollbackSnapshotResponse* out = nullptr) {
    pb::RollbackSnapshotRequest req;
    req.set_volume(volume);
    req.set_name(name);
    pb::RollbackSnapshotResponse r;
    auto s = Call(&pb::Admin::Stub::RollbackSnapshot, req, &r);
    if (out) *out = r;
    return s;
  }

  grpc::Status Clone(const std::string& volume, const std::string& snapshot, const std::string& clone,
                     pb::Volume* out = nullptr) {
    pb::CloneSnapshotRequest req;
    req.set_volume(volume);
    req.set_snapshot(snapshot);
    req.set_clone(clone);
    pb::CloneSnapshotResponse r;
    auto s = Call(&pb::Admin::Stub::CloneSnapshot, req, &r);
    if (out) *out = r.volume();
    return s;
  }

  // Every log line from now on kept in log_ (and still printed).
  void KeepLog() {
    SetLogSink([this](std::string_view line) {
      std::fwrite(line.data(), 1, line.size(), stderr);
      MutexLock l(log_mu_);
      log_.emplace_back(line);
    });
  }

  // A file's bytes in the live volume (or a snapshot), read from the domain.
  std::string ReadAll(uint32_t vol, uint64_t ino, uint32_t snap = 0) {
    auto d = node_->domain();
    std::string buf(4 << 20, '\0');
    auto n = d->Read(vol, ino, 0, buf.size(), buf.data(), snap);
    EXPECT_TRUE(n.ok()) << n.status().ToString();
    buf.resize(n.ok() ? *n : 0);
    return buf;
  }

  grpc::Status AddSchedule(const std::string& volume, const std::string& name, uint64_t every_s, uint32_t keep,
                           pb::SnapshotSchedule* out = nullptr) {
    pb::AddSnapshotScheduleRequest req;
    req.set_volume(volume);
    req.set_name(name);
    req.set_every_seconds(every_s);
    req.set_keep(keep);
    pb::AddSnapshotScheduleResponse r;
    auto s = Call(&pb::Admin::Stub::AddSnapshotSchedule, req, &r);
    if (out) *out = r.schedule();
    return s;
  }

  grpc::Status ListSchedules(const std::string& volume, std::vector<pb::SnapshotSchedule>* out = nullptr) {
    pb::ListSnapshotSchedulesRequest req;
    req.set_volume(volume);
    pb::ListSnapshotSchedulesResponse r;
    auto s = Call(&pb::Admin::Stub::ListSnapshotSchedules, req, &r);
    if (out) out->assign(r.schedules().begin(), r.schedules().end());
    return s;
  }

  grpc::Status RemoveSchedule(const std::string& volume, const std::string& name, pb::SnapshotSchedule* out = nullptr) {
    pb::RemoveSnapshotScheduleRequest req;
    req.set_volume(volume);
    req.set_name(name);
    pb::RemoveSnapshotScheduleResponse r;
    auto s = Call(&pb::Admin::Stub::RemoveSnapshotSchedule, req, &r);
    if (out) *out = r.schedule();
    return s;
  }

  // The names of the volume's snapshots, oldest first.
  std::vector<std::string> SnapshotNames(const std::string& volume) {
    std::vector<pb::Snapshot> list;
    auto s = ListSnapshots(volume, &list);
    EXPECT_TRUE(s.ok()) << s.error_message();
    std::vector<std::string> out;
    out.reserve(list.size());
    for (const auto& sn : list) out.push_back(sn.name());
    return out;
  }

  // The scheduler's counter `family` for the schedule; -1 when it has none.
  double ScheduleCounter(const std::string& family, const std::string& volume, const std::string& schedule) {
    const std::string text = metrics_.Render();
    const std::string series = family + "{schedule=\"" + schedule + "\",volume=\"" + volume + "\"}";
    const size_t at = text.find("\n" + series + " ");
    return at == std::string::npos ? -1.0 : std::strtod(text.c_str() + at + series.size() + 2, nullptr);
  }

  // Lines the scheduler's run logged that hold every one of `words`.
  std::vector<std::string> Logged(const std::vector<std::string>& words) {
    MutexLock l(log_mu_);
    std::vector<std::string> out;
    for (const auto& line : log_) {
      if (std::all_of(words.begin(), words.end(), [&](const std::string& w) { return line.find(w) != line.npos; })) {
        out.push_back(line);
      }
    }
    return out;
  }

  pb::Volume GetVolume(const std::string& name) {
    pb::GetVolumeRequest req;
    req.set_name(name);
    pb::GetVolumeResponse r;
    auto s = Call(&pb::Admin::Stub::GetVolume, req, &r);
    EXPECT_TRUE(s.ok()) << s.error_message();
    return r.volume();
  }

  // Puts a file with data into a volume, as a head would.
  void WriteFile(const std::string& volume, const std::string& name, size_t bytes) {
    auto d = node_->domain();
    ASSERT_NE(d, nullptr);
    auto v = d->FindVolume(volume);
    ASSERT_TRUE(v.ok()) << v.status().ToString();
    auto f = d->Create(v->id, fs::kRootIno, name, fs::FileType::kRegular, 0644, 0, 0);
    ASSERT_TRUE(f.ok()) << f.status().ToString();
    const std::string data(bytes, 'd');
    ASSERT_TRUE(d->Write(v->id, f->ino, 0, data.data(), data.size()).ok());
  }

  // Runs the real CLI; stdout and stderr go to files in the temp dir. With
  // `uid`, as that user (and its group, no supplementary groups).
  CliResult Cli(std::vector<std::string> args, bool with_socket = true, int uid = -1) {
    std::vector<std::string> argv = {NASGW_CLI_PATH};
    if (with_socket) {
      argv.push_back("--socket");
      argv.push_back(config_.admin_socket);
    }
    argv.push_back("--timeout");
    argv.push_back("20");
    argv.insert(argv.end(), args.begin(), args.end());
    std::vector<char*> cargv;
    cargv.reserve(argv.size());
    for (auto& a : argv) cargv.push_back(a.data());
    cargv.push_back(nullptr);
    const std::string out_path = dir_ + "/cli.out", err_path = dir_ + "/cli.err";
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 1, out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    posix_spawn_file_actions_addopen(&fa, 2, err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    pid_t pid = 0;
    CliResult r;
    int rc = 0;
    if (uid < 0) {
      rc = posix_spawn(&pid, cargv[0], &fa, nullptr, cargv.data(), environ);
    } else {
      pid = ::fork();
      if (pid == 0) {
        const int out = ::open(out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0666);
        const int err = ::open(err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0666);
        if (out < 0 || err < 0 || ::dup2(out, 1) < 0 || ::dup2(err, 2) < 0) _exit(120);
        if (::setgroups(0, nullptr) != 0 || ::setgid(static_cast<gid_t>(uid)) != 0 ||
            ::setuid(static_cast<uid_t>(uid)) != 0) {
          _exit(121);
        }
        ::execve(cargv[0], cargv.data(), environ);
        _exit(122);
      }
      if (pid < 0) rc = errno;
    }
    posix_spawn_file_actions_destroy(&fa);
    if (rc != 0) {
      r.err = "spawn failed: " + std::string(std::strerror(rc));
      return r;
    }
    int status = 0;
    while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    r.out = ReadText(out_path);
    r.err = ReadText(err_path);
    return r;
  }

  std::string dir_;
  Config config_;
  AdminServer::CacheStatsFn cache_stats_;    // the head service's cache, where a test has one
  AdminServer::CacheFlushFn cache_flush_;    // the same
  AdminServer::CacheForgetFn cache_forget_;  // the same
  std::map<std::string, std::shared_ptr<block::MemLun>> media_;
  std::vector<std::string> opened_;
  std::unique_ptr<Node> node_;
  std::unique_ptr<AdminServer> server_;
  std::unique_ptr<pb::Admin::Stub> stub_;
  // With run_scheduler_, StartAll runs the snapshot scheduler as nasgwd
  // does: its flushes counted (then cache_flush_'s, where a test has one;
  // failing while scheduler_flush_fails_), its counters in metrics_, and
  // every log line kept in log_ (and still printed).
  bool run_scheduler_ = false;
  std::atomic<int> scheduler_flushes_{0};
  std::atomic<bool> scheduler_flush_fails_{false};
  Metrics metrics_;
  std::unique_ptr<SnapshotScheduler> scheduler_;
  Mutex log_mu_;
  std::vector<std::string> log_ GUARDED_BY(log_mu_);
};

// Bytes read, in few words: their count and runs of one value.
std::string Summary(const std::string& bytes) {
  std::string out = std::to_string(bytes.size()) + " bytes:";
  for (size_t i = 0; i < bytes.size();) {
    size_t j = i;
    while (j < bytes.size() && bytes[j] == bytes[i]) j++;
    out += " " + std::to_string(j - i) + "x" + std::to_string(static_cast<unsigned char>(bytes[i]));
    i = j;
  }
  return out;
}

std::string Describe(const CliResult& r) {
  return "exit " + std::to_string(r.exit_code) + "\nstdout:\n" + r.out + "stderr:\n" + r.err;
}

TEST(AdminStatusTest, CodesMapToGrpc) {
  EXPECT_EQ(GrpcCodeOf(Code::kOk), grpc::StatusCode::OK);
  EXPECT_EQ(GrpcCodeOf(Code::kNotFound), grpc::StatusCode::NOT_FOUND);
  EXPECT_EQ(GrpcCodeOf(Code::kExists), grpc::StatusCode::ALREADY_EXISTS);
  EXPECT_EQ(GrpcCodeOf(Code::kInvalidArgument), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(GrpcCodeOf(Code::kNotEmpty), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_EQ(GrpcCodeOf(Code::kFailedPrecondition), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_EQ(GrpcCodeOf(Code::kUnavailable), grpc::StatusCode::UNAVAILABLE);
  EXPECT_EQ(GrpcCodeOf(Code::kBusy), grpc::StatusCode::UNAVAILABLE);
  EXPECT_EQ(GrpcCodeOf(Code::kNoSpace), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_EQ(GrpcCodeOf(Code::kPermissionDenied), grpc::StatusCode::PERMISSION_DENIED);
  for (Code c : {Code::kIoError, Code::kCorruption, Code::kFenced, Code::kTimedOut, Code::kStale, Code::kNotDir,
                 Code::kIsDir, Code::kNotSupported, Code::kOutOfRange, Code::kMiscompare}) {
    EXPECT_EQ(GrpcCodeOf(c), grpc::StatusCode::INTERNAL) << CodeName(c);
  }
}

TEST_F(AdminTest, StartsUnformattedThenFormats) {
  StartAll();
  struct stat st {};
  ASSERT_EQ(::stat(config_.admin_socket.c_str(), &st), 0);
  EXPECT_TRUE(S_ISSOCK(st.st_mode));
  EXPECT_EQ(st.st_mode & 0777, 0600u) << "the admin socket is the owner's only";

  pb::GetNodeResponse node;
  ASSERT_TRUE(Call(&pb::Admin::Stub::GetNode, pb::GetNodeRequest(), &node).ok());
  EXPECT_EQ(node.node().name(), "n1");
  EXPECT_EQ(node.node().reserve_state(), pb::RESERVE_STATE_UNFORMATTED);
  EXPECT_FALSE(node.node().version().empty());

  pb::Reserve r = Reserve();
  EXPECT_EQ(r.state(), pb::RESERVE_STATE_UNFORMATTED);
  EXPECT_FALSE(r.reason().empty());
  EXPECT_EQ(r.luns_size(), 3);

  pb::ListVolumesResponse vols;
  auto s = Call(&pb::Admin::Stub::ListVolumes, pb::ListVolumesRequest(), &vols);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_NE(s.error_message().find("reserve is not online: unformatted"), std::string::npos) << s.error_message();

  EXPECT_EQ(Format("").error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(Format("bad name").error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(Format(std::string(64, 'x')).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(Format("tank", 3 * kMiB).error_code(), grpc::StatusCode::INVALID_ARGUMENT) << "not a power of two";
  EXPECT_EQ(Format("tank", kMiB / 2).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(Format("tank", 128ull << 30).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  // The default group (1 GiB) does not fit 64 MiB LUNs: fs says so.
  s = Format("tank", 0);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << s.error_message();
  EXPECT_EQ(Reserve().state(), pb::RESERVE_STATE_UNFORMATTED);

  s = Format("tank");
  ASSERT_TRUE(s.ok()) << s.error_message();
  r = Reserve();
  EXPECT_EQ(r.state(), pb::RESERVE_STATE_ONLINE);
  EXPECT_EQ(r.name(), "tank");
  EXPECT_EQ(r.ag_bytes(), kMiB);
  EXPECT_EQ(r.luns_size(), 3);
  EXPECT_GT(r.capacity_bytes(), 100 * kMiB);
  EXPECT_GT(r.free_bytes(), 0u);
  EXPECT_EQ(r.uuid().size(), 36u);
  for (const auto& l : r.luns()) {
    EXPECT_TRUE(l.healthy());
    EXPECT_EQ(l.size_bytes(), kLunBytes);
    EXPECT_GT(l.allocation_groups(), 50u);
    EXPECT_EQ(l.url().rfind(kUrlBase, 0), 0u) << l.url();
  }

  s = Format("tank2");
  EXPECT_EQ(s.error_code(), grpc::StatusCode::FAILED_PRECONDITION) << "online already";
  EXPECT_NE(s.error_message().find("force"), std::string::npos) << s.error_message();
  ASSERT_TRUE(CreateVolume("v1").ok());
  s = Format("tank2", kMiB, /*force=*/true);
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_EQ(Reserve().name(), "tank2");
  pb::ListVolumesResponse after;
  ASSERT_TRUE(Call(&pb::Admin::Stub::ListVolumes, pb::ListVolumesRequest(), &after).ok());
  EXPECT_EQ(after.volumes_size(), 0) << "a forced format starts over";

  // The reserve is found again at the next start.
  StopAll();
  StartAll();
  EXPECT_EQ(Reserve().state(), pb::RESERVE_STATE_ONLINE);
  EXPECT_EQ(Reserve().name(), "tank2");
}

TEST_F(AdminTest, VolumesCreateListRefuseAndDelete) {
  StartAll();
  ASSERT_TRUE(Format("tank").ok());
  pb::Volume v;
  ASSERT_TRUE(CreateVolume("v1", 0, &v).ok());
  EXPECT_EQ(v.name(), "v1");
  EXPECT_EQ(v.record_bytes(), fs::kRecordBytesDefault);
  ASSERT_TRUE(CreateVolume("v2", 64 << 10, &v).ok());
  EXPECT_EQ(v.record_bytes(), 64u << 10);

  auto s = CreateVolume("v1");
  EXPECT_EQ(s.error_code(), grpc::StatusCode::ALREADY_EXISTS);
  EXPECT_NE(s.error_message().find("v1"), std::string::npos) << "the message is intact: " << s.error_message();
  for (const std::string& bad :
       std::vector<std::string>{"", ".", "..", "a/b", std::string(256, 'n'), std::string("nul\0x", 5)}) {
    EXPECT_EQ(CreateVolume(bad).error_code(), grpc::StatusCode::INVALID_ARGUMENT) << bad;
  }
  EXPECT_EQ(CreateVolume("v3", 3000).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(CreateVolume("v3", 2 << 20).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(CreateVolume("v3", 2 << 10).error_code(), grpc::StatusCode::INVALID_ARGUMENT);

  pb::ListVolumesResponse list;
  ASSERT_TRUE(Call(&pb::Admin::Stub::ListVolumes, pb::ListVolumesRequest(), &list).ok());
  ASSERT_EQ(list.volumes_size(), 2);
  EXPECT_EQ(list.volumes(0).name(), "v1");
  EXPECT_EQ(list.volumes(1).name(), "v2");

  pb::GetVolumeRequest get;
  get.set_name("nope");
  pb::GetVolumeResponse got;
  EXPECT_EQ(Call(&pb::Admin::Stub::GetVolume, get, &got).error_code(), grpc::StatusCode::NOT_FOUND);

  WriteFile("v2", "f", 10000);
  get.set_name("v2");
  ASSERT_TRUE(Call(&pb::Admin::Stub::GetVolume, get, &got).ok());
  EXPECT_EQ(got.volume().files(), 2u) << "root and the file";
  EXPECT_GT(got.volume().bytes(), 0u);

  s = DeleteVolume("v2", false);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_NE(s.error_message().find("not empty"), std::string::npos) << s.error_message();
  EXPECT_TRUE(Call(&pb::Admin::Stub::GetVolume, get, &got).ok()) << "still there";
  ASSERT_TRUE(DeleteVolume("v2", true).ok());
  EXPECT_EQ(Call(&pb::Admin::Stub::GetVolume, get, &got).error_code(), grpc::StatusCode::NOT_FOUND);
  ASSERT_TRUE(DeleteVolume("v1", false).ok()) << "an empty volume needs no force";
  EXPECT_EQ(DeleteVolume("v1", false).error_code(), grpc::StatusCode::NOT_FOUND);

  auto problems = node_->domain()->Check();
  ASSERT_TRUE(problems.ok());
  EXPECT_TRUE(problems->empty()) << (*problems)[0];
}

TEST_F(AdminTest, RecordSizeChangesOnlyWhileEmpty) {
  StartAll();
  ASSERT_TRUE(Format("tank").ok());
  ASSERT_TRUE(CreateVolume("v").ok());
  pb::Volume v;
  auto s = SetRecordBytes("v", 16 << 10, &v);
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_EQ(v.record_bytes(), 16u << 10);
  EXPECT_EQ(SetRecordBytes("v", 5000).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(SetRecordBytes("v", 0).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(SetRecordBytes("missing", 16 << 10).error_code(), grpc::StatusCode::NOT_FOUND);

  // No field set: nothing changes, the volume comes back.
  pb::UpdateVolumeRequest req;
  req.set_name("v");
  pb::UpdateVolumeResponse resp;
  ASSERT_TRUE(Call(&pb::Admin::Stub::UpdateVolume, req, &resp).ok());
  EXPECT_EQ(resp.volume().record_bytes(), 16u << 10);

  WriteFile("v", "data", 40000);
  s = SetRecordBytes("v", 1 << 20);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_NE(s.error_message().find("record size can only change while it is empty"), std::string::npos)
      << s.error_message();
}

// Snapshots through the admin API: two of a volume, listed oldest first
// with their fields; a duplicate name, bad names and an unknown volume or
// snapshot refused with their codes; one shown, one deleted, the list
// again; the volume's snapshot count and bytes, and their gauges.
TEST_F(AdminTest, SnapshotsCreateListShowAndDelete) {
  StartAll();
  EXPECT_EQ(ListSnapshots("v").error_code(), grpc::StatusCode::UNAVAILABLE) << "no reserve yet";
  ASSERT_TRUE(Format("tank").ok());
  ASSERT_TRUE(CreateVolume("v").ok());
  ASSERT_TRUE(CreateVolume("other").ok());
  WriteFile("v", "f", 100000);
  EXPECT_EQ(GetVolume("v").snapshots(), 0u);

  const int64_t t0 = ::time(nullptr);
  pb::Snapshot mon, tue;
  auto s = CreateSnapshot("v", "monday", &mon);
  ASSERT_TRUE(s.ok()) << s.error_message();
  WriteFile("v", "g", 50000);
  s = CreateSnapshot("v", "tuesday", &tue);
  ASSERT_TRUE(s.ok()) << s.error_message();
  const int64_t t1 = ::time(nullptr);
  EXPECT_EQ(mon.name(), "monday");
  EXPECT_EQ(mon.volume(), "v");
  EXPECT_GT(mon.id(), 0u);
  EXPECT_GT(tue.id(), mon.id()) << "ids come from a counter and are never reused";
  EXPECT_GT(tue.txg(), mon.txg()) << "a change committed in between";
  EXPECT_GE(mon.created_unix(), t0);
  EXPECT_LE(tue.created_unix(), t1);
  EXPECT_LE(mon.created_unix(), tue.created_unix());

  std::vector<pb::Snapshot> list;
  ASSERT_TRUE(ListSnapshots("v", &list).ok());
  ASSERT_EQ(list.size(), 2u);
  EXPECT_EQ(list[0].name(), "monday") << "oldest first";
  EXPECT_EQ(list[1].name(), "tuesday");
  for (size_t i = 0; i < 2; i++) {
    const pb::Snapshot& want = i == 0 ? mon : tue;
    EXPECT_EQ(list[i].id(), want.id());
    EXPECT_EQ(list[i].volume(), "v");
    EXPECT_EQ(list[i].txg(), want.txg());
    EXPECT_EQ(list[i].created_unix(), want.created_unix());
  }
  ASSERT_TRUE(ListSnapshots("other", &list).ok());
  EXPECT_TRUE(list.empty()) << "another volume's snapshots are its own";
  EXPECT_EQ(CreateSnapshot("other", "monday").error_code(), grpc::StatusCode::OK) << "names are per volume";

  // Refusals, with the domain's message intact.
  s = CreateSnapshot("v", "monday");
  EXPECT_EQ(s.error_code(), grpc::StatusCode::ALREADY_EXISTS) << s.error_message();
  EXPECT_NE(s.error_message().find("monday"), std::string::npos) << s.error_message();
  for (const std::string& bad :
       std::vector<std::string>{"", ".", "..", "a/b", std::string(256, 'n'), std::string("nul\0x", 5),
                                std::string("es\x1b") + "c", "tab\there"}) {
    EXPECT_EQ(CreateSnapshot("v", bad).error_code(), grpc::StatusCode::INVALID_ARGUMENT) << bad;
    EXPECT_EQ(GetSnapshot("v", bad).error_code(), grpc::StatusCode::INVALID_ARGUMENT) << bad;
    EXPECT_EQ(DeleteSnapshot("v", bad).error_code(), grpc::StatusCode::INVALID_ARGUMENT) << bad;
  }
  EXPECT_EQ(CreateSnapshot("v", std::string(255, 'n')).error_code(), grpc::StatusCode::OK) << "255 bytes is fine";
  ASSERT_TRUE(DeleteSnapshot("v", std::string(255, 'n')).ok());
  EXPECT_EQ(CreateSnapshot("", "x").error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  s = CreateSnapshot("nope", "x");
  EXPECT_EQ(s.error_code(), grpc::StatusCode::NOT_FOUND) << s.error_message();
  EXPECT_NE(s.error_message().find("nope"), std::string::npos) << s.error_message();
  EXPECT_EQ(ListSnapshots("nope").error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_EQ(GetSnapshot("nope", "monday").error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_EQ(DeleteSnapshot("nope", "monday").error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_EQ(GetSnapshot("v", "wednesday").error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_EQ(DeleteSnapshot("v", "wednesday").error_code(), grpc::StatusCode::NOT_FOUND);
  ASSERT_TRUE(ListSnapshots("v", &list).ok());
  EXPECT_EQ(list.size(), 2u) << "no refusal left a snapshot behind";

  // "g" (born after monday) deleted: only tuesday holds its data now.
  {
    auto d = node_->domain();
    ASSERT_NE(d, nullptr);
    auto vol = d->FindVolume("v");
    ASSERT_TRUE(vol.ok());
    ASSERT_TRUE(d->Unlink(vol->id, fs::kRootIno, "g").ok());
  }
  pb::Snapshot shown;
  ASSERT_TRUE(GetSnapshot("v", "tuesday", &shown).ok());
  EXPECT_EQ(shown.id(), tue.id());
  EXPECT_EQ(shown.name(), "tuesday");
  EXPECT_EQ(shown.volume(), "v");
  EXPECT_EQ(shown.txg(), tue.txg());
  EXPECT_EQ(shown.created_unix(), tue.created_unix());
  EXPECT_GE(shown.frees_bytes(), 50000u) << "g's data";
  ASSERT_TRUE(GetSnapshot("v", "monday", &shown).ok());
  EXPECT_EQ(shown.frees_bytes(), 0u) << "monday never saw g, and f is unchanged";
  pb::Volume v = GetVolume("v");
  EXPECT_EQ(v.snapshots(), 2u);
  EXPECT_GE(v.snapshot_bytes(), 50000u);
  {
    Metrics metrics;
    AddNodeCollectors(&metrics, node_.get(), nullptr);
    const std::string text = metrics.Render();
    // The sample's value, or -1 when the series is missing.
    auto sample = [&text](const std::string& series) {
      const size_t at = text.find("\n" + series + " ");
      return at == std::string::npos ? -1.0 : std::strtod(text.c_str() + at + series.size() + 2, nullptr);
    };
    EXPECT_EQ(sample("nasgw_volume_snapshots{volume=\"v\"}"), 2.0) << text;
    EXPECT_EQ(sample("nasgw_volume_snapshots{volume=\"other\"}"), 1.0) << text;
    EXPECT_EQ(sample("nasgw_volume_snapshot_bytes{volume=\"v\"}"), static_cast<double>(v.snapshot_bytes())) << text;
    EXPECT_EQ(sample("nasgw_volume_snapshot_bytes{volume=\"other\"}"), 0.0) << text;
  }

  // Deleting one: it comes back, and the list no longer has it.
  pb::Snapshot gone;
  s = DeleteSnapshot("v", "monday", &gone);
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_EQ(gone.name(), "monday");
  EXPECT_EQ(gone.id(), mon.id());
  EXPECT_EQ(gone.volume(), "v");
  ASSERT_TRUE(ListSnapshots("v", &list).ok());
  ASSERT_EQ(list.size(), 1u);
  EXPECT_EQ(list[0].name(), "tuesday");
  EXPECT_EQ(list[0].id(), tue.id());
  EXPECT_EQ(GetSnapshot("v", "monday").error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_EQ(DeleteSnapshot("v", "monday").error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_EQ(GetVolume("v").snapshots(), 1u);
  // The last one gives g's data back.
  s = DeleteSnapshot("v", "tuesday", &gone);
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_GE(gone.frees_bytes(), 50000u) << "what the deletion gave back";
  ASSERT_TRUE(ListSnapshots("v", &list).ok());
  EXPECT_TRUE(list.empty());
  v = GetVolume("v");
  EXPECT_EQ(v.snapshots(), 0u);
  EXPECT_EQ(v.snapshot_bytes(), 0u);
  // A name may be used again; its id is new.
  pb::Snapshot again;
  ASSERT_TRUE(CreateSnapshot("v", "monday", &again).ok());
  EXPECT_GT(again.id(), tue.id());

  auto problems = node_->domain()->Check();
  ASSERT_TRUE(problems.ok());
  EXPECT_TRUE(problems->empty()) << (*problems)[0];
}

// CreateSnapshot first flushes the write-back cache (the head service's):
// writes the cache answered before the create, unstable (in memory only)
// and stable (in the intent log), are in the snapshot; writes after it are
// not. A flush that fails takes no snapshot; an unknown volume flushes
// nothing.
TEST_F(AdminTest, SnapshotHoldsWhatTheCacheAnsweredBeforeIt) {
  std::shared_ptr<cache::DataCache> cache;
  int flushes = 0;
  nasgw::Status flush_fails;
  cache_flush_ = [&]() -> nasgw::Status {
    flushes++;
    if (!flush_fails.ok()) return flush_fails;
    return cache->FlushAll();
  };
  StartAll();
  ASSERT_TRUE(Format("tank").ok());
  ASSERT_TRUE(CreateVolume("v").ok());
  auto d = node_->domain();
  ASSERT_NE(d, nullptr);
  cache::DataCacheOptions co;
  co.flush_after_ms = limits::kCacheFlushAfterMsMax;  // the flusher leaves it alone: only the create flushes
  cache = std::make_shared<cache::DataCache>(d, co);
  auto vol = d->FindVolume("v");
  ASSERT_TRUE(vol.ok());
  auto a = d->Create(vol->id, fs::kRootIno, "unstable", fs::FileType::kRegular, 0644, 0, 0);
  auto b = d->Create(vol->id, fs::kRootIno, "stable", fs::FileType::kRegular, 0644, 0, 0);
  ASSERT_TRUE(a.ok() && b.ok());
  const std::string before_a(40000, 'a'), before_b(3000, 'b');
  bool stable = true;
  ASSERT_TRUE(cache->Write(vol->id, *a, 0, before_a.data(), before_a.size(), /*stable=*/false, &stable).ok());
  EXPECT_FALSE(stable) << "answered from memory";
  ASSERT_TRUE(cache->Write(vol->id, *b, 0, before_b.data(), before_b.size(), /*stable=*/true, &stable).ok());
  EXPECT_TRUE(stable);
  std::string buf(64 << 10, '\0');
  auto n = d->Read(vol->id, a->ino, 0, buf.size(), buf.data());
  ASSERT_TRUE(n.ok());
  ASSERT_EQ(*n, 0u) << "still only in the cache: the test would prove nothing";

  // An unknown volume is refused before any flush.
  EXPECT_EQ(CreateSnapshot("nope", "s").error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_EQ(flushes, 0);

  pb::Snapshot snap;
  auto s = CreateSnapshot("v", "s1", &snap);
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_EQ(flushes, 1);
  EXPECT_EQ(cache->stats().dirty_bytes, 0u);

  n = d->Read(vol->id, a->ino, 0, buf.size(), buf.data(), snap.id());
  ASSERT_TRUE(n.ok()) << n.status().ToString();
  EXPECT_TRUE(std::string(buf.data(), *n) == before_a)
      << "the unstable write answered before the create: " << Summary(std::string(buf.data(), *n));
  n = d->Read(vol->id, b->ino, 0, buf.size(), buf.data(), snap.id());
  ASSERT_TRUE(n.ok()) << n.status().ToString();
  EXPECT_TRUE(std::string(buf.data(), *n) == before_b)
      << "the stable (logged) write answered before the create: " << Summary(std::string(buf.data(), *n));

  // Written (and flushed) after the create: the live volume has it, the
  // snapshot still what it had.
  const std::string after(40000, 'A');
  ASSERT_TRUE(cache->Write(vol->id, *a, 0, after.data(), after.size(), false, &stable).ok());
  ASSERT_TRUE(cache->Flush(vol->id, a->ino).ok());
  n = d->Read(vol->id, a->ino, 0, buf.size(), buf.data());
  ASSERT_TRUE(n.ok());
  EXPECT_TRUE(std::string(buf.data(), *n) == after) << "the live volume: " << Summary(std::string(buf.data(), *n));
  n = d->Read(vol->id, a->ino, 0, buf.size(), buf.data(), snap.id());
  ASSERT_TRUE(n.ok()) << n.status().ToString();
  EXPECT_TRUE(std::string(buf.data(), *n) == before_a)
      << "the snapshot after the live file was overwritten: " << Summary(std::string(buf.data(), *n));

  // A failed flush: no snapshot, the flush's code and why.
  flush_fails = nasgw::Status::NoSpace("no space for the flush");
  s = CreateSnapshot("v", "s2");
  EXPECT_EQ(s.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << s.error_message();
  EXPECT_NE(s.error_message().find("write-back cache"), std::string::npos) << s.error_message();
  EXPECT_NE(s.error_message().find("no space for the flush"), std::string::npos) << s.error_message();
  EXPECT_EQ(GetSnapshot("v", "s2").error_code(), grpc::StatusCode::NOT_FOUND);
}

// `nasgw snapshot ...`: tables and --json, exit codes; `volume list` and
// `volume show` count the snapshots.
TEST_F(AdminTest, CliSnapshots) {
  StartAll();
  ASSERT_TRUE(Format("tank").ok());
  ASSERT_TRUE(CreateVolume("v").ok());
  WriteFile("v", "f", 10000);
  CliResult r = Cli({"snapshot", "create", "v", "first"});
  ASSERT_EQ(r.exit_code, 0) << Describe(r);
  EXPECT_NE(r.out.find("first"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("txg"), std::string::npos) << r.out;
  r = Cli({"--json", "snapshot", "create", "v", "second"});
  ASSERT_EQ(r.exit_code, 0) << Describe(r);
  json j = json::parse(r.out);
  EXPECT_EQ(j["snapshot"]["name"], "second") << r.out;
  EXPECT_EQ(j["snapshot"]["volume"], "v") << r.out;
  for (const char* k : {"id", "txg", "created_unix", "frees_bytes", "frees_meta_bytes"}) {
    EXPECT_TRUE(j["snapshot"][k].is_number()) << k << ": " << r.out;
  }
  const uint64_t second_id = j["snapshot"]["id"];

  r = Cli({"snapshot", "list", "v"});
  ASSERT_EQ(r.exit_code, 0) << Describe(r);
  std::istringstream lines(r.out);
  std::string header, row1, row2;
  std::getline(lines, header);
  std::getline(lines, row1);
  std::getline(lines, row2);
  std::vector<std::string> cols;
  {
    std::istringstream h(header);
    for (std::string w; h >> w;) cols.push_back(w);
  }
  EXPECT_EQ(cols, (std::vector<std::string>{"NAME", "ID", "CREATED", "TXG", "FREES"})) << r.out;
  EXPECT_EQ(row1.rfind("first", 0), 0u) << "oldest first: " << r.out;
  EXPECT_EQ(row2.rfind("second", 0), 0u) << r.out;
  r = Cli({"--json", "snapshot", "list", "v"});
  ASSERT_EQ(r.exit_code, 0) << Describe(r);
  j = json::parse(r.out);
  ASSERT_EQ(j["snapshots"].size(), 2u) << r.out;
  EXPECT_EQ(j["snapshots"][0]["name"], "first");
  EXPECT_EQ(j["snapshots"][1]["id"], second_id);

  r = Cli({"snapshot", "show", "v", "first"});
  ASSERT_EQ(r.exit_code, 0) << Describe(r);
  EXPECT_NE(r.out.find("created"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("frees"), std::string::npos) << r.out;
  r = Cli({"--json", "snapshot", "show", "v", "second"});
  ASSERT_EQ(r.exit_code, 0) << Describe(r);
  EXPECT_EQ(json::parse(r.out)["snapshot"]["id"], second_id) << r.out;

  // The volume counts them.
  r = Cli({"--json", "volume", "show", "v"});
  ASSERT_EQ(r.exit_code, 0) << Describe(r);
  j = json::parse(r.out);
  EXPECT_EQ(j["volume"]["snapshots"], 2) << r.out;
  EXPECT_TRUE(j["volume"]["snapshot_bytes"].is_number()) << r.out;
  r = Cli({"volume", "show", "v"});
  ASSERT_EQ(r.exit_code, 0) << Describe(r);
  EXPECT_NE(r.out.find("snapshots      2"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("snapshot used"), std::string::npos) << r.out;
  r = Cli({"volume", "list"});
  ASSERT_EQ(r.exit_code, 0) << Describe(r);
  EXPECT_NE(r.out.find("SNAPSHOTS"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("SNAP-USED"), std::string::npos) << r.out;
  r = Cli({"--json", "volume", "list"});
  EXPECT_EQ(json::parse(r.out)["volumes"][0]["snapshots"], 2) << r.out;

  // Exit codes: exists 5, not found 4, usage 2.
  r = Cli({"snapshot", "create", "v", "first"});
  EXPECT_EQ(r.exit_code, 5) << Describe(r);
  r = Cli({"--json", "snapshot", "create", "v", "first"});
  EXPECT_EQ(json::parse(r.out)["error"]["code"], "ALREADY_EXISTS") << r.out;
  r = Cli({"snapshot", "create", "nope", "x"});
  EXPECT_EQ(r.exit_code, 4) << Describe(r);
  r = Cli({"snapshot", "list", "nope"});
  EXPECT_EQ(r.exit_code, 4) << Describe(r);
  r = Cli({"snapshot", "show", "v", "nope"});
  EXPECT_EQ(r.exit_code, 4) << Describe(r);
  r = Cli({"snapshot", "delete", "v", "nope"});
  EXPECT_EQ(r.exit_code, 4) << Describe(r);
  r = Cli({"snapshot", "create", "v", "a/b"});
  EXPECT_EQ(r.exit_code, 2) << "nasgwd refuses it: " << Describe(r);
  r = Cli({"snapshot", "create", "v", "evil\x1b[2J"});
  EXPECT_EQ(r.exit_code, 2) << Describe(r);
  EXPECT_NE(r.err.find("snapshot name 'evil\\x1b[2J' holds a control character"), std::string::npos) << Describe(r);
  for (const auto& bad : std::vector<std::vector<std::string>>{{"snapshot"},
                                                               {"snapshot", "frobnicate"},
                                                               {"snapshot", "list"},
                                                               {"snapshot", "create", "v"},
                                                               {"snapshot", "create", "v", "x", "y"},
                                                               {"snapshot", "delete", "v", "x", "--force"}}) {
    r = Cli(bad);
    EXPECT_EQ(r.exit_code, 2) << Describe(r);
  }
  r = Cli({"snapshot", "--help"});
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_NE(r.out.find("snapshot delete VOLUME NAME"), std::string::npos) << r.out;

  r = Cli({"snapshot", "delete", "v", "first"});
  ASSERT_EQ(r.exit_code, 0) << Describe(r);
  EXPECT_NE(r.out.find("deleted snapshot first of volume v"), std::string::npos) << r.out;
  r = Cli({"--json", "snapshot", "delete", "v", "second"});
  ASSERT_EQ(r.exit_code, 0) << Describe(r);
  j = json::parse(r.out);
  EXPECT_EQ(j["deleted"]["snapshot"]["name"], "second") << r.out;
  EXPECT_EQ(j["deleted"]["snapshot"]["id"], second_id) << r.out;
  r = Cli({"--json", "snapshot", "list", "v"});
  ASSERT_EQ(r.exit_code, 0) << Describe(r);
  EXPECT_EQ(json::parse(r.out)["snapshots"].size(), 0u) << r.out;
}

// RollbackSnapshot through gRPC: the volume reads as at the newest
// snapshot again (contents, a file removed since back, a file made since
// gone, its handle stale), the snapshot stays, the counts come back and
// are logged; the refusals: unknown volume or snapshot, a snapshot that is
// not the newest (naming the newer one), bad names.
TEST_F(AdminTest, RollbackGoesBackToTheNewestSnapshot) {
  StartAll();
  KeepLog();
  ASSERT_TRUE(Format("tank").ok());
  ASSERT_TRUE(CreateVolume("v").ok());
  ASSERT_TRUE(CreateVolume("other").ok());
  auto d = node_->domain();
  ASSERT_NE(d, nullptr);
  auto vol = d->FindVolume("v");
  auto other = d->FindVolume("other");
  ASSERT_TRUE(vol.ok() && other.ok());
  auto f = d->Create(vol->id, fs::kRootIno, "f", fs::FileType::kRegular, 0644, 0, 0);
  auto h = d->Create(vol->id, fs::kRootIno, "h", fs::FileType::kRegular, 0644, 0, 0);
  auto o = d->Create(other->id, fs::kRootIno, "o", fs::FileType::kRegular, 0644, 0, 0);
  ASSERT_TRUE(f.ok() && h.ok() && o.ok());
  const std::string before(20000, 'a'), kept(5000, 'h');
  ASSERT_TRUE(d->Write(vol->id, f->ino, 0, before.data(), before.size()).ok());
  ASSERT_TRUE(d->Write(vol->id, h->ino, 0, kept.data(), kept.size()).ok());
  ASSERT_TRUE(d->Write(other->id, o->ino, 0, kept.data(), kept.size()).ok());
  pb::Snapshot mon;
  ASSERT_TRUE(CreateSnapshot("v", "monday", &mon).ok());
  ASSERT_TRUE(CreateSnapshot("other", "monday").ok());

  // Since: f overwritten and grown, h removed, g made; the other volume changes too.
  const std::string after(300000, 'B');
  ASSERT_TRUE(d->Write(vol->id, f->ino, 0, after.data(), after.size()).ok());
  ASSERT_TRUE(d->Unlink(vol->id, fs::kRootIno, "h").ok());
  auto g = d->Create(vol->id, fs::kRootIno, "g", fs::FileType::kRegular, 0644, 0, 0);
  ASSERT_TRUE(g.ok());
  ASSERT_TRUE(d->Write(vol->id, g->ino, 0, after.data(), after.size()).ok());
  const std::string other_after(7000, 'O');
  ASSERT_TRUE(d->Write(other->id, o->ino, 0, other_after.data(), other_after.size()).ok());

  pb::RollbackSnapshotResponse r;
  auto s = Rollback("v", "monday", &r);
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_EQ(r.snapshot().name(), "monday");
  EXPECT_EQ(r.snapshot().volume(), "v");
  EXPECT_EQ(r.snapshot().id(), mon.id());
  EXPECT_EQ(r.snapshot().txg(), mon.txg());
  EXPECT_GT(r.removed_keys() + r.restored_keys(), 0u);
  EXPECT_GE(r.freed_bytes(), 2 * after.size() - before.size()) << "what was written since";

  EXPECT_TRUE(ReadAll(vol->id, f->ino) == before) << Summary(ReadAll(vol->id, f->ino));
  auto fa = d->GetAttr(vol->id, f->ino);
  ASSERT_TRUE(fa.ok());
  EXPECT_EQ(fa->size, before.size());
  auto back = d->Lookup(vol->id, fs::kRootIno, "h");
  ASSERT_TRUE(back.ok()) << "removed since the snapshot: back";
  EXPECT_EQ(back->ino, h->ino);
  EXPECT_TRUE(ReadAll(vol->id, h->ino) == kept);
  EXPECT_EQ(d->Lookup(vol->id, fs::kRootIno, "g").status().code(), Code::kNotFound) << "made since the snapshot";
  EXPECT_EQ(d->GetAttr(vol->id, g->ino).status().code(), Code::kNotFound);
  EXPECT_TRUE(ReadAll(other->id, o->ino) == other_after) << "another volume is not rolled back";
  EXPECT_EQ(SnapshotNames("v"), std::vector<std::string>{"monday"}) << "the snapshot stays";
  EXPECT_EQ(
      Logged({"snapshot rollback", "volume=v", "snapshot=monday", "removed_keys=", "restored_keys=", "freed_bytes="})
          .size(),
      1u);

  // Again, with nothing changed since: fine, and nothing to free.
  s = Rollback("v", "monday", &r);
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_EQ(r.freed_bytes(), 0u);
  EXPECT_TRUE(ReadAll(vol->id, f->ino) == before);

  // Refusals, with the domain's message intact, and nothing rolled back.
  ASSERT_TRUE(d->Write(vol->id, f->ino, 0, after.data(), after.size()).ok());
  s = Rollback("nope", "monday");
  EXPECT_EQ(s.error_code(), grpc::StatusCode::NOT_FOUND) << s.error_message();
  EXPECT_NE(s.error_message().find("nope"), std::string::npos) << s.error_message();
  s = Rollback("v", "sunday");
  EXPECT_EQ(s.error_code(), grpc::StatusCode::NOT_FOUND) << s.error_message();
  EXPECT_NE(s.error_message().find("sunday"), std::string::npos) << s.error_message();
  ASSERT_TRUE(CreateSnapshot("v", "tuesday").ok());
  s = Rollback("v", "monday");
  EXPECT_EQ(s.error_code(), grpc::StatusCode::FAILED_PRECONDITION) << s.error_message();
  EXPECT_NE(s.error_message().find("tuesday"), std::string::npos) << "names the newer one: " << s.error_message();
  for (const std::string& bad : std::vector<std::string>{"", ".", "..", "a/b", std::string(256, 'n'),
                                                         std::string("nul\0x", 5), std::string("es\x1b") + "c"}) {
    EXPECT_EQ(Rollback("v", bad).error_code(), grpc::StatusCode::INVALID_ARGUMENT) << bad;
    EXPECT_EQ(Rollback(bad, "monday").error_code(), grpc::StatusCode::INVALID_ARGUMENT) << bad;
  }
  EXPECT_TRUE(ReadAll(vol->id, f->ino) == after) << "no refusal rolled anything back";
  // To the newest: fine.
  ASSERT_TRUE(Rollback("v", "tuesday").ok());
  EXPECT_TRUE(ReadAll(vol->id, f->ino) == after);
  EXPECT_EQ(SnapshotNames("v"), (std::vector<std::string>{"monday", "tuesday"}));

  auto problems = node_->domain()->Check();
  ASSERT_TRUE(problems.ok());
  EXPECT_TRUE(problems->empty()) << (*problems)[0];
}

// RollbackSnapshot and the write-back cache (the head service's): the
// cache is flushed first, so writes it answered before the rollback are
// rolled back too; its clean data of the volume is dropped after, so a
// read through it returns the snapshot's bytes, not those it held; a
// write that came in after the flush (racing the rollback) stays dirty and
// lands after it. A failed flush rolls nothing back; an unknown volume or
// snapshot flushes nothing.
TEST_F(AdminTest, RollbackFlushesTheCacheFirstAndDropsItsDataAfter) {
  std::shared_ptr<cache::DataCache> cache;
  int flushes = 0, forgets = 0;
  nasgw::Status flush_fails;
  std::function<void()> after_flush;  // a write racing the rollback
  cache_flush_ = [&]() -> nasgw::Status {
    flushes++;
    if (!flush_fails.ok()) return flush_fails;
    nasgw::Status s = cache->FlushAll();
    if (after_flush) after_flush();
    return s;
  };
  cache_forget_ = [&](uint32_t vol) -> uint64_t {
    forgets++;
    return cache->ForgetVolume(vol);
  };
  StartAll();
  ASSERT_TRUE(Format("tank").ok());
  ASSERT_TRUE(CreateVolume("v").ok());
  auto d = node_->domain();
  ASSERT_NE(d, nullptr);
  cache::DataCacheOptions co;
  co.flush_after_ms = limits::kCacheFlushAfterMsMax;  // the flusher leaves it alone: only the admin calls flush
  cache = std::make_shared<cache::DataCache>(d, co);
  auto vol = d->FindVolume("v");
  ASSERT_TRUE(vol.ok());
  auto a = d->Create(vol->id, fs::kRootIno, "a", fs::FileType::kRegular, 0644, 0, 0);
  ASSERT_TRUE(a.ok());
  const std::string before(40000, 'a');
  bool stable = true;
  ASSERT_TRUE(cache->Write(vol->id, *a, 0, before.data(), before.size(), /*stable=*/false, &stable).ok());
  ASSERT_TRUE(CreateSnapshot("v", "s1").ok());
  EXPECT_EQ(flushes, 1);
  // Reads through the cache, whose clean blocks hold what a flush put there.
  auto read = [&](const fs::Attr& at) {
    auto shown = cache->Shown(vol->id, [&] { return d->GetAttr(vol->id, at.ino); });
    EXPECT_TRUE(shown.ok()) << shown.status().ToString();
    if (!shown.ok()) return std::string();
    std::string buf(1 << 20, '\0');
    uint64_t size = 0;
    auto n = cache->Read(vol->id, *shown, 0, buf.size(), buf.data(), &size);
    EXPECT_TRUE(n.ok()) << n.status().ToString();
    buf.resize(n.ok() ? *n : 0);
    return buf;
  };
  EXPECT_TRUE(read(*a) == before);

  // Answered from memory after the snapshot: overwritten and grown, and a new file.
  const std::string after(60000, 'A');
  ASSERT_TRUE(cache->Write(vol->id, *a, 0, after.data(), after.size(), false, &stable).ok());
  EXPECT_FALSE(stable);
  auto n = d->Create(vol->id, fs::kRootIno, "new", fs::FileType::kRegular, 0644, 0, 0);
  ASSERT_TRUE(n.ok());
  ASSERT_TRUE(cache->Write(vol->id, *n, 0, after.data(), after.size(), false, &stable).ok());
  EXPECT_TRUE(read(*a) == after);

  // Refused before any flush: an unknown volume or snapshot.
  EXPECT_EQ(Rollback("nope", "s1").error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_EQ(Rollback("v", "s9").error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_EQ(flushes, 1);
  EXPECT_EQ(forgets, 0);
  // A failed flush: nothing rolled back, the flush's code and why.
  flush_fails = nasgw::Status::NoSpace("no space for the flush");
  auto s = Rollback("v", "s1");
  EXPECT_EQ(s.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << s.error_message();
  EXPECT_NE(s.error_message().find("write-back cache"), std::string::npos) << s.error_message();
  EXPECT_NE(s.error_message().find("no space for the flush"), std::string::npos) << s.error_message();
  EXPECT_EQ(forgets, 0);
  EXPECT_TRUE(read(*a) == after) << "not rolled back";
  EXPECT_TRUE(d->Lookup(vol->id, fs::kRootIno, "new").ok());
  flush_fails = nasgw::Status();

  pb::RollbackSnapshotResponse r;
  s = Rollback("v", "s1", &r);
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_EQ(flushes, 3);
  EXPECT_EQ(forgets, 1);
  EXPECT_GE(r.freed_bytes(), 2 * after.size() - before.size()) << "the cached writes were flushed, then undone";
  EXPECT_EQ(cache->stats().dirty_bytes, 0u);
  EXPECT_TRUE(read(*a) == before) << "through the cache: " << Summary(read(*a));
  EXPECT_TRUE(ReadAll(vol->id, a->ino) == before);
  EXPECT_EQ(d->Lookup(vol->id, fs::kRootIno, "new").status().code(), Code::kNotFound);
  EXPECT_EQ(d->GetAttr(vol->id, n->ino).status().code(), Code::kNotFound);

  // A write that arrives after the flush, while the rollback runs: kept
  // dirty, and flushed over the rolled-back file.
  ASSERT_TRUE(CreateSnapshot("v", "s2").ok());
  const std::string racing(1000, 'R');
  after_flush = [&] {
    bool st = true;
    EXPECT_TRUE(cache->Write(vol->id, *a, 0, racing.data(), racing.size(), false, &st).ok());
  };
  ASSERT_TRUE(cache->Write(vol->id, *a, 0, after.data(), after.size(), false, &stable).ok());
  s = Rollback("v", "s2");
  ASSERT_TRUE(s.ok()) << s.error_message();
  after_flush = nullptr;
  EXPECT_EQ(cache->stats().dirty_bytes, racing.size()) << "the racing write stays dirty";
  const std::string want = racing + before.substr(racing.size());
  EXPECT_TRUE(read(*a) == want) << Summary(read(*a));
  ASSERT_TRUE(cache->Flush(vol->id, a->ino).ok());
  EXPECT_TRUE(ReadAll(vol->id, a->ino) == want) << Summary(ReadAll(vol->id, a->ino));

  auto problems = node_->domain()->Check();
  ASSERT_TRUE(problems.ok());
  EXPECT_TRUE(problems->empty()) << (*problems)[0];
}

// `nasgw snapshot rollback`: its line and --json, exit codes.
TEST_F(AdminTest, CliSnapshotRollback) {
  StartAll();
  ASSERT_TRUE(Format("tank").ok());
  ASSERT_TRUE(CreateVolume("v").ok());
  WriteFile("v", "f", 10000);
  ASSERT_EQ(Cli({"snapshot", "create", "v", "first"}).exit_code, 0);
  WriteFile("v", "g", 50000);
  CliResult r = Cli({"snapshot", "rollback", "v", "first"});
  ASSERT_EQ(r.exit_code, 0) << Describe(r);
  EXPECT_EQ(r.out.rfind("volume v rolled back to snapshot first: ", 0), 0u) << r.out;
  EXPECT_NE(r.out.find(" keys removed, "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find(" freed"), std::string::npos) << r.out;
  EXPECT_EQ(node_->domain()->Lookup(GetVolume("v").id(), fs::kRootIno, "g").status().code(), Code::kNotFound);

  WriteFile("v", "g", 50000);
  r = Cli({"--json", "snapshot", "rollback", "v", "first"});
  ASSERT_EQ(r.exit_code, 0) << Describe(r);
  json j = json::parse(r.out);
  EXPECT_EQ(j["rolled_back"]["snapshot"]["name"], "first") << r.out;
  EXPECT_EQ(j["rolled_back"]["snapshot"]["volume"], "v") << r.out;
  for (const char* k : {"removed_keys", "restored_keys", "freed_bytes", "orphans"}) {
    EXPECT_TRUE(j["rolled_back"][k].is_number()) << k << ": " << r.out;
  }
  EXPECT_GE(j["rolled_back"]["freed_bytes"].get<uint64_t>(), 50000u) << r.out;

  // Exit codes: not found 4, refused 6 (a newer snapshot, named), usage 2.
  r = Cli({"snapshot", "rollback", "nope", "first"});
  EXPECT_EQ(r.exit_code, 4) << Describe(r);
  r = Cli({"snapshot", "rollback", "v", "nope"});
  EXPECT_EQ(r.exit_code, 4) << Describe(r);
  ASSERT_EQ(Cli({"snapshot", "create", "v", "second"}).exit_code, 0);
  r = Cli({"snapshot", "rollback", "v", "first"});
  EXPECT_EQ(r.exit_code, 6) << Describe(r);
  EXPECT_NE(r.err.find("second"), std::string::npos) << Describe(r);
  r = Cli({"--json", "snapshot", "rollback", "v", "first"});
  EXPECT_EQ(json::parse(r.out)["error"]["code"], "FAILED_PRECONDITION") << r.out;
  for (const auto& bad : std::vector<std::vector<std::string>>{{"snapshot", "rollback", "v"},
                                                               {"snapshot", "rollback", "v", "x", "y"},
                                                               {"snapshot", "rollback", "v", "second", "--force"}}) {
    r = Cli(bad);
    EXPECT_EQ(r.exit_code, 2) << Describe(r);
  }
  r = Cli({"snapshot", "rollback", "v", "evil\x1b[2J"});
  EXPECT_EQ(r.exit_code, 2) << Describe(r);
  r = Cli({"snapshot", "--help"});
  EXPECT_NE(r.out.find("snapshot rollback VOLUME NAME"), std::string::npos) << r.out;
  r = Cli({"--help"});
  EXPECT_NE(r.out.find("snapshot rollback VOLUME NAME"), std::string::npos) << r.out;
  r = Cli({"snapshot", "rollback", "v", "second"});
  EXPECT_EQ(r.exit_code, 0) << Describe(r);
}

// CloneSnapshot through gRPC: the clone is a new volume that reads as the
// snapshot (not as the origin since), with its origin in GetVolume and
// ListVolumes and a volume's gauges; writes to it leave the origin and the
// snapshot alone, and the origin's leave it alone; nothing is flushed; the
// snapshot cannot be deleted while the clone exists (FAILED_PRECONDITION
// naming it), and can once the clone is deleted as any volume. Refusals:
// unknown volume or snapshot, a name taken, bad names.
TEST_F(AdminTest, CloneSnapshotMakesAWritableVolumeThatSharesTheSnapshot) {
  int flushes = 0;
  cache_flush_ = [&]() -> nasgw::Status {
    flushes++;
    return nasgw::Status();
  };
  StartAll();
  KeepLog();
  ASSERT_TRUE(Format("tank").ok());
  ASSERT_TRUE(CreateVolume("v").ok());
  auto d = node_->domain();
  ASSERT_NE(d, nullptr);
  auto vol = d->FindVolume("v");
  ASSERT_TRUE(vol.ok());
  auto f = d->Create(vol->id, fs::kRootIno, "f", fs::FileType::kRegular, 0644, 0, 0);
  ASSERT_TRUE(f.ok());
  const std::string before(200000, 'a');
  ASSERT_TRUE(d->Write(vol->id, f->ino, 0, before.data(), before.size()).ok());
  pb::Snapshot s1;
  ASSERT_TRUE(CreateSnapshot("v", "s1", &s1).ok());
  EXPECT_EQ(flushes, 1);
  // The origin changes after the snapshot: the clone must not see it.
  const std::string after(300000, 'B');
  ASSERT_TRUE(d->Write(vol->id, f->ino, 0, after.data(), after.size()).ok());
  auto later = d->Create(vol->id, fs::kRootIno, "later", fs::FileType::kRegular, 0644, 0, 0);
  ASSERT_TRUE(later.ok());

  pb::Volume c;
  auto s = Clone("v", "s1", "c", &c);
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_EQ(flushes, 1) << "a clone flushes nothing";
  EXPECT_EQ(c.name(), "c");
  EXPECT_NE(c.id(), vol->id);
  EXPECT_EQ(c.origin_volume(), "v");
  EXPECT_EQ(c.origin_snapshot(), "s1");
  EXPECT_EQ(c.files(), 2u) << "the root and f, as at the snapshot";
  EXPECT_EQ(c.snapshots(), 0u);
  EXPECT_EQ(c.record_bytes(), GetVolume("v").record_bytes());
  EXPECT_TRUE(ReadAll(c.id(), f->ino) == before) << Summary(ReadAll(c.id(), f->ino));
  EXPECT_EQ(d->Lookup(c.id(), fs::kRootIno, "later").status().code(), Code::kNotFound) << "made after s1";
  pb::Volume shown = GetVolume("c");
  EXPECT_EQ(shown.origin_volume(), "v");
  EXPECT_EQ(shown.origin_snapshot(), "s1");
  shown = GetVolume("v");
  EXPECT_EQ(shown.origin_volume(), "") << "not a clone";
  EXPECT_EQ(shown.origin_snapshot(), "");
  {
    pb::ListVolumesResponse r;
    ASSERT_TRUE(Call(&pb::Admin::Stub::ListVolumes, pb::ListVolumesRequest(), &r).ok());
    std::map<std::string, std::string> origins;
    for (const auto& v : r.volumes()) origins[v.name()] = v.origin_volume() + "@" + v.origin_snapshot();
    EXPECT_EQ(origins, (std::map<std::string, std::string>{{"c", "v@s1"}, {"v", "@"}}));
  }
  EXPECT_EQ(Logged({"INFO admin clone snapshot", "volume=v", "snapshot=s1", "clone=c"}).size(), 1u);
  EXPECT_EQ(Logged({"INFO snapshots snapshot clone", "volume=v", "snapshot=s1", "clone=c", "files=2"}).size(), 1u);
  {
    // A clone has a volume's gauges, as any volume.
    Metrics metrics;
    AddNodeCollectors(&metrics, node_.get(), nullptr);
    const std::string text = metrics.Render();
    auto sample = [&text](const std::string& series) {
      const size_t at = text.find("\n" + series + " ");
      return at == std::string::npos ? -1.0 : std::strtod(text.c_str() + at + series.size() + 2, nullptr);
    };
    EXPECT_EQ(sample("nasgw_volume_files{volume=\"c\"}"), 2.0) << text;
    EXPECT_EQ(sample("nasgw_volume_used_bytes{volume=\"c\"}"), static_cast<double>(c.bytes())) << text;
    EXPECT_EQ(sample("nasgw_volume_snapshots{volume=\"c\"}"), 0.0) << text;
  }

  // Apart: the clone's writes reach neither the origin nor the snapshot.
  const std::string mine(5000, 'C');
  ASSERT_TRUE(d->Write(c.id(), f->ino, 4096, mine.data(), mine.size()).ok());
  auto made = d->Create(c.id(), fs::kRootIno, "made", fs::FileType::kRegular, 0644, 0, 0);
  ASSERT_TRUE(made.ok());
  ASSERT_TRUE(d->Write(c.id(), made->ino, 0, mine.data(), mine.size()).ok());
  std::string want = before;
  want.replace(4096, mine.size(), mine);
  EXPECT_TRUE(ReadAll(c.id(), f->ino) == want) << Summary(ReadAll(c.id(), f->ino));
  EXPECT_TRUE(ReadAll(vol->id, f->ino) == after) << "the origin unchanged";
  EXPECT_TRUE(ReadAll(vol->id, f->ino, s1.id()) == before) << "the snapshot unchanged";
  EXPECT_EQ(d->Lookup(vol->id, fs::kRootIno, "made").status().code(), Code::kNotFound);
  EXPECT_EQ(GetVolume("c").files(), 3u);

  // The snapshot stays while the clone needs it; the clone is named.
  s = DeleteSnapshot("v", "s1");
  EXPECT_EQ(s.error_code(), grpc::StatusCode::FAILED_PRECONDITION) << s.error_message();
  EXPECT_NE(s.error_message().find("'c'"), std::string::npos) << s.error_message();
  EXPECT_EQ(SnapshotNames("v"), std::vector<std::string>{"s1"});

  // Refusals, with nothing made.
  s = Clone("nope", "s1", "x");
  EXPECT_EQ(s.error_code(), grpc::StatusCode::NOT_FOUND) << s.error_message();
  EXPECT_NE(s.error_message().find("nope"), std::string::npos) << s.error_message();
  s = Clone("v", "sunday", "x");
  EXPECT_EQ(s.error_code(), grpc::StatusCode::NOT_FOUND) << s.error_message();
  EXPECT_NE(s.error_message().find("sunday"), std::string::npos) << s.error_message();
  s = Clone("v", "s1", "c");
  EXPECT_EQ(s.error_code(), grpc::StatusCode::ALREADY_EXISTS) << s.error_message();
  s = Clone("v", "s1", "v");
  EXPECT_EQ(s.error_code(), grpc::StatusCode::ALREADY_EXISTS) << s.error_message();
  for (const std::string& bad : std::vector<std::string>{"", ".", "..", "a/b", std::string(256, 'n'),
                                                         std::string("nul\0x", 5), std::string("es\x1b") + "c"}) {
    EXPECT_EQ(Clone("v", "s1", bad).error_code(), grpc::StatusCode::INVALID_ARGUMENT) << bad;
    EXPECT_EQ(Clone("v", bad, "x").error_code(), grpc::StatusCode::INVALID_ARGUMENT) << bad;
    EXPECT_EQ(Clone(bad, "s1", "x").error_code(), grpc::StatusCode::INVALID_ARGUMENT) << bad;
  }
  s = Clone("v", "s1",
            "es\x1b"
            "c");
  EXPECT_NE(s.error_message().find("volume name"), std::string::npos) << s.error_message();
  {
    pb::ListVolumesResponse r;
    ASSERT_TRUE(Call(&pb::Admin::Stub::ListVolumes, pb::ListVolumesRequest(), &r).ok());
    EXPECT_EQ(r.volumes_size(), 2) << "no refusal made a volume";
  }

  // A clone of a clone's snapshot, one link at a time.
  ASSERT_TRUE(CreateSnapshot("c", "cs").ok());
  pb::Volume c2;
  ASSERT_TRUE(Clone("c", "cs", "c2", &c2).ok());
  EXPECT_EQ(c2.origin_volume(), "c");
  EXPECT_EQ(c2.origin_snapshot(), "cs");
  EXPECT_TRUE(ReadAll(c2.id(), f->ino) == want);
  EXPECT_EQ(DeleteSnapshot("c", "cs").error_code(), grpc::StatusCode::FAILED_PRECONDITION);

  // Deleted as any volume: only with force (it holds files); then the
  // snapshots it needed can go.
  EXPECT_EQ(DeleteVolume("c2", false).error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  ASSERT_TRUE(DeleteVolume("c2", true).ok());
  ASSERT_TRUE(DeleteSnapshot("c", "cs").ok());
  ASSERT_TRUE(DeleteVolume("c", true).ok());
  s = DeleteSnapshot("v", "s1");
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_TRUE(ReadAll(vol->id, f->ino) == after) << "the origin lives on";

  auto problems = node_->domain()->Check();
  ASSERT_TRUE(problems.ok());
  EXPECT_TRUE(problems->empty()) << (*problems)[0];
}

// `nasgw snapshot clone`: its line and --json, the origin in `volume show`
// and `volume list`, the refused snapshot delete, exit codes, help.
TEST_F(AdminTest, CliSnapshotClone) {
  StartAll();
  ASSERT_TRUE(Format("tank").ok());
  ASSERT_TRUE(CreateVolume("v").ok());
  WriteFile("v", "f", 10000);
  ASSERT_EQ(Cli({"snapshot", "create", "v", "first"}).exit_code, 0);
  WriteFile("v", "g", 50000);
  CliResult r = Cli({"snapshot", "clone", "v", "first", "c"});
  ASSERT_EQ(r.exit_code, 0) << Describe(r);
  EXPECT_EQ(r.out, "volume c cloned from v@first (2 files, shares its data)\n") << r.out;
  const uint32_t cid = GetVolume("c").id();
  EXPECT_TRUE(node_->domain()->Lookup(cid, fs::kRootIno, "f").ok());
  EXPECT_EQ(node_->domain()->Lookup(cid, fs::kRootIno, "g").status().code(), Code::kNotFound);

  r = Cli({"--json", "snapshot", "clone", "v", "first", "c2"});
  ASSERT_EQ(r.exit_code, 0) << Describe(r);
  json j = json::parse(r.out);
  EXPECT_EQ(j["volume"]["name"], "c2") << r.out;
  EXPECT_EQ(j["volume"]["origin_volume"], "v") << r.out;
  EXPECT_EQ(j["volume"]["origin_snapshot"], "first") << r.out;
  EXPECT_EQ(j["volume"]["files"], 2) << r.out;
  EXPECT_TRUE(j["volume"]["id"].is_number()) << r.out;

  // The origin in volume show and volume list, also in --json.
  r = Cli({"volume", "show", "c"});
  ASSERT_EQ(r.exit_code, 0) << Describe(r);
  EXPECT_NE(r.out.find("origin         v@first (a clone)\n"), std::string::npos) << r.out;
  r = Cli({"volume", "show", "v"});
  ASSERT_EQ(r.exit_code, 0) << Describe(r);
  EXPECT_EQ(r.out.find("origin"), std::string::npos) << "not a clone: " << r.out;
  r = Cli({"--json", "volume", "show", "c"});
  ASSERT_EQ(r.exit_code, 0) << Describe(r);
  j = json::parse(r.out);
  EXPECT_EQ(j["volume"]["origin_volume"], "v") << r.out;
  EXPECT_EQ(j["volume"]["origin_snapshot"], "first") << r.out;
  r = Cli({"--json", "volume", "show", "v"});
  j = json::parse(r.out);
  EXPECT_EQ(j["volume"]["origin_volume"], "") << r.out;
  EXPECT_EQ(j["volume"]["origin_snapshot"], "") << r.out;
  r = Cli({"volume", "list"});
  ASSERT_EQ(r.exit_code, 0) << Describe(r);
  {
    std::istringstream lines(r.out);
    std::map<std::string, std::string> last;  // NAME -> the last column
    std::string header, line;
    std::getline(lines, header);
    std::istringstream h(header);
    std::vector<std::string> cols;
    for (std::string w; h >> w;) cols.push_back(w);
    ASSERT_FALSE(cols.empty()) << r.out;
    EXPECT_EQ(cols.back(), "ORIGIN") << r.out;
    while (std::getline(lines, line)) {
      std::istringstream l(line);
      std::vector<std::string> cells;
      for (std::string w; l >> w;) cells.push_back(w);
      if (!cells.empty()) last[cells.front()] = cells.back();
    }
    EXPECT_EQ(last, (std::map<std::string, std::string>{{"c", "v@first"}, {"c2", "v@first"}, {"v", "-"}})) << r.out;
  }
  r = Cli({"--json", "volume", "list"});
  ASSERT_EQ(r.exit_code, 0) << Describe(r);
  j = json::parse(r.out);
  ASSERT_EQ(j["volumes"].size(), 3u) << r.out;
  for (const auto& v : j["volumes"]) {
    EXPECT_EQ(v["origin_volume"], v["name"] == "v" ? "" : "v") << r.out;
    EXPECT_EQ(v["origin_snapshot"], v["name"] == "v" ? "" : "first") << r.out;
  }

  // The snapshot cannot go while clones need it: refused, exit 6, both named.
  r = Cli({"snapshot", "delete", "v", "first"});
  EXPECT_EQ(r.exit_code, 6) << Describe(r);
  EXPECT_NE(r.err.find("'c'"), std::string::npos) << Describe(r);
  EXPECT_NE(r.err.find("'c2'"), std::string::npos) << Describe(r);
  EXPECT_NE(r.err.find("nasgw volume delete NAME --force"), std::string::npos) << Describe(r);
  r = Cli({"--json", "snapshot", "delete", "v", "first"});
  EXPECT_EQ(json::parse(r.out)["error"]["code"], "FAILED_PRECONDITION") << r.out;

  // Exit codes: not found 4, exists 5, usage 2.
  r = Cli({"snapshot", "clone", "nope", "first", "x"});
  EXPECT_EQ(r.exit_code, 4) << Describe(r);
  r = Cli({"snapshot", "clone", "v", "nope", "x"});
  EXPECT_EQ(r.exit_code, 4) << Describe(r);
  r = Cli({"snapshot", "clone", "v", "first", "c"});
  EXPECT_EQ(r.exit_code, 5) << Describe(r);
  r = Cli({"--json", "snapshot", "clone", "v", "first", "v"});
  EXPECT_EQ(json::parse(r.out)["error"]["code"], "ALREADY_EXISTS") << r.out;
  r = Cli({"snapshot", "clone", "v", "first", "a/b"});
  EXPECT_EQ(r.exit_code, 2) << "nasgwd refuses it: " << Describe(r);
  r = Cli({"snapshot", "clone", "v", "first", "evil\x1b[2J"});
  EXPECT_EQ(r.exit_code, 2) << Describe(r);
  EXPECT_NE(r.err.find("volume name 'evil\\x1b[2J' holds a control character"), std::string::npos) << Describe(r);
  r = Cli({"snapshot", "clone", "v", "evil\x1b[2J", "x"});
  EXPECT_NE(r.err.find("snapshot name 'evil\\x1b[2J'"), std::string::npos) << Describe(r);
  for (const auto& bad : std::vector<std::vector<std::string>>{{"snapshot", "clone", "v", "first"},
                                                               {"snapshot", "clone", "v", "first", "x", "y"},
                                                               {"snapshot", "clone", "v", "first", "x", "--force"}}) {
    r = Cli(bad);
    EXPECT_EQ(r.exit_code, 2) << Describe(r);
  }
  r = Cli({"snapshot", "clone", "v", "first"});
  EXPECT_NE(r.err.find("a VOLUME, a SNAPSHOT and a NEWVOLUME name"), std::string::npos) << Describe(r);
  r = Cli({"snapshot", "--help"});
  EXPECT_NE(r.out.find("snapshot clone VOLUME SNAPSHOT NEWVOLUME"), std::string::npos) << r.out;
  r = Cli({"--help"});
  EXPECT_NE(r.out.find("snapshot clone VOLUME SNAPSHOT NEWVOLUME"), std::string::npos) << r.out;
  r = Cli({"snapshot", "clone", "--help"});
  EXPECT_EQ(r.exit_code, 0) << Describe(r);
  EXPECT_NE(r.out.find("usage: nasgw snapshot clone VOLUME SNAPSHOT NEWVOLUME"), std::string::npos) << r.out;

  // A clone is deleted as any volume (it holds files: --force), then the snapshot.
  r = Cli({"volume", "delete", "c"});
  EXPECT_EQ(r.exit_code, 6) << Describe(r);
  EXPECT_NE(r.err.find("--force"), std::string::npos) << Describe(r);
  ASSERT_EQ(Cli({"volume", "delete", "c", "--force"}).exit_code, 0);
  ASSERT_EQ(Cli({"volume", "delete", "c2", "--force"}).exit_code, 0);
  r = Cli({"snapshot", "delete", "v", "first"});
  EXPECT_EQ(r.exit_code, 0) << Describe(r);
}

// The names scheduled snapshots get: `<schedule>-YYYYMMDDTHHMMSSZ` (UTC),
// sorting by time; retention takes only names of exactly that form.
TEST(SnapshotScheduleNamesTest, SortByTimeAndBelongToOneSchedule) {
  EXPECT_EQ(ScheduledSnapshotName("hourly", 0), "hourly-19700101T000000Z");
  EXPECT_EQ(ScheduledSnapshotName("hourly", 1795000000), "hourly-20261118T110640Z");
  EXPECT_EQ(ScheduledSnapshotName("a.b_c-d", 1798761599), "a.b_c-d-20261231T235959Z");
  std::string last;
  for (int64_t t : {int64_t{0}, int64_t{9}, int64_t{59}, int64_t{3599}, int64_t{86399}, int64_t{1798761599},
                    int64_t{1798761600}, int64_t{1798761601}, int64_t{4102444800}}) {
    const std::string n = ScheduledSnapshotName("s", t);
    EXPECT_LT(last, n) << "names sort by time: " << t;
    EXPECT_TRUE(IsScheduledSnapshotOf("s", n)) << n;
    last = n;
  }
  EXPECT_TRUE(IsScheduledSnapshotOf("hourly", "hourly-20261123T111842Z"));
  EXPECT_TRUE(IsScheduledSnapshotOf("hourly-x", "hourly-x-20261123T111842Z"));
  for (const char* other :
       {"hourly", "", "hourly-", "hourly-20261123T111842", "hourly-20261123T111842ZZ", "hourlyx20261123T111842Z",
        "daily-20261123T111842Z", "hourly-x-20261123T111842Z", "hourly-2026112xT111842Z", "hourly-20261123t111842Z",
        "hourly-20261123T11184xZ", "Hourly-20261123T111842Z", "hourly-20261123-111842Z"}) {
    EXPECT_FALSE(IsScheduledSnapshotOf("hourly", other)) << other;
  }
}

// Schedules through the RPCs: add, list (every volume's or one's), remove;
// the refusals with their codes; kept with the reserve across a restart;
// a volume with schedules is not deleted.
TEST_F(AdminTest, SnapshotSchedulesAddListAndRemove) {
  StartAll();
  EXPECT_EQ(ListSchedules("").error_code(), grpc::StatusCode::UNAVAILABLE) << "no reserve yet";
  EXPECT_EQ(AddSchedule("v", "hourly", 3600, 24).error_code(), grpc::StatusCode::UNAVAILABLE);
  ASSERT_TRUE(Format("tank").ok());
  ASSERT_TRUE(CreateVolume("v").ok());
  ASSERT_TRUE(CreateVolume("w").ok());

  pb::SnapshotSchedule got;
  auto s = AddSchedule("v", "hourly", 3600, 24, &got);
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_EQ(got.volume(), "v");
  EXPECT_EQ(got.name(), "hourly");
  EXPECT_EQ(got.every_seconds(), 3600u);
  EXPECT_EQ(got.keep(), 24u);
  EXPECT_EQ(got.last_run_unix(), 0) << "never ran";
  EXPECT_EQ(got.next_run_unix(), 0) << "due at once";
  ASSERT_TRUE(AddSchedule("v", "daily", 86400, 7).ok());
  ASSERT_TRUE(AddSchedule("w", "hourly", 3600, 1).ok()) << "names are per volume";
  ASSERT_TRUE(AddSchedule("v", std::string(64, 'n'), uint64_t{366} * 86400, 10000).ok()) << "the limits themselves";

  std::vector<pb::SnapshotSchedule> list;
  ASSERT_TRUE(ListSchedules("", &list).ok());
  std::vector<std::string> names;
  names.reserve(list.size());
  for (const auto& x : list) names.push_back(x.volume() + "/" + x.name());
  EXPECT_EQ(names, (std::vector<std::string>{"v/daily", "v/hourly", "v/" + std::string(64, 'n'), "w/hourly"}))
      << "by volume, then name";
  EXPECT_EQ(list[0].every_seconds(), 86400u);
  EXPECT_EQ(list[0].keep(), 7u);
  ASSERT_TRUE(ListSchedules("w", &list).ok());
  ASSERT_EQ(list.size(), 1u);
  EXPECT_EQ(list[0].volume(), "w");
  EXPECT_EQ(list[0].keep(), 1u);
  s = ListSchedules("nope");
  EXPECT_EQ(s.error_code(), grpc::StatusCode::NOT_FOUND) << s.error_message();
  EXPECT_EQ(ListSchedules("a/b").error_code(), grpc::StatusCode::INVALID_ARGUMENT);

  // Refusals, each with the domain's (or the service's) words.
  struct Bad {
    std::string volume, name;
    uint64_t every;
    uint32_t keep;
    grpc::StatusCode code;
    std::string says;
  };
  for (const Bad& b : std::vector<Bad>{
           {"v", "x", 0, 1, grpc::StatusCode::INVALID_ARGUMENT, "every 1 s to 366 days"},
           {"v", "x", uint64_t{366} * 86400 + 1, 1, grpc::StatusCode::INVALID_ARGUMENT, "every 1 s to 366 days"},
           {"v", "x", 60, 0, grpc::StatusCode::INVALID_ARGUMENT, "keeps 1 to 10000"},
           {"v", "x", 60, 10001, grpc::StatusCode::INVALID_ARGUMENT, "keeps 1 to 10000"},
           {"v", "", 60, 1, grpc::StatusCode::INVALID_ARGUMENT, "schedule name is empty"},
           {"v", "a/b", 60, 1, grpc::StatusCode::INVALID_ARGUMENT, "letters, digits"},
           {"v", "sp ace", 60, 1, grpc::StatusCode::INVALID_ARGUMENT, "letters, digits"},
           {"v", "caf\xc3\xa9", 60, 1, grpc::StatusCode::INVALID_ARGUMENT, "letters, digits"},
           {"v", std::string(65, 'n'), 60, 1, grpc::StatusCode::INVALID_ARGUMENT, "1-64 bytes"},
           {"v", std::string("es\x1b") + "c", 60, 1, grpc::StatusCode::INVALID_ARGUMENT, "control character"},
           {"", "x", 60, 1, grpc::StatusCode::INVALID_ARGUMENT, "volume name is empty"},
           {"nope", "x", 60, 1, grpc::StatusCode::NOT_FOUND, "nope"},
           {"v", "hourly", 60, 1, grpc::StatusCode::ALREADY_EXISTS, "hourly"},
       }) {
    s = AddSchedule(b.volume, b.name, b.every, b.keep);
    EXPECT_EQ(s.error_code(), b.code) << b.volume << "/" << b.name << ": " << s.error_message();
    EXPECT_NE(s.error_message().find(b.says), std::string::npos) << s.error_message();
  }
  ASSERT_TRUE(ListSchedules("", &list).ok());
  EXPECT_EQ(list.size(), 4u) << "no refusal added one";

  // A volume with schedules stays, even with force.
  s = DeleteVolume("w", true);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::FAILED_PRECONDITION) << s.error_message();
  EXPECT_NE(s.error_message().find("schedule"), std::string::npos) << s.error_message();

  // Kept with the reserve.
  StopAll();
  StartAll();
  ASSERT_TRUE(ListSchedules("", &list).ok());
  EXPECT_EQ(list.size(), 4u) << "schedules survive a restart";

  pb::SnapshotSchedule gone;
  s = RemoveSchedule("v", "daily", &gone);
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_EQ(gone.volume(), "v");
  EXPECT_EQ(gone.name(), "daily");
  EXPECT_EQ(gone.every_seconds(), 86400u);
  EXPECT_EQ(gone.keep(), 7u);
  s = RemoveSchedule("v", "daily");
  EXPECT_EQ(s.error_code(), grpc::StatusCode::NOT_FOUND) << s.error_message();
  EXPECT_NE(s.error_message().find("daily"), std::string::npos) << s.error_message();
  EXPECT_EQ(RemoveSchedule("nope", "hourly").error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_EQ(RemoveSchedule("v", "").error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  ASSERT_TRUE(RemoveSchedule("w", "hourly").ok());
  ASSERT_TRUE(ListSchedules("w", &list).ok());
  EXPECT_TRUE(list.empty());
  s = DeleteVolume("w", false);
  EXPECT_TRUE(s.ok()) << "without its schedule it goes: " << s.error_message();
  ASSERT_TRUE(ListSchedules("", &list).ok());
  ASSERT_EQ(list.size(), 2u);
  EXPECT_EQ(list[0].name(), "hourly");
  EXPECT_TRUE(SnapshotNames("v").empty()) << "no scheduler ran here";

  auto problems = node_->domain()->Check();
  ASSERT_TRUE(problems.ok());
  EXPECT_TRUE(problems->empty()) << (*problems)[0];
}

// `nasgw snapshot schedule add|list|remove`: durations, default names,
// tables and --json, exit codes.
TEST_F(AdminTest, CliSnapshotSchedules) {
  StartAll();
  ASSERT_TRUE(Format("tank").ok());
  ASSERT_TRUE(CreateVolume("v").ok());
  ASSERT_TRUE(CreateVolume("w").ok());
  CliResult r = Cli({"snapshot", "schedule", "add", "v", "--every", "1h", "--keep", "24"});
  ASSERT_EQ(r.exit_code, 0) << Describe(r);
  for (const char* want : {"hourly", "1h", "24 of its snapshots", "hourly-YYYYMMDDTHHMMSSZ", "never"}) {
    EXPECT_NE(r.out.find(want), std::string::npos) << want << ": " << r.out;
  }
  r = Cli({"--json", "snapshot", "schedule", "add", "v", "--every", "daily", "--keep", "7"});
  ASSERT_EQ(r.exit_code, 0) << Describe(r);
  json j = json::parse(r.out);
  EXPECT_EQ(j["schedule"]["name"], "daily") << r.out;
  EXPECT_EQ(j["schedule"]["volume"], "v") << r.out;
  EXPECT_EQ(j["schedule"]["every_seconds"], 86400) << r.out;
  EXPECT_EQ(j["schedule"]["keep"], 7) << r.out;
  EXPECT_EQ(j["schedule"]["last_run_unix"], 0) << r.out;
  EXPECT_EQ(j["schedule"]["next_run_unix"], 0) << r.out;
  // Default names: hourly, daily, weekly for exactly those intervals, else
  // every-DURATION.
  for (const auto& [every, name] : std::vector<std::pair<std::string, std::string>>{
           {"1w", "weekly"}, {"15m", "every-15m"}, {"090m", "every-90m"}, {"2d", "every-2d"}, {"45s", "every-45s"}}) {
    r = Cli({"--json", "snapshot", "schedule", "add", "v", "--every", every, "--keep", "3"});
    ASSERT_EQ(r.exit_code, 0) << Describe(r);
    EXPECT_EQ(json::parse(r.out)["schedule"]["name"], name) << every << ": " << r.out;
  }
  r = Cli({"snapshot", "schedule", "add", "v", "--every", "60m", "--keep", "2"});
  EXPECT_EQ(r.exit_code, 5) << "60m is hourly, which exists: " << Describe(r);
  r = Cli({"--json", "snapshot", "schedule", "add", "w", "--every", "30s", "--keep", "3", "--name", "fast"});
  ASSERT_EQ(r.exit_code, 0) << Describe(r);
  EXPECT_EQ(json::parse(r.out)["schedule"]["every_seconds"], 30) << r.out;
  EXPECT_EQ(json::parse(r.out)["schedule"]["name"], "fast") << r.out;

  r = Cli({"snapshot", "schedule", "list"});
  ASSERT_EQ(r.exit_code, 0) << Describe(r);
  std::istringstream lines(r.out);
  std::vector<std::vector<std::string>> rows;
  for (std::string line; std::getline(lines, line);) {
    std::istringstream words(line);
    rows.emplace_back();
    for (std::string w; words >> w;) rows.back().push_back(w);
  }
  ASSERT_EQ(rows.size(), 9u) << r.out;
  EXPECT_EQ(rows[0], (std::vector<std::string>{"VOLUME", "NAME", "EVERY", "KEEP", "LAST", "NEXT"})) << r.out;
  EXPECT_EQ(rows[1], (std::vector<std::string>{"v", "daily", "1d", "7", "never", "now"})) << r.out;
  EXPECT_EQ(rows[3], (std::vector<std::string>{"v", "every-2d", "2d", "3", "never", "now"})) << r.out;
  EXPECT_EQ(rows[5], (std::vector<std::string>{"v", "every-90m", "90m", "3", "never", "now"})) << r.out;
  EXPECT_EQ(rows[7], (std::vector<std::string>{"v", "weekly", "1w", "3", "never", "now"})) << r.out;
  EXPECT_EQ(rows[8], (std::vector<std::string>{"w", "fast", "30s", "3", "never", "now"})) << r.out;
  r = Cli({"snapshot", "schedule", "list", "w"});
  ASSERT_EQ(r.exit_code, 0) << Describe(r);
  EXPECT_NE(r.out.find("fast"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("hourly"), std::string::npos) << "only w's: " << r.out;
  r = Cli({"--json", "snapshot", "schedule", "list"});
  ASSERT_EQ(r.exit_code, 0) << Describe(r);
  j = json::parse(r.out);
  ASSERT_EQ(j["schedules"].size(), 8u) << r.out;
  EXPECT_EQ(j["schedules"][7]["volume"], "w") << r.out;
  r = Cli({"--json", "snapshot", "schedule", "list", "v"});
  EXPECT_EQ(json::parse(r.out)["schedules"].size(), 7u) << r.out;

  // Usage errors (exit 2, before nasgwd is asked, but for the name's rules).
  for (const auto& [bad, says] : std::vector<std::pair<std::vector<std::string>, std::string>>{
           {{"--every", "bogus", "--keep", "2"}, "--every takes a whole number and a unit"},
           {{"--every", "10", "--keep", "2"}, "the unit is missing"},
           {{"--every", "1y", "--keep", "2"}, "--every takes"},
           {{"--every", "1H", "--keep", "2"}, "--every takes"},
           {{"--every", "h", "--keep", "2"}, "--every takes"},
           {{"--every", "-1h", "--keep", "2"}, "--every takes"},
           {{"--every", "1.5h", "--keep", "2"}, "--every takes"},
           {{"--every", "0s", "--keep", "2"}, "from 1s to 366d"},
           {{"--every", "367d", "--keep", "2"}, "from 1s to 366d"},
           {{"--every", "99999999999999999999w", "--keep", "2"}, "from 1s to 366d"},
           {{"--every", "1h", "--keep", "0"}, "1 to 10000"},
           {{"--every", "1h", "--keep", "10001"}, "1 to 10000"},
           {{"--every", "1h", "--keep", "x"}, "1 to 10000"},
           {{"--every", "1h", "--keep", "-1"}, "1 to 10000"},
           {{"--every", "1h"}, "needs --every DURATION and --keep N"},
           {{"--keep", "2"}, "needs --every DURATION and --keep N"},
           {{"--every", "1h", "--keep", "2", "--name", ""}, "--name is empty"},
           {{"--every", "1h", "--keep", "2", "--name", "a b"}, "letters, digits"},
           {{"--every", "1h", "--keep", "2", "--name", "a/b"}, "letters, digits"},
           {{"--every", "1h", "--keep", "2", "--name", std::string("es\x1b") + "c"}, "control character"},
           {{"--every", "1h", "--keep", "2", "--force"}, "does not apply"},
       }) {
    std::vector<std::string> args = {"snapshot", "schedule", "add", "v"};
    args.insert(args.end(), bad.begin(), bad.end());
    r = Cli(args);
    EXPECT_EQ(r.exit_code, 2) << Describe(r);
    EXPECT_NE(r.err.find(says), std::string::npos) << says << ": " << Describe(r);
  }
  for (const auto& bad : std::vector<std::vector<std::string>>{{"snapshot", "schedule"},
                                                               {"snapshot", "schedule", "frobnicate"},
                                                               {"snapshot", "schedule", "add"},
                                                               {"snapshot", "schedule", "add", "v", "x"},
                                                               {"snapshot", "schedule", "list", "v", "w"},
                                                               {"snapshot", "schedule", "remove", "v"},
                                                               {"snapshot", "schedule", "remove", "v", "x", "y"}}) {
    r = Cli(bad);
    EXPECT_EQ(r.exit_code, 2) << Describe(r);
  }
  r = Cli({"--json", "snapshot", "schedule", "add", "v", "--every", "0s", "--keep", "2"});
  EXPECT_EQ(json::parse(r.out)["error"]["code"], "USAGE") << r.out;
  // Not found 4, exists 5.
  r = Cli({"snapshot", "schedule", "add", "nope", "--every", "1h", "--keep", "2"});
  EXPECT_EQ(r.exit_code, 4) << Describe(r);
  r = Cli({"snapshot", "schedule", "add", "v", "--every", "daily", "--keep", "2"});
  EXPECT_EQ(r.exit_code, 5) << Describe(r);
  r = Cli({"snapshot", "schedule", "list", "nope"});
  EXPECT_EQ(r.exit_code, 4) << Describe(r);
  r = Cli({"snapshot", "schedule", "remove", "v", "nope"});
  EXPECT_EQ(r.exit_code, 4) << Describe(r);
  r = Cli({"--json", "snapshot", "schedule", "remove", "v", "nope"});
  EXPECT_EQ(json::parse(r.out)["error"]["code"], "NOT_FOUND") << r.out;
  // Refused 6: a volume with schedules is not deleted.
  r = Cli({"volume", "delete", "w", "--force"});
  EXPECT_EQ(r.exit_code, 6) << Describe(r);
  EXPECT_NE(r.err.find("schedule"), std::string::npos) << Describe(r);

  // Help.
  r = Cli({"snapshot", "schedule", "--help"});
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_NE(r.out.find("snapshot schedule add VOLUME --every DURATION --keep N [--name NAME]"), std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("snapshot schedule remove VOLUME NAME"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("snapshot create"), std::string::npos) << "only the schedule commands: " << r.out;
  r = Cli({"snapshot", "--help"});
  EXPECT_NE(r.out.find("snapshot schedule list [VOLUME]"), std::string::npos) << r.out;
  r = Cli({"snapshot", "schedule", "add", "--help"});
  EXPECT_NE(r.out.find("hourly, daily, weekly"), std::string::npos) << r.out;
  r = Cli({"--help"});
  EXPECT_NE(r.out.find("snapshot schedule add VOLUME"), std::string::npos) << r.out;

  r = Cli({"snapshot", "schedule", "remove", "v", "weekly"});
  ASSERT_EQ(r.exit_code, 0) << Describe(r);
  EXPECT_NE(r.out.find("removed schedule weekly of volume v"), std::string::npos) << r.out;
  r = Cli({"--json", "snapshot", "schedule", "remove", "w", "fast"});
  ASSERT_EQ(r.exit_code, 0) << Describe(r);
  j = json::parse(r.out);
  EXPECT_EQ(j["removed"]["schedule"]["name"], "fast") << r.out;
  EXPECT_EQ(j["removed"]["schedule"]["every_seconds"], 30) << r.out;
  r = Cli({"--json", "snapshot", "schedule", "list"});
  EXPECT_EQ(json::parse(r.out)["schedules"].size(), 6u) << r.out;
  r = Cli({"volume", "delete", "w"});
  EXPECT_EQ(r.exit_code, 0) << "no schedule left on it: " << Describe(r);
}

// The scheduler as nasgwd runs it: a schedule every second keeping 2 takes
// a snapshot each run (the cache flushed first), named by the time, and
// deletes its oldest beyond 2; snapshots made by hand, even named almost
// like the schedule's, are never touched; the runs are counted and logged;
// once the schedule is removed no run follows.
TEST_F(AdminTest, SchedulerTakesSnapshotsAndKeepsTheNewest) {
  run_scheduler_ = true;
  StartAll();
  ASSERT_TRUE(Format("tank").ok());
  ASSERT_TRUE(CreateVolume("v").ok());
  WriteFile("v", "f", 10000);
  const std::vector<std::string> by_hand = {"by-hand", "sec-extra", "sec-2026", "sec-x-20200101T000000Z",
                                            "other-20200101T000000Z"};
  for (const auto& n : by_hand) ASSERT_TRUE(CreateSnapshot("v", n).ok()) << n;
  const int64_t t0 = ::time(nullptr);
  ASSERT_TRUE(AddSchedule("v", "sec", 1, 2).ok());

  // At least 4 runs (the first at once, then one a second).
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (ScheduleCounter("nasgw_snapshot_schedule_runs_total", "v", "sec") < 4 &&
         std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  ASSERT_GE(ScheduleCounter("nasgw_snapshot_schedule_runs_total", "v", "sec"), 4) << metrics_.Render();
  std::vector<pb::SnapshotSchedule> list;
  ASSERT_TRUE(ListSchedules("v", &list).ok());
  ASSERT_EQ(list.size(), 1u);
  EXPECT_GE(list[0].last_run_unix(), t0) << "the runs are recorded";
  EXPECT_EQ(list[0].next_run_unix(), list[0].last_run_unix() + 1);

  // Removed: it returns once no run is under way, and none begins.
  pb::SnapshotSchedule gone;
  ASSERT_TRUE(RemoveSchedule("v", "sec", &gone).ok());
  const double runs = ScheduleCounter("nasgw_snapshot_schedule_runs_total", "v", "sec");
  const int64_t t1 = ::time(nullptr);
  std::vector<pb::Snapshot> snaps;
  ASSERT_TRUE(ListSnapshots("v", &snaps).ok());
  std::vector<pb::Snapshot> mine;
  std::vector<std::string> others;
  for (const auto& sn : snaps) {
    if (IsScheduledSnapshotOf("sec", sn.name())) {
      mine.push_back(sn);
    } else {
      others.push_back(sn.name());
    }
  }
  ASSERT_EQ(mine.size(), 2u) << "keep 2";
  EXPECT_LT(mine[0].name(), mine[1].name()) << "oldest first, and the names sort by time";
  EXPECT_LT(mine[0].id(), mine[1].id());
  EXPECT_GE(mine[0].name(), ScheduledSnapshotName("sec", t0));
  EXPECT_LE(mine[1].name(), ScheduledSnapshotName("sec", t1));
  EXPECT_EQ(mine[1].name(), ScheduledSnapshotName("sec", gone.last_run_unix())) << "the last run's";
  for (const auto& sn : mine) {
    EXPECT_GE(sn.created_unix(), t0);
    EXPECT_LE(sn.created_unix(), t1);
  }
  EXPECT_EQ(others, by_hand) << "snapshots made by hand are untouched";

  // Counted: every run beyond the 2 kept deleted one; the cache was
  // flushed before each; nothing failed. Logged, each.
  EXPECT_EQ(ScheduleCounter("nasgw_snapshot_schedule_deleted_total", "v", "sec"), runs - 2);
  EXPECT_EQ(ScheduleCounter("nasgw_snapshot_schedule_failures_total", "v", "sec"), 0);
  EXPECT_GE(scheduler_flushes_.load(), static_cast<int>(runs));
  EXPECT_EQ(static_cast<double>(Logged({"INFO", "snapshots", "scheduled snapshot taken", "schedule=sec"}).size()),
            runs);
  const auto deleted = Logged({"INFO", "snapshots", "scheduled snapshot deleted", "schedule=sec", "volume=v"});
  EXPECT_EQ(static_cast<double>(deleted.size()), runs - 2);
  EXPECT_TRUE(Logged({"WARN", "snapshots"}).empty());

  // No run after the removal: over 2.5 s (two and a half ticks), the list
  // and the counter stay as they are. A bounded wait is the assertion here.
  const std::vector<std::string> after = SnapshotNames("v");
  const auto quiet_until = std::chrono::steady_clock::now() + std::chrono::milliseconds(2500);
  while (std::chrono::steady_clock::now() < quiet_until) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    ASSERT_EQ(SnapshotNames("v"), after) << "a snapshot after the schedule was removed";
  }
  EXPECT_EQ(ScheduleCounter("nasgw_snapshot_schedule_runs_total", "v", "sec"), runs);

  // The scheduler stops at once (it waits on a condition variable, not a sleep).
  const auto stop0 = std::chrono::steady_clock::now();
  scheduler_->Stop();
  EXPECT_LT(std::chrono::steady_clock::now() - stop0, std::chrono::milliseconds(500));

  auto problems = node_->domain()->Check();
  ASSERT_TRUE(problems.ok());
  EXPECT_TRUE(problems->empty()) << (*problems)[0];
}

// A run that fails (here the cache flush) takes no snapshot, is counted and
// logged, and is tried again (a second later for a schedule every second);
// the thread carries on, and once the flush works the runs resume.
TEST_F(AdminTest, SchedulerCarriesOnAfterAFailedRun) {
  run_scheduler_ = true;
  scheduler_flush_fails_ = true;
  StartAll();
  ASSERT_TRUE(Format("tank").ok());
  ASSERT_TRUE(CreateVolume("v").ok());
  ASSERT_TRUE(AddSchedule("v", "sec", 1, 1).ok());
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (ScheduleCounter("nasgw_snapshot_schedule_failures_total", "v", "sec") < 2 &&
         std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  ASSERT_GE(ScheduleCounter("nasgw_snapshot_schedule_failures_total", "v", "sec"), 2) << metrics_.Render();
  EXPECT_EQ(ScheduleCounter("nasgw_snapshot_schedule_runs_total", "v", "sec"), 0);
  EXPECT_TRUE(SnapshotNames("v").empty()) << "a failed flush takes no snapshot";
  std::vector<pb::SnapshotSchedule> list;
  ASSERT_TRUE(ListSchedules("v", &list).ok());
  ASSERT_EQ(list.size(), 1u);
  EXPECT_EQ(list[0].last_run_unix(), 0) << "a failed run is not recorded";
  const auto warned = Logged({"WARN", "snapshots", "could not be flushed", "schedule=sec", "no space for the flush"});
  EXPECT_GE(warned.size(), 2u);

  scheduler_flush_fails_ = false;
  deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (ScheduleCounter("nasgw_snapshot_schedule_runs_total", "v", "sec") < 2 &&
         std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  ASSERT_GE(ScheduleCounter("nasgw_snapshot_schedule_runs_total", "v", "sec"), 2) << metrics_.Render();
  ASSERT_TRUE(RemoveSchedule("v", "sec").ok());
  const std::vector<std::string> left = SnapshotNames("v");
  ASSERT_EQ(left.size(), 1u) << "keep 1";
  EXPECT_TRUE(IsScheduledSnapshotOf("sec", left[0])) << left[0];
}

TEST_F(AdminTest, AddLunGrowsCapacityAndIsRemembered) {
  StartAll();
  pb::AddLunRequest add;
  add.set_url(Url(3));
  pb::AddLunResponse added;
  EXPECT_EQ(Call(&pb::Admin::Stub::AddLun, add, &added).error_code(), grpc::StatusCode::UNAVAILABLE)
      << "no reserve yet";
  ASSERT_TRUE(Format("tank").ok());
  ASSERT_TRUE(CreateVolume("v").ok());
  WriteFile("v", "f", 100000);
  const pb::Reserve before = Reserve();

  AddMedium(3);
  auto s = Call(&pb::Admin::Stub::AddLun, add, &added);
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_EQ(added.lun().index(), 3u);
  EXPECT_EQ(added.lun().url(), Url(3));
  EXPECT_GT(added.lun().allocation_groups(), 50u);
  const pb::Reserve after = Reserve();
  EXPECT_EQ(after.luns_size(), 4);
  EXPECT_GT(after.capacity_bytes(), before.capacity_bytes());
  EXPECT_GT(after.free_bytes(), before.free_bytes());
  EXPECT_NE(ReadText(config_.state_dir + "/luns").find(Url(3)), std::string::npos);
  struct stat st {};
  ASSERT_EQ(::stat(config_.state_dir.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0700u);
  ASSERT_EQ(::stat((config_.state_dir + "/luns").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);

  EXPECT_EQ(Call(&pb::Admin::Stub::AddLun, add, &added).error_code(), grpc::StatusCode::ALREADY_EXISTS);
  add.set_url(Url(9));
  s = Call(&pb::Admin::Stub::AddLun, add, &added);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_NE(s.error_message().find(Url(9)), std::string::npos) << s.error_message();
  add.set_url("http://not-iscsi");
  EXPECT_EQ(Call(&pb::Admin::Stub::AddLun, add, &added).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(ReadText(config_.state_dir + "/luns").find(Url(9)), std::string::npos) << "a failed add is forgotten";

  // The next start opens the added LUN from <state_dir>/luns.
  StopAll();
  opened_.clear();
  StartAll();
  EXPECT_EQ(opened_.size(), 4u);
  const pb::Reserve again = Reserve();
  EXPECT_EQ(again.state(), pb::RESERVE_STATE_ONLINE) << again.reason();
  EXPECT_EQ(again.luns_size(), 4);
  EXPECT_EQ(again.capacity_bytes(), after.capacity_bytes());
}

TEST_F(AdminTest, RememberedLunThatNeverJoinedIsLeftOut) {
  StartAll();
  ASSERT_TRUE(Format("tank").ok());
  StopAll();
  // As if nasgwd stopped between remembering a LUN and labelling it.
  AddMedium(5);
  ASSERT_TRUE(::mkdir(config_.state_dir.c_str(), 0700) == 0 || errno == EEXIST);  // the node made it
  std::ofstream(config_.state_dir + "/luns") << "# comment\n\n" << Url(5) << "\n";
  StartAll();
  const pb::Reserve r = Reserve();
  EXPECT_EQ(r.state(), pb::RESERVE_STATE_ONLINE) << r.reason();
  EXPECT_EQ(r.luns_size(), 3);
  EXPECT_EQ(opened_.back(), Url(5)) << "it was opened and looked at";
  // An unreachable remembered LUN is a start failure that names the file.
  StopAll();
  media_.erase(Url(5));
  auto n = Node::Start(config_, Opener(), SmallDomain());
  ASSERT_FALSE(n.ok());
  EXPECT_NE(n.status().message().find(config_.state_dir + "/luns"), std::string::npos) << n.status().ToString();
}

// A standby watches the owner record from its owner thread without the
// node's lock: while its SAN reads hang (a SAN path that died), status
// calls still answer at once.
TEST_F(AdminTest, AStandbyWhoseSanReadsHangStillAnswersStatus) {
  config_.renew_interval_ms = 50;
  config_.lease_ms = 400;
  StartAll();
  ASSERT_TRUE(Format("tank").ok());
  Config c2 = config_;
  c2.node_name = "n2";
  c2.state_dir = dir_ + "/state2";
  c2.admin_socket = dir_ + "/admin2.sock";
  std::vector<std::shared_ptr<block::MemDevice>> devs2;
  LunOpener second = [&](const std::string& url) -> Result<std::shared_ptr<block::BlockDevice>> {
    auto it = media_.find(url);
    if (it == media_.end()) return Status::Unavailable("connection refused");
    devs2.push_back(std::make_shared<block::MemDevice>(it->second, /*initiator=*/2));
    return std::shared_ptr<block::BlockDevice>(devs2.back());
  };
  auto n2 = Node::Start(c2, second, SmallDomain());
  ASSERT_TRUE(n2.ok()) << n2.status().ToString();
  ASSERT_EQ((*n2)->GetReserve().state, ReserveState::kStandby);
  // Its reads hang (at most 5 s, so that a failure does not hang the test).
  std::mutex mu;
  std::condition_variable cv;
  bool release = false;
  int hung = 0;
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  for (auto& d : devs2) {
    d->SetFault([&](const block::IoRequest& r) {
      if (r.op != block::Op::kRead) return Status();
      std::unique_lock<std::mutex> l(mu);
      hung++;
      cv.notify_all();
      cv.wait_until(l, until, [&] { return release; });
      return Status();
    });
  }
  {
    std::unique_lock<std::mutex> l(mu);
    ASSERT_TRUE(cv.wait_for(l, std::chrono::seconds(5), [&] { return hung > 0; })) << "the standby read nothing";
  }
  const auto t0 = std::chrono::steady_clock::now();
  const ReserveStatus r = (*n2)->GetReserve();
  const auto took = std::chrono::steady_clock::now() - t0;
  {
    std::lock_guard<std::mutex> l(mu);
    release = true;
  }
  cv.notify_all();
  EXPECT_EQ(r.state, ReserveState::kStandby);
  EXPECT_LT(took, std::chrono::milliseconds(1000)) << "a status call waited for the standby's SAN read";
  for (auto& d : devs2) d->SetFault(nullptr);
  n2->reset();
}

// Ownership (fs/ownership.h) through the node: a second node on the same
// LUNs (another initiator, another state dir) stands by, names the holder
// and writes nothing; takeover without force waits for the lease; forced,
// it fences the holder, which stops writing and says so.
TEST_F(AdminTest, SecondNodeStandsByAndForcedTakeoverFencesTheFirst) {
  config_.renew_interval_ms = 50;
  config_.lease_ms = 400;
  StartAll();
  ASSERT_TRUE(Format("tank").ok());
  ASSERT_TRUE(CreateVolume("v1").ok());
  auto d1 = node_->domain();
  ASSERT_NE(d1, nullptr);
  auto vol = d1->FindVolume("v1");
  ASSERT_TRUE(vol.ok());
  auto f = d1->Create(vol->id, fs::kRootIno, "kept", fs::FileType::kRegular, 0644, 0, 0);
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  ASSERT_TRUE(d1->Write(vol->id, f->ino, 0, "before", 6).ok());
  d1.reset();

  Config c2 = config_;
  c2.node_name = "n2";
  c2.state_dir = dir_ + "/state2";
  c2.admin_socket = dir_ + "/admin2.sock";
  LunOpener second = [this](const std::string& url) -> Result<std::shared_ptr<block::BlockDevice>> {
    auto it = media_.find(url);
    if (it == media_.end()) return Status::Unavailable("connection refused");
    return std::shared_ptr<block::BlockDevice>(std::make_shared<block::MemDevice>(it->second, /*initiator=*/2));
  };
  auto n2 = Node::Start(c2, second, SmallDomain());
  ASSERT_TRUE(n2.ok()) << n2.status().ToString();
  ReserveStatus r2 = (*n2)->GetReserve();
  EXPECT_EQ(r2.state, ReserveState::kStandby) << r2.reason;
  EXPECT_NE(r2.reason.find("node 'n1'"), std::string::npos) << r2.reason;
  EXPECT_NE(r2.owner.find("node 'n1'"), std::string::npos) << r2.owner;
  EXPECT_EQ((*n2)->domain(), nullptr);
  // Formatting over a reserve another node owns is refused, even forced.
  EXPECT_EQ((*n2)->FormatReserve("other", kMiB, true).code(), Code::kFailedPrecondition);
  // The holder renews: no takeover without force.
  nasgw::Status t = (*n2)->TakeoverReserve(false);
  EXPECT_EQ(t.code(), Code::kFailedPrecondition) << t.ToString();
  EXPECT_NE(t.ToString().find("within its lease"), std::string::npos) << t.ToString();
  ASSERT_TRUE((*n2)->TakeoverReserve(true).ok());
  EXPECT_EQ((*n2)->GetReserve().state, ReserveState::kOnline);
  auto d2 = (*n2)->domain();
  ASSERT_NE(d2, nullptr);
  char buf[16] = {};
  auto got = d2->Read(vol->id, f->ino, 0, sizeof buf, buf);
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_EQ(std::string(buf, *got), "before");
  // The first node learns it by its renewal (it is idle) and stops; from
  // its next watch of the owner record (read without the node's lock) it
  // names the new owner.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  auto fenced_by_n2 = [&] {
    const ReserveStatus r = node_->GetReserve();
    return r.state == ReserveState::kFenced && r.owner.find("node 'n2'") != std::string::npos;
  };
  while (!fenced_by_n2() && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));  // the owner thread's transition
  }
  ReserveStatus r1 = node_->GetReserve();
  EXPECT_EQ(r1.state, ReserveState::kFenced) << r1.reason;
  EXPECT_EQ(r1.fenced_total, 1u);
  EXPECT_NE(r1.owner.find("node 'n2'"), std::string::npos) << r1.owner;
  EXPECT_EQ(node_->domain(), nullptr);
  EXPECT_EQ(node_->CreateVolume("late", 0).status().code(), Code::kUnavailable);
  // The new owner's writes land; a clean stop releases, and the first node
  // may then take the reserve back without force.
  ASSERT_TRUE(d2->Write(vol->id, f->ino, 0, "after!", 6).ok());
  d2.reset();
  n2->reset();
  ASSERT_TRUE(node_->TakeoverReserve(false).ok()) << node_->GetReserve().reason;
  auto d1b = node_->domain();
  ASSERT_NE(d1b, nullptr);
  got = d1b->Read(vol->id, f->ino, 0, sizeof buf, buf);
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(std::string(buf, *got), "after!");
}

// ---- the controller pair: `nasgw cluster status`, its RPC and gauges

// The sample's value in a rendering of `metrics`, or -1 when the series is
// missing.
double Sample(const std::string& text, const std::string& series) {
  const size_t at = text.find("\n" + series + " ");
  return at == std::string::npos ? -1.0 : std::strtod(text.c_str() + at + series.size() + 2, nullptr);
}

TEST_F(AdminTest, ClusterStatusSaysDisabledOnASingleNode) {
  StartAll();
  pb::GetClusterResponse r;
  auto s = Call(&pb::Admin::Stub::GetCluster, pb::GetClusterRequest(), &r);
  ASSERT_TRUE(s.ok()) << s.error_message();
  const pb::Cluster& c = r.cluster();
  EXPECT_FALSE(c.enabled());
  EXPECT_FALSE(c.connected());
  EXPECT_TRUE(c.auto_takeover()) << "the default";
  EXPECT_FALSE(c.mirror().empty());
  EXPECT_EQ(c.peers_size(), 0);
  EXPECT_EQ(c.takeovers(), 0u);
  EXPECT_EQ(c.last_takeover_size(), 0);

  CliResult cli = Cli({"cluster", "status"});
  EXPECT_EQ(cli.exit_code, 0) << Describe(cli);
  EXPECT_EQ(cli.out, "cluster        disabled (single node: [cluster] enabled = false)\n") << Describe(cli);
  cli = Cli({"--json", "cluster", "status"});
  ASSERT_EQ(cli.exit_code, 0) << Describe(cli);
  json j = json::parse(cli.out);
  EXPECT_EQ(j["cluster"]["enabled"], false) << cli.out;
  EXPECT_EQ(j["cluster"]["takeovers"], 0) << cli.out;
  EXPECT_TRUE(j["cluster"]["peers"].is_array()) << cli.out;
  EXPECT_TRUE(j["cluster"]["last_takeover"].empty()) << cli.out;

  // The command group's usage errors and help, as the other groups'.
  for (const auto& bad : std::vector<std::vector<std::string>>{
           {"cluster"}, {"cluster", "frobnicate"}, {"cluster", "status", "extra"}, {"cluster", "status", "--force"}}) {
    cli = Cli(bad);
    EXPECT_EQ(cli.exit_code, 2) << bad.back() << "\n" << Describe(cli);
  }
  cli = Cli({"cluster", "frobnicate"});
  EXPECT_NE(cli.err.find("unknown command 'cluster frobnicate'"), std::string::npos) << cli.err;
  cli = Cli({"--json", "cluster"});
  EXPECT_EQ(cli.exit_code, 2) << Describe(cli);
  EXPECT_EQ(json::parse(cli.out)["error"]["code"], "USAGE") << cli.out;
  cli = Cli({"cluster", "-h"});
  EXPECT_EQ(cli.exit_code, 0) << Describe(cli);
  EXPECT_NE(cli.out.find("cluster status"), std::string::npos) << cli.out;
  cli = Cli({"cluster", "status", "--help"});
  EXPECT_EQ(cli.exit_code, 0) << Describe(cli);
  EXPECT_NE(cli.out.find("usage: nasgw cluster status"), std::string::npos) << cli.out;
  cli = Cli({"--help"});
  EXPECT_NE(cli.out.find("cluster status"), std::string::npos) << cli.out;

  Metrics metrics;
  AddNodeCollectors(&metrics, node_.get(), nullptr);
  const std::string text = metrics.Render();
  EXPECT_EQ(Sample(text, "nasgw_cluster_enabled"), 0.0) << text;
  EXPECT_EQ(Sample(text, "nasgw_cluster_connected"), 0.0) << text;
  EXPECT_EQ(Sample(text, "nasgw_cluster_takeovers_total"), 0.0) << text;
  EXPECT_EQ(Sample(text, "nasgw_cluster_last_takeover_seconds"), 0.0) << text;
  EXPECT_EQ(text.find("nasgw_cluster_peer_heard_seconds{"), std::string::npos) << text;
  EXPECT_NE(text.find("# HELP nasgw_cluster_degraded "), std::string::npos) << text;
}

// Two nodes on the same in-memory LUNs, joined by an in-memory interconnect
// (cluster::MemHub): A (node_, "n1", ring node 1) formats and owns the
// reserve, B ("n2", ring node 2) stands by. Each has its own admin socket.
// A's LUN devices can be made to fail every request (a dead node's I/O).
class AdminClusterTest : public AdminTest {
 protected:
  static constexpr uint32_t kA = 1, kB = 2;
  static constexpr uint32_t kLeaseMs = 400;  // renewals every 50 ms: slack for a loaded machine

  void SetUp() override {
    AdminTest::SetUp();
    Cluster(&config_);
  }

  void TearDown() override {
    b_server_.reset();
    b_stub_.reset();
    b_node_.reset();
    AdminTest::TearDown();
  }

  static void Cluster(Config* c) {
    c->cluster_enabled = true;
    c->cluster_heartbeat_interval_ms = 50;
    c->cluster_network_dead_ms = 150;
    c->cluster_auto_takeover = true;
    c->renew_interval_ms = 50;
    c->lease_ms = kLeaseMs;
    c->preempt_settle_ms = 50;
  }

  // A: the fixture's node, its admin server and stub_, over devices that
  // fail every request once a_dead_ is set.
  void StartA() {
    auto dead = a_dead_;
    LunOpener opener = [this, dead](const std::string& url) -> Result<std::shared_ptr<block::BlockDevice>> {
      auto it = media_.find(url);
      if (it == media_.end()) return Status::Unavailable("connection refused");
      auto dev = std::make_shared<block::MemDevice>(it->second, /*initiator=*/1);
      dev->SetFault([dead](const block::IoRequest&) {
        return dead->load() ? Status::IoError("the node is dead (test)") : Status();
      });
      return std::shared_ptr<block::BlockDevice>(dev);
    };
    auto ic = hub_->NewMember(kA);
    a_ic_ = ic.get();
    auto n = Node::Start(config_, opener, SmallDomain(), std::move(ic));
    ASSERT_TRUE(n.ok()) << n.status().ToString();
    node_ = std::move(n.value());
    // cache_flush_: where a test counts the flushes a giveback makes.
    auto s = AdminServer::Start(node_.get(), config_, nullptr, cache_flush_);
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    server_ = std::move(s.value());
    stub_ = pb::Admin::NewStub(grpc::CreateChannel("unix:" + config_.admin_socket, grpc::InsecureChannelCredentials()));
  }

  void StartB() {
    b_config_ = config_;
    b_config_.node_name = "n2";
    b_config_.state_dir = dir_ + "/state2";
    b_config_.admin_socket = dir_ + "/admin2.sock";
    LunOpener opener = [this](const std::string& url) -> Result<std::shared_ptr<block::BlockDevice>> {
      auto it = media_.find(url);
      if (it == media_.end()) return Status::Unavailable("connection refused");
      return std::shared_ptr<block::BlockDevice>(std::make_shared<block::MemDevice>(it->second, /*initiator=*/2));
    };
    auto n = Node::Start(b_config_, opener, SmallDomain(), hub_->NewMember(kB));
    ASSERT_TRUE(n.ok()) << n.status().ToString();
    b_node_ = std::move(n.value());
    auto s = AdminServer::Start(b_node_.get(), b_config_);
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    b_server_ = std::move(s.value());
    b_stub_ =
        pb::Admin::NewStub(grpc::CreateChannel("unix:" + b_config_.admin_socket, grpc::InsecureChannelCredentials()));
  }

  // A formats the reserve with volume v1, then B starts and stands by.
  void StartPair() {
    StartA();
    ASSERT_TRUE(Format("tank").ok());
    ASSERT_TRUE(CreateVolume("v1").ok());
    StartB();
    ASSERT_EQ(b_node_->GetReserve().state, ReserveState::kStandby) << b_node_->GetReserve().reason;
  }

  static pb::Cluster ClusterOf(pb::Admin::Stub* stub) {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(20));
    pb::GetClusterResponse r;
    grpc::Status s = stub->GetCluster(&ctx, pb::GetClusterRequest(), &r);
    EXPECT_TRUE(s.ok()) << s.error_message();
    return r.cluster();
  }
  static pb::Reserve ReserveOf(pb::Admin::Stub* stub) {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(20));
    pb::GetReserveResponse r;
    grpc::Status s = stub->GetReserve(&ctx, pb::GetReserveRequest(), &r);
    EXPECT_TRUE(s.ok()) << s.error_message();
    return r.reserve();
  }
  static const pb::ClusterPeer* Peer(const pb::Cluster& c, const std::string& name) {
    for (const auto& p : c.peers()) {
      if (p.name() == name) return &p;
    }
    return nullptr;
  }

  // Both nodes hear each other and B judges A alive.
  void WaitBothUp() {
    pb::Cluster a, b;
    const bool up = WaitFor([&] {
      a = ClusterOf(stub_.get());
      b = ClusterOf(b_stub_.get());
      const pb::ClusterPeer* pa = Peer(b, "n1");
      const pb::ClusterPeer* pb_ = Peer(a, "n2");
      return b.verdict() == "owner-alive" && !b.degraded() && pa != nullptr && !pa->left() &&
             pa->heard_ms_ago() < 150 && pb_ != nullptr && !pb_->left() && !a.degraded();
    });
    ASSERT_TRUE(up) << "A: " << a.DebugString() << "\nB: " << b.DebugString();
  }

  // Creates `name` in v1 through the domain `d` holding `data`, and syncs it.
  static void WriteSynced(fs::Domain* d, const std::string& name, const std::string& data) {
    ASSERT_NE(d, nullptr);
    auto vol = d->FindVolume("v1");
    ASSERT_TRUE(vol.ok()) << vol.status().ToString();
    auto f = d->Create(vol->id, fs::kRootIno, name, fs::FileType::kRegular, 0644, 0, 0);
    ASSERT_TRUE(f.ok()) << f.status().ToString();
    ASSERT_TRUE(d->Write(vol->id, f->ino, 0, data.data(), data.size()).ok());
    auto s = d->SyncTxg();
    ASSERT_TRUE(s.ok()) << s.ToString();
  }

  static std::string ReadFile(fs::Domain* d, const std::string& name) {
    auto vol = d->FindVolume("v1");
    EXPECT_TRUE(vol.ok()) << vol.status().ToString();
    if (!vol.ok()) return "";
    auto a = d->Lookup(vol->id, fs::kRootIno, name);
    EXPECT_TRUE(a.ok()) << name << ": " << a.status().ToString();
    if (!a.ok()) return "";
    std::string buf(4096, '\0');
    auto n = d->Read(vol->id, a->ino, 0, buf.size(), buf.data());
    EXPECT_TRUE(n.ok()) << n.status().ToString();
    buf.resize(n.ok() ? *n : 0);
    return buf;
  }

  std::shared_ptr<cluster::MemHub> hub_ = cluster::MemHub::Make();
  cluster::Interconnect* a_ic_ = nullptr;  // A's member; A's node owns it
  std::shared_ptr<std::atomic<bool>> a_dead_ = std::make_shared<std::atomic<bool>>(false);
  Config b_config_;
  std::unique_ptr<Node> b_node_;
  std::unique_ptr<AdminServer> b_server_;
  std::unique_ptr<pb::Admin::Stub> b_stub_;
};

TEST_F(AdminClusterTest, PairSeesEachOtherAndACutLinkIsReportedNotActedOn) {
  StartPair();
  WaitBothUp();

  // (a) Both up.
  pb::Cluster b = ClusterOf(b_stub_.get());
  EXPECT_TRUE(b.enabled());
  EXPECT_TRUE(b.connected());
  EXPECT_TRUE(b.quorate());
  EXPECT_EQ(b.ring_node(), kB);
  EXPECT_EQ(b.members(), 2u);
  EXPECT_FALSE(b.owned_here());
  EXPECT_NE(b.owner().find("node 'n1'"), std::string::npos) << b.owner();
  EXPECT_EQ(b.verdict(), "owner-alive") << b.why();
  EXPECT_FALSE(b.degraded());
  EXPECT_EQ(b.lease_ms(), kLeaseMs);
  EXPECT_TRUE(b.auto_takeover());
  EXPECT_EQ(b.takeovers(), 0u);
  EXPECT_EQ(b.last_takeover_size(), 0);
  ASSERT_EQ(b.peers_size(), 1) << b.DebugString();
  EXPECT_EQ(b.peers(0).name(), "n1");
  EXPECT_EQ(b.peers(0).state(), "online");
  EXPECT_EQ(b.peers(0).ring_node(), kA);
  EXPECT_GT(b.peers(0).heartbeats(), 0u);
  pb::Cluster a = ClusterOf(stub_.get());
  EXPECT_TRUE(a.owned_here());
  EXPECT_EQ(a.owner(), "this node");
  EXPECT_EQ(a.ring_node(), kA);
  EXPECT_FALSE(a.degraded());
  ASSERT_NE(Peer(a, "n2"), nullptr) << a.DebugString();
  EXPECT_EQ(Peer(a, "n2")->state(), "standby");
  EXPECT_EQ(Peer(a, "n2")->ring_node(), kB);

  // The CLI on B, aligned as the other `show` commands, and as JSON.
  CliResult cli = Cli({"--socket", b_config_.admin_socket, "cluster", "status"}, false);
  ASSERT_EQ(cli.exit_code, 0) << Describe(cli);
  EXPECT_EQ(
      cli.out.rfind("cluster        enabled (in-memory group, node 2), joined as ring node 2, quorate, 2 members\n", 0),
      0u)
      << cli.out;
  for (const std::string line :
       {"\nverdict        owner-alive", "\ndegraded       no\n", "\nauto-takeover  on\n", "\ntakeovers      0\n",
        "\npeer n1        online, ring node 1, heard ", "\nheartbeats     network silent ", "\nmirror         none"}) {
    EXPECT_NE(cli.out.find(line), std::string::npos) << line << "\n" << cli.out;
  }
  EXPECT_EQ(cli.out.find("last takeover"), std::string::npos) << cli.out;
  cli = Cli({"--json", "cluster", "status"});
  ASSERT_EQ(cli.exit_code, 0) << Describe(cli);
  json j = json::parse(cli.out);
  EXPECT_EQ(j["cluster"]["owner"], "this node") << cli.out;
  EXPECT_EQ(j["cluster"]["owned_here"], true) << cli.out;
  EXPECT_EQ(j["cluster"]["ring_node"], kA) << cli.out;
  ASSERT_EQ(j["cluster"]["peers"].size(), 1u) << cli.out;
  EXPECT_EQ(j["cluster"]["peers"][0]["name"], "n2") << cli.out;
  EXPECT_EQ(j["cluster"]["peers"][0]["state"], "standby") << cli.out;

  // (b) The interconnect is cut, both nodes alive: B reports the owner's
  // network heartbeat silent and does nothing about it; A keeps writing.
  hub_->Cut(kA, kB);
  ASSERT_TRUE(WaitFor([&] { return ClusterOf(b_stub_.get()).verdict() == "network-silent"; }))
      << ClusterOf(b_stub_.get()).DebugString();
  // That nothing happens is asserted over 5 leases (5 x 200 ms): B would
  // take over a dead owner once its disk heartbeat was silent for one lease
  // (network already silent), so a standby that wrongly acted would have
  // done so well within this window.
  const auto window_end = std::chrono::steady_clock::now() + std::chrono::milliseconds(5 * kLeaseMs);
  int checks = 0;
  while (std::chrono::steady_clock::now() < window_end) {
    b = ClusterOf(b_stub_.get());
    ASSERT_EQ(b.verdict(), "network-silent") << b.DebugString();
    ASSERT_TRUE(b.degraded()) << b.DebugString();
    ASSERT_EQ(b.takeovers(), 0u) << b.DebugString();
    ASSERT_EQ(b.last_takeover_size(), 0) << b.DebugString();
    ASSERT_EQ(ReserveOf(b_stub_.get()).state(), pb::RESERVE_STATE_STANDBY);
    ASSERT_EQ(ReserveOf(stub_.get()).state(), pb::RESERVE_STATE_ONLINE);
    checks++;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_GT(checks, 5);
  EXPECT_GE(b.network_silent_ms(), 4u * kLeaseMs) << b.DebugString();
  EXPECT_LT(b.disk_silent_ms(), kLeaseMs) << "A still renews: " << b.DebugString();
  EXPECT_EQ(b.members(), 1u);
  ASSERT_NE(Peer(b, "n1"), nullptr);
  EXPECT_TRUE(Peer(b, "n1")->left()) << b.DebugString();
  a = ClusterOf(stub_.get());
  EXPECT_TRUE(a.owned_here());
  EXPECT_TRUE(a.degraded()) << "A hears no partner: " << a.DebugString();
  {
    auto d = node_->domain();
    WriteSynced(d.get(), "during-cut", "written while cut");
  }
  EXPECT_EQ(ReserveOf(stub_.get()).state(), pb::RESERVE_STATE_ONLINE);
  cli = Cli({"--socket", b_config_.admin_socket, "cluster", "status"}, false);
  ASSERT_EQ(cli.exit_code, 0) << Describe(cli);
  EXPECT_NE(cli.out.find("\nverdict        network-silent"), std::string::npos) << cli.out;
  EXPECT_NE(cli.out.find("\ndegraded       yes"), std::string::npos) << cli.out;
  EXPECT_NE(cli.out.find("left the group, last heard "), std::string::npos) << cli.out;
  {
    Metrics metrics;
    AddNodeCollectors(&metrics, b_node_.get(), nullptr);
    const std::string text = metrics.Render();
    EXPECT_EQ(Sample(text, "nasgw_cluster_enabled"), 1.0) << text;
    EXPECT_EQ(Sample(text, "nasgw_cluster_connected"), 1.0) << text;
    EXPECT_EQ(Sample(text, "nasgw_cluster_quorate"), 1.0) << text;
    EXPECT_EQ(Sample(text, "nasgw_cluster_degraded"), 1.0) << text;
    EXPECT_EQ(Sample(text, "nasgw_cluster_takeovers_total"), 0.0) << text;
    EXPECT_GE(Sample(text, "nasgw_cluster_owner_network_silent_seconds"), 0.8) << text;
    EXPECT_GE(Sample(text, "nasgw_cluster_owner_disk_silent_seconds"), 0.0) << text;
    EXPECT_LT(Sample(text, "nasgw_cluster_owner_disk_silent_seconds"), kLeaseMs / 1e3) << text;
    EXPECT_GE(Sample(text, "nasgw_cluster_peer_heard_seconds{peer=\"n1\"}"), 0.8) << text;
    EXPECT_EQ(Sample(text, "nasgw_cluster_last_takeover_seconds"), 0.0) << text;
  }

  // Healed: back to both heartbeats live, nobody degraded.
  hub_->Heal(kA, kB);
  WaitBothUp();
  b = ClusterOf(b_stub_.get());
  EXPECT_LT(b.network_silent_ms(), 150u) << "heard again: " << b.DebugString();
  EXPECT_EQ(b.takeovers(), 0u);
  EXPECT_EQ(b.members(), 2u);
  EXPECT_EQ(ReserveOf(b_stub_.get()).state(), pb::RESERVE_STATE_STANDBY);
  auto d = node_->domain();
  ASSERT_NE(d, nullptr);
  EXPECT_EQ(ReadFile(d.get(), "during-cut"), "written while cut");
}

TEST_F(AdminClusterTest, DeadOwnerIsTakenOverAutomatically) {
  StartPair();
  WaitBothUp();
  {
    auto d = node_->domain();
    WriteSynced(d.get(), "kept", "before the crash");
  }

  // A dies: it leaves the interconnect (as a dead process's CPG member
  // does) and its LUN I/O fails from then on, so its lease is renewed no
  // more (A fences itself when its renewal fails). The member leaves first:
  // a fenced A heard saying so would be taken over at once, without the
  // dead-owner verdict this test is about.
  a_ic_->Stop();
  a_dead_->store(true);
  const auto died = std::chrono::steady_clock::now();
  pb::Reserve rb;
  ASSERT_TRUE(WaitFor([&] {
    rb = ReserveOf(b_stub_.get());
    return rb.state() == pb::RESERVE_STATE_ONLINE;
  })) << "B: "
      << rb.DebugString() << "\n"
      << ClusterOf(b_stub_.get()).DebugString();
  const auto took_ms =
      std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - died).count();
  // Not before the owner's disk heartbeat was silent for a lease: B counts
  // the silence from its own read that saw A's last renewal, which may have
  // come up to a renewal interval (50 ms) before A died.
  EXPECT_GE(took_ms, kLeaseMs - 50) << "took over " << took_ms << " ms after A died";

  // The cluster thread records the takeover (the count, the "fenced" and
  // "online" steps) just after the reserve came online: a GetCluster in
  // between still shows only "detected".
  pb::Cluster b;
  ASSERT_TRUE(WaitFor([&] {
    b = ClusterOf(b_stub_.get());
    return b.takeovers() >= 1;
  })) << b.DebugString();
  EXPECT_EQ(b.takeovers(), 1u) << b.DebugString();
  EXPECT_TRUE(b.owned_here());
  EXPECT_EQ(b.owner(), "this node");
  EXPECT_TRUE(b.degraded()) << "B owns the reserve and hears no partner: " << b.DebugString();
  ASSERT_EQ(b.last_takeover_size(), 3) << b.DebugString();
  EXPECT_EQ(b.last_takeover(0).what().rfind("detected: owner-dead", 0), 0u) << b.DebugString();
  EXPECT_EQ(b.last_takeover(1).what().rfind("fenced: ", 0), 0u) << b.DebugString();
  EXPECT_EQ(b.last_takeover(2).what().rfind("online: ", 0), 0u) << b.DebugString();
  EXPECT_EQ(b.last_takeover(0).after_ms(), 0u) << b.DebugString();
  for (int i = 1; i < b.last_takeover_size(); i++) {
    EXPECT_GE(b.last_takeover(i).after_ms(), b.last_takeover(i - 1).after_ms()) << b.DebugString();
    EXPECT_GE(b.last_takeover(i).wall_unix_ns(), b.last_takeover(i - 1).wall_unix_ns()) << b.DebugString();
  }
  EXPECT_GT(b.last_takeover(0).wall_unix_ns(), 0);
  // The first request a head gets answered here ends the timeline (nasgwd's
  // head service calls NoteServed after each); later ones add nothing.
  b_node_->NoteServed("GETATTR");
  b_node_->NoteServed("READ");
  b = ClusterOf(b_stub_.get());
  ASSERT_EQ(b.last_takeover_size(), 4) << b.DebugString();
  EXPECT_EQ(b.last_takeover(3).what().rfind("first op served: GETATTR", 0), 0u) << b.DebugString();
  EXPECT_GE(b.last_takeover(3).after_ms(), b.last_takeover(2).after_ms()) << b.DebugString();

  // What A wrote and synced before it died is on B.
  auto d = b_node_->domain();
  ASSERT_NE(d, nullptr);
  EXPECT_EQ(ReadFile(d.get(), "kept"), "before the crash");
  WriteSynced(d.get(), "after", "B writes");

  // A fenced itself: its renewals failed.
  ASSERT_TRUE(WaitFor([&] { return node_->GetReserve().state == ReserveState::kFenced; }))
      << ReserveStateName(node_->GetReserve().state) << ": " << node_->GetReserve().reason;
  EXPECT_EQ(node_->domain(), nullptr);

  // The CLI on B: the takeover and its timeline, aligned.
  CliResult cli = Cli({"--socket", b_config_.admin_socket, "cluster", "status"}, false);
  ASSERT_EQ(cli.exit_code, 0) << Describe(cli);
  EXPECT_NE(cli.out.find("\nowner          this node\n"), std::string::npos) << cli.out;
  EXPECT_NE(cli.out.find("\ntakeovers      1\n"), std::string::npos) << cli.out;
  EXPECT_NE(cli.out.find("\nlast takeover  +0 ms detected: owner-dead"), std::string::npos) << cli.out;
  EXPECT_NE(cli.out.find(" ms fenced: "), std::string::npos) << cli.out;
  EXPECT_NE(cli.out.find("\n               +" + std::to_string(b.last_takeover(2).after_ms()) + " ms online: "),
            std::string::npos)
      << cli.out;
  EXPECT_EQ(cli.out.find("\nheartbeats "), std::string::npos) << "the owner's own: " << cli.out;
  cli = Cli({"--socket", b_config_.admin_socket, "--json", "cluster", "status"}, false);
  ASSERT_EQ(cli.exit_code, 0) << Describe(cli);
  json j = json::parse(cli.out);
  EXPECT_EQ(j["cluster"]["takeovers"], 1) << cli.out;
  ASSERT_EQ(j["cluster"]["last_takeover"].size(), 4u) << cli.out;
  EXPECT_EQ(j["cluster"]["last_takeover"][2]["after_ms"], b.last_takeover(2).after_ms()) << cli.out;

  Metrics metrics;
  AddNodeCollectors(&metrics, b_node_.get(), nullptr);
  const std::string text = metrics.Render();
  EXPECT_EQ(Sample(text, "nasgw_cluster_takeovers_total"), 1.0) << text;
  EXPECT_EQ(Sample(text, "nasgw_cluster_degraded"), 1.0) << text;
  EXPECT_DOUBLE_EQ(Sample(text, "nasgw_cluster_last_takeover_seconds"), b.last_takeover(3).after_ms() / 1e3) << text;
  EXPECT_GE(Sample(text, "nasgw_cluster_peer_heard_seconds{peer=\"n1\"}"), kLeaseMs / 1e3) << text;
  EXPECT_EQ(Sample(text, "nasgw_reserve_owned"), 1.0) << text;
}

// Active/active ([cluster] home_domains): a reserve split into two domains,
// each node serving its own; a dead node's domain is taken by the other,
// which keeps serving its own; the node back stands by until a giveback,
// and then each serves its own again.
TEST_F(AdminClusterTest, ActiveActiveEachNodeServesItsHomeDomain) {
  config_.cluster_home_domains = {0};
  StartA();
  ASSERT_TRUE(node_->FormatReserve("tank", kMiB, false, 2).ok());
  auto volume_in = [](Node* n, uint32_t domain, const std::string& volume) -> fs::Domain* {
    uint64_t verifier = 0;
    auto all = n->domains(&verifier, nullptr);
    if (!all || domain >= all->size() || !(*all)[domain]) return nullptr;
    fs::Domain* d = (*all)[domain].get();
    return d->FindVolume(volume).ok() ? d : nullptr;
  };
  auto serves = [](Node* n, uint32_t domain) {
    uint64_t verifier = 0;
    auto all = n->domains(&verifier, nullptr);
    return all && domain < all->size() && (*all)[domain] != nullptr;
  };
  ASSERT_EQ(node_->GetReserve().state, ReserveState::kOnline) << node_->GetReserve().reason;
  EXPECT_TRUE(serves(node_.get(), 0));
  EXPECT_FALSE(serves(node_.get(), 1)) << "domain 1 is B's home: A leaves it free";
  // A creates only in its own domain.
  auto in_b = node_->CreateVolume("vb", fs::kRecordBytesDefault, 1);
  EXPECT_EQ(in_b.status().code(), Code::kFailedPrecondition) << in_b.status().ToString();
  auto va = node_->CreateVolume("va", fs::kRecordBytesDefault);
  ASSERT_TRUE(va.ok()) << va.status().ToString();
  ASSERT_NE(volume_in(node_.get(), 0, "va"), nullptr);

  {
    // StartB copies config_: A's home, changed to B's for B; B gives A's
    // domain back only when told (A's own default gives on its own).
    config_.cluster_home_domains = {1};
    config_.cluster_auto_failback = false;
    StartB();
    config_.cluster_home_domains = {0};
    config_.cluster_auto_failback = true;
  }
  ASSERT_EQ(b_node_->GetReserve().state, ReserveState::kOnline) << b_node_->GetReserve().reason;
  EXPECT_TRUE(serves(b_node_.get(), 1));
  EXPECT_FALSE(serves(b_node_.get(), 0));
  ASSERT_TRUE(b_node_->CreateVolume("vb", fs::kRecordBytesDefault).ok());
  fs::Domain* da = volume_in(node_.get(), 0, "va");
  fs::Domain* db = volume_in(b_node_.get(), 1, "vb");
  ASSERT_TRUE(da && db);
  auto write_synced = [](fs::Domain* d, const std::string& volume, const std::string& name, const std::string& data) {
    auto vol = d->FindVolume(volume);
    ASSERT_TRUE(vol.ok()) << vol.status().ToString();
    auto f = d->Create(vol->id, fs::kRootIno, name, fs::FileType::kRegular, 0644, 0, 0);
    ASSERT_TRUE(f.ok()) << f.status().ToString();
    ASSERT_TRUE(d->Write(vol->id, f->ino, 0, data.data(), data.size()).ok());
    ASSERT_TRUE(d->SyncTxg().ok());
  };
  auto read = [](fs::Domain* d, const std::string& volume, const std::string& name) -> std::string {
    if (d == nullptr) return "(no domain)";
    auto vol = d->FindVolume(volume);
    if (!vol.ok()) return vol.status().ToString();
    auto a = d->Lookup(vol->id, fs::kRootIno, name);
    if (!a.ok()) return a.status().ToString();
    std::string buf(4096, '\0');
    auto n = d->Read(vol->id, a->ino, 0, buf.size(), buf.data());
    if (!n.ok()) return n.status().ToString();
    buf.resize(*n);
    return buf;
  };
  write_synced(da, "va", "a", "written on A");
  write_synced(db, "vb", "b", "written on B");
  // Both serve: each judges the other alive, neither takes anything.
  pb::Cluster ca, cb;
  ASSERT_TRUE(WaitFor([&] {
    ca = ClusterOf(stub_.get());
    cb = ClusterOf(b_stub_.get());
    return ca.verdict() == "owner-alive" && cb.verdict() == "owner-alive" && Peer(ca, "n2") && Peer(cb, "n1");
  })) << ca.DebugString()
      << cb.DebugString();
  EXPECT_FALSE(serves(node_.get(), 1));
  EXPECT_FALSE(serves(b_node_.get(), 0));
  EXPECT_EQ(node_->ListVolumes()->size(), 1u);
  EXPECT_EQ(b_node_->ListVolumes()->size(), 1u);
  {
    // Each node's metrics: its own domain's intent log, not the partner's.
    Metrics metrics;
    AddNodeCollectors(&metrics, b_node_.get(), nullptr);
    const std::string text = metrics.Render();
    EXPECT_NE(text.find("nasgw_log_capacity_bytes{domain=\"1\"}"), std::string::npos) << text;
    EXPECT_EQ(text.find("nasgw_log_capacity_bytes{domain=\"0\"}"), std::string::npos) << text;
  }
  // A manual takeover of a live partner's domain is refused.
  EXPECT_EQ(b_node_->TakeoverReserve(false).code(), Code::kFailedPrecondition);
  // The admin's calls on A act on its own domain, the partner's being none
  // of its business (nor a crash): exports, shares, snapshots and clones.
  CliResult cli = Cli({"export", "add", "va"});
  EXPECT_EQ(cli.exit_code, 0) << Describe(cli);
  cli = Cli({"share", "add", "va", "--name", "ShareA"});
  EXPECT_EQ(cli.exit_code, 0) << Describe(cli);
  cli = Cli({"share", "remove", "NoSuchShare"});
  EXPECT_NE(cli.exit_code, 0) << Describe(cli);
  EXPECT_NE(cli.err.find("NoSuchShare"), std::string::npos) << Describe(cli);
  cli = Cli({"share", "remove", "ShareA"});
  EXPECT_EQ(cli.exit_code, 0) << Describe(cli);
  cli = Cli({"snapshot", "create", "va", "s1"});
  EXPECT_EQ(cli.exit_code, 0) << Describe(cli);
  cli = Cli({"snapshot", "clone", "va", "s1", "va-clone"});
  EXPECT_EQ(cli.exit_code, 0) << Describe(cli);
  cli = Cli({"volume", "delete", "va-clone", "--force"});
  EXPECT_EQ(cli.exit_code, 0) << Describe(cli);

  // A dies. B takes domain 0 (preempting A's key) and keeps serving 1.
  a_ic_->Stop();
  a_dead_->store(true);
  ASSERT_TRUE(WaitFor([&] { return serves(b_node_.get(), 0); })) << ClusterOf(b_stub_.get()).DebugString();
  EXPECT_TRUE(serves(b_node_.get(), 1));
  EXPECT_EQ(read(volume_in(b_node_.get(), 0, "va"), "va", "a"), "written on A");
  EXPECT_EQ(read(volume_in(b_node_.get(), 1, "vb"), "vb", "b"), "written on B");
  EXPECT_EQ(b_node_->ListVolumes()->size(), 2u);
  ASSERT_TRUE(WaitFor([&] { return ClusterOf(b_stub_.get()).takeovers() == 1; }));
  ASSERT_TRUE(WaitFor([&] { return node_->GetReserve().state == ReserveState::kFenced; }))
      << node_->GetReserve().reason;
  write_synced(volume_in(b_node_.get(), 0, "va"), "va", "a2", "written on B for A");

  // A comes back: its home is B's now, so it stands by.
  server_.reset();
  stub_.reset();
  node_.reset();
  a_dead_ = std::make_shared<std::atomic<bool>>(false);
  StartA();
  ASSERT_EQ(node_->GetReserve().state, ReserveState::kStandby) << node_->GetReserve().reason;
  ASSERT_TRUE(WaitFor([&] {
    auto c = ClusterOf(stub_.get());
    return c.verdict() == "owner-alive" && Peer(ClusterOf(b_stub_.get()), "n1") != nullptr;
  }));
  // B (auto_failback off) keeps A's domain until told: while A is heard
  // standing by for many heartbeats, nothing moves.
  const uint64_t heard = Peer(ClusterOf(b_stub_.get()), "n1")->heartbeats();
  ASSERT_TRUE(WaitFor([&] { return Peer(ClusterOf(b_stub_.get()), "n1")->heartbeats() >= heard + 20; }));
  EXPECT_TRUE(serves(b_node_.get(), 0));
  EXPECT_EQ(node_->GetReserve().state, ReserveState::kStandby);
  // B gives A its domain back, keeping its own online; A takes it.
  ASSERT_TRUE(b_node_->GiveBack().ok());
  EXPECT_TRUE(serves(b_node_.get(), 1)) << "B's own domain stays online through the giveback";
  EXPECT_FALSE(serves(b_node_.get(), 0));
  EXPECT_EQ(b_node_->GiveBack().code(), Code::kFailedPrecondition) << "nothing left to give";
  ASSERT_TRUE(WaitFor([&] { return serves(node_.get(), 0) && serves(b_node_.get(), 1); }))
      << ReserveStateName(node_->GetReserve().state) << ": " << node_->GetReserve().reason << " / "
      << ReserveStateName(b_node_->GetReserve().state) << ": " << b_node_->GetReserve().reason;
  EXPECT_FALSE(serves(node_.get(), 1));
  EXPECT_FALSE(serves(b_node_.get(), 0));
  EXPECT_EQ(read(volume_in(node_.get(), 0, "va"), "va", "a2"), "written on B for A");
  EXPECT_EQ(read(volume_in(b_node_.get(), 1, "vb"), "vb", "b"), "written on B");
}

// ---- planned moves: `nasgw cluster giveback` and `nasgw cluster takeover`

TEST_F(AdminTest, PlannedMovesNeedAPair) {
  std::atomic<int> flushes{0};
  cache_flush_ = [&]() {
    flushes++;
    return nasgw::Status();
  };
  StartAll();
  ASSERT_TRUE(Format("tank").ok());
  pb::ClusterGiveBackResponse gr;
  grpc::Status s = Call(&pb::Admin::Stub::ClusterGiveBack, pb::ClusterGiveBackRequest(), &gr);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::FAILED_PRECONDITION) << s.error_message();
  EXPECT_NE(s.error_message().find("[cluster] enabled = false"), std::string::npos) << s.error_message();
  EXPECT_EQ(flushes.load(), 0) << "nothing to give back: no flush";
  pb::ClusterTakeoverRequest treq;
  pb::ClusterTakeoverResponse tr;
  s = Call(&pb::Admin::Stub::ClusterTakeover, treq, &tr);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::FAILED_PRECONDITION) << s.error_message();
  // The wait is bounded: 10 minutes at most, refused beyond before anything else.
  treq.set_timeout_ms(600001);
  s = Call(&pb::Admin::Stub::ClusterTakeover, treq, &tr);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << s.error_message();
  EXPECT_NE(s.error_message().find("600000"), std::string::npos) << s.error_message();
  EXPECT_EQ(Reserve().state(), pb::RESERVE_STATE_ONLINE);

  CliResult cli = Cli({"cluster", "giveback"});
  EXPECT_EQ(cli.exit_code, 6) << Describe(cli);
  EXPECT_NE(cli.err.find("[cluster] enabled = false"), std::string::npos) << cli.err;
  cli = Cli({"--json", "cluster", "giveback"});
  EXPECT_EQ(cli.exit_code, 6) << Describe(cli);
  EXPECT_EQ(json::parse(cli.out)["error"]["code"], "FAILED_PRECONDITION") << cli.out;
  cli = Cli({"cluster", "takeover"});
  EXPECT_EQ(cli.exit_code, 6) << Describe(cli);
  EXPECT_NE(cli.err.find("reserve takeover"), std::string::npos) << cli.err;
  for (const std::string bad : {"600001", "0", "-5", "abc", "", "1e3"}) {
    cli = Cli({"cluster", "takeover", "--timeout-ms", bad});
    EXPECT_EQ(cli.exit_code, 2) << bad << "\n" << Describe(cli);
    EXPECT_NE(cli.err.find("--timeout-ms"), std::string::npos) << bad << "\n" << cli.err;
  }
  cli = Cli({"cluster", "giveback", "--timeout-ms", "100"});
  EXPECT_EQ(cli.exit_code, 2) << Describe(cli);
  cli = Cli({"cluster", "giveback", "--force"});
  EXPECT_EQ(cli.exit_code, 2) << Describe(cli);
  cli = Cli({"cluster", "takeover", "extra"});
  EXPECT_EQ(cli.exit_code, 2) << Describe(cli);
  EXPECT_EQ(flushes.load(), 0);
  EXPECT_EQ(Reserve().state(), pb::RESERVE_STATE_ONLINE);

  // Help: the group's and each command's.
  cli = Cli({"cluster", "-h"});
  EXPECT_EQ(cli.exit_code, 0) << Describe(cli);
  EXPECT_NE(cli.out.find("cluster giveback"), std::string::npos) << cli.out;
  EXPECT_NE(cli.out.find("cluster takeover [--timeout-ms N]"), std::string::npos) << cli.out;
  cli = Cli({"cluster", "giveback", "--help"});
  EXPECT_NE(cli.out.find("usage: nasgw cluster giveback"), std::string::npos) << cli.out;
  cli = Cli({"cluster", "takeover", "--help"});
  EXPECT_NE(cli.out.find("usage: nasgw cluster takeover [--timeout-ms N]"), std::string::npos) << cli.out;
  cli = Cli({"--help"});
  EXPECT_NE(cli.out.find("cluster giveback"), std::string::npos) << cli.out;
  EXPECT_NE(cli.out.find("cluster takeover"), std::string::npos) << cli.out;
}

// A gives the reserve to B (the RPC), takes it back (the RPC), gives it
// again (the CLI) and takes it back (the CLI): each time the data each
// wrote is on the other, and both nodes' views say who owns.
TEST_F(AdminClusterTest, PlannedGiveBackAndTakeoverMoveTheReserveBothWays) {
  std::atomic<int> flushes{0};
  cache_flush_ = [&]() {
    flushes++;
    return nasgw::Status();
  };
  StartPair();
  WaitBothUp();
  {
    auto d = node_->domain();
    WriteSynced(d.get(), "from-a", "A wrote this");
  }

  // (a) Giveback on A, the owner, with B heard standing by.
  pb::ClusterGiveBackResponse gr;
  grpc::Status s = Call(&pb::Admin::Stub::ClusterGiveBack, pb::ClusterGiveBackRequest(), &gr);
  ASSERT_TRUE(s.ok()) << s.error_message();
  const auto gave = std::chrono::steady_clock::now();
  EXPECT_EQ(flushes.load(), 1) << "the write-back cache is flushed before the domain closes";
  EXPECT_FALSE(gr.cluster().owned_here()) << gr.cluster().DebugString();
  EXPECT_TRUE(gr.cluster().enabled());
  EXPECT_EQ(ReserveOf(stub_.get()).state(), pb::RESERVE_STATE_STANDBY);
  EXPECT_EQ(node_->domain(), nullptr);
  pb::Reserve rb;
  ASSERT_TRUE(WaitFor([&] {
    rb = ReserveOf(b_stub_.get());
    return rb.state() == pb::RESERVE_STATE_ONLINE;
  })) << "B: "
      << rb.DebugString() << "\n"
      << ClusterOf(b_stub_.get()).DebugString();
  const auto b_took_ms =
      std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - gave).count();
  std::cout << "[ giveback ] B online " << b_took_ms << " ms after A's giveback returned\n";
  EXPECT_EQ(ReserveOf(stub_.get()).state(), pb::RESERVE_STATE_STANDBY);
  {
    auto d = b_node_->domain();
    ASSERT_NE(d, nullptr);
    EXPECT_EQ(ReadFile(d.get(), "from-a"), "A wrote this");
  }
  pb::Cluster a, b;
  ASSERT_TRUE(WaitFor([&] {
    b = ClusterOf(b_stub_.get());
    a = ClusterOf(stub_.get());
    return b.owned_here() && b.verdict() == "owner-alive" && !a.owned_here() && a.verdict() == "owner-alive" &&
           a.owner().find("node 'n2'") != std::string::npos;
  })) << "A: "
      << a.DebugString() << "\nB: " << b.DebugString();
  EXPECT_EQ(b.owner(), "this node");
  EXPECT_EQ(b.takeovers(), 1u) << b.DebugString();
  ASSERT_GE(b.last_takeover_size(), 1) << b.DebugString();
  EXPECT_EQ(b.last_takeover(0).what().rfind("detected: no-owner", 0), 0u) << b.DebugString();
  EXPECT_EQ(b.last_takeover(b.last_takeover_size() - 1).what().rfind("online: ", 0), 0u) << b.DebugString();
  EXPECT_FALSE(a.owned_here());
  EXPECT_EQ(a.takeovers(), 0u);
  {
    CliResult cli = Cli({"cluster", "status"});
    ASSERT_EQ(cli.exit_code, 0) << Describe(cli);
    EXPECT_NE(cli.out.find("\nowner          node 'n2'"), std::string::npos) << cli.out;
    EXPECT_NE(cli.out.find("\nverdict        owner-alive"), std::string::npos) << cli.out;
    cli = Cli({"--socket", b_config_.admin_socket, "cluster", "status"}, false);
    ASSERT_EQ(cli.exit_code, 0) << Describe(cli);
    EXPECT_NE(cli.out.find("\nowner          this node\n"), std::string::npos) << cli.out;
    EXPECT_NE(cli.out.find("\npeer n1        standby"), std::string::npos) << cli.out;
  }
  {
    auto d = b_node_->domain();
    WriteSynced(d.get(), "from-b", "B wrote this meanwhile");
  }

  // (b) Takeover on A, now the standby: B gives the reserve back when asked.
  pb::ClusterTakeoverRequest treq;
  treq.set_timeout_ms(10000);
  pb::ClusterTakeoverResponse tr;
  const auto asked = std::chrono::steady_clock::now();
  s = Call(&pb::Admin::Stub::ClusterTakeover, treq, &tr);
  ASSERT_TRUE(s.ok()) << s.error_message() << "\nA: " << ClusterOf(stub_.get()).DebugString()
                      << "\nB: " << ClusterOf(b_stub_.get()).DebugString();
  const auto a_took_ms =
      std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - asked).count();
  std::cout << "[ takeover ] A online " << a_took_ms << " ms after it asked ("
            << std::chrono::duration_cast<std::chrono::milliseconds>(asked - gave).count()
            << " ms after its giveback)\n";
  EXPECT_TRUE(tr.cluster().owned_here()) << tr.cluster().DebugString();
  EXPECT_EQ(tr.cluster().owner(), "this node");
  EXPECT_EQ(ReserveOf(stub_.get()).state(), pb::RESERVE_STATE_ONLINE);
  ASSERT_TRUE(WaitFor([&] { return ReserveOf(b_stub_.get()).state() == pb::RESERVE_STATE_STANDBY; }))
      << ReserveOf(b_stub_.get()).DebugString();
  EXPECT_EQ(b_node_->domain(), nullptr);
  {
    auto d = node_->domain();
    ASSERT_NE(d, nullptr);
    EXPECT_EQ(ReadFile(d.get(), "from-a"), "A wrote this");
    EXPECT_EQ(ReadFile(d.get(), "from-b"), "B wrote this meanwhile");
    WriteSynced(d.get(), "from-a-again", "A again");
  }
  ASSERT_TRUE(WaitFor([&] {
    b = ClusterOf(b_stub_.get());
    return !b.owned_here() && b.verdict() == "owner-alive" && b.owner().find("node 'n1'") != std::string::npos;
  })) << b.DebugString();

  // (c) The same through the CLI: giveback on A, then takeover on A.
  WaitBothUp();
  CliResult cli = Cli({"cluster", "giveback"});
  ASSERT_EQ(cli.exit_code, 0) << Describe(cli);
  EXPECT_EQ(
      cli.out.rfind("gave the reserve back: this node stands by, the partner takes it over\ncluster        enabled", 0),
      0u)
      << cli.out;
  EXPECT_NE(cli.out.find("\nverdict        "), std::string::npos) << cli.out;
  EXPECT_EQ(flushes.load(), 2);
  ASSERT_TRUE(WaitFor([&] { return ReserveOf(b_stub_.get()).state() == pb::RESERVE_STATE_ONLINE; }))
      << ClusterOf(b_stub_.get()).DebugString();
  {
    auto d = b_node_->domain();
    ASSERT_NE(d, nullptr);
    EXPECT_EQ(ReadFile(d.get(), "from-a-again"), "A again");
    WriteSynced(d.get(), "from-b-again", "B again");
  }
  cli = Cli({"--json", "cluster", "takeover", "--timeout-ms", "15000"});
  ASSERT_EQ(cli.exit_code, 0) << Describe(cli);
  json j = json::parse(cli.out);
  EXPECT_EQ(j["cluster"]["owned_here"], true) << cli.out;
  EXPECT_EQ(j["cluster"]["owner"], "this node") << cli.out;
  EXPECT_NE(j["result"].get<std::string>().find("took the reserve over"), std::string::npos) << cli.out;
  EXPECT_EQ(ReserveOf(stub_.get()).state(), pb::RESERVE_STATE_ONLINE);
  {
    auto d = node_->domain();
    ASSERT_NE(d, nullptr);
    EXPECT_EQ(ReadFile(d.get(), "from-b-again"), "B again");
    EXPECT_EQ(ReadFile(d.get(), "from-a"), "A wrote this");
  }
  ASSERT_TRUE(WaitFor([&] { return ReserveOf(b_stub_.get()).state() == pb::RESERVE_STATE_STANDBY; }));
  EXPECT_EQ(flushes.load(), 2) << "a takeover flushes nothing here (the owner is asked)";
}

TEST_F(AdminClusterTest, PlannedMovesAreRefusedWhenNobodyWouldTakeOver) {
  StartPair();
  WaitBothUp();

  // Giveback on the standby, takeover on the owner: refused.
  pb::ClusterGiveBackResponse gr;
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(20));
  grpc::Status s = b_stub_->ClusterGiveBack(&ctx, pb::ClusterGiveBackRequest(), &gr);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::FAILED_PRECONDITION) << s.error_message();
  CliResult cli = Cli({"--socket", b_config_.admin_socket, "cluster", "giveback"}, false);
  EXPECT_EQ(cli.exit_code, 6) << Describe(cli);
  pb::ClusterTakeoverRequest treq;
  treq.set_timeout_ms(2000);
  pb::ClusterTakeoverResponse tr;
  s = Call(&pb::Admin::Stub::ClusterTakeover, treq, &tr);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::FAILED_PRECONDITION) << s.error_message();
  EXPECT_NE(s.error_message().find("already serves"), std::string::npos) << s.error_message();
  cli = Cli({"cluster", "takeover"});
  EXPECT_EQ(cli.exit_code, 6) << Describe(cli);
  EXPECT_EQ(ReserveOf(stub_.get()).state(), pb::RESERVE_STATE_ONLINE);
  EXPECT_EQ(ReserveOf(b_stub_.get()).state(), pb::RESERVE_STATE_STANDBY);

  // The partner cut off: A hears no standby, so it keeps the reserve; B
  // cannot ask A, and says so at once rather than waiting out its timeout.
  hub_->Cut(kA, kB);
  ASSERT_TRUE(WaitFor([&] { return ClusterOf(stub_.get()).degraded(); })) << ClusterOf(stub_.get()).DebugString();
  ASSERT_TRUE(WaitFor([&] { return ClusterOf(b_stub_.get()).verdict() == "network-silent"; }))
      << ClusterOf(b_stub_.get()).DebugString();
  {
    grpc::ClientContext c2;
    c2.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(20));
    s = stub_->ClusterGiveBack(&c2, pb::ClusterGiveBackRequest(), &gr);
  }
  EXPECT_EQ(s.error_code(), grpc::StatusCode::FAILED_PRECONDITION) << s.error_message();
  EXPECT_NE(s.error_message().find("no partner"), std::string::npos) << s.error_message();
  cli = Cli({"cluster", "giveback"});
  EXPECT_EQ(cli.exit_code, 6) << Describe(cli);
  EXPECT_EQ(ReserveOf(stub_.get()).state(), pb::RESERVE_STATE_ONLINE);
  {
    auto d = node_->domain();
    ASSERT_NE(d, nullptr) << "A still serves";
    WriteSynced(d.get(), "still-a", "A still writes");
  }

  // B asks once A's last heartbeat is older than the network bound (150
  // ms). Asked sooner, B sends its request into the cut link and waits out
  // the timeout: see RequestTakeoverRightAfterTheCutSaysUnavailable below.
  ASSERT_TRUE(WaitFor([&] {
    const pb::Cluster c = ClusterOf(b_stub_.get());
    const pb::ClusterPeer* pa = Peer(c, "n1");
    return pa != nullptr && pa->heard_ms_ago() >= 200;
  })) << ClusterOf(b_stub_.get()).DebugString();
  treq.set_timeout_ms(20000);
  const auto asked = std::chrono::steady_clock::now();
  {
    grpc::ClientContext c3;
    c3.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
    s = b_stub_->ClusterTakeover(&c3, treq, &tr);
  }
  const auto took_ms =
      std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - asked).count();
  EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAVAILABLE) << s.error_message();
  EXPECT_NE(s.error_message().find("not heard"), std::string::npos) << s.error_message();
  EXPECT_LT(took_ms, 2000) << "refused at once, not after the 20 s timeout";
  cli = Cli({"--socket", b_config_.admin_socket, "cluster", "takeover", "--timeout-ms", "20000"}, false);
  EXPECT_EQ(cli.exit_code, 1) << Describe(cli);
  EXPECT_NE(cli.err.find("not heard on the interconnect"), std::string::npos) << cli.err;
  EXPECT_EQ(ReserveOf(stub_.get()).state(), pb::RESERVE_STATE_ONLINE);
  EXPECT_EQ(ReserveOf(b_stub_.get()).state(), pb::RESERVE_STATE_STANDBY);

  // Healed: a giveback goes through again.
  hub_->Heal(kA, kB);
  WaitBothUp();
  {
    grpc::ClientContext c4;
    c4.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(20));
    s = stub_->ClusterGiveBack(&c4, pb::ClusterGiveBackRequest(), &gr);
  }
  ASSERT_TRUE(s.ok()) << s.error_message();
  ASSERT_TRUE(WaitFor([&] { return ReserveOf(b_stub_.get()).state() == pb::RESERVE_STATE_ONLINE; }))
      << ClusterOf(b_stub_.get()).DebugString();
  auto d = b_node_->domain();
  ASSERT_NE(d, nullptr);
  EXPECT_EQ(ReadFile(d.get(), "still-a"), "A still writes");
}

// Two checks that fail against daemon/node.cc as it stands (they are
// skipped until it is fixed; see each one's note). Both are planned moves
// that should work, or fail fast, and instead wait out the caller's timeout.

// BUG (node.cc, Node::RequestTakeover): whether the owner can be asked is
// judged by PeerMonitor::SilentMs, the time since its last heartbeat only,
// which ignores that the interconnect already said the owner left (CPG's
// membership: PeerMonitor::NetworkSilentMs and GiveBack's own check both
// count it). For up to network_dead_ms after the link is cut, B sends its
// request into the cut link and waits its whole timeout, then answers
// "did not come over" (TimedOut -> INTERNAL) instead of UNAVAILABLE at once.
TEST_F(AdminClusterTest, RequestTakeoverRightAfterTheCutSaysUnavailable) {
  StartPair();
  WaitBothUp();
  hub_->Cut(kA, kB);
  // B learns at once that A left the group (the verdict says so).
  ASSERT_TRUE(WaitFor([&] { return ClusterOf(b_stub_.get()).verdict() == "network-silent"; }))
      << ClusterOf(b_stub_.get()).DebugString();
  pb::ClusterTakeoverRequest treq;
  treq.set_timeout_ms(3000);
  pb::ClusterTakeoverResponse tr;
  const auto asked = std::chrono::steady_clock::now();
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(20));
  grpc::Status s = b_stub_->ClusterTakeover(&ctx, treq, &tr);
  const auto took_ms =
      std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - asked).count();
  // FAILS today: INTERNAL "the reserve did not come over within 3000 ms", after 3 s.
  EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAVAILABLE) << s.error_message();
  EXPECT_LT(took_ms, 1000) << s.error_message();
}

// The partner's NFS clients (its ganesha's NFSv4 records, its rpc.statd's
// NLM clients) outlive a restart of this node's nasgwd: should the partner
// be gone by then, this node still knows whom to tell to reclaim when it
// takes the partner's addresses.
TEST_F(AdminClusterTest, APartnersNfsClientsAreKeptAcrossARestart) {
  auto records = [&](const std::string& who, const std::vector<std::string>& v4, const std::vector<std::string>& nlm) {
    config_.nfs_ganesha_recovery_dir = dir_ + "/recov-" + who;
    config_.nfs_statd_dir = dir_ + "/statd-" + who;
    std::filesystem::create_directories(config_.nfs_statd_dir + "/sm");
    for (const auto& c : v4) std::filesystem::create_directories(config_.nfs_ganesha_recovery_dir + "/v4recov/" + c);
    for (const auto& c : nlm) std::ofstream(config_.nfs_statd_dir + "/sm/" + c) << "record\n";
  };
  records("a", {"client-one", "client-two"}, {"nlm-client.example"});
  StartA();
  ASSERT_TRUE(Format("tank").ok());
  ASSERT_TRUE(CreateVolume("v1").ok());
  records("b", {}, {});  // B's own (StartB copies config_)
  StartB();
  pb::Cluster b;
  ASSERT_TRUE(WaitFor([&] {
    b = ClusterOf(b_stub_.get());
    return b.partner_nfs_clients() == 2 && b.partner_nlm_clients() == 1;
  })) << b.DebugString();
  EXPECT_EQ(ReadText(dir_ + "/state2/partner-nlm-clients"), "nasgw partner NLM clients 1\nnlm-client.example\n");

  // B stops, then A; B starts again alone: nothing comes from A.
  b_server_.reset();
  b_stub_.reset();
  b_node_.reset();
  a_dead_->store(true);
  server_.reset();
  stub_.reset();
  node_.reset();
  StartB();
  b = ClusterOf(b_stub_.get());
  EXPECT_EQ(b.partner_nfs_clients(), 2) << b.DebugString();
  EXPECT_EQ(b.partner_nlm_clients(), 1) << b.DebugString();
}

// A partner with auto_takeover off would leave a given-back reserve free:
// the owner's giveback is refused, saying so, and the reserve stays served;
// the partner's own `cluster takeover` (it asks) moves it.
TEST_F(AdminClusterTest, NoGiveBackToAPartnerThatWouldNotTakeIt) {
  StartA();
  ASSERT_TRUE(Format("tank").ok());
  ASSERT_TRUE(CreateVolume("v1").ok());
  config_.cluster_auto_takeover = false;  // B's (StartB copies config_)
  StartB();
  WaitBothUp();
  pb::ClusterGiveBackResponse gr;
  grpc::Status s = Call(&pb::Admin::Stub::ClusterGiveBack, pb::ClusterGiveBackRequest(), &gr);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::FAILED_PRECONDITION) << s.error_message();
  EXPECT_NE(s.error_message().find("does not take a free reserve by itself"), std::string::npos) << s.error_message();
  EXPECT_NE(s.error_message().find("'n2'"), std::string::npos) << s.error_message();
  EXPECT_EQ(ReserveOf(stub_.get()).state(), pb::RESERVE_STATE_ONLINE);
  EXPECT_NE(node_->domain(), nullptr);
  EXPECT_EQ(ReserveOf(b_stub_.get()).state(), pb::RESERVE_STATE_STANDBY);

  pb::ClusterTakeoverRequest treq;
  treq.set_timeout_ms(10000);
  pb::ClusterTakeoverResponse tr;
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(20));
  s = b_stub_->ClusterTakeover(&ctx, treq, &tr);
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_EQ(ReserveOf(b_stub_.get()).state(), pb::RESERVE_STATE_ONLINE);
  EXPECT_EQ(ReserveOf(stub_.get()).state(), pb::RESERVE_STATE_STANDBY);
}

// With forwarding, a giveback routes the giving node's heads to the partner
// before it stops serving, keeps them there while it drains (heartbeats
// do not route them back), and at its end routes them where the state
// says: back here when it was refused (heads still held the domain), to
// the partner when it went through.
TEST_F(AdminClusterTest, AGiveBackRoutesHeadsToThePartnerUntilItEnds) {
  config_.cluster_forward_peer = "127.0.0.1:9";  // not dialled here: only the routing is looked at
  config_.drain_ms = 600;                        // a dozen heartbeats
  StartPair();
  WaitBothUp();
  EXPECT_FALSE(node_->HeadsGoToPartner());
  EXPECT_TRUE(b_node_->HeadsGoToPartner());
  struct Routes {
    Mutex mu;
    std::vector<bool> to_partner GUARDED_BY(mu);  // HeadsGoToPartner() at each reroute of A
  };
  auto rec = std::make_shared<Routes>();  // the hook may outlive a failed assertion here
  node_->SetRerouteHook([rec, n = node_.get()](Node::HeadsMove move, const std::string&) {
    if (move != Node::HeadsMove::kReroute) return;
    MutexLock l(rec->mu);
    rec->to_partner.push_back(n->HeadsGoToPartner());
  });
  auto routes = [rec] {
    MutexLock l(rec->mu);
    return rec->to_partner;
  };

  // (a) Refused: a head request holds the domain past drain_ms.
  {
    auto held = node_->domain();
    ASSERT_NE(held, nullptr);
    const nasgw::Status result = node_->GiveBack();
    EXPECT_EQ(result.code(), Code::kBusy) << result.ToString();
  }
  EXPECT_EQ(node_->GetReserve().state, ReserveState::kOnline);
  EXPECT_FALSE(node_->HeadsGoToPartner()) << "the refused giveback left the heads with the partner";
  // Each change of routing calls the hook: to the partner, and back only
  // at the end (a heartbeat's in between would show as more).
  EXPECT_EQ(routes(), (std::vector<bool>{true, false}));

  // (b) Through: the heads stay with the partner, which takes the reserve.
  WaitBothUp();
  ASSERT_TRUE(node_->GiveBack().ok());
  EXPECT_TRUE(node_->HeadsGoToPartner());
  ASSERT_TRUE(WaitFor([&] { return b_node_->GetReserve().state == ReserveState::kOnline; }));
  ASSERT_TRUE(WaitFor([&] { return !b_node_->HeadsGoToPartner(); }));
  EXPECT_TRUE(node_->HeadsGoToPartner());
  EXPECT_EQ(routes(), (std::vector<bool>{true, false, true}));
  node_->SetRerouteHook(nullptr);
}

// BUG (node.cc, Node::GiveBack and Node::RequestTakeover): GiveBack holds
// this node off the free reserve for 2 leases + 4 network bounds
// (next_takeover_mono_ns_), so that the partner takes it; RequestTakeover
// does not lift that hold-off. A node that gave the reserve back and then
// asks for it again within that window gets it only once the hold-off runs
// out: the partner gives it back at once and the reserve then sits free,
// owned by nobody, until then. Here (lease 200 ms, network bound 150 ms) that
// is 1 s after the giveback; with the defaults (lease 10 s, network bound
// 3 s) it is 32 s, beyond `nasgw cluster takeover`'s default 30 s wait.
TEST_F(AdminClusterTest, TakeoverSoonAfterAGiveBackIsNotHeldOff) {
  StartPair();
  WaitBothUp();
  pb::ClusterGiveBackResponse gr;
  grpc::Status s = Call(&pb::Admin::Stub::ClusterGiveBack, pb::ClusterGiveBackRequest(), &gr);
  ASSERT_TRUE(s.ok()) << s.error_message();
  const auto gave = std::chrono::steady_clock::now();
  ASSERT_TRUE(WaitFor([&] { return ReserveOf(b_stub_.get()).state() == pb::RESERVE_STATE_ONLINE; }));
  WaitBothUp();  // A heard standing by again
  pb::ClusterTakeoverRequest treq;
  treq.set_timeout_ms(500);  // B gives back at once; A takes it at its next heartbeat (50 ms)
  pb::ClusterTakeoverResponse tr;
  s = Call(&pb::Admin::Stub::ClusterTakeover, treq, &tr);
  // (Once this failed: INTERNAL "the reserve did not come over within 500
  // ms", A held off ~1000 ms after its giveback.)
  EXPECT_TRUE(s.ok())
      << s.error_message() << " ("
      << std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - gave).count()
      << " ms after the giveback)";
}

TEST_F(AdminTest, OneNasgwdPerStateDir) {
  StartAll();
  auto again = Node::Start(config_, Opener(), SmallDomain());
  ASSERT_FALSE(again.ok());
  EXPECT_EQ(again.status().code(), Code::kBusy);
  EXPECT_NE(again.status().ToString().find("another nasgwd (pid " + std::to_string(::getpid()) + ")"),
            std::string::npos)
      << again.status().ToString();
  StopAll();
  // The lock goes with the node: a restart is fine, and keeps the node id.
  const std::string id = ReadText(config_.state_dir + "/node-id");
  EXPECT_EQ(id.size(), 37u) << id;
  StartAll();
  EXPECT_EQ(ReadText(config_.state_dir + "/node-id"), id);
}

TEST_F(AdminTest, FailedReserveStillStartsAndCanBeFormattedOver) {
  StartAll();
  ASSERT_TRUE(Format("tank").ok());
  StopAll();
  // A member missing from the configuration: the reserve cannot open.
  config_.luns.pop_back();
  StartAll();
  pb::Reserve r = Reserve();
  EXPECT_EQ(r.state(), pb::RESERVE_STATE_FAILED);
  EXPECT_NE(r.reason().find("missing"), std::string::npos) << r.reason();
  pb::ListVolumesResponse vols;
  auto s = Call(&pb::Admin::Stub::ListVolumes, pb::ListVolumesRequest(), &vols);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_NE(s.error_message().find("reserve is not online: failed: "), std::string::npos) << s.error_message();
  s = Format("fresh");
  EXPECT_EQ(s.error_code(), grpc::StatusCode::ALREADY_EXISTS) << "labelled LUNs need force: " << s.error_message();
  EXPECT_EQ(Reserve().state(), pb::RESERVE_STATE_FAILED);
  ASSERT_TRUE(Format("fresh", kMiB, true).ok());
  EXPECT_EQ(Reserve().state(), pb::RESERVE_STATE_ONLINE);
  EXPECT_EQ(Reserve().luns_size(), 2);
}

// A domain that does not open although the node owns the reserve (the
// array failing reads at the start, or in a takeover) is opened again by the
// owner thread once the array answers: a pair would otherwise stand with
// nobody serving (the partner sees this node alive and owning). Nothing is
// lost meanwhile: the node keeps the reserve, so nobody else opens it.
TEST_F(AdminTest, ADomainThatDidNotOpenIsOpenedAgainOnceTheArrayAnswers) {
  config_.renew_interval_ms = 50;
  config_.lease_ms = 400;
  StartAll();
  ASSERT_TRUE(Format("tank").ok());
  ASSERT_TRUE(CreateVolume("kept").ok());
  StopAll();
  // Reads of the allocation groups (the domain's metadata) fail; the labels,
  // the owner record and the reservation still answer.
  auto failing = std::make_shared<std::atomic<bool>>(true);
  auto failed_reads = std::make_shared<std::atomic<int>>(0);
  LunOpener opener = [this, failing,
                      failed_reads](const std::string& url) -> Result<std::shared_ptr<block::BlockDevice>> {
    auto it = media_.find(url);
    if (it == media_.end()) return Status::Unavailable("connection refused");
    auto dev = std::make_shared<block::MemDevice>(it->second);
    dev->SetFault([failing, failed_reads](const block::IoRequest& r) {
      const uint64_t at = r.lba * 512;
      if (r.op == block::Op::kRead && failing->load() && at >= kMiB && at < kLunBytes - kMiB) {
        (*failed_reads)++;
        return Status::IoError("medium error");
      }
      return Status();
    });
    return std::shared_ptr<block::BlockDevice>(dev);
  };
  auto n = Node::Start(config_, opener, SmallDomain());
  ASSERT_TRUE(n.ok()) << n.status().ToString();
  node_ = std::move(n.value());
  ReserveStatus r = node_->GetReserve();
  EXPECT_EQ(r.state, ReserveState::kFailed);
  EXPECT_NE(r.reason.find("trying again"), std::string::npos) << r.reason;
  EXPECT_GT(failed_reads->load(), 0);
  EXPECT_TRUE(r.owned_here) << "it keeps the reserve: nobody else may open the domain meanwhile";
  // Still failing: tried again, and said so.
  ASSERT_TRUE(WaitFor([&] { return node_->GetReserve().reason.find("tried 2 times") != std::string::npos; }))
      << node_->GetReserve().reason;
  EXPECT_EQ(node_->GetReserve().state, ReserveState::kFailed);
  failing->store(false);
  ASSERT_TRUE(WaitFor([&] { return node_->GetReserve().state == ReserveState::kOnline; }, std::chrono::seconds(15)))
      << node_->GetReserve().reason;
  auto vols = node_->ListVolumes();
  ASSERT_TRUE(vols.ok()) << vols.status().ToString();
  ASSERT_EQ(vols->size(), 1u);
  EXPECT_EQ((*vols)[0].name, "kept");
  auto after = node_->CreateVolume("after", (*vols)[0].record_bytes);
  EXPECT_TRUE(after.ok()) << after.status().ToString();
}

TEST_F(AdminTest, StartFailsNamingTheUnreachableLunWithoutItsSecret) {
  config_.chap_user = "admin";
  config_.chap_secret = "s3cr3t-chap-pw";
  config_.luns.push_back(kUrlBase + "7");
  auto n = Node::Start(config_, Opener(), SmallDomain());
  ASSERT_FALSE(n.ok());
  const std::string m(n.status().message());
  EXPECT_NE(m.find("198.18.0.1"), std::string::npos) << m;
  EXPECT_NE(m.find("lab/7"), std::string::npos) << m;
  EXPECT_EQ(m.find("s3cr3t"), std::string::npos) << m;
  ASSERT_FALSE(opened_.empty());
  EXPECT_NE(opened_[0].find("admin%s3cr3t-chap-pw@"), std::string::npos) << "the opener gets the credentials";
}

TEST_F(AdminTest, StatsCountLunIo) {
  StartAll();
  ASSERT_TRUE(Format("tank").ok());
  ASSERT_TRUE(CreateVolume("v").ok());
  WriteFile("v", "f", 1 << 20);
  pb::GetStatsResponse stats;
  ASSERT_TRUE(Call(&pb::Admin::Stub::GetStats, pb::GetStatsRequest(), &stats).ok());
  EXPECT_EQ(stats.node().name(), "n1");
  ASSERT_EQ(stats.luns_size(), 3);
  uint64_t write_ops = 0, write_bytes = 0, read_ops = 0;
  for (const auto& l : stats.luns()) {
    write_ops += l.io().write().ops();
    write_bytes += l.io().write().bytes();
    read_ops += l.io().read().ops();
    EXPECT_GE(l.io().write().latency_p99_us(), l.io().write().latency_p50_us());
  }
  EXPECT_GT(write_ops, 0u);
  EXPECT_GE(write_bytes, 1u << 20) << "the file's data at least";
  EXPECT_GT(read_ops, 0u) << "labels and metadata were read";
  // The metadata cache is the node's; without a head service there are no
  // cache counters.
  EXPECT_EQ(stats.cache().memory_budget_bytes(), uint64_t{config_.cache_memory_mib} << 20);
  EXPECT_GT(stats.cache().meta_hits() + stats.cache().meta_misses(), 0u);
  EXPECT_GE(stats.cache().array_write_bytes(), write_bytes);
  EXPECT_EQ(stats.cache().client_write_bytes(), 0u);
}

// `nasgw stats` shows the write-back cache's counters as the head service
// gives them, and the array bytes written per client byte.
TEST_F(AdminTest, StatsShowTheCache) {
  cache::DataCacheStats given;
  given.dirty_bytes = 3 << 20;
  given.dirty_files = 2;
  given.bytes_written = 1 << 20;
  given.writes_cached = 5;
  given.writes_logged = 7;
  given.writes_stable = 11;
  given.writes_log_slow = 6;
  given.commits_logged = 9;
  given.commits_flushed = 2;
  given.flushes = 4;
  given.flush_nanos_total = 8'000'000;
  given.read.hit_bytes = 3 << 20;
  given.read.miss_bytes = 1 << 20;
  cache_stats_ = [&given] { return given; };
  StartAll();
  ASSERT_TRUE(Format("tank").ok());
  ASSERT_TRUE(CreateVolume("v").ok());
  WriteFile("v", "f", 1 << 20);
  CliResult r = Cli({"stats", "--json"});
  ASSERT_EQ(r.exit_code, 0) << Describe(r);
  auto j = nlohmann::json::parse(r.out);
  const auto& c = j.at("cache");
  EXPECT_EQ(c.at("dirty_bytes").get<uint64_t>(), 3u << 20);
  EXPECT_EQ(c.at("dirty_limit_bytes").get<uint64_t>(), uint64_t{config_.cache_dirty_mib} << 20);
  EXPECT_EQ(c.at("writes_logged").get<uint64_t>(), 7u);
  EXPECT_EQ(c.at("writes_stable").get<uint64_t>(), 11u);
  EXPECT_EQ(c.at("writes_log_slow").get<uint64_t>(), 6u);
  EXPECT_EQ(c.at("commits_logged").get<uint64_t>(), 9u);
  EXPECT_EQ(c.at("commits_flushed").get<uint64_t>(), 2u);
  EXPECT_EQ(c.at("flush_microseconds").get<uint64_t>(), 8000u);
  const uint64_t array = c.at("array_write_bytes").get<uint64_t>();
  EXPECT_GE(array, 1u << 20) << "the file's data at least";
  EXPECT_DOUBLE_EQ(c.at("write_amplification").get<double>(), static_cast<double>(array) / (1 << 20));
  r = Cli({"stats"});
  ASSERT_EQ(r.exit_code, 0) << Describe(r);
  EXPECT_NE(r.out.find("2 files"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("7 logged"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("11 in place (6 as the log was slow)"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("commits 9 logged, 2 flushed in place"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("hits 75% of 4 MiB read"), std::string::npos) << r.out;
}

TEST_F(AdminTest, CliDrivesTheNode) {
  StartAll();
  CliResult r = Cli({"reserve", "status"});
  ASSERT_EQ(r.exit_code, 0) << Describe(r);
  EXPECT_NE(r.out.find("unformatted"), std::string::npos) << r.out;

  r = Cli({"reserve", "format", "--name", "tank", "--ag-size", "1M"});
  ASSERT_EQ(r.exit_code, 0) << Describe(r);
  r = Cli({"reserve", "format", "--name", "again", "--ag-size", "1M"});
  EXPECT_EQ(r.exit_code, 6) << Describe(r);
  EXPECT_NE(r.err.find("--force"), std::string::npos) << r.err;

  r = Cli({"volume", "create", "v1", "--record-size", "64K"});
  ASSERT_EQ(r.exit_code, 0) << Describe(r);
  r = Cli({"volume", "create", "v2"});
  ASSERT_EQ(r.exit_code, 0) << Describe(r);
  r = Cli({"volume", "create", "v1"});
  EXPECT_EQ(r.exit_code, 5) << Describe(r);
  EXPECT_EQ(r.err.rfind("nasgw: ", 0), 0u) << r.err;

  r = Cli({"--json", "volume", "list"});
  ASSERT_EQ(r.exit_code, 0) << Describe(r);
  json j = json::parse(r.out);
  ASSERT_EQ(j["volumes"].size(), 2u) << r.out;
  EXPECT_EQ(j["volumes"][0]["name"], "v1");
  EXPECT_EQ(j["volumes"][0]["record_bytes"], 64 << 10);
  EXPECT_EQ(j["volumes"][1]["name"], "v2");

  r = Cli({"volume", "list"});
  ASSERT_EQ(r.exit_code, 0) << Describe(r);
  EXPECT_NE(r.out.find("NAME"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("64 KiB"), std::string::npos) << r.out;

  r = Cli({"volume", "set", "v2", "--record-size", "1M"});
  ASSERT_EQ(r.exit_code, 0) << Describe(r);
  EXPECT_NE(r.out.find("1 MiB"), std::string::npos) << r.out;

  WriteFile("v1", "file", 5000);
  r = Cli({"volume", "set", "v1", "--record-size", "4K"});
  EXPECT_EQ(r.exit_code, 6) << Describe(r);
  EXPECT_NE(r.err.find("holds data"), std::string::npos) << r.err;

  r = Cli({"volume", "delete", "v1"});
  EXPECT_EQ(r.exit_code, 6) << Describe(r);
  EXPECT_NE(r.err.find("not empty"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("--force"), std::string::npos) << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << "one line: " << r.err;
  r = Cli({"--json", "volume", "delete", "v1"});
  EXPECT_EQ(r.exit_code, 6) << Describe(r);
  EXPECT_EQ(json::parse(r.out)["error"]["code"], "FAILED_PRECONDITION") << r.out;
  r = Cli({"volume", "delete", "v1", "--force"});
  ASSERT_EQ(r.exit_code, 0) << Describe(r);
  r = Cli({"volume", "show", "v1"});
  EXPECT_EQ(r.exit_code, 4) << Describe(r);

  r = Cli({"volume", "show", "v2"});
  ASSERT_EQ(r.exit_code, 0) << Describe(r);
  EXPECT_NE(r.out.find("record size"), std::string::npos) << r.out;

  for (auto cmd : std::vector<std::vector<std::string>>{
           {"node", "status"}, {"reserve", "status"}, {"reserve", "luns"}, {"stats"}}) {
    r = Cli(cmd);
    EXPECT_EQ(r.exit_code, 0) << cmd[0] << ": " << Describe(r);
    cmd.insert(cmd.begin(), "--json");
    r = Cli(cmd);
    ASSERT_EQ(r.exit_code, 0) << Describe(r);
    EXPECT_TRUE(json::accept(r.out)) << r.out;
  }
  r = Cli({"--json", "reserve", "status"});
  j = json::parse(r.out);
  EXPECT_EQ(j["reserve"]["state"], "online");
  EXPECT_EQ(j["reserve"]["luns"].size(), 3u);
  r = Cli({"reserve", "luns"});
  EXPECT_NE(r.out.find(Url(0)), std::string::npos) << r.out;

  AddMedium(3);
  r = Cli({"reserve", "add-lun", Url(3)});
  ASSERT_EQ(r.exit_code, 0) << Describe(r);
  r = Cli({"--json", "reserve", "luns"});
  EXPECT_EQ(json::parse(r.out)["luns"].size(), 4u);

  // The environment names the socket too.
  ::setenv("NASGW_ADMIN_SOCKET", config_.admin_socket.c_str(), 1);
  r = Cli({"node", "status"}, /*with_socket=*/false);
  ::unsetenv("NASGW_ADMIN_SOCKET");
  EXPECT_EQ(r.exit_code, 0) << Describe(r);
  EXPECT_NE(r.out.find("n1"), std::string::npos) << r.out;
}

TEST_F(AdminTest, CliUsageAndUnreachableErrors) {
  StartAll();
  CliResult r = Cli({"--socket", dir_ + "/nobody.sock", "node", "status"}, false);
  EXPECT_EQ(r.exit_code, 3) << Describe(r);
  EXPECT_NE(r.err.find(dir_ + "/nobody.sock"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("nasgwd"), std::string::npos) << r.err;

  // A socket file nobody listens on.
  const std::string stale = dir_ + "/stale.sock";
  {
    Config c = config_;
    c.admin_socket = stale;
    auto s = AdminServer::Start(node_.get(), c);
    ASSERT_TRUE(s.ok());
    // Leaves the file behind as a crashed daemon would: copy it aside first.
    ASSERT_EQ(::link(stale.c_str(), (stale + ".kept").c_str()), 0);
  }
  r = Cli({"--socket", stale + ".kept", "volume", "list"}, false);
  EXPECT_EQ(r.exit_code, 3) << Describe(r);

  for (const auto& bad : std::vector<std::vector<std::string>>{
           {},
           {"frobnicate"},
           {"volume"},
           {"volume", "frobnicate"},
           {"volume", "create"},
           {"volume", "create", "x", "y"},
           {"volume", "create", "x", "--record-size", "12Q"},
           {"volume", "create", "x", "--force"},
           {"volume", "set", "x"},
           {"reserve", "format"},
           {"reserve", "format", "--name"},
           {"node", "status", "--bogus"},
           {"--timeout", "soon", "node", "status"},
       }) {
    r = Cli(bad);
    std::string joined;
    for (const auto& w : bad) joined += w + " ";
    EXPECT_EQ(r.exit_code, 2) << joined << Describe(r);
    EXPECT_EQ(r.err.find("terminate"), std::string::npos) << r.err;
  }
  // The server checks values the CLI passes on.
  r = Cli({"volume", "create", "a/b"});
  EXPECT_EQ(r.exit_code, 2) << Describe(r);

  r = Cli({"--help"});
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_NE(r.out.find("exit codes"), std::string::npos) << r.out;
  r = Cli({"volume", "create", "--help"});
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_NE(r.out.find("--record-size"), std::string::npos) << r.out;
  r = Cli({"volume", "-h"});
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_NE(r.out.find("volume delete"), std::string::npos) << r.out;
}

// ---- text an admin types, and what the CLI prints

// Names with control characters or invalid UTF-8 are refused by nasgwd
// (any gRPC client, not only the CLI), naming the problem.
TEST_F(AdminTest, NamesMustBeTextWithoutControlCharacters) {
  StartAll();
  ASSERT_TRUE(Format("tank").ok());
  auto s = CreateVolume("evil\x1b[2J");
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(s.error_message().find("volume name 'evil\\x1b[2J' holds a control character (\\x1b) at byte 4"),
            std::string::npos)
      << s.error_message();
  for (const std::string bad : {"tab\there", "nl\n", "del\x7f", "csi\xc2\x9b"}) {
    EXPECT_EQ(CreateVolume(bad).error_code(), grpc::StatusCode::INVALID_ARGUMENT) << bad;
  }
  // Invalid UTF-8 never reaches a handler: a proto3 string cannot carry it
  // (the request is refused in gRPC's parsing; not OK, whatever the code).
  EXPECT_FALSE(CreateVolume("bad\xff").ok());
  EXPECT_TRUE(CreateVolume("été-€").ok()) << "UTF-8 that is text is fine";
  pb::GetVolumeResponse got;
  pb::GetVolumeRequest get;
  get.set_name("x\ry");
  EXPECT_EQ(Call(&pb::Admin::Stub::GetVolume, get, &got).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(DeleteVolume("x\ry", true).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(Format("a\x1b", kMiB, true).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  // Export fields.
  ASSERT_TRUE(CreateVolume("v").ok());
  auto add = [&](const std::function<void(pb::AddExportRequest&)>& fill) {
    pb::AddExportRequest req;
    req.set_volume("v");
    fill(req);
    pb::AddExportResponse resp;
    return Call(&pb::Admin::Stub::AddExport, req, &resp);
  };
  s = add([](pb::AddExportRequest& r) { r.set_pseudo("/p\x07"); });
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(s.error_message().find("pseudo path '/p\\x07'"), std::string::npos) << s.error_message();
  EXPECT_EQ(add([](pb::AddExportRequest& r) { r.set_path("/a\nb"); }).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(add([](pb::AddExportRequest& r) { r.add_clients("10.0.0.1\x1b"); }).error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(add([](pb::AddExportRequest& r) { r.add_sec("sys\t"); }).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  pb::AddLunRequest lun;
  lun.set_url(kUrlBase + "9\x1b");
  pb::AddLunResponse lun_resp;
  s = Call(&pb::Admin::Stub::AddLun, lun, &lun_resp);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(s.error_message().find("LUN URL holds a control character"), std::string::npos) << s.error_message();
}

// record_bytes unset is the default; set, it must be valid: 0 is not "the
// default" (it used to become 128 KiB silently).
TEST_F(AdminTest, RecordSizeZeroIsRefusedNotTheDefault) {
  StartAll();
  ASSERT_TRUE(Format("tank").ok());
  pb::CreateVolumeRequest req;
  req.set_name("zero");
  req.set_record_bytes(0);
  pb::CreateVolumeResponse resp;
  auto s = Call(&pb::Admin::Stub::CreateVolume, req, &resp);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(s.error_message().find("record size 0 is not a power of two"), std::string::npos) << s.error_message();
  req.clear_record_bytes();
  s = Call(&pb::Admin::Stub::CreateVolume, req, &resp);
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_EQ(resp.volume().record_bytes(), fs::kRecordBytesDefault);
}

// The CLI checks what it sends (exit 2, its usage code, with a message that
// shows the value escaped): control characters, invalid UTF-8 (which must
// not end in a protobuf error), record and group sizes.
TEST_F(AdminTest, CliRefusesBadTextAndSizesBeforeSending) {
  StartAll();
  CliResult r = Cli({"reserve", "format", "--name", "tank", "--ag-size", "1M"});
  ASSERT_EQ(r.exit_code, 0) << Describe(r);
  struct Case {
    std::vector<std::string> args;
    std::string says;
  };
  const Case cases[] = {
      {{"volume", "create", "evil\x1b[2J"}, "volume name 'evil\\x1b[2J' holds a control character (\\x1b) at byte 4"},
      {{"volume", "create", "bad\xff"}, "volume name 'bad\\xff' holds invalid UTF-8 (\\xff) at byte 3"},
      {{"volume", "show", "a\nb"}, "holds a control character (\\x0a)"},
      {{"volume", "delete", "\xc3("}, "invalid UTF-8"},
      {{"export", "add", "v/sub\x1b"}, "VOLUME[/SUBPATH] 'v/sub\\x1b' holds a control character"},
      {{"export", "add", "v", "--pseudo", "/p\x07"}, "--pseudo '/p\\x07' holds a control character"},
      {{"export", "add", "v", "--clients", "10.0.0.1,\xfe"}, "--clients '10.0.0.1,\\xfe' holds invalid UTF-8"},
      {{"export", "show", "/x\x1b"}, "export '/x\\x1b' holds a control character"},
      {{"reserve", "add-lun", "iscsi://u%secret\x1b@h/iqn.x/0"}, "LUN URL holds a control character"},
      {{"volume", "create", "v0", "--record-size", "0"}, "--record-size must be a power of two from 4K to 1M, not '0'"},
      {{"volume", "create", "v3", "--record-size", "3K"}, "--record-size must be a power of two from 4K to 1M"},
      {{"volume", "create", "v2", "--record-size", "2M"}, "--record-size must be a power of two from 4K to 1M"},
      {{"volume", "create", "v2", "--record-size", "2K"}, "--record-size must be a power of two from 4K to 1M"},
      {{"volume", "set", "v2", "--record-size", "0"}, "--record-size must be a power of two"},
      {{"reserve", "format", "--name", "t", "--ag-size", "0", "--force"}, "--ag-size must be a power of two"},
  };
  for (const Case& c : cases) {
    r = Cli(c.args);
    EXPECT_EQ(r.exit_code, 2) << Describe(r);
    EXPECT_NE(r.err.find(c.says), std::string::npos) << Describe(r);
    EXPECT_EQ(r.err.find('\x1b'), std::string::npos) << "raw escape on the terminal: " << Describe(r);
    EXPECT_EQ(r.err.find("secret"), std::string::npos) << "the URL's secret repeated: " << Describe(r);
    EXPECT_EQ(r.err.find("protobuf"), std::string::npos) << Describe(r);
    EXPECT_EQ(r.err.find("UTF-8 data when serializing"), std::string::npos) << Describe(r);
  }
  r = Cli({"--json", "volume", "create", "bad\xff"});
  EXPECT_EQ(r.exit_code, 2) << Describe(r);
  EXPECT_EQ(json::parse(r.out, nullptr, false)["error"]["code"], "USAGE") << r.out;
  // Nothing was created.
  r = Cli({"--json", "volume", "list"});
  ASSERT_EQ(r.exit_code, 0) << Describe(r);
  EXPECT_EQ(json::parse(r.out)["volumes"].size(), 0u) << r.out;
}

// A name stored with control characters (made before nasgwd refused them,
// here through the node directly) cannot act on the terminal: tables and
// prose show it escaped; JSON stays valid JSON and carries it exactly.
TEST_F(AdminTest, CliEscapesWhatItPrints) {
  StartAll();
  ASSERT_TRUE(Format("tank").ok());
  const std::string evil = "ev\x1b]0;owned\x07il\\x";
  ASSERT_TRUE(node_->CreateVolume(evil, 64 << 10).ok());
  ASSERT_TRUE(CreateVolume("plain").ok());
  CliResult r = Cli({"volume", "list"});
  ASSERT_EQ(r.exit_code, 0) << Describe(r);
  EXPECT_EQ(r.out.find('\x1b'), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find('\x07'), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("ev\\x1b]0;owned\\x07il\\\\x"), std::string::npos) << r.out;
  // Columns still line up: the escaped name is as wide as it prints.
  std::istringstream lines(r.out);
  std::string header, row1, row2;
  std::getline(lines, header);
  std::getline(lines, row1);
  std::getline(lines, row2);
  // WRITE-THROUGH is right-aligned: it ends where its header does on every
  // line (ORIGIN, the last column, is left-aligned and not padded).
  const size_t end = header.find("WRITE-THROUGH") + std::string("WRITE-THROUGH").size();
  EXPECT_EQ(row1.rfind("off") + 3, end) << r.out;
  EXPECT_EQ(row2.rfind("off") + 3, end) << r.out;
  r = Cli({"--json", "volume", "list"});
  ASSERT_EQ(r.exit_code, 0) << Describe(r);
  json j = json::parse(r.out, nullptr, false);
  ASSERT_FALSE(j.is_discarded()) << r.out;
  bool found = false;
  for (const auto& v : j["volumes"]) found = found || v["name"] == evil;
  EXPECT_TRUE(found) << r.out;
  EXPECT_EQ(r.out.find('\x1b'), std::string::npos) << "JSON escapes it too";
  r = Cli({"volume", "delete", evil, "--force"});
  EXPECT_EQ(r.exit_code, 2) << "a name nasgwd refuses now: " << Describe(r);
  EXPECT_EQ(r.err.find('\x1b'), std::string::npos) << Describe(r);
}

// The admin socket is root's (0600): another user is told "permission
// denied" with the path, not "no socket".
TEST_F(AdminTest, CliSaysPermissionDenied) {
  StartAll();
  ASSERT_EQ(::chmod(dir_.c_str(), 0755), 0);
  CliResult r = Cli({"node", "status"}, true, 65534);
  EXPECT_EQ(r.exit_code, 3) << Describe(r);
  EXPECT_NE(r.err.find("permission denied"), std::string::npos) << Describe(r);
  EXPECT_NE(r.err.find(config_.admin_socket), std::string::npos) << Describe(r);
  EXPECT_EQ(r.err.find("no socket"), std::string::npos) << Describe(r);
  // A directory on the way that is not ours to search: the same.
  ASSERT_EQ(::chmod(dir_.c_str(), 0700), 0);
  r = Cli({"node", "status"}, true, 65534);
  EXPECT_EQ(r.exit_code, 3) << Describe(r);
  EXPECT_NE(r.err.find("permission denied"), std::string::npos) << Describe(r);
  r = Cli({"--json", "node", "status"}, true, 65534);
  EXPECT_EQ(json::parse(r.out, nullptr, false)["error"]["code"], "PERMISSION_DENIED") << r.out;
}

TEST_F(AdminTest, AdminSocketRefusesALiveServerAndReplacesAStaleOne) {
  StartAll();
  auto second = AdminServer::Start(node_.get(), config_);
  EXPECT_FALSE(second.ok()) << "another server listens there";
  EXPECT_EQ(second.status().code(), Code::kExists) << second.status().ToString();
  // A stale socket file (the listener gone) is replaced.
  const std::string kept = dir_ + "/kept.sock";
  ASSERT_EQ(::link(config_.admin_socket.c_str(), kept.c_str()), 0);
  server_.reset();
  ASSERT_EQ(::rename(kept.c_str(), config_.admin_socket.c_str()), 0);
  auto again = AdminServer::Start(node_.get(), config_);
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  server_ = std::move(again.value());
  pb::GetNodeResponse node;
  EXPECT_TRUE(Call(&pb::Admin::Stub::GetNode, pb::GetNodeRequest(), &node).ok());
  // A file that is not a socket is never removed.
  Config c = config_;
  c.admin_socket = dir_ + "/plain";
  std::ofstream(c.admin_socket) << "x";
  EXPECT_FALSE(AdminServer::Start(node_.get(), c).ok());
  EXPECT_EQ(ReadText(c.admin_socket), "x");
}

// ---- NFS exports

// The exports file read back as Ganesha's parser reads it: blocks of
// `key = value[, value...];` and sub-blocks, comments from '#' to the end of
// the line, values bare or in double quotes (without escapes: the file
// never needs any).
struct GaneshaBlock {
  std::string name;
  std::map<std::string, std::vector<std::string>> keys;
  std::vector<GaneshaBlock> blocks;
  std::string One(const std::string& key) const {
    auto it = keys.find(key);
    return it == keys.end() || it->second.size() != 1 ? "<" + key + ": not one value>" : it->second[0];
  }
};

class GaneshaParser {
 public:
  explicit GaneshaParser(std::string text) : text_(std::move(text)) {}

  // Top-level blocks; false (and why()) on a syntax error.
  bool Parse(std::vector<GaneshaBlock>* out) {
    while (!Peek().empty()) {
      GaneshaBlock b;
      if (!Block(&b)) return false;
      out->push_back(std::move(b));
    }
    return error_.empty();
  }
  const std::string& why() const { return error_; }

 private:
  // `name`: the block's name when the caller has read it already.
  bool Block(GaneshaBlock* b, const std::string& name = "") {
    b->name = name.empty() ? Next() : name;
    if (!Ident(b->name) || Next() != "{") return Fail("expected NAME {");
    while (Peek() != "}") {
      if (Peek().empty()) return Fail("unterminated block " + b->name);
      const std::string key = Next();
      if (!Ident(key)) return Fail("expected a key, got '" + key + "'");
      if (Peek() == "{") {
        GaneshaBlock sub;
        if (!Block(&sub, key)) return false;
        b->blocks.push_back(std::move(sub));
        continue;
      }
      if (Next() != "=") return Fail("expected '=' after " + key);
      if (b->keys.contains(key)) return Fail("key " + key + " twice");
      auto& values = b->keys[key];
      for (;;) {
        const std::string v = Next();
        if (v.empty() || v == ";" || v == "," || v == "{" || v == "}" || v == "=") return Fail("bad value for " + key);
        values.push_back(v[0] == '"' ? v.substr(1, v.size() - 2) : v);
        const std::string sep = Next();
        if (sep == ";") break;
        if (sep != ",") return Fail("expected ',' or ';' after a value of " + key + ", got '" + sep + "'");
      }
    }
    Next();
    return true;
  }
  static bool Ident(const std::string& t) {
    return !t.empty() && std::all_of(t.begin(), t.end(), [](char c) { return std::isalnum(c) || c == '_'; });
  }
  bool Fail(const std::string& m) {
    if (error_.empty()) error_ = m + " at byte " + std::to_string(pos_);
    return false;
  }
  std::string Peek() {
    const size_t at = pos_;
    std::string t = Next();
    pos_ = at;
    return t;
  }
  std::string Next() {
    for (;;) {
      while (pos_ < text_.size() && std::isspace(static_cast<unsigned char>(text_[pos_]))) pos_++;
      if (pos_ < text_.size() && text_[pos_] == '#') {
        while (pos_ < text_.size() && text_[pos_] != '\n') pos_++;
        continue;
      }
      break;
    }
    if (pos_ >= text_.size()) return "";
    const char c = text_[pos_];
    if (c == '{' || c == '}' || c == ';' || c == ',' || c == '=') return std::string(1, text_[pos_++]);
    if (c == '"') {
      const size_t end = text_.find('"', pos_ + 1);
      if (end == std::string::npos) return Fail("unterminated string"), "";
      std::string t = text_.substr(pos_, end + 1 - pos_);
      pos_ = end + 1;
      return t;
    }
    const size_t start = pos_;
    while (pos_ < text_.size() && !std::isspace(static_cast<unsigned char>(text_[pos_])) &&
           std::string("{};,=\"#").find(text_[pos_]) == std::string::npos) {
      pos_++;
    }
    return text_.substr(start, pos_ - start);
  }

  std::string text_;
  size_t pos_ = 0;
  std::string error_;
};

// A child process named `comm` that blocks SIGHUP and waits, so a SIGHUP sent
// to it stays pending where the test can see it. Killed by the destructor.
class FakeProcess {
 public:
  explicit FakeProcess(const char* comm) {
    pid_ = ::fork();
    if (pid_ == 0) {
      sigset_t set;  // async-signal-safe calls only: the parent has threads
      sigemptyset(&set);
      sigaddset(&set, SIGHUP);
      sigprocmask(SIG_BLOCK, &set, nullptr);
      prctl(PR_SET_NAME, comm, 0, 0, 0);
      for (;;) pause();
    }
    for (int i = 0; i < 2000 && Comm() != comm; i++) ::usleep(1000);
  }
  ~FakeProcess() {
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, nullptr, 0);
  }
  pid_t pid() const { return pid_; }
  std::string Comm() const {
    std::string c = ReadText("/proc/" + std::to_string(pid_) + "/comm");
    while (!c.empty() && c.back() == '\n') c.pop_back();
    return c;
  }
  bool HupPending() const {
    std::istringstream in(ReadText("/proc/" + std::to_string(pid_) + "/status"));
    uint64_t pending = 0;
    for (std::string line; std::getline(in, line);) {
      if (line.rfind("SigPnd:", 0) == 0 || line.rfind("ShdPnd:", 0) == 0) {
        pending |= std::stoull(line.substr(7), nullptr, 16);
      }
    }
    return (pending & (1ull << (SIGHUP - 1))) != 0;
  }

 private:
  pid_t pid_ = -1;
};

class AdminExportsTest : public AdminTest {
 protected:
  void SetUp() override {
    AdminTest::SetUp();
    ASSERT_EQ(::mkdir((dir_ + "/ganesha").c_str(), 0755), 0);
    exports_file_ = dir_ + "/ganesha/nasgw-exports.conf";
    config_.nfs_exports_file = exports_file_;
  }

  // Formats, creates volumes and a directory tree in vol1: /a/b and a file /a/f.
  void Prepare() {
    StartAll();
    ASSERT_TRUE(Format("tank").ok());
    ASSERT_TRUE(CreateVolume("vol1").ok());
    ASSERT_TRUE(CreateVolume("vol2").ok());
    auto d = node_->domain();
    const uint32_t v = d->FindVolume("vol1")->id;
    auto a = d->Create(v, fs::kRootIno, "a", fs::FileType::kDirectory, 0755, 0, 0);
    ASSERT_TRUE(a.ok());
    ASSERT_TRUE(d->Create(v, a->ino, "b", fs::FileType::kDirectory, 0755, 0, 0).ok());
    ASSERT_TRUE(d->Create(v, a->ino, "f", fs::FileType::kRegular, 0644, 0, 0).ok());
  }

  // The exports file's EXPORT blocks by Export_Id.
  std::map<uint32_t, GaneshaBlock> Rendered() {
    std::vector<GaneshaBlock> blocks;
    GaneshaParser parser(ReadText(exports_file_));
    EXPECT_TRUE(parser.Parse(&blocks)) << parser.why() << "\n" << ReadText(exports_file_);
    std::map<uint32_t, GaneshaBlock> out;
    for (auto& b : blocks) {
      EXPECT_EQ(b.name, "EXPORT");
      out[static_cast<uint32_t>(std::stoul(b.One("Export_Id")))] = b;
    }
    return out;
  }

  std::string exports_file_;
};

// A reserve split into several domains (fs/reserve.h, "Domains") is served
// whole by the node that owns it: a volume lives in the domain it is made
// in (unset: the one with the most free space), names of volumes, shares
// and pseudo paths are unique across the domains, lists and the exports
// file hold every domain's, exports take ids of their volume's domain, and
// all of it is there again after a restart, each domain fsck-clean.
TEST_F(AdminExportsTest, AReserveSplitIntoDomainsIsServedWhole) {
  StartAll();
  CliResult f = Cli({"reserve", "format", "--name", "split", "--ag-size", "1M", "--domains", "2"});
  ASSERT_EQ(f.exit_code, 0) << Describe(f);
  EXPECT_NE(f.out.find("2 domains"), std::string::npos) << f.out;
  EXPECT_EQ(Reserve().domains(), 2u);
  EXPECT_EQ(Cli({"reserve", "format", "--name", "x", "--domains", "29", "--force"}).exit_code, 2);
  CliResult small = Cli({"reserve", "format", "--name", "x", "--domains", "28", "--ag-size", "16M", "--force"});
  EXPECT_EQ(small.exit_code, 2) << Describe(small);
  EXPECT_NE(small.err.find("too small for 28 domains"), std::string::npos) << Describe(small);
  EXPECT_EQ(Reserve().name(), "split") << "a refused format changes nothing";
  EXPECT_EQ(Reserve().domains(), 2u);

  auto create = [&](const std::string& name, std::optional<uint32_t> domain, pb::Volume* out = nullptr) {
    pb::CreateVolumeRequest req;
    req.set_name(name);
    if (domain) req.set_domain(*domain);
    pb::CreateVolumeResponse r;
    auto st = Call(&pb::Admin::Stub::CreateVolume, req, &r);
    if (out) *out = r.volume();
    return st;
  };
  pb::Volume a, b, c;
  ASSERT_TRUE(create("a", 1, &a).ok());
  EXPECT_EQ(a.domain(), 1u);
  EXPECT_EQ(a.id(), fs::FirstVolumeId(1));
  ASSERT_TRUE(create("b", 0, &b).ok());
  EXPECT_EQ(b.domain(), 0u);
  EXPECT_EQ(b.id(), fs::FirstVolumeId(0));
  EXPECT_EQ(create("a", 0).error_code(), grpc::StatusCode::ALREADY_EXISTS) << "a name is the reserve's, not a domain's";
  EXPECT_EQ(create("b", 1).error_code(), grpc::StatusCode::ALREADY_EXISTS);
  auto past = create("x", 2);
  EXPECT_EQ(past.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(past.error_message().find("domain 2 does not exist"), std::string::npos) << past.error_message();
  // Unset: the domain with the most free space now.
  uint64_t verifier = 0;
  auto domains = node_->domains(&verifier, nullptr);
  ASSERT_NE(domains, nullptr);
  ASSERT_EQ(domains->size(), 2u);
  WriteFile("b", "fill", 4 * kMiB);  // domain 0 has less free space from here
  const uint64_t free0 = (*domains)[0]->Statfs().free_bytes, free1 = (*domains)[1]->Statfs().free_bytes;
  ASSERT_NE(free0, free1);
  ASSERT_TRUE(create("c", std::nullopt, &c).ok());
  EXPECT_EQ(c.domain(), free1 > free0 ? 1u : 0u) << free0 << " " << free1;
  CliResult list = Cli({"volume", "list"});
  ASSERT_EQ(list.exit_code, 0) << Describe(list);
  EXPECT_NE(list.out.find("DOMAIN"), std::string::npos) << list.out;
  for (const char* v : {"a", "b", "c"}) EXPECT_EQ(GetVolume(v).name(), v);
  EXPECT_EQ(Cli({"volume", "create", "d", "--domain", "1"}).exit_code, 0);
  EXPECT_EQ(GetVolume("d").domain(), 1u);
  EXPECT_NE(Cli({"volume", "create", "e", "--domain", "x"}).exit_code, 0);

  // A file in domain 1, through that domain.
  const std::shared_ptr<fs::Domain>& d1 = (*domains)[1];
  auto file = d1->Create(a.id(), fs::kRootIno, "f", fs::FileType::kRegular, 0644, 0, 0);
  ASSERT_TRUE(file.ok()) << file.status().ToString();
  ASSERT_TRUE(d1->Write(a.id(), file->ino, 0, "in domain one", 13).ok());
  domains.reset();

  // Exports: ids of the volume's domain; a pseudo path is the reserve's.
  ASSERT_EQ(Cli({"export", "add", "a", "--pseudo", "/a"}).exit_code, 0);
  ASSERT_EQ(Cli({"export", "add", "b", "--pseudo", "/b"}).exit_code, 0);
  CliResult taken = Cli({"export", "add", "b", "--pseudo", "/a"});
  EXPECT_NE(taken.exit_code, 0);
  EXPECT_NE(taken.err.find("is taken by export"), std::string::npos) << Describe(taken);
  auto exports = node_->ListExports();
  ASSERT_TRUE(exports.ok());
  ASSERT_EQ(exports->size(), 2u);
  std::map<std::string, uint32_t> ids;
  for (const auto& e : *exports) ids[e.pseudo] = e.id;
  EXPECT_EQ(ids["/b"], fs::ExportIds(0, 2).first);
  EXPECT_EQ(ids["/a"], fs::ExportIds(1, 2).first);
  EXPECT_EQ(Rendered().size(), 2u) << "the exports file holds every domain's";
  ASSERT_TRUE(node_->GetExport(ids["/a"]).ok());
  ASSERT_EQ(node_->FindExport("/a")->id, ids["/a"]);
  // Shares: names (which ignore case) are the reserve's too.
  ASSERT_EQ(Cli({"share", "add", "a", "--name", "Docs"}).exit_code, 0);
  CliResult share = Cli({"share", "add", "b", "--name", "docs"});
  EXPECT_NE(share.exit_code, 0);
  EXPECT_NE(share.err.find("is taken"), std::string::npos) << Describe(share);
  ASSERT_EQ(Cli({"share", "add", "b", "--name", "Bin"}).exit_code, 0);
  auto shares = node_->ListShares();
  ASSERT_TRUE(shares.ok());
  ASSERT_EQ(shares->size(), 2u);
  EXPECT_EQ((*shares)[0].name, "Bin") << "by name, as one domain lists them";
  // Snapshots and clones stay in their volume's domain.
  ASSERT_TRUE(CreateSnapshot("a", "s1").ok());
  pb::Volume clone;
  ASSERT_TRUE(Clone("a", "s1", "a2", &clone).ok());
  EXPECT_EQ(clone.domain(), 1u);
  EXPECT_EQ(Clone("a", "s1", "b").error_code(), grpc::StatusCode::ALREADY_EXISTS);

  // Again after a restart: every domain opened, every name found.
  StopAll();
  StartAll();
  ASSERT_EQ(node_->GetReserve().state, ReserveState::kOnline) << node_->GetReserve().reason;
  EXPECT_EQ(Reserve().domains(), 2u);
  auto vols = node_->ListVolumes();
  ASSERT_TRUE(vols.ok());
  EXPECT_EQ(vols->size(), 5u);
  EXPECT_EQ(GetVolume("a2").domain(), 1u);
  domains = node_->domains(&verifier, nullptr);
  ASSERT_NE(domains, nullptr);
  char got[13] = {};
  auto attr = (*domains)[1]->Lookup(a.id(), fs::kRootIno, "f");
  ASSERT_TRUE(attr.ok()) << attr.status().ToString();
  auto n = (*domains)[1]->Read(a.id(), attr->ino, 0, sizeof(got), got);
  ASSERT_TRUE(n.ok()) << n.status().ToString();
  EXPECT_EQ(std::string(got, *n), "in domain one");
  EXPECT_EQ(Rendered().size(), 2u);
  ASSERT_TRUE(node_->RemoveExport(ids["/a"]).ok());
  EXPECT_EQ(node_->ListExports()->size(), 1u);
  for (size_t id = 0; id < domains->size(); id++) {
    auto problems = (*domains)[id]->Check();
    ASSERT_TRUE(problems.ok()) << problems.status().ToString();
    EXPECT_TRUE(problems->empty()) << "domain " << id << ": " << problems->front();
  }
}

TEST_F(AdminExportsTest, CliAddListShowRemove) {
  Prepare();
  EXPECT_TRUE(Rendered().empty()) << "the file exists from the format on, with no export";

  CliResult r = Cli({"export", "add", "vol1"});
  ASSERT_EQ(r.exit_code, 0) << Describe(r);
  EXPECT_NE(r.out.find("/vol1"), std::string::npos) << r.out;
  r = Cli({"--json", "export", "add", "vol1/a/b/", "--pseudo", "/data", "--clients", "198.18.2.0/24, 198.18.3.7",
           "--ro", "--no-root-squash", "--sec", "krb5p,sys", "--protocols", "4"});
  ASSERT_EQ(r.exit_code, 0) << Describe(r);
  json j = json::parse(r.out);
  EXPECT_EQ(j["export"]["id"], 2);
  EXPECT_EQ(j["export"]["volume"], "vol1");
  EXPECT_EQ(j["export"]["path"], "/a/b");
  EXPECT_EQ(j["export"]["pseudo"], "/data");
  EXPECT_EQ(j["export"]["clients"], json({"198.18.2.0/24", "198.18.3.7"}));
  EXPECT_EQ(j["export"]["read_only"], true);
  EXPECT_EQ(j["export"]["root_squash"], false);
  EXPECT_EQ(j["export"]["sec"], json({"krb5p", "sys"}));
  EXPECT_EQ(j["export"]["protocols"], json({4}));
  EXPECT_FALSE(j.contains("publish_error")) << r.out;
  r = Cli({"export", "add", "vol2", "--clients", "2001:DB8::/32"});
  ASSERT_EQ(r.exit_code, 0) << Describe(r);

  r = Cli({"export", "list"});
  ASSERT_EQ(r.exit_code, 0) << Describe(r);
  EXPECT_NE(r.out.find("PSEUDO"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("/data"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("2001:db8::/32"), std::string::npos) << "canonical form: " << r.out;
  r = Cli({"--json", "export", "list"});
  ASSERT_EQ(r.exit_code, 0) << Describe(r);
  j = json::parse(r.out);
  ASSERT_EQ(j["exports"].size(), 3u) << r.out;
  EXPECT_EQ(j["exports"][0]["pseudo"], "/vol1");
  EXPECT_EQ(j["exports"][0]["clients"], json::array());
  EXPECT_EQ(j["exports"][0]["root_squash"], true);
  EXPECT_EQ(j["exports"][0]["sec"], json({"sys"}));
  EXPECT_EQ(j["exports"][0]["protocols"], json({3, 4}));
  EXPECT_EQ(j["exports"][2]["volume"], "vol2");

  r = Cli({"export", "show", "2"});
  ASSERT_EQ(r.exit_code, 0) << Describe(r);
  EXPECT_NE(r.out.find("read-only"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("/a/b"), std::string::npos) << r.out;
  r = Cli({"--json", "export", "show", "/data/"});
  ASSERT_EQ(r.exit_code, 0) << Describe(r);
  EXPECT_EQ(json::parse(r.out)["export"]["id"], 2);

  // The rendered file, read back.
  auto rendered = Rendered();
  ASSERT_EQ(rendered.size(), 3u) << ReadText(exports_file_);
  const GaneshaBlock& e1 = rendered[1];
  EXPECT_EQ(e1.One("Path"), "/vol1");
  EXPECT_EQ(e1.One("Pseudo"), "/vol1");
  EXPECT_EQ(e1.keys.at("Protocols"), (std::vector<std::string>{"3", "4"}));
  EXPECT_EQ(e1.One("Transports"), "TCP");
  EXPECT_EQ(e1.One("SecType"), "sys");
  EXPECT_EQ(e1.One("Squash"), "Root_Squash");
  EXPECT_EQ(e1.One("Anonymous_Uid"), "65534");
  EXPECT_EQ(e1.One("Anonymous_Gid"), "65534");
  EXPECT_EQ(e1.One("Access_Type"), "RW");
  ASSERT_EQ(e1.blocks.size(), 1u) << "no CLIENT block without clients";
  EXPECT_EQ(e1.blocks[0].name, "FSAL");
  EXPECT_EQ(e1.blocks[0].One("Name"), "NASGW");
  const GaneshaBlock& e2 = rendered[2];
  EXPECT_EQ(e2.One("Path"), "/vol1/a/b");
  EXPECT_EQ(e2.One("Pseudo"), "/data");
  EXPECT_EQ(e2.One("Protocols"), "4");
  EXPECT_EQ(e2.keys.at("SecType"), (std::vector<std::string>{"krb5p", "sys"}));
  EXPECT_EQ(e2.One("Squash"), "No_Root_Squash");
  EXPECT_EQ(e2.One("Access_Type"), "None") << "only the listed clients get access";
  ASSERT_EQ(e2.blocks.size(), 2u);
  EXPECT_EQ(e2.blocks[0].name, "CLIENT");
  EXPECT_EQ(e2.blocks[0].keys.at("Clients"), (std::vector<std::string>{"198.18.2.0/24", "198.18.3.7"}));
  EXPECT_EQ(e2.blocks[0].One("Access_Type"), "RO");
  EXPECT_EQ(e2.blocks[1].name, "FSAL");
  EXPECT_EQ(rendered[3].blocks[0].One("Clients"), "2001:db8::/32");
  EXPECT_EQ(rendered[3].blocks[0].One("Access_Type"), "RW");

  // Remove, and ids are never reused.
  r = Cli({"export", "remove", "3"});
  ASSERT_EQ(r.exit_code, 0) << Describe(r);
  EXPECT_NE(r.out.find("removed export 3"), std::string::npos) << r.out;
  EXPECT_EQ(Rendered().count(3), 0u);
  r = Cli({"export", "remove", "3"});
  EXPECT_EQ(r.exit_code, 4) << Describe(r);
  r = Cli({"--json", "export", "add", "vol2"});
  ASSERT_EQ(r.exit_code, 0) << Describe(r);
  EXPECT_EQ(json::parse(r.out)["export"]["id"], 4) << "id 3 is never handed out again";
  EXPECT_EQ(Rendered().count(4), 1u);

  auto problems = node_->domain()->Check();
  ASSERT_TRUE(problems.ok());
  EXPECT_TRUE(problems->empty()) << (*problems)[0];
}

TEST_F(AdminExportsTest, BadExportsGetClearErrorsAndExitCodes) {
  StartAll();
  CliResult r = Cli({"export", "list"});
  EXPECT_EQ(r.exit_code, 1) << "the reserve is not online: " << Describe(r);
  EXPECT_NE(r.err.find("not online"), std::string::npos) << r.err;
  ASSERT_TRUE(Format("tank").ok());
  ASSERT_TRUE(CreateVolume("vol1").ok());
  auto d = node_->domain();
  const uint32_t v = d->FindVolume("vol1")->id;
  ASSERT_TRUE(d->Create(v, fs::kRootIno, "f", fs::FileType::kRegular, 0644, 0, 0).ok());
  ASSERT_EQ(Cli({"export", "add", "vol1"}).exit_code, 0);

  struct Case {
    std::vector<std::string> args;
    int exit;
    std::string named;  // in the message
  };
  const std::vector<Case> cases = {
      {{"export", "add", "nope"}, 4, "'nope'"},
      {{"export", "add", "vol1/missing/dir"}, 4, "'/missing'"},
      {{"export", "add", "vol1/f"}, 4, "not a directory"},
      {{"export", "add", "vol1"}, 5, "'/vol1'"},
      {{"export", "add", "vol1", "--pseudo", "/vol1/"}, 5, "export 1"},
      {{"export", "add", "vol1", "--pseudo", "/"}, 2, "pseudo root"},
      {{"export", "add", "vol1", "--pseudo", "rel"}, 2, "'rel'"},
      {{"export", "add", "vol1/../x"}, 2, "'..'"},
      {{"export", "add", "vol1", "--pseudo", "/a\"b"}, 2, "'\"'"},
      {{"export", "add", "vol1", "--pseudo", "/x", "--clients", "198.18.2.5/24"}, 2, "'198.18.2.5/24'"},
      {{"export", "add", "vol1", "--pseudo", "/x", "--clients", "host.example"}, 2, "'host.example'"},
      {{"export", "add", "vol1", "--pseudo", "/x", "--clients", "198.18.2.0/24,,198.18.3.7"}, 2, "empty entry"},
      {{"export", "add", "vol1", "--pseudo", "/x", "--sec", "sys,ntlm"}, 2, "'ntlm'"},
      {{"export", "add", "vol1", "--pseudo", "/x", "--protocols", "2"}, 2, "'2'"},
      {{"export", "add", "vol1", "--pseudo", "/x", "--protocols", "3,x"}, 2, "'x'"},
      {{"export", "add", "/vol1"}, 2, "VOLUME[/SUBPATH]"},
      {{"export", "add"}, 2, "VOLUME[/SUBPATH]"},
      {{"export", "add", "vol1", "--force"}, 2, "--force"},
      {{"export", "show", "7"}, 4, "no export 7"},
      {{"export", "show", "/nothing"}, 4, "'/nothing'"},
      {{"export", "show", "0"}, 2, "'0'"},
      {{"export", "show", "name"}, 2, "'name'"},
      {{"export", "remove", "99"}, 4, "no export 99"},
      {{"export", "remove", "/vol1"}, 2, "'/vol1'"},
      {{"export", "remove"}, 2, "export ID"},
      {{"export", "frob"}, 2, "export frob"},
  };
  for (const auto& c : cases) {
    std::string joined;
    for (const auto& w : c.args) joined += w + " ";
    r = Cli(c.args);
    EXPECT_EQ(r.exit_code, c.exit) << joined << Describe(r);
    EXPECT_NE(r.err.find(c.named), std::string::npos) << joined << Describe(r);
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << joined << "one line: " << r.err;
  }
  // Nothing of that was added.
  r = Cli({"--json", "export", "list"});
  ASSERT_EQ(r.exit_code, 0) << Describe(r);
  EXPECT_EQ(json::parse(r.out)["exports"].size(), 1u) << r.out;
  r = Cli({"--json", "export", "show", "9"});
  EXPECT_EQ(json::parse(r.out)["error"]["code"], "NOT_FOUND") << r.out;
  r = Cli({"export", "--help"});
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_NE(r.out.find("export add"), std::string::npos) << r.out;
  r = Cli({"export", "add", "--help"});
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_NE(r.out.find("--no-root-squash"), std::string::npos) << r.out;

  // The API directly: the same rules.
  pb::AddExportRequest add;
  add.set_volume("vol1");
  add.set_pseudo("/y");
  add.add_protocols(5);
  pb::AddExportResponse added;
  auto s = Call(&pb::Admin::Stub::AddExport, add, &added);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(s.error_message().find("version 5"), std::string::npos) << s.error_message();
  pb::GetExportResponse got;
  EXPECT_EQ(Call(&pb::Admin::Stub::GetExport, pb::GetExportRequest(), &got).error_code(),
            grpc::StatusCode::INVALID_ARGUMENT)
      << "neither id nor pseudo";
  pb::RemoveExportRequest rm;
  pb::RemoveExportResponse removed;
  EXPECT_EQ(Call(&pb::Admin::Stub::RemoveExport, rm, &removed).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
}

TEST_F(AdminExportsTest, AnExportedVolumeCannotBeDeleted) {
  Prepare();
  ASSERT_EQ(Cli({"export", "add", "vol2"}).exit_code, 0);
  ASSERT_EQ(Cli({"export", "add", "vol1"}).exit_code, 0);
  ASSERT_EQ(Cli({"export", "add", "vol1/a", "--pseudo", "/a"}).exit_code, 0);
  for (const auto& args :
       std::vector<std::vector<std::string>>{{"volume", "delete", "vol1"}, {"volume", "delete", "vol1", "--force"}}) {
    CliResult r = Cli(args);
    EXPECT_EQ(r.exit_code, 6) << Describe(r);
    EXPECT_NE(r.err.find("exports 2, 3"), std::string::npos) << r.err;
    EXPECT_EQ(r.err.find("use --force"), std::string::npos) << "force does not help: " << r.err;
    EXPECT_NE(r.err.find("nasgw export remove"), std::string::npos) << r.err;
  }
  EXPECT_EQ(DeleteVolume("vol1", true).error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_EQ(Cli({"volume", "show", "vol1"}).exit_code, 0) << "still there";
  ASSERT_EQ(Cli({"export", "remove", "2"}).exit_code, 0);
  ASSERT_EQ(Cli({"export", "remove", "3"}).exit_code, 0);
  CliResult r = Cli({"volume", "delete", "vol1", "--force"});
  EXPECT_EQ(r.exit_code, 0) << Describe(r);
  r = Cli({"--json", "export", "list"});
  EXPECT_EQ(json::parse(r.out)["exports"].size(), 1u) << r.out;
}

TEST_F(AdminExportsTest, ExportsPersistAcrossARestartAndTheFileIsRewritten) {
  Prepare();
  ASSERT_EQ(Cli({"export", "add", "vol1/a/b", "--clients", "198.18.0.0/15", "--ro"}).exit_code, 0);
  ASSERT_EQ(Cli({"export", "add", "vol2", "--sec", "krb5", "--protocols", "3"}).exit_code, 0);
  ASSERT_EQ(Cli({"export", "remove", "1"}).exit_code, 0);
  CliResult before = Cli({"--json", "export", "list"});
  ASSERT_EQ(before.exit_code, 0) << Describe(before);

  StopAll();
  ASSERT_EQ(::unlink(exports_file_.c_str()), 0);
  StartAll();
  EXPECT_EQ(Rendered().size(), 1u) << "written when the reserve came online";
  CliResult after = Cli({"--json", "export", "list"});
  ASSERT_EQ(after.exit_code, 0) << Describe(after);
  EXPECT_EQ(json::parse(after.out), json::parse(before.out));
  EXPECT_EQ(Rendered()[2].One("SecType"), "krb5");
  CliResult r = Cli({"--json", "export", "add", "vol1"});
  ASSERT_EQ(r.exit_code, 0) << Describe(r);
  EXPECT_EQ(json::parse(r.out)["export"]["id"], 3) << "the id counter is kept with the reserve";

  // A forced format starts over: no exports, and the file says so.
  ASSERT_TRUE(Format("fresh", kMiB, true).ok());
  EXPECT_TRUE(Rendered().empty()) << ReadText(exports_file_);
  r = Cli({"--json", "export", "list"});
  EXPECT_EQ(json::parse(r.out)["exports"].size(), 0u) << r.out;
}

TEST_F(AdminExportsTest, GaneshaIsSignalledOnlyWhenItIsGanesha) {
  const std::string pid_file = dir_ + "/ganesha/ganesha.pid";
  config_.nfs_ganesha_pid_file = pid_file;
  Prepare();  // no pid file yet: a WARN line, not an error

  FakeProcess other("not-ganesha");
  ASSERT_EQ(other.Comm(), "not-ganesha");
  std::ofstream(pid_file) << other.pid() << "\n";
  CliResult r = Cli({"export", "add", "vol1"});
  ASSERT_EQ(r.exit_code, 0) << Describe(r);
  EXPECT_EQ(r.err, "") << "a pid that is not Ganesha is nasgwd's WARN line, not the admin's error";
  EXPECT_FALSE(other.HupPending()) << "never signal a process that is not ganesha.nfsd";

  FakeProcess ganesha("ganesha.nfsd");
  ASSERT_EQ(ganesha.Comm(), "ganesha.nfsd");
  std::ofstream(pid_file) << ganesha.pid() << "\n";
  ASSERT_EQ(Cli({"export", "add", "vol2"}).exit_code, 0);
  EXPECT_TRUE(ganesha.HupPending()) << "SIGHUP after the change";
  EXPECT_EQ(Rendered().size(), 2u) << "the file was complete before the signal";
  EXPECT_FALSE(other.HupPending());

  // Removal signals too (a fresh Ganesha, nothing pending yet).
  FakeProcess ganesha2("ganesha.nfsd");
  std::ofstream(pid_file) << ganesha2.pid() << "\n";
  ASSERT_FALSE(ganesha2.HupPending());
  ASSERT_EQ(Cli({"export", "remove", "1"}).exit_code, 0);
  EXPECT_TRUE(ganesha2.HupPending());
}

TEST_F(AdminExportsTest, AnUnwritableFileIsAWarningAndTheChangeStands) {
  Prepare();
  ASSERT_EQ(::rename((dir_ + "/ganesha").c_str(), (dir_ + "/gone").c_str()), 0);
  CliResult r = Cli({"--json", "export", "add", "vol1"});
  EXPECT_EQ(r.exit_code, 0) << Describe(r);
  json j = json::parse(r.out);
  EXPECT_EQ(j["export"]["id"], 1);
  EXPECT_NE(j["publish_error"].get<std::string>().find(exports_file_), std::string::npos) << r.out;
  EXPECT_NE(r.err.find("warning: export 1 was added"), std::string::npos) << r.err;
  // Back in place: the next change writes the whole file.
  ASSERT_EQ(::rename((dir_ + "/gone").c_str(), (dir_ + "/ganesha").c_str()), 0);
  r = Cli({"export", "add", "vol2"});
  EXPECT_EQ(r.exit_code, 0) << Describe(r);
  EXPECT_EQ(r.err, "");
  EXPECT_EQ(Rendered().size(), 2u);
}

// ---- TLS

class AdminTlsTest : public AdminTest {
 protected:
  bool Openssl(const std::string& args) {
    const std::string cmd = "cd " + dir_ + " && openssl " + args + " >>openssl.log 2>&1";
    return std::system(cmd.c_str()) == 0;
  }
  // A CA and a certificate it signs (EC keys: fast to make).
  bool MakeCa(const std::string& name) {
    return Openssl("req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -keyout " + name + ".key -out " +
                   name + ".crt -days 2 -subj /CN=" + name);
  }
  bool MakeCert(const std::string& name, const std::string& ca, const std::string& ext) {
    std::ofstream(dir_ + "/" + name + ".ext") << ext << "\n";
    return Openssl("req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -keyout " + name + ".key -out " + name +
                   ".csr -subj /CN=" + name) &&
           Openssl("x509 -req -in " + name + ".csr -CA " + ca + ".crt -CAkey " + ca + ".key -CAcreateserial -out " +
                   name + ".crt -days 2 -extfile " + name + ".ext");
  }
};

// admin.tcp without a client CA starts only on the explicit choice
// (admin.insecure_no_client_auth); then a client without a certificate is
// served.
TEST_F(AdminTlsTest, WithoutClientCertificatesOnlyByExplicitChoice) {
  ASSERT_TRUE(MakeCa("ca")) << ReadText(dir_ + "/openssl.log");
  ASSERT_TRUE(MakeCert("server", "ca", "subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth"));
  config_.admin_tcp = "127.0.0.1:0";
  config_.tls_cert = dir_ + "/server.crt";
  config_.tls_key = dir_ + "/server.key";
  auto n = Node::Start(config_, Opener(), SmallDomain());
  ASSERT_TRUE(n.ok()) << n.status().ToString();
  node_ = std::move(n.value());
  auto refused = AdminServer::Start(node_.get(), config_);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), Code::kInvalidArgument);
  EXPECT_NE(refused.status().ToString().find("admin.insecure_no_client_auth"), std::string::npos)
      << refused.status().ToString();
  node_.reset();
  config_.admin_insecure_no_client_auth = true;
  StartAll();
  const std::string server = "127.0.0.1:" + std::to_string(server_->tcp_port());
  CliResult r = Cli({"--server", server, "--tls-ca", dir_ + "/ca.crt", "node", "status"}, false);
  EXPECT_EQ(r.exit_code, 0) << Describe(r);
}

TEST_F(AdminTlsTest, ClientCertificatesAreRequiredAndVerified) {
  ASSERT_TRUE(MakeCa("ca")) << ReadText(dir_ + "/openssl.log");
  ASSERT_TRUE(MakeCa("other-ca")) << ReadText(dir_ + "/openssl.log");
  ASSERT_TRUE(MakeCert("server", "ca", "subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth"));
  ASSERT_TRUE(MakeCert("client", "ca", "extendedKeyUsage=clientAuth"));
  ASSERT_TRUE(MakeCert("intruder", "other-ca", "extendedKeyUsage=clientAuth"));
  config_.admin_tcp = "127.0.0.1:0";
  config_.tls_cert = dir_ + "/server.crt";
  config_.tls_key = dir_ + "/server.key";
  config_.tls_client_ca = dir_ + "/ca.crt";
  StartAll();
  ASSERT_GT(server_->tcp_port(), 0);
  const std::string server = "127.0.0.1:" + std::to_string(server_->tcp_port());

  CliResult r = Cli({"--server", server, "--tls-ca", dir_ + "/ca.crt", "--tls-cert", dir_ + "/client.crt", "--tls-key",
                     dir_ + "/client.key", "node", "status"},
                    false);
  EXPECT_EQ(r.exit_code, 0) << Describe(r);
  EXPECT_NE(r.out.find("n1"), std::string::npos) << r.out;

  // A gRPC client with the good certificate, directly.
  grpc::SslCredentialsOptions tls;
  tls.pem_root_certs = ReadText(dir_ + "/ca.crt");
  tls.pem_cert_chain = ReadText(dir_ + "/client.crt");
  tls.pem_private_key = ReadText(dir_ + "/client.key");
  auto stub = pb::Admin::NewStub(grpc::CreateChannel(server, grpc::SslCredentials(tls)));
  {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(20));
    pb::GetReserveResponse resp;
    auto s = stub->GetReserve(&ctx, pb::GetReserveRequest(), &resp);
    EXPECT_TRUE(s.ok()) << s.error_message();
    EXPECT_EQ(resp.reserve().luns_size(), 3);
  }

  r = Cli({"--server", server, "--tls-ca", dir_ + "/ca.crt", "node", "status"}, false);
  EXPECT_EQ(r.exit_code, 3) << "no client certificate: " << Describe(r);
  EXPECT_NE(r.err.find(server), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("TLS"), std::string::npos) << r.err;

  r = Cli({"--server", server, "--tls-ca", dir_ + "/ca.crt", "--tls-cert", dir_ + "/intruder.crt", "--tls-key",
           dir_ + "/intruder.key", "node", "status"},
          false);
  EXPECT_EQ(r.exit_code, 3) << "a certificate of another CA: " << Describe(r);

  r = Cli({"--server", server, "--tls-ca", dir_ + "/other-ca.crt", "--tls-cert", dir_ + "/client.crt", "--tls-key",
           dir_ + "/client.key", "node", "status"},
          false);
  EXPECT_EQ(r.exit_code, 3) << "a server the client's CA did not sign: " << Describe(r);

  // The Unix socket still serves without TLS.
  r = Cli({"node", "status"});
  EXPECT_EQ(r.exit_code, 0) << Describe(r);
}

}  // namespace
}  // namespace nasgw::daemon
