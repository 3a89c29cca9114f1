// The reserve and the metadata store on real tgtd LUNs: one process (a
// controller) writes synced batches and is SIGKILLed at a random moment; a
// second process with another initiator name (the other controller) opens
// the reserve from the SAN alone and finds every acknowledged batch, whole.
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "block/iscsi_device.h"
#include "fs/meta_store.h"
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
