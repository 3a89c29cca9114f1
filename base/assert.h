// Always-on assertions for programmer errors. Operating errors (EIO, ENOSPC,
// a lost session) are never asserted: they travel as Status.
//
// NASGW_ASSERT_EQ/NE/LT/LE print both sides. NASGW_DCHECK is compiled out of
// release builds and is for checks too costly for the hot path.
#pragma once

#include <sstream>
#include <string>

namespace nasgw::internal {

[[noreturn]] void AssertFail(const char* file, int line, const char* expr, const std::string& detail);

template <typename A, typename B>
[[noreturn]] void AssertCmpFail(const char* file, int line, const char* expr, const A& a, const B& b) {
  std::ostringstream os;
  os << "(" << a << " vs " << b << ")";
  AssertFail(file, line, expr, os.str());
}

}  // namespace nasgw::internal

#define NASGW_ASSERT(cond)                                                                                     \
  do {                                                                                                         \
    if (__builtin_expect(!(cond), 0)) ::nasgw::internal::AssertFail(__FILE__, __LINE__, #cond, std::string()); \
  } while (0)

#define NASGW_ASSERT_MSG(cond, msg)                                                                    \
  do {                                                                                                 \
    if (__builtin_expect(!(cond), 0)) ::nasgw::internal::AssertFail(__FILE__, __LINE__, #cond, (msg)); \
  } while (0)

#define NASGW_ASSERT_OP_(a, op, b)                                                     \
  do {                                                                                 \
    const auto& _a = (a);                                                              \
    const auto& _b = (b);                                                              \
    if (__builtin_expect(!(_a op _b), 0))                                              \
      ::nasgw::internal::AssertCmpFail(__FILE__, __LINE__, #a " " #op " " #b, _a, _b); \
  } while (0)

#define NASGW_ASSERT_EQ(a, b) NASGW_ASSERT_OP_(a, ==, b)
#define NASGW_ASSERT_NE(a, b) NASGW_ASSERT_OP_(a, !=, b)
#define NASGW_ASSERT_LT(a, b) NASGW_ASSERT_OP_(a, <, b)
#define NASGW_ASSERT_LE(a, b) NASGW_ASSERT_OP_(a, <=, b)

#ifdef NDEBUG
#define NASGW_DCHECK(cond) \
  do {                     \
  } while (0)
#else
#define NASGW_DCHECK(cond) NASGW_ASSERT(cond)
#endif
