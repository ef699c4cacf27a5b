#include "tutti/data/normalize.hpp"

namespace tutti::data {

std::size_t first_invalid_utf8(std::string_view text) {
  const auto* s = reinterpret_cast<const unsigned char*>(text.data());
  const std::size_t n = text.size();
  std::size_t i = 0;
  while (i < n) {
    const unsigned c = s[i];
    if (c < 0x80) {
      ++i;
      continue;
    }
    std::size_t len = 0;
    std::uint32_t cp = 0, min = 0;
    if ((c & 0xE0) == 0xC0)
      len = 2, cp = c & 0x1F, min = 0x80;
    else if ((c & 0xF0) == 0xE0)
      len = 3, cp = c & 0x0F, min = 0x800;
    else if ((c & 0xF8) == 0xF0)
      len = 4, cp = c & 0x07, min = 0x10000;
    else
      return i;
    if (i + len > n)
      return i;
    for (std::size_t k = 1; k < len; ++k) {
      if ((s[i + k] & 0xC0) != 0x80)
        return i;
      cp = (cp << 6) | (s[i + k] & 0x3F);
    }
    if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))
      return i;
    i += len;
  }
  return std::string_view::npos;
}

expected<std::string> normalize_document(std::string_view text) {
  if (const auto bad = first_invalid_utf8(text); bad != std::string_view::npos)
    return status::error("invalid UTF-8 at byte " + std::to_string(bad)
                         + " of the document");
  std::string out;
  out.reserve(text.size());
  std::size_t newlines = 0; // consecutive LFs at the end of out
  for (std::size_t i = 0; i < text.size(); ++i) {
    char c = text[i];
    if (c == '\r') {
      if (i + 1 < text.size() && text[i + 1] == '\n')
        continue;
      c = '\n';
    }
    if (c == '\n') {
      while (!out.empty() && (out.back() == ' ' || out.back() == '\t'))
        out.pop_back();
      if (out.empty() || newlines >= 2)
        continue;
      out += '\n';
      ++newlines;
      continue;
    }
    if (static_cast<unsigned char>(c) < 0x20 && c != '\t')
      continue;
    if (c == 0x7F)
      continue;
    if (out.empty() && (c == ' ' || c == '\t'))
      continue;
    out += c;
    newlines = 0;
  }
  while (!out.empty()
         && (out.back() == ' ' || out.back() == '\t' || out.back() == '\n'))
    out.pop_back();
  return out;
}

} // namespace tutti::data
