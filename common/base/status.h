// astr::Status / astr::StatusOr<T>: error values for every fallible call.
//
// The API mirrors absl::Status (codes, ok(), message(), StatusOr::value()) so that the service edge
// maps it one-to-one onto grpc::Status. It is our own small type rather than absl's because the
// core (model readers, kernels, backends) must also build on a bare GPU machine that has only a C++
// compiler and the CUDA toolkit (see docs/building.md).
#pragma once

#include <cassert>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

namespace astr {

// Same numbering as absl::StatusCode / grpc::StatusCode.
enum class StatusCode : int {
  kOk = 0,
  kCancelled = 1,
  kUnknown = 2,
  kInvalidArgument = 3,
  kDeadlineExceeded = 4,
  kNotFound = 5,
  kAlreadyExists = 6,
  kPermissionDenied = 7,
  kResourceExhausted = 8,
  kFailedPrecondition = 9,
  kAborted = 10,
  kOutOfRange = 11,
  kUnimplemented = 12,
  kInternal = 13,
  kUnavailable = 14,
  kDataLoss = 15,
  kUnauthenticated = 16,
};

std::string_view StatusCodeName(StatusCode code);

// What a request error says beyond its code, for the fronts that answer kinds differently (the
// HTTP API: 400 or 429). Never derived from the message text.
enum class ErrorKind : uint8_t {
  kUnspecified = 0,
  kInvalidValue,   // the field's value is malformed or out of range
  kLimitExceeded,  // the field is over a limit the operator set or memory imposes
  kNeverFits,      // the request can never be served here (larger than every worker's KV pool)
};

class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}

  bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }
  // The path of the request field the error is about ("sampling.top_p", "chat.messages[1].role"),
  // the message's first characters; empty when the error is about no one field.
  const std::string& field() const { return field_; }
  ErrorKind kind() const { return kind_; }
  // "INVALID_ARGUMENT: message" (or "OK").
  std::string ToString() const;
  // Returns a copy whose message is "context: message"; the code and kind are kept, the field is
  // not (the message no longer starts with it).
  Status WithContext(std::string_view context) const;
  // A copy with `kind`.
  Status WithKind(ErrorKind kind) const;

  // An error about request field `field`: the message is `field` followed by `rest` (which starts
  // with ": ", " " or " = ", e.g. FieldError("sampling.top_p", " must be in (0, 1], got 0")).
  static Status FieldError(std::string field, std::string_view rest,
                           StatusCode code = StatusCode::kInvalidArgument,
                           ErrorKind kind = ErrorKind::kInvalidValue);

 private:
  StatusCode code_ = StatusCode::kOk;
  ErrorKind kind_ = ErrorKind::kUnspecified;
  std::string message_;
  std::string field_;
};

// Status::FieldError with INVALID_ARGUMENT: the request's field `field` is wrong.
inline Status FieldError(std::string field, std::string_view rest,
                         ErrorKind kind = ErrorKind::kInvalidValue) {
  return Status::FieldError(std::move(field), rest, StatusCode::kInvalidArgument, kind);
}

inline Status OkStatus() { return Status(); }
inline Status InvalidArgumentError(std::string m) {
  return {StatusCode::kInvalidArgument, std::move(m)};
}
inline Status NotFoundError(std::string m) { return {StatusCode::kNotFound, std::move(m)}; }
inline Status InternalError(std::string m) { return {StatusCode::kInternal, std::move(m)}; }
inline Status UnimplementedError(std::string m) {
  return {StatusCode::kUnimplemented, std::move(m)};
}
inline Status DataLossError(std::string m) { return {StatusCode::kDataLoss, std::move(m)}; }
inline Status UnauthenticatedError(std::string m) {
  return {StatusCode::kUnauthenticated, std::move(m)};
}
inline Status OutOfRangeError(std::string m) { return {StatusCode::kOutOfRange, std::move(m)}; }
inline Status ResourceExhaustedError(std::string m) {
  return {StatusCode::kResourceExhausted, std::move(m)};
}
inline Status FailedPreconditionError(std::string m) {
  return {StatusCode::kFailedPrecondition, std::move(m)};
}
inline Status UnavailableError(std::string m) { return {StatusCode::kUnavailable, std::move(m)}; }
inline Status AbortedError(std::string m) { return {StatusCode::kAborted, std::move(m)}; }
inline Status DeadlineExceededError(std::string m) {
  return {StatusCode::kDeadlineExceeded, std::move(m)};
}

template <typename T>
class [[nodiscard]] StatusOr {
 public:
  StatusOr(Status status) : status_(std::move(status)) {  // NOLINT(google-explicit-constructor)
    assert(!status_.ok() && "StatusOr constructed from an OK status without a value");
    if (status_.ok())
      status_ = InternalError("StatusOr constructed from OK status without a value");
  }
  StatusOr(T value) : value_(std::move(value)) {}  // NOLINT(google-explicit-constructor)

  bool ok() const { return status_.ok(); }
  const Status& status() const { return status_; }
  T& value() & { return *value_; }
  const T& value() const& { return *value_; }
  T&& value() && { return std::move(*value_); }
  T& operator*() & { return *value_; }
  const T& operator*() const& { return *value_; }
  T* operator->() { return &*value_; }
  const T* operator->() const { return &*value_; }

 private:
  Status status_;
  std::optional<T> value_;
};

}  // namespace astr

#define ASTR_STATUS_CONCAT_INNER(a, b) a##b
#define ASTR_STATUS_CONCAT(a, b) ASTR_STATUS_CONCAT_INNER(a, b)

// Returns the status from the enclosing function if `expr` is not OK.
#define ASTR_RETURN_IF_ERROR(expr)                       \
  do {                                                   \
    ::astr::Status astr_status_tmp_ = (expr);            \
    if (!astr_status_tmp_.ok()) return astr_status_tmp_; \
  } while (0)

// `ASTR_ASSIGN_OR_RETURN(auto x, MakeX());` declares/assigns x or returns the error.
#define ASTR_ASSIGN_OR_RETURN(lhs, expr) \
  ASTR_ASSIGN_OR_RETURN_IMPL(ASTR_STATUS_CONCAT(astr_statusor_, __LINE__), lhs, expr)
// NOLINTBEGIN(bugprone-macro-parentheses): `lhs` is a declaration and cannot be parenthesized.
#define ASTR_ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                               \
  if (!tmp.ok()) return tmp.status();              \
  lhs = std::move(tmp).value()
// NOLINTEND(bugprone-macro-parentheses)
