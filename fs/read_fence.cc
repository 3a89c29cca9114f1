#include "fs/read_fence.h"

namespace nasgw::fs {

uint64_t ReadFence::Enter() {
  MutexLock l(mu_);
  active_[epoch_]++;
  return epoch_;
}

void ReadFence::Exit(uint64_t ticket) {
  std::vector<std::vector<Extent>> go;
  {
    MutexLock l(mu_);
    auto it = active_.find(ticket);
    if (it != active_.end() && --it->second == 0) active_.erase(it);
    // The oldest read still in flight entered at `oldest`: what was retired
    // before that epoch is read by nobody.
    const uint64_t oldest = active_.empty() ? UINT64_MAX : active_.begin()->first;
    while (!retired_.empty() && retired_.front().first < oldest) {
      waiting_ -= retired_.front().second.size();
      go.push_back(std::move(retired_.front().second));
      retired_.pop_front();
    }
  }
  for (const auto& e : go) free_(e);
}

void ReadFence::Retire(std::vector<Extent> extents) {
  if (extents.empty()) return;
  {
    MutexLock l(mu_);
    if (!active_.empty()) {
      // Reads in flight entered at or before this epoch; later ones after.
      waiting_ += extents.size();
      retired_.emplace_back(epoch_++, std::move(extents));
      return;
    }
  }
  free_(extents);
}

size_t ReadFence::waiting() const {
  MutexLock l(mu_);
  return waiting_;
}

}  // namespace nasgw::fs
