#include "fs/label.h"

#include <algorithm>
#include <cstring>

#include "base/coding.h"
#include "base/crc32c.h"

namespace nasgw::fs {
namespace {

void PutText(uint8_t* p, const std::string& s) {
  NASGW_ASSERT_LE(s.size(), kLabelTextMax);
  // A fixed-width field the caller zeroed: no terminator of its own.
  std::memcpy(p, s.data(), s.size());  // NOLINT(bugprone-not-null-terminated-result)
}

Result<std::string> GetText(const uint8_t* p, const char* what) {
  size_t n = 0;
  while (n < kLabelTextMax + 1 && p[n] != 0) n++;
  if (n > kLabelTextMax) return Status::Corruption(std::string("label ") + what + " is not terminated");
  for (size_t i = n; i <= kLabelTextMax; i++) {
    if (p[i] != 0) return Status::Corruption(std::string("label ") + what + " has junk after its end");
  }
  return std::string(reinterpret_cast<const char*>(p), n);
}

Uuid GetUuid(const uint8_t* p) {
  Uuid u;
  std::memcpy(u.bytes.data(), p, 16);
  return u;
}

}  // namespace

std::vector<uint8_t> EncodeLabel(const LunLabel& l) {
  NASGW_ASSERT_LE(l.members.size(), kReserveLunsMax);
  NASGW_ASSERT_LE(1u, l.domains);
  NASGW_ASSERT_LE(l.domains, kReserveDomainsMax);
  std::vector<uint8_t> b(kLabelBytes, 0);
  std::memcpy(&b[0], kLabelMagic, 8);
  PutFixed32(&b[8], l.domains > 1 ? kLabelFormatVersionDomains : kLabelFormatVersion);
  if (l.domains > 1) PutFixed32(&b[224], l.domains);
  std::memcpy(&b[16], l.reserve_uuid.bytes.data(), 16);
  std::memcpy(&b[32], l.lun_uuid.bytes.data(), 16);
  PutFixed64(&b[48], l.generation);
  PutFixed32(&b[56], l.lun_index);
  PutFixed32(&b[60], static_cast<uint32_t>(l.members.size()));
  PutFixed64(&b[64], l.lun_size_bytes);
  PutFixed32(&b[72], l.block_size);
  PutFixed64(&b[80], l.ag_bytes);
  PutFixed64(&b[88], l.created_ns);
  PutText(&b[96], l.designator);
  PutText(&b[160], l.reserve_name);
  for (size_t i = 0; i < l.members.size(); i++) {
    uint8_t* m = &b[kLabelMembersOffset + i * kLabelMemberBytes];
    std::memcpy(m, l.members[i].lun_uuid.bytes.data(), 16);
    PutFixed64(m + 16, l.members[i].size_bytes);
    PutFixed32(m + 24, l.members[i].index);
  }
  PutFixed32(&b[12], Crc32c(b.data(), b.size()));
  return b;
}

Result<LunLabel> DecodeLabel(std::span<const uint8_t> b) {
  if (b.size() < kLabelBytes) return Status::InvalidArgument("label buffer too short");
  if (std::memcmp(b.data(), kLabelMagic, 8) != 0) return Status::NotFound("no nasgw label");
  std::vector<uint8_t> copy(b.begin(), b.begin() + kLabelBytes);
  const uint32_t stored_crc = GetFixed32(&copy[12]);
  PutFixed32(&copy[12], 0);
  if (Crc32c(copy.data(), copy.size()) != stored_crc) return Status::Corruption("label checksum mismatch");
  const uint32_t version = GetFixed32(&copy[8]);
  if (version != kLabelFormatVersion && version != kLabelFormatVersionDomains) {
    return Status::NotSupported("label format version " + std::to_string(version) + " (this nasgw reads " +
                                std::to_string(kLabelFormatVersion) + " and " +
                                std::to_string(kLabelFormatVersionDomains) + ")");
  }
  LunLabel l;
  l.reserve_uuid = GetUuid(&copy[16]);
  l.lun_uuid = GetUuid(&copy[32]);
  l.generation = GetFixed64(&copy[48]);
  l.lun_index = GetFixed32(&copy[56]);
  const uint32_t count = GetFixed32(&copy[60]);
  l.lun_size_bytes = GetFixed64(&copy[64]);
  l.block_size = GetFixed32(&copy[72]);
  l.ag_bytes = GetFixed64(&copy[80]);
  l.created_ns = GetFixed64(&copy[88]);
  auto d = GetText(&copy[96], "designator");
  if (!d.ok()) return d.status();
  l.designator = *d;
  auto n = GetText(&copy[160], "reserve name");
  if (!n.ok()) return n.status();
  l.reserve_name = *n;
  const uint32_t domains = GetFixed32(&copy[224]);
  if (version == kLabelFormatVersion) {
    if (domains != 0) return Status::Corruption("label version 1 with a domain count");
  } else {
    if (domains < 2 || domains > kReserveDomainsMax) return Status::Corruption("label domain count out of range");
    l.domains = domains;
  }
  // A valid checksum over nonsense is still nonsense: check the invariants.
  if (count == 0 || count > kReserveLunsMax) return Status::Corruption("label member count out of range");
  if (l.reserve_uuid.IsNil() || l.lun_uuid.IsNil()) return Status::Corruption("label has a nil UUID");
  if (l.block_size != 512 && l.block_size != 4096) return Status::Corruption("label block size invalid");
  bool self = false;
  for (uint32_t i = 0; i < count; i++) {
    const uint8_t* m = &copy[kLabelMembersOffset + i * kLabelMemberBytes];
    LunMember mem{GetUuid(m), GetFixed64(m + 16), GetFixed32(m + 24)};
    if (mem.index != i) return Status::Corruption("label member table out of order");
    if (mem.lun_uuid == l.lun_uuid) {
      self = true;
      if (mem.index != l.lun_index || mem.size_bytes != l.lun_size_bytes) {
        return Status::Corruption("label disagrees with its own member entry");
      }
    }
    l.members.push_back(mem);
  }
  if (!self) return Status::Corruption("label does not list its own LUN");
  return l;
}

}  // namespace nasgw::fs
