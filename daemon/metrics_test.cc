#include "daemon/metrics.h"

#include <unistd.h>

#include <chrono>
#include <cstring>
#include <map>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

namespace nasgw::daemon {
namespace {

// ---- rendering --------------------------------------------------------------

TEST(Metrics, EmptyRegistryRendersNothing) {
  Metrics m;
  EXPECT_EQ(m.Render(), "");
}

TEST(Metrics, RendersExactText) {
  Metrics m;
  Counter* reads =
      m.Counter("nasgw_volume_ops_total", "Operations by volume and type.", {{"volume", "v1"}, {"op", "read"}});
  Counter* writes =
      m.Counter("nasgw_volume_ops_total", "Operations by volume and type.", {{"op", "write"}, {"volume", "v1"}});
  Gauge* load = m.Gauge("nasgw_load_ratio", "A double gauge.");
  IntGauge* conns = m.IntGauge("nasgw_head_connections", "Open head connections.");
  Counter* starts = m.Counter("nasgw_a_starts_total", "Starts.");
  reads->Inc();
  reads->Inc(41);
  writes->Inc(7);
  load->Set(0.25);
  load->Add(1.5);
  conns->Set(3);
  conns->Dec();
  conns->Add(10);
  (void)starts;
  EXPECT_EQ(reads->Value(), 42u);
  EXPECT_EQ(conns->Value(), 12);
  EXPECT_EQ(m.Render(),
            "# HELP nasgw_a_starts_total Starts.\n"
            "# TYPE nasgw_a_starts_total counter\n"
            "nasgw_a_starts_total 0\n"
            "# HELP nasgw_head_connections Open head connections.\n"
            "# TYPE nasgw_head_connections gauge\n"
            "nasgw_head_connections 12\n"
            "# HELP nasgw_load_ratio A double gauge.\n"
            "# TYPE nasgw_load_ratio gauge\n"
            "nasgw_load_ratio 1.75\n"
            "# HELP nasgw_volume_ops_total Operations by volume and type.\n"
            "# TYPE nasgw_volume_ops_total counter\n"
            "nasgw_volume_ops_total{op=\"read\",volume=\"v1\"} 42\n"
            "nasgw_volume_ops_total{op=\"write\",volume=\"v1\"} 7\n");
}

TEST(Metrics, SameNameAndLabelsIsTheSameChild) {
  Metrics m;
  Counter* a = m.Counter("x_total", "X.", {{"a", "1"}, {"b", "2"}});
  Counter* b = m.Counter("x_total", "X.", {{"b", "2"}, {"a", "1"}});
  Counter* c = m.Counter("x_total", "X.", {{"a", "1"}, {"b", "3"}});
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);
  EXPECT_EQ(m.Histogram("h_seconds", "H."), m.Histogram("h_seconds", "H."));
}

TEST(Metrics, SpecialDoubles) {
  Metrics m;
  m.Gauge("g", "G.", {{"v", "nan"}})->Set(std::numeric_limits<double>::quiet_NaN());
  m.Gauge("g", "G.", {{"v", "pinf"}})->Set(std::numeric_limits<double>::infinity());
  m.Gauge("g", "G.", {{"v", "ninf"}})->Set(-std::numeric_limits<double>::infinity());
  m.Gauge("g", "G.", {{"v", "big"}})->Set(1e300);
  m.Gauge("g", "G.", {{"v", "neg"}})->Set(-2.5);
  EXPECT_EQ(m.Render(),
            "# HELP g G.\n# TYPE g gauge\n"
            "g{v=\"big\"} 1e+300\n"
            "g{v=\"nan\"} NaN\n"
            "g{v=\"neg\"} -2.5\n"
            "g{v=\"ninf\"} -Inf\n"
            "g{v=\"pinf\"} +Inf\n");
}

TEST(Metrics, Escaping) {
  Metrics m;
  m.Counter("esc_total", "Help with a \\ backslash,\na newline and \"quotes\".", {{"path", "C:\\dir\\\"name\"\nnext"}})
      ->Inc();
  // Invalid UTF-8 in a value (a lone continuation byte, a truncated sequence,
  // an overlong encoding) becomes U+FFFD; valid multi-byte text is kept.
  m.Counter("utf_total", "U.", {{"v", std::string("ok\xC3\xA9|\x80|\xE2\x82|\xC0\xAF|\xF0\x9F\x98\x80")}})->Inc();
  EXPECT_EQ(m.Render(),
            "# HELP esc_total Help with a \\\\ backslash,\\na newline and \"quotes\".\n"
            "# TYPE esc_total counter\n"
            "esc_total{path=\"C:\\\\dir\\\\\\\"name\\\"\\nnext\"} 1\n"
            "# HELP utf_total U.\n"
            "# TYPE utf_total counter\n"
            "utf_total{v=\"ok\xC3\xA9|\xEF\xBF\xBD|\xEF\xBF\xBD\xEF\xBF\xBD|\xEF\xBF\xBD\xEF\xBF\xBD|"
            "\xF0\x9F\x98\x80\"} 1\n");
}

TEST(Metrics, HistogramCumulativeBucketsSumAndCount) {
  Metrics m;
  LatencyHistogram* h = m.Histogram("nasgw_op_seconds", "Op latency.", {{"op", "read"}});
  m.Histogram("nasgw_op_seconds", "Op latency.", {{"op", "write"}});  // empty: all zero
  for (uint64_t ns : {10'000ull, 40'000ull, 60'000ull, 3'000'000ull, 20'000'000'000ull}) h->Record(ns);
  const std::string read_buckets[] = {"0.00005", "0.0001", "0.00025", "0.0005", "0.001", "0.0025",
                                      "0.005",   "0.01",   "0.025",   "0.05",   "0.1",   "0.25",
                                      "0.5",     "1",      "2.5",     "5",      "10"};
  const int read_counts[] = {2, 3, 3, 3, 3, 3, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4};
  std::string want = "# HELP nasgw_op_seconds Op latency.\n# TYPE nasgw_op_seconds histogram\n";
  for (size_t i = 0; i < std::size(read_buckets); i++) {
    want +=
        "nasgw_op_seconds_bucket{op=\"read\",le=\"" + read_buckets[i] + "\"} " + std::to_string(read_counts[i]) + "\n";
  }
  want +=
      "nasgw_op_seconds_bucket{op=\"read\",le=\"+Inf\"} 5\n"
      "nasgw_op_seconds_sum{op=\"read\"} 20.00311\n"
      "nasgw_op_seconds_count{op=\"read\"} 5\n";
  for (const auto& b : read_buckets) want += "nasgw_op_seconds_bucket{op=\"write\",le=\"" + b + "\"} 0\n";
  want +=
      "nasgw_op_seconds_bucket{op=\"write\",le=\"+Inf\"} 0\n"
      "nasgw_op_seconds_sum{op=\"write\"} 0\n"
      "nasgw_op_seconds_count{op=\"write\"} 0\n";
  EXPECT_EQ(m.Render(), want);
}

// The documented error: a sample is never counted under a bound it exceeds,
// and always under a bound it is more than 1/16 below.
TEST(Metrics, HistogramBucketErrorWithinOneSixteenth) {
  std::mt19937_64 rng(3);
  std::vector<uint64_t> values;
  Metrics m;
  LatencyHistogram* h = m.Histogram("lat_seconds", "L.");
  for (int i = 0; i < 20000; i++) {
    const uint64_t v = 1'000 + rng() % (20'000'000'000ull >> (rng() % 20));
    values.push_back(v);
    h->Record(v);
  }
  const std::string text = m.Render();
  size_t bounds_checked = 0;
  for (const char* bound : kLatencyBucketBoundsSeconds) {
    const std::string key = std::string("lat_seconds_bucket{le=\"") + bound + "\"} ";
    const size_t at = text.find(key);
    ASSERT_NE(at, std::string::npos) << bound;
    const uint64_t got = std::stoull(text.substr(at + key.size()));
    const double bound_ns = std::stod(bound) * 1e9;
    uint64_t at_most = 0, at_least = 0;
    for (uint64_t v : values) {
      if (static_cast<double>(v) <= bound_ns) at_most++;
      if (static_cast<double>(v) <= bound_ns * (1 - 1.0 / 16)) at_least++;
    }
    EXPECT_LE(got, at_most) << bound;
    EXPECT_GE(got, at_least) << bound;
    bounds_checked++;
  }
  EXPECT_EQ(bounds_checked, 17u);
}

TEST(Metrics, CollectorsAreGroupedWithOneHelpAndType) {
  Metrics m;
  m.Counter("nasgw_lun_reads_total", "Reads per LUN.", {{"lun", "0"}})->Inc(5);
  m.AddCollector([](Metrics::Sink& s) {
    s.Counter("nasgw_lun_reads_total", "Reads per LUN.", {{"lun", "2"}}, 20);
    s.Gauge("nasgw_lun_up", "1 when a path to the LUN is up.", {{"lun", "1"}}, 1);
    s.Counter("nasgw_lun_reads_total", "Reads per LUN.", {{"lun", "1"}}, 10);
  });
  m.AddCollector([](Metrics::Sink& s) {
    s.Gauge("nasgw_lun_up", "1 when a path to the LUN is up.", {{"lun", "0"}}, 0);
    s.Gauge("nasgw_free_bytes", "Free space.", {}, 1099511627776.0);
  });
  const std::string want =
      "# HELP nasgw_free_bytes Free space.\n"
      "# TYPE nasgw_free_bytes gauge\n"
      "nasgw_free_bytes 1099511627776\n"
      "# HELP nasgw_lun_reads_total Reads per LUN.\n"
      "# TYPE nasgw_lun_reads_total counter\n"
      "nasgw_lun_reads_total{lun=\"0\"} 5\n"
      "nasgw_lun_reads_total{lun=\"1\"} 10\n"
      "nasgw_lun_reads_total{lun=\"2\"} 20\n"
      "# HELP nasgw_lun_up 1 when a path to the LUN is up.\n"
      "# TYPE nasgw_lun_up gauge\n"
      "nasgw_lun_up{lun=\"0\"} 0\n"
      "nasgw_lun_up{lun=\"1\"} 1\n";
  EXPECT_EQ(m.Render(), want);
  EXPECT_EQ(m.Render(), want);  // collectors run again; nothing accumulates
}

TEST(Metrics, CollectorMayRegister) {
  Metrics m;
  m.AddCollector([&m](Metrics::Sink& s) {
    m.Counter("scrapes_total", "Scrapes.")->Inc();
    s.Gauge("g", "G.", {}, 1);
  });
  (void)m.Render();
  EXPECT_EQ(m.Render(),
            "# HELP g G.\n# TYPE g gauge\ng 1\n# HELP scrapes_total Scrapes.\n"
            "# TYPE scrapes_total counter\nscrapes_total 2\n");
}

TEST(MetricsDeathTest, ProgrammingErrorsAssert) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_DEATH(
      {
        Metrics m;
        m.Counter("x", "X.");
        m.Gauge("x", "X.");
      },
      "registered as counter and gauge");
  EXPECT_DEATH(
      {
        Metrics m;
        m.Gauge("x", "X.");
        m.IntGauge("x", "X.");
      },
      "registered as gauge and gauge \\(integer\\)");
  EXPECT_DEATH(
      {
        Metrics m;
        m.Counter("x", "X.", {{"a", "1"}});
        m.Counter("x", "Other.", {{"a", "2"}});
      },
      "two help texts");
  EXPECT_DEATH({ Metrics().Counter("1x", "X."); }, "invalid metric name");
  EXPECT_DEATH({ Metrics().Counter("a-b", "X."); }, "invalid metric name");
  EXPECT_DEATH({ Metrics().Counter("", "X."); }, "invalid metric name");
  EXPECT_DEATH({ Metrics().Counter("x", "X.", {{"__name", "1"}}); }, "invalid label name");
  EXPECT_DEATH({ Metrics().Counter("x", "X.", {{"a:b", "1"}}); }, "invalid label name");
  EXPECT_DEATH({ Metrics().Counter("x", "X.", {{"a", "1"}, {"a", "2"}}); }, "given twice");
  EXPECT_DEATH({ Metrics().Histogram("h", "H.", {{"le", "1"}}); }, "label named le");
  EXPECT_DEATH(
      {
        Metrics m;
        m.Counter("x", "X.");
        m.AddCollector([](Metrics::Sink& s) { s.Gauge("x", "X.", {}, 1); });
        (void)m.Render();
      },
      "emitted as gauge and counter");
  EXPECT_DEATH(
      {
        Metrics m;
        m.AddCollector([](Metrics::Sink& s) {
          s.Gauge("y", "Y.", {{"a", "1"}}, 1);
          s.Gauge("y", "Other.", {{"a", "2"}}, 1);
        });
        (void)m.Render();
      },
      "two help texts");
  EXPECT_DEATH(
      {
        Metrics m;
        m.AddCollector([](Metrics::Sink& s) { s.Gauge("bad name", "Y.", {}, 1); });
        (void)m.Render();
      },
      "invalid metric name");
}

TEST(Metrics, ConcurrentIncrementsAreExact) {
  Metrics m;
  constexpr int kThreads = 4;
  constexpr uint64_t kPerThread = 200'000;
  std::atomic<bool> done{false};
  std::thread scraper([&] {
    while (!done.load()) (void)m.Render();
  });
  std::vector<std::thread> threads;
  threads.reserve(kThreads);
  for (int t = 0; t < kThreads; t++) {
    threads.emplace_back([&m, t] {
      // Every thread looks the child up itself: registration is thread-safe too.
      Counter* c = m.Counter("ops_total", "Ops.", {{"volume", "v1"}});
      IntGauge* g = m.IntGauge("inflight", "In flight.");
      LatencyHistogram* h = m.Histogram("lat_seconds", "L.", {{"t", std::to_string(t % 2)}});
      for (uint64_t i = 0; i < kPerThread; i++) {
        c->Inc();
        g->Inc();
        g->Dec();
        if (i % 16 == 0) h->Record(i);
      }
    });
  }
  for (auto& t : threads) t.join();
  done.store(true);
  scraper.join();
  EXPECT_EQ(m.Counter("ops_total", "Ops.", {{"volume", "v1"}})->Value(), kThreads * kPerThread);
  EXPECT_EQ(m.IntGauge("inflight", "In flight.")->Value(), 0);
  const std::string text = m.Render();
  EXPECT_NE(text.find("ops_total{volume=\"v1\"} 800000\n"), std::string::npos) << text;
  EXPECT_NE(text.find("lat_seconds_count{t=\"0\"} 25000\n"), std::string::npos) << text;
}

// ---- HTTP -------------------------------------------------------------------

struct Fd {
  explicit Fd(int f = -1) : fd(f) {}
  Fd(Fd&& o) noexcept : fd(o.fd) { o.fd = -1; }
  ~Fd() { Reset(); }
  void Reset() {
    if (fd >= 0) close(fd);
    fd = -1;
  }
  int fd;
};

Fd Connect(uint16_t port, int rcvbuf = 0) {
  Fd s(socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  EXPECT_GE(s.fd, 0);
  if (rcvbuf > 0) setsockopt(s.fd, SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof(rcvbuf));
  timeval tv{10, 0};  // a hung server fails the test instead of hanging it
  setsockopt(s.fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  EXPECT_EQ(connect(s.fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0) << std::strerror(errno);
  return s;
}

// False when the server closed or reset the connection first.
bool SendAll(int fd, std::string_view data) {
  while (!data.empty()) {
    const ssize_t n = send(fd, data.data(), data.size(), MSG_NOSIGNAL);
    if (n <= 0) return false;
    data.remove_prefix(static_cast<size_t>(n));
  }
  return true;
}

// Reads to EOF (or a reset). A receive timeout fails the test.
std::string ReadAll(int fd) {
  std::string out;
  char buf[16384];
  while (true) {
    const ssize_t n = recv(fd, buf, sizeof(buf), 0);
    if (n > 0) {
      out.append(buf, static_cast<size_t>(n));
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    EXPECT_FALSE(n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) << "timed out reading the response";
    return out;
  }
}

struct Response {
  std::string status_line;
  std::map<std::string, std::string> headers;
  std::string body;
  bool complete = false;
};

Response ParseResponse(const std::string& raw) {
  Response r;
  const size_t end = raw.find("\r\n\r\n");
  if (end == std::string::npos) return r;
  r.complete = true;
  r.body = raw.substr(end + 4);
  std::string head = raw.substr(0, end);
  size_t pos = head.find("\r\n");
  r.status_line = head.substr(0, pos);
  while (pos != std::string::npos) {
    const size_t next = head.find("\r\n", pos + 2);
    const std::string line = head.substr(pos + 2, next == std::string::npos ? std::string::npos : next - pos - 2);
    const size_t colon = line.find(": ");
    if (colon != std::string::npos) r.headers[line.substr(0, colon)] = line.substr(colon + 2);
    pos = next;
  }
  return r;
}

Response Fetch(uint16_t port, std::string_view request) {
  Fd s = Connect(port);
  SendAll(s.fd, request);
  return ParseResponse(ReadAll(s.fd));
}

class MetricsHttp : public ::testing::Test {
 protected:
  void SetUp() override {
    metrics_.Counter("nasgw_volume_ops_total", "Operations.", {{"volume", "v1"}, {"op", "read"}})->Inc(3);
    metrics_.AddCollector([](Metrics::Sink& s) { s.Gauge("nasgw_free_bytes", "Free space.", {}, 4096); });
    Start({});
  }
  void Start(const MetricsHttpOptions& options) {
    server_.reset();
    auto r = MetricsHttpServer::Start("127.0.0.1:0", &metrics_, options);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    server_ = std::move(r).value();
    ASSERT_NE(server_->port(), 0);
  }
  uint16_t port() const { return server_->port(); }

  Metrics metrics_;
  std::unique_ptr<MetricsHttpServer> server_;
};

TEST_F(MetricsHttp, GetMetrics) {
  for (const char* version : {"HTTP/1.1", "HTTP/1.0"}) {
    Response r = Fetch(port(), std::string("GET /metrics ") + version + "\r\nHost: localhost\r\nAccept: */*\r\n\r\n");
    ASSERT_TRUE(r.complete);
    EXPECT_EQ(r.status_line, "HTTP/1.1 200 OK");
    EXPECT_EQ(r.headers["Content-Type"], "text/plain; version=0.0.4; charset=utf-8");
    EXPECT_EQ(r.headers["Content-Length"], std::to_string(r.body.size()));
    EXPECT_EQ(r.headers["Connection"], "close");
    EXPECT_EQ(r.body, metrics_.Render());
    EXPECT_NE(r.body.find("nasgw_volume_ops_total{op=\"read\",volume=\"v1\"} 3\n"), std::string::npos);
    EXPECT_NE(r.body.find("nasgw_free_bytes 4096\n"), std::string::npos);
  }
  // A query string, absolute-form and bare-LF line ends are accepted.
  EXPECT_EQ(Fetch(port(), "GET /metrics?x=1 HTTP/1.1\r\n\r\n").status_line, "HTTP/1.1 200 OK");
  EXPECT_EQ(Fetch(port(), "GET http://localhost:9100/metrics HTTP/1.1\r\n\r\n").status_line, "HTTP/1.1 200 OK");
  EXPECT_EQ(Fetch(port(), "GET /metrics HTTP/1.0\n\n").status_line, "HTTP/1.1 200 OK");
}

TEST_F(MetricsHttp, RequestSentByteByByte) {
  Fd s = Connect(port());
  for (char c : std::string("GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")) {
    ASSERT_TRUE(SendAll(s.fd, std::string_view(&c, 1)));
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  Response r = ParseResponse(ReadAll(s.fd));
  EXPECT_EQ(r.status_line, "HTTP/1.1 200 OK");
  EXPECT_EQ(r.body, metrics_.Render());
}

TEST_F(MetricsHttp, HeadAndIndex) {
  Response head = Fetch(port(), "HEAD /metrics HTTP/1.1\r\n\r\n");
  EXPECT_EQ(head.status_line, "HTTP/1.1 200 OK");
  EXPECT_EQ(head.headers["Content-Type"], "text/plain; version=0.0.4; charset=utf-8");
  EXPECT_EQ(head.headers["Content-Length"], std::to_string(metrics_.Render().size()));
  EXPECT_EQ(head.body, "");

  Response index = Fetch(port(), "GET / HTTP/1.1\r\n\r\n");
  EXPECT_EQ(index.status_line, "HTTP/1.1 200 OK");
  EXPECT_NE(index.body.find("/metrics"), std::string::npos);
  EXPECT_EQ(index.headers["Content-Length"], std::to_string(index.body.size()));
  Response index_head = Fetch(port(), "HEAD / HTTP/1.0\r\n\r\n");
  EXPECT_EQ(index_head.status_line, "HTTP/1.1 200 OK");
  EXPECT_EQ(index_head.body, "");
}

TEST_F(MetricsHttp, ErrorStatuses) {
  Response nf = Fetch(port(), "GET /metricsx HTTP/1.1\r\n\r\n");
  EXPECT_EQ(nf.status_line, "HTTP/1.1 404 Not Found");
  EXPECT_EQ(nf.headers["Content-Length"], std::to_string(nf.body.size()));
  EXPECT_EQ(Fetch(port(), "HEAD /nope HTTP/1.1\r\n\r\n").body, "");

  Response post = Fetch(port(), "POST /metrics HTTP/1.1\r\nContent-Length: 0\r\n\r\n");
  EXPECT_EQ(post.status_line, "HTTP/1.1 405 Method Not Allowed");
  EXPECT_EQ(post.headers["Allow"], "GET, HEAD");
  EXPECT_EQ(Fetch(port(), "DELETE / HTTP/1.0\r\n\r\n").status_line, "HTTP/1.1 405 Method Not Allowed");
  EXPECT_EQ(Fetch(port(), "get /metrics HTTP/1.1\r\n\r\n").status_line, "HTTP/1.1 405 Method Not Allowed");

  for (const char* bad :
       {"hello\r\n\r\n", "GET /metrics\r\n\r\n", "GET  /metrics HTTP/1.1\r\n\r\n",
        "GET /metrics HTTP/1.1 extra\r\n\r\n", "GET metrics HTTP/1.1\r\n\r\n", "GET /metrics HTTX/1.1\r\n\r\n",
        "GET /met\x01rics HTTP/1.1\r\n\r\n", "G(T /metrics HTTP/1.1\r\n\r\n", "\r\n\r\n"}) {
    Response r = Fetch(port(), bad);
    EXPECT_EQ(r.status_line, "HTTP/1.1 400 Bad Request") << bad;
    EXPECT_EQ(r.headers["Connection"], "close");
  }
  EXPECT_EQ(Fetch(port(), "GET /metrics HTTP/2.0\r\n\r\n").status_line, "HTTP/1.1 505 HTTP Version Not Supported");
}

TEST_F(MetricsHttp, OversizedRequestIsDropped) {
  // No end of headers within 8 KiB: closed without a response.
  {
    Fd s = Connect(port());
    SendAll(s.fd, "GET /metrics HTTP/1.1\r\nX-Pad: " + std::string(9000, 'a') + "\r\n\r\n");
    EXPECT_EQ(ReadAll(s.fd), "");
  }
  {
    Fd s = Connect(port());
    SendAll(s.fd, std::string(100'000, 'x'));
    EXPECT_EQ(ReadAll(s.fd), "");
  }
  // Just under the limit is fine.
  std::string req = "GET /metrics HTTP/1.1\r\nX-Pad: ";
  req += std::string(size_t{8} * 1024 - req.size() - 4, 'a') + "\r\n\r\n";
  ASSERT_EQ(req.size(), 8u * 1024);
  EXPECT_EQ(Fetch(port(), req).status_line, "HTTP/1.1 200 OK");
}

TEST_F(MetricsHttp, SilentClientDoesNotBlockOthers) {
  Fd silent = Connect(port());
  Fd partial = Connect(port());
  ASSERT_TRUE(SendAll(partial.fd, "GET /metr"));
  const auto t0 = std::chrono::steady_clock::now();
  Response r = Fetch(port(), "GET /metrics HTTP/1.1\r\n\r\n");
  EXPECT_EQ(r.status_line, "HTTP/1.1 200 OK");
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(2));
}

TEST_F(MetricsHttp, SlowReaderDoesNotBlockOthers) {
  // A response far larger than the socket buffers, so the server writes it in parts.
  for (int i = 0; i < 20'000; i++) {
    metrics_.Counter("nasgw_big_total", "Big.", {{"i", std::to_string(i)}, {"pad", std::string(40, 'p')}})->Inc(i);
  }
  const std::string want = metrics_.Render();
  ASSERT_GT(want.size(), 1u << 20);
  Fd slow = Connect(port(), 4096);
  ASSERT_TRUE(SendAll(slow.fd, "GET /metrics HTTP/1.1\r\n\r\n"));
  std::this_thread::sleep_for(std::chrono::milliseconds(200));  // the server fills the socket and waits
  const auto t0 = std::chrono::steady_clock::now();
  Response other = Fetch(port(), "GET / HTTP/1.1\r\n\r\n");
  EXPECT_EQ(other.status_line, "HTTP/1.1 200 OK");
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(2));
  Response r = ParseResponse(ReadAll(slow.fd));
  EXPECT_EQ(r.status_line, "HTTP/1.1 200 OK");
  EXPECT_EQ(r.body, want);
}

TEST_F(MetricsHttp, IncompleteRequestTimesOut) {
  MetricsHttpOptions o;
  o.request_timeout_ms = 200;
  Start(o);
  Fd s = Connect(port());
  ASSERT_TRUE(SendAll(s.fd, "GET /metrics HTTP/1.1\r\n"));
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_EQ(ReadAll(s.fd), "");
  const auto waited = std::chrono::steady_clock::now() - t0;
  EXPECT_GE(waited, std::chrono::milliseconds(100));
  EXPECT_LT(waited, std::chrono::seconds(3));
}

TEST_F(MetricsHttp, ConnectionsBeyondTheLimitAreClosed) {
  MetricsHttpOptions o;
  o.connections_max = 2;
  Start(o);
  Fd a = Connect(port());
  Fd b = Connect(port());
  Fd c = Connect(port());
  EXPECT_EQ(ReadAll(c.fd), "");  // closed at once, not after the request timeout
  a.Reset();
  // Once a's close is seen, there is room again.
  Response r;
  for (int i = 0; i < 100 && !r.complete; i++) {
    r = Fetch(port(), "GET /metrics HTTP/1.1\r\n\r\n");
    if (!r.complete) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_EQ(r.status_line, "HTTP/1.1 200 OK");
}

TEST_F(MetricsHttp, GarbageNeverCrashes) {
  std::mt19937_64 rng(11);
  for (int i = 0; i < 300; i++) {
    std::string req(rng() % 600, '\0');
    for (char& ch : req) ch = static_cast<char>(rng() % 8 == 0 ? " \r\n/:"[rng() % 5] : rng());
    if (i % 3 == 0) req = "GET " + req;
    if (i % 2 == 0) req += "\r\n\r\n";
    Fd s = Connect(port());
    SendAll(s.fd, req);
    shutdown(s.fd, SHUT_WR);  // an incomplete request ends at EOF, not at the timeout
    const std::string raw = ReadAll(s.fd);
    if (!raw.empty()) {
      EXPECT_TRUE(raw.starts_with("HTTP/1.1 ")) << raw;
    }
  }
  EXPECT_EQ(Fetch(port(), "GET /metrics HTTP/1.1\r\n\r\n").status_line, "HTTP/1.1 200 OK");
}

TEST_F(MetricsHttp, StopWithClientsConnectedIsPrompt) {
  Fd silent = Connect(port());
  Fd partial = Connect(port());
  ASSERT_TRUE(SendAll(partial.fd, "GET /metrics HTTP/1.1\r\n"));
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  const auto t0 = std::chrono::steady_clock::now();
  server_->Stop();
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::milliseconds(500));
  EXPECT_EQ(ReadAll(silent.fd), "");
  EXPECT_EQ(ReadAll(partial.fd), "");
  server_->Stop();  // idempotent
  server_.reset();  // and the destructor after it
}

TEST(MetricsHttpStart, BadAddressesAndBindFailure) {
  Metrics m;
  for (const char* bad : {"", "127.0.0.1", "127.0.0.1:", "127.0.0.1:x", "127.0.0.1:65536", "127.0.0.1:-1",
                          "localhost:9100", "::1:9100", "[::1]9100", "[::1", "[nonsense]:1", "1.2.3:80"}) {
    auto r = MetricsHttpServer::Start(bad, &m);
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_EQ(r.status().code(), Code::kInvalidArgument) << bad;
    EXPECT_NE(r.status().ToString().find(bad), std::string::npos) << r.status().ToString();
  }
  auto first = MetricsHttpServer::Start("127.0.0.1:0", &m);
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  const std::string taken = "127.0.0.1:" + std::to_string((*first)->port());
  auto second = MetricsHttpServer::Start(taken, &m);
  ASSERT_FALSE(second.ok());
  EXPECT_NE(second.status().ToString().find(taken), std::string::npos) << second.status().ToString();
  EXPECT_NE(second.status().ToString().find("bind"), std::string::npos) << second.status().ToString();
}

TEST(MetricsHttpStart, Ipv6AndAnyAddress) {
  Metrics m;
  m.Gauge("g", "G.")->Set(1);
  auto any = MetricsHttpServer::Start(":0", &m);
  ASSERT_TRUE(any.ok()) << any.status().ToString();
  EXPECT_EQ(Fetch((*any)->port(), "GET /metrics HTTP/1.1\r\n\r\n").body, m.Render());

  auto v6 = MetricsHttpServer::Start("[::1]:0", &m);
  if (!v6.ok()) GTEST_SKIP() << "no IPv6 loopback: " << v6.status().ToString();
  Fd s(socket(AF_INET6, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_in6 a{};
  a.sin6_family = AF_INET6;
  a.sin6_port = htons((*v6)->port());
  a.sin6_addr = in6addr_loopback;
  ASSERT_EQ(connect(s.fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0) << std::strerror(errno);
  ASSERT_TRUE(SendAll(s.fd, "GET /metrics HTTP/1.1\r\n\r\n"));
  EXPECT_EQ(ParseResponse(ReadAll(s.fd)).body, m.Render());
}

}  // namespace
}  // namespace nasgw::daemon
