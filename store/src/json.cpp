#include "json.hpp"

#include <nlohmann/json.hpp>

#include <charconv>
#include <iterator>

namespace tutti::store::detail::json {
namespace {

// Deep enough for any file we write, shallow enough that a hostile file
// cannot exhaust the stack.
constexpr std::size_t max_depth = 64;

// Reads `text` for nlohmann's lexer and remembers the last byte read, so
// that an error the SAX handler finds (a duplicate key) has an offset.
class tracking_iterator {
public:
  using iterator_category = std::forward_iterator_tag;
  using value_type = char;
  using difference_type = std::ptrdiff_t;
  using pointer = const char*;
  using reference = const char&;

  tracking_iterator(const char* at, const char** last) : at_(at), last_(last) {}
  reference operator*() const { return *(*last_ = at_); }
  tracking_iterator& operator++() { return ++at_, *this; }
  tracking_iterator operator++(int) {
    auto before = *this;
    ++at_;
    return before;
  }
  bool operator==(const tracking_iterator& o) const { return at_ == o.at_; }
  bool operator!=(const tracking_iterator& o) const { return at_ != o.at_; }

private:
  const char* at_;
  const char** last_;
};

// Builds a `value` from nlohmann's SAX events.
class builder : public nlohmann::json_sax<nlohmann::json> {
public:
  builder(std::string_view text, const char** last)
    : text_(text), last_(last) {}

  value root;
  std::string error;

  bool null() override { return leaf(value::kind::null); }
  bool boolean(bool b) override { return leaf(value::kind::boolean, {}, b); }
  bool number_integer(number_integer_t n) override {
    return leaf(value::kind::number, std::to_string(n));
  }
  bool number_unsigned(number_unsigned_t n) override {
    return leaf(value::kind::number, std::to_string(n));
  }
  bool number_float(number_float_t, const string_t& source) override {
    return leaf(value::kind::number, source);
  }
  bool string(string_t& s) override { return leaf(value::kind::string, s); }
  bool binary(binary_t&) override { return fail("binary data"); }
  bool start_object(std::size_t) override { return open(value::kind::object); }
  bool end_object() override { return stack_.pop_back(), true; }
  bool start_array(std::size_t) override { return open(value::kind::array); }
  bool end_array() override { return stack_.pop_back(), true; }

  bool key(string_t& k) override {
    for (const auto& seen : stack_.back()->keys)
      if (seen == k)
        return fail("duplicate key \"" + k + "\"");
    stack_.back()->keys.push_back(k);
    return true;
  }

  bool parse_error(std::size_t position, const std::string&,
                   const nlohmann::detail::exception& ex) override {
    // "[json.exception.parse_error.101] parse error at line 1, column 9:
    // syntax error while parsing ..." -> "syntax error while parsing ..."
    // (the bytes of "last read: '...'" may not be text, so they go too).
    std::string what = ex.what();
    if (what.rfind("[json.exception.", 0) == 0)
      what = what.substr(what.find("] ") + 2);
    if (what.rfind("parse error", 0) == 0)
      what = what.substr(what.find(": ") + 2);
    if (auto read = what.find("; last read: '"); read != std::string::npos) {
      auto end = what.find("'; ", read + 14);
      what.erase(read,
                 end == std::string::npos ? std::string::npos : end + 1 - read);
    }
    if (error.empty())
      error = what + " at offset "
              + std::to_string(position > 0 ? position - 1 : 0);
    return false;
  }

private:
  // The next value's slot: the root, or one more item of the open container
  // (whose key, for an object, key() has just recorded).
  value& slot() {
    if (stack_.empty())
      return root;
    return stack_.back()->items.emplace_back();
  }
  bool leaf(value::kind type, std::string text = {}, bool b = false) {
    value& v = slot();
    v.type = type;
    v.text = std::move(text);
    v.boolean = b;
    return true;
  }
  bool open(value::kind type) {
    if (stack_.size() >= max_depth)
      return fail("nesting deeper than " + std::to_string(max_depth));
    value& v = slot();
    v.type = type;
    stack_.push_back(&v);
    return true;
  }
  bool fail(const std::string& what) {
    const std::size_t at = *last_
                             ? static_cast<std::size_t>(*last_ - text_.data())
                             : 0;
    if (error.empty())
      error = what + " at offset " + std::to_string(at);
    return false;
  }

  std::string_view text_;
  const char** last_;
  // Open containers. A parent gains no item while a child is open, so these
  // pointers stay valid.
  std::vector<value*> stack_;
};

template <class T>
bool integer_from(const value& v, T& out) {
  if (v.type != value::kind::number)
    return false;
  const char* b = v.text.data();
  const char* e = b + v.text.size();
  auto r = std::from_chars(b, e, out); // rejects overflow; stops at '.', 'e'
  return r.ec == std::errc() && r.ptr == e;
}

} // namespace

const value* value::find(std::string_view key) const {
  if (type != kind::object)
    return nullptr;
  for (std::size_t i = 0; i < keys.size(); ++i)
    if (keys[i] == key)
      return &items[i];
  return nullptr;
}

bool value::as_int64(std::int64_t& out) const {
  return integer_from(*this, out);
}
bool value::as_uint64(std::uint64_t& out) const {
  return !text.empty() && text[0] != '-' && integer_from(*this, out);
}

expected<value> parse(std::string_view text) {
  const char* last = nullptr;
  builder b(text, &last);
  const bool ok = nlohmann::json::sax_parse(
    tracking_iterator(text.data(), &last),
    tracking_iterator(text.data() + text.size(), &last), &b,
    nlohmann::json::input_format_t::json, true);
  if (!ok)
    return status::error(b.error.empty() ? "not valid JSON" : b.error);
  return std::move(b.root);
}

std::string quote(std::string_view s) {
  try {
    return nlohmann::json(std::string(s)).dump();
  } catch (const nlohmann::json::exception&) {
    // Not UTF-8: kept as it is, so that the reader refuses it by name.
    return "\"" + std::string(s) + "\"";
  }
}

} // namespace tutti::store::detail::json
