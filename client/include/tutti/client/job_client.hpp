#pragma once
// A command's connection to a live job. Owns the networked actor system
// (set up once, here), finds the coordinator from a config, its HOST:PORT or
// any daemon's HOST:PORT, and asks it things: each request has a timeout and
// an error handler and answers with the value or a status saying what went
// wrong ("lost the coordinator: ...").
//
//   client::job_client job;
//   if (auto s = job.connect("job.yaml"); !s) return fail(1, s.message());
//   auto st = job.get_status();
//   if (!st) return fail(1, st.message());
//   use(st->step);

#include <caf/actor_system.hpp>
#include <caf/scoped_actor.hpp>

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "tutti/protocol/interfaces.hpp"
#include "tutti/base/status.hpp"
#include "tutti/client/service_client.hpp"
#include "tutti/client/target.hpp"

namespace tutti::client {

using timeout = std::chrono::milliseconds;

class job_client {
public:
  job_client();
  ~job_client();
  job_client(const job_client&) = delete;
  job_client& operator=(const job_client&) = delete;

  // `target`: a config file or HOST:PORT of the coordinator or of any node
  // daemon of the job. A serve config instead: its service on this machine
  // (service_client.hpp), which answers shell() and chaos() only.
  // Replaces an earlier connection.
  status connect(const std::string& target);
  status connect(const endpoint& at);
  bool connected() const {
    return static_cast<bool>(coordinator_) || service_.has_value();
  }
  // Whether the target is a service (`tutti serve`), not a job.
  bool is_service() const { return service_.has_value(); }
  // Forgets the coordinator (e.g. after it went away); connect again.
  void disconnect() {
    coordinator_ = nullptr;
    service_.reset();
  }

  // The job's state, step, loss, epoch, recoveries.
  expected<job_status> get_status(timeout wait = std::chrono::seconds(10));
  // Injects a fault; the answer says what was done.
  expected<std::string> chaos(const chaos_request& request,
                              timeout wait = std::chrono::seconds(15));
  // The interconnect check across the job's daemons.
  expected<diag_report> diag(timeout wait);
  // One shell command (status, nodes, actors, logs, pause, ...). A refused
  // command is a reply with ok = false, not an error: the error is for a
  // coordinator that did not answer.
  expected<shell_reply> shell(const std::string& command,
                              const std::vector<std::string>& args,
                              timeout wait = std::chrono::seconds(15));

  caf::actor_system& system() { return *system_; }

private:
  template <class Reply, class... Ts>
  expected<Reply> ask(timeout wait, Ts&&... xs);

  std::unique_ptr<caf::actor_system_config> config_;
  std::unique_ptr<caf::actor_system> system_;
  std::unique_ptr<caf::scoped_actor> self_;
  coordinator_actor coordinator_;
  std::optional<service_front> service_; // not a coordinator
};

} // namespace tutti::client
