// VipSet on a real interface: each test moves into a network namespace of
// its own (unshare, as root, which make test is) and makes a veth pair there.

#include "cluster/vip.h"

#include <poll.h>
#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>

#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <linux/if_packet.h>
#include <net/ethernet.h>
#include <net/if.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>

namespace nasgw::cluster {
namespace {

class VipTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_EQ(unshare(CLONE_NEWNET), 0) << "unshare(CLONE_NEWNET) needs root";
    ASSERT_EQ(std::system("ip link add vip0 type veth peer name vip1 && ip link set vip0 up && ip link set vip1 up"),
              0);
  }
  static sockaddr_in Addr(const char* ip, uint16_t port = 0) {
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(port);
    inet_pton(AF_INET, ip, &a.sin_addr);
    return a;
  }
  // A TCP listener on `ip` (a port of the kernel's choice, in *where).
  static int Listen(const char* ip, sockaddr_in* where) {
    int l = socket(AF_INET, SOCK_STREAM, 0);
    *where = Addr(ip);
    EXPECT_EQ(bind(l, reinterpret_cast<sockaddr*>(where), sizeof(*where)), 0);
    EXPECT_EQ(listen(l, 1), 0);
    socklen_t len = sizeof(*where);
    getsockname(l, reinterpret_cast<sockaddr*>(where), &len);
    return l;
  }
  // A connection from `client_ip` to a listener on `server_ip`: the
  // listener, both ends and their addresses. Closes what it opened.
  struct Conn {
    int l = -1, c = -1, s = -1;
    sockaddr_in server{}, client{};
    ~Conn() {
      for (int fd : {s, c, l}) {
        if (fd >= 0) close(fd);
      }
    }
  };
  static void Connect(const char* server_ip, const char* client_ip, Conn* out) {
    out->l = Listen(server_ip, &out->server);
    out->c = socket(AF_INET, SOCK_STREAM, 0);
    out->client = Addr(client_ip);
    ASSERT_EQ(bind(out->c, reinterpret_cast<sockaddr*>(&out->client), sizeof(out->client)), 0);
    ASSERT_EQ(connect(out->c, reinterpret_cast<sockaddr*>(&out->server), sizeof(out->server)), 0);
    socklen_t len = sizeof(out->client);
    getsockname(out->c, reinterpret_cast<sockaddr*>(&out->client), &len);
    out->s = accept(out->l, nullptr, nullptr);
    ASSERT_GE(out->s, 0);
  }
  static std::vector<Vip> Vips(std::initializer_list<const char*> texts) {
    std::vector<Vip> out;
    for (const char* t : texts) {
      auto v = ParseVip(t);
      EXPECT_TRUE(v.ok()) << v.status().ToString();
      if (v.ok()) out.push_back(*v);
    }
    return out;
  }
};

TEST(VipParse, AddressesAndErrors) {
  auto v = ParseVip("198.18.1.100/24");
  ASSERT_TRUE(v.ok());
  EXPECT_EQ(v->addr, (198u << 24) | (18u << 16) | (1u << 8) | 100u);
  EXPECT_EQ(v->prefix, 24);
  EXPECT_EQ(ParseVip("198.18.1.7")->prefix, 32);
  for (const char* bad : {"", "198.18.1", "198.18.1.1/0", "198.18.1.1/33", "198.18.1.1/x", "127.0.0.1/8", "0.0.0.0/24",
                          "224.0.0.1/4", "fe80::1/64", "198.18.1.1/24/1"}) {
    EXPECT_FALSE(ParseVip(bad).ok()) << bad;
  }
}

// The VIPs announced on the far end of the veth pair: sender and target
// address of each gratuitous ARP seen within a second.
std::vector<uint32_t> ArpsSeen(int fd) {
  std::vector<uint32_t> seen;
  uint8_t buf[128];
  for (;;) {
    ssize_t n = recv(fd, buf, sizeof(buf), 0);
    if (n < 28) return seen;
    uint32_t spa, tpa;
    std::memcpy(&spa, buf + 14, 4);
    std::memcpy(&tpa, buf + 24, 4);
    if (spa == tpa) seen.push_back(ntohl(spa));
  }
}

TEST_F(VipTest, HoldAddsAndAnnouncesReleaseRemovesBothIdempotent) {
  VipSet set("vip0", Vips({"198.18.9.10/24", "198.18.9.11/24"}));
  int arp = socket(AF_PACKET, SOCK_DGRAM, htons(ETH_P_ARP));
  ASSERT_GE(arp, 0);
  sockaddr_ll at{};
  at.sll_family = AF_PACKET;
  at.sll_protocol = htons(ETH_P_ARP);
  at.sll_ifindex = static_cast<int>(if_nametoindex("vip1"));
  ASSERT_EQ(bind(arp, reinterpret_cast<sockaddr*>(&at), sizeof(at)), 0);
  timeval tv{1, 0};
  setsockopt(arp, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  ASSERT_TRUE(set.Present().ok());
  EXPECT_TRUE(set.Present()->empty());
  ASSERT_TRUE(set.Hold().ok()) << set.Hold().ToString();
  auto p = set.Present();
  ASSERT_TRUE(p.ok());
  std::sort(p->begin(), p->end());
  EXPECT_EQ(*p, (std::vector<std::string>{"198.18.9.10/24", "198.18.9.11/24"}));
  auto seen = ArpsSeen(arp);
  close(arp);
  for (const Vip& v : set.vips()) {
    EXPECT_NE(std::find(seen.begin(), seen.end(), v.addr), seen.end()) << v.text << " was not announced";
  }
  EXPECT_TRUE(set.Hold().ok()) << "holding again is fine";
  ASSERT_TRUE(set.Release().ok());
  EXPECT_TRUE(set.Present()->empty());
  EXPECT_TRUE(set.Release().ok()) << "releasing again is fine";
  // Another address on the interface is never touched.
  ASSERT_EQ(std::system("ip addr add 198.18.9.99/24 dev vip0"), 0);
  ASSERT_TRUE(set.Hold().ok());
  ASSERT_TRUE(set.Release().ok());
  EXPECT_EQ(std::system("ip -o addr show dev vip0 | grep -q '198.18.9.99/24'"), 0);
}

TEST_F(VipTest, MasksPickAddressesAndQuietMsSeesClientsTalking) {
  ASSERT_EQ(std::system("ip link set lo up"), 0);  // a connection to our own address goes through it
  VipSet set("vip0", Vips({"198.18.9.10/24", "198.18.9.11/24"}));
  EXPECT_EQ(set.all(), 0b11u);
  ASSERT_TRUE(set.Hold(0b10).ok());
  EXPECT_EQ(*set.Present(), std::vector<std::string>{"198.18.9.11/24"});
  ASSERT_TRUE(set.Hold(0b01).ok());
  ASSERT_TRUE(set.Release(0b10).ok());
  EXPECT_EQ(*set.Present(), std::vector<std::string>{"198.18.9.10/24"});
  // Nobody connected: quiet for ever.
  ASSERT_TRUE(set.QuietMs(0).ok()) << set.QuietMs(0).status().ToString();
  EXPECT_EQ(*set.QuietMs(0), UINT64_MAX);
  EXPECT_FALSE(set.QuietMs(2).ok());
  // A client that just sent data to .10: not quiet; .11 still is.
  sockaddr_in a{};
  int l = Listen("198.18.9.10", &a);
  int c = socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_EQ(connect(c, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
  int s = accept(l, nullptr, nullptr);
  ASSERT_GE(s, 0);
  ASSERT_EQ(send(c, "x", 1, 0), 1);
  char got = 0;
  ASSERT_EQ(recv(s, &got, 1, 0), 1);
  auto q = set.QuietMs(0);
  ASSERT_TRUE(q.ok());
  EXPECT_LT(*q, 5000u) << "the server's socket on .10 received data just now";
  EXPECT_EQ(*set.QuietMs(1), UINT64_MAX);
  close(s);
  close(c);
  close(l);
  // A dual-stack listener (ganesha's and smbd's usual one) sees the client of
  // .11 on a v4-mapped IPv6 socket: counted too.
  int l6 = socket(AF_INET6, SOCK_STREAM, 0);
  int off = 0;
  setsockopt(l6, IPPROTO_IPV6, IPV6_V6ONLY, &off, sizeof(off));
  sockaddr_in6 any6{};
  any6.sin6_family = AF_INET6;
  any6.sin6_addr = in6addr_any;
  ASSERT_EQ(bind(l6, reinterpret_cast<sockaddr*>(&any6), sizeof(any6)), 0);
  ASSERT_EQ(listen(l6, 1), 0);
  socklen_t l6len = sizeof(any6);
  getsockname(l6, reinterpret_cast<sockaddr*>(&any6), &l6len);
  ASSERT_TRUE(set.Hold(0b10).ok());
  sockaddr_in b = Addr("198.18.9.11", ntohs(any6.sin6_port));
  int c6 = socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_EQ(connect(c6, reinterpret_cast<sockaddr*>(&b), sizeof(b)), 0);
  int s6 = accept(l6, nullptr, nullptr);
  ASSERT_GE(s6, 0);
  ASSERT_EQ(send(c6, "y", 1, 0), 1);
  ASSERT_EQ(recv(s6, &got, 1, 0), 1);
  EXPECT_LT(*set.QuietMs(1), 5000u) << "a v4-mapped connection to .11 counts";
  close(s6);
  close(c6);
  close(l6);
  ASSERT_TRUE(set.Release().ok());
}

TEST_F(VipTest, TickleAckResetsAConnectionThisNodeNoLongerHas) {
  ASSERT_EQ(std::system("ip link set lo up"), 0);
  VipSet set("vip0", Vips({"198.18.9.10/24", "198.18.9.11/24"}));
  ASSERT_TRUE(set.Hold().ok());
  // A server on .10 (kept listening, as ganesha does) and a client from .11.
  Conn k;
  ASSERT_NO_FATAL_FAILURE(Connect("198.18.9.10", "198.18.9.11", &k));
  const sockaddr_in &a = k.server, &from = k.client;
  ASSERT_EQ(send(k.c, "x", 1, 0), 1);
  char got = 0;
  ASSERT_EQ(recv(k.s, &got, 1, 0), 1);

  // The server's side, listed by the address it is on.
  auto conns = set.Connections(0b01);
  ASSERT_TRUE(conns.ok()) << conns.status().ToString();
  ASSERT_EQ(conns->size(), 1u);
  const TcpConn& t = (*conns)[0];
  EXPECT_EQ(t.vip, 0);
  EXPECT_EQ(t.vip_addr, ntohl(a.sin_addr.s_addr));
  EXPECT_EQ(t.vip_port, ntohs(a.sin_port));
  EXPECT_EQ(t.client_addr, ntohl(from.sin_addr.s_addr));
  EXPECT_EQ(t.client_port, ntohs(from.sin_port));

  // The server's socket vanishes without a word (TCP_REPAIR: no FIN, no
  // RST), as when its node dies: the client still believes in it.
  int on = 1;
  ASSERT_EQ(setsockopt(k.s, SOL_TCP, TCP_REPAIR, &on, sizeof(on)), 0) << std::strerror(errno);
  close(k.s);
  k.s = -1;
  pollfd p{k.c, POLLIN, 0};
  EXPECT_EQ(poll(&p, 1, 200), 0) << "nothing tells the client; it would wait for its own timers";
  // Only the addresses of the mask are tickled.
  auto none = set.Tickle(*conns, 0b10);
  ASSERT_TRUE(none.ok()) << none.status().ToString();
  EXPECT_EQ(*none, 0u);
  auto sent = set.Tickle(*conns, 0b01);
  ASSERT_TRUE(sent.ok()) << sent.status().ToString();
  EXPECT_EQ(*sent, 1u);
  ASSERT_EQ(poll(&p, 1, 5000), 1) << "the tickle's answer is reset at once";
  errno = 0;
  EXPECT_EQ(recv(k.c, &got, 1, 0), -1);
  EXPECT_EQ(errno, ECONNRESET);
  ASSERT_TRUE(set.Release().ok());
}

TEST_F(VipTest, DropStaleEndsThisNodesConnectionsToTheAddresses) {
  ASSERT_EQ(std::system("ip link set lo up"), 0);
  VipSet set("vip0", Vips({"198.18.9.10/24", "198.18.9.11/24"}));
  ASSERT_TRUE(set.Hold().ok());
  Conn k;
  ASSERT_NO_FATAL_FAILURE(Connect("198.18.9.10", "198.18.9.11", &k));
  // Nothing of an address not asked for.
  auto none = set.DropStale(0);
  ASSERT_TRUE(none.ok()) << none.status().ToString();
  EXPECT_TRUE(none->empty());
  ASSERT_EQ(set.Connections(0b01)->size(), 1u);
  auto kept = set.DropStale(0b01);
  ASSERT_TRUE(kept.ok()) << kept.status().ToString();
  if (!kept->empty()) GTEST_SKIP() << "this kernel has no SOCK_DESTROY (CONFIG_INET_DIAG_DESTROY)";
  // The server's side (on .10) ended: its process sees the abort, its peer
  // the RST; the listener stays.
  char got = 0;
  errno = 0;
  EXPECT_EQ(recv(k.s, &got, 1, 0), -1);
  EXPECT_EQ(errno, ECONNABORTED);
  pollfd p{k.c, POLLIN, 0};
  ASSERT_EQ(poll(&p, 1, 5000), 1);
  errno = 0;
  EXPECT_EQ(recv(k.c, &got, 1, 0), -1);
  EXPECT_EQ(errno, ECONNRESET);
  EXPECT_TRUE(set.Connections(0b01)->empty());
  ASSERT_TRUE(set.Release().ok());
}

TEST_F(VipTest, AnAddressAddedIsReportedEvenWhenItsAnnouncementFails) {
  VipSet set("vip0", Vips({"198.18.9.10/24", "198.18.9.11/24"}));
  // An interface that is down takes addresses but sends no ARP.
  ASSERT_EQ(std::system("ip link set vip0 down"), 0);
  VipMask added = 0;
  nasgw::Status s = set.Hold(0b11, &added);
  EXPECT_FALSE(s.ok()) << "the announcement cannot be sent";
  EXPECT_EQ(added, 0b11u) << "both are on the interface and must be removed again: " << s.ToString();
  ASSERT_TRUE(set.PresentMask().ok());
  EXPECT_EQ(*set.PresentMask(), 0b11u);
  ASSERT_TRUE(set.Release().ok());
  EXPECT_EQ(*set.PresentMask(), 0u);
  // Up again: added and announced, no error.
  ASSERT_EQ(std::system("ip link set vip0 up"), 0);
  ASSERT_TRUE(set.Hold(0b10, &added).ok());
  EXPECT_EQ(added, 0b10u);
  EXPECT_EQ(*set.PresentMask(), 0b10u);
  ASSERT_TRUE(set.Release().ok());
}

TEST_F(VipTest, TheDigestTellsListsApart) {
  const VipSet a("vip0", Vips({"198.18.9.10/24", "198.18.9.11/24"}));
  EXPECT_NE(a.Digest(), 0u);
  EXPECT_EQ(a.Digest(), VipSet("other0", Vips({"198.18.9.10/24", "198.18.9.11/24"})).Digest())
      << "the interface is each node's own";
  EXPECT_NE(a.Digest(), VipSet("vip0", Vips({"198.18.9.11/24", "198.18.9.10/24"})).Digest()) << "order";
  EXPECT_NE(a.Digest(), VipSet("vip0", Vips({"198.18.9.10/24", "198.18.9.11/25"})).Digest()) << "prefix";
  EXPECT_NE(a.Digest(), VipSet("vip0", Vips({"198.18.9.10/24"})).Digest()) << "length";
}

TEST_F(VipTest, InterfaceUpFollowsTheLink) {
  VipSet set("vip0", Vips({"198.18.9.10/24"}));
  EXPECT_TRUE(set.InterfaceUp());
  ASSERT_EQ(std::system("ip link set vip1 down"), 0);  // the far end: no carrier here
  EXPECT_FALSE(set.InterfaceUp());
  ASSERT_EQ(std::system("ip link set vip1 up"), 0);
  ASSERT_EQ(std::system("ip link set vip0 down"), 0);
  EXPECT_FALSE(set.InterfaceUp());
  EXPECT_FALSE(VipSet("nosuch0", {}).InterfaceUp());
}

TEST_F(VipTest, AMissingInterfaceIsAClearError) {
  VipSet set("nosuch0", Vips({"198.18.9.10/24"}));
  Status s = set.Hold();
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.ToString().find("nosuch0"), std::string::npos) << s.ToString();
  EXPECT_TRUE(set.Release().ok()) << "nothing to release";
}

}  // namespace
}  // namespace nasgw::cluster
