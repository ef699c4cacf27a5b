// tutti gateway CONFIG [--listen HOST:PORT]: one endpoint in front of
// replicas of `tutti serve` (gateway/gateway.hpp), until SIGINT or
// SIGTERM; the replicas it started stop with it. tutti rollout
// status|events|promote|rollback HOST:PORT: a gateway's rollout, shown and
// steered.

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <csignal>
#include <cstdio>
#include <filesystem>

#include "child_process.hpp"
#include "command_line.hpp"
#include "commands.hpp"
#include "gateway_admin.hpp"
#include "tutti/gateway/gateway.hpp"
#include "tutti/config/serve_config.hpp"

namespace tutti::cli {

namespace {

// A free loopback port now (the replica binds it a moment later; another
// process taking it in between makes that replica fail its start, which
// the gateway reports and its health checks see).
int free_port() {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0)
    return -1;
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(a);
  int port = -1;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0
      && ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0)
    port = ntohs(a.sin_port);
  ::close(fd);
  return port;
}

struct serve_child : gateway::launched_process {
  serve_child(const std::vector<std::string>& argv,
              const std::filesystem::path& log)
    : child(argv, log) {}
  bool running() override { return child.running(); }
  child_process child;
};

gateway::launcher serve_launcher(const std::filesystem::path& logs) {
  return [logs](const std::string& config) -> expected<gateway::launched> {
    // Checked here so that a bad config is one line, not a replica that
    // never comes up.
    auto cfg = serve::load_serve_config(config);
    if (!cfg)
      return cfg.error();
    const int port = free_port();
    if (port <= 0)
      return status::error("no free loopback port for a replica");
    std::error_code ec;
    std::filesystem::create_directories(logs, ec);
    const auto log = logs / ("replica-" + std::to_string(port) + ".log");
    const auto self = std::filesystem::read_symlink("/proc/self/exe", ec);
    gateway::launched l;
    l.address = {"127.0.0.1", static_cast<uint16_t>(port)};
    l.process = std::make_shared<serve_child>(
      std::vector<std::string>{ec ? "tutti" : self.string(), "serve", config,
                               "--listen",
                               "127.0.0.1:" + std::to_string(port)},
      log);
    return l;
  };
}

} // namespace

int gateway_command(const std::vector<std::string>& args) {
  command_line cl(
    "gateway", "CONFIG [--listen HOST:PORT] [--replica-logs DIR]",
    "one OpenAI-style endpoint in front of replicas of `tutti serve`:\n"
    "least-outstanding routing, health checks, retries of requests not yet\n"
    "started, concurrency limits, API keys, circuit breakers, a canary's\n"
    "gray release with automatic rollback, autoscaling on queue length with\n"
    "warm spares. CONFIG has gateway:, stable:, canary: and autoscale:\n"
    "sections (every key: docs/config-reference.md). Stops on SIGINT or\n"
    "SIGTERM.");
  std::string logs;
  cl.listen_option();
  cl.options()("replica-logs", po::value(&logs),
    "where the replicas it starts log (default: a temporary directory)");
  cl.required("config", "CONFIG");
  po::variables_map vm;
  if (auto done = cl.parse(args, vm))
    return *done;
  auto cfg = gateway::load_gateway_config(vm["config"].as<std::string>());
  if (!cfg)
    return fail(2, "gateway: " + cfg.message());
  auto c = cfg.value();
  if (auto bad = cl.apply_listen(vm, c.host, c.port))
    return *bad;
  for (const auto* g : {&c.stable, &c.canary})
    if (!g->serve_config.empty())
      if (auto s = serve::load_serve_config(g->serve_config); !s)
        return fail(2, "gateway: " + s.message());
  if (logs.empty())
    logs = (std::filesystem::temp_directory_path()
            / ("tutti-gateway-" + std::to_string(::getpid())))
             .string();

  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);

  auto gw = gateway::gateway::start(c, serve_launcher(logs));
  if (!gw)
    return fail(1, "gateway: " + gw.message());
  std::printf("gateway on http://%s:%u (stable %s%s%s; replica logs in %s)\n",
              c.host.c_str(), static_cast<unsigned>(gw.value()->port()),
              c.stable.version.c_str(),
              c.canary.given() ? ", canary " : "",
              c.canary.version.c_str(), logs.c_str());
  std::fflush(stdout);
  int sig = 0;
  sigwait(&stop_signals, &sig);
  std::printf("gateway: stopping (signal %d)\n", sig);
  gw.value()->stop();
  return 0;
}

int rollout_command(const std::vector<std::string>& args) {
  command_line cl("rollout",
                  "status|events|promote|rollback HOST:PORT [--token-file F]",
                  "a gateway's versions, replicas and rollout (status), its "
                  "events, or\nthe canary moved to its next step (promote) "
                  "or back to the stable\nversion (rollback). Loopback "
                  "clients need no token; others present one\nof the "
                  "gateway's admin_policy (--token-file, TUTTI_TOKEN_FILE or "
                  "TUTTI_TOKEN),\nan operator's to promote or roll back.");
  std::string token_file;
  cl.options()("token-file", po::value(&token_file),
               "a 0600 file holding the access token (tutti token issue)");
  cl.positional("action").positional("address");
  po::variables_map vm;
  if (auto done = cl.parse(args, vm))
    return *done;
  if (!vm.count("address"))
    return cl.bad("usage: " + cl.usage_line());
  auto answer = gateway_admin_request(vm["action"].as<std::string>(),
                                vm["address"].as<std::string>(), token_file);
  if (answer.exit_status == 2 && answer.text.rfind('{', 0) != 0)
    return cl.bad(answer.text);
  if (answer.exit_status != 0 && answer.text.rfind('{', 0) != 0)
    return fail(answer.exit_status, "rollout: " + answer.text);
  std::printf("%s\n", answer.text.c_str());
  return answer.exit_status;
}

} // namespace tutti::cli
