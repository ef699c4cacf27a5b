#include "command_table.hpp"

#include <csignal>
#include <cstdio>
#include <exception>

#include "commands.hpp"
#include "tutti/base/process_memory.hpp"

namespace tutti::cli {

namespace {

// Synopses shorter than this share their line with the summary.
constexpr size_t synopsis_width = 28;

std::string overview(const char* program,
                     const std::vector<command_group>& groups) {
  std::string text = std::string("usage: ") + program
                     + " <command> [args]\n\ncommands:\n";
  for (const auto& group : groups)
    for (const auto& c : group)
      for (const auto& line : c.lines) {
        std::string synopsis = line.synopsis;
        text += "  " + synopsis;
        if (synopsis.size() < synopsis_width)
          text += std::string(synopsis_width - synopsis.size(), ' ');
        else
          text += "\n" + std::string(synopsis_width + 2, ' ');
        // A summary's later lines line up under its first.
        for (const char* c = line.summary; *c; ++c)
          text += *c == '\n' ? "\n" + std::string(synopsis_width + 2, ' ')
                              : std::string(1, *c);
        text += "\n";
      }
  return text + "\n'" + program + " <command> --help' describes each command.\n";
}

} // namespace

int run_program(const char* program, std::vector<command_group> groups,
                int argc, char** argv) {
  // Closed sockets are errors to handle, not a reason to die (Gloo writes
  // to peers that may be gone; recovery shuts sockets down on purpose).
  std::signal(SIGPIPE, SIG_IGN);
  return_large_buffers_on_free();
  std::vector<std::string> args(argv + 1, argv + argc);
  if (args.empty() || args[0] == "--help" || args[0] == "-h") {
    std::fputs(overview(program, groups).c_str(),
               args.empty() ? stderr : stdout);
    return args.empty() ? 2 : 0;
  }
  const auto name = args[0];
  args.erase(args.begin());
  std::string known;
  for (const auto& group : groups)
    for (const auto& c : group) {
      if (name == c.name) {
        try {
          return c.run(args);
        } catch (const std::exception& ex) {
          return fail(1, name + ": " + ex.what());
        }
      }
      known += (known.empty() ? "" : ", ") + std::string(c.name);
    }
  return fail(2, "unknown command '" + name + "' (try: " + known + "; see "
                   + program + " --help)");
}

} // namespace tutti::cli
