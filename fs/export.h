// Export: an NFS export of a NAS volume, or of a directory inside one, as a
// domain stores it. Exports are kept in the domain's metadata
// (Domain::AddExport and friends), not on a node, so every node that opens
// the domain serves the same exports. This header holds the value type; what
// the domain checks when it keeps one (the volume and the sub-path exist,
// pseudo paths are unique, ids, paths absolute and in normal form) is in
// fs/domain.h. The rules of the fields (what NFS-Ganesha's configuration
// needs: characters, clients, security flavours, protocols, lengths, the
// default pseudo path) are nasgwd's (daemon/export_rules.h), which
// normalises an export before it reaches the domain.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace nasgw::fs {

// Ganesha's Export_Id is 16 bits and 0 is its pseudo-root. Ids are never
// reused (a client's file handles carry them), so a domain can create
// 65535 exports over its life; on a reserve of several domains each takes
// its own range of them (ExportIds), so that the exports of every domain
// can be published side by side.
constexpr uint32_t kExportIdMax = 65535;

struct ExportIdRange {
  uint32_t first = 1;
  uint32_t last = kExportIdMax;
};
// Domain `domain` of `domains`: an equal share of 1..kExportIdMax, in
// order (all of it for a reserve of one domain). REQUIRES: domain < domains.
constexpr ExportIdRange ExportIds(uint32_t domain, uint32_t domains) {
  const uint32_t width = kExportIdMax / domains;
  return {domain * width + 1, (domain + 1) * width};
}

struct Export {
  uint32_t id = 0;         // assigned by Domain::AddExport: 1..kExportIdMax
  std::string volume;      // the volume's name
  std::string path = "/";  // inside the volume: "/" or "/a/b"
  std::string pseudo;      // NFSv4 pseudo path, absolute (the rules default it to "/<volume><path>")
  // IPv4/IPv6 addresses or networks (CIDR), in canonical form; empty: every client.
  std::vector<std::string> clients;
  bool read_only = false;
  bool root_squash = true;
  std::vector<std::string> sec = {"sys"};    // among sys, krb5, krb5i, krb5p; empty: sys
  std::vector<uint32_t> protocols = {3, 4};  // NFS versions among 3 and 4; empty: both
  // READDIR lists every directory's `.snapshot` (always found by name).
  bool show_snapshot_dir = false;

  bool operator==(const Export&) const = default;
};

}  // namespace nasgw::fs
