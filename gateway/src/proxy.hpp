#pragma once
// Forwarding one POST /v1/completions to replicas, with the retries and
// outcomes gateway.hpp describes; the gateway's error answer.

#include <string>

namespace httplib {
struct Request;
struct Response;
} // namespace httplib

namespace tutti::gateway {

class fleet;

// {"error":{"message":MSG,"type":TYPE,"code":STATUS}}, the gateway's one
// error shape (OpenAI's).
void send_error(httplib::Response& res, int status, const std::string& msg,
                const std::string& type);

void proxy_completion(fleet& f, const httplib::Request& req,
                      httplib::Response& res);

} // namespace tutti::gateway
