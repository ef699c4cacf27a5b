#include "tutti/net/http_client.hpp"

#include <httplib.h>

namespace tutti::net {

struct http_client::impl {
  std::unique_ptr<httplib::Client> client;
};

namespace {

template <class Duration>
std::pair<time_t, time_t> seconds_and_micros(Duration d) {
  const auto us =
    std::chrono::duration_cast<std::chrono::microseconds>(d).count();
  return {static_cast<time_t>(us / 1000000), static_cast<time_t>(us % 1000000)};
}

std::unique_ptr<httplib::Client> make_client(const client_options& o) {
  std::unique_ptr<httplib::Client> c;
  if (!o.tls) {
    c = std::make_unique<httplib::Client>(o.host, o.port);
  } else {
    // Connects to `host` but speaks to (and checks the certificate of) the
    // name the certificate gives.
    const auto& t = *o.tls;
    const auto name = t.server_name.empty() ? o.host : t.server_name;
    c = std::make_unique<httplib::Client>("https://" + name + ":"
                                            + std::to_string(o.port),
                                          t.cert_file, t.key_file);
    if (name != o.host)
      c->set_hostname_addr_map({{name, o.host}});
    c->set_ca_cert_path(t.ca_file);
    c->enable_server_certificate_verification(true);
  }
  auto [cs, cus] = seconds_and_micros(o.connect_timeout);
  c->set_connection_timeout(cs, cus);
  auto [rs, rus] = seconds_and_micros(o.read_timeout);
  c->set_read_timeout(rs, rus);
  auto [ws, wus] = seconds_and_micros(o.write_timeout);
  c->set_write_timeout(ws, wus);
  if (!o.bearer_token.empty())
    c->set_bearer_token_auth(o.bearer_token);
  return c;
}

httplib::Headers headers_of(const header_map& headers) {
  return httplib::Headers(headers.begin(), headers.end());
}

header_map headers_of(const httplib::Headers& headers) {
  return header_map(headers.begin(), headers.end());
}

transport_failure failure_of(httplib::Error e) {
  switch (e) {
  case httplib::Error::Success:
    return transport_failure::none;
  case httplib::Error::Connection:
    return transport_failure::connection;
  case httplib::Error::SSLServerVerification:
    return transport_failure::tls_verification;
  case httplib::Error::Canceled:
    return transport_failure::canceled;
  default:
    return transport_failure::other;
  }
}

} // namespace

std::string http_reply::header(const std::string& name) const {
  auto it = headers.find(name);
  return it == headers.end() ? std::string() : it->second;
}

http_client::http_client(client_options options)
  : impl_(std::make_unique<impl>()) {
  impl_->client = make_client(options);
}

http_client::~http_client() = default;

namespace {

expected<http_reply> reply_of(httplib::Result result,
                              transport_failure& failure) {
  failure = failure_of(result.error());
  if (!result) {
    if (failure == transport_failure::none)
      failure = transport_failure::other;
    return status::error(httplib::to_string(result.error()));
  }
  http_reply out;
  out.status = result->status;
  out.headers = headers_of(result->headers);
  out.body = std::move(result->body);
  return out;
}

} // namespace

expected<http_reply> http_client::get(const std::string& path,
                                      const header_map& headers) {
  return reply_of(impl_->client->Get(path, headers_of(headers)), last_failure_);
}

expected<http_reply> http_client::post(const std::string& path,
                                       const std::string& body,
                                       const std::string& content_type,
                                       const header_map& headers) {
  return reply_of(
    impl_->client->Post(path, headers_of(headers), body, content_type),
    last_failure_);
}

expected<http_reply> http_client::post_form(const std::string& path,
                                            const param_map& fields) {
  return reply_of(
    impl_->client->Post(path, httplib::Params(fields.begin(), fields.end())),
    last_failure_);
}

expected<http_reply> http_client::post_streamed(const std::string& path,
                                                const std::string& body,
                                                const std::string& content_type,
                                                const reply_stream& stream) {
  httplib::Request req;
  req.method = "POST";
  req.path = path;
  req.body = body;
  req.set_header("Content-Type", content_type);
  req.response_handler = [&stream](const httplib::Response& r) {
    return !stream.on_head || stream.on_head(r.status, headers_of(r.headers));
  };
  req.content_receiver = [&stream](const char* data, size_t size, uint64_t,
                                   uint64_t) {
    return !stream.on_body || stream.on_body(data, size);
  };
  return reply_of(impl_->client->send(req), last_failure_);
}

} // namespace tutti::net
