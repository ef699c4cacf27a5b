#pragma once
// One argument parser for every `tutti` subcommand (Boost.Program_options):
// -h/--help prints the usage and options to stdout (exit 0); bad arguments
// are one line "tutti: CMD: ..." on stderr (exit 2).

#include <boost/program_options.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace tutti::cli {

namespace po = boost::program_options;

class command_line {
public:
  // `name`: "chaos", "ckpt list"; `usage`: what follows "tutti NAME" in the
  // usage line; `about`: more lines for --help (may be empty).
  command_line(std::string name, std::string usage, std::string about = "");

  // Options shown by --help ("help,h" is there already).
  po::options_description_easy_init options() { return shown_.add_options(); }
  // A positional argument, named for the usage line; max_count -1 takes
  // the rest. Its values are vm[name] (std::string, or
  // std::vector<std::string> when max_count != 1).
  command_line& positional(const std::string& name, int max_count = 1);
  // The same, required: parse() refuses its absence in one line,
  // "missing SHOWN (usage: tutti NAME USAGE)".
  command_line& required(const std::string& name, const std::string& shown,
                         int max_count = 1);

  // Parses `args` into `vm`: nullopt to go on, else the exit status after
  // --help (0) or a bad argument (2).
  std::optional<int> parse(const std::vector<std::string>& args,
                           po::variables_map& vm) const;

  // A --listen HOST:PORT option over a config's address.
  void listen_option();
  // Puts --listen, if given, into host and port; the exit status 2 of a
  // bad one (refused in one line), else nullopt.
  std::optional<int> apply_listen(const po::variables_map& vm,
                                  std::string& host, uint16_t& port) const;

  // "tutti: NAME: <what>" on stderr; returns 2.
  int bad(const std::string& what) const;
  // "usage: tutti NAME USAGE"
  std::string usage_line() const;

private:
  std::string name_, usage_, about_;
  po::options_description shown_{"options"};
  po::options_description hidden_;
  po::positional_options_description positional_;
  std::vector<std::pair<std::string, std::string>> required_; // name, shown
};

} // namespace tutti::cli
