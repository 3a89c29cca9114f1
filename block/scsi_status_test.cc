#include "block/scsi_status.h"

#include <gtest/gtest.h>

namespace nasgw::block {
namespace {

ScsiOutcome Check(SenseKey k, uint8_t asc, uint8_t ascq = 0) {
  return ScsiOutcome{ScsiStatus::kCheckCondition, k, asc, ascq};
}

TEST(ScsiStatus, GoodIsDone) {
  auto c = ClassifyScsi({}, Op::kWrite);
  EXPECT_EQ(c.disposition, Disposition::kDone);
  EXPECT_TRUE(c.status.ok());
}

TEST(ScsiStatus, ReservationConflictIsFencedAndFinal) {
  for (Op op : {Op::kRead, Op::kWrite, Op::kCompareAndWrite, Op::kPrOut}) {
    auto c = ClassifyScsi({ScsiStatus::kReservationConflict}, op);
    EXPECT_EQ(c.disposition, Disposition::kDone);
    EXPECT_EQ(c.status.code(), Code::kFenced);
  }
}

TEST(ScsiStatus, SenseMapping) {
  struct Case {
    ScsiOutcome o;
    Code code;
  } cases[] = {
      {Check(SenseKey::kIllegalRequest, 0x21), Code::kOutOfRange},
      {Check(SenseKey::kIllegalRequest, 0x25), Code::kNotFound},
      {Check(SenseKey::kIllegalRequest, 0x20), Code::kNotSupported},
      {Check(SenseKey::kIllegalRequest, 0x24), Code::kInvalidArgument},
      {Check(SenseKey::kMediumError, 0x11), Code::kIoError},
      {Check(SenseKey::kHardwareError, 0x44), Code::kIoError},
      {Check(SenseKey::kMiscompare, 0x1D), Code::kMiscompare},
      {Check(SenseKey::kDataProtect, 0x27), Code::kPermissionDenied},
      {Check(SenseKey::kNotReady, 0x3A), Code::kIoError},
  };
  for (const auto& t : cases) {
    auto c = ClassifyScsi(t.o, Op::kWrite);
    EXPECT_EQ(c.disposition, Disposition::kDone) << DescribeScsi(t.o);
    EXPECT_EQ(c.status.code(), t.code) << DescribeScsi(t.o);
  }
}

TEST(ScsiStatus, TransientConditionsRetry) {
  EXPECT_EQ(ClassifyScsi(Check(SenseKey::kUnitAttention, 0x29), Op::kWrite).disposition, Disposition::kRetryNow);
  EXPECT_EQ(ClassifyScsi(Check(SenseKey::kUnitAttention, 0x2A, 0x03), Op::kCompareAndWrite).disposition,
            Disposition::kRetryNow);
  EXPECT_EQ(ClassifyScsi(Check(SenseKey::kNotReady, 0x04, 0x01), Op::kRead).disposition, Disposition::kRetryBackoff);
  EXPECT_EQ(ClassifyScsi({ScsiStatus::kBusy}, Op::kRead).disposition, Disposition::kRetryBackoff);
  EXPECT_EQ(ClassifyScsi({ScsiStatus::kTaskSetFull}, Op::kWrite).disposition, Disposition::kRetryBackoff);
}

TEST(ScsiStatus, LostConnectionRetriesOnlyIdempotentCommands) {
  ScsiOutcome lost{ScsiStatus::kTransportLost};
  for (Op op : {Op::kRead, Op::kWrite, Op::kFlush, Op::kUnmap, Op::kPrReadKeys}) {
    EXPECT_EQ(ClassifyScsi(lost, op).disposition, Disposition::kRetryPath) << OpName(op);
  }
  for (Op op : {Op::kCompareAndWrite, Op::kPrOut}) {
    auto c = ClassifyScsi(lost, op);
    EXPECT_EQ(c.disposition, Disposition::kDone) << OpName(op);
    EXPECT_EQ(c.status.code(), Code::kUnavailable);
    EXPECT_NE(c.status.ToString().find("outcome unknown"), std::string::npos);
  }
}

TEST(ScsiStatus, DescribeNamesSense) {
  EXPECT_EQ(DescribeScsi(Check(SenseKey::kIllegalRequest, 0x21)),
            "CHECK CONDITION: ILLEGAL REQUEST, LBA out of range (asc 0x21 ascq 0x00)");
  EXPECT_EQ(DescribeScsi({ScsiStatus::kReservationConflict}), "RESERVATION CONFLICT");
}

TEST(Backoff, DoublesCapsAndJitters) {
  EXPECT_EQ(BackoffMs(0, 50, 2000, 0.999999), 49u);  // [25, 50)
  EXPECT_EQ(BackoffMs(0, 50, 2000, 0.0), 25u);
  EXPECT_EQ(BackoffMs(1, 50, 2000, 0.0), 50u);
  EXPECT_EQ(BackoffMs(3, 50, 2000, 0.0), 200u);
  EXPECT_EQ(BackoffMs(10, 50, 2000, 0.0), 1000u);
  EXPECT_EQ(BackoffMs(1000, 50, 2000, 0.0), 1000u);  // no overflow at huge attempt counts
  for (uint32_t a = 0; a < 40; a++) {
    uint32_t v = BackoffMs(a, 50, 2000, 0.5);
    EXPECT_GE(v, 25u);
    EXPECT_LE(v, 2000u);
  }
}

}  // namespace
}  // namespace nasgw::block
