// The chat template renderer on the templates checkpoints ship: Qwen2.5's
// ChatML template as published (its tool branches parse and are not taken
// without tools) and Mixtral-Instruct's [INST] template, against the exact
// text Hugging Face's apply_chat_template gives; raise_exception's message;
// malformed and unsupported templates refused in one line.

#include <catch2/catch.hpp>

#include <fstream>
#include <sstream>

#include "test_support.hpp"
#include "tutti/serve/chat_template.hpp"

using namespace tutti;
using serve::chat_message;

namespace {

std::string template_text(const std::string& name) {
  std::ifstream f(testing::source_dir() + "/tests/serve/chat_templates/"
                  + name);
  REQUIRE(f);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

expected<std::string> render(const std::string& tmpl,
                             std::vector<chat_message> messages,
                             bool add_generation_prompt = true) {
  serve::chat_template_inputs in;
  in.messages = std::move(messages);
  in.bos_token = "<s>";
  in.eos_token = "</s>";
  in.add_generation_prompt = add_generation_prompt;
  return serve::render_chat_template(tmpl, in);
}

std::string refusal(const std::string& tmpl) {
  auto r = render(tmpl, {{"user", "Hi"}});
  REQUIRE_FALSE(r.ok());
  const auto m = r.message();
  CHECK(m.find('\n') == std::string::npos);
  return m;
}

} // namespace

TEST_CASE("Qwen2.5's ChatML template renders as Hugging Face does", "[unit]") {
  const auto qwen = template_text("qwen2.5.jinja");
  auto r = render(qwen, {{"system", "You are terse."},
                         {"user", "Hi"},
                         {"assistant", "Hello!"},
                         {"user", "Bye"}});
  INFO(r.message());
  REQUIRE(r.ok());
  CHECK(r.value()
        == "<|im_start|>system\nYou are terse.<|im_end|>\n"
           "<|im_start|>user\nHi<|im_end|>\n"
           "<|im_start|>assistant\nHello!<|im_end|>\n"
           "<|im_start|>user\nBye<|im_end|>\n"
           "<|im_start|>assistant\n");

  // No system message: Qwen's default one; no generation prompt asked.
  r = render(qwen, {{"user", "Hi"}}, false);
  REQUIRE(r.ok());
  CHECK(r.value()
        == "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You "
           "are a helpful assistant.<|im_end|>\n"
           "<|im_start|>user\nHi<|im_end|>\n");
}

TEST_CASE("Mixtral's [INST] template renders and raises as written", "[unit]") {
  const auto mixtral = template_text("mixtral.jinja");
  auto r = render(mixtral,
                  {{"user", "Hi"}, {"assistant", "Hello!"}, {"user", "Bye"}});
  INFO(r.message());
  REQUIRE(r.ok());
  CHECK(r.value() == "<s>[INST] Hi [/INST]Hello!</s>[INST] Bye [/INST]");

  r = render(mixtral, {{"user", "Hi"}, {"user", "Bye"}});
  REQUIRE_FALSE(r.ok());
  CHECK(r.message()
        == "Conversation roles must alternate "
           "user/assistant/user/assistant/...");
  r = render(mixtral, {{"system", "Be brief."}, {"user", "Hi"}});
  REQUIRE_FALSE(r.ok());
  CHECK(r.message()
        == "Conversation roles must alternate "
           "user/assistant/user/assistant/...");
}

TEST_CASE("whitespace control, trim_blocks and lstrip_blocks as in HF",
          "[unit]") {
  auto r = render("a\n  {% if true %}\n  b\n  {% endif %}\nc {{- ' d ' -}} e"
                  "{# note #}\n{{ messages|length }}{{ ' x '|trim }}"
                  "{% set n = 2 %}{{ n * 3 - 1 }}{{ 'y' ~ 1 }}"
                  "{{ 'u' in 'user' }}{{ none is none }}{{ z is defined }}"
                  "{{ messages[-1].role }}{{ 'p' if false else 'q' }}",
                  {{"user", "Hi"}});
  INFO(r.message());
  REQUIRE(r.ok());
  CHECK(r.value() == "a\n  b\nc d e1x5y1TrueTrueFalseuserq");

  r = render("{% for m in messages %}{{ loop.index0 }}{{ loop.first }}"
             "{{ loop.last }}{% if not loop.last %},{% endif %}{% endfor %}",
             {{"user", "a"}, {"assistant", "b"}});
  REQUIRE(r.ok());
  CHECK(r.value() == "0TrueFalse,1FalseTrue");
}

TEST_CASE("malformed or unsupported templates are refused in one line",
          "[unit]") {
  CHECK(refusal("{% if x %}a")
        == "chat_template: {% if %} without {% endif %}");
  CHECK(refusal("{% for m in messages %}")
        == "chat_template: {% for %} without {% endfor %}");
  CHECK(refusal("{% endif %}")
        == "chat_template: '{% endif %}' without its opening tag");
  CHECK(refusal("{{ 'a' ")
        == "chat_template: a tag opened at byte 0 is never closed with '}}'");
  CHECK(refusal("{% macro f() %}{% endmacro %}")
        == "chat_template: the tag '{% macro %}' is not supported");
  CHECK(refusal("{{ messages | tojson }}")
        == "chat_template: the filter '|tojson' is not supported");
  CHECK(refusal("{{ 'a'.upper() }}")
        == "chat_template: the function '.upper()' is not supported");
  CHECK(refusal("{{ messages[1:] }}")
        == "chat_template: slices (x[a:b]) are not supported");
  CHECK(refusal("{{ 'abc }}")
        == "chat_template: a tag opened at byte 0 is never closed with '}}'");
  CHECK(refusal("{{ 1 + 'a' }}")
        == "chat_template: '+' between a number and a string");
  CHECK(refusal("{{ x.y }}") == "chat_template: '.y' of an undefined value");
  CHECK(refusal("{{ 1.5 }}")
        == "chat_template: floating-point numbers are not supported");
  CHECK(refusal("{{ a @ b }}") == "chat_template: unexpected character '@'");
  // Bounded: nesting and runaway output.
  CHECK(
    refusal("{{ " + std::string(200, '(') + "1" + std::string(200, ')') + " }}")
    == "chat_template: expressions nested deeper than 64");
  std::string chain = "{{ 'a'";
  for (int i = 0; i < 100000; ++i)
    chain += " ~ 'a'";
  CHECK(refusal(chain + " }}")
        == "chat_template: expressions nested deeper than 64");
  std::string deep;
  for (int i = 0; i < 100; ++i)
    deep += "{% if true %}";
  CHECK(refusal(deep) == "chat_template: tags nested deeper than 64");
  std::string big = "{% set s = 'xxxxxxxxxxxxxxxx' %}";
  for (int i = 0; i < 20; ++i)
    big += "{% set s = s + s %}";
  big += "{{ s }}{{ s }}";
  CHECK(refusal(big).find("is over") != std::string::npos);
}
