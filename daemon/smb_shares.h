// The SMB shares as smbd reads them. The shares live in the domain's
// metadata (fs/share.h, Domain::AddShare); nasgwd normalises a share with
// NormalizeShare before the domain keeps it, renders them all into
// [smb] shares_file, which the smb.conf smbd runs with includes
// (include = /etc/samba/nasgw-shares.conf), and asks a running smbd to
// reload it with SIGHUP: new shares are served, removed ones are not, with
// no restart.
//
// The file is the contract with vfs_nasgw (fsal/samba/). Per share, by
// lower-cased name:
//
//   [Projects]
//       comment = the team's projects         # only when set
//       path = /nasgw/vol1/proj               # a name only: nothing local is read
//       vfs objects = acl_xattr streams_xattr nasgw   # [smb] vfs_objects, then nasgw
//       nasgw:socket = /run/nasgw/head.sock   # nasgwd's head socket
//       nasgw:volume = vol1
//       nasgw:subpath = proj                  # only below the volume's root
//       read only = no
//       browseable = yes
//       guest ok = no
//       smb encrypt = required                # only when asked for
//       valid users = alice @staff            # only when set
//
// (the trailing comments above are explanations, not part of the file).
// smb.conf has no quoting: every value written has passed the checks below
// (printable, no '%' substitution, no line continuation, no surrounding
// blanks); a share that does not is left out and reported.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "fs/share.h"

namespace nasgw::daemon {

// smbd's process name, as /proc/PID/comm shows it.
constexpr const char* kSmbdComm = "smbd";
constexpr size_t kShareCommentMax = 256;
constexpr size_t kShareUsersMax = 256;

// Normalises and checks a share's own fields (the domain checks the rest):
// the name 1..80 characters of [A-Za-z0-9._-], not starting with '.', with
// an optional trailing '$' (a hidden share), and not one of smb.conf's own
// sections (global, homes, printers, print$, ipc$); the path as
// NormalizeExportPath, without '%' (smbd substitutes variables there) or a
// trailing blank; the comment printable, at most kShareCommentMax bytes,
// without '%' or a trailing '\' (smb.conf's line continuation), blanks
// around it dropped; valid users each a user "name" or group "@name" of
// [A-Za-z0-9._-] (starting with a letter, digit or '_'), duplicates
// dropped, at most kShareUsersMax. InvalidArgument naming the value
// otherwise.
Status NormalizeShare(fs::Share* s);

// The whole file. Shares that cannot be rendered safely are left out, each
// with a line in *problems (when given).
// vfs_objects: Samba's modules stacked above vfs_nasgw (the [smb]
// vfs_objects setting, checked by the configuration), "" for none.
std::string RenderSmbShares(const std::vector<fs::Share>& shares, const std::string& head_socket,
                            const std::string& vfs_objects, const std::string& node_name,
                            std::vector<std::string>* problems = nullptr);

// Renders `shares` into shares_file and, when smbd_pid_file is set,
// signals smbd; does nothing when shares_file is empty. Logs what it did.
// Returns the write's status (or Corruption naming shares left out); an
// smbd that cannot be signalled is a WARN line, not an error.
Status PublishShares(const std::string& shares_file, const std::string& smbd_pid_file, const std::string& head_socket,
                     const std::string& vfs_objects, const std::string& node_name,
                     const std::vector<fs::Share>& shares);

}  // namespace nasgw::daemon
