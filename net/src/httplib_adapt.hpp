#pragma once
// Between cpp-httplib's request and response and the net part's own
// (http_message.hpp), which is all the other parts see.

#include <httplib.h>

#include "tutti/net/http_message.hpp"

namespace tutti::net::detail {

http_request request_of(const httplib::Request& req);
// Moves `from` into `to`: status, headers, and the body or its producer.
void put_response(http_response&& from, httplib::Response& to);
// The same status and headers, for an error page to fill in.
http_response response_of(const httplib::Response& res);

} // namespace tutti::net::detail
