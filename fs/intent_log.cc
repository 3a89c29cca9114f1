#include "fs/intent_log.h"

#include <algorithm>
#include <cstring>
#include <utility>

#include "base/clock.h"
#include "base/coding.h"
#include "base/crc32c.h"
#include "base/log.h"

namespace nasgw::fs {

namespace {

constexpr uint32_t kSuperMagic = 0x534c474e;   // "NGLS"
constexpr uint32_t kRecordMagic = 0x4c49474e;  // "NGIL"
constexpr uint16_t kLogVersion = 1;            // the superblock's
// 3: records are whole sectors (2 and 1: whole 4 KiB blocks); 2: bytes
// 56-63 hold the session (1: zeros, one record in flight).
constexpr uint16_t kRecordVersion = 3;
// The extents fill the superblock from byte 64 up to the three u64s at its
// end (adopts_end, adopts, opened).
constexpr size_t kSuperExtentsMax = (kLogBlockBytes - 24 - 64) / 20;

uint64_t RoundUp(uint64_t n, uint64_t unit) {
  return (n + unit - 1) / unit * unit;
}

// The checksum of a block or record: CRC32C of its bytes with the checksum
// field (bytes 8-11) read as zero.
uint32_t Checksum(const uint8_t* p, size_t n) {
  static const uint8_t kZero[4] = {0, 0, 0, 0};
  uint32_t c = Crc32c(0, p, 8);
  c = Crc32c(c, kZero, 4);
  return Crc32c(c, p + 12, n - 12);
}

uint64_t RingBytes(const std::vector<Extent>& extents, size_t i) {
  return i == 0 ? extents[0].length - kLogSuperBytes : extents[i].length;
}

Status CheckExtents(const std::vector<Extent>& extents) {
  if (extents.empty()) return Status::InvalidArgument("intent log without extents");
  if (extents.size() > kSuperExtentsMax) return Status::InvalidArgument("intent log in too many extents");
  uint64_t ring = 0;
  for (size_t i = 0; i < extents.size(); i++) {
    const Extent& e = extents[i];
    if (e.offset % kLogBlockBytes != 0 || e.length % kLogBlockBytes != 0 || e.length == 0) {
      return Status::InvalidArgument("intent log extent not in whole 4 KiB blocks");
    }
    if (i == 0 && e.length < kLogSuperBytes + kLogBlockBytes) {
      return Status::InvalidArgument("intent log's first extent too small for its superblocks");
    }
    ring += RingBytes(extents, i);
  }
  if (ring + kLogSuperBytes < IntentLog::kMinBytes) {
    return Status::InvalidArgument("intent log smaller than " + std::to_string(IntentLog::kMinBytes >> 20) + " MiB");
  }
  return Status();
}

struct Super {
  uint64_t seq = 0;
  uint64_t tail_vpos = 0;
  uint64_t tail_lsn = 1;
  uint64_t opened = 0;  // the session of the opening that wrote it (0: written before it was kept)
  // The session of the mirror's copy that opening adopted (TakeTail): a
  // later opening may adopt the same copy, which is no older than it for
  // having been adopted by a failed one (0: none, or written before it
  // was kept).
  uint64_t adopts = 0;
  // The last LSN of the copy's run it took: the copy may be taken again
  // only while the log has nothing past it (the opening wrote nothing of
  // its own), so that no entry of the copy lands after one of the log's.
  uint64_t adopts_end = 0;
};
// Past the most extents a superblock holds (kSuperExtentsMax).
constexpr size_t kSuperOpenedAt = kLogBlockBytes - 8, kSuperAdoptsAt = kLogBlockBytes - 16,
                 kSuperAdoptsEndAt = kLogBlockBytes - 24;
static_assert(64 + kSuperExtentsMax * 20 <= kSuperAdoptsEndAt);

std::vector<uint8_t> EncodeSuper(uint64_t salt, const Super& s, const std::vector<Extent>& extents, uint64_t capacity) {
  std::vector<uint8_t> b(kLogBlockBytes, 0);
  PutFixed32(&b[0], kSuperMagic);
  b[4] = static_cast<uint8_t>(kLogVersion);
  b[5] = static_cast<uint8_t>(kLogVersion >> 8);
  PutFixed64(&b[16], salt);
  PutFixed64(&b[24], s.seq);
  PutFixed64(&b[32], s.tail_vpos);
  PutFixed64(&b[40], s.tail_lsn);
  PutFixed64(&b[48], capacity);
  PutFixed32(&b[56], static_cast<uint32_t>(extents.size()));
  PutFixed64(&b[kSuperOpenedAt], s.opened);
  PutFixed64(&b[kSuperAdoptsAt], s.adopts);
  PutFixed64(&b[kSuperAdoptsEndAt], s.adopts_end);
  size_t at = 64;
  for (const Extent& e : extents) {
    PutFixed32(&b[at], e.lun);
    PutFixed64(&b[at + 4], e.offset);
    PutFixed64(&b[at + 12], e.length);
    at += 20;
  }
  PutFixed32(&b[8], Checksum(b.data(), b.size()));
  return b;
}

// The superblock in `b`, if it verifies and describes this log.
bool DecodeSuper(const uint8_t* b, uint64_t salt, const std::vector<Extent>& extents, uint64_t capacity, Super* out) {
  if (GetFixed32(b) != kSuperMagic || (b[4] | (b[5] << 8)) != kLogVersion) return false;
  if (GetFixed32(b + 8) != Checksum(b, kLogBlockBytes)) return false;
  if (GetFixed64(b + 16) != salt || GetFixed64(b + 48) != capacity) return false;
  if (GetFixed32(b + 56) != extents.size()) return false;
  size_t at = 64;
  for (const Extent& e : extents) {
    if (GetFixed32(b + at) != e.lun || GetFixed64(b + at + 4) != e.offset || GetFixed64(b + at + 12) != e.length) {
      return false;
    }
    at += 20;
  }
  out->seq = GetFixed64(b + 24);
  out->tail_vpos = GetFixed64(b + 32);
  out->tail_lsn = GetFixed64(b + 40);
  out->opened = GetFixed64(b + kSuperOpenedAt);
  out->adopts = GetFixed64(b + kSuperAdoptsAt);
  out->adopts_end = GetFixed64(b + kSuperAdoptsEndAt);
  return out->tail_lsn >= 1;
}

}  // namespace

uint64_t IntentLog::Cost(size_t bytes) {
  return RoundUp(kLogRecordHeaderBytes + kLogEntryHeaderBytes + bytes, kLogBlockBytes);
}

IntentLog::IntentLog(DeviceFn devices, std::vector<Extent> extents, uint64_t salt, IntentLogOptions options)
    : devices_(std::move(devices)), extents_(std::move(extents)), salt_(salt), options_(std::move(options)) {
  uint64_t smallest = UINT64_MAX;
  for (size_t i = 0; i < extents_.size(); i++) {
    starts_.push_back(capacity_);
    capacity_ += RingBytes(extents_, i);
    smallest = std::min(smallest, RingBytes(extents_, i));
  }
  // A record must fit in any extent; one skip per extent may waste up to a
  // record's size.
  max_record_ = std::max<uint64_t>(
      kLogBlockBytes, std::min<uint64_t>(options_.max_record_bytes, smallest) / kLogBlockBytes * kLogBlockBytes);
  slack_ = std::min<uint64_t>(capacity_ / 2, extents_.size() * max_record_);
  // Records are whole sectors of every LUN the log is on.
  for (const Extent& e : extents_) {
    if (auto dev = devices_(e.lun)) unit_ = std::max<uint64_t>(unit_, dev->info().block_size);
  }
}

size_t IntentLog::max_entry_bytes() const {
  return static_cast<size_t>(max_record_ - kLogRecordHeaderBytes - kLogEntryHeaderBytes);
}

IntentLog::Place IntentLog::Locate(uint64_t vpos) const {
  const uint64_t w = vpos % capacity_;
  const size_t i = static_cast<size_t>(std::upper_bound(starts_.begin(), starts_.end(), w) - starts_.begin()) - 1;
  const uint64_t in = w - starts_[i];
  const uint64_t base = i == 0 ? kLogSuperBytes : 0;
  return {static_cast<uint32_t>(i), base + in, RingBytes(extents_, i) - in};
}

uint64_t IntentLog::Fit(uint64_t vpos, uint64_t bytes) const {
  const Place p = Locate(vpos);
  return bytes <= p.room ? vpos : vpos + p.room;
}

Status IntentLog::ReadAt(uint64_t vpos, uint8_t* data, size_t n) {
  const Place p = Locate(vpos);
  const Extent& e = extents_[p.extent];
  auto dev = devices_(e.lun);
  if (!dev) return Status::NotFound("intent log LUN " + std::to_string(e.lun));
  return block::ReadSync(*dev, (e.offset + p.offset) / dev->info().block_size, data, n);
}

Status IntentLog::Format(const DeviceFn& devices, const std::vector<Extent>& extents, uint64_t salt) {
  NASGW_RETURN_IF_ERROR(CheckExtents(extents));
  uint64_t capacity = 0;
  for (size_t i = 0; i < extents.size(); i++) capacity += RingBytes(extents, i);
  auto dev = devices(extents[0].lun);
  if (!dev) return Status::NotFound("intent log LUN " + std::to_string(extents[0].lun));
  const uint64_t bs = dev->info().block_size;
  // Copy B first (older), then A: a log formatted halfway has no valid copy
  // or an empty one, never a stale checkpoint of an earlier log (other salt).
  Super s;
  s.seq = 0;
  auto b = EncodeSuper(salt, s, extents, capacity);
  NASGW_RETURN_IF_ERROR(block::WriteSync(*dev, (extents[0].offset + kLogBlockBytes) / bs, b.data(), b.size(), true));
  s.seq = 1;
  b = EncodeSuper(salt, s, extents, capacity);
  return block::WriteSync(*dev, extents[0].offset / bs, b.data(), b.size(), true);
}

Status IntentLog::WriteSuper(uint64_t seq, uint64_t tail_vpos, uint64_t tail_lsn) {
  Super s{seq, tail_vpos, tail_lsn, session_, adopts_, adopts_end_};
  auto b = EncodeSuper(salt_, s, extents_, capacity_);
  auto dev = devices_(extents_[0].lun);
  if (!dev) return Status::NotFound("intent log LUN " + std::to_string(extents_[0].lun));
  const uint64_t bs = dev->info().block_size;
  return block::WriteSync(*dev, (extents_[0].offset + (seq % 2) * kLogBlockBytes) / bs, b.data(), b.size(), true);
}

bool IntentLog::ReadRecord(uint64_t vpos, uint64_t lsn, uint64_t session_min, uint64_t* bytes,
                           std::vector<std::string>* entries, uint64_t* session) {
  const Place p = Locate(vpos);
  // The first block, or what is left of the extent (a record of a few
  // sectors at its end).
  std::vector<uint8_t> buf(static_cast<size_t>(std::min<uint64_t>(kLogBlockBytes, p.room)));
  if (buf.size() < kLogRecordHeaderBytes || !ReadAt(vpos, buf.data(), buf.size()).ok()) return false;
  const uint8_t* h = buf.data();
  const uint16_t version = static_cast<uint16_t>(h[4] | (h[5] << 8));
  if (GetFixed32(h) != kRecordMagic || version < 1 || version > kRecordVersion) return false;
  // A record of an earlier session after one of a later: written before a
  // crash past a record that never was, so never acknowledged.
  if (GetFixed64(h + 56) < session_min) return false;
  if (GetFixed64(h + 16) != salt_ || GetFixed64(h + 24) != vpos || GetFixed64(h + 32) != lsn) return false;
  const uint32_t count = GetFixed32(h + 40);
  const uint32_t payload = GetFixed32(h + 44);
  const uint32_t record = GetFixed32(h + 48);
  const uint64_t unit = version >= 3 ? kLogSectorBytes : kLogBlockBytes;
  if (record < unit || record % unit != 0 || record > p.room || record > max_record_ ||
      kLogRecordHeaderBytes + uint64_t{payload} > record || count == 0) {
    return false;
  }
  if (record > buf.size()) {
    const size_t have = buf.size();
    buf.resize(record);
    if (!ReadAt(vpos + have, buf.data() + have, record - have).ok()) return false;
  }
  if (GetFixed32(buf.data() + 8) != Checksum(buf.data(), record)) return false;
  std::vector<std::string> out;
  size_t at = kLogRecordHeaderBytes;
  const size_t end = kLogRecordHeaderBytes + payload;
  while (at < end) {
    if (end - at < kLogEntryHeaderBytes) return false;
    const uint32_t n = GetFixed32(buf.data() + at);
    at += kLogEntryHeaderBytes;
    if (n > end - at) return false;
    out.emplace_back(reinterpret_cast<const char*>(buf.data() + at), n);
    at += n;
  }
  if (out.size() != count) return false;
  *bytes = record;
  *entries = std::move(out);
  *session = GetFixed64(buf.data() + 56);
  return true;
}

Result<std::unique_ptr<IntentLog>> IntentLog::Open(const DeviceFn& devices, const std::vector<Extent>& extents,
                                                   uint64_t salt, const ReplayFn& replay,
                                                   const IntentLogOptions& options) {
  NASGW_RETURN_IF_ERROR(CheckExtents(extents));
  std::unique_ptr<IntentLog> log(new IntentLog(devices, extents, salt, options));
  if (kLogBlockBytes % log->unit_ != 0) {
    return Status::InvalidArgument("intent log on a LUN of " + std::to_string(log->unit_) +
                                   "-byte blocks; at most 4 KiB, a power of two");
  }
  // The newer copy of the superblock that verifies.
  std::vector<uint8_t> two(kLogSuperBytes);
  {
    auto dev = devices(extents[0].lun);
    if (!dev) return Status::NotFound("intent log LUN " + std::to_string(extents[0].lun));
    NASGW_RETURN_IF_ERROR(block::ReadSync(*dev, extents[0].offset / dev->info().block_size, two.data(), two.size())
                              .WithContext("read the intent log's superblock"));
  }
  Super a, b;
  const bool va = DecodeSuper(two.data(), salt, extents, log->capacity_, &a);
  const bool vb = DecodeSuper(two.data() + kLogBlockBytes, salt, extents, log->capacity_, &b);
  if (!va && !vb) return Status::Corruption("no intent log superblock copy verifies");
  const Super s = !vb || (va && a.seq > b.seq) ? a : b;
  // Replay from the checkpoint.
  uint64_t vpos = s.tail_vpos, lsn = s.tail_lsn, session = 0, last_session = 0;
  std::deque<Written> written;
  for (;;) {
    uint64_t bytes = 0;
    std::vector<std::string> entries;
    uint64_t at = vpos;
    bool found = log->ReadRecord(at, lsn, session, &bytes, &entries, &session);
    const Place here = log->Locate(vpos);
    if (!found && here.room < RingBytes(extents, here.extent)) {
      // A record that did not fit where the previous one ended starts at
      // the next extent.
      at = vpos + here.room;
      found = log->ReadRecord(at, lsn, session, &bytes, &entries, &session);
    }
    if (!found) break;
    last_session = session;
    for (const std::string& e : entries) {
      NASGW_RETURN_IF_ERROR(replay(lsn, e).WithContext("replay intent log entry " + std::to_string(lsn)));
      lsn++;
      log->replayed_++;
    }
    written.push_back({at, lsn - entries.size(), lsn - 1, bytes});
    vpos = at + bytes;
    if (vpos - s.tail_vpos > log->capacity_) return Status::Corruption("intent log longer than its space");
  }
  uint64_t seq = s.seq;
  // A mirror's copy must be of the last opening that wrote anything: the
  // last record's, or the last superblock's (its records may all be
  // checkpointed away, its LSNs reused by entries of its own). Unless that
  // opening adopted this very copy and failed (a takeover whose domain did
  // not open): it wrote only what it took of the copy, at the copy's LSNs.
  const bool readopt = options.tail && s.adopts != 0 && options.tail->session == s.adopts && lsn <= s.adopts_end + 1;
  const uint64_t floor = readopt ? s.adopts : std::max(last_session, s.opened);
  if (!options.read_only && options.tail) {
    // Said in this opening's superblock, before anything is taken, so that
    // the next opening may take the same copy if this one fails.
    TailRun run;
    if (log->CheckTail(*options.tail, lsn, floor, &run) == nullptr && run.end > run.from) {
      log->adopts_ = options.tail->session;
      log->adopts_end_ = options.tail->entries[run.end - 1].first;
    }
  }
  if (!options.read_only) {
    // This opening's session: a superblock of its own (the same checkpoint)
    // before any record, so every record it writes carries a session newer
    // than any record already on the array.
    log->session_ = seq + 1;
    NASGW_RETURN_IF_ERROR(
        log->WriteSuper(seq + 1, s.tail_vpos, s.tail_lsn).WithContext("write the intent log's superblock"));
    seq++;
  }
  {
    MutexLock c(log->checkpoint_mu_);
    log->super_seq_ = seq;
  }
  {
    MutexLock l(log->mu_);
    log->tail_vpos_ = s.tail_vpos;
    log->tail_lsn_ = s.tail_lsn;
    log->head_vpos_ = vpos;
    log->next_lsn_ = lsn;
    log->durable_lsn_ = lsn - 1;
    log->written_ = std::move(written);
  }
  if (!options.read_only) {
    log->writer_ = std::thread([l = log.get()] { l->WriterLoop(); });
    if (options.tail) NASGW_RETURN_IF_ERROR(log->TakeTail(*options.tail, lsn, floor, replay));
  }
  return log;
}

const char* IntentLog::CheckTail(const LogTail& tail, uint64_t next, uint64_t last_session, TailRun* run) const {
  // What the array lacks: from the first entry at or past `next`.
  size_t from = 0;
  while (from < tail.entries.size() && tail.entries[from].first < next) from++;
  *run = TailRun{from, from};
  if (from == tail.entries.size()) return nullptr;  // all of it is on the array already
  // Up to the first gap: past it nothing was answered (the mirror answers
  // an entry only while the array's log reaches its stream's first).
  size_t end = from + 1;
  while (end < tail.entries.size() && tail.entries[end].first == tail.entries[end - 1].first + 1) end++;
  run->end = end;
  if (tail.salt != salt_) return "another log's";
  if (tail.session < last_session) return "older than the log's last opening";  // a later opening wrote past it
  if (tail.entries[from].first != next) return "not continuing the log";        // a gap: never answered whole
  return nullptr;
}

Status IntentLog::TakeTail(const LogTail& tail, uint64_t next, uint64_t last_session, const ReplayFn& replay) {
  TailRun run;
  const char* refused = CheckTail(tail, next, last_session, &run);
  const size_t from = run.from, end = run.end;
  if (refused == nullptr && from == end) {
    NASGW_LOG(kInfo, "fs") << "intent log: a mirror's entries all on the array already"
                           << Kv("held_first", tail.entries.empty() ? 0 : tail.entries.front().first)
                           << Kv("held_last", tail.entries.empty() ? 0 : tail.entries.back().first)
                           << Kv("log_next", next) << Kv("session", tail.session) << Kv("log_session", last_session);
    return Status();
  }
  const uint64_t first = from < end ? tail.entries[from].first : 0, last = from < end ? tail.entries[end - 1].first : 0;
  if (refused != nullptr) {
    NASGW_LOG(kError, "fs") << "intent log: a mirror's entries refused" << Kv("why", refused) << Kv("first", first)
                            << Kv("last", last) << Kv("log_next", next) << Kv("session", tail.session)
                            << Kv("log_session", last_session);
    return Status();
  }
  // Written first, as this opening's first records: once they are on the
  // array, the mirror's copy is no longer the only other one.
  uint64_t lsn = 0;
  for (size_t i = from; i < end; i++) {
    const std::string& e = tail.entries[i].second;
    NASGW_RETURN_IF_ERROR(Reserve(e.size(), /*urgent=*/true).WithContext("log a mirror's entries"));
    lsn = Append(e);
    if (lsn != tail.entries[i].first) return Status::Corruption("mirror entry took LSN " + std::to_string(lsn));
  }
  NASGW_RETURN_IF_ERROR(WaitDurable(lsn).WithContext("log a mirror's entries"));
  for (size_t i = from; i < end; i++) {
    const auto& [at, e] = tail.entries[i];
    NASGW_RETURN_IF_ERROR(replay(at, e).WithContext("replay mirror entry " + std::to_string(at)));
    replayed_++;
    tail_replayed_++;
  }
  NASGW_LOG(kInfo, "fs") << "intent log: a mirror's entries replayed" << Kv("first", first) << Kv("last", last)
                         << Kv("session", tail.session);
  return Status();
}

IntentLog::~IntentLog() {
  std::shared_ptr<MirrorAcks> acks;
  {
    MutexLock l(mu_);
    acks = mirror_sink_;
  }
  Orphan(acks);
  {
    MutexLock l(mu_);
    stop_ = true;
    work_cv_.NotifyAll();
    space_cv_.NotifyAll();
  }
  if (writer_.joinable()) writer_.join();
}

uint64_t IntentLog::UsedLocked() const {
  return head_vpos_ - tail_vpos_;
}

void IntentLog::Fail(const Status& s) {
  if (!failed_.ok()) return;
  failed_ = s.WithContext("intent log");
  NASGW_LOG(kError, "fs") << "intent log failed" << Kv("error", failed_.ToString());
  durable_cv_.NotifyAll();
  space_cv_.NotifyAll();
}

Status IntentLog::Reserve(size_t bytes, bool urgent) {
  if (options_.read_only) return Status::NotSupported("intent log opened read-only");
  if (bytes > max_entry_bytes()) {
    return Status::InvalidArgument("log entry of " + std::to_string(bytes) + " bytes; at most " +
                                   std::to_string(max_entry_bytes()));
  }
  const uint64_t cost = Cost(bytes);
  const uint64_t deadline = MonotonicNanos() + uint64_t{options_.reserve_timeout_ms} * kNanosPerMilli;
  MutexLock l(mu_);
  bool waited = false;
  for (;;) {
    if (!failed_.ok()) return failed_;
    if (stop_) return Status::Unavailable("intent log closing");
    const uint64_t want = UsedLocked() + reserved_ + cost + slack_ + (urgent ? 0 : kUrgentBytes);
    const bool fits = want <= capacity_;
    const bool ask = !asked_checkpoint_ && (!fits || want * 100 >= capacity_ * options_.checkpoint_fill_pct);
    if (fits) {
      reserved_ += cost;
      if (ask) asked_checkpoint_ = true;
    }
    if (ask && options_.want_checkpoint) {
      // Outside our lock: the callback may take the caller's locks.
      asked_checkpoint_ = true;
      l.Unlock();
      options_.want_checkpoint();
      l.Lock();
    }
    if (fits) return Status();
    if (!waited) {
      waited = true;
      reserve_waits_++;
    }
    const uint64_t now = MonotonicNanos();
    if (now >= deadline) {
      return Status::TimedOut("intent log full for " + std::to_string(options_.reserve_timeout_ms) + " ms");
    }
    space_cv_.WaitFor(mu_, std::chrono::nanoseconds(std::min<uint64_t>(deadline - now, 100 * kNanosPerMilli)));
  }
}

void IntentLog::Unreserve(size_t bytes) {
  MutexLock l(mu_);
  reserved_ -= std::min(reserved_, Cost(bytes));
  space_cv_.NotifyAll();
}

uint64_t IntentLog::Append(std::string entry) {
  MutexLock l(mu_);
  const uint64_t lsn = next_lsn_++;
  if (mirror_) {
    mirror_->Mirror(lsn, entry);
    if (mirror_sent_.size() >= kMirrorTimedMax) mirror_sent_.pop_front();
    mirror_sent_.emplace_back(lsn, MonotonicNanos());
  }
  pending_.push_back({lsn, std::move(entry)});
  work_cv_.NotifyOne();
  return lsn;
}

Status IntentLog::WaitDurable(uint64_t lsn) {
  MutexLock l(mu_);
  while (durable_lsn_ < lsn) {
    if (!failed_.ok()) return failed_;
    durable_cv_.Wait(mu_);
  }
  return Status();
}

bool IntentLog::AcknowledgedLocked(uint64_t lsn) const {
  // The mirror counts only from where the array's log reaches its first
  // entry: before that, entries neither holds could precede `lsn`.
  return mirror_ != nullptr && durable_lsn_ + 1 >= mirror_first_ && mirrored_lsn_ >= lsn;
}

Status IntentLog::WaitAcknowledged(uint64_t lsn) {
  MutexLock l(mu_);
  for (;;) {
    if (durable_lsn_ >= lsn) return Status();
    // A failed log answers nothing more from the mirror either: the node
    // may be fenced, and the node that fenced it took the mirror's copy
    // as it was then.
    if (!failed_.ok()) return failed_;
    if (AcknowledgedLocked(lsn)) {
      mirror_acks_++;
      return Status();
    }
    durable_cv_.Wait(mu_);
  }
}

std::shared_ptr<MirrorAcks> IntentLog::AttachMirror(std::shared_ptr<LogMirror> m, uint64_t* first) {
  auto acks = std::make_shared<MirrorAcks>();
  acks->mirror_ = m.get();
  {
    MutexLock a(acks->mu_);
    acks->log_ = this;
  }
  // Let go outside the lock: a mirror's end may wait for threads that call us.
  std::shared_ptr<LogMirror> old;
  std::shared_ptr<MirrorAcks> old_acks;
  {
    MutexLock l(mu_);
    old = std::exchange(mirror_, std::move(m));
    old_acks = std::exchange(mirror_sink_, acks);
    mirror_first_ = next_lsn_;
    mirrored_lsn_ = next_lsn_ - 1;
    mirror_sent_.clear();
    recent_mirror_ns_ = 0;
    *first = mirror_first_;
    mirror_->Durable(durable_lsn_);
  }
  Orphan(old_acks);
  return acks;
}

void IntentLog::DetachMirror(const LogMirror* m) {
  std::shared_ptr<LogMirror> old;
  std::shared_ptr<MirrorAcks> old_acks;
  {
    MutexLock l(mu_);
    if (mirror_.get() != m) return;
    old = std::move(mirror_);
    old_acks = std::move(mirror_sink_);
    mirror_sent_.clear();
  }
  Orphan(old_acks);
}

void IntentLog::Orphan(const std::shared_ptr<MirrorAcks>& acks) {
  if (!acks) return;
  MutexLock a(acks->mu_);  // waits for an Acked under way
  acks->log_ = nullptr;
}

void MirrorAcks::Acked(uint64_t lsn) {
  MutexLock a(mu_);
  if (log_ != nullptr) log_->MirrorAcked(mirror_, lsn);
}

void IntentLog::MirrorAcked(const LogMirror* m, uint64_t lsn) {
  MutexLock l(mu_);
  if (mirror_.get() != m || lsn <= mirrored_lsn_) return;
  mirrored_lsn_ = std::min(lsn, next_lsn_ - 1);
  uint64_t appended = 0;
  while (!mirror_sent_.empty() && mirror_sent_.front().first <= lsn) {
    appended = mirror_sent_.front().second;
    mirror_sent_.pop_front();
  }
  if (appended != 0) {
    const uint64_t took = MonotonicNanos() - appended;
    recent_mirror_ns_ = recent_mirror_ns_ == 0 ? took : recent_mirror_ns_ - recent_mirror_ns_ / 4 + took / 4;
  }
  durable_cv_.NotifyAll();
}

bool IntentLog::mirror_answers() const {
  MutexLock l(mu_);
  return mirror_ != nullptr && durable_lsn_ + 1 >= mirror_first_;
}

uint64_t IntentLog::recent_answer_ns() const {
  const uint64_t array = recent_write_ns();
  MutexLock l(mu_);
  if (mirror_ == nullptr || recent_mirror_ns_ == 0 || durable_lsn_ + 1 < mirror_first_) return array;
  return array == 0 ? recent_mirror_ns_ : std::min(array, recent_mirror_ns_);  // 0: no record yet
}

void IntentLog::WriterLoop() {
  const size_t in_flight_max = std::clamp<uint32_t>(options_.max_writes_in_flight, 1, 64);
  MutexLock l(mu_);
  for (;;) {
    // Until there is a group to write and room on the way for it; when
    // stopping, until everything appended is written.
    for (;;) {
      if (!failed_.ok()) pending_.clear();  // never written; their waiters know
      if (!pending_.empty() && flight_.size() < in_flight_max) break;
      if (stop_ && pending_.empty()) {
        while (!flight_.empty()) work_cv_.Wait(mu_);  // their buffers are ours
        return;
      }
      work_cv_.Wait(mu_);
    }
    // A group: as many entries as fit in one record.
    size_t n = 0;
    uint64_t payload = 0, costs = 0;
    while (n < pending_.size()) {
      const uint64_t add = kLogEntryHeaderBytes + pending_[n].entry.size();
      if (n > 0 && kLogRecordHeaderBytes + payload + add > max_record_) break;
      payload += add;
      costs += Cost(pending_[n].entry.size());
      n++;
    }
    const uint64_t bytes = RoundUp(kLogRecordHeaderBytes + payload, unit_);
    uint64_t vpos = Fit(head_vpos_, bytes);
    // Reservations make this hold; if it ever did not, wait for a
    // checkpoint rather than overwrite what a replay still needs.
    while (vpos + bytes - tail_vpos_ > capacity_ && failed_.ok()) {
      NASGW_LOG(kWarn, "fs") << "intent log writer waiting for space";
      space_cv_.WaitFor(mu_, std::chrono::milliseconds(100));
      vpos = Fit(head_vpos_, bytes);
    }
    if (!failed_.ok()) continue;
    auto f = std::make_unique<Flight>();
    f->vpos = vpos;
    f->first_lsn = pending_.front().lsn;
    f->last_lsn = f->first_lsn + n - 1;
    f->bytes = bytes;
    std::vector<uint8_t>& rec = f->rec;
    rec.assign(bytes, 0);
    PutFixed32(&rec[0], kRecordMagic);
    rec[4] = static_cast<uint8_t>(kRecordVersion);
    rec[5] = static_cast<uint8_t>(kRecordVersion >> 8);
    rec[6] = static_cast<uint8_t>(kLogRecordHeaderBytes);
    PutFixed64(&rec[16], salt_);
    PutFixed64(&rec[24], vpos);
    PutFixed64(&rec[32], f->first_lsn);
    PutFixed32(&rec[40], static_cast<uint32_t>(n));
    PutFixed32(&rec[44], static_cast<uint32_t>(payload));
    PutFixed32(&rec[48], static_cast<uint32_t>(bytes));
    PutFixed64(&rec[56], session_);
    size_t at = kLogRecordHeaderBytes;
    for (size_t i = 0; i < n; i++) {
      const std::string& e = pending_[i].entry;
      PutFixed32(&rec[at], static_cast<uint32_t>(e.size()));
      std::memcpy(&rec[at + kLogEntryHeaderBytes], e.data(), e.size());
      at += kLogEntryHeaderBytes + e.size();
    }
    pending_.erase(pending_.begin(), pending_.begin() + static_cast<std::ptrdiff_t>(n));
    PutFixed32(&rec[8], Checksum(rec.data(), rec.size()));
    // The next record goes after this one; its reservation became these
    // bytes (the head counts them now).
    head_vpos_ = vpos + bytes;
    reserved_ -= std::min(reserved_, costs);
    group_entries_.Record(n);
    Flight* fp = f.get();
    flight_.push_back(std::move(f));
    fp->start_ns = MonotonicNanos();
    l.Unlock();
    const Place p = Locate(vpos);
    const Extent& e = extents_[p.extent];
    Status s;
    if (auto dev = devices_(e.lun)) {
      block::IoVec v{fp->rec.data(), fp->rec.size()};
      s = dev->Write((e.offset + p.offset) / dev->info().block_size, {&v, 1}, /*fua=*/true,
                     [this, fp](const Status& r) { RecordWritten(fp, r); });
    } else {
      s = Status::NotFound("intent log LUN " + std::to_string(e.lun));
    }
    if (!s.ok()) RecordWritten(fp, s);
    l.Lock();
    if (!asked_checkpoint_ && (UsedLocked() + reserved_) * 100 >= capacity_ * options_.checkpoint_fill_pct &&
        options_.want_checkpoint) {
      asked_checkpoint_ = true;
      l.Unlock();
      options_.want_checkpoint();
      l.Lock();
    }
  }
}

void IntentLog::RecordWritten(Flight* f, const Status& s) {
  MutexLock l(mu_);
  const uint64_t took = MonotonicNanos() - f->start_ns;
  write_ns_.Record(took);
  const uint64_t was = recent_write_ns_.load(std::memory_order_relaxed);
  recent_write_ns_.store(was == 0 ? took : was - was / 4 + took / 4, std::memory_order_relaxed);
  f->done = true;
  if (!s.ok()) Fail(s);
  // Durable: the records written with every one before them written too.
  // After a failure nothing more is (the waiters get the failure).
  while (!flight_.empty() && flight_.front()->done) {
    const Flight& w = *flight_.front();
    if (failed_.ok()) {
      durable_lsn_ = w.last_lsn;
      if (mirror_) mirror_->Durable(durable_lsn_);
      written_.push_back({w.vpos, w.first_lsn, w.last_lsn, w.bytes});
      records_++;
      entries_ += w.last_lsn - w.first_lsn + 1;
      bytes_written_ += w.bytes;
    }
    flight_.pop_front();
  }
  durable_cv_.NotifyAll();
  space_cv_.NotifyAll();
  work_cv_.NotifyAll();
}

Status IntentLog::Checkpoint(uint64_t lsn) {
  if (options_.read_only) return Status::NotSupported("intent log opened read-only");
  MutexLock c(checkpoint_mu_);
  uint64_t tail_vpos = 0, tail_lsn = 0;
  size_t drop = 0;
  {
    MutexLock l(mu_);
    if (!failed_.ok()) return failed_;
    lsn = std::min(lsn, durable_lsn_);
    while (drop < written_.size() && written_[drop].last_lsn <= lsn) drop++;
    if (drop < written_.size()) {
      tail_vpos = written_[drop].vpos;
      tail_lsn = written_[drop].first_lsn;
    } else if (!flight_.empty()) {
      tail_vpos = flight_.front()->vpos;  // the oldest record on its way
      tail_lsn = flight_.front()->first_lsn;
    } else {
      tail_vpos = head_vpos_;
      tail_lsn = durable_lsn_ + 1;
    }
    asked_checkpoint_ = false;
    if (tail_vpos == tail_vpos_ && tail_lsn == tail_lsn_) return Status();
  }
  Status s = WriteSuper(super_seq_ + 1, tail_vpos, tail_lsn);
  MutexLock l(mu_);
  if (!s.ok()) {
    Fail(s.WithContext("write the superblock"));
    return failed_;
  }
  super_seq_++;
  written_.erase(written_.begin(), written_.begin() + static_cast<std::ptrdiff_t>(drop));
  tail_vpos_ = tail_vpos;
  tail_lsn_ = tail_lsn;
  checkpoints_++;
  space_cv_.NotifyAll();
  return Status();
}

uint64_t IntentLog::appended_lsn() const {
  MutexLock l(mu_);
  return next_lsn_ - 1;
}

uint64_t IntentLog::durable_lsn() const {
  MutexLock l(mu_);
  return durable_lsn_;
}

uint32_t IntentLog::fill_pct(uint64_t extra) const {
  MutexLock l(mu_);
  // Of what entries can use: the slack kept for records skipping to the
  // next extent is never theirs.
  return static_cast<uint32_t>(
      std::min<uint64_t>((UsedLocked() + reserved_ + extra) * 100 / (capacity_ - slack_), 100));
}

Status IntentLog::health() const {
  MutexLock l(mu_);
  return failed_;
}

IntentLogStats IntentLog::Stats() const {
  IntentLogStats s;
  {
    MutexLock l(mu_);
    s.capacity_bytes = capacity_;
    s.used_bytes = UsedLocked();
    s.reserved_bytes = reserved_;
    s.appended_lsn = next_lsn_ - 1;
    s.durable_lsn = durable_lsn_;
    s.checkpoint_lsn = tail_lsn_;
    s.records = records_;
    s.entries = entries_;
    s.bytes_written = bytes_written_;
    s.checkpoints = checkpoints_;
    s.reserve_waits = reserve_waits_;
    s.mirror_attached = mirror_ != nullptr;
    s.mirrored_lsn = mirrored_lsn_;
    s.mirror_acks = mirror_acks_;
  }
  s.tail_replayed = tail_replayed_;
  s.write_ns = write_ns_.Snapshot();
  s.recent_write_ns = recent_write_ns();
  s.group_entries = group_entries_.Snapshot();
  return s;
}

}  // namespace nasgw::fs
