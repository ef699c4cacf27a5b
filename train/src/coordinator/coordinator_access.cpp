#include "coordinator/coordinator_access.hpp"

#include <caf/send.hpp>
#include <caf/typed_response_promise.hpp>

#include "coordinator/audit_writer.hpp"
#include "tutti/runtime/log.hpp"
#include "tutti/protocol/errors.hpp"

namespace tutti {

namespace {

constexpr size_t max_remembered = 4096;

std::string joined(const std::vector<std::string>& args) {
  std::string out;
  for (const auto& a : args)
    out += (out.empty() ? "" : " ") + a;
  return out;
}

shell_reply refused_reply(const std::string& why) {
  shell_reply r;
  r.ok = false;
  r.error = "refused: " + why;
  return r;
}

} // namespace

caf::node_id sender_node(coordinator_pointer self) {
  const auto sender = self->current_sender();
  return sender ? sender->node() : self->node();
}

std::optional<sender_identity> known_sender(coordinator_pointer self,
                                            const caf::node_id& node) {
  if (!node || node == self->node())
    return sender_identity{true, std::nullopt, "this process"};
  auto& known = self->state.senders;
  if (auto i = known.find(node); i != known.end())
    return i->second;
  return std::nullopt;
}

void learn_sender(coordinator_pointer self, const caf::node_id& node,
                  std::function<void()> then) {
  identify_sender(self, node, [self, node, then](sender_identity from) {
    auto& known = self->state.senders;
    if (known.size() >= max_remembered)
      known.clear(); // nodes come back and are asked again
    known[node] = std::move(from);
    then();
  });
}

security::access_decision check_access(coordinator_pointer self,
                                       const sender_identity& from,
                                       const std::string& command) {
  security::access_decision d;
  d.needed = security::required_role(command);
  auto& st = self->state;
  if (from.local || !st.cfg.security.tls_on()) {
    d.allowed = true;
    d.role = from.local ? "admin" : "";
    return d;
  }
  if (!from.certified) {
    d.why = "'" + command + "' needs role " + d.needed
            + (from.address.empty() || from.address == ":0"
                 ? "; a request relayed through another daemon carries no "
                   "certificate: connect to cluster_config.coordinator"
                 : "; the connection from " + from.address
                     + " has no known certificate");
    return d;
  }
  return st.policy ? st.policy->decide(*from.certified, command)
                   : security::access_decision{};
}

void audit(coordinator_pointer self, const sender_identity& from,
           const security::access_decision& d, const std::string& command,
           const std::string& target, const std::string& result) {
  auto& st = self->state;
  security::audit_record r;
  r.user = from.local ? "local"
           : from.certified
             ? (from.certified->kind == security::identity_kind::node
                  ? from.certified->text()
                  : from.certified->user)
           : st.cfg.security.tls_on() ? "unknown"
                                      : "unauthenticated";
  r.role = d.role;
  r.source = from.address;
  r.command = command;
  r.target = target;
  r.decision = d.allowed ? "allowed" : "refused";
  r.result = result;
  if (!d.allowed)
    log_warn("coordinator", "refused '" + command + "' from " + r.user + " ("
                              + from.address + "): " + d.why);
  if (st.auditor)
    caf::anon_send(st.auditor, audit_request(r));
}

caf::result<shell_reply> guarded_shell_command(
  coordinator_pointer self, const std::string& command,
  const std::vector<std::string>& args) {
  const auto node = sender_node(self);
  auto from = known_sender(self, node);
  if (!from) {
    // Ask who it is, then handle the same request again, answered to the
    // same sender.
    auto promise = self->make_response_promise<shell_reply>();
    learn_sender(self, node, [self, promise, command, args]() mutable {
      promise.delegate(caf::actor_cast<coordinator_actor>(self), shell_atom_v,
                       command, args);
    });
    return promise;
  }
  auto d = check_access(self, *from, command);
  if (!d.allowed) {
    audit(self, *from, d, command, joined(args), d.why);
    return refused_reply(d.why);
  }
  if (from->local
      || security::role_rank(d.needed) < security::role_rank("operator"))
    return run_shell_command(self, command, args);
  // An operator action: run it as this process (allowed, not audited
  // again) and audit what came of it once it is known.
  auto promise = self->make_response_promise<shell_reply>();
  self
    ->request(caf::actor_cast<coordinator_actor>(self),
              std::chrono::seconds(60), shell_atom_v, command, args)
    .then(
      [self, promise, from = *from, d, command,
       args](shell_reply& reply) mutable {
        audit(self, from, d, command, joined(args),
              reply.ok ? (reply.message.empty() ? "ok" : reply.message)
                       : "failed: " + reply.error);
        promise.deliver(std::move(reply));
      },
      [self, promise, from = *from, d, command, args](caf::error& err) mutable {
        audit(self, from, d, command, joined(args),
              "failed: " + self->system().render(err));
        shell_reply failed;
        failed.ok = false;
        failed.error = self->system().render(err);
        promise.deliver(std::move(failed));
      });
  return promise;
}

caf::result<std::string> guarded_chaos(coordinator_pointer self,
                                       const chaos_request& req) {
  const auto node = sender_node(self);
  auto from = known_sender(self, node);
  if (!from) {
    auto promise = self->make_response_promise<std::string>();
    learn_sender(self, node, [self, promise, req]() mutable {
      promise.delegate(caf::actor_cast<coordinator_actor>(self), chaos_atom_v,
                       req);
    });
    return promise;
  }
  auto d = check_access(self, *from, "chaos");
  const auto target = req.fault + " rank " + std::to_string(req.rank) + " node "
                      + std::to_string(req.node);
  if (!d.allowed) {
    audit(self, *from, d, "chaos", target, d.why);
    return caf::make_error(errc::config_refused, "refused: " + d.why);
  }
  if (from->local)
    return route_chaos(self, req);
  auto promise = self->make_response_promise<std::string>();
  self
    ->request(caf::actor_cast<coordinator_actor>(self),
              std::chrono::seconds(60), chaos_atom_v, req)
    .then(
      [self, promise, from = *from, d, target](std::string& done) mutable {
        audit(self, from, d, "chaos", target, done);
        promise.deliver(std::move(done));
      },
      [self, promise, from = *from, d, target](caf::error& err) mutable {
        audit(self, from, d, "chaos", target,
              "failed: " + self->system().render(err));
        promise.deliver(std::move(err));
      });
  return promise;
}

caf::result<job_status> guarded_status(coordinator_pointer self) {
  const auto node = sender_node(self);
  auto from = known_sender(self, node);
  if (!from) {
    auto promise = self->make_response_promise<job_status>();
    learn_sender(self, node, [self, promise]() mutable {
      promise.delegate(caf::actor_cast<coordinator_actor>(self), status_atom_v);
    });
    return promise;
  }
  auto d = check_access(self, *from, "status");
  if (!d.allowed) {
    audit(self, *from, d, "status", "", d.why);
    return caf::make_error(errc::config_refused, "refused: " + d.why);
  }
  return describe_job(self->state);
}

} // namespace tutti
