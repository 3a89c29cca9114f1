#include "daemon/nlm_notify.h"

#include <poll.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <thread>

#include <gtest/gtest.h>

#include "cluster/message.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

namespace nasgw::daemon {
namespace {

namespace fsys = std::filesystem;

uint32_t Word(std::string_view s, size_t at) {
  const auto* b = reinterpret_cast<const unsigned char*>(s.data() + at);
  return static_cast<uint32_t>(b[0]) << 24 | static_cast<uint32_t>(b[1]) << 16 | static_cast<uint32_t>(b[2]) << 8 |
         b[3];
}

TEST(NlmWireTest, CallsAndRepliesAreOncRpcOverXdr) {
  const std::string args = rpc::NotifyArgs("198.18.2.10", 7);
  ASSERT_EQ(args.size(), 4u + 12 + 4) << "the name padded to four bytes, then the state";
  EXPECT_EQ(Word(args, 0), 11u);
  EXPECT_EQ(args.substr(4, 11), "198.18.2.10");
  EXPECT_EQ(args[15], '\0');
  EXPECT_EQ(Word(args, 16), 7u);
  const std::string call = rpc::Call(0x1234, rpc::kNsmProg, rpc::kNsmVers, rpc::kNsmNotify, args);
  auto c = rpc::ParseCall(call);
  ASSERT_TRUE(c.has_value());
  EXPECT_EQ(c->xid, 0x1234u);
  EXPECT_EQ(c->prog, 100024u);
  EXPECT_EQ(c->vers, 1u);
  EXPECT_EQ(c->proc, 6u);
  EXPECT_EQ(c->args, args);
  EXPECT_FALSE(rpc::ParseReply(call).has_value()) << "a call is no reply";
  EXPECT_FALSE(rpc::ParseCall(call.substr(0, 30)).has_value()) << "cut short";

  auto r = rpc::ParseReply(rpc::SuccessReply(9, rpc::GetportArgs(1, 2, 3)));
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->xid, 9u);
  EXPECT_TRUE(r->success);
  EXPECT_EQ(r->results, rpc::GetportArgs(1, 2, 3));
  const std::string reply = rpc::SuccessReply(9, "");
  EXPECT_FALSE(rpc::ParseReply(reply.substr(0, reply.size() - 1)).has_value());
  // MSG_DENIED (RPC_MISMATCH): a reply, not a success.
  std::string denied = reply.substr(0, 8) + std::string("\0\0\0\1\0\0\0\0\0\0\0\2\0\0\0\2", 16);
  r = rpc::ParseReply(denied);
  ASSERT_TRUE(r.has_value());
  EXPECT_FALSE(r->success);
  EXPECT_EQ(NsmStateNow() % 2, 1u) << "odd: up";
}

// A client machine's portmapper and statd, on loopback: answers GETPORT
// for NSM with its statd socket's port (after ignoring the first
// `drop_getports`), and records each SM_NOTIFY.
class FakeClient {
 public:
  explicit FakeClient(int drop_getports) : drop_(drop_getports) {
    pmap_ = Bind();
    statd_ = Bind();
    thread_ = std::thread([this] { Run(); });
  }
  ~FakeClient() {
    stop_ = true;
    thread_.join();
    ::close(pmap_);
    ::close(statd_);
  }
  uint16_t pmap_port() const { return Port(pmap_); }
  std::vector<std::pair<std::string, uint32_t>> notified() {
    std::lock_guard<std::mutex> l(mu_);
    return notified_;
  }
  int getports() const { return getports_; }
  uint16_t notify_source_port() {
    std::lock_guard<std::mutex> l(mu_);
    return source_port_;
  }

 private:
  static int Bind() {
    const int fd = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    sockaddr_in sa{};
    sa.sin_family = AF_INET;
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    EXPECT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&sa), sizeof(sa)), 0);
    return fd;
  }
  static uint16_t Port(int fd) {
    sockaddr_in sa{};
    socklen_t len = sizeof(sa);
    ::getsockname(fd, reinterpret_cast<sockaddr*>(&sa), &len);
    return ntohs(sa.sin_port);
  }
  void Run() {
    pollfd p[2] = {{pmap_, POLLIN, 0}, {statd_, POLLIN, 0}};
    while (!stop_) {
      if (::poll(p, 2, 20) <= 0) continue;
      for (auto& pf : p) {
        if ((pf.revents & POLLIN) == 0) continue;
        char buf[1024];
        sockaddr_in from{};
        socklen_t len = sizeof(from);
        const ssize_t n = ::recvfrom(pf.fd, buf, sizeof(buf), 0, reinterpret_cast<sockaddr*>(&from), &len);
        auto call = rpc::ParseCall(std::string_view(buf, static_cast<size_t>(n)));
        if (!call) continue;
        std::string results;
        if (pf.fd == pmap_) {
          if (call->prog != rpc::kPmapProg || call->proc != rpc::kPmapGetport ||
              call->args != rpc::GetportArgs(rpc::kNsmProg, rpc::kNsmVers, rpc::kIpprotoUdp)) {
            continue;
          }
          if (getports_++ < drop_) continue;
          results = rpc::GetportArgs(Port(statd_), 0, 0).substr(0, 4);
        } else {
          if (call->prog != rpc::kNsmProg || call->proc != rpc::kNsmNotify) continue;
          const uint32_t len_name = Word(call->args, 0);
          std::lock_guard<std::mutex> l(mu_);
          notified_.emplace_back(call->args.substr(4, len_name), Word(call->args, 4 + ((len_name + 3) & ~3u)));
          source_port_ = ntohs(from.sin_port);
        }
        const std::string reply = rpc::SuccessReply(call->xid, results);
        ::sendto(pf.fd, reply.data(), reply.size(), 0, reinterpret_cast<sockaddr*>(&from), len);
      }
    }
  }
  int pmap_ = -1, statd_ = -1;
  const int drop_;
  std::atomic<int> getports_{0};
  std::atomic<bool> stop_{false};
  std::mutex mu_;
  std::vector<std::pair<std::string, uint32_t>> notified_;
  uint16_t source_port_ = 0;
  std::thread thread_;
};

// Each client is told, from each moved address, that the server of that
// name came back with a new state; a lost GETPORT answer is asked again.
TEST(NlmNotifyTest, EachClientIsNotifiedFromEachMovedAddress) {
  FakeClient client(/*drop_getports=*/1);
  const uint32_t lo = INADDR_LOOPBACK;
  const uint32_t lo2 = INADDR_LOOPBACK + 1;  // 127.0.0.2: loopback's too
  auto r = NotifyNlmClients({"127.0.0.1", "client.example"}, {lo, lo2}, 4243, 10'000, client.pmap_port());
  EXPECT_EQ(r.notified, 2u);
  EXPECT_EQ(r.unreachable, 0u);
  EXPECT_EQ(r.skipped, 1u) << "a name that is no address is not resolved";
  auto got = client.notified();
  ASSERT_EQ(got.size(), 2u);
  std::sort(got.begin(), got.end());
  EXPECT_EQ(got[0], std::make_pair(std::string("127.0.0.1"), 4243u));
  EXPECT_EQ(got[1], std::make_pair(std::string("127.0.0.2"), 4243u));
  EXPECT_GE(client.getports(), 3) << "the first GETPORT went unanswered and was sent again";
  if (::geteuid() == 0) {
    EXPECT_LT(client.notify_source_port(), 1024) << "from a reserved port";
  }
}

// A client that never answers is given up at the deadline, counted; it
// does not hold up the others.
TEST(NlmNotifyTest, AnUnansweringClientIsGivenUpAtTheDeadline) {
  FakeClient client(/*drop_getports=*/1000);
  const auto t0 = std::chrono::steady_clock::now();
  auto r = NotifyNlmClients({"127.0.0.1"}, {INADDR_LOOPBACK}, 5, 1500, client.pmap_port());
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - t0);
  EXPECT_EQ(r.notified, 0u);
  EXPECT_EQ(r.unreachable, 1u);
  EXPECT_GE(ms.count(), 1400);
  EXPECT_LT(ms.count(), 5000);
  EXPECT_GE(client.getports(), 2) << "retransmitted";
  // Stopped (nasgwd shutting down): at once, whatever the deadline.
  std::atomic<bool> stop{true};
  const auto t1 = std::chrono::steady_clock::now();
  r = NotifyNlmClients({"127.0.0.1"}, {INADDR_LOOPBACK}, 5, 60'000, client.pmap_port(), &stop);
  EXPECT_EQ(r.unreachable, 1u);
  EXPECT_LT(std::chrono::steady_clock::now() - t1, std::chrono::seconds(5));
  // From an address this machine does not have: nothing sent, counted.
  r = NotifyNlmClients({"127.0.0.1"}, {0xC6120263u /* 198.18.2.99 */}, 5, 1000, client.pmap_port());
  EXPECT_EQ(r.unreachable, 1u);
  EXPECT_EQ(r.notified, 0u);
}

TEST(NlmNotifyTest, StatdsRecordsAreItsClients) {
  const fsys::path dir = fsys::temp_directory_path() / ("nasgw-statd-" + std::to_string(::getpid()));
  fsys::remove_all(dir);
  EXPECT_TRUE(ListStatdClients(dir.string())->empty()) << "no directory: no clients";
  fsys::create_directories(dir / "sm" / "subdir");
  for (const char* n : {"198.18.2.30", "198.18.2.31", "client.example"}) {
    std::ofstream(dir / "sm" / n) << "0100007f 000186a5 00000004 00000010 0 " << n << " node\n";
  }
  fsys::create_symlink("/etc/passwd", dir / "sm" / "198.18.2.32");
  bool truncated = true;
  auto got = ListStatdClients(dir.string(), &truncated);
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(*got, (std::vector<std::string>{"198.18.2.30", "198.18.2.31", "client.example"}))
      << "regular files only: not a directory, not a symlink";
  EXPECT_FALSE(truncated);
  fsys::remove_all(dir);

  EXPECT_TRUE(cluster::NlmClientOk("198.18.2.30"));
  for (const char* bad : {"", ".", "..", "a/b", "a\nb"}) EXPECT_FALSE(cluster::NlmClientOk(bad)) << bad;
  EXPECT_FALSE(cluster::NlmClientOk(std::string(256, 'a')));
}

// The list travels in the recovery message, after the NFSv4 records; a
// message without it (from before it) decodes as one with none.
TEST(NlmNotifyTest, TheClientsTravelWithTheRecords) {
  cluster::Recovery r{Uuid::Random(), {"a/", "a/b"}, {"198.18.2.30", "198.18.2.31"}};
  auto back = cluster::DecodeRecovery(cluster::EncodeRecovery(r));
  ASSERT_TRUE(back.has_value());
  EXPECT_EQ(*back, r);
  cluster::Recovery old{r.from, r.entries, {}};
  std::string bytes = cluster::EncodeRecovery(old);
  bytes.resize(bytes.size() - 4);  // no count of NLM clients at all
  back = cluster::DecodeRecovery(bytes);
  ASSERT_TRUE(back.has_value());
  EXPECT_EQ(*back, old);
  r.nlm_clients.emplace_back("../x");
  EXPECT_FALSE(cluster::DecodeRecovery(cluster::EncodeRecovery(r)).has_value());
  r.nlm_clients.pop_back();
  back = cluster::DecodeRecovery(cluster::EncodeRecovery(r) + "a newer field");
  ASSERT_TRUE(back.has_value()) << "what a newer version appends is ignored";
  EXPECT_EQ(back->nlm_clients, r.nlm_clients);
}

// What a node keeps of its partner's NLM clients between restarts: the
// names back, in order, once each; what is not a client's name is left
// out; a file that is not such a list is refused, not read as one.
TEST(NlmNotifyTest, TheKeptListReadsBackAndRefusesWhatIsNotOne) {
  const std::vector<std::string> names{"198.18.2.31", "198.18.2.30", "client.example"};
  const std::string text = EncodePartnerNlm(names);
  EXPECT_EQ(text.rfind(std::string(kPartnerNlmHeader) + "\n", 0), 0u) << text;
  auto back = DecodePartnerNlm(text);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(*back, (std::vector<std::string>{"198.18.2.30", "198.18.2.31", "client.example"}));
  EXPECT_TRUE(DecodePartnerNlm(EncodePartnerNlm({}))->empty());
  // Lines that name no client, a repeat, no final newline.
  back = DecodePartnerNlm(std::string(kPartnerNlmHeader) + "\n..\n\na/b\n198.18.2.30\n198.18.2.30\nlast");
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(*back, (std::vector<std::string>{"198.18.2.30", "last"}));
  EXPECT_EQ(EncodePartnerNlm({"ok", "a/b", ".."}), std::string(kPartnerNlmHeader) + "\nok\n");
  for (const std::string& bad : {std::string(), std::string("198.18.2.30\n"), std::string(kPartnerNlmHeader),
                                 std::string(kPartnerNlmHeader) + "0\nx\n"}) {
    auto r = DecodePartnerNlm(bad);
    EXPECT_FALSE(r.ok()) << bad;
    EXPECT_EQ(r.status().code(), Code::kCorruption) << bad;
  }
  // At most as many as a message carries.
  std::string many = std::string(kPartnerNlmHeader) + "\n";
  for (size_t i = 0; i < cluster::kNlmClientsMax + 10; i++) many += "c" + std::to_string(i) + "\n";
  EXPECT_EQ(DecodePartnerNlm(many)->size(), cluster::kNlmClientsMax);
}

}  // namespace
}  // namespace nasgw::daemon
