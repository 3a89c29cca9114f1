// IscsiDevice: a BlockDevice over libiscsi's async API.
//
// One I/O thread per device runs an event loop over the libiscsi contexts of
// all its paths (iscsi_get_fd / iscsi_which_events / iscsi_service) plus an
// eventfd for submissions from other threads. libiscsi contexts are touched
// only by that thread.
//
// Paths: every URL in IscsiOptions::urls is one path (portal) to the same
// LUN; Open() proves it by comparing the LUN's device identification (VPD
// 0x83) on each path and refuses a path that reaches a different LUN.
// Commands are spread round-robin over live paths, up to queue_depth in
// flight over all of them. Sync commands go first; bulk ones (file data)
// within the LUN's bulk window (block/bulk_window.h) and three quarters of
// the queue depth, so metadata and intent-log commands never queue long
// behind a flood of data.
//
// Failures: a path whose connection drops, or that has a command outstanding
// for longer than path_timeout_ms, is torn down; its idempotent commands are
// re-issued on another live path, or on the same path once it has reconnected
// (exponential backoff with jitter). Commands that are not idempotent
// (COMPARE AND WRITE, PERSISTENT RESERVE OUT) fail with Unavailable
// ("outcome unknown") instead. Transient SCSI conditions (UNIT ATTENTION,
// BUSY, NOT READY becoming ready) are retried; RESERVATION CONFLICT is
// final (Fenced). No request outlives io_timeout_ms: it then fails with
// TimedOut. See docs/block.md.
//
// Persistent reservations: each path is its own I_T nexus with an ISID kept
// across reconnects. A successful REGISTER is applied to every path; a path
// that (re)connects registers again only if READ KEYS still shows our key,
// so a node whose key was preempted never resurrects its registration.
//
// Destruction drains: it stops admitting, waits for every admitted request
// to complete (bounded by io_timeout_ms), then disconnects.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "base/limits.h"
#include "block/block_device.h"

namespace nasgw::block {

struct IscsiOptions {
  std::vector<std::string> urls;  // one per path, all to the same LUN
  std::string initiator_name;     // empty: iqn.2026-11.org.nasgw:<hostname>
  uint32_t queue_depth = limits::kQueueDepthDefault;
  // Bulk I/O (file data) is held to a window sized so that it queues about
  // this long in front of sync I/O (metadata, the intent log); 0: no window.
  // A quarter of queue_depth is kept for sync I/O either way.
  uint32_t bulk_target_ms = limits::kBulkTargetMsDefault;
  uint32_t io_timeout_ms = limits::kIoTimeoutMsDefault;
  uint32_t path_timeout_ms = limits::kPathTimeoutMsDefault;
  uint32_t connect_timeout_ms = limits::kConnectTimeoutMsDefault;

  // Checks every field against base/limits.h; the message names the field
  // and its allowed range.
  Status Validate() const;
};

class IscsiDevice final : public BlockDevice {
 public:
  // Connects every path, identifies the LUN and returns once at least one
  // path is up (others keep reconnecting in the background). Fails within
  // about connect_timeout_ms with a message naming the URL and the cause:
  // NotFound (no such target or LUN), PermissionDenied (CHAP refused),
  // Unavailable (nothing listening), TimedOut (no answer),
  // InvalidArgument (bad URL, or paths that reach different LUNs).
  static Result<std::unique_ptr<IscsiDevice>> Open(const IscsiOptions& options);
  ~IscsiDevice() override;

  const DeviceInfo& info() const override;
  BlockStats Stats() const override;

  struct Impl;

 protected:
  Status SubmitValidated(IoRequest req) override;

 private:
  explicit IscsiDevice(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// Opens one single-path IscsiDevice per URL: the LUNs of a reserve as the
// tools and tests give them. Fails on the first LUN that does not open.
Result<std::vector<std::shared_ptr<BlockDevice>>> OpenLuns(const std::vector<std::string>& urls,
                                                           const std::string& initiator_name = {});

}  // namespace nasgw::block
