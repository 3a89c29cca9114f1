// nasgw-fsck: checks a reserve and every domain on it. Read-only unless told.
//
//   nasgw-fsck --lun URL [--lun URL ...] [--initiator IQN] [--repair]
//
// Without --repair nothing is written, by construction: the LUNs are reached
// through a closed WriteGate (block/gated_device.h), no persistent-reservation
// key is registered, labels that would need repair are only reported, and the
// metadata store is opened with RocksDB's read-only mode (its WAL replayed in
// memory, never written back).
//
// A reserve a node owns is not checked: its metadata changes under the
// check. The tool reads each domain's owner record; when one names a holder,
// it watches the record for two of the holder's renewal intervals, and
// refuses (exit 2, naming the holder) if the holder renewed meanwhile. A
// holder that stayed silent (crashed, or hung) is reported and its last
// durable state is checked, read-only.
//
// --repair takes ownership first, as a node would (a silent holder's lease
// must have run out: the tool waits for it, at most one lease), opens each
// domain read-write (label repair, metadata log replay, orphans reclaimed),
// checks, and releases the reserve. It takes the ownership of domain 0,
// whose record names the node that owns the reserve while nasgwd serves a
// reserve as one (docs/cluster.md, "Several domains per reserve"); when
// nodes own other domains, their keys are to be preempted too.
//
// On a reserve of several domains each problem line starts "domain N: ".
// Each domain's own check includes that every allocation group it holds is
// inside its share (fs/reserve.h, "Domains"), so no group is in two.
//
// Exit codes: 0 clean; 1 problems found (one per line on stdout); 2 the
// reserve or domain could not be opened, or is owned (the reason on
// stderr); 64 usage.
#include <chrono>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include "base/clock.h"
#include "block/gated_device.h"
#include "block/iscsi_device.h"
#include "fs/domain.h"
#include "fs/ownership.h"

namespace {

using namespace nasgw;

int Usage() {
  std::fprintf(stderr, "usage: nasgw-fsck --lun URL [--lun URL ...] [--initiator IQN] [--repair]\n");
  return 64;
}

int Fail(const std::string& what) {
  std::fprintf(stderr, "nasgw-fsck: %s\n", what.c_str());
  return 2;
}

// Watches the owner record until the holder renews (returns true: alive) or
// `window_ms` passes without a change (false: silent).
Result<bool> HolderRenews(const std::vector<std::shared_ptr<block::BlockDevice>>& luns, const Uuid& reserve,
                          uint32_t domain, const fs::OwnerView& first, uint64_t window_ms) {
  const uint64_t end = MonotonicNanos() + window_ms * kNanosPerMilli;
  const uint64_t poll_ms = std::max<uint64_t>(10, std::min<uint64_t>(first.record->renew_ms / 4, 250));
  while (MonotonicNanos() < end) {
    // Polling the array: a remote node's renewal has no event to wait on.
    std::this_thread::sleep_for(std::chrono::milliseconds(poll_ms));
    auto v = fs::ReadOwner(luns, reserve, domain);
    if (!v.ok()) return v.status();
    if (v->record != first.record) return true;
  }
  return false;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> urls;
  std::string initiator;
  bool repair = false;
  for (int i = 1; i < argc; i++) {
    std::string a = argv[i];
    if (a == "--lun" && i + 1 < argc) {
      urls.push_back(argv[++i]);
    } else if (a == "--initiator" && i + 1 < argc) {
      initiator = argv[++i];
    } else if (a == "--repair") {
      repair = true;
    } else {
      return Usage();
    }
  }
  if (urls.empty()) return Usage();
  auto raw = block::OpenLuns(urls, initiator);
  if (!raw.ok()) return Fail(raw.status().ToString());

  // Read-only view first, whatever the mode: labels and the owner.
  auto ro_gate = block::WriteGate::Closed(Status::PermissionDenied("nasgw-fsck is read-only without --repair"));
  auto ro_luns = block::Gate(*raw, ro_gate);
  auto ro = fs::Reserve::Open(ro_luns, /*read_only=*/true);
  if (!ro.ok()) return Fail("reserve: " + ro.status().ToString());
  std::vector<std::shared_ptr<block::BlockDevice>> ordered;
  for (uint32_t i = 0; i < (*ro)->lun_count(); i++) ordered.push_back((*ro)->lun(i));
  const Uuid reserve_uuid = (*ro)->uuid();
  const std::string name = (*ro)->name();
  const uint32_t domains = (*ro)->domains();
  // "domain N: " before what is said of one domain of several.
  auto of = [domains](uint32_t d) { return domains == 1 ? std::string() : "domain " + std::to_string(d) + ": "; };
  std::vector<fs::OwnerView> views;
  for (uint32_t dom = 0; dom < domains; dom++) {
    auto view = fs::ReadOwner(ordered, reserve_uuid, dom);
    if (!view.ok()) return Fail(of(dom) + "owner record: " + view.status().ToString());
    if (view->held()) {
      const uint64_t window = 2ull * view->record->renew_ms + 200;
      auto alive = HolderRenews(ordered, reserve_uuid, dom, *view, window);
      if (!alive.ok()) return Fail(of(dom) + "owner record: " + alive.status().ToString());
      if (*alive) {
        return Fail(of(dom) + "reserve '" + name + "' is owned by " + view->Describe(WallNanos()) +
                    ", which is running: stop it first (a check of a live reserve reads changing metadata)");
      }
      std::fprintf(stderr, "nasgw-fsck: %sreserve '%s' was not released by %s; it did not renew for %.1f s\n",
                   of(dom).c_str(), name.c_str(), view->Describe(WallNanos()).c_str(),
                   static_cast<double>(window) / 1e3);
    } else if (view->reservation.reserved && dom == 0) {
      std::fprintf(stderr, "nasgw-fsck: reserve '%s': %s\n", name.c_str(), view->Describe(WallNanos()).c_str());
    }
    views.push_back(std::move(view.value()));
  }

  std::shared_ptr<fs::Reserve> reserve;
  std::unique_ptr<fs::Ownership> owner;
  fs::DomainOptions options;
  if (!repair) {
    reserve = std::move(ro.value());
    for (const auto& rep : reserve->repairs()) std::printf("label: %s\n", rep.c_str());
    options.read_only = true;
  } else {
    // Own it as a node would: a holder that is silent must have run out its
    // lease before we preempt it.
    fs::AcquireMode mode = fs::AcquireMode::kNormal;
    for (uint32_t dom = 0; dom < domains; dom++) {
      if (!views[dom].HeldByOther(Uuid{})) continue;
      fs::OwnerWatch watch;
      watch.Observe(views[dom], MonotonicNanos(), WallNanos());
      while (!watch.Expired(MonotonicNanos())) {
        std::this_thread::sleep_for(std::chrono::milliseconds(100));  // the lease runs out on our clock
        auto v = fs::ReadOwner(ordered, reserve_uuid, dom);
        if (!v.ok()) return Fail(of(dom) + "owner record: " + v.status().ToString());
        watch.Observe(*v, MonotonicNanos(), WallNanos());
        if (watch.SilentMs(MonotonicNanos()) == 0) {
          return Fail(of(dom) + "reserve '" + name + "' is owned by " + v->Describe(WallNanos()) +
                      ", which renewed its lease");
        }
      }
      mode = fs::AcquireMode::kTakeover;
    }
    auto me = fs::NodeIdentity::ForProcess("nasgw-fsck", Uuid::Random());
    auto gate = std::make_shared<block::WriteGate>();
    auto rw_luns = block::Gate(*raw, gate);
    std::vector<std::shared_ptr<block::BlockDevice>> rw_ordered;
    for (uint32_t i = 0; i < (*ro)->lun_count(); i++) {
      for (const auto& d : rw_luns) {
        if (static_cast<block::GatedDevice&>(*d).inner() == static_cast<block::GatedDevice&>(*(*ro)->lun(i)).inner()) {
          rw_ordered.push_back(d);
        }
      }
    }
    auto o = fs::Ownership::Acquire(rw_ordered, gate, reserve_uuid, 0, me, fs::OwnershipOptions{}, mode, {});
    if (!o.ok()) return Fail("take ownership for --repair: " + o.status().ToString());
    owner = std::move(o.value());
    auto r = fs::Reserve::Open(rw_ordered);
    if (!r.ok()) return Fail("reserve: " + r.status().ToString());
    reserve = std::move(r.value());
    for (const auto& rep : reserve->repairs()) std::printf("label repaired: %s\n", rep.c_str());
  }

  int rc = 0;
  for (uint32_t dom = 0; dom < domains; dom++) {
    auto d = fs::Domain::Open(reserve, dom, options);
    if (!d.ok()) {
      rc = Fail(of(dom) + "domain: " + d.status().ToString());
      continue;
    }
    auto problems = (*d)->Check();
    if (!problems.ok()) {
      rc = Fail(of(dom) + problems.status().ToString());
      continue;
    }
    for (const auto& p : *problems) std::printf("%s%s\n", of(dom).c_str(), p.c_str());
    fs::StatFs s = (*d)->Statfs();
    std::fprintf(stderr,
                 "nasgw-fsck: %sreserve '%s' (%zu LUNs, %s): %zu problems; %llu files, %llu of %llu bytes free\n",
                 of(dom).c_str(), name.c_str(), reserve->lun_count(), repair ? "repaired" : "read-only",
                 problems->size(), static_cast<unsigned long long>(s.files),
                 static_cast<unsigned long long>(s.free_bytes), static_cast<unsigned long long>(s.total_bytes));
    if (const uint64_t n = (*d)->unreplayed_log_entries(); n > 0) {
      std::fprintf(stderr,
                   "nasgw-fsck: %schecked the last transaction group; %llu newer changes wait in the intent log "
                   "(the owner applies them when it opens the domain)\n",
                   of(dom).c_str(), static_cast<unsigned long long>(n));
    }
    if (!problems->empty() && rc == 0) rc = 1;
  }
  if (owner) {
    Status s = owner->Release();
    if (!s.ok()) rc = Fail("release the reserve: " + s.ToString());
  }
  return rc;
}
