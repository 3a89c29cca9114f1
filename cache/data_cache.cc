#include "cache/data_cache.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <thread>
#include <vector>

#include "base/clock.h"
#include "base/log.h"
#include "base/log_limit.h"

namespace nasgw::cache {

namespace {

// Dirty ranges of one file: offset -> bytes, sorted, never overlapping.
using Ranges = std::map<uint64_t, std::vector<uint8_t>>;

uint64_t EndOf(const Ranges& r) {
  if (r.empty()) return 0;
  const auto& last = *r.rbegin();
  return last.first + last.second.size();
}

// Puts [off, off+n) over whatever `r` holds there; returns how many bytes
// `r` grew by (the new bytes minus those they replaced).
int64_t Put(Ranges& r, uint64_t off, const uint8_t* data, size_t n) {
  const uint64_t end = off + n;
  int64_t grew = static_cast<int64_t>(n);
  // The ranges that overlap [off, end): cut or remove them.
  auto it = r.upper_bound(off);
  if (it != r.begin()) {
    auto prev = std::prev(it);
    const uint64_t pend = prev->first + prev->second.size();
    if (pend > off) {
      if (pend > end) {
        // `prev` holds all of [off, end): overwrite in place.
        std::memcpy(prev->second.data() + (off - prev->first), data, n);
        return 0;
      }
      grew -= static_cast<int64_t>(pend - off);
      prev->second.resize(off - prev->first);  // keeps [prev, off)
      if (prev->second.empty()) r.erase(prev);
    }
  }
  it = r.lower_bound(off);
  while (it != r.end() && it->first < end) {
    const uint64_t iend = it->first + it->second.size();
    if (iend <= end) {
      grew -= static_cast<int64_t>(it->second.size());
      it = r.erase(it);
      continue;
    }
    // Keeps [end, iend) of it.
    grew -= static_cast<int64_t>(end - it->first);
    std::vector<uint8_t> tail(it->second.begin() + static_cast<std::ptrdiff_t>(end - it->first), it->second.end());
    r.erase(it);
    r.emplace(end, std::move(tail));
    break;
  }
  // Joins the range that ends at off (appending is amortised, so a
  // sequential stream costs one copy), up to the join limit.
  auto at = r.end();
  it = r.lower_bound(off);
  if (it != r.begin()) {
    auto prev = std::prev(it);
    if (prev->first + prev->second.size() == off && prev->second.size() + n <= limits::kCacheRangeBytesMax) {
      prev->second.insert(prev->second.end(), data, data + n);
      at = prev;
    }
  }
  if (at == r.end()) at = r.emplace(off, std::vector<uint8_t>(data, data + n)).first;
  auto next = std::next(at);
  if (next != r.end() && next->first == end && at->second.size() + next->second.size() <= limits::kCacheRangeBytesMax) {
    at->second.insert(at->second.end(), next->second.begin(), next->second.end());
    r.erase(next);
  }
  return grew;
}

// Blocks (fs::kDataBlockBytes) that have space reserved: first -> end,
// sorted, never overlapping or touching.
using Blocks = std::map<uint64_t, uint64_t>;

// How many of blocks [first, end) `b` does not cover yet.
uint64_t Uncovered(const Blocks& b, uint64_t first, uint64_t end) {
  uint64_t n = end - first;
  auto it = b.upper_bound(first);
  if (it != b.begin()) it = std::prev(it);
  for (; it != b.end() && it->first < end; ++it) {
    const uint64_t lo = std::max(first, it->first), hi = std::min(end, it->second);
    if (lo < hi) n -= hi - lo;
  }
  return n;
}

// Adds blocks [first, end) to `b`.
void Cover(Blocks& b, uint64_t first, uint64_t end) {
  auto it = b.upper_bound(first);
  if (it != b.begin() && std::prev(it)->second >= first) it = std::prev(it);
  while (it != b.end() && it->first <= end) {
    first = std::min(first, it->first);
    end = std::max(end, it->second);
    it = b.erase(it);
  }
  b.emplace(first, end);
}

// The blocks a range of bytes touches.
std::pair<uint64_t, uint64_t> BlocksOf(uint64_t off, uint64_t n) {
  return {off / fs::kDataBlockBytes, (off + n + fs::kDataBlockBytes - 1) / fs::kDataBlockBytes};
}

uint64_t BytesOf(const Ranges& r) {
  uint64_t b = 0;
  for (const auto& [o, v] : r) b += v.size();
  return b;
}

// Copies what `r` holds of [off, off+n) into out (out[0] is file offset off);
// returns the bytes it holds there (out null: only counts them).
uint64_t CopyOut(const Ranges& r, uint64_t off, size_t n, uint8_t* out) {
  uint64_t copied = 0;
  const uint64_t end = off + n;
  auto it = r.upper_bound(off);
  if (it != r.begin()) it = std::prev(it);
  for (; it != r.end() && it->first < end; ++it) {
    const uint64_t from = std::max(off, it->first), to = std::min(end, it->first + it->second.size());
    if (from >= to) continue;
    if (out != nullptr) std::memcpy(out + (from - off), it->second.data() + (from - it->first), to - from);
    copied += to - from;
  }
  return copied;
}

}  // namespace

struct DataCache::File {
  explicit File(Key k) : key(k) {}
  const Key key;
  Mutex flush_mu;  // one flush (or flush-then-change) of this file at a time
  Mutex mu;
  uint64_t gen GUARDED_BY(mu) = 0;
  Ranges dirty GUARDED_BY(mu);     // newest; written by no flush yet
  Ranges flushing GUARDED_BY(mu);  // being written by the flush in progress
  fs::Timespec mtime GUARDED_BY(mu);
  uint64_t since_ns GUARDED_BY(mu) = 0;   // monotonic time dirty became non-empty
  uint64_t flush_seq GUARDED_BY(mu) = 0;  // flushes completed (reads retry across one)
  // Space set aside in the domain for the flush of the dirty data: a block
  // for each block it touches (a flush writes whole blocks).
  Blocks blocks GUARDED_BY(mu);
  uint64_t reserved GUARDED_BY(mu) = 0;
  // Writes held in dirty and in flushing: the change attribute a client is
  // shown counts them (NFSv4 clients and FSAL_NASGW's reply ordering go by
  // it), and a flush adds them to the committed one.
  uint64_t writes_dirty GUARDED_BY(mu) = 0;
  uint64_t writes_flushing GUARDED_BY(mu) = 0;
  bool retired GUARDED_BY(mu) = false;  // out of files_: make a new File
  // Stable writes held in dirty and flushing that are in the intent log
  // (fs::Domain::AppendLogWrite): the newest one's LSN, which the flush that
  // takes them names, and (roughly) the oldest, for the flusher's order.
  uint64_t log_last GUARDED_BY(mu) = 0;
  uint64_t log_first GUARDED_BY(mu) = 0;
  // The byte ranges [start, end) of dirty (flushing) written by writes that
  // are not in the intent log: what a COMMIT logs (Commit), or flushes.
  // Logged bytes stay dirty until the flusher puts them in place; a COMMIT
  // logs each byte once.
  Blocks unlogged GUARDED_BY(mu);
  Blocks unlogged_flushing GUARDED_BY(mu);
};

Status DataCacheOptions::Validate() const {
  if (memory_bytes < limits::kCacheMemoryBytesMin || memory_bytes > limits::kCacheMemoryBytesMax) {
    return Status::InvalidArgument("cache memory_bytes must be " + std::to_string(limits::kCacheMemoryBytesMin) + ".." +
                                   std::to_string(limits::kCacheMemoryBytesMax));
  }
  if (dirty_bytes > memory_bytes / 2) {
    return Status::InvalidArgument("cache dirty_bytes (" + std::to_string(dirty_bytes) +
                                   ") must be at most half of memory_bytes (" + std::to_string(memory_bytes) + ")");
  }
  if (read_ahead_bytes > limits::kReadAheadBytesMax) {
    return Status::InvalidArgument("cache read_ahead_bytes must be 0.." + std::to_string(limits::kReadAheadBytesMax));
  }
  if (dirty_bytes < limits::kCacheDirtyBytesMin || dirty_bytes > limits::kCacheDirtyBytesMax) {
    return Status::InvalidArgument("cache dirty_bytes must be " + std::to_string(limits::kCacheDirtyBytesMin) + ".." +
                                   std::to_string(limits::kCacheDirtyBytesMax));
  }
  if (flush_after_ms < limits::kCacheFlushAfterMsMin || flush_after_ms > limits::kCacheFlushAfterMsMax) {
    return Status::InvalidArgument("cache flush_after_ms must be " + std::to_string(limits::kCacheFlushAfterMsMin) +
                                   ".." + std::to_string(limits::kCacheFlushAfterMsMax));
  }
  if (stall_timeout_ms < limits::kCacheStallTimeoutMsMin || stall_timeout_ms > limits::kCacheStallTimeoutMsMax) {
    return Status::InvalidArgument("cache stall_timeout_ms must be " + std::to_string(limits::kCacheStallTimeoutMsMin) +
                                   ".." + std::to_string(limits::kCacheStallTimeoutMsMax));
  }
  if (flush_bytes_max == 0 || flush_bytes_max > limits::kCacheFlushBytesMax) {
    return Status::InvalidArgument("cache flush_bytes_max must be 1.." + std::to_string(limits::kCacheFlushBytesMax));
  }
  if (log_slow_ms > limits::kLogSlowMsMax) {
    return Status::InvalidArgument("cache log_slow_ms must be 0.." + std::to_string(limits::kLogSlowMsMax));
  }
  return Status();
}

DataCache::DataCache(std::weak_ptr<fs::Domain> domain, const DataCacheOptions& o)
    : domain_(std::move(domain)), o_(o), rc_(o.memory_bytes, o.read_ahead_bytes, [this] { return dirty_.load(); }) {
  // Several flusher threads (kFlushesInFlight), each taking due files the
  // others are not flushing. The first writes what is due; the others help
  // while the cache is over half full (or the intent log fills): then one
  // file's flush stuck in the array holds up no other file's, and the
  // streams of several files reach the array together. Below that they
  // stay out of the way of the clients' requests.
  for (uint32_t i = 0; i < limits::kFlushesInFlight; i++) {
    flushers_.emplace_back([this, i] { FlusherLoop(/*helper=*/i > 0); });
  }
  if (o_.read_ahead_bytes > 0) {
    for (uint32_t i = 0; i < limits::kReadAheadThreads; i++) ahead_threads_.emplace_back([this] { AheadLoop(); });
  }
}

DataCache::~DataCache() {
  Close().IgnoreError();  // logged by FlushAll
}

std::shared_ptr<DataCache::File> DataCache::Find(Key k) const {
  MutexLock l(mu_);
  auto it = files_.find(k);
  return it == files_.end() ? nullptr : it->second;
}

std::shared_ptr<DataCache::File> DataCache::FindOrMake(Key k, uint64_t gen) {
  MutexLock l(mu_);
  auto& f = files_[k];
  if (f == nullptr) {
    f = std::make_shared<File>(k);
    MutexLock fl(f->mu);
    f->gen = gen;
  }
  return f;
}

Status DataCache::Admit() {
  MutexLock l(mu_);
  if (dirty_.load() < o_.dirty_bytes) return Status();
  c_.stalls++;
  flusher_cv_.NotifyAll();
  const bool room = space_cv_.WaitFor(mu_, std::chrono::milliseconds(o_.stall_timeout_ms),
                                      [&]() REQUIRES(mu_) { return dirty_.load() < o_.dirty_bytes || stop_; });
  if (room) return Status();
  c_.stall_timeouts++;
  return Status::Busy("the write-back cache is full (" + std::to_string(dirty_.load()) +
                      " dirty bytes) and flushes did not make room within " + std::to_string(o_.stall_timeout_ms) +
                      " ms");
}

bool DataCache::WaitClean(uint32_t timeout_ms) {
  MutexLock l(mu_);
  // Release() notifies space_cv_ whenever dirty bytes go.
  return space_cv_.WaitFor(mu_, std::chrono::milliseconds(timeout_ms),
                           [&]() REQUIRES(mu_) { return dirty_.load() == 0; });
}

void DataCache::Release(uint64_t bytes) {
  if (bytes == 0) return;
  dirty_.fetch_sub(bytes);
  MutexLock l(mu_);
  space_cv_.NotifyAll();
}

Result<fs::Attr> DataCache::Write(uint32_t vol, const fs::Attr& a, uint64_t off, const void* data, size_t n,
                                  bool stable, bool* stable_out) {
  *stable_out = false;
  if (n > limits::kCacheWriteBytesMax) return Status::InvalidArgument("write larger than the cache takes at once");
  if (off > fs::kFileSizeMax || n > fs::kFileSizeMax - off) return Status::OutOfRange("file would exceed 2^63 bytes");
  if (a.type == fs::FileType::kDirectory) return Status(Code::kIsDir, "is a directory");
  if (a.type != fs::FileType::kRegular) return Status::InvalidArgument("not a regular file");
  auto d = domain_.lock();
  if (d == nullptr) return Status::Unavailable("the domain is closed");
  // Strict mode, node-wide or for this volume: every write to its place
  // before the answer, nothing to the log.
  const bool strict = o_.write_through || d->VolumeWriteThrough(vol);
  bool through = stable || strict;
  {
    MutexLock l(mu_);
    through = through || closed_;
  }
  // The answer's attributes are loaded again after the write: `a` may
  // predate a flush that ended since, and a head passes them with the dirty
  // data already laid over (overlaying them again would count the cached
  // writes twice in the change attribute, which must never go back).
  auto shown = [&]() -> Result<fs::Attr> {
    return Shown(vol, [&]() -> Result<fs::Attr> {
      auto now = d->GetAttr(vol, a.ino);
      if (now.ok() && now->gen != a.gen) return Status(Code::kStale, "inode " + std::to_string(a.ino) + " was reused");
      return now;
    });
  };
  if (n == 0) return shown();
  // A small stable write goes to the intent log (one array write shared by
  // everyone waiting then) and stays dirty here until the flusher puts it
  // in place; a large one, or one the log has no room for now, is flushed
  // with the file before the answer.
  size_t logged = 0;
  if (stable && !strict && o_.log_stable_writes && n <= limits::kLogWriteBytesMax) {
    if (o_.log_slow_ms != 0 && d->log_recent_write_ns() > uint64_t{o_.log_slow_ms} * 1'000'000) {
      c_.writes_log_slow++;  // the log's records queue behind a busy array link
    } else if (d->ReserveLogWrite(n).ok()) {
      logged = n;
    }
  }
  auto unlog = [&] {
    if (logged != 0) d->UnreserveLogWrite(logged);
  };
  if (!through || logged != 0) {
    if (Status s = Admit(); !s.ok()) {
      unlog();
      return s;
    }
    MutexLock l(mu_);
    if (closed_) {
      // Closed while this writer waited: nothing flushes later.
      through = true;
      unlog();
      logged = 0;
    }
  }
  const Key k{vol, a.ino};
  const auto* bytes = static_cast<const uint8_t*>(data);
  std::shared_ptr<File> f;
  uint64_t freed = 0, lsn = 0;
  bool trim = false;
  for (;;) {
    f = FindOrMake(k, a.gen);
    MutexLock l(f->mu);
    if (f->retired) continue;  // emptied and dropped as we found it
    if (f->gen != a.gen) {
      // A file of this number that is gone (its flush would be Stale).
      freed += BytesOf(f->dirty);
      c_.flush_dropped += BytesOf(f->dirty);
      f->dirty.clear();
      d->ReleaseSpace(f->reserved);
      f->reserved = 0;
      f->blocks.clear();
      if (f->log_last != 0) d->ForgetLogWrites(vol, a.ino, f->gen);
      f->log_last = f->log_first = 0;
      f->unlogged.clear();
      f->gen = a.gen;
    }
    // Space for the blocks this write touches first: a write the volume
    // has no room for is refused now (ENOSPC), never lost at its flush.
    const auto [first, end] = BlocksOf(off, n);
    if (const uint64_t fresh = Uncovered(f->blocks, first, end); fresh > 0) {
      const uint64_t need = fresh * fs::kDataBlockBytes;
      if (Status s = d->ReserveSpace(need); !s.ok()) {
        c_.no_space++;
        l.Unlock();
        unlog();
        Release(freed);
        Retire(f);  // made for this write, perhaps: not kept empty
        return s;
      }
      f->reserved += need;
      Cover(f->blocks, first, end);
    }
    if (f->dirty.empty()) f->since_ns = MonotonicNanos();
    const int64_t grew = Put(f->dirty, off, bytes, n);
    if (grew > 0) dirty_.fetch_add(static_cast<uint64_t>(grew));
    trim = grew > 0;
    if (grew < 0) freed += static_cast<uint64_t>(-grew);
    f->mtime = std::max(f->mtime, fs::Now());
    f->writes_dirty++;
    if (logged != 0) {
      // In the log in the order of the dirty data (under the file's lock),
      // so the flush that takes the dirty data takes exactly the logged
      // writes up to log_last.
      lsn = d->AppendLogWrite(vol, a.ino, a.gen, off, bytes, n, f->mtime);
      f->log_last = lsn;
      if (f->log_first == 0) f->log_first = lsn;
    } else {
      Cover(f->unlogged, off, off + n);
    }
    break;
  }
  Release(freed);
  if (trim) rc_.Trim();  // the clean blocks get what the dirty data leaves
  c_.bytes_written += n;
  if (logged != 0) {
    WakeFlusherIfLogFills(*d);
    // Answered once the log record holding it is on the array. A failed
    // log fails the domain; the data stays dirty for whoever can flush it.
    NASGW_RETURN_IF_ERROR(d->WaitLogged(lsn));
    c_.writes_logged++;
    *stable_out = true;
    return shown();
  }
  if (!through) {
    c_.writes_cached++;
    return shown();
  }
  c_.writes_stable++;
  NASGW_RETURN_IF_ERROR(FlushFile(f));
  *stable_out = true;
  return Shown(vol, [&] { return d->GetAttr(vol, a.ino); });
}

Result<size_t> DataCache::Read(uint32_t vol, const fs::Attr& a, uint64_t off, size_t n, void* out, uint64_t* size_out) {
  auto d = domain_.lock();
  if (d == nullptr) return Status::Unavailable("the domain is closed");
  if (a.type == fs::FileType::kDirectory) return Status(Code::kIsDir, "is a directory");
  auto* dst = static_cast<uint8_t*>(out);
  // A read that reaches the end `a` shows: the committed size now decides
  // (a flush may have ended since `a` was loaded, moving dirty bytes into
  // it). Cheap next to a read, and only at the end of a file.
  auto committed = [&](uint64_t shown_end) -> Result<uint64_t> {
    if (off + n <= shown_end) return a.size;
    auto now = d->GetAttr(vol, a.ino);
    if (!now.ok()) return now.status();
    if (now->gen != a.gen) return Status(Code::kStale, "inode " + std::to_string(a.ino) + " was reused");
    return now->size;
  };
  std::shared_ptr<File> f = Find({vol, a.ino});
  if (f == nullptr) {
    auto size = committed(a.size);
    if (!size.ok()) return size.status();
    *size_out = *size;
    if (off >= *size) return size_t{0};
    const size_t want = static_cast<size_t>(std::min<uint64_t>(n, *size - off));
    NASGW_RETURN_IF_ERROR(ReadClean(*d, vol, a, off, want, dst));
    ReadAhead(vol, a, off, want, *size);
    return want;
  }
  // The committed bytes, then the dirty ones over them. A flush that
  // completes between the two moves bytes from `flushing` into the domain
  // after the domain was read: then read again (a flush is rare next to a
  // read); the third time, hold flushes off.
  for (int attempt = 0;; attempt++) {
    std::unique_ptr<MutexLock> hold;
    if (attempt >= 2) hold = std::make_unique<MutexLock>(f->flush_mu);
    uint64_t seq = 0, dirty_end = 0;
    {
      MutexLock l(f->mu);
      seq = f->flush_seq;
      if (f->gen == a.gen) dirty_end = std::max(EndOf(f->dirty), EndOf(f->flushing));
    }
    // The file's size as the client sees it decides how much there is.
    auto base = committed(std::max(a.size, dirty_end));
    if (!base.ok()) return base.status();
    const uint64_t size = std::max(*base, dirty_end);
    *size_out = size;
    if (off >= size) return size_t{0};
    const size_t want = static_cast<size_t>(std::min<uint64_t>(n, size - off));
    NASGW_RETURN_IF_ERROR(ReadClean(*d, vol, a, off, want, dst));
    MutexLock l(f->mu);
    if (f->flush_seq != seq) continue;
    if (f->gen == a.gen) {
      c_.read_bytes_dirty += CopyOut(f->flushing, off, want, dst);
      c_.read_bytes_dirty += CopyOut(f->dirty, off, want, dst);
    }
    l.Unlock();
    hold.reset();
    ReadAhead(vol, a, off, want, size);
    return want;
  }
}

Status DataCache::ReadClean(fs::Domain& d, uint32_t vol, const fs::Attr& a, uint64_t off, uint64_t n, uint8_t* out) {
  const FileKey k{vol, a.snap, a.ino};
  for (int attempt = 0;; attempt++) {
    ReadCache::Fill fill;
    const auto [first, end] = rc_.Get(k, a.gen, off, n, out, &fill);
    if (first == end) return Status();
    // Blocks a read-ahead is fetching now: wait for them rather than fetch
    // them twice over the array link.
    if (attempt == 0 && rc_.WaitAhead(k, first, end, limits::kReadAheadWaitMs)) continue;
    std::vector<uint8_t> buf(static_cast<size_t>(end - first));
    auto got = d.Read(vol, a.ino, first, buf.size(), buf.data());
    if (!got.ok()) return got.status();
    // Past the committed end: zeros (dirty data, if any, lies over them).
    if (*got < buf.size()) std::memset(buf.data() + *got, 0, buf.size() - *got);
    const uint64_t from = std::max(off, first), to = std::min(off + n, end);
    std::memcpy(out + (from - off), buf.data() + (from - first), to - from);
    rc_.Insert(fill, a.gen, first, buf.data(), *got, false);
    return Status();
  }
}

void DataCache::ReadAhead(uint32_t vol, const fs::Attr& a, uint64_t off, uint64_t n, uint64_t size) {
  if (o_.read_ahead_bytes == 0) return;
  ReadCache::Ahead span = rc_.Sequential({vol, a.snap, a.ino}, a.gen, off, n, size);
  if (span.first == span.end) return;
  AheadTask dropped;
  {
    MutexLock l(mu_);
    if (!stop_ && ahead_q_.size() < limits::kReadAheadQueueMax) {
      ahead_q_.push_back({vol, a, std::move(span)});
      ahead_cv_.NotifyOne();
      return;
    }
    dropped.span = std::move(span);  // its reads fetch it themselves
  }
  rc_.AheadDone({vol, a.snap, a.ino}, dropped.span.first, dropped.span.end);
}

void DataCache::AheadLoop() {
  MutexLock l(mu_);
  for (;;) {
    while (ahead_q_.empty() && !stop_) ahead_cv_.Wait(mu_);
    if (ahead_q_.empty()) return;  // stopped, and nothing queued is left
    {
      AheadTask t = std::move(ahead_q_.front());
      ahead_q_.pop_front();
      const bool stopping = stop_;
      l.Unlock();
      const FileKey k{t.vol, t.a.snap, t.a.ino};
      if (auto d = domain_.lock(); d != nullptr && !stopping) {
        std::vector<uint8_t> buf(static_cast<size_t>(t.span.end - t.span.first));
        auto got = d->Read(t.vol, t.a.ino, t.span.first, buf.size(), buf.data());
        // A failed read-ahead is nobody's error: the reads themselves retry.
        if (got.ok()) rc_.Insert(t.span.fill, t.a.gen, t.span.first, buf.data(), *got, true);
      }
      rc_.AheadDone(k, t.span.first, t.span.end);
      t.span.fill = ReadCache::Fill();  // before mu_ (ReadCache's lock is the leaf)
      l.Lock();
    }
  }
}

Result<fs::Attr> DataCache::Shown(uint32_t vol, const std::function<Result<fs::Attr>()>& load) const {
  for (int attempt = 0;; attempt++) {
    const uint64_t e = epoch_.load();
    auto a = load();
    if (!a.ok()) return a;
    fs::Attr shown = Overlay(vol, *a);
    if (epoch_.load() == e) return shown;
    // Flushes of other files end all the time under load: from the third
    // try, hold this file's flushes off while loading (as Read does), so
    // the loop ends. A file with no cache state has nothing to hold.
    if (attempt < 2) continue;
    if (std::shared_ptr<File> f = Find({vol, a->ino})) {
      MutexLock hold(f->flush_mu);
      a = load();
      if (!a.ok()) return a;
      return Overlay(vol, *a);
    }
  }
}

fs::Attr DataCache::Overlay(uint32_t vol, fs::Attr a) const {
  std::shared_ptr<File> f = Find({vol, a.ino});
  if (f == nullptr) return a;
  MutexLock l(f->mu);
  if (f->gen != a.gen || (f->dirty.empty() && f->flushing.empty())) return a;
  a.size = std::max({a.size, EndOf(f->dirty), EndOf(f->flushing)});
  a.mtime = std::max(a.mtime, f->mtime);
  a.ctime = std::max(a.ctime, f->mtime);
  a.change += f->writes_dirty + f->writes_flushing;
  return a;
}

Status DataCache::FlushFile(const std::shared_ptr<File>& f) {
  MutexLock fl(f->flush_mu);
  const auto [vol, ino] = f->key;
  uint64_t gen = 0, held = 0, writes = 0, log_last = 0;
  fs::Timespec mtime;
  std::vector<fs::WritePiece> pieces;
  {
    MutexLock l(f->mu);
    if (f->dirty.empty()) {
      const bool idle = f->flushing.empty() && f->reserved == 0;
      l.Unlock();
      if (idle) Retire(f);
      return Status();
    }
    f->flushing = std::move(f->dirty);
    f->dirty.clear();
    f->unlogged_flushing = std::move(f->unlogged);
    f->unlogged.clear();
    writes = f->writes_dirty;
    f->writes_flushing = writes;
    f->writes_dirty = 0;
    gen = f->gen;
    mtime = f->mtime;
    log_last = f->log_last;  // every logged write now in flushing
    // The reservation goes with the data; writes from now on reserve anew.
    held = f->reserved;
    f->blocks.clear();
    f->reserved = 0;
    // Only this flush changes `flushing` (under flush_mu): the pieces stay
    // valid while it writes them, and readers only read them.
    for (const auto& [o, v] : f->flushing) {
      for (uint64_t at = 0; at < v.size(); at += o_.flush_bytes_max) {
        const auto k = static_cast<size_t>(std::min<uint64_t>(o_.flush_bytes_max, v.size() - at));
        pieces.push_back({o + at, v.data() + at, k});
      }
    }
  }
  // In transactions of about flush_bytes_max, cut only between blocks (a
  // block written by two transactions would need its space twice). Each
  // transaction bumps the change attribute by one, the last by what is left
  // of the writes, so it ends where the overlay showed it.
  const auto block_of = [](uint64_t off) { return off / fs::kDataBlockBytes; };
  Status s;
  auto d = domain_.lock();
  if (d == nullptr) s = Status::Unavailable("the domain is closed");
  size_t i = 0;
  uint64_t batches = 0;
  while (s.ok() && i < pieces.size()) {
    size_t j = i;
    uint64_t bytes = 0;
    while (j < pieces.size()) {
      const bool same_block = j > i && block_of(pieces[j].off) == block_of(pieces[j - 1].off + pieces[j - 1].n - 1);
      if (j > i && !same_block && bytes + pieces[j].n > o_.flush_bytes_max) break;
      bytes += pieces[j++].n;
    }
    std::vector<fs::WritePiece> batch(pieces.begin() + static_cast<std::ptrdiff_t>(i),
                                      pieces.begin() + static_cast<std::ptrdiff_t>(j));
    const bool last = j == pieces.size();
    const uint64_t changes = last && writes > batches ? writes - batches : 1;
    const uint64_t t0 = MonotonicNanos();
    // The last transaction tells the log the file's logged writes are in place.
    auto r = d->WriteV(vol, ino, gen, batch, mtime, &held, changes, last ? log_last : 0);
    c_.flush_nanos += MonotonicNanos() - t0;
    if (!r.ok()) {
      s = r.status();
      break;
    }
    // On the SAN now: the read cache holds the new bytes (before they leave
    // `flushing`, so no read finds neither).
    for (const auto& p : batch) rc_.Update({vol, 0, ino}, gen, p.off, p.data, p.n);
    batches++;
    c_.flushes++;
    c_.flush_bytes += bytes;
    i = j;
  }
  // A file that is gone (or a domain that is) takes its dirty data with it.
  const bool gone = !s.ok() && (s.code() == Code::kStale || s.code() == Code::kNotFound || d == nullptr);
  uint64_t freed = 0;
  bool empty = false;
  {
    MutexLock l(f->mu);
    const uint64_t before = BytesOf(f->flushing) + BytesOf(f->dirty);
    if (s.ok() || gone) {
      if (gone) {
        c_.flush_dropped += BytesOf(f->flushing);
        if (d != nullptr) d->ForgetLogWrites(vol, ino, gen);
      }
      if (f->log_last == log_last || gone) {
        f->log_last = f->log_first = 0;
      } else {
        f->log_first = log_last + 1;  // the older ones are in place
      }
    } else {
      // What no transaction committed goes back under what was written
      // since, with its blocks' reservation topped up again (a failed
      // transaction's extents went back to free space): tried again later.
      Ranges back;
      Blocks blocks = f->blocks;
      uint64_t want = 0;
      for (size_t k = i; k < pieces.size(); k++) {
        Put(back, pieces[k].off, pieces[k].data, pieces[k].n);
        const auto [first, end] = BlocksOf(pieces[k].off, pieces[k].n);
        want += Uncovered(blocks, first, end) * fs::kDataBlockBytes;
        Cover(blocks, first, end);
      }
      for (const auto& [o, v] : f->dirty) Put(back, o, v.data(), v.size());
      f->dirty = std::move(back);
      for (const auto& [from, to] : f->unlogged_flushing) Cover(f->unlogged, from, to);
      if (want > held) {
        // Best effort: if the space went meanwhile, the retry reserves it.
        if (d->ReserveSpace(want - held).ok()) held = want;
      }
      f->blocks = std::move(blocks);
      f->reserved += held;
      held = 0;
      f->writes_dirty += writes > batches ? writes - batches : 1;
    }
    f->flushing.clear();
    f->unlogged_flushing.clear();
    f->writes_flushing = 0;
    epoch_.fetch_add(1);
    freed = before - BytesOf(f->dirty);
    f->flush_seq++;
    empty = f->dirty.empty() && f->reserved == 0;
  }
  Release(freed);
  if (held > 0 && d != nullptr) d->ReleaseSpace(held);
  if (empty) Retire(f);
  if (!s.ok() && !gone) {
    c_.flush_errors++;
    if (auto rep = flush_log_.Add("flush", MonotonicNanos(), s.ToString())) {
      NASGW_LOG(kWarn, "cache") << "flush failed; the data stays dirty" << Kv("volume", vol) << Kv("ino", ino)
                                << Kv("failures", rep->count) << Kv("error", rep->note);
    }
    return s;
  }
  return gone && d == nullptr ? s : Status();
}

Status DataCache::Flush(uint32_t vol, uint64_t ino) {
  std::shared_ptr<File> f = Find({vol, ino});
  if (f == nullptr) return Status();
  return FlushFile(f);
}

void DataCache::WakeFlusherIfLogFills(fs::Domain& d) {
  if (d.log_fill_pct() < limits::kLogWriteFlushPct) return;
  // Logged writes hold the log's checkpoint back: put them in place now.
  MutexLock l(mu_);
  flusher_cv_.NotifyAll();
}

Status DataCache::Commit(uint32_t vol, uint64_t ino) {
  std::shared_ptr<File> f = Find({vol, ino});
  if (f == nullptr) return Status();
  auto d = domain_.lock();
  if (d != nullptr && !o_.write_through && o_.log_commits && !d->VolumeWriteThrough(vol)) {
    auto lsn = LogDirty(*d, *f);
    if (lsn.ok()) {
      if (*lsn != 0) {
        WakeFlusherIfLogFills(*d);
        // A failed log fails the domain; the data stays dirty.
        NASGW_RETURN_IF_ERROR(d->WaitLogged(*lsn));
      }
      c_.commits_logged++;
      return Status();
    }
  }
  c_.commits_flushed++;
  return FlushFile(f);
}

Result<uint64_t> DataCache::LogDirty(fs::Domain& d, File& f) {
  // No flush of the file runs meanwhile: what is dirty is all there is, and
  // the next flush names the LSNs logged here (log_last).
  MutexLock fl(f.flush_mu);
  MutexLock l(f.mu);
  if (f.unlogged.empty()) return f.log_last;  // everything dirty is logged (or nothing is dirty)
  uint64_t bytes = 0;
  for (const auto& [s, e] : f.unlogged) bytes += e - s;
  const uint64_t most = d.log_mirror_answers() ? limits::kCommitLogBytesMax : limits::kLogWriteBytesMax;
  if (bytes > most) return Status::NotSupported("more dirty data than a commit logs");
  if (o_.log_slow_ms != 0 && d.log_recent_write_ns() > uint64_t{o_.log_slow_ms} * 1'000'000) {
    c_.writes_log_slow++;
    return Status::NotSupported("the intent log is slow");
  }
  // The unlogged ranges in pieces a log entry takes, each dirty (no flush
  // runs, so flushing is empty) and with its log space.
  std::vector<std::pair<uint64_t, size_t>> pieces;
  auto give_back = [&] {
    for (const auto& p : pieces) d.UnreserveLogWrite(p.second);
  };
  for (const auto& [s, e] : f.unlogged) {
    for (uint64_t at = s; at < e; at += limits::kLogWriteBytesMax) {
      const auto n = static_cast<size_t>(std::min<uint64_t>(limits::kLogWriteBytesMax, e - at));
      if (CopyOut(f.dirty, at, n, nullptr) != n) {
        // A flush that failed part way put back its unlogged ranges, some
        // of them now in place: this COMMIT flushes instead.
        give_back();
        return Status::FailedPrecondition("unlogged bytes that are not dirty");
      }
      if (Status st = d.ReserveLogWrite(n); !st.ok()) {
        give_back();
        return Status::NotSupported("no room in the intent log: " + st.ToString());
      }
      pieces.emplace_back(at, n);
    }
  }
  const auto [vol, ino] = f.key;
  std::vector<uint8_t> buf(limits::kLogWriteBytesMax);
  uint64_t lsn = 0;
  for (const auto& [off, n] : pieces) {
    CopyOut(f.dirty, off, n, buf.data());
    lsn = d.AppendLogWrite(vol, ino, f.gen, off, buf.data(), n, f.mtime);
    if (f.log_first == 0) f.log_first = lsn;
  }
  if (lsn != 0) f.log_last = lsn;
  f.unlogged.clear();
  return f.log_last;
}

Result<fs::Attr> DataCache::SetAttrs(uint32_t vol, uint64_t ino, const fs::SetAttr& s) {
  auto d = domain_.lock();
  if (d == nullptr) return Status::Unavailable("the domain is closed");
  NASGW_RETURN_IF_ERROR(Flush(vol, ino));
  auto r = d->SetAttrs(vol, ino, s);
  // Cut blocks leave the read cache, and reads begun before cache nothing
  // (also when the change failed: it may have reached the SAN).
  if (s.set_size) rc_.Drop({vol, 0, ino});
  return r;
}

Result<fs::Attr> DataCache::Fallocate(uint32_t vol, uint64_t ino, uint32_t mode, uint64_t off, uint64_t len) {
  auto d = domain_.lock();
  if (d == nullptr) return Status::Unavailable("the domain is closed");
  NASGW_RETURN_IF_ERROR(Flush(vol, ino));
  auto r = d->Fallocate(vol, ino, mode, off, len);
  rc_.Drop({vol, 0, ino});  // as SetAttrs: also when it failed
  return r;
}

Result<uint64_t> DataCache::Seek(uint32_t vol, uint64_t ino, uint64_t off, bool hole) {
  auto d = domain_.lock();
  if (d == nullptr) return Status::Unavailable("the domain is closed");
  NASGW_RETURN_IF_ERROR(Flush(vol, ino));
  return d->Seek(vol, ino, off, hole);
}

Status DataCache::FlushAll() {
  std::vector<std::shared_ptr<File>> all;
  {
    MutexLock l(mu_);
    for (const auto& [k, f] : files_) all.push_back(f);
  }
  Status first;
  for (const auto& f : all) {
    Status s = FlushFile(f);
    if (!s.ok() && first.ok()) first = s;
  }
  return first;
}

uint64_t DataCache::ForgetVolume(uint32_t vol) {
  // Shown loads attributes again across it, as across a flush.
  epoch_.fetch_add(1);
  return rc_.DropVolume(vol);
}

Status DataCache::Close() {
  {
    MutexLock l(mu_);
    if (closed_) return Status();
    closed_ = true;
  }
  Status s = FlushAll();
  {
    MutexLock l(mu_);
    stop_ = true;
    flusher_cv_.NotifyAll();
    space_cv_.NotifyAll();
    ahead_cv_.NotifyAll();
  }
  for (auto& t : flushers_) t.join();
  flushers_.clear();
  for (auto& t : ahead_threads_) t.join();  // each ends what it took (queued ones are skipped)
  ahead_threads_.clear();
  // Writes that were past the closed check when FlushAll took its list.
  Status again = FlushAll();
  return s.ok() ? again : s;
}

void DataCache::Retire(const std::shared_ptr<File>& f) {
  MutexLock l(mu_);
  auto it = files_.find(f->key);
  if (it == files_.end() || it->second != f) return;
  MutexLock fl(f->mu);
  if (!f->dirty.empty() || !f->flushing.empty() || f->reserved != 0) return;
  f->retired = true;
  files_.erase(it);
}

void DataCache::FlusherLoop(bool helper) {
  const uint64_t after_ns = uint64_t{o_.flush_after_ms} * 1'000'000;
  const auto tick = std::chrono::milliseconds(std::max<uint32_t>(o_.flush_after_ms / 4, 5));
  MutexLock l(mu_);
  while (!stop_) {
    flusher_cv_.WaitFor(mu_, tick);
    if (stop_) break;
    // Files whose oldest dirty byte is due, or (over half the budget) the
    // oldest files whatever their age.
    // Files with logged writes first, oldest first, once the intent log
    // fills (they hold its checkpoint back).
    const bool pressed = dirty_.load() >= o_.dirty_bytes / 2;
    bool log_pressed = false;
    if (auto d = domain_.lock()) log_pressed = d->log_fill_pct() >= limits::kLogWriteFlushPct;
    if (helper && !pressed && !log_pressed) continue;  // the first thread keeps up
    const uint64_t now = MonotonicNanos();
    // (rank, when): logged files by LSN, then the others by age.
    std::vector<std::pair<std::pair<int, uint64_t>, std::shared_ptr<File>>> due;
    for (const auto& [k, f] : files_) {
      if (flushing_now_.contains(f.get())) continue;  // another flusher thread's
      MutexLock fl(f->mu);
      if (f->dirty.empty()) continue;
      if (log_pressed && f->log_first != 0) {
        due.push_back({{0, f->log_first}, f});
      } else if (pressed || now - f->since_ns >= after_ns) {
        due.push_back({{1, f->since_ns}, f});
      }
    }
    if (due.empty()) continue;
    std::sort(due.begin(), due.end(), [](const auto& x, const auto& y) { return x.first < y.first; });
    l.Unlock();
    for (const auto& [since, f] : due) {
      {
        // Another flusher thread may have taken it since the list was made.
        MutexLock claim(mu_);
        if (!flushing_now_.insert(f.get()).second) continue;
      }
      FlushFile(f).IgnoreError();  // counted and logged; the data stays dirty
      {
        MutexLock claim(mu_);
        flushing_now_.erase(f.get());
      }
      if (pressed && !log_pressed && dirty_.load() < o_.dirty_bytes / 4) break;
    }
    if (log_pressed) {
      // The logged writes are in place: a transaction group lets the log's
      // checkpoint move past them (the log's own ask may have found them
      // still pinned).
      if (auto d = domain_.lock()) {
        if (Status s = d->SyncTxg(); !s.ok()) {
          NASGW_LOG(kWarn, "cache") << "transaction group after flushing logged writes" << Kv("error", s.ToString());
        }
      }
    }
    l.Lock();
  }
}

DataCacheStats DataCache::stats() const {
  DataCacheStats s;
  s.dirty_bytes = dirty_.load();
  {
    MutexLock l(mu_);
    s.dirty_files = files_.size();
  }
  s.writes_cached = c_.writes_cached;
  s.writes_stable = c_.writes_stable;
  s.writes_logged = c_.writes_logged;
  s.writes_log_slow = c_.writes_log_slow;
  s.commits_logged = c_.commits_logged;
  s.commits_flushed = c_.commits_flushed;
  s.bytes_written = c_.bytes_written;
  s.read_bytes_dirty = c_.read_bytes_dirty;
  s.flushes = c_.flushes;
  s.flush_bytes = c_.flush_bytes;
  s.flush_errors = c_.flush_errors;
  s.flush_dropped = c_.flush_dropped;
  s.stalls = c_.stalls;
  s.stall_timeouts = c_.stall_timeouts;
  s.no_space = c_.no_space;
  s.flush_nanos_total = c_.flush_nanos;
  s.read = rc_.stats();
  return s;
}

}  // namespace nasgw::cache
