#include "cluster/mirror.h"

#include <poll.h>
#include <unistd.h>

#include <atomic>
#include <thread>

#include <gtest/gtest.h>

#include "base/sockaddr.h"
#include "block/mem_device.h"
#include "fs/testing/holding_device.h"

#include <sys/socket.h>

namespace nasgw::cluster {
namespace {

constexpr uint64_t kMiB = 1 << 20;

// An owner's intent log on memory LUNs whose writes the test can hold (the
// owner dies before its records reach the array), and a partner's
// MirrorServer on loopback.
class MirrorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    lun_ = std::make_shared<block::MemLun>(512, 64 * kMiB / 512, "mem.0");
    extents_ = {{0, 1 * kMiB, 8 * kMiB}};
    ASSERT_TRUE(fs::IntentLog::Format(Devices(), extents_, kSalt).ok());
    auto s = MirrorServer::Start("127.0.0.1:0", "127.0.0.1:1");
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    server_ = std::move(s.value());
    peer_ = "127.0.0.1:" + std::to_string(server_->port());
  }
  void TearDown() override {
    if (held_) held_->ReleaseAll();
  }

  fs::IntentLog::DeviceFn Devices() {
    return [this](uint32_t) -> std::shared_ptr<block::BlockDevice> {
      if (!dev_) {
        dev_ = std::make_shared<block::MemDevice>(lun_);
        held_ = std::make_shared<fs::testing::HoldingDevice>(dev_);
      }
      return held_;
    };
  }
  // A new node over the same LUN.
  void Attach() {
    if (held_) held_->ReleaseAll();
    dev_.reset();
    held_.reset();
  }

  std::unique_ptr<fs::IntentLog> OpenLog(std::vector<std::pair<uint64_t, std::string>>* replayed,
                                         std::shared_ptr<const fs::LogTail> tail = nullptr) {
    fs::IntentLogOptions o;
    o.tail = std::move(tail);
    auto log = fs::IntentLog::Open(
        Devices(), extents_, kSalt,
        [replayed](uint64_t lsn, std::string_view e) {
          if (replayed) replayed->emplace_back(lsn, std::string(e));
          return Status();
        },
        o);
    EXPECT_TRUE(log.ok()) << log.status().ToString();
    return log.ok() ? std::move(log.value()) : nullptr;
  }

  // The owner dies: the records it holds never reach the array. Then a new
  // node over the same LUN.
  void OwnerDies(MirrorStream& stream, std::unique_ptr<fs::IntentLog>& log) {
    dev_->SetFault(
        [](const block::IoRequest& r) { return r.op == block::Op::kRead ? Status() : Status::IoError("owner died"); });
    held_->ReleaseAll();
    stream.Close();
    log.reset();
    Attach();
  }

  // The owner's stream, attached to `log`.
  std::shared_ptr<MirrorStream> Mirror(fs::IntentLog& log) {
    auto s = MirrorStream::Connect(peer_);
    EXPECT_TRUE(s.ok()) << s.status().ToString();
    if (!s.ok()) return nullptr;
    std::shared_ptr<MirrorStream> stream = *s;
    MirrorHello h;
    h.reserve = reserve_;
    h.salt = log.salt();
    h.session = log.session();
    auto acks = log.AttachMirror(stream, &h.first_lsn);
    h.sender = "a";
    stream->Start(h, std::move(acks));
    return stream;
  }

  static std::string Entry(uint64_t i) {
    std::string s = "entry-" + std::to_string(i) + "-";
    s.resize(100 + (i * 7919) % 60000, static_cast<char>('a' + i % 26));
    return s;
  }

  static constexpr uint64_t kSalt = 0x5eed;
  Uuid reserve_ = Uuid::Random();
  std::shared_ptr<block::MemLun> lun_;
  std::shared_ptr<block::MemDevice> dev_;
  std::shared_ptr<fs::testing::HoldingDevice> held_;
  std::vector<fs::Extent> extents_;
  std::unique_ptr<MirrorServer> server_;
  std::string peer_;
};

// The owner's answers come from the partner's memory while the array has
// none of the records; the owner dies; the partner freezes the stream and
// opens the log with what it holds: every answered entry, in order.
TEST_F(MirrorTest, AnswersComeFromThePartnerAndItsTailHasThemAllAfterTheOwnerDies) {
  auto log = OpenLog(nullptr);
  ASSERT_TRUE(log);
  auto stream = Mirror(*log);
  ASSERT_TRUE(stream);
  held_->Hold();
  constexpr int kThreads = 3, kEach = 20;
  std::atomic<int> answered{0};
  std::vector<std::thread> ts;
  std::mutex appended_mu;
  std::map<uint64_t, std::string> appended;
  ts.reserve(kThreads);
  for (int t = 0; t < kThreads; t++) {
    ts.emplace_back([&, t] {
      for (int i = 0; i < kEach; i++) {
        const std::string e = Entry(static_cast<uint64_t>(t) * 1000 + static_cast<uint64_t>(i));
        ASSERT_TRUE(log->Reserve(e.size()).ok());
        uint64_t lsn = 0;
        {
          std::lock_guard g(appended_mu);
          lsn = log->Append(e);
          appended[lsn] = e;
        }
        ASSERT_TRUE(log->WaitAcknowledged(lsn).ok());
        answered++;
      }
    });
  }
  for (auto& t : ts) t.join();
  ASSERT_EQ(answered.load(), kThreads * kEach);
  EXPECT_EQ(log->durable_lsn(), 0u) << "the array had records: the test did not show the mirror answering";
  EXPECT_GE(log->Stats().mirror_acks, static_cast<uint64_t>(kThreads * kEach));
  auto held = server_->held();
  ASSERT_EQ(held.size(), 1u);
  EXPECT_EQ(held[0].entries, appended.size());
  EXPECT_TRUE(held[0].connected);
  EXPECT_EQ(held[0].sender, "a");

  // The partner takes over: it stops taking the stream first.
  auto frozen = server_->Freeze(reserve_, 0);
  EXPECT_TRUE(frozen.streamed);
  auto tail = frozen.tail;
  ASSERT_TRUE(tail);
  EXPECT_TRUE(stream->WaitBroken(5000)) << "the frozen stream was not closed";
  EXPECT_TRUE(server_->held()[0].frozen);
  // The owner dies: its held records fail.
  OwnerDies(*stream, log);
  std::vector<std::pair<uint64_t, std::string>> replayed;
  auto taken = OpenLog(&replayed, tail);
  ASSERT_TRUE(taken);
  ASSERT_EQ(replayed.size(), appended.size());
  for (const auto& [lsn, e] : replayed) EXPECT_EQ(appended.at(lsn), e) << "entry " << lsn;
  EXPECT_EQ(taken->Stats().tail_replayed, appended.size());
  server_->Drop(reserve_, 0);
  EXPECT_EQ(server_->held()[0].entries, 0u);
  // It serves the domain now: the old owner, fenced but not knowing it yet,
  // gets nothing answered here.
  EXPECT_TRUE(server_->held()[0].frozen);
  EXPECT_FALSE(server_->Freeze(reserve_, 0).streamed);
  auto late = Mirror(*taken);
  ASSERT_TRUE(late);
  ASSERT_TRUE(taken->Reserve(4).ok());
  ASSERT_TRUE(taken->WaitAcknowledged(taken->Append("late")).ok());
  EXPECT_TRUE(late->WaitBroken(5000));
  EXPECT_EQ(taken->Stats().mirror_acks, 0u);
  late->Close();
}

// A frozen domain refuses a new stream (an owner that was fenced must not
// have anything more answered by the partner that fenced it).
TEST_F(MirrorTest, AFrozenDomainRefusesTheOwnersStream) {
  auto log = OpenLog(nullptr);
  ASSERT_TRUE(log);
  server_->Freeze(reserve_, 0);
  auto stream = Mirror(*log);
  ASSERT_TRUE(stream);
  ASSERT_TRUE(log->Reserve(10).ok());
  const uint64_t lsn = log->Append("0123456789");
  ASSERT_TRUE(stream->WaitBroken(5000));
  EXPECT_NE(stream->stats().why.find("taking the domain over"), std::string::npos) << stream->stats().why;
  // Answered by the array alone.
  ASSERT_TRUE(log->WaitAcknowledged(lsn).ok());
  EXPECT_EQ(log->Stats().mirror_acks, 0u);
  EXPECT_EQ(server_->held()[0].entries, 0u);
  stream->Close();
  server_->Unfreeze(reserve_, 0);
  EXPECT_FALSE(server_->held()[0].frozen);
}

// The partner lets go of what the owner reports on the array; an owner that
// restarts fetches what is held; a new opening of the log starts afresh.
TEST_F(MirrorTest, ThePartnerHoldsOnlyWhatTheArrayLacksAndAFetchGetsIt) {
  auto log = OpenLog(nullptr);
  ASSERT_TRUE(log);
  auto stream = Mirror(*log);
  ASSERT_TRUE(stream);
  for (uint64_t i = 1; i <= 10; i++) {
    ASSERT_TRUE(log->Reserve(Entry(i).size()).ok());
    ASSERT_TRUE(log->WaitDurable(log->Append(Entry(i))).ok());
  }
  // Released once the owner says the array has them (its idle report).
  // (An entry can arrive already released, so wait for all ten to arrive.)
  EXPECT_TRUE(server_->WaitHeld([](const auto& h) { return h.size() == 1 && h[0].received == 10 && h[0].entries == 0; },
                                10'000))
      << server_->held()[0].entries << " entries still held, " << server_->held()[0].received << " received";
  auto none = FetchMirror(peer_, reserve_, 0);
  ASSERT_TRUE(none.ok()) << none.status().ToString();
  EXPECT_EQ(*none, nullptr);
  // Two entries the array does not get.
  held_->Hold();
  for (uint64_t i = 11; i <= 12; i++) {
    ASSERT_TRUE(log->Reserve(Entry(i).size()).ok());
    ASSERT_TRUE(log->WaitAcknowledged(log->Append(Entry(i))).ok());
  }
  auto fetched = FetchMirror(peer_, reserve_, 0);
  ASSERT_TRUE(fetched.ok()) << fetched.status().ToString();
  ASSERT_TRUE(*fetched);
  ASSERT_EQ((*fetched)->entries.size(), 2u);
  EXPECT_EQ((*fetched)->entries[0], (std::pair<uint64_t, std::string>{11, Entry(11)}));
  EXPECT_EQ((*fetched)->session, log->session());
  // The owner restarts with them.
  OwnerDies(*stream, log);
  std::vector<std::pair<uint64_t, std::string>> replayed;
  log = OpenLog(&replayed, *fetched);
  ASSERT_TRUE(log);
  ASSERT_EQ(replayed.size(), 12u);
  EXPECT_EQ(replayed.back().second, Entry(12));
  // Its new stream replaces the old opening's entries.
  auto again = Mirror(*log);
  ASSERT_TRUE(again);
  ASSERT_TRUE(log->Reserve(5).ok());
  ASSERT_TRUE(log->WaitAcknowledged(log->Append("fresh")).ok());
  const uint64_t session = log->session();
  EXPECT_TRUE(server_->WaitHeld([&](const auto& h) { return h[0].session == session && h[0].entries <= 1; }, 10'000));
  again->Close();
}

// Connections that never say hello (a partner whose machine died in the
// handshake) are closed after the hello timeout: they do not take the few
// connections the partner's stream and fetches need for ever.
TEST_F(MirrorTest, ConnectionsWithoutAHelloAreClosed) {
  auto s = MirrorServer::Start("127.0.0.1:0", "127.0.0.1:1", /*hello_timeout_ms=*/300);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  const std::string peer = "127.0.0.1:" + std::to_string((*s)->port());
  std::vector<int> silent;
  for (int i = 0; i < MirrorServer::kConnectionsMax; i++) {
    auto fd = DialTcp(peer, 5000, 5000, "test");
    ASSERT_TRUE(fd.ok()) << fd.status().ToString();
    silent.push_back(*fd);
  }
  // Each is closed by the server (EOF here), without a word from us.
  for (int fd : silent) {
    pollfd p{fd, POLLIN, 0};
    ASSERT_EQ(::poll(&p, 1, 10'000), 1) << "the server still holds a silent connection";
    char b = 0;
    EXPECT_LE(::recv(fd, &b, 1, 0), 0);
    ::close(fd);
  }
  auto fetched = FetchMirror(peer, reserve_, 0);
  EXPECT_TRUE(fetched.ok()) << fetched.status().ToString();
}

// Only the configured partner may connect.
TEST_F(MirrorTest, OnlyThePartnerMayConnect) {
  auto s = MirrorServer::Start("127.0.0.1:0", "127.0.0.2:1");
  ASSERT_TRUE(s.ok());
  auto stranger = FetchMirror("127.0.0.1:" + std::to_string((*s)->port()), reserve_, 0);
  EXPECT_FALSE(stranger.ok());
  EXPECT_TRUE((*s)->held().empty());
  auto bad = MirrorServer::Start("127.0.0.1:http", "127.0.0.2:1");
  EXPECT_EQ(bad.status().code(), Code::kInvalidArgument);
}

}  // namespace
}  // namespace nasgw::cluster
