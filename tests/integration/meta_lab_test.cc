// The reserve and the metadata store on real tgtd LUNs: one process (a
// controller) writes synced batches and is SIGKILLed at a random moment; a
// second process with another initiator name (the other controller) opens
// the reserve from the SAN alone and finds every acknowledged batch, whole.
// And the pair active/active on tgt's persistent reservations: two nodes
// share the reservation, each owning a domain, and a takeover fences one.
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "block/gated_device.h"
#include "block/iscsi_device.h"
#include "fs/meta_store.h"
#include "fs/ownership.h"
#include "tests/lab/lab.h"

#include <sys/wait.h>

namespace nasgw::fs {
namespace {

constexpr uint64_t kMiB = 1 << 20;
constexpr int kKeysPerBatch = 10;

std::string Key(int i) {
  char b[32];
  std::snprintf(b, sizeof(b), "k/%08d", i);
  return b;
}

std::string Value(int batch) {
  return "batch-" + std::to_string(batch) + std::string(200, 'v');
}

Result<std::vector<Reserve::Device>> OpenLuns(const std::vector<std::string>& urls, const std::string& node) {
  return block::OpenLuns(urls, "iqn.2026-11.org.nasgw:" + node);
}

MetaFsOptions FsOptions() {
  MetaFsOptions o;
  o.log_compact_bytes = 1 << 20;  // compact during the test
  return o;
}

// The writer: runs in a child process, prints the number of every batch it
// has had acknowledged (durable), until it is killed.
int ChildWriter(const std::vector<std::string>& urls, int first_batch) {
  auto devs = OpenLuns(urls, "node-writer");
  if (!devs.ok()) {
    std::fprintf(stderr, "child: %s\n", devs.status().ToString().c_str());
    return 2;
  }
  auto reserve = Reserve::Open(*devs);
  if (!reserve.ok()) return 3;
  std::shared_ptr<Reserve> r = std::move(reserve.value());
  auto fs = MetaFs::Mount(r, 0, FsOptions());
  if (!fs.ok()) return 4;
  MetaStoreOptions so;
  so.write_buffer_bytes = 512 << 10;
  auto store = MetaStore::Open(fs->get(), so);
  if (!store.ok()) return 5;
  for (int b = first_batch;; b++) {
    MetaBatch batch;
    for (int i = 0; i < kKeysPerBatch; i++) batch.Put(Key(b * kKeysPerBatch + i), Value(b));
    Status s = (*store)->Write(batch, /*sync=*/true);
    if (!s.ok()) {
      std::fprintf(stderr, "child: write: %s\n", s.ToString().c_str());
      return 6;
    }
    std::printf("%d\n", b);
    std::fflush(stdout);
  }
}

TEST(MetaLab, AcknowledgedBatchesSurviveAKilledControllerAndOpenElsewhere) {
  auto lab = lab::Lab::Start("meta", {.luns = 3, .size = "256M"});
  ASSERT_TRUE(lab.ok()) << lab.status().ToString();
  std::vector<std::string> urls = {(*lab)->Url(0), (*lab)->Url(1), (*lab)->Url(2)};
  {
    auto devs = OpenLuns(urls, "node-admin");
    ASSERT_TRUE(devs.ok()) << devs.status().ToString();
    ReserveOptions ro;
    ro.name = "lab";
    ro.ag_bytes = 16 * kMiB;
    auto r = Reserve::Format(*devs, ro);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    std::shared_ptr<Reserve> reserve = std::move(r.value());
    ASSERT_EQ(reserve->capacity_bytes(), uint64_t{3} * 15 * 16 * kMiB);  // (256 - 2) MiB holds 15 groups
    std::vector<AgId> groups = {{0, 0}, {1, 0}, {2, 0}, {0, 1}, {1, 1}, {2, 1}};
    ASSERT_TRUE(MetaFs::Create(reserve, 0, groups, FsOptions()).ok());
  }

  std::mt19937_64 rng(11);
  int acked = 0;  // batches [0, acked) were acknowledged
  for (int round = 0; round < 20; round++) {
    int out[2];
    ASSERT_EQ(pipe(out), 0);
    pid_t pid = fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      dup2(out[1], 1);
      close(out[0]);
      std::vector<std::string> args = {"/proc/self/exe", "--child-writer", std::to_string(acked)};
      for (const auto& u : urls) args.push_back(u);
      std::vector<char*> argv;
      argv.reserve(args.size());
      for (auto& a : args) argv.push_back(a.data());
      argv.push_back(nullptr);
      execv("/proc/self/exe", argv.data());
      _exit(127);
    }
    close(out[1]);
    FILE* f = fdopen(out[0], "r");
    const int kill_after = 20 + static_cast<int>(rng() % 150);
    int seen = 0, last = acked - 1;
    char line[64];
    while (seen < kill_after && std::fgets(line, sizeof(line), f) != nullptr) {
      last = std::atoi(line);
      seen++;
    }
    kill(pid, SIGKILL);  // a controller dies mid-stream
    int status = 0;
    waitpid(pid, &status, 0);
    std::fclose(f);
    ASSERT_EQ(seen, kill_after) << "the writer stopped early (exit " << WEXITSTATUS(status) << ")";
    acked = last + 1;

    // The other controller: its own sessions, LUNs in another order.
    std::vector<std::string> shuffled = urls;
    std::shuffle(shuffled.begin(), shuffled.end(), rng);
    auto devs = OpenLuns(shuffled, "node-survivor");
    ASSERT_TRUE(devs.ok()) << devs.status().ToString();
    auto r = Reserve::Open(*devs);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    std::shared_ptr<Reserve> reserve = std::move(r.value());
    auto fs = MetaFs::Mount(reserve, 0, FsOptions());
    ASSERT_TRUE(fs.ok()) << fs.status().ToString();
    auto store = MetaStore::Open(fs->get());
    ASSERT_TRUE(store.ok()) << store.status().ToString();
    int present = 0;
    for (int b = 0; b < acked; b++) {
      for (int i = 0; i < kKeysPerBatch; i++) {
        auto v = (*store)->Get(Key(b * kKeysPerBatch + i));
        ASSERT_TRUE(v.ok()) << "round " << round << ": acknowledged batch " << b << " lost";
        ASSERT_EQ(*v, Value(b));
      }
      present++;
    }
    // A batch in flight at the kill is all there or not at all.
    int partial = 0;
    for (int i = 0; i < kKeysPerBatch; i++) partial += (*store)->Get(Key(acked * kKeysPerBatch + i)).ok();
    EXPECT_TRUE(partial == 0 || partial == kKeysPerBatch) << "batch " << acked << " half applied";
    if (partial == kKeysPerBatch) acked++;
    std::printf("round %d: %d batches acknowledged, all present after the kill\n", round, present);
  }
}

// The node's LUNs behind its write gate, as nasgwd opens them.
struct LabNode {
  NodeIdentity me;
  std::shared_ptr<block::WriteGate> gate = std::make_shared<block::WriteGate>();
  std::vector<std::shared_ptr<block::BlockDevice>> devs;
  LabNode(const std::vector<std::string>& urls, const std::string& name) {
    me = NodeIdentity::ForProcess(name, Uuid::Random());
    auto raw = OpenLuns(urls, name);
    if (!raw.ok()) {
      ADD_FAILURE() << raw.status().ToString();
      return;
    }
    devs = block::Gate(*raw, gate);
  }
  Status Write(size_t lun, uint8_t v) const {
    std::vector<uint8_t> b(4096, v);
    return block::WriteSync(*devs[lun], 64 * kMiB / 512, b.data(), b.size(), /*fua=*/true);
  }
  uint8_t Read(size_t lun) const {
    std::vector<uint8_t> b(4096);
    EXPECT_TRUE(block::ReadSync(*devs[lun], 64 * kMiB / 512, b.data(), b.size()).ok());
    return b[0];
  }
};

TEST(MetaLab, TwoNodesShareTheReservationEachOwningADomain) {
  auto lab = lab::Lab::Start("share", {.luns = 2, .size = "128M"});
  ASSERT_TRUE(lab.ok()) << lab.status().ToString();
  const std::vector<std::string> urls = {(*lab)->Url(0), (*lab)->Url(1)};
  const Uuid reserve = Uuid::Random();
  LabNode a(urls, "node-a"), b(urls, "node-b");
  ASSERT_EQ(a.devs.size(), 2u);
  ASSERT_EQ(b.devs.size(), 2u);
  OwnershipOptions o;
  o.shared = true;
  o.renew_interval_ms = 200;
  o.lease_ms = 1000;
  o.preempt_settle_ms = 100;
  std::atomic<int> a_lost{0}, b_lost{0};
  auto oa =
      Ownership::Acquire(a.devs, a.gate, reserve, 0, a.me, o, AcquireMode::kNormal, [&](const Status&) { a_lost++; });
  ASSERT_TRUE(oa.ok()) << oa.status().ToString();
  auto ob =
      Ownership::Acquire(b.devs, b.gate, reserve, 1, b.me, o, AcquireMode::kNormal, [&](const Status&) { b_lost++; });
  ASSERT_TRUE(ob.ok()) << ob.status().ToString();
  ASSERT_TRUE((*oa)->pr_supported()) << "tgt has persistent reservations";
  // Both write to both LUNs (each is a registrant of the one reservation).
  for (size_t lun = 0; lun < 2; lun++) {
    ASSERT_TRUE(a.Write(lun, 0xa1).ok());
    ASSERT_TRUE(b.Write(lun, 0xb1).ok());
    EXPECT_EQ(a.Read(lun), 0xb1);
  }
  auto keys = block::PrReadKeysSync(*a.devs[0]);
  ASSERT_TRUE(keys.ok()) << keys.status().ToString();
  EXPECT_EQ(keys->keys.size(), 2u);
  // Neither takes the other's domain without a takeover, and renewals go on.
  EXPECT_EQ((*oa)->AcquireDomain(1, AcquireMode::kNormal).code(), Code::kFenced);
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (((*oa)->renewals() < 3 || (*ob)->renewals() < 3) && std::chrono::steady_clock::now() < until) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  EXPECT_GE((*oa)->renewals(), 3u);
  EXPECT_GE((*ob)->renewals(), 3u);
  EXPECT_EQ(a_lost.load() + b_lost.load(), 0);
  // node-b takes domain 0 over: node-a (which holds the reservation) is
  // fenced on every LUN by the array, node-b writes on.
  ASSERT_TRUE((*ob)->AcquireDomain(0, AcquireMode::kTakeover).ok());
  for (size_t lun = 0; lun < 2; lun++) {
    EXPECT_EQ(a.Write(lun, 0xa2).code(), Code::kFenced) << lun;
    ASSERT_TRUE(b.Write(lun, 0xb2).ok()) << lun;
    EXPECT_EQ(b.Read(lun), 0xb2);
  }
  auto v = ReadOwner(b.devs, reserve, 0);
  ASSERT_TRUE(v.ok());
  EXPECT_EQ(v->record->node_name, "node-b");
  EXPECT_EQ(v->keys, std::vector<uint64_t>{b.me.key()});
  EXPECT_EQ(v->reservation.key, b.me.key());
  EXPECT_EQ((*ob)->domains(), (std::vector<uint32_t>{1, 0}));
  // node-b, the last node out, leaves the LUNs unreserved and unregistered.
  ASSERT_TRUE((*ob)->Release().ok());
  v = ReadOwner(b.devs, reserve, 0);
  ASSERT_TRUE(v.ok());
  EXPECT_FALSE(v->reservation.reserved);
  EXPECT_TRUE(v->keys.empty());
  EXPECT_EQ(b_lost.load(), 0);
}

}  // namespace
}  // namespace nasgw::fs

int main(int argc, char** argv) {
  if (argc >= 3 && std::string(argv[1]) == "--child-writer") {
    std::vector<std::string> urls(argv + 3, argv + argc);
    return nasgw::fs::ChildWriter(urls, std::atoi(argv[2]));
  }
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
