// Ownership: which node may write to a domain of a reserve, proven on the SAN.
//
// A node writes to a domain only while it owns it, from its first write on
// (brief, decisions 2 and 6). Ownership is recorded twice on the reserve's
// LUNs, so that it holds on arrays with and without SCSI-3 persistent
// reservations:
//  - a persistent reservation: the owner registers its key on every LUN and
//    holds a Write Exclusive, Registrants Only reservation. Any node may read;
//    only registrants may write. Keys are per node ("NG" + 48 bits of the
//    node's id), so a two-node pair, or several domains owned by different
//    nodes of one reserve, need no other key layout: a takeover preempts
//    exactly the dead node's key;
//  - an owner record per domain (docs/on-disk-format.md), on every LUN:
//    node name and id, host, pid, incarnation (random per process start),
//    the key, and a lease the owner renews every renew_interval_ms. It names
//    the holder in errors ("owned by node 'a' on host h, last renewed 2.1 s
//    ago") and is the proof of ownership on arrays without PR.
//
// Acquire() refuses with Fenced, naming the holder, while another node holds
// the domain; it succeeds when the domain is free or held by an earlier
// incarnation of this node (a restart after a crash). Two nodes that start at
// the same moment race on LUN 0's RESERVE: the array lets exactly one win;
// the loser unregisters and refuses. A takeover (kTakeover once the holder's
// lease has run out as the caller observed it, kForce from any holder)
// preempts the holder's key on every LUN (PREEMPT AND ABORT where the LUN has
// it, else PREEMPT) before writing its own record.
//
// While owned, a thread renews the lease. It reads the record first: a
// record naming another node means we were taken over. Either that, a
// RESERVATION CONFLICT on any LUN, or a lease that could not be renewed for
// lease_ms - renew_interval_ms (others may take over once it runs out) closes
// the node's WriteGate (block/gated_device.h): every later write fails with
// Fenced at once, never retried, and `on_lost` runs once.
//
// The devices given must be the node's GatedDevices sharing `gate`.
//
// Shared reservations (OwnershipOptions::shared: the controller pair
// active/active, each node owning some domains of one reserve; docs/
// cluster.md, "Several domains per reserve"). Both nodes register their key on
// every LUN and may write, since Write Exclusive, Registrants Only lets every
// registrant write; the first to come reserves, the other finds it reserved
// and only registers. Which domain is whose is said by the owner records
// alone: one node's Ownership holds the records of all its domains
// (AcquireDomain, ReleaseDomain) and renews them together. A takeover still
// preempts the old owner's key on every LUN (fencing stays per node: the
// fenced node loses every domain it held, and the taker takes them all). A
// node that releases its last domain while the partner is registered keeps
// its registration (and the reservation, if it holds it): with Registrants
// Only, the holder's unregistering would release the reservation, leaving
// the LUNs open to any initiator until the partner reserved again. Not *All
// Registrants* (type 7), which would avoid that: Debian's tgt frees the
// holder's registration on a PREEMPT of its key and keeps pointing at it
// (usr/spc.c, spc_pr_preempt), and a PREEMPT with key 0, which it handles,
// unregisters the taker's own other paths too, failing its writes in flight.
//
// Thread-safety: Ownership's methods may be called from any thread; the
// renewal thread is internal. ReadOwner is a pure read (safe for read-only
// tools: it registers nothing).
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "base/clock.h"
#include "base/mutex.h"
#include "base/status.h"
#include "base/uuid.h"
#include "block/block_device.h"
#include "block/gated_device.h"

namespace nasgw::fs {

// Where a domain's owner record lives on every LUN: the third 4 KiB of the
// domain's slot in the reserve header (after the two superblock copies).
constexpr uint64_t kOwnerRecordBytes = 4096;
uint64_t OwnerRecordOffset(uint32_t domain);

// Lease timing. The lease is what another node waits out before taking a
// silent owner's domain without force, so it is several renewals long: one
// slow array round trip must not lose the lease.
constexpr uint32_t kRenewIntervalMsDefault = 2'000;
constexpr uint32_t kRenewIntervalMsMin = 50;
constexpr uint32_t kRenewIntervalMsMax = 60'000;
constexpr uint32_t kLeaseMsDefault = 10'000;
constexpr uint32_t kLeaseMsMax = 600'000;
constexpr uint32_t kLeaseRenewalsMin = 3;
constexpr uint32_t kPreemptSettleMsMax = 60'000;  // lease_ms >= 3 * renew_interval_ms

// Persistent-reservation keys: "NG" (0x4e47) in the top 16 bits, then 48
// bits of the node id; never 0.
constexpr uint64_t kPrKeyPrefix = 0x4e47ull << 48;
uint64_t PrKeyOf(const Uuid& node_id);
std::string OwnerKeyText(uint64_t key);  // "0x4e47..."

struct NodeIdentity {
  std::string name;          // nasgwd's node_name; "nasgw-fsck" for the tool
  Uuid id;                   // persistent per node (<state_dir>/node-id)
  uint64_t incarnation = 0;  // random per process start, never 0
  std::string host;          // gethostname()
  uint32_t pid = 0;
  uint64_t key() const { return PrKeyOf(id); }
  // A fresh identity for this process (host and pid filled in).
  static NodeIdentity ForProcess(std::string name, const Uuid& id);
};

enum class OwnerState : uint32_t { kFree = 0, kHeld = 1 };

struct OwnerRecord {
  Uuid reserve;
  uint32_t domain = 0;
  OwnerState state = OwnerState::kFree;
  Uuid node_id;
  uint64_t key = 0;
  uint64_t incarnation = 0;
  uint64_t seq = 0;          // bumps on every renewal and every change of owner
  uint64_t acquired_ns = 0;  // wall clock, for people
  uint64_t renewed_ns = 0;   // wall clock of the last renewal
  uint32_t lease_ms = 0;
  uint32_t renew_ms = 0;
  uint32_t pid = 0;
  std::string node_name;  // <= 63 bytes
  std::string host;       // <= 63 bytes
  bool operator==(const OwnerRecord&) const = default;
};

std::vector<uint8_t> EncodeOwnerRecord(const OwnerRecord& r);
// NotFound when the bytes carry no owner record (never owned: zeros);
// Corruption when they claim to be one but do not check out.
Result<OwnerRecord> DecodeOwnerRecord(std::span<const uint8_t> bytes);

// What the SAN says about a domain's owner now.
struct OwnerView {
  std::optional<OwnerRecord> record;  // the newest valid copy over the LUNs (highest seq)
  bool pr_supported = false;          // LUN 0 answered PERSISTENT RESERVE IN
  block::PrReservation reservation;   // LUN 0's
  std::vector<uint64_t> keys;         // LUN 0's registered keys

  bool held() const { return record && record->state == OwnerState::kHeld; }
  // Held by a node other than `node_id`: by the record, or by a reservation
  // under another key.
  bool HeldByOther(const Uuid& node_id) const;
  // The key to preempt in a takeover (0: none).
  uint64_t HolderKey(const Uuid& node_id) const;
  // True while the holder's last renewal is within its lease by the wall
  // clock (a hint for one-shot tools; nodes observe the record instead).
  bool LeaseLiveByWallClock(uint64_t now_wall_ns) const;
  // "node 'a' on host h (pid 12, key 0x4e47...), last renewed 2.1 s ago, lease 10 s"
  std::string Describe(uint64_t now_wall_ns) const;
};

// Reads the owner record copies of `domain` from every LUN and LUN 0's
// reservation. Records of another reserve (`reserve_uuid`) are ignored.
// Registers nothing and writes nothing.
Result<OwnerView> ReadOwner(const std::vector<std::shared_ptr<block::BlockDevice>>& luns, const Uuid& reserve_uuid,
                            uint32_t domain);

// Tracks, from repeated reads, how long the holder has been silent: the time
// since its record last changed, on this node's monotonic clock (immune to
// clock differences between nodes). The silence counts from the first
// observation: the record's age by the wall clocks is never credited (a
// clock ahead of the holder's would end its lease here before the holder
// stops answering). `now_wall_ns` is unused, kept for callers.
class OwnerWatch {
 public:
  void Observe(const OwnerView& v, uint64_t now_mono_ns, uint64_t now_wall_ns);
  // Milliseconds since the holder last renewed (or changed) its record.
  uint64_t SilentMs(uint64_t now_mono_ns) const;
  // The holder's lease has run out: silent for at least its lease.
  bool Expired(uint64_t now_mono_ns) const;
  const OwnerView& view() const { return view_; }

 private:
  bool seen_ = false;
  OwnerView view_;
  uint64_t last_change_mono_ns_ = 0;
};

struct OwnershipOptions {
  uint32_t renew_interval_ms = kRenewIntervalMsDefault;
  uint32_t lease_ms = kLeaseMsDefault;
  // A takeover that preempted another node's key with plain PREEMPT (no
  // PREEMPT AND ABORT: tgt) waits this long before its first write, so that
  // commands the old owner had queued at the array are done and cannot land
  // on what we write. Not waited where the array aborted them.
  uint32_t preempt_settle_ms = 0;
  // The reservation is shared with the partner, which owns other domains of
  // the reserve (see above).
  bool shared = false;
  Status Validate() const;
};

// The owner's lease as the owner counts it. Held while the node's write gate
// is open and the last renewal that succeeded was sent less than
// `lease_ms - renew_interval_ms` ago (others take over once a whole lease
// has passed on their clocks, from the record they read). Counted on
// CLOCK_BOOTTIME: a machine suspended past its lease (a paused VM) counts
// the time it slept, as the others' clocks did.
//
// Its state is the gate's time bound (block::WriteGate::Bound): a change
// submitted to the LUNs past it closes the gate instead of going out, which
// is what stops a node woken from a hang (SIGSTOP, a stuck kernel) before
// its watchdog's next look on an array without persistent reservations
// (with them, the array refuses the preempted key too). What a node answers
// from what it holds in memory (reads, lock and lease grants) it answers
// only while Check() says held: such a node must not answer a read the new
// owner's writes have made stale. The first to find it run out closes the
// gate with the reason, as the watchdog would. Thread-safe.
class Lease {
 public:
  using Clock = uint64_t (*)();
  // `renewed_ns`: when the write of the record that began holding was sent
  // (this lease's clock); 0: now.
  Lease(std::shared_ptr<block::WriteGate> gate, uint64_t give_up_ns, Clock clock, uint64_t renewed_ns = 0);

  // A renewal sent at `sent_ns` (this lease's clock) succeeded.
  void Renewed(uint64_t sent_ns);
  uint64_t now() const { return clock_(); }
  // Nanoseconds since the last renewal that succeeded was sent.
  uint64_t SilentNs(uint64_t now_ns) const;
  // OK while held; Fenced (and the gate closed) once it has run out or the
  // gate was closed.
  Status Check();
  uint64_t give_up_ns() const { return give_up_ns_; }

 private:
  std::shared_ptr<block::WriteGate> gate_;
  const uint64_t give_up_ns_;
  const Clock clock_;
};

enum class AcquireMode {
  kNormal,    // free, or ours from an earlier incarnation of this node
  kTakeover,  // also from another holder; the caller checked its lease ran out
  kForce,     // from any holder, whatever its lease
};

class Ownership {
 public:
  using LostFn = std::function<void(const Status&)>;

  // `luns` in reserve index order (LUN 0 first), all GatedDevices of `gate`.
  static Result<std::unique_ptr<Ownership>> Acquire(std::vector<std::shared_ptr<block::BlockDevice>> luns,
                                                    std::shared_ptr<block::WriteGate> gate, const Uuid& reserve_uuid,
                                                    uint32_t domain, const NodeIdentity& me,
                                                    const OwnershipOptions& options, AcquireMode mode, LostFn on_lost);
  // Stops renewing without releasing (a crash, as far as others can tell).
  ~Ownership();

  // Gives the domain up cleanly: the reservation is released on every LUN,
  // then the record says free (naming us as the last holder), then our key
  // is unregistered. A failed release leaves the record held and unrenewed
  // (taken over after the lease), never free over a held reservation. The
  // gate closes ("released"). Idempotent.
  Status Release();

  // Another domain of the reserve, owned with the ones held, its record
  // renewed with theirs (`mode` as for Acquire; a takeover preempts the
  // holder's key on every LUN where it is registered, and waits out its
  // queued commands where the LUN has no PREEMPT AND ABORT). Refused with
  // Fenced, naming the holder, while another node holds it; a refusal or a
  // failure leaves the gate and the domains held as they were. OK when it is
  // held already.
  Status AcquireDomain(uint32_t domain, AcquireMode mode);
  // Gives one domain up: its record says free (naming us as the last
  // holder); the registration, the reservation and the other domains stay.
  // The caller has closed the domain (nothing of it is written after).
  // FailedPrecondition for the last domain held (Release() gives that up),
  // NotFound for one not held.
  Status ReleaseDomain(uint32_t domain);

  // A LUN joined the reserve (Reserve::AddLun): our key is registered and the
  // reservation taken on it, and the owner records written to it, before the
  // domain uses it. `lun` must be a GatedDevice of our gate.
  Status AddLun(std::shared_ptr<block::BlockDevice> lun);

  bool lost() const { return !gate_->is_open(); }
  Status lost_reason() const { return gate_->reason(); }
  OwnerRecord record() const;             // the first domain held, as last written
  std::vector<uint32_t> domains() const;  // held, in the order acquired
  bool pr_supported() const { return pr_supported_; }
  uint64_t renewals() const { return renewals_.load(); }
  uint64_t renew_failures() const { return renew_failures_.load(); }
  // The holder we preempted (0: none).
  uint64_t preempted_key() const { return preempted_key_; }
  // How long Acquire waited after a PREEMPT without ABORT (0: none).
  uint64_t settled_ms() const { return settled_ms_; }
  // The lease as this node counts it; outlives the Ownership (heads hold it
  // while they answer).
  std::shared_ptr<Lease> lease() const { return lease_; }

 private:
  Ownership() = default;
  void RenewLoop();
  void LeaseWatchdog();
  Status RenewOnce();
  // Renews one record (the caller holds records_io_mu_).
  Status RenewRecord(const OwnerRecord& mine);
  Status WriteRecord(const OwnerRecord& r);
  // Preempts `victim` on every LUN where it is registered (beneath the
  // gate); sets *unaborted when a plain PREEMPT was used.
  Status PreemptEverywhere(uint64_t victim, bool* unaborted);
  // Shared: Exists when another registered key's node owns a domain of
  // `reserve` (LUN 0's records); else OK, with the other registered keys in
  // *stale.
  Status SharingPartner(const Uuid& reserve, std::vector<uint64_t>* stale);
  void Stop();

  std::vector<std::shared_ptr<block::BlockDevice>> Luns() const;

  // Record writes (renewals, acquiring and releasing a domain) one at a
  // time, held across their I/O: a renewal must not write a record held
  // again after its release wrote it free.
  Mutex records_io_mu_ ACQUIRED_BEFORE(luns_mu_);
  // Leaves (docs/architecture.md): neither is held across I/O or with the other.
  mutable Mutex luns_mu_;
  std::vector<std::shared_ptr<block::BlockDevice>> luns_ GUARDED_BY(luns_mu_);
  std::shared_ptr<block::WriteGate> gate_;
  NodeIdentity me_;
  OwnershipOptions options_;
  std::vector<OwnerRecord> records_ GUARDED_BY(luns_mu_);  // the domains held, as we last wrote them
  bool pr_supported_ = false;
  uint64_t preempted_key_ = 0;
  uint64_t settled_ms_ = 0;
  // Shared with the gate's close callback, which may outlive us: a gate
  // closed by Release() or after destruction does not report a loss.
  struct LostHook {
    std::atomic<bool> quiet{false};
    LostFn fn;
  };
  std::shared_ptr<LostHook> lost_hook_ = std::make_shared<LostHook>();
  std::atomic<uint64_t> renewals_{0};
  std::atomic<uint64_t> renew_failures_{0};

  Mutex mu_;
  CondVar cv_;
  bool stop_ GUARDED_BY(mu_) = false;
  bool released_ GUARDED_BY(mu_) = false;
  std::thread renewer_;
  std::thread watchdog_;
  std::shared_ptr<Lease> lease_;  // set by Acquire before the threads start
};

}  // namespace nasgw::fs
