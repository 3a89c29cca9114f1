// What nasgwd exports to Prometheus: per-volume head operations (counted as
// they complete), and at scrape time the node's health, the reserve's space
// and every LUN's I/O statistics. docs/admin.md lists the families.
#pragma once

#include <map>
#include <string>
#include <utility>

#include "base/mutex.h"
#include "daemon/head_server.h"
#include "daemon/metrics.h"
#include "daemon/node.h"

namespace nasgw::daemon {

class HeadMetrics final : public HeadObserver {
 public:
  HeadMetrics(Metrics* metrics, Node* node) : metrics_(metrics), node_(node) {}
  void OnRequest(proto::Op op, uint32_t volume, uint64_t bytes, uint64_t latency_ns, int err) override;
  void OnConnections(uint32_t open) override { node_->head_connections = open; }

 private:
  struct Children {
    Counter* ops = nullptr;
    Counter* errors = nullptr;
    Counter* bytes = nullptr;  // null for ops that move no data
    LatencyHistogram* latency = nullptr;
  };
  Children& For(uint32_t volume, proto::Op op);
  std::string VolumeName(uint32_t volume) REQUIRES(mu_);

  Metrics* metrics_;
  Node* node_;
  Mutex mu_;
  std::map<std::pair<uint32_t, proto::Op>, Children> children_ GUARDED_BY(mu_);
  std::map<uint32_t, std::string> names_ GUARDED_BY(mu_);
};

// Scrape-time gauges and counters of the node, its reserve, volumes and LUNs
// (and the heads' byte-range locks, with `service`).
void AddNodeCollectors(Metrics* metrics, Node* node, const HeadServer* head, const HeadService* service = nullptr);

}  // namespace nasgw::daemon
