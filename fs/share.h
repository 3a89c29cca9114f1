// Share: an SMB share of a NAS volume, or of a directory inside one, as a
// domain stores it. Shares are kept in the domain's metadata
// (Domain::AddShare and friends), not on a node, so every node that opens
// the domain serves the same shares. This header holds the value type; what
// the domain checks when it keeps one (the volume and the sub-path exist,
// names unique without regard to case, the path absolute and in normal form)
// is in fs/domain.h. The rules of the fields (what smb.conf and Windows
// allow in a share name, a user list, a comment) are nasgwd's
// (daemon/smb_shares.h), which normalises a share before it reaches the
// domain.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

namespace nasgw::fs {

// Windows share names: at most 80 characters (NetShareAdd's limit).
constexpr size_t kShareNameMax = 80;

struct Share {
  std::string name;        // as the admin gave it; unique without regard to (ASCII) case
  std::string volume;      // the volume's name
  std::string path = "/";  // inside the volume: "/" or "/a/b"
  std::string comment;     // what clients see next to the name
  bool read_only = false;
  bool browseable = true;  // listed to clients (a hidden share is reachable by name only)
  bool encrypt = false;    // SMB3 encryption required
  bool guest_ok = false;   // unauthenticated access as the guest account
  // Users ("name") and groups ("@name") allowed; empty: every user smbd
  // authenticates.
  std::vector<std::string> valid_users;

  bool operator==(const Share&) const = default;
};

}  // namespace nasgw::fs
