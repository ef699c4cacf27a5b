#pragma once
// Saying where a server listens and why it could not.

#include <cstdint>
#include <string>

namespace tutti::net::detail {

// "host:port", or "[host]:port" for an IPv6 address.
std::string host_port(const std::string& host, uint16_t port);

// Why host:port cannot be bound, as the system puts it ("Address already
// in use"): cpp-httplib's bind reports only that it failed, so the bind is
// tried again here to learn the reason.
std::string bind_failure(const std::string& host, uint16_t port);

} // namespace tutti::net::detail
