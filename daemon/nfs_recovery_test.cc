#include "daemon/nfs_recovery.h"

#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>

#include "cluster/message.h"

namespace nasgw::daemon {
namespace {

namespace fsys = std::filesystem;

class NfsRecoveryTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = fsys::temp_directory_path() / ("nasgw-recov-" + std::to_string(::getpid()));
    fsys::remove_all(root_);
    fsys::create_directories(root_ / "v4recov");
  }
  void TearDown() override { fsys::remove_all(root_); }
  void Touch(const fsys::path& p) {
    fsys::create_directories(p.parent_path());
    std::ofstream(p).put('\n');
  }
  fsys::path root_;
};

// What ganesha's fs backend keeps (a file per client; a long name split
// into directories) is listed, sent to the partner and written back there
// under the partner's key: the same tree, and only it.
TEST_F(NfsRecoveryTest, RecordsGoToThePartnersDirectoryAsTheyAre) {
  Touch(root_ / "v4recov" / "198.18.1.9-(37:Linux NFSv4.0 client1)");
  Touch(root_ / "v4recov" / "198.18.1.10-(300:a long" / "name split)");
  auto listed = ListRecovery(root_.string());
  ASSERT_TRUE(listed.ok()) << listed.status().ToString();
  const std::vector<std::string> want = {"198.18.1.10-(300:a long/", "198.18.1.10-(300:a long/name split)",
                                         "198.18.1.9-(37:Linux NFSv4.0 client1)"};
  EXPECT_EQ(*listed, want);
  // Over the interconnect and back.
  auto msg = cluster::DecodeRecovery(cluster::EncodeRecovery({Uuid::Random(), *listed}));
  ASSERT_TRUE(msg.has_value());
  ASSERT_TRUE(WritePartnerRecovery(root_.string(), msg->entries).ok());
  auto theirs = ListRecovery((root_ / kPartnerRecoveryKey).string());
  ASSERT_TRUE(theirs.ok());
  EXPECT_EQ(*theirs, want);
  // A client gone there is gone here; a new one appears.
  ASSERT_TRUE(WritePartnerRecovery(root_.string(), {"198.18.1.11-(5:other)"}).ok());
  theirs = ListRecovery((root_ / kPartnerRecoveryKey).string());
  EXPECT_EQ(*theirs, std::vector<std::string>{"198.18.1.11-(5:other)"});
  // Our own records are untouched by the partner's.
  EXPECT_EQ(*ListRecovery(root_.string()), want);
  EXPECT_EQ(CountRecoveryClients(want), 1u) << "the files are what ganesha keeps in a record";
  EXPECT_EQ(CountRecoveryClients({"a/", "a/b/", "c/", "c/x"}), 2u);
  // No directory: no records.
  EXPECT_TRUE(ListRecovery((root_ / "nowhere").string())->empty());
  // A clustered ganesha (its default) keeps them under v4recov/node0.
  fsys::remove_all(root_ / "v4recov");
  Touch(root_ / "v4recov" / "node0" / "198.18.1.12-(5:third)");
  EXPECT_EQ(*ListRecovery(root_.string()), std::vector<std::string>{"198.18.1.12-(5:third)"});
}

// Paths from the wire are checked: nothing is written outside the
// directory.
TEST_F(NfsRecoveryTest, PathsOutsideTheDirectoryAreRefused) {
  for (const std::string& bad :
       std::vector<std::string>{"", "/etc/passwd", "..", "a/../../x", "a//b", "./a", std::string(256, 'x')}) {
    EXPECT_FALSE(cluster::RecoveryPathOk(bad)) << bad;
    EXPECT_FALSE(WritePartnerRecovery(root_.string(), {bad}).ok()) << bad;
  }
  EXPECT_TRUE(cluster::RecoveryPathOk("dir/"));
  EXPECT_TRUE(cluster::RecoveryPathOk("a b:(c)"));
  // A damaged message is refused whole.
  std::string bytes = cluster::EncodeRecovery({Uuid::Random(), {"ok", "fine"}, {}});
  // The last record's last two bytes (then the count of NLM clients, 0).
  bytes[bytes.size() - 6] = '.';
  bytes[bytes.size() - 5] = '.';
  auto d = cluster::DecodeRecovery(bytes);
  ASSERT_TRUE(d.has_value()) << "\"fi..\" is a name";
  bytes = cluster::EncodeRecovery({Uuid::Random(), {"ok", ".."}});
  EXPECT_FALSE(cluster::DecodeRecovery(bytes).has_value());
  EXPECT_FALSE(cluster::DecodeRecovery(bytes.substr(0, bytes.size() - 1)).has_value());
}

// Without a bus (or a ganesha on it) the grace call fails with a clear
// error, in bounded time.
TEST_F(NfsRecoveryTest, TheGraceCallFailsClearlyWithoutGanesha) {
  const auto t0 = std::chrono::steady_clock::now();
  Status s = StartTakeoverGrace("unix:path=" + (root_ / "no-bus").string(), 2000);
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.ToString().find("grace"), std::string::npos) << s.ToString();
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(5));
}

}  // namespace
}  // namespace nasgw::daemon
