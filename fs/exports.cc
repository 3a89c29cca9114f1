// A domain's NFS exports as it stores them (fs/domain.h, "NFS exports").
#include "fs/domain_impl.h"

namespace nasgw::fs {

using namespace keys;  // fs/keys.h: the keys and values of the metadata

Result<ExportRec> Domain::Impl::LoadExport(uint32_t export_id) {
  auto v = store->Get(ExportKey(export_id));
  if (!v.ok()) {
    return v.status().code() == Code::kNotFound ? Status::NotFound("no export " + std::to_string(export_id))
                                                : v.status();
  }
  return DecodeExport(export_id, *v);
}

Result<Export> Domain::Impl::Named(const ExportRec& r) {
  auto v = LoadVolume(r.vol);
  if (!v.ok()) {
    if (v.status().code() != Code::kNotFound) return v.status().WithContext("export " + std::to_string(r.e.id));
    return Status::Corruption("export " + std::to_string(r.e.id) + " names volume " + std::to_string(r.vol) +
                              ", which does not exist");
  }
  Export e = r.e;
  e.volume = v->name;
  return e;
}

Result<uint32_t> Domain::Impl::NextExportId() {
  auto v = store->Get(ExportCounterKey());
  if (!v.ok()) {
    return v.status().code() == Code::kNotFound ? Result<uint32_t>(ExportIds(id, reserve->domains()).first)
                                                : v.status();
  }
  return DecodeExportCounter(*v);
}

Status Domain::Impl::ScanExports(const std::function<bool(Result<ExportRec>)>& fn) {
  return store->Scan("P", "Q", [&](std::string_view k, std::string_view v) {
    if (k.size() != 5) return fn(Status::Corruption("export key of " + std::to_string(k.size()) + " bytes"));
    return fn(DecodeExport(GetBE32(k, 1), v));
  });
}

Status Domain::Impl::CheckExportDir(uint32_t vol, const std::string& volume, const std::string& path) {
  uint64_t dir = kRootIno;
  std::string walked;
  size_t at = 1;
  while (at < path.size()) {
    size_t end = path.find('/', at);
    if (end == std::string::npos) end = path.size();
    const std::string name = path.substr(at, end - at);
    at = end + 1;
    walked += "/" + name;
    auto e = LoadDirent(vol, dir, name);
    if (!e.ok()) {
      if (e.status().code() != Code::kNotFound) return e.status();
      return Status::NotFound("no directory '" + walked + "' in volume '" + volume + "'");
    }
    if (e->type != FileType::kDirectory) {
      return Status::NotFound("'" + walked + "' in volume '" + volume + "' is a " + FileTypeName(e->type) +
                              ", not a directory");
    }
    dir = e->ino;
  }
  return Status();
}

namespace {

// InvalidArgument unless `path` is absolute and in normal form: "/" or
// "/a/b", no empty, "." or ".." component, no trailing '/'.
Status CheckExportPath(std::string_view what, const std::string& path) {
  if (path.empty() || path[0] != '/') return Status::InvalidArgument(std::string(what) + " is not absolute");
  if (path == "/") return Status();
  size_t at = 1;
  while (at <= path.size()) {
    size_t end = path.find('/', at);
    if (end == std::string::npos) end = path.size();
    const std::string_view part(path.data() + at, end - at);
    if (part.empty() || part == "." || part == "..") {
      return Status::InvalidArgument(std::string(what) + " is not in normal form (an empty, '.' or '..' component)");
    }
    at = end + 1;
  }
  return Status();
}

// What the domain needs of an export it stores: paths it can walk and
// index, and fields its record can hold (docs/on-disk-format.md). The rules
// of the fields themselves (what Ganesha accepts) are the caller's
// (daemon/export_rules.h).
Status CheckStorable(const Export& e) {
  NASGW_RETURN_IF_ERROR(CheckExportPath("export path", e.path));
  NASGW_RETURN_IF_ERROR(CheckExportPath("pseudo path", e.pseudo));
  constexpr size_t kStr16 = UINT16_MAX;
  if (e.path.size() > kStr16 || e.pseudo.size() > kStr16) return Status::InvalidArgument("export path too long");
  if (e.clients.size() > kStr16 || e.sec.size() > UINT8_MAX || e.protocols.size() > UINT8_MAX) {
    return Status::InvalidArgument("too many export clients, security flavours or protocols");
  }
  for (const auto& c : e.clients) {
    if (c.size() > kStr16) return Status::InvalidArgument("export client too long");
  }
  for (const auto& s : e.sec) {
    if (s.size() > kStr16) return Status::InvalidArgument("export security flavour too long");
  }
  for (uint32_t p : e.protocols) {
    if (p > UINT8_MAX) return Status::InvalidArgument("NFS protocol version " + std::to_string(p));
  }
  return Status();
}

}  // namespace

Result<Export> Domain::AddExport(const Export& spec) {
  Export e = spec;
  NASGW_RETURN_IF_ERROR(CheckStorable(e));
  WriterLock lock(impl_->mu);
  auto vol = impl_->VolumeId(e.volume);
  if (!vol.ok()) return vol.status();
  NASGW_RETURN_IF_ERROR(impl_->CheckExportDir(*vol, e.volume, e.path));
  auto other = impl_->store->Get(PseudoKey(e.pseudo));
  if (other.ok()) {
    if (other->size() != 4) return Status::Corruption("pseudo path index of '" + e.pseudo + "'");
    return Status::Exists("pseudo path '" + e.pseudo + "' is taken by export " + std::to_string(GetBE32(*other, 0)));
  }
  if (other.status().code() != Code::kNotFound) return other.status();
  auto next = impl_->NextExportId();
  if (!next.ok()) return next.status();
  const ExportIdRange ids = ExportIds(impl_->id, impl_->reserve->domains());
  if (*next > ids.last) {
    return Status::NoSpace("every export id of this domain (" + std::to_string(ids.first) + ".." +
                           std::to_string(ids.last) + ") has been used; ids are never reused");
  }
  e.id = *next;
  ExportRec r{*vol, e};
  r.e.volume.clear();
  Impl::Txn t;
  std::string idv;
  PutBE32(&idv, e.id);
  t.batch.Put(ExportKey(e.id), EncodeExport(r));
  t.batch.Put(PseudoKey(e.pseudo), idv);
  t.batch.Put(ExportCounterKey(), EncodeExportCounter(e.id + 1));
  NASGW_RETURN_IF_ERROR(impl_->Commit(t));
  lock.Unlock();
  NASGW_RETURN_IF_ERROR(impl_->Durable(t));
  return e;
}

Result<std::vector<Export>> Domain::ListExports() {
  ReaderLock lock(impl_->mu);
  std::vector<Export> out;
  Status bad;
  NASGW_RETURN_IF_ERROR(impl_->ScanExports([&](Result<ExportRec> r) REQUIRES_SHARED(impl_->mu) {
    Result<Export> e = r.ok() ? impl_->Named(*r) : Result<Export>(r.status());
    if (!e.ok()) {
      bad = e.status();
      return false;
    }
    out.push_back(std::move(e.value()));
    return true;
  }));
  NASGW_RETURN_IF_ERROR(bad);
  return out;
}

Result<Export> Domain::GetExport(uint32_t id) {
  ReaderLock lock(impl_->mu);
  auto r = impl_->LoadExport(id);
  if (!r.ok()) return r.status();
  return impl_->Named(*r);
}

Result<Export> Domain::FindExport(const std::string& pseudo) {
  ReaderLock lock(impl_->mu);
  auto idv = impl_->store->Get(PseudoKey(pseudo));
  if (!idv.ok()) {
    return idv.status().code() == Code::kNotFound ? Status::NotFound("no export with pseudo path '" + pseudo + "'")
                                                  : idv.status();
  }
  if (idv->size() != 4) return Status::Corruption("pseudo path index of '" + pseudo + "'");
  auto r = impl_->LoadExport(GetBE32(*idv, 0));
  if (!r.ok()) return r.status();
  return impl_->Named(*r);
}

Result<Export> Domain::RemoveExport(uint32_t id) {
  WriterLock lock(impl_->mu);
  auto r = impl_->LoadExport(id);
  if (!r.ok()) return r.status();
  Export e = r->e;
  auto v = impl_->LoadVolume(r->vol);
  if (v.ok()) {
    e.volume = v->name;
  } else if (v.status().code() != Code::kNotFound) {
    return v.status();
  }  // removing an export of a missing volume repairs it
  Impl::Txn t;
  t.batch.Delete(ExportKey(id));
  t.batch.Delete(PseudoKey(e.pseudo));
  NASGW_RETURN_IF_ERROR(impl_->Commit(t));
  lock.Unlock();
  NASGW_RETURN_IF_ERROR(impl_->Durable(t));
  return e;
}

}  // namespace nasgw::fs
