#include "daemon/node_metrics.h"

#include <algorithm>
#include <map>

#include "base/mutex.h"

namespace nasgw::daemon {

namespace {
// Latency families by kind: data moves, and everything else.
const char* Kind(proto::Op op) {
  switch (op) {
    case proto::Op::kRead:
      return "read";
    case proto::Op::kWrite:
      return "write";
    case proto::Op::kFsync:
      return "fsync";
    default:
      return "meta";
  }
}
}  // namespace

std::string HeadMetrics::VolumeName(uint32_t volume) {
  auto it = names_.find(volume);
  if (it != names_.end()) return it->second;
  auto vols = node_->ListVolumes();
  if (vols.ok()) {
    for (const auto& v : *vols) names_[v.id] = v.name;
  }
  it = names_.find(volume);
  // An unknown id (a bad handle) is counted under its number: bounded by
  // what the protocol accepts, and rare.
  return it != names_.end() ? it->second : "#" + std::to_string(volume);
}

HeadMetrics::Children& HeadMetrics::For(uint32_t volume, proto::Op op) {
  MutexLock l(mu_);
  auto key = std::make_pair(volume, op);
  auto it = children_.find(key);
  if (it != children_.end()) return it->second;
  const std::string vol = VolumeName(volume);
  Children c;
  c.ops = metrics_->Counter("nasgw_volume_ops_total", "Head requests completed, by volume and operation.",
                            {{"volume", vol}, {"op", proto::OpName(op)}});
  c.errors = metrics_->Counter("nasgw_volume_errors_total", "Head requests that failed, by volume and operation.",
                               {{"volume", vol}, {"op", proto::OpName(op)}});
  if (op == proto::Op::kRead || op == proto::Op::kWrite) {
    c.bytes = metrics_->Counter("nasgw_volume_bytes_total", "Bytes read or written through the heads, by volume.",
                                {{"volume", vol}, {"op", proto::OpName(op)}});
  }
  c.latency = metrics_->Histogram("nasgw_volume_latency_seconds",
                                  "Head request latency in nasgwd (decode to reply sent), by volume and kind.",
                                  {{"volume", vol}, {"kind", Kind(op)}});
  return children_.emplace(key, c).first->second;
}

void HeadMetrics::OnRequest(proto::Op op, uint32_t volume, uint64_t bytes, uint64_t latency_ns, int err) {
  Children& c = For(volume, op);
  c.ops->Inc();
  if (err != 0) c.errors->Inc();
  if (c.bytes != nullptr) c.bytes->Inc(bytes);
  c.latency->Record(latency_ns);
  node_->head_requests++;
}

void AddNodeCollectors(Metrics* metrics, Node* node, const HeadServer* head, const HeadService* service) {
  metrics->AddCollector([node, head, service](Metrics::Sink& s) {
    NodeStatus ns = node->Status();
    const ReserveStatus r = node->GetReserve();
    s.Gauge("nasgw_up", "1 while nasgwd runs.", {{"node", ns.node_name}}, 1);
    s.Gauge("nasgw_uptime_seconds", "Seconds since nasgwd started.", {}, static_cast<double>(ns.uptime_s));
    if (head != nullptr) {
      s.Gauge("nasgw_head_connections", "Open head-protocol connections.", {}, head->connections());
      s.Gauge("nasgw_head_queue_depth", "Head requests waiting for a worker.", {}, head->queued());
      s.Counter("nasgw_head_requests_total", "Head requests completed.", {}, head->requests());
      s.Counter("nasgw_head_protocol_errors_total", "Malformed head frames (each closed its connection).", {},
                head->protocol_errors());
      s.Counter("nasgw_head_connections_refused_total", "Head connections refused at a limit.",
                {{"limit", "max_connections"}}, head->refused_connections());
      s.Counter("nasgw_head_connections_refused_total", "Head connections refused at a limit.",
                {{"limit", "max_connections_per_uid"}}, head->refused_connections_uid());
      s.Counter("nasgw_head_idle_closed_total", "Head connections closed for idleness (head.idle_timeout_ms).", {},
                head->idle_closed());
      // Head forwarding in a pair (docs/cluster.md, "Forwarding").
      s.Gauge("nasgw_head_relays", "Heads' connections relayed to the partner now (it owns the reserve).", {},
              head->relays());
      s.Counter("nasgw_head_relays_total", "Heads' connections relayed to the partner.", {}, head->relayed_total());
      s.Counter("nasgw_head_relay_failures_total", "Relays that could not reach the partner (the head retried).", {},
                head->relay_failures());
      s.Gauge("nasgw_head_forwarded_connections", "Connections the partner relays to this node now.", {},
              head->forwarded_in());
      s.Gauge("nasgw_head_request_buffer_bytes", "Request buffers held: payloads read and READ replies owed.", {},
              static_cast<double>(head->request_bytes()));
      s.Gauge("nasgw_head_request_buffer_capacity_bytes", "The request buffers' share of the memory budget.", {},
              static_cast<double>(head->request_bytes_capacity()));
      s.Counter("nasgw_head_request_buffer_waits_total",
                "Frames whose reader waited for request buffers (the budget's share was in use).", {},
                head->request_waits());
    }
    if (service != nullptr) {
      s.Gauge("nasgw_head_locks", "Byte-range lock ranges held by the heads' sessions.", {},
              static_cast<double>(service->locks().size()));
      // The write-back cache of the domain's opening (counters start again
      // with each opening).
      const cache::DataCacheStats c = service->CacheStats();
      s.Gauge("nasgw_cache_dirty_bytes", "Data answered to clients and not yet on the SAN (dirty and being flushed).",
              {}, static_cast<double>(c.dirty_bytes));
      s.Gauge("nasgw_cache_dirty_files", "Files with dirty data in the write-back cache.", {},
              static_cast<double>(c.dirty_files));
      s.Counter("nasgw_cache_writes_total", "Writes through the cache, by how they were answered.",
                {{"answer", "cached"}}, c.writes_cached);
      s.Counter("nasgw_cache_writes_total", "Writes through the cache, by how they were answered.",
                {{"answer", "stable"}}, c.writes_stable);
      s.Counter("nasgw_cache_writes_total", "Writes through the cache, by how they were answered.",
                {{"answer", "logged"}}, c.writes_logged);
      s.Counter("nasgw_cache_commits_total", "COMMITs and fsyncs, by how the file's dirty data was made durable.",
                {{"answer", "logged"}}, c.commits_logged);
      s.Counter("nasgw_cache_commits_total", "COMMITs and fsyncs, by how the file's dirty data was made durable.",
                {{"answer", "flushed"}}, c.commits_flushed);
      s.Counter("nasgw_cache_log_slow_writes_total",
                "Stable writes put in place rather than logged: the intent log's records were slow (array link busy).",
                {}, c.writes_log_slow);
      s.Counter("nasgw_cache_write_bytes_total", "Bytes clients wrote through the cache.", {}, c.bytes_written);
      s.Counter("nasgw_cache_read_dirty_bytes_total", "Bytes reads took from dirty data.", {}, c.read_bytes_dirty);
      s.Counter("nasgw_cache_flushes_total", "Flush transactions committed.", {}, c.flushes);
      s.Counter("nasgw_cache_flush_bytes_total", "Bytes the flushes carried.", {}, c.flush_bytes);
      s.Counter("nasgw_cache_flush_microseconds_total", "Time spent in flush transactions.", {},
                c.flush_nanos_total / 1000);
      s.Counter("nasgw_cache_flush_errors_total", "Flushes that failed (their data stays dirty).", {}, c.flush_errors);
      s.Counter("nasgw_cache_dropped_bytes_total", "Dirty bytes of files deleted before their flush.", {},
                c.flush_dropped);
      s.Counter("nasgw_cache_stalls_total", "Writers that waited for the flusher (the cache was full).", {}, c.stalls);
      s.Counter("nasgw_cache_stall_timeouts_total", "Writers refused after waiting cache.stall_timeout_ms.", {},
                c.stall_timeouts);
      s.Gauge("nasgw_cache_clean_bytes", "Clean file blocks held (the read cache).", {},
              static_cast<double>(c.read.bytes));
      s.Gauge("nasgw_cache_clean_capacity_bytes", "What the clean blocks may hold now: the budget less the dirty data.",
              {}, static_cast<double>(c.read.capacity));
      s.Counter("nasgw_cache_read_bytes_total",
                "Bytes reads found in the read cache (hit) or fetched from the SAN (miss).", {{"result", "hit"}},
                c.read.hit_bytes);
      s.Counter("nasgw_cache_read_bytes_total",
                "Bytes reads found in the read cache (hit) or fetched from the SAN (miss).", {{"result", "miss"}},
                c.read.miss_bytes);
      s.Counter("nasgw_cache_read_ahead_bytes_total", "Bytes read ahead into the cache.", {}, c.read.prefetched_bytes);
      s.Counter("nasgw_cache_read_ahead_used_bytes_total", "Read-ahead bytes a read then found.", {},
                c.read.prefetch_hit_bytes);
      s.Counter("nasgw_cache_evicted_bytes_total", "Clean bytes evicted from the read cache.", {},
                c.read.evicted_bytes);
      s.Counter("nasgw_cache_no_space_total", "Writes refused with ENOSPC: no space to reserve for their flush.", {},
                c.no_space);
      // Write amplification: every byte written to the array (data,
      // intent log, metadata) per byte clients wrote.
      const double array = static_cast<double>(ArrayWriteBytes(r));
      s.Gauge("nasgw_write_amplification",
              "Bytes written to the array (data, intent log, metadata) per byte clients wrote; 0 before any write.", {},
              c.bytes_written == 0 ? 0.0 : array / static_cast<double>(c.bytes_written));
    }
    const fs::MetaCache& mc = node->meta_cache();
    s.Gauge("nasgw_meta_cache_bytes", "Metadata held in memory: RocksDB's blocks and memtables, every domain.", {},
            static_cast<double>(mc.usage()));
    s.Gauge("nasgw_meta_cache_capacity_bytes", "The metadata cache's share of the memory budget.", {},
            static_cast<double>(mc.capacity()));
    s.Gauge("nasgw_meta_memtable_bytes", "The memtables' part of the metadata cache.", {},
            static_cast<double>(mc.memtable_bytes()));
    s.Counter("nasgw_meta_cache_reads_total", "Metadata block reads, by whether the cache answered them.",
              {{"result", "hit"}}, mc.hits());
    s.Counter("nasgw_meta_cache_reads_total", "Metadata block reads, by whether the cache answered them.",
              {{"result", "miss"}}, mc.misses());
    s.Gauge("nasgw_memory_budget_bytes", "The node's memory budget (cache.memory_mib).", {},
            static_cast<double>(uint64_t{node->config().cache_memory_mib} << 20));
    for (const char* st : {"unformatted", "online", "failed", "standby", "fenced"}) {
      s.Gauge("nasgw_reserve_state", "1 for the reserve's current state.", {{"state", st}},
              std::string_view(ReserveStateName(r.state)) == st ? 1 : 0);
    }
    s.Gauge("nasgw_reserve_owned", "1 while this node owns the reserve (reservation and lease held).", {},
            r.owned_here ? 1 : 0);
    s.Counter("nasgw_reserve_lease_renewals_total", "Lease renewals of the reserve's owner record by this node.", {},
              r.renewals);
    s.Counter("nasgw_reserve_fenced_total", "Times this node lost the reserve (preempted, taken over, lease lost).", {},
              r.fenced_total);
    s.Gauge("nasgw_reserve_holder_silent_seconds",
            "Standby or fenced: seconds since the holder last renewed its lease, on this node's clock.", {},
            static_cast<double>(r.holder_silent_ms) / 1e3);
    // The controller pair ([cluster]; docs/cluster.md): every family is
    // emitted with [cluster] disabled too (0s), so dashboards need no
    // special case; the peer series only for peers heard.
    const ClusterStatus cl = node->GetCluster();
    s.Gauge("nasgw_cluster_enabled", "1 when [cluster] is enabled (a controller pair), 0 for a single node.", {},
            cl.enabled ? 1 : 0);
    s.Gauge("nasgw_cluster_connected", "1 while this node is joined to the interconnect's group.", {},
            cl.connected ? 1 : 0);
    s.Gauge("nasgw_cluster_quorate", "1 while the interconnect says the group is quorate.", {}, cl.quorate ? 1 : 0);
    s.Gauge("nasgw_cluster_degraded",
            "1 while the pair runs degraded: the owner does not hear its partner, or a standby hears one of the "
            "owner's heartbeats no more.",
            {}, cl.degraded ? 1 : 0);
    s.Gauge("nasgw_cluster_mirror_streaming",
            "Owner: 1 while its intent log streams to the partner's memory and writes are acknowledged once the "
            "partner holds them (0: from the SAN intent log).",
            {}, cl.mirror_streaming ? 1 : 0);
    s.Counter("nasgw_cluster_mirror_acks_total",
              "Owner: changes answered once the partner held them, before their log record reached the SAN (this "
              "opening of the domain).",
              {}, cl.mirror_acks);
    s.Gauge("nasgw_cluster_mirror_held_bytes",
            "Standby: bytes of the owner's intent log held in this node's memory, not yet reported on the SAN.", {},
            static_cast<double>(cl.mirror_held_bytes));
    s.Counter("nasgw_cluster_takeovers_total", "Automatic takeovers of the reserve by this node since it started.", {},
              cl.takeovers);
    s.Gauge("nasgw_cluster_partner_client_connections",
            "Client TCP connections to the partner's client-access addresses, as it last listed them.", {},
            static_cast<double>(cl.partner_connections));
    s.Counter("nasgw_cluster_tickle_acks_total",
              "Tickle ACKs sent to the partner's clients of addresses this node took (each then reconnects at once).",
              {}, cl.tickles_sent);
    if (cl.partner_nfs_clients >= 0) {
      s.Gauge("nasgw_cluster_partner_nfs_clients",
              "The partner's NFSv4 clients with state (its ganesha's records) that may reclaim it here after a "
              "takeover.",
              {}, static_cast<double>(cl.partner_nfs_clients));
      s.Counter("nasgw_cluster_takeover_graces_total",
                "Grace periods this node started in its ganesha for the partner's NFSv4 clients to reclaim.", {},
                cl.takeover_graces);
    }
    if (cl.partner_nlm_clients >= 0) {
      s.Gauge("nasgw_cluster_partner_nlm_clients",
              "The partner's NLM clients (its rpc.statd's) told to reclaim their locks here after a takeover.", {},
              static_cast<double>(cl.partner_nlm_clients));
      s.Counter("nasgw_cluster_nlm_notified_total",
                "SM_NOTIFYs the partner's NLM clients answered after takeovers by this node.", {}, cl.nlm_notified);
      s.Counter("nasgw_cluster_nlm_unreachable_total",
                "SM_NOTIFYs to the partner's NLM clients unanswered by the deadline, or to names that are no "
                "address.",
                {}, cl.nlm_unreachable);
    }
    std::map<std::string, uint64_t> heard;  // by peer name: the freshest, should a name be heard under two ids
    for (const auto& p : cl.peers) {
      const std::string name = p.name.empty() ? p.node_id : p.name;
      auto [it, fresh] = heard.emplace(name, p.heard_ms_ago);
      if (!fresh) it->second = std::min(it->second, p.heard_ms_ago);
    }
    for (const auto& [name, ms] : heard) {
      s.Gauge("nasgw_cluster_peer_heard_seconds", "Seconds since the peer's last heartbeat on the interconnect.",
              {{"peer", name}}, static_cast<double>(ms) / 1e3);
    }
    s.Gauge("nasgw_cluster_owner_network_silent_seconds",
            "Standby: seconds since the owner's last interconnect heartbeat.", {},
            static_cast<double>(cl.network_silent_ms) / 1e3);
    s.Gauge("nasgw_cluster_owner_disk_silent_seconds",
            "Standby: seconds the owner's record on the LUNs (its disk heartbeat) has not changed.", {},
            static_cast<double>(cl.disk_silent_ms) / 1e3);
    s.Gauge("nasgw_cluster_last_takeover_seconds",
            "How long this node's last automatic takeover took, detection to its last step; 0: none.", {},
            cl.last_takeover.empty() ? 0.0 : static_cast<double>(cl.last_takeover.back().after_ms) / 1e3);
    s.Gauge("nasgw_reserve_capacity_bytes", "Data capacity of the reserve.", {}, static_cast<double>(r.capacity_bytes));
    s.Gauge("nasgw_reserve_free_bytes", "Free data space of the reserve.", {}, static_cast<double>(r.free_bytes));
    for (const auto& l : r.luns) {
      const Labels lun = {{"lun", std::to_string(l.index)}, {"serial", l.serial}};
      s.Gauge("nasgw_lun_healthy", "1 when at least one path to the LUN is up.", lun, l.healthy ? 1 : 0);
      s.Gauge("nasgw_lun_paths_up", "Paths to the LUN that are up.", lun, l.paths_up);
      s.Gauge("nasgw_lun_size_bytes", "Size of the LUN.", lun, static_cast<double>(l.size_bytes));
      s.Gauge("nasgw_lun_inflight", "Commands on the wire to the LUN.", lun, l.stats.in_flight);
      s.Gauge("nasgw_lun_queued", "Commands admitted but waiting for a slot or a path.", lun, l.stats.queued);
      s.Gauge("nasgw_lun_bulk_window_bytes",
              "File data (bulk) bytes the LUN may have on the wire now (reserve.bulk_target_ms); -1: no window.", lun,
              l.stats.bulk_window_bytes == UINT64_MAX ? -1.0 : static_cast<double>(l.stats.bulk_window_bytes));
      s.Gauge("nasgw_lun_bulk_inflight_bytes", "File data (bulk) bytes on the wire to the LUN.", lun,
              static_cast<double>(l.stats.bulk_in_flight_bytes));
      s.Gauge("nasgw_lun_bulk_queued", "File data (bulk) commands waiting for the LUN's bulk window.", lun,
              l.stats.bulk_queued);
      s.Counter("nasgw_lun_retries_total", "Commands re-issued (transient errors, path loss).", lun, l.stats.retries);
      s.Counter("nasgw_lun_timeouts_total", "Commands that timed out.", lun, l.stats.timeouts);
      const std::pair<const char*, const block::OpStats*> ops[] = {
          {"read", &l.stats.read}, {"write", &l.stats.write}, {"other", &l.stats.other}};
      for (const auto& [name, st] : ops) {
        Labels lo = lun;
        lo.emplace_back("op", name);
        s.Counter("nasgw_lun_ops_total", "Commands completed on the LUN.", lo, st->ops);
        s.Counter("nasgw_lun_bytes_total", "Bytes moved to or from the LUN.", lo, st->bytes);
        s.Counter("nasgw_lun_errors_total", "Commands that failed on the LUN.", lo, st->errors);
        for (const auto& [q, v] : {std::pair<const char*, double>{"0.5", 0.5}, {"0.99", 0.99}}) {
          Labels lq = lo;
          lq.emplace_back("quantile", q);
          s.Gauge("nasgw_lun_latency_seconds", "LUN command latency quantiles since start.", lq,
                  static_cast<double>(st->latency_ns.Percentile(v)) / 1e9);
        }
      }
    }
    if (r.state == ReserveState::kOnline) {
      auto vols = node->ListVolumes();
      if (vols.ok()) {
        for (const auto& v : *vols) {
          s.Gauge("nasgw_volume_used_bytes", "Bytes of file data in the volume.", {{"volume", v.name}},
                  static_cast<double>(v.bytes));
          s.Gauge("nasgw_volume_files", "Files and directories in the volume.", {{"volume", v.name}},
                  static_cast<double>(v.files));
          s.Gauge("nasgw_volume_snapshots", "Snapshots of the volume.", {{"volume", v.name}},
                  static_cast<double>(v.snapshots));
          s.Gauge("nasgw_volume_snapshot_bytes",
                  "Data bytes only the volume's snapshots hold (what deleting them all would give back).",
                  {{"volume", v.name}}, static_cast<double>(v.snapshot_bytes));
        }
      }
      // Each domain has its own intent log: labelled by domain when the
      // reserve is split into several.
      uint64_t verifier = 0;
      auto domains = node->domains(&verifier, nullptr);
      for (size_t id = 0; domains && id < domains->size(); id++) {
        const std::shared_ptr<fs::Domain>& d = (*domains)[id];
        if (!d) continue;  // the partner's (active/active): its node says it
        const Labels dl = domains->size() == 1 ? Labels{} : Labels{{"domain", std::to_string(id)}};
        auto with = [&dl](Labels l) {
          l.insert(l.begin(), dl.begin(), dl.end());
          return l;
        };
        const fs::IntentLogStats ls = d->LogStats();
        s.Gauge("nasgw_log_capacity_bytes", "Size of the intent log's ring.", dl,
                static_cast<double>(ls.capacity_bytes));
        s.Gauge("nasgw_log_used_bytes", "Intent log bytes from the checkpoint to the head, plus reserved.", dl,
                static_cast<double>(ls.used_bytes + ls.reserved_bytes));
        s.Counter("nasgw_log_records_total", "Intent log records written (one array write each: a commit group).", dl,
                  ls.records);
        s.Counter("nasgw_log_entries_total", "Changes written to the intent log.", dl, ls.entries);
        s.Counter("nasgw_log_bytes_total", "Bytes written to the intent log.", dl, ls.bytes_written);
        s.Counter("nasgw_log_checkpoints_total", "Intent log checkpoints (transaction groups synced).", dl,
                  ls.checkpoints);
        s.Counter("nasgw_log_reserve_waits_total", "Changes that waited for intent log space.", dl, ls.reserve_waits);
        s.Gauge("nasgw_log_group_entries_mean", "Changes per intent log record (group commit size), since start.", dl,
                ls.group_entries.Mean());
        for (const auto& [q, v] : {std::pair<const char*, double>{"0.5", 0.5}, {"0.99", 0.99}}) {
          s.Gauge("nasgw_log_write_latency_seconds", "Intent log record write latency quantiles since start.",
                  with({{"quantile", q}}), static_cast<double>(ls.write_ns.Percentile(v)) / 1e9);
        }
        s.Gauge("nasgw_log_write_recent_seconds",
                "Intent log record write time lately (moving average over about four records).", dl,
                static_cast<double>(ls.recent_write_ns) / 1e9);
        s.Counter("nasgw_txg_total", "Transaction groups synced (the domain record's counter).", dl, d->txg());
      }
    }
  });
}

}  // namespace nasgw::daemon
