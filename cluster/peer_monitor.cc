#include "cluster/peer_monitor.h"

#include <algorithm>

namespace nasgw::cluster {
namespace {

constexpr size_t kPeersMax = 64;  // a cluster of pairs, bounded; the oldest heard is dropped beyond

uint64_t Ms(uint64_t ns) {
  return ns / 1'000'000;
}

}  // namespace

const char* VerdictName(Verdict v) {
  switch (v) {
    case Verdict::kUnknown:
      return "unknown";
    case Verdict::kNoOwner:
      return "no-owner";
    case Verdict::kOwnerAlive:
      return "owner-alive";
    case Verdict::kNetworkSilent:
      return "network-silent";
    case Verdict::kDiskSilent:
      return "disk-silent";
    case Verdict::kOwnerFenced:
      return "owner-fenced";
    case Verdict::kOwnerDead:
      return "owner-dead";
  }
  return "?";
}

PeerMonitor::PeerMonitor(const Uuid& self, MonitorOptions options, uint64_t now_mono_ns)
    : self_(self), options_(options), since_mono_ns_(now_mono_ns) {}

void PeerMonitor::OnHeartbeat(const Member& from, const Heartbeat& h, uint64_t now_mono_ns) {
  if (h.node_id == self_) return;  // our own, delivered back
  if (peers_.size() >= kPeersMax && !peers_.contains(h.node_id)) {
    auto oldest = peers_.begin();
    for (auto it = peers_.begin(); it != peers_.end(); ++it) {
      if (it->second.heard_mono_ns < oldest->second.heard_mono_ns) oldest = it;
    }
    peers_.erase(oldest);
  }
  PeerInfo& p = peers_[h.node_id];
  p.last = h;
  p.from = from;
  p.heard_mono_ns = now_mono_ns;
  p.heartbeats++;
  p.left = false;
}

void PeerMonitor::OnLeft(const Member& m, uint64_t now_mono_ns) {
  for (auto& [id, p] : peers_) {
    if (p.from == m && !p.left) {
      p.left = true;
      p.left_mono_ns = now_mono_ns;
    }
  }
}

void PeerMonitor::OnDisconnected(uint64_t now_mono_ns) {
  for (auto& [id, p] : peers_) {
    if (!p.left) {
      p.left = true;
      p.left_mono_ns = now_mono_ns;
    }
  }
}

std::optional<uint64_t> PeerMonitor::SilentMs(const Uuid& id, uint64_t now_mono_ns) const {
  auto it = peers_.find(id);
  if (it == peers_.end()) return std::nullopt;
  return now_mono_ns > it->second.heard_mono_ns ? Ms(now_mono_ns - it->second.heard_mono_ns) : 0;
}

uint64_t PeerMonitor::NetworkSilentMs(const Uuid& id, uint64_t now_mono_ns) const {
  auto it = peers_.find(id);
  uint64_t since = it == peers_.end() ? since_mono_ns_ : it->second.heard_mono_ns;
  uint64_t silent = now_mono_ns > since ? Ms(now_mono_ns - since) : 0;
  // A member CPG saw leave is silent for at least the bound from then on:
  // membership is the fast path of detection, heartbeats the slow one.
  if (it != peers_.end() && it->second.left) silent = std::max<uint64_t>(silent, options_.network_dead_ms);
  return silent;
}

Judgement PeerMonitor::Judge(const DiskView& disk, uint64_t now_mono_ns) const {
  Judgement j;
  if (!disk.have || disk.read_age_ms > options_.disk_read_fresh_ms) {
    j.verdict = Verdict::kUnknown;
    j.why = disk.have ? "this node has not read the owner record for " + std::to_string(disk.read_age_ms) +
                            " ms (its own SAN path?): no decision without the disk heartbeat"
                      : "the owner record has not been read yet";
    return j;
  }
  if (!disk.held) {
    j.verdict = Verdict::kNoOwner;
    j.why = "the reserve is free (released cleanly)";
    return j;
  }
  if (disk.owner == self_) {
    j.verdict = Verdict::kOwnerAlive;
    j.why = "the record names this node";
    return j;
  }
  j.network_silent_ms = NetworkSilentMs(disk.owner, now_mono_ns);
  const bool net_silent = j.network_silent_ms >= options_.network_dead_ms;
  const bool disk_silent = disk.silent_ms >= disk.lease_ms;
  auto it = peers_.find(disk.owner);
  const bool says_fenced = it != peers_.end() && !net_silent && it->second.last.state == kStateFenced;
  const std::string net =
      "network heartbeat " +
      (net_silent ? "silent for " + std::to_string(j.network_silent_ms) + " ms" : std::string("live"));
  const std::string dsk = "disk heartbeat " + (disk_silent ? "silent for " + std::to_string(disk.silent_ms) +
                                                                 " ms (lease " + std::to_string(disk.lease_ms) + " ms)"
                                                           : std::string("live"));
  if (says_fenced) {
    j.verdict = Verdict::kOwnerFenced;
    j.why = "the owner says it is fenced (" + it->second.last.reason + "); " + dsk;
  } else if (net_silent && disk_silent) {
    j.verdict = Verdict::kOwnerDead;
    j.why = "the owner is silent on both heartbeats: " + net + ", " + dsk;
  } else if (net_silent) {
    j.verdict = Verdict::kNetworkSilent;
    j.why = "interconnect problem, owner alive on the disk: " + net + ", " + dsk;
  } else if (disk_silent) {
    j.verdict = Verdict::kDiskSilent;
    j.why = "disk heartbeat problem, owner alive on the interconnect: " + dsk + ", " + net;
  } else {
    j.verdict = Verdict::kOwnerAlive;
    j.why = "both heartbeats live";
  }
  return j;
}

}  // namespace nasgw::cluster
