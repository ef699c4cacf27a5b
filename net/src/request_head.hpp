#pragma once
// A request head (request line and header lines) checked before cpp-httplib
// sees it. cpp-httplib skips header lines it cannot parse and takes any
// target; the server answers those with 400 instead, as HTTP/1.1 asks
// (RFC 9112 §3, §5).

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

namespace tutti::net::detail {

// Where the blank line that ends a head is: its offset and length ("\r\n\r\n"
// or a bare "\n\n", which some hand-written clients send); npos if the
// head is not complete yet.
struct head_end {
  size_t at = std::string::npos;
  size_t length = 0;
  bool found() const { return at != std::string::npos; }
  size_t total() const { return at + length; } // bytes up to the body
};
head_end find_head_end(std::string_view bytes);

// The head `head` (up to, not including, its blank line) rewritten with
// CRLF line ends, "Content-Length: 0" where it says no length, and the
// blank line appended; or nothing when it is malformed: a request line
// other than "METHOD SP /target SP HTTP/1.x", or a header line that is not
// "name: value" with a token for its name.
std::optional<std::string> canonical_head(std::string_view head);

} // namespace tutti::net::detail
