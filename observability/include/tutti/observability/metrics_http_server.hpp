#pragma once
// A minimal HTTP/1.1 server for Prometheus scrapes, on its own thread.
//
// It serves one connection at a time (scrapes are rare and small), answers
// GET /metrics with render()'s text and closes the connection. Every read and
// write has a deadline and the stop signal wakes every wait, so bad clients
// (garbage, half-open connections, slowloris) cost at most a few seconds of
// service and never delay shutdown.

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "tutti/base/status.hpp"

namespace tutti::observability {

class metrics_http_server {
public:
  // Binds host:port (port 0 picks a free port; see port()) and starts
  // serving. A failure is one line naming host:port and the system's
  // reason. render() runs on the server thread,
  // once per scrape; if it throws, the scrape gets a 500.
  static expected<std::unique_ptr<metrics_http_server>> start(
    const std::string& host, uint16_t port,
    std::function<std::string()> render);

  // Stops promptly (well under a second), even with a client mid-request.
  ~metrics_http_server();

  metrics_http_server(const metrics_http_server&) = delete;
  metrics_http_server& operator=(const metrics_http_server&) = delete;

  // The port actually bound.
  uint16_t port() const { return port_; }

private:
  metrics_http_server(int listen_fd, int stop_read_fd, int stop_write_fd,
                      uint16_t port, std::function<std::string()> render);
  void serve() noexcept;
  void handle_connection(int fd);

  int listen_fd_;
  int stop_read_fd_; // readable once the destructor asks the thread to stop
  int stop_write_fd_;
  uint16_t port_;
  std::function<std::string()> render_;
  std::thread thread_;
};

} // namespace tutti::observability
