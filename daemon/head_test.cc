// The head protocol end to end in one process: the C client library over a
// real Unix socket to the HeadServer, on a file system on in-memory LUNs.
#include <grp.h>
#include <poll.h>
#include <stdlib.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <condition_variable>
#include <cstring>
#include <filesystem>
#include <functional>
#include <future>
#include <map>
#include <mutex>
#include <random>
#include <set>
#include <thread>
#include <tuple>

#include <gtest/gtest.h>

#include "base/clock.h"
#include "base/limits.h"
#include "base/log.h"
#include "block/mem_device.h"
#include "daemon/head_server.h"
#include "fs/handle.h"
#include "fsal/client/nasgw_client.h"
#include "proto/lock_range.h"
#include "proto/stream.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>

namespace nasgw::daemon {
namespace {

constexpr uint64_t kMiB = 1 << 20;

// ---- a client as nobody, in a process of its own
// A child forked from this multi-threaded test that went on to use the
// client library could find a lock (malloc's, a logger's) held forever by a
// thread that does not exist in it, and hang (seen once in CI). So the child
// only drops to nobody and execs this binary again; in the new image,
// NobodyChild runs the role's part before any test and exits with its code.
// Roles: functions of the socket path and a descriptor for a message.
using NobodyRole = int (*)(const char* socket, int message_fd);
std::map<std::string, NobodyRole>& NobodyRoles() {
  static std::map<std::string, NobodyRole> roles;
  return roles;
}
constexpr const char* kNobodyRoleEnv = "NASGW_HEAD_TEST_NOBODY_ROLE";
constexpr const char* kNobodySocketEnv = "NASGW_HEAD_TEST_NOBODY_SOCKET";
constexpr int kNobodyMessageFd = 3;

class NobodyChild : public ::testing::Environment {
 public:
  void SetUp() override {
    const char* role = std::getenv(kNobodyRoleEnv);
    if (role == nullptr) return;
    auto it = NobodyRoles().find(role);
    std::_Exit(it == NobodyRoles().end() ? 9 : it->second(std::getenv(kNobodySocketEnv), kNobodyMessageFd));
  }
};
[[maybe_unused]] ::testing::Environment* const kNobodyChild = ::testing::AddGlobalTestEnvironment(new NobodyChild);

struct NobodyResult {
  int exit_code = -1;   // the role's, or -1 if it did not exit
  std::string message;  // what it wrote to its message descriptor
};

// Runs `role` as nobody (uid and gid 65534, no groups) against `socket`.
NobodyResult RunAsNobody(const std::string& role, const std::string& socket) {
  NobodyResult r;
  int pipefd[2];
  if (pipe(pipefd) != 0) return r;
  // Everything the child needs, made before the fork (it only makes calls
  // that are safe after one).
  const std::string exe = std::filesystem::read_symlink("/proc/self/exe").string();
  const std::string filter =
      "--gtest_filter=" + std::string(::testing::UnitTest::GetInstance()->current_test_suite()->name()) + "." +
      ::testing::UnitTest::GetInstance()->current_test_info()->name();
  std::vector<std::string> env_s = {std::string(kNobodyRoleEnv) + "=" + role,
                                    std::string(kNobodySocketEnv) + "=" + socket};
  for (const char* keep : {"PATH", "ASAN_OPTIONS", "UBSAN_OPTIONS", "LSAN_OPTIONS", "TSAN_OPTIONS"}) {
    if (const char* v = std::getenv(keep)) env_s.push_back(std::string(keep) + "=" + v);
  }
  std::vector<char*> envp;
  envp.reserve(env_s.size() + 1);
  for (auto& e : env_s) envp.push_back(e.data());
  envp.push_back(nullptr);
  std::string arg0 = exe;
  std::string arg1 = filter;
  char* argv[] = {arg0.data(), arg1.data(), nullptr};
  const pid_t pid = fork();
  if (pid == 0) {
    ::close(pipefd[0]);
    if (pipefd[1] != kNobodyMessageFd && (dup2(pipefd[1], kNobodyMessageFd) < 0 || ::close(pipefd[1]) != 0)) _exit(8);
    if (setgroups(0, nullptr) != 0 || setgid(65534) != 0 || setuid(65534) != 0) _exit(10);
    execve(exe.c_str(), argv, envp.data());
    _exit(7);
  }
  ::close(pipefd[1]);
  if (pid < 0) {
    ::close(pipefd[0]);
    return r;
  }
  char buf[512];
  for (ssize_t n; (n = ::read(pipefd[0], buf, sizeof(buf))) > 0;) r.message.append(buf, static_cast<size_t>(n));
  ::close(pipefd[0]);
  int status = 0;
  if (waitpid(pid, &status, 0) == pid && WIFEXITED(status)) r.exit_code = WEXITSTATUS(status);
  return r;
}
const nasgw_cred kRoot{0, 0, 0, nullptr};

// The protocol's form of a handle the client library holds.
proto::Handle FH(const nasgw_handle& h) {
  proto::Handle out{h.volume, h.ino, h.gen, h.snap, h.scope, {}};
  std::memcpy(out.mac.data(), h.mac, out.mac.size());
  return out;
}

class HeadTest : public ::testing::Test {
 protected:
  void SetUp() override {
    // The pid in the name lets `sanlab gc` remove it after a crashed run.
    std::string tmpl = "/tmp/nasgw-head-test-" + std::to_string(getpid()) + "-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
    socket_ = dir_ + "/head.sock";
    std::vector<fs::Reserve::Device> devs;
    for (int i = 0; i < 2; i++) {
      auto lun = std::make_shared<block::MemLun>(512, LunMib() * kMiB / 512, "naa.head" + std::to_string(i));
      devs_.push_back(std::make_shared<block::MemDevice>(lun));
      devs.push_back(devs_.back());
    }
    fs::ReserveOptions o;
    o.name = "head";
    o.ag_bytes = 4 * kMiB;
    o.domains = Domains();
    std::shared_ptr<fs::Reserve> reserve = std::move(fs::Reserve::Format(devs, o).value());
    fs::DomainOptions d;
    d.store.write_buffer_bytes = 256 << 10;
    d.store.block_cache_bytes = 1 << 20;
    auto dom = fs::Domain::Create(reserve, 0, d);
    ASSERT_TRUE(dom.ok()) << dom.status().ToString();
    domain_ = std::move(dom.value());
    ASSERT_TRUE(domain_->CreateVolume("vol1", 16 << 10).ok());
    if (Domains() > 1) {
      // Domain id d holds volume vol<d+1> (vol1 is domain 0's).
      auto all = std::make_shared<std::vector<std::shared_ptr<fs::Domain>>>(1, domain_);
      for (uint32_t id = 1; id < Domains(); id++) {
        auto other = fs::Domain::Create(reserve, id, d);
        ASSERT_TRUE(other.ok()) << other.status().ToString();
        all->push_back(std::move(other.value()));
        ASSERT_TRUE(all->back()->CreateVolume("vol" + std::to_string(id + 1), 16 << 10).ok());
      }
      domains_ = std::move(all);
    }
    service_ = std::make_unique<HeadService>([this] {
      std::lock_guard<std::mutex> l(lease_mu_);
      return HeadDomain{domain_, verifier_.load(), lease_, domains_};
    });
    service_->SetServed([this](proto::Op op) {
      std::lock_guard<std::mutex> l(served_mu_);
      served_.push_back(op);
    });
    StartServer();
    nasgw_client_options co{};
    co.socket_path = socket_.c_str();
    co.client_name = "head_test";
    co.reconnect_timeout_ms = 20'000;
    ASSERT_EQ(nasgw_client_open(&co, &client_), 0) << nasgw_client_last_message();
    ASSERT_EQ(nasgw_mount(client_, &kRoot, "vol1", &root_), 0) << nasgw_client_last_message();
  }

  void TearDown() override {
    if (client_ != nullptr) nasgw_client_close(client_);
    if (server_ != nullptr) server_->Shutdown(std::chrono::milliseconds(1000));
    server_.reset();
    service_.reset();
    domains_.reset();
    domain_.reset();
    std::filesystem::remove_all(dir_);
  }

  // 128 MiB LUNs: 16 MiB of metadata groups. (On 64 MiB, 8 MiB of metadata,
  // the metadata headroom now and then refused a create: ENOSPC.)
  virtual uint64_t LunMib() const { return 128; }
  // The domains the reserve is split into (fs/reserve.h, "Domains").
  virtual uint32_t Domains() const { return 1; }

  void StartServer(uint32_t send_timeout_ms = 10'000) {
    StartServerWith([&](HeadServerOptions& o) { o.send_timeout_ms = send_timeout_ms; });
  }

  // Starts the server with the test's options changed by `tweak`.
  void StartServerWith(const std::function<void(HeadServerOptions&)>& tweak) {
    HeadServerOptions o;
    o.socket_path = socket_;
    o.socket_mode = 0666;
    o.workers = 4;
    o.max_inflight = 16;
    o.node_name = "test-node";
    tweak(o);
    auto s = HeadServer::Start(service_.get(), o);
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    server_ = std::move(s.value());
  }

  // Another client: another session.
  nasgw_client* OpenClient(const char* name) {
    nasgw_client_options co{};
    co.socket_path = socket_.c_str();
    co.client_name = name;
    co.reconnect_timeout_ms = 20'000;
    nasgw_client* c = nullptr;
    EXPECT_EQ(nasgw_client_open(&co, &c), 0) << nasgw_client_last_message();
    return c;
  }

  // Waits (bounded) until nasgwd's lock table holds exactly `want` on the
  // file, as (owner, type, start, end), whatever the sessions.
  bool WaitForLocks(const nasgw_handle& h, const std::set<std::tuple<uint64_t, uint32_t, uint64_t, uint64_t>>& want) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    for (;;) {
      std::set<std::tuple<uint64_t, uint32_t, uint64_t, uint64_t>> got;
      for (const HeldLock& l : service_->locks().Locks({h.volume, h.ino})) {
        got.insert({l.who.owner, l.range.type, l.range.start, l.range.end});
      }
      if (got == want) return true;
      if (std::chrono::steady_clock::now() > deadline) return false;
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
  }

  nasgw_attr Create(const nasgw_handle& dir, const char* name, uint32_t type = NASGW_TYPE_REG, uint32_t mode = 0644,
                    const nasgw_cred* cr = &kRoot) {
    nasgw_attr a{};
    int rc = nasgw_create(client_, cr, &dir, name, type, mode, 0, nullptr, 0, &a);
    EXPECT_EQ(rc, 0) << name << ": " << nasgw_client_last_message();
    return a;
  }

  std::string dir_, socket_;
  std::vector<std::shared_ptr<block::MemDevice>> devs_;
  std::shared_ptr<fs::Domain> domain_;
  // Every domain, when Domains() > 1 (domain_ is the first).
  std::shared_ptr<const std::vector<std::shared_ptr<fs::Domain>>> domains_;
  // The write verifier the service hands out: a test changes it to stand
  // for the domain being opened again (a restart, a takeover).
  std::atomic<uint64_t> verifier_{0x5eed0001};
  // The owner's lease the service checks (null: none, as a domain no node
  // owns).
  std::mutex lease_mu_;
  std::shared_ptr<fs::Lease> lease_;
  // What the service's served hook was told.
  std::vector<proto::Op> Served() {
    std::lock_guard<std::mutex> l(served_mu_);
    return served_;
  }
  std::mutex served_mu_;
  std::vector<proto::Op> served_;
  std::unique_ptr<HeadService> service_;
  std::unique_ptr<HeadServer> server_;
  nasgw_client* client_ = nullptr;
  nasgw_attr root_{};
};

TEST_F(HeadTest, NamespaceAndDataRoundTrip) {
  char node[64];
  ASSERT_EQ(nasgw_client_node_name(client_, node, sizeof(node)), 0);
  EXPECT_STREQ(node, "test-node");
  EXPECT_EQ(root_.type, static_cast<uint32_t>(NASGW_TYPE_DIR));
  nasgw_attr d = Create(root_.handle, "docs", NASGW_TYPE_DIR, 0755);
  nasgw_attr f = Create(d.handle, "a.txt");
  std::string data(100'000, '\0');
  for (size_t i = 0; i < data.size(); i++) data[i] = static_cast<char>(i * 7);
  nasgw_write_result post{};
  ASSERT_EQ(nasgw_write(client_, &kRoot, &f.handle, 5, data.data(), static_cast<uint32_t>(data.size()), NASGW_UNSTABLE,
                        &post),
            static_cast<int64_t>(data.size()));
  EXPECT_EQ(post.post.size, data.size() + 5);
  std::string back(data.size() + 100, 'x');
  int eof = 0;
  ASSERT_EQ(nasgw_read(client_, &kRoot, &f.handle, 5, back.data(), static_cast<uint32_t>(back.size()), &eof),
            static_cast<int64_t>(data.size()));
  EXPECT_EQ(eof, 1);
  EXPECT_EQ(back.substr(0, data.size()), data);

  nasgw_attr l{};
  ASSERT_EQ(nasgw_create(client_, &kRoot, &d.handle, "ln", NASGW_TYPE_LNK, 0777, 0, "a.txt", 0, &l), 0);
  char target[64];
  EXPECT_EQ(nasgw_readlink(client_, &kRoot, &l.handle, target, sizeof(target)), 5);
  EXPECT_STREQ(target, "a.txt");
  ASSERT_EQ(nasgw_rename(client_, &kRoot, &d.handle, "a.txt", &root_.handle, "b.txt", 0), 0);
  nasgw_attr found{};
  EXPECT_EQ(nasgw_lookup(client_, &kRoot, &root_.handle, "b.txt", &found), 0);
  EXPECT_EQ(found.handle.ino, f.handle.ino);
  EXPECT_EQ(nasgw_lookup(client_, &kRoot, &d.handle, "a.txt", &found), -ENOENT);
  EXPECT_EQ(nasgw_rmdir(client_, &kRoot, &root_.handle, "docs"), -ENOTEMPTY);

  // READDIR with attributes, in pages.
  for (int i = 0; i < 10; i++) Create(d.handle, ("f" + std::to_string(i)).c_str());
  std::vector<nasgw_dirent> ents(4);
  std::vector<nasgw_attr> attrs(4);
  uint64_t cookie = 0;
  std::set<std::string> names;
  for (int eofd = 0; !eofd;) {
    uint32_t n = 0;
    ASSERT_EQ(
        nasgw_readdir(client_, &kRoot, &d.handle, cookie, 4, NASGW_READDIR_PLUS, ents.data(), attrs.data(), &n, &eofd),
        0);
    for (uint32_t i = 0; i < n; i++) {
      names.insert(ents[i].name);
      EXPECT_EQ(attrs[i].handle.ino, ents[i].ino);
      cookie = ents[i].cookie;
    }
  }
  EXPECT_EQ(names.size(), 11u);  // f0..f9 and ln

  // Extended attributes.
  EXPECT_EQ(nasgw_setxattr(client_, &kRoot, &f.handle, "user.k", "v1", 2, NASGW_XATTR_CREATE), 0);
  EXPECT_EQ(nasgw_setxattr(client_, &kRoot, &f.handle, "user.k", "v2", 2, NASGW_XATTR_CREATE), -EEXIST);
  char v[8];
  EXPECT_EQ(nasgw_getxattr(client_, &kRoot, &f.handle, "user.k", v, sizeof(v)), 2);
  EXPECT_EQ(nasgw_getxattr(client_, &kRoot, &f.handle, "user.none", v, sizeof(v)), -ENODATA);
  EXPECT_EQ(nasgw_getxattr(client_, &kRoot, &f.handle, "bogus.k", v, sizeof(v)), -EOPNOTSUPP);
  EXPECT_EQ(nasgw_listxattr(client_, &kRoot, &f.handle, nullptr, 0), 7);

  // Bad values are errors, and the connection survives them.
  std::string longname(300, 'n');
  EXPECT_EQ(
      nasgw_create(client_, &kRoot, &root_.handle, longname.c_str(), NASGW_TYPE_REG, 0644, 0, nullptr, 0, nullptr),
      -ENAMETOOLONG);
  EXPECT_EQ(nasgw_lookup(client_, &kRoot, &root_.handle, "x/y", &found), -EINVAL);
  nasgw_handle altered = f.handle;
  altered.gen += 1;  // not a handle nasgwd issued (head_handle_test.cc has the rest)
  EXPECT_EQ(nasgw_getattr(client_, &kRoot, &altered, &found), -EBADMSG);
  nasgw_attr doomed = Create(root_.handle, "doomed");
  ASSERT_EQ(nasgw_unlink(client_, &kRoot, &root_.handle, "doomed"), 0);
  EXPECT_EQ(nasgw_getattr(client_, &kRoot, &doomed.handle, &found), -ESTALE);
  EXPECT_EQ(nasgw_mount(client_, &kRoot, "novol", &found), -ENOENT);
  nasgw_fs_stats sf{};
  EXPECT_EQ(nasgw_statfs(client_, &kRoot, root_.handle.volume, &sf), 0);
  EXPECT_GT(sf.total_bytes, 0u);
}

// READDIR with each entry's extended attributes: what a head reads from the
// listing equals what LISTXATTR and GETXATTR answer the same caller; an
// entry the caller may not read, or whose attributes are too large, is not
// carried.
TEST_F(HeadTest, ReadDirCarriesEachEntrysXattrsAsGetxattrWouldAnswer) {
  const nasgw_cred bob{1001, 100, 0, nullptr};
  nasgw_attr d = Create(root_.handle, "xd", NASGW_TYPE_DIR, 0755);
  nasgw_attr plain = Create(d.handle, "plain", NASGW_TYPE_REG, 0644);
  nasgw_attr tagged = Create(d.handle, "tagged", NASGW_TYPE_REG, 0644);
  nasgw_attr secret = Create(d.handle, "secret", NASGW_TYPE_REG, 0600);
  nasgw_attr big = Create(d.handle, "big", NASGW_TYPE_REG, 0644);
  ASSERT_EQ(nasgw_setxattr(client_, &kRoot, &tagged.handle, "user.DOSATTRIB", "\x01\x02\x00z", 4, 0), 0);
  ASSERT_EQ(nasgw_setxattr(client_, &kRoot, &tagged.handle, "trusted.t", "root-only", 9, 0), 0);
  ASSERT_EQ(nasgw_setxattr(client_, &kRoot, &secret.handle, "user.s", "x", 1, 0), 0);
  std::string large(2000, 'L');
  ASSERT_EQ(nasgw_setxattr(client_, &kRoot, &big.handle, "user.big", large.data(), large.size(), 0), 0);
  (void)plain;
  for (const nasgw_cred* who : {&kRoot, &bob}) {
    std::vector<nasgw_dirent> ents(16);
    std::vector<nasgw_attr> attrs(16);
    std::vector<nasgw_entry_xattrs> xs(16);
    uint32_t n = 0;
    int eof = 0;
    ASSERT_EQ(nasgw_readdir_xattrs(client_, who, &d.handle, 0, 16, NASGW_READDIR_PLUS | NASGW_READDIR_XATTRS,
                                   ents.data(), attrs.data(), xs.data(), &n, &eof),
              0);
    ASSERT_EQ(n, 4u);
    for (uint32_t i = 0; i < n; i++) {
      const std::string name = ents[i].name;
      SCOPED_TRACE(name + (who == &bob ? " as bob" : " as root"));
      const bool want_carried = name != "big" && !(name == "secret" && who == &bob);
      ASSERT_EQ(xs[i].carried != 0, want_carried);
      if (!want_carried) {
        EXPECT_EQ(nasgw_entry_listxattr(&xs[i], nullptr, 0), -EAGAIN);
        continue;
      }
      char got[256], want[256];
      const int64_t gl = nasgw_entry_listxattr(&xs[i], got, sizeof(got));
      const int64_t wl = nasgw_listxattr(client_, who, &attrs[i].handle, want, sizeof(want));
      ASSERT_EQ(gl, wl);
      EXPECT_EQ(std::string(got, gl), std::string(want, wl)) << "the same names, trusted.* only for root";
      for (const char* x : {"user.DOSATTRIB", "trusted.t", "user.s", "user.none"}) {
        const int64_t g = nasgw_entry_getxattr(&xs[i], x, got, sizeof(got));
        const int64_t w = nasgw_getxattr(client_, who, &attrs[i].handle, x, want, sizeof(want));
        ASSERT_EQ(g, w) << x;
        if (g > 0) {
          EXPECT_EQ(std::string(got, g), std::string(want, w)) << x;
        }
      }
      if (name == "tagged") {
        EXPECT_EQ(nasgw_entry_getxattr(&xs[i], "user.DOSATTRIB", nullptr, 0), 4) << "size 0: the length";
        EXPECT_EQ(nasgw_entry_getxattr(&xs[i], "user.DOSATTRIB", got, 2), -ERANGE);
      }
    }
  }
  // Without PLUS, or through the old call, the flag is refused.
  std::vector<nasgw_dirent> ents(4);
  std::vector<nasgw_attr> attrs(4);
  std::vector<nasgw_entry_xattrs> xs(4);
  uint32_t n = 0;
  EXPECT_EQ(nasgw_readdir_xattrs(client_, &kRoot, &d.handle, 0, 4, NASGW_READDIR_XATTRS, ents.data(), attrs.data(),
                                 xs.data(), &n, nullptr),
            -EINVAL);
  EXPECT_EQ(nasgw_readdir(client_, &kRoot, &d.handle, 0, 4, NASGW_READDIR_PLUS | NASGW_READDIR_XATTRS, ents.data(),
                          attrs.data(), &n, nullptr),
            -EINVAL);
}

// FALLOCATE and SEEK through nasgwd: unstable data still in the cache is
// punched and found, the caller's permissions and Linux's errors hold.
TEST_F(HeadTest, FallocateAndSeekThroughTheHead) {
  const nasgw_cred bob{1001, 100, 0, nullptr};
  nasgw_attr f = Create(root_.handle, "sparse", NASGW_TYPE_REG, 06755);
  std::string data(200'000, 'q');
  ASSERT_EQ(nasgw_write(client_, &kRoot, &f.handle, 0, data.data(), static_cast<uint32_t>(data.size()), NASGW_UNSTABLE,
                        nullptr),
            static_cast<int64_t>(data.size()));
  nasgw_attr a{};
  ASSERT_EQ(nasgw_fallocate(client_, &kRoot, &f.handle, NASGW_FALLOC_PUNCH_HOLE | NASGW_FALLOC_KEEP_SIZE, 10'000,
                            100'000, &a),
            0);
  EXPECT_EQ(a.size, data.size());
  std::fill_n(data.begin() + 10'000, 100'000, '\0');
  std::string back(data.size(), 'x');
  ASSERT_EQ(nasgw_read(client_, &kRoot, &f.handle, 0, back.data(), static_cast<uint32_t>(back.size()), nullptr),
            static_cast<int64_t>(data.size()));
  EXPECT_TRUE(back == data) << "the punched range reads as zeros";
  uint64_t at = 0;
  ASSERT_EQ(nasgw_seek(client_, &kRoot, &f.handle, 0, 1, &at), 0);
  EXPECT_EQ(at, 12'288u) << "the first whole block of the hole";
  ASSERT_EQ(nasgw_seek(client_, &kRoot, &f.handle, at, 0, &at), 0);
  EXPECT_EQ(at, 106'496u) << "the block the hole ends in holds data again";
  EXPECT_EQ(nasgw_seek(client_, &kRoot, &f.handle, data.size(), 0, &at), -ENXIO);
  // Zeroing past the end grows the file; allocation without KEEP_SIZE too.
  ASSERT_EQ(nasgw_fallocate(client_, &kRoot, &f.handle, NASGW_FALLOC_ZERO_RANGE, 190'000, 20'000, &a), 0);
  EXPECT_EQ(a.size, 210'000u);
  ASSERT_EQ(nasgw_fallocate(client_, &kRoot, &f.handle, 0, 0, 300'000, &a), 0);
  EXPECT_EQ(a.size, 300'000u);
  // Errors as Linux gives them.
  EXPECT_EQ(nasgw_fallocate(client_, &kRoot, &f.handle, NASGW_FALLOC_PUNCH_HOLE, 0, 10, nullptr), -EOPNOTSUPP);
  EXPECT_EQ(nasgw_fallocate(client_, &kRoot, &f.handle, 0, 0, 0, nullptr), -EINVAL);
  EXPECT_EQ(nasgw_fallocate(client_, &kRoot, &f.handle, 0, 1ull << 62, 1ull << 62, nullptr), -EFBIG);
  EXPECT_EQ(nasgw_fallocate(client_, &kRoot, &f.handle, 0, 0, 1ull << 50, nullptr), -ENOSPC);
  EXPECT_EQ(nasgw_fallocate(client_, &kRoot, &root_.handle, 0, 0, 10, nullptr), -EISDIR);
  EXPECT_EQ(nasgw_fallocate(client_, &bob, &f.handle, 0, 0, 10, nullptr), -EACCES) << "bob may not write";
  // A writer without CAP_FSETID loses setuid and setgid, as with a write.
  nasgw_sattr s{};
  s.mask = NASGW_SET_MODE;
  s.mode = 06777;
  ASSERT_EQ(nasgw_setattr(client_, &kRoot, &f.handle, &s, nullptr), 0);
  ASSERT_EQ(nasgw_fallocate(client_, &bob, &f.handle, NASGW_FALLOC_KEEP_SIZE, 0, 10, &a), 0);
  EXPECT_EQ(a.mode, 0777u);
}

// An OPEN and the RELEASE of an earlier open of the same file can reach
// nasgwd in either order (they travel on different connections): the file
// must stay open while any open is outstanding, so that an unlinked open
// file keeps its data.
TEST_F(HeadTest, OpensOverlapInAnyOrder) {
  nasgw_attr f = Create(root_.handle, "overlap");
  HeadSession session;
  auto run = [&](proto::Op op, uint64_t open_id) {
    proto::Request r;
    r.op = op;
    r.h = FH(f.handle);
    r.count = proto::kAccessRead;
    r.open_id = open_id;
    return service_->Execute(session, r).err;
  };
  ASSERT_EQ(run(proto::Op::kOpen, 1), 0);
  ASSERT_EQ(run(proto::Op::kOpen, 2), 0);     // the second open arrives first...
  ASSERT_EQ(run(proto::Op::kRelease, 1), 0);  // ...then the release of the first
  ASSERT_EQ(run(proto::Op::kOpen, 2), 0);     // a resend changes nothing
  ASSERT_EQ(nasgw_unlink(client_, &kRoot, &root_.handle, "overlap"), 0);
  EXPECT_EQ(nasgw_write(client_, &kRoot, &f.handle, 0, "still here", 10, 0, nullptr), 10)
      << "the file was closed while an open was outstanding";
  ASSERT_EQ(run(proto::Op::kRelease, 2), 0);
  ASSERT_EQ(run(proto::Op::kRelease, 2), 0);  // a resent release is harmless
  nasgw_attr a{};
  EXPECT_EQ(nasgw_getattr(client_, &kRoot, &f.handle, &a), -ESTALE) << "the last release frees the unlinked file";
}

// The client checks a request with the server's own decoder first: a bad
// one fails at once with EINVAL and never costs the connection (nor is it
// resent in a loop as if the connection had broken).
TEST_F(HeadTest, MalformedRequestsFailLocally) {
  const uint64_t before = server_->protocol_errors();
  nasgw_handle zero = root_.handle;
  zero.ino = 0;
  nasgw_attr a{};
  EXPECT_EQ(nasgw_getattr(client_, &kRoot, &zero, &a), -EINVAL);
  nasgw_sattr s{};
  s.mask = NASGW_SET_MODE;
  s.mode = 010000;
  EXPECT_EQ(nasgw_setattr(client_, &kRoot, &root_.handle, &s, &a), -EINVAL);
  s.mask = 1u << 20;
  EXPECT_EQ(nasgw_setattr(client_, &kRoot, &root_.handle, &s, &a), -EINVAL);
  EXPECT_EQ(nasgw_access(client_, &kRoot, &root_.handle, 8, nullptr), -EINVAL);
  EXPECT_EQ(nasgw_write(client_, &kRoot, &root_.handle, (1ull << 63) - 2, "abcd", 4, 0, nullptr), -EFBIG);
  EXPECT_EQ(server_->protocol_errors(), before);
  EXPECT_EQ(nasgw_getattr(client_, &kRoot, &root_.handle, &a), 0);
}

// A head that is neither root nor nasgwd's user may only act as itself:
// its own uid and only groups it is in (SO_PEERCRED, SO_PEERGROUPS).
// As nobody: claims to be root, or in root's group, are refused (EPERM);
// its own credentials are checked (EACCES) and used (the owner of a file).
// A role's client of the head socket; null if it could not connect.
nasgw_client* RoleClient(const char* socket) {
  nasgw_client_options co{};
  co.socket_path = socket;
  co.connect_timeout_ms = 5000;
  co.reconnect_timeout_ms = 2000;
  nasgw_client* c = nullptr;
  return nasgw_client_open(&co, &c) == 0 ? c : nullptr;
}

int ClaimOthersCredentials(const char* socket, int) {
  nasgw_client* c = RoleClient(socket);
  if (c == nullptr) return 11;
  nasgw_attr root{}, dir{}, a{};
  const nasgw_cred self{65534, 65534, 0, nullptr};
  const uint32_t zero = 0;
  const nasgw_cred as_root{0, 0, 0, nullptr};
  const nasgw_cred root_group{65534, 0, 0, nullptr};
  const nasgw_cred root_supp{65534, 65534, 1, &zero};
  if (nasgw_mount(c, &self, "vol1", &root) != 0) return 12;
  if (nasgw_lookup(c, &self, &root.handle, "rootonly", &dir) != 0) return 13;
  if (nasgw_create(c, &as_root, &dir.handle, "x", NASGW_TYPE_REG, 0644, 0, nullptr, 0, &a) != -EPERM) return 14;
  if (nasgw_create(c, &root_group, &dir.handle, "x", NASGW_TYPE_REG, 0644, 0, nullptr, 0, &a) != -EPERM) return 15;
  if (nasgw_create(c, &root_supp, &dir.handle, "x", NASGW_TYPE_REG, 0644, 0, nullptr, 0, &a) != -EPERM) return 16;
  if (nasgw_create(c, &self, &dir.handle, "x", NASGW_TYPE_REG, 0644, 0, nullptr, 0, &a) != -EACCES) return 17;
  if (nasgw_lookup(c, &self, &root.handle, "open", &dir) != 0) return 18;
  if (nasgw_create(c, &self, &dir.handle, "mine", NASGW_TYPE_REG, 0644, 0, nullptr, 0, &a) != 0) return 19;
  if (a.uid != 65534) return 20;
  // An inode by number would skip the directories' search permission.
  if (nasgw_get_inode(c, &self, &root.handle, a.handle.ino, &a) != -EPERM) return 21;
  nasgw_client_close(c);
  return 0;
}
[[maybe_unused]] const bool kClaimRole = NobodyRoles().emplace("claim", ClaimOthersCredentials).second;

TEST_F(HeadTest, UnprivilegedPeerCannotClaimOthersCredentials) {
  Create(root_.handle, "open", NASGW_TYPE_DIR, 0777);
  Create(root_.handle, "rootonly", NASGW_TYPE_DIR, 0770);  // root:root
  ASSERT_EQ(chmod(dir_.c_str(), 0755), 0);                 // the socket's directory: nobody may enter
  const NobodyResult r = RunAsNobody("claim", socket_);
  EXPECT_EQ(r.exit_code, 0) << "the child's check that failed (see the return codes of ClaimOthersCredentials)";
}

TEST_F(HeadTest, PermissionsUseTheCallersCredentials) {
  const uint32_t groups[] = {300};
  const nasgw_cred alice{1000, 100, 1, groups};
  const nasgw_cred bob{1001, 100, 0, nullptr};
  nasgw_attr pub = Create(root_.handle, "pub", NASGW_TYPE_DIR, 01777);
  nasgw_attr priv = Create(root_.handle, "priv", NASGW_TYPE_DIR, 0700);
  nasgw_attr a{};
  EXPECT_EQ(nasgw_create(client_, &alice, &priv.handle, "x", NASGW_TYPE_REG, 0644, 0, nullptr, 0, &a), -EACCES);
  EXPECT_EQ(nasgw_lookup(client_, &alice, &priv.handle, "x", &a), -EACCES);
  ASSERT_EQ(nasgw_create(client_, &alice, &pub.handle, "mine", NASGW_TYPE_REG, 0600, 0, nullptr, 0, &a), 0);
  EXPECT_EQ(a.uid, 1000u);
  EXPECT_EQ(a.gid, 100u);
  char buf[4];
  EXPECT_EQ(nasgw_read(client_, &bob, &a.handle, 0, buf, sizeof(buf), nullptr), -EACCES);
  EXPECT_EQ(nasgw_write(client_, &bob, &a.handle, 0, "x", 1, 0, nullptr), -EACCES);
  EXPECT_EQ(nasgw_unlink(client_, &bob, &pub.handle, "mine"), -EPERM);  // sticky
  nasgw_sattr s{};
  s.mask = NASGW_SET_MODE;
  s.mode = 0666;
  EXPECT_EQ(nasgw_setattr(client_, &bob, &a.handle, &s, nullptr), -EPERM);
  s.mask = NASGW_SET_GID;
  s.gid = 300;
  EXPECT_EQ(nasgw_setattr(client_, &alice, &a.handle, &s, &a), 0);  // a group alice is in
  EXPECT_EQ(a.gid, 300u);
  s.gid = 400;
  EXPECT_EQ(nasgw_setattr(client_, &alice, &a.handle, &s, nullptr), -EPERM);
  uint32_t granted = 0;
  EXPECT_EQ(nasgw_access(client_, &bob, &a.handle, 7, &granted), 0);
  EXPECT_EQ(granted, 0u);
  EXPECT_EQ(nasgw_access(client_, &alice, &a.handle, 7, &granted), 0);
  EXPECT_EQ(granted, 6u);
  EXPECT_EQ(nasgw_unlink(client_, &alice, &pub.handle, "mine"), 0);
}

// GETINODE: a privileged head turns a bare inode number back into a handle
// in its mount's scope (FUSE's open-by-handle); a removed object, or a file
// in a sub-directory scope, is stale; a directory below a sub-directory
// scope is found, one outside it is not.
TEST_F(HeadTest, GetInodeFindsObjectsByNumberInTheScope) {
  nasgw_attr d = Create(root_.handle, "d", NASGW_TYPE_DIR, 0755);
  nasgw_attr sub = Create(d.handle, "sub", NASGW_TYPE_DIR, 0755);
  nasgw_attr f = Create(d.handle, "f");
  nasgw_attr other = Create(root_.handle, "other", NASGW_TYPE_DIR, 0755);
  nasgw_attr a{};
  ASSERT_EQ(nasgw_get_inode(client_, &kRoot, &root_.handle, f.handle.ino, &a), 0) << nasgw_client_last_message();
  EXPECT_EQ(a.handle.gen, f.handle.gen);
  EXPECT_EQ(a.type, static_cast<uint32_t>(NASGW_TYPE_REG));
  nasgw_attr again{};
  EXPECT_EQ(nasgw_getattr(client_, &kRoot, &a.handle, &again), 0) << "the handle it gave works";
  EXPECT_EQ(nasgw_get_inode(client_, &kRoot, &f.handle, f.handle.ino, &a), -ENOTDIR) << "the scope is a directory";
  EXPECT_EQ(nasgw_get_inode(client_, &kRoot, &root_.handle, 999999, &a), -ESTALE);
  EXPECT_EQ(nasgw_get_inode(client_, &kRoot, &root_.handle, 0, &a), -EINVAL);
  // A sub-directory scope (a MOUNT of d).
  nasgw_attr scoped{};
  ASSERT_EQ(nasgw_mount_path(client_, &kRoot, "vol1", "d", &scoped), 0) << nasgw_client_last_message();
  EXPECT_EQ(nasgw_get_inode(client_, &kRoot, &scoped.handle, sub.handle.ino, &a), 0) << "a directory below it";
  EXPECT_EQ(nasgw_get_inode(client_, &kRoot, &scoped.handle, other.handle.ino, &a), -ESTALE) << "one outside it";
  EXPECT_EQ(nasgw_get_inode(client_, &kRoot, &scoped.handle, f.handle.ino, &a), -ESTALE) << "a file's parents unknown";
  ASSERT_EQ(nasgw_unlink(client_, &kRoot, &d.handle, "f"), 0);
  EXPECT_EQ(nasgw_get_inode(client_, &kRoot, &root_.handle, f.handle.ino, &a), -ESTALE) << "removed";
}

// RENAME_EXCHANGE moves both entries, so both pass the checks of a move
// out of their directory (sticky: only the owner of the file or of the
// directory), as Linux checks them.
TEST_F(HeadTest, ExchangeChecksBothEntries) {
  const nasgw_cred alice{1000, 100, 0, nullptr};
  nasgw_attr pub = Create(root_.handle, "pub", NASGW_TYPE_DIR, 01777);
  nasgw_attr mine{}, theirs = Create(pub.handle, "theirs");  // root's
  ASSERT_EQ(nasgw_create(client_, &alice, &pub.handle, "mine", NASGW_TYPE_REG, 0644, 0, nullptr, 0, &mine), 0);
  EXPECT_EQ(nasgw_rename(client_, &alice, &pub.handle, "mine", &pub.handle, "theirs", NASGW_RENAME_EXCHANGE), -EPERM);
  EXPECT_EQ(nasgw_rename(client_, &alice, &pub.handle, "mine", &pub.handle, "none", NASGW_RENAME_EXCHANGE), -ENOENT);
  ASSERT_EQ(nasgw_rename(client_, &kRoot, &pub.handle, "mine", &pub.handle, "theirs", NASGW_RENAME_EXCHANGE), 0);
  nasgw_attr got{};
  ASSERT_EQ(nasgw_lookup(client_, &kRoot, &pub.handle, "theirs", &got), 0);
  EXPECT_EQ(got.handle.ino, mine.handle.ino);
  ASSERT_EQ(nasgw_lookup(client_, &kRoot, &pub.handle, "mine", &got), 0);
  EXPECT_EQ(got.handle.ino, theirs.handle.ino);
}

// A write or truncation by anyone but root clears setuid, and setgid with
// group execute, and moves the change time; root's do not. A non-owner may
// clear the bits with a mode change if it may write the file (what Linux's
// FUSE client sends), and nothing more.
TEST_F(HeadTest, WritesAndTruncationsClearSetuidAndSetgid) {
  const nasgw_cred bob{1001, 100, 0, nullptr};
  nasgw_attr f = Create(root_.handle, "suid", NASGW_TYPE_REG, 0777);
  auto chmod = [&](const nasgw_cred* cr, uint32_t mode) {
    nasgw_sattr s{};
    s.mask = NASGW_SET_MODE;
    s.mode = mode;
    return nasgw_setattr(client_, cr, &f.handle, &s, nullptr);
  };
  auto mode = [&] {
    nasgw_attr a{};
    EXPECT_EQ(nasgw_getattr(client_, &kRoot, &f.handle, &a), 0);
    return a.mode;
  };
  auto ctime = [&] {
    nasgw_attr a{};
    EXPECT_EQ(nasgw_getattr(client_, &kRoot, &f.handle, &a), 0);
    return std::make_pair(a.ctime.sec, a.ctime.nsec);
  };
  ASSERT_EQ(chmod(&kRoot, 06777), 0);
  auto before = ctime();
  nasgw_write_result w{};
  ASSERT_EQ(nasgw_write(client_, &bob, &f.handle, 0, "x", 1, NASGW_UNSTABLE, &w), 1);
  EXPECT_EQ(w.post.mode, 0777u);  // the reply shows it
  EXPECT_EQ(mode(), 0777u);
  EXPECT_GE(ctime(), before);
  // Root writes: CAP_FSETID, the bits stay.
  ASSERT_EQ(chmod(&kRoot, 06777), 0);
  ASSERT_EQ(nasgw_write(client_, &kRoot, &f.handle, 0, "x", 1, NASGW_UNSTABLE, nullptr), 1);
  EXPECT_EQ(mode(), 06777u);
  // setgid without group execute is not an execution privilege: it stays.
  ASSERT_EQ(chmod(&kRoot, 06767), 0);
  ASSERT_EQ(nasgw_write(client_, &bob, &f.handle, 0, "x", 1, NASGW_UNSTABLE, nullptr), 1);
  EXPECT_EQ(mode(), 02767u);
  // A truncation, even to the same size.
  ASSERT_EQ(chmod(&kRoot, 06777), 0);
  nasgw_sattr t{};
  t.mask = NASGW_SET_SIZE;
  t.size = 1;
  nasgw_attr after{};
  ASSERT_EQ(nasgw_setattr(client_, &bob, &f.handle, &t, &after), 0);
  EXPECT_EQ(after.mode, 0777u);
  // A non-owner's mode change: clearing the bits, yes; anything else, no.
  // (In the file's group, bob may keep setgid; outside it, any chmod of
  // his drops it.)
  nasgw_sattr g{};
  g.mask = NASGW_SET_GID;
  g.gid = 100;
  ASSERT_EQ(nasgw_setattr(client_, &kRoot, &f.handle, &g, nullptr), 0);
  ASSERT_EQ(chmod(&kRoot, 06777), 0);
  EXPECT_EQ(chmod(&bob, 0776), -EPERM);
  EXPECT_EQ(chmod(&bob, 02777), 0);
  EXPECT_EQ(mode(), 02777u);
  ASSERT_EQ(chmod(&kRoot, 06755), 0);  // bob may not write it now
  EXPECT_EQ(chmod(&bob, 0755), -EPERM);
  EXPECT_EQ(mode(), 06755u);
}

// Completions of async calls: how many ended, and how many of them not as
// their call wanted. AsyncCall is a callback's argument.
struct AsyncTally {
  std::mutex mu;
  std::condition_variable cv;
  int done = 0, failed = 0;
  void End(bool ok) {
    std::lock_guard<std::mutex> l(mu);
    if (!ok) failed++;
    done++;
    cv.notify_all();
  }
  // Until `n` calls in all have ended (at most 120 s).
  bool WaitFor(int n) {
    std::unique_lock<std::mutex> l(mu);
    return cv.wait_for(l, std::chrono::seconds(120), [&] { return done >= n; });
  }
};
struct AsyncCall {
  AsyncTally* tally;
  int64_t want;  // the result that is right
};
// nasgw_read_async's callback: right when it read `want` bytes.
void ReadEnded(void* arg, int64_t result, int) {
  auto* c = static_cast<AsyncCall*>(arg);
  c->tally->End(result == c->want);
}

// Many requests outstanding on few connections; replies come back in any
// order and each lands in its own buffer.
TEST_F(HeadTest, PipelinedAsyncIo) {
  nasgw_attr f = Create(root_.handle, "pipe");
  constexpr int kOps = 256;
  constexpr uint32_t kLen = 8192;
  std::vector<std::string> bufs(kOps);
  AsyncTally tally;
  std::vector<AsyncCall> ctx(kOps, AsyncCall{&tally, kLen});
  // A write's completion also says what it did: the level reached (as
  // asked: unstable), the verifier, the attributes after it.
  auto wcb = [](void* arg, int64_t result, const nasgw_write_result* r) {
    auto* c = static_cast<AsyncCall*>(arg);
    c->tally->End(result == c->want && r != nullptr && r->stable == NASGW_UNSTABLE && r->verifier == 0x5eed0001 &&
                  r->post.size >= static_cast<uint64_t>(c->want));
  };
  for (int i = 0; i < kOps; i++) {
    bufs[i] = std::string(kLen, static_cast<char>('a' + i % 26));
    ASSERT_EQ(nasgw_write_async(client_, &kRoot, &f.handle, uint64_t{kLen} * i, bufs[i].data(), kLen, NASGW_UNSTABLE,
                                wcb, &ctx[i]),
              0);
  }
  ASSERT_TRUE(tally.WaitFor(kOps));
  EXPECT_EQ(tally.failed, 0);
  std::vector<std::string> back(kOps, std::string(kLen, '\0'));
  for (int i = 0; i < kOps; i++) {
    ASSERT_EQ(
        nasgw_read_async(client_, &kRoot, &f.handle, uint64_t{kLen} * i, back[i].data(), kLen, ReadEnded, &ctx[i]), 0);
  }
  ASSERT_TRUE(tally.WaitFor(2 * kOps));
  EXPECT_EQ(tally.failed, 0);
  for (int i = 0; i < kOps; i++) EXPECT_EQ(back[i], bufs[i]) << i;
}

int RawConnect(const std::string& path) {
  int fd = ::socket(AF_UNIX, SOCK_STREAM, 0);
  sockaddr_un a{};
  a.sun_family = AF_UNIX;
  std::strncpy(a.sun_path, path.c_str(), sizeof(a.sun_path) - 1);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

// Garbage, truncated frames and frames with lying lengths close the sending
// connection only; a client working at the same time never notices.
// A write says how durable it must be and the reply what it reached; WRITE,
// FSYNC and HELLO replies carry the write verifier of the domain's opening
// that served them, so a head can tell unstable data may have been lost.
TEST_F(HeadTest, WriteStabilityAndVerifier) {
  nasgw_attr f = Create(root_.handle, "durable");
  nasgw_write_result r{};
  ASSERT_EQ(nasgw_write(client_, &kRoot, &f.handle, 0, "abcd", 4, NASGW_UNSTABLE, &r), 4);
  EXPECT_EQ(r.stable, NASGW_UNSTABLE);  // what was asked: nasgwd promises no more
  EXPECT_EQ(r.verifier, 0x5eed0001u);
  EXPECT_EQ(r.post.size, 4u);
  EXPECT_EQ(r.post.handle.ino, f.handle.ino);
  EXPECT_TRUE(std::memcmp(r.post.handle.mac, f.handle.mac, sizeof(f.handle.mac)) == 0);
  // Either sync level is reached by fsyncing the file: file_sync.
  ASSERT_EQ(nasgw_write(client_, &kRoot, &f.handle, 4, "efgh", 4, NASGW_DATA_SYNC, &r), 4);
  EXPECT_EQ(r.stable, NASGW_FILE_SYNC);
  EXPECT_EQ(r.post.size, 8u);
  ASSERT_EQ(nasgw_write(client_, &kRoot, &f.handle, 8, "ijkl", 4, NASGW_FILE_SYNC, &r), 4);
  EXPECT_EQ(r.stable, NASGW_FILE_SYNC);
  // No such level: refused before it is sent.
  EXPECT_EQ(nasgw_write(client_, &kRoot, &f.handle, 0, "x", 1, NASGW_FILE_SYNC + 1, &r), -EINVAL);
  uint64_t v = 0;
  ASSERT_EQ(nasgw_fsync(client_, &kRoot, &f.handle, &v), 0);
  EXPECT_EQ(v, 0x5eed0001u);  // the same: what was written unstable is durable
  EXPECT_EQ(nasgw_client_write_verifier(client_), 0x5eed0001u);

  // The domain opened again (a restart, a takeover): a new verifier, so the
  // unstable write above cannot be taken as committed.
  verifier_ = 0x5eed0002;
  ASSERT_EQ(nasgw_fsync(client_, &kRoot, &f.handle, &v), 0);
  EXPECT_EQ(v, 0x5eed0002u);
  EXPECT_EQ(nasgw_client_write_verifier(client_), 0x5eed0002u);
  // A new client learns it from HELLO, before it writes anything.
  nasgw_client* other = OpenClient("verifier");
  ASSERT_NE(other, nullptr);
  EXPECT_EQ(nasgw_client_write_verifier(other), 0x5eed0002u);
  nasgw_client_close(other);
  // An FSYNC of a file that is gone is an error, not a verifier.
  ASSERT_EQ(nasgw_unlink(client_, &kRoot, &root_.handle, "durable"), 0);
  EXPECT_EQ(nasgw_fsync(client_, &kRoot, &f.handle, &v), -ESTALE);
}

// What a head that cannot change its own write verifier (NFSv3 through
// Ganesha) learns from the library: each change of nasgwd's verifier, and
// whether writes it answered unstable may be lost with it.
struct VerifierEvents {
  std::mutex mu;
  std::condition_variable cv;
  std::vector<std::tuple<uint64_t, uint64_t, int>> got;  // (old, new, lost)
  bool gate_closed = false;                              // a loss's report waits for Open()

  static void Changed(void* arg, uint64_t held, uint64_t now, int lost) {
    auto* e = static_cast<VerifierEvents*>(arg);
    std::unique_lock<std::mutex> l(e->mu);
    e->got.emplace_back(held, now, lost);
    e->cv.notify_all();
    if (lost) e->cv.wait(l, [e] { return !e->gate_closed; });
  }
  void Open() {
    std::lock_guard<std::mutex> l(mu);
    gate_closed = false;
    cv.notify_all();
  }
  std::vector<std::tuple<uint64_t, uint64_t, int>> Got() {
    std::lock_guard<std::mutex> l(mu);
    return got;
  }
  bool WaitFor(size_t n) {
    std::unique_lock<std::mutex> l(mu);
    return cv.wait_for(l, std::chrono::seconds(20), [&] { return got.size() >= n; });
  }
};

TEST_F(HeadTest, HeldUnstableWritesAreReportedLostBeforeANewVerifierGoesOn) {
  VerifierEvents ev;
  nasgw_client_options co{};
  co.socket_path = socket_.c_str();
  co.client_name = "v3-head";
  co.reconnect_timeout_ms = 20'000;
  co.verifier_changed = VerifierEvents::Changed;
  co.verifier_arg = &ev;
  nasgw_client* c = nullptr;
  ASSERT_EQ(nasgw_client_open(&co, &c), 0) << nasgw_client_last_message();
  nasgw_attr a = Create(root_.handle, "a"), b = Create(root_.handle, "b");
  using E = std::tuple<uint64_t, uint64_t, int>;
  constexpr uint32_t kHeld = NASGW_UNSTABLE | NASGW_HOLD_UNSTABLE;

  // Held until an fsync made after the write covers the file.
  nasgw_write_result r{};
  ASSERT_EQ(nasgw_write(c, &kRoot, &a.handle, 0, "aaaa", 4, kHeld, &r), 4);
  EXPECT_EQ(r.stable, NASGW_UNSTABLE);  // the flag is the library's, not a level
  ASSERT_EQ(nasgw_write(c, &kRoot, &b.handle, 0, "bbbb", 4, kHeld, &r), 4);
  EXPECT_EQ(nasgw_client_held_files(c), 2u);
  uint64_t v = 0;
  ASSERT_EQ(nasgw_fsync(c, &kRoot, &a.handle, &v), 0);
  EXPECT_EQ(nasgw_client_held_files(c), 1u);
  ASSERT_EQ(nasgw_write(c, &kRoot, &a.handle, 0, "AAAA", 4, NASGW_FILE_SYNC | NASGW_HOLD_UNSTABLE, &r), 4);
  EXPECT_EQ(nasgw_client_held_files(c), 1u);  // durable when answered: nothing to hold
  EXPECT_TRUE(ev.Got().empty());

  // The domain opened again with b held: reported lost before the FSYNC
  // reply that brought the new verifier is delivered.
  verifier_ = 0x5eed0002;
  ASSERT_EQ(nasgw_fsync(c, &kRoot, &b.handle, &v), 0);
  EXPECT_EQ(v, 0x5eed0002u);
  EXPECT_EQ(ev.Got(), (std::vector<E>{{0x5eed0001, 0x5eed0002, 1}}));
  EXPECT_EQ(nasgw_client_held_files(c), 0u);

  // A change with nothing held is reported, and nothing is lost.
  ASSERT_EQ(nasgw_write(c, &kRoot, &a.handle, 0, "aaaa", 4, kHeld, &r), 4);
  ASSERT_EQ(nasgw_fsync(c, &kRoot, &a.handle, &v), 0);
  verifier_ = 0x5eed0003;
  ASSERT_EQ(nasgw_write(c, &kRoot, &a.handle, 0, "aaaa", 4, NASGW_UNSTABLE, &r), 4);
  EXPECT_EQ(ev.Got().back(), E(0x5eed0002, 0x5eed0003, 0));
  // An unstable write that is not held is the caller's to track.
  ASSERT_EQ(nasgw_write(c, &kRoot, &a.handle, 0, "aaaa", 4, NASGW_UNSTABLE, &r), 4);
  EXPECT_EQ(nasgw_client_held_files(c), 0u);

  // nasgwd restarts under a held write: the new connection's HELLO tells,
  // with no call made.
  ASSERT_EQ(nasgw_write(c, &kRoot, &b.handle, 4, "bbbb", 4, kHeld, &r), 4);
  EXPECT_EQ(nasgw_client_held_files(c), 1u);
  verifier_ = 0x5eed0004;
  server_->Shutdown(std::chrono::milliseconds(0));
  server_.reset();
  StartServer();
  ASSERT_TRUE(ev.WaitFor(3));
  EXPECT_EQ(ev.Got().back(), E(0x5eed0003, 0x5eed0004, 1));
  EXPECT_EQ(nasgw_client_held_files(c), 0u);

  // While a loss is being reported (the head restarting), no reply with a
  // verifier is delivered on any connection: a COMMIT on the other one
  // must not be answered meanwhile.
  ASSERT_EQ(nasgw_write(c, &kRoot, &b.handle, 0, "bbbb", 4, kHeld, &r), 4);
  std::future<int> reporter;
  std::vector<std::future<int>> others;
  struct Opener {  // whatever happens, the report ends before the futures wait
    VerifierEvents& e;
    ~Opener() { e.Open(); }
  } opener{ev};
  {
    std::lock_guard<std::mutex> l(ev.mu);
    ev.gate_closed = true;
  }
  verifier_ = 0x5eed0005;
  reporter = std::async(std::launch::async, [&] { return nasgw_fsync(c, &kRoot, &b.handle, nullptr); });
  ASSERT_TRUE(ev.WaitFor(4));  // the report is under way (and held)
  others.reserve(4);
  for (int i = 0; i < 4; i++) {  // over both connections (round robin)
    others.push_back(std::async(std::launch::async, [&] { return nasgw_fsync(c, &kRoot, &a.handle, nullptr); }));
  }
  for (auto& o : others) {
    EXPECT_EQ(o.wait_for(std::chrono::milliseconds(300)), std::future_status::timeout) << "a COMMIT went on";
  }
  ev.Open();
  EXPECT_EQ(reporter.get(), 0);
  for (auto& o : others) EXPECT_EQ(o.get(), 0);
  nasgw_client_close(c);
}

// The table of held files is bounded: past held_files_max, writes are held
// as a whole, which no fsync releases and a new verifier reports lost.
TEST_F(HeadTest, HeldFilesPastTheBoundAreHeldAsAWhole) {
  VerifierEvents ev;
  nasgw_client_options co{};
  co.socket_path = socket_.c_str();
  co.client_name = "v3-head";
  co.reconnect_timeout_ms = 20'000;
  co.verifier_changed = VerifierEvents::Changed;
  co.verifier_arg = &ev;
  co.held_files_max = 2;
  nasgw_client* c = nullptr;
  ASSERT_EQ(nasgw_client_open(&co, &c), 0) << nasgw_client_last_message();
  constexpr uint32_t kHeld = NASGW_UNSTABLE | NASGW_HOLD_UNSTABLE;
  std::vector<nasgw_attr> files;
  for (const char* name : {"h1", "h2", "h3"}) {
    files.push_back(Create(root_.handle, name));
    ASSERT_EQ(nasgw_write(c, &kRoot, &files.back().handle, 0, "x", 1, kHeld, nullptr), 1);
  }
  EXPECT_EQ(nasgw_client_held_files(c), 3u);  // two by name, the third as a whole
  for (const auto& f : files) ASSERT_EQ(nasgw_fsync(c, &kRoot, &f.handle, nullptr), 0);
  EXPECT_EQ(nasgw_client_held_files(c), 1u);  // no fsync releases the whole
  verifier_ = 0x5eed0002;
  ASSERT_EQ(nasgw_fsync(c, &kRoot, &files[0].handle, nullptr), 0);
  EXPECT_EQ(ev.Got(), (std::vector<std::tuple<uint64_t, uint64_t, int>>{{0x5eed0001, 0x5eed0002, 1}}));
  EXPECT_EQ(nasgw_client_held_files(c), 0u);
  nasgw_client_close(c);
}

TEST_F(HeadTest, GarbageClosesOnlyThatConnection) {
  nasgw_attr f = Create(root_.handle, "steady");
  std::atomic<bool> stop{false};
  std::atomic<int> errors{0}, ops{0};
  std::thread worker([&] {
    std::string buf(4096, 'w');
    for (uint64_t i = 0; !stop.load(); i++) {
      if (nasgw_write(client_, &kRoot, &f.handle, (i % 64) * 4096, buf.data(), 4096, 0, nullptr) != 4096) errors++;
      ops++;
    }
  });
  std::mt19937_64 rng(1);
  const uint64_t before = server_->protocol_errors();
  int closed = 0;
  for (int round = 0; round < 40; round++) {
    int fd = RawConnect(socket_);
    ASSERT_GE(fd, 0);
    std::string junk;
    if (round % 4 == 0) {
      junk.resize(rng() % 300);
      for (auto& c : junk) c = static_cast<char>(rng());
    } else {
      // A valid hello, then a frame that is wrong in some way.
      proto::Request h;
      h.op = proto::Op::kHello;
      std::string p = proto::EncodeRequest(h);
      uint8_t hb[proto::kHeaderBytes];
      proto::EncodeHeader({proto::Op::kHello, 1, static_cast<uint32_t>(p.size()), 0}, hb);
      junk.assign(reinterpret_cast<char*>(hb), sizeof(hb));
      junk += p;
      proto::Request g;
      g.op = proto::Op::kGetAttr;
      g.h = FH(root_.handle);
      std::string gp = proto::EncodeRequest(g);
      if (round % 4 == 1) gp.resize(gp.size() - 3);  // truncated arguments
      if (round % 4 == 2) gp += "extra";             // trailing bytes
      uint32_t len = static_cast<uint32_t>(gp.size());
      if (round % 4 == 3) len = proto::kPayloadMax + 1;  // a lying length
      proto::EncodeHeader({proto::Op::kGetAttr, 2, len, 0}, hb);
      junk.append(reinterpret_cast<char*>(hb), sizeof(hb));
      junk += gp;
    }
    (void)!::write(fd, junk.data(), junk.size());
    ::shutdown(fd, SHUT_WR);
    // The server must close (EOF after at most the hello reply), not hang.
    char sink[4096];
    while (::read(fd, sink, sizeof(sink)) > 0) {
    }
    closed++;
    ::close(fd);
  }
  stop = true;
  worker.join();
  EXPECT_EQ(closed, 40);
  EXPECT_EQ(errors.load(), 0);
  EXPECT_GT(ops.load(), 0);
  EXPECT_GE(server_->protocol_errors() - before, 30u);
  nasgw_attr a{};
  EXPECT_EQ(nasgw_getattr(client_, &kRoot, &f.handle, &a), 0);
}

// A head that sends requests and never reads the replies: it must not take
// the workers (others keep being served), and a shutdown still returns.
TEST_F(HeadTest, AHeadThatDoesNotReadCannotStallTheServer) {
  server_->Shutdown(std::chrono::milliseconds(0));
  server_.reset();
  StartServer(/*send_timeout_ms=*/300);
  int fd = RawConnect(socket_);
  ASSERT_GE(fd, 0);
  auto frame = [&](proto::Op op, uint64_t id, const proto::Request& r) {
    std::string p = proto::EncodeRequest(r);
    uint8_t hb[proto::kHeaderBytes];
    proto::EncodeHeader({op, id, static_cast<uint32_t>(p.size()), 0}, hb);
    return std::string(reinterpret_cast<char*>(hb), sizeof(hb)) + p;
  };
  proto::Request hello;
  hello.op = proto::Op::kHello;
  std::string out = frame(proto::Op::kHello, 0, hello);
  proto::Request st;
  st.op = proto::Op::kReadDir;  // big replies, executed by the workers
  st.h = FH(root_.handle);
  st.count = 1024;
  st.flags = proto::kReadDirPlus;
  for (int i = 0; i < 40; i++) Create(root_.handle, ("d" + std::to_string(i)).c_str());
  for (uint64_t i = 1; i <= 3000; i++) out += frame(proto::Op::kReadDir, i, st);
  std::thread flood([&] { (void)!::send(fd, out.data(), out.size(), MSG_NOSIGNAL); });
  // Meanwhile another client is served.
  nasgw_attr f = Create(root_.handle, "served");
  for (int i = 0; i < 20; i++) {
    ASSERT_EQ(nasgw_write(client_, &kRoot, &f.handle, 0, "x", 1, 0, nullptr), 1) << nasgw_client_last_message();
  }
  ::shutdown(fd, SHUT_RDWR);
  flood.join();
  ::close(fd);
  const auto t0 = std::chrono::steady_clock::now();
  server_->Shutdown(std::chrono::milliseconds(100));
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(5)) << "Shutdown waited on the stuck head";
  server_.reset();
  StartServer();
}

// Calls queued while nasgwd is away are all sent when it is back: the
// client's readers never write (a reader blocked writing to nasgwd while
// nasgwd writes to it would deadlock the connection).
TEST_F(HeadTest, CallsQueuedWhileAwayAllComplete) {
  nasgw_attr f = Create(root_.handle, "queued");
  server_->Shutdown(std::chrono::milliseconds(0));
  server_.reset();
  constexpr int kCalls = 1000;
  std::mutex mu;
  std::condition_variable cv;
  int done = 0, ok = 0;
  struct Ctx {
    std::mutex* mu;
    std::condition_variable* cv;
    int* done;
    int* ok;
  } ctx{&mu, &cv, &done, &ok};
  for (int i = 0; i < kCalls; i++) {
    ASSERT_EQ(nasgw_getattr_async(
                  client_, &kRoot, &f.handle,
                  [](void* arg, int result, const nasgw_attr*) {
                    auto* c = static_cast<Ctx*>(arg);
                    std::lock_guard<std::mutex> l(*c->mu);
                    (*c->done)++;
                    if (result == 0) (*c->ok)++;
                    c->cv->notify_all();
                  },
                  &ctx),
              0);
  }
  StartServer();
  std::unique_lock<std::mutex> l(mu);
  ASSERT_TRUE(cv.wait_for(l, std::chrono::seconds(60), [&] { return done == kCalls; })) << done << " of " << kCalls;
  EXPECT_EQ(ok, kCalls);
}

// A completion that calls the library back synchronously (as Ganesha's
// did: an ESTALE READ closed the file's states, RELEASE) runs on the
// connection's reader thread; the reply to that call would come on the same
// connection, which only that thread reads, so the connection, and every
// call later sent on it, hung for good. The call fails at once instead; a
// synchronous call on another client works, and the client carries on.
TEST_F(HeadTest, SynchronousCallFromAnAsyncCallbackFailsInsteadOfHanging) {
  nasgw_attr f = Create(root_.handle, "reentrant");
  nasgw_client_options co{};
  co.socket_path = socket_.c_str();
  co.client_name = "head_test_reentrant";
  co.connections = 1;  // the sync call could only take the caller's connection
  co.reconnect_timeout_ms = 20'000;
  nasgw_client* c = nullptr;
  ASSERT_EQ(nasgw_client_open(&co, &c), 0) << nasgw_client_last_message();
  struct Ctx {
    nasgw_client* self;
    nasgw_client* other;
    nasgw_handle h;
    std::mutex mu;
    std::condition_variable cv;
    bool done = false;
    int result = 1, same = 1, other_rc = 1;
    std::string message;
  };
  auto ctx = std::make_shared<Ctx>();  // outlives a hung callback (leaked below)
  ctx->self = c;
  ctx->other = client_;
  ctx->h = f.handle;
  auto* leak = new std::shared_ptr<Ctx>(ctx);
  ASSERT_EQ(nasgw_getattr_async(
                c, &kRoot, &f.handle,
                [](void* arg, int result, const nasgw_attr*) {
                  auto& x = **static_cast<std::shared_ptr<Ctx>*>(arg);
                  nasgw_attr a{};
                  const int same = nasgw_getattr(x.self, &kRoot, &x.h, &a);
                  std::string message = same != 0 ? nasgw_client_last_message() : "";
                  const int other = nasgw_getattr(x.other, &kRoot, &x.h, &a);
                  std::lock_guard<std::mutex> l(x.mu);
                  x.result = result;
                  x.same = same;
                  x.message = std::move(message);
                  x.other_rc = other;
                  x.done = true;
                  x.cv.notify_all();
                },
                leak),
            0);
  bool done = false;
  {
    std::unique_lock<std::mutex> l(ctx->mu);
    done = ctx->cv.wait_for(l, std::chrono::seconds(10), [&] { return ctx->done; });
  }
  if (!done) {
    // The reader waits for itself: the client cannot be closed (its
    // threads cannot be joined), so it and the context are left behind.
    ADD_FAILURE() << "the synchronous call made in the callback never returned";
    return;
  }
  delete leak;
  EXPECT_EQ(ctx->result, 0);
  EXPECT_EQ(ctx->same, -EDEADLK);
  EXPECT_NE(ctx->message.find("async callback"), std::string::npos) << ctx->message;
  EXPECT_EQ(ctx->other_rc, 0);
  nasgw_attr a{};
  EXPECT_EQ(nasgw_getattr(c, &kRoot, &f.handle, &a), 0) << nasgw_client_last_message();
  EXPECT_EQ(a.handle.ino, f.handle.ino);
  nasgw_client_close(c);
}

// A reply that would not fit the protocol is an error, not a broken
// connection (a file can hold more xattr names than one frame carries).
class HeadBigTest : public HeadTest {
 protected:
  uint64_t LunMib() const override { return 512; }  // room for megabytes of metadata
};

// Request buffers are one bound for every connection (the head's share of
// the memory budget): with room for one largest frame, 32 pipelined 1 MiB
// writes from four sessions (and then 32 reads of them) all complete,
// correct, and every byte is given back. A bound smaller than one
// frame is refused at start.
TEST_F(HeadBigTest, RequestBuffersAreBoundedAndGivenBack) {
  server_->Shutdown(std::chrono::milliseconds(1000));
  HeadServerOptions bad;
  bad.socket_path = socket_;
  bad.request_bytes = proto::kPayloadMax - 1;
  EXPECT_EQ(HeadServer::Start(service_.get(), bad).status().code(), Code::kInvalidArgument);
  StartServerWith([](HeadServerOptions& o) { o.request_bytes = proto::kPayloadMax; });
  nasgw_attr f = Create(root_.handle, "big");
  constexpr int kOps = 32;
  constexpr uint32_t kLen = 1u << 20;
  std::vector<std::string> bufs(kOps), back(kOps, std::string(kLen, '\0'));
  AsyncTally tally;
  AsyncCall call{&tally, kLen};
  auto wcb = [](void* arg, int64_t result, const nasgw_write_result*) {
    auto* c = static_cast<AsyncCall*>(arg);
    c->tally->End(result == c->want);
  };
  // Four sessions (connections) write at once; stable writes, each flushed
  // before its reply, so one holds the bytes while another's frame comes.
  std::vector<nasgw_client*> writers;
  writers.reserve(4);
  for (int c = 0; c < 4; c++) writers.push_back(OpenClient(("writer" + std::to_string(c)).c_str()));
  std::mt19937_64 rng(7);
  for (int i = 0; i < kOps; i++) {
    bufs[i].resize(kLen);
    for (auto& ch : bufs[i]) ch = static_cast<char>(rng());
    ASSERT_EQ(nasgw_write_async(writers[i % 4], &kRoot, &f.handle, uint64_t{kLen} * i, bufs[i].data(), kLen,
                                NASGW_FILE_SYNC, wcb, &call),
              0);
  }
  ASSERT_TRUE(tally.WaitFor(kOps));
  for (int i = 0; i < kOps; i++) {
    ASSERT_EQ(nasgw_read_async(client_, &kRoot, &f.handle, uint64_t{kLen} * i, back[i].data(), kLen, ReadEnded, &call),
              0);
  }
  ASSERT_TRUE(tally.WaitFor(2 * kOps));
  for (nasgw_client* w : writers) nasgw_client_close(w);
  EXPECT_EQ(tally.failed, 0);
  for (int i = 0; i < kOps; i++) EXPECT_TRUE(back[i] == bufs[i]) << i;
  // (Whether a reader had to wait depends on timing: ByteBudgetTest shows
  // the bound itself; here, that the server's use of it neither loses bytes
  // nor stalls.)
  EXPECT_EQ(server_->request_bytes_capacity(), uint64_t{proto::kPayloadMax});
  // Every reply has been received, so every request has given its bytes
  // back (they are released once the reply is sent).
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (server_->request_bytes() != 0 && std::chrono::steady_clock::now() < deadline) std::this_thread::yield();
  EXPECT_EQ(server_->request_bytes(), 0u);
}

TEST_F(HeadBigTest, OversizedReplyIsAnError) {
  nasgw_attr f = Create(root_.handle, "xattrs");
  const std::string pad(240, 'p');
  for (int i = 0; i < 5000; i++) {
    const std::string name = "user." + pad + std::to_string(i);
    ASSERT_EQ(nasgw_setxattr(client_, &kRoot, &f.handle, name.c_str(), "", 0, 0), 0) << i;
  }
  const uint64_t before = server_->protocol_errors();
  EXPECT_EQ(nasgw_listxattr(client_, &kRoot, &f.handle, nullptr, 0), -E2BIG);
  nasgw_attr a{};
  EXPECT_EQ(nasgw_getattr(client_, &kRoot, &f.handle, &a), 0);
  EXPECT_EQ(server_->protocol_errors(), before);
}

// nasgwd's head server goes away and comes back while a client streams
// writes: the client reconnects by itself, resends what was in flight, and
// every byte it was told is written reads back.
TEST_F(HeadTest, ClientSurvivesServerRestart) {
  nasgw_attr f = Create(root_.handle, "stream");
  nasgw_attr opened{};
  ASSERT_EQ(nasgw_open(client_, &kRoot, &f.handle, NASGW_ACCESS_WRITE, &opened), 0);
  std::atomic<bool> stop{false};
  std::atomic<uint64_t> acked{0};
  std::atomic<int> errors{0};
  std::mutex mu;
  std::condition_variable progress;
  std::thread writer([&] {
    std::string buf(8192, '\0');
    for (uint64_t i = 0; !stop.load() || i < 400; i++) {
      std::memset(buf.data(), static_cast<int>('A' + i % 26), buf.size());
      int64_t n = nasgw_write(client_, &kRoot, &f.handle, i * 8192, buf.data(), 8192, NASGW_WRITE_STABLE, nullptr);
      if (n != 8192) {
        errors++;
        break;
      }
      {
        std::lock_guard<std::mutex> l(mu);
        acked = i + 1;
      }
      progress.notify_all();
    }
    progress.notify_all();
  });
  bool stalled = false;
  for (int restart = 0; restart < 3 && !stalled; restart++) {
    {
      // The stream must make progress between restarts (bounded wait).
      std::unique_lock<std::mutex> l(mu);
      const uint64_t at = acked.load();
      stalled = !progress.wait_for(l, std::chrono::seconds(60),
                                   [&] { return acked.load() >= at + 50 || errors.load() != 0; });
    }
    server_->Shutdown(std::chrono::milliseconds(0));
    server_.reset();
    StartServer();
  }
  stop = true;
  writer.join();
  ASSERT_FALSE(stalled) << "the writer stalled at " << acked.load();
  ASSERT_EQ(errors.load(), 0) << nasgw_client_last_message();
  const uint64_t n = acked.load();
  ASSERT_GE(n, 150u);
  std::string back(8192, '\0');
  for (uint64_t i = 0; i < n; i++) {
    ASSERT_EQ(nasgw_read(client_, &kRoot, &f.handle, i * 8192, back.data(), 8192, nullptr), 8192);
    ASSERT_EQ(back, std::string(8192, static_cast<char>('A' + i % 26))) << "block " << i;
  }
  EXPECT_EQ(nasgw_release(client_, &kRoot, &f.handle), 0);
  EXPECT_EQ(nasgw_release(client_, &kRoot, &f.handle), -EBADF);
}

// ---- forwarding between the nodes of a pair

// Node A (the fixture's server) owns the domain; node B's heads are relayed
// to A over loopback TCP while `b_to_partner` says so. Which node serves is
// each service's domain: null on the node that does not.
class HeadForwardTest : public HeadTest {
 protected:
  void SetUp() override {
    HeadTest::SetUp();
    // A again, now with a forward listener that takes only 127.0.0.1.
    server_->Shutdown(std::chrono::milliseconds(0));
    // Both nodes' services act on the one domain object here (a real move
    // opens the domain again), so their caches write through: what one
    // answered, the other reads.
    cache::DataCacheOptions through;
    through.write_through = true;
    service_ = std::make_unique<HeadService>(
        [this] {
          return a_serves_.load() ? HeadDomain{domain_, verifier_.load()} : HeadDomain{};
        },
        LockLimits{}, through);
    StartServerWith([this](HeadServerOptions& o) {
      o.forward_listen = "127.0.0.1:0";
      o.forward_peer = "127.0.0.1:1";  // the partner's address; the port is not checked
      // A's own heads would go to B while A does not serve (none connect then).
      o.forward_route = [this] { return !a_serves_.load(); };
    });
    ASSERT_NE(server_->forward_port(), 0);
    b_socket_ = dir_ + "/b.sock";
    b_service_ = std::make_unique<HeadService>(
        [this] {
          return a_serves_.load() ? HeadDomain{} : HeadDomain{domain_, 0x5eedb};
        },
        LockLimits{}, through);
    HeadServerOptions o;
    o.socket_path = b_socket_;
    o.socket_mode = 0666;
    o.workers = 4;
    o.node_name = "node-b";
    o.forward_listen = "127.0.0.1:0";
    o.forward_peer = "127.0.0.1:" + std::to_string(server_->forward_port());
    o.forward_route = [this] { return b_to_partner_.load(); };
    auto s = HeadServer::Start(b_service_.get(), o);
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    b_server_ = std::move(s.value());
  }
  void TearDown() override {
    if (b_client_ != nullptr) nasgw_client_close(b_client_);
    if (b_server_ != nullptr) b_server_->Shutdown(std::chrono::milliseconds(1000));
    b_server_.reset();
    b_service_.reset();
    HeadTest::TearDown();
  }
  nasgw_client* OpenB() {
    nasgw_client_options co{};
    co.socket_path = b_socket_.c_str();
    co.client_name = "on-node-b";
    co.reconnect_timeout_ms = 20'000;
    nasgw_client* c = nullptr;
    EXPECT_EQ(nasgw_client_open(&co, &c), 0) << nasgw_client_last_message();
    return c;
  }
  // Moves the service: A stops or starts serving, B's heads stop or start
  // going to A, and both cut their connections (what the nodes do).
  void Move(bool to_a) {
    a_serves_ = to_a;
    b_to_partner_ = to_a;
    server_->Reroute("test: the service moved");
    b_server_->Reroute("test: the service moved");
  }
  std::atomic<bool> a_serves_{true}, b_to_partner_{true};
  std::string b_socket_;
  std::unique_ptr<HeadService> b_service_;
  std::unique_ptr<HeadServer> b_server_;
  nasgw_client* b_client_ = nullptr;
};

TEST_F(HeadForwardTest, AHeadOnTheNodeThatDoesNotServeIsServedByTheOwner) {
  b_client_ = OpenB();
  ASSERT_NE(b_client_, nullptr);
  nasgw_attr root{}, f{};
  ASSERT_EQ(nasgw_mount(b_client_, &kRoot, "vol1", &root), 0) << nasgw_client_last_message();
  ASSERT_EQ(nasgw_create(b_client_, &kRoot, &root.handle, "via-b", NASGW_TYPE_REG, 0644, 0, nullptr, 0, &f), 0)
      << nasgw_client_last_message();
  const std::string data(100'000, 'b');
  ASSERT_EQ(nasgw_write(b_client_, &kRoot, &f.handle, 0, data.data(), data.size(), NASGW_WRITE_STABLE, nullptr),
            static_cast<int64_t>(data.size()));
  // Served by A: A's own head sees the file, and A's verifier came back.
  nasgw_attr seen{};
  ASSERT_EQ(nasgw_lookup(client_, &kRoot, &root_.handle, "via-b", &seen), 0);
  EXPECT_EQ(seen.size, data.size());
  std::string back(data.size(), '\0');
  ASSERT_EQ(nasgw_read(client_, &kRoot, &seen.handle, 0, back.data(), back.size(), nullptr),
            static_cast<int64_t>(data.size()));
  EXPECT_EQ(back, data);
  EXPECT_GE(b_server_->relays(), 1u);
  EXPECT_GE(server_->forwarded_in(), 1u);
  EXPECT_EQ(b_server_->relay_failures(), 0u);
  // A connection to A's forward listener from an address other than the
  // partner's is refused: it would state anybody's credentials.
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in from{}, to{};
  from.sin_family = to.sin_family = AF_INET;
  inet_pton(AF_INET, "127.0.0.2", &from.sin_addr);
  inet_pton(AF_INET, "127.0.0.1", &to.sin_addr);
  to.sin_port = htons(server_->forward_port());
  ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&from), sizeof(from)), 0);
  ASSERT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&to), sizeof(to)), 0);
  char c = 0;
  EXPECT_EQ(::recv(fd, &c, 1, 0), 0) << "the forward listener must close a stranger's connection";
  ::close(fd);
}

// The relay carries the head's own credentials as B read them: an
// unprivileged head on B may only act as itself on A.
TEST_F(HeadForwardTest, AnUnprivilegedHeadOnTheOtherNodeStillActsOnlyAsItself) {
  Create(root_.handle, "open", NASGW_TYPE_DIR, 0777);
  Create(root_.handle, "rootonly", NASGW_TYPE_DIR, 0770);
  ASSERT_EQ(chmod(dir_.c_str(), 0755), 0);
  const NobodyResult r = RunAsNobody("claim", b_socket_);
  EXPECT_EQ(r.exit_code, 0) << "the child's check that failed (see the return codes of ClaimOthersCredentials)";
  nasgw_attr mine{}, dir{};
  ASSERT_EQ(nasgw_lookup(client_, &kRoot, &root_.handle, "open", &dir), 0);
  ASSERT_EQ(nasgw_lookup(client_, &kRoot, &dir.handle, "mine", &mine), 0) << "made through B, on A";
  EXPECT_EQ(mine.uid, 65534u);
}

// The service moves from A to B and back under a stream of writes from a
// head on B (relayed, then served by B, then relayed again) and one on A:
// no call fails, and every acknowledged byte reads back.
TEST_F(HeadForwardTest, HeadsFollowTheServiceWhenItMoves) {
  b_client_ = OpenB();
  ASSERT_NE(b_client_, nullptr);
  nasgw_attr root{}, f{};
  ASSERT_EQ(nasgw_mount(b_client_, &kRoot, "vol1", &root), 0) << nasgw_client_last_message();
  ASSERT_EQ(nasgw_create(b_client_, &kRoot, &root.handle, "moving", NASGW_TYPE_REG, 0644, 0, nullptr, 0, &f), 0);
  nasgw_attr opened{};
  ASSERT_EQ(nasgw_open(b_client_, &kRoot, &f.handle, NASGW_ACCESS_WRITE, &opened), 0);
  std::atomic<uint64_t> acked{0};
  std::atomic<int> errors{0};
  std::atomic<bool> stop{false};
  std::mutex mu;
  std::condition_variable progress;
  std::string failure;
  std::thread writer([&] {
    std::string buf(8192, '\0');
    for (uint64_t i = 0; !stop.load(); i++) {
      std::memset(buf.data(), static_cast<int>('a' + i % 26), buf.size());
      const int64_t n =
          nasgw_write(b_client_, &kRoot, &f.handle, i * 8192, buf.data(), 8192, NASGW_WRITE_STABLE, nullptr);
      if (n != 8192) {
        std::lock_guard<std::mutex> l(mu);
        failure = "write " + std::to_string(i) + ": " + std::to_string(n) + " " + nasgw_client_last_message();
        errors++;
        break;
      }
      acked = i + 1;
      progress.notify_all();
    }
    progress.notify_all();
  });
  bool stalled = false;
  uint64_t relayed_before = b_server_->relayed_total();
  for (int move = 0; move < 4 && !stalled; move++) {
    std::unique_lock<std::mutex> l(mu);
    const uint64_t at = acked.load();
    stalled = !progress.wait_for(l, std::chrono::seconds(30), [&] { return acked.load() >= at + 50 || errors.load(); });
    l.unlock();
    Move(move % 2 == 1);  // to B, back to A, ...
  }
  {
    std::unique_lock<std::mutex> l(mu);
    const uint64_t at = acked.load();
    stalled |=
        !progress.wait_for(l, std::chrono::seconds(30), [&] { return acked.load() >= at + 50 || errors.load(); });
  }
  stop = true;
  writer.join();
  ASSERT_FALSE(stalled) << "the writer stalled at " << acked.load();
  ASSERT_EQ(errors.load(), 0) << failure;
  EXPECT_GT(b_server_->relayed_total(), relayed_before) << "B relayed again after the service came back to A";
  nasgw_attr seen{};
  ASSERT_EQ(nasgw_lookup(client_, &kRoot, &root_.handle, "moving", &seen), 0);
  std::string back(8192, '\0');
  for (uint64_t i = 0; i < acked.load(); i++) {
    ASSERT_EQ(nasgw_read(client_, &kRoot, &seen.handle, i * 8192, back.data(), 8192, nullptr), 8192);
    ASSERT_TRUE(back == std::string(8192, static_cast<char>('a' + i % 26))) << "block " << i << " of " << acked.load();
  }
  EXPECT_EQ(nasgw_release(b_client_, &kRoot, &f.handle), 0);
}

// ---- bounded clients

// One request frame as a head sends it.
std::string Frame(proto::Op op, uint64_t id, const proto::Request& r) {
  std::string p = proto::EncodeRequest(r);
  uint8_t hb[proto::kHeaderBytes];
  proto::EncodeHeader({op, id, static_cast<uint32_t>(p.size()), 0}, hb);
  return std::string(reinterpret_cast<char*>(hb), sizeof(hb)) + p;
}

std::string HelloFrame() {
  proto::Request h;
  h.op = proto::Op::kHello;
  return Frame(proto::Op::kHello, 0, h);
}

bool SendAll(int fd, const std::string& bytes) {
  return ::send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(bytes.size());
}

// Reads one reply frame, waiting at most `timeout_ms` for it to start.
bool ReadReply(int fd, proto::FrameHeader* h, std::string* payload, int timeout_ms = 10'000) {
  pollfd p{fd, POLLIN, 0};
  if (::poll(&p, 1, timeout_ms) != 1) return false;
  uint8_t hb[proto::kHeaderBytes];
  if (!proto::ReadFull(fd, hb, sizeof(hb))) return false;
  auto d = proto::DecodeHeader(hb, true);
  if (!d.ok()) return false;
  *h = *d;
  payload->assign(h->length, '\0');
  return proto::ReadFull(fd, payload->data(), payload->size());
}

// A raw connection that said HELLO: its descriptor, and nasgwd's answer.
struct Greeted {
  int fd = -1;
  uint32_t status = ~0u;  // the HELLO reply's
  std::string message;    // a refusal's
};
Greeted RawHello(const std::string& socket) {
  Greeted g;
  g.fd = RawConnect(socket);
  proto::FrameHeader h;
  std::string p;
  if (g.fd >= 0 && SendAll(g.fd, HelloFrame()) && ReadReply(g.fd, &h, &p) && h.op == proto::Op::kHello) {
    g.status = h.status;
    if (h.status != 0) g.message = proto::DecodeError(p);
  }
  return g;
}

// Lines logged while it lives.
class LogCapture {
 public:
  LogCapture() {
    SetLogSink([this](std::string_view line) {
      std::lock_guard<std::mutex> l(mu_);
      lines_.emplace_back(line);
    });
  }
  ~LogCapture() { SetLogSink(nullptr); }
  std::vector<std::string> With(std::string_view text) {
    std::lock_guard<std::mutex> l(mu_);
    std::vector<std::string> out;
    for (const auto& line : lines_) {
      if (line.find(text) != std::string::npos) out.push_back(line);
    }
    return out;
  }

 private:
  std::mutex mu_;
  std::vector<std::string> lines_;
};

// The number after "key=" in a log line (0 when missing).
uint64_t Field(const std::string& line, const std::string& key) {
  const size_t at = line.find(" " + key + "=");
  return at == std::string::npos ? 0 : std::stoull(line.substr(at + key.size() + 2));
}

bool WaitFor(const std::function<bool()>& ok, std::chrono::milliseconds limit = std::chrono::seconds(20)) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  while (!ok()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return true;
}

// As nobody: opens a session, mounts and reads the root's attributes.
int MountAndGetattr(const char* socket, int) {
  nasgw_client* c = RoleClient(socket);
  if (c == nullptr) return 11;
  const nasgw_cred self{65534, 65534, 0, nullptr};
  nasgw_attr root{};
  if (nasgw_mount(c, &self, "vol1", &root) != 0) return 12;
  nasgw_attr a{};
  if (nasgw_getattr(c, &self, &root.handle, &a) != 0) return 13;
  nasgw_client_close(c);
  return 0;
}
[[maybe_unused]] const bool kMountRole = NobodyRoles().emplace("mount", MountAndGetattr).second;

// As nobody: opening a socket it may not open fails at once with EACCES;
// the client library's message goes to `message_fd`.
int OpenForbiddenSocket(const char* socket, int message_fd) {
  nasgw_client_options co{};
  co.socket_path = socket;
  co.connect_timeout_ms = 20'000;
  nasgw_client* c = nullptr;
  const auto t0 = std::chrono::steady_clock::now();
  const int rc = nasgw_client_open(&co, &c);
  const std::string m = nasgw_client_last_message();
  (void)!::write(message_fd, m.data(), m.size());
  if (rc != -EACCES) return 11;
  if (std::chrono::steady_clock::now() - t0 > std::chrono::seconds(10)) return 12;
  return 0;
}
[[maybe_unused]] const bool kOpenRole = NobodyRoles().emplace("open", OpenForbiddenSocket).second;

// A flood of connections from one uid stops at head.max_connections_per_uid
// (each refused with EMFILE and the reason, one log line for all of them);
// a peer of another uid is still served.
TEST_F(HeadTest, ConnectionsPerUidAreBoundedAndOtherUsersStillServed) {
  server_->Shutdown(std::chrono::milliseconds(0));
  server_.reset();
  StartServerWith([](HeadServerOptions& o) { o.max_connections_per_uid = 6; });
  ASSERT_TRUE(WaitFor([&] { return server_->connections() == 2; })) << "the fixture's client reconnects";
  std::vector<int> held;
  int refused = 0;
  {
    LogCapture log;
    for (int i = 0; i < 20; i++) {
      Greeted g = RawHello(socket_);
      ASSERT_GE(g.fd, 0);
      if (g.status == 0) {
        held.push_back(g.fd);
        continue;
      }
      EXPECT_EQ(g.status, static_cast<uint32_t>(EMFILE));
      EXPECT_NE(g.message.find("head.max_connections_per_uid"), std::string::npos) << g.message;
      refused++;
      ::close(g.fd);
    }
    EXPECT_EQ(held.size(), 4u) << "the fixture's client holds 2 of root's 6";
    EXPECT_EQ(refused, 16);
    EXPECT_EQ(server_->refused_connections_uid(), 16u);
    EXPECT_EQ(server_->refused_connections(), 0u);
    // The client library reports the refusal.
    nasgw_client_options co{};
    co.socket_path = socket_.c_str();
    co.connect_timeout_ms = 1000;
    nasgw_client* c = nullptr;
    EXPECT_EQ(nasgw_client_open(&co, &c), -EMFILE);
    EXPECT_NE(std::string(nasgw_client_last_message()).find("nasgwd refused the connection"), std::string::npos)
        << nasgw_client_last_message();
    auto lines = log.With("connection refused: limit reached");
    ASSERT_GE(lines.size(), 1u);
    EXPECT_LE(lines.size(), 2u) << "one line per uid per interval (one more from the client library)";
    EXPECT_NE(lines[0].find("limit=max_connections_per_uid"), std::string::npos) << lines[0];
    EXPECT_NE(lines[0].find("uid=0"), std::string::npos) << lines[0];
  }
  // Another uid has its own allowance.
  ASSERT_EQ(chmod(dir_.c_str(), 0755), 0);
  const NobodyResult child = RunAsNobody("mount", socket_);
  EXPECT_EQ(child.exit_code, 0) << "the child's check that failed (see the return codes of MountAndGetattr)";
  // Root's own connections still work, and a slot freed is taken again.
  nasgw_attr a{};
  EXPECT_EQ(nasgw_getattr(client_, &kRoot, &root_.handle, &a), 0);
  ::close(held.back());
  held.pop_back();
  ASSERT_TRUE(WaitFor([&] { return server_->connections() == 5; }));
  Greeted g = RawHello(socket_);
  EXPECT_EQ(g.status, 0u) << g.message;
  held.push_back(g.fd);
  for (int fd : held) ::close(fd);
}

// A head socket the caller may not open is reported as such (EACCES, with
// the path), at once: not as "cannot reach nasgwd" after the timeout.
TEST_F(HeadTest, ASocketWeMayNotOpenIsPermissionDenied) {
  server_->Shutdown(std::chrono::milliseconds(0));
  server_.reset();
  StartServerWith([](HeadServerOptions& o) { o.socket_mode = 0600; });
  ASSERT_EQ(chmod(dir_.c_str(), 0755), 0);
  const NobodyResult child = RunAsNobody("open", socket_);
  const std::string& message = child.message;
  EXPECT_EQ(child.exit_code, 0) << "11: not EACCES, 12: not at once; message: " << message;
  EXPECT_NE(message.find("permission denied"), std::string::npos) << message;
  EXPECT_NE(message.find(socket_), std::string::npos) << message;
}

// Past head.max_connections a HELLO is refused with ENFILE, whoever asks.
TEST_F(HeadTest, ConnectionsAreBoundedInAll) {
  server_->Shutdown(std::chrono::milliseconds(0));
  server_.reset();
  StartServerWith([](HeadServerOptions& o) { o.max_connections = 4; });
  ASSERT_TRUE(WaitFor([&] { return server_->connections() == 2; }));
  Greeted a = RawHello(socket_), b = RawHello(socket_), c = RawHello(socket_);
  EXPECT_EQ(a.status, 0u);
  EXPECT_EQ(b.status, 0u);
  EXPECT_EQ(c.status, static_cast<uint32_t>(ENFILE));
  EXPECT_NE(c.message.find("head.max_connections"), std::string::npos) << c.message;
  EXPECT_EQ(server_->refused_connections(), 1u);
  // The refused connection is closed once answered.
  char byte;
  EXPECT_EQ(::read(c.fd, &byte, 1), 0);
  ::close(c.fd);
  ::close(a.fd);
  ASSERT_TRUE(WaitFor([&] { return server_->connections() == 3; }));
  Greeted d = RawHello(socket_);
  EXPECT_EQ(d.status, 0u) << d.message;
  ::close(b.fd);
  ::close(d.fd);
  // A head that connects and says nothing is refused without an answer
  // once the limit is reached, and does not hold the acceptor.
  nasgw_attr f = Create(root_.handle, "after");
  EXPECT_NE(f.handle.ino, 0u);
}

// A connection that sends nothing, with nothing in flight, is closed after
// head.idle_timeout_ms with a notice (GOODBYE, id 0, ETIMEDOUT); the client
// library reconnects and carries on, non-idempotent calls included.
TEST_F(HeadTest, IdleConnectionsAreClosedAndTheClientCarriesOn) {
  server_->Shutdown(std::chrono::milliseconds(0));
  server_.reset();
  StartServerWith([](HeadServerOptions& o) { o.idle_timeout_ms = 300; });
  Greeted g = RawHello(socket_);
  ASSERT_EQ(g.status, 0u);
  const auto t0 = std::chrono::steady_clock::now();
  proto::FrameHeader h;
  std::string p;
  ASSERT_TRUE(ReadReply(g.fd, &h, &p, 5000)) << "no notice";
  EXPECT_GE(std::chrono::steady_clock::now() - t0, std::chrono::milliseconds(250));
  EXPECT_EQ(h.op, proto::Op::kGoodbye);
  EXPECT_EQ(h.id, 0u);
  EXPECT_EQ(h.status, static_cast<uint32_t>(ETIMEDOUT));
  EXPECT_NE(proto::DecodeError(p).find("head.idle_timeout_ms"), std::string::npos) << proto::DecodeError(p);
  char byte;
  EXPECT_EQ(::read(g.fd, &byte, 1), 0) << "then closed";
  ::close(g.fd);
  EXPECT_GE(server_->idle_closed(), 1u);

  // The library's connections are closed the same way, again and again.
  for (int i = 0; i < 12; i++) {
    std::this_thread::sleep_for(std::chrono::milliseconds(250 + 10 * i));  // around the timeout
    const std::string name = "idle" + std::to_string(i);
    nasgw_attr a{};
    ASSERT_EQ(nasgw_create(client_, &kRoot, &root_.handle, name.c_str(), NASGW_TYPE_REG, 0644, 0, nullptr, 0, &a), 0)
        << name << ": " << nasgw_client_last_message();
    ASSERT_EQ(nasgw_write(client_, &kRoot, &a.handle, 0, "x", 1, 0, nullptr), 1) << nasgw_client_last_message();
  }
  EXPECT_GE(server_->idle_closed(), 4u);
}

// The client's side of the notice, against a fake nasgwd: a CREATE sent
// just as nasgwd decided the connection was idle was never executed, so the
// library sends it again on its next connection instead of failing it with
// EAGAIN ("may or may not have been done").
TEST(HeadClientTest, AnIdleNoticeMakesTheClientSendAgainWhatItLeftUnexecuted) {
  std::string dir = "/tmp/nasgw-head-test-" + std::to_string(getpid()) + "-XXXXXX";
  ASSERT_NE(mkdtemp(dir.data()), nullptr);
  const std::string path = dir + "/fake.sock";
  int lfd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_un a{};
  a.sun_family = AF_UNIX;
  std::strncpy(a.sun_path, path.c_str(), sizeof(a.sun_path) - 1);
  ASSERT_EQ(::bind(lfd, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
  ASSERT_EQ(::listen(lfd, 4), 0);
  std::atomic<int> creates_seen{0};
  std::thread fake([&] {
    auto read_request = [](int fd, proto::FrameHeader* h, std::string* p) {
      uint8_t hb[proto::kHeaderBytes];
      if (!proto::ReadFull(fd, hb, sizeof(hb))) return false;
      auto d = proto::DecodeHeader(hb, false);
      if (!d.ok()) return false;
      *h = *d;
      p->assign(h->length, '\0');
      return proto::ReadFull(fd, p->data(), p->size());
    };
    auto reply = [](int fd, proto::Op op, uint64_t id, uint32_t status, const std::string& body) {
      uint8_t hb[proto::kHeaderBytes];
      proto::EncodeHeader({op, id, static_cast<uint32_t>(body.size()), status}, hb);
      return SendAll(fd, std::string(reinterpret_cast<char*>(hb), sizeof(hb)) + body);
    };
    // Answers HELLO and MOUNT; the first CREATE gets the idle notice (and
    // the connection is closed), the second a reply.
    for (int round = 0; round < 2; round++) {
      int fd = ::accept(lfd, nullptr, nullptr);
      if (fd < 0) return;
      proto::FrameHeader h;
      std::string p;
      bool open = true;
      while (open && read_request(fd, &h, &p)) {
        proto::Reply r;
        if (h.op == proto::Op::kHello) {
          r.hello.node_name = "fake";
          r.hello.payload_max = proto::kPayloadMax;
          r.hello.inflight_max = 16;
          r.hello.resumed = round > 0;
        } else if (h.op == proto::Op::kMount) {
          r.volume.volume = 1;
          r.volume.record_bytes = 128 << 10;
          r.volume.root.ino = 1;
          r.volume.root.gen = 1;
          r.volume.root.type = proto::FileType::kDirectory;
          r.volume.root.mode = 0755;
          r.volume.root.nlink = 2;
        } else if (h.op == proto::Op::kCreate && creates_seen++ == 0) {
          reply(fd, proto::Op::kGoodbye, 0, ETIMEDOUT, proto::EncodeError("idle"));  // not executed
          break;
        } else if (h.op == proto::Op::kCreate) {
          r.attr.ino = 42;
          r.attr.gen = 7;
          r.attr.type = proto::FileType::kRegular;
          r.attr.mode = 0644;
          r.attr.nlink = 1;
        } else if (h.op != proto::Op::kGoodbye) {
          break;
        }
        open = reply(fd, h.op, h.id, 0, proto::EncodeReply(h.op, r));
      }
      ::close(fd);
    }
  });
  nasgw_client_options co{};
  co.socket_path = path.c_str();
  co.connections = 1;
  co.reconnect_timeout_ms = 10'000;
  nasgw_client* c = nullptr;
  ASSERT_EQ(nasgw_client_open(&co, &c), 0) << nasgw_client_last_message();
  nasgw_handle dir_handle{};
  dir_handle.volume = 1;
  dir_handle.ino = 1;
  dir_handle.scope = 1;
  nasgw_attr out{};
  EXPECT_EQ(nasgw_create(c, &kRoot, &dir_handle, "new", NASGW_TYPE_REG, 0644, 0, nullptr, 0, &out), 0)
      << nasgw_client_last_message();
  EXPECT_EQ(out.handle.ino, 42u);
  EXPECT_EQ(creates_seen.load(), 2);
  nasgw_client_close(c);
  ::shutdown(lfd, SHUT_RDWR);
  fake.join();
  ::close(lfd);
  std::filesystem::remove_all(dir);
}

// Reads stuck in the array hold every data worker; namespace operations
// (their own lane of workers) and attribute reads are answered meanwhile,
// from this session and from another.
TEST_F(HeadTest, ReadsStuckInTheArrayHoldUpNoNamespaceOperation) {
  nasgw_attr f = Create(root_.handle, "big");
  const std::string data(1 << 20, 'r');
  ASSERT_EQ(nasgw_write(client_, &kRoot, &f.handle, 0, data.data(), static_cast<uint32_t>(data.size()), NASGW_FILE_SYNC,
                        nullptr),
            static_cast<int64_t>(data.size()));
  verifier_ = 0x5eed0003;  // a new opening: a cold read cache, so reads go to the array
  // The gate outlives the test body: a read of the cache's own threads (read
  // ahead) may still be inside the hook when the body ends (the device
  // calls a copy of the hook, outside its lock).
  struct Gate {
    std::mutex mu;
    std::condition_variable cv;
    bool hold = true;
    int stuck = 0;
  };
  auto gate = std::make_shared<Gate>();
  for (auto& d : devs_) {
    d->SetFault([gate](const block::IoRequest& r) {
      if (r.op != block::Op::kRead) return Status();
      std::unique_lock<std::mutex> l(gate->mu);
      gate->stuck++;
      gate->cv.notify_all();
      gate->cv.wait(l, [&] { return !gate->hold; });
      return Status();
    });
  }
  auto release = [&] {
    std::lock_guard<std::mutex> l(gate->mu);
    gate->hold = false;
    gate->cv.notify_all();
  };
  // More reads than data workers (4), each of another 64 KiB.
  std::vector<std::thread> readers;
  readers.reserve(8);
  std::atomic<int> read_ok{0};
  for (int i = 0; i < 8; i++) {
    readers.emplace_back([&, i] {
      std::string buf(64 << 10, 0);
      int eof = 0;
      if (nasgw_read(client_, &kRoot, &f.handle, uint64_t(i) << 16, buf.data(), static_cast<uint32_t>(buf.size()),
                     &eof) == static_cast<int64_t>(buf.size()) &&
          buf == data.substr(0, buf.size())) {
        read_ok++;
      }
    });
  }
  {
    std::unique_lock<std::mutex> l(gate->mu);
    ASSERT_TRUE(gate->cv.wait_for(l, std::chrono::seconds(30), [&] { return gate->stuck >= 4; })) << gate->stuck;
  }
  // Namespace operations and attribute reads, from another session, while
  // every data worker waits on the array.
  auto ns_ops = std::async(std::launch::async, [&] {
    nasgw_client* other = OpenClient("other");
    if (other == nullptr) return false;
    bool ok = true;
    nasgw_attr d{}, a{};
    ok = ok && nasgw_create(other, &kRoot, &root_.handle, "dir", NASGW_TYPE_DIR, 0755, 0, nullptr, 0, &d) == 0;
    for (int i = 0; ok && i < 20; i++) {
      ok = nasgw_create(other, &kRoot, &d.handle, ("f" + std::to_string(i)).c_str(), NASGW_TYPE_REG, 0644, 0, nullptr,
                        0, &a) == 0;
    }
    nasgw_dirent ents[32];
    uint32_t count = 0;
    int eof = 0;
    ok = ok && nasgw_readdir(other, &kRoot, &d.handle, 0, 32, 0, ents, nullptr, &count, &eof) == 0 && count == 20;
    ok = ok && nasgw_getattr(other, &kRoot, &f.handle, &a) == 0 && a.size == data.size();
    nasgw_client_close(other);
    return ok;
  });
  const bool answered = ns_ops.wait_for(std::chrono::seconds(20)) == std::future_status::ready;
  release();
  for (auto& t : readers) t.join();
  EXPECT_TRUE(answered) << "namespace operations waited behind reads stuck in the array";
  EXPECT_TRUE(ns_ops.get());
  EXPECT_EQ(read_ok, 8);
  for (auto& d : devs_) d->SetFault(nullptr);
}

// The clock of the leases below: a test moves it past a lease's end.
std::atomic<uint64_t> g_lease_now{uint64_t{1000} * kNanosPerMilli * 1000};
uint64_t LeaseNow() {
  return g_lease_now.load();
}
constexpr uint64_t kLeaseGiveUpNs = uint64_t{8000} * kNanosPerMilli;

// A node hung past its lease (SIGSTOP, a paused VM, a stuck kernel) may
// wake before its watchdog looks, while another node has taken the reserve
// over and changed it. It must not answer from what it holds: a read that
// ran across the lease's end, a lookup, a lock grant. What went through the
// write gate before the array refused its key stands (the new owner has
// it).
// Each request answered from the domain is told to the served hook (a
// node's takeover timeline ends at the first: Node::NoteServed); one
// refused because no domain is open here is not.
TEST_F(HeadTest, AnsweredRequestsAreNotedAndRefusedOnesAreNot) {
  nasgw_attr a;
  ASSERT_EQ(nasgw_getattr(client_, &kRoot, &root_.handle, &a), 0);
  ASSERT_FALSE(Served().empty());
  EXPECT_EQ(Served().back(), proto::Op::kGetAttr);
  const size_t before = Served().size();
  std::shared_ptr<fs::Domain> kept;
  {
    std::lock_guard<std::mutex> l(lease_mu_);
    kept = std::move(domain_);
  }
  EXPECT_EQ(nasgw_getattr(client_, &kRoot, &root_.handle, &a), -EHOSTUNREACH);
  EXPECT_EQ(Served().size(), before) << "an unserved request was noted as served";
  {
    std::lock_guard<std::mutex> l(lease_mu_);
    domain_ = std::move(kept);
  }
  ASSERT_EQ(nasgw_getattr(client_, &kRoot, &root_.handle, &a), 0);
  EXPECT_EQ(Served().size(), before + 1);
}

TEST_F(HeadTest, PastItsLeaseANodeAnswersNothingFromWhatItHolds) {
  auto gate = std::make_shared<block::WriteGate>();
  {
    std::lock_guard<std::mutex> l(lease_mu_);
    lease_ = std::make_shared<fs::Lease>(gate, kLeaseGiveUpNs, &LeaseNow);
  }
  nasgw_attr f = Create(root_.handle, "f");
  const std::string data(64 << 10, 'd');
  ASSERT_EQ(nasgw_write(client_, &kRoot, &f.handle, 0, data.data(), static_cast<uint32_t>(data.size()), NASGW_FILE_SYNC,
                        nullptr),
            static_cast<int64_t>(data.size()));
  nasgw_lock_info conflict{};
  ASSERT_EQ(nasgw_lock(client_, &kRoot, &f.handle, 7, NASGW_LOCK_WRITE, 0, 10, &conflict), 0);

  // A read that reaches the array (a new opening: a cold cache), and the
  // node hangs past its lease while the array answers.
  verifier_ = 0x5eed0005;
  // Shared: a read ahead of the cache may still be in a copy of the hook.
  auto jumped = std::make_shared<std::atomic<bool>>(false);
  for (auto& d : devs_) {
    d->SetFault([jumped](const block::IoRequest& r) {
      if (r.op == block::Op::kRead && !jumped->exchange(true)) g_lease_now += 2 * kLeaseGiveUpNs;
      return Status();
    });
  }
  std::string buf(data.size(), 0);
  int eof = 0;
  EXPECT_EQ(nasgw_read(client_, &kRoot, &f.handle, 0, buf.data(), static_cast<uint32_t>(buf.size()), &eof),
            -EHOSTUNREACH)
      << "a read that ran across the end of the lease was answered";
  for (auto& d : devs_) d->SetFault(nullptr);
  EXPECT_TRUE(jumped->load()) << "the read never reached the array";
  EXPECT_FALSE(gate->is_open()) << "the node that found its lease run out did not fence itself";
  EXPECT_EQ(gate->reason().code(), Code::kFenced);
  EXPECT_NE(gate->reason().ToString().find("lease not renewed"), std::string::npos) << gate->reason().ToString();
  // Nothing more is answered from this node's memory.
  nasgw_attr a{};
  EXPECT_EQ(nasgw_getattr(client_, &kRoot, &f.handle, &a), -EHOSTUNREACH);
  EXPECT_EQ(nasgw_lookup(client_, &kRoot, &root_.handle, "f", &a), -EHOSTUNREACH);
  EXPECT_EQ(nasgw_lock(client_, &kRoot, &f.handle, 8, NASGW_LOCK_WRITE, 20, 10, &conflict), -EHOSTUNREACH);

  // A stable write that went through the gate before the node hung is
  // answered when it wakes: the array (and so the new owner) has it.
  auto gate2 = std::make_shared<block::WriteGate>();
  {
    std::lock_guard<std::mutex> l(lease_mu_);
    lease_ = std::make_shared<fs::Lease>(gate2, kLeaseGiveUpNs, &LeaseNow);
  }
  auto jumped2 = std::make_shared<std::atomic<bool>>(false);
  for (auto& d : devs_) {
    d->SetFault([jumped2](const block::IoRequest& r) {
      // The write's own data (not a background flush of the store's).
      const std::string_view mark("mmmmmmmmmmmmmmmm");
      bool ours = false;
      for (const auto& v : r.iov) {
        ours = ours || std::string_view(static_cast<const char*>(v.base), v.len).find(mark) != std::string_view::npos;
      }
      if (r.op == block::Op::kWrite && ours && !jumped2->exchange(true)) g_lease_now += 2 * kLeaseGiveUpNs;
      return Status();
    });
  }
  const std::string more(4096, 'm');
  EXPECT_EQ(nasgw_write(client_, &kRoot, &f.handle, 0, more.data(), static_cast<uint32_t>(more.size()), NASGW_FILE_SYNC,
                        nullptr),
            static_cast<int64_t>(more.size()))
      << nasgw_client_last_message();
  for (auto& d : devs_) d->SetFault(nullptr);
  EXPECT_TRUE(jumped2->load()) << "the write never reached the array";
  // The next request finds the lease run out.
  EXPECT_EQ(nasgw_getattr(client_, &kRoot, &f.handle, &a), -EHOSTUNREACH);
  EXPECT_FALSE(gate2->is_open());
  // The write is the domain's (logged: the cache puts it in place; its
  // durability across an owner's death is the cache's crash tests').
  ASSERT_TRUE(service_->FlushCache().ok());
  std::string back(more.size(), 0);
  auto got = domain_->Read(f.handle.volume, f.handle.ino, 0, back.size(), back.data());
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_EQ(back, more);
  {
    std::lock_guard<std::mutex> l(lease_mu_);
    lease_.reset();
  }
}

// A lease clock that moves 0.6 of the give-up time at each look: the look
// before a request finds the lease held, the look after finds it run out.
std::atomic<uint64_t> g_step_now{uint64_t{5000} * kNanosPerMilli * 1000};
uint64_t StepNow() {
  return g_step_now.fetch_add(kLeaseGiveUpNs * 6 / 10);
}

// Which answers stand when the lease ran out while the request ran: a write
// that reached the array (FILE_SYNC) does; an UNSTABLE write, answered from
// the cache's memory, does not, nor a read.
TEST_F(HeadTest, OnlyChangesThatReachedTheArrayAreAnsweredPastTheLease) {
  nasgw_attr f = Create(root_.handle, "g");
  const std::string data(8192, 'u');
  auto run_out_while_it_runs = [&] {
    auto gate = std::make_shared<block::WriteGate>();
    std::lock_guard<std::mutex> l(lease_mu_);
    lease_ = std::make_shared<fs::Lease>(gate, kLeaseGiveUpNs, &StepNow);
    return gate;
  };
  auto gate = run_out_while_it_runs();
  EXPECT_EQ(nasgw_write(client_, &kRoot, &f.handle, 0, data.data(), static_cast<uint32_t>(data.size()), NASGW_FILE_SYNC,
                        nullptr),
            static_cast<int64_t>(data.size()))
      << nasgw_client_last_message();
  gate = run_out_while_it_runs();
  EXPECT_EQ(nasgw_write(client_, &kRoot, &f.handle, 0, data.data(), static_cast<uint32_t>(data.size()), NASGW_UNSTABLE,
                        nullptr),
            -EHOSTUNREACH)
      << "an unstable write answered from memory after the lease ran out";
  EXPECT_FALSE(gate->is_open());
  gate = run_out_while_it_runs();
  nasgw_attr a{};
  EXPECT_EQ(nasgw_getattr(client_, &kRoot, &f.handle, &a), -EHOSTUNREACH);
  EXPECT_FALSE(gate->is_open());
  {
    std::lock_guard<std::mutex> l(lease_mu_);
    lease_.reset();
  }
  EXPECT_EQ(nasgw_getattr(client_, &kRoot, &f.handle, &a), 0);
  EXPECT_EQ(a.size, data.size());
}

// Past head.max_inflight requests of one connection nasgwd stops reading
// it: a head that sends without reading the replies has exactly
// max_inflight requests in nasgwd (the workers' and the queued), not the
// worker queue's worth; its connection is not idle meanwhile; and every
// request is answered once it reads.
TEST_F(HeadTest, InflightCapStopsReadingTheConnection) {
  server_->Shutdown(std::chrono::milliseconds(0));
  server_.reset();
  StartServerWith([](HeadServerOptions& o) {
    o.idle_timeout_ms = 300;
    o.send_timeout_ms = 60'000;
  });
  // STATFS: small replies, executed by the workers. Enough of them that the
  // replies fill both socket buffers. Framed before the connection is made:
  // framing 40,000 takes longer than the idle timeout on a slow (TSan,
  // loaded) run, and an idle connection is closed.
  proto::Request st;
  st.op = proto::Op::kStatfs;
  st.h.volume = root_.handle.volume;
  constexpr int kRequests = 40'000;
  std::string out;
  for (int i = 1; i <= kRequests; i++) out += Frame(proto::Op::kStatfs, static_cast<uint64_t>(i), st);
  Greeted g = RawHello(socket_);
  ASSERT_EQ(g.status, 0u);
  std::thread flood([&] { SendAll(g.fd, out); });
  // The sender stops (its socket shut down) and is joined however the test ends.
  struct Joiner {
    std::thread& t;
    int fd;
    ~Joiner() {
      if (t.joinable()) {
        ::shutdown(fd, SHUT_RDWR);
        t.join();
      }
    }
  } joiner{flood, g.fd};
  // The namespace lane's 2 workers (half of 4) hold a request each (one
  // writing, one waiting to write); the other 14 of the 16 wait in the
  // queue, and nothing more is read. Settled: 14 queued and no request
  // answered for a while (the queue can read 14 for a moment while replies
  // still drain into the socket buffers, on a loaded machine).
  ASSERT_TRUE(WaitFor([&] {
    if (server_->queued() != 14) return false;
    const uint64_t before = server_->requests();
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    return server_->queued() == 14 && server_->requests() == before;
  })) << server_->queued();
  const uint64_t answered = server_->requests();
  std::this_thread::sleep_for(std::chrono::milliseconds(600));  // twice the idle timeout
  EXPECT_EQ(server_->queued(), 14u);
  EXPECT_EQ(server_->requests(), answered);
  // The connection was not closed as idle meanwhile (it has requests in
  // flight): every reply arrives.
  int ok = 0;
  for (int i = 0; i < kRequests; i++) {
    proto::FrameHeader h;
    std::string p;
    ASSERT_TRUE(ReadReply(g.fd, &h, &p)) << "reply " << i;
    ASSERT_EQ(h.op, proto::Op::kStatfs) << "reply " << i;
    if (h.status == 0) ok++;
  }
  EXPECT_EQ(ok, kRequests);
  flood.join();
  ::close(g.fd);
}

// A flood of malformed frames (10,000, over as many connections, from
// several threads) is counted frame for frame, and logged in a bounded
// number of lines whose counts add up to the frames.
TEST_F(HeadTest, MalformedFrameFloodIsCountedAndLoggedBounded) {
  const uint64_t before = server_->protocol_errors();
  LogCapture log;
  constexpr int kThreads = 8, kEach = 1250;
  std::atomic<int> sent{0};
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<std::thread> threads;
  threads.reserve(kThreads);
  for (int t = 0; t < kThreads; t++) {
    threads.emplace_back([&] {
      std::string junk(proto::kHeaderBytes, 'J');  // a bad magic
      for (int i = 0; i < kEach; i++) {
        int fd = RawConnect(socket_);
        if (fd < 0) continue;
        if (SendAll(fd, junk)) sent++;
        char sink[64];
        while (::read(fd, sink, sizeof(sink)) > 0) {
        }
        ::close(fd);
      }
    });
  }
  for (auto& t : threads) t.join();
  const auto seconds = std::chrono::duration_cast<std::chrono::seconds>(std::chrono::steady_clock::now() - t0).count();
  ASSERT_EQ(sent.load(), kThreads * kEach);
  EXPECT_EQ(server_->protocol_errors() - before, static_cast<uint64_t>(kThreads * kEach));
  // The lines held back come out at the latest when the server stops.
  server_->Shutdown(std::chrono::milliseconds(1000));
  const auto lines = log.With("closing connection: protocol error");
  EXPECT_LE(lines.size(), static_cast<size_t>(3 + seconds / 10)) << "one per uid per 10 s, and the last at stop";
  uint64_t counted = 0;
  for (const auto& l : lines) {
    EXPECT_NE(l.find(" uid=0 "), std::string::npos) << l;
    counted += Field(l, "count");
  }
  EXPECT_EQ(counted, static_cast<uint64_t>(kThreads * kEach));
  server_.reset();
  StartServer();
}

constexpr uint64_t kToEnd = 0;  // a lock length: to the end of the file
constexpr uint64_t kLast = ~0ull;

// Two clients are two sessions: their locks conflict as two processes'
// POSIX locks do, and so do two owners of one client.
TEST_F(HeadTest, LocksConflictBetweenSessionsAndOwners) {
  nasgw_attr f = Create(root_.handle, "locked");
  nasgw_client* other = OpenClient("other");
  ASSERT_NE(other, nullptr);
  nasgw_lock_info c{};
  ASSERT_EQ(nasgw_lock(client_, &kRoot, &f.handle, 1, NASGW_LOCK_WRITE, 0, 100, &c), 0) << nasgw_client_last_message();
  ASSERT_EQ(nasgw_lock(client_, &kRoot, &f.handle, 1, NASGW_LOCK_WRITE, 0, 100, &c), 0);  // again: a no-op
  EXPECT_EQ(nasgw_lock(other, &kRoot, &f.handle, 1, NASGW_LOCK_READ, 50, 10, &c), -EAGAIN);
  EXPECT_EQ(c.type, NASGW_LOCK_WRITE);
  EXPECT_EQ(c.start, 0u);
  EXPECT_EQ(c.length, 100u);
  EXPECT_EQ(c.owner, 1u);
  EXPECT_NE(c.session, 0u);
  const uint64_t first_session = c.session;
  EXPECT_NE(std::string(nasgw_client_last_message()).find("conflicts with a write lock"), std::string::npos);
  // Another owner of the same client conflicts too.
  EXPECT_EQ(nasgw_lock(client_, &kRoot, &f.handle, 2, NASGW_LOCK_READ, 99, 1, nullptr), -EAGAIN);
  // Readers share, beside the write lock.
  ASSERT_EQ(nasgw_lock(other, &kRoot, &f.handle, 1, NASGW_LOCK_READ, 100, kToEnd, &c), 0);
  ASSERT_EQ(nasgw_lock(client_, &kRoot, &f.handle, 2, NASGW_LOCK_READ, 1000, 10, &c), 0);
  // TESTLOCK reports what LOCK would meet, and changes nothing.
  ASSERT_EQ(nasgw_testlock(client_, &kRoot, &f.handle, 1, NASGW_LOCK_WRITE, 150, 1, &c), 0);
  EXPECT_EQ(c.type, NASGW_LOCK_READ);
  EXPECT_EQ(c.start, 100u);
  EXPECT_EQ(c.length, 0u);  // to the end
  EXPECT_NE(c.session, first_session);
  ASSERT_EQ(nasgw_testlock(client_, &kRoot, &f.handle, 1, NASGW_LOCK_WRITE, 0, 100, &c), 0);
  EXPECT_EQ(c.type, 0u);  // its own lock does not conflict
  ASSERT_EQ(nasgw_testlock(other, &kRoot, &f.handle, 1, NASGW_LOCK_READ, 100, 5, &c), 0);
  EXPECT_EQ(c.type, 0u);
  // A downgrade lets the other reader in; an unlock lets its writer in.
  ASSERT_EQ(nasgw_lock(client_, &kRoot, &f.handle, 1, NASGW_LOCK_READ, 50, 50, nullptr), 0);
  EXPECT_EQ(nasgw_lock(other, &kRoot, &f.handle, 1, NASGW_LOCK_READ, 50, 10, &c), 0);
  EXPECT_EQ(nasgw_lock(other, &kRoot, &f.handle, 1, NASGW_LOCK_WRITE, 0, 10, &c), -EAGAIN);
  ASSERT_EQ(nasgw_unlock(client_, &kRoot, &f.handle, 1, 0, 50), 0);
  EXPECT_EQ(nasgw_lock(other, &kRoot, &f.handle, 1, NASGW_LOCK_WRITE, 0, 10, &c), 0);
  ASSERT_EQ(nasgw_unlock(client_, &kRoot, &f.handle, 9, 0, kToEnd), 0);  // unlocking nothing is fine
  // A write over the other's read range is refused; its own ranges merge.
  EXPECT_EQ(nasgw_lock(client_, &kRoot, &f.handle, 2, NASGW_LOCK_WRITE, 1000, 10, &c), -EAGAIN);
  EXPECT_EQ(c.start, 100u);
  ASSERT_EQ(nasgw_lock(other, &kRoot, &f.handle, 1, NASGW_LOCK_READ, 60, 40, nullptr), 0);  // fills 60..99
  EXPECT_TRUE(WaitForLocks(f.handle, {{1, NASGW_LOCK_READ, 50, 99},
                                      {1, NASGW_LOCK_WRITE, 0, 9},
                                      {1, NASGW_LOCK_READ, 50, kLast},  // other's 50..59, 60..99, 100.. merged
                                      {2, NASGW_LOCK_READ, 1000, 1009}}))
      << "other's ranges merge; each owner keeps its own";
  nasgw_client_close(other);
}

// Share reservations across sessions (an SMB share mode against an NFSv4
// OPEN's deny): access meets deny either way; one owner's call replaces
// its reservation; access 0 and deny 0 release it.
TEST_F(HeadTest, ShareReservationsConflictAcrossSessions) {
  constexpr uint32_t R = NASGW_SHARE_READ, W = NASGW_SHARE_WRITE, D = NASGW_SHARE_DELETE;
  nasgw_attr f = Create(root_.handle, "shared", NASGW_TYPE_REG, 0644);
  nasgw_attr d = Create(root_.handle, "sdir", NASGW_TYPE_DIR, 0755);
  nasgw_client* other = OpenClient("other");
  ASSERT_NE(other, nullptr);
  const uint64_t errors = server_->protocol_errors();
  ASSERT_EQ(nasgw_share(client_, &kRoot, &f.handle, 1, R, W), 0) << nasgw_client_last_message();
  EXPECT_EQ(nasgw_share(other, &kRoot, &f.handle, 1, R | W, 0), -EBUSY);
  EXPECT_NE(std::string(nasgw_client_last_message()).find("share reservation conflict"), std::string::npos)
      << nasgw_client_last_message();
  EXPECT_EQ(nasgw_share(other, &kRoot, &f.handle, 1, R, R), -EBUSY);    // denies what the first does
  EXPECT_EQ(nasgw_share(client_, &kRoot, &f.handle, 2, W, 0), -EBUSY);  // another owner of the same session
  ASSERT_EQ(nasgw_share(other, &kRoot, &f.handle, 1, R, W | D), 0);     // readers denying writers agree
  EXPECT_EQ(nasgw_share(client_, &kRoot, &f.handle, 1, R | W, 0), -EBUSY) << "an upgrade is checked";
  ASSERT_EQ(nasgw_share(client_, &kRoot, &f.handle, 1, R, 0), 0);  // a downgrade
  EXPECT_EQ(service_->locks().Shares({f.handle.volume, f.handle.ino}).size(), 2u);
  ASSERT_EQ(nasgw_share(other, &kRoot, &f.handle, 1, 0, 0), 0);  // release
  ASSERT_EQ(nasgw_share(other, &kRoot, &f.handle, 1, 0, 0), 0);  // nothing held: fine
  ASSERT_EQ(nasgw_share(other, &kRoot, &f.handle, 1, R | W, 0), 0);
  // Bad values fail here without costing the connection; regular files only.
  EXPECT_EQ(nasgw_share(client_, &kRoot, &f.handle, 1, 8, 0), -EINVAL);
  EXPECT_EQ(nasgw_share(client_, &kRoot, &d.handle, 1, R, 0), -EINVAL);
  EXPECT_EQ(server_->protocol_errors(), errors);
  // The access named needs the permission: read for R, write for W; a
  // user with neither may still take a delete-only reservation (the
  // directory decides deletes).
  const nasgw_cred alice{1000, 100, 0, nullptr};
  EXPECT_EQ(nasgw_share(client_, &alice, &f.handle, 3, W, 0), -EACCES);
  EXPECT_EQ(nasgw_share(client_, &alice, &f.handle, 3, R, 0), 0);  // 0644: others read
  ASSERT_EQ(nasgw_share(client_, &alice, &f.handle, 3, 0, 0), 0);
  // Closing a client releases its reservations.
  nasgw_client_close(other);
  ASSERT_EQ(nasgw_share(client_, &kRoot, &f.handle, 1, R | W, R | W | D), 0);
  // A deleted file: a new reservation is ESTALE, a release still works.
  ASSERT_EQ(nasgw_unlink(client_, &kRoot, &root_.handle, "shared"), 0);
  EXPECT_EQ(nasgw_share(client_, &kRoot, &f.handle, 2, R, 0), -ESTALE);
  ASSERT_EQ(nasgw_share(client_, &kRoot, &f.handle, 1, 0, 0), 0);
  EXPECT_TRUE(service_->locks().Shares({f.handle.volume, f.handle.ino}).empty());
}

// nasgwd restarts: the client takes its reservations again before its
// first call; one that conflicts then is dropped.
TEST_F(HeadTest, ShareReservationsAreTakenAgainAfterRestart) {
  constexpr uint32_t R = NASGW_SHARE_READ, W = NASGW_SHARE_WRITE;
  nasgw_attr f = Create(root_.handle, "kept-shared");
  nasgw_attr g = Create(root_.handle, "contested-shared");
  ASSERT_EQ(nasgw_share(client_, &kRoot, &f.handle, 5, R, W), 0);
  ASSERT_EQ(nasgw_share(client_, &kRoot, &g.handle, 5, R | W, 0), 0);
  server_->Shutdown(std::chrono::milliseconds(0));
  server_.reset();
  EXPECT_EQ(service_->locks().size(), 0u) << "the sessions ended with nasgwd";
  // Someone else takes g, denying writers, while nasgwd is back and the
  // client has not reconnected yet.
  ASSERT_TRUE(service_->locks().Shares({g.handle.volume, g.handle.ino}).empty());
  const LockOwner intruder{999999, 1};
  ASSERT_EQ(service_->locks().Share({g.handle.volume, g.handle.ino}, intruder, {R, W}, nullptr), LockResult::kOk);
  StartServer();
  nasgw_attr a{};
  ASSERT_EQ(nasgw_getattr(client_, &kRoot, &root_.handle, &a), 0);  // after the handshake's re-share
  auto kept = service_->locks().Shares({f.handle.volume, f.handle.ino});
  ASSERT_EQ(kept.size(), 1u);
  EXPECT_EQ(kept[0].who.owner, 5u);
  EXPECT_EQ(kept[0].mode, (ShareMode{R, W}));
  auto contested = service_->locks().Shares({g.handle.volume, g.handle.ino});
  ASSERT_EQ(contested.size(), 1u);
  EXPECT_EQ(contested[0].who, intruder) << "the conflicting reservation was dropped, not taken";
  // A later call of the owner is checked as a new one.
  EXPECT_EQ(nasgw_share(client_, &kRoot, &g.handle, 5, R | W, 0), -EBUSY);
  nasgw_client* other = OpenClient("other");
  ASSERT_NE(other, nullptr);
  EXPECT_EQ(nasgw_share(other, &kRoot, &f.handle, 1, W, 0), -EBUSY) << "the kept one still denies writers";
  nasgw_client_close(other);
}

// Recalls a lease holder receives, for a test to wait on.
struct Recalls {
  std::mutex mu;
  std::condition_variable cv;
  std::vector<std::tuple<uint64_t, uint64_t, uint32_t>> got;  // ino, owner, break_to
  static void On(void* arg, uint32_t, uint64_t ino, uint64_t owner, uint32_t break_to) {
    auto* r = static_cast<Recalls*>(arg);
    std::lock_guard<std::mutex> l(r->mu);
    r->got.emplace_back(ino, owner, break_to);
    r->cv.notify_all();
  }
  bool WaitFor(size_t n) {
    std::unique_lock<std::mutex> l(mu);
    return cv.wait_for(l, std::chrono::seconds(20), [&] { return got.size() >= n; });
  }
};

// A lease held by one head (a client named "smbd") is recalled when
// another head writes, changes the size or reads under a write lease; the
// operation fails with EINPROGRESS (or, with recall_wait_ms, waits) until
// the holder gives back what it needs.
TEST_F(HeadTest, LeasesAreRecalledBeforeAnotherHeadProceeds) {
  constexpr uint32_t LR = NASGW_LEASE_READ, LW = NASGW_LEASE_READ | NASGW_LEASE_WRITE;
  nasgw_attr f = Create(root_.handle, "leased", NASGW_TYPE_REG, 0666);
  Recalls recalls;
  nasgw_client_options co{};
  co.socket_path = socket_.c_str();
  co.client_name = "smbd";
  co.recall = &Recalls::On;
  co.recall_arg = &recalls;
  nasgw_client* holder = nullptr;
  ASSERT_EQ(nasgw_client_open(&co, &holder), 0) << nasgw_client_last_message();
  nasgw_client* same = OpenClient("smbd");  // the holder's domain: its head arbitrates
  ASSERT_NE(same, nullptr);
  ASSERT_EQ(nasgw_lease(holder, &kRoot, &f.handle, 7, LW), 0) << nasgw_client_last_message();
  ASSERT_EQ(nasgw_lease(holder, &kRoot, &f.handle, 7, LW), 0);  // again: the same
  const char data[] = "from-another-head";
  EXPECT_EQ(nasgw_write(same, &kRoot, &f.handle, 0, data, 4, NASGW_FILE_SYNC, nullptr), 4)
      << "the holder's own domain is not held up";
  EXPECT_TRUE(recalls.got.empty());
  // Another head (client_, "head_test") reads: a write lease is in the way.
  char buf[64];
  int eof = 0;
  uint64_t at = 0;
  EXPECT_EQ(nasgw_seek(client_, &kRoot, &f.handle, 0, 1, &at), -EINPROGRESS)
      << "a SEEK too: the holder's cached writes could fill a hole";
  EXPECT_EQ(nasgw_read(client_, &kRoot, &f.handle, 0, buf, sizeof(buf), &eof), -EINPROGRESS);
  EXPECT_NE(std::string(nasgw_client_last_message()).find("being recalled"), std::string::npos)
      << nasgw_client_last_message();
  ASSERT_TRUE(recalls.WaitFor(1));
  EXPECT_EQ(recalls.got[0], std::make_tuple(f.handle.ino, uint64_t{7}, LR)) << "recalled to read";
  EXPECT_EQ(nasgw_read(client_, &kRoot, &f.handle, 0, buf, sizeof(buf), &eof), -EINPROGRESS) << "still";
  ASSERT_EQ(nasgw_lease(holder, &kRoot, &f.handle, 7, LR), 0);  // gives back writing
  EXPECT_EQ(nasgw_read(client_, &kRoot, &f.handle, 0, buf, sizeof(buf), &eof), 4);
  EXPECT_EQ(recalls.got.size(), 1u) << "recalled once";
  // A write (and a truncation) needs the read lease back too.
  EXPECT_EQ(nasgw_write(client_, &kRoot, &f.handle, 0, data, sizeof(data), NASGW_FILE_SYNC, nullptr), -EINPROGRESS);
  nasgw_sattr trunc{};
  trunc.mask = NASGW_SET_SIZE;
  EXPECT_EQ(nasgw_setattr(client_, &kRoot, &f.handle, &trunc, nullptr), -EINPROGRESS);
  ASSERT_TRUE(recalls.WaitFor(2));
  EXPECT_EQ(recalls.got[1], std::make_tuple(f.handle.ino, uint64_t{7}, 0u));
  // With recall_wait_ms the writer's library waits: it goes on once the
  // holder releases (here, from the recall's own thread... of the test).
  nasgw_client_options wo{};
  wo.socket_path = socket_.c_str();
  wo.client_name = "fuse";
  wo.recall_wait_ms = 20000;
  nasgw_client* waiter = nullptr;
  ASSERT_EQ(nasgw_client_open(&wo, &waiter), 0);
  auto written = std::async(std::launch::async, [&] {
    return nasgw_write(waiter, &kRoot, &f.handle, 0, data, sizeof(data), NASGW_FILE_SYNC, nullptr);
  });
  EXPECT_EQ(written.wait_for(std::chrono::milliseconds(50)), std::future_status::timeout) << "held up by the lease";
  ASSERT_EQ(nasgw_lease(holder, &kRoot, &f.handle, 7, 0), 0);  // released
  EXPECT_EQ(written.get(), int64_t{sizeof(data)}) << nasgw_client_last_message();
  const int64_t got = nasgw_read(client_, &kRoot, &f.handle, 0, buf, sizeof(buf), &eof);
  ASSERT_EQ(got, int64_t{sizeof(data)});
  EXPECT_EQ(std::string(buf, got), std::string(data, sizeof(data)));
  EXPECT_TRUE(service_->locks().Leases({f.handle.volume, f.handle.ino}).empty());
  // Checks: regular files, permissions, bad types, conflicts between heads.
  nasgw_attr d = Create(root_.handle, "ldir", NASGW_TYPE_DIR, 0755);
  EXPECT_EQ(nasgw_lease(holder, &kRoot, &d.handle, 1, LR), -EINVAL);
  EXPECT_EQ(nasgw_lease(holder, &kRoot, &f.handle, 1, NASGW_LEASE_WRITE), -EINVAL);
  nasgw_attr p = Create(root_.handle, "private", NASGW_TYPE_REG, 0600);
  const nasgw_cred alice{1000, 100, 0, nullptr};
  EXPECT_EQ(nasgw_lease(holder, &alice, &p.handle, 1, LR), -EACCES);
  ASSERT_EQ(nasgw_lease(client_, &kRoot, &f.handle, 1, LR), 0);
  EXPECT_EQ(nasgw_lease(holder, &kRoot, &f.handle, 2, LW), -EAGAIN) << "another head holds a read lease";
  ASSERT_EQ(nasgw_lease(holder, &kRoot, &f.handle, 2, LR), 0) << "readers agree";
  // A holder that closes gives its leases back.
  nasgw_client_close(holder);
  EXPECT_EQ(service_->locks().Leases({f.handle.volume, f.handle.ino}).size(), 1u);
  nasgw_client_close(waiter);
  nasgw_client_close(same);
}

TEST_F(HeadTest, LockArgumentsAndFiles) {
  nasgw_attr f = Create(root_.handle, "args", NASGW_TYPE_REG, 0600);
  nasgw_attr d = Create(root_.handle, "adir", NASGW_TYPE_DIR, 0755);
  nasgw_lock_info c{};
  const uint64_t errors = server_->protocol_errors();
  // Bad values fail here, without costing the connection.
  EXPECT_EQ(nasgw_lock(client_, &kRoot, &f.handle, 1, 3, 0, 1, &c), -EINVAL);
  EXPECT_EQ(nasgw_lock(client_, &kRoot, &f.handle, 1, NASGW_LOCK_READ, 2, kLast, &c), -EINVAL);  // past 2^64 - 1
  EXPECT_EQ(nasgw_unlock(client_, &kRoot, &f.handle, 1, kLast, 2), -EINVAL);
  EXPECT_EQ(nasgw_testlock(client_, &kRoot, &f.handle, 1, NASGW_LOCK_READ, 0, 1, nullptr), -EINVAL);
  EXPECT_EQ(nasgw_lock(client_, nullptr, &f.handle, 1, NASGW_LOCK_READ, 0, 1, &c), -EINVAL);
  EXPECT_EQ(server_->protocol_errors(), errors);
  // The very last byte can be locked.
  EXPECT_EQ(nasgw_lock(client_, &kRoot, &f.handle, 1, NASGW_LOCK_WRITE, kLast, 1, &c), 0);
  EXPECT_EQ(nasgw_unlock(client_, &kRoot, &f.handle, 1, 0, kToEnd), 0);
  // Regular files only.
  EXPECT_EQ(nasgw_lock(client_, &kRoot, &d.handle, 1, NASGW_LOCK_READ, 0, 1, &c), -EINVAL);
  EXPECT_EQ(nasgw_testlock(client_, &kRoot, &d.handle, 1, NASGW_LOCK_READ, 0, 1, &c), -EINVAL);
  // Read permission or ownership, whatever the type (as knfsd for NLM).
  const nasgw_cred alice{1000, 100, 0, nullptr};
  EXPECT_EQ(nasgw_lock(client_, &alice, &f.handle, 1, NASGW_LOCK_READ, 0, 1, &c), -EACCES);
  nasgw_sattr s{};
  s.mask = NASGW_SET_UID | NASGW_SET_MODE;
  s.uid = 1000;
  s.mode = 0;
  ASSERT_EQ(nasgw_setattr(client_, &kRoot, &f.handle, &s, nullptr), 0);
  EXPECT_EQ(nasgw_lock(client_, &alice, &f.handle, 1, NASGW_LOCK_WRITE, 0, 1, &c), 0) << "the owner may lock";
  // A deleted file: LOCK and TESTLOCK are ESTALE; UNLOCK still releases.
  ASSERT_EQ(nasgw_unlink(client_, &kRoot, &root_.handle, "args"), 0);
  EXPECT_EQ(nasgw_lock(client_, &alice, &f.handle, 1, NASGW_LOCK_WRITE, 5, 1, &c), -ESTALE);
  EXPECT_EQ(nasgw_testlock(client_, &alice, &f.handle, 2, NASGW_LOCK_WRITE, 0, 1, &c), -ESTALE);
  EXPECT_EQ(service_->locks().Locks({f.handle.volume, f.handle.ino}).size(), 1u);
  EXPECT_EQ(nasgw_unlock(client_, &alice, &f.handle, 1, 0, kToEnd), 0);
  EXPECT_TRUE(service_->locks().Locks({f.handle.volume, f.handle.ino}).empty());
}

// FlushCache (what the admin service runs before taking a snapshot) puts
// what the cache of the current opening holds dirty into the domain, every
// volume's, and waits for it; with no domain open it has nothing to do.
TEST_F(HeadTest, FlushCacheWritesWhatTheCacheHoldsIntoTheDomain) {
  server_->Shutdown(std::chrono::milliseconds(0));
  server_.reset();
  cache::DataCacheOptions co;
  co.flush_after_ms = limits::kCacheFlushAfterMsMax;  // the flusher leaves it alone
  service_ = std::make_unique<HeadService>([this] { return HeadDomain{domain_, verifier_.load()}; }, LockLimits{}, co);
  EXPECT_TRUE(service_->FlushCache().ok()) << "no cache yet: nothing to flush";
  StartServer();
  ASSERT_TRUE(domain_->CreateVolume("vol2", 16 << 10).ok());
  nasgw_attr root2{};
  ASSERT_EQ(nasgw_mount(client_, &kRoot, "vol2", &root2), 0) << nasgw_client_last_message();
  nasgw_attr f = Create(root_.handle, "dirty");
  nasgw_attr g = Create(root2.handle, "dirty2");
  const std::string data(20000, 'q'), data2(7000, 'r');
  ASSERT_EQ(nasgw_write(client_, &kRoot, &f.handle, 0, data.data(), static_cast<uint32_t>(data.size()), NASGW_UNSTABLE,
                        nullptr),
            static_cast<int64_t>(data.size()));
  ASSERT_EQ(nasgw_write(client_, &kRoot, &g.handle, 100, data2.data(), static_cast<uint32_t>(data2.size()),
                        NASGW_UNSTABLE, nullptr),
            static_cast<int64_t>(data2.size()));
  std::string buf(32 << 10, '\0');
  auto n = domain_->Read(f.handle.volume, f.handle.ino, 0, buf.size(), buf.data());
  ASSERT_TRUE(n.ok());
  ASSERT_EQ(*n, 0u) << "answered from the cache, not yet in the domain";
  EXPECT_GT(service_->CacheStats().dirty_bytes, 0u);

  ASSERT_TRUE(service_->FlushCache().ok());
  EXPECT_EQ(service_->CacheStats().dirty_bytes, 0u);
  n = domain_->Read(f.handle.volume, f.handle.ino, 0, buf.size(), buf.data());
  ASSERT_TRUE(n.ok());
  EXPECT_EQ(std::string(buf.data(), *n), data);
  n = domain_->Read(g.handle.volume, g.handle.ino, 100, buf.size(), buf.data());
  ASSERT_TRUE(n.ok());
  EXPECT_EQ(std::string(buf.data(), *n), data2) << "the other volume's too";
}

// Snapshots through the head: `.snapshot` in every directory (absent from
// listings) lists the volume's snapshots; each is the directory as it was,
// read through the same calls as the live one, and refuses every change
// with EROFS; a live directory refuses a new `.snapshot`.
TEST_F(HeadTest, SnapshotsAreReachedThroughDotSnapshotAndAreReadOnly) {
  nasgw_attr d = Create(root_.handle, "docs", NASGW_TYPE_DIR, 0755);
  nasgw_attr f = Create(d.handle, "a.txt");
  Create(d.handle, "gone.txt");
  const std::string before(50'000, 'b'), after(50'000, 'A');
  ASSERT_EQ(nasgw_write(client_, &kRoot, &f.handle, 0, before.data(), static_cast<uint32_t>(before.size()),
                        NASGW_UNSTABLE, nullptr),
            static_cast<int64_t>(before.size()));
  ASSERT_EQ(nasgw_setxattr(client_, &kRoot, &f.handle, "user.tag", "old", 3, 0), 0);
  nasgw_sattr own{};  // a directory another user owns (its snapshot keeps that)
  own.mask = NASGW_SET_UID | NASGW_SET_GID;
  own.uid = 1001;
  own.gid = 1001;
  ASSERT_EQ(nasgw_setattr(client_, &kRoot, &d.handle, &own, nullptr), 0);
  ASSERT_TRUE(service_->FlushCache().ok());  // as the admin API does before a create
  auto s1 = domain_->CreateSnapshot("vol1", "s1");
  ASSERT_TRUE(s1.ok()) << s1.status().ToString();
  // The live volume moves on.
  ASSERT_EQ(nasgw_write(client_, &kRoot, &f.handle, 0, after.data(), static_cast<uint32_t>(after.size()),
                        NASGW_UNSTABLE, nullptr),
            static_cast<int64_t>(after.size()));
  ASSERT_EQ(nasgw_setxattr(client_, &kRoot, &f.handle, "user.tag", "new", 3, 0), 0);
  ASSERT_EQ(nasgw_unlink(client_, &kRoot, &d.handle, "gone.txt"), 0);
  Create(d.handle, "later.txt");
  ASSERT_TRUE(service_->FlushCache().ok());
  ASSERT_TRUE(domain_->CreateSnapshot("vol1", "s2").ok());

  // `.snapshot` is found by name but not listed.
  std::vector<nasgw_dirent> ents(16);
  uint32_t n = 0;
  int eof = 0;
  ASSERT_EQ(nasgw_readdir(client_, &kRoot, &d.handle, 0, 16, 0, ents.data(), nullptr, &n, &eof), 0);
  for (uint32_t i = 0; i < n; i++) EXPECT_STRNE(ents[i].name, ".snapshot");
  nasgw_attr sd{};
  ASSERT_EQ(nasgw_lookup(client_, &kRoot, &d.handle, ".snapshot", &sd), 0) << nasgw_client_last_message();
  EXPECT_EQ(sd.type, static_cast<uint32_t>(NASGW_TYPE_DIR));
  EXPECT_EQ(sd.mode & 0222, 0u);
  char acl[64];  // what a kernel checking a non-owner's permission asks
  EXPECT_EQ(nasgw_getxattr(client_, &kRoot, &sd.handle, "system.posix_acl_access", acl, sizeof(acl)), -ENODATA);
  EXPECT_EQ(nasgw_listxattr(client_, &kRoot, &sd.handle, acl, sizeof(acl)), 0);
  ASSERT_EQ(nasgw_readdir(client_, &kRoot, &sd.handle, 0, 16, 0, ents.data(), nullptr, &n, &eof), 0);
  ASSERT_EQ(n, 2u);
  EXPECT_STREQ(ents[0].name, "s1");
  EXPECT_STREQ(ents[1].name, "s2");
  EXPECT_EQ(eof, 1);
  nasgw_attr up{};
  ASSERT_EQ(nasgw_lookup(client_, &kRoot, &sd.handle, "..", &up), 0);
  EXPECT_EQ(up.handle.ino, d.handle.ino);
  EXPECT_EQ(up.handle.snap, 0u);

  // Listed too where the export asks (Show_Snapshot_Dir): last, once, the
  // `.snapshot` directory; never in a snapshot's directory.
  {
    std::vector<nasgw_dirent> all(16);
    std::vector<nasgw_attr> attrs(16);
    uint32_t m = 0;
    int end = 0;
    ASSERT_EQ(nasgw_readdir(client_, &kRoot, &d.handle, 0, 16, NASGW_READDIR_PLUS | NASGW_READDIR_SNAPSHOT_DIR,
                            all.data(), attrs.data(), &m, &end),
              0)
        << nasgw_client_last_message();
    ASSERT_GE(m, 1u);
    EXPECT_STREQ(all[m - 1].name, ".snapshot");
    EXPECT_EQ(attrs[m - 1].handle.snap, fs::kSnapshotDir);
    EXPECT_EQ(attrs[m - 1].type, static_cast<uint32_t>(NASGW_TYPE_DIR));
    EXPECT_EQ(end, 1);
    for (uint32_t i = 0; i + 1 < m; i++) EXPECT_STRNE(all[i].name, ".snapshot");
    std::vector<nasgw_dirent> snaps(16);  // the listed handle works: its listing is the snapshots
    uint32_t k = 0;
    ASSERT_EQ(nasgw_readdir(client_, &kRoot, &attrs[m - 1].handle, 0, 16, 0, snaps.data(), nullptr, &k, &end), 0);
    EXPECT_EQ(k, 2u);
    ASSERT_EQ(nasgw_readdir(client_, &kRoot, &d.handle, all[m - 1].cookie, 16, NASGW_READDIR_SNAPSHOT_DIR, all.data(),
                            nullptr, &m, &end),
              0);
    EXPECT_EQ(m, 0u) << "nothing after it";
    EXPECT_EQ(end, 1);
    nasgw_attr in_snap{};
    ASSERT_EQ(nasgw_lookup(client_, &kRoot, &sd.handle, "s1", &in_snap), 0);
    ASSERT_EQ(nasgw_readdir(client_, &kRoot, &in_snap.handle, 0, 16, NASGW_READDIR_SNAPSHOT_DIR, all.data(), nullptr,
                            &m, &end),
              0);
    for (uint32_t i = 0; i < m; i++) EXPECT_STRNE(all[i].name, ".snapshot") << "not in a snapshot";
  }

  // The directory at s1: its files as they were.
  nasgw_attr at1{}, old{}, was{};
  ASSERT_EQ(nasgw_lookup(client_, &kRoot, &sd.handle, "s1", &at1), 0) << nasgw_client_last_message();
  EXPECT_EQ(at1.handle.snap, s1->id);
  EXPECT_EQ(at1.handle.ino, d.handle.ino);
  ASSERT_EQ(nasgw_lookup(client_, &kRoot, &at1.handle, "a.txt", &old), 0) << nasgw_client_last_message();
  ASSERT_EQ(nasgw_lookup(client_, &kRoot, &at1.handle, "gone.txt", &was), 0) << "removed since, there then";
  EXPECT_EQ(nasgw_lookup(client_, &kRoot, &at1.handle, "later.txt", &was), -ENOENT);
  EXPECT_EQ(nasgw_lookup(client_, &kRoot, &at1.handle, ".snapshot", &was), -ENOENT) << "no snapshots of snapshots";
  // When it was taken: an attribute of every object in it, not listed, not
  // settable, absent live (vfs_nasgw labels Previous Versions by it).
  EXPECT_STREQ(NASGW_XATTR_SNAPSHOT_CREATED, fs::kSnapshotCreatedXattr);
  char when[64] = {};
  const nasgw_cred anyone{1002, 1002, 0, nullptr};
  for (const nasgw_attr* o : {&at1, &old}) {
    const int64_t wn = nasgw_getxattr(client_, &anyone, &o->handle, NASGW_XATTR_SNAPSHOT_CREATED, when, sizeof(when));
    ASSERT_GT(wn, 0) << nasgw_client_last_message();
    char want[64];
    std::snprintf(want, sizeof(want), "%lld.%09u", static_cast<long long>(s1->created.sec), s1->created.nsec);
    EXPECT_EQ(std::string(when, static_cast<size_t>(wn)), want);
  }
  EXPECT_EQ(nasgw_getxattr(client_, &kRoot, &f.handle, NASGW_XATTR_SNAPSHOT_CREATED, when, sizeof(when)), -ENODATA);
  EXPECT_EQ(nasgw_setxattr(client_, &kRoot, &f.handle, NASGW_XATTR_SNAPSHOT_CREATED, "1", 1, 0), -EPERM);
  EXPECT_EQ(nasgw_setxattr(client_, &kRoot, &old.handle, NASGW_XATTR_SNAPSHOT_CREATED, "1", 1, 0), -EROFS);
  {
    char names[256];
    const int64_t ln = nasgw_listxattr(client_, &kRoot, &old.handle, names, sizeof(names));
    ASSERT_GE(ln, 0);
    EXPECT_EQ(std::string(names, static_cast<size_t>(ln)).find("snapshot_created"), std::string::npos);
  }
  std::string back(before.size(), '\0');
  ASSERT_EQ(nasgw_read(client_, &kRoot, &old.handle, 0, back.data(), static_cast<uint32_t>(back.size()), &eof),
            static_cast<int64_t>(before.size()));
  EXPECT_TRUE(back == before);
  char v[8] = {};
  EXPECT_EQ(nasgw_getxattr(client_, &kRoot, &old.handle, "user.tag", v, sizeof(v)), 3);
  EXPECT_STREQ(v, "old");
  std::vector<nasgw_attr> attrs(16);
  ASSERT_EQ(nasgw_readdir(client_, &kRoot, &at1.handle, 0, 16, NASGW_READDIR_PLUS, ents.data(), attrs.data(), &n, &eof),
            0);
  std::set<std::string> names;
  for (uint32_t i = 0; i < n; i++) {
    names.insert(ents[i].name);
    EXPECT_EQ(attrs[i].handle.snap, s1->id);
  }
  EXPECT_EQ(names, (std::set<std::string>{"a.txt", "gone.txt"}));
  // Reading opens and read locks work (and keep nothing).
  nasgw_attr opened{};
  ASSERT_EQ(nasgw_open(client_, &kRoot, &old.handle, NASGW_ACCESS_READ, &opened), 0) << nasgw_client_last_message();
  EXPECT_EQ(nasgw_lock(client_, &kRoot, &old.handle, 1, NASGW_LOCK_READ, 0, 10, nullptr), 0);
  EXPECT_EQ(nasgw_share(client_, &kRoot, &old.handle, 1, NASGW_SHARE_READ, 0), 0);
  EXPECT_TRUE(service_->locks().Locks({f.handle.volume, f.handle.ino}).empty()) << "nothing kept on the live file";
  EXPECT_EQ(nasgw_release(client_, &kRoot, &old.handle), 0);

  // Every change is EROFS.
  EXPECT_EQ(nasgw_write(client_, &kRoot, &old.handle, 0, "x", 1, NASGW_FILE_SYNC, nullptr), -EROFS);
  EXPECT_EQ(nasgw_open(client_, &kRoot, &old.handle, NASGW_ACCESS_WRITE, &opened), -EROFS);
  EXPECT_EQ(nasgw_setxattr(client_, &kRoot, &old.handle, "user.tag", "x", 1, 0), -EROFS);
  EXPECT_EQ(nasgw_lock(client_, &kRoot, &old.handle, 1, NASGW_LOCK_WRITE, 0, 10, nullptr), -EROFS);
  EXPECT_EQ(nasgw_create(client_, &kRoot, &at1.handle, "new", NASGW_TYPE_REG, 0644, 0, nullptr, 0, nullptr), -EROFS);
  EXPECT_EQ(nasgw_unlink(client_, &kRoot, &at1.handle, "a.txt"), -EROFS);
  EXPECT_EQ(nasgw_rename(client_, &kRoot, &at1.handle, "a.txt", &d.handle, "stolen", 0), -EROFS);
  EXPECT_EQ(nasgw_link(client_, &kRoot, &old.handle, &d.handle, "linked", nullptr), -EROFS);
  EXPECT_EQ(nasgw_create(client_, &kRoot, &sd.handle, "s3", NASGW_TYPE_DIR, 0755, 0, nullptr, 0, nullptr), -EROFS);
  nasgw_sattr trunc{};
  trunc.mask = NASGW_SET_SIZE;
  EXPECT_EQ(nasgw_setattr(client_, &kRoot, &old.handle, &trunc, nullptr), -EROFS);
  EXPECT_EQ(nasgw_create(client_, &kRoot, &d.handle, ".snapshot", NASGW_TYPE_DIR, 0755, 0, nullptr, 0, nullptr),
            -EEXIST);
  // The live file is what it became.
  ASSERT_EQ(nasgw_read(client_, &kRoot, &f.handle, 0, back.data(), static_cast<uint32_t>(back.size()), &eof),
            static_cast<int64_t>(after.size()));
  EXPECT_TRUE(back == after);
  // A deleted snapshot's handles are stale.
  ASSERT_TRUE(domain_->DeleteSnapshot("vol1", "s1").ok());
  EXPECT_EQ(nasgw_getattr(client_, &kRoot, &old.handle, &was), -ESTALE);
  EXPECT_EQ(nasgw_lookup(client_, &kRoot, &sd.handle, "s1", &was), -ENOENT);
}

// After a rollback of the volume (as the admin service runs it: the cache
// flushed, the domain rolled back, then ForgetVolume), nothing the service
// cached from after the snapshot is used: reads give the snapshot's bytes,
// not the read cache's, and a directory moved into a scope since is outside
// it again (the scope check's parents are read again).
TEST_F(HeadTest, ARollbackLeavesNothingStaleCached) {
  nasgw_attr f = Create(root_.handle, "f");
  nasgw_attr d = Create(root_.handle, "d", NASGW_TYPE_DIR, 0755);
  nasgw_attr x = Create(root_.handle, "x", NASGW_TYPE_DIR, 0755);
  const std::string before(40000, 'b'), after(50000, 'A');
  ASSERT_EQ(nasgw_write(client_, &kRoot, &f.handle, 0, before.data(), static_cast<uint32_t>(before.size()),
                        NASGW_FILE_SYNC, nullptr),
            static_cast<int64_t>(before.size()));
  ASSERT_TRUE(service_->FlushCache().ok());  // as the admin service does first (a stable write may be only logged)
  ASSERT_TRUE(domain_->CreateSnapshot("vol1", "s").ok());
  auto read_all = [&] {
    std::string buf(1 << 20, '\0');
    int eof = 0;
    const int64_t n = nasgw_read(client_, &kRoot, &f.handle, 0, buf.data(), static_cast<uint32_t>(buf.size()), &eof);
    EXPECT_GE(n, 0) << nasgw_client_last_message();
    buf.resize(n < 0 ? 0 : static_cast<size_t>(n));
    return buf;
  };
  // Since: overwritten (unstable: the cache holds it), read (its blocks in
  // the read cache once flushed), x moved into d and seen there through
  // d's scope.
  ASSERT_EQ(nasgw_write(client_, &kRoot, &f.handle, 0, after.data(), static_cast<uint32_t>(after.size()),
                        NASGW_UNSTABLE, nullptr),
            static_cast<int64_t>(after.size()));
  EXPECT_TRUE(read_all() == after);
  ASSERT_EQ(nasgw_rename(client_, &kRoot, &root_.handle, "x", &d.handle, "x", 0), 0) << nasgw_client_last_message();
  nasgw_attr scoped{}, a{};
  ASSERT_EQ(nasgw_mount_path(client_, &kRoot, "vol1", "d", &scoped), 0) << nasgw_client_last_message();
  ASSERT_EQ(nasgw_get_inode(client_, &kRoot, &scoped.handle, x.handle.ino, &a), 0) << "moved into d";
  nasgw_attr later = Create(root_.handle, "later");

  ASSERT_TRUE(service_->FlushCache().ok());
  EXPECT_TRUE(read_all() == after) << "now from the read cache";
  EXPECT_GT(service_->CacheStats().read.bytes, 0u);
  ASSERT_TRUE(domain_->RollbackSnapshot("vol1", "s").ok());
  EXPECT_GT(service_->ForgetVolume(f.handle.volume), 0u) << "the read cache held f's blocks";
  EXPECT_EQ(service_->dir_parents().size(), 0u);

  EXPECT_TRUE(read_all() == before) << read_all().size() << " bytes";
  EXPECT_EQ(nasgw_get_inode(client_, &kRoot, &scoped.handle, x.handle.ino, &a), -ESTALE) << "outside d again";
  EXPECT_EQ(nasgw_lookup(client_, &kRoot, &root_.handle, "x", &a), 0) << "where it was";
  EXPECT_EQ(nasgw_getattr(client_, &kRoot, &later.handle, &a), -ESTALE) << "made since the snapshot";
  EXPECT_EQ(nasgw_lookup(client_, &kRoot, &root_.handle, "later", &a), -ENOENT);
}

// Past head.max_locks_per_session a lock (or a splitting unlock) is ENOLCK.
TEST_F(HeadTest, LockLimits) {
  server_->Shutdown(std::chrono::milliseconds(0));
  server_.reset();
  service_ = std::make_unique<HeadService>(
      [this] {
        return HeadDomain{domain_, verifier_.load()};
      },
      LockLimits{/*total=*/100, /*per_session=*/3});
  StartServer();
  nasgw_attr f = Create(root_.handle, "limited");
  for (uint64_t i = 0; i < 3; i++) {
    ASSERT_EQ(nasgw_lock(client_, &kRoot, &f.handle, 1, NASGW_LOCK_WRITE, i * 10, 5, nullptr), 0);
  }
  EXPECT_EQ(nasgw_lock(client_, &kRoot, &f.handle, 2, NASGW_LOCK_WRITE, 100, 5, nullptr), -ENOLCK);
  EXPECT_EQ(nasgw_unlock(client_, &kRoot, &f.handle, 1, 1, 1), -ENOLCK);                      // would split 0..4
  EXPECT_EQ(nasgw_lock(client_, &kRoot, &f.handle, 1, NASGW_LOCK_WRITE, 0, 30, nullptr), 0);  // merges to one
  EXPECT_EQ(nasgw_lock(client_, &kRoot, &f.handle, 2, NASGW_LOCK_WRITE, 100, 5, nullptr), 0);
  nasgw_client* other = OpenClient("other");  // its own allowance
  ASSERT_NE(other, nullptr);
  EXPECT_EQ(nasgw_lock(other, &kRoot, &f.handle, 1, NASGW_LOCK_WRITE, 200, 5, nullptr), 0);
  nasgw_client_close(other);
}

// A client that closes ends its session at once (GOODBYE): its locks go,
// so the other client gets them, and so do its opens.
// READ, READDIR and READLINK move atime as the volume's policy says
// (relatime here: once after a change), for every head alike; an access
// moves neither ctime nor the change counter. noatime: never.
TEST_F(HeadTest, ReadsMoveAtimeAsTheVolumePolicySays) {
  nasgw_attr f = Create(root_.handle, "read-me");
  ASSERT_EQ(nasgw_write(client_, &kRoot, &f.handle, 0, "data", 4, NASGW_FILE_SYNC, nullptr), 4);
  nasgw_attr d = Create(root_.handle, "list-me", NASGW_TYPE_DIR, 0755);
  nasgw_attr l{};
  ASSERT_EQ(nasgw_create(client_, &kRoot, &root_.handle, "link-me", NASGW_TYPE_LNK, 0777, 0, "read-me", 0, &l), 0);
  // Every time set back a minute: what the read does is then plain.
  const int64_t past = static_cast<int64_t>(::time(nullptr)) - 60;
  auto age = [&](const nasgw_handle& h) {
    nasgw_sattr s{};
    s.mask = NASGW_SET_ATIME | NASGW_SET_MTIME;
    s.atime = {past, 0};
    s.mtime = {past, 0};
    nasgw_attr a{};
    EXPECT_EQ(nasgw_setattr(client_, &kRoot, &h, &s, &a), 0) << nasgw_client_last_message();
    return a;
  };
  auto attr = [&](const nasgw_handle& h) {
    nasgw_attr a{};
    EXPECT_EQ(nasgw_getattr(client_, &kRoot, &h, &a), 0);
    return a;
  };
  auto read_all = [&] {
    char buf[16];
    EXPECT_EQ(nasgw_read(client_, &kRoot, &f.handle, 0, buf, sizeof buf, nullptr), 4);
    nasgw_dirent e[4];
    uint32_t n = 0;
    int eof = 0;
    EXPECT_EQ(nasgw_readdir(client_, &kRoot, &d.handle, 0, 4, 0, e, nullptr, &n, &eof), 0);
    EXPECT_GE(nasgw_readlink(client_, &kRoot, &l.handle, buf, sizeof buf), 0);
  };
  for (const nasgw_handle* h : {&f.handle, &d.handle, &l.handle}) age(*h);
  const nasgw_attr before = attr(f.handle);
  read_all();
  for (const nasgw_handle* h : {&f.handle, &d.handle, &l.handle}) {
    EXPECT_GT(attr(*h).atime.sec, past) << "relatime: atime after mtime moves (ino " << h->ino << ")";
  }
  const nasgw_attr after = attr(f.handle);
  EXPECT_EQ(after.ctime.sec, before.ctime.sec);
  EXPECT_EQ(after.ctime.nsec, before.ctime.nsec) << "an access is not a change";
  EXPECT_EQ(after.change, before.change);
  // relatime: an atime after both mtime and ctime (this setattr's) stays.
  nasgw_sattr s{};
  s.mask = NASGW_SET_ATIME;
  s.atime = {past + 3600, 0};
  ASSERT_EQ(nasgw_setattr(client_, &kRoot, &f.handle, &s, nullptr), 0);
  read_all();
  EXPECT_EQ(attr(f.handle).atime.sec, past + 3600) << "relatime: atime after mtime and ctime stays";

  ASSERT_TRUE(domain_->SetVolumeAtime("vol1", fs::Atime::kNever).ok());
  for (const nasgw_handle* h : {&f.handle, &d.handle, &l.handle}) age(*h);
  read_all();
  for (const nasgw_handle* h : {&f.handle, &d.handle, &l.handle}) {
    EXPECT_EQ(attr(*h).atime.sec, past) << "noatime (ino " << h->ino << ")";
  }
}

TEST_F(HeadTest, ClosingAClientReleasesItsLocksAndOpens) {
  nasgw_attr f = Create(root_.handle, "handover");
  nasgw_client* other = OpenClient("other");
  ASSERT_NE(other, nullptr);
  ASSERT_EQ(nasgw_lock(other, &kRoot, &f.handle, 7, NASGW_LOCK_WRITE, 0, kToEnd, nullptr), 0);
  nasgw_attr g = Create(root_.handle, "open-then-unlinked");
  ASSERT_EQ(nasgw_open(other, &kRoot, &g.handle, NASGW_ACCESS_READ, nullptr), 0);
  ASSERT_EQ(nasgw_unlink(client_, &kRoot, &root_.handle, "open-then-unlinked"), 0);
  nasgw_attr a{};
  ASSERT_EQ(nasgw_getattr(client_, &kRoot, &g.handle, &a), 0) << "still open by the other client";
  nasgw_lock_info c{};
  ASSERT_EQ(nasgw_lock(client_, &kRoot, &f.handle, 1, NASGW_LOCK_READ, 10, 1, &c), -EAGAIN);
  EXPECT_EQ(c.owner, 7u);
  nasgw_client_close(other);
  // No grace time to wait for: the session ended with the close.
  EXPECT_EQ(nasgw_lock(client_, &kRoot, &f.handle, 1, NASGW_LOCK_WRITE, 0, kToEnd, &c), 0)
      << nasgw_client_last_message();
  EXPECT_EQ(nasgw_getattr(client_, &kRoot, &g.handle, &a), -ESTALE) << "the close released the open";
  EXPECT_EQ(service_->locks().size(), 1u);
}

// As nobody: a head that takes a write lock on "reclaimed" (bytes 0-99)
// and dies without a word (no GOODBYE): its session is kept for the grace
// time, and its lock with it.
int DieHoldingALock(const char* socket, int) {
  nasgw_client* c = RoleClient(socket);
  if (c == nullptr) return 11;
  const nasgw_cred self{65534, 65534, 0, nullptr};
  nasgw_attr root{}, f{};
  if (nasgw_mount(c, &self, "vol1", &root) != 0) return 12;
  if (nasgw_lookup(c, &self, &root.handle, "reclaimed", &f) != 0) return 13;
  if (nasgw_lock(c, &self, &f.handle, 5, NASGW_LOCK_WRITE, 0, 100, nullptr) != 0) return 14;
  return 0;  // _Exit: the connection just closes
}
[[maybe_unused]] const bool kDieRole = NobodyRoles().emplace("die-locked", DieHoldingALock).second;

// A head that died (ganesha killed and started again) leaves its session in
// nasgwd for the grace time, its locks with it. Its clients reclaim them
// through the new head (NASGW_LOCK_RECLAIM): granted over the dead
// session's locks, which give those ranges up; a plain lock still
// conflicts, and so does a reclaim against a live session's lock.
TEST_F(HeadTest, AReclaimTakesTheLocksOfAHeadThatDied) {
  nasgw_attr f = Create(root_.handle, "reclaimed");
  ASSERT_EQ(chmod(dir_.c_str(), 0755), 0);  // the socket's directory: nobody may enter
  nasgw_client* live = OpenClient("live");
  ASSERT_NE(live, nullptr);
  ASSERT_EQ(nasgw_lock(live, &kRoot, &f.handle, 9, NASGW_LOCK_READ, 200, 10, nullptr), 0);
  // Two connections each (the clients' default pool): a client open returns
  // with one up, the second may still be on its way.
  const uint32_t before = 4;
  ASSERT_TRUE(WaitFor([&] { return server_->connections() == before; })) << server_->connections();
  const NobodyResult r = RunAsNobody("die-locked", socket_);
  ASSERT_EQ(r.exit_code, 0) << "the child's check that failed (see the return codes of DieHoldingALock)";
  ASSERT_TRUE(WaitFor([&] { return server_->connections() == before; })) << "nasgwd sees the head gone";
  nasgw_lock_info c{};
  EXPECT_EQ(nasgw_lock(client_, &kRoot, &f.handle, 1, NASGW_LOCK_WRITE, 50, 10, &c), -EAGAIN)
      << "the dead head's session keeps its lock";
  EXPECT_EQ(c.owner, 5u);
  EXPECT_EQ(nasgw_lock_flags(client_, &kRoot, &f.handle, 1, NASGW_LOCK_WRITE, 0, 100, 2, &c), -EINVAL)
      << "an unknown flag";
  ASSERT_EQ(nasgw_lock_flags(client_, &kRoot, &f.handle, 1, NASGW_LOCK_WRITE, 0, 100, NASGW_LOCK_RECLAIM, &c), 0)
      << nasgw_client_last_message();
  // A live session's lock is not taken by a reclaim.
  EXPECT_EQ(nasgw_lock_flags(client_, &kRoot, &f.handle, 1, NASGW_LOCK_WRITE, 150, 100, NASGW_LOCK_RECLAIM, &c),
            -EAGAIN);
  EXPECT_EQ(c.owner, 9u);
  // The reclaimed lock is the new holder's: the live client meets it.
  EXPECT_EQ(nasgw_lock(live, &kRoot, &f.handle, 9, NASGW_LOCK_READ, 0, 1, &c), -EAGAIN);
  EXPECT_EQ(c.owner, 1u);
  EXPECT_EQ(service_->locks().size(), 2u) << "the dead session holds nothing more";
  nasgw_client_close(live);
}

// nasgwd restarts (its sessions end, the lock table empties): the client
// takes its locks again before it takes calls, so another client still
// conflicts with them afterwards. Locks of a file deleted meanwhile go.
TEST_F(HeadTest, LocksAreTakenAgainAfterRestart) {
  nasgw_attr f = Create(root_.handle, "kept");
  nasgw_attr g = Create(root_.handle, "deleted-meanwhile");
  nasgw_client* other = OpenClient("other");
  ASSERT_NE(other, nullptr);
  ASSERT_EQ(nasgw_lock(client_, &kRoot, &f.handle, 5, NASGW_LOCK_WRITE, 0, 100, nullptr), 0);
  ASSERT_EQ(nasgw_lock(client_, &kRoot, &f.handle, 6, NASGW_LOCK_READ, 200, kToEnd, nullptr), 0);
  ASSERT_EQ(nasgw_lock(client_, &kRoot, &f.handle, 6, NASGW_LOCK_WRITE, 300, 10, nullptr), 0);  // splits 6's read
  ASSERT_EQ(nasgw_lock(client_, &kRoot, &g.handle, 5, NASGW_LOCK_WRITE, 0, kToEnd, nullptr), 0);
  const std::set<std::tuple<uint64_t, uint32_t, uint64_t, uint64_t>> held = {{5, NASGW_LOCK_WRITE, 0, 99},
                                                                             {6, NASGW_LOCK_READ, 200, 299},
                                                                             {6, NASGW_LOCK_WRITE, 300, 309},
                                                                             {6, NASGW_LOCK_READ, 310, kLast}};
  ASSERT_TRUE(WaitForLocks(f.handle, held));
  for (int restart = 0; restart < 2; restart++) {
    server_->Shutdown(std::chrono::milliseconds(0));
    server_.reset();
    EXPECT_EQ(service_->locks().size(), 0u) << "the sessions ended with nasgwd";
    if (restart == 0) {
      ASSERT_TRUE(domain_->Unlink(root_.handle.volume, root_.handle.ino, "deleted-meanwhile").ok());
    }
    StartServer();
    ASSERT_TRUE(WaitForLocks(f.handle, held)) << "restart " << restart;
    nasgw_lock_info c{};
    EXPECT_EQ(nasgw_lock(other, &kRoot, &f.handle, 1, NASGW_LOCK_READ, 50, 1, &c), -EAGAIN);
    EXPECT_EQ(c.owner, 5u);
    EXPECT_EQ(c.length, 100u);
    EXPECT_EQ(nasgw_lock(other, &kRoot, &f.handle, 1, NASGW_LOCK_WRITE, 250, 1, &c), -EAGAIN);
    EXPECT_EQ(c.owner, 6u);
    EXPECT_EQ(nasgw_lock(other, &kRoot, &f.handle, 1, NASGW_LOCK_READ, 250, 1, &c), 0);  // readers share
    ASSERT_EQ(nasgw_unlock(other, &kRoot, &f.handle, 1, 0, kToEnd), 0);
    EXPECT_EQ(service_->locks().Locks({g.handle.volume, g.handle.ino}).size(), 0u) << "the deleted file's lock";
  }
  // The holder's own calls go on as before.
  EXPECT_EQ(nasgw_unlock(client_, &kRoot, &f.handle, 6, 0, kToEnd), 0);
  EXPECT_TRUE(WaitForLocks(f.handle, {{5, NASGW_LOCK_WRITE, 0, 99}}));
  EXPECT_EQ(nasgw_lock(client_, &kRoot, &g.handle, 5, NASGW_LOCK_WRITE, 0, kToEnd, nullptr), -ESTALE);
  nasgw_client_close(other);
}

// Someone else takes a range while nasgwd is away: the holder's locks on
// that file are lost (not half kept), reported with ENOLCK until the owner
// unlocks the whole file; its other owners' locks are taken again.
TEST_F(HeadTest, LocksLostInARestartAreReported) {
  nasgw_attr f = Create(root_.handle, "contested");
  ASSERT_EQ(nasgw_lock(client_, &kRoot, &f.handle, 1, NASGW_LOCK_WRITE, 0, 100, nullptr), 0);
  ASSERT_EQ(nasgw_lock(client_, &kRoot, &f.handle, 1, NASGW_LOCK_WRITE, 200, 100, nullptr), 0);
  ASSERT_EQ(nasgw_lock(client_, &kRoot, &f.handle, 2, NASGW_LOCK_WRITE, 500, 100, nullptr), 0);
  server_->Shutdown(std::chrono::milliseconds(0));
  server_.reset();
  // Another session takes 250..259 before the client is back.
  HeadSession intruder;
  proto::Request r;
  r.op = proto::Op::kLock;
  r.h = FH(f.handle);
  r.owner = 99;
  r.lock_type = proto::kLockWrite;
  r.offset = 250;
  r.length = 10;
  ASSERT_EQ(service_->Execute(intruder, r).err, 0);
  StartServer();
  ASSERT_TRUE(WaitForLocks(f.handle, {{99, NASGW_LOCK_WRITE, 250, 259}, {2, NASGW_LOCK_WRITE, 500, 599}}))
      << "owner 1's 0..99 must be released again, owner 2's lock taken again";
  nasgw_lock_info c{};
  EXPECT_EQ(nasgw_lock(client_, &kRoot, &f.handle, 1, NASGW_LOCK_READ, 0, 10, &c), -ENOLCK);
  EXPECT_NE(std::string(nasgw_client_last_message()).find("lost"), std::string::npos);
  EXPECT_EQ(nasgw_unlock(client_, &kRoot, &f.handle, 1, 0, 100), -ENOLCK);
  EXPECT_EQ(nasgw_lock(client_, &kRoot, &f.handle, 2, NASGW_LOCK_WRITE, 600, 10, nullptr), 0) << "owner 2 is fine";
  EXPECT_EQ(nasgw_unlock(client_, &kRoot, &f.handle, 1, 0, kToEnd), 0);  // clears the mark
  EXPECT_EQ(nasgw_lock(client_, &kRoot, &f.handle, 1, NASGW_LOCK_WRITE, 0, 100, nullptr), 0);
  EXPECT_EQ(nasgw_lock(client_, &kRoot, &f.handle, 1, NASGW_LOCK_WRITE, 200, 100, &c), -EAGAIN);
  EXPECT_EQ(c.owner, 99u);
  service_->EndSession(intruder);
  EXPECT_EQ(nasgw_lock(client_, &kRoot, &f.handle, 1, NASGW_LOCK_WRITE, 200, 100, &c), 0);
}

// Lock calls racing restarts from several threads: every call succeeds,
// and afterwards nasgwd holds exactly what the callers were told they hold
// (a lock granted by the old nasgwd while the client re-locked on the new
// one is not missed; a range unlocked meanwhile is not taken again).
TEST_F(HeadTest, LockCallsRacingRestarts) {
  nasgw_attr f = Create(root_.handle, "race");
  std::atomic<bool> stop{false};
  std::atomic<int> unexpected{0};
  std::vector<std::thread> ths;
  std::vector<std::vector<proto::LockRange>> told(3);
  std::mt19937_64 seed(3);
  for (uint64_t t = 0; t < 3; t++) {
    ths.emplace_back([&, t, s = seed()] {
      // Each thread is one owner on its own area: every call must succeed.
      std::mt19937_64 rng(s);
      for (uint64_t i = 0; !stop.load(); i++) {
        const uint64_t at = t * 1000 + rng() % 500, len = 1 + rng() % 30;
        const uint32_t type = rng() % 2 ? NASGW_LOCK_READ : NASGW_LOCK_WRITE;
        if (rng() % 3 == 0) {
          if (nasgw_unlock(client_, &kRoot, &f.handle, t + 1, at, len) != 0) unexpected++;
          proto::RemoveLockRange(told[t], at, at + len - 1);
        } else {
          if (nasgw_lock(client_, &kRoot, &f.handle, t + 1, type, at, len, nullptr) != 0) unexpected++;
          proto::AddLockRange(told[t], {at, at + len - 1, type});
        }
      }
    });
  }
  for (int restart = 0; restart < 3; restart++) {
    std::this_thread::sleep_for(std::chrono::milliseconds(150));
    server_->Shutdown(std::chrono::milliseconds(0));
    server_.reset();
    StartServer();
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(150));
  stop = true;
  for (auto& th : ths) th.join();
  EXPECT_EQ(unexpected.load(), 0) << nasgw_client_last_message();
  std::set<std::tuple<uint64_t, uint32_t, uint64_t, uint64_t>> want;
  for (uint64_t t = 0; t < 3; t++) {
    for (const auto& r : told[t]) want.insert({t + 1, r.type, r.start, r.end});
  }
  EXPECT_FALSE(want.empty());
  EXPECT_TRUE(WaitForLocks(f.handle, want)) << "nasgwd holds other locks than the callers were told they hold";
  for (uint64_t t = 0; t < 3; t++) ASSERT_EQ(nasgw_unlock(client_, &kRoot, &f.handle, t + 1, 0, kToEnd), 0);
  EXPECT_TRUE(WaitForLocks(f.handle, {}));
}

// A reserve split into two domains (fs/reserve.h, "Domains"), served whole:
// each request goes to the domain of its handle's volume, MOUNT finds a
// volume in any domain, a rename or link across domains is EXDEV, and each
// domain's writes go through a cache of its own into that domain.
class HeadDomainsTest : public HeadTest {
 protected:
  uint32_t Domains() const override { return 2; }
};

TEST_F(HeadDomainsTest, EachRequestGoesToItsVolumesDomain) {
  nasgw_attr root2{};
  ASSERT_EQ(nasgw_mount(client_, &kRoot, "vol2", &root2), 0) << nasgw_client_last_message();
  EXPECT_EQ(fs::VolumeDomain(root2.handle.volume), 1u);
  EXPECT_EQ(fs::VolumeDomain(root_.handle.volume), 0u);
  nasgw_attr f1 = Create(root_.handle, "one");
  nasgw_attr f2 = Create(root2.handle, "two");
  const std::string a(70'000, 'a'), b(50'000, 'b');
  nasgw_write_result w{};
  ASSERT_EQ(nasgw_write(client_, &kRoot, &f1.handle, 0, a.data(), static_cast<uint32_t>(a.size()), NASGW_UNSTABLE, &w),
            static_cast<int64_t>(a.size()));
  ASSERT_EQ(nasgw_write(client_, &kRoot, &f2.handle, 0, b.data(), static_cast<uint32_t>(b.size()), NASGW_UNSTABLE, &w),
            static_cast<int64_t>(b.size()));
  EXPECT_EQ(service_->CacheStats().bytes_written, a.size() + b.size()) << "both domains' caches counted";
  std::string back(b.size(), 'x');
  int eof = 0;
  ASSERT_EQ(nasgw_read(client_, &kRoot, &f2.handle, 0, back.data(), static_cast<uint32_t>(back.size()), &eof),
            static_cast<int64_t>(b.size()));
  EXPECT_EQ(back, b);
  // Each file is in its volume's domain, not the other.
  const auto& d0 = (*domains_)[0];
  const auto& d1 = (*domains_)[1];
  EXPECT_TRUE(d1->Lookup(root2.handle.volume, fs::kRootIno, "two").ok());
  EXPECT_FALSE(d0->Lookup(root2.handle.volume, fs::kRootIno, "two").ok());
  EXPECT_TRUE(d0->Lookup(root_.handle.volume, fs::kRootIno, "one").ok());
  // Flushed into each domain: the data is there once the caches let go.
  ASSERT_TRUE(service_->FlushCache().ok());
  std::string in_domain(b.size(), 'x');
  auto n = d1->Read(root2.handle.volume, f2.handle.ino, 0, in_domain.size(), in_domain.data());
  ASSERT_TRUE(n.ok()) << n.status().ToString();
  EXPECT_EQ(in_domain.substr(0, *n), b);
  // Across domains: EXDEV, as across volumes; nothing moved. A forged
  // handle is refused as such all the same.
  EXPECT_EQ(nasgw_rename(client_, &kRoot, &root2.handle, "two", &root_.handle, "two", 0), -EXDEV);
  EXPECT_TRUE(d1->Lookup(root2.handle.volume, fs::kRootIno, "two").ok());
  nasgw_handle forged = root_.handle;
  forged.mac[0] ^= 1;
  EXPECT_EQ(nasgw_rename(client_, &kRoot, &root2.handle, "two", &forged, "two", 0), -EBADMSG);
  // A handle of a domain that is not here: refused like a forged one.
  nasgw_handle stranger = root2.handle;
  stranger.volume = fs::FirstVolumeId(5);
  nasgw_attr got{};
  EXPECT_EQ(nasgw_getattr(client_, &kRoot, &stranger, &got), -EBADMSG);
  nasgw_fs_stats st{};
  EXPECT_EQ(nasgw_statfs(client_, &kRoot, root2.handle.volume, &st), 0) << nasgw_client_last_message();
  EXPECT_EQ(nasgw_statfs(client_, &kRoot, fs::FirstVolumeId(5), &st), -ESTALE);

  // A new opening (all domains at once: one verifier): the first request
  // to any domain lets every earlier opening's cache go, so the figures
  // are this opening's alone.
  verifier_ = 0x5eed0002;
  const std::string c(10'000, 'c');
  ASSERT_EQ(nasgw_write(client_, &kRoot, &f1.handle, 0, c.data(), static_cast<uint32_t>(c.size()), NASGW_UNSTABLE, &w),
            static_cast<int64_t>(c.size()));
  EXPECT_EQ(service_->CacheStats().bytes_written, c.size()) << "domain 1's cache of the earlier opening went too";
}

// Active/active (docs/cluster.md, "Both nodes serving"): a domain the
// partner serves is a null in the set. A call for it is unserved (not
// served here now: EHOSTUNREACH, which FSAL_NASGW answers as NFS's DELAY, so
// that the client retries while the domain's address moves), not refused as
// a forged handle; the domains served here go on, and the domain served
// here again is served again.
TEST_F(HeadDomainsTest, APartnersDomainIsUnservedNotRefused) {
  nasgw_attr root2{};
  ASSERT_EQ(nasgw_mount(client_, &kRoot, "vol2", &root2), 0) << nasgw_client_last_message();
  nasgw_attr f1 = Create(root_.handle, "one");
  nasgw_attr f2 = Create(root2.handle, "two");
  ASSERT_TRUE(service_->FlushCache().ok());
  auto both = domains_;
  {
    std::lock_guard<std::mutex> l(lease_mu_);
    domains_ = std::make_shared<std::vector<std::shared_ptr<fs::Domain>>>(
        std::vector<std::shared_ptr<fs::Domain>>{domain_, nullptr});
  }
  nasgw_attr got{};
  EXPECT_EQ(nasgw_getattr(client_, &kRoot, &f2.handle, &got), -EHOSTUNREACH) << nasgw_client_last_message();
  EXPECT_NE(std::string(nasgw_client_last_message()).find("served by the partner"), std::string::npos)
      << nasgw_client_last_message();
  nasgw_fs_stats st{};
  EXPECT_EQ(nasgw_statfs(client_, &kRoot, root2.handle.volume, &st), -EHOSTUNREACH);
  EXPECT_EQ(nasgw_getattr(client_, &kRoot, &f1.handle, &got), 0) << nasgw_client_last_message();
  // A handle of no domain of the reserve is still refused as forged.
  nasgw_handle stranger = root2.handle;
  stranger.volume = fs::FirstVolumeId(5);
  EXPECT_EQ(nasgw_getattr(client_, &kRoot, &stranger, &got), -EBADMSG);
  {
    std::lock_guard<std::mutex> l(lease_mu_);
    domains_ = both;
  }
  EXPECT_EQ(nasgw_getattr(client_, &kRoot, &f2.handle, &got), 0) << nasgw_client_last_message();
}

}  // namespace
}  // namespace nasgw::daemon
