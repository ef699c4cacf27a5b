#pragma once
// Errors are values at part boundaries. Two shapes only:
//   status       - nullopt on success, else a one-line message.
//   expected<T>  - a value, or a non-empty message in `error`.
// Messages name the file (and offset, where there is one) so an operator
// can act on them without a debugger.

#include <optional>
#include <string>

namespace tutti::store {

using status = std::optional<std::string>;

template <class T>
struct expected {
  T value{};
  std::string error;  // empty means success
  bool ok() const { return error.empty(); }
};

template <class T>
expected<T> failure(std::string message) {
  return {T{}, std::move(message)};
}

} // namespace tutti::store
