#pragma once

// Decides, from the two independent heartbeats, what a standby node may do
// about the node that owns its reserve (brief, decision 6; docs/cluster.md):
//
//   network  the owner's heartbeat messages over the interconnect (Corosync
//            CPG), and CPG's word when the owner's process or node left;
//   disk     the owner record the owner renews on the reserve's LUNs, as this
//            node reads it (fs::OwnerWatch: unchanged for how long, by our
//            own monotonic clock).
//
// The owner is declared dead only when both are silent past their bounds;
// one silent heartbeat is reported and never acted on alone. An owner that
// says over the network that it is fenced (it lost the reservation or its
// lease: it writes nothing more) is taken over at once: waiting out its
// disk lease would only lengthen the outage.
//
// Pure logic over times given by the caller: unit-tested with a fake clock.

#include <cstdint>
#include <map>
#include <optional>
#include <string>

#include "base/uuid.h"
#include "cluster/interconnect.h"
#include "cluster/message.h"

namespace nasgw::cluster {

// Heartbeat.state: nasgwd's ReserveState numbers.
constexpr uint8_t kStateOnline = 1;
constexpr uint8_t kStateStandby = 3;
constexpr uint8_t kStateFenced = 4;

struct MonitorOptions {
  // The owner's network heartbeat is silent once nothing was heard from it
  // for this long, or once CPG says it left.
  uint32_t network_dead_ms = 3000;
  // The disk view counts only while this node reads the owner record: a
  // read older than this (our own SAN path is down) makes the verdict
  // kUnknown, never kOwnerDead.
  uint32_t disk_read_fresh_ms = 2000;
};

// The owner record as this node last read it.
struct DiskView {
  bool have = false;         // a read has succeeded since standby began
  bool held = false;         // the record names a holder
  Uuid owner;                // who
  uint64_t silent_ms = 0;    // unchanged this long by our clock
  uint32_t lease_ms = 0;     // the holder's lease
  uint64_t read_age_ms = 0;  // since our last successful read
};

enum class Verdict {
  kUnknown,        // we cannot read the disk heartbeat: never act
  kNoOwner,        // the record is free (a clean release): take it normally
  kOwnerAlive,     // both heartbeats live
  kNetworkSilent,  // interconnect silent, disk alive: report (a cut link), do nothing
  kDiskSilent,     // disk silent, interconnect alive: report; the owner fences itself
  kOwnerFenced,    // the owner says it is fenced: take over (preempting its key)
  kOwnerDead,      // both silent past their bounds: take over (preempting its key)
};
const char* VerdictName(Verdict v);
inline bool ShouldTakeOver(Verdict v) {
  return v == Verdict::kOwnerFenced || v == Verdict::kOwnerDead;
}

struct PeerInfo {
  Heartbeat last;  // the newest heartbeat heard
  Member from;     // where it came from on the ring
  uint64_t heard_mono_ns = 0;
  uint64_t heartbeats = 0;
  bool left = false;  // CPG said it left after its last heartbeat
  uint64_t left_mono_ns = 0;
};

struct Judgement {
  Verdict verdict = Verdict::kUnknown;
  std::string why;                 // one sentence for logs and `nasgw cluster status`
  uint64_t network_silent_ms = 0;  // since the owner's last heartbeat (or CPG's word that it left)
};

class PeerMonitor {
 public:
  PeerMonitor(const Uuid& self, MonitorOptions options, uint64_t now_mono_ns);

  void OnHeartbeat(const Member& from, const Heartbeat& h, uint64_t now_mono_ns);
  // CPG's membership: a peer heard from a member that left is silent now.
  void OnLeft(const Member& m, uint64_t now_mono_ns);
  // The interconnect itself went down or came up: nothing heard before
  // counts as fresh once it is down.
  void OnDisconnected(uint64_t now_mono_ns);

  Judgement Judge(const DiskView& disk, uint64_t now_mono_ns) const;

  const std::map<Uuid, PeerInfo>& peers() const { return peers_; }
  // Heard within network_dead_ms and not seen leaving since.
  bool Heard(const Uuid& id, uint64_t now_mono_ns) const {
    return NetworkSilentMs(id, now_mono_ns) < options_.network_dead_ms;
  }
  // How long since we last heard `id` (nullopt: never).
  std::optional<uint64_t> SilentMs(const Uuid& id, uint64_t now_mono_ns) const;

 private:
  uint64_t NetworkSilentMs(const Uuid& id, uint64_t now_mono_ns) const;

  Uuid self_;
  MonitorOptions options_;
  uint64_t since_mono_ns_;  // silence is counted from here for a peer never heard
  std::map<Uuid, PeerInfo> peers_;
};

}  // namespace nasgw::cluster
