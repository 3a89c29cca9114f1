// Export: an NFS export of a NAS volume, or of a directory inside one. Exports
// are kept in the domain's metadata (Domain::AddExport and friends), not on a
// node, so every node that opens the domain serves the same exports. This
// header holds the value type and the rules of its fields; what the domain
// adds (the volume and the sub-path exist, pseudo paths are unique, ids) is
// in fs/domain.h, and rendering an export for NFS-Ganesha is nasgwd's
// (daemon/nfs_exports.h).
//
// Every text field ends up inside a double-quoted string of a Ganesha
// configuration file, so the rules refuse what would change its syntax
// ('"', '\\', control characters) instead of escaping it.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"

namespace nasgw::fs {

// Ganesha's Export_Id is 16 bits and 0 is its pseudo-root. Ids are never
// reused (a client's file handles carry them), so a domain can create
// 65535 exports over its life.
constexpr uint32_t kExportIdMax = 65535;
// Ganesha's Path and Pseudo hold at most MAXPATHLEN (4096) bytes with the NUL.
constexpr size_t kExportPathMax = 4095;
// Client entries of one export. Ganesha matches a new client against them
// one by one; a longer list belongs in a netgroup (not supported yet).
constexpr size_t kExportClientsMax = 256;

struct Export {
  uint32_t id = 0;         // assigned by Domain::AddExport: 1..kExportIdMax
  std::string volume;      // the volume's name
  std::string path = "/";  // inside the volume: "/" or "/a/b"
  std::string pseudo;      // NFSv4 pseudo path; empty: "/<volume><path>" ("/<volume>" for "/")
  // IPv4/IPv6 addresses or networks (CIDR), in canonical form; empty: every client.
  std::vector<std::string> clients;
  bool read_only = false;
  bool root_squash = true;
  std::vector<std::string> sec = {"sys"};    // among sys, krb5, krb5i, krb5p; empty: sys
  std::vector<uint32_t> protocols = {3, 4};  // NFS versions among 3 and 4; empty: both

  bool operator==(const Export&) const = default;
};

// Normalises and checks an export's own fields (the domain checks the rest):
// path and pseudo as NormalizeExportPath, the default pseudo filled in, and
// refused when "/"; clients canonical (CanonicalClient), duplicates dropped;
// sec lower-cased, known, duplicates dropped (order kept); protocols 3
// and/or 4, sorted; Ganesha's Path ("/<volume><path>") and the pseudo path
// at most kExportPathMax bytes. InvalidArgument naming the value otherwise.
// The id is left alone.
Status NormalizeExport(Export* e);

// A path as exports keep it: absolute, components joined by one '/', no
// trailing '/' ("/" itself stays); empty means "/"; "." components and
// repeated slashes are dropped; "..", a relative path, a component longer
// than a file name (255 bytes) and characters a quoted string cannot hold
// are refused. `what` names the field in messages ("path", "pseudo path").
Result<std::string> NormalizeExportPath(std::string_view what, const std::string& path);

// A client as exports keep it: an IPv4 or IPv6 address, or a network
// "address/prefix" whose host bits are zero, written as inet_ntop writes
// it ("2001:db8::/32"); a /32 (IPv4) or /128 (IPv6) becomes the address.
// Host names, netgroups and wildcards are refused.
Result<std::string> CanonicalClient(const std::string& client);

// InvalidArgument when `s` holds '"', '\\' or a control character (what a
// Ganesha double-quoted string would read differently), naming `what`.
Status CheckExportText(std::string_view what, std::string_view s);

// Ganesha's Path for an export: "/<volume>" plus the sub-path unless it is
// "/". The FSAL reads it back as "/<volume>[/sub/path]".
std::string ExportFsalPath(const Export& e);

// The default pseudo path of an export: the same as its Path.
std::string DefaultPseudo(const std::string& volume, const std::string& path);

}  // namespace nasgw::fs
