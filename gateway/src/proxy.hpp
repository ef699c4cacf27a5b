#pragma once
// Forwarding one POST /v1/completions or /v1/chat/completions (the
// request's path) to replicas, with the retries and
// outcomes gateway.hpp describes; the gateway's error answer.

#include <string>

#include "tutti/net/http_message.hpp"

namespace tutti::gateway {

class fleet;

// {"error":{"message":MSG,"type":TYPE,"code":STATUS}}, the gateway's one
// error shape (OpenAI's).
void send_error(net::http_response& res, int status, const std::string& msg,
                const std::string& type);

void proxy_completion(fleet& f, const net::http_request& req,
                      net::http_response& res);

} // namespace tutti::gateway
