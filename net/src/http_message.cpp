#include "tutti/net/http_message.hpp"

#include <algorithm>
#include <cctype>

namespace tutti::net {

bool case_insensitive_less::operator()(const std::string& a,
                                       const std::string& b) const {
  return std::lexicographical_compare(a.begin(), a.end(), b.begin(), b.end(),
                                      [](unsigned char x, unsigned char y) {
                                        return std::tolower(x)
                                               < std::tolower(y);
                                      });
}

namespace {

template <class Map>
std::string first_value(const Map& map, const std::string& key) {
  auto it = map.find(key);
  return it == map.end() ? std::string() : it->second;
}

} // namespace

std::string http_request::header(const std::string& name) const {
  return first_value(headers, name);
}

std::string http_request::param(const std::string& name) const {
  return first_value(params, name);
}

bool http_request::has_param(const std::string& name) const {
  return params.count(name) > 0;
}

void http_response::set_content(std::string text, std::string type) {
  body = std::move(text);
  content_type = std::move(type);
}

void http_response::set_header(const std::string& name,
                               const std::string& value) {
  headers.erase(name);
  headers.emplace(name, value);
}

std::string http_response::header(const std::string& name) const {
  return first_value(headers, name);
}

void http_response::stream(std::string type, chunk_producer produce,
                           stream_end end) {
  content_type = std::move(type);
  producer = std::move(produce);
  on_end = std::move(end);
}

} // namespace tutti::net
