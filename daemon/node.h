// Node: nasgwd's composition root. It owns the reserve's LUNs, the reserve,
// and its domain, and is what the head server, the admin service and the
// metrics endpoint all act on.
//
// A node starts even when its LUNs carry no reserve yet (state kUnformatted:
// the admin formats it) or a reserve it cannot open (state kFailed, with the
// reason: the admin can inspect it, or format over it with force). It does
// not start when a configured LUN cannot be reached at all: that is a
// configuration error.
//
// Thread-safety: all methods may be called concurrently. Format and AddLun
// are serialised with each other; the domain pointer handed to heads stays
// valid until Shutdown().
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <string>
#include <vector>

#include "base/status.h"
#include "block/block_device.h"
#include "daemon/config.h"
#include "fs/domain.h"
#include "fs/reserve.h"

namespace nasgw::daemon {

enum class ReserveState { kUnformatted, kOnline, kFailed };
const char* ReserveStateName(ReserveState s);

struct LunStatus {
  uint32_t index = 0;          // member index in the reserve (order of AddLun)
  std::string url;             // without the CHAP secret
  std::string serial;          // SCSI unit serial / identity
  uint64_t size_bytes = 0;
  uint32_t ag_count = 0;       // allocation groups on this LUN
  bool healthy = false;        // at least one path up
  uint32_t paths_up = 0, paths_total = 0;
  block::BlockStats stats;
};

struct ReserveStatus {
  ReserveState state = ReserveState::kUnformatted;
  std::string reason;          // why kFailed / kUnformatted
  std::string name;
  std::string uuid;
  uint64_t ag_bytes = 0;
  uint64_t capacity_bytes = 0;  // data allocation groups, all LUNs
  uint64_t free_bytes = 0;
  uint64_t files = 0;
  uint64_t generation = 0;
  std::vector<LunStatus> luns;
};

struct NodeStatus {
  std::string node_name;
  std::string version;
  int64_t started_unix = 0;
  uint64_t uptime_s = 0;
  ReserveState reserve_state = ReserveState::kUnformatted;
  uint32_t head_connections = 0;
  uint64_t head_requests = 0;
};

// Opens one LUN by URL (the real one: IscsiDevice). Tests inject MemDevices.
using LunOpener = std::function<Result<std::shared_ptr<block::BlockDevice>>(const std::string& url)>;

class Node {
 public:
  // Opens every configured LUN (fails naming the first unreachable one), then
  // the reserve and its domain if there is one.
  static Result<std::unique_ptr<Node>> Start(const Config& config, LunOpener opener = {});
  ~Node();

  const Config& config() const { return config_; }
  NodeStatus Status() const;

  // ---- reserve
  ReserveStatus GetReserve() const;
  // Labels the configured LUNs as a new reserve and creates its domain.
  // FailedPrecondition when online already (unless force) ; with force, any
  // LUN content is overwritten.
  nasgw::Status FormatReserve(const std::string& name, uint64_t ag_bytes, bool force);
  // Opens the LUN at `url`, adds it to the reserve and grows the domain onto
  // it. Remembered in <state_dir>/luns so the next start opens it too.
  Result<LunStatus> AddLun(const std::string& url, bool force);

  // ---- volumes (Unavailable unless the reserve is online)
  Result<std::vector<fs::VolumeInfo>> ListVolumes();
  Result<fs::VolumeInfo> GetVolume(const std::string& name);
  Result<fs::VolumeInfo> CreateVolume(const std::string& name, uint32_t record_bytes);
  Result<fs::VolumeInfo> SetVolumeRecordBytes(const std::string& name, uint32_t record_bytes);
  nasgw::Status DeleteVolume(const std::string& name, bool force);

  // The domain heads act on; null unless online. Shared so a head request in
  // flight keeps it alive through a concurrent Shutdown.
  std::shared_ptr<fs::Domain> domain() const;

  // Flushes and closes the domain and the reserve. Idempotent.
  void Shutdown();

  // Head server statistics feed NodeStatus.
  std::atomic<uint32_t> head_connections{0};
  std::atomic<uint64_t> head_requests{0};

 private:
  Node() = default;
  nasgw::Status OpenReserveLocked();

  Config config_;
  LunOpener opener_;
  int64_t started_unix_ = 0;
  mutable std::mutex admin_mu_;  // Format, AddLun; taken before mu_
  mutable std::shared_mutex mu_;
  std::vector<std::string> urls_;                             // GUARDED_BY(mu_), configured + added
  std::vector<std::shared_ptr<block::BlockDevice>> devices_;  // GUARDED_BY(mu_), same order as urls_
  std::shared_ptr<fs::Reserve> reserve_;                      // GUARDED_BY(mu_)
  std::shared_ptr<fs::Domain> domain_;                        // GUARDED_BY(mu_)
  ReserveState state_ = ReserveState::kUnformatted;           // GUARDED_BY(mu_)
  std::string reason_;                                        // GUARDED_BY(mu_)
};

}  // namespace nasgw::daemon
