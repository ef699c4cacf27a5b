#pragma once
// Internal: the only place RocksDB statuses become tutti errors. Every RocksDB
// call in the store goes through one of these macros so that a failure in a
// log reads "rocksdb: <call> at <file>:<line>: <status>" and points at the
// exact call without a debugger. Only store/src includes this (and RocksDB).

#include <rocksdb/status.h>

#include <string>
#include <string_view>

#include "tutti/base/status.hpp"

namespace tutti::store::detail {

// An error message that converts to whichever error shape the enclosing
// function returns (status or expected<T>), so one macro serves both.
struct rocksdb_failure {
  std::string message;
  operator status() const { return status::error(message); }
  template <class T>
  operator expected<T>() const {
    return status::error(message);
  }
};

inline std::string_view base_name(std::string_view file) {
  auto slash = file.rfind('/');
  return slash == std::string_view::npos ? file : file.substr(slash + 1);
}

// `hint` (may be empty) goes first: the operator reads the explanation
// ("locked by another process") before the RocksDB detail.
inline rocksdb_failure make_rocksdb_failure(const std::string& hint,
                                            const char* call, const char* file,
                                            int line,
                                            const rocksdb::Status& s) {
  return {hint + "rocksdb: " + call + " at " + std::string(base_name(file))
          + ":" + std::to_string(line) + ": " + s.ToString()};
}

inline std::string no_hint(const rocksdb::Status&) { return {}; }

} // namespace tutti::store::detail

// Returns from the enclosing function when `expr` (a rocksdb::Status) is not ok.
// `hint_fn(status)` returns a prefix explaining the failure, or "".
#define TUTTI_ROCKSDB_CHECK_HINT(expr, hint_fn)                                \
  do {                                                                         \
    const ::rocksdb::Status tutti_rocksdb_s_ = (expr);                         \
    if (!tutti_rocksdb_s_.ok())                                                \
      return ::tutti::store::detail::make_rocksdb_failure(                     \
        hint_fn(tutti_rocksdb_s_), #expr, __FILE__, __LINE__,                  \
        tutti_rocksdb_s_);                                                     \
  } while (0)

#define TUTTI_ROCKSDB_CHECK(expr)                                              \
  TUTTI_ROCKSDB_CHECK_HINT(expr, ::tutti::store::detail::no_hint)

// For Get: NotFound is an answer, not an error. Sets `found` and returns from
// the enclosing function on any other failure.
#define TUTTI_ROCKSDB_GET(expr, found)                                         \
  do {                                                                         \
    const ::rocksdb::Status tutti_rocksdb_s_ = (expr);                         \
    (found) = tutti_rocksdb_s_.ok();                                           \
    if (!tutti_rocksdb_s_.ok() && !tutti_rocksdb_s_.IsNotFound())              \
      return ::tutti::store::detail::make_rocksdb_failure(                     \
        "", #expr, __FILE__, __LINE__, tutti_rocksdb_s_);                      \
  } while (0)
