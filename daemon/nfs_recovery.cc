#include "daemon/nfs_recovery.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>
#include <system_error>
#include <thread>

#include "cluster/message.h"

#include <sys/wait.h>

namespace nasgw::daemon {

namespace fsys = std::filesystem;

namespace {

std::string RecordsDir(const std::string& root) {
  return root + "/v4recov";
}

// Where ganesha keeps its own records: v4recov/node0 when it runs
// "clustered" (NFS_CORE_PARAM { Clustered }, true by default; node 0 unless
// an FSAL says otherwise), v4recov itself when not.
std::string OwnRecordsDir(const std::string& root) {
  std::error_code ec;
  const std::string clustered = RecordsDir(root) + "/node0";
  return fsys::is_directory(clustered, ec) ? clustered : RecordsDir(root);
}

Result<std::vector<std::string>> ListUnder(const std::string& where, bool* truncated);

// What a child wrote to `fd` until EOF or `deadline`, at most 4 KiB.
std::string Drain(int fd, std::chrono::steady_clock::time_point deadline) {
  std::string out;
  char buf[512];
  for (;;) {
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    pollfd p{fd, POLLIN, 0};
    if (left.count() <= 0) break;
    const int r = ::poll(&p, 1, static_cast<int>(left.count()));
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) break;
    const ssize_t n = ::read(fd, buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    if (out.size() < 4096) out.append(buf, static_cast<size_t>(n));
  }
  return out;
}

}  // namespace

Result<std::vector<std::string>> ListRecovery(const std::string& root, bool* truncated) {
  return ListUnder(OwnRecordsDir(root), truncated);
}

Result<std::vector<std::string>> ListPartnerRecovery(const std::string& root) {
  return ListUnder(RecordsDir(root + "/" + kPartnerRecoveryKey), nullptr);
}

namespace {

Result<std::vector<std::string>> ListUnder(const std::string& where, bool* truncated) {
  if (truncated != nullptr) *truncated = false;
  std::vector<std::string> out;
  const fsys::path dir = where;
  std::error_code ec;
  if (!fsys::exists(dir, ec)) return out;
  fsys::recursive_directory_iterator it(dir, fsys::directory_options::none, ec);
  if (ec) return Status::IoError("list " + dir.string() + ": " + ec.message());
  for (const fsys::recursive_directory_iterator end; it != end; it.increment(ec)) {
    if (ec) return Status::IoError("list " + dir.string() + ": " + ec.message());
    if (out.size() >= cluster::kRecoveryEntriesMax) {
      if (truncated != nullptr) *truncated = true;
      break;
    }
    // Directories and files of ganesha's; a symlink (which ganesha never
    // makes) is neither followed nor listed.
    const auto st = it->symlink_status(ec);
    if (ec || fsys::is_symlink(st)) continue;
    const bool is_dir = fsys::is_directory(st);
    std::string rel = it->path().lexically_relative(dir).string();
    if (rel.empty()) continue;
    if (is_dir) rel += '/';
    if (cluster::RecoveryPathOk(rel)) out.push_back(std::move(rel));
  }
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace

size_t CountRecoveryClients(const std::vector<std::string>& entries) {
  size_t n = 0;
  for (size_t i = 0; i < entries.size(); i++) {
    const std::string& e = entries[i];
    if (e.back() != '/') continue;
    // Sorted: what is below a directory follows it.
    bool has_dir_below = false;
    for (size_t j = i + 1; j < entries.size() && entries[j].compare(0, e.size(), e) == 0; j++) {
      if (entries[j].back() == '/') {
        has_dir_below = true;
        break;
      }
    }
    if (!has_dir_below) n++;
  }
  return n;
}

Status WritePartnerRecovery(const std::string& root, const std::vector<std::string>& entries) {
  const fsys::path dir = RecordsDir(root + "/" + kPartnerRecoveryKey);
  std::error_code ec;
  fsys::create_directories(dir, ec);
  if (ec) return Status::IoError("create " + dir.string() + ": " + ec.message());
  std::set<std::string> want;
  for (const std::string& e : entries) {
    if (!cluster::RecoveryPathOk(e)) return Status::InvalidArgument("not a record's path: " + e);
    want.insert(e);
    // A record's directories are listed before it; a file's are made too.
    for (size_t slash = e.find('/'); slash != std::string::npos && slash + 1 < e.size();
         slash = e.find('/', slash + 1)) {
      want.insert(e.substr(0, slash + 1));
    }
  }
  // What is there and not wanted goes (deepest first).
  auto have = ListUnder(dir.string(), nullptr);
  if (!have.ok()) return have.status();
  for (auto it = have->rbegin(); it != have->rend(); ++it) {
    if (want.contains(*it)) continue;
    fsys::remove_all(dir / *it, ec);
    if (ec) return Status::IoError("remove " + (dir / *it).string() + ": " + ec.message());
  }
  for (const std::string& e : want) {  // sorted: a directory before what is in it
    const fsys::path p = dir / e;
    // Never through a symlink (planted by someone else): it goes first.
    if (fsys::is_symlink(fsys::symlink_status(p, ec))) fsys::remove(p, ec);
    if (e.back() == '/') {
      fsys::create_directories(p, ec);
      if (ec) return Status::IoError("create " + p.string() + ": " + ec.message());
    } else if (!fsys::exists(p, ec)) {
      std::ofstream f(p);
      if (!f) return Status::IoError("create " + p.string());
    }
  }
  return Status();
}

Status StartTakeoverGrace(const std::string& dbus_address, uint32_t timeout_ms) {
  int out[2];
  if (::pipe2(out, O_CLOEXEC) != 0) return Status::IoError(std::string("pipe: ") + std::strerror(errno));
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, out[1], 1);
  posix_spawn_file_actions_adddup2(&fa, out[1], 2);
  const std::string bus = dbus_address.empty() ? "--system" : "--bus=" + dbus_address;
  const std::string reply = "--reply-timeout=" + std::to_string(timeout_ms);
  const std::string event = "string:5:" + std::string(kPartnerRecoveryKey);  // EVENT_TAKE_IP
  std::vector<std::string> args = {"dbus-send",
                                   bus,
                                   "--print-reply",
                                   reply,
                                   "--dest=org.ganesha.nfsd",
                                   "/org/ganesha/nfsd/admin",
                                   "org.ganesha.nfsd.admin.grace",
                                   event};
  std::vector<char*> argv;
  argv.reserve(args.size() + 1);
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  // The child starts with no signal blocked and SIGPIPE at its default
  // (nasgwd blocks its signals for its signal thread and ignores SIGPIPE).
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  sigset_t none, defaults;
  sigemptyset(&none);
  sigemptyset(&defaults);
  sigaddset(&defaults, SIGPIPE);
  posix_spawnattr_setsigmask(&attr, &none);
  posix_spawnattr_setsigdefault(&attr, &defaults);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
  pid_t pid = -1;
  const int rc = ::posix_spawnp(&pid, "dbus-send", &fa, &attr, argv.data(), environ);
  posix_spawnattr_destroy(&attr);
  posix_spawn_file_actions_destroy(&fa);
  ::close(out[1]);
  if (rc != 0) {
    ::close(out[0]);
    return Status::Unavailable(std::string("run dbus-send (package dbus): ") + std::strerror(rc));
  }
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms + 1000);
  const std::string said = Drain(out[0], deadline);
  ::close(out[0]);
  int status = 0;
  while (::waitpid(pid, &status, WNOHANG) == 0) {
    if (std::chrono::steady_clock::now() > deadline) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, &status, 0);
      return Status::Unavailable("dbus-send did not finish within " + std::to_string(timeout_ms + 1000) + " ms");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));  // a child's exit after its output ended
  }
  std::string text = said;
  std::replace(text.begin(), text.end(), '\n', ' ');
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    return Status::Unavailable("ganesha's DBus grace call failed: " + text);
  }
  if (text.find("boolean true") == std::string::npos) {
    return Status::Unavailable("ganesha refused the grace period: " + text);
  }
  return Status();
}

}  // namespace nasgw::daemon
