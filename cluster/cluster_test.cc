#include <iterator>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "cluster/interconnect.h"
#include "cluster/message.h"
#include "cluster/peer_monitor.h"

namespace nasgw::cluster {
namespace {

constexpr uint64_t kMs = 1'000'000;

Heartbeat Hb(const Uuid& id, uint8_t state, uint64_t seq = 1) {
  Heartbeat h;
  h.node_id = id;
  h.reserve = Uuid::Random();
  h.state = state;
  h.seq = seq;
  h.incarnation = 7;
  h.name = "gw-b";
  return h;
}

TEST(ClusterMessage, HeartbeatRoundTrips) {
  Heartbeat h = Hb(Uuid::Random(), kStateFenced, 42);
  h.reason = "lost the reservation";
  auto d = DecodeHeartbeat(EncodeHeartbeat(h));
  ASSERT_TRUE(d.has_value());
  EXPECT_EQ(*d, h);
}

TEST(ClusterMessage, NewerFieldsAreIgnoredAndDamageIsRefused) {
  Heartbeat h = Hb(Uuid::Random(), kStateOnline);
  std::string bytes = EncodeHeartbeat(h);
  // A newer node's extra fields: still understood.
  auto longer = DecodeHeartbeat(bytes + std::string("\x01\x02\x03", 3));
  ASSERT_TRUE(longer.has_value());
  EXPECT_EQ(*longer, h);
  // Every truncation is refused, never half read, except those that end
  // where an older node's heartbeat ended (before lan_up, before the VIP
  // masks) or inside fields added later: those are read with the defaults.
  const size_t vips_at = bytes.size() - 26, lan_at = vips_at - 1;
  for (size_t n = 0; n < lan_at; n++) EXPECT_FALSE(DecodeHeartbeat(bytes.substr(0, n)).has_value()) << n;
  Heartbeat down = h;
  down.lan_up = false;
  down.vips_assigned = 0b10;
  down.vips_held = 0b101;
  down.forwards = true;
  down.vips_digest = 0x1234567890abcdefull;
  down.takes_over = false;
  const std::string full = EncodeHeartbeat(down);
  // Every cut from there on decodes as `down` with each later field that
  // the cut leaves incomplete, and every one after it, at its default
  // (an older node's heartbeat ends at one of these fields; it took over
  // by itself, and had no digest): a field is never half read.
  const size_t field_ends[] = {1, 17, 18, 26, 27};  // lan_up, masks, forwards, digest, takes_over
  ASSERT_EQ(full.size(), lan_at + 27);
  for (size_t n = lan_at; n <= full.size(); n++) {
    size_t whole = 0;
    while (whole < std::size(field_ends) && lan_at + field_ends[whole] <= n) whole++;
    Heartbeat want = down;
    const Heartbeat dflt = h;
    if (whole < 1) want.lan_up = dflt.lan_up;
    if (whole < 2) {
      want.vips_assigned = dflt.vips_assigned;
      want.vips_held = dflt.vips_held;
    }
    if (whole < 3) want.forwards = dflt.forwards;
    if (whole < 4) want.vips_digest = dflt.vips_digest;
    if (whole < 5) want.takes_over = dflt.takes_over;
    auto got = DecodeHeartbeat(full.substr(0, n));
    ASSERT_TRUE(got.has_value()) << n;
    EXPECT_EQ(*got, want) << "cut at " << n << " (" << whole << " later fields whole)";
  }
  EXPECT_EQ(*DecodeHeartbeat(full), down);
  std::string other_version = bytes;
  other_version[0] = 2;
  EXPECT_FALSE(DecodeHeartbeat(other_version).has_value());
  std::string other_kind = bytes;
  other_kind[1] = static_cast<char>(MessageKind::kGiveBack);
  EXPECT_FALSE(DecodeHeartbeat(other_kind).has_value());
  EXPECT_FALSE(DecodeHeartbeat(std::string(kMessageBytesMax + 1, '\x01')).has_value());
  // Over-long names are cut when encoding, not sent.
  h.name = std::string(1000, 'n');
  auto cut = DecodeHeartbeat(EncodeHeartbeat(h));
  ASSERT_TRUE(cut.has_value());
  EXPECT_EQ(cut->name.size(), 255u);
}

TEST(ClusterMessage, GiveBackRoundTripsAndIsNotAHeartbeat) {
  GiveBackRequest r{Uuid::Random(), Uuid::Random(), Uuid::Random()};
  std::string bytes = EncodeGiveBack(r);
  auto d = DecodeGiveBack(bytes);
  ASSERT_TRUE(d.has_value());
  EXPECT_EQ(*d, r);
  EXPECT_FALSE(DecodeHeartbeat(bytes).has_value());
  EXPECT_FALSE(DecodeGiveBack(EncodeHeartbeat(Hb(Uuid::Random(), kStateOnline))).has_value());
  for (size_t n = 0; n < bytes.size(); n++) EXPECT_FALSE(DecodeGiveBack(bytes.substr(0, n)).has_value()) << n;
}

TEST(ClusterMessage, CatalogRoundTripsEveryFieldAndRefusesTruncationAndExcess) {
  Catalog c{Uuid::Random(), Uuid::Random(), {}, {}};
  fs::Export x;
  x.id = 7;
  x.volume = "vol1";
  x.path = "/a/b";
  x.pseudo = "/exports/vol1";
  x.clients = {"198.18.1.0/24"};
  x.read_only = true;
  x.root_squash = false;
  x.sec = {"sys", "krb5"};
  x.protocols = {4};
  x.show_snapshot_dir = true;
  c.exports.push_back(x);
  x.id = 9;
  x.volume = "vol2";
  c.exports.push_back(x);
  fs::Share s;
  s.name = "Public";
  s.volume = "vol2";
  s.path = "/p";
  s.comment = "for everyone";
  s.guest_ok = true;
  s.valid_users = {"alice", "@staff"};
  c.shares.push_back(s);
  const std::string bytes = EncodeCatalog(c);
  auto d = DecodeCatalog(bytes);
  ASSERT_TRUE(d.has_value());
  EXPECT_EQ(*d, c);
  EXPECT_FALSE(DecodeHeartbeat(bytes).has_value());
  EXPECT_FALSE(DecodeGiveBack(bytes).has_value());
  EXPECT_FALSE(DecodeCatalog(EncodeHeartbeat(Hb(Uuid::Random(), kStateOnline))).has_value());
  for (size_t n = 0; n < bytes.size(); n++) EXPECT_FALSE(DecodeCatalog(bytes.substr(0, n)).has_value()) << n;
  // More than a message may carry is not encoded (the partner keeps what it had).
  Catalog big = c;
  big.exports.assign(kCatalogBytesMax / 64, x);
  EXPECT_TRUE(EncodeCatalog(big).empty());
  EXPECT_FALSE(DecodeCatalog(std::string(kCatalogBytesMax + 1, '\x01')).has_value());
}

TEST(ClusterMessage, ConnectionsRoundTripSkipIPv6AndRefuseTruncationAndExcess) {
  Connections c{Uuid::Random(), {}};
  c.conns.push_back(TcpConn{0, 0xc6120132, 2049, 0xc6120264, 811});
  c.conns.push_back(TcpConn{1, 0xc6120133, 445, 0xc6120265, 50123});
  const std::string bytes = EncodeConnections(c);
  auto d = DecodeConnections(bytes);
  ASSERT_TRUE(d.has_value());
  EXPECT_EQ(*d, c);
  EXPECT_FALSE(DecodeHeartbeat(bytes).has_value());
  EXPECT_FALSE(DecodeCatalog(bytes).has_value());
  EXPECT_FALSE(DecodeConnections(EncodeHeartbeat(Hb(Uuid::Random(), kStateOnline))).has_value());
  for (size_t n = 0; n < bytes.size(); n++) EXPECT_FALSE(DecodeConnections(bytes.substr(0, n)).has_value()) << n;
  // A newer node's IPv6 entry (family 6) is skipped, the rest kept; an
  // unknown family refuses the message.
  Encoder e;
  e.U8(kMessageVersion);
  e.U8(static_cast<uint8_t>(MessageKind::kConnections));
  PutUuid(e, c.from);
  e.U32(2);
  e.U8(3);
  e.U8(6);
  for (int i = 0; i < 36; i++) e.U8(1);
  e.U8(0);
  e.U8(4);
  e.U32(0xc6120132);
  e.U16(2049);
  e.U32(0xc6120264);
  e.U16(811);
  std::string mixed = e.Release();
  auto m = DecodeConnections(mixed);
  ASSERT_TRUE(m.has_value());
  ASSERT_EQ(m->conns.size(), 1u);
  EXPECT_EQ(m->conns[0], c.conns[0]);
  mixed[16 + 2 + 4 + 1] = 5;
  EXPECT_FALSE(DecodeConnections(mixed).has_value());
  // At most kTcpConnsMax are sent; a message claiming more is refused.
  Connections big{c.from, std::vector<TcpConn>(kTcpConnsMax + 10, c.conns[0])};
  auto b = DecodeConnections(EncodeConnections(big));
  ASSERT_TRUE(b.has_value());
  EXPECT_EQ(b->conns.size(), kTcpConnsMax);
  std::string over = EncodeConnections(c);
  over[2 + 16 + 3] = 0x7f;  // the count's top byte (little-endian)
  EXPECT_FALSE(DecodeConnections(over).has_value());
}

class PeerMonitorTest : public ::testing::Test {
 protected:
  Uuid self_ = Uuid::Random();
  Uuid owner_ = Uuid::Random();
  MonitorOptions opts_{.network_dead_ms = 3000, .disk_read_fresh_ms = 2000};
  PeerMonitor mon_{self_, opts_, 1000 * kMs};
  Member owner_member_{2, 4711};

  DiskView Disk(uint64_t silent_ms, uint64_t read_age_ms = 100) {
    DiskView d;
    d.have = true;
    d.held = true;
    d.owner = owner_;
    d.silent_ms = silent_ms;
    d.lease_ms = 1500;
    d.read_age_ms = read_age_ms;
    return d;
  }
};

TEST_F(PeerMonitorTest, BothHeartbeatsLiveIsAlive) {
  mon_.OnHeartbeat(owner_member_, Hb(owner_, kStateOnline), 1000 * kMs);
  EXPECT_EQ(mon_.Judge(Disk(200), 1500 * kMs).verdict, Verdict::kOwnerAlive);
}

TEST_F(PeerMonitorTest, OneSilentHeartbeatIsReportedNeverActedOn) {
  mon_.OnHeartbeat(owner_member_, Hb(owner_, kStateOnline), 1000 * kMs);
  // The interconnect is cut: heard nothing for longer than the bound, but
  // the owner renews its record.
  auto net = mon_.Judge(Disk(200), 5000 * kMs);
  EXPECT_EQ(net.verdict, Verdict::kNetworkSilent) << net.why;
  EXPECT_FALSE(ShouldTakeOver(net.verdict));
  EXPECT_EQ(net.network_silent_ms, 4000u);
  // CPG says it left: silent at once, still only one heartbeat.
  mon_.OnHeartbeat(owner_member_, Hb(owner_, kStateOnline, 2), 5000 * kMs);
  mon_.OnLeft(owner_member_, 5001 * kMs);
  EXPECT_EQ(mon_.Judge(Disk(200), 5002 * kMs).verdict, Verdict::kNetworkSilent);
  // The disk heartbeat is silent but the owner is heard: it fences itself.
  mon_.OnHeartbeat(owner_member_, Hb(owner_, kStateOnline, 3), 6000 * kMs);
  auto disk = mon_.Judge(Disk(5000), 6100 * kMs);
  EXPECT_EQ(disk.verdict, Verdict::kDiskSilent) << disk.why;
  EXPECT_FALSE(ShouldTakeOver(disk.verdict));
}

TEST_F(PeerMonitorTest, BothSilentPastTheirBoundsIsDead) {
  mon_.OnHeartbeat(owner_member_, Hb(owner_, kStateOnline), 1000 * kMs);
  // Just inside either bound: not yet.
  EXPECT_FALSE(ShouldTakeOver(mon_.Judge(Disk(1499), 4100 * kMs).verdict));
  EXPECT_FALSE(ShouldTakeOver(mon_.Judge(Disk(1600), 3999 * kMs).verdict));
  auto dead = mon_.Judge(Disk(1500), 4000 * kMs);
  EXPECT_EQ(dead.verdict, Verdict::kOwnerDead) << dead.why;
  EXPECT_TRUE(ShouldTakeOver(dead.verdict));
  // CPG's leave shortens the network side, never the disk side.
  mon_.OnHeartbeat(owner_member_, Hb(owner_, kStateOnline, 2), 10000 * kMs);
  mon_.OnLeft(owner_member_, 10001 * kMs);
  EXPECT_EQ(mon_.Judge(Disk(1500), 10002 * kMs).verdict, Verdict::kOwnerDead);
  EXPECT_EQ(mon_.Judge(Disk(1000), 10002 * kMs).verdict, Verdict::kNetworkSilent);
  // A leave of another process on the same node does not count.
  mon_.OnHeartbeat(owner_member_, Hb(owner_, kStateOnline, 3), 11000 * kMs);
  mon_.OnLeft(Member{2, 1}, 11001 * kMs);
  EXPECT_EQ(mon_.Judge(Disk(1500), 11002 * kMs).verdict, Verdict::kDiskSilent);
}

TEST_F(PeerMonitorTest, AnOwnerNeverHeardIsSilentFromTheStart) {
  EXPECT_EQ(mon_.Judge(Disk(1500), 3999 * kMs).verdict, Verdict::kDiskSilent);
  EXPECT_EQ(mon_.Judge(Disk(1500), 4000 * kMs).verdict, Verdict::kOwnerDead);
  mon_.OnDisconnected(4000 * kMs);
  EXPECT_EQ(mon_.Judge(Disk(100), 4000 * kMs).verdict, Verdict::kNetworkSilent);
}

TEST_F(PeerMonitorTest, AnOwnerThatSaysItIsFencedIsTakenOverAtOnce) {
  Heartbeat h = Hb(owner_, kStateFenced);
  h.reason = "RESERVATION CONFLICT";
  mon_.OnHeartbeat(owner_member_, h, 1000 * kMs);
  auto j = mon_.Judge(Disk(100), 1001 * kMs);
  EXPECT_EQ(j.verdict, Verdict::kOwnerFenced) << j.why;
  EXPECT_NE(j.why.find("RESERVATION CONFLICT"), std::string::npos);
  // Standby or starting is not fenced: no takeover on that word.
  mon_.OnHeartbeat(owner_member_, Hb(owner_, kStateStandby, 2), 1002 * kMs);
  EXPECT_EQ(mon_.Judge(Disk(100), 1003 * kMs).verdict, Verdict::kOwnerAlive);
}

TEST_F(PeerMonitorTest, WithoutAFreshDiskReadNothingIsDecided) {
  // Our own SAN path is down: the owner looks silent on both, but we did
  // not read the record recently, so we cannot tell.
  auto j = mon_.Judge(Disk(60000, /*read_age_ms=*/2001), 60000 * kMs);
  EXPECT_EQ(j.verdict, Verdict::kUnknown) << j.why;
  DiskView never;
  EXPECT_EQ(mon_.Judge(never, 60000 * kMs).verdict, Verdict::kUnknown);
  DiskView free = Disk(0);
  free.held = false;
  EXPECT_EQ(mon_.Judge(free, 60000 * kMs).verdict, Verdict::kNoOwner);
  DiskView mine = Disk(60000);
  mine.owner = self_;
  EXPECT_EQ(mon_.Judge(mine, 60000 * kMs).verdict, Verdict::kOwnerAlive);
}

TEST_F(PeerMonitorTest, OwnHeartbeatsDoNotCountAndPeersAreBounded) {
  mon_.OnHeartbeat({1, 1}, Hb(self_, kStateOnline), 1000 * kMs);
  EXPECT_TRUE(mon_.peers().empty());
  for (int i = 0; i < 100; i++)
    mon_.OnHeartbeat({3, static_cast<uint32_t>(i)}, Hb(Uuid::Random(), 1), (1000 + i) * kMs);
  EXPECT_LE(mon_.peers().size(), 64u);
}

struct Seen {
  std::vector<std::string> msgs;
  std::vector<Member> members;
  std::vector<Member> left;
  int changes = 0;
};

Interconnect::Handlers Record(Seen* s) {
  return {[s](const Member&, std::string_view m) { s->msgs.emplace_back(m); },
          [s](const std::vector<Member>& members, const std::vector<Member>& left) {
            s->members = members;
            s->left.insert(s->left.end(), left.begin(), left.end());
            s->changes++;
          }};
}

TEST(MemHub, MembersSeeEachOtherAndCutsPartitionThem) {
  auto hub = MemHub::Make();
  auto a = hub->NewMember(1), b = hub->NewMember(2);
  Seen sa, sb;
  a->Start(Record(&sa));
  b->Start(Record(&sb));
  EXPECT_EQ(sa.members.size(), 2u);
  EXPECT_EQ(sb.members.size(), 2u);
  ASSERT_TRUE(a->Send("hello").ok());
  EXPECT_EQ(sa.msgs, std::vector<std::string>{"hello"});  // delivered to the sender too
  EXPECT_EQ(sb.msgs, std::vector<std::string>{"hello"});
  hub->Cut(1, 2);
  EXPECT_EQ(sa.members.size(), 1u);
  ASSERT_EQ(sa.left.size(), 1u);
  EXPECT_EQ(sa.left[0].node, 2u);
  ASSERT_TRUE(b->Send("alone").ok());
  EXPECT_EQ(sa.msgs.size(), 1u);
  hub->Heal(1, 2);
  EXPECT_EQ(sa.members.size(), 2u);
  b->Stop();
  EXPECT_EQ(sa.members.size(), 1u);
  EXPECT_EQ(sa.left.back().node, 2u);
  EXPECT_FALSE(b->Send("gone").ok());
}

TEST(CorosyncInterconnect, WithoutCorosyncItSaysWhyAndRefusesToSend) {
  // No corosync runs in the test's network namespace (the lab runs one per
  // node namespace): the interconnect keeps trying and says why.
  auto ic = NewCorosyncInterconnect("nasgw-unit-" + Uuid::Random().ToString().substr(0, 8), 50);
  ic->Start({});
  EXPECT_FALSE(ic->status().connected);
  Status s = ic->Send("x");
  if (!ic->status().connected) {
    EXPECT_EQ(s.code(), Code::kUnavailable) << s.ToString();
    EXPECT_FALSE(ic->status().reason.empty());
  }
  ic->Stop();
  EXPECT_NE(ic->Describe().find("corosync"), std::string::npos);
}

}  // namespace
}  // namespace nasgw::cluster
