#include "tests/lab/lab.h"

#include <fcntl.h>
#include <sched.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <thread>

#include <sys/wait.h>

#ifndef NASGW_SANLAB
#error "NASGW_SANLAB must point at tests/lab/sanlab"
#endif

namespace nasgw::lab {

Result<std::string> RunTool(const std::vector<std::string>& argv) {
  int out[2], err[2];
  if (pipe2(out, O_CLOEXEC) != 0 || pipe2(err, O_CLOEXEC) != 0) return Status::IoError("pipe failed");
  pid_t pid = fork();
  if (pid < 0) return Status::IoError("fork failed");
  if (pid == 0) {
    dup2(out[1], 1);
    dup2(err[1], 2);
    std::vector<char*> args;
    args.reserve(argv.size());
    for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    execvp(args[0], args.data());
    _exit(127);
  }
  close(out[1]);
  close(err[1]);
  std::string o, e;
  // Read both pipes to the end (the outputs are small; stderr first would
  // only block if stdout filled its pipe, which sanlab's JSON never does).
  char buf[4096];
  ssize_t n;
  while ((n = read(out[0], buf, sizeof(buf))) > 0) o.append(buf, n);
  while ((n = read(err[0], buf, sizeof(buf))) > 0) e.append(buf, n);
  close(out[0]);
  close(err[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    return Status::IoError(argv[0] + " " + (argv.size() > 1 ? argv[1] : "") + " failed: " + e);
  }
  return o;
}

namespace {
std::atomic<int> lab_counter{0};
}

Result<std::unique_ptr<Lab>> Lab::Start(const std::string& tag, const LabOptions& o) {
  std::unique_ptr<Lab> lab(new Lab);
  lab->name_ = tag.substr(0, 8) + std::to_string(getpid()) + "-" + std::to_string(lab_counter++);
  std::vector<std::string> argv = {NASGW_SANLAB,
                                   "start",
                                   lab->name_,
                                   "--mode",
                                   o.mode,
                                   "--luns",
                                   std::to_string(o.luns),
                                   "--size",
                                   o.size,
                                   "--portals",
                                   std::to_string(o.portals),
                                   "--owner-pid",
                                   std::to_string(getpid())};
  if (!o.chap.empty()) argv.insert(argv.end(), {"--chap", o.chap});
  if (!o.rate.empty()) argv.insert(argv.end(), {"--rate", o.rate});
  auto out = RunTool(argv);
  if (!out.ok()) {
    lab->name_.clear();  // nothing to stop: sanlab cleaned up after itself
    return out.status();
  }
  lab->state_ = nlohmann::json::parse(*out, nullptr, false);
  if (lab->state_.is_discarded()) return Status::Corruption("sanlab printed no JSON: " + *out);
  return lab;
}

Lab::~Lab() {
  if (name_.empty()) return;
  auto r = RunTool({NASGW_SANLAB, "stop", name_});
  if (!r.ok()) std::fprintf(stderr, "lab %s: stop failed: %s\n", name_.c_str(), r.status().ToString().c_str());
}

std::string Lab::Url(int lun, int portal) const {
  return state_["luns"][lun]["urls"][portal];
}

std::vector<std::string> Lab::Urls(int lun) const {
  return state_["luns"][lun]["urls"].get<std::vector<std::string>>();
}

std::string Lab::Target() const {
  return state_["target"];
}
std::string Lab::Portal(int portal) const {
  return state_["portals"][portal];
}
std::string Lab::HostNetns() const {
  return state_.value("ns_host", std::string());
}
std::string Lab::LunFile(int lun) const {
  return state_["luns"][lun]["file"];
}

Status Lab::Kill() {
  return RunTool({NASGW_SANLAB, "kill", name_}).status();
}
Status Lab::Restart() {
  return RunTool({NASGW_SANLAB, "restart", name_}).status();
}
Status Lab::Link(int fabric, bool up) {
  return RunTool({NASGW_SANLAB, "link", name_, std::to_string(fabric), up ? "up" : "down"}).status();
}

Status RunInNetns(const std::string& ns, const std::function<void()>& fn) {
  if (ns.empty()) {
    fn();
    return Status();
  }
  Status result;
  std::thread t([&] {
    int fd = open(("/run/netns/" + ns).c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
      result = Status::NotFound("no network namespace " + ns);
      return;
    }
    if (setns(fd, CLONE_NEWNET) != 0) {
      close(fd);
      result = Status::PermissionDenied("setns into " + ns + " failed");
      return;
    }
    close(fd);
    fn();
  });
  t.join();
  return result;
}

}  // namespace nasgw::lab
