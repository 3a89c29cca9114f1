// How the outcome of one SCSI command becomes a nasgw Status, and whether it
// is worth trying again. Pure functions, independent of libiscsi, so that the
// policy is unit-tested on its own (block/scsi_status_test.cc).
#pragma once

#include <cstdint>
#include <string>

#include "base/status.h"
#include "block/block_device.h"

namespace nasgw::block {

// SCSI status byte values (SAM-5), plus the transport outcomes an initiator
// sees when no SCSI status came back at all.
enum class ScsiStatus : uint32_t {
  kGood = 0x00,
  kCheckCondition = 0x02,
  kConditionMet = 0x04,
  kBusy = 0x08,
  kReservationConflict = 0x18,
  kTaskSetFull = 0x28,
  kAcaActive = 0x30,
  kTaskAborted = 0x40,
  kTransportLost = 0x1000,   // the connection carrying it went away
  kTransportError = 0x1001,  // the initiator library could not build or send it
};

enum class SenseKey : uint8_t {
  kNoSense = 0x0,
  kRecoveredError = 0x1,
  kNotReady = 0x2,
  kMediumError = 0x3,
  kHardwareError = 0x4,
  kIllegalRequest = 0x5,
  kUnitAttention = 0x6,
  kDataProtect = 0x7,
  kBlankCheck = 0x8,
  kAbortedCommand = 0xB,
  kMiscompare = 0xE,
};

struct ScsiOutcome {
  ScsiStatus status = ScsiStatus::kGood;
  SenseKey sense_key = SenseKey::kNoSense;
  uint8_t asc = 0;
  uint8_t ascq = 0;
};

enum class Disposition {
  kDone,          // complete the request with `status`
  kRetryNow,      // re-issue at once (UNIT ATTENTION: the command was not run)
  kRetryBackoff,  // re-issue after a backoff (BUSY, NOT READY becoming ready)
  kRetryPath,     // the path failed under it: re-issue on a live path
};

struct Classification {
  Disposition disposition = Disposition::kDone;
  Status status;  // the error if the request ends here (also set for retries: the last error seen)
};

// Commands whose re-execution after an unknown outcome is harmless. COMPARE
// AND WRITE and PERSISTENT RESERVE OUT are not: if the first try landed, a
// second would see different state. Those fail with Unavailable ("outcome
// unknown") when their connection drops, and the caller, who knows what it
// meant, reads the state back.
bool IsIdempotent(Op op);

Classification ClassifyScsi(const ScsiOutcome& outcome, Op op);

// "CHECK CONDITION: ILLEGAL REQUEST, LBA out of range (asc 0x21 ascq 0x00)"
std::string DescribeScsi(const ScsiOutcome& outcome);

// Backoff before retry number `attempt` (0-based): min_ms doubling up to
// max_ms, then scaled into [d/2, d] by `jitter` in [0,1) so that many
// initiators retrying one restarted array do not move in lockstep.
uint32_t BackoffMs(uint32_t attempt, uint32_t min_ms, uint32_t max_ms, double jitter);

}  // namespace nasgw::block
