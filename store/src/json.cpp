#include "json.hpp"

#include <charconv>

namespace tutti::store::detail::json {
namespace {

// Deep enough for any file we write, shallow enough that a hostile file
// cannot exhaust the stack through recursion.
constexpr int max_depth = 64;

struct parser {
  std::string_view s;
  std::size_t pos = 0;
  std::string error;

  bool fail(const std::string& what) {
    if (error.empty()) error = what + " at offset " + std::to_string(pos);
    return false;
  }
  void skip_ws() {
    while (pos < s.size() && (s[pos] == ' ' || s[pos] == '\t' || s[pos] == '\n' || s[pos] == '\r'))
      ++pos;
  }
  bool literal(std::string_view word) {
    if (s.substr(pos, word.size()) != word) return fail("invalid literal");
    pos += word.size();
    return true;
  }

  bool parse_value(value& v, int depth) {
    if (depth > max_depth) return fail("nesting deeper than " + std::to_string(max_depth));
    skip_ws();
    if (pos >= s.size()) return fail("unexpected end of input");
    char c = s[pos];
    if (c == '{') return parse_object(v, depth);
    if (c == '[') return parse_array(v, depth);
    if (c == '"') return v.type = value::kind::string, parse_string(v.text);
    if (c == 't') return v.type = value::kind::boolean, v.boolean = true, literal("true");
    if (c == 'f') return v.type = value::kind::boolean, v.boolean = false, literal("false");
    if (c == 'n') return v.type = value::kind::null, literal("null");
    if (c == '-' || (c >= '0' && c <= '9')) return parse_number(v);
    return fail(std::string("unexpected character '") + c + "'");
  }

  bool parse_object(value& v, int depth) {
    v.type = value::kind::object;
    ++pos;  // '{'
    skip_ws();
    if (pos < s.size() && s[pos] == '}') return ++pos, true;
    for (;;) {
      skip_ws();
      if (pos >= s.size() || s[pos] != '"') return fail("expected '\"' (object key)");
      std::size_t key_pos = pos;
      std::string key;
      if (!parse_string(key)) return false;
      for (const auto& k : v.keys)
        if (k == key) return pos = key_pos, fail("duplicate key \"" + key + "\"");
      skip_ws();
      if (pos >= s.size() || s[pos] != ':') return fail("expected ':'");
      ++pos;
      v.keys.push_back(std::move(key));
      v.items.emplace_back();
      if (!parse_value(v.items.back(), depth + 1)) return false;
      skip_ws();
      if (pos < s.size() && s[pos] == ',') { ++pos; continue; }
      if (pos < s.size() && s[pos] == '}') return ++pos, true;
      return fail("expected ',' or '}'");
    }
  }

  bool parse_array(value& v, int depth) {
    v.type = value::kind::array;
    ++pos;  // '['
    skip_ws();
    if (pos < s.size() && s[pos] == ']') return ++pos, true;
    for (;;) {
      v.items.emplace_back();
      if (!parse_value(v.items.back(), depth + 1)) return false;
      skip_ws();
      if (pos < s.size() && s[pos] == ',') { ++pos; continue; }
      if (pos < s.size() && s[pos] == ']') return ++pos, true;
      return fail("expected ',' or ']'");
    }
  }

  static void append_utf8(std::string& out, std::uint32_t cp) {
    if (cp < 0x80) {
      out += static_cast<char>(cp);
    } else if (cp < 0x800) {
      out += static_cast<char>(0xc0 | (cp >> 6));
      out += static_cast<char>(0x80 | (cp & 0x3f));
    } else if (cp < 0x10000) {
      out += static_cast<char>(0xe0 | (cp >> 12));
      out += static_cast<char>(0x80 | ((cp >> 6) & 0x3f));
      out += static_cast<char>(0x80 | (cp & 0x3f));
    } else {
      out += static_cast<char>(0xf0 | (cp >> 18));
      out += static_cast<char>(0x80 | ((cp >> 12) & 0x3f));
      out += static_cast<char>(0x80 | ((cp >> 6) & 0x3f));
      out += static_cast<char>(0x80 | (cp & 0x3f));
    }
  }

  bool hex4(std::uint32_t& out) {
    out = 0;
    for (int i = 0; i < 4; ++i, ++pos) {
      if (pos >= s.size()) return fail("truncated \\u escape");
      char c = s[pos];
      int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10
            : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
      if (d < 0) return fail("bad hex digit in \\u escape");
      out = out * 16 + static_cast<std::uint32_t>(d);
    }
    return true;
  }

  // One raw UTF-8 sequence starting at pos (a byte >= 0x80), validated:
  // no overlongs, no surrogates, nothing above U+10FFFF.
  bool utf8_sequence(std::string& out) {
    auto b = static_cast<unsigned char>(s[pos]);
    int n = b >= 0xc2 && b <= 0xdf ? 1 : b >= 0xe0 && b <= 0xef ? 2 : b >= 0xf0 && b <= 0xf4 ? 3 : -1;
    if (n < 0 || pos + static_cast<std::size_t>(n) >= s.size()) return fail("invalid UTF-8");
    std::uint32_t cp = b & (0x3f >> n);
    for (int i = 1; i <= n; ++i) {
      auto c = static_cast<unsigned char>(s[pos + i]);
      if ((c & 0xc0) != 0x80) return fail("invalid UTF-8");
      cp = (cp << 6) | (c & 0x3f);
    }
    if ((n == 2 && (cp < 0x800 || (cp >= 0xd800 && cp <= 0xdfff))) ||
        (n == 3 && (cp < 0x10000 || cp > 0x10ffff)))
      return fail("invalid UTF-8");
    out.append(s.substr(pos, n + 1));
    pos += n + 1;
    return true;
  }

  bool parse_string(std::string& out) {
    ++pos;  // opening quote
    for (;;) {
      if (pos >= s.size()) return fail("unterminated string");
      auto c = static_cast<unsigned char>(s[pos]);
      if (c == '"') return ++pos, true;
      if (c < 0x20) return fail("control character in string");
      if (c >= 0x80) {
        if (!utf8_sequence(out)) return false;
        continue;
      }
      if (c != '\\') { out += static_cast<char>(c); ++pos; continue; }
      if (++pos >= s.size()) return fail("unterminated escape");
      char e = s[pos++];
      switch (e) {
        case '"': out += '"'; break;
        case '\\': out += '\\'; break;
        case '/': out += '/'; break;
        case 'b': out += '\b'; break;
        case 'f': out += '\f'; break;
        case 'n': out += '\n'; break;
        case 'r': out += '\r'; break;
        case 't': out += '\t'; break;
        case 'u': {
          std::uint32_t cp = 0;
          if (!hex4(cp)) return false;
          if (cp >= 0xdc00 && cp <= 0xdfff) return fail("unpaired low surrogate");
          if (cp >= 0xd800 && cp <= 0xdbff) {
            std::uint32_t lo = 0;
            if (s.substr(pos, 2) != "\\u") return fail("unpaired high surrogate");
            pos += 2;
            if (!hex4(lo)) return false;
            if (lo < 0xdc00 || lo > 0xdfff) return fail("unpaired high surrogate");
            cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
          }
          append_utf8(out, cp);
          break;
        }
        default: return --pos, fail(std::string("bad escape '\\") + e + "'");
      }
    }
  }

  bool digits() {
    std::size_t start = pos;
    while (pos < s.size() && s[pos] >= '0' && s[pos] <= '9') ++pos;
    return pos > start || fail("expected digit");
  }

  bool parse_number(value& v) {
    v.type = value::kind::number;
    std::size_t start = pos;
    if (s[pos] == '-') ++pos;
    if (pos < s.size() && s[pos] == '0') {
      ++pos;
      if (pos < s.size() && s[pos] >= '0' && s[pos] <= '9') return fail("leading zero in number");
    } else if (!digits()) {
      return false;
    }
    if (pos < s.size() && s[pos] == '.' && !(++pos, digits())) return false;
    if (pos < s.size() && (s[pos] == 'e' || s[pos] == 'E')) {
      ++pos;
      if (pos < s.size() && (s[pos] == '+' || s[pos] == '-')) ++pos;
      if (!digits()) return false;
    }
    v.text = std::string(s.substr(start, pos - start));
    return true;
  }
};

template <class T>
bool integer_from(const value& v, T& out) {
  if (v.type != value::kind::number) return false;
  const char* b = v.text.data();
  const char* e = b + v.text.size();
  auto r = std::from_chars(b, e, out);  // rejects overflow; stops at '.', 'e'
  return r.ec == std::errc() && r.ptr == e;
}

} // namespace

const value* value::find(std::string_view key) const {
  if (type != kind::object) return nullptr;
  for (std::size_t i = 0; i < keys.size(); ++i)
    if (keys[i] == key) return &items[i];
  return nullptr;
}

bool value::as_int64(std::int64_t& out) const { return integer_from(*this, out); }
bool value::as_uint64(std::uint64_t& out) const {
  return !text.empty() && text[0] != '-' && integer_from(*this, out);
}

expected<value> parse(std::string_view text) {
  parser p{text, 0, {}};
  value v;
  if (!p.parse_value(v, 0)) return status::error(p.error);
  p.skip_ws();
  if (p.pos != text.size()) {
    p.fail("trailing data after JSON value");
    return status::error(p.error);
  }
  return v;
}

std::string quote(std::string_view s) {
  static const char digits[] = "0123456789abcdef";
  std::string out = "\"";
  for (char ch : s) {
    auto c = static_cast<unsigned char>(ch);
    if (c == '"') out += "\\\"";
    else if (c == '\\') out += "\\\\";
    else if (c == '\n') out += "\\n";
    else if (c == '\t') out += "\\t";
    else if (c == '\r') out += "\\r";
    else if (c < 0x20) out += std::string("\\u00") + digits[c >> 4] + digits[c & 0xf];
    else out += ch;
  }
  return out + "\"";
}

} // namespace tutti::store::detail::json
