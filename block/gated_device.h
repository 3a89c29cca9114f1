// WriteGate and GatedDevice: how a node stops writing to a reserve at once.
//
// A node may write to a reserve's LUNs only while it owns the reserve
// (fs/ownership.h). Every LUN the node writes through is wrapped in a
// GatedDevice that shares the node's WriteGate. While the gate is open,
// requests pass through unchanged. The gate closes:
//  - when any wrapped LUN answers a request with Fenced (SCSI RESERVATION
//    CONFLICT: another node preempted our key), so one conflict on one LUN
//    stops the writes to every LUN of the reserve, not only that one;
//  - when the owner explicitly closes it (its lease record was overwritten,
//    or a read-only tool such as nasgw-fsck opens the reserve);
//  - when a change is submitted past the gate's time bound (Bound: the
//    owner's lease, fs::Lease), before it goes out. Others may take the
//    reserve once the lease has run out, and on an array without persistent
//    reservations nothing else would stop a node woken from a hang (SIGSTOP,
//    a paused VM) from sending what it had queued before its lease watchdog
//    next looks.
// Once closed, every write, flush, unmap, COMPARE AND WRITE and PERSISTENT
// RESERVE OUT fails at once with the gate's reason and never reaches the
// array; reads still pass (reading is always safe and lets a fenced node
// report what it sees). A gate never reopens: a node that takes the reserve
// again builds a new gate and new GatedDevices.
//
// This matters most on arrays without persistent reservations, where the
// array itself would not refuse a fenced node's writes.
//
// Thread-safety: all methods may be called from any thread. The closed
// callback runs once, on the thread that closed the gate (possibly a
// device's I/O thread): it must not block.
#pragma once

#include <atomic>
#include <functional>
#include <memory>

#include "base/mutex.h"
#include "block/block_device.h"

namespace nasgw::block {

class WriteGate {
 public:
  WriteGate() = default;
  // A gate closed from the start: a read-only view of the LUNs.
  static std::shared_ptr<WriteGate> Closed(const Status& reason);

  bool is_open() const { return open_.load(std::memory_order_acquire); }
  // Closes the gate; true for the call that closed it. `reason` must not be ok.
  bool Close(const Status& reason);
  // Why the gate is closed (ok while open).
  Status reason() const;
  // `fn` runs once when the gate closes (at once, here, if already closed).
  void OnClose(std::function<void(const Status&)> fn);

  // ---- The time bound (the owner's lease)
  using Clock = uint64_t (*)();
  // Bounds the gate in time: it closes once `clock()` is `give_up_ns` past
  // the last renewal (`renewed_ns`, then each Renewed). Called once, before
  // Renewed; a gate without a bound has none.
  void Bound(Clock clock, uint64_t give_up_ns, uint64_t renewed_ns);
  // A renewal sent at `sent_ns` (the bound's clock) succeeded.
  void Renewed(uint64_t sent_ns);
  // Nanoseconds from the last renewal to `now_ns` (0 without a bound).
  uint64_t SilentNs(uint64_t now_ns) const;
  // OK while open and within the bound; the reason otherwise, closing the
  // gate (Fenced) if the bound has passed.
  Status CheckBound();

 private:
  std::atomic<bool> open_{true};
  std::atomic<bool> bounded_{false};
  std::atomic<Clock> clock_{nullptr};
  std::atomic<uint64_t> give_up_ns_{0};
  std::atomic<uint64_t> renewed_ns_{0};
  mutable Mutex mu_;
  Status reason_ GUARDED_BY(mu_);
  std::function<void(const Status&)> on_close_ GUARDED_BY(mu_);
};

class GatedDevice final : public BlockDevice {
 public:
  GatedDevice(std::shared_ptr<BlockDevice> inner, std::shared_ptr<WriteGate> gate);

  const DeviceInfo& info() const override { return inner_->info(); }
  BlockStats Stats() const override { return inner_->Stats(); }
  const std::shared_ptr<BlockDevice>& inner() const { return inner_; }
  const std::shared_ptr<WriteGate>& gate() const { return gate_; }

  // True for requests that change the medium or the reservations.
  static bool Changes(Op op);

 protected:
  Status SubmitValidated(IoRequest req) override;

 private:
  std::shared_ptr<BlockDevice> inner_;
  std::shared_ptr<WriteGate> gate_;
};

// Wraps each device in a GatedDevice sharing `gate`.
std::vector<std::shared_ptr<BlockDevice>> Gate(const std::vector<std::shared_ptr<BlockDevice>>& devices,
                                               const std::shared_ptr<WriteGate>& gate);

}  // namespace nasgw::block
