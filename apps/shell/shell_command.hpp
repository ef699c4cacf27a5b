#pragma once
// `tutti shell` command lines: splitting, parsing, validation and Tab
// completion. Pure functions, no I/O, so they are unit-tested directly and
// shared by the interactive prompt and `tutti shell -c "status; actors"`.

#include <map>
#include <optional>
#include <string>
#include <vector>

namespace tutti::shell {

struct command_info {
  std::string name;  // "experts"
  std::string usage; // "experts [LAYER]"
  std::string help;  // one line for `help`
};

// Every command, in the order `help` lists them. `quit` and `exit` are two
// entries so that both complete and both show up in `help`.
const std::vector<command_info>& shell_commands();

// The entry for `name`, or nullptr.
const command_info* find_command(const std::string& name);

// Splits `text` on ';' outside double quotes; trims each part and drops the
// empty ones. Quotes are kept for parse_command.
std::vector<std::string> split_commands(const std::string& text);

struct parsed_command {
  std::string name;              // as typed: "quit" and "exit" stay distinct
  std::vector<std::string> args; // positional, quotes removed
  // Option name without dashes -> value as typed ("since" -> "5m");
  // flags map to "true" ("follow" -> "true").
  std::map<std::string, std::string> options;
};

// Tokenizes (whitespace, double quotes with \" and \\ escapes) and checks the
// line against shell_commands(). On failure returns {} and sets `error` to
// one line naming the command, the bad token and the usage. A blank line
// gives an empty name and no error: nothing to do.
parsed_command parse_command(const std::string& line, std::string& error);

// `events --since` values: "300" (seconds), "90s", "5m", "1.5h". nullopt
// unless a positive, finite number of seconds.
std::optional<double> duration_seconds(const std::string& text);

// Candidate full words for the word under the cursor, given the text before
// the cursor: command names for the first word, actor paths after
// restart/kill/actors, command names after help, option names after "-",
// levels after `logs --level`. Sorted, no duplicates, all starting with the
// partial word.
std::vector<std::string> complete_command_line(
  const std::string& before_cursor,
  const std::vector<std::string>& actor_paths);

// Levenshtein distance, used for "did you mean" suggestions.
size_t edit_distance(const std::string& a, const std::string& b);

} // namespace tutti::shell
