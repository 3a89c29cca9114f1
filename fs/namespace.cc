// A volume's POSIX namespace: names, attributes, links, renames, directory
// listings, extended attributes, open files (fs/domain.h, "names").
#include <set>

#include "base/log.h"
#include "fs/acl.h"
#include "fs/domain_impl.h"

namespace nasgw::fs {

using namespace keys;  // fs/keys.h: the keys and values of the metadata

namespace {
// Attributes read at snapshot `snap` say so.
Attr At(Attr a, uint32_t snap) {
  a.snap = snap;
  return a;
}
}  // namespace

Result<Attr> Domain::Lookup(uint32_t vol, uint64_t dir, const std::string& name, uint32_t snap) {
  ReaderLock lock(impl_->mu);
  auto at = impl_->ReadAt(vol, snap);
  if (!at.ok()) return at.status();
  auto d = impl_->LoadDir(vol, dir, *at);
  if (!d.ok()) return d.status();
  if (name == ".") return At(d->a, snap);
  if (name == "..") {
    auto p = impl_->LoadInode(vol, d->parent, *at);
    if (!p.ok()) return p.status();
    return At(p->a, snap);
  }
  if (name.size() > kNameMax) return Status::InvalidArgument("name longer than 255 bytes");
  auto e = impl_->LoadDirent(vol, dir, name, *at);
  if (!e.ok()) return e.status();
  auto in = impl_->LoadInode(vol, e->ino, *at);
  if (!in.ok()) return in.status().WithContext("entry '" + name + "' names a missing inode");
  return At(in->a, snap);
}

Attr Domain::Accessed(uint32_t vol, const Attr& seen, Timespec now) {
  const Atime policy = VolumeAtime(vol);
  if (!AtimeDue(policy, seen, now)) return seen;
  WriterLock lock(impl_->mu);
  auto in = impl_->LoadInode(vol, seen.ino);
  if (!in.ok() || in->a.gen != seen.gen) return seen;  // gone meanwhile: nothing to note
  // The later of the head's view (the cache's mtime may be ahead of the
  // metadata) and the stored one decides.
  Attr both = in->a;
  both.mtime = std::max(both.mtime, seen.mtime);
  both.ctime = std::max(both.ctime, seen.ctime);
  if (!AtimeDue(policy, both, now)) return seen;
  in->a.atime = now;  // not a change: ctime and the change counter stay
  Impl::Txn t;
  impl_->PutInode(t, vol, *in);
  if (Status s = impl_->Commit(t); !s.ok()) {
    NASGW_LOG(kDebug, "fs") << "atime not moved" << Kv("ino", seen.ino) << Kv("error", s.ToString());
    return seen;
  }
  Attr out = seen;
  out.atime = now;
  return out;
}

Result<std::string> Domain::FindCaseless(uint32_t vol, uint64_t dir, const std::string& name) {
  ReaderLock lock(impl_->mu);
  NASGW_RETURN_IF_ERROR(impl_->LoadDir(vol, dir).status());
  if (name.empty() || name.size() > kNameMax) return Status::InvalidArgument("bad name");
  Status exact = impl_->CheckNameFree(vol, dir, name);
  if (exact.code() == Code::kExists) return name;  // an exact match wins
  NASGW_RETURN_IF_ERROR(exact);
  const std::string p = FoldPrefix(vol, dir, name);
  std::string found;
  NASGW_RETURN_IF_ERROR(impl_->store->Scan(p, PrefixEnd(p), [&](std::string_view k, std::string_view) {
    found = std::string(k.substr(p.size()));
    return false;  // the first in byte order
  }));
  if (found.empty()) return Status::NotFound("no entry matching '" + name + "' in any case");
  return found;
}

Result<uint64_t> Domain::Impl::UpgradeFoldIndex() {
  {
    ReaderLock lock(mu);
    auto done = store->Get(FoldDoneKey());
    if (done.ok()) return 0;
    if (done.status().code() != Code::kNotFound) return done.status();
  }
  // One pass over the names ('D' vol dir name), then one over the old
  // index, a batch at a time; the next batch starts past the last key.
  uint64_t indexed = 0;
  for (const char tag : {'D', 'F'}) {
    std::string from(1, tag);
    const std::string end(1, static_cast<char>(tag + 1));
    for (;;) {
      Txn t;
      size_t n = 0;
      std::string last;
      Status bad;
      WriterLock lock(mu);
      NASGW_RETURN_IF_ERROR(store->Scan(from, end, [&](std::string_view k, std::string_view) {
        if (tag == 'D') {
          if (k.size() <= 13) {
            bad = Status::Corruption("name key of " + std::to_string(k.size()) + " bytes");
            return false;
          }
          t.batch.Put(FoldKey(GetBE32(k, 1), GetBE64(k, 5), std::string(k.substr(13))), "");
        } else {
          t.batch.Delete(k);
        }
        last = std::string(k);
        return ++n < kFoldUpgradeBatch;
      }));
      NASGW_RETURN_IF_ERROR(bad);
      if (n == 0) break;
      if (tag == 'D') indexed += n;
      NASGW_RETURN_IF_ERROR(Commit(t));
      lock.Unlock();
      NASGW_RETURN_IF_ERROR(Durable(t));
      if (n < kFoldUpgradeBatch) break;
      from = last + '\0';
    }
  }
  Txn t;
  t.batch.Put(FoldDoneKey(), std::string(1, '\x01'));
  {
    WriterLock lock(mu);
    NASGW_RETURN_IF_ERROR(Commit(t));
  }
  NASGW_RETURN_IF_ERROR(Durable(t));
  return indexed;
}

Result<Attr> Domain::GetAttr(uint32_t vol, uint64_t ino, uint32_t snap) {
  ReaderLock lock(impl_->mu);
  auto at = impl_->ReadAt(vol, snap);
  if (!at.ok()) return at.status();
  auto in = impl_->LoadInode(vol, ino, *at);
  if (!in.ok()) return in.status();
  return At(in->a, snap);
}

Result<Attr> Domain::GetAttr(const Handle& h) {
  ReaderLock lock(impl_->mu);
  auto v = impl_->LoadVolume(h.volume);
  if (!v.ok()) {
    return v.status().code() == Code::kNotFound ? Status(Code::kStale, "volume of handle is gone") : v.status();
  }
  auto at = impl_->ReadAt(h.volume, h.snap);  // Stale for a snapshot that is gone
  if (!at.ok()) return at.status();
  auto in = impl_->LoadInode(h.volume, h.ino, *at);
  if (!in.ok()) {
    return in.status().code() == Code::kNotFound ? Status(Code::kStale, "inode " + std::to_string(h.ino) + " is gone")
                                                 : in.status();
  }
  if (in->a.gen != h.gen) return Status(Code::kStale, "inode " + std::to_string(h.ino) + " was reused");
  return At(in->a, h.snap);
}

Result<Attr> Domain::Create(uint32_t vol, uint64_t dir, const std::string& name, FileType type, uint32_t mode,
                            uint32_t uid, uint32_t gid, uint64_t rdev, const std::string& symlink, uint32_t umask) {
  NASGW_RETURN_IF_ERROR(CheckName(name));
  if (type == FileType::kNone) return Status::InvalidArgument("no file type");
  if (type == FileType::kSymlink && (symlink.empty() || symlink.size() > kSymlinkMax)) {
    return Status::InvalidArgument("symlink target must be 1-4095 bytes");
  }
  WriterLock lock(impl_->mu);
  auto v = impl_->LoadVolume(vol);
  if (!v.ok()) return v.status();
  auto d = impl_->LoadDir(vol, dir);
  if (!d.ok()) return d.status();
  NASGW_RETURN_IF_ERROR(impl_->CheckNameFree(vol, dir, name));
  Inode in;
  in.a.ino = v->next_ino++;
  in.a.gen = NewGeneration();
  in.a.type = type;
  in.a.mode = mode & 07777;
  if (type != FileType::kSymlink) {
    // Linux's posix_acl_create: the directory's default ACL, else umask.
    if (d->a.acl_default.empty()) {
      in.a.mode &= ~(umask & 0777);
    } else {
      const Acl dflt = DecodeKeptAcl(d->a.acl_default);
      const Acl acl = AclCreate(dflt, &in.a.mode);
      if (!acl.empty()) in.a.acl_access = EncodeAcl(acl);
      if (type == FileType::kDirectory) in.a.acl_default = d->a.acl_default;
    }
  }
  in.a.uid = uid;
  in.a.gid = gid;
  in.a.nlink = type == FileType::kDirectory ? 2 : 1;
  in.a.rdev = rdev;
  in.a.atime = in.a.mtime = in.a.ctime = in.a.btime = Now();
  if (type == FileType::kDirectory) in.parent = dir;
  if (type == FileType::kSymlink) {
    in.symlink = symlink;
    in.a.size = symlink.size();
  }
  Impl::Txn t;
  Dirent e{in.a.ino, type, d->next_cookie++};
  t.batch.Put(DirentKey(vol, dir, name), EncodeDirent(e));
  t.batch.Put(CookieKey(vol, dir, e.cookie), name);
  t.batch.Put(FoldKey(vol, dir, name), "");
  if (type == FileType::kDirectory) d->a.nlink++;
  Impl::Touch(*d, true);
  impl_->PutInode(t, vol, *d);
  impl_->PutInode(t, vol, in);
  v->files++;
  impl_->PutVolume(t, vol, *v);
  NASGW_RETURN_IF_ERROR(impl_->Commit(t));
  lock.Unlock();
  NASGW_RETURN_IF_ERROR(impl_->Durable(t));
  return in.a;
}

Result<std::string> Domain::ReadLink(uint32_t vol, uint64_t ino, uint32_t snap) {
  ReaderLock lock(impl_->mu);
  auto at = impl_->ReadAt(vol, snap);
  if (!at.ok()) return at.status();
  auto in = impl_->LoadInode(vol, ino, *at);
  if (!in.ok()) return in.status();
  if (in->a.type != FileType::kSymlink) return Status::InvalidArgument("not a symlink");
  return in->symlink;
}

Result<Attr> Domain::Link(uint32_t vol, uint64_t ino, uint64_t dir, const std::string& name) {
  NASGW_RETURN_IF_ERROR(CheckName(name));
  WriterLock lock(impl_->mu);
  auto in = impl_->LoadInode(vol, ino);
  if (!in.ok()) return in.status();
  if (in->a.type == FileType::kDirectory) return Status::PermissionDenied("hard links to directories are not allowed");
  if (in->a.nlink >= UINT32_MAX - 1) return Status::NoSpace("too many links");
  auto d = impl_->LoadDir(vol, dir);
  if (!d.ok()) return d.status();
  NASGW_RETURN_IF_ERROR(impl_->CheckNameFree(vol, dir, name));
  Impl::Txn t;
  Dirent e{ino, in->a.type, d->next_cookie++};
  t.batch.Put(DirentKey(vol, dir, name), EncodeDirent(e));
  t.batch.Put(CookieKey(vol, dir, e.cookie), name);
  t.batch.Put(FoldKey(vol, dir, name), "");
  Impl::Touch(*d, true);
  impl_->PutInode(t, vol, *d);
  in->a.nlink++;
  Impl::Touch(*in, false);
  impl_->PutInode(t, vol, *in);
  NASGW_RETURN_IF_ERROR(impl_->Commit(t));
  lock.Unlock();
  NASGW_RETURN_IF_ERROR(impl_->Durable(t));
  return in->a;
}

namespace {
// Removes the entry `name` (already loaded as e) from directory d in t.
void RemoveEntry(Domain::Impl& impl, Domain::Impl::Txn& t, uint32_t vol, Inode& d, const std::string& name,
                 const Dirent& e) {
  t.batch.Delete(DirentKey(vol, d.a.ino, name));
  t.batch.Delete(CookieKey(vol, d.a.ino, e.cookie));
  t.batch.Delete(FoldKey(vol, d.a.ino, name));
  Domain::Impl::Touch(d, true);
  (void)impl;
}
}  // namespace

Status Domain::Unlink(uint32_t vol, uint64_t dir, const std::string& name) {
  NASGW_RETURN_IF_ERROR(CheckName(name));
  WriterLock lock(impl_->mu);
  auto v = impl_->LoadVolume(vol);
  if (!v.ok()) return v.status();
  auto d = impl_->LoadDir(vol, dir);
  if (!d.ok()) return d.status();
  auto e = impl_->LoadDirent(vol, dir, name);
  if (!e.ok()) return e.status();
  if (e->type == FileType::kDirectory) return Status(Code::kIsDir, "'" + name + "' is a directory");
  auto in = impl_->LoadInode(vol, e->ino);
  if (!in.ok()) return in.status();
  Impl::Txn t;
  RemoveEntry(*impl_, t, vol, *d, name, *e);
  impl_->PutInode(t, vol, *d);
  if (--in->a.nlink == 0) {
    NASGW_RETURN_IF_ERROR(impl_->LastLinkGone(t, vol, *in, *v));
  } else {
    Impl::Touch(*in, false);
    impl_->PutInode(t, vol, *in);
  }
  impl_->PutVolume(t, vol, *v);
  t.essential = true;  // a delete: allowed into the metadata headroom
  NASGW_RETURN_IF_ERROR(impl_->Commit(t));
  lock.Unlock();
  return impl_->Durable(t);
}

Status Domain::Rmdir(uint32_t vol, uint64_t dir, const std::string& name) {
  NASGW_RETURN_IF_ERROR(CheckName(name));
  WriterLock lock(impl_->mu);
  auto v = impl_->LoadVolume(vol);
  if (!v.ok()) return v.status();
  auto d = impl_->LoadDir(vol, dir);
  if (!d.ok()) return d.status();
  auto e = impl_->LoadDirent(vol, dir, name);
  if (!e.ok()) return e.status();
  if (e->type != FileType::kDirectory) return Status(Code::kNotDir, "'" + name + "' is not a directory");
  auto empty = impl_->DirEmpty(vol, e->ino);
  if (!empty.ok()) return empty.status();
  if (!*empty) return Status(Code::kNotEmpty, "directory '" + name + "' is not empty");
  auto in = impl_->LoadInode(vol, e->ino);
  if (!in.ok()) return in.status();
  Impl::Txn t;
  RemoveEntry(*impl_, t, vol, *d, name, *e);
  d->a.nlink--;
  impl_->PutInode(t, vol, *d);
  in->a.nlink = 0;  // as Linux: a removed directory has no links, even while open
  NASGW_RETURN_IF_ERROR(impl_->LastLinkGone(t, vol, *in, *v));
  impl_->PutVolume(t, vol, *v);
  t.essential = true;  // a delete: allowed into the metadata headroom
  NASGW_RETURN_IF_ERROR(impl_->Commit(t));
  lock.Unlock();
  return impl_->Durable(t);
}

namespace {

// InvalidArgument when directory `dir` is `to` or one of its ancestors (a
// directory may not move below itself). The walk to the root ends: parents
// that come round again are a damaged tree (Corruption), never a loop
// forever under the lock.
Status NotBelow(Domain::Impl& impl, uint32_t vol, uint64_t dir, uint64_t to) {
  std::set<uint64_t> seen;
  for (uint64_t up = to; up != kRootIno;) {
    if (up == dir) return Status::InvalidArgument("cannot move a directory into itself");
    if (!seen.insert(up).second) return Status::Corruption("directory " + std::to_string(up) + " is its own ancestor");
    auto p = impl.LoadInode(vol, up);
    if (!p.ok()) return p.status();
    up = p->parent;
  }
  return Status();
}

// A rename's inodes into its transaction: the moved ones with a new change
// time, the directories with new modification and change times (`other`
// null when both names are in one directory).
void PutMoved(Domain::Impl& impl, Domain::Impl::Txn& t, uint32_t vol, std::initializer_list<Inode*> moved, Inode& dir,
              Inode* other) {
  for (Inode* in : moved) {
    Domain::Impl::Touch(*in, false);
    impl.PutInode(t, vol, *in);
  }
  for (Inode* d : {&dir, other}) {
    if (d == nullptr) continue;
    Domain::Impl::Touch(*d, true);
    impl.PutInode(t, vol, *d);
  }
}

}  // namespace

Status Domain::Rename(uint32_t vol, uint64_t from_dir, const std::string& from, uint64_t to_dir,
                      const std::string& to) {
  NASGW_RETURN_IF_ERROR(CheckName(from));
  NASGW_RETURN_IF_ERROR(CheckName(to));
  WriterLock lock(impl_->mu);
  auto v = impl_->LoadVolume(vol);
  if (!v.ok()) return v.status();
  auto sd = impl_->LoadDir(vol, from_dir);
  if (!sd.ok()) return sd.status();
  auto se = impl_->LoadDirent(vol, from_dir, from);
  if (!se.ok()) return se.status();
  if (from_dir == to_dir && from == to) return Status();
  const bool same_dir = from_dir == to_dir;
  Result<Inode> dd = same_dir ? sd : impl_->LoadDir(vol, to_dir);
  if (!dd.ok()) return dd.status();
  auto moved = impl_->LoadInode(vol, se->ino);
  if (!moved.ok()) return moved.status();
  const bool is_dir = se->type == FileType::kDirectory;
  // A directory may not move below itself.
  if (is_dir && !same_dir) NASGW_RETURN_IF_ERROR(NotBelow(*impl_, vol, se->ino, to_dir));
  // The target directory's inode: the very same object as the source's when
  // both are one directory, so that every change lands in what is written.
  Inode& dst = same_dir ? *sd : *dd;
  Impl::Txn t;
  auto te = impl_->LoadDirent(vol, to_dir, to);
  if (!te.ok() && te.status().code() != Code::kNotFound) return te.status();
  if (te.ok()) {
    if (te->ino == se->ino) return Status();  // two names of one file: nothing to do
    auto target = impl_->LoadInode(vol, te->ino);
    if (!target.ok()) return target.status();
    if (is_dir && te->type != FileType::kDirectory) return Status(Code::kNotDir, "'" + to + "' is not a directory");
    if (!is_dir && te->type == FileType::kDirectory) return Status(Code::kIsDir, "'" + to + "' is a directory");
    if (te->type == FileType::kDirectory) {
      auto empty = impl_->DirEmpty(vol, te->ino);
      if (!empty.ok()) return empty.status();
      if (!*empty) return Status(Code::kNotEmpty, "'" + to + "' is not empty");
      dst.a.nlink--;
      target->a.nlink = 0;
      NASGW_RETURN_IF_ERROR(impl_->LastLinkGone(t, vol, *target, *v));
    } else if (--target->a.nlink == 0) {
      NASGW_RETURN_IF_ERROR(impl_->LastLinkGone(t, vol, *target, *v));
    } else {
      Impl::Touch(*target, false);
      impl_->PutInode(t, vol, *target);
    }
    t.batch.Delete(CookieKey(vol, to_dir, te->cookie));
  }
  // Source entry out, target entry in (same batch: atomic). Within one
  // directory the entry keeps its place (its cookie): a listing under way
  // returns it once, by the name it had when the listing passed its place,
  // and no other entry moves (docs/on-disk-format.md, directory entries).
  t.batch.Delete(DirentKey(vol, from_dir, from));
  if (!same_dir) t.batch.Delete(CookieKey(vol, from_dir, se->cookie));
  t.batch.Delete(FoldKey(vol, from_dir, from));
  Dirent ne{se->ino, se->type, same_dir ? se->cookie : dst.next_cookie++};
  t.batch.Put(DirentKey(vol, to_dir, to), EncodeDirent(ne));
  t.batch.Put(CookieKey(vol, to_dir, ne.cookie), to);
  t.batch.Put(FoldKey(vol, to_dir, to), "");
  if (is_dir && !same_dir) {
    moved->parent = to_dir;
    sd->a.nlink--;
    dst.a.nlink++;
  }
  PutMoved(*impl_, t, vol, {&*moved}, *sd, same_dir ? nullptr : &dst);
  impl_->PutVolume(t, vol, *v);
  NASGW_RETURN_IF_ERROR(impl_->Commit(t));
  lock.Unlock();
  return impl_->Durable(t);
}

// RENAME_EXCHANGE: the two names trade their inodes at once. Each name keeps
// its place (cookie) in its directory; a directory that changes parent gets
// its ".." and the parents' link counts follow.
Status Domain::Exchange(uint32_t vol, uint64_t a_dir, const std::string& a, uint64_t b_dir, const std::string& b) {
  NASGW_RETURN_IF_ERROR(CheckName(a));
  NASGW_RETURN_IF_ERROR(CheckName(b));
  WriterLock lock(impl_->mu);
  auto v = impl_->LoadVolume(vol);
  if (!v.ok()) return v.status();
  auto ad = impl_->LoadDir(vol, a_dir);
  if (!ad.ok()) return ad.status();
  const bool same_dir = a_dir == b_dir;
  Result<Inode> bd = same_dir ? ad : impl_->LoadDir(vol, b_dir);
  if (!bd.ok()) return bd.status();
  auto ae = impl_->LoadDirent(vol, a_dir, a);
  if (!ae.ok()) return ae.status();
  auto be = impl_->LoadDirent(vol, b_dir, b);
  if (!be.ok()) return be.status();
  if (ae->ino == be->ino) return Status();  // one file (or one name): nothing changes
  auto ai = impl_->LoadInode(vol, ae->ino);
  if (!ai.ok()) return ai.status();
  auto bi = impl_->LoadInode(vol, be->ino);
  if (!bi.ok()) return bi.status();
  const bool a_is_dir = ae->type == FileType::kDirectory, b_is_dir = be->type == FileType::kDirectory;
  if (!same_dir) {
    if (a_is_dir) NASGW_RETURN_IF_ERROR(NotBelow(*impl_, vol, ae->ino, b_dir));
    if (b_is_dir) NASGW_RETURN_IF_ERROR(NotBelow(*impl_, vol, be->ino, a_dir));
  }
  Inode& bdir = same_dir ? *ad : *bd;
  Impl::Txn t;
  t.batch.Put(DirentKey(vol, a_dir, a), EncodeDirent(Dirent{be->ino, be->type, ae->cookie}));
  t.batch.Put(DirentKey(vol, b_dir, b), EncodeDirent(Dirent{ae->ino, ae->type, be->cookie}));
  if (!same_dir) {
    if (a_is_dir) {
      ai->parent = b_dir;
      ad->a.nlink--;
      bdir.a.nlink++;
    }
    if (b_is_dir) {
      bi->parent = a_dir;
      bdir.a.nlink--;
      ad->a.nlink++;
    }
  }
  PutMoved(*impl_, t, vol, {&*ai, &*bi}, *ad, same_dir ? nullptr : &bdir);
  impl_->PutVolume(t, vol, *v);
  NASGW_RETURN_IF_ERROR(impl_->Commit(t));
  lock.Unlock();
  return impl_->Durable(t);
}

Result<std::vector<DirEntry>> Domain::ReadDir(uint32_t vol, uint64_t dir, uint64_t cookie, size_t max, uint32_t snap) {
  ReaderLock lock(impl_->mu);
  auto at = impl_->ReadAt(vol, snap);
  if (!at.ok()) return at.status();
  auto d = impl_->LoadDir(vol, dir, *at);
  if (!d.ok()) return d.status();
  std::vector<DirEntry> out;
  std::string p = Prefix('C', vol, dir);
  Status bad;
  NASGW_RETURN_IF_ERROR(impl_->ScanAt(
      CookieKey(vol, dir, cookie + 1), PrefixEnd(p), *at, max, [&](std::string_view k, std::string_view name) {
        if (out.size() >= max) return false;
        if (k.size() != p.size() + 8) {
          bad = Status::Corruption("directory index key of " + std::to_string(k.size()) + " bytes");
          return false;
        }
        auto e = impl_->LoadDirent(vol, dir, std::string(name), *at);
        if (!e.ok()) {
          bad = e.status().WithContext("directory index");
          return false;
        }
        out.push_back({std::string(name), e->ino, e->type, GetBE64(k, p.size())});
        return true;
      }));
  NASGW_RETURN_IF_ERROR(bad);
  return out;
}

namespace {
// Which ACL an attribute name is: 1 access, 2 default, 0 neither.
int AclName(const std::string& name) {
  if (name == kAclAccessXattr) return 1;
  if (name == kAclDefaultXattr) return 2;
  return 0;
}
}  // namespace

Result<Attr> Domain::SetAcl(uint32_t vol, uint64_t ino, bool is_default, std::string_view xattr, bool clear_setgid) {
  auto parsed = ParseAcl(xattr);
  if (!parsed.ok()) return parsed.status();
  WriterLock lock(impl_->mu);
  auto in = impl_->LoadInode(vol, ino);
  if (!in.ok()) return in.status();
  if (parsed->empty() && (is_default ? in->a.acl_default : in->a.acl_access).empty()) {
    return in->a;  // removing what is not there: nothing changes (as Linux)
  }
  if (is_default) {
    if (in->a.type != FileType::kDirectory) return Status::PermissionDenied("a default ACL is for directories only");
    in->a.acl_default = parsed->empty() ? std::string() : EncodeAcl(*parsed);
  } else if (parsed->empty()) {
    in->a.acl_access.clear();  // the mode stays (as Linux)
  } else {
    const bool keep = AclBeyondMode(*parsed, &in->a.mode);
    in->a.acl_access = keep ? EncodeAcl(*parsed) : std::string();
    if (clear_setgid) in->a.mode &= ~02000u;
  }
  Impl::Txn t;
  Impl::Touch(*in, false);
  impl_->PutInode(t, vol, *in);
  NASGW_RETURN_IF_ERROR(impl_->Commit(t));
  lock.Unlock();
  NASGW_RETURN_IF_ERROR(impl_->Durable(t));
  return in->a;
}

Result<std::string> Domain::GetXattr(uint32_t vol, uint64_t ino, const std::string& name, uint32_t snap) {
  ReaderLock lock(impl_->mu);
  auto at = impl_->ReadAt(vol, snap);
  if (!at.ok()) return at.status();
  auto in = impl_->LoadInode(vol, ino, *at);
  if (!in.ok()) return in.status();
  if (const int acl = AclName(name)) {
    const std::string& v = acl == 1 ? in->a.acl_access : in->a.acl_default;
    if (v.empty()) return Status::NotFound("no attribute " + name);
    return v;
  }
  auto v = impl_->GetAt(XattrKey(vol, ino, name), *at);
  if (!v.ok()) {
    return v.status().code() == Code::kNotFound ? Status::NotFound("no attribute " + name)
                                                : v.status().WithContext("attribute " + name);
  }
  return *v;
}

Status Domain::SetXattr(uint32_t vol, uint64_t ino, const std::string& name, const std::string& value, int flags) {
  if (name.empty() || name.size() > kXattrNameMax) return Status::InvalidArgument("attribute name 1-255 bytes");
  if (value.size() > kXattrValueMax) return Status::NoSpace("attribute value larger than 64 KiB");
  if (const int acl = AclName(name)) return SetAcl(vol, ino, acl == 2, value, false).status();
  WriterLock lock(impl_->mu);
  auto in = impl_->LoadInode(vol, ino);
  if (!in.ok()) return in.status();
  auto has = impl_->Has(XattrKey(vol, ino, name));
  if (!has.ok()) return has.status().WithContext("attribute " + name);
  const bool exists = *has;
  if ((flags & 1) && exists) return Status::Exists("attribute " + name + " exists");  // XATTR_CREATE
  if ((flags & 2) && !exists) return Status::NotFound("no attribute " + name);        // XATTR_REPLACE
  Impl::Txn t;
  t.batch.Put(XattrKey(vol, ino, name), value);
  Impl::Touch(*in, false);
  impl_->PutInode(t, vol, *in);
  NASGW_RETURN_IF_ERROR(impl_->Commit(t));
  lock.Unlock();
  return impl_->Durable(t);
}

Result<std::vector<std::string>> Domain::ListXattr(uint32_t vol, uint64_t ino, uint32_t snap) {
  ReaderLock lock(impl_->mu);
  auto at = impl_->ReadAt(vol, snap);
  if (!at.ok()) return at.status();
  auto in = impl_->LoadInode(vol, ino, *at);
  if (!in.ok()) return in.status();
  std::vector<std::string> out;
  if (!in->a.acl_access.empty()) out.emplace_back(kAclAccessXattr);
  if (!in->a.acl_default.empty()) out.emplace_back(kAclDefaultXattr);
  std::string p = Prefix('X', vol, ino);
  NASGW_RETURN_IF_ERROR(impl_->ScanAt(p, PrefixEnd(p), *at, SIZE_MAX, [&](std::string_view k, std::string_view) {
    out.emplace_back(k.substr(p.size()));
    return true;
  }));
  return out;
}

Status Domain::RemoveXattr(uint32_t vol, uint64_t ino, const std::string& name) {
  if (const int acl = AclName(name)) return SetAcl(vol, ino, acl == 2, {}, false).status();
  WriterLock lock(impl_->mu);
  auto in = impl_->LoadInode(vol, ino);
  if (!in.ok()) return in.status();
  auto has = impl_->Has(XattrKey(vol, ino, name));
  if (!has.ok()) return has.status().WithContext("attribute " + name);
  if (!*has) return Status::NotFound("no attribute " + name);
  Impl::Txn t;
  t.batch.Delete(XattrKey(vol, ino, name));
  Impl::Touch(*in, false);
  impl_->PutInode(t, vol, *in);
  t.essential = true;  // a delete: allowed into the metadata headroom
  NASGW_RETURN_IF_ERROR(impl_->Commit(t));
  lock.Unlock();
  return impl_->Durable(t);
}

Status Domain::OpenFile(uint32_t vol, uint64_t ino) {
  WriterLock lock(impl_->mu);
  NASGW_RETURN_IF_ERROR(impl_->LoadInode(vol, ino).status());
  impl_->open_count[{vol, ino}]++;
  return Status();
}

Status Domain::ReleaseFile(uint32_t vol, uint64_t ino) {
  WriterLock lock(impl_->mu);
  auto it = impl_->open_count.find({vol, ino});
  if (it == impl_->open_count.end() || it->second == 0) return Status::InvalidArgument("file is not open");
  if (--it->second > 0) return Status();
  impl_->open_count.erase(it);
  // The file is released whatever follows. If an unlinked file cannot be
  // dropped now, its orphan key stays and the next open drops it; the
  // caller still hears why.
  auto in = impl_->LoadInode(vol, ino);
  if (!in.ok()) return in.status().code() == Code::kNotFound ? Status() : in.status().WithContext("release");
  if (in->a.nlink > 0) return Status();
  auto v = impl_->LoadVolume(vol);
  if (!v.ok()) return v.status();
  Impl::Txn t;
  NASGW_RETURN_IF_ERROR(impl_->DropInode(t, vol, *in, *v).WithContext("release"));
  t.batch.Delete(OrphanKey(vol, ino));
  impl_->PutVolume(t, vol, *v);
  t.essential = true;  // a delete: allowed into the metadata headroom
  NASGW_RETURN_IF_ERROR(impl_->Commit(t));
  lock.Unlock();
  return impl_->Durable(t);
}

}  // namespace nasgw::fs
