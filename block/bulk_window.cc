#include "block/bulk_window.h"

#include <algorithm>

namespace nasgw::block {

BulkWindow::BulkWindow(const BulkWindowOptions& o)
    : opt_{o.target_ns, o.min_bytes, std::max(o.min_bytes, o.max_bytes)}, window_(opt_.min_bytes) {
  if (opt_.target_ns == 0) window_ = UINT64_MAX;
}

bool BulkWindow::Admits(uint64_t bytes) const {
  return in_flight_ == 0 || (in_flight_ < window_ && bytes <= window_ - in_flight_);
}

void BulkWindow::Accrue(uint64_t now_ns) {
  if (in_flight_ > 0 && now_ns > last_ns_) busy_ns_ += now_ns - last_ns_;
  last_ns_ = now_ns;
}

void BulkWindow::Issued(uint64_t bytes, uint64_t now_ns) {
  Accrue(now_ns);
  in_flight_ += bytes;
}

void BulkWindow::Completed(uint64_t bytes, bool delivered, uint64_t now_ns) {
  Accrue(now_ns);
  in_flight_ -= std::min(bytes, in_flight_);
  if (opt_.target_ns == 0) return;
  if (delivered) delivered_ += bytes;
  completions_++;
  if (busy_ns_ < opt_.target_ns || completions_ < kSampleCompletionsMin) return;
  // bytes/ns * ns, in double: a fast LUN's rate times the target overflows
  // nothing, and the result is clamped.
  const double w =
      static_cast<double>(delivered_) * static_cast<double>(opt_.target_ns) / static_cast<double>(busy_ns_);
  window_ = std::clamp(static_cast<uint64_t>(std::min(w, static_cast<double>(opt_.max_bytes))), opt_.min_bytes,
                       opt_.max_bytes);
  busy_ns_ = delivered_ = 0;
  completions_ = 0;
}

}  // namespace nasgw::block
