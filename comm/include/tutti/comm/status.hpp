#pragma once
// Errors as values at part boundaries: a status is ok or carries one line
// that says what failed and where (file:line of the failing call).

#include <string>
#include <utility>

namespace tutti {

class status {
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
  const std::string& message() const { return message_; }

private:
  bool failed_ = false;
  std::string message_;
};

} // namespace tutti

// Returns the status of `expr` from the enclosing function when it failed.
#define TUTTI_RETURN_IF_ERROR(expr)                                            \
  do {                                                                         \
    ::tutti::status tutti_status_ = (expr);                                    \
    if (!tutti_status_.ok())                                                   \
      return tutti_status_;                                                    \
  } while (false)
