// Serving's commands: a model served, loaded, sampled and published.

#include "command_table.hpp"
#include "commands.hpp"

namespace tutti::cli {

command_group serve_commands() {
  static const std::vector<command> table = {
    {"sample",
     sample_command,
     {{"sample RUN_DIR --prompt TEXT",
       "continue a prompt with a trained model"}}},
    {"serve",
     serve_command,
     {{"serve CONFIG [--listen HOST:PORT]",
       "OpenAI-style completions from a model"}}},
    {"bench",
     bench_command,
     {{"bench serve [--url URL] ...",
       "load generator for OpenAI-style servers"}}},
    {"publish",
     publish_command,
     {{"publish DIR --name N --version V [--registry R]",
       "register an immutable, verified model version"}}},
  };
  return table;
}

} // namespace tutti::cli
