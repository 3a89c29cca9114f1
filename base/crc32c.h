// CRC-32C (Castagnoli), the checksum of every nasgw on-disk record. The same
// polynomial as iSCSI digests, ext4 metadata and RocksDB blocks.
#pragma once

#include <cstddef>
#include <cstdint>

namespace nasgw {

// Extends `crc` (0 to start) over data. With the CPU's CRC32 instruction
// where it has one (x86-64 with SSE 4.2), else a table.
uint32_t Crc32c(uint32_t crc, const void* data, size_t len);
// The table alone (tests compare the two).
uint32_t Crc32cPortable(uint32_t crc, const void* data, size_t len);
inline uint32_t Crc32c(const void* data, size_t len) {
  return Crc32c(0, data, len);
}

}  // namespace nasgw
