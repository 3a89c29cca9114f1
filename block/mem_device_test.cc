#include "block/mem_device.h"

#include <atomic>
#include <cstring>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

namespace nasgw::block {
namespace {

std::vector<uint8_t> Pattern(size_t len, uint8_t seed) {
  std::vector<uint8_t> v(len);
  for (size_t i = 0; i < len; i++) v[i] = static_cast<uint8_t>(seed + i * 7);
  return v;
}

TEST(MemDevice, VectoredWriteReadBack) {
  auto lun = std::make_shared<MemLun>(512, 64);
  MemDevice dev(lun);
  auto a = Pattern(300, 1), b = Pattern(724, 2);  // 1024 bytes split unevenly
  std::atomic<int> done{0};
  IoVec w[2] = {{a.data(), a.size()}, {b.data(), b.size()}};
  Status st = dev.Write(5, w, false, [&](const Status& s) {
    EXPECT_TRUE(s.ok());
    done++;
  });
  ASSERT_TRUE(st.ok());
  std::vector<uint8_t> out(1024);
  ASSERT_TRUE(ReadSync(dev, 5, out.data(), out.size()).ok());
  EXPECT_EQ(done.load(), 1);
  EXPECT_EQ(0, std::memcmp(out.data(), a.data(), a.size()));
  EXPECT_EQ(0, std::memcmp(out.data() + a.size(), b.data(), b.size()));
}

TEST(MemDevice, BadRequestsFailAtOnceWithoutCallback) {
  auto lun = std::make_shared<MemLun>(512, 64);
  MemDevice dev(lun);
  std::vector<uint8_t> buf(1024);
  bool called = false;
  IoVec v{buf.data(), 1024};
  Status s = dev.Read(63, {&v, 1}, [&](const Status&) { called = true; });
  EXPECT_EQ(s.code(), Code::kOutOfRange);
  IoVec odd{buf.data(), 100};
  EXPECT_EQ(dev.Write(0, {&odd, 1}, false, [&](const Status&) { called = true; }).code(), Code::kInvalidArgument);
  EXPECT_EQ(dev.Unmap(0, 0, [&](const Status&) { called = true; }).code(), Code::kInvalidArgument);
  EXPECT_EQ(dev.Read(0, {&v, 1}, nullptr).code(), Code::kInvalidArgument);
  ASSERT_TRUE(FlushSync(dev).ok());  // drains: any stray callback would have run
  EXPECT_FALSE(called);
}

TEST(MemDevice, PowerCutDropsOnlyUnsyncedWrites) {
  auto lun = std::make_shared<MemLun>(512, 16);
  MemDevice dev(lun);
  auto synced = Pattern(512, 3), fua = Pattern(512, 4), lost = Pattern(512, 5);
  ASSERT_TRUE(WriteSync(dev, 0, synced.data(), 512).ok());
  ASSERT_TRUE(FlushSync(dev).ok());
  ASSERT_TRUE(WriteSync(dev, 1, fua.data(), 512, /*fua=*/true).ok());
  ASSERT_TRUE(WriteSync(dev, 2, lost.data(), 512).ok());
  EXPECT_EQ(lun->UnsyncedBlocks(), 1u);
  lun->PowerCut();
  std::vector<uint8_t> out(size_t{512} * 3);
  ASSERT_TRUE(ReadSync(dev, 0, out.data(), out.size()).ok());
  EXPECT_EQ(0, std::memcmp(out.data(), synced.data(), 512));
  EXPECT_EQ(0, std::memcmp(out.data() + 512, fua.data(), 512));
  EXPECT_EQ(std::vector<uint8_t>(out.begin() + 1024, out.end()), std::vector<uint8_t>(512, 0));
}

TEST(MemDevice, CompareAndWriteHasOneWinner) {
  auto lun = std::make_shared<MemLun>(512, 4);
  MemDevice a(lun, 1), b(lun, 2);
  std::vector<uint8_t> zero(512, 0), ida(512, 0xA), idb(512, 0xB);
  EXPECT_TRUE(CompareAndWriteSync(a, 0, zero.data(), ida.data(), 512).ok());
  EXPECT_EQ(CompareAndWriteSync(b, 0, zero.data(), idb.data(), 512).code(), Code::kMiscompare);
  std::vector<uint8_t> out(512);
  ASSERT_TRUE(ReadSync(b, 0, out.data(), 512).ok());
  EXPECT_EQ(out, ida);
}

TEST(MemDevice, PreemptAndAbortFencesTheLoser) {
  auto lun = std::make_shared<MemLun>(512, 4);
  MemDevice a(lun, 1), b(lun, 2);
  const auto we_ro = PrType::kWriteExclusiveRegistrantsOnly;
  ASSERT_TRUE(PrOutSync(a, {PrAction::kRegister, PrType::kNone, 0, 0xA}).ok());
  ASSERT_TRUE(PrOutSync(b, {PrAction::kRegister, PrType::kNone, 0, 0xB}).ok());
  ASSERT_TRUE(PrOutSync(a, {PrAction::kReserve, we_ro, 0xA, 0}).ok());
  auto keys = PrReadKeysSync(b);
  ASSERT_TRUE(keys.ok());
  EXPECT_EQ(keys->keys.size(), 2u);
  ASSERT_TRUE(PrOutSync(b, {PrAction::kPreemptAndAbort, we_ro, 0xB, 0xA}).ok());
  auto resv = PrReadReservationSync(a);
  ASSERT_TRUE(resv.ok());
  EXPECT_TRUE(resv->reserved);
  EXPECT_EQ(resv->key, 0xBu);
  std::vector<uint8_t> data(512, 0x55), out(512);
  EXPECT_EQ(WriteSync(a, 1, data.data(), 512).code(), Code::kFenced);
  ASSERT_TRUE(ReadSync(b, 1, out.data(), 512).ok());
  EXPECT_EQ(out, std::vector<uint8_t>(512, 0));
  EXPECT_TRUE(WriteSync(b, 1, data.data(), 512).ok());
}

TEST(MemDevice, FaultInjection) {
  auto lun = std::make_shared<MemLun>(512, 4);
  MemDevice dev(lun);
  dev.SetFault([](const IoRequest& r) { return r.op == Op::kWrite ? Status::IoError("injected") : Status(); });
  std::vector<uint8_t> data(512, 1);
  EXPECT_EQ(WriteSync(dev, 0, data.data(), 512).code(), Code::kIoError);
  EXPECT_TRUE(ReadSync(dev, 0, data.data(), 512).ok());
  EXPECT_EQ(data, std::vector<uint8_t>(512, 0));
  dev.SetFault(nullptr);
  EXPECT_TRUE(WriteSync(dev, 0, data.data(), 512).ok());
  EXPECT_EQ(dev.Stats().write.errors, 1u);
  EXPECT_EQ(dev.Stats().write.ops, 2u);
}

}  // namespace
}  // namespace nasgw::block

namespace nasgw::block {
namespace {

// Many initiators racing COMPARE AND WRITE on one block: each round has
// exactly one winner, as a disk lock needs.
TEST(MemDevice, ConcurrentCompareAndWriteRace) {
  auto lun = std::make_shared<MemLun>(512, 4);
  constexpr int kNodes = 4;
  std::vector<std::unique_ptr<MemDevice>> devs;
  devs.reserve(kNodes);
  for (int i = 0; i < kNodes; i++) devs.push_back(std::make_unique<MemDevice>(lun, i + 1));
  std::vector<uint8_t> current(512, 0);
  for (int round = 1; round <= 200; round++) {
    std::atomic<int> winners{0}, miscompares{0};
    std::vector<std::thread> threads;
    threads.reserve(kNodes);
    for (int i = 0; i < kNodes; i++) {
      threads.emplace_back([&, i] {
        std::vector<uint8_t> mine(512, static_cast<uint8_t>(round * kNodes + i));
        Status s = CompareAndWriteSync(*devs[i], 2, current.data(), mine.data(), 512);
        if (s.ok()) winners++;
        if (s.code() == Code::kMiscompare) miscompares++;
      });
    }
    for (auto& t : threads) t.join();
    ASSERT_EQ(winners.load(), 1) << "round " << round;
    ASSERT_EQ(miscompares.load(), kNodes - 1) << "round " << round;
    ASSERT_TRUE(ReadSync(*devs[0], 2, current.data(), 512).ok());
  }
}

}  // namespace
}  // namespace nasgw::block

namespace nasgw::block {
namespace {

TEST(IoBatchTest, ManyInFlightReadBackAndTheFirstErrorIsKept) {
  auto lun = std::make_shared<MemLun>(512, 4096);
  MemDevice dev(lun);
  std::vector<std::vector<uint8_t>> data(200, std::vector<uint8_t>(4096));
  for (size_t i = 0; i < data.size(); i++) std::fill(data[i].begin(), data[i].end(), static_cast<uint8_t>(i + 1));
  {
    IoBatch b(4);
    for (size_t i = 0; i < data.size(); i++) b.Write(dev, i * 8, data[i].data(), 4096, /*fua=*/true);
    ASSERT_TRUE(b.Wait().ok());
  }
  std::vector<std::vector<uint8_t>> back(data.size(), std::vector<uint8_t>(4096));
  IoBatch r(16);
  for (size_t i = 0; i < back.size(); i++) r.Read(dev, i * 8, back[i].data(), 4096);
  ASSERT_TRUE(r.Wait().ok());
  EXPECT_EQ(back, data);
  // A failed write is reported; the others still happen.
  dev.SetFault([](const IoRequest& q) { return q.lba == uint64_t{8} * 7 ? Status::IoError("bad block") : Status(); });
  std::vector<uint8_t> zeros(4096, 0);
  IoBatch w(3);
  for (size_t i = 0; i < 10; i++) w.Write(dev, i * 8, zeros.data(), 4096, false);
  w.Write(dev, 1u << 30, zeros.data(), 4096, false);  // past the end: refused at submission
  const Status s = w.Wait();
  EXPECT_FALSE(s.ok());
  dev.SetFault(nullptr);
  EXPECT_TRUE(ReadSync(dev, 0, back[0].data(), 4096).ok());
  EXPECT_EQ(back[0], zeros);
  EXPECT_TRUE(ReadSync(dev, uint64_t{8} * 7, back[7].data(), 4096).ok());
  EXPECT_EQ(back[7], data[7]) << "the failed write changed nothing";
}

}  // namespace
}  // namespace nasgw::block
