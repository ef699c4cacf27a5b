// apps/shell: `tutti shell` command lines. split_commands for -c, strict
// parse_command with one-line errors (command, bad token, usage), "did you
// mean" suggestions, and Tab completion candidates. line_editor is only
// compiled here; a terminal-driven test covers it.

#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "line_editor.hpp"
#include "shell_command.hpp"

using namespace tutti::shell;
using Catch::Matchers::Contains;
using strings = std::vector<std::string>;

namespace {

parsed_command parse_ok(const std::string& line) {
  std::string error = "unset";
  parsed_command cmd = parse_command(line, error);
  INFO("line: " << line << "\nerror: " << error);
  CHECK(error.empty());
  return cmd;
}

std::string parse_error(const std::string& line) {
  std::string error;
  parsed_command cmd = parse_command(line, error);
  INFO("line: " << line);
  CHECK_FALSE(error.empty());
  CHECK(error.find('\n') == std::string::npos);
  CHECK(cmd.name.empty());
  return error;
}

// NAME [ARG]: no argument, the argument `arg`, and `arg extra` refused.
void check_one_optional_argument(const std::string& name,
                                 const std::string& usage,
                                 const std::string& arg,
                                 const std::string& extra) {
  CHECK(parse_ok(name).args.empty());
  CHECK(parse_ok(name + " " + arg).args == strings{arg});
  CHECK(parse_error(name + " " + arg + " " + extra)
        == name + ": unexpected argument '" + extra + "' (usage: " + usage
             + ")");
}

const strings actors = {"/job/coordinator", "/job/node0", "/job/node0/rank0",
                        "/job/node0/rank1", "/job/node1/rank0/experts"};

} // namespace

TEST_CASE("split_commands splits on ; outside quotes, trims, drops empties",
          "[shell]") {
  CHECK(split_commands("status; actors") == strings{"status", "actors"});
  CHECK(split_commands("  status  ") == strings{"status"});
  CHECK(split_commands(";; status ;  ; nodes;") == strings{"status", "nodes"});
  CHECK(split_commands("").empty());
  CHECK(split_commands(" ; ").empty());
  CHECK(split_commands("metrics \"a;b\"; nodes")
        == strings{"metrics \"a;b\"", "nodes"});
  CHECK(split_commands("metrics \"a\\\";b\"; nodes")
        == strings{"metrics \"a\\\";b\"", "nodes"});
  CHECK(split_commands("logs --level warn;events --since 5m")
        == strings{"logs --level warn", "events --since 5m"});
  // An unterminated quote swallows the rest; parse_command reports it.
  CHECK(split_commands("metrics \"a; nodes") == strings{"metrics \"a; nodes"});
}

TEST_CASE("the command table lists every command once with usage and help",
          "[shell]") {
  strings names;
  for (const auto& c : shell_commands()) {
    names.push_back(c.name);
    CHECK(c.usage.rfind(c.name, 0) == 0);
    CHECK_FALSE(c.help.empty());
  }
  CHECK(names
        == strings{"help", "status", "nodes", "actors", "experts", "metrics",
                   "events", "logs", "pause", "resume", "checkpoint", "restart",
                   "kill", "drain", "stop", "quit", "exit", "audit", "config",
                   "rollback", "rollout"});
  REQUIRE(find_command("experts"));
  CHECK(find_command("experts")->usage == "experts [LAYER]");
  CHECK(find_command("nope") == nullptr);
}

TEST_CASE("blank lines parse to nothing, without an error", "[shell]") {
  std::string error = "unset";
  CHECK(parse_command("", error).name.empty());
  CHECK(error.empty());
  CHECK(parse_command("   \t ", error).name.empty());
  CHECK(error.empty());
}

TEST_CASE("commands without arguments", "[shell]") {
  for (std::string name : {"status", "nodes", "pause", "resume", "checkpoint",
                           "stop", "quit", "exit"}) {
    parsed_command cmd = parse_ok("  " + name + "  ");
    CHECK(cmd.name == name);
    CHECK(cmd.args.empty());
    CHECK(cmd.options.empty());
    CHECK(parse_error(name + " now")
          == name + ": takes no arguments, got 'now' (usage: " + name + ")");
    CHECK(parse_error(name + " --force")
          == name + ": unknown option '--force' (usage: " + name + ")");
  }
}

TEST_CASE("help [CMD]", "[shell]") {
  check_one_optional_argument("help", "help [CMD]", "logs", "nodes");
  CHECK(parse_error("help stauts")
        == "help: unknown command 'stauts' (did you mean 'status'?) (usage: "
           "help [CMD])");
}

TEST_CASE("actors [PATH] and metrics [NAME]", "[shell]") {
  CHECK(parse_ok("actors").args.empty());
  CHECK(parse_ok("actors /job/node0").args == strings{"/job/node0"});
  CHECK(parse_ok("actors \"/job/odd name\"").args == strings{"/job/odd name"});
  CHECK(parse_error("actors /a /b")
        == "actors: unexpected argument '/b' (usage: actors [PATH])");
  CHECK(parse_error("actors \"\"")
        == "actors: PATH must be non-empty, got '' (usage: actors [PATH])");
  check_one_optional_argument("metrics", "metrics [NAME]", "loss", "lr");
}

TEST_CASE("experts [LAYER] wants a whole number", "[shell]") {
  CHECK(parse_ok("experts").args.empty());
  CHECK(parse_ok("experts 0").args == strings{"0"});
  CHECK(parse_ok("experts 31").args == strings{"31"});
  CHECK(parse_error("experts x")
        == "experts: LAYER must be a whole number >= 0, got 'x' (usage: "
           "experts [LAYER])");
  CHECK_THAT(parse_error("experts -1"), Contains("got '-1'"));
  CHECK_THAT(parse_error("experts 1.5"), Contains("got '1.5'"));
  CHECK_THAT(parse_error("experts 99999999999999999999999"),
             Contains("whole number"));
  CHECK(parse_error("experts 1 2")
        == "experts: unexpected argument '2' (usage: experts [LAYER])");
}

TEST_CASE("events [--since T]", "[shell]") {
  CHECK(parse_ok("events").options.empty());
  for (std::string t : {"300", "90s", "5m", "2h", "1.5h", "0.5"}) {
    parsed_command cmd = parse_ok("events --since " + t);
    CHECK(cmd.options.at("since") == t);
  }
  CHECK(parse_ok("events --since=5m").options.at("since") == "5m");
  for (std::string t :
       {"0", "-5", "5d", "m", "abc", "1e3", "inf", "1.", ".5", "5mm"})
    CHECK(parse_error("events --since " + t)
          == "events: --since must be a positive number of seconds ago, or "
             "minutes/hours like 5m or 2h, got '"
               + t + "' (usage: events [--since T])");
  CHECK(parse_error("events --since")
        == "events: --since needs a value (usage: events [--since T])");
  CHECK(parse_error("events --snce 5m")
        == "events: unknown option '--snce' (did you mean '--since'?) (usage: "
           "events [--since T])");
  CHECK(parse_error("events 5m")
        == "events: takes no arguments, got '5m' (usage: events [--since T])");
  CHECK_THAT(parse_error("events --since 5m --since 2h"),
             Contains("--since given twice"));
}

TEST_CASE("duration_seconds", "[shell]") {
  CHECK(duration_seconds("300") == 300.0);
  CHECK(duration_seconds("90s") == 90.0);
  CHECK(duration_seconds("5m") == 300.0);
  CHECK(duration_seconds("2h") == 7200.0);
  CHECK(duration_seconds("1.5h") == 5400.0);
  CHECK_FALSE(duration_seconds(""));
  CHECK_FALSE(duration_seconds("0m"));
  CHECK_FALSE(duration_seconds("+5"));
  CHECK_FALSE(duration_seconds("5 m"));
}

TEST_CASE("logs options", "[shell]") {
  const std::string usage = " (usage: logs [--node N] [--level "
                            "debug|info|warn|error] [--follow] [--lines N])";
  CHECK(parse_ok("logs").options.empty());
  parsed_command all = parse_ok(
    "logs --node 1 --level warn --follow --lines 50");
  CHECK(all.name == "logs");
  CHECK(all.args.empty());
  CHECK(
    all.options
    == std::map<std::string, std::string>{
      {"node", "1"}, {"level", "warn"}, {"follow", "true"}, {"lines", "50"}});
  CHECK(parse_ok("logs --follow --level=error").options
        == std::map<std::string, std::string>{{"follow", "true"},
                                              {"level", "error"}});
  for (std::string level : {"debug", "info", "warn", "error"})
    CHECK(parse_ok("logs --level " + level).options.at("level") == level);

  CHECK(
    parse_error("logs --level verbose")
    == "logs: --level must be one of debug, info, warn, error, got 'verbose'"
         + usage);
  CHECK(parse_error("logs --node x")
        == "logs: --node must be a whole number >= 0, got 'x'" + usage);
  CHECK(parse_error("logs --lines 0")
        == "logs: --lines must be a whole number >= 1, got '0'" + usage);
  CHECK(parse_error("logs --lines") == "logs: --lines needs a value" + usage);
  CHECK(parse_error("logs --lines --follow")
        == "logs: --lines needs a value" + usage);
  CHECK(parse_error("logs --follow=yes")
        == "logs: --follow takes no value" + usage);
  CHECK(parse_error("logs --folow")
        == "logs: unknown option '--folow' (did you mean '--follow'?)" + usage);
  CHECK(parse_error("logs --colour")
        == "logs: unknown option '--colour'" + usage);
  CHECK(parse_error("logs node0")
        == "logs: takes no arguments, got 'node0'" + usage);
  // A quoted "--node" is text, not an option.
  CHECK(parse_error("logs \"--node\"")
        == "logs: takes no arguments, got '--node'" + usage);
}

TEST_CASE("restart PATH, kill PATH, drain NODE", "[shell]") {
  CHECK(parse_ok("restart /job/node0/rank1").args
        == strings{"/job/node0/rank1"});
  CHECK(parse_ok("kill /job/node1/rank0/experts").args
        == strings{"/job/node1/rank0/experts"});
  CHECK(parse_error("restart")
        == "restart: missing PATH (usage: restart PATH)");
  CHECK(parse_error("kill") == "kill: missing PATH (usage: kill PATH)");
  CHECK(parse_error("kill /a /b")
        == "kill: unexpected argument '/b' (usage: kill PATH)");
  CHECK(parse_ok("drain 0").args == strings{"0"});
  CHECK(parse_ok("drain 3").args == strings{"3"});
  CHECK(parse_error("drain") == "drain: missing NODE (usage: drain NODE)");
  CHECK(parse_error("drain node1")
        == "drain: NODE must be a whole number >= 0, got 'node1' (usage: drain "
           "NODE)");
  CHECK(parse_error("drain 1 2")
        == "drain: unexpected argument '2' (usage: drain NODE)");
}

TEST_CASE("unknown commands get a suggestion within two edits", "[shell]") {
  CHECK(parse_error("stauts")
        == "unknown command 'stauts' (did you mean 'status'?)");
  CHECK(parse_error("node")
        == "unknown command 'node' (did you mean 'nodes'?)");
  CHECK(parse_error("chekpoint")
        == "unknown command 'chekpoint' (did you mean 'checkpoint'?)");
  CHECK(parse_error("STATUS")
        == "unknown command 'STATUS' (did you mean 'status'?)");
  CHECK(parse_error("xyzzy") == "unknown command 'xyzzy' (try help)");
  CHECK(parse_error("reboot now") == "unknown command 'reboot' (try help)");
}

TEST_CASE("tokenizing: quotes and escapes", "[shell]") {
  CHECK(parse_ok("metrics \"a \\\"quoted\\\" name\"").args
        == strings{"a \"quoted\" name"});
  CHECK(parse_ok("metrics \"back\\\\slash\"").args == strings{"back\\slash"});
  CHECK(parse_ok("metrics ab\"c d\"e").args == strings{"abc de"});
  CHECK(parse_ok("\tstatus\t").name == "status");
  CHECK_THAT(parse_error("metrics \"open"), Contains("missing closing quote"));
}

TEST_CASE("edit_distance", "[shell]") {
  CHECK(edit_distance("", "") == 0);
  CHECK(edit_distance("abc", "") == 3);
  CHECK(edit_distance("stauts", "status") == 2);
  CHECK(edit_distance("kitten", "sitting") == 3);
}

TEST_CASE("completing the command name", "[shell]") {
  CHECK(complete_command_line("", actors).size() == shell_commands().size());
  CHECK(complete_command_line("st", actors) == strings{"status", "stop"});
  CHECK(complete_command_line("  che", actors) == strings{"checkpoint"});
  CHECK(complete_command_line("e", actors)
        == strings{"events", "exit", "experts"});
  CHECK(complete_command_line("zz", actors).empty());
  // After a ';' a new command starts.
  CHECK(complete_command_line("status; dr", actors) == strings{"drain"});
}

TEST_CASE("completing actor paths and help topics", "[shell]") {
  CHECK(complete_command_line("restart /job/node0/", actors)
        == strings{"/job/node0/rank0", "/job/node0/rank1"});
  CHECK(complete_command_line("kill /job/c", actors)
        == strings{"/job/coordinator"});
  CHECK(complete_command_line("actors ", actors).size() == actors.size());
  CHECK(complete_command_line("actors /nope", actors).empty());
  CHECK(complete_command_line("restart /job/node0 ", actors)
          .empty()); // only one PATH
  CHECK(complete_command_line("experts ", actors).empty());
  CHECK(complete_command_line("drain ", actors).empty());
  CHECK(complete_command_line("help lo", actors) == strings{"logs"});
  CHECK(complete_command_line("frob /job", actors).empty());
  // Duplicates from the caller are listed once.
  CHECK(complete_command_line("kill /job/c", {"/job/c1", "/job/c1"})
        == strings{"/job/c1"});
}

TEST_CASE("completing options and levels", "[shell]") {
  CHECK(complete_command_line("logs --", actors)
        == strings{"--follow", "--level", "--lines", "--node"});
  CHECK(complete_command_line("logs --l", actors)
        == strings{"--level", "--lines"});
  CHECK(complete_command_line("logs ", actors)
        == strings{"--follow", "--level", "--lines", "--node"});
  CHECK(complete_command_line("logs --follow --l", actors)
        == strings{"--level", "--lines"});
  CHECK(complete_command_line("logs --follow ", actors)
        == strings{"--level", "--lines", "--node"});
  CHECK(complete_command_line("logs --level ", actors)
        == strings{"debug", "error", "info", "warn"});
  CHECK(complete_command_line("logs --level w", actors) == strings{"warn"});
  CHECK(complete_command_line("logs --level=e", actors)
        == strings{"--level=error"});
  CHECK(complete_command_line("logs --level warn ", actors)
        == strings{"--follow", "--lines", "--node"});
  CHECK(complete_command_line("logs --node ", actors)
          .empty()); // a number: nothing to offer
  CHECK(complete_command_line("events ", actors) == strings{"--since"});
  CHECK(complete_command_line("events -", actors) == strings{"--since"});
  CHECK(complete_command_line("status --", actors).empty());
  CHECK(complete_command_line("metrics \"lo", actors).empty()); // inside quotes
}

TEST_CASE("rollback [RUN_DIR] --to-version V [--checkpoint STEP]",
          "[shell]") {
  auto local = parse_ok("rollback /runs/a --to-version 2 --checkpoint 40");
  CHECK(local.args == strings{"/runs/a"});
  CHECK(local.options["to-version"] == "2");
  CHECK(local.options["checkpoint"] == "40");
  auto live = parse_ok("rollback --to-version=1 --prepare-only");
  CHECK(live.args.empty());
  CHECK(live.options["prepare-only"] == "true");
  CHECK_THAT(parse_error("rollback /runs/a"),
             Contains("rollback: missing --to-version (usage: rollback"));
  CHECK_THAT(parse_error("rollback --to-version 0"),
             Contains("--to-version must be a whole number >= 1, got '0'"));
  CHECK_THAT(parse_error("rollback --to-version 1 --checkpoint x"),
             Contains("--checkpoint must be a whole number >= 0"));
  CHECK_THAT(parse_error("rollback a b --to-version 1"),
             Contains("unexpected argument 'b'"));
  CHECK(complete_command_line("rollback --", actors)
        == strings{"--checkpoint", "--prepare-only", "--quiet",
                   "--to-version"});
  CHECK(complete_command_line("rollback /r --to-version 2 ", actors)
        == strings{"--checkpoint", "--prepare-only", "--quiet"});
}

TEST_CASE("rollout ACTION HOST:PORT [--token-file F]", "[shell]") {
  auto cmd = parse_ok("rollout promote 10.0.0.5:9000 --token-file /t");
  CHECK(cmd.args == strings{"promote", "10.0.0.5:9000"});
  CHECK(cmd.options["token-file"] == "/t");
  CHECK(parse_ok("rollout status 127.0.0.1:9000").args[0] == "status");
  CHECK_THAT(parse_error("rollout promot 127.0.0.1:9000"),
             Contains("ACTION must be one of status, events, promote, "
                      "rollback, got 'promot' (did you mean 'promote'?)"));
  CHECK_THAT(parse_error("rollout status"), Contains("missing HOST:PORT"));
  CHECK_THAT(parse_error("rollout"), Contains("missing ACTION"));
  CHECK(complete_command_line("rollout ", actors)
        == strings{"events", "promote", "rollback", "status"});
  CHECK(complete_command_line("rollout p", actors) == strings{"promote"});
  CHECK(complete_command_line("rollout status 127.0.0.1:9000 ", actors)
        == strings{"--token-file"});
  CHECK(complete_command_line("ro", actors)
        == strings{"rollback", "rollout"});
  CHECK(complete_command_line("rollo", actors) == strings{"rollout"});
}

TEST_CASE("line_editor compiles and links", "[shell]") {
  // Constructing one needs a terminal; the tmux-driven test covers behaviour.
  line_editor::completer complete = [](const std::string& before) {
    return complete_command_line(before, {});
  };
  CHECK(complete("sta") == strings{"status"});
  CHECK(sizeof(line_editor) > 0);
}
