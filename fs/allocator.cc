#include "fs/allocator.h"

#include <bit>
#include <string>

#include "base/assert.h"
#include "base/mutex.h"

namespace nasgw::fs {

namespace {
std::string Str(const Extent& e) {
  return "lun " + std::to_string(e.lun) + " [" + std::to_string(e.offset) + ", +" + std::to_string(e.length) + ")";
}
}  // namespace

Allocator::Allocator(uint64_t ag_bytes, uint64_t unit) : ag_bytes_(ag_bytes), unit_(unit) {
  NASGW_ASSERT(unit >= 512 && std::has_single_bit(unit));
  NASGW_ASSERT(ag_bytes >= unit && ag_bytes % unit == 0);
}

Status Allocator::AddGroup(AgId ag, uint64_t offset) {
  if (offset % unit_ != 0) return Status::InvalidArgument("allocation group not aligned to the unit");
  MutexLock lock(mu_);
  auto [it, fresh] = groups_.try_emplace(ag);
  if (!fresh) return Status::Exists("allocation group already added");
  it->second.start = offset;
  it->second.free.emplace(offset, ag_bytes_);
  lun_free_[ag.lun] += ag_bytes_;
  total_ += ag_bytes_;
  free_ += ag_bytes_;
  return Status();
}

bool Allocator::TakeFromGroup(AgId id, Group& g, uint64_t want, std::vector<Extent>* out, uint64_t* got,
                              bool fragments) {
  auto take = [&](std::map<uint64_t, uint64_t>::iterator it, uint64_t n) REQUIRES(mu_) {
    const uint64_t off = it->first, len = it->second;
    g.free.erase(it);
    if (n < len) g.free.emplace(off + n, len - n);
    // Merge with the previous extent we handed out in this call if adjacent.
    if (!out->empty() && out->back().lun == id.lun && out->back().end() == off && out->back().offset >= g.start) {
      out->back().length += n;
    } else {
      out->push_back({id.lun, off, n});
    }
    g.cursor = off + n;
    *got += n;
    lun_free_[id.lun] -= n;
    free_ -= n;
  };
  const uint64_t need = want - *got;
  // One extent that fits whole, next-fit from the cursor.
  for (int pass = 0; pass < 2; pass++) {
    auto it = pass == 0 ? g.free.lower_bound(g.cursor) : g.free.begin();
    auto stop = pass == 0 ? g.free.end() : g.free.lower_bound(g.cursor);
    for (; it != stop; ++it) {
      if (it->second >= need) {
        take(it, need);
        return true;
      }
    }
  }
  if (!fragments) return false;
  // Otherwise fragments, in address order.
  while (*got < want && !g.free.empty()) {
    auto it = g.free.begin();
    take(it, std::min(it->second, want - *got));
  }
  return *got == want;
}

Result<std::vector<Extent>> Allocator::AllocateLocked(uint64_t bytes) {
  const uint64_t want = RoundUp(bytes);
  std::vector<Extent> out;
  if (want == 0) return out;
  uint64_t got = 0;
  // Striping: start at the rotor's LUN (or the next one with room), and fill
  // from further LUNs only if that one runs out.
  std::vector<uint32_t> luns;
  for (auto& [lun, free] : lun_free_) {
    if (free > 0) luns.push_back(lun);
  }
  NASGW_ASSERT(!luns.empty());
  size_t first = 0;
  while (first < luns.size() && luns[first] < next_lun_) first++;
  if (first == luns.size()) first = 0;
  for (size_t k = 0; k < luns.size() && got < want; k++) {
    const uint32_t lun = luns[(first + k) % luns.size()];
    // Whole in one group of this LUN if any can hold it; else in pieces.
    for (bool fragments : {false, true}) {
      for (auto it = groups_.lower_bound(AgId{lun, 0}); it != groups_.end() && it->first.lun == lun && got < want;
           ++it) {
        if (TakeFromGroup(it->first, it->second, want, &out, &got, fragments)) break;
      }
    }
  }
  NASGW_ASSERT_EQ(got, want);  // callers check free space first
  next_lun_ = luns[first] + 1;
  return out;
}

Result<std::vector<Extent>> Allocator::Allocate(uint64_t bytes) {
  MutexLock lock(mu_);
  const uint64_t want = RoundUp(bytes);
  if (want > free_ - reserved_) {
    return Status::NoSpace("need " + std::to_string(want) + " bytes, " + std::to_string(free_ - reserved_) +
                           " available");
  }
  return AllocateLocked(bytes);
}

Result<std::vector<Extent>> Allocator::AllocateReserved(uint64_t bytes) {
  MutexLock lock(mu_);
  const uint64_t want = RoundUp(bytes);
  NASGW_ASSERT_LE(want, reserved_);
  reserved_ -= want;
  return AllocateLocked(bytes);
}

Status Allocator::Reserve(uint64_t bytes) {
  MutexLock lock(mu_);
  const uint64_t want = RoundUp(bytes);
  if (want > free_ - reserved_) {
    return Status::NoSpace("cannot reserve " + std::to_string(want) + " bytes, " + std::to_string(free_ - reserved_) +
                           " available");
  }
  reserved_ += want;
  return Status();
}

void Allocator::Unreserve(uint64_t bytes) {
  MutexLock lock(mu_);
  const uint64_t n = RoundUp(bytes);
  NASGW_ASSERT_LE(n, reserved_);
  reserved_ -= n;
}

Allocator::Group* Allocator::FindGroup(const Extent& e, AgId* id) {
  if (e.length == 0 || e.offset % unit_ != 0 || e.length % unit_ != 0) return nullptr;
  auto it = groups_.lower_bound(AgId{e.lun, 0});
  for (; it != groups_.end() && it->first.lun == e.lun; ++it) {
    const Group& g = it->second;
    if (e.offset >= g.start && e.end() <= g.start + ag_bytes_) {
      *id = it->first;
      return &it->second;
    }
  }
  return nullptr;
}

Status Allocator::Free(const Extent& e) {
  MutexLock lock(mu_);
  AgId id;
  Group* g = FindGroup(e, &id);
  if (g == nullptr) return Status::Corruption("free of " + Str(e) + ": not inside one allocation group, or unaligned");
  auto next = g->free.upper_bound(e.offset);
  if (next != g->free.end() && next->first < e.end()) return Status::Corruption("double free of " + Str(e));
  uint64_t off = e.offset, len = e.length;
  if (next != g->free.begin()) {
    auto prev = std::prev(next);
    if (prev->first + prev->second > e.offset) return Status::Corruption("double free of " + Str(e));
    if (prev->first + prev->second == e.offset) {
      off = prev->first;
      len += prev->second;
      g->free.erase(prev);
    }
  }
  if (next != g->free.end() && next->first == e.end()) {
    len += next->second;
    g->free.erase(next);
  }
  g->free.emplace(off, len);
  lun_free_[e.lun] += e.length;
  free_ += e.length;
  return Status();
}

Status Allocator::MarkUsed(const Extent& e) {
  MutexLock lock(mu_);
  AgId id;
  Group* g = FindGroup(e, &id);
  if (g == nullptr) return Status::Corruption(Str(e) + " is not inside one allocation group, or unaligned");
  auto it = g->free.upper_bound(e.offset);
  if (it == g->free.begin()) return Status::Corruption(Str(e) + " is used twice");
  --it;
  const uint64_t off = it->first, len = it->second;
  if (off > e.offset || off + len < e.end()) return Status::Corruption(Str(e) + " is used twice");
  g->free.erase(it);
  if (off < e.offset) g->free.emplace(off, e.offset - off);
  if (e.end() < off + len) g->free.emplace(e.end(), off + len - e.end());
  lun_free_[e.lun] -= e.length;
  free_ -= e.length;
  if (reserved_ > free_) reserved_ = free_;
  return Status();
}

uint64_t Allocator::total_bytes() const {
  MutexLock lock(mu_);
  return total_;
}

uint64_t Allocator::free_bytes() const {
  MutexLock lock(mu_);
  return free_;
}

uint64_t Allocator::available_bytes() const {
  MutexLock lock(mu_);
  return free_ - reserved_;
}

uint64_t Allocator::reserved_bytes() const {
  MutexLock lock(mu_);
  return reserved_;
}

size_t Allocator::fragments() const {
  MutexLock lock(mu_);
  size_t n = 0;
  for (const auto& [id, g] : groups_) n += g.free.size();
  return n;
}

}  // namespace nasgw::fs
