// tutti chaos TARGET FAULT [--rank R] [--node N] [--seconds S]: inject a
// fault into a live job. tutti status TARGET [--json]: the job's state.
// TARGET is the job's config or the coordinator's HOST:PORT.

#include <caf/actor_system.hpp>
#include <caf/scoped_actor.hpp>

#include <cstdio>
#include <set>

#include "commands.hpp"
#include "coordinator_client.hpp"
#include "tutti/actors/system_config.hpp"

namespace tutti::cli {

namespace {

const std::set<std::string> rank_faults{
  "kill_expert", "raise_expert", "nan_expert", "kill_loader",
  "kill_rank",   "hang_rank",    "slow_rank"};
const std::set<std::string> node_faults{"kill_writer", "crash_checkpoint",
                                        "kill_daemon"};

const char* chaos_usage =
  "usage: tutti chaos CONFIG|HOST:PORT FAULT [--rank R] [--node N] "
  "[--seconds S]\n"
  "faults on a rank:  kill_expert raise_expert nan_expert kill_loader\n"
  "                   kill_rank hang_rank slow_rank (--seconds per step)\n"
  "faults on a node:  kill_writer crash_checkpoint kill_daemon\n";

bool parse_number(const std::string& text, double& out) {
  try {
    size_t used = 0;
    out = std::stod(text, &used);
    return used == text.size();
  } catch (const std::exception&) {
    return false;
  }
}

} // namespace

int chaos_command(const std::vector<std::string>& args) {
  std::vector<std::string> positional;
  chaos_request req;
  for (size_t i = 0; i < args.size(); ++i) {
    const auto& a = args[i];
    if (a == "--help" || a == "-h") {
      std::fputs(chaos_usage, stdout);
      return 0;
    }
    if (a == "--rank" || a == "--node" || a == "--seconds") {
      double value = 0;
      if (i + 1 >= args.size() || !parse_number(args[i + 1], value))
        return fail(2, "chaos: " + a + " needs a number");
      ++i;
      if (a == "--seconds")
        req.seconds = value;
      else if (value < 0 || value != static_cast<int64_t>(value))
        return fail(2, "chaos: " + a + " must be a whole number >= 0");
      else
        (a == "--rank" ? req.rank : req.node) = static_cast<int64_t>(value);
    } else if (!a.empty() && a[0] == '-') {
      return fail(2, "chaos: unknown option '" + a + "'");
    } else {
      positional.push_back(a);
    }
  }
  if (positional.size() != 2)
    return fail(2, "chaos: usage: tutti chaos CONFIG|HOST:PORT FAULT "
                   "[--rank R] [--node N] [--seconds S]");
  req.fault = positional[1];
  if (!rank_faults.count(req.fault) && !node_faults.count(req.fault))
    return fail(2, "chaos: unknown fault '" + req.fault
                     + "' (see tutti chaos --help)");
  if (rank_faults.count(req.fault) && req.rank < 0)
    return fail(2, "chaos: " + req.fault + " needs --rank");
  if (node_faults.count(req.fault) && req.node < 0 && req.rank < 0)
    return fail(2, "chaos: " + req.fault + " needs --node");
  if (req.fault == "slow_rank" && req.seconds <= 0)
    return fail(2, "chaos: slow_rank needs --seconds > 0");
  system_options opt;
  opt.network = true;
  tutti_system_config sys_cfg{opt};
  caf::actor_system sys{sys_cfg};
  coordinator_actor coordinator;
  if (auto err = connect_coordinator(sys, positional[0], coordinator);
      !err.empty())
    return fail(1, "chaos: " + err);
  caf::scoped_actor self{sys};
  int status = 1;
  self->request(coordinator, std::chrono::seconds(15), chaos_atom_v, req)
    .receive(
      [&](const std::string& done) {
        std::printf("%s\n", done.c_str());
        status = 0;
      },
      [&](caf::error& err) { status = fail(1, "chaos: " + sys.render(err)); });
  return status;
}

int status_command(const std::vector<std::string>& args) {
  std::string target;
  bool json = false;
  for (const auto& a : args) {
    if (a == "--help" || a == "-h") {
      std::printf("usage: tutti status CONFIG|HOST:PORT [--json]\n");
      return 0;
    }
    if (a == "--json")
      json = true;
    else if (!a.empty() && a[0] == '-')
      return fail(2, "status: unknown option '" + a + "'");
    else if (target.empty())
      target = a;
    else
      return fail(2, "status: more than one target given");
  }
  if (target.empty())
    return fail(2, "status: usage: tutti status CONFIG|HOST:PORT [--json]");
  system_options opt;
  opt.network = true;
  tutti_system_config sys_cfg{opt};
  caf::actor_system sys{sys_cfg};
  coordinator_actor coordinator;
  if (auto err = connect_coordinator(sys, target, coordinator); !err.empty())
    return fail(1, "status: " + err);
  caf::scoped_actor self{sys};
  int status = 1;
  self->request(coordinator, std::chrono::seconds(10), status_atom_v)
    .receive(
      [&](const job_status& s) {
        std::fputs((json ? status_json(s) + "\n" : status_text(s)).c_str(),
                   stdout);
        status = 0;
      },
      [&](caf::error& err) { status = fail(1, "status: " + sys.render(err)); });
  return status;
}

} // namespace tutti::cli
