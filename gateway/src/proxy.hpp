#pragma once
// Forwarding one POST /v1/completions to replicas, with the retries and
// outcomes gateway.hpp describes.

namespace httplib {
struct Request;
struct Response;
} // namespace httplib

namespace tutti::gateway {

class fleet;

void proxy_completion(fleet& f, const httplib::Request& req,
                      httplib::Response& res);

} // namespace tutti::gateway
