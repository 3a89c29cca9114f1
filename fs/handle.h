// Handles: how a head names a file, and why a client cannot forge one.
//
// A handle is (volume, inode, generation, snapshot, scope) plus a MAC. Inode
// numbers are never reused in a volume; the generation is 64 random bits
// drawn when the inode is made (never 0), so a handle to a deleted file is
// stale forever and a generation cannot be guessed. The snapshot id is 0 (the
// live file system) until snapshots exist. The scope is the directory of the
// export the handle was issued through (the volume root for a whole-volume
// export): a handle is honoured only within that subtree and only through
// that scope (brief, decision 4).
//
// The MAC is HMAC-SHA256, truncated to 16 bytes, over
//   u8 version (kHandleVersion) | u32 volume | u64 inode | u64 generation |
//   u32 snapshot | u64 scope            (little endian, 33 bytes)
// keyed by the domain's handle secret: 32 random bytes kept in the domain's
// metadata, so a handle stays valid across restarts and on any node that
// opens the domain, and the key never leaves nasgwd. Heads carry the MAC
// opaquely; nasgwd checks it before anything else (docs/on-disk-format.md,
// docs/head-protocol.md).
//
// Thread-safety: a HandleKey is immutable after construction; Mac and Verify
// may be called from any thread.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "base/status.h"

namespace nasgw::fs {

constexpr uint8_t kHandleVersion = 2;  // 1 was the unauthenticated (volume, inode, generation)
constexpr size_t kHandleMacBytes = 16;
constexpr size_t kHandleSecretBytes = 32;
constexpr size_t kHandleMacInputBytes = 33;

using HandleMac = std::array<uint8_t, kHandleMacBytes>;

// Volume ids name their domain: those of domain d are d << 24 | 1 up to
// ((d + 1) << 24) - 1, so a handle's volume says which domain (and which
// domain's secret) it is for, without a field of its own.
constexpr uint32_t kVolumeDomainShift = 24;
constexpr uint32_t VolumeDomain(uint32_t volume) {
  return volume >> kVolumeDomainShift;
}
constexpr uint32_t FirstVolumeId(uint32_t domain) {
  return (domain << kVolumeDomainShift) | 1;
}
constexpr uint32_t LastVolumeId(uint32_t domain) {
  return ((domain + 1) << kVolumeDomainShift) - 1;
}

struct Handle {
  uint32_t volume = 0;
  uint64_t ino = 0;
  uint64_t gen = 0;
  uint32_t snap = 0;   // 0: the live file system
  uint64_t scope = 0;  // the export's directory (an inode of `volume`)
  HandleMac mac{};
};

// The bytes the MAC covers.
std::array<uint8_t, kHandleMacInputBytes> HandleMacInput(const Handle& h);

class HandleKey {
 public:
  HandleKey() = default;  // no key: Mac() is all zero, Verify() always false
  // InvalidArgument unless `secret` is kHandleSecretBytes long.
  static Result<HandleKey> FromSecret(std::string_view secret);

  bool valid() const { return ctx_ != nullptr; }
  HandleMac Mac(const Handle& h) const;
  // Compares in constant time.
  bool Verify(const Handle& h) const;

 private:
  std::shared_ptr<void> ctx_;  // an initialised EVP_MAC_CTX, duplicated per call
};

// kHandleSecretBytes from the kernel's CSPRNG (getrandom).
std::string NewHandleSecret();
// A new inode's generation: 64 random bits, never 0.
uint64_t NewGeneration();

}  // namespace nasgw::fs
