// nasgw-bench snapshots: what creating and deleting snapshots costs
// (issue 14). Many snapshots are taken under a random-overwrite load, then
// deleted in random order; every create's and delete's time is written as a
// JSON line with what the delete freed, for bench/snapshot_bench.py to chart
// (deletion time against bytes freed, and against how many snapshots the
// volume has).
//
// The domain is on in-memory LUNs (block::MemLun): what is measured is the
// metadata work a deletion does (the dead-list range it scans and the
// extents it frees), not the array's latency.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "block/mem_device.h"
#include "fs/domain.h"

namespace nasgw::bench {
namespace {

struct SnapArgs {
  uint32_t snapshots = 10000;
  uint32_t files = 16;
  uint32_t file_mib = 16;
  uint32_t writes = 16;  // overwrites between two snapshots
  uint32_t write_kib = 16;
  uint32_t lun_mib = 2048;
  uint32_t luns = 2;
  uint64_t seed = 1;
};

[[noreturn]] void SnapUsage(const char* why) {
  std::fprintf(stderr,
               "nasgw-bench snapshots: %s\n"
               "usage: nasgw-bench snapshots [--snapshots N] [--files N] [--file-mib N] [--writes N]\n"
               "                             [--write-kib N] [--lun-mib N] [--luns N] [--seed N]\n",
               why);
  std::exit(2);
}

uint64_t Number(const char* flag, const char* v, uint64_t lo, uint64_t hi) {
  char* end = nullptr;
  errno = 0;
  const unsigned long long n = std::strtoull(v, &end, 10);
  if (errno != 0 || end == v || *end != '\0' || n < lo || n > hi) {
    SnapUsage((std::string(flag) + " wants a number from " + std::to_string(lo) + " to " + std::to_string(hi)).c_str());
  }
  return n;
}

bool Fail(const char* what, const Status& s) {
  std::fprintf(stderr, "nasgw-bench snapshots: %s: %s\n", what, s.ToString().c_str());
  return false;
}

uint64_t Ns(std::chrono::steady_clock::time_point a) {
  return static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - a).count());
}

bool RunSnapshots(const SnapArgs& a) {
  std::vector<fs::Reserve::Device> devs;
  for (uint32_t i = 0; i < a.luns; i++) {
    auto lun = std::make_shared<block::MemLun>(512, uint64_t{a.lun_mib} << 11, "naa.snapbench" + std::to_string(i));
    devs.push_back(std::make_shared<block::MemDevice>(lun));
  }
  fs::ReserveOptions ro;
  ro.name = "snapbench";
  ro.ag_bytes = 64ull << 20;
  auto r = fs::Reserve::Format(devs, ro);
  if (!r.ok()) return Fail("format", r.status());
  std::shared_ptr<fs::Reserve> reserve = std::move(r.value());
  fs::DomainOptions o;
  o.unmap_freed = false;
  auto d = fs::Domain::Create(reserve, 0, o);
  if (!d.ok()) return Fail("domain", d.status());
  fs::Domain& dom = **d;
  auto v = dom.CreateVolume("bench");
  if (!v.ok()) return Fail("volume", v.status());
  const uint32_t vol = v->id;
  std::mt19937_64 rng(a.seed);
  std::vector<uint64_t> inos;
  std::vector<uint8_t> buf(std::max<size_t>(size_t{a.write_kib} << 10, 1 << 20));
  for (auto& b : buf) b = static_cast<uint8_t>(rng());
  const uint64_t file_bytes = uint64_t{a.file_mib} << 20;
  for (uint32_t i = 0; i < a.files; i++) {
    auto f = dom.Create(vol, fs::kRootIno, "f" + std::to_string(i), fs::FileType::kRegular, 0644, 0, 0);
    if (!f.ok()) return Fail("create", f.status());
    inos.push_back(f->ino);
    for (uint64_t off = 0; off < file_bytes; off += 1 << 20) {
      auto w = dom.Write(vol, f->ino, off, buf.data(), 1 << 20);
      if (!w.ok()) return Fail("fill", w.status());
    }
  }
  const size_t wbytes = size_t{a.write_kib} << 10;
  const uint64_t slots = file_bytes / wbytes;
  std::vector<std::string> names;
  for (uint32_t s = 0; s < a.snapshots; s++) {
    for (uint32_t w = 0; w < a.writes; w++) {
      buf[w % buf.size()]++;
      auto put = dom.Write(vol, inos[rng() % inos.size()], (rng() % slots) * wbytes, buf.data(), wbytes);
      if (!put.ok()) return Fail("overwrite", put.status());
    }
    char name[32];
    std::snprintf(name, sizeof(name), "s%06u", s);
    const auto t0 = std::chrono::steady_clock::now();
    auto made = dom.CreateSnapshot("bench", name);
    const uint64_t ns = Ns(t0);
    if (!made.ok()) return Fail("snapshot", made.status());
    names.push_back(name);
    std::printf("{\"op\": \"create\", \"n\": %u, \"ns\": %llu}\n", s + 1, static_cast<unsigned long long>(ns));
  }
  const uint64_t free_all_taken = dom.Statfs().free_bytes;
  std::shuffle(names.begin(), names.end(), rng);
  size_t left = names.size();
  for (const std::string& n : names) {
    const auto t0 = std::chrono::steady_clock::now();
    auto gone = dom.DeleteSnapshot("bench", n);
    const uint64_t ns = Ns(t0);
    if (!gone.ok()) return Fail("delete", gone.status());
    std::printf("{\"op\": \"delete\", \"snapshots\": %zu, \"freed\": %llu, \"freed_meta\": %llu, \"ns\": %llu}\n",
                left--, static_cast<unsigned long long>(gone->frees_bytes),
                static_cast<unsigned long long>(gone->frees_meta_bytes), static_cast<unsigned long long>(ns));
  }
  auto problems = dom.Check();
  if (!problems.ok()) return Fail("check", problems.status());
  for (const std::string& p : *problems) std::fprintf(stderr, "nasgw-bench snapshots: fsck: %s\n", p.c_str());
  std::printf("{\"op\": \"end\", \"free_with_snapshots\": %llu, \"free_after\": %llu, \"fsck_problems\": %zu}\n",
              static_cast<unsigned long long>(free_all_taken), static_cast<unsigned long long>(dom.Statfs().free_bytes),
              problems->size());
  return true;
}

}  // namespace

int SnapshotMain(int argc, char** argv) {
  SnapArgs a;
  for (int i = 2; i < argc; i++) {
    const std::string f = argv[i];
    if (i + 1 >= argc) SnapUsage(("missing value for " + f).c_str());
    const char* v = argv[++i];
    if (f == "--snapshots") {
      a.snapshots = static_cast<uint32_t>(Number("--snapshots", v, 1, 100000));
    } else if (f == "--files") {
      a.files = static_cast<uint32_t>(Number("--files", v, 1, 10000));
    } else if (f == "--file-mib") {
      a.file_mib = static_cast<uint32_t>(Number("--file-mib", v, 1, 4096));
    } else if (f == "--writes") {
      a.writes = static_cast<uint32_t>(Number("--writes", v, 0, 100000));
    } else if (f == "--write-kib") {
      a.write_kib = static_cast<uint32_t>(Number("--write-kib", v, 4, 1024));
    } else if (f == "--lun-mib") {
      a.lun_mib = static_cast<uint32_t>(Number("--lun-mib", v, 256, 65536));
    } else if (f == "--luns") {
      a.luns = static_cast<uint32_t>(Number("--luns", v, 1, 16));
    } else if (f == "--seed") {
      a.seed = Number("--seed", v, 0, UINT64_MAX);
    } else {
      SnapUsage(("unknown flag " + f).c_str());
    }
  }
  if (a.write_kib % 4 != 0) SnapUsage("--write-kib must be a multiple of 4");
  return RunSnapshots(a) ? 0 : 1;
}

}  // namespace nasgw::bench
