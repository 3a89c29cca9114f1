// MemDevice: an in-memory BlockDevice for unit tests of the layers above, as
// LevelDB's tests use an in-memory Env. It is a test seam, never a substitute
// for the integration tests against real targets.
//
// A MemLun is the medium; several MemDevices may attach to one MemLun, each
// standing for one initiator (node), so persistent reservations and COMPARE
// AND WRITE races behave as on a shared SAN LUN.
//
// The medium models a volatile write cache: a write without FUA is visible to
// reads at once but only durable after a Flush. PowerCut() throws away every
// write not yet durable, as a power loss would (LevelDB's
// fault_injection_test). SetFault() makes chosen requests fail.
//
// Completions run on the MemDevice's own thread, as the async contract says.
#pragma once

#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <thread>
#include <vector>

#include "base/mutex.h"
#include "block/block_device.h"

namespace nasgw::block {

class MemLun {
 public:
  MemLun(uint32_t block_size, uint64_t num_blocks, const std::string& designator = "mem.0");

  const DeviceInfo& info() const { return info_; }
  // Drops every write since the last flush (all initiators).
  void PowerCut();
  // Number of blocks written but not yet durable.
  size_t UnsyncedBlocks() const;

 private:
  friend class MemDevice;
  // Executes one request under mu_; everything it uses is guarded by mu_.
  Status Execute(uint64_t initiator, IoRequest& req) EXCLUDES(mu_);
  Status CheckAccess(uint64_t initiator, bool write) const REQUIRES(mu_);
  void ReadBlock(uint64_t lba, uint8_t* out) const REQUIRES(mu_);
  void WriteBlock(uint64_t lba, const uint8_t* in, bool durable) REQUIRES(mu_);

  mutable Mutex mu_;
  DeviceInfo info_;  // set by the constructor, then read-only
  std::vector<uint8_t> durable_ GUARDED_BY(mu_);
  std::map<uint64_t, std::vector<uint8_t>> volatile_ GUARDED_BY(mu_);  // lba -> block not yet flushed
  uint32_t pr_generation_ GUARDED_BY(mu_) = 0;
  std::map<uint64_t, uint64_t> registrations_ GUARDED_BY(mu_);  // initiator -> key
  bool reserved_ GUARDED_BY(mu_) = false;
  uint64_t holder_ GUARDED_BY(mu_) = 0;  // initiator holding the reservation
  PrType type_ GUARDED_BY(mu_) = PrType::kNone;
};

class MemDevice final : public BlockDevice {
 public:
  // `initiator` identifies this I_T nexus to the LUN's reservation logic.
  MemDevice(std::shared_ptr<MemLun> lun, uint64_t initiator = 1);
  ~MemDevice() override;

  const DeviceInfo& info() const override { return lun_->info(); }
  BlockStats Stats() const override;

  // Every later request for which `fault` returns non-ok fails with that
  // status, without touching the medium. Pass nullptr to clear. `fault`
  // runs on the thread that submits the request (the completion still runs
  // on the device's thread), so it may look at that thread's state: a test
  // can fail its own reads and leave a library's background threads alone.
  void SetFault(std::function<Status(const IoRequest&)> fault);

 protected:
  Status SubmitValidated(IoRequest req) override;

 private:
  void Run();

  std::shared_ptr<MemLun> lun_;
  const uint64_t initiator_;
  mutable Mutex mu_;
  CondVar cv_;
  struct Queued {
    IoRequest req;
    Status fault;  // what the fault function said at submission
  };
  std::deque<Queued> queue_ GUARDED_BY(mu_);
  std::function<Status(const IoRequest&)> fault_ GUARDED_BY(mu_);
  bool stopping_ GUARDED_BY(mu_) = false;
  BlockStats stats_ GUARDED_BY(mu_);
  std::thread thread_;
};

}  // namespace nasgw::block
