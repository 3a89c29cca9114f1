#include "fs/ownership.h"

#include <atomic>
#include <barrier>
#include <chrono>
#include <thread>

#include <gtest/gtest.h>

#include "base/clock.h"
#include "block/mem_device.h"

namespace nasgw::fs {
namespace {

using block::MemDevice;
using block::MemLun;
using block::WriteGate;
using Devices = std::vector<std::shared_ptr<block::BlockDevice>>;

// Two LUNs of one "array"; each node reaches them as its own initiator.
struct Array {
  std::vector<std::shared_ptr<MemLun>> luns;
  Uuid reserve = Uuid::Random();
  explicit Array(int n = 2) {
    for (int i = 0; i < n; i++) luns.push_back(std::make_shared<MemLun>(512, 8192, "mem." + std::to_string(i)));
  }
};

struct TestNode {
  NodeIdentity me;
  std::vector<std::shared_ptr<MemDevice>> raw;
  std::shared_ptr<WriteGate> gate = std::make_shared<WriteGate>();
  Devices devs;
  TestNode(const Array& a, const std::string& name, uint64_t initiator, Uuid id = Uuid::Random()) {
    me = NodeIdentity::ForProcess(name, id);
    for (const auto& l : a.luns) raw.push_back(std::make_shared<MemDevice>(l, initiator));
    Renew();
  }
  // New gate and devices, as a node does before each attempt to own.
  void Renew() {
    gate = std::make_shared<WriteGate>();
    Devices plain(raw.begin(), raw.end());
    devs = block::Gate(plain, gate);
  }
};

OwnershipOptions Fast() {
  OwnershipOptions o;
  o.renew_interval_ms = 50;
  o.lease_ms = 300;
  return o;
}

Result<std::unique_ptr<Ownership>> Own(const Array& a, TestNode& n, AcquireMode mode = AcquireMode::kNormal,
                                       Ownership::LostFn lost = {}) {
  return Ownership::Acquire(n.devs, n.gate, a.reserve, 0, n.me, Fast(), mode, std::move(lost));
}

Status WriteData(TestNode& n, size_t lun, uint8_t v) {
  std::vector<uint8_t> b(512, v);
  return block::WriteSync(*n.devs[lun], 4096, b.data(), b.size());
}

uint8_t ReadData(const Array& a, size_t lun) {
  MemDevice reader(a.luns[lun], 99);
  std::vector<uint8_t> b(512);
  EXPECT_TRUE(block::ReadSync(reader, 4096, b.data(), b.size()).ok());
  return b[0];
}

// Waits, with a deadline, for `cond` (a state another thread changes).
template <typename F>
bool WaitFor(F cond, int ms = 5000) {
  const auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(ms);
  while (!cond()) {
    if (std::chrono::steady_clock::now() > end) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return true;
}

TEST(OwnerRecord, RoundTripAndDamage) {
  OwnerRecord r;
  r.reserve = Uuid::Random();
  r.domain = 3;
  r.state = OwnerState::kHeld;
  r.node_id = Uuid::Random();
  r.key = PrKeyOf(r.node_id);
  r.incarnation = 77;
  r.seq = 9;
  r.acquired_ns = 1;
  r.renewed_ns = 2;
  r.lease_ms = 10000;
  r.renew_ms = 2000;
  r.pid = 1234;
  r.node_name = "node-a";
  r.host = "host.example";
  auto b = EncodeOwnerRecord(r);
  ASSERT_EQ(b.size(), kOwnerRecordBytes);
  auto d = DecodeOwnerRecord(b);
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  EXPECT_EQ(*d, r);
  b[200] ^= 1;
  EXPECT_EQ(DecodeOwnerRecord(b).status().code(), Code::kCorruption);
  std::vector<uint8_t> zeros(kOwnerRecordBytes, 0);
  EXPECT_EQ(DecodeOwnerRecord(zeros).status().code(), Code::kNotFound);
  EXPECT_EQ(PrKeyOf(r.node_id) >> 48, 0x4e47u);
  EXPECT_NE(PrKeyOf(Uuid{}), 0u);
}

TEST(Ownership, SecondNodeRefusedNamingTheHolder) {
  Array a;
  TestNode n1(a, "node-a", 1), n2(a, "node-b", 2);
  auto o1 = Own(a, n1);
  ASSERT_TRUE(o1.ok()) << o1.status().ToString();
  auto o2 = Own(a, n2);
  ASSERT_FALSE(o2.ok());
  EXPECT_EQ(o2.status().code(), Code::kFenced);
  EXPECT_NE(o2.status().ToString().find("node 'node-a'"), std::string::npos) << o2.status().ToString();
  EXPECT_NE(o2.status().ToString().find("last renewed"), std::string::npos) << o2.status().ToString();
  // The second node's LUN writes are refused by its gate and by the array.
  EXPECT_FALSE(n2.gate->is_open());
  MemDevice direct(a.luns[1], 2);
  std::vector<uint8_t> b(512, 0xee);
  EXPECT_EQ(block::WriteSync(direct, 4096, b.data(), b.size()).code(), Code::kFenced) << "not registered";
  ASSERT_TRUE(WriteData(n1, 1, 0x11).ok());
  EXPECT_EQ(ReadData(a, 1), 0x11);
  auto v = ReadOwner(n2.devs, a.reserve, 0);
  ASSERT_TRUE(v.ok());
  ASSERT_TRUE(v->held());
  EXPECT_EQ(v->record->node_name, "node-a");
  EXPECT_TRUE(v->pr_supported);
  EXPECT_EQ(v->reservation.key, n1.me.key());
  EXPECT_TRUE(v->HeldByOther(n2.me.id));
  EXPECT_FALSE(v->HeldByOther(n1.me.id));
}

// Two nodes acquiring at the same moment: the array's RESERVE picks exactly
// one, every time.
TEST(Ownership, SimultaneousAcquireHasOneWinner) {
  for (int trial = 0; trial < 50; trial++) {
    Array a(3);
    TestNode n1(a, "node-a", 1), n2(a, "node-b", 2);
    std::barrier sync(2);
    Result<std::unique_ptr<Ownership>> r1 = Status::NotFound("-"), r2 = Status::NotFound("-");
    std::thread t1([&] {
      sync.arrive_and_wait();
      r1 = Own(a, n1);
    });
    std::thread t2([&] {
      sync.arrive_and_wait();
      r2 = Own(a, n2);
    });
    t1.join();
    t2.join();
    ASSERT_NE(r1.ok(), r2.ok()) << "trial " << trial << ": " << r1.status().ToString() << " / "
                                << r2.status().ToString();
    auto& loser = r1.ok() ? n2 : n1;
    auto& winner = r1.ok() ? n1 : n2;
    EXPECT_EQ((r1.ok() ? r2 : r1).status().code(), Code::kFenced);
    EXPECT_FALSE(loser.gate->is_open());
    auto v = ReadOwner(winner.devs, a.reserve, 0);
    ASSERT_TRUE(v.ok());
    EXPECT_EQ(v->record->node_id, winner.me.id);
    // Only the winner's key stays registered: the loser cannot write.
    for (auto& l : a.luns) {
      MemDevice probe(l, 99);
      auto keys = block::PrReadKeysSync(probe);
      ASSERT_TRUE(keys.ok());
      EXPECT_EQ(keys->keys, std::vector<uint64_t>{winner.me.key()}) << "trial " << trial;
    }
  }
}

TEST(Ownership, ReleaseFreesAndAnotherNodeAcquires) {
  Array a;
  TestNode n1(a, "node-a", 1), n2(a, "node-b", 2);
  auto o1 = Own(a, n1);
  ASSERT_TRUE(o1.ok());
  ASSERT_TRUE((*o1)->Release().ok());
  EXPECT_FALSE(n1.gate->is_open());
  auto v = ReadOwner(n2.devs, a.reserve, 0);
  ASSERT_TRUE(v.ok());
  EXPECT_FALSE(v->held());
  EXPECT_FALSE(v->reservation.reserved);
  EXPECT_NE(v->Describe(WallNanos()).find("released"), std::string::npos);
  auto o2 = Own(a, n2);
  ASSERT_TRUE(o2.ok()) << o2.status().ToString();
  EXPECT_TRUE(WriteData(n2, 0, 0x22).ok());
}

// A release that cannot give the reservation up on every LUN (a path down)
// must not leave a free record over a reservation still held: nobody would
// take that without force. The record stays held and silent instead, and
// the next node takes over once the lease has run out, as after a crash.
TEST(Ownership, AFailedReleaseLeavesTheDomainToATakeoverAfterTheLease) {
  Array a;
  TestNode n1(a, "node-a", 1), n2(a, "node-b", 2);
  auto o1 = Own(a, n1);
  ASSERT_TRUE(o1.ok());
  ASSERT_TRUE((*o1)->pr_supported());
  n1.raw[1]->SetFault([](const block::IoRequest& r) {
    return r.op == block::Op::kPrOut && r.pr_out.action == block::PrAction::kRelease ? Status::Unavailable("path down")
                                                                                     : Status();
  });
  const Status rel = (*o1)->Release();
  n1.raw[1]->SetFault(nullptr);
  EXPECT_FALSE(rel.ok());
  EXPECT_NE(rel.ToString().find("release reservation"), std::string::npos) << rel.ToString();
  EXPECT_FALSE(n1.gate->is_open()) << "a released node writes nothing more";
  auto v = ReadOwner(n2.devs, a.reserve, 0);
  ASSERT_TRUE(v.ok());
  EXPECT_TRUE(v->held()) << "a free record over a reservation nobody takes without force";
  EXPECT_EQ(Own(a, n2).status().code(), Code::kFenced) << "held, and within its lease";
  OwnerWatch w;
  w.Observe(*v, MonotonicNanos(), WallNanos());
  ASSERT_TRUE(WaitFor([&] {
    auto again = ReadOwner(n2.devs, a.reserve, 0);
    if (!again.ok()) return false;
    w.Observe(*again, MonotonicNanos(), WallNanos());
    return w.Expired(MonotonicNanos());
  })) << "the record went on changing after the release";
  n2.Renew();
  auto o2 = Own(a, n2, AcquireMode::kTakeover);
  ASSERT_TRUE(o2.ok()) << o2.status().ToString();
  EXPECT_TRUE(WriteData(n2, 0, 0x22).ok());
  EXPECT_TRUE(WriteData(n2, 1, 0x22).ok());
}

// A node that crashed (never released) comes back with a new incarnation
// and the same id: it takes its domain back without force.
TEST(Ownership, SameNodeReclaimsAfterCrash) {
  Array a;
  const Uuid id = Uuid::Random();
  TestNode before(a, "node-a", 1, id);
  auto o1 = Own(a, before);
  ASSERT_TRUE(o1.ok());
  o1->reset();                         // no release: as a SIGKILL
  TestNode after(a, "node-a", 3, id);  // a new session: another I_T nexus
  auto o2 = Own(a, after);
  ASSERT_TRUE(o2.ok()) << o2.status().ToString();
  EXPECT_TRUE(WriteData(after, 0, 0x33).ok());
  EXPECT_EQ(ReadData(a, 0), 0x33);
}

// A forced takeover preempts the holder: its next write fails with Fenced
// at once, nothing more of it lands, and it is told once.
TEST(Ownership, ForcedTakeoverFencesTheHolder) {
  Array a;
  TestNode n1(a, "node-a", 1), n2(a, "node-b", 2);
  std::atomic<int> lost{0};
  auto o1 = Own(a, n1, AcquireMode::kNormal, [&](const Status& s) {
    EXPECT_EQ(s.code(), Code::kFenced);
    lost++;
  });
  ASSERT_TRUE(o1.ok());
  ASSERT_TRUE(WriteData(n1, 0, 0x41).ok());
  auto o2 = Own(a, n2, AcquireMode::kForce);
  ASSERT_TRUE(o2.ok()) << o2.status().ToString();
  EXPECT_EQ((*o2)->preempted_key(), n1.me.key());
  ASSERT_TRUE(WriteData(n2, 0, 0x42).ok());
  EXPECT_EQ(WriteData(n1, 0, 0x43).code(), Code::kFenced);
  EXPECT_EQ(WriteData(n1, 1, 0x43).code(), Code::kFenced);
  EXPECT_EQ(ReadData(a, 0), 0x42);
  EXPECT_EQ(ReadData(a, 1), 0x00);
  EXPECT_TRUE(WaitFor([&] { return lost.load() == 1; }));
  EXPECT_TRUE((*o1)->lost());
  EXPECT_EQ((*o1)->Release().code(), Code::kFenced) << "a fenced node has nothing to release";
  auto v = ReadOwner(n2.devs, a.reserve, 0);
  ASSERT_TRUE(v.ok());
  EXPECT_EQ(v->record->node_name, "node-b");
}

// An idle holder (no data writes) still learns of the takeover from its
// lease renewal.
TEST(Ownership, IdleHolderNoticesTakeoverByRenewal) {
  Array a;
  TestNode n1(a, "node-a", 1), n2(a, "node-b", 2);
  std::atomic<int> lost{0};
  auto o1 = Own(a, n1, AcquireMode::kNormal, [&](const Status&) { lost++; });
  ASSERT_TRUE(o1.ok());
  ASSERT_TRUE(WaitFor([&] { return (*o1)->renewals() >= 2; }));
  auto o2 = Own(a, n2, AcquireMode::kForce);
  ASSERT_TRUE(o2.ok());
  EXPECT_TRUE(WaitFor([&] { return lost.load() == 1; }));
  EXPECT_FALSE(n1.gate->is_open());
}

// Without persistent reservations (an array that lacks them) the owner
// record alone refuses a second node and tells a taken-over node.
TEST(Ownership, RecordAloneWhereTheArrayHasNoReservations) {
  Array a;
  TestNode n1(a, "node-a", 1), n2(a, "node-b", 2);
  auto no_pr = [](const block::IoRequest& r) {
    return (r.op == block::Op::kPrOut || r.op == block::Op::kPrReadKeys || r.op == block::Op::kPrReadReservation)
               ? Status::NotSupported("PERSISTENT RESERVE not supported")
               : Status();
  };
  for (auto& d : n1.raw) d->SetFault(no_pr);
  for (auto& d : n2.raw) d->SetFault(no_pr);
  std::atomic<int> lost{0};
  auto o1 = Own(a, n1, AcquireMode::kNormal, [&](const Status&) { lost++; });
  ASSERT_TRUE(o1.ok()) << o1.status().ToString();
  EXPECT_FALSE((*o1)->pr_supported());
  auto o2 = Own(a, n2);
  EXPECT_EQ(o2.status().code(), Code::kFenced);
  n2.Renew();
  auto o3 = Own(a, n2, AcquireMode::kForce);
  ASSERT_TRUE(o3.ok()) << o3.status().ToString();
  EXPECT_TRUE(WaitFor([&] { return lost.load() == 1; }));
  // The array would take the write; the gate does not let it leave.
  EXPECT_EQ(WriteData(n1, 0, 0x51).code(), Code::kFenced);
}

// A holder that cannot renew (the array refuses its writes for another
// reason) stops writing before its lease runs out for others.
TEST(Ownership, UnrenewableLeaseFencesItself) {
  Array a;
  TestNode n1(a, "node-a", 1);
  std::atomic<int> lost{0};
  auto o1 = Own(a, n1, AcquireMode::kNormal, [&](const Status&) { lost++; });
  ASSERT_TRUE(o1.ok());
  const uint64_t start = MonotonicNanos();
  for (auto& d : n1.raw) {
    d->SetFault([](const block::IoRequest& r) {
      return r.op == block::Op::kWrite ? Status::IoError("medium error") : Status();
    });
  }
  ASSERT_TRUE(WaitFor([&] { return lost.load() == 1; }));
  const uint64_t took_ms = (MonotonicNanos() - start) / kNanosPerMilli;
  EXPECT_LT(took_ms, Fast().lease_ms) << "must stop before the lease runs out for others";
  EXPECT_GE((*o1)->renew_failures(), 1u);
  EXPECT_NE((*o1)->lost_reason().ToString().find("lease not renewed"), std::string::npos);
}

TEST(Ownership, RenewalStuckInIoStillFencesBeforeTheLease) {
  // A SAN path down: the renewal's write waits for the I/O timeout (30 s by
  // default), far past the lease. The node must stop writing anyway, before
  // the lease runs out for others.
  Array a;
  TestNode n1(a, "node-a", 1);
  std::atomic<int> lost{0};
  auto o1 = Own(a, n1, AcquireMode::kNormal, [&](const Status&) { lost++; });
  ASSERT_TRUE(o1.ok());
  std::atomic<bool> release{false};
  const uint64_t start = MonotonicNanos();
  for (auto& d : n1.raw) {
    d->SetFault([&release](const block::IoRequest& r) {
      if (r.op != block::Op::kWrite) return Status();
      while (!release.load()) std::this_thread::sleep_for(std::chrono::milliseconds(2));  // the stuck I/O
      return Status::Unavailable("connection lost");
    });
  }
  const bool fenced = WaitFor([&] { return lost.load() == 1; }, 2000);
  const uint64_t took_ms = (MonotonicNanos() - start) / kNanosPerMilli;
  release = true;  // lets the stuck renewal return, so the renewer can stop
  ASSERT_TRUE(fenced) << "a renewal stuck in I/O kept the node writing";
  EXPECT_LT(took_ms, Fast().lease_ms) << "must stop before the lease runs out for others";
  EXPECT_NE((*o1)->lost_reason().ToString().find("still waiting on the SAN"), std::string::npos)
      << (*o1)->lost_reason().ToString();
  EXPECT_FALSE(WriteData(n1, 0, 7).ok()) << "the gate is closed";
  EXPECT_EQ((*o1)->lease()->Check().code(), Code::kFenced) << "heads would still be answered";
}

TEST(Ownership, TheLeaseIsHeldWhileRenewed) {
  Array a;
  TestNode n1(a, "node-a", 1);
  auto o1 = Own(a, n1, AcquireMode::kNormal, nullptr);
  ASSERT_TRUE(o1.ok());
  auto lease = (*o1)->lease();
  ASSERT_NE(lease, nullptr);
  EXPECT_EQ(lease->give_up_ns(), uint64_t{Fast().lease_ms - Fast().renew_interval_ms} * kNanosPerMilli);
  // Through several renewals, never silent for the give-up time.
  const uint64_t renewed = (*o1)->renewals();
  ASSERT_TRUE(WaitFor([&] { return (*o1)->renewals() >= renewed + 3; }));
  EXPECT_TRUE(lease->Check().ok());
  EXPECT_LT(lease->SilentNs(lease->now()), lease->give_up_ns());
  ASSERT_TRUE((*o1)->Release().ok());
  EXPECT_FALSE(lease->Check().ok()) << "a released domain's lease is not held";
}

std::atomic<uint64_t> g_now{1'000'000'000};
uint64_t FakeNow() {
  return g_now.load();
}

// The lease by its own clock: held until give-up after the last renewal
// that succeeded, counted from when it was sent; the first to find it run
// out closes the gate, naming why; a gate closed for another reason is not
// held either.
// ---- shared reservations: the pair active/active, each node owning
// some domains of one reserve.

OwnershipOptions Shared() {
  OwnershipOptions o = Fast();
  o.shared = true;
  return o;
}

Result<std::unique_ptr<Ownership>> OwnShared(const Array& a, TestNode& n, uint32_t domain,
                                             AcquireMode mode = AcquireMode::kNormal, Ownership::LostFn lost = {}) {
  return Ownership::Acquire(n.devs, n.gate, a.reserve, domain, n.me, Shared(), mode, std::move(lost));
}

std::string HolderOf(const Array& a, TestNode& reader, uint32_t domain) {
  auto v = ReadOwner(reader.devs, a.reserve, domain);
  if (!v.ok()) return v.status().ToString();
  return v->held() ? v->record->node_name : "free";
}

TEST(SharedOwnership, EachNodeOwnsItsDomainAndBothWrite) {
  Array a;
  TestNode n1(a, "node-a", 1), n2(a, "node-b", 2), n3(a, "node-c", 3);
  std::atomic<int> lost{0};
  auto o1 = OwnShared(a, n1, 0, AcquireMode::kNormal, [&](const Status&) { lost++; });
  ASSERT_TRUE(o1.ok()) << o1.status().ToString();
  auto o2 = OwnShared(a, n2, 1, AcquireMode::kNormal, [&](const Status&) { lost++; });
  ASSERT_TRUE(o2.ok()) << o2.status().ToString();
  // Both registrants write, on every LUN; an unregistered initiator cannot.
  for (size_t lun = 0; lun < 2; lun++) {
    ASSERT_TRUE(WriteData(n1, lun, 0x11).ok());
    ASSERT_TRUE(WriteData(n2, lun, 0x22).ok());
    EXPECT_EQ(ReadData(a, lun), 0x22);
  }
  MemDevice stranger(a.luns[0], 9);
  std::vector<uint8_t> b(512, 0xee);
  EXPECT_EQ(block::WriteSync(stranger, 4096, b.data(), b.size()).code(), Code::kFenced);
  EXPECT_EQ(HolderOf(a, n1, 0), "node-a");
  EXPECT_EQ(HolderOf(a, n1, 1), "node-b");
  // A domain held by the other is refused, by Acquire and by AcquireDomain.
  EXPECT_EQ((*o2)->AcquireDomain(0, AcquireMode::kNormal).code(), Code::kFenced);
  auto o3 = OwnShared(a, n3, 1);
  ASSERT_FALSE(o3.ok());
  EXPECT_NE(o3.status().ToString().find("node 'node-b'"), std::string::npos) << o3.status().ToString();
  // Renewals go on for both, neither reading the other's reservation as a
  // takeover.
  EXPECT_TRUE(WaitFor([&] { return (*o1)->renewals() >= 3 && (*o2)->renewals() >= 3; }));
  EXPECT_EQ(lost.load(), 0);
  EXPECT_EQ((*o2)->domains(), std::vector<uint32_t>{1});
}

// A takeover of one domain fences the partner on every LUN (it loses all
// its domains), not the taker's own writes.
TEST(SharedOwnership, TakingOverADomainFencesThePartnerWhole) {
  Array a;
  TestNode n1(a, "node-a", 1), n2(a, "node-b", 2);
  std::atomic<int> lost1{0}, lost2{0};
  auto o1 = OwnShared(a, n1, 0, AcquireMode::kNormal, [&](const Status&) { lost1++; });
  ASSERT_TRUE(o1.ok());
  ASSERT_TRUE((*o1)->AcquireDomain(2, AcquireMode::kNormal).ok());
  auto o2 = OwnShared(a, n2, 1, AcquireMode::kNormal, [&](const Status&) { lost2++; });
  ASSERT_TRUE(o2.ok());
  ASSERT_TRUE(WriteData(n1, 0, 0x11).ok());
  // node-b takes node-a's domains (node-a is the reservation's holder).
  ASSERT_TRUE((*o2)->AcquireDomain(0, AcquireMode::kTakeover).ok());
  ASSERT_TRUE((*o2)->AcquireDomain(2, AcquireMode::kTakeover).ok());
  EXPECT_EQ((*o2)->domains(), (std::vector<uint32_t>{1, 0, 2}));
  EXPECT_EQ(WriteData(n1, 0, 0x13).code(), Code::kFenced);
  EXPECT_EQ(WriteData(n1, 1, 0x13).code(), Code::kFenced);
  ASSERT_TRUE(WriteData(n2, 0, 0x21).ok());
  ASSERT_TRUE(WriteData(n2, 1, 0x21).ok());
  EXPECT_EQ(ReadData(a, 0), 0x21);
  EXPECT_TRUE(WaitFor([&] { return lost1.load() == 1; }));
  for (uint32_t d : {0u, 1u, 2u}) EXPECT_EQ(HolderOf(a, n2, d), "node-b") << d;
  // The taker keeps renewing all three, and was never fenced itself.
  const uint64_t before = (*o2)->renewals();
  EXPECT_TRUE(WaitFor([&] { return (*o2)->renewals() >= before + 3; }));
  EXPECT_EQ(lost2.load(), 0);
  auto v = ReadOwner(n2.devs, a.reserve, 0);
  ASSERT_TRUE(v.ok());
  EXPECT_EQ(v->keys, std::vector<uint64_t>{n2.me.key()});
  EXPECT_EQ(v->reservation.key, n2.me.key()) << "the holder's key preempted: the taker holds the reservation";
}

// Moving one domain (a planned move) changes no reservation: the releaser
// keeps writing its other domains, and releasing its last one keeps its
// registration, so the reservation is never dropped under the partner.
TEST(SharedOwnership, ADomainMovesWithoutTouchingTheReservation) {
  Array a;
  TestNode n1(a, "node-a", 1), n2(a, "node-b", 2);
  auto o1 = OwnShared(a, n1, 0);
  ASSERT_TRUE(o1.ok());
  ASSERT_TRUE((*o1)->AcquireDomain(1, AcquireMode::kNormal).ok());
  auto o2 = OwnShared(a, n2, 2);
  ASSERT_TRUE(o2.ok());
  EXPECT_EQ((*o1)->ReleaseDomain(1).code(), Code::kOk);
  EXPECT_EQ((*o1)->ReleaseDomain(1).code(), Code::kNotFound);
  EXPECT_EQ(HolderOf(a, n2, 1), "free");
  ASSERT_TRUE((*o2)->AcquireDomain(1, AcquireMode::kNormal).ok());
  EXPECT_EQ(HolderOf(a, n1, 1), "node-b");
  EXPECT_EQ((*o1)->ReleaseDomain(0).code(), Code::kFailedPrecondition) << "the last domain goes with Release()";
  ASSERT_TRUE(WriteData(n1, 0, 0x11).ok());
  // Renewing domain 0 alone does not write domain 1's record again.
  const uint64_t before = (*o1)->renewals();
  EXPECT_TRUE(WaitFor([&] { return (*o1)->renewals() >= before + 2; }));
  EXPECT_EQ(HolderOf(a, n2, 1), "node-b");
  // node-a (the reservation's holder) releases everything: the reservation
  // stays, node-b writes on.
  ASSERT_TRUE((*o1)->Release().ok());
  EXPECT_EQ(HolderOf(a, n2, 0), "free");
  auto v = ReadOwner(n2.devs, a.reserve, 0);
  ASSERT_TRUE(v.ok());
  EXPECT_TRUE(v->reservation.reserved);
  ASSERT_TRUE(WriteData(n2, 0, 0x22).ok());
  ASSERT_TRUE(WriteData(n2, 1, 0x22).ok());
  MemDevice stranger(a.luns[0], 9);
  std::vector<uint8_t> b(512, 0xee);
  EXPECT_EQ(block::WriteSync(stranger, 4096, b.data(), b.size()).code(), Code::kFenced);
  // The last node out preempts the registration node-a left (it owns
  // nothing) and releases the reservation and its own key: the LUNs are as
  // before the pair came.
  ASSERT_TRUE((*o2)->Release().ok());
  v = ReadOwner(n2.devs, a.reserve, 0);
  ASSERT_TRUE(v.ok());
  EXPECT_FALSE(v->reservation.reserved);
  EXPECT_TRUE(v->keys.empty());
  for (uint32_t d : {0u, 1u, 2u}) EXPECT_EQ(HolderOf(a, n2, d), "free") << d;
  n1.Renew();
  auto again = Own(a, n1);
  EXPECT_TRUE(again.ok()) << "an unshared owner may come after: " << again.status().ToString();
}

TEST(Lease, RunsOutGiveUpAfterTheLastRenewalSent) {
  auto gate = std::make_shared<block::WriteGate>();
  Lease lease(gate, 1000, &FakeNow);
  EXPECT_TRUE(lease.Check().ok());
  g_now += 999;
  EXPECT_TRUE(lease.Check().ok());
  lease.Renewed(g_now.load() - 500);  // sent 500 ns ago
  g_now += 499;
  EXPECT_TRUE(lease.Check().ok());
  lease.Renewed(g_now.load() - 1200);  // an older renewal answered late: the later one stands
  EXPECT_EQ(lease.SilentNs(g_now.load()), 999u);
  EXPECT_TRUE(gate->is_open());
  g_now += 1;
  const Status s = lease.Check();
  EXPECT_EQ(s.code(), Code::kFenced);
  EXPECT_NE(s.ToString().find("lease not renewed"), std::string::npos) << s.ToString();
  EXPECT_FALSE(gate->is_open());
  lease.Renewed(g_now.load());  // too late: a closed gate stays closed
  EXPECT_EQ(lease.Check().code(), Code::kFenced);

  auto gate2 = std::make_shared<block::WriteGate>();
  Lease other(gate2, 1000, &FakeNow);
  gate2->Close(Status::Fenced("RESERVATION CONFLICT"));
  EXPECT_NE(other.Check().ToString().find("RESERVATION CONFLICT"), std::string::npos);
}

TEST(OwnerWatch, ExpiresAfterTheLeaseOfSilence) {
  OwnerView v;
  v.record = OwnerRecord{};
  v.record->state = OwnerState::kHeld;
  v.record->lease_ms = 1000;
  v.record->renewed_ns = 5'000'000'000ull;  // wall clock of the renewal
  OwnerWatch w;
  // First seen 200 ms after its renewal by our wall clock: no age is
  // credited (the clocks of two nodes are never compared), the silence
  // counts from the first look.
  w.Observe(v, /*now_mono_ns=*/100'000'000'000ull, /*now_wall_ns=*/5'200'000'000ull);
  EXPECT_EQ(w.SilentMs(100'000'000'000ull), 0u);
  EXPECT_FALSE(w.Expired(100'900'000'000ull));
  // Seen first an hour after it by our wall clock (ours is ahead, or the
  // holder is dead): a whole lease of silence on our clock all the same.
  OwnerWatch ahead;
  ahead.Observe(v, 100'000'000'000ull, 3'605'000'000'000ull);
  EXPECT_FALSE(ahead.Expired(100'999'000'000ull));
  EXPECT_TRUE(ahead.Expired(101'000'000'000ull));
  // It renews: silence starts again.
  v.record->seq++;
  w.Observe(v, 100'600'000'000ull, 0);
  EXPECT_FALSE(w.Expired(101'500'000'000ull));
  EXPECT_TRUE(w.Expired(101'600'000'000ull));
  // A record from the future (clocks apart) credits no age.
  OwnerWatch w2;
  w2.Observe(v, 50'000'000'000ull, 1'000'000'000ull);
  EXPECT_EQ(w2.SilentMs(50'000'000'000ull), 0u);
  // Released: nothing to wait for.
  v.record->state = OwnerState::kFree;
  OwnerWatch w3;
  w3.Observe(v, 1, 1);
  EXPECT_TRUE(w3.Expired(1));
}

}  // namespace
}  // namespace nasgw::fs
