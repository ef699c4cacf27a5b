// The Jinja subset of chat_template.hpp: the tree chat_template_parse.cpp
// makes is evaluated over JSON values (nlohmann's; a discarded value stands
// for Jinja's undefined). Errors inside are thrown as template_error and
// come out of render_chat_template as one line.

#include "tutti/serve/chat_template.hpp"

#include <algorithm>
#include <cctype>
#include <cstring>
#include <memory>

#include <nlohmann/json.hpp>

#include "chat_template_tree.hpp"

namespace tutti::serve {

namespace {

using namespace chat_detail;

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
    const auto tree = parse_template(source);
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