#include "httplib_adapt.hpp"

namespace tutti::net::detail {

http_request request_of(const httplib::Request& req) {
  http_request out;
  out.method = req.method;
  out.path = req.path;
  out.headers.insert(req.headers.begin(), req.headers.end());
  out.params = req.params;
  out.body = req.body;
  out.remote_addr = req.remote_addr;
  out.local_addr = req.local_addr;
  return out;
}

void put_response(http_response&& from, httplib::Response& to) {
  to.status = from.status;
  for (const auto& header : from.headers)
    to.headers.erase(header.first);
  for (const auto& [name, value] : from.headers)
    to.set_header(name, value);
  if (from.producer) {
    httplib::ContentProviderResourceReleaser releaser;
    if (from.on_end)
      releaser = std::move(from.on_end);
    to.set_chunked_content_provider(
      from.content_type,
      [produce = std::move(from.producer)](size_t, httplib::DataSink& sink) {
        chunk_sink out{[&sink](const char* data, size_t size) {
                         return sink.write(data, size);
                       },
                       [&sink] { sink.done(); }};
        return produce(out);
      },
      std::move(releaser));
  } else if (!from.content_type.empty()) {
    to.set_content(from.body, from.content_type);
  } else {
    to.body = std::move(from.body);
  }
}

http_response response_of(const httplib::Response& res) {
  http_response out;
  out.status = res.status;
  out.headers.insert(res.headers.begin(), res.headers.end());
  out.body = res.body;
  return out;
}

} // namespace tutti::net::detail
