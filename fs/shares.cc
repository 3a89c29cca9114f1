// A domain's SMB shares as it stores them (fs/domain.h, "SMB shares").
#include "fs/domain_impl.h"

namespace nasgw::fs {

using namespace keys;  // fs/keys.h: the keys and values of the metadata

Status Domain::Impl::ScanShares(const std::function<bool(Result<ShareRec>)>& fn) {
  return store->Scan("B", "C", [&](std::string_view, std::string_view v) { return fn(DecodeShare(v)); });
}

Result<Share> Domain::Impl::NamedShare(const ShareRec& r) {
  auto v = LoadVolume(r.vol);
  if (!v.ok()) {
    if (v.status().code() != Code::kNotFound) return v.status().WithContext("share '" + r.s.name + "'");
    return Status::Corruption("share '" + r.s.name + "' names volume " + std::to_string(r.vol) +
                              ", which does not exist");
  }
  Share s = r.s;
  s.volume = v->name;
  return s;
}

namespace {

// What the domain needs of a share it stores (docs/on-disk-format.md): a
// name that fits, a path it can walk, fields its record holds. The rules of
// the fields themselves are nasgwd's (daemon/smb_shares.h).
Status CheckStorable(const Share& s) {
  if (s.name.empty() || s.name.size() > kShareNameMax) {
    return Status::InvalidArgument("share name must be 1.." + std::to_string(kShareNameMax) + " bytes");
  }
  if (s.path.empty() || s.path[0] != '/' || (s.path.size() > 1 && s.path.back() == '/') ||
      s.path.find("//") != std::string::npos || s.path.find("/./") != std::string::npos ||
      s.path.find("/../") != std::string::npos || s.path.ends_with("/.") || s.path.ends_with("/..")) {
    return Status::InvalidArgument("share path '" + s.path + "' is not absolute and in normal form");
  }
  constexpr size_t kStr16 = UINT16_MAX;
  if (s.path.size() > kStr16 || s.comment.size() > kStr16 || s.valid_users.size() > kStr16) {
    return Status::InvalidArgument("share path, comment or user list too long");
  }
  for (const auto& u : s.valid_users) {
    if (u.empty() || u.size() > kStr16) return Status::InvalidArgument("share user name empty or too long");
  }
  return Status();
}

}  // namespace

Result<Share> Domain::AddShare(const Share& spec) {
  Share s = spec;
  NASGW_RETURN_IF_ERROR(CheckStorable(s));
  WriterLock lock(impl_->mu);
  auto vol = impl_->VolumeId(s.volume);
  if (!vol.ok()) return vol.status();
  NASGW_RETURN_IF_ERROR(impl_->CheckExportDir(*vol, s.volume, s.path));
  auto other = impl_->store->Get(ShareKey(s.name));
  if (other.ok()) {
    auto o = DecodeShare(*other);
    return Status::Exists("share name '" + s.name + "' is taken" +
                          (o.ok() && o->s.name != s.name ? " (by '" + o->s.name + "': names ignore case)" : ""));
  }
  if (other.status().code() != Code::kNotFound) return other.status();
  ShareRec r{*vol, s};
  r.s.volume.clear();
  Impl::Txn t;
  t.batch.Put(ShareKey(s.name), EncodeShare(r));
  NASGW_RETURN_IF_ERROR(impl_->Commit(t));
  lock.Unlock();
  NASGW_RETURN_IF_ERROR(impl_->Durable(t));
  return s;
}

Result<std::vector<Share>> Domain::ListShares() {
  ReaderLock lock(impl_->mu);
  std::vector<Share> out;
  Status bad;
  NASGW_RETURN_IF_ERROR(impl_->ScanShares([&](Result<ShareRec> r) REQUIRES_SHARED(impl_->mu) {
    Result<Share> s = r.ok() ? impl_->NamedShare(*r) : Result<Share>(r.status());
    if (!s.ok()) {
      bad = s.status();
      return false;
    }
    out.push_back(std::move(s.value()));
    return true;
  }));
  NASGW_RETURN_IF_ERROR(bad);
  return out;
}

Result<Share> Domain::GetShare(const std::string& name) {
  ReaderLock lock(impl_->mu);
  auto v = impl_->store->Get(ShareKey(name));
  if (!v.ok()) {
    return v.status().code() == Code::kNotFound ? Status::NotFound("no share named '" + name + "'") : v.status();
  }
  auto r = DecodeShare(*v);
  if (!r.ok()) return r.status();
  return impl_->NamedShare(*r);
}

Result<Share> Domain::RemoveShare(const std::string& name) {
  WriterLock lock(impl_->mu);
  auto v = impl_->store->Get(ShareKey(name));
  if (!v.ok()) {
    return v.status().code() == Code::kNotFound ? Status::NotFound("no share named '" + name + "'") : v.status();
  }
  auto r = DecodeShare(*v);
  Share s;
  if (r.ok()) {
    s = r->s;
    auto vol = impl_->LoadVolume(r->vol);
    if (vol.ok()) {
      s.volume = vol->name;
    } else if (vol.status().code() != Code::kNotFound) {
      return vol.status();
    }  // removing a share of a missing volume repairs it
  } else {
    s.name = name;  // removing a record that does not decode repairs it too
  }
  Impl::Txn t;
  t.batch.Delete(ShareKey(name));
  NASGW_RETURN_IF_ERROR(impl_->Commit(t));
  lock.Unlock();
  NASGW_RETURN_IF_ERROR(impl_->Durable(t));
  return s;
}

}  // namespace nasgw::fs
