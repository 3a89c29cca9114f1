// A domain's file data: redirect-on-write records (fs/domain.h, "data").
#include <algorithm>
#include <cstring>
#include <optional>

#include "base/limits.h"
#include "block/block_device.h"
#include "fs/acl.h"
#include "fs/domain_impl.h"

namespace nasgw::fs {

using namespace keys;  // fs/keys.h: the keys and values of the metadata

void Domain::Impl::ReadRecord(block::IoBatch& io, const RecordMap& m, uint64_t from, uint64_t to, uint8_t* out) {
  std::memset(out, 0, to - from);  // holes read as zeros
  for (const RecordPiece& p : m.pieces) {
    const uint64_t lo = std::max<uint64_t>(p.at, from), hi = std::min(p.end(), to);
    if (lo >= hi) continue;
    auto dev = reserve->lun(p.ext.lun);
    io.Read(*dev, (p.ext.offset + (lo - p.at)) / dev->info().block_size, out + (lo - from), hi - lo);
  }
}

void Domain::Impl::WriteExtents(block::IoBatch& io, const std::vector<Extent>& extents, const uint8_t* data) {
  size_t done = 0;
  for (const Extent& e : extents) {
    auto dev = reserve->lun(e.lun);
    io.Write(*dev, e.offset / dev->info().block_size, data + done, e.length, /*fua=*/true);
    done += e.length;
  }
}

namespace {
uint64_t BlockDown(uint64_t x) {
  return x / kDataBlock * kDataBlock;
}
uint64_t BlockUp(uint64_t x) {
  return (x + kDataBlock - 1) / kDataBlock * kDataBlock;
}

// Gives back the part of a reservation that did not become extents, on
// every way out of a change.
struct Unused {
  Allocator& a;
  uint64_t need;
  uint64_t taken = 0;
  ~Unused() {
    if (need > taken) a.Unreserve(need - taken);
  }
};
}  // namespace

void Domain::Impl::FreeRange(Txn& t, uint32_t vol, Inode& in, VolumeRec& v, RecordMap& m, uint64_t lo, uint64_t hi) {
  if (lo >= hi) return;
  std::vector<RecordPiece> out;
  out.reserve(m.pieces.size() + 1);
  for (const RecordPiece& p : m.pieces) {
    if (p.end() <= lo || p.at >= hi) {
      out.push_back(p);
      continue;
    }
    if (p.at < lo) out.push_back({p.at, {p.ext.lun, p.ext.offset, lo - p.at}, p.birth});
    const uint64_t a = std::max<uint64_t>(p.at, lo), b = std::min(p.end(), hi);
    t.Kill(vol, {p.ext.lun, p.ext.offset + (a - p.at), b - a}, p.birth);
    in.a.blocks -= std::min<uint64_t>(in.a.blocks, (b - a) / 512);
    v.bytes -= std::min(v.bytes, b - a);
    if (p.end() > hi) {
      out.push_back({static_cast<uint32_t>(hi), {p.ext.lun, p.ext.offset + (hi - p.at), p.end() - hi}, p.birth});
    }
  }
  m.pieces = std::move(out);
}

void Domain::Impl::PlaceBlocks(Txn& t, uint32_t vol, Inode& in, VolumeRec& v, RecordMap& m, uint64_t at,
                               const std::vector<Extent>& got) {
  uint64_t n = 0;
  for (const Extent& e : got) n += e.length;
  // What the new blocks cover of older pieces is freed once this commits.
  FreeRange(t, vol, in, v, m, at, at + n);
  std::vector<RecordPiece> out = std::move(m.pieces);
  uint64_t pos = at;
  for (const Extent& e : got) {
    out.push_back({static_cast<uint32_t>(pos), e, rec.txg + 1});
    pos += e.length;
  }
  in.a.blocks += n / 512;
  v.bytes += n;
  std::sort(out.begin(), out.end(), [](const RecordPiece& x, const RecordPiece& y) { return x.at < y.at; });
  // Neighbours that are one run on one LUN, written together, become one.
  m.pieces.clear();
  for (const RecordPiece& p : out) {
    if (!m.pieces.empty()) {
      RecordPiece& q = m.pieces.back();
      if (q.end() == p.at && q.ext.lun == p.ext.lun && q.ext.end() == p.ext.offset && q.birth == p.birth) {
        q.ext.length += p.ext.length;
        continue;
      }
    }
    m.pieces.push_back(p);
  }
}

Status Domain::Impl::ZeroRecord(Txn& t, uint32_t vol, Inode& in, VolumeRec& v, uint64_t r, RecordMap m, uint64_t from,
                                uint64_t to) {
  // Whole blocks are freed; a block the range covers only in part is
  // rewritten, when it holds data, with zeros over the part.
  FreeRange(t, vol, in, v, m, BlockUp(from), std::max(BlockUp(from), BlockDown(to)));
  for (const uint64_t b : {BlockDown(from), BlockDown(to)}) {
    const uint64_t lo = std::max(from, b), hi = std::min(to, b + kDataBlock);
    if (lo >= hi || (lo == b && hi == b + kDataBlock)) continue;  // none of it, or freed above
    const bool held = std::any_of(m.pieces.begin(), m.pieces.end(),
                                  [&](const RecordPiece& p) { return p.at < b + kDataBlock && p.end() > b; });
    if (!held) continue;  // a hole reads zeros already
    NASGW_RETURN_IF_ERROR(data_reserve(kDataBlock));
    Unused unused{*space, kDataBlock};
    std::vector<uint8_t> buf(kDataBlock);
    {
      block::IoBatch io(1);
      ReadRecord(io, m, b, b + kDataBlock, buf.data());
      NASGW_RETURN_IF_ERROR(io.Wait());
    }
    std::memset(buf.data() + (lo - b), 0, hi - lo);
    auto got = space->AllocateReserved(kDataBlock);
    if (!got.ok()) return got.status();
    unused.taken = kDataBlock;
    t.allocated.insert(t.allocated.end(), got->begin(), got->end());
    {
      block::IoBatch io(limits::kDataIoDepth);
      WriteExtents(io, *got, buf.data());
      NASGW_RETURN_IF_ERROR(io.Wait());
    }
    PlaceBlocks(t, vol, in, v, m, b, *got);
    if (BlockDown(from) == BlockDown(to)) break;  // one block: done
  }
  if (m.pieces.empty()) {
    t.batch.Delete(ExtentKey(vol, in.a.ino, r));
  } else {
    t.batch.Put(ExtentKey(vol, in.a.ino, r), EncodeRecordMap(m));
  }
  return Status();
}

Status Domain::Impl::PlanSpans(uint32_t vol, uint64_t ino, uint64_t rs, const std::vector<WritePiece>& pieces,
                               std::map<uint64_t, RecordMap>* maps, std::vector<Span>* spans) {
  for (const WritePiece& w : pieces) {
    for (uint64_t r = w.off / rs; r <= (w.off + w.n - 1) / rs; r++) {
      const uint64_t start = r * rs;
      const uint64_t from = BlockDown(std::max(w.off, start) - start);
      const uint64_t to = BlockUp(std::min(w.off + w.n, start + rs) - start);
      if (!spans->empty() && spans->back().r == r && from <= spans->back().to) {
        spans->back().to = std::max(spans->back().to, to);
      } else {
        spans->push_back({r, from, to, {}});
      }
    }
  }
  // The maps of the records touched: one scan per run of consecutive ones.
  for (size_t i = 0; i < spans->size();) {
    const uint64_t first = (*spans)[i].r;
    uint64_t last = first;
    while (i < spans->size() && (*spans)[i].r <= last + 1) last = (*spans)[i++].r;
    auto loaded = LoadRecords(vol, ino, first, last);
    if (!loaded.ok()) return loaded.status();
    maps->merge(*loaded);
  }
  return Status();
}

Status Domain::Impl::FillSpans(const std::map<uint64_t, RecordMap>& maps, uint64_t rs, uint64_t old_size,
                               const std::vector<WritePiece>& pieces, const std::vector<Span>& spans) {
  static const RecordMap kHole;
  // Every span's blocks in memory (bounded by what the pieces hold, plus a
  // block at each end): first the old bytes of blocks a piece covers only
  // in part, all read at once; then the new bytes over them; then every
  // span written at once, over all the LUNs.
  std::vector<std::vector<uint8_t>> bufs(spans.size());
  std::vector<std::pair<size_t, size_t>> firsts(spans.size());  // pieces reaching each span: [from, to)
  {
    block::IoBatch io(limits::kDataIoDepth, block::IoClass::kBulk);
    size_t p = 0;  // the first piece that may reach the span
    for (size_t i = 0; i < spans.size(); i++) {
      const Span& sp = spans[i];
      const uint64_t start = sp.r * rs;
      auto it = maps.find(sp.r);
      const RecordMap& m = it == maps.end() ? kHole : it->second;
      const uint64_t old_valid = old_size > start ? std::min(rs, old_size - start) : 0;
      bufs[i].assign(sp.to - sp.from, 0);
      const uint64_t lo = start + sp.from, hi = start + sp.to;
      while (p < pieces.size() && pieces[p].off + pieces[p].n <= lo) p++;
      size_t q = p;
      std::vector<uint64_t> partial;
      for (; q < pieces.size() && pieces[q].off < hi; q++) {
        const uint64_t a = std::max(pieces[q].off, lo) - start, b = std::min(pieces[q].off + pieces[q].n, hi) - start;
        // Each block once: two pieces may share one (a second read into it
        // would clear the buffer under the first).
        for (const uint64_t edge : {a, b}) {
          if (edge % kDataBlock != 0 && (partial.empty() || partial.back() != BlockDown(edge))) {
            partial.push_back(BlockDown(edge));
          }
        }
      }
      firsts[i] = {p, q};
      // Old bytes only below the old end (zeros past it, whatever the
      // array holds there).
      for (uint64_t blk : partial) {
        if (m.pieces.empty() || blk >= old_valid) continue;
        ReadRecord(io, m, blk, std::min(blk + kDataBlock, BlockUp(old_valid)), bufs[i].data() + (blk - sp.from));
      }
    }
    NASGW_RETURN_IF_ERROR(io.Wait());
  }
  block::IoBatch io(limits::kDataIoDepth, block::IoClass::kBulk);
  for (size_t i = 0; i < spans.size(); i++) {
    const Span& sp = spans[i];
    const uint64_t start = sp.r * rs, lo = start + sp.from, hi = start + sp.to;
    const uint64_t old_valid = old_size > start ? std::min(rs, old_size - start) : 0;
    // A partly read block: zeros from the old end.
    if (old_valid > sp.from && old_valid < sp.to && old_valid % kDataBlock != 0) {
      std::memset(bufs[i].data() + (old_valid - sp.from), 0, BlockUp(old_valid) - old_valid);
    }
    for (size_t q = firsts[i].first; q < firsts[i].second; q++) {
      const WritePiece& w = pieces[q];
      const uint64_t a = std::max(w.off, lo), b = std::min(w.off + w.n, hi);
      std::memcpy(bufs[i].data() + (a - lo), w.data + (a - w.off), b - a);
    }
    WriteExtents(io, sp.got, bufs[i].data());
  }
  return io.Wait();
}

Result<size_t> Domain::Read(uint32_t vol, uint64_t ino, uint64_t offset, size_t n, void* out, uint32_t snap) {
  // Inside the fence from before the maps are read until the last device
  // read: what they name is not reused meanwhile.
  ReadFence::Reader fenced(impl_->fence);
  std::map<uint64_t, RecordMap> recs;
  uint64_t rs = 0;
  {
    ReaderLock lock(impl_->mu);
    auto at = impl_->ReadAt(vol, snap);
    if (!at.ok()) return at.status();
    auto v = impl_->LoadVolume(vol, *at);
    if (!v.ok()) return v.status();
    auto in = impl_->LoadInode(vol, ino, *at);
    if (!in.ok()) return in.status();
    if (in->a.type == FileType::kDirectory) return Status(Code::kIsDir, "is a directory");
    if (offset >= in->a.size) return size_t{0};
    n = static_cast<size_t>(std::min<uint64_t>(n, in->a.size - offset));
    rs = v->record_bytes;
    auto loaded = impl_->LoadRecords(vol, ino, offset / rs, (offset + n - 1) / rs, *at);
    if (!loaded.ok()) return loaded.status();
    recs = std::move(*loaded);
  }
  auto* dst = static_cast<uint8_t*>(out);
  std::memset(dst, 0, n);  // holes read as zeros
  // Every record's pieces read at once, over all the LUNs, each record into
  // a block-aligned buffer; then copied out.
  std::vector<std::vector<uint8_t>> bufs(recs.size());
  {
    block::IoBatch io(limits::kDataIoDepth, block::IoClass::kBulk);
    size_t i = 0;
    for (const auto& [r, m] : recs) {
      const uint64_t start = r * rs;
      const uint64_t from = std::max(offset, start), to = std::min<uint64_t>(offset + n, start + rs);
      if (from < to) {
        const uint64_t first = BlockDown(from - start), last = BlockUp(to - start);
        bufs[i].resize(static_cast<size_t>(last - first));
        impl_->ReadRecord(io, m, first, last, bufs[i].data());
      }
      i++;
    }
    NASGW_RETURN_IF_ERROR(io.Wait());
  }
  size_t i = 0;
  for (const auto& [r, m] : recs) {
    const uint64_t start = r * rs;
    const uint64_t from = std::max(offset, start), to = std::min<uint64_t>(offset + n, start + rs);
    if (from < to)
      std::memcpy(dst + (from - offset), bufs[i].data() + (from - start - BlockDown(from - start)), to - from);
    i++;
  }
  return n;
}

Result<Attr> Domain::Write(uint32_t vol, uint64_t ino, uint64_t offset, const void* data, size_t n) {
  if (n == 0) return GetAttr(vol, ino);
  return impl_->WritePieces(vol, ino, 0, {{offset, static_cast<const uint8_t*>(data), n}}, nullptr, nullptr, 1);
}

Result<Attr> Domain::WriteV(uint32_t vol, uint64_t ino, uint64_t gen, const std::vector<WritePiece>& pieces,
                            const Timespec& mtime, uint64_t* held, uint64_t changes, uint64_t logged_through) {
  if (gen == 0) return Status::InvalidArgument("a generation is never 0");
  return impl_->WritePieces(vol, ino, gen, pieces, &mtime, held, std::max<uint64_t>(changes, 1), logged_through);
}

Status Domain::ReserveLogWrite(size_t n) {
  if (!impl_->log) return Status::NotSupported("domain opened read-only");
  if (n == 0 || n > limits::kLogWriteBytesMax) {
    return Status::InvalidArgument("logged writes are 1.." + std::to_string(limits::kLogWriteBytesMax) + " bytes");
  }
  const size_t bytes = kLoggedWriteHeaderBytes + n;
  if (impl_->log->fill_pct(IntentLog::Cost(bytes)) > limits::kLogWriteFillPctMax) {
    return Status::Busy("the intent log is " + std::to_string(impl_->log->fill_pct()) + "% full");
  }
  return impl_->log->Reserve(bytes);
}

void Domain::UnreserveLogWrite(size_t n) {
  if (impl_->log) impl_->log->Unreserve(kLoggedWriteHeaderBytes + n);
}

uint64_t Domain::AppendLogWrite(uint32_t vol, uint64_t ino, uint64_t gen, uint64_t off, const void* data, size_t n,
                                const Timespec& mtime) {
  const LoggedFile f{vol, ino, gen};
  std::string entry = EncodeLoggedWrite(f, off, mtime, data, n);
  // Pinned as it gets its LSN: a checkpoint (which reads the last LSN under
  // the same lock) never moves past a logged write that is not pinned.
  MutexLock l(impl_->pin_mu);
  const uint64_t lsn = impl_->log->Append(std::move(entry));
  impl_->Pin(lsn, f);
  return lsn;
}

Status Domain::WaitLogged(uint64_t lsn) {
  if (!impl_->log) return Status::NotSupported("domain opened read-only");
  return impl_->log->WaitAcknowledged(lsn).WithContext("logged write");
}

void Domain::ForgetLogWrites(uint32_t vol, uint64_t ino, uint64_t gen) {
  impl_->Unpin({vol, ino, gen}, UINT64_MAX);
}

uint32_t Domain::log_fill_pct() const {
  return impl_->log ? impl_->log->fill_pct() : 0;
}

uint64_t Domain::log_recent_write_ns() const {
  return impl_->log ? impl_->log->recent_answer_ns() : 0;
}

bool Domain::log_mirror_answers() const {
  return impl_->log && impl_->log->mirror_answers();
}

uint64_t Domain::oldest_logged_write() const {
  MutexLock l(impl_->pin_mu);
  return impl_->pins.empty() ? 0 : impl_->pins.begin()->first;
}

Result<Attr> Domain::Impl::WritePieces(uint32_t vol, uint64_t ino, uint64_t gen, const std::vector<WritePiece>& pieces,
                                       const Timespec* mtime, uint64_t* held, uint64_t changes,
                                       uint64_t logged_through) {
  uint64_t end = 0;
  for (size_t i = 0; i < pieces.size(); i++) {
    const WritePiece& w = pieces[i];
    if (w.n == 0 || w.data == nullptr) return Status::InvalidArgument("empty write piece");
    if (w.off > kFileSizeMax || w.n > kFileSizeMax - w.off) return Status::OutOfRange("file would exceed 2^63 bytes");
    if (i > 0 && w.off < pieces[i - 1].off + pieces[i - 1].n) {
      return Status::InvalidArgument("write pieces overlap or are out of order");
    }
    end = std::max(end, w.off + w.n);
  }
  // A caller that names the generation (the cache) learns that a file that
  // went is Stale; one that does not, NotFound.
  auto gone = [&](const Status& s, const std::string& what) {
    return gen != 0 && s.code() == Code::kNotFound ? Status(Code::kStale, what + " is gone") : s;
  };
  // The file's current state, checked again before the commit.
  auto load = [&](VolumeRec& v, Inode& in) REQUIRES_SHARED(mu) -> Status {
    auto vr = LoadVolume(vol);
    if (!vr.ok()) return gone(vr.status(), "volume " + std::to_string(vol));
    auto ir = LoadInode(vol, ino);
    if (!ir.ok()) return gone(ir.status(), "inode " + std::to_string(ino));
    if (gen != 0 && ir->a.gen != gen) return Status(Code::kStale, "inode " + std::to_string(ino) + " was reused");
    if (ir->a.type == FileType::kDirectory) return Status(Code::kIsDir, "is a directory");
    if (ir->a.type != FileType::kRegular) return Status::InvalidArgument("not a regular file");
    v = std::move(*vr);
    in = std::move(*ir);
    return Status();
  };
  MutexLock file(FileLock(vol, ino));
  std::map<uint64_t, RecordMap> maps;
  std::vector<Span> spans;
  uint64_t rs = 0, old_size = 0, file_gen = 0, rolled = 0;
  auto rollbacks_of = [&]() REQUIRES_SHARED(mu) {
    auto it = rollbacks.find(vol);
    return it == rollbacks.end() ? 0 : it->second;
  };
  {
    ReaderLock lock(mu);
    rolled = rollbacks_of();
    VolumeRec v;
    Inode in;
    NASGW_RETURN_IF_ERROR(load(v, in));
    if (pieces.empty()) return in.a;
    rs = v.record_bytes;
    old_size = in.a.size;
    file_gen = in.a.gen;
    NASGW_RETURN_IF_ERROR(PlanSpans(vol, ino, rs, pieces, &maps, &spans));
  }
  // Space: the caller's reservation first, the rest reserved now; then every
  // extent allocated before anything is written.
  uint64_t need = 0;
  for (const Span& sp : spans) need += sp.to - sp.from;
  const uint64_t from_held = held != nullptr ? std::min(*held, need) : 0;
  if (need > from_held) NASGW_RETURN_IF_ERROR(data_reserve(need - from_held));
  if (held != nullptr) *held -= from_held;
  Unused unused{*space, need};
  Txn t;
  t.essential = held != nullptr;  // a flush of writes the cache accepted (it checked the room then)
  auto abandon = [&](const Status& s) {
    t.Abandon(*space);  // nothing was committed: the new extents go back
    return s;
  };
  for (Span& sp : spans) {
    auto got = space->AllocateReserved(sp.to - sp.from);
    if (!got.ok()) return abandon(got.status());
    unused.taken += sp.to - sp.from;
    t.allocated.insert(t.allocated.end(), got->begin(), got->end());
    sp.got = std::move(*got);
  }
  // The data moves with no lock but the file's: other files' changes and
  // every reader go on meanwhile.
  {
    ReadFence::Reader fenced(fence);
    Status s = FillSpans(maps, rs, old_size, pieces, spans);
    if (!s.ok()) return abandon(s);
  }
  WriterLock lock(mu);
  VolumeRec v;
  Inode in;
  if (Status s = load(v, in); !s.ok()) return abandon(s);
  if (in.a.gen != file_gen) {
    return abandon(Status(gen != 0 ? Code::kStale : Code::kNotFound, "inode " + std::to_string(ino) + " was removed"));
  }
  if (rollbacks_of() != rolled) {
    // The maps planned from are gone: the write is placed again (the cache
    // keeps it and tries again), after the rollback.
    return abandon(Status::Busy("volume " + std::to_string(vol) + " was rolled back while the write was placed"));
  }
  // The maps are as planned: only a holder of the file's lock changes them
  // (a removal of the file would have failed the load above).
  for (size_t i = 0; i < spans.size(); i++) {
    RecordMap& m = maps[spans[i].r];
    PlaceBlocks(t, vol, in, v, m, spans[i].from, spans[i].got);
    if (i + 1 == spans.size() || spans[i + 1].r != spans[i].r)
      t.batch.Put(ExtentKey(vol, ino, spans[i].r), EncodeRecordMap(m));
  }
  in.a.size = std::max(in.a.size, end);
  if (mtime == nullptr) {
    Touch(in, true);
  } else {
    in.a.mtime = *mtime;
    in.a.ctime = std::max(in.a.ctime, *mtime);
    in.a.change += changes;
  }
  PutInode(t, vol, in);
  PutVolume(t, vol, v);
  if (logged_through != 0) {
    t.covers = {vol, ino, in.a.gen};
    t.through = logged_through;
  }
  if (Status s = Commit(t); !s.ok()) return s;  // Commit gives the extents back itself
  lock.Unlock();
  NASGW_RETURN_IF_ERROR(Durable(t));
  return in.a;
}

Status Domain::ReserveSpace(uint64_t bytes) {
  // The flush of what is accepted now may use the lower half of the
  // metadata headroom: refused here while the upper half is gone.
  NASGW_RETURN_IF_ERROR(impl_->MetaRoom(false));
  return impl_->data_reserve(bytes);
}

void Domain::ReleaseSpace(uint64_t bytes) {
  if (bytes > 0) impl_->space->Unreserve(bytes);
}

Result<Attr> Domain::Impl::ChangeFile(uint32_t vol, uint64_t ino,
                                      const std::function<Status(Txn&, Inode&, VolumeRec&)>& change) {
  MutexLock file(FileLock(vol, ino));  // the change may rewrite the extent maps
  WriterLock lock(mu);
  auto v = LoadVolume(vol);
  if (!v.ok()) return v.status();
  auto in = LoadInode(vol, ino);
  if (!in.ok()) return in.status();
  Txn t;
  if (Status s = change(t, *in, *v); !s.ok()) {
    t.Abandon(*space);
    return s;
  }
  PutInode(t, vol, *in);
  PutVolume(t, vol, *v);
  NASGW_RETURN_IF_ERROR(Commit(t));
  lock.Unlock();
  NASGW_RETURN_IF_ERROR(Durable(t));
  return in->a;
}

Result<Attr> Domain::SetAttrs(uint32_t vol, uint64_t ino, const SetAttr& s) {
  return impl_->ChangeFile(vol, ino, [&](Impl::Txn& t, Inode& in, VolumeRec& v) {
    impl_->mu.AssertHeld();  // ChangeFile holds it
    if (s.set_mode) {
      in.a.mode = s.mode & 07777;
      if (!in.a.acl_access.empty()) {  // chmod rewrites the ACL's base entries (posix_acl_chmod)
        Acl acl = DecodeKeptAcl(in.a.acl_access);
        AclChmod(acl, in.a.mode);
        in.a.acl_access = EncodeAcl(acl);
      }
    }
    if (s.set_uid) in.a.uid = s.uid;
    if (s.set_gid) in.a.gid = s.gid;
    if (s.set_atime) in.a.atime = s.atime;
    if (s.set_mtime) in.a.mtime = s.mtime;
    if (!s.set_size || s.size == in.a.size) {
      Impl::Touch(in, false);
      return Status();
    }
    if (in.a.type == FileType::kDirectory) return Status(Code::kIsDir, "cannot truncate a directory");
    if (in.a.type != FileType::kRegular) return Status::InvalidArgument("not a regular file");
    if (s.size > kFileSizeMax) return Status::OutOfRange("size beyond 2^63 bytes");
    const uint64_t rs = v.record_bytes;
    if (s.size < in.a.size) {
      // Records wholly past the end go; the one the end falls in is cut.
      auto recs = impl_->LoadRecords(vol, ino, s.size / rs);
      if (!recs.ok()) return recs.status();
      for (auto& [r, m] : *recs) {
        if (r * rs < s.size) {
          // The bytes past the end in its block become zeros on the array,
          // so a file grown again reads zeros there.
          NASGW_RETURN_IF_ERROR(impl_->ZeroRecord(t, vol, in, v, r, std::move(m), s.size - r * rs, rs));
        } else {
          t.batch.Delete(ExtentKey(vol, ino, r));
          t.Free(vol, m);
          in.a.blocks -= std::min<uint64_t>(in.a.blocks, m.bytes() / 512);
          v.bytes -= std::min(v.bytes, m.bytes());
        }
      }
    }
    // Growing only moves the end: the new range is a hole.
    in.a.size = s.size;
    Impl::Touch(in, true);
    return Status();
  });
}

Result<Attr> Domain::Fallocate(uint32_t vol, uint64_t ino, uint32_t mode, uint64_t off, uint64_t len) {
  const bool punch = mode & kFallocPunchHole, zero = mode & kFallocZeroRange;
  if ((mode & ~(kFallocKeepSize | kFallocPunchHole | kFallocZeroRange)) != 0 || (punch && zero) ||
      (punch && !(mode & kFallocKeepSize))) {
    return Status::NotSupported("fallocate mode " + std::to_string(mode) + " is not supported");
  }
  if (len == 0) return Status::InvalidArgument("fallocate of 0 bytes");
  if (off > kFileSizeMax || len > kFileSizeMax - off) return Status::OutOfRange("range beyond 2^63 bytes");
  return impl_->ChangeFile(vol, ino, [&](Impl::Txn& t, Inode& in, VolumeRec& v) {
    impl_->mu.AssertHeld();  // ChangeFile holds it
    if (in.a.type == FileType::kDirectory) return Status(Code::kIsDir, "fallocate of a directory");
    if (in.a.type != FileType::kRegular) return Status::NotSupported("fallocate of something not a regular file");
    const uint64_t rs = v.record_bytes, end = off + len;
    const uint64_t size = (mode & kFallocKeepSize) ? in.a.size : std::max(in.a.size, end);
    bool content = size != in.a.size;
    if (punch || zero) {
      // Only what lies before the old end holds data.
      const uint64_t stop = std::min(end, in.a.size);
      if (off < stop) {
        auto recs = impl_->LoadRecords(vol, ino, off / rs, (stop - 1) / rs);
        if (!recs.ok()) return recs.status();
        for (auto& [r, m] : *recs) {
          // A range to the end takes the end's block whole: past the end it
          // holds zeros already (truncation writes them).
          const uint64_t start = r * rs, to = std::min(stop, start + rs) - start;
          NASGW_RETURN_IF_ERROR(impl_->ZeroRecord(t, vol, in, v, r, std::move(m), std::max(off, start) - start,
                                                  stop == in.a.size ? std::min(BlockUp(to), rs) : to));
        }
        content = true;
      }
    } else {
      // The blocks of the range that hold no data, against what is free.
      const uint64_t lo = BlockDown(off), hi = BlockUp(end);
      uint64_t held = 0;
      auto recs = impl_->LoadRecords(vol, ino, lo / rs, (hi - 1) / rs);
      if (!recs.ok()) return recs.status();
      for (const auto& [r, m] : *recs) {
        for (const RecordPiece& p : m.pieces) {
          const uint64_t a = std::max(r * rs + p.at, lo), b = std::min(r * rs + p.end(), hi);
          if (a < b) held += b - a;
        }
      }
      const uint64_t need = hi - lo - held;
      if (need > impl_->space->available_bytes()) {
        return Status::NoSpace("volume full: " + std::to_string(need) + " bytes to allocate, " +
                               std::to_string(impl_->space->available_bytes()) + " free");
      }
    }
    in.a.size = size;
    Impl::Touch(in, content);
    return Status();
  });
}

Result<uint64_t> Domain::Seek(uint32_t vol, uint64_t ino, uint64_t off, bool hole) {
  uint64_t size = 0, rs = 0;
  {
    ReaderLock lock(impl_->mu);
    auto v = impl_->LoadVolume(vol);
    if (!v.ok()) return v.status();
    auto in = impl_->LoadInode(vol, ino);
    if (!in.ok()) return in.status();
    if (in->a.type == FileType::kDirectory) return Status(Code::kIsDir, "seek in a directory");
    if (in->a.type != FileType::kRegular) return Status::InvalidArgument("seek in something not a regular file");
    size = in->a.size;
    rs = v->record_bytes;
  }
  if (off >= size) return Status::OutOfRange("ENXIO: offset at or past the end of the file");
  // Pieces in order, over the records from the one `off` falls in, until
  // the answer is known; a bounded number of records per hold of the
  // domain lock, so that a seek through a large dense file does not hold
  // up the domain's writers.
  constexpr uint64_t kRecordsPerHold = 4096;
  uint64_t pos = off;  // hole: the first byte not yet known to be data
  uint64_t next = off / rs;
  std::optional<uint64_t> found;
  for (bool more = true; more && !found;) {
    more = false;
    uint64_t seen = 0;
    ReaderLock lock(impl_->mu);
    Status s = impl_->ScanRecords(vol, ino, next, UINT64_MAX, [&](uint64_t r, RecordMap& m) {
      if (seen++ == kRecordsPerHold) {
        next = r;
        more = true;
        return false;
      }
      for (const RecordPiece& p : m.pieces) {
        const uint64_t a = r * rs + p.at, b = r * rs + p.end();
        if (b <= pos) continue;
        if (!hole || a > pos) {  // data, or a hole before this piece
          found = hole ? pos : std::max(a, pos);
          return false;
        }
        pos = b;
      }
      return true;
    });
    if (!s.ok()) return s;
  }
  if (!hole) {
    if (!found || *found >= size) return Status::OutOfRange("ENXIO: no data past the offset");
    return *found;
  }
  return std::min(found.value_or(pos), size);
}

Status Domain::Fsync(uint32_t vol, uint64_t ino) {
  // Every change is durable when its call returns (see the header).
  ReaderLock lock(impl_->mu);
  return impl_->LoadInode(vol, ino).status();
}

}  // namespace nasgw::fs
