// Little-endian fixed-width encoding for on-disk records (as LevelDB's
// util/coding.h). Every on-disk integer in nasgw is little-endian.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

namespace nasgw {

inline void PutFixed32(uint8_t* p, uint32_t v) {
  for (int i = 0; i < 4; i++) p[i] = static_cast<uint8_t>(v >> (8 * i));
}
inline void PutFixed64(uint8_t* p, uint64_t v) {
  for (int i = 0; i < 8; i++) p[i] = static_cast<uint8_t>(v >> (8 * i));
}
inline uint32_t GetFixed32(const uint8_t* p) {
  uint32_t v = 0;
  for (int i = 0; i < 4; i++) v |= static_cast<uint32_t>(p[i]) << (8 * i);
  return v;
}
inline uint64_t GetFixed64(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 0; i < 8; i++) v |= static_cast<uint64_t>(p[i]) << (8 * i);
  return v;
}

// Appends little-endian fields to a byte string: the one encoder of every
// nasgw record (MetaFs log records, the file system's metadata values).
class Encoder {
 public:
  void U8(uint8_t v) { buf_.push_back(static_cast<char>(v)); }
  void U16(uint16_t v) { Fixed(v, 2); }
  void U32(uint32_t v) { Fixed(v, 4); }
  void U64(uint64_t v) { Fixed(v, 8); }
  // A string behind a 16- or 32-bit length.
  void Str16(std::string_view v) {
    U16(static_cast<uint16_t>(v.size()));
    buf_.append(v);
  }
  void Str32(std::string_view v) {
    U32(static_cast<uint32_t>(v.size()));
    buf_.append(v);
  }
  const std::string& str() const { return buf_; }
  std::string Release() { return std::move(buf_); }

 private:
  void Fixed(uint64_t v, int n) {
    for (int i = 0; i < n; i++) buf_.push_back(static_cast<char>(v >> (8 * i)));
  }
  std::string buf_;
};

// Reads what Encoder wrote. A read past the end sets ok() false and returns
// zeros, so a decoder checks ok() once at the end instead of at every field.
class Decoder {
 public:
  explicit Decoder(std::string_view s) : s_(s) {}
  uint8_t U8() { return static_cast<uint8_t>(Fixed(1)); }
  uint16_t U16() { return static_cast<uint16_t>(Fixed(2)); }
  uint32_t U32() { return static_cast<uint32_t>(Fixed(4)); }
  uint64_t U64() { return Fixed(8); }
  std::string Str16() { return Bytes(U16()); }
  std::string Str32() { return Bytes(U32()); }
  // n bytes in place (no copy): valid as long as the decoded buffer is.
  std::string_view View(size_t n) {
    if (!Need(n)) return {};
    std::string_view v = s_.substr(at_, n);
    at_ += n;
    return v;
  }
  bool ok() const { return ok_; }
  size_t remaining() const { return ok_ ? s_.size() - at_ : 0; }
  // Everything read and nothing left over: what a strict decoder ends with.
  bool done() const { return ok_ && at_ == s_.size(); }

 private:
  bool Need(size_t n) {
    if (!ok_ || s_.size() - at_ < n) ok_ = false;
    return ok_;
  }
  uint64_t Fixed(int n) {
    if (!Need(static_cast<size_t>(n))) return 0;
    uint64_t v = 0;
    for (int i = 0; i < n; i++) v |= static_cast<uint64_t>(static_cast<uint8_t>(s_[at_ + i])) << (8 * i);
    at_ += static_cast<size_t>(n);
    return v;
  }
  std::string Bytes(size_t n) {
    if (!Need(n)) return {};
    std::string v(s_.substr(at_, n));
    at_ += n;
    return v;
  }
  std::string_view s_;
  size_t at_ = 0;
  bool ok_ = true;
};

}  // namespace nasgw
