// tutti status TARGET [--json]: a live job's state, step, loss, throughput
// and recoveries, as the shell's `status` shows it (the coordinator renders
// both, so there is one text and one JSON shape). TARGET is the job's
// config, the coordinator's HOST:PORT or any daemon's.

#include <cstdio>

#include "command_line.hpp"
#include "commands.hpp"
#include "tutti/render/shell.hpp"
#include "tutti/client/job_client.hpp"

namespace tutti::cli {

int status_command(const std::vector<std::string>& args) {
  command_line cl("status", "CONFIG|HOST:PORT [--json]");
  cl.options()("json", "one JSON object instead of text");
  cl.positional("target");
  po::variables_map vm;
  if (auto done = cl.parse(args, vm))
    return *done;
  if (!vm.count("target"))
    return cl.bad("usage: tutti status CONFIG|HOST:PORT [--json]");
  client::job_client job;
  if (auto s = job.connect(vm["target"].as<std::string>()); !s)
    return fail(1, "status: " + s.message());
  auto reply = job.shell("status", {}, std::chrono::seconds(10));
  if (!reply)
    return fail(1, "status: " + reply.message());
  if (!reply->ok)
    return fail(1, "status: " + reply->error);
  std::fputs(vm.count("json")
               ? (render::shell_json("status", *reply) + "\n").c_str()
               : render::shell_text("status", *reply).c_str(),
             stdout);
  return 0;
}

} // namespace tutti::cli
