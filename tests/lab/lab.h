// C++ handle on a lab array started by tests/lab/sanlab: used by the
// integration tests and benchmarks. The lab is stopped when the handle dies;
// its owner pid is recorded so `sanlab gc` removes it if this process crashes.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/status.h"

namespace nasgw::lab {

struct LabOptions {
  std::string mode = "loopback";  // or "netns"
  int luns = 1;
  std::string size = "64M";
  std::string chap;  // "user:password"
  int portals = 1;
  std::string rate;  // tc tbf rate on the array links (netns)
};

class Lab {
 public:
  // `tag` names the lab (made unique with the pid and a counter).
  static Result<std::unique_ptr<Lab>> Start(const std::string& tag, const LabOptions& options);
  ~Lab();

  const std::string& name() const { return name_; }
  // URL of LUN `lun` (0-based index into the lab's LUNs) through `portal`.
  std::string Url(int lun = 0, int portal = 0) const;
  std::vector<std::string> Urls(int lun = 0) const;
  std::string Target() const;
  std::string Portal(int portal = 0) const;
  std::string HostNetns() const;  // empty in loopback mode
  std::string LunFile(int lun = 0) const;

  Status Kill();     // SIGKILL tgtd
  Status Restart();  // start tgtd again, same config
  Status Link(int fabric, bool up);

 private:
  Lab() = default;  // NOLINT(bugprone-exception-escape): clang-tidy 14 takes nlohmann::json() to throw
  std::string name_;
  nlohmann::json state_;
};

// Runs `tool args...`, returning stdout; non-zero exit is an error with stderr.
Result<std::string> RunTool(const std::vector<std::string>& argv);

// Runs fn on a thread that has entered network namespace `ns` (no-op when
// empty). Threads fn creates inherit the namespace, so a BlockDevice opened
// in fn talks from inside it while the caller stays where it is.
Status RunInNetns(const std::string& ns, const std::function<void()>& fn);

}  // namespace nasgw::lab
