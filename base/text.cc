#include "base/text.h"

namespace nasgw {

namespace {

bool ControlAt(std::string_view s, size_t i, size_t len) {
  const auto b = static_cast<unsigned char>(s[i]);
  if (len == 1) return b < 0x20 || b == 0x7f;
  return len == 2 && b == 0xC2 && static_cast<unsigned char>(s[i + 1]) <= 0x9F;  // C1: U+0080..U+009F
}

void AppendHex(std::string* out, unsigned char b) {
  static const char kHex[] = "0123456789abcdef";
  out->append("\\x");
  out->push_back(kHex[b >> 4]);
  out->push_back(kHex[b & 15]);
}

}  // namespace

size_t Utf8SequenceAt(std::string_view s, size_t i) {
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  const size_t n = s.size();
  if (i >= n) return 0;
  const unsigned char b = p[i];
  if (b < 0x80) return 1;
  size_t len = 0;
  unsigned char lo = 0x80, hi = 0xBF;  // the allowed range of the second byte
  if (b >= 0xC2 && b <= 0xDF) {
    len = 2;
  } else if (b >= 0xE0 && b <= 0xEF) {
    len = 3;
    if (b == 0xE0) lo = 0xA0;  // overlong
    if (b == 0xED) hi = 0x9F;  // surrogates
  } else if (b >= 0xF0 && b <= 0xF4) {
    len = 4;
    if (b == 0xF0) lo = 0x90;  // overlong
    if (b == 0xF4) hi = 0x8F;  // beyond U+10FFFF
  } else {
    return 0;
  }
  if (i + len > n || p[i + 1] < lo || p[i + 1] > hi) return 0;
  for (size_t k = 2; k < len; k++) {
    if (p[i + k] < 0x80 || p[i + k] > 0xBF) return 0;
  }
  return len;
}

std::string TextProblem(std::string_view s) {
  for (size_t i = 0; i < s.size();) {
    const size_t len = Utf8SequenceAt(s, i);
    if (len == 0) {
      std::string m = "invalid UTF-8 (";
      AppendHex(&m, static_cast<unsigned char>(s[i]));
      return m + ") at byte " + std::to_string(i);
    }
    if (ControlAt(s, i, len)) {
      std::string m = "a control character (";
      for (size_t k = 0; k < len; k++) AppendHex(&m, static_cast<unsigned char>(s[i + k]));
      return m + ") at byte " + std::to_string(i);
    }
    i += len;
  }
  return "";
}

namespace {

std::string Escape(std::string_view s, bool backslash) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    const size_t len = Utf8SequenceAt(s, i);
    if (len == 0) {
      AppendHex(&out, static_cast<unsigned char>(s[i]));
      i++;
    } else if (ControlAt(s, i, len)) {
      for (size_t k = 0; k < len; k++) AppendHex(&out, static_cast<unsigned char>(s[i + k]));
      i += len;
    } else if (backslash && s[i] == '\\') {
      out.append("\\\\");
      i++;
    } else {
      out.append(s.substr(i, len));
      i += len;
    }
  }
  return out;
}

}  // namespace

std::string EscapeForTerminal(std::string_view s) {
  return Escape(s, true);
}

std::string EscapeControls(std::string_view s) {
  return Escape(s, false);
}

size_t TerminalWidth(std::string_view s) {
  const std::string e = EscapeForTerminal(s);
  size_t w = 0;
  for (char c : e) w += (static_cast<unsigned char>(c) & 0xC0) != 0x80 ? 1 : 0;  // not a continuation byte
  return w;
}

}  // namespace nasgw
