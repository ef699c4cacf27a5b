#pragma once
// What a process hosting a job's actors offers to the outside, the same for
// `tuttid` and for `tutti run`: its actors published behind a basp_guard
// (clients such as `tutti status`, `shell`, `logs` and `chaos` connect
// there), and the Prometheus /metrics endpoint.

#include <caf/actor_system.hpp>
#include <caf/io/middleman.hpp>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "tutti/runtime/basp_guard.hpp"
#include "tutti/runtime/metrics_board.hpp"
#include "tutti/base/status.hpp"
#include "tutti/net/metrics_endpoint.hpp"
#include "tutti/security/web_config.hpp"

namespace tutti {

// Publishes `handle` on loopback for the middleman (which must listen on
// loopback only: see basp_guard.hpp) and puts a basp_guard on host:port in
// front of it; the guard joins `guards`, which must outlive the use.
template <class Handle>
status publish_guarded(caf::actor_system& sys, const Handle& handle,
                       const std::string& host, int64_t port,
                       std::vector<std::unique_ptr<basp_guard>>& guards,
                       const basp_guard::tls_options& tls = {}) {
  auto inner = sys.middleman().publish(handle, 0, "127.0.0.1", true);
  if (!inner)
    return status::error("cannot listen on loopback: "
                         + sys.render(inner.error()));
  std::unique_ptr<basp_guard> guard;
  TUTTI_RETURN_IF_ERROR(
    basp_guard::start(host, static_cast<uint16_t>(port), *inner, guard, tls));
  guards.push_back(std::move(guard));
  return {};
}

// Serves GET /metrics on host:port: the boards' texts, in order (each
// board holds whole families, and no two boards the same family); with
// `web` (metrics.web_config) over HTTPS and behind basic auth as it says;
// `more_routes` (the dashboard's) on the same listener.
expected<std::unique_ptr<net::metrics_endpoint>> serve_metrics(
  const std::string& host, int64_t port,
  std::vector<std::shared_ptr<metrics_board>> boards,
  const security::web_config& web = {},
  const std::function<void(net::http_server&)>& more_routes = {});

// The boards' texts in order: what serve_metrics answers.
std::string read_boards(
  const std::vector<std::shared_ptr<metrics_board>>& boards);

} // namespace tutti
