#include "daemon/export_rules.h"

#include <algorithm>
#include <cstring>

#include "fs/domain.h"

#include <arpa/inet.h>

namespace nasgw::daemon {

using fs::Export;
using fs::kNameMax;

namespace {

// A value as it may appear in a message: control characters as '?'.
std::string Shown(std::string_view s) {
  std::string out;
  for (char c : s) out += (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) ? '?' : c;
  return "'" + out + "'";
}

bool AllDigits(std::string_view s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
}

}  // namespace

Status CheckExportText(std::string_view what, std::string_view s) {
  for (char c : s) {
    const auto u = static_cast<unsigned char>(c);
    if (u < 0x20 || u == 0x7f)
      return Status::InvalidArgument(std::string(what) + " " + Shown(s) + " contains a control character");
    if (c == '"' || c == '\\') {
      return Status::InvalidArgument(std::string(what) + " " + Shown(s) + " contains '" + std::string(1, c) +
                                     "', which an NFS export cannot carry");
    }
  }
  return Status();
}

Result<std::string> NormalizeExportPath(std::string_view what, const std::string& path) {
  if (path.empty()) return std::string("/");
  NASGW_RETURN_IF_ERROR(CheckExportText(what, path));
  if (path[0] != '/')
    return Status::InvalidArgument(std::string(what) + " " + Shown(path) + " is not absolute (it starts with '/')");
  std::string out;
  size_t at = 0;
  while (at < path.size()) {
    size_t end = path.find('/', at);
    if (end == std::string::npos) end = path.size();
    const std::string_view part(path.data() + at, end - at);
    at = end + 1;
    if (part.empty() || part == ".") continue;
    if (part == "..") return Status::InvalidArgument(std::string(what) + " " + Shown(path) + " contains '..'");
    if (part.size() > kNameMax) {
      return Status::InvalidArgument(std::string(what) + " " + Shown(path) + " has a component longer than " +
                                     std::to_string(kNameMax) + " bytes");
    }
    out += '/';
    out += part;
  }
  if (out.empty()) out = "/";
  if (out.size() > kExportPathMax) {
    return Status::InvalidArgument(std::string(what) + " is " + std::to_string(out.size()) + " bytes; at most " +
                                   std::to_string(kExportPathMax));
  }
  return out;
}

Result<std::string> CanonicalClient(const std::string& client) {
  const std::string bad = "client " + Shown(client) + " ";
  if (client.empty()) return Status::InvalidArgument("client '' is empty (an IPv4/IPv6 address or CIDR network)");
  std::string addr = client;
  std::string prefix_text;
  const size_t slash = client.find('/');
  if (slash != std::string::npos) {
    addr = client.substr(0, slash);
    prefix_text = client.substr(slash + 1);
    if (!AllDigits(prefix_text) || prefix_text.size() > 3 || (prefix_text.size() > 1 && prefix_text[0] == '0')) {
      return Status::InvalidArgument(bad +
                                     "has a bad prefix length (address/N with N 0..32 for IPv4, 0..128 for IPv6)");
    }
  }
  uint8_t bytes[16] = {};
  int family = 0;
  size_t len = 0;
  if (::inet_pton(AF_INET, addr.c_str(), bytes) == 1) {
    family = AF_INET;
    len = 4;
  } else if (::inet_pton(AF_INET6, addr.c_str(), bytes) == 1) {
    family = AF_INET6;
    len = 16;
  } else {
    return Status::InvalidArgument(bad +
                                   "is not an IPv4 or IPv6 address or CIDR network (host names, netgroups and "
                                   "wildcards are not supported)");
  }
  char text[INET6_ADDRSTRLEN] = {};
  if (prefix_text.empty()) {
    ::inet_ntop(family, bytes, text, sizeof(text));
    return std::string(text);
  }
  const unsigned prefix = static_cast<unsigned>(std::stoul(prefix_text));
  if (prefix > len * 8) {
    return Status::InvalidArgument(bad + "has prefix length " + prefix_text + "; at most " + std::to_string(len * 8) +
                                   (family == AF_INET ? " for IPv4" : " for IPv6"));
  }
  uint8_t net[16] = {};
  for (size_t i = 0; i < len; i++) {
    const unsigned bits = prefix > i * 8 ? std::min(8u, prefix - static_cast<unsigned>(i * 8)) : 0;
    const uint8_t mask = bits == 0 ? 0 : static_cast<uint8_t>(0xff << (8 - bits));
    net[i] = bytes[i] & mask;
  }
  ::inet_ntop(family, net, text, sizeof(text));
  if (std::memcmp(net, bytes, len) != 0) {
    return Status::InvalidArgument(bad + "has host bits set (the network is " + text + "/" + prefix_text + ")");
  }
  if (prefix == len * 8) return std::string(text);
  return std::string(text) + "/" + prefix_text;
}

std::string ExportFsalPath(const Export& e) {
  return "/" + e.volume + (e.path == "/" ? std::string() : e.path);
}

std::string DefaultPseudo(const std::string& volume, const std::string& path) {
  return "/" + volume + (path == "/" || path.empty() ? std::string() : path);
}

Status NormalizeExport(Export* e) {
  if (e->volume.empty()) return Status::InvalidArgument("volume name is empty");
  if (e->volume.size() > kNameMax || e->volume.find('/') != std::string::npos || e->volume == "." ||
      e->volume == "..") {
    return Status::InvalidArgument("volume name " + Shown(e->volume) + " is not a volume name");
  }
  NASGW_RETURN_IF_ERROR(CheckExportText("volume name", e->volume));
  auto path = NormalizeExportPath("path", e->path);
  if (!path.ok()) return path.status();
  e->path = *path;
  if (ExportFsalPath(*e).size() > kExportPathMax) {
    return Status::InvalidArgument("'/" + e->volume + e->path + "' is longer than " + std::to_string(kExportPathMax) +
                                   " bytes");
  }
  if (e->pseudo.empty()) e->pseudo = DefaultPseudo(e->volume, e->path);
  auto pseudo = NormalizeExportPath("pseudo path", e->pseudo);
  if (!pseudo.ok()) return pseudo.status();
  if (*pseudo == "/") {
    return Status::InvalidArgument("pseudo path '/' is the NFSv4 pseudo root; give an export a path below it");
  }
  e->pseudo = *pseudo;

  if (e->clients.size() > kExportClientsMax) {
    return Status::InvalidArgument(std::to_string(e->clients.size()) + " clients; at most " +
                                   std::to_string(kExportClientsMax) + " per export");
  }
  std::vector<std::string> clients;
  for (const auto& c : e->clients) {
    auto canon = CanonicalClient(c);
    if (!canon.ok()) return canon.status();
    if (std::find(clients.begin(), clients.end(), *canon) == clients.end()) clients.push_back(*canon);
  }
  e->clients = std::move(clients);

  std::vector<std::string> sec;
  for (std::string s : e->sec) {
    for (char& c : s) c = static_cast<char>(c >= 'A' && c <= 'Z' ? c - 'A' + 'a' : c);
    if (s != "sys" && s != "krb5" && s != "krb5i" && s != "krb5p") {
      return Status::InvalidArgument("security flavour " + Shown(s) + " is not one of sys, krb5, krb5i, krb5p");
    }
    if (std::find(sec.begin(), sec.end(), s) == sec.end()) sec.push_back(s);
  }
  if (sec.empty()) sec.push_back("sys");
  e->sec = std::move(sec);

  std::vector<uint32_t> protocols;
  for (uint32_t p : e->protocols) {
    if (p != 3 && p != 4) {
      return Status::InvalidArgument("NFS protocol version " + std::to_string(p) + " is not 3 or 4");
    }
    if (std::find(protocols.begin(), protocols.end(), p) == protocols.end()) protocols.push_back(p);
  }
  if (protocols.empty()) protocols = {3, 4};
  std::sort(protocols.begin(), protocols.end());
  e->protocols = std::move(protocols);
  return Status();
}

}  // namespace nasgw::daemon
