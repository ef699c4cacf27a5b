#pragma once
// The values an HTTP handler sees and fills, on the server side of the net
// part (http_server.hpp). They are plain data: cpp-httplib, which does the
// parsing and writing, stays inside net/src, so no other part includes it.

#include <functional>
#include <map>
#include <string>

namespace tutti::net {

// Header names compare without regard to case (RFC 9110).
struct case_insensitive_less {
  bool operator()(const std::string& a, const std::string& b) const;
};
using header_map =
  std::multimap<std::string, std::string, case_insensitive_less>;
// Query string and form fields (application/x-www-form-urlencoded).
using param_map = std::multimap<std::string, std::string>;

struct http_request {
  std::string method;
  std::string path; // decoded, without the query string
  header_map headers;
  param_map params;
  std::string body;
  std::string remote_addr, local_addr; // numeric addresses of the two ends

  // The first value of a header or parameter; "" when there is none.
  std::string header(const std::string& name) const;
  std::string param(const std::string& name) const;
  bool has_param(const std::string& name) const;
};

// Where a streamed answer's chunks go (chunked transfer encoding).
struct chunk_sink {
  // False once the client is gone: the producer should stop.
  std::function<bool(const char* data, size_t size)> write;
  // The last chunk: the answer is complete.
  std::function<void()> done;
};

// Called again and again while the answer streams; false ends it at once
// (the client sees a truncated answer).
using chunk_producer = std::function<bool(chunk_sink& sink)>;
// Called once when a streamed answer is over: `completed` is false when it
// ended early (the client went away, or the producer gave up).
using stream_end = std::function<void(bool completed)>;

struct http_response {
  int status = 200;
  header_map headers;
  std::string body;
  std::string content_type;
  chunk_producer producer; // set by stream(): the body comes from it
  stream_end on_end;

  void set_content(std::string text, std::string type);
  // Replaces any earlier value of the header.
  void set_header(const std::string& name, const std::string& value);
  std::string header(const std::string& name) const;
  void stream(std::string type, chunk_producer produce, stream_end end = {});
  // Nothing has been put in the body yet (an error page may fill it).
  bool empty() const { return body.empty() && !producer; }
};

} // namespace tutti::net
