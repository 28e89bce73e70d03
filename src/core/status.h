// Status and Result<T>: errors as values across layers.
//
// A Status is either OK or carries a code and a message written for the person who
// will read it ("replicas: must be >= 1, got 0"). Result<T> holds a T or a non-OK
// Status. Both are [[nodiscard]]: dropping an error on the floor does not compile
// quietly. Broken invariants (programming errors, not user errors) go through
// TY_CHECK, which aborts with the location.
//
// Thread-safety: plain values; safe to copy between threads.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>
#include <utility>
#include <variant>

namespace trainyard {

enum class StatusCode {
  kOk = 0,
  kInvalidArgument,     // the caller's input is wrong; retrying will not help
  kNotFound,            // the named object does not exist
  kAlreadyExists,       // an object with that identity exists
  kFailedPrecondition,  // the object is not in a state that allows this
  kResourceExhausted,   // a limit was hit
  kUnavailable,         // try again later
  kDataLoss,            // stored data is unreadable
  kInternal,            // a bug or an unexpected failure below us
  kUnauthenticated,     // no credentials, or credentials that are not valid
  kPermissionDenied,    // authenticated, but not allowed to do this
};

std::string_view StatusCodeName(StatusCode code);

class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}

  static Status Ok() { return {}; }
  bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }
  // "NOT_FOUND: job 12 does not exist"; "OK" for success.
  std::string ToString() const;
  // Ignore explicitly, with a reason in a comment at the call site.
  void IgnoreError() const {}

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

inline Status InvalidArgument(std::string m) {
  return {StatusCode::kInvalidArgument, std::move(m)};
}
inline Status NotFound(std::string m) { return {StatusCode::kNotFound, std::move(m)}; }
inline Status AlreadyExists(std::string m) { return {StatusCode::kAlreadyExists, std::move(m)}; }
inline Status FailedPrecondition(std::string m) {
  return {StatusCode::kFailedPrecondition, std::move(m)};
}
inline Status ResourceExhausted(std::string m) {
  return {StatusCode::kResourceExhausted, std::move(m)};
}
inline Status Unavailable(std::string m) { return {StatusCode::kUnavailable, std::move(m)}; }
inline Status DataLoss(std::string m) { return {StatusCode::kDataLoss, std::move(m)}; }
inline Status Internal(std::string m) { return {StatusCode::kInternal, std::move(m)}; }
inline Status Unauthenticated(std::string m) {
  return {StatusCode::kUnauthenticated, std::move(m)};
}
inline Status PermissionDenied(std::string m) {
  return {StatusCode::kPermissionDenied, std::move(m)};
}

[[noreturn]] void CheckFailed(const char* file, int line, const char* expr, std::string_view msg);

template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : v_(std::move(value)) {}        // NOLINT: implicit by design
  Result(Status status) : v_(std::move(status)) {  // NOLINT: implicit by design
    if (std::get<Status>(v_).ok()) {
      CheckFailed(__FILE__, __LINE__, "!status.ok()", "Result built from an OK status");
    }
  }

  bool ok() const { return std::holds_alternative<T>(v_); }
  // REQUIRES: !ok() for a meaningful status; returns OK when a value is held.
  Status status() const { return ok() ? Status::Ok() : std::get<Status>(v_); }

  // REQUIRES: ok().
  T& value() & { return Get(); }
  const T& value() const& { return const_cast<Result*>(this)->Get(); }
  T&& value() && { return std::move(Get()); }
  T& operator*() & { return Get(); }
  const T& operator*() const& { return value(); }
  T* operator->() { return &Get(); }
  const T* operator->() const { return &value(); }

 private:
  T& Get() {
    if (!ok()) {
      CheckFailed(__FILE__, __LINE__, "ok()", std::get<Status>(v_).ToString());
    }
    return std::get<T>(v_);
  }
  std::variant<T, Status> v_;
};

}  // namespace trainyard

#define TY_CHECK(cond)                                                    \
  do {                                                                    \
    if (!(cond)) ::trainyard::CheckFailed(__FILE__, __LINE__, #cond, ""); \
  } while (0)
#define TY_CHECK_MSG(cond, msg)                                              \
  do {                                                                       \
    if (!(cond)) ::trainyard::CheckFailed(__FILE__, __LINE__, #cond, (msg)); \
  } while (0)

// Returns the status from the enclosing function when it is not OK.
#define TY_RETURN_IF_ERROR(expr)        \
  do {                                  \
    ::trainyard::Status ty_s_ = (expr); \
    if (!ty_s_.ok()) return ty_s_;      \
  } while (0)

#define TY_CONCAT_INNER_(a, b) a##b
#define TY_CONCAT_(a, b) TY_CONCAT_INNER_(a, b)
// TY_ASSIGN_OR_RETURN(auto x, ResultExpr()): x = value, or return the error.
#define TY_ASSIGN_OR_RETURN(lhs, expr) \
  TY_ASSIGN_OR_RETURN_IMPL_(TY_CONCAT_(ty_r_, __LINE__), lhs, expr)
#define TY_ASSIGN_OR_RETURN_IMPL_(tmp, lhs, expr) \
  auto tmp = (expr);                              \
  if (!tmp.ok()) return tmp.status();             \
  lhs = std::move(tmp).value()
