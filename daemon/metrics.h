// nasgwd's metrics: a registry of Prometheus metric families and the HTTP
// endpoint that serves it in the text exposition format 0.0.4.
//
// Two ways to publish a value:
//  - Registered children, for values the daemon updates as it works. A caller
//    obtains the labelled child once and keeps the pointer; updating it is one
//    relaxed atomic operation, no lock, no lookup:
//
//      Counter* reads = metrics.Counter("nasgw_volume_ops_total", "Operations by volume and type.",
//                                       {{"volume", "v1"}, {"op", "read"}});
//      reads->Inc();
//
//    Children live as long as the Metrics; asking again for the same name and
//    labels returns the same pointer.
//  - Collectors, for values that already live elsewhere (per-LUN statistics,
//    space, health): a function called at every scrape that emits samples
//    into a Sink. A family may be emitted for any number of label sets, by
//    several collectors, and may also have registered children: it is still
//    rendered once, with one # HELP and one # TYPE line.
//
// Names are code, not input: an invalid metric or label name, the same family
// registered (or emitted) with another type or help, or a repeated label name
// is a programming error and fails an assertion. Label values are data: they
// are escaped, and invalid UTF-8 in them is replaced by U+FFFD.
//
// Thread-safety: every method of Metrics may be called from any thread.
// Collectors may run on any thread that calls Render(), concurrently when two
// scrapes overlap; they must not call AddCollector() (registering children
// from a collector is allowed but pointless).
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "base/histogram.h"
#include "base/status.h"

namespace nasgw::daemon {

// Label pairs (name, value). The order does not matter: a child is identified
// by the set, and labels are rendered sorted by name.
using Labels = std::vector<std::pair<std::string, std::string>>;

// A monotonically increasing count. Aligned to a cache line so that hot
// counters updated by different threads do not share one.
class alignas(64) Counter {
 public:
  void Inc(uint64_t n = 1) { value_.fetch_add(n, std::memory_order_relaxed); }
  uint64_t Value() const { return value_.load(std::memory_order_relaxed); }

 private:
  std::atomic<uint64_t> value_{0};
};

// A value that goes up and down.
class alignas(64) Gauge {
 public:
  void Set(double v) { value_.store(v, std::memory_order_relaxed); }
  void Add(double d) { value_.fetch_add(d, std::memory_order_relaxed); }
  double Value() const { return value_.load(std::memory_order_relaxed); }

 private:
  std::atomic<double> value_{0.0};
};

// A gauge with integer values (connections, bytes in flight): exact, and
// Add() is a single fetch_add rather than a compare-and-swap loop.
class alignas(64) IntGauge {
 public:
  void Set(int64_t v) { value_.store(v, std::memory_order_relaxed); }
  void Add(int64_t d) { value_.fetch_add(d, std::memory_order_relaxed); }
  void Inc() { Add(1); }
  void Dec() { Add(-1); }
  int64_t Value() const { return value_.load(std::memory_order_relaxed); }

 private:
  std::atomic<int64_t> value_{0};
};

// Latencies in nanoseconds, kept in a log-linear nasgw::Histogram (lock-free
// Record) and rendered as a Prometheus histogram in seconds with the fixed
// bounds kLatencyBucketBoundsSeconds.
//
// Error: a sample is counted as if it were at the upper end of its log-linear
// bucket, so a sample at most 1/16 (6.25%) below a bound may be counted only
// under the next bound. It is never counted under a bound it exceeds.
class LatencyHistogram {
 public:
  void Record(uint64_t nanos) { histogram_.Record(nanos); }
  HistogramData Snapshot() const { return histogram_.Snapshot(); }

 private:
  nasgw::Histogram histogram_;
};

// The `le` bounds of every latency histogram, in seconds (+Inf is implied):
// 50 us (a cache hit) to 10 s (beyond any I/O timeout worth telling apart).
inline constexpr const char* kLatencyBucketBoundsSeconds[] = {
    "0.00005", "0.0001", "0.00025", "0.0005", "0.001", "0.0025", "0.005", "0.01", "0.025",
    "0.05",    "0.1",    "0.25",    "0.5",    "1",     "2.5",    "5",     "10"};

class Metrics {
 public:
  // What a collector emits into during a scrape. Same rules as registration:
  // the name and help of a family must be the same everywhere it is emitted.
  // The same family and labels emitted twice in one scrape: the last wins; a
  // registered child wins over a collector's sample with the same labels.
  class Sink {
   public:
    void Counter(std::string_view name, std::string_view help, const Labels& labels, uint64_t value);
    void Gauge(std::string_view name, std::string_view help, const Labels& labels, double value);

   private:
    friend class Metrics;
    struct Scrape;
    explicit Sink(Scrape* scrape) : scrape_(scrape) {}
    Scrape* scrape_;
  };
  using Collector = std::function<void(Sink&)>;

  Metrics();
  ~Metrics();
  Metrics(const Metrics&) = delete;
  Metrics& operator=(const Metrics&) = delete;

  // The child of family `name` with `labels`, created on first use. The
  // pointer stays valid for the life of this Metrics.
  daemon::Counter* Counter(std::string_view name, std::string_view help, const Labels& labels = {});
  daemon::Gauge* Gauge(std::string_view name, std::string_view help, const Labels& labels = {});
  daemon::IntGauge* IntGauge(std::string_view name, std::string_view help, const Labels& labels = {});
  // REQUIRES: no label named "le" (the bucket label).
  LatencyHistogram* Histogram(std::string_view name, std::string_view help, const Labels& labels = {});

  // Called at every Render(), in the order added, without any Metrics lock held.
  void AddCollector(Collector collector);

  // The text exposition format 0.0.4: families sorted by name, each with one
  // # HELP and one # TYPE line, then its samples sorted by labels.
  std::string Render() const;

 private:
  struct State;
  std::unique_ptr<State> state_;
};

// Limits of the HTTP endpoint. Prometheus scrapes with one connection per
// target every few seconds; anything beyond a handful of clients is a
// mistake or an attack, so every resource here is small and bounded.
struct MetricsHttpOptions {
  // Open connections; past this a new connection is closed at once.
  uint32_t connections_max = 64;
  // Request line and headers. A scrape request is a few hundred bytes.
  uint32_t request_bytes_max = 8 * 1024;
  // From accept to the end of the request headers. Frees the slot of a client
  // that connects and sends nothing.
  uint32_t request_timeout_ms = 5'000;
  // From the end of the request to the last byte of the response (a client
  // that stops reading does not hold its slot and its buffer forever).
  uint32_t response_timeout_ms = 10'000;
};

// Serves a Metrics over HTTP/1.0 and 1.1: GET or HEAD of /metrics (the text
// format) and / (a pointer to /metrics); 404 for other paths, 405 for other
// methods, 400 for a malformed request. One request per connection: the
// connection is closed after the response.
//
// One thread runs a poll() loop over non-blocking sockets; a slow or silent
// client never blocks it, but Render() (and so the collectors) runs on it.
// Thread-safety: Stop() and port() may be called from any thread except the
// server's own (that is, not from a collector).
class MetricsHttpServer {
 public:
  // `listen` is "host:port": an IPv4 address, "[IPv6]", or an empty host for
  // every IPv4 interface (":9100"); port 0 picks a free one (see port()).
  // `metrics` must outlive the server.
  static Result<std::unique_ptr<MetricsHttpServer>> Start(const std::string& listen, Metrics* metrics,
                                                          const MetricsHttpOptions& options = {});
  ~MetricsHttpServer();
  MetricsHttpServer(const MetricsHttpServer&) = delete;
  MetricsHttpServer& operator=(const MetricsHttpServer&) = delete;

  // The bound port.
  uint16_t port() const;
  // Closes the listening socket and every connection, and joins the thread.
  // Returns promptly whatever the clients do. Idempotent; the destructor calls it.
  void Stop();

 private:
  struct Impl;
  explicit MetricsHttpServer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace nasgw::daemon
