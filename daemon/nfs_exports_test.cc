// The Ganesha exports file (daemon/nfs_exports.h): its exact text, the
// atomic write, and SIGHUP only ever to a live ganesha.nfsd (a child process
// renamed with prctl stands for it).
#include "daemon/nfs_exports.h"

#include <signal.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include <gtest/gtest.h>

#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>

namespace nasgw::daemon {
namespace {

std::string ReadText(const std::string& path) {
  std::ifstream in(path);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// A child process named `comm` (as /proc/PID/comm shows it) that blocks
// SIGHUP and waits, so a SIGHUP sent to it stays pending where the test can
// see it. Killed and reaped by the destructor.
class FakeProcess {
 public:
  explicit FakeProcess(const char* comm) {
    pid_ = ::fork();
    if (pid_ == 0) {
      // Only async-signal-safe calls: the parent has threads.
      sigset_t set;
      sigemptyset(&set);
      sigaddset(&set, SIGHUP);
      sigprocmask(SIG_BLOCK, &set, nullptr);
      prctl(PR_SET_NAME, comm, 0, 0, 0);
      for (;;) pause();
    }
    // Ready once the name shows (it is set after SIGHUP is blocked).
    for (int i = 0; i < 2000 && Comm() != comm; i++) ::usleep(1000);
  }
  ~FakeProcess() {
    if (pid_ > 0) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
  }
  int pid() const { return pid_; }
  std::string Comm() const {
    std::string c = ReadText("/proc/" + std::to_string(pid_) + "/comm");
    while (!c.empty() && c.back() == '\n') c.pop_back();
    return c;
  }
  // Whether a SIGHUP waits for it (blocked, so delivered but not taken).
  bool HupPending() const {
    std::istringstream in(ReadText("/proc/" + std::to_string(pid_) + "/status"));
    std::string line;
    uint64_t pending = 0;
    while (std::getline(in, line)) {
      if (line.rfind("SigPnd:", 0) == 0 || line.rfind("ShdPnd:", 0) == 0) {
        pending |= std::stoull(line.substr(7), nullptr, 16);
      }
    }
    return (pending & (1ull << (SIGHUP - 1))) != 0;
  }

 private:
  pid_t pid_ = -1;
};

class NfsExportsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string name = "/tmp/nasgw-nfs-" + std::to_string(::getpid()) + "-XXXXXX";
    ASSERT_NE(::mkdtemp(name.data()), nullptr);
    dir_ = name;
  }
  void TearDown() override {
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }
  std::string WritePid(int pid) {
    std::string path = dir_ + "/ganesha.pid";
    std::ofstream(path) << pid << "\n";
    return path;
  }
  std::string dir_;
};

fs::Export Exp(uint32_t id, const std::string& volume, const std::string& path, const std::string& pseudo) {
  fs::Export e;
  e.id = id;
  e.volume = volume;
  e.path = path;
  e.pseudo = pseudo;
  return e;
}

TEST_F(NfsExportsTest, RendersTheContractExactly) {
  std::vector<fs::Export> exports;
  exports.push_back(Exp(1, "vol1", "/", "/vol1"));
  fs::Export e = Exp(7, "vol2", "/sub/dir", "/data");
  e.clients = {"198.18.2.0/24", "198.18.3.7", "2001:db8::/32"};
  e.read_only = true;
  e.root_squash = false;
  e.sec = {"krb5p", "sys"};
  e.protocols = {4};
  e.show_snapshot_dir = true;
  exports.push_back(e);
  std::vector<std::string> problems;
  const std::string text = RenderGaneshaExports(exports, "gw-a", &problems);
  EXPECT_TRUE(problems.empty());
  const std::string want_blocks = R"(
EXPORT {
  Export_Id = 1;
  Path = "/vol1";
  Pseudo = "/vol1";
  Protocols = 3, 4;
  Transports = TCP;
  SecType = sys;
  Squash = Root_Squash;
  Anonymous_Uid = 65534; Anonymous_Gid = 65534;
  Access_Type = RW;
  MaxOffsetRead = 18446744073709551615;
  Delegations = RW;
  FSAL { Name = NASGW; }
}

EXPORT {
  Export_Id = 7;
  Path = "/vol2/sub/dir";
  Pseudo = "/data";
  Protocols = 4;
  Transports = TCP;
  SecType = krb5p, sys;
  Squash = No_Root_Squash;
  Anonymous_Uid = 65534; Anonymous_Gid = 65534;
  Access_Type = None;
  CLIENT { Clients = 198.18.2.0/24, 198.18.3.7, 2001:db8::/32; Access_Type = RO; }
  MaxOffsetRead = 18446744073709551615;
  Delegations = RW;
  FSAL { Name = NASGW; Show_Snapshot_Dir = true; }
}
)";
  const size_t first = text.find("\nEXPORT {");
  ASSERT_NE(first, std::string::npos) << text;
  EXPECT_EQ(text.substr(first), want_blocks);
  // Everything before the blocks is comment lines.
  std::istringstream head(text.substr(0, first));
  for (std::string line; std::getline(head, line);) EXPECT_EQ(line.rfind("# ", 0), 0u) << line;
  EXPECT_NE(text.find("gw-a"), std::string::npos);

  const std::string empty = RenderGaneshaExports({}, "gw-a");
  std::istringstream lines(empty);
  int n = 0;
  for (std::string line; std::getline(lines, line); n++) EXPECT_EQ(line.rfind("# ", 0), 0u) << line;
  EXPECT_GT(n, 0) << "no exports: only a comment";
}

TEST_F(NfsExportsTest, AnExportThatWouldBreakTheSyntaxIsLeftOut) {
  std::vector<fs::Export> exports = {Exp(1, "vol1", "/", "/vol1"), Exp(2, "vol\"2", "/", "/v2"),
                                     Exp(3, "vol3", "/a\nb", "/v3"), Exp(4, "vol4", "/", "/v4")};
  exports[3].clients = {"198.18.2.5/24"};
  std::vector<std::string> problems;
  const std::string text = RenderGaneshaExports(exports, "gw-a", &problems);
  ASSERT_EQ(problems.size(), 3u);
  EXPECT_NE(problems[0].find("export 2"), std::string::npos) << problems[0];
  EXPECT_NE(problems[1].find("export 3"), std::string::npos) << problems[1];
  EXPECT_NE(problems[2].find("export 4"), std::string::npos) << problems[2];
  EXPECT_NE(text.find("Export_Id = 1;"), std::string::npos);
  EXPECT_EQ(text.find("Export_Id = 2;"), std::string::npos);
  EXPECT_EQ(text.find("vol\"2"), std::string::npos);
  EXPECT_EQ(std::count(text.begin(), text.end(), '"') % 2, 0);
}

TEST_F(NfsExportsTest, WritesAtomicallyWithItsMode) {
  const std::string path = dir_ + "/nasgw-exports.conf";
  ::umask(077);
  ASSERT_TRUE(WriteFileAtomically(path, "one\n", 0644).ok());
  ASSERT_TRUE(WriteFileAtomically(path, "two\n", 0644).ok());
  EXPECT_EQ(ReadText(path), "two\n");
  struct stat st {};
  ASSERT_EQ(::stat(path.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0644u) << "Ganesha may read it as another user, whatever nasgwd's umask";
  EXPECT_FALSE(std::filesystem::exists(path + ".tmp"));
  ::umask(022);
  Status s = WriteFileAtomically(dir_ + "/missing/x.conf", "x", 0644);
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find(dir_ + "/missing"), std::string::npos) << s.ToString();
}

TEST_F(NfsExportsTest, SignalsOnlyALiveGanesha) {
  // No pid file; a file without a pid; a pid that has exited.
  EXPECT_EQ(SignalServer(dir_ + "/none.pid", kGaneshaComm).code(), Code::kNotFound);
  std::ofstream(dir_ + "/junk.pid") << "ganesha\n";
  EXPECT_EQ(SignalServer(dir_ + "/junk.pid", kGaneshaComm).code(), Code::kInvalidArgument);
  pid_t gone = ::fork();
  if (gone == 0) _exit(0);
  ASSERT_GT(gone, 0);
  ASSERT_EQ(::waitpid(gone, nullptr, 0), gone);
  Status s = SignalServer(WritePid(gone), kGaneshaComm);
  EXPECT_EQ(s.code(), Code::kNotFound) << s.ToString();
  EXPECT_NE(s.message().find("not running"), std::string::npos) << s.ToString();

  // Another process under the pid: never signalled.
  FakeProcess other("not-ganesha");
  ASSERT_EQ(other.Comm(), "not-ganesha");
  s = SignalServer(WritePid(other.pid()), kGaneshaComm);
  EXPECT_EQ(s.code(), Code::kFailedPrecondition) << s.ToString();
  EXPECT_NE(s.message().find("not-ganesha"), std::string::npos) << s.ToString();
  EXPECT_FALSE(other.HupPending());

  FakeProcess ganesha(kGaneshaComm);
  ASSERT_EQ(ganesha.Comm(), kGaneshaComm);
  EXPECT_FALSE(ganesha.HupPending());
  int pid = 0;
  s = SignalServer(WritePid(ganesha.pid()), kGaneshaComm, &pid);
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(pid, ganesha.pid());
  EXPECT_TRUE(ganesha.HupPending());

  // Ganesha writes its pid over the last run's without truncating the
  // file: a longer old pid leaves its tail on a second line.
  FakeProcess again(kGaneshaComm);
  const std::string over = dir_ + "/over.pid";
  std::ofstream(over) << again.pid() << "\n"
                      << "12345678\n";
  pid = 0;
  s = SignalServer(over, kGaneshaComm, &pid);
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(pid, again.pid());
  EXPECT_TRUE(again.HupPending());
}

TEST_F(NfsExportsTest, PublishWritesAndSignalsAndOnlyWarnsAboutGanesha) {
  const std::string file = dir_ + "/nasgw-exports.conf";
  EXPECT_TRUE(PublishExports("", dir_ + "/x.pid", "gw-a", {Exp(1, "v", "/", "/v")}).ok());
  EXPECT_FALSE(std::filesystem::exists(file)) << "nothing without an exports file";

  FakeProcess other("sleepy");
  Status s = PublishExports(file, WritePid(other.pid()), "gw-a", {Exp(1, "v", "/", "/v")});
  EXPECT_TRUE(s.ok()) << "a pid that is not Ganesha is a warning: " << s.ToString();
  EXPECT_NE(ReadText(file).find("Export_Id = 1;"), std::string::npos);
  EXPECT_FALSE(other.HupPending());
  EXPECT_TRUE(PublishExports(file, dir_ + "/stale.pid", "gw-a", {}).ok()) << "a missing pid file too";
  EXPECT_EQ(ReadText(file).find("EXPORT"), std::string::npos);

  FakeProcess ganesha(kGaneshaComm);
  ASSERT_TRUE(PublishExports(file, WritePid(ganesha.pid()), "gw-a", {Exp(2, "v", "/", "/v")}).ok());
  EXPECT_TRUE(ganesha.HupPending());
  EXPECT_NE(ReadText(file).find("Export_Id = 2;"), std::string::npos);

  s = PublishExports(file, "", "gw-a", {Exp(3, "v", "/", "/v"), Exp(4, "v\\x", "/", "/w")});
  EXPECT_EQ(s.code(), Code::kCorruption) << s.ToString();
  EXPECT_NE(s.message().find("export 4"), std::string::npos) << s.ToString();
  EXPECT_NE(ReadText(file).find("Export_Id = 3;"), std::string::npos) << "the others are still written";
}

}  // namespace
}  // namespace nasgw::daemon
