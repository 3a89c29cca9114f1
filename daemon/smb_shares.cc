#include "daemon/smb_shares.h"

#include <algorithm>

#include "daemon/export_rules.h"
#include "daemon/nfs_exports.h"

namespace nasgw::daemon {

namespace {

bool NameChar(char c) {
  return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '.' || c == '_' || c == '-';
}

std::string Lower(std::string s) {
  for (char& c : s) c = (c >= 'A' && c <= 'Z') ? static_cast<char>(c - 'A' + 'a') : c;
  return s;
}

Status CheckShareName(const std::string& name) {
  if (name.empty() || name.size() > fs::kShareNameMax) {
    return Status::InvalidArgument("share name '" + name + "' must be 1.." + std::to_string(fs::kShareNameMax) +
                                   " characters");
  }
  const size_t body = name.back() == '$' ? name.size() - 1 : name.size();
  if (body == 0 || !std::all_of(name.begin(), name.begin() + static_cast<long>(body), NameChar) || name[0] == '.') {
    return Status::InvalidArgument("share name '" + name +
                                   "' may hold only letters, digits, '.', '_' and '-' (not first: '.'), and end "
                                   "in '$' (a hidden share)");
  }
  const std::string l = Lower(name);
  for (const char* reserved : {"global", "homes", "printers", "print$", "ipc$"}) {
    if (l == reserved) return Status::InvalidArgument("share name '" + name + "' is reserved by smb.conf");
  }
  return Status();
}

// A value smb.conf reads back as written: printable ASCII or UTF-8, no
// '%' (variable substitution), no surrounding blanks, no trailing '\'.
Status CheckConfValue(std::string_view what, std::string_view v) {
  for (unsigned char c : v) {
    if (c < 0x20 || c == 0x7f) return Status::InvalidArgument(std::string(what) + " holds a control character");
    if (c == '%') {
      return Status::InvalidArgument(std::string(what) + " holds '%' (smbd would substitute a variable there)");
    }
  }
  if (!v.empty() && (v.front() == ' ' || v.back() == ' ' || v.back() == '\\')) {
    return Status::InvalidArgument(std::string(what) + " begins or ends with a blank, or ends with '\\'");
  }
  return Status();
}

Status CheckUser(const std::string& u) {
  const size_t at = !u.empty() && u[0] == '@' ? 1 : 0;
  if (u.size() <= at || u.size() > 64 || !std::all_of(u.begin() + static_cast<long>(at), u.end(), NameChar) ||
      u[at] == '.' || u[at] == '-') {
    return Status::InvalidArgument("valid user '" + u +
                                   "' must be a user name or @group of letters, digits, '.', '_' and '-' "
                                   "(starting with a letter, digit or '_'), at most 64 characters");
  }
  return Status();
}

// Why a share cannot be written into smb.conf; empty when it can.
std::string Unsafe(const fs::Share& s) {
  if (Status st = CheckShareName(s.name); !st.ok()) return std::string(st.message());
  if (s.volume.empty() || s.path.empty() || s.path[0] != '/') return "volume or path malformed";
  const std::pair<const char*, const std::string*> values[] = {
      {"volume name", &s.volume}, {"path", &s.path}, {"comment", &s.comment}};
  for (const auto& [what, v] : values) {
    if (Status st = CheckConfValue(what, *v); !st.ok()) return std::string(st.message());
  }
  for (const auto& u : s.valid_users) {
    if (Status st = CheckUser(u); !st.ok()) return std::string(st.message());
  }
  return "";
}

}  // namespace

Status NormalizeShare(fs::Share* s) {
  NASGW_RETURN_IF_ERROR(CheckShareName(s->name));
  auto path = NormalizeExportPath("share path", s->path);
  if (!path.ok()) return path.status();
  s->path = *path;
  NASGW_RETURN_IF_ERROR(CheckConfValue("share path", s->path));
  const size_t b = s->comment.find_first_not_of(" \t"), e = s->comment.find_last_not_of(" \t");
  s->comment = b == std::string::npos ? "" : s->comment.substr(b, e - b + 1);
  if (s->comment.size() > kShareCommentMax) {
    return Status::InvalidArgument("share comment is " + std::to_string(s->comment.size()) + " bytes; at most " +
                                   std::to_string(kShareCommentMax));
  }
  NASGW_RETURN_IF_ERROR(CheckConfValue("share comment", s->comment));
  std::vector<std::string> users;
  for (const auto& u : s->valid_users) {
    NASGW_RETURN_IF_ERROR(CheckUser(u));
    if (std::find(users.begin(), users.end(), u) == users.end()) users.push_back(u);
  }
  if (users.size() > kShareUsersMax) {
    return Status::InvalidArgument("at most " + std::to_string(kShareUsersMax) + " valid users per share");
  }
  s->valid_users = std::move(users);
  return Status();
}

std::string RenderSmbShares(const std::vector<fs::Share>& shares, const std::string& head_socket,
                            const std::string& vfs_objects, const std::string& node_name,
                            std::vector<std::string>* problems) {
  std::string out = "# SMB shares of the nasgw reserve, for smbd with vfs_nasgw. Written by nasgwd on node " +
                    node_name + ";\n# do not edit: change them with 'nasgw share add|remove'. " +
                    std::to_string(shares.size()) + (shares.size() == 1 ? " share.\n" : " shares.\n");
  auto yes = [](bool b) { return b ? "yes" : "no"; };
  for (const auto& s : shares) {
    if (std::string why = Unsafe(s); !why.empty()) {
      if (problems) problems->push_back("share '" + s.name + "' left out: " + why);
      continue;
    }
    out += "\n[" + s.name + "]\n";
    if (!s.comment.empty()) out += "    comment = " + s.comment + "\n";
    out += "    path = /nasgw/" + s.volume + (s.path == "/" ? "" : s.path) + "\n";
    out += "    vfs objects = " + (vfs_objects.empty() ? "" : vfs_objects + " ") + "nasgw\n";
    out += "    nasgw:socket = " + head_socket + "\n";
    out += "    nasgw:volume = " + s.volume + "\n";
    if (s.path != "/") out += "    nasgw:subpath = " + s.path.substr(1) + "\n";
    out += std::string("    read only = ") + yes(s.read_only) + "\n";
    out += std::string("    browseable = ") + yes(s.browseable) + "\n";
    out += std::string("    guest ok = ") + yes(s.guest_ok) + "\n";
    if (s.encrypt) out += "    smb encrypt = required\n";
    if (!s.valid_users.empty()) {
      out += "    valid users =";
      for (const auto& u : s.valid_users) out += " " + u;
      out += "\n";
    }
  }
  return out;
}

Status PublishShares(const std::string& shares_file, const std::string& smbd_pid_file, const std::string& head_socket,
                     const std::string& vfs_objects, const std::string& node_name,
                     const std::vector<fs::Share>& shares) {
  if (shares_file.empty()) return Status();
  std::vector<std::string> problems;
  const std::string text = RenderSmbShares(shares, head_socket, vfs_objects, node_name, &problems);
  return PublishServerFile("smb", "shares", shares_file, text, shares.size() - problems.size(), problems, smbd_pid_file,
                           kSmbdComm);
}

}  // namespace nasgw::daemon
