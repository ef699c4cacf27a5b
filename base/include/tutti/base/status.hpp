#pragma once
// tutti's one error shape at part boundaries (CAF's expected stays at actor
// boundaries). A status is ok, or carries one line that says what failed and
// where (a file and offset, a key, a call and its file:line), so an operator
// can act on it without a debugger. expected<T> is a value or such a status.
//
//   tutti::status s = write_file(...);
//   if (!s) return s;                        // false means failed, always
//   tutti::expected<int> n = parse(...);
//   if (!n) return n.error();                // the failed status
//   use(*n);

#include <cassert>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>

namespace tutti {

class [[nodiscard]] status {
public:
  status() = default;
  static status error(std::string message) {
    status s;
    s.failed_ = true;
    s.message_ = std::move(message);
    return s;
  }
  bool ok() const { return !failed_; }
  explicit operator bool() const { return ok(); }
  // Empty when ok.
  const std::string& message() const { return message_; }
  // The same failure with `prefix` in front ("reading data/x.tok: ...").
  status with_context(const std::string& prefix) const {
    return ok() ? *this : error(prefix + message_);
  }

private:
  bool failed_ = false;
  std::string message_;
};

template <class T>
class expected {
public:
  expected(T value) : value_(std::move(value)) {}
  // Anything T is built from (a string literal for expected<std::string>,
  // std::nullopt for expected<std::optional<U>>), as std::expected allows.
  // (SFINAE, not `requires`: nvcc compiles the CUDA sources as C++17.)
  template <class U>
  static constexpr bool builds_value =
    std::conjunction_v<std::is_constructible<T, U>,
                       std::negation<std::is_same<std::decay_t<U>, T>>,
                       std::negation<std::is_same<std::decay_t<U>, status>>>;
  template <class U, class = std::enable_if_t<builds_value<U>>>
  expected(U&& value) : value_(std::in_place, std::forward<U>(value)) {}
  // From a failed status only: an ok status carries no value, so one given
  // here is a programming error and becomes a failure that says so.
  expected(status failure)
    : failure_(failure.ok() ? status::error("internal: expected<T> made from "
                                            "an ok status, with no value")
                            : std::move(failure)) {}

  bool ok() const { return value_.has_value(); }
  explicit operator bool() const { return ok(); }

  // Check ok() first: value() on a failure throws std::bad_optional_access
  // (a programming error), the operators assert.
  T& value() & { return value_.value(); }
  const T& value() const& { return value_.value(); }
  T&& value() && { return std::move(value_.value()); }
  T& operator*() & { return (assert(ok()), *value_); }
  const T& operator*() const& { return (assert(ok()), *value_); }
  T&& operator*() && { return (assert(ok()), std::move(*value_)); }
  T* operator->() { return (assert(ok()), &*value_); }
  const T* operator->() const { return (assert(ok()), &*value_); }

  // The failure (an ok status when there is a value).
  const status& error() const { return failure_; }
  const std::string& message() const { return failure_.message(); }

private:
  std::optional<T> value_;
  status failure_;
};

} // namespace tutti

// Returns the status of `expr` from the enclosing function when it failed
// (the enclosing function returns a status or an expected<T>).
#define TUTTI_RETURN_IF_ERROR(expr)                                            \
  do {                                                                         \
    ::tutti::status tutti_status_ = (expr);                                    \
    if (!tutti_status_.ok())                                                   \
      return tutti_status_;                                                    \
  } while (false)
