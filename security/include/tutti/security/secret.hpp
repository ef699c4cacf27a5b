#pragma once
// A secret value (key passphrase, token, password): it prints as "***"
// wherever it is streamed or converted to text, so it cannot reach a log,
// an event or an error message by accident. It comes from a file or an
// environment variable, never from a command-line flag.

#include <ostream>
#include <string>

#include "tutti/base/status.hpp"

namespace tutti::security {

class secret {
public:
  secret() = default;
  explicit secret(std::string value) : value_(std::move(value)) {}
  secret(const secret&) = default;
  secret& operator=(const secret&) = default;
  ~secret();

  bool empty() const { return value_.empty(); }
  // The value itself, for the one call that needs it (OpenSSL, a hash).
  const std::string& reveal() const { return value_; }

  friend std::ostream& operator<<(std::ostream& out, const secret&) {
    return out << "***";
  }
  friend std::string to_string(const secret&) { return "***"; }

private:
  std::string value_;
};

// The first line of `path` (without its newline). Refuses a file that
// others can read ("chmod 600").
expected<secret> secret_from_file(const std::string& path);
// The variable's value; fails naming the variable (never the value).
expected<secret> secret_from_env(const std::string& variable);

} // namespace tutti::security
