// Reserve: the set of LUNs nasgw owns, as one address space of allocation
// groups.
//
// Format() labels LUNs as a new reserve; Open() finds a reserve from its LUNs,
// given in any order, and refuses, naming the LUN, anything that is not
// exactly one whole reserve: a foreign or blank LUN, LUNs of two reserves,
// the same LUN twice, a missing member, a LUN smaller than when labelled or
// whose SCSI identity changed. A damaged or stale label copy is rewritten
// from the good one (repairs() lists what was mended). AddLun() grows the
// reserve online.
//
// Geometry of every LUN (docs/on-disk-format.md):
//   [0, 1 MiB)            reserve header: primary label (4 KiB), then room
//                         for the domain table and the cluster's disk
//                         heartbeat slots
//   [1 MiB, size - 1 MiB) data area: whole allocation groups of ag_bytes
//   [size - 1 MiB, size)  reserve trailer: backup label in the last 4 KiB
//
// Domains: a reserve is split at format into 1..kReserveDomainsMax domains,
// each a file system of its own (fs/domain.h) that one node at a time owns.
// Domain d of D owns the allocation groups [n*d/D, n*(d+1)/D) of every LUN
// of n groups (AgSlice), so each stripes over every LUN, a LUN added later
// gives each its share, and no record has to be agreed between domains for
// it: the split follows from the labels alone. The count is fixed at format.
//
// Thread-safety: all methods may be called concurrently; AddLun() is
// serialised against itself and readers see the LUN list before or after it.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "base/mutex.h"
#include "base/status.h"
#include "base/uuid.h"
#include "block/block_device.h"
#include "fs/label.h"

namespace nasgw::fs {

constexpr uint64_t kReserveHeaderBytes = 1ull << 20;
constexpr uint64_t kReserveTrailerBytes = 1ull << 20;
// Allocation groups: the unit a domain owns. 1 GiB keeps per-group metadata
// small on 100 TB reserves; tests use 1 MiB ones.
constexpr uint64_t kAgBytesDefault = 1ull << 30;
constexpr uint64_t kAgBytesMin = 1ull << 20;
constexpr uint64_t kAgBytesMax = 64ull << 30;

struct ReserveOptions {
  std::string name = "reserve";
  uint64_t ag_bytes = kAgBytesDefault;
  uint32_t domains = 1;  // 1..kReserveDomainsMax ("Domains" above)
  bool force = false;    // overwrite LUNs that already carry a nasgw label
};

class Reserve {
 public:
  using Device = std::shared_ptr<block::BlockDevice>;

  static Result<std::unique_ptr<Reserve>> Format(const std::vector<Device>& luns, const ReserveOptions& options);
  // With `read_only`, nothing is written: labels that would be repaired are
  // listed in repairs() ("would rewrite ...") and left as they are.
  static Result<std::unique_ptr<Reserve>> Open(const std::vector<Device>& luns, bool read_only = false);

  // Labels `lun` and makes it a member. The add is committed once the first
  // existing member's label has been rewritten; a crash before that leaves
  // the old reserve, after it the new one (Open completes it).
  Status AddLun(const Device& lun, bool force = false);

  const Uuid& uuid() const { return uuid_; }
  const std::string& name() const { return name_; }
  uint64_t ag_bytes() const { return ag_bytes_; }
  uint32_t domains() const { return domains_; }
  uint64_t generation() const;
  size_t lun_count() const;
  Device lun(uint32_t index) const;
  LunLabel label(uint32_t index) const;
  uint32_t ag_count(uint32_t index) const;
  uint64_t capacity_bytes() const;  // all allocation groups, all LUNs
  // Labels that Open() rewrote, in words.
  const std::vector<std::string>& repairs() const { return repairs_; }

  // Where allocation group `ag` of LUN `index` starts, in bytes.
  static uint64_t AgOffset(uint64_t ag_bytes, uint32_t ag) { return kReserveHeaderBytes + ag * ag_bytes; }
  static uint32_t AgCount(uint64_t lun_bytes, uint64_t ag_bytes);
  // The allocation groups of a LUN of `ag_count` groups that domain `domain`
  // of `domains` owns: [first, first + count). REQUIRES: domain < domains.
  struct Slice {
    uint32_t first = 0;
    uint32_t count = 0;
  };
  static Slice AgSlice(uint32_t ag_count, uint32_t domain, uint32_t domains);

 private:
  struct Member {
    Device dev;
    LunLabel label;
  };
  Reserve() = default;

  Uuid uuid_;
  std::string name_;
  uint64_t ag_bytes_ = 0;
  uint32_t domains_ = 1;
  Mutex add_mu_ ACQUIRED_BEFORE(mu_);  // one AddLun at a time
  mutable Mutex mu_;
  std::vector<Member> members_ GUARDED_BY(mu_);  // by index
  std::vector<std::string> repairs_;
};

// Reads both label copies of a LUN. Used by Open, Format and tools.
struct LabelCopies {
  Result<LunLabel> primary = Status::NotFound("not read");
  Result<LunLabel> backup = Status::NotFound("not read");
};
Result<LabelCopies> ReadLabels(block::BlockDevice& dev);
// Writes both copies (FUA), primary first, then flushes.
Status WriteLabels(block::BlockDevice& dev, const LunLabel& label);

}  // namespace nasgw::fs
