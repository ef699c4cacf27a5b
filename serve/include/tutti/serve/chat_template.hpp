#pragma once
// A checkpoint's chat template (tokenizer_config.json's `chat_template`)
// rendered to a prompt. Debian has no C++ Jinja engine; this is the subset
// of Jinja the Qwen, Mixtral and DeepSeek templates use:
//   {{ expr }}  {% if %}/{% elif %}/{% else %}/{% endif %}
//   {% for x in list %} with loop.index0/index/first/last/length
//   {% set x = expr %}  {# comments #}  whitespace control {%- -%} {{- -}}
//   string, integer, true/false/none literals; + - * % ~ ( )
//   == != < > <= >= and or not in; `a if c else b`
//   is [not] defined / none; x['key'], x.key, x[-1]
//   raise_exception('...'), |trim, |length
// with Hugging Face's environment (trim_blocks, lstrip_blocks). The
// template is untrusted input: anything outside the subset is a one-line
// error naming the construct, and nesting, loops and output are bounded.

#include <string>
#include <vector>

#include "tutti/base/status.hpp"

namespace tutti::serve {

struct chat_message {
  std::string role, content;
};

struct chat_template_inputs {
  std::vector<chat_message> messages;
  std::string bos_token, eos_token;
  bool add_generation_prompt = true;
};

// The prompt text; an error is one line: raise_exception's message as the
// template wrote it, or "chat_template: ..." naming what is not supported
// or malformed.
expected<std::string> render_chat_template(const std::string& source,
                                           const chat_template_inputs& in);

} // namespace tutti::serve
