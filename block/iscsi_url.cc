#include "block/iscsi_url.h"

#include <charconv>

namespace nasgw::block {
namespace {

Status Bad(std::string_view url, std::string_view why) {
  // Never echo the credentials part back.
  std::string shown(url);
  if (auto at = shown.rfind('@'); at != std::string::npos) {
    shown = "iscsi://***@" + shown.substr(at + 1);
  }
  return Status::InvalidArgument("bad iSCSI URL '" + shown + "': " + std::string(why) +
                                 " (expected iscsi://[user%password@]host[:port]/target-iqn/lun)");
}

template <typename T>
bool ParseNumber(std::string_view s, T max, T* out) {
  if (s.empty() || s.size() > 10) return false;
  uint64_t v = 0;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || p != s.data() + s.size() || v > max) return false;
  *out = static_cast<T>(v);
  return true;
}

}  // namespace

std::string IscsiUrl::Portal() const {
  std::string h = host.find(':') != std::string::npos ? "[" + host + "]" : host;
  return h + ":" + std::to_string(port);
}

std::string IscsiUrl::ToString() const {
  std::string s = "iscsi://";
  if (!user.empty()) s += user + "%***@";
  return s + Portal() + "/" + target + "/" + std::to_string(lun);
}

Result<IscsiUrl> ParseIscsiUrl(std::string_view url) {
  constexpr std::string_view kScheme = "iscsi://";
  if (url.substr(0, kScheme.size()) != kScheme) return Bad(url, "must start with iscsi://");
  std::string_view rest = url.substr(kScheme.size());
  IscsiUrl out;

  // Credentials end at the last '@' before the path.
  size_t slash = rest.find('/');
  std::string_view authority = rest.substr(0, slash);
  size_t at = authority.rfind('@');
  if (at != std::string_view::npos) {
    std::string_view cred = authority.substr(0, at);
    size_t pct = cred.find('%');
    if (pct == std::string_view::npos) return Bad(url, "CHAP user given without a password (user%password@)");
    out.user = std::string(cred.substr(0, pct));
    out.password = std::string(cred.substr(pct + 1));
    if (out.user.empty()) return Bad(url, "empty CHAP user");
    if (out.password.empty()) return Bad(url, "empty CHAP password");
    authority = authority.substr(at + 1);
  }

  std::string_view port_str;
  if (!authority.empty() && authority.front() == '[') {
    size_t close = authority.find(']');
    if (close == std::string_view::npos) return Bad(url, "unterminated '[' in IPv6 host");
    out.host = std::string(authority.substr(1, close - 1));
    std::string_view after = authority.substr(close + 1);
    if (!after.empty()) {
      if (after.front() != ':') return Bad(url, "junk after IPv6 host");
      port_str = after.substr(1);
      if (port_str.empty()) return Bad(url, "empty port");
    }
  } else {
    size_t colon = authority.find(':');
    out.host = std::string(authority.substr(0, colon));
    if (colon != std::string_view::npos) {
      port_str = authority.substr(colon + 1);
      if (port_str.empty()) return Bad(url, "empty port");
    }
  }
  if (out.host.empty()) return Bad(url, "missing host");
  for (char c : out.host) {
    if (c == '/' || c == '@' || c == '%' || c == ' ') return Bad(url, "invalid character in host");
  }
  if (!port_str.empty()) {
    uint16_t port = 0;
    if (!ParseNumber<uint16_t>(port_str, 65535, &port) || port == 0) return Bad(url, "port must be 1-65535");
    out.port = port;
  }

  if (slash == std::string_view::npos) return Bad(url, "missing /target-iqn/lun");
  std::string_view path = rest.substr(slash + 1);
  size_t slash2 = path.find('/');
  if (slash2 == std::string_view::npos) return Bad(url, "missing /lun after the target");
  out.target = std::string(path.substr(0, slash2));
  if (out.target.empty()) return Bad(url, "empty target name");
  std::string_view lun = path.substr(slash2 + 1);
  if (lun.empty()) return Bad(url, "missing LUN number");
  if (!ParseNumber<uint32_t>(lun, kLunMax, &out.lun)) {
    return Bad(url, "LUN must be a number 0-" + std::to_string(kLunMax));
  }
  return out;
}

}  // namespace nasgw::block
