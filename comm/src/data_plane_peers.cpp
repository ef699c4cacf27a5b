#include "tutti/comm/data_plane_peers.hpp"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>

#include <cstring>
#include <fstream>
#include <set>
#include <sstream>

namespace tutti::comm {

namespace {

// Every address `host` resolves to, as text (inet_ntop's).
status resolve(const std::string& host, std::set<std::string>& out) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (int rc = ::getaddrinfo(host.c_str(), nullptr, &hints, &found); rc != 0)
    return status::error("cannot resolve cluster node " + host + ": "
                         + gai_strerror(rc));
  for (auto* a = found; a; a = a->ai_next) {
    char text[INET6_ADDRSTRLEN] = "";
    const void* addr =
      a->ai_family == AF_INET
        ? static_cast<const void*>(
          &reinterpret_cast<sockaddr_in*>(a->ai_addr)->sin_addr)
        : static_cast<const void*>(
          &reinterpret_cast<sockaddr_in6*>(a->ai_addr)->sin6_addr);
    if (::inet_ntop(a->ai_family, addr, text, sizeof(text)))
      out.insert(text);
  }
  ::freeaddrinfo(found);
  return {};
}

// /proc/net/tcp's "0100007F:1F90": the address as the kernel stores it
// (32-bit words in host order) and the port in hex.
bool parse_endpoint(const std::string& field, bool v6, std::string& address,
                    unsigned& port) {
  const auto colon = field.find(':');
  if (colon == std::string::npos)
    return false;
  const auto hex = field.substr(0, colon);
  port = static_cast<unsigned>(
    std::stoul(field.substr(colon + 1), nullptr, 16));
  unsigned char bytes[16];
  const size_t words = v6 ? 4 : 1;
  if (hex.size() != words * 8)
    return false;
  for (size_t w = 0; w < words; ++w) {
    const uint32_t word = static_cast<uint32_t>(
      std::stoul(hex.substr(w * 8, 8), nullptr, 16));
    std::memcpy(bytes + w * 4, &word, 4);
  }
  char text[INET6_ADDRSTRLEN] = "";
  if (!::inet_ntop(v6 ? AF_INET6 : AF_INET, bytes, text, sizeof(text)))
    return false;
  address = text;
  // An IPv4 peer on an IPv6 socket: ::ffff:a.b.c.d.
  if (v6 && address.rfind("::ffff:", 0) == 0)
    address = address.substr(7);
  return true;
}

} // namespace

expected<std::vector<std::string>> non_member_peers(
  uint16_t port, const std::vector<std::string>& members) {
  std::set<std::string> allowed;
  for (const auto& host : members)
    TUTTI_RETURN_IF_ERROR(resolve(host, allowed));
  std::vector<std::string> out;
  for (const bool v6 : {false, true}) {
    std::ifstream in(v6 ? "/proc/self/net/tcp6" : "/proc/self/net/tcp");
    if (!in) {
      if (v6)
        continue; // no IPv6 in this kernel
      return status::error("cannot read /proc/self/net/tcp");
    }
    std::string line;
    std::getline(in, line); // the header
    while (std::getline(in, line)) {
      std::istringstream fields(line);
      std::string slot, local, remote, state;
      if (!(fields >> slot >> local >> remote >> state))
        continue;
      if (state != "01") // TCP_ESTABLISHED
        continue;
      std::string local_address, remote_address;
      unsigned local_port = 0, remote_port = 0;
      if (!parse_endpoint(local, v6, local_address, local_port)
          || !parse_endpoint(remote, v6, remote_address, remote_port))
        continue;
      if (local_port == port && !allowed.count(remote_address))
        out.push_back(remote_address + ":" + std::to_string(remote_port));
    }
  }
  return out;
}

} // namespace tutti::comm
