// The LUN label: what makes a LUN part of a nasgw reserve.
//
// Every LUN of a reserve carries the same label twice: a primary copy in the
// first 4 KiB of the LUN and a backup in the last 4 KiB, each protected by a
// CRC-32C, so one torn or overwritten copy never loses the reserve. A label
// names the reserve and the LUN (random UUIDs), the LUN's place in the reserve
// and the whole membership list, stamped with a generation that grows with
// every change of membership: the labels with the highest generation are the
// truth (see docs/on-disk-format.md for the crash argument).
//
// Layout of a 4096-byte label, little-endian:
//   0   magic "NASGWRSV"            8   u32 format version (1, or 2)
//   12  u32 CRC-32C of the 4096 bytes with this field zero
//   16  reserve UUID (16)           32  LUN UUID (16)
//   48  u64 generation              56  u32 LUN index     60 u32 member count
//   64  u64 LUN size in bytes       72  u32 block size    76 u32 flags (0)
//   80  u64 allocation group bytes  88  u64 created (ns since the epoch, UTC)
//   96  designator, NUL-padded (64) 160 reserve name, NUL-padded (64)
//   224 u32 domain count: 0 in version 1 (one domain), 2..kReserveDomainsMax
//       in version 2. A reserve of one domain keeps version 1, so that every
//       nasgw reads it; one split into several is version 2, which a nasgw
//       that serves one domain per reserve refuses instead of growing its
//       one domain over the others' allocation groups.
//   228 .. 1023 zero (room for later fields)
//   1024 members, 32 bytes each: LUN UUID (16), u64 size in bytes, u32 index, u32 flags
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "base/status.h"
#include "base/uuid.h"

namespace nasgw::fs {

constexpr char kLabelMagic[8] = {'N', 'A', 'S', 'G', 'W', 'R', 'S', 'V'};
constexpr uint32_t kLabelFormatVersion = 1;         // a reserve of one domain
constexpr uint32_t kLabelFormatVersionDomains = 2;  // several domains (the domain count at 224)
constexpr size_t kLabelBytes = 4096;
constexpr size_t kLabelMembersOffset = 1024;
constexpr size_t kLabelMemberBytes = 32;
// Most LUNs in one reserve: what fits in one label's member table.
constexpr uint32_t kReserveLunsMax = (kLabelBytes - kLabelMembersOffset) / kLabelMemberBytes;
constexpr size_t kLabelTextMax = 63;  // designator and reserve name, without the NUL
// Most domains one reserve splits into: the slots of the domain table in the
// reserve header (fs/metafs.h kDomainsMax).
constexpr uint32_t kReserveDomainsMax = 28;

struct LunMember {
  Uuid lun_uuid;
  uint64_t size_bytes = 0;
  uint32_t index = 0;
  bool operator==(const LunMember&) const = default;
};

struct LunLabel {
  Uuid reserve_uuid;
  Uuid lun_uuid;
  uint64_t generation = 0;
  uint32_t lun_index = 0;
  uint64_t lun_size_bytes = 0;
  uint32_t block_size = 0;
  uint64_t ag_bytes = 0;
  uint64_t created_ns = 0;
  std::string designator;  // the LUN's SCSI identity when labelled
  std::string reserve_name;
  // Domains the reserve is split into (fs/reserve.h, "Domains"), fixed at
  // format: 1..kReserveDomainsMax.
  uint32_t domains = 1;
  std::vector<LunMember> members;  // sorted by index; includes this LUN

  bool operator==(const LunLabel&) const = default;
};

// REQUIRES: members.size() <= kReserveLunsMax, texts <= kLabelTextMax,
// 1 <= domains <= kReserveDomainsMax.
std::vector<uint8_t> EncodeLabel(const LunLabel& label);

// NotFound when the bytes are not a nasgw label at all (no magic: a foreign
// or blank LUN); Corruption when they claim to be one but do not check out;
// NotSupported for a newer format version.
Result<LunLabel> DecodeLabel(std::span<const uint8_t> bytes);

inline uint64_t PrimaryLabelOffset() {
  return 0;
}
inline uint64_t BackupLabelOffset(uint64_t lun_size_bytes) {
  return lun_size_bytes - kLabelBytes;
}

}  // namespace nasgw::fs
