#include "fs/metafs.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <set>

#include "base/clock.h"
#include "base/coding.h"
#include "base/crc32c.h"
#include "base/log.h"
#include "base/mutex.h"

#include <sys/random.h>

namespace nasgw::fs {

namespace {

constexpr char kSuperMagic[8] = {'N', 'A', 'S', 'G', 'W', 'M', 'F', 'S'};
constexpr uint32_t kSuperVersion = 1;
constexpr size_t kSuperGroupsOffset = 128;
constexpr size_t kRecordHeader = 17;  // u32 len, u32 crc, u64 seq, u8 type
// Largest record payload: a record never crosses a log block.
constexpr size_t kRecordPayloadMax = kMetaBlockBytes - kRecordHeader;
// Log I/O is done in reads of this size when replaying.
constexpr size_t kReplayReadBytes = 256 << 10;
// A file's data is written to the LUNs once this much is buffered.
constexpr size_t kWriteBackBytes = 1 << 20;

enum RecordType : uint8_t {
  kCreate = 1,   // u64 id, u64 mtime, u16 name length, name
  kExtent = 2,   // u64 id, u32 lun, u64 offset, u64 length
  kSize = 3,     // u64 id, u64 size, u64 mtime
  kRename = 4,   // u64 id, u16 name length, name
  kDelete = 5,   // u64 id
  kLogNext = 6,  // u32 lun, u64 offset, u64 length: the log continues there
};

static_assert(kMetaFileNameMax + 32 < kRecordPayloadMax);

uint64_t RandomU64() {
  uint64_t v = 0;
  while (getrandom(&v, sizeof(v), 0) != sizeof(v)) {
  }
  return v;
}

uint32_t RecordCrc(uint64_t salt, const uint8_t* body, size_t len) {
  uint8_t s[8];
  PutFixed64(s, salt);
  return Crc32c(Crc32c(s, 8), body, len);
}

struct Superblock {
  Uuid reserve;
  uint32_t domain = 0;
  uint64_t seq = 0;
  uint64_t log_start_seq = 1;
  uint64_t log_salt = 0;
  Extent log_first;
  std::vector<AgId> groups;
};

std::vector<uint8_t> EncodeSuper(const Superblock& sb) {
  std::vector<uint8_t> b(kMetaBlockBytes, 0);
  std::memcpy(&b[0], kSuperMagic, 8);
  PutFixed32(&b[8], kSuperVersion);
  std::memcpy(&b[16], sb.reserve.bytes.data(), 16);
  PutFixed32(&b[32], sb.domain);
  PutFixed32(&b[36], static_cast<uint32_t>(sb.groups.size()));
  PutFixed64(&b[40], sb.seq);
  PutFixed64(&b[48], sb.log_start_seq);
  PutFixed64(&b[56], sb.log_salt);
  PutFixed32(&b[64], sb.log_first.lun);
  PutFixed64(&b[68], sb.log_first.offset);
  PutFixed64(&b[76], sb.log_first.length);
  for (size_t i = 0; i < sb.groups.size(); i++) {
    PutFixed32(&b[kSuperGroupsOffset + 8 * i], sb.groups[i].lun);
    PutFixed32(&b[kSuperGroupsOffset + 8 * i + 4], sb.groups[i].index);
  }
  PutFixed32(&b[12], Crc32c(b.data(), b.size()));
  return b;
}

Result<Superblock> DecodeSuper(std::vector<uint8_t> b) {
  if (std::memcmp(b.data(), kSuperMagic, 8) != 0) return Status::NotFound("no metadata superblock");
  const uint32_t crc = GetFixed32(&b[12]);
  PutFixed32(&b[12], 0);
  if (Crc32c(b.data(), b.size()) != crc) return Status::Corruption("metadata superblock checksum mismatch");
  if (GetFixed32(&b[8]) != kSuperVersion) return Status::NotSupported("metadata superblock version");
  Superblock sb;
  std::memcpy(sb.reserve.bytes.data(), &b[16], 16);
  sb.domain = GetFixed32(&b[32]);
  const uint32_t n = GetFixed32(&b[36]);
  sb.seq = GetFixed64(&b[40]);
  sb.log_start_seq = GetFixed64(&b[48]);
  sb.log_salt = GetFixed64(&b[56]);
  sb.log_first = {GetFixed32(&b[64]), GetFixed64(&b[68]), GetFixed64(&b[76])};
  if (n == 0 || n > kMetaGroupsMax) return Status::Corruption("metadata superblock group count out of range");
  for (uint32_t i = 0; i < n; i++) {
    sb.groups.push_back(
        {GetFixed32(&b[kSuperGroupsOffset + size_t{8} * i]), GetFixed32(&b[kSuperGroupsOffset + size_t{8} * i + 4])});
  }
  return sb;
}

uint64_t SlotOffset(uint32_t domain, uint64_t seq) {
  return kDomainTableOffset + domain * kDomainSlotBytes + (seq % 2) * kMetaBlockBytes;
}

}  // namespace

// ---- files -------------------------------------------------------------------

class MetaFs::File {
 public:
  uint64_t id = 0;  // set before the file is in the table, then fixed
  // Guarded by MetaFs::mu_: what the log says. (Not annotated: the analysis
  // cannot name the owning MetaFs's mutex from here.)
  std::string name;
  uint64_t durable_size = 0;
  uint64_t mtime_ns = 0;
  std::vector<Extent> logged;  // extents named in the log
  // Set under MetaFs::mu_ when the file leaves the table; read under mu
  // alone by writers (MetaFs::mu_ is taken after mu, never before).
  std::atomic<bool> deleted{false};

  // The writer's and readers' view.
  Mutex mu ACQUIRED_BEFORE(MetaFs::mu_);
  std::vector<Extent> extents GUARDED_BY(mu);  // every extent allocated to the file, in file order
  uint64_t allocated GUARDED_BY(mu) = 0;
  uint64_t size GUARDED_BY(mu) = 0;         // bytes appended
  uint64_t buf_start GUARDED_BY(mu) = 0;    // file offset of buf[0], block aligned
  std::vector<uint8_t> buf GUARDED_BY(mu);  // bytes [buf_start, size) not yet written in whole blocks
  std::set<uint32_t> dirty_luns GUARDED_BY(mu);
};

MetaFs::MetaFs(std::shared_ptr<Reserve> reserve, uint32_t domain, const MetaFsOptions& options)
    : reserve_(std::move(reserve)), domain_(domain), options_(options) {}

MetaFs::~MetaFs() = default;

// ---- device helpers ------------------------------------------------------------

Status MetaFs::WriteExtentBytes(const Extent& e, uint64_t at, const uint8_t* data, size_t n) {
  NASGW_ASSERT_LE(at + n, e.length);
  auto dev = reserve_->lun(e.lun);
  const uint32_t bs = dev->info().block_size;
  NASGW_ASSERT((e.offset + at) % bs == 0 && n % bs == 0);
  return block::WriteSync(*dev, (e.offset + at) / bs, data, n);
}

Status MetaFs::ReadExtentBytes(const Extent& e, uint64_t at, uint8_t* data, size_t n) {
  NASGW_ASSERT_LE(at + n, e.length);
  auto dev = reserve_->lun(e.lun);
  const uint32_t bs = dev->info().block_size;
  NASGW_ASSERT((e.offset + at) % bs == 0 && n % bs == 0);
  return block::ReadSync(*dev, (e.offset + at) / bs, data, n);
}

Status MetaFs::FlushLuns(const std::vector<uint32_t>& luns) {
  for (uint32_t l : luns) NASGW_RETURN_IF_ERROR(block::FlushSync(*reserve_->lun(l)));
  return Status();
}

// ---- superblock and log -----------------------------------------------------

Status MetaFs::WriteSuperblock() {
  Superblock sb;
  sb.reserve = reserve_->uuid();
  sb.domain = domain_;
  sb.seq = ++sb_seq_;
  sb.log_start_seq = log_start_seq_;
  sb.log_salt = log_salt_;
  sb.log_first = log_extents_.front();
  sb.groups = groups_;
  auto dev = reserve_->lun(0);
  const auto bytes = EncodeSuper(sb);
  return block::WriteSync(*dev, SlotOffset(domain_, sb.seq) / dev->info().block_size, bytes.data(), bytes.size(),
                          /*fua=*/true);
}

std::vector<uint8_t> MetaFs::EncodeRecord(uint8_t type, std::string_view payload) {
  return EncodeRecordAt(type, payload, next_seq_++);
}

std::vector<uint8_t> MetaFs::EncodeRecordAt(uint8_t type, std::string_view payload, uint64_t seq) {
  NASGW_ASSERT_LE(payload.size(), kRecordPayloadMax);
  std::vector<uint8_t> r(kRecordHeader + payload.size());
  PutFixed32(&r[0], static_cast<uint32_t>(payload.size()));
  PutFixed64(&r[8], seq);
  r[16] = type;
  std::memcpy(r.data() + kRecordHeader, payload.data(), payload.size());
  PutFixed32(&r[4], RecordCrc(log_salt_, r.data() + 8, r.size() - 8));
  return r;
}

Status MetaFs::EnsureLogSpace(size_t bytes, uint64_t next_seq) {
  if (log_pos_ + bytes + kMetaBlockBytes <= log_extents_.back().length) return Status();
  // Chain a new extent; its address goes in a block of its own at the end
  // of the current one.
  const uint64_t want = std::max<uint64_t>(options_.log_extent_bytes, bytes + kMetaBlockBytes);
  auto got = alloc_->Allocate(want);
  if (!got.ok()) return got.status().WithContext("metadata log");
  std::vector<Extent> pieces = got.value();
  // The log needs one contiguous extent per link; give back what does not fit.
  Extent next = pieces[0];
  for (size_t i = 1; i < pieces.size(); i++) GiveBack(pieces[i]);
  if (next.length < bytes + kMetaBlockBytes) {
    GiveBack(next);
    return Status::NoSpace("metadata log: no contiguous free extent of " + std::to_string(want) + " bytes");
  }
  Encoder w;
  w.U32(next.lun);
  w.U64(next.offset);
  w.U64(next.length);
  std::vector<uint8_t> block(kMetaBlockBytes, 0);
  // A link takes the sequence number of the record that follows it without
  // consuming it: records are numbered before the space for them is found.
  const auto rec = EncodeRecordAt(kLogNext, w.str(), next_seq);
  std::memcpy(block.data(), rec.data(), rec.size());
  Status s = WriteExtentBytes(log_extents_.back(), log_pos_, block.data(), block.size());
  if (s.ok()) s = FlushLuns({log_extents_.back().lun});
  if (!s.ok()) {
    GiveBack(next);
    return s;
  }
  log_extents_.push_back(next);
  log_pos_ = 0;
  log_bytes_ += kMetaBlockBytes;
  return Status();
}

void MetaFs::Poison(const Status& why) {
  MutexLock lock(mu_);
  if (sticky_.ok()) sticky_ = why;
}

Status MetaFs::AppendLog(const std::vector<std::vector<uint8_t>>& records) {
  if (!sticky_.ok()) return sticky_;
  std::vector<uint8_t> out;
  for (const auto& r : records) {
    const size_t in_block = out.size() % kMetaBlockBytes;
    if (in_block + r.size() > kMetaBlockBytes) out.resize(out.size() + kMetaBlockBytes - in_block, 0);
    out.insert(out.end(), r.begin(), r.end());
  }
  out.resize((out.size() + kMetaBlockBytes - 1) / kMetaBlockBytes * kMetaBlockBytes, 0);
  Status s = EnsureLogSpace(out.size(), GetFixed64(&records.front()[8]));
  if (s.ok()) s = WriteExtentBytes(log_extents_.back(), log_pos_, out.data(), out.size());
  if (s.ok()) s = FlushLuns({log_extents_.back().lun});
  if (!s.ok()) {
    // The records may or may not be on disk: the in-memory table can no
    // longer be trusted to match. Fail everything until remounted.
    sticky_ = s.WithContext("metadata log write failed; remount to recover");
    return sticky_;
  }
  log_pos_ += out.size();
  log_bytes_ += out.size();
  return Status();
}

Status MetaFs::MaybeCompact() {
  // Callers apply a record's effect to the table before this, so the
  // snapshot includes it.
  if (log_bytes_ <= options_.log_compact_bytes) return Status();
  return CompactLog();
}

Status MetaFs::CompactLog() {
  // The current table as records of a fresh log.
  const auto old_extents = log_extents_;
  const uint64_t old_start = log_start_seq_, old_salt = log_salt_, old_pos = log_pos_, old_bytes = log_bytes_;
  auto first = alloc_->Allocate(options_.log_extent_bytes);
  if (!first.ok()) {
    // No room to compact: keep appending to the old log, which is intact.
    if (first.status().code() == Code::kNoSpace) return Status();
    return first.status();
  }
  for (size_t i = 1; i < first->size(); i++) GiveBack((*first)[i]);
  log_extents_ = {(*first)[0]};
  log_pos_ = 0;
  log_bytes_ = 0;
  log_salt_ = RandomU64();
  log_start_seq_ = next_seq_;
  std::vector<std::vector<uint8_t>> recs;
  for (const auto& [id, f] : files_) {
    Encoder c;
    c.U64(id);
    c.U64(f->mtime_ns);
    c.Str16(f->name);
    recs.push_back(EncodeRecord(kCreate, c.str()));
    for (const Extent& e : f->logged) {
      Encoder x;
      x.U64(id);
      x.U32(e.lun);
      x.U64(e.offset);
      x.U64(e.length);
      recs.push_back(EncodeRecord(kExtent, x.str()));
    }
    Encoder z;
    z.U64(id);
    z.U64(f->durable_size);
    z.U64(f->mtime_ns);
    recs.push_back(EncodeRecord(kSize, z.str()));
  }
  // Write the snapshot (possibly chaining), then point the superblock at it.
  Status s;
  const uint64_t threshold = options_.log_compact_bytes;
  for (size_t i = 0; i < recs.size() && s.ok();) {
    // Batches of up to 64 KiB of records.
    std::vector<std::vector<uint8_t>> batch;
    size_t bytes = 0;
    while (i < recs.size() && bytes < (64 << 10)) {
      bytes += recs[i].size() + kRecordHeader;
      batch.push_back(std::move(recs[i++]));
    }
    std::vector<uint8_t> out;
    for (const auto& r : batch) {
      const size_t in_block = out.size() % kMetaBlockBytes;
      if (in_block + r.size() > kMetaBlockBytes) out.resize(out.size() + kMetaBlockBytes - in_block, 0);
      out.insert(out.end(), r.begin(), r.end());
    }
    out.resize((out.size() + kMetaBlockBytes - 1) / kMetaBlockBytes * kMetaBlockBytes, 0);
    s = EnsureLogSpace(out.size(), GetFixed64(&batch.front()[8]));
    if (s.ok()) s = WriteExtentBytes(log_extents_.back(), log_pos_, out.data(), out.size());
    if (s.ok()) {
      log_pos_ += out.size();
      log_bytes_ += out.size();
    }
  }
  if (s.ok()) {
    std::vector<uint32_t> luns;
    for (const Extent& e : log_extents_) luns.push_back(e.lun);
    std::sort(luns.begin(), luns.end());
    luns.erase(std::unique(luns.begin(), luns.end()), luns.end());
    s = FlushLuns(luns);
  }
  if (s.ok()) s = WriteSuperblock();
  if (!s.ok()) {
    // The old log is intact and still named by the superblock on disk.
    for (const Extent& e : log_extents_) GiveBack(e);
    log_extents_ = old_extents;
    log_start_seq_ = old_start;
    log_salt_ = old_salt;
    log_pos_ = old_pos;
    log_bytes_ = old_bytes;
    sticky_ = s.WithContext("metadata log compaction failed; remount to recover");
    return sticky_;
  }
  for (const Extent& e : old_extents) GiveBack(e);
  compactions_++;
  NASGW_LOG(kDebug, "fs") << "metadata log compacted" << Kv("domain", domain_) << Kv("bytes", log_bytes_)
                          << Kv("threshold", threshold);
  return Status();
}

// ---- create and mount -------------------------------------------------------------

Result<std::unique_ptr<MetaFs>> MetaFs::Create(const std::shared_ptr<Reserve>& reserve, uint32_t domain,
                                               const std::vector<AgId>& groups, const MetaFsOptions& options) {
  if (domain >= kDomainsMax) return Status::InvalidArgument("domain id must be below " + std::to_string(kDomainsMax));
  if (groups.empty() || groups.size() > kMetaGroupsMax) {
    return Status::InvalidArgument("a metadata store needs 1-" + std::to_string(kMetaGroupsMax) + " allocation groups");
  }
  std::unique_ptr<MetaFs> fs(new MetaFs(reserve, domain, options));
  // Refuse to overwrite a live store.
  auto dev = reserve->lun(0);
  for (uint64_t copy = 0; copy < 2; copy++) {
    std::vector<uint8_t> b(kMetaBlockBytes);
    NASGW_RETURN_IF_ERROR(block::ReadSync(*dev, SlotOffset(domain, copy) / dev->info().block_size, b.data(), b.size()));
    auto sb = DecodeSuper(b);
    if (sb.ok() && sb->reserve == reserve->uuid()) {
      return Status::Exists("domain " + std::to_string(domain) + " already has a metadata store");
    }
  }
  fs->alloc_ = std::make_unique<Allocator>(reserve->ag_bytes(), kMetaBlockBytes);
  MutexLock lock(fs->mu_);  // no one else has it yet; held for the analysis
  std::set<AgId> seen;
  for (const AgId& g : groups) {
    if (g.lun >= reserve->lun_count() || g.index >= reserve->ag_count(g.lun) || !seen.insert(g).second) {
      return Status::InvalidArgument("allocation group " + std::to_string(g.lun) + "/" + std::to_string(g.index) +
                                     " does not exist or is listed twice");
    }
    NASGW_RETURN_IF_ERROR(fs->alloc_->AddGroup(g, Reserve::AgOffset(reserve->ag_bytes(), g.index)));
  }
  fs->groups_ = groups;
  auto first = fs->alloc_->Allocate(options.log_extent_bytes);
  if (!first.ok()) return first.status().WithContext("metadata log");
  fs->log_extents_ = {(*first)[0]};
  for (size_t i = 1; i < first->size(); i++) fs->GiveBack((*first)[i]);
  fs->log_salt_ = RandomU64();
  // Write both copies so that no stale superblock of an earlier life remains.
  NASGW_RETURN_IF_ERROR(fs->WriteSuperblock());
  NASGW_RETURN_IF_ERROR(fs->WriteSuperblock());
  return fs;
}

Result<std::unique_ptr<MetaFs>> MetaFs::Mount(const std::shared_ptr<Reserve>& reserve, uint32_t domain,
                                              const MetaFsOptions& options) {
  if (domain >= kDomainsMax) return Status::InvalidArgument("domain id must be below " + std::to_string(kDomainsMax));
  auto dev = reserve->lun(0);
  Result<Superblock> best = Status::NotFound("domain " + std::to_string(domain) + " has no metadata store");
  Status damaged;
  for (uint64_t copy = 0; copy < 2; copy++) {
    std::vector<uint8_t> b(kMetaBlockBytes);
    NASGW_RETURN_IF_ERROR(block::ReadSync(*dev, SlotOffset(domain, copy) / dev->info().block_size, b.data(), b.size()));
    auto sb = DecodeSuper(b);
    if (!sb.ok()) {
      if (sb.status().code() != Code::kNotFound) damaged = sb.status();
      continue;
    }
    if (sb->reserve != reserve->uuid() || sb->domain != domain) continue;
    if (!best.ok() || sb->seq > best->seq) best = sb;
  }
  if (!best.ok()) return damaged.ok() ? best.status() : damaged.WithContext("domain " + std::to_string(domain));
  std::unique_ptr<MetaFs> fs(new MetaFs(reserve, domain, options));
  MutexLock lock(fs->mu_);
  fs->sb_seq_ = best->seq;
  fs->log_start_seq_ = best->log_start_seq;
  fs->log_salt_ = best->log_salt;
  fs->groups_ = best->groups;
  fs->alloc_ = std::make_unique<Allocator>(reserve->ag_bytes(), kMetaBlockBytes);
  for (const AgId& g : fs->groups_) {
    if (g.lun >= reserve->lun_count() || g.index >= reserve->ag_count(g.lun)) {
      return Status::Corruption("metadata superblock names a missing allocation group");
    }
    NASGW_RETURN_IF_ERROR(fs->alloc_->AddGroup(g, Reserve::AgOffset(reserve->ag_bytes(), g.index)));
  }
  fs->log_extents_ = {best->log_first};
  NASGW_RETURN_IF_ERROR(fs->Replay());
  // Space in use: every logged file extent and the log itself.
  for (const Extent& e : fs->log_extents_) {
    NASGW_RETURN_IF_ERROR(fs->alloc_->MarkUsed(e).WithContext("metadata log extent"));
  }
  std::vector<FileRef> files;
  for (const auto& [id, f] : fs->files_) files.push_back(f);
  lock.Unlock();  // a File's mu is taken before mu_, never under it
  for (const FileRef& f : files) {
    for (const Extent& e : f->logged) {
      NASGW_RETURN_IF_ERROR(fs->alloc_->MarkUsed(e).WithContext("extent of metadata file " + f->name));
    }
    MutexLock file_lock(f->mu);
    f->extents = f->logged;
    f->allocated = 0;
    for (const Extent& e : f->extents) f->allocated += e.length;
    f->size = f->durable_size;
    // Re-read the partial tail block so appends continue it.
    f->buf_start = f->size / kMetaBlockBytes * kMetaBlockBytes;
    if (f->size > f->buf_start) {
      f->buf.resize(f->size - f->buf_start);
      std::vector<uint8_t> block(kMetaBlockBytes);
      uint64_t off = f->buf_start;
      for (const Extent& e : f->extents) {
        if (off < e.length) {
          NASGW_RETURN_IF_ERROR(fs->ReadExtentBytes(e, off, block.data(), block.size()));
          break;
        }
        off -= e.length;
      }
      std::memcpy(f->buf.data(), block.data(), f->buf.size());
    }
  }
  return fs;
}

Status MetaFs::Replay() {
  uint64_t expect = log_start_seq_;
  size_t link = 0;
  std::vector<uint8_t> chunk;
  uint64_t pos = 0;
  for (;;) {
    const Extent e = log_extents_[link];
    if (pos >= e.length) break;
    const size_t n = static_cast<size_t>(std::min<uint64_t>(kReplayReadBytes, e.length - pos));
    chunk.resize(n);
    NASGW_RETURN_IF_ERROR(ReadExtentBytes(e, pos, chunk.data(), n).WithContext("read metadata log"));
    bool end = false, jumped = false;
    for (size_t blk = 0; blk < n && !end && !jumped; blk += kMetaBlockBytes) {
      size_t off = 0;
      bool any = false;
      while (off + kRecordHeader <= kMetaBlockBytes) {
        const uint8_t* r = &chunk[blk + off];
        const uint32_t len = GetFixed32(r);
        if (len == 0 && any) break;  // padding: the rest of this block is empty
        if (len > kRecordPayloadMax || off + kRecordHeader + len > kMetaBlockBytes ||
            GetFixed32(r + 4) != RecordCrc(log_salt_, r + 8, 9 + len) || GetFixed64(r + 8) != expect) {
          if (!any) end = true;  // a block that does not start with the next record: the end
          break;
        }
        any = true;
        const uint8_t type = r[16];
        if (type != kLogNext) expect++;  // a link does not consume its number
        Decoder rd(std::string_view(reinterpret_cast<const char*>(r + kRecordHeader), len));
        switch (type) {
          case kCreate: {
            auto f = std::make_shared<File>();
            f->id = rd.U64();
            f->mtime_ns = rd.U64();
            f->name = rd.Str16();
            if (!rd.ok()) return Status::Corruption("metadata log: bad create record");
            if (auto old = names_.find(f->name); old != names_.end()) DropFile(old->second);
            DropFile(f->id);
            files_[f->id] = f;
            names_[f->name] = f->id;
            next_file_id_ = std::max(next_file_id_, f->id + 1);
            break;
          }
          case kExtent: {
            const uint64_t id = rd.U64();
            Extent x{rd.U32(), rd.U64(), rd.U64()};
            auto it = files_.find(id);
            if (!rd.ok() || it == files_.end()) return Status::Corruption("metadata log: extent of unknown file");
            it->second->logged.push_back(x);
            break;
          }
          case kSize: {
            const uint64_t id = rd.U64();
            const uint64_t size = rd.U64();
            const uint64_t mtime = rd.U64();
            auto it = files_.find(id);
            if (!rd.ok() || it == files_.end()) return Status::Corruption("metadata log: size of unknown file");
            it->second->durable_size = size;
            it->second->mtime_ns = mtime;
            break;
          }
          case kRename: {
            const uint64_t id = rd.U64();
            const std::string name = rd.Str16();
            auto it = files_.find(id);
            if (!rd.ok() || it == files_.end()) return Status::Corruption("metadata log: rename of unknown file");
            if (auto old = names_.find(name); old != names_.end() && old->second != id) DropFile(old->second);
            names_.erase(it->second->name);
            it->second->name = name;
            names_[name] = id;
            break;
          }
          case kDelete: {
            const uint64_t id = rd.U64();
            if (!rd.ok()) return Status::Corruption("metadata log: bad delete record");
            DropFile(id);
            break;
          }
          case kLogNext: {
            Extent x{rd.U32(), rd.U64(), rd.U64()};
            if (!rd.ok() || x.length == 0) return Status::Corruption("metadata log: bad link record");
            log_extents_.push_back(x);
            link++;
            pos = 0;
            log_pos_ = 0;
            jumped = true;
            break;
          }
          default:
            return Status::Corruption("metadata log: unknown record type " + std::to_string(type));
        }
        if (jumped) break;
        off += kRecordHeader + len;
      }
      if (!end && !jumped) log_pos_ = pos + blk + kMetaBlockBytes;
    }
    if (end) break;
    if (!jumped) pos += n;
  }
  next_seq_ = expect;
  log_bytes_ = 0;
  for (size_t i = 0; i + 1 < log_extents_.size(); i++) log_bytes_ += log_extents_[i].length;
  log_bytes_ += log_pos_;
  return Status();
}

void MetaFs::GiveBack(const Extent& e) {
  Status s = alloc_->Free(e);
  if (!s.ok()) NASGW_LOG(kError, "fs") << "metadata extent free" << Kv("domain", domain_) << Kv("error", s.ToString());
}

std::string MetaFs::NameOf(const File& f) {
  MutexLock lock(mu_);
  return f.name;
}

void MetaFs::DropFile(uint64_t id) {
  auto it = files_.find(id);
  if (it == files_.end()) return;
  auto n = names_.find(it->second->name);
  if (n != names_.end() && n->second == id) names_.erase(n);
  it->second->deleted = true;
  files_.erase(it);
}

// ---- file operations -----------------------------------------------------------

Result<MetaFs::FileRef> MetaFs::OpenForWrite(const std::string& name) {
  if (name.empty() || name.size() > kMetaFileNameMax) return Status::InvalidArgument("bad metadata file name");
  FileRef replaced;
  FileRef f = std::make_shared<File>();
  {
    MutexLock lock(mu_);
    if (!sticky_.ok()) return sticky_;
    if (auto old = names_.find(name); old != names_.end()) replaced = files_[old->second];
    f->id = next_file_id_++;
    f->name = name;
    f->mtime_ns = WallNanos();
    Encoder w;
    w.U64(f->id);
    w.U64(f->mtime_ns);
    w.Str16(name);
    // The create record replaces any file of that name at replay.
    NASGW_RETURN_IF_ERROR(AppendLog({EncodeRecord(kCreate, w.str())}));
    if (auto old = names_.find(name); old != names_.end()) DropFile(old->second);
    files_[f->id] = f;
    names_[name] = f->id;
    NASGW_RETURN_IF_ERROR(MaybeCompact());
  }
  if (replaced) ReleaseSpace(*replaced);
  return f;
}

Result<MetaFs::FileRef> MetaFs::OpenForRead(const std::string& name) {
  MutexLock lock(mu_);
  auto it = names_.find(name);
  if (it == names_.end()) return Status::NotFound("metadata file " + name);
  return files_[it->second];
}

Status MetaFs::WriteBuffered(File& f, bool tail) REQUIRES(f.mu) {
  const size_t whole = f.buf.size() / kMetaBlockBytes * kMetaBlockBytes;
  const size_t len = tail ? (f.buf.size() + kMetaBlockBytes - 1) / kMetaBlockBytes * kMetaBlockBytes : whole;
  if (len == 0) return Status();
  // Make room: chunks grow with the file, from chunk_min to chunk_max.
  while (f.allocated < f.buf_start + len) {
    // (at most 1/32 of the metadata space: a small one is not taken in a
    // few large chunks half of which are never written)
    const uint64_t chunk_max =
        std::max(options_.chunk_min_bytes, std::min(options_.chunk_max_bytes, alloc_->total_bytes() / 32));
    uint64_t chunk = std::clamp<uint64_t>(f.allocated, options_.chunk_min_bytes, chunk_max);
    chunk = std::max<uint64_t>(chunk, f.buf_start + len - f.allocated);
    auto got = alloc_->Allocate(chunk);
    if (!got.ok()) return got.status().WithContext("metadata file " + NameOf(f));
    for (const Extent& e : *got) {
      f.extents.push_back(e);
      f.allocated += e.length;
    }
  }
  std::vector<uint8_t> padded;
  const uint8_t* src = f.buf.data();
  if (len > f.buf.size()) {
    padded.assign(f.buf.begin(), f.buf.end());
    padded.resize(len, 0);
    src = padded.data();
  }
  // Write [buf_start, buf_start + len) extent by extent.
  uint64_t file_off = 0;
  size_t done = 0;
  for (const Extent& e : f.extents) {
    if (done == len) break;
    const uint64_t at = f.buf_start + done;
    if (at >= file_off + e.length) {
      file_off += e.length;
      continue;
    }
    const uint64_t in = at - file_off;
    const size_t n = static_cast<size_t>(std::min<uint64_t>(len - done, e.length - in));
    NASGW_RETURN_IF_ERROR(WriteExtentBytes(e, in, src + done, n));
    f.dirty_luns.insert(e.lun);
    done += n;
    file_off += e.length;
  }
  NASGW_ASSERT_EQ(done, len);
  // Whole blocks leave the buffer; a partial tail stays for later appends.
  f.buf.erase(f.buf.begin(), f.buf.begin() + static_cast<std::ptrdiff_t>(whole));
  f.buf_start += whole;
  return Status();
}

Status MetaFs::Append(const FileRef& f, const void* data, size_t n) {
  MutexLock lock(f->mu);
  if (f->deleted) return Status::NotFound("metadata file was deleted");
  const auto* p = static_cast<const uint8_t*>(data);
  f->buf.insert(f->buf.end(), p, p + n);
  f->size += n;
  if (f->buf.size() >= kWriteBackBytes) return WriteBuffered(*f, false);
  return Status();
}

Status MetaFs::Flush(const FileRef& f) {
  MutexLock lock(f->mu);
  return WriteBuffered(*f, false);
}

Status MetaFs::Sync(const FileRef& f) {
  MutexLock lock(f->mu);
  NASGW_RETURN_IF_ERROR(WriteBuffered(*f, true));
  // Data first, on the platters (or the array's protected cache)...
  NASGW_RETURN_IF_ERROR(FlushLuns({f->dirty_luns.begin(), f->dirty_luns.end()}));
  f->dirty_luns.clear();
  // ...then the records that make it reachable.
  MutexLock meta(mu_);
  if (f->deleted) return Status::NotFound("metadata file was deleted");
  std::vector<std::vector<uint8_t>> recs;
  for (size_t i = f->logged.size(); i < f->extents.size(); i++) {
    Encoder x;
    x.U64(f->id);
    x.U32(f->extents[i].lun);
    x.U64(f->extents[i].offset);
    x.U64(f->extents[i].length);
    recs.push_back(EncodeRecord(kExtent, x.str()));
  }
  if (recs.empty() && f->durable_size == f->size) return sticky_;
  const uint64_t now = WallNanos();
  Encoder z;
  z.U64(f->id);
  z.U64(f->size);
  z.U64(now);
  recs.push_back(EncodeRecord(kSize, z.str()));
  NASGW_RETURN_IF_ERROR(AppendLog(recs));
  f->logged = f->extents;
  f->durable_size = f->size;
  f->mtime_ns = now;
  return MaybeCompact();
}

Status MetaFs::Close(const FileRef& f) {
  return Sync(f);
}

Result<size_t> MetaFs::Read(const FileRef& f, uint64_t offset, size_t n, void* out) {
  MutexLock lock(f->mu);
  if (offset >= f->size) return size_t{0};
  n = static_cast<size_t>(std::min<uint64_t>(n, f->size - offset));
  auto* dst = static_cast<uint8_t*>(out);
  size_t done = 0;
  std::vector<uint8_t> tmp;
  while (done < n) {
    const uint64_t at = offset + done;
    if (at >= f->buf_start) {  // still in the write buffer
      const size_t k = std::min(n - done, static_cast<size_t>(f->buf_start + f->buf.size() - at));
      std::memcpy(dst + done, f->buf.data() + (at - f->buf_start), k);
      done += k;
      continue;
    }
    // Find the extent holding `at`; read whole blocks around what is needed.
    uint64_t file_off = 0;
    const Extent* e = nullptr;
    for (const Extent& x : f->extents) {
      if (at < file_off + x.length) {
        e = &x;
        break;
      }
      file_off += x.length;
    }
    if (e == nullptr) return Status::Corruption("metadata file " + NameOf(*f) + " shorter than its size");
    const uint64_t in = at - file_off;
    const uint64_t first = in / kMetaBlockBytes * kMetaBlockBytes;
    const uint64_t limit = std::min<uint64_t>({e->length, f->buf_start - file_off, in + (n - done)});
    const uint64_t last = (limit + kMetaBlockBytes - 1) / kMetaBlockBytes * kMetaBlockBytes;
    tmp.resize(static_cast<size_t>(std::min<uint64_t>(last, e->length) - first));
    NASGW_RETURN_IF_ERROR(ReadExtentBytes(*e, first, tmp.data(), tmp.size()));
    const size_t k = static_cast<size_t>(limit - in);
    std::memcpy(dst + done, tmp.data() + (in - first), k);
    done += k;
  }
  return n;
}

Status MetaFs::Rename(const std::string& from, const std::string& to) {
  if (to.empty() || to.size() > kMetaFileNameMax) return Status::InvalidArgument("bad metadata file name");
  FileRef replaced;
  {
    MutexLock lock(mu_);
    auto it = names_.find(from);
    if (it == names_.end()) return Status::NotFound("metadata file " + from);
    const uint64_t id = it->second;
    if (from == to) return Status();
    if (auto old = names_.find(to); old != names_.end()) replaced = files_[old->second];
    Encoder w;
    w.U64(id);
    w.Str16(to);
    NASGW_RETURN_IF_ERROR(AppendLog({EncodeRecord(kRename, w.str())}));
    if (auto old = names_.find(to); old != names_.end()) DropFile(old->second);
    names_.erase(from);
    files_[id]->name = to;
    names_[to] = id;
    NASGW_RETURN_IF_ERROR(MaybeCompact());
  }
  if (replaced) ReleaseSpace(*replaced);
  return Status();
}

Status MetaFs::Delete(const std::string& name) {
  FileRef f;
  Status compacted;
  {
    MutexLock lock(mu_);
    auto it = names_.find(name);
    if (it == names_.end()) return Status::NotFound("metadata file " + name);
    f = files_[it->second];
    Encoder w;
    w.U64(f->id);
    NASGW_RETURN_IF_ERROR(AppendLog({EncodeRecord(kDelete, w.str())}));
    DropFile(f->id);
    compacted = MaybeCompact();
  }
  // The delete itself is durable, whether or not the compaction worked. Not
  // under mu_: ReleaseSpace takes the file's mu, which comes first.
  ReleaseSpace(*f);
  return compacted;
}

void MetaFs::ReleaseSpace(File& f) {
  // Called once the record that drops the file is durable, so the space may
  // be reused. The writer's view includes extents allocated but never logged.
  MutexLock lock(f.mu);
  for (const Extent& e : f.extents) GiveBack(e);
  f.extents.clear();
  f.allocated = 0;
}

bool MetaFs::Exists(const std::string& name) {
  MutexLock lock(mu_);
  return names_.contains(name);
}

Result<uint64_t> MetaFs::Size(const std::string& name) {
  FileRef f;
  {
    MutexLock lock(mu_);
    auto it = names_.find(name);
    if (it == names_.end()) return Status::NotFound("metadata file " + name);
    f = files_[it->second];
  }
  MutexLock lock(f->mu);
  return f->size;
}

Result<uint64_t> MetaFs::ModifiedNs(const std::string& name) {
  MutexLock lock(mu_);
  auto it = names_.find(name);
  if (it == names_.end()) return Status::NotFound("metadata file " + name);
  return files_[it->second]->mtime_ns;
}

std::vector<std::string> MetaFs::List(const std::string& prefix) {
  MutexLock lock(mu_);
  std::vector<std::string> out;
  for (auto it = names_.lower_bound(prefix); it != names_.end() && it->first.compare(0, prefix.size(), prefix) == 0;
       ++it) {
    out.push_back(it->first);
  }
  return out;
}

std::vector<AgId> MetaFs::groups() {
  MutexLock lock(mu_);
  return groups_;
}

MetaFsStats MetaFs::Stats() {
  MutexLock lock(mu_);
  MetaFsStats s;
  s.files = files_.size();
  for (const auto& [id, f] : files_) s.file_bytes += f->durable_size;
  s.allocated_bytes = alloc_->total_bytes() - alloc_->free_bytes();
  s.free_bytes = alloc_->free_bytes();
  s.log_bytes = log_bytes_;
  s.compactions = compactions_;
  return s;
}

}  // namespace nasgw::fs
