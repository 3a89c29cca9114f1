#include "base/status.h"

#include <cerrno>

namespace nasgw {

std::string_view CodeName(Code code) {
  switch (code) {
    case Code::kOk:
      return "Ok";
    case Code::kNotFound:
      return "NotFound";
    case Code::kExists:
      return "Exists";
    case Code::kNotDir:
      return "NotDir";
    case Code::kIsDir:
      return "IsDir";
    case Code::kNotEmpty:
      return "NotEmpty";
    case Code::kNoSpace:
      return "NoSpace";
    case Code::kIoError:
      return "IoError";
    case Code::kCorruption:
      return "Corruption";
    case Code::kFenced:
      return "Fenced";
    case Code::kTimedOut:
      return "TimedOut";
    case Code::kBusy:
      return "Busy";
    case Code::kStale:
      return "Stale";
    case Code::kInvalidArgument:
      return "InvalidArgument";
    case Code::kPermissionDenied:
      return "PermissionDenied";
    case Code::kNotSupported:
      return "NotSupported";
    case Code::kOutOfRange:
      return "OutOfRange";
    case Code::kMiscompare:
      return "Miscompare";
    case Code::kUnavailable:
      return "Unavailable";
    case Code::kFailedPrecondition:
      return "FailedPrecondition";
  }
  return "Unknown";
}

Status::Status(Code code, std::string message) : code_(code) {
  if (code != Code::kOk) message_ = std::make_unique<std::string>(std::move(message));
}

Status::Status(const Status& other) : code_(other.code_) {
  if (other.message_) message_ = std::make_unique<std::string>(*other.message_);
}

Status& Status::operator=(const Status& other) {
  if (this != &other) {
    code_ = other.code_;
    message_ = other.message_ ? std::make_unique<std::string>(*other.message_) : nullptr;
  }
  return *this;
}

std::string_view Status::message() const {
  return message_ ? *message_ : std::string_view();
}

std::string Status::ToString() const {
  if (ok()) return "Ok";
  std::string s(CodeName(code_));
  if (message_ && !message_->empty()) {
    s += ": ";
    s += *message_;
  }
  return s;
}

Status Status::WithContext(std::string_view context) const {
  if (ok()) return Status();
  std::string m(context);
  m += ": ";
  m += message();
  return Status(code_, std::move(m));
}

int Status::ToErrno() const {
  switch (code_) {
    case Code::kOk:
      return 0;
    case Code::kNotFound:
      return ENOENT;
    case Code::kExists:
      return EEXIST;
    case Code::kNotDir:
      return ENOTDIR;
    case Code::kIsDir:
      return EISDIR;
    case Code::kNotEmpty:
      return ENOTEMPTY;
    case Code::kNoSpace:
      return ENOSPC;
    case Code::kIoError:
      return EIO;
    case Code::kCorruption:
      return EUCLEAN;
    case Code::kFenced:
      return EIO;  // callers must not retry: the node lost ownership
    case Code::kTimedOut:
      return ETIMEDOUT;
    case Code::kBusy:
      return EBUSY;
    case Code::kStale:
      return ESTALE;
    case Code::kInvalidArgument:
      return EINVAL;
    case Code::kPermissionDenied:
      return EACCES;
    case Code::kNotSupported:
      return EOPNOTSUPP;
    case Code::kOutOfRange:
      return EFBIG;
    case Code::kMiscompare:
      return EILSEQ;
    case Code::kUnavailable:
      return EHOSTUNREACH;
    case Code::kFailedPrecondition:
      return EPERM;
  }
  return EIO;
}

}  // namespace nasgw
