#include "base/log.h"

#include <gtest/gtest.h>

#include <sstream>

namespace nasgw {
namespace {

std::string Field(std::string_view value) {
  std::ostringstream os;
  os << Kv("k", value);
  return os.str();
}

TEST(Log, ValuesThatWouldSplitAreQuoted) {
  EXPECT_EQ(Field("plain"), " k=plain");
  EXPECT_EQ(Field(""), " k=\"\"");
  EXPECT_EQ(Field("two words"), " k=\"two words\"");
  EXPECT_EQ(Field("say \"hi\""), " k=\"say \\\"hi\\\"\"");
  EXPECT_EQ(Field("a\nb"), " k=\"a\\nb\"");
  std::ostringstream os;
  os << Kv("n", 42);
  EXPECT_EQ(os.str(), " n=42");
}

}  // namespace
}  // namespace nasgw
