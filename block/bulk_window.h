// BulkWindow: how many bytes of bulk I/O (file data: reads that fill the
// data cache, write-back of dirty data) one LUN may have on the wire.
//
// Why: a command that reaches the array waits behind every byte sent before
// it, in the array, its link and the socket buffers on the way. Sixteen
// readers can put the whole queue depth of large reads in front of an
// intent-log write: on a 150 Mbit/s link that was 8 MiB, half a second for
// every MKDIR. Sync I/O (metadata, the intent log, labels, reservations)
// is never held back; bulk I/O is admitted only while its bytes in flight
// fit the window, so the queue a sync command finds stays near `target_ns`
// of the LUN's delivery time however much bulk is waiting.
//
// How (as TCP Vegas and BBR size a window from the delivery rate): the
// window is the bulk bytes the LUN delivered per second while bulk was in
// flight, times the target, within [min_bytes, max_bytes]. Measured over
// samples of at least target_ns of busy time and kSampleCompletionsMin
// completions. When the array is fast, the rate grows with the window (the
// latency stays below the target) and so does the window, until max_bytes or
// the queue depth; when something is saturated, the rate stops growing and
// the window settles where bulk latency is the target. A command larger than
// the window is admitted when nothing else bulk is in flight, so every
// command makes progress.
//
// Not thread-safe: the device's I/O thread owns it.
#pragma once

#include <cstdint>

namespace nasgw::block {

struct BulkWindowOptions {
  uint64_t target_ns = 0;  // 0: no window (every bulk command is admitted)
  uint64_t min_bytes = 256 << 10;
  uint64_t max_bytes = uint64_t{256} << 20;
};

class BulkWindow {
 public:
  static constexpr uint32_t kSampleCompletionsMin = 4;

  explicit BulkWindow(const BulkWindowOptions& o);

  // Whether a bulk command of `bytes` may go on the wire now.
  bool Admits(uint64_t bytes) const;
  void Issued(uint64_t bytes, uint64_t now_ns);
  // Every issued command completes once, whatever its outcome (a failed or
  // retried command delivered nothing, but it left the wire).
  void Completed(uint64_t bytes, bool delivered, uint64_t now_ns);

  uint64_t window() const { return window_; }
  uint64_t in_flight() const { return in_flight_; }

 private:
  void Accrue(uint64_t now_ns);

  const BulkWindowOptions opt_;
  uint64_t window_;
  uint64_t in_flight_ = 0;
  uint64_t last_ns_ = 0;  // when busy time was last accrued
  // The sample being measured.
  uint64_t busy_ns_ = 0;
  uint64_t delivered_ = 0;
  uint32_t completions_ = 0;
};

}  // namespace nasgw::block
