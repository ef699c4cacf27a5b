// tutti logs TARGET [--node N] [--level L] [--lines N] [--follow]: every
// daemon's log lines, merged by time; the shell's `logs` command on its
// own. TARGET is the job's config or any daemon's HOST:PORT.

#include "command_line.hpp"
#include "commands.hpp"
#include "shell_command.hpp"
#include "shell_session.hpp"

namespace tutti::cli {

int logs_command(const std::vector<std::string>& args) {
  const std::string usage =
    "CONFIG|HOST:PORT [--node N] [--level L] [--lines N] [--follow]";
  command_line cl("logs", usage);
  cl.options()("node", po::value<std::string>(), "only this node's lines")(
    "level", po::value<std::string>(), "debug, info (default), warn or error")(
    "lines", po::value<std::string>(), "at most this many (default 200)")(
    "follow", "print new lines as they come, until Ctrl-C");
  cl.positional("target");
  po::variables_map vm;
  if (auto done = cl.parse(args, vm))
    return *done;
  if (!vm.count("target"))
    return cl.bad("usage: tutti logs " + usage);
  // The shell's parser checks the values, with the shell's messages.
  auto quoted = [](const std::string& value) {
    std::string out = "\"";
    for (char c : value)
      out += c == '"' || c == '\\' ? std::string("\\") + c : std::string(1, c);
    return out + "\"";
  };
  std::string line = "logs";
  for (const char* name : {"node", "level", "lines"})
    if (vm.count(name))
      line += std::string(" --") + name + " "
              + quoted(vm[name].as<std::string>());
  if (vm.count("follow"))
    line += " --follow";
  std::string error;
  shell::parse_command(line, error);
  if (!error.empty())
    return fail(2, error);
  client::job_client job;
  if (auto s = job.connect(vm["target"].as<std::string>()); !s)
    return fail(1, "logs: " + s.message());
  shell_session::catch_interrupts();
  shell_session session(&job, false, false, false);
  bool quit = false;
  return session.run(line, quit);
}

} // namespace tutti::cli
