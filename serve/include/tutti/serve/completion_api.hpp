#pragma once
// OpenAI's completions and chat completions APIs as JSON: parsing a POST
// /v1/completions or /v1/chat/completions body into a request, and the
// response, stream chunk and error bodies. Text
// goes through the model's tokenizer where it ships one; otherwise tokens
// are bytes: text is UTF-8 bytes, token t < 256 is byte t (a token past 255
// prints as <|t|>). Pure functions; no HTTP.

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "tutti/serve/model.hpp"
#include "tutti/serve/request.hpp"

namespace tutti::serve {

struct completion_options {
  bool stream = false;
  bool logprobs = false; // report logprobs (top alternatives: sampling)
  bool chat = false;     // chat.completion shapes, not text_completion
  std::string model;     // as the client named it
};

struct parsed_completion {
  std::unique_ptr<request> req; // prompt, max_tokens, sampling, stop
  completion_options options;
  // A refusal: HTTP status (400, 404), the offending field and why.
  int http_status = 0;
  std::string param, message;
};

// `random_seed` is used when the body has no seed.
parsed_completion parse_completion(const std::string& body,
                                   const served_model& model,
                                   uint64_t random_seed);

// POST /v1/chat/completions: `messages` rendered with the model's chat
// template (a refusal where it has none), the shared fields as above
// (logprobs as a flag with top_logprobs), and generation stopped at the
// model's end-of-turn tokens.
parsed_completion parse_chat(const std::string& body, const served_model& model,
                             uint64_t random_seed);

std::string token_text(int32_t token);
// Token text with the model's tokenizer (SentencePiece pieces, U+2581 as a
// space), byte-level without one or with no model.
std::string token_text(const served_model* model, int32_t token);

// {"error": {"message", "type", "param", "code"}}
std::string error_body(const std::string& message, const std::string& type,
                       const std::string& param = {},
                       const std::string& code = {});

struct completion_result {
  std::vector<sampled_token> tokens;
  finish_reason finish = finish_reason::none;
  int64_t prompt_tokens = 0;
};

// The whole response of a non-streamed request.
std::string completion_body(const std::string& id, const std::string& model,
                            int64_t created, const completion_result& r,
                            const completion_options& o,
                            const served_model* m = nullptr);

// One server-sent event ("data: {...}\n\n") with these tokens, and the
// finish reason on the last.
std::string stream_chunk(const std::string& id, const std::string& model,
                         int64_t created, const std::vector<sampled_token>& t,
                         int64_t text_offset, finish_reason finish,
                         const completion_options& o,
                         const served_model* m = nullptr);

std::string models_body(const served_model& model, int64_t created);

} // namespace tutti::serve
