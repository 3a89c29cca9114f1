#include "daemon/locks.h"

#include "base/assert.h"
#include "base/mutex.h"

namespace nasgw::daemon {

using proto::LockRange;

namespace {

// Erases the entries of one session from a map keyed by LockOwner (sorted
// by session first, so they are one run).
template <typename Map>
void EraseSession(Map& m, uint64_t session) {
  auto first = m.lower_bound(LockOwner{session, 0});
  auto last = first;
  while (last != m.end() && last->first.session == session) ++last;
  m.erase(first, last);
}

}  // namespace

LockTable::LockTable(LockLimits limits) : limits_(limits) {}

bool LockTable::FindConflict(const File& f, const LockOwner& who, const LockRange& lock, HeldLock* conflict) const {
  bool found = false;
  HeldLock best;
  for (const auto& [owner, ranges] : f.owners) {
    if (owner == who) continue;
    for (const LockRange& r : ranges) {
      if (r.start > lock.end) break;  // sorted by start: nothing further overlaps
      if (!proto::Conflicts(r, lock)) continue;
      if (!found || r.start < best.range.start) best = {owner, r};
      found = true;
      break;  // an owner's later ranges start later
    }
  }
  if (found && conflict != nullptr) *conflict = best;
  return found;
}

bool LockTable::Account(const LockFile& file, const LockOwner& who, size_t before, size_t after) {
  Session& s = sessions_[who.session];
  if (after > before) {
    const size_t more = after - before;
    if (s.ranges + more > limits_.per_session || total_ + more > limits_.total) {
      if (s.ranges == 0) sessions_.erase(who.session);  // undo the lookup above
      return false;
    }
  }
  total_ = total_ - before + after;
  s.ranges = s.ranges - before + after;
  size_t& in_file = s.files[file];
  in_file = in_file - before + after;
  if (in_file == 0) s.files.erase(file);
  if (s.ranges == 0) sessions_.erase(who.session);
  return true;
}

LockResult LockTable::Commit(const LockFile& file, const LockOwner& who, std::vector<LockRange> ranges) {
  File& f = files_[file];
  auto it = f.owners.find(who);
  const size_t before = it == f.owners.end() ? 0 : it->second.size();
  if (!Account(file, who, before, ranges.size())) {
    if (f.empty()) files_.erase(file);  // undo the lookup above
    return LockResult::kNoLocks;
  }
  if (ranges.empty()) {
    if (it != f.owners.end()) f.owners.erase(it);
    if (f.empty()) files_.erase(file);
  } else if (it == f.owners.end()) {
    f.owners.emplace(who, std::move(ranges));
  } else {
    it->second = std::move(ranges);
  }
  return LockResult::kOk;
}

LockResult LockTable::Share(const LockFile& file, const LockOwner& who, ShareMode mode, HeldShare* conflict) {
  NASGW_ASSERT(((mode.access | mode.deny) & ~proto::kShareAll) == 0);
  const bool release = mode.access == 0 && mode.deny == 0;
  MutexLock l(mu_);
  auto fit = files_.find(file);
  if (fit == files_.end() && release) return LockResult::kOk;
  if (!release && fit != files_.end()) {
    for (const auto& [owner, held] : fit->second.shares) {
      if (owner == who) continue;
      if ((mode.access & held.deny) != 0 || (held.access & mode.deny) != 0) {
        if (conflict != nullptr) *conflict = {owner, held};
        return LockResult::kConflict;
      }
    }
  }
  File& f = files_[file];
  auto it = f.shares.find(who);
  const size_t before = it == f.shares.end() ? 0 : 1;
  if (!Account(file, who, before, release ? 0 : 1)) {
    if (f.empty()) files_.erase(file);
    return LockResult::kNoLocks;
  }
  if (release) {
    if (it != f.shares.end()) f.shares.erase(it);
    if (f.empty()) files_.erase(file);
  } else {
    f.shares[who] = mode;
  }
  return LockResult::kOk;
}

LockResult LockTable::Lock(const LockFile& file, const LockOwner& who, const LockRange& lock, HeldLock* conflict) {
  NASGW_ASSERT(lock.start <= lock.end);
  NASGW_ASSERT(lock.type == proto::kLockRead || lock.type == proto::kLockWrite);
  MutexLock l(mu_);
  std::vector<LockRange> ranges;
  auto f = files_.find(file);
  if (f != files_.end()) {
    if (FindConflict(f->second, who, lock, conflict)) return LockResult::kConflict;
    auto it = f->second.owners.find(who);
    if (it != f->second.owners.end()) ranges = it->second;
  }
  proto::AddLockRange(ranges, lock);
  return Commit(file, who, std::move(ranges));
}

LockResult LockTable::Unlock(const LockFile& file, const LockOwner& who, uint64_t start, uint64_t end) {
  NASGW_ASSERT(start <= end);
  MutexLock l(mu_);
  auto f = files_.find(file);
  if (f == files_.end()) return LockResult::kOk;
  auto it = f->second.owners.find(who);
  if (it == f->second.owners.end()) return LockResult::kOk;
  std::vector<LockRange> ranges = it->second;
  proto::RemoveLockRange(ranges, start, end);
  return Commit(file, who, std::move(ranges));
}

bool LockTable::Test(const LockFile& file, const LockOwner& who, const LockRange& lock, HeldLock* conflict) const {
  MutexLock l(mu_);
  auto f = files_.find(file);
  return f != files_.end() && FindConflict(f->second, who, lock, conflict);
}

void LockTable::ReleaseSession(uint64_t session) {
  MutexLock l(mu_);
  auto s = sessions_.find(session);
  if (s == sessions_.end()) return;
  for (const auto& [file, n] : s->second.files) {
    auto f = files_.find(file);
    NASGW_ASSERT(f != files_.end());
    // Owners sort by session first: the session's owners are one run.
    EraseSession(f->second.owners, session);
    EraseSession(f->second.shares, session);
    if (f->second.empty()) files_.erase(f);
    total_ -= n;
  }
  sessions_.erase(s);
}

size_t LockTable::size() const {
  MutexLock l(mu_);
  return total_;
}

size_t LockTable::SessionSize(uint64_t session) const {
  MutexLock l(mu_);
  auto s = sessions_.find(session);
  return s == sessions_.end() ? 0 : s->second.ranges;
}

std::vector<HeldLock> LockTable::Locks(const LockFile& file) const {
  MutexLock l(mu_);
  std::vector<HeldLock> out;
  auto f = files_.find(file);
  if (f == files_.end()) return out;
  for (const auto& [owner, ranges] : f->second.owners) {
    for (const LockRange& r : ranges) out.push_back({owner, r});
  }
  return out;
}

std::vector<HeldShare> LockTable::Shares(const LockFile& file) const {
  MutexLock l(mu_);
  std::vector<HeldShare> out;
  auto f = files_.find(file);
  if (f == files_.end()) return out;
  for (const auto& [owner, mode] : f->second.shares) out.push_back({owner, mode});
  return out;
}

}  // namespace nasgw::daemon
