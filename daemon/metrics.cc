#include "daemon/metrics.h"

#include <poll.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstring>
#include <map>
#include <thread>
#include <variant>

#include "base/assert.h"
#include "base/clock.h"
#include "base/log.h"
#include "base/mutex.h"
#include "base/sockaddr.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/eventfd.h>
#include <sys/socket.h>

namespace nasgw::daemon {
namespace {

// ---- names, labels, values --------------------------------------------------

bool IsMetricName(std::string_view s) {
  if (s.empty()) return false;
  for (size_t i = 0; i < s.size(); i++) {
    const char c = s[i];
    const bool ok =
        (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || c == ':' || (i > 0 && c >= '0' && c <= '9');
    if (!ok) return false;
  }
  return true;
}

// Label names are metric names without ':' (reserved for recording rules), and
// names starting with "__" are Prometheus' own.
bool IsLabelName(std::string_view s) {
  if (s.empty() || s.starts_with("__")) return false;
  for (size_t i = 0; i < s.size(); i++) {
    const char c = s[i];
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || (i > 0 && c >= '0' && c <= '9');
    if (!ok) return false;
  }
  return true;
}

// Validated, sorted by name: the identity of a child.
Labels CanonicalLabels(std::string_view metric, const Labels& labels) {
  Labels out = labels;
  std::sort(out.begin(), out.end());
  for (size_t i = 0; i < out.size(); i++) {
    NASGW_ASSERT_MSG(IsLabelName(out[i].first),
                     "metric " + std::string(metric) + ": invalid label name \"" + out[i].first + "\"");
    NASGW_ASSERT_MSG(i == 0 || out[i].first != out[i - 1].first,
                     "metric " + std::string(metric) + ": label \"" + out[i].first + "\" given twice");
  }
  return out;
}

// Copies valid UTF-8 and replaces every byte that does not start a valid
// sequence with U+FFFD, so that a label value taken from the outside (a LUN
// URL, a volume name) cannot make the exposition unparsable. `escape` applies
// to the ASCII bytes.
template <typename Escape>
void AppendUtf8(std::string* out, std::string_view s, Escape escape) {
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  const size_t n = s.size();
  size_t i = 0;
  while (i < n) {
    const unsigned char b = p[i];
    if (b < 0x80) {
      escape(out, static_cast<char>(b));
      i++;
      continue;
    }
    size_t len = 0;
    unsigned char lo = 0x80, hi = 0xBF;  // allowed range of the second byte
    if (b >= 0xC2 && b <= 0xDF) {
      len = 2;
    } else if (b >= 0xE0 && b <= 0xEF) {
      len = 3;
      if (b == 0xE0) lo = 0xA0;  // overlong
      if (b == 0xED) hi = 0x9F;  // surrogates
    } else if (b >= 0xF0 && b <= 0xF4) {
      len = 4;
      if (b == 0xF0) lo = 0x90;  // overlong
      if (b == 0xF4) hi = 0x8F;  // beyond U+10FFFF
    }
    bool valid = len != 0 && i + len <= n && p[i + 1] >= lo && p[i + 1] <= hi;
    for (size_t k = 2; valid && k < len; k++) valid = p[i + k] >= 0x80 && p[i + k] <= 0xBF;
    if (valid) {
      out->append(s.substr(i, len));
      i += len;
    } else {
      out->append("\xEF\xBF\xBD");
      i++;
    }
  }
}

void AppendLabelValue(std::string* out, std::string_view v) {
  AppendUtf8(out, v, [](std::string* o, char c) {
    if (c == '\\') {
      o->append("\\\\");
    } else if (c == '"') {
      o->append("\\\"");
    } else if (c == '\n') {
      o->append("\\n");
    } else {
      o->push_back(c);
    }
  });
}

void AppendHelp(std::string* out, std::string_view v) {
  AppendUtf8(out, v, [](std::string* o, char c) {
    if (c == '\\') {
      o->append("\\\\");
    } else if (c == '\n') {
      o->append("\\n");
    } else {
      o->push_back(c);
    }
  });
}

// {a="1",b="2"} or nothing; `le`, when given, comes last.
void AppendLabels(std::string* out, const Labels& labels, const char* le = nullptr) {
  if (labels.empty() && le == nullptr) return;
  out->push_back('{');
  bool first = true;
  for (const auto& [name, value] : labels) {
    if (!first) out->push_back(',');
    first = false;
    out->append(name);
    out->append("=\"");
    AppendLabelValue(out, value);
    out->push_back('"');
  }
  if (le != nullptr) {
    if (!first) out->push_back(',');
    out->append("le=\"");
    out->append(le);
    out->push_back('"');
  }
  out->push_back('}');
}

std::string FormatDouble(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  char buf[64];
  auto r = std::to_chars(buf, buf + sizeof(buf), v);  // shortest text that reads back as v
  return std::string(buf, r.ptr);
}

void AppendSample(std::string* out, std::string_view name, std::string_view suffix, const Labels& labels,
                  const char* le, std::string_view value) {
  out->append(name);
  out->append(suffix);
  AppendLabels(out, labels, le);
  out->push_back(' ');
  out->append(value);
  out->push_back('\n');
}

// ---- histograms -------------------------------------------------------------

constexpr size_t kLatencyBounds = std::size(kLatencyBucketBoundsSeconds);
constexpr uint64_t kLatencyBoundsNanos[] = {50'000,        100'000,       250'000,     500'000,       1'000'000,
                                            2'500'000,     5'000'000,     10'000'000,  25'000'000,    50'000'000,
                                            100'000'000,   250'000'000,   500'000'000, 1'000'000'000, 2'500'000'000,
                                            5'000'000'000, 10'000'000'000};
static_assert(std::size(kLatencyBoundsNanos) == kLatencyBounds);

// For each bound, the last log-linear bucket whose every value is <= the bound.
const std::array<int, kLatencyBounds>& LastBucketPerBound() {
  static const std::array<int, kLatencyBounds> last = [] {
    std::array<int, kLatencyBounds> a{};
    for (size_t j = 0; j < kLatencyBounds; j++) {
      const uint64_t bound = kLatencyBoundsNanos[j];
      const int b = HistogramBucketOf(bound);
      a[j] = HistogramBucketHigh(b) == bound ? b : b - 1;
    }
    return a;
  }();
  return last;
}

void AppendHistogram(std::string* out, std::string_view name, const Labels& labels, const HistogramData& d) {
  const auto& last = LastBucketPerBound();
  uint64_t cumulative = 0;
  int next = 0;  // first bucket not yet added
  for (size_t j = 0; j < kLatencyBounds; j++) {
    for (; next <= last[j]; next++) cumulative += d.buckets[next];
    AppendSample(out, name, "_bucket", labels, kLatencyBucketBoundsSeconds[j], std::to_string(cumulative));
  }
  AppendSample(out, name, "_bucket", labels, "+Inf", std::to_string(d.count));
  AppendSample(out, name, "_sum", labels, nullptr, FormatDouble(static_cast<double>(d.sum) / 1e9));
  AppendSample(out, name, "_count", labels, nullptr, std::to_string(d.count));
}

enum class Kind : uint8_t { kCounter, kGauge, kIntGauge, kHistogram };

const char* KindName(Kind k) {
  switch (k) {
    case Kind::kCounter:
      return "counter";
    case Kind::kGauge:
      return "gauge";
    case Kind::kIntGauge:
      return "gauge (integer)";
    case Kind::kHistogram:
      return "histogram";
  }
  return "?";
}

// The # TYPE of a kind: both gauges are gauges on the wire.
const char* TypeName(Kind k) {
  return k == Kind::kIntGauge ? "gauge" : KindName(k);
}

}  // namespace

// ---- Metrics ----------------------------------------------------------------

// One family as rendered in one scrape: registered children and collector
// samples merged, each series already formatted, keyed by its labels.
struct Metrics::Sink::Scrape {
  struct Family {
    const char* type = nullptr;
    std::string help;
    std::map<Labels, std::string> series;
  };
  std::map<std::string, Family, std::less<>> families;

  // The family `name`, created on first use; asserts the type and help agree.
  Family& Get(std::string_view name, const char* type, std::string_view help) {
    auto it = families.find(name);
    if (it == families.end()) {
      NASGW_ASSERT_MSG(IsMetricName(name), "invalid metric name \"" + std::string(name) + "\"");
      it = families.emplace(std::string(name), Family{type, std::string(help), {}}).first;
      return it->second;
    }
    NASGW_ASSERT_MSG(std::strcmp(it->second.type, type) == 0,
                     "metric " + std::string(name) + " emitted as " + it->second.type + " and " + type);
    NASGW_ASSERT_MSG(it->second.help == help, "metric " + std::string(name) + " emitted with two help texts");
    return it->second;
  }
};

void Metrics::Sink::Counter(std::string_view name, std::string_view help, const Labels& labels, uint64_t value) {
  auto& family = scrape_->Get(name, "counter", help);
  Labels key = CanonicalLabels(name, labels);
  std::string line;
  AppendSample(&line, name, "", key, nullptr, std::to_string(value));
  family.series[std::move(key)] = std::move(line);
}

void Metrics::Sink::Gauge(std::string_view name, std::string_view help, const Labels& labels, double value) {
  auto& family = scrape_->Get(name, "gauge", help);
  Labels key = CanonicalLabels(name, labels);
  std::string line;
  AppendSample(&line, name, "", key, nullptr, FormatDouble(value));
  family.series[std::move(key)] = std::move(line);
}

struct Metrics::State {
  using Child = std::variant<std::unique_ptr<daemon::Counter>, std::unique_ptr<daemon::Gauge>,
                             std::unique_ptr<daemon::IntGauge>, std::unique_ptr<LatencyHistogram>>;
  struct Family {
    Kind kind;
    std::string help;
    std::map<Labels, Child> children;
  };

  // The child, created on first use; asserts that the family's kind and help agree.
  template <typename T>
  T* Get(Kind kind, std::string_view name, std::string_view help, const Labels& labels) {
    Labels key = CanonicalLabels(name, labels);
    NASGW_ASSERT_MSG(
        kind != Kind::kHistogram || std::none_of(key.begin(), key.end(), [](const auto& l) { return l.first == "le"; }),
        "histogram " + std::string(name) + " has a label named le");
    MutexLock lock(mu);
    auto it = families.find(name);
    if (it == families.end()) {
      NASGW_ASSERT_MSG(IsMetricName(name), "invalid metric name \"" + std::string(name) + "\"");
      it = families.emplace(std::string(name), Family{kind, std::string(help), {}}).first;
    }
    Family& f = it->second;
    NASGW_ASSERT_MSG(f.kind == kind,
                     "metric " + std::string(name) + " registered as " + KindName(f.kind) + " and " + KindName(kind));
    NASGW_ASSERT_MSG(f.help == help, "metric " + std::string(name) + " registered with two help texts");
    auto [child, inserted] = f.children.try_emplace(std::move(key));
    if (inserted) child->second = std::make_unique<T>();
    return std::get<std::unique_ptr<T>>(child->second).get();
  }

  mutable Mutex mu;
  std::map<std::string, Family, std::less<>> families GUARDED_BY(mu);
  std::vector<Collector> collectors GUARDED_BY(mu);
};

Metrics::Metrics() : state_(std::make_unique<State>()) {}
Metrics::~Metrics() = default;

daemon::Counter* Metrics::Counter(std::string_view name, std::string_view help, const Labels& labels) {
  return state_->Get<daemon::Counter>(Kind::kCounter, name, help, labels);
}

daemon::Gauge* Metrics::Gauge(std::string_view name, std::string_view help, const Labels& labels) {
  return state_->Get<daemon::Gauge>(Kind::kGauge, name, help, labels);
}

daemon::IntGauge* Metrics::IntGauge(std::string_view name, std::string_view help, const Labels& labels) {
  return state_->Get<daemon::IntGauge>(Kind::kIntGauge, name, help, labels);
}

LatencyHistogram* Metrics::Histogram(std::string_view name, std::string_view help, const Labels& labels) {
  return state_->Get<LatencyHistogram>(Kind::kHistogram, name, help, labels);
}

void Metrics::AddCollector(Collector collector) {
  MutexLock lock(state_->mu);
  state_->collectors.push_back(std::move(collector));
}

std::string Metrics::Render() const {
  std::vector<Collector> collectors;
  {
    MutexLock lock(state_->mu);
    collectors = state_->collectors;
  }
  // Collectors run unlocked: they take the node's locks, and may register.
  Sink::Scrape scrape;
  Sink sink(&scrape);
  for (const auto& collect : collectors) collect(sink);

  {
    MutexLock lock(state_->mu);
    for (const auto& [name, family] : state_->families) {
      auto& out = scrape.Get(name, TypeName(family.kind), family.help);
      for (const auto& [labels, child] : family.children) {
        std::string text;
        switch (family.kind) {
          case Kind::kCounter:
            AppendSample(&text, name, "", labels, nullptr,
                         std::to_string(std::get<std::unique_ptr<daemon::Counter>>(child)->Value()));
            break;
          case Kind::kGauge:
            AppendSample(&text, name, "", labels, nullptr,
                         FormatDouble(std::get<std::unique_ptr<daemon::Gauge>>(child)->Value()));
            break;
          case Kind::kIntGauge:
            AppendSample(&text, name, "", labels, nullptr,
                         std::to_string(std::get<std::unique_ptr<daemon::IntGauge>>(child)->Value()));
            break;
          case Kind::kHistogram:
            AppendHistogram(&text, name, labels, std::get<std::unique_ptr<LatencyHistogram>>(child)->Snapshot());
            break;
        }
        out.series[labels] = std::move(text);
      }
    }
  }

  std::string text;
  for (const auto& [name, family] : scrape.families) {
    text.append("# HELP ");
    text.append(name);
    text.push_back(' ');
    AppendHelp(&text, family.help);
    text.append("\n# TYPE ");
    text.append(name);
    text.push_back(' ');
    text.append(family.type);
    text.push_back('\n');
    for (const auto& [labels, series] : family.series) text.append(series);
  }
  return text;
}

// ---- MetricsHttpServer ------------------------------------------------------

namespace {

std::string ErrnoText(int err) {
  return std::strerror(err);
}

Status SocketError(const std::string& what, const std::string& listen, int err) {
  std::string m = "metrics endpoint " + listen + ": " + what + ": " + ErrnoText(err);
  switch (err) {
    case EACCES:
    case EPERM:
      return Status::PermissionDenied(std::move(m));
    case EADDRINUSE:
      return Status::Busy(std::move(m));
    case EADDRNOTAVAIL:
    case EAFNOSUPPORT:
      return Status::InvalidArgument(std::move(m));
    default:
      return Status::Unavailable(std::move(m));
  }
}

constexpr uint64_t kNanosPerMs = 1'000'000;
// How long accept() is left alone after it ran out of file descriptors: the
// listening socket stays readable, and polling it at once would spin.
constexpr uint64_t kAcceptPauseNs = 100 * kNanosPerMs;
// After the response, how long the peer's remaining bytes are read and
// dropped before the close (closing with unread data sends a reset, which can
// destroy the response before the client reads it).
constexpr uint64_t kLingerNs = 1'000 * kNanosPerMs;

constexpr std::string_view kMetricsContentType = "text/plain; version=0.0.4; charset=utf-8";
constexpr std::string_view kIndexBody = "nasgwd: Prometheus metrics are at /metrics\n";

std::string Response(std::string_view status, std::string_view content_type, const std::string& body, bool head,
                     std::string_view extra_headers = {}) {
  std::string r = "HTTP/1.1 ";
  r.append(status);
  r.append("\r\nContent-Type: ");
  r.append(content_type);
  r.append("\r\nContent-Length: ");
  r.append(std::to_string(body.size()));
  r.append("\r\n");
  r.append(extra_headers);
  r.append("Connection: close\r\n\r\n");
  if (!head) r.append(body);
  return r;
}

std::string ErrorResponse(std::string_view status, bool head = false, std::string_view extra_headers = {}) {
  return Response(status, "text/plain; charset=utf-8", std::string(status) + "\n", head, extra_headers);
}

// RFC 9110 tchar.
bool IsTokenChar(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
         std::strchr("!#$%&'*+-.^_`|~", c) != nullptr;
}

}  // namespace

struct MetricsHttpServer::Impl {
  enum class Phase { kReading, kWriting, kLingering };
  struct Conn {
    int fd = -1;
    Phase phase = Phase::kReading;
    std::string in;
    std::string out;
    size_t out_done = 0;
    uint64_t deadline_ns = 0;
  };

  Metrics* metrics = nullptr;
  MetricsHttpOptions options;
  std::string listen;
  int listen_fd = -1;
  int wake_fd = -1;
  uint16_t port = 0;
  std::atomic<bool> stopping{false};
  std::thread thread;
  Mutex stop_mu;
  bool stopped GUARDED_BY(stop_mu) = false;

  // Loop thread only.
  std::vector<Conn> conns;
  uint64_t accept_paused_until_ns = 0;

  ~Impl() {
    if (listen_fd >= 0) close(listen_fd);
    if (wake_fd >= 0) close(wake_fd);
  }

  void Loop();
  void Accept(uint64_t now);
  // Each returns false when the connection is to be closed.
  bool OnReadable(Conn& c, uint64_t now);
  bool OnWritable(Conn& c, uint64_t now);
  bool OnLingering(Conn& c);
  std::string Handle(std::string_view request);
};

std::string MetricsHttpServer::Impl::Handle(std::string_view request) {
  const std::string_view line = request.substr(0, request.find('\n'));
  std::string_view rest = line.ends_with('\r') ? line.substr(0, line.size() - 1) : line;
  const size_t sp1 = rest.find(' ');
  if (sp1 == std::string_view::npos) return ErrorResponse("400 Bad Request");
  const std::string_view method = rest.substr(0, sp1);
  rest.remove_prefix(sp1 + 1);
  const size_t sp2 = rest.find(' ');
  if (sp2 == std::string_view::npos) return ErrorResponse("400 Bad Request");
  std::string_view target = rest.substr(0, sp2);
  const std::string_view version = rest.substr(sp2 + 1);

  if (method.empty() || !std::all_of(method.begin(), method.end(), IsTokenChar)) {
    return ErrorResponse("400 Bad Request");
  }
  if (target.empty() || std::any_of(target.begin(), target.end(), [](char c) {
        return static_cast<unsigned char>(c) <= 0x20 || static_cast<unsigned char>(c) >= 0x7f;
      })) {
    return ErrorResponse("400 Bad Request");
  }
  if (version.size() != 8 || !version.starts_with("HTTP/") || !std::isdigit(static_cast<unsigned char>(version[5])) ||
      version[6] != '.' || !std::isdigit(static_cast<unsigned char>(version[7]))) {
    return ErrorResponse("400 Bad Request");
  }
  if (version != "HTTP/1.0" && version != "HTTP/1.1") return ErrorResponse("505 HTTP Version Not Supported");
  // absolute-form (what a proxy sends) -> its path.
  for (std::string_view scheme : {"http://", "https://"}) {
    if (target.starts_with(scheme)) {
      target.remove_prefix(scheme.size());
      const size_t slash = target.find('/');
      target = slash == std::string_view::npos ? std::string_view("/") : target.substr(slash);
    }
  }
  if (!target.starts_with('/')) return ErrorResponse("400 Bad Request");
  const std::string_view path = target.substr(0, target.find_first_of("?#"));

  const bool head = method == "HEAD";
  if (method != "GET" && !head) return ErrorResponse("405 Method Not Allowed", false, "Allow: GET, HEAD\r\n");
  if (path == "/metrics") return Response("200 OK", kMetricsContentType, metrics->Render(), head);
  if (path == "/") return Response("200 OK", "text/plain; charset=utf-8", std::string(kIndexBody), head);
  return ErrorResponse("404 Not Found", head);
}

bool MetricsHttpServer::Impl::OnReadable(Conn& c, uint64_t now) {
  const size_t max = options.request_bytes_max;
  while (true) {
    const size_t old = c.in.size();
    const size_t want = std::min<size_t>(4096, max - old);
    c.in.resize(old + want);
    const ssize_t n = recv(c.fd, c.in.data() + old, want, 0);
    c.in.resize(old + (n > 0 ? static_cast<size_t>(n) : 0));
    if (n == 0) return false;  // closed before the request was complete
    if (n < 0) return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR;
    // The end of the headers: an empty line (bare LF tolerated, RFC 9112 2.2).
    const size_t from = old >= 3 ? old - 3 : 0;
    size_t end = c.in.find("\r\n\r\n", from);
    if (end != std::string::npos) {
      end += 4;
    } else if ((end = c.in.find("\n\n", from)) != std::string::npos) {
      end += 2;
    }
    if (end != std::string::npos) {
      c.out = Handle(std::string_view(c.in).substr(0, end));
      c.in.clear();
      c.in.shrink_to_fit();
      c.phase = Phase::kWriting;
      c.deadline_ns = now + options.response_timeout_ms * kNanosPerMs;
      return OnWritable(c, now);
    }
    if (c.in.size() >= max) {
      NASGW_LOG(kDebug, "metrics") << "request too large, dropped" << Kv("bytes_max", max);
      return false;
    }
  }
}

bool MetricsHttpServer::Impl::OnWritable(Conn& c, uint64_t now) {
  while (c.out_done < c.out.size()) {
    const ssize_t n = send(c.fd, c.out.data() + c.out_done, c.out.size() - c.out_done, MSG_NOSIGNAL);
    if (n < 0) {
      if (errno == EINTR) continue;
      return errno == EAGAIN || errno == EWOULDBLOCK;
    }
    c.out_done += static_cast<size_t>(n);
  }
  c.out.clear();
  c.out.shrink_to_fit();
  shutdown(c.fd, SHUT_WR);
  c.phase = Phase::kLingering;
  c.deadline_ns = std::min(c.deadline_ns, now + kLingerNs);
  return OnLingering(c);
}

bool MetricsHttpServer::Impl::OnLingering(Conn& c) {
  char buf[4096];
  while (true) {
    const ssize_t n = recv(c.fd, buf, sizeof(buf), 0);
    if (n > 0) continue;
    if (n < 0 && errno == EINTR) continue;
    return n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK);  // EOF or error: done
  }
}

void MetricsHttpServer::Impl::Accept(uint64_t now) {
  while (true) {
    const int fd = accept4(listen_fd, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
        NASGW_LOG(kWarn, "metrics") << "accept failed, pausing" << Kv("err", ErrnoText(errno));
        accept_paused_until_ns = now + kAcceptPauseNs;
      }
      return;  // EAGAIN: nothing more
    }
    if (conns.size() >= options.connections_max) {
      NASGW_LOG(kDebug, "metrics") << "too many connections, closed a new one" << Kv("max", options.connections_max);
      close(fd);
      continue;
    }
    Conn c;
    c.fd = fd;
    c.deadline_ns = now + options.request_timeout_ms * kNanosPerMs;
    conns.push_back(std::move(c));
  }
}

void MetricsHttpServer::Impl::Loop() {
  std::vector<pollfd> pfds;
  std::vector<bool> keep;
  while (true) {
    uint64_t now = MonotonicNanos();
    const bool accepting = now >= accept_paused_until_ns;
    uint64_t wake_at = accepting ? UINT64_MAX : accept_paused_until_ns;
    pfds.clear();
    pfds.push_back({wake_fd, POLLIN, 0});
    pfds.push_back({accepting ? listen_fd : -1, POLLIN, 0});  // poll() skips a negative fd
    for (const Conn& c : conns) {
      pfds.push_back({c.fd, static_cast<short>(c.phase == Phase::kWriting ? POLLOUT : POLLIN), 0});
      wake_at = std::min(wake_at, c.deadline_ns);
    }
    int timeout_ms = -1;
    if (wake_at != UINT64_MAX) {
      const uint64_t wait_ns = wake_at > now ? wake_at - now : 0;
      timeout_ms = static_cast<int>(std::min<uint64_t>((wait_ns + kNanosPerMs - 1) / kNanosPerMs, 60'000));
    }
    const int n = poll(pfds.data(), pfds.size(), timeout_ms);
    if (n < 0 && errno != EINTR) {
      NASGW_LOG(kError, "metrics") << "poll failed" << Kv("err", ErrnoText(errno));
      std::this_thread::sleep_for(std::chrono::milliseconds(10));  // ENOMEM: try again, do not spin
    }
    if (stopping.load()) break;
    if (pfds[0].revents != 0) {
      uint64_t v;
      while (read(wake_fd, &v, sizeof(v)) > 0) {
      }
    }

    now = MonotonicNanos();
    keep.assign(conns.size(), true);
    for (size_t i = 0; i < conns.size(); i++) {
      Conn& c = conns[i];
      if (pfds[i + 2].revents != 0) {
        switch (c.phase) {
          case Phase::kReading:
            keep[i] = OnReadable(c, now);
            break;
          case Phase::kWriting:
            keep[i] = OnWritable(c, now);
            break;
          case Phase::kLingering:
            keep[i] = OnLingering(c);
            break;
        }
      }
      if (keep[i] && now >= c.deadline_ns) {
        if (c.phase != Phase::kLingering) {
          NASGW_LOG(kDebug, "metrics") << "connection timed out"
                                       << Kv("phase", c.phase == Phase::kReading ? "request" : "response");
        }
        keep[i] = false;
      }
    }
    size_t kept = 0;
    for (size_t i = 0; i < conns.size(); i++) {
      if (keep[i]) {
        if (kept != i) conns[kept] = std::move(conns[i]);
        kept++;
      } else {
        close(conns[i].fd);
      }
    }
    conns.resize(kept);

    if (pfds[1].revents != 0) Accept(now);
  }
  for (const Conn& c : conns) close(c.fd);
  conns.clear();
}

MetricsHttpServer::MetricsHttpServer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

MetricsHttpServer::~MetricsHttpServer() {
  Stop();
}

uint16_t MetricsHttpServer::port() const {
  return impl_->port;
}

Result<std::unique_ptr<MetricsHttpServer>> MetricsHttpServer::Start(const std::string& listen, Metrics* metrics,
                                                                    const MetricsHttpOptions& options) {
  NASGW_ASSERT(metrics != nullptr);
  NASGW_ASSERT(options.connections_max > 0 && options.request_bytes_max > 0);
  socklen_t addr_len = 0;
  auto addr = ParseSockAddr(listen, &addr_len, "metrics listen address");
  if (!addr.ok()) return addr.status();

  auto impl = std::make_unique<Impl>();
  impl->metrics = metrics;
  impl->options = options;
  impl->listen = listen;
  impl->listen_fd = socket(addr->ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (impl->listen_fd < 0) return SocketError("socket", listen, errno);
  const int one = 1;
  if (setsockopt(impl->listen_fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) != 0) {
    return SocketError("setsockopt SO_REUSEADDR", listen, errno);
  }
  if (bind(impl->listen_fd, reinterpret_cast<const sockaddr*>(&*addr), addr_len) != 0) {
    return SocketError("bind", listen, errno);
  }
  if (::listen(impl->listen_fd, static_cast<int>(std::min<uint32_t>(options.connections_max, SOMAXCONN))) != 0) {
    return SocketError("listen", listen, errno);
  }
  sockaddr_storage bound{};
  socklen_t bound_len = sizeof(bound);
  if (getsockname(impl->listen_fd, reinterpret_cast<sockaddr*>(&bound), &bound_len) != 0) {
    return SocketError("getsockname", listen, errno);
  }
  impl->port = ntohs(bound.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port
                                                 : reinterpret_cast<sockaddr_in*>(&bound)->sin_port);
  impl->wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (impl->wake_fd < 0) return SocketError("eventfd", listen, errno);

  Impl* raw = impl.get();
  impl->thread = std::thread([raw] { raw->Loop(); });
  NASGW_LOG(kInfo, "metrics") << "serving /metrics" << Kv("listen", listen) << Kv("port", raw->port);
  return std::unique_ptr<MetricsHttpServer>(new MetricsHttpServer(std::move(impl)));
}

void MetricsHttpServer::Stop() {
  MutexLock lock(impl_->stop_mu);
  if (impl_->stopped) return;
  impl_->stopped = true;
  impl_->stopping.store(true);
  const uint64_t one = 1;
  if (write(impl_->wake_fd, &one, sizeof(one)) < 0) {
    // Only EAGAIN is possible (the counter is full): the loop is being woken anyway.
  }
  if (impl_->thread.joinable()) impl_->thread.join();
  close(impl_->listen_fd);
  close(impl_->wake_fd);
  impl_->listen_fd = -1;
  impl_->wake_fd = -1;
}

}  // namespace nasgw::daemon
