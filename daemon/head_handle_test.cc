// Handles over the head socket: nasgwd honours only handles it issued (the
// MAC), in the scope they were issued in (an export's directory and what is
// below it), and the handles it issued stay valid when nasgwd restarts on
// the same LUNs. The C client library over a real Unix socket to the
// HeadServer, on in-memory LUNs.
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <random>

#include <gtest/gtest.h>

#include "block/mem_device.h"
#include "daemon/head_server.h"
#include "fsal/client/nasgw_client.h"

namespace nasgw::daemon {
namespace {

// Field by field: the struct has padding, which memcmp would compare too.
bool SameHandle(const nasgw_handle& a, const nasgw_handle& b) {
  return a.volume == b.volume && a.ino == b.ino && a.gen == b.gen && a.snap == b.snap && a.scope == b.scope &&
         std::memcmp(a.mac, b.mac, sizeof(a.mac)) == 0;
}

constexpr uint64_t kMiB = 1 << 20;
const nasgw_cred kRoot{0, 0, 0, nullptr};

fs::DomainOptions Small() {
  fs::DomainOptions d;
  d.store.write_buffer_bytes = 256 << 10;
  d.store.block_cache_bytes = 1 << 20;
  return d;
}

// A reserve on in-memory LUNs, its domain, and nasgwd's head server on it.
struct Nasgwd {
  std::vector<fs::Reserve::Device> devs;
  std::shared_ptr<fs::Domain> domain;
  uint64_t write_verifier = 0;  // drawn anew with every Format or Open, as the node does
  std::unique_ptr<HeadService> service;
  std::unique_ptr<HeadServer> server;

  void Format(const std::string& naa) {
    for (int i = 0; i < 2; i++) {
      auto lun = std::make_shared<block::MemLun>(512, 64 * kMiB / 512, naa + std::to_string(i));
      devs.push_back(std::make_shared<block::MemDevice>(lun));
    }
    fs::ReserveOptions o;
    o.name = "hh";
    o.ag_bytes = 4 * kMiB;
    std::shared_ptr<fs::Reserve> reserve = std::move(fs::Reserve::Format(devs, o).value());
    domain = std::move(fs::Domain::Create(reserve, 0, Small()).value());
    write_verifier = fs::NewGeneration();  // 64 random bits, never 0
    ASSERT_TRUE(domain->CreateVolume("vol1").ok());
    ASSERT_TRUE(domain->CreateVolume("vol2").ok());
  }
  // A restart: everything in memory goes; the LUNs stay.
  void Stop() {
    if (server != nullptr) server->Shutdown(std::chrono::milliseconds(1000));
    server.reset();
    service.reset();
    domain.reset();
  }
  void Open() {
    auto reserve = fs::Reserve::Open(devs);
    ASSERT_TRUE(reserve.ok()) << reserve.status().ToString();
    auto d = fs::Domain::Open(std::shared_ptr<fs::Reserve>(std::move(reserve.value())), 0, Small());
    ASSERT_TRUE(d.ok()) << d.status().ToString();
    domain = std::move(d.value());
    write_verifier = fs::NewGeneration();
  }
  void Serve(const std::string& socket) {
    service = std::make_unique<HeadService>([this] { return HeadDomain{domain, write_verifier}; });
    HeadServerOptions o;
    o.socket_path = socket;
    o.socket_mode = 0666;
    o.workers = 4;
    o.node_name = "hh";
    auto s = HeadServer::Start(service.get(), o);
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    server = std::move(s.value());
  }
};

class HeadHandleTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = "/tmp/nasgw-head-test-" + std::to_string(getpid()) + "-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
    socket_ = dir_ + "/head.sock";
    ASSERT_NO_FATAL_FAILURE(n_.Format("naa.hh"));
    ASSERT_NO_FATAL_FAILURE(n_.Serve(socket_));
    nasgw_client_options co{};
    co.socket_path = socket_.c_str();
    co.client_name = "head_handle_test";
    co.reconnect_timeout_ms = 20'000;
    ASSERT_EQ(nasgw_client_open(&co, &c_), 0) << nasgw_client_last_message();
    ASSERT_EQ(nasgw_mount(c_, &kRoot, "vol1", &root_), 0) << nasgw_client_last_message();
  }
  void TearDown() override {
    if (c_ != nullptr) nasgw_client_close(c_);
    n_.Stop();
    std::filesystem::remove_all(dir_);
  }

  nasgw_attr Make(const nasgw_handle& dir, const char* name, uint32_t type = NASGW_TYPE_REG) {
    nasgw_attr a{};
    EXPECT_EQ(nasgw_create(c_, &kRoot, &dir, name, type, 0755, 0, nullptr, 0, &a), 0)
        << name << ": " << nasgw_client_last_message();
    return a;
  }
  nasgw_attr Look(const nasgw_handle& dir, const char* name) {
    nasgw_attr a{};
    EXPECT_EQ(nasgw_lookup(c_, &kRoot, &dir, name, &a), 0) << name << ": " << nasgw_client_last_message();
    return a;
  }
  int GetAttr(const nasgw_handle& h) {
    nasgw_attr a{};
    return nasgw_getattr(c_, &kRoot, &h, &a);
  }

  std::string dir_, socket_;
  Nasgwd n_;
  nasgw_client* c_ = nullptr;
  nasgw_attr root_{};
};

TEST_F(HeadHandleTest, IssuedHandlesCarryAMacAndRandomGenerations) {
  nasgw_attr f = Make(root_.handle, "f");
  EXPECT_NE(f.handle.gen, 0u);
  EXPECT_EQ(f.handle.scope, 1u);  // the volume's root: a whole-volume scope
  EXPECT_EQ(f.handle.snap, 0u);
  uint8_t zero[NASGW_MAC_BYTES] = {};
  EXPECT_NE(std::memcmp(f.handle.mac, zero, sizeof(zero)), 0);
  // Every reply that carries attributes carries the handle too: the same one.
  nasgw_attr again = Look(root_.handle, "f");
  EXPECT_TRUE(SameHandle(again.handle, f.handle));
  nasgw_dirent ents[4];
  nasgw_attr attrs[4];
  uint32_t n = 0;
  int eof = 0;
  ASSERT_EQ(nasgw_readdir(c_, &kRoot, &root_.handle, 0, 4, NASGW_READDIR_PLUS, ents, attrs, &n, &eof), 0);
  ASSERT_EQ(n, 1u);
  EXPECT_TRUE(SameHandle(attrs[0].handle, f.handle));
  EXPECT_EQ(GetAttr(attrs[0].handle), 0);
  EXPECT_EQ(nasgw_write(c_, &kRoot, &attrs[0].handle, 0, "abc", 3, 0, nullptr), 3);
}

// Whatever a client changes in a handle, nasgwd refuses it (EBADMSG) before
// it looks at anything else: no wildcard generation, no guessed one, no
// other volume or scope, no altered MAC.
TEST_F(HeadHandleTest, ForgedHandlesAreRefused) {
  nasgw_attr f = Make(root_.handle, "secret");
  ASSERT_EQ(nasgw_write(c_, &kRoot, &f.handle, 0, "data", 4, 0, nullptr), 4);
  nasgw_attr other{};
  ASSERT_EQ(nasgw_mount(c_, &kRoot, "vol2", &other), 0);
  nasgw_attr g = Make(other.handle, "g");
  std::mt19937_64 rng(11);
  std::vector<std::pair<std::string, nasgw_handle>> forged;
  auto add = [&](std::string what, auto change) {
    nasgw_handle h = f.handle;
    change(h);
    forged.push_back({std::move(what), h});
  };
  add("generation 0 (the old wildcard)", [](nasgw_handle& h) { h.gen = 0; });
  add("a random generation", [&](nasgw_handle& h) { h.gen = rng() | 1; });
  add("the next generation", [](nasgw_handle& h) { h.gen++; });
  add("another inode", [](nasgw_handle& h) { h.ino++; });
  add("another volume", [&](nasgw_handle& h) { h.volume = other.handle.volume; });
  add("a snapshot", [](nasgw_handle& h) { h.snap = 1; });
  add("another scope", [](nasgw_handle& h) { h.scope = 2; });
  add("no MAC", [](nasgw_handle& h) { std::memset(h.mac, 0, sizeof(h.mac)); });
  for (int i = 0; i < NASGW_MAC_BYTES; i++) {
    add("MAC byte " + std::to_string(i), [i](nasgw_handle& h) { h.mac[i] ^= 0x01; });
  }
  // Another volume's inode with this file's MAC, and the reverse.
  add("vol2's file with vol1's MAC", [&](nasgw_handle& h) {
    h.volume = g.handle.volume;
    h.ino = g.handle.ino;
    h.gen = g.handle.gen;
  });
  for (const auto& [what, h] : forged) {
    nasgw_attr a{};
    EXPECT_EQ(nasgw_getattr(c_, &kRoot, &h, &a), -EBADMSG) << what;
    char buf[8];
    EXPECT_EQ(nasgw_read(c_, &kRoot, &h, 0, buf, sizeof(buf), nullptr), -EBADMSG) << what;
  }
  // Every op that takes a handle checks it, RELEASE and UNLOCK included.
  nasgw_handle bad = f.handle;
  bad.gen = 0;
  nasgw_attr a{};
  uint32_t granted = 0;
  EXPECT_EQ(nasgw_lookup(c_, &kRoot, &bad, "x", &a), -EBADMSG);
  EXPECT_EQ(nasgw_write(c_, &kRoot, &bad, 0, "x", 1, 0, nullptr), -EBADMSG);
  EXPECT_EQ(nasgw_access(c_, &kRoot, &bad, NASGW_ACCESS_READ, &granted), -EBADMSG);
  EXPECT_EQ(nasgw_open(c_, &kRoot, &bad, NASGW_ACCESS_READ, &a), -EBADMSG);
  EXPECT_EQ(nasgw_lock(c_, &kRoot, &bad, 1, NASGW_LOCK_READ, 0, 1, nullptr), -EBADMSG);
  EXPECT_EQ(nasgw_unlock(c_, &kRoot, &bad, 1, 0, 1), -EBADMSG);
  nasgw_handle bad_root = root_.handle;
  bad_root.gen ^= 1;
  EXPECT_EQ(nasgw_create(c_, &kRoot, &bad_root, "n", NASGW_TYPE_REG, 0644, 0, nullptr, 0, &a), -EBADMSG);
  EXPECT_EQ(nasgw_rename(c_, &kRoot, &root_.handle, "secret", &bad_root, "moved", 0), -EBADMSG);
  EXPECT_EQ(nasgw_link(c_, &kRoot, &f.handle, &bad_root, "l", &a), -EBADMSG);
  // Two genuine handles of different scopes (exports) do not meet.
  EXPECT_EQ(nasgw_rename(c_, &kRoot, &root_.handle, "secret", &other.handle, "moved", 0), -EXDEV);
  // The genuine handle is untouched by all this.
  EXPECT_EQ(GetAttr(f.handle), 0);
}

// Another reserve's nasgwd issues handles with another secret: they mean
// nothing here, even for the same volume id and inode numbers.
TEST_F(HeadHandleTest, AnotherReservesHandlesAreRefused) {
  Nasgwd far;
  ASSERT_NO_FATAL_FAILURE(far.Format("naa.far"));
  HeadService svc([&] { return HeadDomain{far.domain, far.write_verifier}; });
  HeadSession s;
  proto::Request m;
  m.op = proto::Op::kMount;
  m.name = "vol1";
  HeadOutcome out = svc.Execute(s, m);
  ASSERT_EQ(out.err, 0) << out.why;
  nasgw_handle h{};
  h.volume = out.reply.volume.volume;
  h.ino = out.reply.volume.root.ino;
  h.gen = out.reply.volume.root.gen;
  h.scope = h.ino;
  std::memcpy(h.mac, out.reply.mac.data(), sizeof(h.mac));
  EXPECT_EQ(h.volume, root_.handle.volume);
  EXPECT_EQ(h.ino, root_.handle.ino);
  EXPECT_EQ(GetAttr(h), -EBADMSG);
  far.Stop();
}

// A sub-directory export: MOUNT with a path makes the directory a scope.
// Its handles reach what is below it and nothing else; ".." stops at it; a
// directory renamed out of it is out of reach (and back in reach when it
// returns: the parent cache follows renames).
TEST_F(HeadHandleTest, SubtreeScope) {
  nasgw_attr a = Make(root_.handle, "a", NASGW_TYPE_DIR);
  nasgw_attr b = Make(a.handle, "b", NASGW_TYPE_DIR);
  Make(b.handle, "f");
  nasgw_attr outside = Make(root_.handle, "outside", NASGW_TYPE_DIR);
  Make(outside.handle, "private");

  nasgw_attr ea{};
  ASSERT_EQ(nasgw_mount_path(c_, &kRoot, "vol1", "a", &ea), 0) << nasgw_client_last_message();
  EXPECT_EQ(ea.handle.ino, a.handle.ino);
  EXPECT_EQ(ea.handle.scope, a.handle.ino);
  nasgw_attr deep{};
  ASSERT_EQ(nasgw_mount_path(c_, &kRoot, "vol1", "a/b", &deep), 0);
  EXPECT_EQ(deep.handle.scope, b.handle.ino);
  nasgw_attr bad{};
  EXPECT_EQ(nasgw_mount_path(c_, &kRoot, "vol1", "a/b/f", &bad), -ENOTDIR);
  EXPECT_EQ(nasgw_mount_path(c_, &kRoot, "vol1", "a/none", &bad), -ENOENT);
  EXPECT_EQ(nasgw_mount_path(c_, &kRoot, "vol1", "a/../outside", &bad), -EINVAL);

  // Inside: handles issued in scope a.
  nasgw_attr sb = Look(ea.handle, "b");
  EXPECT_EQ(sb.handle.scope, a.handle.ino);
  nasgw_attr sf = Look(sb.handle, "f");
  EXPECT_EQ(GetAttr(sf.handle), 0);
  // ".." of the scope's directory is itself; below it, the real parent.
  nasgw_attr up = Look(ea.handle, "..");
  EXPECT_EQ(up.handle.ino, a.handle.ino);
  EXPECT_EQ(Look(sb.handle, "..").handle.ino, a.handle.ino);
  // A handle of the whole volume's scope is not one of scope a, and the
  // other way round (the MAC covers the scope).
  nasgw_handle h = outside.handle;
  h.scope = a.handle.ino;
  EXPECT_EQ(GetAttr(h), -EBADMSG);
  h = sb.handle;
  h.scope = 1;
  EXPECT_EQ(GetAttr(h), -EBADMSG);

  // b renamed out of a (through the whole volume): scope a's handle of b is
  // stale, and so is what is reached through it.
  ASSERT_EQ(nasgw_rename(c_, &kRoot, &a.handle, "b", &outside.handle, "b", 0), 0);
  EXPECT_EQ(GetAttr(sb.handle), -ESTALE);
  nasgw_attr x{};
  EXPECT_EQ(nasgw_lookup(c_, &kRoot, &sb.handle, "f", &x), -ESTALE);
  EXPECT_EQ(nasgw_create(c_, &kRoot, &sb.handle, "new", NASGW_TYPE_REG, 0644, 0, nullptr, 0, &x), -ESTALE);
  EXPECT_EQ(GetAttr(b.handle), 0) << "the whole volume still reaches it";
  // Renamed back in, deeper: reachable again.
  nasgw_attr c = Make(a.handle, "c", NASGW_TYPE_DIR);
  ASSERT_EQ(nasgw_rename(c_, &kRoot, &outside.handle, "b", &c.handle, "b", 0), 0);
  EXPECT_EQ(GetAttr(sb.handle), 0);
  // The scope's own directory moved elsewhere keeps its subtree.
  ASSERT_EQ(nasgw_rename(c_, &kRoot, &root_.handle, "a", &outside.handle, "a", 0), 0);
  EXPECT_EQ(GetAttr(sb.handle), 0);
  EXPECT_GT(n_.service->dir_parents().size(), 0u);
}

// The handles nasgwd issued stay valid when it restarts on the same LUNs
// (the secret is in the domain's metadata), for a client that reconnects
// and for a new one; forged handles stay refused.
TEST_F(HeadHandleTest, HandlesSurviveARestart) {
  nasgw_attr f = Make(root_.handle, "kept");
  ASSERT_EQ(nasgw_write(c_, &kRoot, &f.handle, 0, "persist", 7, NASGW_WRITE_STABLE, nullptr), 7);
  nasgw_attr a = Make(root_.handle, "sub", NASGW_TYPE_DIR);
  nasgw_attr scoped{};
  ASSERT_EQ(nasgw_mount_path(c_, &kRoot, "vol1", "sub", &scoped), 0);
  nasgw_attr inside = Make(scoped.handle, "in");
  for (int round = 0; round < 2; round++) {
    n_.Stop();
    ASSERT_NO_FATAL_FAILURE(n_.Open());
    ASSERT_NO_FATAL_FAILURE(n_.Serve(socket_));
    char buf[16] = {};
    EXPECT_EQ(nasgw_read(c_, &kRoot, &f.handle, 0, buf, sizeof(buf), nullptr), 7) << nasgw_client_last_message();
    EXPECT_EQ(std::string(buf, 7), "persist");
    EXPECT_EQ(GetAttr(inside.handle), 0);
    EXPECT_EQ(GetAttr(a.handle), 0);
    nasgw_handle forged = f.handle;
    forged.gen = 0;
    EXPECT_EQ(GetAttr(forged), -EBADMSG);
  }
  // A new client (a restarted head) holding the stored handle.
  nasgw_client* fresh = nullptr;
  nasgw_client_options co{};
  co.socket_path = socket_.c_str();
  ASSERT_EQ(nasgw_client_open(&co, &fresh), 0);
  nasgw_attr got{};
  EXPECT_EQ(nasgw_getattr(fresh, &kRoot, &f.handle, &got), 0);
  EXPECT_EQ(got.size, 7u);
  nasgw_client_close(fresh);
}

}  // namespace
}  // namespace nasgw::daemon
