#include "base/status.h"

#include <cerrno>

#include <gtest/gtest.h>

namespace nasgw {
namespace {

TEST(Status, OkHasNoMessage) {
  Status s;
  EXPECT_TRUE(s.ok());
  EXPECT_EQ(s.ToString(), "Ok");
  EXPECT_EQ(s.ToErrno(), 0);
}

TEST(Status, ErrorCarriesCodeAndMessage) {
  Status s = Status::Fenced("reservation conflict on lun 0");
  EXPECT_FALSE(s.ok());
  EXPECT_EQ(s.code(), Code::kFenced);
  EXPECT_EQ(s.ToString(), "Fenced: reservation conflict on lun 0");
  Status copy = s;  // NOLINT(performance-unnecessary-copy-initialization): the copy is what is tested
  EXPECT_EQ(copy.ToString(), s.ToString());
  EXPECT_EQ(s.WithContext("write lba 7").ToString(), "Fenced: write lba 7: reservation conflict on lun 0");
}

TEST(Status, ErrnoMapping) {
  EXPECT_EQ(Status::NotFound("").ToErrno(), ENOENT);
  EXPECT_EQ(Status::NoSpace("").ToErrno(), ENOSPC);
  EXPECT_EQ(Status::TimedOut("").ToErrno(), ETIMEDOUT);
  EXPECT_EQ(Status::PermissionDenied("").ToErrno(), EACCES);
  EXPECT_EQ(Status(Code::kStale, "").ToErrno(), ESTALE);
  EXPECT_EQ(Status(Code::kNotEmpty, "").ToErrno(), ENOTEMPTY);
}

TEST(Result, HoldsValueOrError) {
  Result<int> r = 5;
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(*r, 5);
  Result<int> e = Status::IoError("boom");
  EXPECT_FALSE(e.ok());
  EXPECT_EQ(e.status().code(), Code::kIoError);
}

TEST(ResultDeath, ValueOfErrorAsserts) {
  Result<int> e = Status::IoError("boom");
  EXPECT_DEATH((void)e.value(), "assertion failed");
}

}  // namespace
}  // namespace nasgw
