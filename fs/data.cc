// A domain's file data: redirect-on-write records (fs/domain.h, "data").
#include <algorithm>
#include <cstring>

#include "block/block_device.h"
#include "fs/domain_impl.h"

namespace nasgw::fs {

using namespace keys;  // fs/keys.h: the keys and values of the metadata

Status Domain::Impl::ReadExtents(const std::vector<Extent>& extents, uint64_t at, uint8_t* out, size_t n) {
  // Reads [at, at+n) of the concatenation of extents; at, n block aligned.
  uint64_t base = 0;
  size_t done = 0;
  for (const Extent& e : extents) {
    if (done == n) break;
    const uint64_t pos = at + done;
    if (pos >= base + e.length) {
      base += e.length;
      continue;
    }
    const uint64_t in = pos - base;
    const size_t k = static_cast<size_t>(std::min<uint64_t>(n - done, e.length - in));
    auto dev = reserve->lun(e.lun);
    NASGW_RETURN_IF_ERROR(block::ReadSync(*dev, (e.offset + in) / dev->info().block_size, out + done, k));
    done += k;
    base += e.length;
  }
  if (done < n) std::memset(out + done, 0, n - done);
  return Status();
}

Status Domain::Impl::WriteExtents(const std::vector<Extent>& extents, const uint8_t* data) {
  size_t done = 0;
  for (const Extent& e : extents) {
    auto dev = reserve->lun(e.lun);
    NASGW_RETURN_IF_ERROR(
        block::WriteSync(*dev, e.offset / dev->info().block_size, data + done, e.length, /*fua=*/true));
    done += e.length;
  }
  return Status();
}

Status Domain::Impl::RewriteRecords(Txn& t, uint32_t vol, Inode& in, VolumeRec& v, uint64_t first, uint64_t last,
                                    uint64_t new_size, uint64_t off, const uint8_t* data, size_t n) {
  // The records from first to last, with the one piece (if any) in them.
  const uint64_t rs = v.record_bytes;
  std::vector<WritePiece> pieces;
  if (n > 0) pieces.push_back({off, data, n});
  return RewriteRun(t, vol, in, v, first, last, new_size, pieces, rs, nullptr);
}

Status Domain::Impl::RewritePieces(Txn& t, uint32_t vol, Inode& in, VolumeRec& v, uint64_t new_size,
                                   const std::vector<WritePiece>& pieces, uint64_t* held) {
  // Runs of consecutive records, each loaded with one scan.
  const uint64_t rs = v.record_bytes;
  size_t i = 0;
  while (i < pieces.size()) {
    const uint64_t first = pieces[i].off / rs;
    uint64_t last = (pieces[i].off + pieces[i].n - 1) / rs;
    size_t j = i + 1;
    while (j < pieces.size() && pieces[j].off / rs <= last + 1) {
      last = std::max(last, (pieces[j].off + pieces[j].n - 1) / rs);
      j++;
    }
    std::vector<WritePiece> run(pieces.begin() + static_cast<std::ptrdiff_t>(i),
                                pieces.begin() + static_cast<std::ptrdiff_t>(j));
    NASGW_RETURN_IF_ERROR(RewriteRun(t, vol, in, v, first, last, new_size, run, rs, held));
    i = j;
  }
  return Status();
}

Status Domain::Impl::RewriteRun(Txn& t, uint32_t vol, Inode& in, VolumeRec& v, uint64_t first, uint64_t last,
                                uint64_t new_size, const std::vector<WritePiece>& pieces, uint64_t rs, uint64_t* held) {
  auto loaded = LoadRecords(vol, in.a.ino, first, last);
  if (!loaded.ok()) return loaded.status();
  const auto& old = *loaded;
  uint64_t need = 0;
  for (uint64_t r = first; r <= last; r++) {
    const uint64_t start = r * rs;
    if (start >= new_size) break;
    need += (std::min(rs, new_size - start) + kDataBlock - 1) / kDataBlock * kDataBlock;
  }
  // The caller's reservation first; the rest reserved now.
  const uint64_t from_held = held != nullptr ? std::min(*held, need) : 0;
  if (need > from_held) NASGW_RETURN_IF_ERROR(data_reserve(need - from_held));
  if (held != nullptr) *held -= from_held;
  // Whatever the reservation does not turn into extents goes back, on
  // every way out of here.
  uint64_t taken = 0;
  struct Release {
    Allocator& a;
    uint64_t need;
    uint64_t& taken;
    ~Release() {
      if (need > taken) a.Unreserve(need - taken);
    }
  } release{*space, need, taken};
  std::vector<uint8_t> buf(rs);
  size_t p = 0;  // the first piece that may reach record r
  for (uint64_t r = first; r <= last; r++) {
    const uint64_t start = r * rs;
    if (start >= new_size) break;
    const uint64_t valid = std::min(rs, new_size - start);
    const uint64_t len = (valid + kDataBlock - 1) / kDataBlock * kDataBlock;
    std::fill(buf.begin(), buf.end(), 0);
    auto it = old.find(r);
    if (it != old.end()) {
      // Old content, up to the old size (a hole or past-EOF reads as zeros).
      const uint64_t old_valid = in.a.size > start ? std::min(rs, in.a.size - start) : 0;
      const uint64_t have =
          std::min<uint64_t>(it->second.bytes(), (old_valid + kDataBlock - 1) / kDataBlock * kDataBlock);
      NASGW_RETURN_IF_ERROR(ReadExtents(it->second.extents, 0, buf.data(), static_cast<size_t>(have)));
      if (old_valid < rs) std::memset(buf.data() + old_valid, 0, rs - old_valid);
    }
    if (valid < rs) std::memset(buf.data() + valid, 0, rs - valid);
    // The new bytes that fall into this record.
    while (p < pieces.size() && pieces[p].off + pieces[p].n <= start) p++;
    for (size_t q = p; q < pieces.size() && pieces[q].off < start + rs; q++) {
      const WritePiece& w = pieces[q];
      const uint64_t from = std::max(w.off, start), to = std::min(w.off + w.n, start + rs);
      if (from < to) std::memcpy(buf.data() + (from - start), w.data + (from - w.off), to - from);
    }
    auto got = space->AllocateReserved(len);
    if (!got.ok()) return got.status();
    taken += len;
    RecordMap m{rec.txg + 1, *got};
    t.allocated.insert(t.allocated.end(), m.extents.begin(), m.extents.end());
    NASGW_RETURN_IF_ERROR(WriteExtents(m.extents, buf.data()));
    t.batch.Put(ExtentKey(vol, in.a.ino, r), EncodeRecordMap(m));
    in.a.blocks += len / 512;
    v.bytes += len;
    if (it != old.end()) {
      for (const Extent& e : it->second.extents) t.to_free.push_back(e);
      in.a.blocks -= std::min<uint64_t>(in.a.blocks, it->second.bytes() / 512);
      v.bytes -= std::min(v.bytes, it->second.bytes());
    }
  }
  return Status();
}

Result<size_t> Domain::Read(uint32_t vol, uint64_t ino, uint64_t offset, size_t n, void* out) {
  ReaderLock lock(impl_->mu);
  auto v = impl_->LoadVolume(vol);
  if (!v.ok()) return v.status();
  auto in = impl_->LoadInode(vol, ino);
  if (!in.ok()) return in.status();
  if (in->a.type == FileType::kDirectory) return Status(Code::kIsDir, "is a directory");
  if (offset >= in->a.size) return size_t{0};
  n = static_cast<size_t>(std::min<uint64_t>(n, in->a.size - offset));
  const uint64_t rs = v->record_bytes;
  auto* dst = static_cast<uint8_t*>(out);
  std::memset(dst, 0, n);  // holes read as zeros
  auto recs = impl_->LoadRecords(vol, ino, offset / rs, (offset + n - 1) / rs);
  if (!recs.ok()) return recs.status();
  std::vector<uint8_t> buf;
  for (const auto& [r, m] : *recs) {
    const uint64_t start = r * rs;
    if (start >= offset + n) break;
    const uint64_t from = std::max(offset, start), to = std::min<uint64_t>(offset + n, start + rs);
    if (from >= to) continue;
    const uint64_t first = (from - start) / kDataBlock * kDataBlock;
    const uint64_t last = std::min<uint64_t>(m.bytes(), (to - start + kDataBlock - 1) / kDataBlock * kDataBlock);
    if (last <= first) continue;  // beyond what the record holds: zeros
    buf.resize(static_cast<size_t>(last - first));
    NASGW_RETURN_IF_ERROR(impl_->ReadExtents(m.extents, first, buf.data(), buf.size()));
    const uint64_t copy_to = std::min(to, start + last);
    if (copy_to > from) std::memcpy(dst + (from - offset), buf.data() + (from - start - first), copy_to - from);
  }
  return n;
}

Result<Attr> Domain::Write(uint32_t vol, uint64_t ino, uint64_t offset, const void* data, size_t n) {
  if (n == 0) return GetAttr(vol, ino);
  return impl_->WritePieces(vol, ino, 0, {{offset, static_cast<const uint8_t*>(data), n}}, nullptr, nullptr, 1);
}

Result<Attr> Domain::WriteV(uint32_t vol, uint64_t ino, uint64_t gen, const std::vector<WritePiece>& pieces,
                            const Timespec& mtime, uint64_t* held, uint64_t changes) {
  if (gen == 0) return Status::InvalidArgument("a generation is never 0");
  return impl_->WritePieces(vol, ino, gen, pieces, &mtime, held, std::max<uint64_t>(changes, 1));
}

Result<Attr> Domain::Impl::WritePieces(uint32_t vol, uint64_t ino, uint64_t gen, const std::vector<WritePiece>& pieces,
                                       const Timespec* mtime, uint64_t* held, uint64_t changes) {
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
  WriterLock lock(mu);
  auto v = LoadVolume(vol);
  if (!v.ok()) return gone(v.status(), "volume " + std::to_string(vol));
  auto in = LoadInode(vol, ino);
  if (!in.ok()) return gone(in.status(), "inode " + std::to_string(ino));
  if (gen != 0 && in->a.gen != gen) return Status(Code::kStale, "inode " + std::to_string(ino) + " was reused");
  if (in->a.type == FileType::kDirectory) return Status(Code::kIsDir, "is a directory");
  if (in->a.type != FileType::kRegular) return Status::InvalidArgument("not a regular file");
  if (pieces.empty()) return in->a;
  const uint64_t new_size = std::max(in->a.size, end);
  Txn t;
  Status s = RewritePieces(t, vol, *in, *v, new_size, pieces, held);
  if (!s.ok()) {
    t.Abandon(*space);  // nothing was committed: the new extents go back
    return s;
  }
  in->a.size = new_size;
  if (mtime == nullptr) {
    Touch(*in, true);
  } else {
    in->a.mtime = *mtime;
    in->a.ctime = std::max(in->a.ctime, *mtime);
    in->a.change += changes;
  }
  PutInode(t, vol, *in);
  PutVolume(t, vol, *v);
  NASGW_RETURN_IF_ERROR(Commit(t));
  lock.Unlock();
  NASGW_RETURN_IF_ERROR(Durable(t));
  return in->a;
}

Status Domain::ReserveSpace(uint64_t bytes) {
  return impl_->data_reserve(bytes);
}

Result<uint32_t> Domain::RecordBytes(uint32_t vol) {
  ReaderLock lock(impl_->mu);
  auto v = impl_->LoadVolume(vol);
  if (!v.ok()) return v.status().code() == Code::kNotFound ? Status(Code::kStale, "volume is gone") : v.status();
  return v->record_bytes;
}

void Domain::ReleaseSpace(uint64_t bytes) {
  if (bytes > 0) impl_->space->Unreserve(bytes);
}

Result<Attr> Domain::SetAttrs(uint32_t vol, uint64_t ino, const SetAttr& s) {
  WriterLock lock(impl_->mu);
  auto v = impl_->LoadVolume(vol);
  if (!v.ok()) return v.status();
  auto in = impl_->LoadInode(vol, ino);
  if (!in.ok()) return in.status();
  Impl::Txn t;
  if (s.set_mode) in->a.mode = s.mode & 07777;
  if (s.set_uid) in->a.uid = s.uid;
  if (s.set_gid) in->a.gid = s.gid;
  if (s.set_atime) in->a.atime = s.atime;
  if (s.set_mtime) in->a.mtime = s.mtime;
  if (s.set_size && s.size != in->a.size) {
    if (in->a.type == FileType::kDirectory) return Status(Code::kIsDir, "cannot truncate a directory");
    if (in->a.type != FileType::kRegular) return Status::InvalidArgument("not a regular file");
    if (s.size > kFileSizeMax) return Status::OutOfRange("size beyond 2^63 bytes");
    const uint64_t rs = v->record_bytes;
    if (s.size < in->a.size) {
      // Records wholly past the end go; the one the end falls in is cut.
      auto recs = impl_->LoadRecords(vol, ino, s.size / rs);
      if (!recs.ok()) return recs.status();
      bool cut = false;  // a record the new end falls inside
      for (auto& [r, m] : *recs) {
        if (r * rs < s.size) {
          cut = true;
        } else {
          t.batch.Delete(ExtentKey(vol, ino, r));
          t.to_free.insert(t.to_free.end(), m.extents.begin(), m.extents.end());
          in->a.blocks -= std::min<uint64_t>(in->a.blocks, m.bytes() / 512);
          v->bytes -= std::min(v->bytes, m.bytes());
        }
      }
      if (s.size % rs != 0 && cut) {
        Status w = impl_->RewriteRecords(t, vol, *in, *v, s.size / rs, s.size / rs, s.size, 0, nullptr, 0);
        if (!w.ok()) {
          t.Abandon(*impl_->space);
          return w;
        }
      }
    }
    // Growing only moves the end: the new range is a hole.
    in->a.size = s.size;
    Impl::Touch(*in, true);
  } else {
    Impl::Touch(*in, false);
  }
  impl_->PutInode(t, vol, *in);
  impl_->PutVolume(t, vol, *v);
  NASGW_RETURN_IF_ERROR(impl_->Commit(t));
  lock.Unlock();
  NASGW_RETURN_IF_ERROR(impl_->Durable(t));
  return in->a;
}

Status Domain::Fsync(uint32_t vol, uint64_t ino) {
  // Every change is durable when its call returns (see the header).
  ReaderLock lock(impl_->mu);
  return impl_->LoadInode(vol, ino).status();
}

}  // namespace nasgw::fs
