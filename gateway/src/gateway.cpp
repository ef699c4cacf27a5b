#include "tutti/gateway/gateway.hpp"

#include <nlohmann/json.hpp>

#include <caf/actor_system.hpp>
#include <caf/event_based_actor.hpp>
#include <caf/stateful_actor.hpp>

#include <atomic>

#include "proxy.hpp"
#include "tutti/runtime/system_config.hpp"
#include "tutti/gateway/autoscale.hpp"
#include "tutti/gateway/rollout.hpp"
#include "tutti/net/http_client.hpp"
#include "tutti/net/http_server.hpp"
#include "tutti/observability/prometheus_text.hpp"
#include "tutti/protocol/type_ids.hpp"
#include "tutti/security/admin_access.hpp"
#include "tutti/serve/api_auth.hpp"
#include "tutti/config/serve_config.hpp"

namespace tutti::gateway {

namespace {

const char* json_type = "application/json";

net::client_options replica_client(const replica_address& a,
                                   std::chrono::microseconds connect,
                                   std::chrono::microseconds read) {
  net::client_options o;
  o.host = a.host;
  o.port = a.port;
  o.connect_timeout = connect;
  o.read_timeout = read;
  return o;
}

// GET /ready of a replica within `timeout_s`.
bool ready(const replica_address& a, double timeout_s) {
  const auto limit = std::chrono::duration_cast<std::chrono::microseconds>(
    std::chrono::duration<double>(timeout_s));
  net::http_client cli(replica_client(a, limit, limit));
  auto r = cli.get("/ready");
  return r && r->status == 200;
}

struct control_state {
  static inline const char* name = "gateway_control";
};

} // namespace

struct gateway::impl {
  explicit impl(const gateway_config& cfg, launcher l)
    : f(cfg), launch(std::move(l)), stable_config(cfg.stable.serve_config) {}

  fleet f;
  security::admin_access admin; // who may use /admin/
  launcher launch;
  std::string stable_config; // what autoscaling starts
  std::unique_ptr<net::http_server> server;
  uint16_t port = 0;
  tutti_system_config actor_config;
  std::unique_ptr<caf::actor_system> system;
  caf::actor control;
  std::atomic<bool> stopping{false};

  // Starts a replica of `config` (lock held). Null after an event if the
  // start failed.
  std::shared_ptr<replica> start_replica(const std::string& group,
                                         const std::string& version,
                                         const std::string& config,
                                         replica_role role) {
    auto l = launch ? launch(config)
                    : expected<launched>(status::error("no launcher"));
    const auto id = group + "-" + std::to_string(f.next_replica_id++);
    if (!l) {
      f.event("start_failed", id + ": " + l.message());
      return nullptr;
    }
    auto r = std::make_shared<replica>(id, group, version, l.value().address,
                                       f.cfg);
    r->process = l.value().process;
    r->role = role;
    f.replicas.push_back(r);
    f.event("started", id + " (" + version + ") on " + r->address.host + ":"
                         + std::to_string(r->address.port) + " as "
                         + role_name(role));
    return r;
  }

  void add_group(const replica_group& g, const std::string& group,
                 int64_t count) {
    std::lock_guard<std::mutex> lock(f.mutex);
    for (const auto& a : g.replicas) {
      auto r = std::make_shared<replica>(
        group + "-" + std::to_string(f.next_replica_id++), group, g.version,
        a, f.cfg);
      f.replicas.push_back(r);
    }
    for (int64_t i = 0; i < count; ++i)
      start_replica(group, g.version, g.serve_config, replica_role::serving);
  }

  // One round of the control actor: probe, then judge and scale.
  void tick() {
    std::vector<std::pair<std::shared_ptr<replica>, replica_address>> probe;
    {
      std::lock_guard<std::mutex> lock(f.mutex);
      for (const auto& r : f.replicas)
        probe.emplace_back(r, r->address);
    }
    std::vector<bool> up;
    for (const auto& [r, a] : probe)
      up.push_back(!stopping && ready(a, f.cfg.health_timeout_s));
    std::lock_guard<std::mutex> lock(f.mutex);
    const auto now = clock::now();
    for (size_t i = 0; i < probe.size(); ++i) {
      auto& r = *probe[i].first;
      if (up[i]) {
        if (!r.healthy)
          f.event("replica_up", r.id + " answers /ready"
                                  + (r.ready_at == clock::time_point{}
                                       ? " (first time, "
                                           + std::to_string(
                                             std::chrono::duration<double>(
                                               now - r.started)
                                               .count())
                                           + " s after its start)"
                                       : std::string()));
        if (r.ready_at == clock::time_point{})
          r.ready_at = now;
        r.healthy = true;
        r.probe_failures = 0;
      } else {
        ++r.probe_failures;
        if (r.healthy)
          f.event("replica_down", r.id + " failed its health check");
        r.healthy = false;
      }
    }
    restart_exited();
    judge_rollout(f, now);
    if (f.phase == rollout_phase::promoted
        && !f.cfg.canary.serve_config.empty())
      stable_config = f.cfg.canary.serve_config;
    retire_drained(f);
    autoscale(f, now, [this](replica_role role) {
      return start_replica("stable", f.stable_version, stable_config, role);
    });
  }

  // Supervision of the replicas this gateway started (lock held): one
  // that exited after it had been ready is replaced by a new one of the
  // same group and role; one that exited before it was ever ready is
  // dropped with an event (a bad config would otherwise restart forever).
  void restart_exited() {
    for (size_t i = 0; i < f.replicas.size(); ++i) {
      auto r = f.replicas[i];
      if (!r->process || r->process->running()
          || r->role == replica_role::draining)
        continue;
      f.replicas.erase(f.replicas.begin() + static_cast<std::ptrdiff_t>(i));
      --i;
      if (r->ready_at == clock::time_point{}) {
        f.event("start_failed", r->id + " exited before it was ready; not "
                                        "restarted (see its log)");
        continue;
      }
      f.event("replica_exited", r->id + " exited; starting a replacement");
      start_replica(r->group, r->version,
                    r->group == "canary" ? f.cfg.canary.serve_config
                                         : stable_config,
                    r->role);
    }
  }

  void routes();
  // True to go on; else `res` holds admin's refusal in the gateway's shape.
  bool admitted(const net::http_request& req, net::http_response& res,
                const std::string& action) const;
};

namespace {

std::string metrics_text(fleet& f) {
  std::lock_guard<std::mutex> lock(f.mutex);
  observability::prometheus_text t;
  auto labels = [](const replica& r) -> observability::label_list {
    return {
      {"replica", r.id}, {"version", r.version}, {"role", role_name(r.role)}};
  };
  auto per_replica = [&](const char* name, const char* type, const char* help,
                         auto value) {
    t.family(name, type, help);
    for (const auto& r : f.replicas)
      t.sample(name, labels(*r), static_cast<double>(value(*r)));
  };
  auto single = [&](const char* name, const char* type, const char* help,
                    double value) { t.metric(name, type, help, {}, value); };
  per_replica("tutti_gateway_replica_up", "gauge",
              "1 while the replica's /ready answers",
              [](const replica& r) { return r.healthy ? 1 : 0; });
  per_replica("tutti_gateway_replica_outstanding", "gauge",
              "requests sent to the replica and not ended",
              [](const replica& r) { return r.outstanding; });
  per_replica("tutti_gateway_replica_breaker_open", "gauge",
              "1 while the replica's circuit breaker is open or half-open",
              [](const replica& r) {
                return r.breaker.current() == circuit_breaker::state::closed
                         ? 0
                         : 1;
              });
  per_replica("tutti_gateway_replica_requests_total", "counter",
              "requests sent to the replica",
              [](const replica& r) { return r.requests; });
  per_replica("tutti_gateway_replica_failures_total", "counter",
              "requests the replica failed",
              [](const replica& r) { return r.failures; });
  single("tutti_gateway_in_flight", "gauge", "requests in the gateway",
         static_cast<double>(f.in_flight));
  single("tutti_gateway_retries_total", "counter",
         "requests sent again to another replica before they started",
         static_cast<double>(f.retries));
  t.metric("tutti_gateway_rejected_total", "counter",
           "requests refused by the gateway", {{"reason", "busy"}},
           static_cast<double>(f.rejected_busy));
  t.sample("tutti_gateway_rejected_total", {{"reason", "no_replica"}},
           static_cast<double>(f.rejected_none));
  t.metric("tutti_gateway_canary_share_percent", "gauge",
           "the canary version's share of requests",
           {{"version", f.canary_version}}, f.canary_share);
  single("tutti_gateway_rollbacks_total", "counter", "canary rollbacks",
         static_cast<double>(f.rollbacks));
  single("tutti_gateway_promotions_total", "counter",
         "canaries promoted to stable", static_cast<double>(f.promotions));
  single("tutti_gateway_rollback_alert", "gauge",
         "1 after a canary was rolled back (the alert)", f.alert ? 1 : 0);
  single("tutti_gateway_scale_ups_total", "counter", "replicas added",
         static_cast<double>(f.scale_ups));
  single("tutti_gateway_scale_downs_total", "counter", "replicas removed",
         static_cast<double>(f.scale_downs));
  int64_t serving = 0, spares = 0;
  for (const auto& r : f.replicas) {
    serving += r->role == replica_role::serving;
    spares += r->role == replica_role::spare;
  }
  t.metric("tutti_gateway_replicas", "gauge", "replicas by role",
           {{"role", "serving"}}, static_cast<double>(serving));
  t.sample("tutti_gateway_replicas", {{"role", "spare"}},
           static_cast<double>(spares));
  return t.str();
}

std::string events_json(fleet& f, int64_t after) {
  std::lock_guard<std::mutex> lock(f.mutex);
  nlohmann::json j = nlohmann::json::array();
  for (const auto& e : f.events)
    if (e.seq > after)
      j.push_back({{"seq", e.seq},
                   {"unix_ms", e.unix_ms},
                   {"kind", e.kind},
                   {"detail", e.detail}});
  return j.dump();
}

} // namespace

std::string status_json(fleet& f) {
  std::lock_guard<std::mutex> lock(f.mutex);
  nlohmann::json j;
  j["stable_version"] = f.stable_version;
  j["canary_version"] = f.canary_version;
  j["rollout"] = phase_name(f.phase);
  j["canary_share_percent"] = f.canary_share;
  if (f.phase == rollout_phase::running) {
    j["step"] = f.step + 1;
    j["steps"] = f.cfg.rollout.steps;
  }
  j["alert"] = f.alert;
  if (f.alert)
    j["alert_reason"] = f.alert_reason;
  auto window = [](const version_window& w) {
    return nlohmann::json{{"requests", w.requests},
                          {"errors", w.errors},
                          {"ttft_median_s", median(w.ttft_s)},
                          {"tpot_median_s", median(w.tpot_s)}};
  };
  j["stable_window"] = window(f.stable_window);
  j["canary_window"] = window(f.canary_window);
  j["in_flight"] = f.in_flight;
  j["retries"] = f.retries;
  j["scale_ups"] = f.scale_ups;
  j["scale_downs"] = f.scale_downs;
  if (f.rollback_after_failure_s >= 0)
    j["rollback_after_failure_s"] = f.rollback_after_failure_s;
  if (f.last_take_traffic_s >= 0)
    j["last_take_traffic_s"] = f.last_take_traffic_s;
  j["replicas"] = nlohmann::json::array();
  for (const auto& r : f.replicas)
    j["replicas"].push_back(
      {{"id", r->id},
       {"version", r->version},
       {"group", r->group},
       {"address",
        r->address.host + ":" + std::to_string(r->address.port)},
       {"role", role_name(r->role)},
       {"healthy", r->healthy},
       {"breaker", state_name(r->breaker.current())},
       {"outstanding", r->outstanding},
       {"requests", r->requests},
       {"failures", r->failures}});
  return j.dump(2);
}

bool gateway::impl::admitted(const net::http_request& req,
                             net::http_response& res,
                             const std::string& action) const {
  const auto a = admin.admit(security::is_loopback_address(req.remote_addr),
                             req.remote_addr, req.header("Authorization"),
                             action);
  if (a.admitted())
    return true;
  if (a.http_status == 401)
    res.set_header("WWW-Authenticate", "Bearer");
  send_error(res, a.http_status, a.message, a.type);
  return false;
}

void gateway::impl::routes() {
  auto& server = *this->server;
  server.get("/health", [](const net::http_request&, net::http_response& res) {
    res.set_content(R"({"status":"ok"})", json_type);
  });
  server.get("/ready", [this](const net::http_request&,
                              net::http_response& res) {
    std::lock_guard<std::mutex> lock(f.mutex);
    for (const auto& r : f.replicas)
      if (r->healthy && r->role == replica_role::serving)
        return res.set_content(R"({"status":"ready"})", json_type);
    res.status = 503;
    res.set_content(
      R"({"error":{"message":"no replica is ready","type":"service_unavailable"}})",
      json_type);
  });
  server.get("/metrics",
             [this](const net::http_request&, net::http_response& res) {
               res.set_content(metrics_text(f), "text/plain; version=0.0.4");
             });
  server.get("/v1/models", [this](const net::http_request&,
                                  net::http_response& res) {
    std::vector<replica_address> up;
    {
      std::lock_guard<std::mutex> lock(f.mutex);
      for (const auto& r : f.replicas)
        if (r->healthy && r->role == replica_role::serving)
          up.push_back(r->address);
    }
    for (const auto& a : up) {
      net::http_client cli(
        replica_client(a, std::chrono::seconds(2), std::chrono::seconds(5)));
      if (auto r = cli.get("/v1/models"); r && r->status == 200)
        return res.set_content(r->body, json_type);
    }
    res.status = 503;
    res.set_content(
      R"({"error":{"message":"no replica is ready","type":"service_unavailable"}})",
      json_type);
  });
  for (const char* path : {"/v1/completions", "/v1/chat/completions"})
    server.post(path,
                [this](const net::http_request& req, net::http_response& res) {
                  proxy_completion(f, req, res);
                });
  server.get("/admin/status",
             [this](const net::http_request& req, net::http_response& res) {
               if (admitted(req, res, "status"))
                 res.set_content(status_json(f), json_type);
             });
  server.get("/admin/events",
             [this](const net::http_request& req, net::http_response& res) {
               if (!admitted(req, res, "events"))
                 return;
               int64_t after = 0;
               if (req.has_param("after"))
                 after = std::atoll(req.param("after").c_str());
               res.set_content(events_json(f, after), json_type);
             });
  auto steer = [this](bool forward) {
    return [this, forward](const net::http_request& req,
                           net::http_response& res) {
      if (!admitted(req, res, forward ? "promote" : "rollback"))
        return;
      std::string refused;
      bool ok;
      {
        std::lock_guard<std::mutex> lock(f.mutex);
        ok = forward ? promote(f, "operator", refused)
                     : roll_back(f, "operator", refused);
      }
      if (!ok)
        return send_error(res, 409, refused, "conflict");
      res.set_content(status_json(f), json_type);
    };
  };
  server.post("/admin/promote", steer(true));
  server.post("/admin/rollback", steer(false));
}

gateway::gateway(std::unique_ptr<impl> p) : impl_(std::move(p)) {}

gateway::~gateway() { stop(); }

uint16_t gateway::port() const { return impl_->port; }
fleet& gateway::state() { return impl_->f; }

void gateway::stop() {
  if (!impl_ || impl_->stopping.exchange(true))
    return;
  if (impl_->server)
    impl_->server->stop();
  if (impl_->control)
    caf::anon_send_exit(impl_->control, caf::exit_reason::user_shutdown);
  impl_->control = nullptr;
  impl_->system.reset(); // waits for the control actor's last round
  std::lock_guard<std::mutex> lock(impl_->f.mutex);
  impl_->f.replicas.clear(); // the replicas it started stop
}

expected<std::unique_ptr<gateway>> gateway::start(const gateway_config& cfg,
                                                  launcher launch) {
  auto p = std::make_unique<impl>(cfg, std::move(launch));
  auto& g = *p;
  int64_t stable_count = cfg.stable.count;
  if (cfg.autoscale.enabled)
    stable_count = std::max(stable_count, cfg.autoscale.min_replicas);
  g.add_group(cfg.stable, "stable", stable_count);
  if (cfg.canary.given())
    g.add_group(cfg.canary, "canary", cfg.canary.count);
  {
    std::lock_guard<std::mutex> lock(g.f.mutex);
    if (cfg.canary.given())
      g.f.event("canary_step",
                cfg.canary.version + " takes "
                  + std::to_string(static_cast<int64_t>(g.f.canary_share))
                  + "% (rollout start)");
  }

  net::server_options http;
  http.host = cfg.host;
  http.port = static_cast<uint16_t>(cfg.port);
  http.threads = static_cast<size_t>(
    cfg.http_threads > 0 ? cfg.http_threads : cfg.max_in_flight + 8);
  http.head_timeout = http.read_timeout = http.write_timeout =
    std::chrono::seconds(30);
  g.server = std::make_unique<net::http_server>(http);
  auto admin = security::admin_access::open(cfg.admin_policy,
                                            "gateway.admin_policy");
  if (!admin)
    return admin.error();
  g.admin = std::move(*admin);
  g.routes();
  serve::serve_config auth;
  auth.api_keys = cfg.api_keys;
  auth.metrics_web_config = cfg.metrics_web_config;
  if (auto s = serve::install_api_auth(*g.server, auth); !s.ok())
    return status::error(
      std::string(s.message()).replace(0, 6, "gateway."));
  TUTTI_RETURN_IF_ERROR(g.server->start());
  g.port = g.server->port();

  g.system = std::make_unique<caf::actor_system>(g.actor_config);
  auto* raw = p.get();
  const auto interval = std::chrono::duration_cast<std::chrono::milliseconds>(
    std::chrono::duration<double>(cfg.health_interval_s));
  // Detached: a round blocks on HTTP probes.
  g.control = g.system->spawn<caf::detached>(
    [raw, interval](caf::stateful_actor<control_state>* self) -> caf::behavior {
      self->send(self, tick_atom_v);
      return {[=](tick_atom) {
        raw->tick();
        self->delayed_send(self, interval, tick_atom_v);
      }};
    });
  return std::unique_ptr<gateway>(new gateway(std::move(p)));
}

} // namespace tutti::gateway
