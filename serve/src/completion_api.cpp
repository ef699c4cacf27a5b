#include "tutti/serve/completion_api.hpp"

#include <nlohmann/json.hpp>

#include "tutti/serve/chat_template.hpp"
#include "tutti/tokenizer/tokenizer.hpp"

namespace tutti::serve {

using json = nlohmann::json;

namespace {

std::string dump(const json& j) {
  // Tokens are bytes and may split a UTF-8 sequence: never throw on them.
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

parsed_completion refuse(std::string param, std::string message,
                         int status = 400) {
  parsed_completion p;
  p.http_status = status;
  p.param = std::move(param);
  p.message = std::move(message);
  return p;
}

// Text to tokens: the model's tokenizer, else one token per byte; false
// (and why) on a token past the vocabulary.
bool encode(const std::string& text, const served_model& model,
            std::vector<int32_t>& out, std::string& why) {
  const int64_t vocab = model.shape.vocab;
  if (model.text_tokenizer) {
    auto ids = model.text_tokenizer->encode(text);
    if (!ids) {
      why = ids.message();
      return false;
    }
    for (int32_t id : ids.value())
      if (id < 0 || id >= vocab) {
        why = "the tokenizer gave id " + std::to_string(id)
              + ", outside the model's vocabulary";
        return false;
      }
    out.insert(out.end(), ids.value().begin(), ids.value().end());
    return true;
  }
  for (unsigned char c : text) {
    if (c >= vocab) {
      why = "byte " + std::to_string(int(c))
            + " is outside the model's vocabulary of " + std::to_string(vocab)
            + " tokens (send token ids instead)";
      return false;
    }
    out.push_back(c);
  }
  return true;
}

json logprobs_json(const std::vector<sampled_token>& tokens,
                   int64_t text_offset, const served_model* m) {
  json j;
  j["tokens"] = json::array();
  j["token_logprobs"] = json::array();
  j["top_logprobs"] = json::array();
  j["text_offset"] = json::array();
  int64_t offset = text_offset;
  for (const auto& t : tokens) {
    const auto text = token_text(m, t.token);
    j["tokens"].push_back(text);
    j["token_logprobs"].push_back(t.logprob);
    json top = json::object();
    for (const auto& [tok, lp] : t.top)
      top[token_text(m, tok)] = lp;
    j["top_logprobs"].push_back(top);
    j["text_offset"].push_back(offset);
    offset += static_cast<int64_t>(text.size());
  }
  return j;
}

// Chat's shape: {"content": [{token, logprob, bytes, top_logprobs}]}.
json chat_logprobs_json(const std::vector<sampled_token>& tokens,
                        const served_model* m) {
  auto entry = [&](int32_t token, double logprob) {
    const auto text = token_text(m, token);
    json bytes = json::array();
    for (unsigned char c : text)
      bytes.push_back(int(c));
    return json{{"token", text}, {"logprob", logprob}, {"bytes", bytes}};
  };
  json content = json::array();
  for (const auto& t : tokens) {
    json e = entry(t.token, t.logprob);
    e["top_logprobs"] = json::array();
    for (const auto& [tok, lp] : t.top)
      e["top_logprobs"].push_back(entry(tok, lp));
    content.push_back(e);
  }
  return json{{"content", content}};
}

// One choice of either API: text and logprobs where a completion has them,
// a message (a delta when streamed) where a chat answer does.
json choice_json(const std::vector<sampled_token>& tokens, int64_t text_offset,
                 finish_reason finish, const completion_options& o,
                 const served_model* m, bool streamed) {
  std::string text;
  json ids = json::array();
  for (const auto& t : tokens) {
    text += token_text(m, t.token);
    ids.push_back(t.token);
  }
  json choice;
  choice["index"] = 0;
  if (o.chat) {
    json message = {{"content", text}};
    if (!streamed || text_offset == 0)
      message["role"] = "assistant";
    choice[streamed ? "delta" : "message"] = message;
    choice["logprobs"] = o.logprobs ? chat_logprobs_json(tokens, m)
                                    : json(nullptr);
  } else {
    choice["text"] = text;
    choice["logprobs"] = o.logprobs ? logprobs_json(tokens, text_offset, m)
                                    : json(nullptr);
  }
  choice["token_ids"] = ids;
  choice["finish_reason"] = finish == finish_reason::none
                              ? json(nullptr)
                              : json(finish_reason_name(finish));
  return choice;
}

const char* object_name(const completion_options& o, bool streamed) {
  if (!o.chat)
    return "text_completion";
  return streamed ? "chat.completion.chunk" : "chat.completion";
}

} // namespace

std::string token_text(int32_t token) {
  if (token >= 0 && token < 256)
    return std::string(1, static_cast<char>(token));
  return "<|" + std::to_string(token) + "|>";
}

std::string token_text(const served_model* m, int32_t token) {
  if (!m || !m->text_tokenizer || m->text_tokenizer->kind() == "bytes")
    return token_text(token);
  const auto& tok = *m->text_tokenizer;
  if (token == tok.bos_id() || token == tok.eos_id())
    return {};
  // SentencePiece pieces: U+2581 stands for a space, <0xNN> for a byte.
  auto piece = tok.piece(token);
  if (piece.size() == 6 && piece.compare(0, 3, "<0x") == 0
      && piece.back() == '>')
    return std::string(
      1, static_cast<char>(std::stoi(piece.substr(3, 2), nullptr, 16)));
  std::string out;
  static const std::string space = "\xe2\x96\x81";
  for (size_t i = 0; i < piece.size();) {
    if (piece.compare(i, space.size(), space) == 0) {
      out += ' ';
      i += space.size();
    } else {
      out += piece[i++];
    }
  }
  return out;
}

std::string error_body(const std::string& message, const std::string& type,
                       const std::string& param, const std::string& code) {
  json e;
  e["message"] = message;
  e["type"] = type;
  e["param"] = param.empty() ? json(nullptr) : json(param);
  e["code"] = code.empty() ? json(nullptr) : json(code);
  return dump(json{{"error", e}});
}

namespace {

// The `model` field: absent, or the served model's name (404 otherwise).
parsed_completion parse_model(const json& j, const served_model& model,
                              completion_options& o) {
  if (j.contains("model")) {
    if (!j["model"].is_string())
      return refuse("model", "model must be a string");
    o.model = j["model"].get<std::string>();
    if (o.model != model.name)
      return refuse("model",
                    "the model '" + o.model
                      + "' does not exist; this server serves '" + model.name
                      + "'",
                    404);
  } else {
    o.model = model.name;
  }

  return {};
}

// The fields both endpoints share: max_tokens, sampling, logprobs, stream,
// n, stop. `r` holds the prompt already.
parsed_completion parse_generation(const json& j, const served_model& model,
                                   uint64_t random_seed,
                                   std::unique_ptr<request> r,
                                   completion_options o) {
  std::string why;
  auto integer = [&](const char* key, int64_t lo, int64_t hi,
                     int64_t& out) -> bool {
    if (!j.contains(key) || j[key].is_null())
      return true;
    if (!j[key].is_number_integer() || j[key].get<int64_t>() < lo
        || j[key].get<int64_t>() > hi) {
      why = std::string(key) + " must be an integer in [" + std::to_string(lo)
            + ", " + std::to_string(hi) + "]";
      return false;
    }
    out = j[key].get<int64_t>();
    return true;
  };
  auto number = [&](const char* key, double lo, double hi, bool open_lo,
                    double& out) -> bool {
    if (!j.contains(key) || j[key].is_null())
      return true;
    const bool ok = j[key].is_number()
                    && (open_lo ? j[key].get<double>() > lo
                                : j[key].get<double>() >= lo)
                    && j[key].get<double>() <= hi;
    if (!ok) {
      why = std::string(key) + " must be a number in " + (open_lo ? "(" : "[")
            + std::to_string(lo) + ", " + std::to_string(hi) + "]";
      return false;
    }
    out = j[key].get<double>();
    return true;
  };
  auto flag = [&](const char* key, bool& out) -> bool {
    if (!j.contains(key) || j[key].is_null())
      return true;
    if (!j[key].is_boolean()) {
      why = std::string(key) + " must be true or false";
      return false;
    }
    out = j[key].get<bool>();
    return true;
  };

  // OpenAI's defaults: 16 tokens for a completion; a chat answer runs to
  // its end-of-turn token or as far as the service allows (0).
  r->max_tokens = o.chat ? 0 : 16;
  int64_t n = 1, top_k = -1, logprobs = -1, seed = -1;
  bool echo = false;
  auto& p = r->sampling;
  if (o.chat && !integer("max_completion_tokens", 1, INT32_MAX, r->max_tokens))
    return refuse("max_completion_tokens", why);
  if (!integer("max_tokens", 1, INT32_MAX, r->max_tokens))
    return refuse("max_tokens", why);
  if (!number("temperature", 0, 2, false, p.temperature))
    return refuse("temperature", why);
  if (!number("top_p", 0, 1, true, p.top_p))
    return refuse("top_p", why);
  if (!integer("top_k", -1, INT32_MAX, top_k))
    return refuse("top_k", why);
  p.top_k = top_k > 0 ? top_k : 0;
  if (!integer("seed", INT64_MIN, INT64_MAX, seed))
    return refuse("seed", why);
  p.seed = j.contains("seed") && !j["seed"].is_null()
             ? static_cast<uint64_t>(seed)
             : random_seed;
  if (o.chat) {
    // Chat asks with a flag and counts alternatives in top_logprobs.
    bool wanted = false;
    int64_t top = 0;
    if (!flag("logprobs", wanted))
      return refuse("logprobs", why);
    if (!integer("top_logprobs", 0, 5, top))
      return refuse("top_logprobs", why);
    if (top > 0 && !wanted)
      return refuse("top_logprobs", "top_logprobs needs logprobs: true");
    logprobs = wanted ? top : -1;
  } else if (!integer("logprobs", 0, 5, logprobs)) {
    return refuse("logprobs", why);
  }
  o.logprobs = logprobs >= 0;
  p.logprobs = logprobs;
  if (!flag("stream", o.stream))
    return refuse("stream", why);
  if (!integer("n", 1, 1, n))
    return refuse("n", "n must be 1 (one completion per request)");
  if (!o.chat && (!flag("echo", echo) || echo))
    return refuse("echo", "echo is not supported");
  if (j.contains("stop") && !j["stop"].is_null()) {
    json stop = j["stop"];
    if (stop.is_string())
      stop = json::array({stop});
    if (!stop.is_array() || stop.size() > 4)
      return refuse("stop", "stop must be a string or a list of up to 4");
    for (const auto& s1 : stop) {
      if (!s1.is_string() || s1.get<std::string>().empty())
        return refuse("stop", "each stop sequence must be a non-empty string");
      std::vector<int32_t> seq;
      if (!encode(s1.get<std::string>(), model, seq, why) || seq.empty())
        return refuse("stop", "stop sequence: " + why);
      r->stop.push_back(std::move(seq));
    }
  }
  parsed_completion out;
  out.req = std::move(r);
  out.options = o;
  return out;
}

} // namespace

parsed_completion parse_completion(const std::string& body,
                                   const served_model& model,
                                   uint64_t random_seed) {
  const auto j = json::parse(body, nullptr, false);
  if (j.is_discarded() || !j.is_object())
    return refuse("", "the body must be a JSON object");
  const auto& s = model.shape;
  auto r = std::make_unique<request>();
  completion_options o;
  if (auto bad = parse_model(j, model, o); bad.http_status != 0)
    return bad;

  // prompt: text, token ids, or a list of exactly one of them.
  if (!j.contains("prompt"))
    return refuse("prompt", "prompt is required");
  json prompt = j["prompt"];
  if (prompt.is_array() && prompt.size() == 1
      && (prompt[0].is_string() || prompt[0].is_array()))
    prompt = prompt[0];
  std::string why;
  if (prompt.is_string()) {
    if (!encode(prompt.get<std::string>(), model, r->prompt, why))
      return refuse("prompt", why);
  } else if (prompt.is_array()) {
    for (const auto& t : prompt) {
      if (!t.is_number_integer())
        return refuse("prompt", "prompt must be a string or a list of token "
                                "ids (one prompt per request)");
      const auto id = t.get<int64_t>();
      if (id < 0 || id >= s.vocab)
        return refuse("prompt", "token id " + std::to_string(id)
                                  + " is outside the vocabulary of "
                                  + std::to_string(s.vocab));
      r->prompt.push_back(static_cast<int32_t>(id));
    }
  } else {
    return refuse("prompt", "prompt must be a string or a list of token ids");
  }
  if (r->prompt.empty())
    return refuse("prompt", "prompt is empty");

  return parse_generation(j, model, random_seed, std::move(r), o);
}

parsed_completion parse_chat(const std::string& body, const served_model& model,
                             uint64_t random_seed) {
  const auto j = json::parse(body, nullptr, false);
  if (j.is_discarded() || !j.is_object())
    return refuse("", "the body must be a JSON object");
  completion_options o;
  o.chat = true;
  if (auto bad = parse_model(j, model, o); bad.http_status != 0)
    return bad;
  if (model.chat_template.empty())
    return refuse("", "the model '" + model.name
                        + "' has no chat_template (tokenizer_config.json in "
                          "its directory); use /v1/completions");
  if (!j.contains("messages") || !j["messages"].is_array())
    return refuse("messages", "messages must be a list of messages");
  if (j["messages"].empty())
    return refuse("messages", "messages is empty");
  chat_template_inputs in;
  in.bos_token = model.bos_token;
  in.eos_token = model.eos_token;
  in.add_generation_prompt = true;
  for (size_t i = 0; i < j["messages"].size(); ++i) {
    const auto& m = j["messages"][i];
    const auto field = "messages[" + std::to_string(i) + "]";
    if (!m.is_object())
      return refuse(field, field + " must be an object");
    for (const char* key : {"role", "content"})
      if (!m.contains(key) || !m[key].is_string())
        return refuse(field + "." + key,
                      field + "." + key + " must be a string");
    in.messages.push_back(
      {m["role"].get<std::string>(), m["content"].get<std::string>()});
  }
  auto text = render_chat_template(model.chat_template, in);
  if (!text)
    return refuse("messages", text.message());
  auto r = std::make_unique<request>();
  std::string why;
  if (!encode(text.value(), model, r->prompt, why))
    return refuse("messages", why);
  if (r->prompt.empty())
    return refuse("messages", "the chat template rendered an empty prompt");
  auto out = parse_generation(j, model, random_seed, std::move(r), o);
  if (!out.req)
    return out;
  // The assistant's turn ends at the end-of-document token, or at the text
  // of eos_token or (ChatML templates) <|im_end|>; none of them is output.
  if (model.text_tokenizer && model.text_tokenizer->eos_id() >= 0)
    out.req->stop.push_back({model.text_tokenizer->eos_id()});
  std::vector<std::string> ends = {model.eos_token};
  if (model.chat_template.find("<|im_end|>") != std::string::npos)
    ends.push_back("<|im_end|>");
  for (const auto& end : ends) {
    std::vector<int32_t> seq;
    if (!end.empty() && encode(end, model, seq, why) && !seq.empty())
      out.req->stop.push_back(std::move(seq));
  }
  return out;
}

std::string completion_body(const std::string& id, const std::string& model,
                            int64_t created, const completion_result& r,
                            const completion_options& o,
                            const served_model* m) {
  json j;
  j["id"] = id;
  j["object"] = object_name(o, false);
  j["created"] = created;
  j["model"] = model;
  j["choices"] = json::array({choice_json(r.tokens, 0, r.finish, o, m, false)});
  const auto completion = static_cast<int64_t>(r.tokens.size());
  j["usage"] = {{"prompt_tokens", r.prompt_tokens},
                {"completion_tokens", completion},
                {"total_tokens", r.prompt_tokens + completion}};
  return dump(j);
}

std::string stream_chunk(const std::string& id, const std::string& model,
                         int64_t created, const std::vector<sampled_token>& t,
                         int64_t text_offset, finish_reason finish,
                         const completion_options& o, const served_model* m) {
  json j;
  j["id"] = id;
  j["object"] = object_name(o, true);
  j["created"] = created;
  j["model"] = model;
  j["choices"] = json::array({choice_json(t, text_offset, finish, o, m, true)});
  return "data: " + dump(j) + "\n\n";
}

std::string models_body(const served_model& model, int64_t created) {
  json m;
  m["id"] = model.name;
  m["object"] = "model";
  m["created"] = created;
  m["owned_by"] = "tutti";
  m["max_model_len"] = model.shape.max_positions;
  return dump(json{{"object", "list"}, {"data", json::array({m})}});
}

} // namespace tutti::serve
