#include "request_head.hpp"

#include <cctype>

namespace tutti::net::detail {

namespace {

bool is_token_char(char c) {
  // RFC 9110 tchar
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')
         || (c >= '0' && c <= '9')
         || std::string_view("!#$%&'*+-.^_`|~").find(c)
              != std::string_view::npos;
}

bool is_visible_ascii(char c) { return c > 0x20 && c < 0x7f; }

bool all_token_chars(std::string_view s) {
  if (s.empty())
    return false;
  for (char c : s)
    if (!is_token_char(c))
      return false;
  return true;
}

bool valid_request_line(std::string_view line) {
  const auto first_space = line.find(' ');
  if (first_space == std::string_view::npos)
    return false;
  const auto second_space = line.find(' ', first_space + 1);
  if (second_space == std::string_view::npos)
    return false;
  const auto method = line.substr(0, first_space);
  const auto target = line.substr(first_space + 1,
                                  second_space - first_space - 1);
  const auto version = line.substr(second_space + 1);
  if (!all_token_chars(method) || target.empty() || target[0] != '/')
    return false;
  for (char c : target)
    if (!is_visible_ascii(c))
      return false;
  return version.size() == 8 && version.substr(0, 7) == "HTTP/1."
         && version[7] >= '0' && version[7] <= '9';
}

bool valid_header_line(std::string_view line) {
  const auto colon = line.find(':');
  return colon != std::string_view::npos
         && all_token_chars(line.substr(0, colon));
}

bool names_header(std::string_view line, std::string_view name) {
  if (line.size() <= name.size() || line[name.size()] != ':')
    return false;
  for (size_t i = 0; i < name.size(); ++i)
    if (std::tolower(static_cast<unsigned char>(line[i])) != name[i])
      return false;
  return true;
}

// The next line of `rest` without its "\n" or "\r\n"; `rest` moves past it.
std::string_view next_line(std::string_view& rest) {
  const auto end = rest.find('\n');
  auto line = rest.substr(0, end);
  rest.remove_prefix(end == std::string_view::npos ? rest.size() : end + 1);
  if (!line.empty() && line.back() == '\r')
    line.remove_suffix(1);
  return line;
}

} // namespace

head_end find_head_end(std::string_view bytes) {
  const auto crlf = bytes.find("\r\n\r\n");
  const auto lf = bytes.find("\n\n");
  if (lf < crlf)
    return {lf, 2};
  if (crlf != std::string_view::npos)
    return {crlf, 4};
  return {};
}

std::optional<std::string> canonical_head(std::string_view head) {
  std::string out;
  out.reserve(head.size() + 64);
  auto rest = head;
  const auto request_line = next_line(rest);
  if (!valid_request_line(request_line))
    return std::nullopt;
  out.append(request_line).append("\r\n");
  bool says_length = false;
  while (!rest.empty()) {
    const auto line = next_line(rest);
    if (!valid_header_line(line))
      return std::nullopt;
    says_length = says_length || names_header(line, "content-length")
                  || names_header(line, "transfer-encoding");
    out.append(line).append("\r\n");
  }
  // A request that gives neither has no body (RFC 9112 §6.3); cpp-httplib
  // would instead read a POST's or DELETE's body until the client closes.
  if (!says_length)
    out.append("Content-Length: 0\r\n");
  out.append("\r\n");
  return out;
}

} // namespace tutti::net::detail
