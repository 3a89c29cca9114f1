#include "base/assert.h"

#include <cstdio>
#include <cstdlib>

namespace nasgw::internal {

void AssertFail(const char* file, int line, const char* expr, const std::string& detail) {
  std::fprintf(stderr, "%s:%d: assertion failed: %s %s\n", file, line, expr, detail.c_str());
  std::fflush(stderr);
  std::abort();
}

}  // namespace nasgw::internal
