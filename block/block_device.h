// BlockDevice: the interface through which all of nasgw reaches a LUN.
//
// Implementations: IscsiDevice (block/iscsi_device.h, the real one, over
// libiscsi) and MemDevice (block/mem_device.h, in memory, with fault
// injection, for unit tests of the layers above).
//
// The async contract (as SPDK's bdev): a call either fails at once, returning
// a non-ok Status and never calling back, or returns Ok and calls `done`
// exactly once, later, on the device's I/O thread (never inside the call).
// `done` must not block; it may submit more requests.
//
// Buffers belong to the caller and must stay valid until `done` runs. All
// addresses and lengths are in logical blocks of info().block_size; a buffer
// list must add up to whole blocks.
//
// Thread-safety: every method may be called from any thread. When the
// device's submission queue is full, a submitting thread blocks until there
// is room (backpressure); from the device's own I/O thread (inside a `done`)
// the call fails at once with Busy instead, because blocking there would
// deadlock.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "base/histogram.h"
#include "base/mutex.h"
#include "base/status.h"

namespace nasgw::block {

struct IoVec {
  void* base;
  size_t len;
};

// What a LUN says about itself. `designator` is its identity: the same LUN
// seen through several portals has the same designator, and a reserve label
// records it, so a LUN can never be mistaken for another.
struct DeviceInfo {
  std::string name;  // for logs and metrics (URL without the password)
  uint32_t block_size = 0;
  uint64_t num_blocks = 0;
  std::string vendor;  // INQUIRY
  std::string product;
  std::string revision;
  std::string serial;                     // VPD 0x80 unit serial number
  std::string designator;                 // VPD 0x83, best designator, "naa.<hex>" / "eui.<hex>" / "t10.<text>"
  bool thin_provisioned = false;          // LBPME: UNMAP releases space
  bool unmap_reads_zeroes = false;        // LBPRZ
  uint32_t max_transfer_blocks = 0;       // 0 = no limit reported
  uint32_t max_unmap_blocks = 0;          // 0 = no limit reported
  uint32_t max_compare_write_blocks = 1;  // COMPARE AND WRITE length limit

  uint64_t size_bytes() const { return num_blocks * block_size; }
};

// SCSI-3 persistent reservation types (SPC-4 table 218).
enum class PrType : uint8_t {
  kNone = 0,
  kWriteExclusive = 1,
  kExclusiveAccess = 3,
  kWriteExclusiveRegistrantsOnly = 5,
  kExclusiveAccessRegistrantsOnly = 6,
  kWriteExclusiveAllRegistrants = 7,
  kExclusiveAccessAllRegistrants = 8,
};

// PERSISTENT RESERVE OUT service actions (SPC-4 table 225).
enum class PrAction : uint8_t {
  kRegister = 0,
  kReserve = 1,
  kRelease = 2,
  kClear = 3,
  kPreempt = 4,
  kPreemptAndAbort = 5,
  kRegisterAndIgnoreExistingKey = 6,
};

struct PrOutParams {
  PrAction action = PrAction::kRegister;
  PrType type = PrType::kNone;      // for reserve, release, preempt
  uint64_t key = 0;                 // our current registered key (0 when none)
  uint64_t service_action_key = 0;  // new key (register) or the key to preempt
};

struct PrKeys {
  uint32_t generation = 0;
  std::vector<uint64_t> keys;
};

struct PrReservation {
  uint32_t generation = 0;
  bool reserved = false;
  uint64_t key = 0;
  PrType type = PrType::kNone;
};

enum class Op : uint8_t {
  kRead,
  kWrite,
  kFlush,  // SYNCHRONIZE CACHE
  kUnmap,
  kCompareAndWrite,
  kPrOut,
  kPrReadKeys,
  kPrReadReservation,
};
const char* OpName(Op op);

using IoCallback = std::function<void(Status)>;

// Which queue a command waits in (block/bulk_window.h). Sync: metadata, the
// intent log, labels, reservations: never held back. Bulk: file data (cache
// fills, write-back), admitted within the LUN's bulk window so that it never
// queues more than about the window's target in front of sync commands.
enum class IoClass : uint8_t { kSync, kBulk };

class WriteGate;  // block/gated_device.h

struct IoRequest {
  Op op = Op::kRead;
  bool fua = false;  // write: force unit access
  IoClass io_class = IoClass::kSync;
  uint64_t lba = 0;
  uint64_t blocks = 0;                         // read, write, unmap, compare-and-write
  std::vector<IoVec> iov;                      // read, write
  const uint8_t* compare_and_write = nullptr;  // 2*blocks*block_size: compare data, then write data
  PrOutParams pr_out;
  PrKeys* keys_out = nullptr;
  PrReservation* reservation_out = nullptr;
  IoCallback done;
  // The write gate a change passed (GatedDevice sets it; it outlives the
  // request). A device that holds requests before sending them, or sends
  // them again (IscsiDevice: its queue, retries, a path's reconnect),
  // checks its time bound at each send: a change that waited past the
  // owner's lease is not sent.
  WriteGate* gate = nullptr;
};

struct OpStats {
  uint64_t ops = 0;
  uint64_t bytes = 0;
  uint64_t errors = 0;
  HistogramData latency_ns;
};

struct PathStats {
  std::string portal;
  bool up = false;
  uint64_t ops = 0;
  uint64_t failures = 0;  // times this path was declared dead
  std::string last_error;
};

struct BlockStats {
  OpStats read;
  OpStats write;
  OpStats other;                      // flush, unmap, compare-and-write, PR
  uint32_t in_flight = 0;             // commands on the wire now
  uint32_t queued = 0;                // admitted, waiting for a slot or a path
  uint64_t retries = 0;               // commands re-issued (transient errors, path loss)
  uint64_t timeouts = 0;              // requests failed with TimedOut
  uint64_t bulk_window_bytes = 0;     // bulk bytes allowed on the wire now (UINT64_MAX: no window)
  uint64_t bulk_in_flight_bytes = 0;  // bulk bytes on the wire now
  uint32_t bulk_queued = 0;           // bulk commands waiting for the window
  std::vector<PathStats> paths;
};

class BlockDevice {
 public:
  virtual ~BlockDevice() = default;
  BlockDevice(const BlockDevice&) = delete;
  BlockDevice& operator=(const BlockDevice&) = delete;

  virtual const DeviceInfo& info() const = 0;
  virtual BlockStats Stats() const = 0;

  // Checks `req` against info() and the limits, then hands it to the device.
  Status Submit(IoRequest req);

  Status Read(uint64_t lba, std::span<const IoVec> iov, IoCallback done, IoClass io_class = IoClass::kSync);
  Status Write(uint64_t lba, std::span<const IoVec> iov, bool fua, IoCallback done, IoClass io_class = IoClass::kSync);
  Status Flush(IoCallback done);
  // Releases blocks (thin LUNs); they then read back as zeros where the
  // device reports unmap_reads_zeroes.
  Status Unmap(uint64_t lba, uint64_t blocks, IoCallback done);
  // Atomically: if the blocks at lba equal compare, replace them with write;
  // else fail with Miscompare and change nothing. Each span is blocks*block_size.
  Status CompareAndWrite(uint64_t lba, const uint8_t* data, uint64_t blocks, IoCallback done);
  Status PrOut(const PrOutParams& params, IoCallback done);
  Status PrReadKeys(PrKeys* out, IoCallback done);
  Status PrReadReservation(PrReservation* out, IoCallback done);

 protected:
  BlockDevice() = default;
  // Called with a validated request. Same contract as Submit.
  virtual Status SubmitValidated(IoRequest req) = 0;
};

// Many reads and writes in flight at once, over any devices, at most
// `depth` of them, all of one IoClass: Read/Write submit (waiting first while `depth` are in
// flight), Wait waits for all and returns the first error. The buffers must
// stay valid until Wait returns; the destructor waits too. REQUIRES: not on
// a device's own completion thread. Thread-compatible: one thread submits.
class IoBatch {
 public:
  explicit IoBatch(uint32_t depth, IoClass io_class = IoClass::kSync)
      : depth_(depth == 0 ? 1 : depth), class_(io_class) {}
  ~IoBatch() { Wait().IgnoreError(); }  // the buffers outlive every request
  IoBatch(const IoBatch&) = delete;
  IoBatch& operator=(const IoBatch&) = delete;

  void Read(BlockDevice& dev, uint64_t lba, void* buf, size_t len);
  void Write(BlockDevice& dev, uint64_t lba, const void* buf, size_t len, bool fua);
  Status Wait();

 private:
  void Admit();
  void Done(Status s);
  const uint32_t depth_;
  const IoClass class_;
  Mutex mu_;
  CondVar cv_;
  uint32_t in_flight_ GUARDED_BY(mu_) = 0;
  Status first_ GUARDED_BY(mu_);
};

// Blocking helpers over the async calls. REQUIRES: not on the device's own
// I/O thread (they wait for a completion that thread must deliver).
Status ReadSync(BlockDevice& dev, uint64_t lba, void* buf, size_t len);
Status WriteSync(BlockDevice& dev, uint64_t lba, const void* buf, size_t len, bool fua = false);
Status FlushSync(BlockDevice& dev);
Status UnmapSync(BlockDevice& dev, uint64_t lba, uint64_t blocks);
Status CompareAndWriteSync(BlockDevice& dev, uint64_t lba, const void* compare, const void* write, size_t len);
Status PrOutSync(BlockDevice& dev, const PrOutParams& params);
Result<PrKeys> PrReadKeysSync(BlockDevice& dev);
Result<PrReservation> PrReadReservationSync(BlockDevice& dev);

// Fencing: takes the reservation from the holder of `victim_key` and removes
// every registration with that key, so the victim's later commands fail with
// RESERVATION CONFLICT. Uses PREEMPT AND ABORT (which also aborts the
// victim's queued commands); where the target does not implement it (tgt
// 1.0.85), falls back to PREEMPT and says so in `aborted`.
struct FenceResult {
  bool aborted = false;  // the victim's in-flight commands were aborted too
};
Result<FenceResult> FenceSync(BlockDevice& dev, uint64_t my_key, uint64_t victim_key, PrType type);

}  // namespace nasgw::block
