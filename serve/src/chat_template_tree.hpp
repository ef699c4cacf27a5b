#pragma once
// The chat template's tree, between its parser (chat_template_parse.cpp)
// and its evaluation (chat_template.cpp); private to serve/. Errors inside
// are thrown as template_error and leave render_chat_template as one line.

#include <cctype>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

namespace tutti::serve::chat_detail {

using json = nlohmann::json;

// Bounds on what an untrusted template may make us do.
constexpr int max_depth = 64;                    // nested tags and expressions
constexpr int64_t max_steps = 1'000'000;         // loop bodies and outputs
constexpr size_t max_output = 16u * 1024 * 1024; // bytes of prompt text

struct template_error {
  std::string message;
};

[[noreturn]] inline void fail(const std::string& what) {
  throw template_error{"chat_template: " + what};
}

inline bool blank(char c) { return c == ' ' || c == '\t'; }
inline bool space(char c) {
  return std::isspace(static_cast<unsigned char>(c));
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

// ---- Statements ---------------------------------------------------------

struct node {
  enum kind_t { plain, output, branch, loop, assign } kind = plain;
  std::string text; // text; the loop's or assignment's variable
  expr_ptr value;   // output; the loop's list; the assigned value
  // if/elif/else: (condition, body); an else has no condition.
  std::vector<std::pair<expr_ptr, std::vector<node>>> branches;
  std::vector<node> body; // loop
};

// The template's statements, from its source (Hugging Face's trim_blocks
// and lstrip_blocks applied).
std::vector<node> parse_template(const std::string& source);

} // namespace tutti::serve::chat_detail
