#include "daemon/config.h"

#include <fcntl.h>
#include <grp.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "base/limits.h"
#include "block/iscsi_url.h"

#include <sys/stat.h>
#include <sys/wait.h>

namespace nasgw::daemon {
namespace {

constexpr const char* kOrigin = "/etc/nasgw/nasgwd.toml";
constexpr const char* kLun0 = "iscsi://198.18.0.10/iqn.2026-11.org.nasgw.lab:array1/0";
constexpr const char* kLun1 = "iscsi://198.18.0.11:3261/iqn.2026-11.org.nasgw.lab:array2/1";

std::string R(int64_t lo, int64_t hi) {
  return std::to_string(lo) + ".." + std::to_string(hi);
}

// Every test gets its own mkdtemp directory for the files a config refers
// to; TearDown removes it whatever the test's outcome.
class ConfigTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = (std::filesystem::temp_directory_path() / "nasgw_config_test.XXXXXX").string();
    ASSERT_NE(::mkdtemp(tmpl.data()), nullptr) << std::strerror(errno);
    dir_ = tmpl;
  }

  void TearDown() override {
    if (dir_.empty()) return;
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
    EXPECT_FALSE(ec) << "removing " << dir_ << ": " << ec.message();
  }

  // Writes `content` to dir_/name with exactly `mode` (whatever the umask).
  std::string WriteFile(const std::string& name, const std::string& content, mode_t mode = 0600) {
    std::string path = dir_ + "/" + name;
    int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    EXPECT_GE(fd, 0) << path << ": " << std::strerror(errno);
    if (fd < 0) return path;
    EXPECT_EQ(::write(fd, content.data(), content.size()), static_cast<ssize_t>(content.size()));
    EXPECT_EQ(::fchmod(fd, mode), 0);
    ::close(fd);
    return path;
  }

  // The minimal valid config plus extra lines in [node] and [reserve], and
  // further sections after them.
  static std::string Cfg(const std::string& node_extra = "", const std::string& reserve_extra = "",
                         const std::string& rest = "") {
    return "[node]\nname = \"gw-a\"\n" + node_extra + "\n[reserve]\nluns = [\"" + kLun0 + "\"]\n" + reserve_extra +
           "\n" + rest + "\n";
  }

  static Result<Config> Parse(const std::string& text) { return ParseConfig(text, kOrigin); }

  // The text is refused with InvalidArgument; the message starts with the
  // origin and contains every part.
  static void ExpectInvalid(const std::string& text, const std::vector<std::string>& parts) {
    SCOPED_TRACE(text);
    auto c = Parse(text);
    ASSERT_FALSE(c.ok());
    EXPECT_EQ(c.status().code(), Code::kInvalidArgument) << c.status().ToString();
    const std::string m(c.status().message());
    EXPECT_EQ(m.rfind(std::string(kOrigin) + ": ", 0), 0u) << m;
    for (const std::string& p : parts) EXPECT_NE(m.find(p), std::string::npos) << "'" << p << "' not in: " << m;
  }

  static void ExpectOk(const std::string& text) {
    auto c = Parse(text);
    EXPECT_TRUE(c.ok()) << text << "\n" << c.status().ToString();
  }

  std::string dir_;
};

TEST_F(ConfigTest, MinimalConfigTakesDefaults) {
  auto c = Parse(Cfg());
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->node_name, "gw-a");
  EXPECT_EQ(c->run_dir, "/run/nasgw");
  EXPECT_EQ(c->state_dir, "/var/lib/nasgw");
  EXPECT_EQ(c->log_level, "info");
  EXPECT_EQ(c->luns, std::vector<std::string>{kLun0});
  EXPECT_EQ(c->initiator, "iqn.2026-11.org.nasgw:gw-a");
  EXPECT_TRUE(c->chap_user.empty());
  EXPECT_TRUE(c->chap_secret.empty());
  EXPECT_EQ(c->io_timeout_ms, limits::kIoTimeoutMsDefault);
  EXPECT_EQ(c->queue_depth, limits::kQueueDepthDefault);
  EXPECT_EQ(c->bulk_target_ms, limits::kBulkTargetMsDefault);
  EXPECT_EQ(c->connect_timeout_ms, limits::kConnectTimeoutMsDefault);
  EXPECT_EQ(c->head_socket, "/run/nasgw/head.sock");
  EXPECT_EQ(c->head_socket_mode, 0660u);
  EXPECT_TRUE(c->head_socket_group.empty());
  EXPECT_EQ(c->head_workers, kHeadWorkersDefault);
  EXPECT_EQ(c->head_max_connections, kHeadConnectionsDefault);
  EXPECT_EQ(c->head_max_connections_per_uid, kHeadConnectionsPerUidDefault);
  EXPECT_EQ(c->head_max_inflight, kHeadInflightDefault);
  EXPECT_EQ(c->head_idle_timeout_ms, kHeadIdleTimeoutMsDefault);
  EXPECT_EQ(c->admin_socket, "/run/nasgw/admin.sock");
  EXPECT_FALSE(c->admin_insecure_no_client_auth);
  EXPECT_TRUE(c->admin_tcp.empty());
  EXPECT_TRUE(c->tls_cert.empty());
  EXPECT_TRUE(c->tls_key.empty());
  EXPECT_TRUE(c->tls_client_ca.empty());
  EXPECT_TRUE(c->metrics_listen.empty());
  EXPECT_EQ(c->drain_ms, kShutdownDrainMsDefault);
  EXPECT_EQ(c->LunUrlsWithChap(), c->luns);
}

TEST_F(ConfigTest, StructDefaultsMatchLimits) {
  Config c;
  EXPECT_EQ(c.io_timeout_ms, limits::kIoTimeoutMsDefault);
  EXPECT_EQ(c.queue_depth, limits::kQueueDepthDefault);
  EXPECT_EQ(c.connect_timeout_ms, limits::kConnectTimeoutMsDefault);
  EXPECT_LE(kHeadWorkersDefault, kHeadWorkersMax);
  EXPECT_LE(kHeadConnectionsDefault, kHeadConnectionsMax);
  EXPECT_LE(kHeadInflightDefault, kHeadInflightMax);
  EXPECT_LE(kShutdownDrainMsDefault, kShutdownDrainMsMax);
}

TEST_F(ConfigTest, FullConfig) {
  const std::string secret = WriteFile("chap.secret", "0123456789abcdef\n");
  const std::string cert = WriteFile("admin.crt", "-----BEGIN CERTIFICATE-----\n", 0644);
  const std::string key = WriteFile("admin.key", "-----BEGIN PRIVATE KEY-----\n");
  const std::string ca = WriteFile("clients.pem", "-----BEGIN CERTIFICATE-----\n", 0644);
  const group* g = ::getgrgid(::getegid());
  ASSERT_NE(g, nullptr);
  const std::string group_name = g->gr_name;

  const std::string text = R"(
# a comment
[node]
name = "gw-a.lab_1"
run_dir = "/run/nasgw-test/"
state_dir = "/var/lib/nasgw-test"
log_level = "debug"

[reserve]
luns = [
  "iscsi://198.18.0.10/iqn.2026-11.org.nasgw.lab:array1/0",
  "iscsi://198.18.0.11:3261/iqn.2026-11.org.nasgw.lab:array2/1",
  "iscsi://[2001:db8::10]/iqn.2026-11.org.nasgw.lab:array3/2",
]
initiator = "iqn.2026-11.org.nasgw.lab:gw-a"
chap_user = "nasgw"
chap_secret_file = ")" + secret +
                           R"("
io_timeout_ms = 20000
queue_depth = 128
bulk_target_ms = 0
connect_timeout_ms = 3000

[head]
socket = "/run/nasgw-test/h.sock"
socket_mode = "0664"
socket_group = ")" + group_name +
                           R"("
workers = 8
max_connections = 512
max_connections_per_uid = 64
max_inflight = 32
idle_timeout_ms = 60000

[admin]
socket = "/run/nasgw-test/a.sock"
tcp = "198.18.0.1:9443"
tls_cert = ")" + cert + R"("
tls_key = ")" + key + R"("
tls_client_ca = ")" + ca + R"("

[metrics]
listen = "[::]:9100"

[shutdown]
drain_ms = 0
)";
  auto c = Parse(text);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->node_name, "gw-a.lab_1");
  EXPECT_EQ(c->run_dir, "/run/nasgw-test");
  EXPECT_EQ(c->state_dir, "/var/lib/nasgw-test");
  EXPECT_EQ(c->log_level, "debug");
  ASSERT_EQ(c->luns.size(), 3u);
  EXPECT_EQ(c->luns[2], "iscsi://[2001:db8::10]/iqn.2026-11.org.nasgw.lab:array3/2");
  EXPECT_EQ(c->initiator, "iqn.2026-11.org.nasgw.lab:gw-a");
  EXPECT_EQ(c->chap_user, "nasgw");
  EXPECT_EQ(c->chap_secret, "0123456789abcdef");
  EXPECT_EQ(c->io_timeout_ms, 20000u);
  EXPECT_EQ(c->queue_depth, 128u);
  EXPECT_EQ(c->bulk_target_ms, 0u);  // 0 is allowed: no bulk window
  EXPECT_EQ(c->connect_timeout_ms, 3000u);
  EXPECT_EQ(c->head_socket, "/run/nasgw-test/h.sock");
  EXPECT_EQ(c->head_socket_mode, 0664u);
  EXPECT_EQ(c->head_socket_group, group_name);
  EXPECT_EQ(c->head_workers, 8u);
  EXPECT_EQ(c->head_max_connections, 512u);
  EXPECT_EQ(c->head_max_inflight, 32u);
  EXPECT_EQ(c->head_max_connections_per_uid, 64u);
  EXPECT_EQ(c->head_idle_timeout_ms, 60000u);
  EXPECT_EQ(c->admin_socket, "/run/nasgw-test/a.sock");
  EXPECT_EQ(c->admin_tcp, "198.18.0.1:9443");
  EXPECT_EQ(c->tls_cert, cert);
  EXPECT_EQ(c->tls_key, key);
  EXPECT_EQ(c->tls_client_ca, ca);
  EXPECT_EQ(c->metrics_listen, "[::]:9100");
  EXPECT_EQ(c->drain_ms, 0u);
  auto urls = c->LunUrlsWithChap();
  ASSERT_EQ(urls.size(), 3u);
  EXPECT_EQ(urls[0], "iscsi://nasgw%0123456789abcdef@198.18.0.10/iqn.2026-11.org.nasgw.lab:array1/0");
  EXPECT_EQ(urls[2], "iscsi://nasgw%0123456789abcdef@[2001:db8::10]/iqn.2026-11.org.nasgw.lab:array3/2");
}

// ---- the file itself ----------------------------------------------------------

TEST_F(ConfigTest, LoadConfigReadsTheFile) {
  const std::string path = WriteFile("nasgwd.toml", Cfg(), 0644);
  auto c = LoadConfig(path);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->node_name, "gw-a");

  const std::string bad = WriteFile("bad.toml", Cfg("", "", "[head]\nworkers = 0"), 0644);
  auto b = LoadConfig(bad);
  ASSERT_FALSE(b.ok());
  EXPECT_EQ(b.status().code(), Code::kInvalidArgument);
  EXPECT_EQ(b.status().message(), bad + ": head.workers: 0 is out of range 1..256");
}

TEST_F(ConfigTest, LoadConfigMissingFileIsNotFound) {
  const std::string path = dir_ + "/absent.toml";
  auto c = LoadConfig(path);
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), Code::kNotFound);
  EXPECT_NE(c.status().message().find(path), std::string::npos) << c.status().ToString();
}

TEST_F(ConfigTest, LoadConfigUnreadableFileIsPermissionDenied) {
  const std::string path = WriteFile("locked.toml", Cfg(), 0000);
  auto check = [&path]() -> bool {
    auto c = LoadConfig(path);
    return !c.ok() && c.status().code() == Code::kPermissionDenied &&
           c.status().message().find(path) != std::string::npos;
  };
  if (::geteuid() != 0) {
    EXPECT_TRUE(check());
    return;
  }
  // Root reads any file: the check runs in a child that became nobody
  // (65534), as an unprivileged nasgwd would be.
  ASSERT_EQ(::chmod(dir_.c_str(), 0755), 0);
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    const bool dropped =
        ::setgroups(0, nullptr) == 0 && ::setresgid(65534, 65534, 65534) == 0 && ::setresuid(65534, 65534, 65534) == 0;
    ::_exit(!dropped ? 2 : check() ? 0 : 1);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0) << "1: not PermissionDenied naming the path; 2: could not become nobody";
}

TEST_F(ConfigTest, LoadConfigRefusesADirectory) {
  auto c = LoadConfig(dir_);
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), Code::kInvalidArgument);
  EXPECT_NE(c.status().message().find(dir_ + ": not a regular file"), std::string::npos) << c.status().ToString();
}

TEST_F(ConfigTest, SyntaxErrorHasLineAndColumn) {
  auto c = Parse("[node]\nname = \"gw-a\"\nrun_dir = /run\n");
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), Code::kInvalidArgument);
  EXPECT_EQ(c.status().message().rfind(std::string(kOrigin) + ":3:", 0), 0u) << c.status().ToString();

  // A key given twice is a syntax error in TOML.
  auto d = Parse("[head]\nworkers = 1\nworkers = 2\n");
  ASSERT_FALSE(d.ok());
  EXPECT_EQ(d.status().message().rfind(std::string(kOrigin) + ":3:", 0), 0u) << d.status().ToString();
}

// ---- unknown and mistyped keys ---------------------------------------------------

TEST_F(ConfigTest, UnknownSectionRefused) {
  ExpectInvalid(Cfg("", "", "[cahce]\nsize = 1"), {"cahce: unknown section [cahce]"});
  ExpectInvalid(Cfg("", "", "[[head]]\nworkers = 1"), {"head: expected a table ([head]), got an array"});
  ExpectInvalid("metrics = \"x\"\n" + Cfg(), {"metrics: expected a table ([metrics]), got a string"});
}

TEST_F(ConfigTest, CacheKeysAreReadAndBounded) {
  auto c = Parse(Cfg("", "",
                     "[cache]\nmemory_mib = 512\ndirty_mib = 64\nread_ahead_kib = 0\nflush_after_ms = 250\n"
                     "stall_timeout_ms = 5000\nwrite_through = true\nlog_stable_writes = false\nlog_slow_ms = 0\n"
                     "log_commits = false"));
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->cache_memory_mib, 512u);
  EXPECT_EQ(c->cache_dirty_mib, 64u);
  EXPECT_EQ(c->cache_read_ahead_kib, 0u);
  EXPECT_EQ(c->cache_flush_after_ms, 250u);
  EXPECT_EQ(c->cache_stall_timeout_ms, 5000u);
  EXPECT_TRUE(c->cache_write_through);
  EXPECT_FALSE(c->cache_log_stable_writes);
  EXPECT_EQ(c->cache_log_slow_ms, 0u);
  EXPECT_FALSE(c->cache_log_commits);
  auto d = Parse(Cfg());
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  EXPECT_EQ(uint64_t{d->cache_dirty_mib} << 20, limits::kCacheDirtyBytesDefault);
  EXPECT_EQ(uint64_t{d->cache_memory_mib} << 20, limits::kMemoryBytesDefault);
  EXPECT_EQ(uint64_t{d->cache_read_ahead_kib} << 10, limits::kReadAheadBytesDefault);
  EXPECT_FALSE(d->cache_write_through);
  EXPECT_TRUE(d->cache_log_stable_writes);
  EXPECT_EQ(d->cache_log_slow_ms, limits::kLogSlowMsDefault);
  EXPECT_TRUE(d->cache_log_commits);
  ExpectInvalid(Cfg("", "", "[cache]\nlog_slow_ms = 10001"), {"cache.log_slow_ms: 10001 is out of range"});
  ExpectInvalid(Cfg("", "", "[cache]\ndirty_mib = 1"), {"cache.dirty_mib: 1 is out of range"});
  ExpectInvalid(Cfg("", "", "[cache]\nflush_after_ms = 0"), {"cache.flush_after_ms: 0 is out of range"});
  ExpectInvalid(Cfg("", "", "[cache]\nmemory_mib = 16"), {"cache.memory_mib: 16 is out of range"});
  // 256 MiB: 32 for metadata, 32 for requests, 192 for data; dirty at most 96.
  ExpectInvalid(Cfg("", "", "[cache]\nmemory_mib = 256\ndirty_mib = 97"),
                {"cache.dirty_mib: 97 is more than half of the data cache's share (192 MiB) of cache.memory_mib (256"});
  EXPECT_TRUE(ParseConfig(Cfg("", "", "[cache]\nmemory_mib = 256\ndirty_mib = 96")).ok());
  ExpectInvalid(Cfg("", "", "[cache]\nread_ahead_kib = 70000"), {"cache.read_ahead_kib: 70000 is out of range"});
  ExpectInvalid(Cfg("", "", "[cache]\nwrite_through = 1"), {"cache.write_through"});
  ExpectInvalid(Cfg("", "", "[cache]\nsize = 1"), {"cache.size: unknown key"});
}

// One budget, cut in three that add up to it, each share within its bounds.
TEST(MemorySharesTest, TheBudgetIsCutInThreeThatAddUpToIt) {
  for (uint64_t mib : {32ull, 33ull, 256ull, 2048ull, 65536ull, 1ull << 20}) {
    const uint64_t bytes = mib << 20;
    const limits::MemoryShares s = limits::SharesOf(bytes);
    SCOPED_TRACE(mib);
    EXPECT_EQ(s.meta + s.requests + s.data, bytes);
    EXPECT_GE(s.meta, limits::kMetaCacheBytesMin);
    EXPECT_LE(s.meta, limits::kMetaCacheBytesMax);
    EXPECT_GE(s.requests, limits::kRequestBytesMin);
    EXPECT_LE(s.requests, limits::kRequestBytesMax);
    EXPECT_GE(s.data, limits::kCacheMemoryBytesMin);
    EXPECT_GE(s.data, bytes / 2);  // the data cache always gets most of it
  }
  const limits::MemoryShares def = limits::SharesOf(limits::kMemoryBytesDefault);
  EXPECT_EQ(def.meta, 256ull << 20);
  EXPECT_EQ(def.requests, 256ull << 20);
  EXPECT_EQ(def.data, 1536ull << 20);
  const limits::MemoryShares big = limits::SharesOf(1ull << 40);
  EXPECT_EQ(big.meta, limits::kMetaCacheBytesMax);
  EXPECT_EQ(big.requests, limits::kRequestBytesMax);
}

TEST_F(ConfigTest, UnknownKeyRefused) {
  ExpectInvalid(Cfg("", "", "[head]\nwrkers = 4"), {"head.wrkers: unknown key", "workers"});
  ExpectInvalid(Cfg("nmae = \"x\""), {"node.nmae: unknown key"});
  ExpectInvalid(Cfg("", "chap_password = \"x\""), {"reserve.chap_password: unknown key"});
  ExpectInvalid(Cfg("", "", "[head.tuning]\nx = 1"), {"head.tuning: unknown key"});
  ExpectInvalid(Cfg("", "", "[shutdown]\ndrain = 5"), {"shutdown.drain: unknown key"});
  ExpectInvalid(Cfg("", "", "[metrics]\nport = 9100"), {"metrics.port: unknown key"});
  ExpectInvalid(Cfg("", "", "[admin]\nsock = \"/run/a\""), {"admin.sock: unknown key"});
  // A key above the first section.
  ExpectInvalid("workers = 4\n" + Cfg(), {"workers: unknown key at the top level"});
}

TEST_F(ConfigTest, WrongTypesRefused) {
  {
    auto c = Parse(Cfg("", "", "[head]\nworkers = \"16\""));
    ASSERT_FALSE(c.ok());
    EXPECT_EQ(c.status().message(), std::string(kOrigin) + ": head.workers: expected an integer, got a string");
  }
  ExpectInvalid(Cfg("", "", "[head]\nworkers = 4.0"), {"head.workers: expected an integer, got a floating-point"});
  ExpectInvalid(Cfg("", "", "[shutdown]\ndrain_ms = true"), {"shutdown.drain_ms: expected an integer, got a boolean"});
  ExpectInvalid(Cfg("log_level = 1"), {"node.log_level: expected a string, got an integer"});
  ExpectInvalid(Cfg("", "", "[admin]\ntcp = 9443"), {"admin.tcp: expected a string, got an integer"});
  ExpectInvalid(Cfg("", "io_timeout_ms = 1979-05-27"), {"reserve.io_timeout_ms: expected an integer, got a date"});
  ExpectInvalid(Cfg("", "", "[head]\nsocket_mode = true"), {"head.socket_mode: expected an octal string"});
  ExpectInvalid("[node]\nname = 7\n[reserve]\nluns = [\"" + std::string(kLun0) + "\"]\n",
                {"node.name: expected a string, got an integer"});
  ExpectInvalid("[node]\nname = \"a\"\n[reserve]\nluns = \"" + std::string(kLun0) + "\"\n",
                {"reserve.luns: expected an array of iSCSI URLs, got a string"});
  ExpectInvalid("[node]\nname = \"a\"\n[reserve]\nluns = [\"" + std::string(kLun0) + "\", 3]\n",
                {"reserve.luns[1]: expected a string, got an integer"});
}

// ---- numbers -------------------------------------------------------------------

TEST_F(ConfigTest, NumbersOutOfRangeNameFieldAndRange) {
  {
    auto c = Parse(Cfg("", "", "[head]\nworkers = 0"));
    ASSERT_FALSE(c.ok());
    EXPECT_EQ(c.status().message(), std::string(kOrigin) + ": head.workers: 0 is out of range 1..256");
  }
  struct Case {
    std::string reserve_extra, rest, want;
  };
  using limits::kConnectTimeoutMsMax;
  using limits::kConnectTimeoutMsMin;
  using limits::kIoTimeoutMsMax;
  using limits::kIoTimeoutMsMin;
  using limits::kQueueDepthMax;
  const Case cases[] = {
      {"", "[head]\nworkers = 257", "head.workers: 257 is out of range " + R(1, kHeadWorkersMax)},
      {"", "[head]\nworkers = -1", "head.workers: -1 is out of range " + R(1, kHeadWorkersMax)},
      {"", "[head]\nmax_connections = 0", "head.max_connections: 0 is out of range " + R(1, kHeadConnectionsMax)},
      {"", "[head]\nmax_connections = 4097", "head.max_connections: 4097 is out of range " + R(1, kHeadConnectionsMax)},
      {"", "[head]\nmax_inflight = 0", "head.max_inflight: 0 is out of range " + R(1, kHeadInflightMax)},
      {"", "[head]\nmax_inflight = 1025", "head.max_inflight: 1025 is out of range " + R(1, kHeadInflightMax)},
      {"", "[shutdown]\ndrain_ms = 600001", "shutdown.drain_ms: 600001 is out of range " + R(0, kShutdownDrainMsMax)},
      {"", "[shutdown]\ndrain_ms = -5", "shutdown.drain_ms: -5 is out of range " + R(0, kShutdownDrainMsMax)},
      {"", "[head]\nworkers = 9223372036854775807",
       "head.workers: 9223372036854775807 is out of range " + R(1, kHeadWorkersMax)},
      {"io_timeout_ms = " + std::to_string(kIoTimeoutMsMin - 1), "",
       "reserve.io_timeout_ms: " + std::to_string(kIoTimeoutMsMin - 1) + " is out of range " +
           R(kIoTimeoutMsMin, kIoTimeoutMsMax)},
      {"io_timeout_ms = " + std::to_string(kIoTimeoutMsMax + 1), "",
       "reserve.io_timeout_ms: " + std::to_string(kIoTimeoutMsMax + 1) + " is out of range " +
           R(kIoTimeoutMsMin, kIoTimeoutMsMax)},
      {"queue_depth = 0", "", "reserve.queue_depth: 0 is out of range " + R(1, kQueueDepthMax)},
      {"queue_depth = " + std::to_string(kQueueDepthMax + 1), "",
       "reserve.queue_depth: " + std::to_string(kQueueDepthMax + 1) + " is out of range " + R(1, kQueueDepthMax)},
      {"bulk_target_ms = -1", "", "reserve.bulk_target_ms: -1 is out of range " + R(0, limits::kBulkTargetMsMax)},
      {"bulk_target_ms = " + std::to_string(limits::kBulkTargetMsMax + 1), "",
       "reserve.bulk_target_ms: " + std::to_string(limits::kBulkTargetMsMax + 1) + " is out of range " +
           R(0, limits::kBulkTargetMsMax)},
      {"connect_timeout_ms = " + std::to_string(kConnectTimeoutMsMin - 1), "",
       "reserve.connect_timeout_ms: " + std::to_string(kConnectTimeoutMsMin - 1) + " is out of range " +
           R(kConnectTimeoutMsMin, kConnectTimeoutMsMax)},
      {"connect_timeout_ms = " + std::to_string(kConnectTimeoutMsMax + 1), "",
       "reserve.connect_timeout_ms: " + std::to_string(kConnectTimeoutMsMax + 1) + " is out of range " +
           R(kConnectTimeoutMsMin, kConnectTimeoutMsMax)},
  };
  for (const Case& c : cases) ExpectInvalid(Cfg("", c.reserve_extra, c.rest), {c.want});

  // The bounds themselves are accepted.
  ExpectOk(Cfg("", "",
               "[head]\nworkers = 1\nmax_connections = " + std::to_string(kHeadConnectionsMax) +
                   "\nmax_inflight = 1\n[shutdown]\ndrain_ms = " + std::to_string(kShutdownDrainMsMax)));
  ExpectOk(Cfg("", "io_timeout_ms = " + std::to_string(kIoTimeoutMsMin) +
                       "\nqueue_depth = " + std::to_string(kQueueDepthMax) +
                       "\nconnect_timeout_ms = " + std::to_string(kConnectTimeoutMsMax)));
}

// ---- [node] --------------------------------------------------------------------

TEST_F(ConfigTest, RequiredFieldsNamed) {
  const std::string luns = "[reserve]\nluns = [\"" + std::string(kLun0) + "\"]\n";
  ExpectInvalid(luns, {"node.name: required"});
  ExpectInvalid("[node]\nrun_dir = \"/run/x\"\n" + luns, {"node.name: required"});
  ExpectInvalid("[node]\nname = \"gw-a\"\n", {"reserve.luns: required"});
  // Both at once, in one message.
  ExpectInvalid("", {"node.name: required", "reserve.luns: required"});
  ExpectInvalid("[node]\nname = \"gw-a\"\n[reserve]\nluns = []\n", {"reserve.luns: 0 URLs is out of range 1..96"});
  std::string many = "[node]\nname = \"gw-a\"\n[reserve]\nluns = [";
  for (int i = 0; i < 97; ++i) many += "\"iscsi://198.18.0.10/iqn.x:t/" + std::to_string(i) + "\",";
  ExpectInvalid(many + "]\n", {"reserve.luns: 97 URLs is out of range 1..96"});
}

TEST_F(ConfigTest, NodeNameRules) {
  auto with_name = [](const std::string& name) {
    return "[node]\nname = \"" + name + "\"\n[reserve]\nluns = [\"" + std::string(kLun0) + "\"]\n";
  };
  ExpectOk(with_name(std::string(63, 'a')));
  ExpectOk(with_name("Gw_1.lab-A"));
  ExpectInvalid(with_name(std::string(64, 'a')), {"node.name: 64 characters is out of range 1..63"});
  ExpectInvalid(with_name(""), {"node.name: 0 characters is out of range 1..63"});
  ExpectInvalid(with_name("gw a"), {"node.name: 'gw a' may only contain the characters [A-Za-z0-9._-]"});
  ExpectInvalid(with_name("gw/a"), {"node.name: 'gw/a' may only contain"});
  ExpectInvalid(with_name("gw\\u00e9"), {"node.name:", "may only contain"});
  ExpectInvalid(with_name(".."), {"node.name: '..' is not a usable name"});
}

TEST_F(ConfigTest, LogLevel) {
  for (const char* l : {"debug", "info", "warn", "error"}) ExpectOk(Cfg("log_level = \"" + std::string(l) + "\""));
  ExpectInvalid(Cfg("log_level = \"verbose\""), {"node.log_level: 'verbose' is not one of debug, info, warn, error"});
  ExpectInvalid(Cfg("log_level = \"INFO\""), {"node.log_level: 'INFO'"});
}

TEST_F(ConfigTest, PathsMustBeAbsolute) {
  ExpectInvalid(Cfg("run_dir = \"run/nasgw\""), {"node.run_dir: must be an absolute path, got 'run/nasgw'"});
  ExpectInvalid(Cfg("run_dir = \"\""), {"node.run_dir: must be an absolute path, got ''"});
  ExpectInvalid(Cfg("state_dir = \"var/lib\""), {"node.state_dir: must be an absolute path"});
  ExpectInvalid(Cfg("", "", "[head]\nsocket = \"head.sock\""), {"head.socket: must be an absolute path"});
  ExpectInvalid(Cfg("", "", "[admin]\nsocket = \"./admin.sock\""), {"admin.socket: must be an absolute path"});
  ExpectInvalid(Cfg("", "chap_user = \"u\"\nchap_secret_file = \"chap.secret\""),
                {"reserve.chap_secret_file: must be an absolute path"});
  ExpectInvalid(Cfg("", "", "[admin]\ntcp = \"198.18.0.1:9443\"\ntls_cert = \"a.crt\"\ntls_key = \"/k\""),
                {"admin.tls_cert: must be an absolute path"});
}

TEST_F(ConfigTest, SocketsDefaultUnderRunDir) {
  auto c = Parse(Cfg("run_dir = \"/run/gw-b//\""));
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->run_dir, "/run/gw-b");
  EXPECT_EQ(c->head_socket, "/run/gw-b/head.sock");
  EXPECT_EQ(c->admin_socket, "/run/gw-b/admin.sock");

  // Explicit sockets are kept; an empty one means the default.
  auto d = Parse(Cfg("run_dir = \"/run/gw-b\"", "", "[head]\nsocket = \"/srv/h.sock\"\n[admin]\nsocket = \"\""));
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  EXPECT_EQ(d->head_socket, "/srv/h.sock");
  EXPECT_EQ(d->admin_socket, "/run/gw-b/admin.sock");
}

TEST_F(ConfigTest, SocketPathLengthAndClash) {
  const std::string long_dir = "/run/" + std::string(100, 'd');
  ExpectInvalid(Cfg("run_dir = \"" + long_dir + "\""),
                {"head.socket: '" + long_dir + "/head.sock' is 115 bytes long, out of range 1..107",
                 "(derived from node.run_dir)", "admin.socket: '" + long_dir + "/admin.sock' is 116 bytes long"});
  ExpectInvalid(Cfg("", "", "[head]\nsocket = \"/" + std::string(107, 's') + "\""),
                {"head.socket: '/", "is 108 bytes long, out of range 1..107"});
  ExpectOk(Cfg("", "", "[head]\nsocket = \"/" + std::string(106, 's') + "\""));
  ExpectInvalid(Cfg("", "", "[head]\nsocket = \"/run/x.sock\"\n[admin]\nsocket = \"/run/x.sock\""),
                {"admin.socket: '/run/x.sock' is also head.socket"});
  ExpectInvalid(Cfg("", "", "[head]\nsocket = \"/run/nasgw/admin.sock\""),
                {"admin.socket: '/run/nasgw/admin.sock' is also head.socket"});
}

// ---- [reserve] -----------------------------------------------------------------

TEST_F(ConfigTest, LunUrlErrorsNameTheIndex) {
  auto with_luns = [](const std::string& luns) {
    return "[node]\nname = \"gw-a\"\n[reserve]\nluns = [" + luns + "]\n";
  };
  ExpectInvalid(with_luns("\"" + std::string(kLun0) + "\", \"iscsi://198.18.0.11/iqn.x:t\""),
                {"reserve.luns[1]: bad iSCSI URL", "missing /lun"});
  ExpectInvalid(with_luns("\"http://198.18.0.10/iqn.x:t/0\""), {"reserve.luns[0]: bad iSCSI URL", "iscsi://"});
  ExpectInvalid(with_luns("\"" + std::string(kLun0) + "\", \"" + kLun1 + "\", \"iscsi://h:0/t/1\""),
                {"reserve.luns[2]: bad iSCSI URL", "port"});
  // Every bad entry is reported, not only the first.
  ExpectInvalid(with_luns("\"x\", \"" + std::string(kLun0) + "\", \"y\""),
                {"reserve.luns[0]: bad iSCSI URL", "reserve.luns[2]: bad iSCSI URL"});
}

TEST_F(ConfigTest, DuplicateLunsRefused) {
  auto with_luns = [](const std::string& a, const std::string& b) {
    return "[node]\nname = \"gw-a\"\n[reserve]\nluns = [\"" + a + "\", \"" + b + "\"]\n";
  };
  ExpectInvalid(with_luns(kLun0, kLun0), {"reserve.luns[1]: '" + std::string(kLun0) +
                                          "' is the same LUN as "
                                          "reserve.luns[0]"});
  // The same LUN spelled differently: default port, case of host and IQN, IPv6 forms.
  ExpectInvalid(with_luns("iscsi://Array1.lab/iqn.2026-11.X:t/3", "iscsi://array1.lab:3260/iqn.2026-11.x:t/3"),
                {"reserve.luns[1]:", "is the same LUN as reserve.luns[0]"});
  ExpectInvalid(with_luns("iscsi://[2001:db8:0::10]/iqn.x:t/0", "iscsi://[2001:DB8::10]:3260/iqn.x:t/0"),
                {"reserve.luns[1]:", "is the same LUN as reserve.luns[0]"});
  // Different LUN, port or target: distinct.
  ExpectOk(with_luns("iscsi://198.18.0.10/iqn.x:t/0", "iscsi://198.18.0.10/iqn.x:t/1"));
  ExpectOk(with_luns("iscsi://198.18.0.10/iqn.x:t/0", "iscsi://198.18.0.10:3261/iqn.x:t/0"));
  ExpectOk(with_luns("iscsi://198.18.0.10/iqn.x:t/0", "iscsi://198.18.0.10/iqn.x:u/0"));
}

TEST_F(ConfigTest, PasswordInUrlRefusedAndNotEchoed) {
  const std::string text =
      "[node]\nname = \"gw-a\"\n[reserve]\nluns = [\"iscsi://alice%TopSecret123@198.18.0.10/iqn.x:t/0\"]\n";
  ExpectInvalid(text, {"reserve.luns[0]:", "carries CHAP credentials", "reserve.chap_user", "reserve.chap_secret"});
  auto c = Parse(text);
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().message().find("TopSecret123"), std::string::npos) << c.status().ToString();

  // A user without a password is refused by the URL parser, also naming the index.
  ExpectInvalid("[node]\nname = \"gw-a\"\n[reserve]\nluns = [\"iscsi://alice@198.18.0.10/iqn.x:t/0\"]\n",
                {"reserve.luns[0]: bad iSCSI URL"});
}

TEST_F(ConfigTest, ChapUserAndSecretBothOrNeither) {
  ExpectInvalid(Cfg("", "chap_user = \"nasgw\""),
                {"reserve.chap_user: set without reserve.chap_secret or reserve.chap_secret_file"});
  ExpectInvalid(Cfg("", "chap_secret = \"0123456789ab\""), {"reserve.chap_secret: set without reserve.chap_user"});
  const std::string file = WriteFile("s", "0123456789ab");
  ExpectInvalid(Cfg("", "chap_secret_file = \"" + file + "\""),
                {"reserve.chap_secret_file: set without reserve.chap_user"});
  ExpectInvalid(Cfg("", "chap_user = \"nasgw\"\nchap_secret = \"0123456789ab\"\nchap_secret_file = \"" + file + "\""),
                {"reserve.chap_secret_file: set together with reserve.chap_secret"});
  // Empty strings mean "not set".
  auto c = Parse(Cfg("", "chap_user = \"\"\nchap_secret = \"\""));
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_TRUE(c->chap_user.empty());
}

TEST_F(ConfigTest, ChapSecretLength) {
  auto with_secret = [](const std::string& s) { return Cfg("", "chap_user = \"nasgw\"\nchap_secret = \"" + s + "\""); };
  ExpectOk(with_secret(std::string(12, 'x')));
  ExpectOk(with_secret(std::string(16, 'x')));
  ExpectInvalid(with_secret(std::string(11, 'x')), {"reserve.chap_secret: 11 bytes is out of range 12..16"});
  ExpectInvalid(with_secret(std::string(17, 'x')), {"reserve.chap_secret: 17 bytes is out of range 12..16"});
  auto c = Parse(with_secret("short"));
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().message().find("short"), std::string::npos) << "the secret is echoed: " << c.status().ToString();
}

TEST_F(ConfigTest, ChapSecretFile) {
  // Trailing newline (and CRLF) trimmed.
  for (const char* content : {"0123456789abcd\n", "0123456789abcd\r\n", "0123456789abcd"}) {
    const std::string file = WriteFile("chap.secret", content);
    auto c = Parse(Cfg("", "chap_user = \"nasgw\"\nchap_secret_file = \"" + file + "\""));
    ASSERT_TRUE(c.ok()) << c.status().ToString();
    EXPECT_EQ(c->chap_secret, "0123456789abcd");
  }
  // Readable (or writable) by group or others: refused naming the file and its mode.
  for (mode_t mode : {0640, 0604, 0620, 0644}) {
    const std::string file = WriteFile("open.secret", "0123456789abcd\n", mode);
    char octal[8];
    std::snprintf(octal, sizeof(octal), "0%o", mode);
    ExpectInvalid(Cfg("", "chap_user = \"nasgw\"\nchap_secret_file = \"" + file + "\""),
                  {"reserve.chap_secret_file: '" + file + "' is accessible to group or others (mode " + octal + ")"});
  }
  ExpectOk(
      Cfg("", "chap_user = \"nasgw\"\nchap_secret_file = \"" + WriteFile("ro.secret", "0123456789abcd", 0400) + "\""));
  // Missing, a directory, wrong length: each names the field and the file.
  const std::string absent = dir_ + "/absent.secret";
  ExpectInvalid(Cfg("", "chap_user = \"nasgw\"\nchap_secret_file = \"" + absent + "\""),
                {"reserve.chap_secret_file: cannot open '" + absent + "'", "No such file"});
  ExpectInvalid(Cfg("", "chap_user = \"nasgw\"\nchap_secret_file = \"" + dir_ + "\""),
                {"reserve.chap_secret_file: '" + dir_ + "' is not a regular file"});
  const std::string short_file = WriteFile("short.secret", "tooshort\n");
  ExpectInvalid(Cfg("", "chap_user = \"nasgw\"\nchap_secret_file = \"" + short_file + "\""),
                {"reserve.chap_secret_file: the secret in '" + short_file + "' is 8 bytes, out of range 12..16"});
  const std::string big_file = WriteFile("big.secret", std::string(5000, 'x'));
  ExpectInvalid(Cfg("", "chap_user = \"nasgw\"\nchap_secret_file = \"" + big_file + "\""),
                {"reserve.chap_secret_file: '" + big_file + "' is larger than"});
}

TEST_F(ConfigTest, ChapCharactersMustSurviveTheUrl) {
  ExpectInvalid(Cfg("", "chap_user = \"na%sgw\"\nchap_secret = \"0123456789ab\""),
                {"reserve.chap_user: 'na%sgw' contains '%', '@' or '/'"});
  ExpectInvalid(Cfg("", "chap_user = \"nasgw\"\nchap_secret = \"0123456789/b\""),
                {"reserve.chap_secret: contains '/'"});
  ExpectInvalid(Cfg("", "chap_user = \"nasgw\"\nchap_secret = \"0123456789\\tbc\""),
                {"reserve.chap_secret: contains a control character"});
  // '@' and '%' in the secret are fine: the URL parser takes the last '@' and the first '%'.
  auto c = Parse(Cfg("", "chap_user = \"nasgw\"\nchap_secret = \"p@ss%word@123\""));
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  for (const std::string& url : c->LunUrlsWithChap()) {
    auto u = block::ParseIscsiUrl(url);
    ASSERT_TRUE(u.ok()) << u.status().ToString();
    EXPECT_EQ(u->user, "nasgw");
    EXPECT_EQ(u->password, "p@ss%word@123");
    EXPECT_EQ(u->host, "198.18.0.10");
  }
}

TEST_F(ConfigTest, LunUrlsWithChap) {
  Config c;
  c.luns = {kLun0, kLun1};
  EXPECT_EQ(c.LunUrlsWithChap(), c.luns);
  c.chap_user = "nasgw";
  c.chap_secret = "0123456789abcd";
  EXPECT_EQ(
      c.LunUrlsWithChap(),
      (std::vector<std::string>{"iscsi://nasgw%0123456789abcd@198.18.0.10/iqn.2026-11.org.nasgw.lab:array1/0",
                                "iscsi://nasgw%0123456789abcd@198.18.0.11:3261/iqn.2026-11.org.nasgw.lab:array2/1"}));
  // The config itself keeps the URLs without the secret.
  EXPECT_EQ(c.luns[0], kLun0);
}

TEST_F(ConfigTest, Initiator) {
  ExpectOk(Cfg("", "initiator = \"iqn.1994-05.com.example:gw-a\""));
  ExpectOk(Cfg("", "initiator = \"eui.02004567A425678D\""));
  ExpectOk(Cfg("", "initiator = \"naa.52004567BA64678D\""));
  auto c = Parse(Cfg("", "initiator = \"\""));
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->initiator, "iqn.2026-11.org.nasgw:gw-a");
  auto upper = ParseConfig("[node]\nname = \"GW_A\"\n[reserve]\nluns = [\"iscsi://198.18.0.10/iqn.x:t/1\"]\n");
  ASSERT_TRUE(upper.ok()) << upper.status().ToString();
  EXPECT_EQ(upper->initiator, "iqn.2026-11.org.nasgw:gw-a");  // a valid iSCSI name from any node name
  ExpectInvalid(Cfg("", "initiator = \"gw-a\""), {"reserve.initiator: 'gw-a' must start with iqn., eui. or naa."});
  ExpectInvalid(Cfg("", "initiator = \"IQN.1994-05.com.example:x\""), {"reserve.initiator:", "must start with iqn."});
  ExpectInvalid(Cfg("", "initiator = \"iqn." + std::string(220, 'x') + "\""),
                {"reserve.initiator: 224 bytes is out of range 5..223"});
  ExpectInvalid(Cfg("", "initiator = \"iqn.2026-11.x:a b\""), {"reserve.initiator:", "contains a space"});
}

// ---- [head] --------------------------------------------------------------------

TEST_F(ConfigTest, SocketMode) {
  auto mode_of = [](const std::string& v) -> uint32_t {
    auto c = Parse(Cfg("", "", "[head]\nsocket_mode = " + v));
    EXPECT_TRUE(c.ok()) << v << ": " << c.status().ToString();
    return c.ok() ? c->head_socket_mode : 0;
  };
  EXPECT_EQ(mode_of("\"0660\""), 0660u);
  EXPECT_EQ(mode_of("\"660\""), 0660u);
  EXPECT_EQ(mode_of("\"0o600\""), 0600u);
  EXPECT_EQ(mode_of("0o640"), 0640u);
  EXPECT_EQ(mode_of("0o777"), 0777u);
  EXPECT_EQ(mode_of("432"), 0660u);  // decimal 432 is 0660

  // 660 written as a decimal integer: say so.
  ExpectInvalid(Cfg("", "", "[head]\nsocket_mode = 660"),
                {"head.socket_mode: 01224 is out of range 0600..0777", "decimal", "\"0660\""});
  ExpectInvalid(Cfg("", "", "[head]\nsocket_mode = \"0500\""), {"head.socket_mode: 0500 is out of range 0600..0777"});
  ExpectInvalid(Cfg("", "", "[head]\nsocket_mode = \"0066\""), {"head.socket_mode: 066 is out of range 0600..0777"});
  ExpectInvalid(Cfg("", "", "[head]\nsocket_mode = \"1660\""), {"head.socket_mode: 01660 is out of range 0600..0777"});
  ExpectInvalid(Cfg("", "", "[head]\nsocket_mode = 0o4770"), {"head.socket_mode: 04770 is out of range 0600..0777"});
  ExpectInvalid(Cfg("", "", "[head]\nsocket_mode = -1"), {"head.socket_mode: -1 is out of range 0600..0777"});
  ExpectInvalid(Cfg("", "", "[head]\nsocket_mode = \"0689\""),
                {"head.socket_mode: '0689' is not an octal mode like \"0660\""});
  ExpectInvalid(Cfg("", "", "[head]\nsocket_mode = \"rw-rw----\""), {"head.socket_mode: 'rw-rw----' is not an octal"});
  ExpectInvalid(Cfg("", "", "[head]\nsocket_mode = \"\""), {"head.socket_mode: '' is not an octal"});
}

TEST_F(ConfigTest, SocketGroup) {
  ExpectInvalid(Cfg("", "", "[head]\nsocket_group = \"nasgw-no-such-group-42\""),
                {"head.socket_group: no such group 'nasgw-no-such-group-42'"});
  auto c = Parse(Cfg("", "", "[head]\nsocket_group = \"\""));
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_TRUE(c->head_socket_group.empty());
}

// ---- [admin] and [metrics] ---------------------------------------------------------

TEST_F(ConfigTest, AdminTcpRequiresTls) {
  ExpectInvalid(Cfg("", "", "[admin]\ntcp = \"198.18.0.1:9443\""),
                {"admin.tls_cert: required with admin.tcp", "admin.tls_key: required with admin.tcp"});
  const std::string cert = WriteFile("a.crt", "pem", 0644);
  ExpectInvalid(Cfg("", "", "[admin]\ntcp = \"198.18.0.1:9443\"\ntls_cert = \"" + cert + "\""),
                {"admin.tls_key: required with admin.tcp"});
  const std::string absent = dir_ + "/absent.key";
  ExpectInvalid(
      Cfg("", "", "[admin]\ntcp = \"198.18.0.1:9443\"\ntls_cert = \"" + cert + "\"\ntls_key = \"" + absent + "\""),
      {"admin.tls_key: cannot open '" + absent + "'"});
  ExpectInvalid(
      Cfg("", "", "[admin]\ntcp = \"198.18.0.1:9443\"\ntls_cert = \"" + cert + "\"\ntls_key = \"" + dir_ + "\""),
      {"admin.tls_key: '" + dir_ + "' is not a regular file"});
  const std::string empty = WriteFile("empty.pem", "");
  ExpectInvalid(
      Cfg("", "", "[admin]\ntcp = \"198.18.0.1:9443\"\ntls_cert = \"" + empty + "\"\ntls_key = \"" + cert + "\""),
      {"admin.tls_cert: '" + empty + "' is empty"});
  ExpectInvalid(Cfg("", "",
                    "[admin]\ntcp = \"198.18.0.1:9443\"\ntls_cert = \"" + cert + "\"\ntls_key = \"" + cert +
                        "\"\ntls_client_ca = \"" + absent + "\""),
                {"admin.tls_client_ca: cannot open '" + absent + "'"});
  if (::geteuid() != 0) {
    const std::string locked = WriteFile("locked.key", "pem", 0000);
    ExpectInvalid(
        Cfg("", "", "[admin]\ntcp = \"198.18.0.1:9443\"\ntls_cert = \"" + cert + "\"\ntls_key = \"" + locked + "\""),
        {"admin.tls_key: cannot open '" + locked + "'", "Permission denied"});
  }
}

// The private key is its owner's alone, as the CHAP secret file.
TEST_F(ConfigTest, TlsKeyMustBePrivate) {
  const std::string cert = WriteFile("a.crt", "pem", 0644);
  auto admin = [&](const std::string& key) {
    return Cfg("", "",
               "[admin]\ntcp = \"198.18.0.1:9443\"\ntls_cert = \"" + cert + "\"\ntls_key = \"" + key +
                   "\"\ntls_client_ca = \"" + cert + "\"");
  };
  for (mode_t open_mode : {0644, 0640, 0604, 0660}) {
    const std::string key = WriteFile("open.key", "pem", open_mode);
    char mode[8];
    std::snprintf(mode, sizeof(mode), "0%o", static_cast<unsigned>(open_mode));
    ExpectInvalid(admin(key), {"admin.tls_key: '" + key + "' is accessible to group or others (mode " + mode +
                               "); a private key file must be mode 0600 or 0400"});
  }
  ExpectOk(admin(WriteFile("a.key", "pem", 0600)));
  ExpectOk(admin(WriteFile("ro.key", "pem", 0400)));
}

// admin.tcp serves only clients with a certificate the client CA signed,
// unless the config says otherwise in so many words.
TEST_F(ConfigTest, AdminTcpNeedsClientCertificatesOrAnExplicitChoice) {
  const std::string cert = WriteFile("a.crt", "pem", 0644);
  const std::string key = WriteFile("a.key", "pem");
  const std::string tls =
      "[admin]\ntcp = \"198.18.0.1:9443\"\ntls_cert = \"" + cert + "\"\ntls_key = \"" + key + "\"\n";
  ExpectInvalid(Cfg("", "", tls), {"admin.tls_client_ca: required with admin.tcp", "anyone who reaches the port",
                                   "admin.insecure_no_client_auth = true"});
  auto c = Parse(Cfg("", "", tls + "insecure_no_client_auth = true"));
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_TRUE(c->admin_insecure_no_client_auth);
  ExpectInvalid(Cfg("", "", tls + "insecure_no_client_auth = false"), {"admin.tls_client_ca: required with admin.tcp"});
  ExpectInvalid(Cfg("", "", tls + "insecure_no_client_auth = \"yes\""),
                {"admin.insecure_no_client_auth: expected true or false, got a string"});
  ExpectInvalid(Cfg("", "", tls + "insecure_no_client_auth = true\ntls_client_ca = \"" + cert + "\""),
                {"admin.insecure_no_client_auth: true together with admin.tls_client_ca"});
  ExpectInvalid(Cfg("", "", "[admin]\ninsecure_no_client_auth = true"),
                {"admin.insecure_no_client_auth: set but admin.tcp is not"});
}

TEST_F(ConfigTest, HeadConnectionLimits) {
  auto c = Parse(Cfg("", "", "[head]\nmax_connections_per_uid = 1\nidle_timeout_ms = 1000"));
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->head_max_connections_per_uid, 1u);
  EXPECT_EQ(c->head_idle_timeout_ms, 1000u);
  c = Parse(Cfg("", "", "[head]\nmax_connections_per_uid = 4096\nidle_timeout_ms = 86400000"));
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  ExpectInvalid(Cfg("", "", "[head]\nmax_connections_per_uid = 0"),
                {"head.max_connections_per_uid: 0 is out of range 1..4096"});
  ExpectInvalid(Cfg("", "", "[head]\nmax_connections_per_uid = 4097"),
                {"head.max_connections_per_uid: 4097 is out of range 1..4096"});
  ExpectInvalid(Cfg("", "", "[head]\nidle_timeout_ms = 999"),
                {"head.idle_timeout_ms: 999 is out of range 1000..86400000"});
  ExpectInvalid(Cfg("", "", "[head]\nidle_timeout_ms = 86400001"),
                {"head.idle_timeout_ms: 86400001 is out of range 1000..86400000"});
  ExpectInvalid(Cfg("", "", "[head]\nidle_timeout_ms = \"5m\""),
                {"head.idle_timeout_ms: expected an integer, got a string"});
}

TEST_F(ConfigTest, TlsWithoutTcpRefused) {
  const std::string cert = WriteFile("a.crt", "pem", 0644);
  ExpectInvalid(Cfg("", "", "[admin]\ntls_cert = \"" + cert + "\""), {"admin.tls_cert: set but admin.tcp is not"});
  ExpectInvalid(Cfg("", "", "[admin]\ntls_client_ca = \"" + cert + "\""),
                {"admin.tls_client_ca: set but admin.tcp is not"});
}

TEST_F(ConfigTest, HostPortSyntax) {
  const std::string cert = WriteFile("a.crt", "pem", 0644);
  const std::string key = WriteFile("a.key", "pem");
  auto admin = [&](const std::string& tcp) {
    return Cfg("", "",
               "[admin]\ntcp = \"" + tcp + "\"\ntls_cert = \"" + cert + "\"\ntls_key = \"" + key +
                   "\"\ntls_client_ca = \"" + cert + "\"");
  };
  auto metrics = [](const std::string& listen) { return Cfg("", "", "[metrics]\nlisten = \"" + listen + "\""); };
  for (const char* good : {"198.18.0.1:9443", "0.0.0.0:1", "[2001:db8::1]:65535", "[::]:9443"}) {
    ExpectOk(admin(good));
    ExpectOk(metrics(good));
  }
  // The admin API resolves names; the metrics endpoint binds an address.
  for (const char* name : {"gw-a.lab:9443", "localhost:9100"}) {
    ExpectOk(admin(name));
    ExpectInvalid(metrics(name), {"metrics.listen: ", "is not an IP address"});
  }
  struct Bad {
    std::string value, why;
  };
  const Bad bads[] = {
      {"198.18.0.1", "missing :port"},
      {"198.18.0.1:", "missing port"},
      {"198.18.0.1:0", "port 0 is out of range 1..65535"},
      {"198.18.0.1:65536", "port 65536 is out of range 1..65535"},
      {"198.18.0.1:12345678901", "out of range 1..65535"},
      {"198.18.0.1:http", "port 'http' is not a number"},
      {"198.18.0.300:9443", "'198.18.0.300' is not an IPv4 address"},
      {"2001:db8::1:9443", "an IPv6 address goes in brackets"},
      {"[2001:db8::1]9443", "missing :port after the ']'"},
      {"[2001:db8::1:9443", "unterminated '['"},
      {"[198.18.0.1]:9443", "'198.18.0.1' is not an IPv6 address"},
      {":9443", "missing host"},
      {"bad_host:9443", "'bad_host' is not a host name"},
      {"-gw.lab:9443", "is not a host name"},
  };
  for (const Bad& b : bads) {
    ExpectInvalid(admin(b.value), {"admin.tcp: ", b.why});
    const bool name = b.why.find("host name") != std::string::npos;
    ExpectInvalid(metrics(b.value), {"metrics.listen: ", name ? "is not an IP address" : b.why});
  }
}

// ---- the message as a whole ------------------------------------------------------

TEST_F(ConfigTest, EveryProblemReportedInOneMessage) {
  auto c = Parse("[node]\nname = \"gw a\"\nlog_level = \"loud\"\n[head]\nworkers = 0\nmax_inflight = 0\n");
  ASSERT_FALSE(c.ok());
  const std::string m(c.status().message());
  for (const char* part : {"node.name:", "node.log_level:", "reserve.luns: required", "head.workers: 0 is out of range",
                           "head.max_inflight: 0 is out of range"}) {
    EXPECT_NE(m.find(part), std::string::npos) << part << " not in: " << m;
  }
  // Bounded: past ten problems the rest are counted.
  std::string text = Cfg("", "", "[head]\n");
  for (int i = 0; i < 15; ++i) text += "typo" + std::to_string(i) + " = 1\n";
  auto d = Parse(text);
  ASSERT_FALSE(d.ok());
  EXPECT_NE(d.status().message().find("and 5 more"), std::string::npos) << d.status().ToString();
}

TEST_F(ConfigTest, NfsExportsFileAndGaneshaPidFile) {
  auto c = Parse(Cfg());
  ASSERT_TRUE(c.ok());
  EXPECT_TRUE(c->nfs_exports_file.empty()) << "off by default: nasgwd renders nothing";
  EXPECT_TRUE(c->nfs_ganesha_pid_file.empty());
  c = Parse(Cfg(
      "", "",
      "[nfs]\nexports_file = \"" + dir_ + "/nasgw-exports.conf\"\nganesha_pid_file = \"/run/ganesha/ganesha.pid\""));
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->nfs_exports_file, dir_ + "/nasgw-exports.conf");
  EXPECT_EQ(c->nfs_ganesha_pid_file, "/run/ganesha/ganesha.pid");
  ExpectOk(Cfg("", "", "[nfs]\nexports_file = \"" + dir_ + "/x.conf\""));
  ExpectInvalid(Cfg("", "", "[nfs]\nexports_file = \"exports.conf\""), {"nfs.exports_file: must be an absolute path"});
  ExpectInvalid(Cfg("", "", "[nfs]\nexports_file = \"" + dir_ + "/no/such/dir/x.conf\""),
                {"nfs.exports_file: its directory", "does not exist"});
  ExpectInvalid(Cfg("", "", "[nfs]\nexports_file = \"" + dir_ + "\""), {"nfs.exports_file:", "is a directory"});
  ExpectInvalid(Cfg("", "", "[nfs]\nexports_file = \"" + dir_ + "/my exports.conf\""),
                {"nfs.exports_file:", "[A-Za-z0-9._/-]"});
  c = Parse(Cfg("", "",
                "[nfs]\nganesha_recovery_dir = \"/var/lib/nfs/ganesha\"\nganesha_dbus = \"unix:path=/x/bus\"\n"
                "statd_dir = \"/var/lib/nfs\""));
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->nfs_ganesha_recovery_dir, "/var/lib/nfs/ganesha");
  EXPECT_EQ(c->nfs_statd_dir, "/var/lib/nfs");
  ExpectInvalid(Cfg("", "", "[nfs]\nstatd_dir = \"lib/nfs\""), {"nfs.statd_dir", "absolute"});
  EXPECT_EQ(c->nfs_ganesha_dbus, "unix:path=/x/bus");
  ExpectInvalid(Cfg("", "", "[nfs]\nganesha_recovery_dir = \"recov\""), {"nfs.ganesha_recovery_dir", "absolute"});
  ExpectInvalid(Cfg("", "", "[nfs]\nganesha_dbus = \"no address\""), {"nfs.ganesha_dbus", "not a DBus address"});
  ExpectInvalid(Cfg("", "", "[nfs]\nganesha_pid_file = \"/run/ganesha.pid\""),
                {"nfs.ganesha_pid_file: set but nfs.exports_file is not"});
  ExpectInvalid(Cfg("", "", "[nfs]\nexports_file = \"" + dir_ + "/x.conf\"\nganesha_pid_file = \"ganesha.pid\""),
                {"nfs.ganesha_pid_file: must be an absolute path"});
  ExpectInvalid(Cfg("", "", "[nfs]\nexport_file = \"/x\""), {"nfs.export_file: unknown key", "exports_file"});
}

TEST_F(ConfigTest, ClusterSection) {
  auto c = Parse(Cfg());
  ASSERT_TRUE(c.ok());
  EXPECT_FALSE(c->cluster_enabled) << "a single node by default";
  EXPECT_EQ(c->preempt_settle_ms, 2000u);
  EXPECT_TRUE(c->cluster_tickle_acks);
  c = Parse(Cfg("", "preempt_settle_ms = 500\n",
                "[cluster]\nenabled = true\ngroup = \"pair-1\"\nheartbeat_interval_ms = 200\n"
                "network_dead_ms = 1000\nauto_takeover = false\nvips = [\"198.18.1.50/24\", \"198.18.1.51\"]\n"
                "vip_interface = \"front0\"\ntickle_acks = false\n"));
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_TRUE(c->cluster_enabled);
  EXPECT_EQ(c->cluster_group, "pair-1");
  EXPECT_EQ(c->cluster_heartbeat_interval_ms, 200u);
  EXPECT_EQ(c->cluster_network_dead_ms, 1000u);
  EXPECT_FALSE(c->cluster_auto_takeover);
  EXPECT_FALSE(c->cluster_tickle_acks);
  EXPECT_EQ(c->cluster_vips, (std::vector<std::string>{"198.18.1.50/24", "198.18.1.51"}));
  EXPECT_EQ(c->cluster_vip_interface, "front0");
  EXPECT_EQ(c->preempt_settle_ms, 500u);
  ExpectInvalid(Cfg("", "preempt_settle_ms = 60001\n"), {"reserve.preempt_settle_ms"});
  ExpectInvalid(Cfg("", "", "[cluster]\ngroup = \"a b\""), {"cluster.group", "[A-Za-z0-9._-]"});
  ExpectInvalid(Cfg("", "", "[cluster]\nheartbeat_interval_ms = 10"), {"cluster.heartbeat_interval_ms"});
  ExpectInvalid(Cfg("", "", "[cluster]\nheartbeat_interval_ms = 500\nnetwork_dead_ms = 1000"),
                {"cluster.network_dead_ms", "shorter than 3 heartbeat intervals"});
  ExpectInvalid(Cfg("", "", "[cluster]\nvips = [\"198.18.1.50/24\"]"), {"cluster.vip_interface: required"});
  ExpectInvalid(Cfg("", "", "[cluster]\nvips = [\"127.0.0.1/8\"]\nvip_interface = \"lan0\""),
                {"cluster.vips[0]", "loopback"});
  ExpectInvalid(Cfg("", "", "[cluster]\nvips = [\"198.18.1.50/33\"]\nvip_interface = \"lan0\""),
                {"cluster.vips[0]", "prefix"});
  ExpectInvalid(Cfg("", "", "[cluster]\nvips = [\"198.18.1.50/24\", \"198.18.1.50/24\"]\nvip_interface = \"lan0\""),
                {"cluster.vips[1]", "listed already"});
  // The same address with another prefix (or none) is the same address.
  ExpectInvalid(Cfg("", "", "[cluster]\nvips = [\"198.18.1.50/24\", \"198.18.1.50/25\"]\nvip_interface = \"lan0\""),
                {"cluster.vips[1]", "address of '198.18.1.50/24'"});
  ExpectInvalid(Cfg("", "", "[cluster]\nvips = [\"198.18.1.51\", \"198.18.1.51/32\"]\nvip_interface = \"lan0\""),
                {"cluster.vips[1]", "listed already"});
  ExpectInvalid(Cfg("", "", "[cluster]\nvips = \"198.18.1.50/24\"\nvip_interface = \"lan0\""), {"cluster.vips"});
  ExpectInvalid(Cfg("", "", "[cluster]\nvip_interface = \"a/b\""), {"cluster.vip_interface", "not an interface"});
  ExpectInvalid(Cfg("", "", "[cluster]\nenable = true"), {"cluster.enable: unknown key", "enabled"});
  ExpectInvalid(Cfg("", "", "[cluster]\ntickle_acks = 1"), {"cluster.tickle_acks"});
  c = Parse(Cfg("", "", "[cluster]\nmirror_listen = \"198.18.0.1:7410\"\nmirror_peer = \"198.18.0.2:7410\"\n"));
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->cluster_mirror_listen, "198.18.0.1:7410");
  EXPECT_EQ(c->cluster_mirror_peer, "198.18.0.2:7410");
  ExpectInvalid(Cfg("", "", "[cluster]\nmirror_listen = \"198.18.0.1:7410\""), {"cluster.mirror_peer", "go together"});
  ExpectInvalid(Cfg("", "", "[cluster]\nmirror_peer = \"198.18.0.2\"\nmirror_listen = \"198.18.0.1:1\""),
                {"cluster.mirror_peer", "port"});
  ExpectInvalid(Cfg("", "", "[cluster]\nmirror_peer = \"peer.example:1\"\nmirror_listen = \"198.18.0.1:1\""),
                {"cluster.mirror_peer"});
  c = Parse(Cfg("", "", "[cluster]\nforward_listen = \"198.18.0.1:7411\"\nforward_peer = \"198.18.0.2:7411\"\n"));
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->cluster_forward_listen, "198.18.0.1:7411");
  EXPECT_EQ(c->cluster_forward_peer, "198.18.0.2:7411");
  // Active/active: the domains this node serves while the partner is up.
  c = Parse(Cfg("", "", "[cluster]\nenabled = true\nhome_domains = [1, 0]\nauto_failback = false\n"));
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->cluster_home_domains, (std::vector<uint32_t>{1, 0}));
  EXPECT_FALSE(c->cluster_auto_failback);
  EXPECT_TRUE(Parse(Cfg("", "", "[cluster]\nenabled = true\n"))->cluster_auto_failback);
  ExpectInvalid(Cfg("", "", "[cluster]\nenabled = true\nhome_domains = []"), {"cluster.home_domains", "1..28"});
  ExpectInvalid(Cfg("", "", "[cluster]\nenabled = true\nhome_domains = 1"), {"cluster.home_domains"});
  ExpectInvalid(Cfg("", "", "[cluster]\nenabled = true\nhome_domains = [28]"), {"cluster.home_domains[0]", "0..27"});
  ExpectInvalid(Cfg("", "", "[cluster]\nenabled = true\nhome_domains = [\"a\"]"), {"cluster.home_domains[0]"});
  ExpectInvalid(Cfg("", "", "[cluster]\nenabled = true\nhome_domains = [1, 1]"),
                {"cluster.home_domains[1]", "listed already"});
  ExpectInvalid(Cfg("", "", "[cluster]\nhome_domains = [0]"), {"cluster.home_domains", "cluster.enabled"});
  ExpectInvalid(Cfg("", "",
                    "[cluster]\nenabled = true\nhome_domains = [0]\nforward_listen = \"198.18.0.1:7411\"\n"
                    "forward_peer = \"198.18.0.2:7411\""),
                {"cluster.home_domains", "head forwarding"});
  c = Parse(Cfg("", "", "[cluster]\nvip_idle_ms = 500\nvip_move_max_ms = 0\n"));
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->cluster_vip_idle_ms, 500u);
  EXPECT_EQ(c->cluster_vip_move_max_ms, 0u);
  ExpectInvalid(Cfg("", "", "[cluster]\nvip_idle_ms = 600001"), {"cluster.vip_idle_ms"});
  ExpectInvalid(Cfg("", "", "[cluster]\nforward_peer = \"198.18.0.2:7411\""),
                {"cluster.forward_listen", "go together", "head forwarding"});
  ExpectInvalid(Cfg("", "", "[cluster]\nforward_listen = \"x:1\"\nforward_peer = \"198.18.0.2:7411\""),
                {"cluster.forward_listen"});
}

TEST_F(ConfigTest, SmbSharesFileAndSmbdPidFile) {
  auto c = Parse(Cfg());
  ASSERT_TRUE(c.ok());
  EXPECT_TRUE(c->smb_shares_file.empty()) << "off by default: nasgwd renders nothing";
  c = Parse(Cfg("", "", "[smb]\nshares_file = \"" + dir_ + "/shares.conf\"\nsmbd_pid_file = \"/run/samba/smbd.pid\""));
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->smb_shares_file, dir_ + "/shares.conf");
  EXPECT_EQ(c->smb_smbd_pid_file, "/run/samba/smbd.pid");
  // The same checks as the NFS exports file: one function makes them.
  ExpectInvalid(Cfg("", "", "[smb]\nshares_file = \"" + dir_ + "/no/such/dir/x.conf\""),
                {"smb.shares_file: its directory", "does not exist"});
  ExpectInvalid(Cfg("", "", "[smb]\nshares_file = \"" + dir_ + "/my shares.conf\""),
                {"smb.shares_file:", "[A-Za-z0-9._/-]"});
  ExpectInvalid(Cfg("", "", "[smb]\nsmbd_pid_file = \"/run/smbd.pid\""),
                {"smb.smbd_pid_file: set but smb.shares_file is not"});
  ExpectInvalid(Cfg("", "", "[smb]\nshare_file = \"/x\""), {"smb.share_file: unknown key", "shares_file"});
  EXPECT_EQ(c->smb_vfs_objects, "acl_xattr streams_xattr") << "streams and NT ACLs by default";
  c = Parse(Cfg("", "", "[smb]\nvfs_objects = \"  streams_xattr   fruit \""));
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->smb_vfs_objects, "streams_xattr fruit");
  ExpectInvalid(Cfg("", "", "[smb]\nvfs_objects = \"acl_xattr nasgw\""), {"smb.vfs_objects:", "always last"});
  ExpectInvalid(Cfg("", "", "[smb]\nvfs_objects = \"a/b\""), {"smb.vfs_objects:", "not a VFS module name"});
}

TEST_F(ConfigTest, ControlCharactersRefused) {
  ExpectInvalid(Cfg("run_dir = \"/run/a\\nb\""), {"node.run_dir: contains a control character"});
  ExpectInvalid(Cfg("state_dir = \"/var/\\u0000x\""), {"node.state_dir: contains a control character"});
  ExpectInvalid("[node]\nname = \"gw-a\"\n[reserve]\nluns = [\"iscsi://198.18.0.10/iqn.x:t\\r/0\"]\n",
                {"reserve.luns[0]: contains a control character"});
}

// Whatever the input, ParseConfig returns (never throws, never crashes).
TEST_F(ConfigTest, ArbitraryInputNeverThrows) {
  // These break toml++ 3.3's parser assertions (marzer/tomlplusplus#301).
  for (const char* text : {"[\rx]\n", "[[[1]]]", "[[[a]]]", "[[[]]", "[[=", "[a.\r]\n", "a = {\rb = 1}\n"}) {
    auto c = ParseConfig(text, kOrigin);
    ASSERT_FALSE(c.ok()) << text;
    EXPECT_EQ(c.status().message().rfind(std::string(kOrigin) + ":1:", 0), 0u) << c.status().ToString();
  }

  const std::string base = Cfg("log_level = \"warn\"", "queue_depth = 8",
                               "[head]\nworkers = 4\nsocket_mode = \"0660\"\n[admin]\ntcp = \"198.18.0.1:9443\"\n"
                               "[metrics]\nlisten = \"[::1]:9100\"\n[shutdown]\ndrain_ms = 5");
  std::mt19937 rng(42);
  const char alphabet[] = "[]=\"'.,:#\n 0o9xaz\\{}-_%@/";
  for (int i = 0; i < 2000; ++i) {
    std::string text = base;
    const int edits = 1 + static_cast<int>(rng() % 4);
    for (int e = 0; e < edits; ++e) {
      const size_t pos = rng() % (text.size() + 1);
      switch (rng() % 3) {
        case 0:
          text.insert(pos, 1, alphabet[rng() % (sizeof(alphabet) - 1)]);
          break;
        case 1:
          if (pos < text.size()) text.erase(pos, 1);
          break;
        default:
          if (pos < text.size()) text[pos] = static_cast<char>(rng() % 256);
          break;
      }
    }
    auto c = ParseConfig(text, kOrigin);
    if (!c.ok()) {
      EXPECT_EQ(c.status().code(), Code::kInvalidArgument) << c.status().ToString();
    }
  }
}

}  // namespace
}  // namespace nasgw::daemon
