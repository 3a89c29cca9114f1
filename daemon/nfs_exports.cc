#include "daemon/nfs_exports.h"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "base/log.h"
#include "daemon/export_rules.h"

#include <sys/stat.h>
#include <sys/syscall.h>

namespace nasgw::daemon {

namespace {

Status ErrnoStatus(const std::string& what, int err) {
  const std::string m = what + ": " + std::strerror(err);
  if (err == ENOENT) return Status::NotFound(m);
  if (err == EACCES || err == EPERM) return Status::PermissionDenied(m);
  if (err == ENOSPC) return Status::NoSpace(m);
  return Status::IoError(m);
}

// Why an export cannot be written into a Ganesha file; empty when it can.
std::string Unsafe(const fs::Export& e) {
  if (e.id == 0 || e.id > fs::kExportIdMax) return "id out of range 1.." + std::to_string(fs::kExportIdMax);
  const std::pair<const char*, const std::string*> texts[] = {
      {"volume name", &e.volume}, {"path", &e.path}, {"pseudo path", &e.pseudo}};
  for (const auto& [what, text] : texts) {
    if (Status s = CheckExportText(what, *text); !s.ok()) return std::string(s.message());
  }
  if (e.volume.empty() || e.path.empty() || e.path[0] != '/' || e.pseudo.size() < 2 || e.pseudo[0] != '/') {
    return "volume, path or pseudo path malformed";
  }
  for (const auto& c : e.clients) {
    auto canon = CanonicalClient(c);
    if (!canon.ok() || *canon != c) return "client '" + c + "' is not canonical";
  }
  for (const auto& s : e.sec) {
    if (s != "sys" && s != "krb5" && s != "krb5i" && s != "krb5p") return "unknown security flavour";
  }
  for (uint32_t p : e.protocols) {
    if (p != 3 && p != 4) return "unknown protocol version";
  }
  if (e.sec.empty() || e.protocols.empty()) return "no security flavour or protocol";
  return "";
}

template <typename T>
std::string Joined(const std::vector<T>& items) {
  std::string out;
  for (const auto& i : items) {
    if (!out.empty()) out += ", ";
    if constexpr (std::is_same_v<T, std::string>) {
      out += i;
    } else {
      out += std::to_string(i);
    }
  }
  return out;
}

// Reads at most `max` bytes of a small file (a pid file, /proc/PID/comm).
Result<std::string> ReadSmall(const std::string& path, size_t max) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
  if (fd < 0) return ErrnoStatus("open " + path, errno);
  std::string text(max, '\0');
  ssize_t n;
  do {
    n = ::read(fd, text.data(), text.size());
  } while (n < 0 && errno == EINTR);
  const int err = errno;
  ::close(fd);
  if (n < 0) return ErrnoStatus("read " + path, err);
  text.resize(static_cast<size_t>(n));
  return text;
}

}  // namespace

std::string RenderGaneshaExports(const std::vector<fs::Export>& exports, const std::string& node_name,
                                 std::vector<std::string>* problems) {
  std::string out = "# NFS exports of the nasgw reserve, for NFS-Ganesha (FSAL_NASGW). Written by nasgwd on node " +
                    node_name + ";\n# do not edit: change them with 'nasgw export add|remove'. " +
                    std::to_string(exports.size()) + (exports.size() == 1 ? " export.\n" : " exports.\n");
  for (const auto& e : exports) {
    if (std::string why = Unsafe(e); !why.empty()) {
      if (problems) problems->push_back("export " + std::to_string(e.id) + " left out: " + why);
      continue;
    }
    const char* access = e.read_only ? "RO" : "RW";
    out += "\nEXPORT {\n";
    out += "  Export_Id = " + std::to_string(e.id) + ";\n";
    out += "  Path = \"" + ExportFsalPath(e) + "\";\n";
    out += "  Pseudo = \"" + e.pseudo + "\";\n";
    out += "  Protocols = " + Joined(e.protocols) + ";\n";
    out += "  Transports = TCP;\n";
    out += "  SecType = " + Joined(e.sec) + ";\n";
    out += std::string("  Squash = ") + (e.root_squash ? "Root_Squash" : "No_Root_Squash") + ";\n";
    out += "  Anonymous_Uid = " + std::to_string(kNfsAnonymousId) +
           "; Anonymous_Gid = " + std::to_string(kNfsAnonymousId) + ";\n";
    // With a client list the export grants nothing by itself: only the
    // CLIENT block's addresses get access.
    out += std::string("  Access_Type = ") + (e.clients.empty() ? access : "None") + ";\n";
    if (!e.clients.empty()) {
      out += "  CLIENT { Clients = " + Joined(e.clients) + "; Access_Type = " + access + "; }\n";
    }
    // Ganesha answers a READ that ends past MaxOffsetRead (default 2^63 - 1)
    // with FBIG itself; a READ at any offset past the end of a file is a
    // short read at end of file (RFC 7530 READ, RFC 1813 READ3), which nasgwd
    // answers. Writes keep the default: 2^63 - 1 is nasgw's largest file.
    out += "  MaxOffsetRead = 18446744073709551615;\n";
    // FSAL_NASGW holds every delegation as a lease in nasgwd, so another
    // head (SMB, FUSE) recalls it before it proceeds. Ganesha grants them
    // only where ganesha.conf's NFSV4 block says Delegations = true.
    out += "  Delegations = RW;\n";
    out += std::string("  FSAL { Name = NASGW;") + (e.show_snapshot_dir ? " Show_Snapshot_Dir = true;" : "") + " }\n";
    out += "}\n";
  }
  return out;
}

Status WriteFileAtomically(const std::string& path, const std::string& text, unsigned mode) {
  const size_t slash = path.rfind('/');
  const std::string dir = slash == std::string::npos ? "." : (slash == 0 ? "/" : path.substr(0, slash));
  const std::string tmp = path + ".tmp";
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (fd < 0) return ErrnoStatus("create " + tmp, errno);
  auto fail = [&](const std::string& what) {
    Status s = ErrnoStatus(what, errno);
    ::close(fd);
    ::unlink(tmp.c_str());
    return s;
  };
  size_t done = 0;
  while (done < text.size()) {
    ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return fail("write " + tmp);
    done += static_cast<size_t>(n);
  }
  if (::fchmod(fd, static_cast<mode_t>(mode)) != 0) return fail("chmod " + tmp);
  if (::fsync(fd) != 0) return fail("fsync " + tmp);
  ::close(fd);
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    Status s = ErrnoStatus("rename " + tmp + " to " + path, errno);
    ::unlink(tmp.c_str());
    return s;
  }
  int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd < 0) return ErrnoStatus("open " + dir, errno);
  const int rc = ::fsync(dfd);
  const int err = errno;
  ::close(dfd);
  if (rc != 0) return ErrnoStatus("fsync " + dir, err);
  return Status();
}

Status SignalServer(const std::string& pid_file, const std::string& comm_name, int* pid_out) {
  auto text = ReadSmall(pid_file, 64);
  if (!text.ok()) return text.status().WithContext(comm_name + " pid file");
  // The first line: Ganesha writes its pid over the file without
  // truncating it, so a shorter pid than the last run's leaves the rest of
  // that one on a second line ("312\n59\n").
  std::string t = text->substr(0, text->find('\n'));
  while (!t.empty() && (t.back() == ' ' || t.back() == '\r' || t.back() == '\t')) t.pop_back();
  if (t.empty() || t.size() > 9 || t.find_first_not_of("0123456789") != std::string::npos || t == "0") {
    return Status::InvalidArgument(comm_name + " pid file " + pid_file + " holds no pid");
  }
  const int pid = std::stoi(t);
  if (pid_out) *pid_out = pid;
  // A pidfd pins the process: the pid cannot be reused by another between
  // the name check and the signal.
  int pidfd = static_cast<int>(::syscall(SYS_pidfd_open, pid, 0));
  if (pidfd < 0 && errno == ESRCH) {
    return Status::NotFound(comm_name + " pid file " + pid_file + " names pid " + t + ", which is not running");
  }
  const std::string comm_path = "/proc/" + t + "/comm";
  auto comm = ReadSmall(comm_path, 64);
  if (!comm.ok()) {
    if (pidfd >= 0) ::close(pidfd);
    if (comm.status().code() == Code::kNotFound) {
      return Status::NotFound(comm_name + " pid file " + pid_file + " names pid " + t + ", which is not running");
    }
    return comm.status();
  }
  std::string name = *comm;
  while (!name.empty() && name.back() == '\n') name.pop_back();
  if (name != comm_name) {
    if (pidfd >= 0) ::close(pidfd);
    return Status(Code::kFailedPrecondition, comm_name + " pid file " + pid_file + " names pid " + t + ", which is '" +
                                                 name + "', not " + comm_name + "; not signalled");
  }
  int rc;
  if (pidfd >= 0) {
    rc = static_cast<int>(::syscall(SYS_pidfd_send_signal, pidfd, SIGHUP, nullptr, 0));
  } else {
    rc = ::kill(pid, SIGHUP);  // a kernel without pidfds (before 5.3)
  }
  const int err = errno;
  if (pidfd >= 0) ::close(pidfd);
  if (rc != 0) {
    if (err == ESRCH) return Status::NotFound(comm_name + " pid " + t + " exited before it was signalled");
    return ErrnoStatus("SIGHUP to " + comm_name + " pid " + t, err);
  }
  return Status();
}

Status PublishServerFile(const char* area, const std::string& what, const std::string& file, const std::string& text,
                         size_t written, const std::vector<std::string>& problems, const std::string& pid_file,
                         const std::string& comm_name) {
  for (const auto& p : problems) NASGW_LOG(kError, area) << what << " left out" << Kv("why", p);
  // The server reads it, maybe as another user; it holds no secret.
  Status s = WriteFileAtomically(file, text, 0644);
  if (!s.ok()) {
    NASGW_LOG(kError, area) << "cannot write the " << what << " file" << Kv("file", file) << Kv("error", s.ToString());
    return s.WithContext("write the " + what + " file " + file);
  }
  NASGW_LOG(kInfo, area) << what << " written" << Kv("file", file) << Kv("count", written);
  if (!pid_file.empty()) {
    int pid = 0;
    Status sig = SignalServer(pid_file, comm_name, &pid);
    if (sig.ok()) {
      NASGW_LOG(kInfo, area) << comm_name << " signalled to reload the " << what << Kv("pid", pid);
    } else {
      NASGW_LOG(kWarn, area) << comm_name << " not signalled; it reads the " << what << " at its next start or SIGHUP"
                             << Kv("why", sig.ToString());
    }
  }
  if (!problems.empty()) {
    std::string m = problems[0];
    for (size_t i = 1; i < problems.size(); i++) m += "; " + problems[i];
    return Status::Corruption(m);
  }
  return Status();
}

Status PublishExports(const std::string& exports_file, const std::string& ganesha_pid_file,
                      const std::string& node_name, const std::vector<fs::Export>& exports) {
  if (exports_file.empty()) return Status();
  std::vector<std::string> problems;
  const std::string text = RenderGaneshaExports(exports, node_name, &problems);
  return PublishServerFile("nfs", "exports", exports_file, text, exports.size() - problems.size(), problems,
                           ganesha_pid_file, kGaneshaComm);
}

}  // namespace nasgw::daemon
