// The Jinja subset of chat_template.hpp: the template is cut into text and
// tags, each tag's tokens parsed into a small tree, and the tree evaluated
// over JSON values (nlohmann's; a discarded value stands for Jinja's
// undefined). Errors inside are thrown as template_error and come out of
// render_chat_template as one line.

#include "tutti/serve/chat_template.hpp"

#include <algorithm>
#include <cctype>
#include <cstring>
#include <memory>

#include <nlohmann/json.hpp>

namespace tutti::serve {

namespace {

using json = nlohmann::json;

// Bounds on what an untrusted template may make us do.
constexpr int max_depth = 64;                    // nested tags and expressions
constexpr int64_t max_steps = 1'000'000;         // loop bodies and outputs
constexpr size_t max_output = 16u * 1024 * 1024; // bytes of prompt text

struct template_error {
  std::string message;
};

[[noreturn]] void fail(const std::string& what) {
  throw template_error{"chat_template: " + what};
}

// ---- Cutting the source into text and tags ----------------------------

enum class tag_kind { text, output, statement };

struct segment {
  tag_kind kind;
  std::string body; // text, or the tag's inside without delimiters
};

bool blank(char c) { return c == ' ' || c == '\t'; }
bool space(char c) { return std::isspace(static_cast<unsigned char>(c)); }

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

// ---- Expressions -------------------------------------------------------

struct expr;
using expr_ptr = std::unique_ptr<expr>;

struct expr {
  enum kind_t {
    literal,
    variable,
    attribute,
    subscript,
    call,
    filter,
    test,
    unary,
    binary,
    conditional,
    list
  } kind;
  json value;       // literal
  std::string name; // variable, attribute, call, filter, test, operator
  std::vector<expr_ptr> args;
  bool negated = false; // test: `is not`
  int depth = 1;        // of the tree below: bounded, as is its teardown
};

// A node with its children in place: its depth checked, so neither
// evaluation nor destruction recurses without bound (`a ~ a ~ a ...`).
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

// ---- Statements ---------------------------------------------------------

struct node {
  enum kind_t { plain, output, branch, loop, assign } kind = plain;
  std::string text; // text; the loop's or assignment's variable
  expr_ptr value;   // output; the loop's list; the assigned value
  // if/elif/else: (condition, body); an else has no condition.
  std::vector<std::pair<expr_ptr, std::vector<node>>> branches;
  std::vector<node> body; // loop
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

// ---- Evaluation -----------------------------------------------------------

const json undefined_value(json::value_t::discarded);

bool undefined(const json& v) { return v.is_discarded(); }

bool truthy(const json& v) {
  if (undefined(v) || v.is_null())
    return false;
  if (v.is_boolean())
    return v.get<bool>();
  if (v.is_number())
    return v.get<double>() != 0;
  if (v.is_string() || v.is_array() || v.is_object())
    return !v.empty();
  return false;
}

std::string type_name(const json& v) {
  return undefined(v) ? "undefined" : v.type_name();
}

std::string text_of(const json& v) {
  if (undefined(v))
    return "";
  if (v.is_string())
    return v.get<std::string>();
  if (v.is_boolean())
    return v.get<bool>() ? "True" : "False";
  if (v.is_null())
    return "None";
  if (v.is_number_integer())
    return std::to_string(v.get<int64_t>());
  fail("printing a " + type_name(v) + " is not supported");
}

bool equal(const json& a, const json& b) {
  if (undefined(a) || undefined(b))
    return undefined(a) && undefined(b);
  return a == b;
}

class evaluator {
public:
  explicit evaluator(json globals) { scopes_.push_back(std::move(globals)); }

  void run(const std::vector<node>& nodes, int depth = 0) {
    for (const auto& n : nodes) {
      step();
      switch (n.kind) {
      case node::plain:
        emit(n.text);
        break;
      case node::output:
        emit(text_of(eval(*n.value, 0)));
        break;
      case node::assign:
        scopes_.back()[n.text] = eval(*n.value, 0);
        break;
      case node::branch:
        for (const auto& [cond, body] : n.branches)
          if (!cond || truthy(eval(*cond, 0))) {
            run(body, depth + 1);
            break;
          }
        break;
      case node::loop:
        loop(n, depth);
        break;
      }
    }
  }

  std::string out;

private:
  void step() {
    if (++steps_ > max_steps)
      fail("the template ran past " + std::to_string(max_steps) + " steps");
  }
  void emit(const std::string& s) {
    if (out.size() + s.size() > max_output)
      fail("the rendered prompt is over " + std::to_string(max_output)
           + " bytes");
    out += s;
  }

  void loop(const node& n, int depth) {
    const json items = eval(*n.value, 0);
    if (undefined(items) || items.is_null())
      return;
    if (!items.is_array())
      fail("for loops over a " + type_name(items)
           + " are not supported (only lists)");
    const int64_t count = static_cast<int64_t>(items.size());
    for (int64_t i = 0; i < count; ++i) {
      json scope = json::object();
      scope[n.text] = items[i];
      scope["loop"] = {{"index0", i},          {"index", i + 1},
                       {"first", i == 0},      {"last", i + 1 == count},
                       {"length", count},      {"revindex0", count - 1 - i},
                       {"revindex", count - i}};
      scopes_.push_back(std::move(scope));
      run(n.body, depth + 1);
      scopes_.pop_back();
    }
  }

  const json* find(const std::string& name) const {
    for (auto s = scopes_.rbegin(); s != scopes_.rend(); ++s)
      if (auto it = s->find(name); it != s->end())
        return &*it;
    return nullptr;
  }

  // A subscript's or attribute's base without copying a variable's whole
  // value (messages[i] inside a loop over messages).
  const json& operand(const expr& e, int depth, json& holder) {
    if (e.kind == expr::variable) {
      const json* v = find(e.name);
      return v ? *v : undefined_value;
    }
    holder = eval(e, depth);
    return holder;
  }

  json member(const json& base, const json& key, const std::string& shown) {
    if (undefined(base))
      fail("'" + shown + "' of an undefined value");
    if (base.is_object() && key.is_string()) {
      auto it = base.find(key.get<std::string>());
      return it == base.end() ? undefined_value : *it;
    }
    if ((base.is_array() || base.is_string()) && key.is_number_integer()) {
      const int64_t n = static_cast<int64_t>(base.size());
      int64_t i = key.get<int64_t>();
      if (i < 0)
        i += n;
      if (i < 0 || i >= n)
        return undefined_value;
      if (base.is_string())
        return std::string(1, base.get<std::string>()[i]);
      return base[i];
    }
    if (base.is_object() || base.is_array() || base.is_string())
      return undefined_value;
    fail("'" + shown + "' of a " + type_name(base));
  }

  json eval(const expr& e, int depth) {
    if (depth > max_depth)
      fail("expressions nested deeper than " + std::to_string(max_depth));
    const int d = depth + 1;
    switch (e.kind) {
    case expr::literal:
      return e.value;
    case expr::variable: {
      const json* v = find(e.name);
      return v ? *v : undefined_value;
    }
    case expr::list: {
      json l = json::array();
      for (const auto& a : e.args)
        l.push_back(eval(*a, d));
      return l;
    }
    case expr::attribute: {
      json holder;
      return member(operand(*e.args[0], d, holder), e.name, "." + e.name);
    }
    case expr::subscript: {
      const json key = eval(*e.args[1], d);
      json holder;
      return member(operand(*e.args[0], d, holder), key,
                    "[" + text_of(key) + "]");
    }
    case expr::conditional:
      return truthy(eval(*e.args[0], d)) ? eval(*e.args[1], d)
                                         : eval(*e.args[2], d);
    case expr::call:
      if (e.name == "raise_exception") {
        std::string message = e.args.empty() ? "raise_exception"
                                             : text_of(eval(*e.args[0], d));
        throw template_error{message};
      }
      fail("the function '" + e.name + "()' is not supported");
    case expr::filter: {
      const json v = eval(*e.args[0], d);
      if (e.name == "trim") {
        std::string s = text_of(v);
        size_t a = 0, b = s.size();
        while (a < b && space(s[a]))
          ++a;
        while (b > a && space(s[b - 1]))
          --b;
        return s.substr(a, b - a);
      }
      if (e.name == "length") {
        if (v.is_string() || v.is_array() || v.is_object())
          return static_cast<int64_t>(v.size());
        if (undefined(v))
          return 0;
        fail("|length of a " + type_name(v));
      }
      fail("the filter '|" + e.name + "' is not supported");
    }
    case expr::test: {
      const json v = eval(*e.args[0], d);
      bool r;
      if (e.name == "defined")
        r = !undefined(v);
      else if (e.name == "none")
        r = v.is_null();
      else
        fail("the test 'is " + e.name + "' is not supported");
      return e.negated ? !r : r;
    }
    case expr::unary: {
      const json v = eval(*e.args[0], d);
      if (e.name == "not")
        return !truthy(v);
      if (!v.is_number_integer())
        fail("'-' of a " + type_name(v));
      return -v.get<int64_t>();
    }
    case expr::binary:
      return binary(e, d);
    }
    fail("an unknown expression");
  }

  json binary(const expr& e, int d) {
    const std::string& op = e.name;
    if (op == "and") {
      json a = eval(*e.args[0], d);
      return truthy(a) ? eval(*e.args[1], d) : a;
    }
    if (op == "or") {
      json a = eval(*e.args[0], d);
      return truthy(a) ? a : eval(*e.args[1], d);
    }
    const json a = eval(*e.args[0], d), b = eval(*e.args[1], d);
    if (op == "==")
      return equal(a, b);
    if (op == "!=")
      return !equal(a, b);
    if (op == "~")
      return text_of(a) + text_of(b);
    if (op == "in" || op == "not in") {
      bool found = false;
      if (b.is_string() && a.is_string())
        found = b.get<std::string>().find(a.get<std::string>())
                != std::string::npos;
      else if (b.is_array())
        for (const auto& x : b)
          found = found || equal(x, a);
      else if (b.is_object() && a.is_string())
        found = b.contains(a.get<std::string>());
      else if (!undefined(b) && !b.is_null())
        fail("'in' a " + type_name(b));
      else
        fail("'in' an undefined value");
      return op == "in" ? found : !found;
    }
    if (op == "+" && a.is_string() && b.is_string())
      return a.get<std::string>() + b.get<std::string>();
    if (op == "+" && a.is_array() && b.is_array()) {
      json l = a;
      l.insert(l.end(), b.begin(), b.end());
      return l;
    }
    if (a.is_string() && b.is_string()
        && (op == "<" || op == ">" || op == "<=" || op == ">=")) {
      const int c = a.get<std::string>().compare(b.get<std::string>());
      return op == "<"    ? c < 0
             : op == ">"  ? c > 0
             : op == "<=" ? c <= 0
                          : c >= 0;
    }
    if (!a.is_number_integer() || !b.is_number_integer())
      fail("'" + op + "' between a " + type_name(a) + " and a " + type_name(b));
    const int64_t x = a.get<int64_t>(), y = b.get<int64_t>();
    if (op == "+")
      return x + y;
    if (op == "-")
      return x - y;
    if (op == "*")
      return x * y;
    if (op == "%") {
      if (y == 0)
        fail("'%' by zero");
      return ((x % y) + y) % y; // Python's sign
    }
    if (op == "<")
      return x < y;
    if (op == ">")
      return x > y;
    if (op == "<=")
      return x <= y;
    if (op == ">=")
      return x >= y;
    fail("the operator '" + op + "' is not supported");
  }

  std::vector<json> scopes_;
  int64_t steps_ = 0;
};

} // namespace

expected<std::string> render_chat_template(const std::string& source,
                                           const chat_template_inputs& in) {
  try {
    template_parser parser(cut(source));
    const auto tree = parser.parse();
    json globals = json::object();
    globals["messages"] = json::array();
    for (const auto& m : in.messages)
      globals["messages"].push_back({{"role", m.role}, {"content", m.content}});
    globals["bos_token"] = in.bos_token;
    globals["eos_token"] = in.eos_token;
    globals["add_generation_prompt"] = in.add_generation_prompt;
    evaluator ev(std::move(globals));
    ev.run(tree);
    return std::move(ev.out);
  } catch (const template_error& e) {
    return status::error(e.message);
  } catch (const std::exception& e) {
    return status::error(std::string("chat_template: ") + e.what());
  }
}

} // namespace tutti::serve
