#include "base/log.h"

#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

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

TEST(Log, ASinkReceivesLinesUntilReset) {
  std::vector<std::string> lines;
  SetLogSink([&](std::string_view l) { lines.emplace_back(l); });
  NASGW_LOG(kWarn, "test") << "captured" << Kv("n", 1);
  SetLogSink(nullptr);
  NASGW_LOG(kWarn, "test") << "to stderr";
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_NE(lines[0].find(" WARN test captured n=1\n"), std::string::npos) << lines[0];
}

}  // namespace
}  // namespace nasgw
