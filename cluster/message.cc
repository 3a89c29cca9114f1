#include "cluster/message.h"

#include <algorithm>

#include "base/coding.h"
#include "fs/keys.h"

namespace nasgw::cluster {

namespace {

// Every message's first two bytes: the version, the kind.
Encoder Begin(MessageKind kind) {
  Encoder e;
  e.U8(kMessageVersion);
  e.U8(static_cast<uint8_t>(kind));
  return e;
}
bool IsKind(Decoder& d, MessageKind kind) {
  return d.U8() == kMessageVersion && d.U8() == static_cast<uint8_t>(kind);
}

constexpr size_t kNameMax = 255;
constexpr size_t kReasonMax = 1024;

}  // namespace

void PutUuid(Encoder& e, const Uuid& u) {
  for (uint8_t b : u.bytes) e.U8(b);
}

Uuid GetUuid(Decoder& d) {
  Uuid u;
  std::string_view v = d.View(u.bytes.size());
  if (v.size() == u.bytes.size()) std::copy(v.begin(), v.end(), u.bytes.begin());
  return u;
}

std::string EncodeGiveBack(const GiveBackRequest& r) {
  Encoder e = Begin(MessageKind::kGiveBack);
  PutUuid(e, r.from);
  PutUuid(e, r.to);
  PutUuid(e, r.reserve);
  return e.Release();
}

std::optional<GiveBackRequest> DecodeGiveBack(std::string_view bytes) {
  if (bytes.size() > kMessageBytesMax) return std::nullopt;
  Decoder d(bytes);
  if (!IsKind(d, MessageKind::kGiveBack)) return std::nullopt;
  GiveBackRequest r;
  r.from = GetUuid(d);
  r.to = GetUuid(d);
  r.reserve = GetUuid(d);
  if (!d.ok()) return std::nullopt;
  return r;
}

std::string EncodeHeartbeat(const Heartbeat& h) {
  Encoder e = Begin(MessageKind::kHeartbeat);
  PutUuid(e, h.node_id);
  PutUuid(e, h.reserve);
  e.U8(h.state);
  e.U64(h.seq);
  e.U64(h.incarnation);
  e.Str16(std::string_view(h.name).substr(0, kNameMax));
  e.Str16(std::string_view(h.reason).substr(0, kReasonMax));
  e.U8(h.lan_up ? 1 : 0);  // added after the first fields: absent means up
  e.U64(h.vips_assigned);  // added later still: absent means none
  e.U64(h.vips_held);
  e.U8(h.forwards ? 1 : 0);
  e.U64(h.vips_digest);
  e.U8(h.takes_over ? 1 : 0);
  return e.Release();
}

std::optional<Heartbeat> DecodeHeartbeat(std::string_view bytes) {
  if (bytes.size() > kMessageBytesMax) return std::nullopt;
  Decoder d(bytes);
  if (!IsKind(d, MessageKind::kHeartbeat)) return std::nullopt;
  Heartbeat h;
  h.node_id = GetUuid(d);
  h.reserve = GetUuid(d);
  h.state = d.U8();
  h.seq = d.U64();
  h.incarnation = d.U64();
  h.name = d.Str16();
  h.reason = d.Str16();
  // Fields added later, in order: an older node's heartbeat ends before
  // some; each is read only if it is whole and every one before it was
  // (a message cut inside one is read up to it, never half).
  bool more = d.ok();
  auto has = [&](size_t n) { return more = more && d.remaining() >= n; };
  if (has(1)) h.lan_up = d.U8() != 0;
  if (has(16)) {
    h.vips_assigned = d.U64();
    h.vips_held = d.U64();
  }
  if (has(1)) h.forwards = d.U8() != 0;
  if (has(8)) h.vips_digest = d.U64();
  if (has(1)) h.takes_over = d.U8() != 0;
  // Trailing bytes are a newer node's fields: ignored, not an error.
  if (!d.ok() || h.name.size() > kNameMax || h.reason.size() > kReasonMax) return std::nullopt;
  return h;
}

// Each export and share in the encoding the domain stores it in (fs/keys.h,
// versioned there), with the volume's name beside it: the volume's id is
// the owner's business.
std::string EncodeCatalog(const Catalog& c) {
  Encoder e = Begin(MessageKind::kCatalog);
  PutUuid(e, c.from);
  PutUuid(e, c.reserve);
  e.U32(static_cast<uint32_t>(c.exports.size()));
  for (const fs::Export& x : c.exports) {
    e.U32(x.id);
    e.Str16(x.volume);
    e.Str32(fs::keys::EncodeExport(fs::keys::ExportRec{0, x}));
  }
  e.U32(static_cast<uint32_t>(c.shares.size()));
  for (const fs::Share& s : c.shares) {
    e.Str16(s.volume);
    e.Str32(fs::keys::EncodeShare(fs::keys::ShareRec{0, s}));
  }
  std::string out = e.Release();
  return out.size() > kCatalogBytesMax ? std::string() : out;
}

std::optional<Catalog> DecodeCatalog(std::string_view bytes) {
  if (bytes.size() > kCatalogBytesMax) return std::nullopt;
  Decoder d(bytes);
  if (!IsKind(d, MessageKind::kCatalog)) return std::nullopt;
  Catalog c;
  c.from = GetUuid(d);
  c.reserve = GetUuid(d);
  const uint32_t ne = d.U32();
  for (uint32_t i = 0; i < ne && d.ok(); i++) {
    const uint32_t id = d.U32();
    std::string volume = d.Str16();
    auto r = fs::keys::DecodeExport(id, d.Str32());
    if (!d.ok() || !r.ok()) return std::nullopt;
    r->e.volume = std::move(volume);
    c.exports.push_back(std::move(r->e));
  }
  const uint32_t ns = d.U32();
  for (uint32_t i = 0; i < ns && d.ok(); i++) {
    std::string volume = d.Str16();
    auto r = fs::keys::DecodeShare(d.Str32());
    if (!d.ok() || !r.ok()) return std::nullopt;
    r->s.volume = std::move(volume);
    c.shares.push_back(std::move(r->s));
  }
  if (!d.ok()) return std::nullopt;
  return c;
}

namespace {
constexpr uint8_t kFamilyInet = 4;
constexpr uint8_t kFamilyInet6 = 6;  // not sent yet; a reader skips such entries
}  // namespace

std::string EncodeConnections(const Connections& c) {
  Encoder e = Begin(MessageKind::kConnections);
  PutUuid(e, c.from);
  const size_t n = std::min(c.conns.size(), kTcpConnsMax);
  e.U32(static_cast<uint32_t>(n));
  for (size_t i = 0; i < n; i++) {
    const TcpConn& t = c.conns[i];
    e.U8(t.vip);
    e.U8(kFamilyInet);
    e.U32(t.vip_addr);
    e.U16(t.vip_port);
    e.U32(t.client_addr);
    e.U16(t.client_port);
  }
  return e.Release();
}

std::optional<Connections> DecodeConnections(std::string_view bytes) {
  Decoder d(bytes);
  if (!IsKind(d, MessageKind::kConnections)) return std::nullopt;
  Connections c;
  c.from = GetUuid(d);
  const uint32_t n = d.U32();
  if (!d.ok() || n > kTcpConnsMax) return std::nullopt;
  c.conns.reserve(n);
  for (uint32_t i = 0; i < n; i++) {
    TcpConn t;
    t.vip = d.U8();
    const uint8_t family = d.U8();
    if (family == kFamilyInet6) {
      d.View(size_t{2} * (16 + 2));  // a newer node's IPv6 entry: nothing this version tickles
      continue;
    }
    if (family != kFamilyInet) return std::nullopt;
    t.vip_addr = d.U32();
    t.vip_port = d.U16();
    t.client_addr = d.U32();
    t.client_port = d.U16();
    if (!d.ok()) return std::nullopt;
    c.conns.push_back(t);
  }
  if (!d.ok()) return std::nullopt;
  return c;
}

bool RecoveryPathOk(std::string_view path) {
  if (path.empty() || path.size() > 4095 || path.front() == '/' || path.find('\0') != std::string_view::npos) {
    return false;
  }
  if (path.back() == '/') path.remove_suffix(1);
  while (!path.empty()) {
    const size_t slash = path.find('/');
    const std::string_view c = path.substr(0, slash);
    if (c.empty() || c.size() > 255 || c == "." || c == "..") return false;
    if (slash == std::string_view::npos) break;
    path.remove_prefix(slash + 1);
    if (path.empty()) return false;  // "a//" or a trailing "//"
  }
  return true;
}

bool NlmClientOk(std::string_view name) {
  if (name.empty() || name.size() > 255 || name == "." || name == "..") return false;
  return std::none_of(name.begin(), name.end(),
                      [](char ch) { return ch == '/' || static_cast<unsigned char>(ch) < 0x20 || ch == 0x7f; });
}

namespace {

// As many of `list` as fit in `max` entries and what is left of *bytes, as
// a count and Str16s.
void PutBoundedList(Encoder& e, const std::vector<std::string>& list, size_t max, size_t* bytes) {
  size_t n = 0;
  while (n < list.size() && n < max && *bytes + list[n].size() + 2 <= kRecoveryBytesMax) {
    *bytes += list[n++].size() + 2;
  }
  e.U32(static_cast<uint32_t>(n));
  for (size_t i = 0; i < n; i++) e.Str16(list[i]);
}

bool GetList(Decoder& d, size_t max, bool (*valid)(std::string_view), std::vector<std::string>* out) {
  const uint32_t n = d.U32();
  if (!d.ok() || n > max) return false;
  out->reserve(n);
  for (uint32_t i = 0; i < n; i++) {
    std::string p = d.Str16();
    if (!d.ok() || !valid(p)) return false;
    out->push_back(std::move(p));
  }
  return true;
}

}  // namespace

std::string EncodeRecovery(const Recovery& r) {
  Encoder e = Begin(MessageKind::kRecovery);
  PutUuid(e, r.from);
  size_t bytes = 0;
  PutBoundedList(e, r.entries, kRecoveryEntriesMax, &bytes);
  PutBoundedList(e, r.nlm_clients, kNlmClientsMax, &bytes);
  return e.Release();
}

std::optional<Recovery> DecodeRecovery(std::string_view bytes) {
  if (bytes.size() > kRecoveryBytesMax + 64) return std::nullopt;
  Decoder d(bytes);
  if (!IsKind(d, MessageKind::kRecovery)) return std::nullopt;
  Recovery r;
  r.from = GetUuid(d);
  if (!GetList(d, kRecoveryEntriesMax, RecoveryPathOk, &r.entries)) return std::nullopt;
  // Absent from older messages; what newer ones add after it is ignored.
  if (d.remaining() > 0 && !GetList(d, kNlmClientsMax, NlmClientOk, &r.nlm_clients)) return std::nullopt;
  return r;
}

}  // namespace nasgw::cluster
