// Every limit in nasgw, in one place. Unit last in the name; each says why.
// Runtime options are validated against the *_min/_max bounds here, so a
// config can never ask for something the code was not built to carry.
#pragma once

#include <cstdint>

namespace nasgw::limits {

// ---- block/ ----------------------------------------------------------------

// Commands in flight to one LUN over all its paths. The default matches what
// tgtd and most arrays accept per session without TASK SET FULL; the max keeps
// the per-device request table small and bounded.
constexpr uint32_t kQueueDepthDefault = 64;
constexpr uint32_t kQueueDepthMax = 512;

// Requests admitted but not yet on the wire, per LUN. Past this a submitter
// blocks (backpressure) rather than the queue growing without bound.
constexpr uint32_t kSubmitQueueMax = 4096;

// Largest single read or write. 8 MiB covers a 1 MiB record times a stripe,
// and bounds the memory one request can pin.
constexpr uint64_t kIoBytesMax = 8ull << 20;

// Most buffers in one vectored request (Linux's IOV_MAX is 1024; 256 covers a
// 1 MiB record in 4 KiB pages).
constexpr uint32_t kIovecsMax = 256;

// Paths (portals) to one LUN. Real SANs have 2-4; 8 leaves headroom.
constexpr uint32_t kPathsMax = 8;

// A request that has not completed after this long (over every retry and
// path) fails with TimedOut. 30 s is the Linux SCSI default command timeout.
constexpr uint32_t kIoTimeoutMsDefault = 30'000;
constexpr uint32_t kIoTimeoutMsMin = 100;
constexpr uint32_t kIoTimeoutMsMax = 600'000;

// A path with commands outstanding and no response for this long is declared
// dead and its commands move to another path. Short enough that multipath
// failover stays far below the I/O timeout, long enough to ride out a busy
// array's latency spikes (arrays answer in milliseconds when healthy).
constexpr uint32_t kPathTimeoutMsDefault = 5'000;
constexpr uint32_t kPathTimeoutMsMin = 50;
constexpr uint32_t kPathTimeoutMsMax = 120'000;

// TCP connect + iSCSI login on one path.
constexpr uint32_t kConnectTimeoutMsDefault = 5'000;
constexpr uint32_t kConnectTimeoutMsMin = 50;
constexpr uint32_t kConnectTimeoutMsMax = 120'000;

// Reconnect backoff on a dead path: doubles from min to max, with jitter, so a
// restarting array is not hammered and a short blip costs little.
constexpr uint32_t kReconnectBackoffMsMin = 50;
constexpr uint32_t kReconnectBackoffMsMax = 2'000;

// Retries of one command for transient SCSI conditions (UNIT ATTENTION, BUSY,
// NOT READY becoming ready) before its error is returned.
constexpr uint32_t kCommandRetriesMax = 16;

static_assert(kPathTimeoutMsDefault < kIoTimeoutMsDefault, "paths must fail over before I/O times out");
static_assert(kReconnectBackoffMsMax < kIoTimeoutMsDefault);
static_assert(kQueueDepthDefault <= kQueueDepthMax);

}  // namespace nasgw::limits
