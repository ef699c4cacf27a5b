// Parsing the Jinja subset of chat_template.hpp: the source is cut into
// text and tags, and each tag's tokens parsed into chat_template_tree.hpp's
// tree, with every nesting bounded (the template is untrusted input).

#include <algorithm>
#include <cctype>
#include <cstring>

#include "chat_template_tree.hpp"

namespace tutti::serve::chat_detail {

namespace {

// ---- Cutting the source into text and tags ----------------------------

enum class tag_kind { text, output, statement };

struct segment {
  tag_kind kind;
  std::string body; // text, or the tag's inside without delimiters
};

std::vector<segment> cut(const std::string& src) {
  std::vector<segment> out;
  std::string text;
  bool strip_next = false; // the last tag ended with '-'
  size_t pos = 0;
  auto flush_text = [&] {
    if (!text.empty())
      out.push_back({tag_kind::text, text});
    text.clear();
  };
  while (pos <= src.size()) {
    size_t open = src.find('{', pos);
    while (open != std::string::npos && open + 1 < src.size()
           && src[open + 1] != '{' && src[open + 1] != '%'
           && src[open + 1] != '#')
      open = src.find('{', open + 1);
    if (open + 1 >= src.size())
      open = std::string::npos;
    std::string chunk = src.substr(
      pos, open == std::string::npos ? std::string::npos : open - pos);
    if (strip_next) {
      size_t k = 0;
      while (k < chunk.size() && space(chunk[k]))
        ++k;
      chunk.erase(0, k);
    }
    text += chunk;
    if (open == std::string::npos)
      break;
    const char type = src[open + 1];
    size_t inner = open + 2;
    const bool strip_before = inner < src.size() && src[inner] == '-';
    if (strip_before || (inner < src.size() && src[inner] == '+'))
      ++inner;
    if (strip_before) {
      while (!text.empty() && space(text.back()))
        text.pop_back();
    } else if (type != '{' && src[inner - 1] != '+') {
      // lstrip_blocks: blanks from the start of a line to a block tag.
      size_t k = open;
      while (k > 0 && blank(src[k - 1]))
        --k;
      if (k == 0 || src[k - 1] == '\n')
        while (!text.empty() && blank(text.back()))
          text.pop_back();
    }
    // The closing delimiter, outside string literals.
    const std::string close = type == '{' ? "}}" : type == '%' ? "%}" : "#}";
    size_t end = inner;
    char quote = 0;
    for (; end + 1 < src.size(); ++end) {
      const char c = src[end];
      if (type != '#' && quote) {
        if (c == '\\')
          ++end;
        else if (c == quote)
          quote = 0;
      } else if (type != '#' && (c == '\'' || c == '"')) {
        quote = c;
      } else if (src.compare(end, 2, close) == 0) {
        break;
      }
    }
    if (end + 1 >= src.size())
      fail("a tag opened at byte " + std::to_string(open)
           + " is never closed with '" + close + "'");
    size_t body_end = end;
    strip_next = body_end > inner && src[body_end - 1] == '-';
    if (strip_next)
      --body_end;
    pos = end + 2;
    // trim_blocks: the newline right after a block tag goes.
    if (type != '{' && !strip_next) {
      if (src.compare(pos, 1, "\n") == 0)
        pos += 1;
      else if (src.compare(pos, 2, "\r\n") == 0)
        pos += 2;
    }
    if (type == '#')
      continue;
    flush_text();
    out.push_back({type == '{' ? tag_kind::output : tag_kind::statement,
                   src.substr(inner, body_end - inner)});
  }
  flush_text();
  return out;
}

// ---- Tokens of a tag ---------------------------------------------------

enum class tok { name, string, integer, op, end };

struct token {
  tok kind;
  std::string text;
  int64_t number = 0;
};

std::vector<token> tokenize(const std::string& s) {
  std::vector<token> out;
  size_t i = 0;
  while (i < s.size()) {
    const char c = s[i];
    if (space(c)) {
      ++i;
    } else if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
      size_t j = i;
      while (j < s.size()
             && (std::isalnum(static_cast<unsigned char>(s[j])) || s[j] == '_'))
        ++j;
      out.push_back({tok::name, s.substr(i, j - i)});
      i = j;
    } else if (std::isdigit(static_cast<unsigned char>(c))) {
      size_t j = i;
      while (j < s.size() && std::isdigit(static_cast<unsigned char>(s[j])))
        ++j;
      if (j < s.size() && s[j] == '.')
        fail("floating-point numbers are not supported");
      if (j - i > 15)
        fail("the number " + s.substr(i, j - i) + " is too large");
      out.push_back(
        {tok::integer, s.substr(i, j - i), std::stoll(s.substr(i, j - i))});
      i = j;
    } else if (c == '\'' || c == '"') {
      std::string v;
      size_t j = i + 1;
      for (; j < s.size() && s[j] != c; ++j) {
        if (s[j] != '\\' || j + 1 == s.size()) {
          v += s[j];
          continue;
        }
        const char e = s[++j];
        v += e == 'n' ? '\n' : e == 't' ? '\t' : e == 'r' ? '\r' : e;
      }
      if (j >= s.size())
        fail("a string literal is not closed");
      out.push_back({tok::string, v});
      i = j + 1;
    } else {
      static const char* ops[] = {
        "==", "!=", "<=", ">=", "//", "**", "<", ">", "+", "-", "*", "/", "%",
        "~",  "(",  ")",  "[",  "]",  ".",  ",", "|", ":", "=", "{", "}"};
      bool matched = false;
      for (const char* op : ops)
        if (s.compare(i, std::strlen(op), op) == 0) {
          out.push_back({tok::op, op});
          i += std::strlen(op);
          matched = true;
          break;
        }
      if (!matched)
        fail(std::string("unexpected character '") + c + "'");
    }
  }
  out.push_back({tok::end, ""});
  return out;
}

expr_ptr bounded(expr_ptr e) {
  for (const auto& a : e->args)
    e->depth = std::max(e->depth, a->depth + 1);
  if (e->depth > max_depth)
    fail("expressions nested deeper than " + std::to_string(max_depth));
  return e;
}

expr_ptr make(expr::kind_t k, std::string name = {}) {
  auto e = std::make_unique<expr>();
  e->kind = k;
  e->name = std::move(name);
  return e;
}

// Recursive descent in Jinja's precedence: conditional, or, and, not,
// comparisons and `in`, + -, ~, * / %, unary minus, then primaries with
// their postfixes (.x, [x], (args), |filter, is test).
class expr_parser {
public:
  expr_parser(const std::vector<token>& t, size_t start) : t_(t), i_(start) {}

  expr_ptr parse() { return conditional(0); }
  const token& peek() const { return t_[i_]; }
  bool accept(const char* op) {
    if (peek().kind == tok::op && peek().text == op) {
      ++i_;
      return true;
    }
    return false;
  }
  bool accept_name(const char* word) {
    if (peek().kind == tok::name && peek().text == word) {
      ++i_;
      return true;
    }
    return false;
  }
  void expect(const char* op) {
    if (!accept(op))
      fail(std::string("expected '") + op + "' but found '" + peek().text
           + "'");
  }
  std::string name() {
    if (peek().kind != tok::name)
      fail("expected a name but found '" + peek().text + "'");
    return t_[i_++].text;
  }
  void expect_end() {
    if (peek().kind != tok::end)
      fail("unexpected '" + peek().text + "'");
  }

private:
  void deeper(int depth) {
    if (depth > max_depth)
      fail("expressions nested deeper than " + std::to_string(max_depth));
  }
  expr_ptr binary(std::string op, expr_ptr a, expr_ptr b) {
    auto e = make(expr::binary, std::move(op));
    e->args.push_back(std::move(a));
    e->args.push_back(std::move(b));
    return bounded(std::move(e));
  }
  expr_ptr conditional(int d) {
    deeper(d);
    auto a = or_expr(d + 1);
    if (!accept_name("if"))
      return a;
    auto e = make(expr::conditional);
    e->args.push_back(or_expr(d + 1)); // condition
    e->args.push_back(std::move(a));
    if (accept_name("else")) {
      e->args.push_back(conditional(d + 1));
    } else { // no else: undefined
      e->args.push_back(make(expr::literal));
      e->args.back()->value = json(json::value_t::discarded);
    }
    return bounded(std::move(e));
  }
  expr_ptr or_expr(int d) {
    auto a = and_expr(d);
    while (accept_name("or"))
      a = binary("or", std::move(a), and_expr(d));
    return a;
  }
  expr_ptr and_expr(int d) {
    auto a = not_expr(d);
    while (accept_name("and"))
      a = binary("and", std::move(a), not_expr(d));
    return a;
  }
  expr_ptr not_expr(int d) {
    deeper(d);
    if (accept_name("not")) {
      auto e = make(expr::unary, "not");
      e->args.push_back(not_expr(d + 1));
      return bounded(std::move(e));
    }
    return compare(d);
  }
  expr_ptr compare(int d) {
    auto a = sum(d);
    for (;;) {
      std::string op;
      for (const char* o : {"==", "!=", "<=", ">=", "<", ">"})
        if (accept(o)) {
          op = o;
          break;
        }
      if (op.empty() && accept_name("in"))
        op = "in";
      if (op.empty() && peek().kind == tok::name && peek().text == "not"
          && t_[i_ + 1].kind == tok::name && t_[i_ + 1].text == "in") {
        i_ += 2;
        op = "not in";
      }
      if (op.empty())
        return a;
      a = binary(op, std::move(a), sum(d));
    }
  }
  expr_ptr sum(int d) {
    auto a = concat(d);
    for (;;) {
      if (accept("+"))
        a = binary("+", std::move(a), concat(d));
      else if (accept("-"))
        a = binary("-", std::move(a), concat(d));
      else
        return a;
    }
  }
  expr_ptr concat(int d) {
    auto a = product(d);
    while (accept("~"))
      a = binary("~", std::move(a), product(d));
    return a;
  }
  expr_ptr product(int d) {
    auto a = unary(d);
    for (;;) {
      std::string op = peek().kind == tok::op ? peek().text : "";
      if (op != "*" && op != "%" && op != "/" && op != "//" && op != "**")
        return a;
      ++i_;
      a = binary(op, std::move(a), unary(d));
    }
  }
  expr_ptr unary(int d) {
    deeper(d);
    if (accept("-")) {
      auto e = make(expr::unary, "-");
      e->args.push_back(unary(d + 1));
      return bounded(std::move(e));
    }
    return postfix(primary(d + 1), d + 1);
  }
  expr_ptr primary(int d) {
    const token t = peek();
    ++i_;
    switch (t.kind) {
    case tok::string: {
      auto e = make(expr::literal);
      e->value = t.text;
      // Adjacent literals concatenate, as in Python.
      while (peek().kind == tok::string)
        e->value = e->value.get<std::string>() + t_[i_++].text;
      return e;
    }
    case tok::integer: {
      auto e = make(expr::literal);
      e->value = t.number;
      return e;
    }
    case tok::name: {
      auto e = make(expr::literal);
      if (t.text == "true" || t.text == "True")
        e->value = true;
      else if (t.text == "false" || t.text == "False")
        e->value = false;
      else if (t.text == "none" || t.text == "None")
        e->value = nullptr;
      else
        return make(expr::variable, t.text);
      return e;
    }
    case tok::op:
      if (t.text == "(") {
        auto e = conditional(d + 1);
        expect(")");
        return e;
      }
      if (t.text == "[") {
        auto e = make(expr::list);
        while (!accept("]")) {
          if (!e->args.empty())
            expect(",");
          e->args.push_back(conditional(d + 1));
        }
        return bounded(std::move(e));
      }
      fail("unexpected '" + t.text + "'");
    case tok::end:
      break;
    }
    fail("an expression is missing");
  }
  expr_ptr postfix(expr_ptr e, int d) {
    for (;;) {
      if (accept(".")) {
        auto a = make(expr::attribute, name());
        a->args.push_back(std::move(e));
        e = bounded(std::move(a));
      } else if (accept("[")) {
        if (peek().kind == tok::op && peek().text == ":")
          fail("slices (x[a:b]) are not supported");
        auto s = make(expr::subscript);
        s->args.push_back(std::move(e));
        s->args.push_back(conditional(d + 1));
        if (peek().kind == tok::op && peek().text == ":")
          fail("slices (x[a:b]) are not supported");
        expect("]");
        e = bounded(std::move(s));
      } else if (accept("(")) {
        // A call: kept with its callee's name, refused when evaluated
        // unless it is raise_exception.
        std::string callee = e->kind == expr::variable    ? e->name
                             : e->kind == expr::attribute ? "." + e->name
                                                          : "(expression)";
        auto c = make(expr::call, callee);
        while (!accept(")")) {
          if (!c->args.empty())
            expect(",");
          if (peek().kind == tok::name && t_[i_ + 1].kind == tok::op
              && t_[i_ + 1].text == "=")
            fail("keyword arguments (" + peek().text
                 + "=...) are not "
                   "supported");
          c->args.push_back(conditional(d + 1));
        }
        e = bounded(std::move(c));
      } else if (accept("|")) {
        auto f = make(expr::filter, name());
        f->args.push_back(std::move(e));
        if (accept("("))
          fail("filter arguments (|" + f->name + "(...)) are not supported");
        e = bounded(std::move(f));
      } else if (accept_name("is")) {
        auto t = make(expr::test);
        t->negated = accept_name("not");
        t->name = name();
        t->args.push_back(std::move(e));
        e = bounded(std::move(t));
      } else {
        return e;
      }
    }
  }

  const std::vector<token>& t_;
  size_t i_;
};

class template_parser {
public:
  explicit template_parser(std::vector<segment> s) : segs_(std::move(s)) {}

  std::vector<node> parse() {
    std::vector<node> out;
    const auto end = nodes(out, {}, 0);
    if (!end.empty())
      fail("'{% " + end + " %}' without its opening tag");
    return out;
  }

private:
  // Parses into `out` until a statement named in `ends` (returned) or the
  // end of the template ("").
  std::string nodes(std::vector<node>& out,
                    const std::vector<std::string>& ends, int depth) {
    if (depth > max_depth)
      fail("tags nested deeper than " + std::to_string(max_depth));
    while (at_ < segs_.size()) {
      const segment& s = segs_[at_++];
      if (s.kind == tag_kind::text) {
        node n;
        n.text = s.body;
        out.push_back(std::move(n));
        continue;
      }
      tokens_ = tokenize(s.body);
      expr_parser p(tokens_, 0);
      if (s.kind == tag_kind::output) {
        node n;
        n.kind = node::output;
        n.value = p.parse();
        p.expect_end();
        out.push_back(std::move(n));
        continue;
      }
      const std::string word = p.name();
      for (const auto& e : ends)
        if (word == e) {
          tag_ = s.body;
          return word;
        }
      if (word == "if") {
        out.push_back(branch(p, depth));
      } else if (word == "for") {
        node n;
        n.kind = node::loop;
        n.text = p.name();
        if (p.peek().kind == tok::op && p.peek().text == ",")
          fail("unpacking in for loops (for a, b in ...) is not supported");
        if (!p.accept_name("in"))
          fail("expected 'in' in the for tag");
        n.value = p.parse();
        if (p.peek().kind == tok::name && p.peek().text == "recursive")
          fail("recursive for loops are not supported");
        p.expect_end();
        const auto end = nodes(n.body, {"endfor", "else"}, depth + 1);
        if (end == "else")
          fail("{% for %} ... {% else %} is not supported");
        if (end.empty())
          fail("{% for %} without {% endfor %}");
        out.push_back(std::move(n));
      } else if (word == "set") {
        node n;
        n.kind = node::assign;
        n.text = p.name();
        if (!p.accept("="))
          fail("block assignments ({% set x %}...{% endset %}) and "
               "attribute assignments are not supported");
        n.value = p.parse();
        p.expect_end();
        out.push_back(std::move(n));
      } else if (word == "elif" || word == "else" || word == "endif"
                 || word == "endfor") {
        fail("'{% " + word + " %}' without its opening tag");
      } else {
        fail("the tag '{% " + word + " %}' is not supported");
      }
    }
    return "";
  }

  node branch(expr_parser& p, int depth) {
    node n;
    n.kind = node::branch;
    expr_ptr cond = p.parse();
    p.expect_end();
    for (;;) {
      std::vector<node> body;
      const auto end = nodes(body, {"elif", "else", "endif"}, depth + 1);
      if (end.empty())
        fail("{% if %} without {% endif %}");
      n.branches.emplace_back(std::move(cond), std::move(body));
      if (end == "endif")
        return n;
      const bool is_else = end == "else";
      if (!n.branches.back().first)
        fail("{% " + end + " %} after {% else %}");
      tokens_ = tokenize(tag_);
      expr_parser q(tokens_, 1);
      cond = is_else ? nullptr : q.parse();
      q.expect_end();
    }
  }

  std::vector<segment> segs_;
  size_t at_ = 0;
  std::string tag_; // the last ending tag's inside (an elif's condition)
  std::vector<token> tokens_;
};

} // namespace

std::vector<node> parse_template(const std::string& source) {
  template_parser parser(cut(source));
  return parser.parse();
}

} // namespace tutti::serve::chat_detail
