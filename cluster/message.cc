#include "cluster/message.h"

#include <algorithm>

#include "base/coding.h"

namespace nasgw::cluster {
namespace {

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
  Encoder e;
  e.U8(kMessageVersion);
  e.U8(static_cast<uint8_t>(MessageKind::kGiveBack));
  PutUuid(e, r.from);
  PutUuid(e, r.to);
  PutUuid(e, r.reserve);
  return e.Release();
}

std::optional<GiveBackRequest> DecodeGiveBack(std::string_view bytes) {
  if (bytes.size() > kMessageBytesMax) return std::nullopt;
  Decoder d(bytes);
  if (d.U8() != kMessageVersion || d.U8() != static_cast<uint8_t>(MessageKind::kGiveBack)) return std::nullopt;
  GiveBackRequest r;
  r.from = GetUuid(d);
  r.to = GetUuid(d);
  r.reserve = GetUuid(d);
  if (!d.ok()) return std::nullopt;
  return r;
}

std::string EncodeHeartbeat(const Heartbeat& h) {
  Encoder e;
  e.U8(kMessageVersion);
  e.U8(static_cast<uint8_t>(MessageKind::kHeartbeat));
  PutUuid(e, h.node_id);
  PutUuid(e, h.reserve);
  e.U8(h.state);
  e.U64(h.seq);
  e.U64(h.incarnation);
  e.Str16(std::string_view(h.name).substr(0, kNameMax));
  e.Str16(std::string_view(h.reason).substr(0, kReasonMax));
  e.U8(h.lan_up ? 1 : 0);  // added after the first fields: absent means up
  return e.Release();
}

std::optional<Heartbeat> DecodeHeartbeat(std::string_view bytes) {
  if (bytes.size() > kMessageBytesMax) return std::nullopt;
  Decoder d(bytes);
  if (d.U8() != kMessageVersion || d.U8() != static_cast<uint8_t>(MessageKind::kHeartbeat)) return std::nullopt;
  Heartbeat h;
  h.node_id = GetUuid(d);
  h.reserve = GetUuid(d);
  h.state = d.U8();
  h.seq = d.U64();
  h.incarnation = d.U64();
  h.name = d.Str16();
  h.reason = d.Str16();
  if (d.ok() && d.remaining() >= 1) h.lan_up = d.U8() != 0;
  // Trailing bytes are a newer node's fields: ignored, not an error.
  if (!d.ok() || h.name.size() > kNameMax || h.reason.size() > kReasonMax) return std::nullopt;
  return h;
}

}  // namespace nasgw::cluster
