#include "daemon/locks.h"

#include <algorithm>

#include "base/assert.h"
#include "base/mutex.h"

namespace nasgw::daemon {

using proto::LockRange;

namespace {

// Erases the entries of one session from a map keyed by LockOwner (sorted
// by session first, so they are one run).
template <typename Map>
size_t EraseSession(Map& m, uint64_t session) {
  auto first = m.lower_bound(LockOwner{session, 0});
  auto last = first;
  size_t n = 0;
  while (last != m.end() && last->first.session == session) {
    ++last;
    n++;
  }
  m.erase(first, last);
  return n;
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

LockResult LockTable::Lock(const LockFile& file, const LockOwner& who, const LockRange& lock, HeldLock* conflict,
                           bool reclaim) {
  NASGW_ASSERT(lock.start <= lock.end);
  NASGW_ASSERT(lock.type == proto::kLockRead || lock.type == proto::kLockWrite);
  MutexLock l(mu_);
  if (reclaim) {
    const LockResult y = YieldDetached(file, who, lock, conflict);
    if (y != LockResult::kOk) return y;
  }
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

LockResult LockTable::YieldDetached(const LockFile& file, const LockOwner& who, const LockRange& lock,
                                    HeldLock* conflict) {
  auto f = files_.find(file);
  if (f == files_.end()) return LockResult::kOk;
  // Every conflicting owner first: one of an attached session refuses the
  // reclaim before anything is taken from the others.
  std::vector<LockOwner> yield;
  bool refused = false;
  HeldLock best;
  for (const auto& [owner, ranges] : f->second.owners) {
    if (owner == who) continue;
    for (const LockRange& r : ranges) {
      if (!proto::Conflicts(r, lock)) continue;
      if (detached_.contains(owner.session)) {
        yield.push_back(owner);
      } else if (!refused || r.start < best.range.start) {
        best = {owner, r};
        refused = true;
      }
      break;  // an owner's later ranges start later
    }
  }
  if (refused) {
    if (conflict != nullptr) *conflict = best;
    return LockResult::kConflict;
  }
  for (const LockOwner& owner : yield) {
    f = files_.find(file);  // a Commit that empties the file erases it
    std::vector<LockRange> ranges = f->second.owners.at(owner);
    proto::RemoveLockRange(ranges, lock.start, lock.end);
    const LockResult r = Commit(file, owner, std::move(ranges));
    if (r != LockResult::kOk) return r;  // a split past the limits: the reclaim is refused (ENOLCK)
  }
  return LockResult::kOk;
}

void LockTable::SetAttached(uint64_t session, bool attached) {
  MutexLock l(mu_);
  if (attached) {
    detached_.erase(session);
  } else {
    detached_.insert(session);
  }
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

namespace {

// Whether an operation (write: changes data or size) or a new lease
// (write: kLeaseWrite) contends with a held lease of type `held`.
bool Contends(bool write, uint32_t held) {
  return write || (held & proto::kLeaseWrite) != 0;
}

}  // namespace

LockResult LockTable::SetLease(const LockFile& file, const LockOwner& who, const std::string& domain, uint32_t type,
                               HeldLease* conflict) {
  NASGW_ASSERT(proto::LeaseTypeOk(type));
  MutexLock l(mu_);
  auto fit = files_.find(file);
  if (fit == files_.end() && type == 0) return LockResult::kOk;
  if (type != 0 && fit != files_.end()) {
    for (const auto& [owner, held] : fit->second.leases) {
      if (owner == who || held.domain == domain) continue;
      if (Contends((type & proto::kLeaseWrite) != 0, held.type)) {
        if (conflict != nullptr) {
          *conflict = {owner, held.type, held.domain, held.recalled_ns != 0, held.break_to};
        }
        return LockResult::kConflict;
      }
    }
  }
  File& f = files_[file];
  auto it = f.leases.find(who);
  const size_t before = it == f.leases.end() ? 0 : 1;
  if (!Account(file, who, before, type == 0 ? 0 : 1)) {
    if (f.empty()) files_.erase(file);
    return LockResult::kNoLocks;
  }
  if (type == 0) {
    if (it != f.leases.end()) {
      f.leases.erase(it);
      leases_--;
    }
    if (f.empty()) files_.erase(file);
    return LockResult::kOk;
  }
  if (it == f.leases.end()) {
    f.leases[who] = Lease{type, domain, 0, 0};
    leases_++;
    return LockResult::kOk;
  }
  Lease& lease = it->second;
  lease.type = type;
  lease.domain = domain;
  if (lease.recalled_ns != 0 && (type & ~lease.break_to) == 0) lease.recalled_ns = 0;  // given back
  return LockResult::kOk;
}

bool LockTable::Contend(const LockFile& file, const std::string& domain, bool write, uint64_t now_ns,
                        std::vector<RecallNote>* recall, std::vector<HeldLease>* revoked) {
  if (leases_.load() == 0) return false;
  MutexLock l(mu_);
  auto fit = files_.find(file);
  if (fit == files_.end()) return false;
  File& f = fit->second;
  bool wait = false;
  const uint64_t timeout_ns = static_cast<uint64_t>(limits_.lease_break_ms) * 1'000'000;
  for (auto it = f.leases.begin(); it != f.leases.end();) {
    Lease& lease = it->second;
    if (lease.domain == domain || !Contends(write, lease.type)) {
      ++it;
      continue;
    }
    const uint32_t break_to = write ? 0 : proto::kLeaseRead;
    if (lease.recalled_ns == 0) {
      lease.recalled_ns = std::max<uint64_t>(now_ns, 1);
      lease.break_to = break_to;
      recall->push_back({it->first, break_to});
    } else if (now_ns - lease.recalled_ns > timeout_ns) {
      revoked->push_back({it->first, lease.type, lease.domain, true, lease.break_to});
      const LockOwner who = it->first;
      it = f.leases.erase(it);
      leases_--;
      const bool accounted = Account(file, who, 1, 0);  // a removal always fits
      NASGW_ASSERT(accounted);
      continue;
    } else {
      lease.break_to &= break_to;  // a write after a read's recall: nothing may stay
    }
    wait = true;
    ++it;
  }
  if (f.empty()) files_.erase(fit);
  return wait;
}

void LockTable::ReleaseSession(uint64_t session) {
  MutexLock l(mu_);
  detached_.erase(session);
  auto s = sessions_.find(session);
  if (s == sessions_.end()) return;
  for (const auto& [file, n] : s->second.files) {
    auto f = files_.find(file);
    NASGW_ASSERT(f != files_.end());
    // Owners sort by session first: the session's owners are one run.
    EraseSession(f->second.owners, session);
    EraseSession(f->second.shares, session);
    leases_ -= EraseSession(f->second.leases, session);
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

template <typename T, typename Fn>
std::vector<T> LockTable::Collect(const LockFile& file, Fn add) const {
  MutexLock l(mu_);
  std::vector<T> out;
  auto f = files_.find(file);
  if (f != files_.end()) add(f->second, out);
  return out;
}

std::vector<HeldLock> LockTable::Locks(const LockFile& file) const {
  return Collect<HeldLock>(file, [](const File& f, std::vector<HeldLock>& out) {
    for (const auto& [owner, ranges] : f.owners) {
      for (const LockRange& r : ranges) out.push_back({owner, r});
    }
  });
}

std::vector<HeldLease> LockTable::Leases(const LockFile& file) const {
  return Collect<HeldLease>(file, [](const File& f, std::vector<HeldLease>& out) {
    for (const auto& [owner, lease] : f.leases) {
      out.push_back({owner, lease.type, lease.domain, lease.recalled_ns != 0, lease.break_to});
    }
  });
}

std::vector<HeldShare> LockTable::Shares(const LockFile& file) const {
  return Collect<HeldShare>(file, [](const File& f, std::vector<HeldShare>& out) {
    for (const auto& [owner, mode] : f.shares) out.push_back({owner, mode});
  });
}

}  // namespace nasgw::daemon
