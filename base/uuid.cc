#include "base/uuid.h"

#include "base/assert.h"

#include <sys/random.h>

namespace nasgw {

Uuid Uuid::Random() {
  Uuid u;
  size_t got = 0;
  while (got < u.bytes.size()) {
    ssize_t n = getrandom(u.bytes.data() + got, u.bytes.size() - got, 0);
    NASGW_ASSERT(n > 0);  // getrandom only fails on bad arguments here
    got += static_cast<size_t>(n);
  }
  u.bytes[6] = (u.bytes[6] & 0x0f) | 0x40;  // version 4
  u.bytes[8] = (u.bytes[8] & 0x3f) | 0x80;  // variant 1
  return u;
}

bool Uuid::IsNil() const {
  for (uint8_t b : bytes) {
    if (b != 0) return false;
  }
  return true;
}

std::string Uuid::ToString() const {
  static const char* hex = "0123456789abcdef";
  std::string s;
  for (size_t i = 0; i < bytes.size(); i++) {
    if (i == 4 || i == 6 || i == 8 || i == 10) s += '-';
    s += hex[bytes[i] >> 4];
    s += hex[bytes[i] & 15];
  }
  return s;
}

std::optional<Uuid> Uuid::Parse(std::string_view text) {
  if (text.size() != 36) return std::nullopt;
  Uuid u;
  size_t b = 0;
  for (size_t i = 0; i < text.size();) {
    if (i == 8 || i == 13 || i == 18 || i == 23) {
      if (text[i] != '-') return std::nullopt;
      i++;
      continue;
    }
    auto nibble = [](char c) -> int {
      if (c >= '0' && c <= '9') return c - '0';
      if (c >= 'a' && c <= 'f') return c - 'a' + 10;
      if (c >= 'A' && c <= 'F') return c - 'A' + 10;
      return -1;
    };
    const int hi = nibble(text[i]), lo = nibble(text[i + 1]);
    if (hi < 0 || lo < 0) return std::nullopt;
    u.bytes[b++] = static_cast<uint8_t>(hi << 4 | lo);
    i += 2;
  }
  return u;
}

}  // namespace nasgw
