// Status and Result<T>: the only way errors cross a module boundary in nasgw.
//
// The codes are a closed set chosen so that each maps cleanly to errno, NFS
// status, NTSTATUS and gRPC codes; every boundary has exactly one mapping
// function (ToErrno() lives here, the protocol ones live with their heads).
// No exceptions cross a module boundary and never the C ABI.
//
// A Status is one byte plus, only when it is an error, a heap message. It is
// cheap to return by value on the fast path.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

#include "base/assert.h"

namespace nasgw {

enum class Code : uint8_t {
  kOk = 0,
  kNotFound,  // no such LUN, target, file, key
  kExists,    // already exists
  kNotDir,
  kIsDir,
  kNotEmpty,
  kNoSpace,     // out of space on the reserve
  kIoError,     // the medium or the device failed the request
  kCorruption,  // checksum or invariant failure in stored data
  kFenced,      // another node owns this now (SCSI RESERVATION CONFLICT)
  kTimedOut,    // a bounded wait ran out; the outcome may be unknown
  kBusy,        // temporarily unable; retry later (queue full, target busy)
  kStale,       // a handle to something that no longer exists
  kInvalidArgument,
  kPermissionDenied,  // includes a refused CHAP login
  kNotSupported,
  kOutOfRange,          // an address beyond the end of a device or file
  kMiscompare,          // COMPARE AND WRITE found other data: the test failed
  kUnavailable,         // cannot reach it now (connection refused, path down)
  kFailedPrecondition,  // refused in the current state (e.g. format an online reserve without force)
};

std::string_view CodeName(Code code);

class [[nodiscard]] Status {
 public:
  Status() = default;
  static Status Ok() { return Status(); }
  Status(Code code, std::string message);

  static Status NotFound(std::string m) { return {Code::kNotFound, std::move(m)}; }
  static Status Exists(std::string m) { return {Code::kExists, std::move(m)}; }
  static Status NoSpace(std::string m) { return {Code::kNoSpace, std::move(m)}; }
  static Status IoError(std::string m) { return {Code::kIoError, std::move(m)}; }
  static Status Corruption(std::string m) { return {Code::kCorruption, std::move(m)}; }
  static Status Fenced(std::string m) { return {Code::kFenced, std::move(m)}; }
  static Status TimedOut(std::string m) { return {Code::kTimedOut, std::move(m)}; }
  static Status Busy(std::string m) { return {Code::kBusy, std::move(m)}; }
  static Status InvalidArgument(std::string m) { return {Code::kInvalidArgument, std::move(m)}; }
  static Status PermissionDenied(std::string m) { return {Code::kPermissionDenied, std::move(m)}; }
  static Status NotSupported(std::string m) { return {Code::kNotSupported, std::move(m)}; }
  static Status OutOfRange(std::string m) { return {Code::kOutOfRange, std::move(m)}; }
  static Status Miscompare(std::string m) { return {Code::kMiscompare, std::move(m)}; }
  static Status Unavailable(std::string m) { return {Code::kUnavailable, std::move(m)}; }
  static Status FailedPrecondition(std::string m) { return {Code::kFailedPrecondition, std::move(m)}; }

  Status(const Status& other);
  Status& operator=(const Status& other);
  Status(Status&&) noexcept = default;
  Status& operator=(Status&&) noexcept = default;

  bool ok() const { return code_ == Code::kOk; }
  Code code() const { return code_; }
  std::string_view message() const;
  // "IoError: medium error at lba 42"
  std::string ToString() const;
  // Adds context in front of the message: "open lun 3: " + message.
  Status WithContext(std::string_view context) const;
  // The errno an application would expect for this code (0 for ok).
  int ToErrno() const;

  // Marks a status as deliberately dropped.
  void IgnoreError() const {}

 private:
  Code code_ = Code::kOk;
  std::unique_ptr<std::string> message_;
};

inline bool operator==(const Status& s, Code c) {
  return s.code() == c;
}

// Result<T>: a T or a non-ok Status.
template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : value_(std::move(value)) {}         // NOLINT(google-explicit-constructor)
  Result(Status status) : status_(std::move(status)) {  // NOLINT(google-explicit-constructor)
    NASGW_ASSERT(!status_.ok());
  }

  bool ok() const { return status_.ok(); }
  const Status& status() const { return status_; }
  T& value() & {
    NASGW_ASSERT(ok());
    return *value_;
  }
  const T& value() const& {
    NASGW_ASSERT(ok());
    return *value_;
  }
  T&& value() && {
    NASGW_ASSERT(ok());
    return std::move(*value_);
  }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }
  T&& operator*() && { return std::move(*this).value(); }

 private:
  Status status_;
  std::optional<T> value_;
};

}  // namespace nasgw

#define NASGW_RETURN_IF_ERROR(expr) \
  do {                              \
    ::nasgw::Status _st = (expr);   \
    if (!_st.ok()) return _st;      \
  } while (0)
