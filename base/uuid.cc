#include "base/uuid.h"

#include <sys/random.h>

#include "base/assert.h"

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

}  // namespace nasgw
