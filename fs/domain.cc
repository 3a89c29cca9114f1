// A domain: create, open (with the reclaim of orphans), statfs (fs/domain.h).
// The API's other parts are in fs/volumes.cc, fs/namespace.cc, fs/data.cc,
// fs/exports.cc and fs/check.cc; the commit path in fs/domain_impl.{h,cc}.
#include "fs/domain.h"

#include <algorithm>
#include <map>

#include "base/log.h"
#include "fs/domain_impl.h"

namespace nasgw::fs {

using namespace keys;  // fs/keys.h: the keys and values of the metadata

const char* FileTypeName(FileType t) {
  switch (t) {
    case FileType::kNone:
      return "none";
    case FileType::kRegular:
      return "file";
    case FileType::kDirectory:
      return "directory";
    case FileType::kSymlink:
      return "symlink";
    case FileType::kFifo:
      return "fifo";
    case FileType::kSocket:
      return "socket";
    case FileType::kCharDevice:
      return "char-device";
    case FileType::kBlockDevice:
      return "block-device";
  }
  return "?";
}

Domain::Domain(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Domain::~Domain() = default;

Result<std::unique_ptr<Domain>> Domain::Create(const std::shared_ptr<Reserve>& reserve, uint32_t id,
                                               const DomainOptions& o) {
  // Metadata: the first groups of every LUN; data: the rest.
  uint64_t total = 0;
  for (uint32_t l = 0; l < reserve->lun_count(); l++) total += reserve->ag_count(l);
  uint32_t per_lun = o.meta_groups ? (o.meta_groups + reserve->lun_count() - 1) / reserve->lun_count()
                                   : static_cast<uint32_t>(std::max<uint64_t>(1, total / 16 / reserve->lun_count()));
  std::vector<AgId> meta;
  DomainRec rec;
  for (uint32_t l = 0; l < reserve->lun_count(); l++) {
    const uint32_t n = reserve->ag_count(l);
    const uint32_t m = std::min(per_lun, n > 1 ? n - 1 : n);
    for (uint32_t g = 0; g < m; g++) meta.push_back({l, g});
    if (n > m) rec.data_groups.push_back({{l, m}, n - m});
  }
  if (rec.data_groups.empty()) return Status::NoSpace("reserve too small for metadata and data");
  auto fs = MetaFs::Create(reserve, id, meta, o.metafs);
  if (!fs.ok()) return fs.status();
  {
    auto store = MetaStore::Open(fs->get(), o.store);
    if (!store.ok()) return store.status();
    MetaBatch b;
    b.Put(SuperKey(), EncodeDomain(rec));
    b.Put(HandleSecretKey(), EncodeHandleSecret(NewHandleSecret()));
    NASGW_RETURN_IF_ERROR((*store)->Write(b, true));
  }
  fs->reset();
  return Open(reserve, id, o);
}

Result<std::unique_ptr<Domain>> Domain::Open(const std::shared_ptr<Reserve>& reserve, uint32_t id,
                                             const DomainOptions& o) {
  auto impl = std::make_unique<Impl>();
  impl->reserve = reserve;
  impl->id = id;
  impl->unmap_freed = o.unmap_freed;
  auto fs = MetaFs::Mount(reserve, id, o.metafs);
  if (!fs.ok()) return fs.status();
  impl->metafs = std::move(fs.value());
  MetaStoreOptions store_options = o.store;
  store_options.read_only = o.read_only;
  auto store = MetaStore::Open(impl->metafs.get(), store_options);
  if (!store.ok()) return store.status();
  impl->store = std::move(store.value());
  auto r = impl->store->Get(SuperKey());
  if (!r.ok()) return r.status().WithContext("domain record");
  auto rec = DecodeDomain(*r);
  if (!rec.ok()) return rec.status();
  WriterLock lock(impl->mu);  // not shared yet: for the analysis
  impl->rec = *rec;
  // The handle secret; a domain made before handles had MACs gets one now
  // (read-only, for checking, it goes without: its key verifies nothing).
  auto secret = impl->store->Get(HandleSecretKey());
  if (!secret.ok() && secret.status().code() == Code::kNotFound && !o.read_only) {
    MetaBatch b;
    b.Put(HandleSecretKey(), EncodeHandleSecret(NewHandleSecret()));
    NASGW_RETURN_IF_ERROR(impl->store->Write(b, true).WithContext("store the handle secret"));
    secret = impl->store->Get(HandleSecretKey());
  }
  if (secret.ok()) {
    if (secret->size() != 1 + kHandleSecretBytes || static_cast<uint8_t>((*secret)[0]) != kHandleSecretVersion) {
      return Status::Corruption("bad handle secret record");
    }
    auto key = HandleKey::FromSecret(std::string_view(*secret).substr(1));
    if (!key.ok()) return key.status();
    impl->handle_key = *key;
  } else if (secret.status().code() != Code::kNotFound) {
    return secret.status().WithContext("handle secret");
  }
  impl->space = std::make_unique<Allocator>(reserve->ag_bytes(), kDataBlock);
  for (const auto& [first, n] : impl->rec.data_groups) {
    for (uint32_t g = 0; g < n; g++) {
      NASGW_RETURN_IF_ERROR(
          impl->space->AddGroup({first.lun, first.index + g}, Reserve::AgOffset(reserve->ag_bytes(), first.index + g)));
    }
  }
  // Space in use is what the extent maps name.
  Status bad;
  NASGW_RETURN_IF_ERROR(impl->store->Scan("E", "F", [&](std::string_view, std::string_view v) {
    auto m = DecodeRecordMap(v);
    if (!m.ok()) {
      bad = m.status();
      return false;
    }
    for (const Extent& e : m->extents) {
      Status s = impl->space->MarkUsed(e);
      if (!s.ok()) {
        bad = s;
        return false;
      }
    }
    return true;
  }));
  NASGW_RETURN_IF_ERROR(bad);
  // Files that were unlinked while open when the domain last stopped.
  std::vector<std::pair<uint32_t, uint64_t>> orphans;
  NASGW_RETURN_IF_ERROR(impl->store->Scan("O", "P", [&](std::string_view k, std::string_view) {
    orphans.push_back(
        {static_cast<uint32_t>(GetBE64(std::string(4, '\0') + std::string(k.substr(1, 4)), 0)), GetBE64(k, 5)});
    return true;
  }));
  // Each volume's file count, for Statfs.
  std::map<uint32_t, uint64_t> vol_files;
  NASGW_RETURN_IF_ERROR(impl->store->Scan("V", "W", [&](std::string_view k, std::string_view val) {
    auto v = DecodeVolume(val);
    if (!v.ok() || k.size() != 5) {
      bad = v.ok() ? Status::Corruption("volume key of " + std::to_string(k.size()) + " bytes") : v.status();
      return false;
    }
    vol_files[GetBE32(k, 1)] = v->files;
    return true;
  }));
  NASGW_RETURN_IF_ERROR(bad);
  impl->vol_files = std::move(vol_files);
  if (o.read_only) orphans.clear();  // the owner reclaims them when it opens the domain
  for (const auto& [vol, ino] : orphans) {
    // An orphan whose inode or volume is gone only needs its key removed;
    // one that cannot be read stops the open (dropping the key would leave
    // a nameless inode behind for good).
    auto in = impl->LoadInode(vol, ino);
    if (!in.ok() && in.status().code() != Code::kNotFound) return in.status().WithContext("orphan");
    auto v = impl->LoadVolume(vol);
    if (!v.ok() && v.status().code() != Code::kNotFound) return v.status().WithContext("orphan");
    Impl::Txn t;
    if (in.ok() && v.ok()) {
      NASGW_RETURN_IF_ERROR(impl->DropInode(t, vol, *in, *v).WithContext("remove orphan"));
      impl->PutVolume(t, vol, *v);
    }
    t.batch.Delete(OrphanKey(vol, ino));
    NASGW_RETURN_IF_ERROR(impl->Commit(t).WithContext("remove orphan"));
  }
  return std::unique_ptr<Domain>(new Domain(std::move(impl)));
}

const HandleKey& Domain::handle_key() const {
  return impl_->handle_key;
}

uint64_t Domain::txg() const {
  ReaderLock lock(impl_->mu);
  return impl_->rec.txg;
}

StatFs Domain::Statfs() {
  StatFs s;
  ReaderLock lock(impl_->mu);
  for (const auto& [vol, files] : impl_->vol_files) s.files += files;
  s.total_bytes = impl_->space->total_bytes();
  s.free_bytes = impl_->space->available_bytes();
  return s;
}

}  // namespace nasgw::fs
