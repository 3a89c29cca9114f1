#include "block/iscsi_device.h"

#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <deque>
#include <list>
#include <optional>
#include <random>
#include <thread>

#include <sys/eventfd.h>

extern "C" {
#include <iscsi/iscsi.h>
#include <iscsi/scsi-lowlevel.h>
}

#include "base/clock.h"
#include "base/log.h"
#include "base/mutex.h"
#include "block/bulk_window.h"
#include "block/gated_device.h"
#include "block/iscsi_url.h"
#include "block/scsi_status.h"

namespace nasgw::block {

Status IscsiOptions::Validate() const {
  auto range = [](const char* field, uint64_t v, uint64_t lo, uint64_t hi) -> Status {
    if (v < lo || v > hi) {
      return Status::InvalidArgument(std::string(field) + " = " + std::to_string(v) + " is out of range [" +
                                     std::to_string(lo) + ", " + std::to_string(hi) + "]");
    }
    return Status();
  };
  if (urls.empty()) return Status::InvalidArgument("no LUN URL given");
  if (urls.size() > limits::kPathsMax) {
    return Status::InvalidArgument("too many paths: " + std::to_string(urls.size()) + " > " +
                                   std::to_string(limits::kPathsMax));
  }
  NASGW_RETURN_IF_ERROR(range("queue_depth", queue_depth, 1, limits::kQueueDepthMax));
  NASGW_RETURN_IF_ERROR(range("bulk_target_ms", bulk_target_ms, 0, limits::kBulkTargetMsMax));
  NASGW_RETURN_IF_ERROR(range("io_timeout_ms", io_timeout_ms, limits::kIoTimeoutMsMin, limits::kIoTimeoutMsMax));
  NASGW_RETURN_IF_ERROR(
      range("path_timeout_ms", path_timeout_ms, limits::kPathTimeoutMsMin, limits::kPathTimeoutMsMax));
  NASGW_RETURN_IF_ERROR(
      range("connect_timeout_ms", connect_timeout_ms, limits::kConnectTimeoutMsMin, limits::kConnectTimeoutMsMax));
  // The three iSCSI name formats (RFC 3720 3.2.6.3, RFC 3980).
  if (!initiator_name.empty() && initiator_name.rfind("iqn.", 0) != 0 && initiator_name.rfind("eui.", 0) != 0 &&
      initiator_name.rfind("naa.", 0) != 0) {
    return Status::InvalidArgument("initiator_name '" + initiator_name + "' must start with iqn., eui. or naa.");
  }
  return Status();
}

namespace {

constexpr uint64_t kMs = kNanosPerMilli;
// How often the loop looks at its timers while anything is outstanding.
constexpr int kTickMs = 10;

std::string DefaultInitiatorName() {
  char host[256] = {};
  gethostname(host, sizeof(host) - 1);
  std::string h;
  for (char c : std::string(host)) h += (isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '.') ? c : '-';
  return "iqn.2026-11.org.nasgw:" + (h.empty() ? std::string("node") : h);
}

ScsiOutcome OutcomeOf(int status, scsi_task* task) {
  ScsiOutcome o;
  switch (status) {
    case SCSI_STATUS_CANCELLED:
    case SCSI_STATUS_TIMEOUT:
      o.status = ScsiStatus::kTransportLost;
      return o;
    case SCSI_STATUS_ERROR:
      o.status = ScsiStatus::kTransportError;
      return o;
    default:
      o.status = static_cast<ScsiStatus>(status);
  }
  if (status == SCSI_STATUS_CHECK_CONDITION && task != nullptr) {
    o.sense_key = static_cast<SenseKey>(task->sense.key);
    o.asc = static_cast<uint8_t>((task->sense.ascq >> 8) & 0xff);
    o.ascq = static_cast<uint8_t>(task->sense.ascq & 0xff);
  }
  return o;
}

std::string Hex(const char* p, int len) {
  static const char* d = "0123456789abcdef";
  std::string s;
  for (int i = 0; i < len; i++) {
    s += d[(static_cast<uint8_t>(p[i]) >> 4) & 15];
    s += d[static_cast<uint8_t>(p[i]) & 15];
  }
  return s;
}

std::string Trim(const char* s) {
  std::string t(s);
  while (!t.empty() && (t.back() == ' ' || t.back() == '\0')) t.pop_back();
  return t;
}

// The LUN's identity from VPD 0x83: the best designator associated with the
// logical unit (NAA, then EUI-64, then T10 vendor id).
std::string BestDesignator(const scsi_inquiry_device_identification* id) {
  std::string best;
  int best_rank = -1;
  for (auto* d = id->designators; d != nullptr; d = d->next) {
    if (d->association != SCSI_ASSOCIATION_LOGICAL_UNIT) continue;
    int rank = -1;
    std::string value;
    switch (d->designator_type) {
      case SCSI_DESIGNATOR_TYPE_NAA:
        rank = 3;
        value = "naa." + Hex(d->designator, d->designator_length);
        break;
      case SCSI_DESIGNATOR_TYPE_EUI_64:
        rank = 2;
        value = "eui." + Hex(d->designator, d->designator_length);
        break;
      case SCSI_DESIGNATOR_TYPE_T10_VENDORT_ID:
        rank = 1;
        value =
            "t10." + (d->code_set == SCSI_CODESET_ASCII ? Trim(std::string(d->designator, d->designator_length).c_str())
                                                        : Hex(d->designator, d->designator_length));
        break;
      default:
        break;
    }
    if (rank > best_rank) {
      best_rank = rank;
      best = value;
    }
  }
  return best;
}

// Maps a failed connect/login to a Status; libiscsi reports the cause only in
// its error text (lib/login.c, lib/connect.c).
Status ConnectError(const std::string& err, const IscsiUrl& url) {
  auto has = [&](const char* s) { return err.find(s) != std::string::npos; };
  std::string where = url.ToString() + ": " + err;
  if (has("uthentication") || has("uthorization") || has("CHAP") || has("chap")) {
    return Status::PermissionDenied("login refused (CHAP credentials?) at " + where);
  }
  if (has("not found") || has("Not Found") || has("TARGET_NOT_FOUND")) {
    return Status::NotFound("no such target at " + where);
  }
  if (has("LOGICAL_UNIT_NOT_SUPPORTED") || has("LUN not supported") || has("LOGICAL UNIT NOT SUPPORTED")) {
    return Status::NotFound("no such LUN at " + where);
  }
  if (has("resolv")) return Status::InvalidArgument("cannot resolve the host of " + where);
  if (has("refused") || has("unreachable") || has("No route")) {
    return Status::Unavailable("cannot reach portal of " + where);
  }
  return Status::Unavailable("cannot connect to " + where);
}

}  // namespace

// ---- the device ------------------------------------------------------------

struct IscsiDevice::Impl {
  struct Path;

  enum class Kind : uint8_t { kIo, kInquiry, kReadCapacity };

  struct Request {
    IoRequest io;
    Kind kind = Kind::kIo;
    int page = -1;                            // kInquiry: VPD page, -1 for standard
    Path* pinned = nullptr;                   // only on this path (probes)
    bool internal = false;                    // the device's own command: no stats, no PR bookkeeping
    std::function<Status(scsi_task*)> parse;  // data-in decoding, on success
    uint64_t submit_ns = 0;
    uint64_t deadline_ns = 0;
    uint64_t not_before_ns = 0;
    uint64_t sent_ns = 0;
    uint32_t retries = 0;
    Path* path = nullptr;  // while in flight
    std::list<Request*>::iterator in_path;
    scsi_task* task = nullptr;
    std::vector<scsi_iovec> siov;
    unmap_list unmap{};
    scsi_persistent_reserve_out_basic pr{};
    std::vector<uint8_t> caw;  // libiscsi may keep the pointer: own a copy
    Status last_error;
    Impl* impl = nullptr;
  };

  enum class PathState : uint8_t { kDown, kConnecting, kProbing, kUp };

  struct Path {
    int index = 0;
    IscsiUrl url;
    uint32_t isid = 0;  // kept across reconnects: the same I_T nexus
    iscsi_context* ctx = nullptr;
    PathState state = PathState::kDown;
    uint64_t state_deadline_ns = 0;  // connect/probe must finish by then
    uint64_t next_connect_ns = 0;
    uint32_t consecutive_failures = 0;
    std::list<Request*> inflight;  // in send order: front is the oldest
    Status fail_request;           // non-ok: tear down at the next turn of the loop
    Status last_error;
    bool attempted = false;     // at least one connect attempt finished
    bool tearing_down = false;  // inside TearDown(): cancels are ours
    std::atomic<uint64_t> ops{0};
    std::atomic<uint64_t> failures{0};
    std::atomic<bool> up{false};
    Impl* impl = nullptr;
  };

  struct ConnectCtx {
    Path* path;
    iscsi_context* ctx;
  };

  IscsiOptions opts;
  std::string initiator;
  std::vector<std::unique_ptr<Path>> paths;
  DeviceInfo info;
  uint64_t io_timeout_ns = 0;
  uint64_t path_timeout_ns = 0;
  uint64_t connect_timeout_ns = 0;
  uint32_t admit_max = 0;
  uint32_t admit_bulk_max = 0;  // bulk may take half the submission queue: sync always finds room

  // Shared with submitters.
  Mutex mu;
  CondVar cv;  // submitters waiting for room; Open() waiting for paths
  std::deque<Request*> submitted GUARDED_BY(mu);
  bool closing GUARDED_BY(mu) = false;
  bool open_done GUARDED_BY(mu) = false;            // every path tried once
  std::vector<Status> open_results GUARDED_BY(mu);  // per path, until open_done
  std::atomic<uint32_t> admitted{0};                // requests not yet completed
  std::atomic<uint32_t> admitted_bulk{0};           // of which bulk
  std::atomic<bool> wakeup_pending{false};
  int event_fd = -1;
  std::thread thread;
  std::thread::id loop_id;
  std::atomic<bool> stop{false};

  // Loop-thread only.
  std::deque<Request*> ready;  // sync: dispatched first, up to queue_depth
  // Bulk: within the window and bulk_slots, reads and writes taken in
  // turn, so that write-back (which frees cache memory and intent-log
  // space, and so unblocks writers and commits) never waits behind every
  // read that misses the cache, nor reads behind a flush.
  std::deque<Request*> ready_bulk[2];  // [0] reads, [1] writes
  int bulk_turn = 0;
  std::vector<Request*> delayed;
  uint32_t in_flight = 0;
  uint32_t bulk_in_flight = 0;  // commands; their bytes are in `bulk`
  uint32_t bulk_slots = 0;      // queue slots bulk may hold: a quarter stay for sync
  std::optional<BulkWindow> bulk;
  size_t rr = 0;
  uint64_t registered_key = 0;  // our PR key once REGISTER succeeded
  std::string identity;         // designator every path must report
  std::mt19937_64 rng{std::random_device{}()};

  // Statistics (written by the loop, read by anyone).
  struct AtomicOp {
    std::atomic<uint64_t> ops{0}, bytes{0}, errors{0};
    Histogram latency;
  };
  AtomicOp st_read, st_write, st_other;
  std::atomic<uint64_t> st_retries{0}, st_timeouts{0};
  std::atomic<uint32_t> st_in_flight{0}, st_queued{0}, st_bulk_queued{0};
  std::atomic<uint64_t> st_bulk_window{0}, st_bulk_in_flight{0};

  ~Impl() {
    if (event_fd >= 0) close(event_fd);
  }

  // ---- submission (any thread) ----

  Status Admit(Request* r) {
    MutexLock lock(mu);
    if (closing) return Status::Unavailable(info.name + " is closing");
    const bool is_bulk = IsBulk(r);
    auto full = [&] { return admitted.load() >= admit_max || (is_bulk && admitted_bulk.load() >= admit_bulk_max); };
    if (full()) {
      if (std::this_thread::get_id() == loop_id) return Status::Busy(info.name + ": submission queue full");
      while (full() && !closing) cv.Wait(mu);
      if (closing) return Status::Unavailable(info.name + " is closing");
    }
    admitted++;
    if (is_bulk) admitted_bulk++;
    r->impl = this;
    r->submit_ns = MonotonicNanos();
    r->deadline_ns = r->submit_ns + io_timeout_ns;
    submitted.push_back(r);
    lock.Unlock();
    Wake();
    return Status();
  }

  void Wake() {
    if (std::this_thread::get_id() == loop_id) return;  // the loop drains before it sleeps
    if (!wakeup_pending.exchange(true)) {
      uint64_t one = 1;
      ssize_t n = write(event_fd, &one, sizeof(one));
      (void)n;
    }
  }

  // ---- the loop ----

  void Run() {
    // libiscsi writes data-out with writev() (no MSG_NOSIGNAL): a reset
    // connection would raise SIGPIPE. It is thread-directed, so blocking it
    // here keeps it away from the host process.
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGPIPE);
    pthread_sigmask(SIG_BLOCK, &set, nullptr);
    loop_id = std::this_thread::get_id();
    for (Path* p : AllPaths()) StartConnect(p, MonotonicNanos());
    std::vector<pollfd> pfds;
    std::vector<Path*> pfd_path;
    for (;;) {
      wakeup_pending.store(false);
      DrainSubmitted();
      const uint64_t now = MonotonicNanos();
      Timers(now);
      ProcessPathFailures(now);
      Dispatch(now);
      st_in_flight.store(in_flight, std::memory_order_relaxed);
      const size_t bulk_waiting = ready_bulk[0].size() + ready_bulk[1].size();
      st_queued.store(static_cast<uint32_t>(ready.size() + bulk_waiting + delayed.size()), std::memory_order_relaxed);
      st_bulk_queued.store(static_cast<uint32_t>(bulk_waiting), std::memory_order_relaxed);
      st_bulk_window.store(bulk->window(), std::memory_order_relaxed);
      st_bulk_in_flight.store(bulk->in_flight(), std::memory_order_relaxed);
      if (stop.load() && admitted.load() == 0) break;

      pfds.clear();
      pfd_path.clear();
      pfds.push_back({event_fd, POLLIN, 0});
      pfd_path.push_back(nullptr);
      bool busy = in_flight > 0 || !ready.empty() || bulk_waiting > 0 || !delayed.empty();
      for (Path* p : AllPaths()) {
        if (p->ctx == nullptr) {
          busy = true;  // reconnect timer pending
          continue;
        }
        if (p->state != PathState::kUp) busy = true;
        pfds.push_back({iscsi_get_fd(p->ctx), static_cast<short>(iscsi_which_events(p->ctx)), 0});
        pfd_path.push_back(p);
      }
      int n = poll(pfds.data(), pfds.size(), busy || stop.load() ? kTickMs : -1);
      if (n < 0 && errno != EINTR) {
        NASGW_LOG(kError, "block") << "poll failed" << Kv("errno", errno);
      }
      if (n <= 0) continue;
      if (pfds[0].revents & POLLIN) {
        uint64_t v;
        ssize_t r = read(event_fd, &v, sizeof(v));
        (void)r;
      }
      for (size_t i = 1; i < pfds.size(); i++) {
        Path* p = pfd_path[i];
        if (pfds[i].revents == 0 || p->ctx == nullptr || !p->fail_request.ok()) continue;
        if (iscsi_service(p->ctx, pfds[i].revents) < 0) {
          RequestPathFailure(p, Status::Unavailable(std::string("connection lost: ") + iscsi_get_error(p->ctx)));
        }
      }
      ProcessPathFailures(MonotonicNanos());
    }
    for (Path* p : AllPaths()) {
      if (p->ctx != nullptr) TearDown(p);
    }
  }

  std::vector<Path*> AllPaths() {
    std::vector<Path*> v;
    for (auto& p : paths) v.push_back(p.get());
    return v;
  }

  void DrainSubmitted() {
    MutexLock lock(mu);
    while (!submitted.empty()) {
      MakeReady(submitted.front(), false);
      submitted.pop_front();
    }
  }

  static bool IsBulk(const Request* r) { return r->kind == Kind::kIo && r->io.io_class == IoClass::kBulk; }
  uint64_t BytesOf(const Request* r) const { return r->io.blocks * (info.block_size ? info.block_size : 512); }

  void MakeReady(Request* r, bool front) {
    std::deque<Request*>& q = IsBulk(r) ? ready_bulk[r->io.op == Op::kRead ? 0 : 1] : ready;
    if (front) {
      q.push_front(r);
    } else {
      q.push_back(r);
    }
  }

  void Timers(uint64_t now) {
    for (Path* p : AllPaths()) {
      switch (p->state) {
        case PathState::kDown:
          if (p->ctx == nullptr && now >= p->next_connect_ns) StartConnect(p, now);
          break;
        case PathState::kConnecting:
        case PathState::kProbing:
          if (now >= p->state_deadline_ns) {
            RequestPathFailure(p, Status::TimedOut("no login on " + p->url.ToString() + " within " +
                                                   std::to_string(opts.connect_timeout_ms) + " ms"));
          }
          break;
        case PathState::kUp:
          if (!p->inflight.empty() && now - p->inflight.front()->sent_ns > path_timeout_ns) {
            RequestPathFailure(p, Status::TimedOut("no response on " + p->url.Portal() + " for " +
                                                   std::to_string(opts.path_timeout_ms) + " ms"));
          }
          break;
      }
    }
    // Backed-off retries whose time has come.
    for (size_t i = 0; i < delayed.size();) {
      if (delayed[i]->not_before_ns <= now || delayed[i]->deadline_ns <= now) {
        MakeReady(delayed[i], false);
        delayed[i] = delayed.back();
        delayed.pop_back();
      } else {
        i++;
      }
    }
    // Requests waiting for a path past their deadline. (In-flight ones are
    // bounded by path_timeout, which is below io_timeout.)
    for (std::deque<Request*>* q : {&ready, &ready_bulk[0], &ready_bulk[1]}) {
      for (auto it = q->begin(); it != q->end();) {
        if ((*it)->deadline_ns <= now) {
          Request* r = *it;
          it = q->erase(it);
          TimeOut(r);
        } else {
          ++it;
        }
      }
    }
  }

  void TimeOut(Request* r) {
    st_timeouts++;
    std::string why = "no path to " + info.name + " completed it";
    if (!r->last_error.ok()) why = "last error: " + r->last_error.ToString();
    Complete(r, Status::TimedOut(std::string(OpName(r->io.op)) + " not done within " +
                                 std::to_string(opts.io_timeout_ms) + " ms (" + why + ")"));
  }

  Path* PickPath(Request* r) {
    if (r->pinned != nullptr) {
      Path* p = r->pinned;
      return (p->ctx != nullptr && p->fail_request.ok() &&
              (p->state == PathState::kProbing || p->state == PathState::kUp))
                 ? p
                 : nullptr;
    }
    for (size_t i = 0; i < paths.size(); i++) {
      Path* p = paths[(rr + i) % paths.size()].get();
      if (p->state == PathState::kUp && p->fail_request.ok()) {
        rr = (rr + i + 1) % paths.size();
        return p;
      }
    }
    return nullptr;
  }

  void Dispatch(uint64_t now) {
    size_t scanned = 0;
    const size_t n = ready.size();
    while (in_flight < opts.queue_depth && scanned < n && !ready.empty()) {
      Request* r = ready.front();
      ready.pop_front();
      scanned++;
      Path* p = PickPath(r);
      if (p == nullptr) {
        if (r->pinned != nullptr && r->pinned->state == PathState::kDown) {
          Complete(r, Status::Unavailable("path " + r->pinned->url.Portal() + " went down"));
          continue;
        }
        ready.push_back(r);  // wait for a path; keep looking for pinned probes
        continue;
      }
      Issue(r, p, now);
    }
    // Bulk, reads and writes in turn (each in order), while it fits the
    // window and leaves sync its slots.
    while (in_flight < opts.queue_depth && bulk_in_flight < bulk_slots) {
      if (ready_bulk[bulk_turn].empty()) bulk_turn ^= 1;
      std::deque<Request*>& q = ready_bulk[bulk_turn];
      if (q.empty() || !bulk->Admits(BytesOf(q.front()))) break;
      Request* r = q.front();
      Path* p = PickPath(r);
      if (p == nullptr) break;  // no path up: it waits (and times out) in the queue
      q.pop_front();
      Issue(r, p, now);
      bulk_turn ^= 1;
    }
  }

  static void TaskCallback(iscsi_context*, int status, void* command_data, void* private_data) {
    auto* r = static_cast<Request*>(private_data);
    r->impl->OnTaskDone(r, status, static_cast<scsi_task*>(command_data));
  }

  void Issue(Request* r, Path* p, uint64_t now) {
    const uint32_t bs = info.block_size ? info.block_size : 512;
    const int lun = static_cast<int>(p->url.lun);
    const IoRequest& io = r->io;
    if (io.gate != nullptr) {
      // Past the gate's time bound (the owner's lease) a change is not
      // sent, the first time or again: it may have waited here (the queue,
      // a retry's backoff, a path's reconnect, the process stopped) since
      // the gate let it through, and another node may own the LUN now.
      Status held = io.gate->CheckBound();
      if (!held.ok()) {
        Complete(r, Status(held.code(), std::string(OpName(io.op)) + " on " + info.name +
                                            " not sent: " + std::string(held.message())));
        return;
      }
    }
    scsi_task* t = nullptr;
    if (r->kind == Kind::kInquiry) {
      t = iscsi_inquiry_task(p->ctx, lun, r->page >= 0 ? 1 : 0, r->page >= 0 ? r->page : 0, 255, TaskCallback, r);
    } else if (r->kind == Kind::kReadCapacity) {
      t = iscsi_readcapacity16_task(p->ctx, lun, TaskCallback, r);

    } else {
      switch (io.op) {
        case Op::kRead:
        case Op::kWrite: {
          r->siov.resize(io.iov.size());
          for (size_t i = 0; i < io.iov.size(); i++) r->siov[i] = {io.iov[i].base, io.iov[i].len};
          const auto len = static_cast<uint32_t>(io.blocks * bs);
          if (io.op == Op::kRead) {
            t = iscsi_read16_iov_task(p->ctx, lun, io.lba, len, static_cast<int>(bs), 0, 0, 0, 0, 0, TaskCallback, r,
                                      r->siov.data(), static_cast<int>(r->siov.size()));
          } else {
            t = iscsi_write16_iov_task(p->ctx, lun, io.lba, nullptr, len, static_cast<int>(bs), 0, 0, io.fua ? 1 : 0, 0,
                                       0, TaskCallback, r, r->siov.data(), static_cast<int>(r->siov.size()));
          }
          break;
        }
        case Op::kFlush:
          t = iscsi_synchronizecache16_task(p->ctx, lun, 0, 0, 0, 0, TaskCallback, r);
          break;
        case Op::kUnmap:
          r->unmap = {io.lba, static_cast<uint32_t>(io.blocks)};
          t = iscsi_unmap_task(p->ctx, lun, 0, 0, &r->unmap, 1, TaskCallback, r);
          break;
        case Op::kCompareAndWrite:
          if (r->caw.empty()) r->caw.assign(io.compare_and_write, io.compare_and_write + 2 * io.blocks * bs);
          t = iscsi_compareandwrite_task(p->ctx, lun, io.lba, r->caw.data(), static_cast<uint32_t>(r->caw.size()),
                                         static_cast<int>(bs), 0, 0, 0, 0, 0, TaskCallback, r);
          break;
        case Op::kPrOut:
          r->pr = {};
          r->pr.reservation_key = io.pr_out.key;
          r->pr.service_action_reservation_key = io.pr_out.service_action_key;
          t = iscsi_persistent_reserve_out_task(p->ctx, lun, static_cast<int>(io.pr_out.action), 0,
                                                static_cast<int>(io.pr_out.type), &r->pr, TaskCallback, r);
          break;
        case Op::kPrReadKeys:
          t = iscsi_persistent_reserve_in_task(p->ctx, lun, SCSI_PERSISTENT_RESERVE_READ_KEYS, 8 + 8 * 256,
                                               TaskCallback, r);
          break;
        case Op::kPrReadReservation:
          t = iscsi_persistent_reserve_in_task(p->ctx, lun, SCSI_PERSISTENT_RESERVE_READ_RESERVATION, 24, TaskCallback,
                                               r);
          break;
      }
    }
    if (t == nullptr) {
      // libiscsi could not queue it (out of memory, or the context is
      // broken): the path is suspect, the request tries again elsewhere.
      r->last_error = Status::IoError(std::string("cannot queue command: ") + iscsi_get_error(p->ctx));
      RequestPathFailure(p, r->last_error);
      Retry(r, Disposition::kRetryPath, now);
      return;
    }
    r->task = t;
    r->path = p;
    r->sent_ns = now;
    p->inflight.push_back(r);
    r->in_path = std::prev(p->inflight.end());
    in_flight++;
    if (IsBulk(r)) {
      bulk_in_flight++;
      bulk->Issued(BytesOf(r), now);
    }
  }

  void OnTaskDone(Request* r, int status, scsi_task* task) {
    Path* p = r->path;
    NASGW_ASSERT(p != nullptr);
    p->inflight.erase(r->in_path);
    r->path = nullptr;
    in_flight--;
    p->ops.fetch_add(1, std::memory_order_relaxed);

    const ScsiOutcome outcome = OutcomeOf(status, task);
    Classification c = ClassifyScsi(outcome, r->io.op);
    if (c.status.ok() && c.disposition == Disposition::kDone && r->parse) c.status = r->parse(task);
    if (IsBulk(r)) {
      bulk_in_flight--;
      bulk->Completed(BytesOf(r), c.status.ok() && c.disposition == Disposition::kDone, MonotonicNanos());
    }
    if (task != nullptr) scsi_free_scsi_task(task);
    r->task = nullptr;

    if (c.disposition == Disposition::kDone) {
      if (!c.status.ok()) {
        c.status = c.status.WithContext(std::string(OpName(r->io.op)) + " lba " + std::to_string(r->io.lba) + " on " +
                                        p->url.Portal());
      }
      Complete(r, std::move(c.status));
      return;
    }
    if (c.disposition == Disposition::kRetryPath && !p->tearing_down) {
      // libiscsi cancels every task inside the iscsi_service() call that saw
      // the connection drop: the context is dead from here on.
      RequestPathFailure(p, Status::Unavailable("connection lost on " + p->url.Portal()));
    }
    r->last_error = c.status;
    Retry(r, c.disposition, MonotonicNanos());
  }

  void Retry(Request* r, Disposition d, uint64_t now) {
    if (r->pinned != nullptr) {
      // A probe belongs to one connection; if it failed, so did the probe.
      Complete(r, r->last_error.ok() ? Status::Unavailable("probe failed") : r->last_error);
      return;
    }
    // A lost path is not the command's fault: only count SCSI-level retries.
    if (d != Disposition::kRetryPath && ++r->retries > limits::kCommandRetriesMax) {
      Complete(r, r->last_error.WithContext(std::string(OpName(r->io.op)) + " failed after " +
                                            std::to_string(limits::kCommandRetriesMax) + " retries"));
      return;
    }
    st_retries.fetch_add(1, std::memory_order_relaxed);
    if (d == Disposition::kRetryBackoff) {
      std::uniform_real_distribution<double> jitter(0, 1);
      r->not_before_ns =
          now +
          BackoffMs(r->retries, limits::kReconnectBackoffMsMin, limits::kReconnectBackoffMsMax, jitter(rng)) * kMs;
      delayed.push_back(r);
    } else {
      MakeReady(r, true);
    }
  }

  void Complete(Request* r, Status s) {
    const uint64_t lat = MonotonicNanos() - r->submit_ns;
    if (!r->internal) {
      AtomicOp& os = r->io.op == Op::kRead ? st_read : r->io.op == Op::kWrite ? st_write : st_other;
      os.ops.fetch_add(1, std::memory_order_relaxed);
      if (r->io.op == Op::kRead || r->io.op == Op::kWrite) {
        os.bytes.fetch_add(r->io.blocks * info.block_size, std::memory_order_relaxed);
      }
      if (!s.ok()) os.errors.fetch_add(1, std::memory_order_relaxed);
      os.latency.Record(lat);
      if (s.ok() && r->io.op == Op::kPrOut) OnPrOutDone(r->io.pr_out);
    }
    IoCallback done = std::move(r->io.done);
    bool was_full = false;
    if (IsBulk(r)) was_full = admitted_bulk.fetch_sub(1) >= admit_bulk_max;
    delete r;
    was_full = admitted.fetch_sub(1) >= admit_max || was_full;
    if (was_full || stop.load()) {
      MutexLock lock(mu);
      cv.NotifyAll();
    }
    done(std::move(s));
  }

  // ---- paths ----

  void StartConnect(Path* p, uint64_t now) {
    NASGW_ASSERT(p->ctx == nullptr);
    iscsi_context* ctx = iscsi_create_context(initiator.c_str());
    if (ctx == nullptr) {
      PathFailed(p, Status::IoError("cannot create iSCSI context"), now);
      return;
    }
    iscsi_set_targetname(ctx, p->url.target.c_str());
    iscsi_set_session_type(ctx, ISCSI_SESSION_NORMAL);
    // TCP checksums protect the data; header CRC costs CPU for little gain.
    iscsi_set_header_digest(ctx, ISCSI_HEADER_DIGEST_NONE);
    iscsi_set_noautoreconnect(ctx, 1);
    iscsi_set_isid_random(ctx, p->isid, 0);
    if (!p->url.user.empty()) {
      iscsi_set_initiator_username_pwd(ctx, p->url.user.c_str(), p->url.password.c_str());
    }
    p->ctx = ctx;
    p->state = PathState::kConnecting;
    p->state_deadline_ns = now + connect_timeout_ns;
    if (iscsi_full_connect_async(ctx, p->url.Portal().c_str(), static_cast<int>(p->url.lun), ConnectCallback, p) != 0) {
      RequestPathFailure(p, ConnectError(iscsi_get_error(ctx), p->url));
    }
  }

  static void ConnectCallback(iscsi_context* ctx, int status, void*, void* private_data) {
    auto* p = static_cast<Path*>(private_data);
    p->impl->OnConnected(p, ctx, status);
  }

  void OnConnected(Path* p, iscsi_context* ctx, int status) {
    if (p->ctx != ctx || p->state != PathState::kConnecting) return;  // a cancelled attempt
    if (status != SCSI_STATUS_GOOD) {
      RequestPathFailure(p, ConnectError(iscsi_get_error(ctx), p->url));
      return;
    }
    p->state = PathState::kProbing;
    Probe(p);
  }

  // Before a path carries I/O: prove it reaches the same LUN, and carry our
  // persistent-reservation registration over to it.
  void Probe(Path* p) {
    auto* r = new Request;
    r->kind = Kind::kInquiry;
    r->page = SCSI_INQUIRY_PAGECODE_DEVICE_IDENTIFICATION;
    r->pinned = p;
    r->internal = true;
    r->io.op = Op::kRead;  // for naming in errors only
    auto id = std::make_shared<std::string>();
    r->parse = [id](scsi_task* t) {
      auto* d = static_cast<scsi_inquiry_device_identification*>(scsi_datain_unmarshall(t));
      if (d == nullptr) return Status::IoError("cannot decode VPD 0x83");
      *id = BestDesignator(d);
      return Status();
    };
    r->io.done = [this, p, id](const Status& s) {
      if (p->state != PathState::kProbing) return;
      if (!s.ok()) {
        RequestPathFailure(p, s.WithContext("identify LUN"));
        return;
      }
      if (id->empty()) *id = "portal-unidentified:" + p->url.target + "/" + std::to_string(p->url.lun);
      if (identity.empty()) identity = *id;
      if (*id != identity) {
        RequestPathFailure(p, Status::InvalidArgument(p->url.ToString() + " reaches a different LUN (" + *id +
                                                      ", expected " + identity + ")"));
        return;
      }
      if (registered_key == 0) {
        PathUp(p);
        return;
      }
      CarryRegistration(p);
    };
    InternalSubmit(r);
  }

  void CarryRegistration(Path* p) {
    auto keys = std::make_shared<PrKeys>();
    auto* r = NewPinned(p, Op::kPrReadKeys);
    r->io.keys_out = keys.get();
    r->parse = ParsePrIn(r);
    r->io.done = [this, p, keys](const Status& s) {
      if (p->state != PathState::kProbing) return;
      if (!s.ok()) {
        RequestPathFailure(p, s.WithContext("read PR keys"));
        return;
      }
      bool present = false;
      for (uint64_t k : keys->keys) present |= (k == registered_key);
      if (!present) {
        // Preempted by another node, or the target lost its PR state.
        // Never resurrect a registration someone removed.
        NASGW_LOG(kWarn, "block") << "our PR key is gone; not registering again" << Kv("lun", info.name);
        registered_key = 0;
        PathUp(p);
        return;
      }
      RegisterOn(p, [this, p](const Status& s2) {
        if (p->state != PathState::kProbing) return;
        if (!s2.ok()) {
          RequestPathFailure(p, s2.WithContext("register PR key on new path"));
          return;
        }
        PathUp(p);
      });
    };
    InternalSubmit(r);
  }

  void RegisterOn(Path* p, IoCallback done) {
    auto* r = NewPinned(p, Op::kPrOut);
    r->io.pr_out = {PrAction::kRegisterAndIgnoreExistingKey, PrType::kNone, 0, registered_key};
    r->io.done = std::move(done);
    InternalSubmit(r);
  }

  Request* NewPinned(Path* p, Op op) {
    auto* r = new Request;
    r->pinned = p;
    r->internal = true;
    r->io.op = op;
    return r;
  }

  void OnPrOutDone(const PrOutParams& params) {
    if (params.action != PrAction::kRegister && params.action != PrAction::kRegisterAndIgnoreExistingKey) return;
    registered_key = params.service_action_key;
    if (registered_key == 0) return;
    // Register the same key on every other live path (each is its own I_T nexus).
    for (Path* p : AllPaths()) {
      if (p->state != PathState::kUp) continue;
      RegisterOn(p, [this, p](const Status& s) {
        if (!s.ok()) RequestPathFailure(p, s.WithContext("register PR key on path"));
      });
    }
  }

  // Internal requests skip Admit(): they are few, bounded by the path count.
  void InternalSubmit(Request* r) {
    r->impl = this;
    r->submit_ns = MonotonicNanos();
    r->deadline_ns = r->submit_ns + connect_timeout_ns;
    admitted++;
    ready.push_front(r);
  }

  void PathUp(Path* p) {
    p->state = PathState::kUp;
    p->consecutive_failures = 0;
    p->attempted = true;
    p->up.store(true);
    p->last_error = Status();
    NASGW_LOG(kInfo, "block") << "path up" << Kv("lun", p->url.ToString()) << Kv("portal", p->url.Portal());
    NotifyOpen(p, Status());
  }

  void RequestPathFailure(Path* p, Status why) {
    if (p->fail_request.ok()) p->fail_request = std::move(why);
  }

  void ProcessPathFailures(uint64_t now) {
    for (Path* p : AllPaths()) {
      if (p->fail_request.ok()) continue;
      Status why = std::move(p->fail_request);
      p->fail_request = Status();
      if (p->ctx == nullptr) continue;
      TearDown(p);
      PathFailed(p, why, now);
    }
  }

  // Destroys the context; libiscsi then completes every outstanding task with
  // SCSI_STATUS_CANCELLED, which OnTaskDone turns into a re-issue elsewhere.
  void TearDown(Path* p) {
    iscsi_context* ctx = p->ctx;
    const bool was_up = p->state == PathState::kUp;
    p->state = PathState::kDown;
    p->up.store(false);
    p->tearing_down = true;
    iscsi_destroy_context(ctx);
    p->ctx = nullptr;
    // Whatever libiscsi did not hand back is lost with the connection.
    while (!p->inflight.empty()) {
      Request* r = p->inflight.front();
      OnTaskDone(r, SCSI_STATUS_CANCELLED, r->task);  // libiscsi freed the PDU, not the task
    }
    p->tearing_down = false;
    if (was_up) p->failures.fetch_add(1, std::memory_order_relaxed);
  }

  void PathFailed(Path* p, const Status& why, uint64_t now) {
    std::uniform_real_distribution<double> jitter(0, 1);
    uint32_t delay = BackoffMs(p->consecutive_failures++, limits::kReconnectBackoffMsMin,
                               limits::kReconnectBackoffMsMax, jitter(rng));
    p->next_connect_ns = now + delay * kMs;
    p->last_error = why;
    p->attempted = true;
    if (!stop.load()) {
      NASGW_LOG(kWarn, "block") << "path down" << Kv("portal", p->url.Portal()) << Kv("error", why.ToString())
                                << Kv("retry_ms", delay);
    }
    NotifyOpen(p, why);
  }

  // Records the first outcome of each path for Open().
  void NotifyOpen(Path* p, const Status& outcome) {
    MutexLock lock(mu);
    if (open_done) return;
    if (open_results[p->index].code() == Code::kBusy) open_results[p->index] = outcome;
    bool all = true;
    for (const Status& s : open_results) all &= s.code() != Code::kBusy;
    if (all) {
      open_done = true;
      cv.NotifyAll();
    }
  }

  void Shutdown() {
    if (!thread.joinable()) return;
    {
      MutexLock lock(mu);
      closing = true;
      cv.NotifyAll();
    }
    stop.store(true);
    uint64_t one = 1;
    ssize_t n = write(event_fd, &one, sizeof(one));
    (void)n;
    thread.join();
  }

  std::function<Status(scsi_task*)> ParsePrIn(Request* r) {
    const Op op = r->io.op;
    PrKeys* keys = r->io.keys_out;
    PrReservation* resv = r->io.reservation_out;
    return [op, keys, resv](scsi_task* t) -> Status {
      void* d = scsi_datain_unmarshall(t);
      if (d == nullptr) return Status::IoError("cannot decode PERSISTENT RESERVE IN data");
      if (op == Op::kPrReadKeys) {
        auto* k = static_cast<scsi_persistent_reserve_in_read_keys*>(d);
        keys->generation = k->prgeneration;
        keys->keys.assign(k->keys, k->keys + k->num_keys);
      } else {
        auto* rv = static_cast<scsi_persistent_reserve_in_read_reservation*>(d);
        *resv = PrReservation{};
        resv->generation = rv->prgeneration;
        resv->reserved = rv->reserved != 0;
        resv->key = rv->reservation_key;
        resv->type = static_cast<PrType>(rv->pr_type & 0x0f);
      }
      return Status();
    };
  }
};

// ---- public surface ----------------------------------------------------------

IscsiDevice::IscsiDevice(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

const DeviceInfo& IscsiDevice::info() const {
  return impl_->info;
}

Status IscsiDevice::SubmitValidated(IoRequest req) {
  auto* r = new Impl::Request;
  r->io = std::move(req);
  if (r->io.op == Op::kPrReadKeys || r->io.op == Op::kPrReadReservation) r->parse = impl_->ParsePrIn(r);
  Status s = impl_->Admit(r);
  if (!s.ok()) delete r;
  return s;
}

BlockStats IscsiDevice::Stats() const {
  BlockStats s;
  auto copy = [](const Impl::AtomicOp& a, OpStats& o) {
    o.ops = a.ops.load(std::memory_order_relaxed);
    o.bytes = a.bytes.load(std::memory_order_relaxed);
    o.errors = a.errors.load(std::memory_order_relaxed);
    o.latency_ns = a.latency.Snapshot();
  };
  copy(impl_->st_read, s.read);
  copy(impl_->st_write, s.write);
  copy(impl_->st_other, s.other);
  s.in_flight = impl_->st_in_flight.load();
  s.queued = impl_->st_queued.load();
  s.retries = impl_->st_retries.load();
  s.timeouts = impl_->st_timeouts.load();
  s.bulk_window_bytes = impl_->st_bulk_window.load();
  s.bulk_in_flight_bytes = impl_->st_bulk_in_flight.load();
  s.bulk_queued = impl_->st_bulk_queued.load();
  for (auto& p : impl_->paths) {
    PathStats ps;
    ps.portal = p->url.Portal();
    ps.up = p->up.load();
    ps.ops = p->ops.load();
    ps.failures = p->failures.load();
    s.paths.push_back(ps);
  }
  return s;
}

IscsiDevice::~IscsiDevice() {
  impl_->Shutdown();
}

namespace {

using Impl = IscsiDevice::Impl;

// Runs one identification command through the request path and waits.
Status Identify(Impl* impl, Impl::Kind kind, int page, std::function<Status(scsi_task*)> parse) {
  auto* r = new Impl::Request;
  r->kind = kind;
  r->page = page;
  r->internal = true;
  r->io.op = Op::kRead;  // names the request in errors
  r->parse = std::move(parse);
  Mutex mu;
  CondVar cv;
  bool done = false;
  Status result;
  r->io.done = [&](Status s) {
    MutexLock lock(mu);
    result = std::move(s);
    done = true;
    cv.NotifyAll();
  };
  Status s = impl->Admit(r);
  if (!s.ok()) {
    delete r;
    return s;
  }
  MutexLock lock(mu);
  while (!done) cv.Wait(mu);
  return result;
}

template <typename T>
T* Unmarshall(scsi_task* t) {
  if (scsi_datain_getfullsize(t) > static_cast<int>(t->datain.size)) return nullptr;  // truncated page
  return static_cast<T*>(scsi_datain_unmarshall(t));
}

Status IdentifyLun(Impl* impl) {
  DeviceInfo& in = impl->info;
  NASGW_RETURN_IF_ERROR(Identify(impl, Impl::Kind::kInquiry, -1, [&in](scsi_task* t) {
                          auto* d = Unmarshall<scsi_inquiry_standard>(t);
                          if (d == nullptr) return Status::IoError("cannot decode standard INQUIRY data");
                          if (d->device_type != SCSI_INQUIRY_PERIPHERAL_DEVICE_TYPE_DIRECT_ACCESS) {
                            return Status::InvalidArgument("not a disk (peripheral device type " +
                                                           std::to_string(d->device_type) + ")");
                          }
                          in.vendor = Trim(d->vendor_identification);
                          in.product = Trim(d->product_identification);
                          in.revision = Trim(d->product_revision_level);
                          return Status();
                        }).WithContext("INQUIRY"));
  NASGW_RETURN_IF_ERROR(
      Identify(impl, Impl::Kind::kReadCapacity, -1, [&in](scsi_task* t) {
        auto* d = Unmarshall<scsi_readcapacity16>(t);
        if (d == nullptr) return Status::IoError("cannot decode READ CAPACITY(16) data");
        if (d->block_length < 512 || d->block_length > 65536 || (d->block_length & (d->block_length - 1)) != 0) {
          return Status::NotSupported("block size " + std::to_string(d->block_length) + " is not supported");
        }
        in.block_size = d->block_length;
        in.num_blocks = d->returned_lba + 1;
        in.thin_provisioned = d->lbpme != 0;
        in.unmap_reads_zeroes = d->lbprz != 0;
        return Status();
      }).WithContext("READ CAPACITY(16)"));
  // Optional pages: a target that lacks them still works, with defaults.
  Identify(impl, Impl::Kind::kInquiry, SCSI_INQUIRY_PAGECODE_UNIT_SERIAL_NUMBER, [&in](scsi_task* t) {
    auto* d = Unmarshall<scsi_inquiry_unit_serial_number>(t);
    if (d != nullptr && d->usn != nullptr) in.serial = Trim(d->usn);
    return Status();
  }).IgnoreError();
  in.max_compare_write_blocks = 0;
  Identify(impl, Impl::Kind::kInquiry, SCSI_INQUIRY_PAGECODE_BLOCK_LIMITS, [&in](scsi_task* t) {
    auto* d = Unmarshall<scsi_inquiry_block_limits>(t);
    if (d != nullptr) {
      in.max_transfer_blocks = d->max_xfer_len;
      in.max_unmap_blocks = d->max_unmap;
      in.max_compare_write_blocks = d->max_cmp;
    }
    return Status();
  }).IgnoreError();
  return Status();
}

}  // namespace

Result<std::unique_ptr<IscsiDevice>> IscsiDevice::Open(const IscsiOptions& options) {
  NASGW_RETURN_IF_ERROR(options.Validate());
  auto impl = std::make_unique<Impl>();
  impl->opts = options;
  impl->initiator = options.initiator_name.empty() ? DefaultInitiatorName() : options.initiator_name;
  impl->io_timeout_ns = options.io_timeout_ms * kMs;
  impl->path_timeout_ns = options.path_timeout_ms * kMs;
  impl->connect_timeout_ns = options.connect_timeout_ms * kMs;
  impl->admit_max = limits::kSubmitQueueMax + options.queue_depth;
  impl->admit_bulk_max = impl->admit_max / 2;
  impl->bulk_slots = options.queue_depth - options.queue_depth / 4;  // at least 1
  impl->bulk.emplace(BulkWindowOptions{uint64_t{options.bulk_target_ms} * kMs, limits::kBulkWindowMinBytes,
                                       limits::kBulkWindowMaxBytes});
  std::random_device rd;
  for (size_t i = 0; i < options.urls.size(); i++) {
    auto url = ParseIscsiUrl(options.urls[i]);
    if (!url.ok()) return url.status();
    auto p = std::make_unique<Impl::Path>();
    p->index = static_cast<int>(i);
    p->url = std::move(url.value());
    p->isid = rd() & 0x3fffff;  // 22 random bits of the ISID, fixed for the life of the path
    p->impl = impl.get();
    impl->paths.push_back(std::move(p));
    MutexLock lock(impl->mu);  // no loop thread yet: for the analysis
    impl->open_results.push_back(Status::Busy("not tried yet"));
  }
  impl->info.name = impl->paths[0]->url.ToString();
  impl->info.block_size = 512;  // until READ CAPACITY answers; only probes run before
  impl->event_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (impl->event_fd < 0) return Status::IoError("eventfd failed");

  Impl* im = impl.get();
  std::unique_ptr<IscsiDevice> dev(new IscsiDevice(std::move(impl)));
  im->thread = std::thread([im] { im->Run(); });

  // Every path gets one full try (connect, login, identify), bounded.
  std::vector<Status> results;
  {
    MutexLock lock(im->mu);
    const auto deadline =
        std::chrono::steady_clock::now() + std::chrono::milliseconds(options.connect_timeout_ms + 1000);
    while (!im->open_done && im->cv.WaitUntil(im->mu, deadline)) {
    }
    im->open_done = true;  // late outcomes are the loop's business now
    results = im->open_results;
  }
  Status first_error;
  bool any_up = false;
  for (size_t i = 0; i < results.size(); i++) {
    Status s = results[i];
    if (s.code() == Code::kBusy) {
      s = Status::TimedOut("no answer from " + im->paths[i]->url.ToString() + " within " +
                           std::to_string(options.connect_timeout_ms) + " ms");
    }
    if (s.ok()) {
      any_up = true;
      continue;
    }
    // A path that reaches another LUN is a configuration error, not an outage.
    if (s.code() == Code::kInvalidArgument) return s;
    if (first_error.ok()) first_error = s;
  }
  if (!any_up) return first_error;
  if (!first_error.ok()) {
    NASGW_LOG(kWarn, "block") << "opened with a path down; retrying it in the background"
                              << Kv("error", first_error.ToString());
  }
  Status s = IdentifyLun(im);
  if (!s.ok()) return s.WithContext(im->info.name);
  im->info.designator = im->identity;  // set before the first path came up
  return dev;
}

Result<std::vector<std::shared_ptr<BlockDevice>>> OpenLuns(const std::vector<std::string>& urls,
                                                           const std::string& initiator_name) {
  std::vector<std::shared_ptr<BlockDevice>> devs;
  for (const auto& u : urls) {
    IscsiOptions o;
    o.urls = {u};
    o.initiator_name = initiator_name;
    auto d = IscsiDevice::Open(o);
    if (!d.ok()) return d.status();
    devs.push_back(std::shared_ptr<BlockDevice>(std::move(d.value())));
  }
  return devs;
}

}  // namespace nasgw::block
