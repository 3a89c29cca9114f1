// The file system's domain API on real tgtd LUNs: online growth while a
// write stream runs, and UNMAP giving freed space back to a thin array.
#include <atomic>
#include <thread>

#include <gtest/gtest.h>

#include "block/iscsi_device.h"
#include "fs/domain.h"
#include "tests/lab/lab.h"

#include <sys/stat.h>

namespace nasgw::fs {
namespace {

constexpr uint64_t kMiB = 1 << 20;

Reserve::Device OpenLun(const std::string& url) {
  block::IscsiOptions o;
  o.urls = {url};
  auto d = block::IscsiDevice::Open(o);
  EXPECT_TRUE(d.ok()) << d.status().ToString();
  return d.ok() ? Reserve::Device(std::move(d.value())) : nullptr;
}

uint64_t AllocatedBytes(const std::string& file) {
  struct stat st;
  return stat(file.c_str(), &st) == 0 ? static_cast<uint64_t>(st.st_blocks) * 512 : 0;
}

struct Fixture {
  std::unique_ptr<lab::Lab> lab;
  std::shared_ptr<Reserve> reserve;
  std::unique_ptr<Domain> dom;
  uint32_t vol = 0;
};

Fixture Make(int luns_in_reserve) {
  Fixture f;
  auto lab = lab::Lab::Start("fslab", {.luns = 3, .size = "256M"});
  EXPECT_TRUE(lab.ok()) << lab.status().ToString();
  if (!lab.ok()) return f;
  f.lab = std::move(lab.value());
  std::vector<Reserve::Device> devs;
  devs.reserve(luns_in_reserve);
  for (int i = 0; i < luns_in_reserve; i++) devs.push_back(OpenLun(f.lab->Url(i)));
  ReserveOptions ro;
  ro.name = "lab";
  ro.ag_bytes = 16 * kMiB;
  auto r = Reserve::Format(devs, ro);
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  f.reserve = std::move(r.value());
  auto d = Domain::Create(f.reserve, 0);
  EXPECT_TRUE(d.ok()) << d.status().ToString();
  f.dom = std::move(d.value());
  auto v = f.dom->CreateVolume("v");
  EXPECT_TRUE(v.ok());
  f.vol = v->id;
  return f;
}

TEST(FsLab, AddingALunDuringAWriteStreamGrowsCapacityWithoutErrors) {
  Fixture f = Make(2);
  ASSERT_TRUE(f.dom);
  auto file = f.dom->Create(f.vol, kRootIno, "stream", FileType::kRegular, 0644, 0, 0);
  ASSERT_TRUE(file.ok());
  const uint64_t before = f.dom->Statfs().total_bytes;
  std::atomic<bool> stop{false};
  std::atomic<int> writes{0};
  Status first_error;
  std::string chunk(128 << 10, 's');
  std::thread writer([&] {
    for (uint64_t off = 0; !stop.load(); off += chunk.size()) {
      auto a = f.dom->Write(f.vol, file->ino, off % (64 * kMiB), chunk.data(), chunk.size());
      if (!a.ok() && first_error.ok()) first_error = a.status();
      writes++;
    }
  });
  while (writes.load() < 30) std::this_thread::yield();
  ASSERT_TRUE(f.reserve->AddLun(OpenLun(f.lab->Url(2))).ok());
  auto grew = f.dom->Grow();
  ASSERT_TRUE(grew.ok()) << grew.status().ToString();
  const int at = writes.load();
  while (writes.load() < at + 30) std::this_thread::yield();
  stop = true;
  writer.join();
  EXPECT_TRUE(first_error.ok()) << first_error.ToString();
  EXPECT_GT(*grew, 0u);
  EXPECT_EQ(f.dom->Statfs().total_bytes, before + *grew);
  auto problems = f.dom->Check();
  ASSERT_TRUE(problems.ok());
  EXPECT_TRUE(problems->empty()) << (*problems)[0];
}

TEST(FsLab, FreedSpaceIsUnmappedOnTheArray) {
  Fixture f = Make(1);
  ASSERT_TRUE(f.dom);
  auto file = f.dom->Create(f.vol, kRootIno, "big", FileType::kRegular, 0644, 0, 0);
  ASSERT_TRUE(file.ok());
  std::string chunk(1 << 20, 'u');
  for (int i = 0; i < 32; i++)
    ASSERT_TRUE(f.dom->Write(f.vol, file->ino, i * chunk.size(), chunk.data(), chunk.size()).ok());
  const uint64_t full = AllocatedBytes(f.lab->LunFile(0));
  ASSERT_TRUE(f.dom->Unlink(f.vol, kRootIno, "big").ok());
  const uint64_t after = AllocatedBytes(f.lab->LunFile(0));
  EXPECT_LT(after + 24 * kMiB, full) << "the array should have got most of the 32 MiB back (" << full << " -> " << after
                                     << " bytes allocated)";
}

}  // namespace
}  // namespace nasgw::fs
