#include "cluster/vip.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <functional>
#include <optional>
#include <utility>

#include "base/log.h"

#include <arpa/inet.h>
#include <linux/if_packet.h>
#include <linux/inet_diag.h>
#include <linux/netlink.h>
#include <linux/rtnetlink.h>
#include <linux/sock_diag.h>
#include <linux/tcp.h>
#include <net/ethernet.h>
#include <net/if.h>
#include <net/if_arp.h>
#include <netinet/in.h>
#include <netinet/ip.h>
#include <sys/ioctl.h>
#include <sys/socket.h>

namespace nasgw::cluster {
namespace {

class Fd {
 public:
  explicit Fd(int fd) : fd_(fd) {}
  ~Fd() {
    if (fd_ >= 0) close(fd_);
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  int get() const { return fd_; }

 private:
  int fd_;
};

std::string Errno(const std::string& what, int e) {
  return what + ": " + std::strerror(e);
}

// One request, one acknowledgement: RTM_NEWADDR or RTM_DELADDR. The
// kernel's answer (0 or an errno) or a failure to ask.
Result<int> AddrRequest(uint16_t type, uint16_t flags, int ifindex, const Vip& v) {
  Fd fd(socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, NETLINK_ROUTE));
  if (fd.get() < 0) return Status::IoError(Errno("netlink socket", errno));
  struct {
    nlmsghdr nh;
    ifaddrmsg ifa;
    char attrs[64];
  } req{};
  req.nh.nlmsg_len = NLMSG_LENGTH(sizeof(ifaddrmsg));
  req.nh.nlmsg_type = type;
  req.nh.nlmsg_flags = static_cast<uint16_t>(NLM_F_REQUEST | NLM_F_ACK | flags);
  req.nh.nlmsg_seq = 1;
  req.ifa.ifa_family = AF_INET;
  req.ifa.ifa_prefixlen = v.prefix;
  req.ifa.ifa_scope = RT_SCOPE_UNIVERSE;
  req.ifa.ifa_index = static_cast<uint32_t>(ifindex);
  const uint32_t be = htonl(v.addr);
  for (uint16_t attr : {static_cast<uint16_t>(IFA_LOCAL), static_cast<uint16_t>(IFA_ADDRESS)}) {
    auto* rta = reinterpret_cast<rtattr*>(reinterpret_cast<char*>(&req) + NLMSG_ALIGN(req.nh.nlmsg_len));
    rta->rta_type = attr;
    rta->rta_len = RTA_LENGTH(sizeof(be));
    std::memcpy(RTA_DATA(rta), &be, sizeof(be));
    req.nh.nlmsg_len = NLMSG_ALIGN(req.nh.nlmsg_len) + RTA_ALIGN(rta->rta_len);
  }
  sockaddr_nl kernel{};
  kernel.nl_family = AF_NETLINK;
  if (sendto(fd.get(), &req, req.nh.nlmsg_len, 0, reinterpret_cast<sockaddr*>(&kernel), sizeof(kernel)) < 0) {
    return Status::IoError(Errno("netlink send", errno));
  }
  char buf[4096];
  const ssize_t n = recv(fd.get(), buf, sizeof(buf), 0);
  if (n < 0) return Status::IoError(Errno("netlink receive", errno));
  auto* nh = reinterpret_cast<nlmsghdr*>(buf);
  if (!NLMSG_OK(nh, static_cast<uint32_t>(n)) || nh->nlmsg_type != NLMSG_ERROR) {
    return Status::IoError("netlink: unexpected answer");
  }
  return -reinterpret_cast<nlmsgerr*>(NLMSG_DATA(nh))->error;
}

// A gratuitous ARP request (sender and target both the VIP), broadcast, so
// that neighbours and switches learn where the address lives now.
Status AnnounceOne(const std::string& iface, int ifindex, const Vip& v) {
  Fd fd(socket(AF_PACKET, SOCK_DGRAM | SOCK_CLOEXEC, htons(ETH_P_ARP)));
  if (fd.get() < 0) return Status::IoError(Errno("packet socket", errno));
  ifreq ifr{};
  std::strncpy(ifr.ifr_name, iface.c_str(), IFNAMSIZ - 1);
  if (ioctl(fd.get(), SIOCGIFHWADDR, &ifr) < 0) return Status::IoError(Errno("hardware address of " + iface, errno));
  struct __attribute__((packed)) {
    arphdr h;
    uint8_t sha[6];
    uint32_t spa;
    uint8_t tha[6];
    uint32_t tpa;
  } arp{};
  arp.h.ar_hrd = htons(ARPHRD_ETHER);
  arp.h.ar_pro = htons(ETH_P_IP);
  arp.h.ar_hln = 6;
  arp.h.ar_pln = 4;
  arp.h.ar_op = htons(ARPOP_REQUEST);
  std::memcpy(arp.sha, ifr.ifr_hwaddr.sa_data, 6);
  arp.spa = arp.tpa = htonl(v.addr);
  sockaddr_ll to{};
  to.sll_family = AF_PACKET;
  to.sll_protocol = htons(ETH_P_ARP);
  to.sll_ifindex = ifindex;
  to.sll_halen = 6;
  std::memset(to.sll_addr, 0xff, 6);
  for (int i = 0; i < 2; i++) {
    if (sendto(fd.get(), &arp, sizeof(arp), 0, reinterpret_cast<sockaddr*>(&to), sizeof(to)) < 0) {
      return Status::IoError(Errno("gratuitous ARP for " + v.text, errno));
    }
  }
  return Status();
}

Result<int> IfIndex(const std::string& iface) {
  const unsigned idx = if_nametoindex(iface.c_str());
  if (idx == 0) return Status::NotFound(Errno("interface '" + iface + "'", errno));
  return static_cast<int>(idx);
}

}  // namespace

Result<Vip> ParseVip(std::string_view text) {
  Vip v;
  v.text = std::string(text);
  std::string_view addr = text;
  if (auto slash = text.find('/'); slash != std::string_view::npos) {
    addr = text.substr(0, slash);
    std::string_view p = text.substr(slash + 1);
    unsigned n = 0;
    auto [end, ec] = std::from_chars(p.data(), p.data() + p.size(), n);
    if (ec != std::errc() || end != p.data() + p.size() || n < 1 || n > 32) {
      return Status::InvalidArgument("'" + v.text + "': the prefix length must be 1..32");
    }
    v.prefix = static_cast<uint8_t>(n);
  }
  in_addr a{};
  if (inet_pton(AF_INET, std::string(addr).c_str(), &a) != 1) {
    return Status::InvalidArgument("'" + v.text + "' is not an IPv4 address (A.B.C.D/N)");
  }
  v.addr = ntohl(a.s_addr);
  if (v.addr == 0 || (v.addr >> 24) == 127 || (v.addr >> 28) >= 14) {
    return Status::InvalidArgument("'" + v.text + "' cannot be a client-access address (0, loopback, multicast)");
  }
  return v;
}

Status VipSet::Hold(VipMask mask, VipMask* added) {
  if (added != nullptr) *added = 0;
  auto idx = IfIndex(iface_);
  if (!idx.ok()) return idx.status();
  Status first;
  for (size_t i = 0; i < vips_.size() && i < 64; i++) {
    if (!(mask >> i & 1)) continue;
    const Vip& v = vips_[i];
    auto err = AddrRequest(RTM_NEWADDR, NLM_F_CREATE | NLM_F_EXCL, *idx, v);
    if (!err.ok()) return err.status();
    if (*err != 0 && *err != EEXIST) return Status::IoError(Errno("add " + v.text + " to " + iface_, *err));
    // On the interface now, announced or not: the caller must know it to
    // remove it again.
    if (added != nullptr) *added |= VipMask{1} << i;
    Status s = AnnounceOne(iface_, *idx, v);
    if (!s.ok() && first.ok()) first = s;
  }
  return first;
}

uint64_t VipSet::Digest() const {
  uint64_t h = 0xcbf29ce484222325ull;  // FNV-1a, over each address then its prefix
  auto mix = [&h](uint64_t v, int bytes) {
    for (int i = 0; i < bytes; i++) {
      h ^= (v >> (8 * i)) & 0xff;
      h *= 0x100000001b3ull;
    }
  };
  for (const Vip& v : vips_) {
    mix(v.addr, 4);
    mix(v.prefix, 1);
  }
  return h | 1;
}

Status VipSet::Announce(VipMask mask) {
  auto idx = IfIndex(iface_);
  if (!idx.ok()) return idx.status();
  for (size_t i = 0; i < vips_.size(); i++) {
    if (mask >> i & 1) NASGW_RETURN_IF_ERROR(AnnounceOne(iface_, *idx, vips_[i]));
  }
  return Status();
}

Status VipSet::Release(VipMask mask) {
  auto idx = IfIndex(iface_);
  if (!idx.ok()) return Status();  // no interface, no address on it
  {
    // Removing the first address of a subnet removes the others in it too
    // unless the kernel promotes them: the addresses this node keeps must
    // stay, and so must an admin's own address on the interface, whether
    // some of ours are removed or all.
    const std::string knob = "/proc/sys/net/ipv4/conf/" + iface_ + "/promote_secondaries";
    Fd fd(::open(knob.c_str(), O_WRONLY | O_CLOEXEC));
    if (fd.get() < 0 || ::write(fd.get(), "1", 1) != 1) {
      return Status::IoError(Errno("set " + knob + " (to remove our addresses and keep others)", errno));
    }
  }
  Status first;
  for (size_t i = 0; i < vips_.size(); i++) {
    if (!(mask >> i & 1)) continue;
    const Vip& v = vips_[i];
    auto err = AddrRequest(RTM_DELADDR, 0, *idx, v);
    Status s = !err.ok() ? err.status()
               : (*err != 0 && *err != EADDRNOTAVAIL)
                   ? Status::IoError(Errno("remove " + v.text + " from " + iface_, *err))
                   : Status();
    if (!s.ok() && first.ok()) first = s;
  }
  return first;
}

bool VipSet::InterfaceUp() const {
  Fd fd(socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0));
  if (fd.get() < 0) return false;
  ifreq ifr{};
  std::strncpy(ifr.ifr_name, iface_.c_str(), IFNAMSIZ - 1);
  if (ioctl(fd.get(), SIOCGIFFLAGS, &ifr) < 0) return false;
  return (ifr.ifr_flags & IFF_UP) != 0 && (ifr.ifr_flags & IFF_RUNNING) != 0;
}

Result<std::vector<std::string>> VipSet::Present() const {
  auto mask = PresentMask();
  if (!mask.ok()) return mask.status();
  std::vector<std::string> out;
  for (size_t i = 0; i < vips_.size() && i < 64; i++) {
    if (*mask >> i & 1) out.push_back(vips_[i].text);
  }
  return out;
}

Result<VipMask> VipSet::PresentMask() const {
  auto found = IfIndex(iface_);
  if (!found.ok()) return found.status();
  const int idx = *found;
  Fd fd(socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, NETLINK_ROUTE));
  if (fd.get() < 0) return Status::IoError(Errno("netlink socket", errno));
  struct {
    nlmsghdr nh;
    ifaddrmsg ifa;
  } req{};
  req.nh.nlmsg_len = NLMSG_LENGTH(sizeof(ifaddrmsg));
  req.nh.nlmsg_type = RTM_GETADDR;
  req.nh.nlmsg_flags = NLM_F_REQUEST | NLM_F_DUMP;
  req.ifa.ifa_family = AF_INET;
  if (send(fd.get(), &req, req.nh.nlmsg_len, 0) < 0) return Status::IoError(Errno("netlink send", errno));
  VipMask present = 0;
  char buf[16384];
  for (;;) {
    ssize_t n = recv(fd.get(), buf, sizeof(buf), 0);
    if (n < 0) return Status::IoError(Errno("netlink receive", errno));
    for (auto* nh = reinterpret_cast<nlmsghdr*>(buf); n >= 0 && NLMSG_OK(nh, static_cast<uint32_t>(n));
         nh = NLMSG_NEXT(nh, n)) {
      if (nh->nlmsg_type == NLMSG_DONE) return present;
      if (nh->nlmsg_type == NLMSG_ERROR) return Status::IoError("netlink: address dump failed");
      if (nh->nlmsg_type != RTM_NEWADDR) continue;
      auto* ifa = reinterpret_cast<ifaddrmsg*>(NLMSG_DATA(nh));
      if (static_cast<int>(ifa->ifa_index) != idx) continue;
      int len = static_cast<int>(IFA_PAYLOAD(nh));
      for (auto* rta = IFA_RTA(ifa); RTA_OK(rta, len); rta = RTA_NEXT(rta, len)) {
        if (rta->rta_type != IFA_LOCAL) continue;
        uint32_t be = 0;
        std::memcpy(&be, RTA_DATA(rta), sizeof(be));
        for (size_t i = 0; i < vips_.size() && i < 64; i++) {
          if (vips_[i].addr == ntohl(be) && vips_[i].prefix == ifa->ifa_prefixlen) present |= VipMask{1} << i;
        }
      }
    }
  }
}

namespace {

// The IPv4 address in a sock_diag address field (network order): the plain
// one for AF_INET, the v4-mapped one for AF_INET6 (a dual-stack listener's
// IPv4 clients); nullopt for a real IPv6 address.
std::optional<uint32_t> V4Of(int family, const __be32 (&a)[4]) {
  if (family == AF_INET) return a[0];
  if (a[0] == 0 && a[1] == 0 && a[2] == htonl(0xffff)) return a[3];
  return std::nullopt;
}

// Calls fn(msg, info) for each established TCP socket of `family` (info:
// the socket's tcp_info, or nullptr when the kernel gave none) from one
// sock_diag dump of this network namespace.
// A sock_diag request for TCP sockets of `family` in `states` (a bit per
// TCP state).
struct DiagRequest {
  nlmsghdr nh;
  inet_diag_req_v2 r;
};
DiagRequest MakeDiagRequest(uint16_t type, uint16_t flags, int family, uint32_t states) {
  DiagRequest req{};
  req.nh.nlmsg_len = sizeof(req);
  req.nh.nlmsg_type = type;
  req.nh.nlmsg_flags = static_cast<uint16_t>(NLM_F_REQUEST | flags);
  req.r.sdiag_family = static_cast<uint8_t>(family);
  req.r.sdiag_protocol = IPPROTO_TCP;
  req.r.idiag_states = states;
  return req;
}

Status ForEachEstablished(int family, const std::function<void(const inet_diag_msg&, const tcp_info*)>& fn) {
  Fd fd(::socket(AF_NETLINK, SOCK_DGRAM | SOCK_CLOEXEC, NETLINK_SOCK_DIAG));
  if (fd.get() < 0) return Status::IoError(Errno("sock_diag socket", errno));
  DiagRequest req = MakeDiagRequest(SOCK_DIAG_BY_FAMILY, NLM_F_DUMP, family, 1u << 1 /* TCP_ESTABLISHED */);
  req.r.idiag_ext = 1u << (INET_DIAG_INFO - 1);
  if (::send(fd.get(), &req, sizeof(req), 0) != static_cast<ssize_t>(sizeof(req))) {
    return Status::IoError(Errno("sock_diag request", errno));
  }
  std::vector<char> buf(64 << 10);
  for (;;) {
    const ssize_t n = ::recv(fd.get(), buf.data(), buf.size(), 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return Status::IoError(Errno("sock_diag answer", n < 0 ? errno : EPIPE));
    ssize_t left = n;
    for (auto* h = reinterpret_cast<nlmsghdr*>(buf.data()); left >= 0 && NLMSG_OK(h, static_cast<uint32_t>(left));
         h = NLMSG_NEXT(h, left)) {
      if (h->nlmsg_type == NLMSG_DONE) return Status();
      if (h->nlmsg_type == NLMSG_ERROR) return Status::IoError("sock_diag: the kernel refused the dump");
      if (h->nlmsg_type != SOCK_DIAG_BY_FAMILY || h->nlmsg_len < NLMSG_LENGTH(sizeof(inet_diag_msg))) continue;
      const auto* m = static_cast<const inet_diag_msg*>(NLMSG_DATA(h));
      tcp_info ti{};
      bool have_info = false;
      int alen = static_cast<int>(h->nlmsg_len - NLMSG_LENGTH(sizeof(*m)));
      for (auto* a = reinterpret_cast<rtattr*>(const_cast<inet_diag_msg*>(m) + 1); RTA_OK(a, alen);
           a = RTA_NEXT(a, alen)) {
        if (a->rta_type != INET_DIAG_INFO || RTA_PAYLOAD(a) < offsetof(tcp_info, tcpi_last_data_recv) + 4) continue;
        std::memcpy(&ti, RTA_DATA(a), std::min<size_t>(RTA_PAYLOAD(a), sizeof(ti)));
        have_info = true;
      }
      fn(*m, have_info ? &ti : nullptr);
    }
  }
}

// The Internet checksum (RFC 1071) of `parts` (each of an even length),
// host order.
uint16_t InetChecksum(std::initializer_list<std::pair<const void*, size_t>> parts) {
  uint32_t sum = 0;
  for (const auto& [data, len] : parts) {
    const auto* p = static_cast<const uint8_t*>(data);
    for (size_t i = 0; i + 1 < len; i += 2) sum += uint32_t{p[i]} << 8 | p[i + 1];
  }
  while (sum >> 16) sum = (sum & 0xffff) + (sum >> 16);
  return static_cast<uint16_t>(~sum);
}

// The connection `m` as a TcpConn, when its local address is one of `vips`
// in `mask`.
std::optional<TcpConn> ConnToVip(const std::vector<Vip>& vips, int family, const inet_diag_msg& m, VipMask mask) {
  const auto local = V4Of(family, m.id.idiag_src);
  const auto remote = V4Of(family, m.id.idiag_dst);
  if (!local || !remote) return std::nullopt;
  for (size_t i = 0; i < vips.size() && i < 64; i++) {
    if ((mask >> i & 1) && htonl(vips[i].addr) == *local) {
      return TcpConn{static_cast<uint8_t>(i), vips[i].addr, ntohs(m.id.idiag_sport), ntohl(*remote),
                     ntohs(m.id.idiag_dport)};
    }
  }
  return std::nullopt;
}

}  // namespace

Result<uint64_t> VipSet::QuietMs(size_t index) const {
  if (index >= vips_.size()) return Status::InvalidArgument("no address " + std::to_string(index));
  uint64_t quiet = UINT64_MAX;
  const uint32_t addr = htonl(vips_[index].addr);
  for (int family : {AF_INET, AF_INET6}) {
    NASGW_RETURN_IF_ERROR(ForEachEstablished(family, [&](const inet_diag_msg& m, const tcp_info* ti) {
      if (ti != nullptr && V4Of(family, m.id.idiag_src) == addr) {
        quiet = std::min<uint64_t>(quiet, ti->tcpi_last_data_recv);
      }
    }));
  }
  return quiet;
}

Result<std::vector<TcpConn>> VipSet::Connections(VipMask mask, size_t* more) const {
  std::vector<TcpConn> out;
  size_t left_out = 0;
  for (int family : {AF_INET, AF_INET6}) {
    NASGW_RETURN_IF_ERROR(ForEachEstablished(family, [&](const inet_diag_msg& m, const tcp_info*) {
      const auto conn = ConnToVip(vips_, family, m, mask);
      if (!conn) return;
      if (out.size() >= kTcpConnsMax) {
        left_out++;
        return;
      }
      out.push_back(*conn);
    }));
  }
  std::sort(out.begin(), out.end());
  if (more != nullptr) *more = left_out;
  return out;
}

Result<std::vector<TcpConn>> VipSet::DropStale(VipMask mask) const {
  std::vector<TcpConn> kept;
  Fd fd(::socket(AF_NETLINK, SOCK_DGRAM | SOCK_CLOEXEC, NETLINK_SOCK_DIAG));
  if (fd.get() < 0) return Status::IoError(Errno("sock_diag socket", errno));
  for (int family : {AF_INET, AF_INET6}) {
    std::vector<std::pair<inet_diag_sockid, TcpConn>> found;
    NASGW_RETURN_IF_ERROR(ForEachEstablished(family, [&](const inet_diag_msg& m, const tcp_info*) {
      if (const auto conn = ConnToVip(vips_, family, m, mask)) found.emplace_back(m.id, *conn);
    }));
    for (const auto& [id, conn] : found) {
      // The socket as the dump named it (its cookie included): one request,
      // one acknowledgement.
      DiagRequest req = MakeDiagRequest(SOCK_DESTROY, NLM_F_ACK, family, ~0u);
      req.r.id = id;
      int err = EIO;
      if (::send(fd.get(), &req, sizeof(req), 0) == static_cast<ssize_t>(sizeof(req))) {
        char buf[512];
        const ssize_t n = ::recv(fd.get(), buf, sizeof(buf), 0);
        const auto* h = reinterpret_cast<const nlmsghdr*>(buf);
        if (n >= static_cast<ssize_t>(NLMSG_LENGTH(sizeof(nlmsgerr))) && h->nlmsg_type == NLMSG_ERROR) {
          err = -static_cast<const nlmsgerr*>(NLMSG_DATA(h))->error;
        }
      }
      if (err != 0 && err != ENOENT) kept.push_back(conn);  // ENOENT: it ended meanwhile
    }
  }
  return kept;
}

Result<size_t> VipSet::Tickle(const std::vector<TcpConn>& conns, VipMask mask, size_t* failed,
                              Status* first_error) const {
  // IPPROTO_RAW: we write the IP header ourselves (the source is the
  // address, whichever route the kernel picks) and the socket receives
  // nothing.
  Fd fd(::socket(AF_INET, SOCK_RAW | SOCK_CLOEXEC, IPPROTO_RAW));
  if (fd.get() < 0) return Status::IoError(Errno("raw socket (tickle ACKs need CAP_NET_RAW)", errno));
  size_t sent = 0;
  for (const TcpConn& c : conns) {
    if (c.vip >= vips_.size() || c.vip >= 64 || !(mask >> c.vip & 1) || vips_[c.vip].addr != c.vip_addr) continue;
    struct {
      iphdr ip;
      tcphdr tcp;
    } pkt{};
    static_assert(sizeof(pkt) == sizeof(iphdr) + sizeof(tcphdr), "the headers back to back, no padding");
    pkt.ip.version = 4;
    pkt.ip.ihl = 5;
    pkt.ip.ttl = 64;
    pkt.ip.protocol = IPPROTO_TCP;
    pkt.ip.saddr = htonl(c.vip_addr);
    pkt.ip.daddr = htonl(c.client_addr);
    pkt.ip.tot_len = htons(sizeof(pkt));  // the kernel fills in the IP checksum
    pkt.tcp.source = htons(c.vip_port);
    pkt.tcp.dest = htons(c.client_port);
    pkt.tcp.seq = 0;
    pkt.tcp.ack_seq = 0;
    pkt.tcp.doff = 5;
    pkt.tcp.ack = 1;
    pkt.tcp.window = htons(1234);
    struct {
      uint32_t src, dst;
      uint8_t zero, proto;
      uint16_t len;
    } pseudo{pkt.ip.saddr, pkt.ip.daddr, 0, IPPROTO_TCP, htons(sizeof(tcphdr))};
    static_assert(sizeof(pseudo) == 12, "the TCP pseudo-header, no padding");
    pkt.tcp.check = htons(InetChecksum({{&pseudo, sizeof(pseudo)}, {&pkt.tcp, sizeof(pkt.tcp)}}));
    sockaddr_in to{};
    to.sin_family = AF_INET;
    to.sin_addr.s_addr = pkt.ip.daddr;
    if (::sendto(fd.get(), &pkt, sizeof(pkt), 0, reinterpret_cast<sockaddr*>(&to), sizeof(to)) < 0) {
      // One refused packet (a firewall rule, a full queue, a client gone
      // from our routes) does not stop the others.
      if (failed != nullptr) ++*failed;
      if (first_error != nullptr && first_error->ok()) {
        *first_error = Status::IoError(Errno("tickle ACK to a client of " + vips_[c.vip].text, errno));
      }
      continue;
    }
    sent++;
  }
  return sent;
}

}  // namespace nasgw::cluster
