// 128-bit random identifiers (RFC 4122 version 4) for reserves, LUNs and
// domains: names that never collide across machines and never change.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace nasgw {

struct Uuid {
  std::array<uint8_t, 16> bytes{};

  static Uuid Random();
  bool IsNil() const;
  std::string ToString() const;  // 8-4-4-4-12 lowercase hex
  // The inverse of ToString (either case); nullopt for anything else.
  static std::optional<Uuid> Parse(std::string_view text);
  bool operator==(const Uuid&) const = default;
  auto operator<=>(const Uuid&) const =
      default;  // NOLINT(modernize-use-nullptr): clang-tidy 14 misreads a defaulted <=>
};

}  // namespace nasgw
