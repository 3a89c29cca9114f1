#pragma once

// What nasgwd nodes say to each other over the interconnect's membership
// ring (Corosync CPG): small control messages, never bulk data (the cache
// mirror's stream is nasgwd's own connection). Format: docs/cluster.md.
//
// Every message starts with a version byte and a kind byte; a decoder
// ignores bytes after the fields it knows and kinds it does not know, so a
// newer node's messages (more fields, new kinds) do not confuse an older one
// during a rolling upgrade.

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/coding.h"
#include "base/uuid.h"
#include "cluster/vip.h"
#include "fs/export.h"
#include "fs/share.h"

namespace nasgw::cluster {

constexpr uint8_t kMessageVersion = 1;
constexpr size_t kMessageBytesMax = 4096;  // far below CPG's limits; a control message, not data

enum class MessageKind : uint8_t {
  kHeartbeat = 1,    // every heartbeat interval: who I am and what I serve
  kGiveBack = 2,     // a standby asks the owner to give the reserve back to it (`nasgw cluster takeover`)
  kCatalog = 3,      // the owner's NFS exports and SMB shares, for a partner that forwards its heads to it
  kConnections = 4,  // the client TCP connections to the addresses a node holds, for tickle ACKs after a move
  kRecovery = 5,     // the NFSv4 client records and NLM clients of a node's ganesha, for reclaims after a move
};

// The NFSv4 client records of a node's ganesha (its fs recovery backend's
// directory, daemon/nfs_recovery.h): paths relative to it, a directory's
// with a trailing '/'. The partner keeps them, and after it takes the
// node's addresses its ganesha lets those clients reclaim in a grace
// period. Sent when they change and every few heartbeats; at most
// kRecoveryEntriesMax paths, kRecoveryBytesMax in all (more are left out:
// those clients cannot reclaim).
//
// With them, the NLM (NFSv3 lock) clients its rpc.statd monitors: the names
// of the records in its sm/ directory, the clients' addresses as ganesha
// gave them (daemon/nlm_notify.h). The node that takes the addresses sends
// each an SM_NOTIFY naming them, and they reclaim their locks. At most
// kNlmClientsMax, within the same kRecoveryBytesMax. (Appended to the
// records: a message without the list decodes as one with none.)
constexpr size_t kRecoveryEntriesMax = 4096;
constexpr size_t kNlmClientsMax = 4096;
constexpr size_t kRecoveryBytesMax = 256u << 10;
struct Recovery {
  Uuid from;
  std::vector<std::string> entries;
  std::vector<std::string> nlm_clients;
  bool operator==(const Recovery&) const = default;
};
std::string EncodeRecovery(const Recovery& r);
// nullopt for another kind, a damaged message, or an entry that is not a
// plain relative path (empty, absolute, '.', '..', a NUL).
std::optional<Recovery> DecodeRecovery(std::string_view bytes);
// Whether `path` may name a record under the recovery directory: relative,
// components of 1..255 bytes other than "." and "..", no NUL, at most 4095
// bytes, a trailing '/' for a directory.
bool RecoveryPathOk(std::string_view path);
// Whether `name` may name an NLM client (a record of rpc.statd's sm/
// directory): 1..255 bytes, no '/', no NUL, no control character, not "."
// or "..".
bool NlmClientOk(std::string_view name);

// The established client connections to the virtual IPs a node holds
// (cluster::VipSet::Connections), sent when they change and every few
// heartbeats. The node that takes an address over sends each of its
// clients a tickle ACK (VipSet::Tickle), so that they reconnect at once.
// At most kTcpConnsMax connections; IPv4 today, a family byte per entry
// for IPv6 later.
struct Connections {
  Uuid from;
  std::vector<TcpConn> conns;
  bool operator==(const Connections&) const = default;
};
std::string EncodeConnections(const Connections& c);
std::optional<Connections> DecodeConnections(std::string_view bytes);

// The exports and shares of the reserve's domain, as its owner read them:
// the partner publishes them to its own ganesha and smbd, whose calls it
// relays to the owner (head forwarding). Sent when they change and every
// few heartbeats. Larger than other messages, still far below CPG's limit.
constexpr size_t kCatalogBytesMax = 256u << 10;
struct Catalog {
  Uuid from;  // the owner's node id
  Uuid reserve;
  std::vector<fs::Export> exports;
  std::vector<fs::Share> shares;
  bool operator==(const Catalog&) const = default;
};
// Empty when the encoding would pass kCatalogBytesMax.
std::string EncodeCatalog(const Catalog& c);
std::optional<Catalog> DecodeCatalog(std::string_view bytes);

// What a node says about itself in each heartbeat. `state` is nasgwd's
// ReserveState as a number (0 unformatted, 1 online, 2 failed, 3 standby,
// 4 fenced): the wire keeps its own numbering, not a C++ enum's.
struct Heartbeat {
  Uuid node_id;  // the node's persistent id (<state_dir>/node-id)
  Uuid reserve;  // the reserve it serves or stands by for (nil: none yet)
  uint8_t state = 0;
  uint64_t seq = 0;          // bumps per heartbeat from one process
  uint64_t incarnation = 0;  // random per process start
  std::string name;          // node_name, for people (<= 255 bytes)
  std::string reason;        // why fenced or failed (<= 1024 bytes)
  bool lan_up = true;        // its clients' LAN interface has carrier (true where it has no VIPs)
  // Virtual IPs by index in [cluster] vips (docs/cluster.md): which the
  // owner gives the partner to hold (the owner's heartbeat only), and which
  // the node holds now.
  uint64_t vips_assigned = 0;
  uint64_t vips_held = 0;
  // It relays its heads to the owner while it does not serve ([cluster]
  // forward_peer set): only such a partner is given addresses to hold.
  bool forwards = false;
  // A digest of the node's [cluster] vips (VipSet::Digest): the masks above
  // index that list, so the nodes spread addresses only when theirs agree.
  // 0: none configured, or a node from before this field.
  uint64_t vips_digest = 0;
  // It takes a reserve over by itself ([cluster] auto_takeover): a free
  // reserve (a giveback), a dead owner. The owner gives the reserve only to
  // a partner that will take it, unless that partner asked for it. True
  // for a node from before this field (as they all did).
  bool takes_over = true;
  bool operator==(const Heartbeat&) const = default;
};

// "Give reserve `reserve` to `to`", from `from`: only the node that owns it
// acts, and only for a partner it hears standing by.
struct GiveBackRequest {
  Uuid from;
  Uuid to;  // the owner asked
  Uuid reserve;
  bool operator==(const GiveBackRequest&) const = default;
};

std::string EncodeGiveBack(const GiveBackRequest& r);
std::optional<GiveBackRequest> DecodeGiveBack(std::string_view bytes);

std::string EncodeHeartbeat(const Heartbeat& h);
// nullopt: not a heartbeat this version understands (wrong version, another
// kind, truncated); the caller counts it and carries on.
std::optional<Heartbeat> DecodeHeartbeat(std::string_view bytes);

// A Uuid as 16 raw bytes (every cluster message and the cache mirror's
// hello). GetUuid past the end: Decoder::ok() false.
void PutUuid(Encoder& e, const Uuid& u);
Uuid GetUuid(Decoder& d);

}  // namespace nasgw::cluster
