#include "block/gated_device.h"

#include <atomic>
#include <vector>

#include <gtest/gtest.h>

#include "block/mem_device.h"

namespace nasgw::block {
namespace {

TEST(GatedDevice, PassesThroughWhileOpen) {
  auto lun = std::make_shared<MemLun>(512, 64);
  auto gate = std::make_shared<WriteGate>();
  GatedDevice dev(std::make_shared<MemDevice>(lun), gate);
  std::vector<uint8_t> w(512, 0x5a), r(512);
  ASSERT_TRUE(WriteSync(dev, 3, w.data(), w.size()).ok());
  ASSERT_TRUE(FlushSync(dev).ok());
  ASSERT_TRUE(ReadSync(dev, 3, r.data(), r.size()).ok());
  EXPECT_EQ(r, w);
  EXPECT_TRUE(gate->is_open());
}

TEST(GatedDevice, ClosedGateRefusesEveryChangeButReads) {
  auto lun = std::make_shared<MemLun>(512, 64);
  auto gate = WriteGate::Closed(Status::PermissionDenied("read-only check"));
  auto inner = std::make_shared<MemDevice>(lun);
  GatedDevice dev(inner, gate);
  std::vector<uint8_t> w(512, 0x11), r(512, 0xff);
  bool called = false;
  IoVec v{w.data(), w.size()};
  Status s = dev.Write(0, {&v, 1}, false, [&](const Status&) { called = true; });
  EXPECT_EQ(s.code(), Code::kPermissionDenied);
  EXPECT_NE(std::string(s.message()).find("read-only check"), std::string::npos) << s.ToString();
  EXPECT_EQ(FlushSync(dev).code(), Code::kPermissionDenied);
  EXPECT_EQ(UnmapSync(dev, 0, 1).code(), Code::kPermissionDenied);
  EXPECT_EQ(PrOutSync(dev, {PrAction::kRegister, PrType::kNone, 0, 7}).code(), Code::kPermissionDenied);
  ASSERT_TRUE(ReadSync(dev, 0, r.data(), r.size()).ok());
  EXPECT_EQ(r, std::vector<uint8_t>(512, 0));  // nothing reached the medium
  ASSERT_TRUE(FlushSync(*inner).ok());
  EXPECT_FALSE(called);
  EXPECT_EQ(inner->Stats().write.ops, 0u);
}

// A reservation conflict on one LUN closes the gate of every LUN sharing it,
// and the close callback runs once with the conflict as its reason.
TEST(GatedDevice, ConflictOnOneLunStopsWritesToAll) {
  auto lun_a = std::make_shared<MemLun>(512, 64, "mem.a");
  auto lun_b = std::make_shared<MemLun>(512, 64, "mem.b");
  auto gate = std::make_shared<WriteGate>();
  std::atomic<int> closes{0};
  Status why;
  gate->OnClose([&](const Status& s) {
    why = s;
    closes++;
  });
  auto mine_a = std::make_shared<MemDevice>(lun_a, 1);
  auto mine_b = std::make_shared<MemDevice>(lun_b, 1);
  auto devs = Gate({mine_a, mine_b}, gate);
  // We register and reserve (Write Exclusive, Registrants Only) on A, then
  // another initiator preempts our key.
  const uint64_t key = 0x4e47000000000001ull, other = 0x4e47000000000002ull;
  ASSERT_TRUE(PrOutSync(*devs[0], {PrAction::kRegisterAndIgnoreExistingKey, PrType::kNone, 0, key}).ok());
  ASSERT_TRUE(PrOutSync(*devs[0], {PrAction::kReserve, PrType::kWriteExclusiveRegistrantsOnly, key, 0}).ok());
  MemDevice thief(lun_a, 2);
  ASSERT_TRUE(PrOutSync(thief, {PrAction::kRegisterAndIgnoreExistingKey, PrType::kNone, 0, other}).ok());
  ASSERT_TRUE(FenceSync(thief, other, key, PrType::kWriteExclusiveRegistrantsOnly).ok());

  std::vector<uint8_t> w(512, 0x22);
  EXPECT_EQ(WriteSync(*devs[0], 0, w.data(), w.size()).code(), Code::kFenced);
  EXPECT_FALSE(gate->is_open());
  EXPECT_EQ(closes.load(), 1);
  EXPECT_EQ(why.code(), Code::kFenced);
  // B never saw a conflict, but the gate keeps our writes off it too.
  const uint64_t before = mine_b->Stats().write.ops;
  EXPECT_EQ(WriteSync(*devs[1], 0, w.data(), w.size()).code(), Code::kFenced);
  EXPECT_EQ(mine_b->Stats().write.ops, before);
  EXPECT_FALSE(gate->Close(Status::Fenced("again")));
  EXPECT_EQ(closes.load(), 1);
}

std::atomic<uint64_t> g_now{1000};
uint64_t FakeNow() {
  return g_now.load();
}

// Past its time bound (the owner's lease) the gate sends no change, even
// with nobody watching the clock: on an array without persistent
// reservations this is what keeps a node woken from a hang from writing
// over a new owner before its lease watchdog looks. Renewals move the
// bound; reads pass after it.
TEST(GatedDevice, NoChangeGoesOutPastTheTimeBound) {
  auto lun = std::make_shared<MemLun>(512, 64);
  auto gate = std::make_shared<WriteGate>();
  auto inner = std::make_shared<MemDevice>(lun);
  GatedDevice dev(inner, gate);
  g_now = 1000;
  gate->Bound(&FakeNow, /*give_up_ns=*/500, /*renewed_ns=*/1000);
  std::vector<uint8_t> w(512, 0x33), r(512);
  g_now = 1499;
  ASSERT_TRUE(WriteSync(dev, 1, w.data(), w.size()).ok());
  gate->Renewed(1400);
  gate->Renewed(1200);  // an older one does not move it back
  g_now = 1899;
  ASSERT_TRUE(WriteSync(dev, 2, w.data(), w.size()).ok());
  EXPECT_TRUE(gate->CheckBound().ok());
  EXPECT_EQ(gate->SilentNs(1899), 499u);
  const uint64_t writes = inner->Stats().write.ops;

  g_now = 1900;
  std::vector<uint8_t> late(512, 0x44);
  Status s = WriteSync(dev, 3, late.data(), late.size());
  EXPECT_EQ(s.code(), Code::kFenced) << s.ToString();
  EXPECT_NE(s.ToString().find("lease not renewed"), std::string::npos) << s.ToString();
  EXPECT_EQ(inner->Stats().write.ops, writes) << "a write went out past the lease";
  EXPECT_FALSE(gate->is_open());
  EXPECT_EQ(FlushSync(dev).code(), Code::kFenced);
  // A renewal that succeeded after all does not reopen a closed gate.
  gate->Renewed(1900);
  EXPECT_EQ(WriteSync(dev, 3, late.data(), late.size()).code(), Code::kFenced);
  ASSERT_TRUE(ReadSync(dev, 3, r.data(), r.size()).ok());
  EXPECT_EQ(r, std::vector<uint8_t>(512, 0));
  ASSERT_TRUE(ReadSync(dev, 2, r.data(), r.size()).ok());
  EXPECT_EQ(r, w);
}

// A gate without a bound never closes by time.
TEST(GatedDevice, AnUnboundedGateHasNoDeadline) {
  auto gate = std::make_shared<WriteGate>();
  EXPECT_TRUE(gate->CheckBound().ok());
  EXPECT_EQ(gate->SilentNs(~0ull), 0u);
  EXPECT_TRUE(gate->is_open());
}

}  // namespace
}  // namespace nasgw::block
