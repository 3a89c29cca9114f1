#include "block/scsi_status.h"

#include <cstdio>

namespace nasgw::block {

bool IsIdempotent(Op op) {
  switch (op) {
    case Op::kRead:
    case Op::kWrite:
    case Op::kFlush:
    case Op::kUnmap:
    case Op::kPrReadKeys:
    case Op::kPrReadReservation:
      return true;
    case Op::kCompareAndWrite:
    case Op::kPrOut:
      return false;
  }
  return false;
}

namespace {

const char* SenseKeyName(SenseKey k) {
  switch (k) {
    case SenseKey::kNoSense:
      return "NO SENSE";
    case SenseKey::kRecoveredError:
      return "RECOVERED ERROR";
    case SenseKey::kNotReady:
      return "NOT READY";
    case SenseKey::kMediumError:
      return "MEDIUM ERROR";
    case SenseKey::kHardwareError:
      return "HARDWARE ERROR";
    case SenseKey::kIllegalRequest:
      return "ILLEGAL REQUEST";
    case SenseKey::kUnitAttention:
      return "UNIT ATTENTION";
    case SenseKey::kDataProtect:
      return "DATA PROTECT";
    case SenseKey::kBlankCheck:
      return "BLANK CHECK";
    case SenseKey::kAbortedCommand:
      return "ABORTED COMMAND";
    case SenseKey::kMiscompare:
      return "MISCOMPARE";
  }
  return "sense key";
}

const char* AscName(uint8_t asc, uint8_t ascq) {
  switch (asc) {
    case 0x04:
      return ascq == 0x01 ? "logical unit is becoming ready" : "logical unit not ready";
    case 0x0C:
      return "write error";
    case 0x11:
      return "unrecovered read error";
    case 0x1D:
      return "miscompare during verify";
    case 0x20:
      return "invalid command operation code";
    case 0x21:
      return "LBA out of range";
    case 0x24:
      return "invalid field in CDB";
    case 0x25:
      return "logical unit not supported";
    case 0x26:
      return "invalid field in parameter list";
    case 0x27:
      return "write protected";
    case 0x29:
      return "power on, reset or bus device reset occurred";
    case 0x2A:
      switch (ascq) {
        case 0x03:
          return "reservations preempted";
        case 0x04:
          return "reservations released";
        case 0x05:
          return "registrations preempted";
        default:
          return "parameters changed";
      }
    case 0x2F:
      return "commands cleared by another initiator";
    case 0x3A:
      return "medium not present";
    case 0x3F:
      return "target operating conditions have changed";
    default:
      return "";
  }
}

}  // namespace

std::string DescribeScsi(const ScsiOutcome& o) {
  char buf[200];
  switch (o.status) {
    case ScsiStatus::kGood:
      return "GOOD";
    case ScsiStatus::kConditionMet:
      return "CONDITION MET";
    case ScsiStatus::kBusy:
      return "BUSY";
    case ScsiStatus::kReservationConflict:
      return "RESERVATION CONFLICT";
    case ScsiStatus::kTaskSetFull:
      return "TASK SET FULL";
    case ScsiStatus::kAcaActive:
      return "ACA ACTIVE";
    case ScsiStatus::kTaskAborted:
      return "TASK ABORTED";
    case ScsiStatus::kTransportLost:
      return "connection lost";
    case ScsiStatus::kTransportError:
      return "initiator error";
    case ScsiStatus::kCheckCondition:
      std::snprintf(buf, sizeof(buf), "CHECK CONDITION: %s, %s (asc 0x%02x ascq 0x%02x)", SenseKeyName(o.sense_key),
                    AscName(o.asc, o.ascq), o.asc, o.ascq);
      return buf;
  }
  std::snprintf(buf, sizeof(buf), "SCSI status 0x%x", static_cast<unsigned>(o.status));
  return buf;
}

Classification ClassifyScsi(const ScsiOutcome& o, Op op) {
  const std::string what = DescribeScsi(o);
  auto done = [&](Code c) { return Classification{Disposition::kDone, Status(c, what)}; };
  auto retry = [&](Disposition d) { return Classification{d, Status::Busy(what)}; };

  switch (o.status) {
    case ScsiStatus::kGood:
    case ScsiStatus::kConditionMet:
      return {Disposition::kDone, Status()};
    case ScsiStatus::kReservationConflict:
      // Another initiator holds the LUN: this node is fenced. Never retried.
      return done(Code::kFenced);
    case ScsiStatus::kBusy:
    case ScsiStatus::kTaskSetFull:
    case ScsiStatus::kAcaActive:
      return retry(Disposition::kRetryBackoff);
    case ScsiStatus::kTaskAborted:
      // Aborted by another initiator's PREEMPT AND ABORT or a task management
      // function; the retry will meet the new state (RESERVATION CONFLICT).
      return IsIdempotent(op) ? retry(Disposition::kRetryNow) : done(Code::kUnavailable);
    case ScsiStatus::kTransportLost:
      if (IsIdempotent(op)) return {Disposition::kRetryPath, Status::Unavailable(what)};
      return {Disposition::kDone, Status::Unavailable(std::string("connection lost while ") + OpName(op) +
                                                      " was in flight: outcome unknown, read the state back")};
    case ScsiStatus::kTransportError:
      return done(Code::kIoError);
    case ScsiStatus::kCheckCondition:
      break;
  }

  switch (o.sense_key) {
    case SenseKey::kNoSense:
    case SenseKey::kRecoveredError:
      // The command completed (recovered errors are successes with a note).
      return o.sense_key == SenseKey::kRecoveredError ? Classification{Disposition::kDone, Status()}
                                                      : retry(Disposition::kRetryBackoff);
    case SenseKey::kUnitAttention:
      // The target reports an event (reset, reservations changed) and did not
      // run the command: running it again is always safe.
      return retry(Disposition::kRetryNow);
    case SenseKey::kNotReady:
      if (o.asc == 0x3A) return done(Code::kIoError);  // medium not present
      return retry(Disposition::kRetryBackoff);
    case SenseKey::kAbortedCommand:
      return IsIdempotent(op) ? retry(Disposition::kRetryBackoff) : done(Code::kUnavailable);
    case SenseKey::kMediumError:
    case SenseKey::kHardwareError:
    case SenseKey::kBlankCheck:
      return done(Code::kIoError);
    case SenseKey::kDataProtect:
      return done(Code::kPermissionDenied);
    case SenseKey::kMiscompare:
      return done(Code::kMiscompare);
    case SenseKey::kIllegalRequest:
      switch (o.asc) {
        case 0x21:
          return done(Code::kOutOfRange);
        case 0x25:
          return done(Code::kNotFound);
        case 0x20:
          return done(Code::kNotSupported);
        default:
          return done(Code::kInvalidArgument);
      }
  }
  return done(Code::kIoError);
}

uint32_t BackoffMs(uint32_t attempt, uint32_t min_ms, uint32_t max_ms, double jitter) {
  uint64_t d = min_ms;
  for (uint32_t i = 0; i < attempt && d < max_ms; i++) d *= 2;
  if (d > max_ms) d = max_ms;
  if (jitter < 0) jitter = 0;
  if (jitter >= 1) jitter = 0.999999;
  uint64_t half = d / 2;
  return static_cast<uint32_t>(half + static_cast<uint64_t>(static_cast<double>(d - half) * jitter));
}

}  // namespace nasgw::block
