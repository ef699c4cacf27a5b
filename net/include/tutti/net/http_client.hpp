#pragma once
// tutti's one HTTP client (cpp-httplib underneath): the gateway's probes
// and forwarding, `tutti bench serve`, the commands that reach a service
// or a gateway. Every request has a connect, read and write time limit;
// over HTTPS the server's certificate is checked against a CA file under
// the name it should give. A request that gets no answer fails as a value
// whose message is the transport's reason ("Could not establish
// connection", ...); last_failure() says which kind it was.

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "tutti/base/status.hpp"
#include "tutti/net/http_message.hpp"

namespace tutti::net {

struct client_tls {
  std::string ca_file;             // checks the server's certificate
  std::string cert_file, key_file; // shown when the server asks for one
  // The name the server's certificate gives, where it is not the host
  // connected to (a certificate naming node-0, reached at 127.0.0.1).
  std::string server_name;
};

struct client_options {
  std::string host;
  uint16_t port = 0;
  std::optional<client_tls> tls; // HTTPS when set
  std::chrono::microseconds connect_timeout = std::chrono::seconds(5);
  std::chrono::microseconds read_timeout = std::chrono::seconds(30);
  std::chrono::microseconds write_timeout = std::chrono::seconds(30);
  std::string bearer_token; // sent as Authorization: Bearer when not empty
};

struct http_reply {
  int status = 0;
  header_map headers;
  std::string body; // empty for a streamed request (the sink took it)

  std::string header(const std::string& name) const;
};

enum class transport_failure {
  none,
  connection,       // nothing accepted the connection
  tls_verification, // the server's certificate did not check
  canceled,         // a stream callback asked to stop
  other             // read, write, time limit, TLS, ...
};

// What a streamed request does with the answer as it arrives: on_head
// sees the status and headers, then on_body each piece of the body
// (whatever the status). Either returning false ends the request, which
// then fails as `canceled`.
struct reply_stream {
  std::function<bool(int status, const header_map& headers)> on_head;
  std::function<bool(const char* data, size_t size)> on_body;
};

class http_client {
public:
  explicit http_client(client_options options);
  ~http_client();
  http_client(const http_client&) = delete;
  http_client& operator=(const http_client&) = delete;

  expected<http_reply> get(const std::string& path,
                           const header_map& headers = {});
  expected<http_reply> post(const std::string& path, const std::string& body,
                            const std::string& content_type,
                            const header_map& headers = {});
  // The fields as application/x-www-form-urlencoded.
  expected<http_reply> post_form(const std::string& path,
                                 const param_map& fields);
  expected<http_reply> post_streamed(const std::string& path,
                                     const std::string& body,
                                     const std::string& content_type,
                                     const reply_stream& stream);

  // Why the last request failed (none after one that got an answer).
  transport_failure last_failure() const { return last_failure_; }

  struct impl;

private:
  std::unique_ptr<impl> impl_;
  transport_failure last_failure_ = transport_failure::none;
};

} // namespace tutti::net
