// tutti chaos TARGET FAULT [--rank R] [--node N] [--seconds S]: inject a
// fault into a live job. TARGET is the job's config, the coordinator's
// HOST:PORT or any daemon's.

#include <cstdio>
#include <set>

#include "command_line.hpp"
#include "commands.hpp"
#include "tutti/client/job_client.hpp"

namespace tutti::cli {

namespace {

const std::set<std::string> rank_faults{
  "kill_expert", "raise_expert", "nan_expert", "kill_loader",
  "kill_rank",   "hang_rank",    "slow_rank"};
const std::set<std::string> node_faults{"kill_writer", "crash_checkpoint",
                                        "kill_daemon"};

const char* fault_list =
  "faults on a rank:  kill_expert raise_expert nan_expert kill_loader\n"
  "                   kill_rank hang_rank slow_rank (--seconds per step)\n"
  "faults on a node:  kill_writer crash_checkpoint kill_daemon";

// --rank and --node: absent (-1) or a whole number >= 0.
bool whole_or_absent(const po::variables_map& vm, const char* name,
                     int64_t& out) {
  if (!vm.count(name))
    return true;
  const double value = vm[name].as<double>();
  if (value < 0 || value != static_cast<double>(static_cast<int64_t>(value)))
    return false;
  out = static_cast<int64_t>(value);
  return true;
}

} // namespace

int chaos_command(const std::vector<std::string>& args) {
  command_line cl("chaos",
                  "CONFIG|HOST:PORT FAULT [--rank R] [--node N] [--seconds S]",
                  fault_list);
  cl.options()("rank", po::value<double>(), "the rank to hit")(
    "node", po::value<double>(), "the node to hit")(
    "seconds", po::value<double>(), "slow_rank: added seconds per step");
  cl.positional("target").positional("fault");
  po::variables_map vm;
  if (auto done = cl.parse(args, vm))
    return *done;
  if (!vm.count("fault"))
    return cl.bad("usage: tutti chaos CONFIG|HOST:PORT FAULT "
                  "[--rank R] [--node N] [--seconds S]");
  chaos_request req;
  req.fault = vm["fault"].as<std::string>();
  for (const char* name : {"rank", "node"})
    if (!whole_or_absent(vm, name,
                         std::string(name) == "rank" ? req.rank : req.node))
      return cl.bad(std::string("--") + name + " must be a whole number >= 0");
  if (vm.count("seconds"))
    req.seconds = vm["seconds"].as<double>();
  if (!rank_faults.count(req.fault) && !node_faults.count(req.fault))
    return cl.bad("unknown fault '" + req.fault + "' (see tutti chaos --help)");
  if (rank_faults.count(req.fault) && req.rank < 0)
    return cl.bad(req.fault + " needs --rank");
  if (node_faults.count(req.fault) && req.node < 0 && req.rank < 0)
    return cl.bad(req.fault + " needs --node");
  if (req.fault == "slow_rank" && req.seconds <= 0)
    return cl.bad("slow_rank needs --seconds > 0");

  client::job_client job;
  if (auto s = job.connect(vm["target"].as<std::string>()); !s)
    return fail(1, "chaos: " + s.message());
  auto done = job.chaos(req);
  if (!done)
    return fail(1, "chaos: " + done.message());
  std::printf("%s\n", done->c_str());
  return 0;
}

} // namespace tutti::cli
