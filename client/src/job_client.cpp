#include "tutti/client/job_client.hpp"

#include <filesystem>

#include "tutti/runtime/system_config.hpp"
#include "tutti/client/coordinator_connect.hpp"
#include "tutti/client/service_client.hpp"
#include "tutti/security/tls_dialer.hpp"

namespace tutti::client {

job_client::job_client() {
  system_options options;
  options.network = true;
  config_ = std::make_unique<tutti_system_config>(options);
  system_ = std::make_unique<caf::actor_system>(*config_);
  self_ = std::make_unique<caf::scoped_actor>(*system_);
}

job_client::~job_client() {
  // The scoped actor and the handle go before the system they live in.
  coordinator_ = nullptr;
  self_.reset();
}

status job_client::connect(const std::string& target) {
  if (std::filesystem::is_regular_file(target) && is_service_config(target)) {
    auto at = service_endpoint(target);
    if (!at)
      return at.error();
    coordinator_ = nullptr;
    service_.reset();
    TUTTI_RETURN_IF_ERROR(probe_service(*at));
    service_ = *at;
    return {};
  }
  auto at = resolve_target(target);
  if (!at)
    return at.error();
  return connect(*at);
}

status job_client::connect(const endpoint& at) {
  coordinator_ = nullptr;
  service_.reset();
  // A user certificate (or a token) in the environment: every connection
  // under TLS.
  if (!security::tls_dialer::installed()) {
    auto tls = security::client_tls_from_environment();
    if (!tls)
      return tls.error();
    if (*tls) {
      // No certificate of its own: an admin-issued token instead.
      auto token = (*tls)->files().cert.empty()
                     ? security::client_token_from_environment()
                     : expected<security::secret>(security::secret());
      if (!token)
        return token.error();
      security::tls_dialer::install(*tls, std::chrono::seconds(5), *token);
    }
  }
  auto direct = connect_coordinator(*system_, at);
  if (!direct) {
    // Not the coordinator: perhaps a node daemon, which knows where it is.
    auto via = coordinator_via_daemon(*system_, at, std::chrono::seconds(5));
    if (!via)
      return direct.error();
    direct = std::move(via);
  }
  coordinator_ = *direct;
  return {};
}

template <class Reply, class... Ts>
expected<Reply> job_client::ask(timeout wait, Ts&&... xs) {
  if (!coordinator_)
    return tutti::status::error("not connected to a coordinator");
  expected<Reply> out = tutti::status::error("no answer");
  (*self_)
    ->request(coordinator_, wait, std::forward<Ts>(xs)...)
    .receive([&](Reply& reply) { out = std::move(reply); },
             [&](caf::error& err) {
               out = tutti::status::error(system_->render(err));
             });
  return out;
}

namespace {

tutti::status for_jobs(const char* what) {
  return tutti::status::error(std::string(what)
                              + " is a training job's; a service (tutti "
                                "serve) answers status, actors, metrics, "
                                "logs, kill and chaos kill_expert");
}

} // namespace

expected<job_status> job_client::get_status(timeout wait) {
  if (service_)
    return for_jobs("the job status");
  return ask<job_status>(wait, status_atom_v);
}

expected<std::string> job_client::chaos(const chaos_request& request,
                                        timeout wait) {
  if (service_)
    return service_chaos(*service_, request, wait);
  return ask<std::string>(wait, chaos_atom_v, request);
}

expected<diag_report> job_client::diag(timeout wait) {
  if (service_)
    return for_jobs("the interconnect check (diag)");
  return ask<diag_report>(wait, diag_atom_v);
}

expected<shell_reply> job_client::shell(const std::string& command,
                                        const std::vector<std::string>& args,
                                        timeout wait) {
  if (service_)
    return service_shell(*service_, command, args, wait);
  auto reply = ask<shell_reply>(wait, shell_atom_v, command, args);
  if (!reply)
    return reply.error().with_context("lost the coordinator: ");
  return reply;
}

} // namespace tutti::client
