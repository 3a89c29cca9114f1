#include "fs/ownership.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <utility>

#include "base/clock.h"
#include "base/coding.h"
#include "base/crc32c.h"
#include "base/log.h"
#include "base/mutex.h"
#include "fs/label.h"
#include "fs/metafs.h"

#include <sys/random.h>

namespace nasgw::fs {

using block::BlockDevice;
using block::PrAction;
using block::PrType;

namespace {

constexpr char kOwnerMagic[8] = {'N', 'A', 'S', 'G', 'W', 'O', 'W', 'N'};
constexpr uint32_t kOwnerVersion = 1;
constexpr size_t kTextBytes = 64;
constexpr PrType kPrType = PrType::kWriteExclusiveRegistrantsOnly;

uint64_t RandomNonZero() {
  uint64_t v = 0;
  while (v == 0) {
    ssize_t n = getrandom(&v, sizeof v, 0);
    NASGW_ASSERT(n == sizeof v);
  }
  return v;
}

void PutText(uint8_t* p, const std::string& s) {
  // A fixed-width field the caller zeroed: the last byte stays 0.
  std::memcpy(p, s.data(), std::min(s.size(), kTextBytes - 1));  // NOLINT(bugprone-not-null-terminated-result)
}

std::string GetText(const uint8_t* p) {
  return std::string(reinterpret_cast<const char*>(p), strnlen(reinterpret_cast<const char*>(p), kTextBytes - 1));
}

std::string Hex(uint64_t v) {
  char b[24];
  std::snprintf(b, sizeof b, "0x%016llx", static_cast<unsigned long long>(v));
  return b;
}

// The LUN under a GatedDevice (reservation commands bypass the gate).
BlockDevice& Beneath(BlockDevice& dev) {
  auto* g = dynamic_cast<block::GatedDevice*>(&dev);
  return g ? *g->inner() : dev;
}

std::string Seconds(uint64_t ns) {
  char b[32];
  std::snprintf(b, sizeof b, "%.1f s", static_cast<double>(ns) / 1e9);
  return b;
}

}  // namespace

Lease::Lease(std::shared_ptr<block::WriteGate> gate, uint64_t give_up_ns, Clock clock, uint64_t renewed_ns)
    : gate_(std::move(gate)), give_up_ns_(give_up_ns), clock_(clock) {
  gate_->Bound(clock, give_up_ns, renewed_ns ? renewed_ns : clock());
}

void Lease::Renewed(uint64_t sent_ns) {
  gate_->Renewed(sent_ns);
}

uint64_t Lease::SilentNs(uint64_t now_ns) const {
  return gate_->SilentNs(now_ns);
}

Status Lease::Check() {
  return gate_->CheckBound();
}

uint64_t OwnerRecordOffset(uint32_t domain) {
  return kDomainTableOffset + domain * kDomainSlotBytes + 2 * kMetaBlockBytes;
}
static_assert(2 * kMetaBlockBytes + kOwnerRecordBytes <= kDomainSlotBytes, "the owner record fits the domain slot");

std::string OwnerKeyText(uint64_t key) {
  return Hex(key);
}

uint64_t PrKeyOf(const Uuid& node_id) {
  uint64_t low = 0;
  for (int i = 0; i < 6; i++) low = (low << 8) | node_id.bytes[i];
  if (low == 0) low = 1;
  return kPrKeyPrefix | low;
}

NodeIdentity NodeIdentity::ForProcess(std::string name, const Uuid& id) {
  NodeIdentity n;
  n.name = std::move(name);
  n.id = id;
  n.incarnation = RandomNonZero();
  char host[256] = {};
  if (gethostname(host, sizeof host - 1) == 0) n.host = host;
  n.pid = static_cast<uint32_t>(getpid());
  return n;
}

std::vector<uint8_t> EncodeOwnerRecord(const OwnerRecord& r) {
  std::vector<uint8_t> b(kOwnerRecordBytes, 0);
  std::memcpy(&b[0], kOwnerMagic, 8);
  PutFixed32(&b[8], kOwnerVersion);
  std::memcpy(&b[16], r.reserve.bytes.data(), 16);
  PutFixed32(&b[32], r.domain);
  PutFixed32(&b[36], static_cast<uint32_t>(r.state));
  std::memcpy(&b[40], r.node_id.bytes.data(), 16);
  PutFixed64(&b[56], r.key);
  PutFixed64(&b[64], r.incarnation);
  PutFixed64(&b[72], r.seq);
  PutFixed64(&b[80], r.acquired_ns);
  PutFixed64(&b[88], r.renewed_ns);
  PutFixed32(&b[96], r.lease_ms);
  PutFixed32(&b[100], r.renew_ms);
  PutFixed32(&b[104], r.pid);
  PutText(&b[112], r.node_name);
  PutText(&b[176], r.host);
  PutFixed32(&b[12], Crc32c(b.data(), b.size()));
  return b;
}

Result<OwnerRecord> DecodeOwnerRecord(std::span<const uint8_t> bytes) {
  if (bytes.size() < kOwnerRecordBytes) return Status::InvalidArgument("owner record too short");
  if (std::memcmp(bytes.data(), kOwnerMagic, 8) != 0) return Status::NotFound("no owner record");
  std::vector<uint8_t> copy(bytes.begin(), bytes.begin() + kOwnerRecordBytes);
  const uint32_t crc = GetFixed32(&copy[12]);
  PutFixed32(&copy[12], 0);
  if (Crc32c(copy.data(), copy.size()) != crc) return Status::Corruption("owner record checksum mismatch");
  if (GetFixed32(&copy[8]) != kOwnerVersion) {
    return Status::NotSupported("owner record version " + std::to_string(GetFixed32(&copy[8])));
  }
  OwnerRecord r;
  std::memcpy(r.reserve.bytes.data(), &copy[16], 16);
  r.domain = GetFixed32(&copy[32]);
  const uint32_t state = GetFixed32(&copy[36]);
  if (state > 1) return Status::Corruption("owner record state " + std::to_string(state));
  r.state = static_cast<OwnerState>(state);
  std::memcpy(r.node_id.bytes.data(), &copy[40], 16);
  r.key = GetFixed64(&copy[56]);
  r.incarnation = GetFixed64(&copy[64]);
  r.seq = GetFixed64(&copy[72]);
  r.acquired_ns = GetFixed64(&copy[80]);
  r.renewed_ns = GetFixed64(&copy[88]);
  r.lease_ms = GetFixed32(&copy[96]);
  r.renew_ms = GetFixed32(&copy[100]);
  r.pid = GetFixed32(&copy[104]);
  r.node_name = GetText(&copy[112]);
  r.host = GetText(&copy[176]);
  return r;
}

// ---- OwnerView -------------------------------------------------------------------

bool OwnerView::HeldByOther(const Uuid& node_id) const {
  if (held() && record->node_id != node_id) return true;
  return reservation.reserved && reservation.key != PrKeyOf(node_id);
}

uint64_t OwnerView::HolderKey(const Uuid& node_id) const {
  const uint64_t mine = PrKeyOf(node_id);
  if (reservation.reserved && reservation.key != mine) return reservation.key;
  if (held() && record->key != mine) return record->key;
  return 0;
}

bool OwnerView::LeaseLiveByWallClock(uint64_t now_wall_ns) const {
  if (!held()) return false;
  const uint64_t lease_ns = uint64_t{record->lease_ms} * kNanosPerMilli;
  return now_wall_ns < record->renewed_ns || now_wall_ns - record->renewed_ns < lease_ns;
}

std::string OwnerView::Describe(uint64_t now_wall_ns) const {
  std::string s;
  if (record) {
    const OwnerRecord& r = *record;
    s = "node '" + r.node_name + "' on host '" + r.host + "' (pid " + std::to_string(r.pid) + ", key " + Hex(r.key) +
        ")";
    const uint64_t age = now_wall_ns > r.renewed_ns ? now_wall_ns - r.renewed_ns : 0;
    if (r.state == OwnerState::kHeld) {
      s += ", last renewed " + Seconds(age) + " ago, lease " + Seconds(uint64_t{r.lease_ms} * kNanosPerMilli);
    } else {
      s += ", released " + Seconds(age) + " ago";
    }
  }
  if (reservation.reserved && (!record || record->key != reservation.key)) {
    if (!s.empty()) s += "; ";
    s += "persistent reservation held by key " + Hex(reservation.key);
  }
  return s.empty() ? "nobody" : s;
}

Result<OwnerView> ReadOwner(const std::vector<std::shared_ptr<BlockDevice>>& luns, const Uuid& reserve_uuid,
                            uint32_t domain) {
  if (luns.empty()) return Status::InvalidArgument("no LUNs");
  OwnerView v;
  for (const auto& dev : luns) {
    std::vector<uint8_t> b(kOwnerRecordBytes);
    NASGW_RETURN_IF_ERROR(block::ReadSync(*dev, OwnerRecordOffset(domain) / dev->info().block_size, b.data(), b.size())
                              .WithContext("read owner record of " + dev->info().name));
    auto r = DecodeOwnerRecord(b);
    if (!r.ok()) {
      if (r.status().code() == Code::kNotFound) continue;
      // A torn copy: the other LUNs' copies speak.
      NASGW_LOG(kWarn, "fs") << "owner record unreadable" << Kv("lun", dev->info().name)
                             << Kv("error", r.status().ToString());
      continue;
    }
    if (r->reserve != reserve_uuid || r->domain != domain) continue;
    if (!v.record || r->seq > v.record->seq) v.record = *r;
  }
  auto resv = block::PrReadReservationSync(*luns[0]);
  if (resv.ok()) {
    v.pr_supported = true;
    v.reservation = *resv;
    auto keys = block::PrReadKeysSync(*luns[0]);
    if (keys.ok()) v.keys = keys->keys;
  } else if (resv.status().code() != Code::kNotSupported) {
    return resv.status().WithContext("read reservation of " + luns[0]->info().name);
  }
  return v;
}

// ---- OwnerWatch ------------------------------------------------------------------

void OwnerWatch::Observe(const OwnerView& v, uint64_t now_mono_ns, uint64_t now_wall_ns) {
  const bool changed = !seen_ || v.record != view_.record || v.reservation.key != view_.reservation.key ||
                       v.reservation.reserved != view_.reservation.reserved;
  // Silence counts from the first look, whatever the record says of its
  // age: that age is the holder's wall clock against ours, and a clock
  // ahead of the holder's would run its lease out early here, while the
  // holder still answers from its memory by its own count.
  (void)now_wall_ns;
  if (changed) last_change_mono_ns_ = now_mono_ns;
  seen_ = true;
  view_ = v;
}

uint64_t OwnerWatch::SilentMs(uint64_t now_mono_ns) const {
  return now_mono_ns > last_change_mono_ns_ ? (now_mono_ns - last_change_mono_ns_) / kNanosPerMilli : 0;
}

bool OwnerWatch::Expired(uint64_t now_mono_ns) const {
  if (!seen_) return false;
  if (!view_.held()) return !view_.reservation.reserved;  // released: nothing to wait for
  return SilentMs(now_mono_ns) >= view_.record->lease_ms;
}

// ---- Ownership -------------------------------------------------------------------

Status OwnershipOptions::Validate() const {
  if (renew_interval_ms < kRenewIntervalMsMin || renew_interval_ms > kRenewIntervalMsMax) {
    return Status::InvalidArgument("renew_interval_ms must be in [" + std::to_string(kRenewIntervalMsMin) + ", " +
                                   std::to_string(kRenewIntervalMsMax) + "]");
  }
  if (lease_ms < kLeaseRenewalsMin * renew_interval_ms || lease_ms > kLeaseMsMax) {
    return Status::InvalidArgument("lease_ms must be at least " + std::to_string(kLeaseRenewalsMin) +
                                   " renewal intervals and at most " + std::to_string(kLeaseMsMax));
  }
  if (preempt_settle_ms > kPreemptSettleMsMax) {
    return Status::InvalidArgument("preempt_settle_ms must be at most " + std::to_string(kPreemptSettleMsMax));
  }
  return Status();
}

// A shared reservation on one LUN where our key is registered: `victim`
// (0: none) preempted where it is registered, and the reservation taken
// unless the partner holds it already. Returns whether a plain PREEMPT
// (without ABORT) was used.
static Result<bool> ShareLun(BlockDevice& dev, uint64_t my_key, uint64_t victim) {
  bool unaborted = false;
  if (victim != 0 && victim != my_key) {
    auto keys = block::PrReadKeysSync(dev);
    if (!keys.ok()) return keys.status().WithContext("read keys of " + dev.info().name);
    if (std::find(keys->keys.begin(), keys->keys.end(), victim) != keys->keys.end()) {
      auto f = block::FenceSync(dev, my_key, victim, kPrType);
      if (!f.ok()) return f.status().WithContext("preempt key " + Hex(victim) + " on " + dev.info().name);
      NASGW_LOG(kWarn, "fs") << "preempted the owner's key" << Kv("lun", dev.info().name) << Kv("key", Hex(victim))
                             << Kv("aborted", f->aborted);
      unaborted = !f->aborted;
    }
  }
  for (int attempt = 0;; attempt++) {
    auto resv = block::PrReadReservationSync(dev);
    if (!resv.ok()) return resv.status().WithContext("read reservation of " + dev.info().name);
    if (resv->reserved) {
      if (resv->type == kPrType) return unaborted;  // ours or the partner's: every registrant may write
      return Status::Fenced(dev.info().name + " is reserved by key " + Hex(resv->key) + " with type " +
                            std::to_string(static_cast<int>(resv->type)) +
                            ", not Write Exclusive, Registrants Only: not a reservation this pair shares");
    }
    Status s = block::PrOutSync(dev, {PrAction::kReserve, kPrType, my_key, 0});
    if (s.ok()) return unaborted;
    // The partner reserved it meanwhile: read again, once.
    if (s.code() != Code::kFenced || attempt > 0) return s.WithContext("reserve " + dev.info().name);
  }
}

Result<std::unique_ptr<Ownership>> Ownership::Acquire(std::vector<std::shared_ptr<BlockDevice>> luns,
                                                      std::shared_ptr<block::WriteGate> gate, const Uuid& reserve_uuid,
                                                      uint32_t domain, const NodeIdentity& me,
                                                      const OwnershipOptions& options, AcquireMode mode,
                                                      LostFn on_lost) {
  NASGW_RETURN_IF_ERROR(options.Validate());
  if (luns.empty()) return Status::InvalidArgument("no LUNs");
  if (me.incarnation == 0 || me.id.IsNil()) return Status::InvalidArgument("node identity without id or incarnation");
  auto view = ReadOwner(luns, reserve_uuid, domain);
  if (!view.ok()) return view.status();
  const uint64_t my_key = me.key();
  const std::string what = "domain " + std::to_string(domain) + " of reserve " + reserve_uuid.ToString();
  // Every refusal leaves the node's gate closed: it must not write.
  auto refuse = [gate](Status why) -> Status {
    gate->Close(why);
    return why;
  };
  // Shared, the partner's reservation is no one's claim on this domain.
  const bool held_by_other = options.shared ? view->held() && view->record->node_id != me.id : view->HeldByOther(me.id);
  if (mode == AcquireMode::kNormal && held_by_other) {
    return refuse(Status::Fenced(what + " is owned by " + view->Describe(WallNanos()) +
                                 "; this node will not write to it ('nasgw reserve takeover' once that node is gone)"));
  }
  // Our own id with a live lease, from another host: the node's state was
  // copied to a second machine. Refuse rather than fight over the lease.
  if (mode == AcquireMode::kNormal && view->held() && view->record->node_id == me.id && view->record->host != me.host &&
      view->LeaseLiveByWallClock(WallNanos())) {
    return refuse(Status::Fenced(what + " is owned by this node's id from another host: " +
                                 view->Describe(WallNanos()) + " (was the node's state directory copied?)"));
  }
  std::unique_ptr<Ownership> o(new Ownership());
  {
    MutexLock lock(o->luns_mu_);
    o->luns_ = luns;  // a copy: `luns` is used below, across I/O, without the lock
  }
  o->gate_ = std::move(gate);
  o->me_ = me;
  o->options_ = options;
  uint64_t victim = mode == AcquireMode::kNormal ? 0 : view->HolderKey(me.id);
  if (options.shared) victim = mode != AcquireMode::kNormal && held_by_other ? view->record->key : 0;
  o->preempted_key_ = victim;

  // Persistent reservations, LUN 0 first: its RESERVE is where two nodes
  // starting together are told apart.
  // Reservation commands go to the LUNs beneath the gate: a conflict while
  // acquiring is an answer here, not a loss of ownership we never had.
  o->pr_supported_ = view->pr_supported;
  std::vector<size_t> registered;
  bool preempted_without_abort = false;  // another node's commands may still be queued at the array
  auto undo = [&](Status why) -> Status {
    for (size_t i : registered) {
      // Best effort: a registration left behind is preempted by the next
      // owner's takeover, and a plain registrant writes nothing.
      block::PrOutSync(Beneath(*luns[i]), {PrAction::kRegisterAndIgnoreExistingKey, PrType::kNone, 0, 0}).IgnoreError();
    }
    return refuse(std::move(why));
  };
  if (o->pr_supported_) {
    for (size_t i = 0; i < luns.size(); i++) {
      BlockDevice& dev = Beneath(*luns[i]);
      Status s = block::PrOutSync(dev, {PrAction::kRegisterAndIgnoreExistingKey, PrType::kNone, 0, my_key});
      if (!s.ok()) {
        if (s.code() == Code::kNotSupported && i == 0) {
          o->pr_supported_ = false;
          break;
        }
        return undo(s.WithContext("register key " + Hex(my_key) + " on " + dev.info().name));
      }
      registered.push_back(i);
      if (options.shared) {
        auto shared = ShareLun(dev, my_key, victim);
        if (!shared.ok()) return undo(shared.status());
        if (*shared) preempted_without_abort = true;
        continue;
      }
      auto resv = block::PrReadReservationSync(dev);
      if (!resv.ok()) return undo(resv.status().WithContext("read reservation of " + dev.info().name));
      if (resv->reserved && resv->key == my_key) {
        // Held under our key: ours from an earlier incarnation (or a session
        // of ours that reconnected). Make this nexus the holder.
        if (resv->type != kPrType || !block::PrOutSync(dev, {PrAction::kReserve, kPrType, my_key, 0}).ok()) {
          auto f = block::FenceSync(dev, my_key, my_key, kPrType);
          if (!f.ok()) return undo(f.status().WithContext("take over our own stale reservation on " + dev.info().name));
        }
        continue;
      }
      if (resv->reserved && mode != AcquireMode::kNormal) {
        auto f = block::FenceSync(dev, my_key, resv->key, kPrType);
        if (!f.ok()) return undo(f.status().WithContext("preempt key " + Hex(resv->key) + " on " + dev.info().name));
        NASGW_LOG(kWarn, "fs") << "preempted the owner's key" << Kv("lun", dev.info().name) << Kv("key", Hex(resv->key))
                               << Kv("aborted", f->aborted);
        if (!f->aborted) preempted_without_abort = true;
        continue;
      }
      s = block::PrOutSync(dev, {PrAction::kReserve, kPrType, my_key, 0});
      if (!s.ok()) {
        if (s.code() == Code::kFenced) {
          auto again = ReadOwner(luns, reserve_uuid, domain);
          std::string holder = again.ok() ? again->Describe(WallNanos()) : "another node";
          return undo(Status::Fenced(what + " is owned by " + holder + " (it reserved " + dev.info().name +
                                     " first); this node will not write to it"));
        }
        return undo(s.WithContext("reserve " + dev.info().name));
      }
      // A victim registered without holding the reservation (a LUN it had
      // not reserved yet) loses its registration too.
      if (victim != 0) {
        auto keys = block::PrReadKeysSync(dev);
        if (keys.ok() && std::find(keys->keys.begin(), keys->keys.end(), victim) != keys->keys.end()) {
          auto f = block::FenceSync(dev, my_key, victim, kPrType);
          if (!f.ok()) return undo(f.status().WithContext("preempt key " + Hex(victim) + " on " + dev.info().name));
          if (!f->aborted) preempted_without_abort = true;
        }
      }
    }
  }
  if (!o->pr_supported_) {
    NASGW_LOG(kWarn, "fs") << "LUN 0 has no persistent reservations: ownership rests on the owner record alone"
                           << Kv("lun", luns[0]->info().name);
  }

  // Plain PREEMPT stops the old owner's new commands but not those the
  // array had already accepted: let them finish before anything of ours
  // (the owner record first) is written where they might land.
  if (preempted_without_abort && options.preempt_settle_ms > 0) {
    NASGW_LOG(kWarn, "fs") << "waiting out the preempted node's queued commands (the LUN has no PREEMPT AND ABORT)"
                           << Kv("settle_ms", options.preempt_settle_ms);
    std::this_thread::sleep_for(std::chrono::milliseconds(options.preempt_settle_ms));
    o->settled_ms_ = options.preempt_settle_ms;
  }

  OwnerRecord r;
  r.reserve = reserve_uuid;
  r.domain = domain;
  r.state = OwnerState::kHeld;
  r.node_id = me.id;
  r.key = my_key;
  r.incarnation = me.incarnation;
  r.seq = (view->record ? view->record->seq : 0) + 1;
  r.acquired_ns = r.renewed_ns = WallNanos();
  r.lease_ms = options.lease_ms;
  r.renew_ms = options.renew_interval_ms;
  r.pid = me.pid;
  r.node_name = me.name;
  r.host = me.host;
  // Others time the lease from the first copy of the record they read,
  // which may land before the last LUN's: counted from the write's sending.
  const uint64_t lease_from = BootNanos();
  Status w = o->WriteRecord(r);
  if (!w.ok()) return undo(w.WithContext("write owner record"));
  {
    MutexLock lock(o->luns_mu_);
    o->records_ = {r};
  }
  NASGW_LOG(kInfo, "fs") << "domain owned" << Kv("domain", domain) << Kv("reserve", reserve_uuid.ToString())
                         << Kv("key", Hex(my_key)) << Kv("pr", o->pr_supported_)
                         << Kv("preempted", victim ? Hex(victim) : std::string("none"));
  o->lost_hook_->fn = std::move(on_lost);
  o->gate_->OnClose([hook = o->lost_hook_](const Status& why) {
    if (!hook->quiet.load() && hook->fn) hook->fn(why);
  });
  o->lease_ = std::make_shared<Lease>(o->gate_, uint64_t{options.lease_ms - options.renew_interval_ms} * kNanosPerMilli,
                                      &BootNanos, lease_from);
  o->renewer_ = std::thread([p = o.get()] { p->RenewLoop(); });
  o->watchdog_ = std::thread([p = o.get()] { p->LeaseWatchdog(); });
  return o;
}

OwnerRecord Ownership::record() const {
  MutexLock lock(luns_mu_);
  return records_.empty() ? OwnerRecord{} : records_.front();
}

std::vector<uint32_t> Ownership::domains() const {
  MutexLock lock(luns_mu_);
  std::vector<uint32_t> out;
  for (const OwnerRecord& r : records_) out.push_back(r.domain);
  return out;
}

Status Ownership::PreemptEverywhere(uint64_t victim, bool* unaborted) {
  for (const auto& lun : Luns()) {
    BlockDevice& dev = Beneath(*lun);
    auto keys = block::PrReadKeysSync(dev);
    if (!keys.ok()) return keys.status().WithContext("read keys of " + dev.info().name);
    if (std::find(keys->keys.begin(), keys->keys.end(), victim) == keys->keys.end()) continue;
    auto f = block::FenceSync(dev, me_.key(), victim, kPrType);
    if (!f.ok()) return f.status().WithContext("preempt key " + Hex(victim) + " on " + dev.info().name);
    NASGW_LOG(kWarn, "fs") << "preempted the owner's key" << Kv("lun", dev.info().name) << Kv("key", Hex(victim))
                           << Kv("aborted", f->aborted);
    if (!f->aborted) *unaborted = true;
  }
  return Status();
}

Status Ownership::SharingPartner(const Uuid& reserve, std::vector<uint64_t>* stale) {
  const auto luns = Luns();
  auto keys = block::PrReadKeysSync(Beneath(*luns[0]));
  if (!keys.ok()) return keys.status().WithContext("read keys of " + luns[0]->info().name);
  std::vector<uint64_t> live;
  for (uint32_t d = 0; d < kReserveDomainsMax; d++) {
    auto v = ReadOwner({luns[0]}, reserve, d);
    if (!v.ok()) return v.status();
    if (v->held() && v->record->node_id != me_.id) live.push_back(v->record->key);
  }
  for (uint64_t k : keys->keys) {
    if (k == me_.key()) continue;
    if (std::find(live.begin(), live.end(), k) != live.end()) return Status::Exists("a partner owns a domain");
    if (std::find(stale->begin(), stale->end(), k) == stale->end()) stale->push_back(k);
  }
  return Status();
}

Status Ownership::AcquireDomain(uint32_t domain, AcquireMode mode) {
  // The fencing and its wait run without records_io_mu_: the renewals of
  // the domains held go on meanwhile (a wait past the lease would fence
  // this node itself).
  if (!gate_->is_open()) return gate_->reason();
  const OwnerRecord first = record();
  for (uint32_t d : domains()) {
    if (d == domain) return Status();
  }
  const auto luns = Luns();
  auto view = ReadOwner(luns, first.reserve, domain);
  if (!view.ok()) return view.status();
  const std::string what = "domain " + std::to_string(domain) + " of reserve " + first.reserve.ToString();
  const bool held_by_other = view->held() && view->record->node_id != me_.id;
  if (mode == AcquireMode::kNormal && held_by_other) {
    return Status::Fenced(what + " is owned by " + view->Describe(WallNanos()) + "; this node will not write to it");
  }
  const uint64_t victim = held_by_other && view->record->key != me_.key() ? view->record->key : 0;
  if (victim != 0 && pr_supported_) {
    bool unaborted = false;
    NASGW_RETURN_IF_ERROR(PreemptEverywhere(victim, &unaborted));
    preempted_key_ = victim;  // (read by the caller, which serialises its calls)
    if (unaborted && options_.preempt_settle_ms > 0) {
      NASGW_LOG(kWarn, "fs") << "waiting out the preempted node's queued commands (the LUN has no PREEMPT AND ABORT)"
                             << Kv("settle_ms", options_.preempt_settle_ms);
      std::this_thread::sleep_for(std::chrono::milliseconds(options_.preempt_settle_ms));
      settled_ms_ = options_.preempt_settle_ms;
    }
  }
  MutexLock io(records_io_mu_);
  if (!gate_->is_open()) return gate_->reason();
  OwnerRecord r = first;
  r.domain = domain;
  r.seq = (view->record ? view->record->seq : 0) + 1;
  r.acquired_ns = r.renewed_ns = WallNanos();
  Status w = WriteRecord(r);
  if (!w.ok()) {
    // Some copies may say held: not renewed, they are waited out as a
    // crashed owner's would be.
    return w.WithContext("write the owner record of domain " + std::to_string(domain));
  }
  if (victim != 0 && pr_supported_) {
    // A victim that registered again meanwhile (a quick restart) loses it
    // again: its own record write, if it comes, is refused by the array.
    bool unaborted = false;
    Status again = PreemptEverywhere(victim, &unaborted);
    if (!again.ok()) return again.WithContext("preempt key " + Hex(victim) + " again");
  }
  {
    MutexLock lock(luns_mu_);
    records_.push_back(r);
  }
  NASGW_LOG(kInfo, "fs") << "domain owned" << Kv("domain", domain) << Kv("reserve", first.reserve.ToString())
                         << Kv("key", Hex(me_.key())) << Kv("preempted", victim ? Hex(victim) : std::string("none"));
  return Status();
}

Status Ownership::ReleaseDomain(uint32_t domain) {
  MutexLock io(records_io_mu_);
  OwnerRecord r;
  {
    MutexLock lock(luns_mu_);
    auto it = std::find_if(records_.begin(), records_.end(), [&](const OwnerRecord& x) { return x.domain == domain; });
    if (it == records_.end()) return Status::NotFound("domain " + std::to_string(domain) + " is not held here");
    if (records_.size() == 1) {
      return Status::FailedPrecondition("domain " + std::to_string(domain) + " is the last one held: release them all");
    }
    r = *it;
    records_.erase(it);  // no longer renewed
  }
  if (!gate_->is_open()) return gate_->reason();
  r.state = OwnerState::kFree;
  r.seq++;
  r.renewed_ns = WallNanos();
  NASGW_RETURN_IF_ERROR(
      WriteRecord(r).WithContext("write the owner record of domain " + std::to_string(domain) + " free"));
  NASGW_LOG(kInfo, "fs") << "domain released" << Kv("domain", domain) << Kv("ok", true);
  return Status();
}

std::vector<std::shared_ptr<BlockDevice>> Ownership::Luns() const {
  MutexLock lock(luns_mu_);
  return luns_;
}

Status Ownership::AddLun(std::shared_ptr<BlockDevice> lun) {
  NASGW_RETURN_IF_ERROR(gate_->CheckBound());  // its PR commands go beneath the gate
  if (pr_supported_) {
    BlockDevice& dev = Beneath(*lun);
    NASGW_RETURN_IF_ERROR(block::PrOutSync(dev, {PrAction::kRegisterAndIgnoreExistingKey, PrType::kNone, 0, me_.key()})
                              .WithContext("register on " + dev.info().name));
    if (options_.shared) {
      NASGW_RETURN_IF_ERROR(ShareLun(dev, me_.key(), 0).status());
    } else {
      NASGW_RETURN_IF_ERROR(
          block::PrOutSync(dev, {PrAction::kReserve, kPrType, me_.key(), 0}).WithContext("reserve " + dev.info().name));
    }
  }
  MutexLock io(records_io_mu_);
  std::vector<OwnerRecord> held;
  {
    MutexLock lock(luns_mu_);
    held = records_;
  }
  for (const OwnerRecord& rec : held) {
    const auto bytes = EncodeOwnerRecord(rec);
    NASGW_RETURN_IF_ERROR(block::WriteSync(*lun, OwnerRecordOffset(rec.domain) / lun->info().block_size, bytes.data(),
                                           bytes.size(), /*fua=*/true));
  }
  MutexLock lock(luns_mu_);
  luns_.push_back(std::move(lun));
  return Status();
}

Status Ownership::WriteRecord(const OwnerRecord& r) {
  const auto bytes = EncodeOwnerRecord(r);
  for (const auto& dev : Luns()) {
    NASGW_RETURN_IF_ERROR(block::WriteSync(*dev, OwnerRecordOffset(r.domain) / dev->info().block_size, bytes.data(),
                                           bytes.size(), /*fua=*/true)
                              .WithContext(dev->info().name));
  }
  return Status();
}

Status Ownership::RenewOnce() {
  MutexLock io(records_io_mu_);
  std::vector<OwnerRecord> held;
  {
    MutexLock lock(luns_mu_);
    held = records_;
  }
  for (const OwnerRecord& mine : held) NASGW_RETURN_IF_ERROR(RenewRecord(mine));
  return Status();
}

Status Ownership::RenewRecord(const OwnerRecord& mine) {
  // Read LUN 0's copy first: a record that names someone else means another
  // node took the domain (on an array without PR nothing else would say so).
  auto view = ReadOwner({Luns()[0]}, mine.reserve, mine.domain);
  if (!view.ok()) return view.status();
  if (!view->record || view->record->node_id != me_.id || view->record->incarnation != me_.incarnation ||
      view->record->state != OwnerState::kHeld) {
    return Status::Fenced("the owner record now names " + view->Describe(WallNanos()) + ": taken over");
  }
  if (pr_supported_ && !options_.shared && view->reservation.reserved && view->reservation.key != me_.key()) {
    return Status::Fenced("the reservation is now held by " + view->Describe(WallNanos()) + ": taken over");
  }
  // Shared, the partner may hold the reservation; our key must still be
  // registered.
  if (pr_supported_ && options_.shared &&
      std::find(view->keys.begin(), view->keys.end(), me_.key()) == view->keys.end()) {
    return Status::Fenced("this node's key " + Hex(me_.key()) + " is no longer registered (preempted by " +
                          view->Describe(WallNanos()) + "): taken over");
  }
  OwnerRecord next = mine;
  next.seq = std::max(mine.seq, view->record->seq) + 1;
  next.renewed_ns = WallNanos();
  NASGW_RETURN_IF_ERROR(WriteRecord(next));
  MutexLock lock(luns_mu_);
  for (OwnerRecord& r : records_) {
    if (r.domain == next.domain) r = next;
  }
  return Status();
}

// Closes the gate once no renewal has succeeded for lease - renew interval,
// whatever the renewer is doing: a renewal stuck in I/O (a SAN path down
// waits for the I/O timeout, 30 s by default) must not keep this node
// writing past the lease others go by. Then the node says it is fenced
// (heartbeats), and a partner may take over at once.
void Ownership::LeaseWatchdog() {
  const auto tick = std::chrono::milliseconds(std::max<uint32_t>(options_.renew_interval_ms / 4, 10));
  MutexLock lock(mu_);
  while (!stop_) {
    cv_.WaitFor(mu_, tick, [&]() REQUIRES(mu_) { return stop_; });
    if (stop_ || !gate_->is_open()) break;
    lock.Unlock();
    const Status held = lease_->Check();  // closes the gate when it ran out
    lock.Lock();
    if (!held.ok()) break;
  }
}

void Ownership::RenewLoop() {
  const auto interval = std::chrono::milliseconds(options_.renew_interval_ms);
  uint64_t last_ok = MonotonicNanos();
  // Give up writing before the lease runs out for others: they may take the
  // domain once it has, and we could not tell.
  const uint64_t give_up_ns = uint64_t{options_.lease_ms - options_.renew_interval_ms} * kNanosPerMilli;
  MutexLock lock(mu_);
  uint64_t next_send = MonotonicNanos() + uint64_t{options_.renew_interval_ms} * kNanosPerMilli;
  while (!stop_) {
    // One renewal per interval, counted from the last one's sending: a slow
    // answer does not stretch the cadence.
    const uint64_t now_ns = MonotonicNanos();
    const auto wait = std::chrono::nanoseconds(next_send > now_ns ? next_send - now_ns : 0);
    cv_.WaitFor(mu_, std::min<std::chrono::nanoseconds>(wait, interval), [&]() REQUIRES(mu_) { return stop_; });
    if (stop_) break;
    lock.Unlock();
    // A renewal counts from when it was sent, not from its answer: others
    // time the lease from the record they read, which the write could have
    // reached that early.
    const uint64_t sent = MonotonicNanos();
    const uint64_t sent_lease = lease_->now();
    next_send = sent + uint64_t{options_.renew_interval_ms} * kNanosPerMilli;
    Status s = gate_->is_open() ? RenewOnce() : gate_->reason();
    lock.Lock();
    if (!gate_->is_open()) break;  // fenced by a conflict, here or on the data path
    if (s.ok()) {
      renewals_++;
      last_ok = sent;
      lease_->Renewed(sent_lease);
      continue;
    }
    renew_failures_++;
    if (s.code() == Code::kFenced) {
      NASGW_LOG(kError, "fs") << "ownership lost" << Kv("error", s.ToString());
      lock.Unlock();
      gate_->Close(s);
      lock.Lock();
      break;
    }
    NASGW_LOG(kWarn, "fs") << "lease renewal failed" << Kv("error", s.ToString());
    if (MonotonicNanos() - last_ok >= give_up_ns) {
      Status lost = Status::Fenced("lease not renewed for " + Seconds(MonotonicNanos() - last_ok) +
                                   " (last error: " + s.ToString() + "); another node may take the domain over");
      NASGW_LOG(kError, "fs") << "ownership lost" << Kv("error", lost.ToString());
      lock.Unlock();
      gate_->Close(lost);
      lock.Lock();
      break;
    }
  }
}

void Ownership::Stop() {
  {
    MutexLock lock(mu_);
    stop_ = true;
  }
  cv_.NotifyAll();
  if (watchdog_.joinable()) watchdog_.join();
  if (renewer_.joinable()) renewer_.join();
}

Status Ownership::Release() {
  lost_hook_->quiet = true;
  Stop();
  {
    MutexLock lock(mu_);
    if (released_) return Status();
    released_ = true;
  }
  if (!gate_->is_open()) return gate_->reason();  // lost: nothing of ours to release
  // The reservation first, the record after: a record that says free over a
  // reservation still ours on some LUN would stop everyone (a free record
  // is never waited out, and a held reservation refuses a normal acquire),
  // until an admin forced a takeover. If a release fails, the record stays
  // held and, no longer renewed, goes silent: the partner takes the domain
  // over once its lease has run out, preempting our key, as after a crash.
  MutexLock io(records_io_mu_);
  Status s;
  const auto luns = Luns();
  std::vector<OwnerRecord> held;
  {
    MutexLock lock(luns_mu_);
    held = records_;
  }
  // Shared, with the partner registered and owning a domain: our
  // registration (and the reservation, if ours) must stay (see the header).
  // Only the records are given up. Without such a partner we are the last
  // node out: registrations left by nodes that own nothing (gone, or
  // released with us still here) are preempted, and everything released.
  bool keep_pr = false;
  if (pr_supported_ && options_.shared && !held.empty()) {
    std::vector<uint64_t> stale;
    Status partner = SharingPartner(held.front().reserve, &stale);
    if (!partner.ok()) {
      keep_pr = true;  // a partner owning a domain, or one we cannot rule out
    } else {
      bool unaborted = false;
      for (uint64_t k : stale) s = s.ok() ? PreemptEverywhere(k, &unaborted) : s;
      if (!s.ok()) keep_pr = true;  // the record then stays held (below), as after a failed release
    }
  }
  if (pr_supported_ && !keep_pr) {
    for (const auto& dev : luns) {
      Status rel = block::PrOutSync(*dev, {PrAction::kRelease, kPrType, me_.key(), 0});
      if (s.ok() && !rel.ok()) s = rel.WithContext("release reservation of " + dev->info().name);
    }
  }
  uint32_t first_domain = held.empty() ? 0 : held.front().domain;
  if (s.ok()) {
    for (OwnerRecord r : held) {
      r.state = OwnerState::kFree;
      r.seq++;
      r.renewed_ns = WallNanos();
      Status w = WriteRecord(r).WithContext("write the owner record of domain " + std::to_string(r.domain) + " free");
      if (s.ok()) s = w;
    }
  } else {
    NASGW_LOG(kWarn, "fs") << "the reservation could not be released on every LUN; the owner record stays held, "
                              "unrenewed: another node takes the domain over once its lease has run out"
                           << Kv("error", s.ToString());
  }
  if (pr_supported_ && !keep_pr) {
    for (const auto& dev : luns) {
      // Unregistering also ends a reservation we still hold here.
      Status unreg = block::PrOutSync(*dev, {PrAction::kRegisterAndIgnoreExistingKey, PrType::kNone, 0, 0});
      if (s.ok() && !unreg.ok()) s = unreg.WithContext("unregister from " + dev->info().name);
    }
  }
  gate_->Close(Status::Fenced("released"));
  NASGW_LOG(kInfo, "fs") << "domains released" << Kv("first", first_domain) << Kv("count", held.size())
                         << Kv("kept_registration", keep_pr) << Kv("ok", s.ok());
  return s;
}

Ownership::~Ownership() {
  lost_hook_->quiet = true;
  Stop();
}

}  // namespace nasgw::fs
