#include "command_line.hpp"

#include <cstdio>
#include <iostream>

#include "commands.hpp"
#include "tutti/config/host_port.hpp"

namespace tutti::cli {

int fail(int status, const std::string& what) {
  std::fprintf(stderr, "tutti: %s\n", what.c_str());
  return status;
}

command_line::command_line(std::string name, std::string usage,
                           std::string about)
  : name_(std::move(name)), usage_(std::move(usage)), about_(std::move(about)) {
  shown_.add_options()("help,h", "print this text");
}

command_line& command_line::positional(const std::string& name, int max_count) {
  if (max_count == 1)
    hidden_.add_options()(name.c_str(), po::value<std::string>());
  else
    hidden_.add_options()(name.c_str(), po::value<std::vector<std::string>>());
  positional_.add(name.c_str(), max_count);
  return *this;
}

command_line& command_line::required(const std::string& name,
                                     const std::string& shown, int max_count) {
  required_.emplace_back(name, shown);
  return positional(name, max_count);
}

void command_line::listen_option() {
  shown_.add_options()(
    "listen", po::value<std::string>(),
    "HOST:PORT to listen on, over the config's (port 0: any)");
}

std::optional<int> command_line::apply_listen(const po::variables_map& vm,
                                              std::string& host,
                                              uint16_t& port) const {
  if (!vm.count("listen"))
    return std::nullopt;
  if (auto s = parse_host_port(vm["listen"].as<std::string>(), host, port);
      !s.ok())
    return bad("--listen: " + s.message());
  return std::nullopt;
}

std::string command_line::usage_line() const {
  return "usage: tutti " + name_ + (usage_.empty() ? "" : " " + usage_);
}

int command_line::bad(const std::string& what) const {
  return fail(2, name_ + ": " + what);
}

std::optional<int> command_line::parse(const std::vector<std::string>& args,
                                       po::variables_map& vm) const {
  po::options_description all;
  all.add(shown_).add(hidden_);
  // No guessing: an abbreviated option is a typo, not a request.
  const auto style = po::command_line_style::default_style
                     & ~po::command_line_style::allow_guessing;
  try {
    po::store(po::command_line_parser(args)
                .options(all)
                .positional(positional_)
                .style(style)
                .run(),
              vm);
    if (vm.count("help")) {
      std::cout << usage_line() << "\n";
      if (!about_.empty())
        std::cout << about_ << (about_.back() == '\n' ? "" : "\n");
      std::cout << shown_;
      return 0;
    }
    po::notify(vm);
  } catch (const po::error& ex) {
    return bad(ex.what());
  }
  for (const auto& [name, shown] : required_)
    if (!vm.count(name))
      return bad("missing " + shown + " (" + usage_line() + ")");
  return std::nullopt;
}

} // namespace tutti::cli
