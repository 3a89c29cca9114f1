// The rules of an NFS export's fields: what NFS-Ganesha's configuration
// syntax and its limits need. The stored value (fs::Export) and what the
// domain checks when it keeps one (the volume and the sub-path exist, pseudo
// paths are unique, ids; paths absolute and in normal form) are fs/'s
// (fs/export.h, fs/domain.h); nasgwd normalises an export with these rules
// before it hands it to the domain (Node::AddExport), and renders exports
// for Ganesha with them (daemon/nfs_exports.h).
//
// Every text field ends up inside a double-quoted string of a Ganesha
// configuration file, so the rules refuse what would change its syntax
// ('"', '\\', control characters) instead of escaping it.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

#include "base/status.h"
#include "fs/export.h"

namespace nasgw::daemon {

// Ganesha's Path and Pseudo hold at most MAXPATHLEN (4096) bytes with the NUL.
constexpr size_t kExportPathMax = 4095;
// Client entries of one export. Ganesha matches a new client against them
// one by one; a longer list belongs in a netgroup (not supported yet).
constexpr size_t kExportClientsMax = 256;

// Normalises and checks an export's own fields (the domain checks the rest):
// path and pseudo as NormalizeExportPath, the default pseudo filled in, and
// refused when "/"; clients canonical (CanonicalClient), duplicates dropped;
// sec lower-cased, known, duplicates dropped (order kept); protocols 3
// and/or 4, sorted; Ganesha's Path ("/<volume><path>") and the pseudo path
// at most kExportPathMax bytes. InvalidArgument naming the value otherwise.
// The id is left alone.
Status NormalizeExport(fs::Export* e);

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
std::string ExportFsalPath(const fs::Export& e);

// The default pseudo path of an export: the same as its Path.
std::string DefaultPseudo(const std::string& volume, const std::string& path);

}  // namespace nasgw::daemon
