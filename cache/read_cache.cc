#include "cache/read_cache.h"

#include <algorithm>
#include <chrono>
#include <cstring>

#include "base/clock.h"

namespace nasgw::cache {

namespace {

constexpr uint64_t kBlock = ReadCache::kBlock;

uint64_t Up(uint64_t x) {
  return (x + kBlock - 1) / kBlock * kBlock;
}

}  // namespace

ReadCache::Fill& ReadCache::Fill::operator=(Fill&& o) noexcept {
  if (this != &o) {
    if (rc_ != nullptr) rc_->Release(key_);
    rc_ = o.rc_;
    key_ = o.key_;
    version_ = o.version_;
    o.rc_ = nullptr;
  }
  return *this;
}

ReadCache::Fill::~Fill() {
  if (rc_ != nullptr) rc_->Release(key_);
}

ReadCache::ReadCache(uint64_t budget, uint64_t read_ahead_max, std::function<uint64_t()> others)
    : budget_(budget), ahead_max_(read_ahead_max), others_(std::move(others)) {}

ReadCache::~ReadCache() = default;

uint64_t ReadCache::Capacity() const {
  const uint64_t others = others_ ? others_() : 0;
  return others >= budget_ ? 0 : budget_ - others;
}

ReadCache::File& ReadCache::FileFor(const FileKey& k, uint64_t gen) {
  auto& slot = files_[k];
  if (slot == nullptr) {
    slot = std::make_unique<File>();
    slot->key = k;
    slot->gen = gen;
  } else if (slot->gen != gen) {
    // The handle's generation moved: what was held is another file's.
    DropBlocks(*slot);
    slot->gen = gen;
    slot->version++;
    slot->next = slot->window = slot->ahead_to = 0;
  }
  return *slot;
}

void ReadCache::MaybeForget(File& f) {
  if (f.blocks.empty() && f.pins == 0 && f.inflight.empty()) files_.erase(f.key);
}

void ReadCache::Release(const FileKey& k) {
  MutexLock l(mu_);
  auto it = files_.find(k);
  if (it == files_.end()) return;
  it->second->pins--;
  MaybeForget(*it->second);
}

void ReadCache::Touch(Block& b) {
  auto& from = lists_[b.list];
  if (b.prefetched) {
    // Read ahead, now read: its first real read, not a second.
    b.prefetched = false;
    c_.prefetch_hit_bytes += kBlock;
    from.splice(from.begin(), from, b.pos);
    return;
  }
  if (b.list == kProtected) {
    from.splice(from.begin(), from, b.pos);
    return;
  }
  // Read again while on probation: protected, and the protected segment's
  // oldest go back to probation's head past three quarters of the capacity.
  auto& to = lists_[kProtected];
  to.splice(to.begin(), from, b.pos);
  b.list = kProtected;
  bytes_[kProbation] -= kBlock;
  bytes_[kProtected] += kBlock;
  const uint64_t limit = Capacity() / 4 * 3;
  while (bytes_[kProtected] > limit && to.size() > 1) {
    Block* old = to.back();
    lists_[kProbation].splice(lists_[kProbation].begin(), to, old->pos);
    old->list = kProbation;
    bytes_[kProtected] -= kBlock;
    bytes_[kProbation] += kBlock;
  }
}

void ReadCache::Place(File& f, uint64_t index, const uint8_t* data, uint64_t n, bool prefetched) {
  auto [it, fresh] = f.blocks.try_emplace(index);
  Block& b = it->second;
  if (!fresh) {
    std::memcpy(b.data.get(), data, n);
    if (n < kBlock) std::memset(b.data.get() + n, 0, kBlock - n);
    return;
  }
  b.file = &f;
  b.index = index;
  b.data = std::make_unique<uint8_t[]>(kBlock);
  std::memcpy(b.data.get(), data, n);
  if (n < kBlock) std::memset(b.data.get() + n, 0, kBlock - n);
  b.prefetched = prefetched;
  b.list = kProbation;
  // Evicted from probation not long ago and wanted again: part of the
  // working set, protected at once.
  const GhostKey g{f.key.vol, f.key.snap, f.key.ino, index};
  if (auto gi = ghost_.find(g); gi != ghost_.end()) {
    ghost_.erase(gi);
    if (!prefetched) b.list = kProtected;
  }
  lists_[b.list].push_front(&b);
  b.pos = lists_[b.list].begin();
  bytes_[b.list] += kBlock;
}

void ReadCache::Remove(Block& b, bool ghost) {
  lists_[b.list].erase(b.pos);
  bytes_[b.list] -= kBlock;
  File& f = *b.file;
  if (ghost && b.list == kProbation && !b.prefetched) {
    const GhostKey g{f.key.vol, f.key.snap, f.key.ino, b.index};
    if (ghost_.insert(g).second) ghost_order_.push_front(g);
    // As many keys as the capacity has blocks: a block evicted and read
    // again within one capacity's worth of other reads is working set.
    const uint64_t keep = std::max<uint64_t>(Capacity() / kBlock, 1);
    while (ghost_order_.size() > keep) {
      ghost_.erase(ghost_order_.back());
      ghost_order_.pop_back();
    }
  }
  f.blocks.erase(b.index);  // b is gone
}

void ReadCache::DropBlocks(File& f) {
  while (!f.blocks.empty()) Remove(f.blocks.begin()->second, false);
}

void ReadCache::Evict() {
  const uint64_t cap = Capacity();
  while (bytes_[kProbation] + bytes_[kProtected] > cap) {
    auto& from = lists_[kProbation].empty() ? lists_[kProtected] : lists_[kProbation];
    Block* victim = from.back();
    File& f = *victim->file;
    c_.evicted_bytes += kBlock;
    Remove(*victim, true);
    MaybeForget(f);
  }
}

std::pair<uint64_t, uint64_t> ReadCache::Get(const FileKey& k, uint64_t gen, uint64_t off, uint64_t n, uint8_t* out,
                                             Fill* fill) {
  if (n == 0) return {0, 0};
  MutexLock l(mu_);
  const uint64_t first = off / kBlock, last = (off + n - 1) / kBlock;
  uint64_t miss_first = UINT64_MAX, miss_last = 0;
  auto it = files_.find(k);
  File* f = it == files_.end() ? nullptr : it->second.get();
  if (f != nullptr && f->gen != gen) f = &FileFor(k, gen);  // drops the other generation's blocks
  for (uint64_t i = first; i <= last; i++) {
    const uint64_t from = std::max(off, i * kBlock), to = std::min(off + n, (i + 1) * kBlock);
    Block* b = nullptr;
    if (f != nullptr) {
      auto bi = f->blocks.find(i);
      if (bi != f->blocks.end()) b = &bi->second;
    }
    if (b == nullptr) {
      miss_first = std::min(miss_first, i);
      miss_last = i;
      continue;
    }
    std::memcpy(out + (from - off), b->data.get() + (from - i * kBlock), to - from);
    c_.hit_bytes += to - from;
    Touch(*b);
  }
  if (miss_first == UINT64_MAX) return {0, 0};
  if (fill->rc_ != nullptr) {  // a Fill given again: its old pin goes (mu_ is held here)
    if (auto old = files_.find(fill->key_); old != files_.end()) {
      old->second->pins--;
      MaybeForget(*old->second);
    }
    fill->rc_ = nullptr;
  }
  File& pinned = FileFor(k, gen);
  pinned.pins++;
  fill->rc_ = this;
  fill->key_ = k;
  fill->version_ = pinned.version;
  c_.miss_bytes += (miss_last + 1 - miss_first) * kBlock;
  return {miss_first * kBlock, (miss_last + 1) * kBlock};
}

void ReadCache::Insert(const Fill& fill, uint64_t gen, uint64_t first, const uint8_t* data, uint64_t n,
                       bool prefetched) {
  if (!fill.valid() || n == 0) return;
  MutexLock l(mu_);
  auto it = files_.find(fill.key_);
  if (it == files_.end()) return;  // cannot be: the fill pins it
  File& f = *it->second;
  if (f.version != fill.version_ || f.gen != gen) {
    c_.refused_fills++;
    return;
  }
  for (uint64_t at = 0; at < n; at += kBlock) {
    Place(f, (first + at) / kBlock, data + at, std::min(kBlock, n - at), prefetched);
  }
  if (prefetched) c_.prefetched_bytes += Up(n);
  Evict();
}

void ReadCache::Update(const FileKey& k, uint64_t gen, uint64_t off, const uint8_t* data, uint64_t n) {
  if (n == 0) return;
  MutexLock l(mu_);
  File& f = FileFor(k, gen);
  f.version++;
  const uint64_t first = off / kBlock, last = (off + n - 1) / kBlock;
  for (uint64_t i = first; i <= last; i++) {
    const uint64_t from = i * kBlock;
    if (from >= off && from + kBlock <= off + n) {
      Place(f, i, data + (from - off), kBlock, false);
    } else if (auto bi = f.blocks.find(i); bi != f.blocks.end()) {
      Remove(bi->second, false);  // partly written: its other bytes are not here
    }
  }
  Evict();
  // Evict may have forgotten f already; else it may hold nothing now.
  if (auto it = files_.find(k); it != files_.end()) MaybeForget(*it->second);
}

void ReadCache::Drop(const FileKey& k) {
  MutexLock l(mu_);
  auto it = files_.find(k);
  if (it == files_.end()) return;
  File& f = *it->second;
  DropBlocks(f);
  f.version++;
  f.next = f.window = f.ahead_to = 0;
  MaybeForget(f);
}

uint64_t ReadCache::DropVolume(uint32_t vol) {
  MutexLock l(mu_);
  const uint64_t before = bytes_[kProbation] + bytes_[kProtected];
  auto it = files_.lower_bound(FileKey{vol, 0, 0});
  while (it != files_.end() && it->first.vol == vol) {
    File& f = *(it++)->second;  // MaybeForget may erase it
    DropBlocks(f);
    // Pinned files stay, with a new version: fills and read-aheads begun
    // before are refused.
    f.version++;
    f.next = f.window = f.ahead_to = 0;
    f.run = 0;
    MaybeForget(f);
  }
  return before - (bytes_[kProbation] + bytes_[kProtected]);
}

void ReadCache::Trim() {
  MutexLock l(mu_);
  Evict();
}

ReadCache::Ahead ReadCache::Sequential(const FileKey& k, uint64_t gen, uint64_t off, uint64_t n, uint64_t size) {
  Ahead a;
  if (ahead_max_ == 0 || n == 0) return a;
  MutexLock l(mu_);
  File& f = FileFor(k, gen);
  // A client keeps several reads in flight, so they arrive a little out of
  // order: one within a few reads of its size of where the last ended
  // still follows on. (Not a fixed span: random 8 KiB reads of a 1 MiB file
  // would land within one of 512 KiB half the time.)
  const uint64_t slack = kReorderReads * n;
  const bool start = off == 0 && f.next == 0;
  const bool follows = f.next != 0 && off + slack >= f.next && off <= f.next + slack;
  if (!follows) {
    f.next = off + n;
    f.window = f.ahead_to = 0;
    // A file read from its start counts as a stream already under way.
    f.run = start ? kStreamReads - 1 : 1;
    MaybeForget(f);
    return a;
  }
  f.next = std::max(f.next, off + n);
  // A stream is a run of reads that follow on one another: a random read
  // that happens to land just after the one before is not one.
  if (++f.run < kStreamReads) {
    MaybeForget(f);
    return a;
  }
  f.window = f.window == 0 ? kReadAheadMinBytes : std::min(f.window * 2, ahead_max_);
  const uint64_t read_end = Up(off + n);
  f.ahead_to = std::max(f.ahead_to, read_end);
  const uint64_t want = std::min(Up(size), Up(off + n + f.window));
  // Ask again when less than half a window is left ahead of the reader.
  if (want <= f.ahead_to || f.ahead_to - read_end >= f.window / 2) {
    MaybeForget(f);
    return a;
  }
  uint64_t first = f.ahead_to, end = want;
  f.ahead_to = want;
  // Only from the first block not held to the last (a stream read again).
  while (first < end && f.blocks.contains(first / kBlock)) first += kBlock;
  while (end > first && f.blocks.contains((end - 1) / kBlock)) end = (end - 1) / kBlock * kBlock;
  if (first == end) {
    MaybeForget(f);
    return a;
  }
  a.first = first;
  a.end = end;
  f.inflight.emplace_back(a.first, a.end);
  f.pins++;
  a.fill.rc_ = this;
  a.fill.key_ = k;
  a.fill.version_ = f.version;
  return a;
}

void ReadCache::AheadDone(const FileKey& k, uint64_t first, uint64_t end) {
  MutexLock l(mu_);
  auto it = files_.find(k);
  if (it == files_.end()) return;
  File& f = *it->second;
  auto in = std::find(f.inflight.begin(), f.inflight.end(), std::make_pair(first, end));
  if (in != f.inflight.end()) f.inflight.erase(in);
  ahead_cv_.NotifyAll();
  MaybeForget(f);
}

bool ReadCache::WaitAhead(const FileKey& k, uint64_t first, uint64_t end, uint32_t timeout_ms) {
  MutexLock l(mu_);
  const uint64_t deadline = MonotonicNanos() + uint64_t{timeout_ms} * 1'000'000;
  bool waited = false;
  for (;;) {
    auto it = files_.find(k);
    if (it == files_.end()) return waited;
    const auto& in = it->second->inflight;
    const bool busy =
        std::any_of(in.begin(), in.end(), [&](const auto& s) { return s.first < end && first < s.second; });
    if (!busy) return waited;
    const uint64_t now = MonotonicNanos();
    if (now >= deadline) return waited;
    if (!waited) c_.ahead_waits++;
    waited = true;
    ahead_cv_.WaitFor(mu_, std::chrono::nanoseconds(deadline - now));
  }
}

ReadCacheStats ReadCache::stats() const {
  MutexLock l(mu_);
  ReadCacheStats s = c_;
  s.bytes = bytes_[kProbation] + bytes_[kProtected];
  s.protected_bytes = bytes_[kProtected];
  s.capacity = Capacity();
  return s;
}

}  // namespace nasgw::cache
