#pragma once

// Virtual IPs: the client-access addresses of the pair (brief, decision 7).
// The node that serves a domain holds its addresses on its LAN interface;
// when it stops serving (fenced, shut down, taken over) it lets them go, and
// the node that takes over adds them and announces them with gratuitous ARP
// so that clients and switches send to it at once.
//
// Through rtnetlink (RTM_NEWADDR / RTM_DELADDR) and an AF_PACKET socket: no
// `ip` command, no shell. Needs CAP_NET_ADMIN and CAP_NET_RAW.

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"

namespace nasgw::cluster {

struct Vip {
  uint32_t addr = 0;  // IPv4, host order
  uint8_t prefix = 32;
  std::string text;  // "198.18.1.100/24", as configured
};

// "A.B.C.D/N" (N 1..32; without /N, 32).
Result<Vip> ParseVip(std::string_view text);

// A set of the addresses by their index in the configured list (at most 64).
using VipMask = uint64_t;
constexpr VipMask kAllVips = ~VipMask{0};

// An established client TCP connection to one of our addresses (IPv4; a
// dual-stack listener's v4-mapped ones included), host byte order.
struct TcpConn {
  uint8_t vip = 0;  // index in the configured list
  uint32_t vip_addr = 0;
  uint16_t vip_port = 0;
  uint32_t client_addr = 0;
  uint16_t client_port = 0;
  // clang-tidy 14 misreads a defaulted <=> as a literal 0 for a pointer.
  auto operator<=>(const TcpConn&) const = default;  // NOLINT(modernize-use-nullptr)
};
// At most this many are listed per node (Connections), sent to the partner
// and tickled: a bound on the message and on the burst of packets.
constexpr size_t kTcpConnsMax = 4096;

class VipSet {
 public:
  VipSet(std::string interface, std::vector<Vip> vips) : iface_(std::move(interface)), vips_(std::move(vips)) {}
  // Adds the addresses of `mask` (one already there is fine) and announces
  // each with gratuitous ARP. Stops at the first address it cannot add and
  // says which; an announcement that fails (the interface is down) does not
  // stop it, and the first such error is returned after the rest. *added
  // (when given): the addresses of `mask` that are on the interface now,
  // whatever the outcome: the caller must remove those again.
  Status Hold(VipMask mask = kAllVips, VipMask* added = nullptr);
  // Announces the addresses of `mask` again (gratuitous ARP): a neighbour
  // that missed or ignored the first (Linux keeps an entry for its
  // locktime) learns it from the next.
  Status Announce(VipMask mask = kAllVips);
  // Removes the addresses of `mask` (one not there is fine).
  Status Release(VipMask mask = kAllVips);
  // Milliseconds since any client last sent data to address `index` over
  // TCP (the least over its established connections, from the kernel's
  // sock_diag; this network namespace); UINT64_MAX when none is connected.
  // What "idle" means before an address is moved to the other node.
  Result<uint64_t> QuietMs(size_t index) const;
  // The established client connections to the addresses of `mask`, sorted,
  // at most kTcpConnsMax (*more, when given, says how many were left out).
  Result<std::vector<TcpConn>> Connections(VipMask mask, size_t* more = nullptr) const;
  // A "tickle ACK" to each connection of `conns` to an address of `mask`
  // (as CTDB does after it moves an address): a TCP ACK from the address's
  // port with sequence and acknowledgement 0. The client answers with an
  // ACK of its real numbers, this node's kernel, which has no such
  // connection, answers that with a RST, and the client's connection is
  // reset at once: it connects again here instead of waiting for its own
  // retransmission or RPC timer (seconds). Entries whose address is not
  // ours are skipped. How many were sent; a packet the kernel refused is
  // skipped too, counted in *failed with its error in *first_error (when
  // given). An error only when no raw socket can be had.
  Result<size_t> Tickle(const std::vector<TcpConn>& conns, VipMask mask, size_t* failed = nullptr,
                        Status* first_error = nullptr) const;
  // Ends (SOCK_DESTROY: a RST to the peer, ECONNABORTED to the process)
  // this node's established TCP connections to the addresses of `mask`:
  // left from when it held them before, they are stale once the addresses
  // come back. A client that reconnected to the partner from the same port
  // (the Linux NFS client does) would otherwise meet such a socket with
  // its old sequence numbers, which answers its packets with duplicate
  // ACKs, not the reset a tickle ACK counts on. The ones it could not end
  // (a kernel without CONFIG_INET_DIAG_DESTROY) are returned.
  Result<std::vector<TcpConn>> DropStale(VipMask mask) const;
  VipMask all() const { return vips_.size() >= 64 ? kAllVips : (VipMask{1} << vips_.size()) - 1; }
  // The interface is up and has carrier (IFF_UP and IFF_RUNNING): the
  // clients' LAN is reachable from this node as far as it can tell.
  bool InterfaceUp() const;
  // Which of our addresses the interface has now (address and prefix).
  Result<std::vector<std::string>> Present() const;
  Result<VipMask> PresentMask() const;
  // A digest of the addresses and prefixes, in order (never 0): two nodes
  // index the same list by the same bits only when theirs are equal.
  uint64_t Digest() const;
  const std::string& interface() const { return iface_; }
  const std::vector<Vip>& vips() const { return vips_; }

 private:
  std::string iface_;
  std::vector<Vip> vips_;
};

}  // namespace nasgw::cluster
