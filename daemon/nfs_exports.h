// The NFS exports as NFS-Ganesha reads them. The exports live in the
// domain's metadata (fs/export.h, Domain::AddExport); nasgwd renders them
// into [nfs] exports_file, which ganesha.conf includes
// (%include "/etc/ganesha/nasgw-exports.conf"), and asks a running
// ganesha.nfsd to reload it with SIGHUP.
//
// The file is the contract with FSAL_NASGW (fsal/ganesha/). Per export, in
// id order:
//
//   EXPORT {
//     Export_Id = 3;
//     Path = "/vol1/sub/dir";        # "/<volume>" plus the sub-path unless it is "/"
//     Pseudo = "/vol1/sub/dir";
//     Protocols = 3, 4;              # the export's versions
//     Transports = TCP;
//     SecType = sys, krb5;           # the export's flavours, in its order
//     Squash = Root_Squash;          # No_Root_Squash
//     Anonymous_Uid = 65534; Anonymous_Gid = 65534;
//     Access_Type = RW;              # RO when read-only; None when it names clients
//     CLIENT { Clients = 198.18.2.0/24, 198.18.3.7; Access_Type = RW; }   # only with clients; RO when read-only
//     FSAL { Name = NASGW; }
//   }
//
// (the trailing comments above are explanations, not part of the file).
// The file starts with comment lines; with no exports it holds only them.
// Every quoted value has passed CheckExportText (no '"', '\\' or control
// characters) and every client CanonicalClient (daemon/export_rules.h); an
// export that does not is left out and reported rather than written.
#pragma once

#include <string>
#include <vector>

#include "base/status.h"
#include "fs/export.h"

namespace nasgw::daemon {

// Ganesha's process name, as /proc/PID/comm shows it.
constexpr const char* kGaneshaComm = "ganesha.nfsd";
// The anonymous (squashed) user and group: nobody/nogroup on Debian.
constexpr uint32_t kNfsAnonymousId = 65534;

// The whole file. Exports that cannot be rendered safely are left out, each
// with a line in *problems (when given).
std::string RenderGaneshaExports(const std::vector<fs::Export>& exports, const std::string& node_name,
                                 std::vector<std::string>* problems = nullptr);

// Replaces `path` atomically: a temporary file in the same directory,
// written and fsynced, renamed over `path`, then the directory fsynced.
// The file gets `mode` whatever the umask.
Status WriteFileAtomically(const std::string& path, const std::string& text, unsigned mode);

// Sends SIGHUP to the server whose pid `pid_file` holds, if its process
// name (/proc/PID/comm) is comm_name (kGaneshaComm, kSmbdComm): a server
// reloads its configuration on SIGHUP. OK when it was signalled (*pid
// set); NotFound when the pid file is missing or the process is gone (a
// stale pid file); FailedPrecondition when the pid is another program's
// (never signalled); InvalidArgument for a pid file that holds no pid;
// PermissionDenied when the kill is refused.
Status SignalServer(const std::string& pid_file, const std::string& comm_name, int* pid = nullptr);

// What PublishExports and PublishShares (daemon/smb_shares.h) share: writes
// `text` (rendered with `written` items; `problems` names those left out)
// into `file` atomically and, when pid_file is set, signals the server
// named comm_name there to reload it; logs under `area` ("nfs", "smb") what
// it did. Returns the write's status, or Corruption naming the problems; a
// server that cannot be signalled is a WARN line, not an error.
Status PublishServerFile(const char* area, const std::string& what, const std::string& file, const std::string& text,
                         size_t written, const std::vector<std::string>& problems, const std::string& pid_file,
                         const std::string& comm_name);

// Renders `exports` into exports_file and, when ganesha_pid_file is set,
// signals ganesha.nfsd; does nothing when exports_file is empty. Logs what
// it did. Returns the write's status (or Corruption naming exports left
// out); a Ganesha that cannot be signalled is a WARN line, not an error.
Status PublishExports(const std::string& exports_file, const std::string& ganesha_pid_file,
                      const std::string& node_name, const std::vector<fs::Export>& exports);

}  // namespace nasgw::daemon
