// tuttid --config FILE --node-rank N [--data-dir DIR]: one node daemon.
// Hosts the node's actor tree; node 0 also hosts the coordinator. Given a
// serve config instead of a job's, node N of a serving replica across
// daemons (serve_node.hpp). Exits 0
// when the job completes or is stopped (SIGTERM/SIGINT stop it at a step
// boundary, its checkpoint committed; --stopped-status N: every daemon of a
// job stopped before its end exits N),
// 1 when it fails, 2 on bad input, 3 when the stop's checkpoint was not
// committed within --stop-grace-s (the next start resumes from the
// checkpoint before, and says so). With --spare --rack R instead
// of --node-rank it waits with the coordinator until a node leaves, then
// becomes that node (coordinator_spares.cpp picks a spare of the node's
// rack first).

#include <boost/program_options.hpp>

#include <caf/actor_system.hpp>
#include <caf/io/middleman.hpp>
#include <caf/scoped_actor.hpp>

#include <atomic>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <thread>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include "tutti/elastic/replica_memory.hpp"
#include "tutti/runtime/basp_guard.hpp"
#include "tutti/train/coordinator.hpp"
#include "tutti/train/job_dashboard.hpp"
#include "tutti/train/journal.hpp"
#include "tutti/runtime/log.hpp"
#include "tutti/train/rank.hpp"
#include "tutti/runtime/metrics_board.hpp"
#include "tutti/runtime/node_endpoint.hpp"
#include "tutti/runtime/node_tls.hpp"
#include "job_start.hpp"
#include "serve_node.hpp"
#include "tutti/train/node_supervisor.hpp"
#include "tutti/runtime/system_config.hpp"
#include "tutti/base/process_memory.hpp"
#include "tutti/client/coordinator_connect.hpp"
#include "tutti/kernels/blas_core.hpp"
#include "tutti/lifecycle/environment.hpp"
#include "tutti/protocol/errors.hpp"
#include "tutti/config/job_config.hpp"
#include "tutti/security/access_policy.hpp"
#include "tutti/security/audit_log.hpp"
#include "tutti/security/tls_dialer.hpp"
#include "tutti/security/web_config.hpp"
#include "tutti/config/serve_config.hpp"

namespace po = boost::program_options;
using namespace tutti;

namespace {

std::atomic<bool> interrupted{false};
void on_signal(int) { interrupted.store(true); }

// A stop whose checkpoint did not make it within --stop-grace-s.
constexpr int stopped_without_checkpoint = 3;

// Seconds as people write them: "90", "0.5".
std::string seconds_text(double seconds) {
  char text[32];
  std::snprintf(text, sizeof text, "%g", seconds);
  return text;
}

int fail(int status, const std::string& what) {
  std::fprintf(stderr, "tuttid: %s\n", what.c_str());
  return status;
}

// With TLS, the guard in front of each published actor runs the handshake
// first.
basp_guard::tls_options guard_tls;

// Loads this node's certificate for the guard (server) and outgoing
// connections (client): it must be valid, from the CA, and name this node.
// Without security.tls, a multi-node job runs in the clear: say so loudly.
status set_up_security(const job_config& cfg, int64_t node_rank) {
  const auto& sec = cfg.security;
  if (!sec.tls_on()) {
    if (cfg.cluster.nnodes > 1) {
      const std::string warning =
        "WARNING: no security.tls: the control plane is plaintext and "
        "unauthenticated; anyone who can reach these ports can join the job, "
        "read it and stop it (set security.tls, or security.required: true "
        "to refuse this)";
      std::fprintf(stderr, "tuttid: %s\n", warning.c_str());
      log_warn("tuttid", warning);
    }
    return {};
  }
  auto tls = set_up_node_tls(sec, node_rank);
  if (!tls)
    return tls.error();
  if (node_rank == 0)
    if (auto audit = security::audit_log::open(cfg.run.dir + "/audit.jsonl");
        !audit)
      return audit.error();
  guard_tls = std::move(tls.value());
  return {};
}

// Whether the job was stopped before its end rather than completed, for a
// node other than 0 (node 0 knows from the outcome): the coordinator says
// so once it has settled (asked for up to 5 s); without an answer, whether
// this daemon was signalled.
bool job_was_stopped(caf::scoped_actor& self,
                     const coordinator_actor& coordinator) {
  for (int attempt = 0; attempt < 10; ++attempt) {
    std::string state;
    self->request(coordinator, std::chrono::milliseconds(300), status_atom_v)
      .receive([&](job_status& s) { state = s.state; }, [](caf::error&) {});
    if (state == "completed")
      return false;
    if (state == "stopped" || state.empty())
      return state == "stopped" || interrupted.load();
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  return interrupted.load();
}

struct daemon_options;
int run_node(caf::actor_system& sys, caf::scoped_actor& self,
             const job_config& cfg, const daemon_options& opt,
             const coordinator_actor& coordinator,
             std::shared_ptr<metrics_board> board,
             const std::vector<std::string>& environment,
             std::unique_ptr<basp_guard>& node_guard);

struct daemon_options {
  std::string config;
  int64_t node_rank = -1;
  std::string data_dir;
  std::string rack;
  bool fresh = false, yes = false;
  bool spare = false;
  int stopped_status = 0;   // the job was stopped before its last step
  double stop_grace_s = 90; // after a signal, for the stop's checkpoint
};

// Polls until host:port can be bound (the listener before us has closed),
// for up to `seconds`.
bool wait_until_bindable(const std::string& host, int64_t port,
                         int64_t seconds) {
  const auto deadline = std::chrono::steady_clock::now()
                        + std::chrono::seconds(seconds);
  for (;;) {
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<uint16_t>(port));
    const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    int one = 1;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    const bool free = fd >= 0 && ::inet_pton(AF_INET, host.c_str(), &a.sin_addr) == 1
                      && ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
    if (fd >= 0)
      ::close(fd);
    if (free)
      return true;
    if (std::chrono::steady_clock::now() >= deadline || interrupted)
      return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
}

std::string host_name() {
  char name[256] = {};
  if (::gethostname(name, sizeof name - 1) != 0)
    return "?";
  return name;
}

// --spare: offers this daemon to the coordinator and waits until it is
// assigned the node rank of a node that left. The wait ends with the
// assignment, the job's end or the coordinator's loss (-1, with the reason
// in `why`), or a signal (-1).
int64_t wait_as_spare(caf::actor_system& sys, caf::scoped_actor& self,
                      const job_config& cfg, const daemon_options& opt,
                      const std::vector<std::string>& environment,
                      std::string& why) {
  const auto patience = std::chrono::seconds(cfg.cluster.join_timeout_s);
  auto handle = client::connect_coordinator(
    sys,
    {cfg.cluster.coordinator_host(),
     static_cast<uint16_t>(cfg.cluster.coordinator_port())},
    patience, [] { return interrupted.load(); });
  if (!handle) {
    why = handle.message();
    return -1;
  }
  const auto coordinator = *handle;
  node_registration reg{-1,
                        host_name(),
                        0,
                        opt.rack,
                        cfg.cluster.nproc_per_node,
                        fingerprint_text(cfg),
                        environment};
  self->request(coordinator, patience, spare_atom_v, reg, caf::actor{self})
    .receive([](caf::ok_atom) {},
             [&](caf::error& err) {
               why = "not admitted as a spare: " + sys.render(err);
             });
  if (!why.empty())
    return -1;
  log_info("tuttid", "waiting as a spare in rack '" + opt.rack + "'");
  std::printf("waiting as a spare in rack '%s'\n", opt.rack.c_str());
  std::fflush(stdout);
  self->monitor(coordinator);
  int64_t node = -2;
  while (node == -2)
    self->receive(
      [&](assign_atom, int64_t n) { node = n; },
      [&](const job_outcome& outcome) {
        why = outcome.ok ? "" : "the job failed: " + outcome.message;
        node = -1;
      },
      [&](caf::down_msg& dm) {
        if (dm.source != coordinator.address())
          return;
        why = "the coordinator went away";
        node = -1;
      },
      caf::after(std::chrono::milliseconds(200)) >> [&] {
        if (interrupted)
          node = -1;
      });
  self->demonitor(coordinator.address());
  return node;
}

// Node 0, when the grace time ran out: the job's store says the job stopped
// without its checkpoint, so that the next start says which checkpoint it
// resumes from instead (resume.cpp). Bounded: each request waits 2 s.
void record_stop_without_checkpoint(caf::scoped_actor& self,
                                    const coordinator_actor& coordinator,
                                    const journal_actor& journal,
                                    double grace_s) {
  const auto patience = std::chrono::seconds(2);
  job_status now;
  self->request(coordinator, patience, status_atom_v)
    .receive([&](job_status& s) { now = std::move(s); }, [](caf::error&) {});
  const auto text =
    "stopped at step " + std::to_string(now.step)
    + " without its checkpoint: the grace time (" + seconds_text(grace_s)
    + " s, --stop-grace-s) ran out; the last committed checkpoint is step "
    + std::to_string(now.last_checkpoint);
  self->send(journal, job_event{"stop_without_checkpoint", text, grace_s});
  self->send(journal, job_final_state{"stopped_without_checkpoint", now.step});
  // Answered after the two above are stored (one sender, in order).
  const auto now_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                        std::chrono::system_clock::now().time_since_epoch())
                        .count();
  self->request(journal, patience, events_atom_v, int64_t{now_ms})
    .receive([](std::vector<std::string>&) {}, [](caf::error&) {});
}

int serve_job(const job_config& cfg, daemon_options opt) {
  tutti_system_config sys_cfg{network_options(cfg.recovery)};
  caf::actor_system sys{sys_cfg};
  caf::scoped_actor self{sys};

  // What this node runs with; read once, before any actor (it hashes the
  // data files), and compared by the coordinator when the node joins.
  const auto environment = lifecycle::environment_lines(
    lifecycle::node_environment(cfg, kernels::blas_core_name()));
  if (opt.spare) {
    std::string why;
    opt.node_rank = wait_as_spare(sys, self, cfg, opt, environment, why);
    if (opt.node_rank < 0) {
      if (!why.empty())
        return fail(1, "spare: " + why);
      log_info("tuttid", "spare: the job ended without needing this daemon");
      return 0;
    }
    const auto now = "spare assigned: this daemon is now node "
                     + std::to_string(opt.node_rank);
    log_warn("tuttid", now);
    std::printf("%s\n", now.c_str());
    std::fflush(stdout);
  }
  coordinator_actor coordinator;
  journal_actor journal;
  std::vector<std::unique_ptr<basp_guard>> guards; // outlive the system's use
  // /metrics: the coordinator's text (node 0) and this node's.
  auto job_board = std::make_shared<metrics_board>();
  auto node_board = std::make_shared<metrics_board>();
  std::unique_ptr<net::metrics_endpoint> metrics_server;
  // /dashboard beside /metrics; its events once node 0 opens the store.
  auto job_store_for_page = std::make_shared<job_store_slot>();
  if (cfg.metrics.port > 0) {
    security::web_config web; // none: plain HTTP, no auth
    if (!cfg.metrics.web_config.empty()) {
      auto loaded = security::load_web_config(cfg.metrics.web_config);
      if (!loaded)
        return fail(2, "metrics.web_config: " + loaded.message());
      web = std::move(*loaded);
    }
    auto started = serve_metrics(
      cfg.cluster.node(opt.node_rank).host, cfg.metrics.port + opt.node_rank,
      {job_board, node_board}, web,
      dashboard::routes(
        job_dashboard(cfg, {job_board, node_board}, job_store_for_page)));
    if (!started)
      return fail(1, started.message());
    metrics_server = std::move(*started);
  }
  if (opt.node_rank == 0) {
    auto start = cli::open_job(
      cfg, opt.config,
      (std::filesystem::path(opt.data_dir.empty() ? cfg.run.dir : opt.data_dir)
       / "state")
        .string(),
      opt.fresh, opt.yes, "tuttid");
    if (start.status != 0 || start.completed)
      return start.status;
    job_store_for_page->set(start.db);
    journal = spawn_journal(sys, cfg, start.db);
    coordinator =
      spawn_coordinator(sys, {cfg, caf::actor{self}, false, journal,
                              start.resume_step, job_board, environment});
    // Bind only to the address the config gives.
    if (auto s = publish_guarded(sys, coordinator,
                                 cfg.cluster.coordinator_host(),
                                 cfg.cluster.coordinator_port(), guards,
                                 guard_tls);
        !s.ok())
      return fail(1, "coordinator: " + s.message());
    log_info("tuttid", "coordinator listening on " + cfg.cluster.coordinator);
  }
  auto patience = std::chrono::seconds(cfg.cluster.join_timeout_s);
  std::unique_ptr<basp_guard> node_guard;
  int status = 0;
  for (;;) {
    if (opt.node_rank != 0) {
      // Daemons start in any order, and a coordinator may restart.
      auto handle = client::connect_coordinator(
        sys,
        {cfg.cluster.coordinator_host(),
         static_cast<uint16_t>(cfg.cluster.coordinator_port())},
        patience, [] { return interrupted.load(); });
      if (!handle)
        return fail(1, handle.message() + " (waited "
                         + std::to_string(patience.count()) + " s)");
      coordinator = *handle;
    }
    auto lost = run_node(sys, self, cfg, opt, coordinator, node_board,
                         environment, node_guard);
    if (lost < 0 && opt.node_rank != 0 && !interrupted) {
      // The coordinator went away mid-job: wait for it to come back (its
      // daemon restarts and resumes the job from its store).
      log_warn("tuttid",
               "coordinator lost; reconnecting for up to "
                 + std::to_string(static_cast<int64_t>(cfg.recovery.max_wait_s))
                 + " s (recovery.max_wait_s)");
      patience = std::chrono::seconds(
        static_cast<int64_t>(cfg.recovery.max_wait_s));
      continue;
    }
    status = lost < 0 ? 1 : lost;
    if (status == stopped_without_checkpoint && journal)
      record_stop_without_checkpoint(self, coordinator, journal,
                                     opt.stop_grace_s);
    break;
  }
  if (journal)
    self->send_exit(journal, caf::exit_reason::user_shutdown);
  std::fflush(nullptr);
  if (opt.node_rank == 0) {
    // A moment for the middleman to tell the other daemons the job is over.
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
  }
  if (status != 0) {
    // Ranks of a failed job may sit in collectives; do not wait for them.
    log_close();
    std::_Exit(status);
  }
  return status;
}

// One node supervisor's life: publish it on the node's address, wait for
// the job's end (node 0 also for its coordinator). Returns the exit status,
// or -1 when the coordinator was lost.
int run_node(caf::actor_system& sys, caf::scoped_actor& self,
             const job_config& cfg, const daemon_options& opt,
             const coordinator_actor& coordinator,
             std::shared_ptr<metrics_board> board,
             const std::vector<std::string>& environment,
             std::unique_ptr<basp_guard>& node_guard) {
  const auto address = cfg.cluster.node(opt.node_rank);
  const auto per_node = static_cast<int>(cfg.cluster.nproc_per_node);
  auto supervisor = spawn_node_supervisor(
    sys, {cfg, opt.node_rank, coordinator, opt.rack, std::move(board),
          std::make_shared<comm::memory_hub>(
            static_cast<int>(opt.node_rank) * per_node, per_node),
          environment});
  node_guard.reset(); // the previous supervisor's, if any
  std::vector<std::unique_ptr<basp_guard>> published;
  // A spare takes over the address of a node that is still leaving (a
  // drained daemon flushes its checkpoint writer first): it waits for it.
  if (opt.spare && !wait_until_bindable(address.host, address.port,
                                        cfg.cluster.join_timeout_s))
    log_warn("tuttid", address.host + ":" + std::to_string(address.port)
                         + " still in use after cluster_config.join_timeout_s");
  if (auto s = publish_guarded(sys, supervisor, address.host, address.port,
                               published, guard_tls);
      !s.ok())
    return fail(1, "node: " + s.message());
  node_guard = std::move(published.front());
  log_info("tuttid", "node " + std::to_string(opt.node_rank) + " listening on "
                       + address.host + ":" + std::to_string(address.port));
  self->monitor(supervisor);

  // Node 0 waits for the job's end (from its coordinator) and its node;
  // other nodes for their node supervisor only.
  bool job_over = opt.node_rank != 0, node_over = false, stopping = false;
  bool stopped_early = false; // node 0: the outcome is a stop, not the end
  bool out_of_grace = false;
  std::chrono::steady_clock::time_point give_up;
  int status = 0;
  while (!job_over || !node_over) {
    self->receive(
      [&](const job_outcome& outcome) {
        const auto& [ok, why, eval_loss] = outcome;
        job_over = true;
        if (!ok) {
          status = 1;
          log_error("tuttid", "job failed: " + why);
          return;
        }
        stopped_early = !why.empty();
        auto done = why.empty() ? std::string("job completed") : why;
        if (std::isfinite(eval_loss))
          done += "; final held-out loss " + std::to_string(eval_loss)
                  + " nats/token";
        log_info("tuttid", done);
        std::printf("%s\n", done.c_str());
      },
      [&](caf::down_msg& dm) {
        if (dm.source != supervisor.address())
          return;
        node_over = true;
        if (dm.reason == caf::make_error(errc::coordinator_lost)) {
          status = -1;
          job_over = true;
        } else if (dm.reason && dm.reason != caf::exit_reason::normal) {
          status = 1;
          log_error("tuttid", "node ended: " + sys.render(dm.reason));
          job_over = true;
        }
      },
      caf::after(std::chrono::milliseconds(200)) >>
        [&] {
          const auto now = std::chrono::steady_clock::now();
          if (interrupted && !stopping) {
            log_info("tuttid",
                     "signal: stopping at the next step boundary, within "
                       + seconds_text(opt.stop_grace_s)
                       + " s (--stop-grace-s)");
            self->send(supervisor, stop_atom_v);
            stopping = true;
            give_up =
              now
              + std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                std::chrono::duration<double>(opt.stop_grace_s));
          } else if (stopping && now >= give_up) {
            out_of_grace = job_over = node_over = true;
          }
        });
  }
  if (out_of_grace) {
    const auto why =
      "the grace time (" + seconds_text(opt.stop_grace_s)
      + " s, --stop-grace-s) ran out before the stop's checkpoint was "
        "committed; exiting without it: the next start resumes from the "
        "last committed checkpoint";
    log_warn("tuttid", why);
    std::printf("%s\n", why.c_str());
    return stopped_without_checkpoint;
  }
  // A stop (a signal to any daemon, or `stop` in the shell) ended the job
  // before its last step: every daemon says so, for a scheduler to run it
  // again.
  if (status != 0 || opt.stopped_status == 0)
    return status;
  const bool stopped = opt.node_rank == 0 ? stopped_early
                                          : job_was_stopped(self, coordinator);
  return stopped ? opt.stopped_status : 0;
}

} // namespace

int main(int argc, char** argv) {
  daemon_options opt;
  po::options_description desc("usage: tuttid --config FILE --node-rank N");
  desc.add_options()("help,h", "this text")(
    "config", po::value(&opt.config)->required(), "cluster config (YAML)")(
    "node-rank", po::value(&opt.node_rank), "this node's rank")(
    "spare", po::bool_switch(&opt.spare),
    "no node rank: wait to replace a node that leaves (needs --rack)")(
    "data-dir", po::value(&opt.data_dir), "daemon state (default run.dir)")(
    "rack", po::value(&opt.rack), "rack label (overrides the config's)")(
    "fresh", po::bool_switch(&opt.fresh), "node 0: forget the job, start over")(
    "yes", po::bool_switch(&opt.yes), "with --fresh: do not ask")(
    "stopped-status", po::value(&opt.stopped_status),
    "exit status when the job was stopped before its last step (default 0; "
    "a scheduler that must run the job again wants 3)")(
    "stop-grace-s", po::value(&opt.stop_grace_s),
    "after SIGTERM/SIGINT, wait this long for the stop's checkpoint, then "
    "exit 3 without it (default 90; under the scheduler's grace period)");
  po::variables_map vm;
  try {
    po::store(po::parse_command_line(argc, argv, desc), vm);
    if (vm.count("help")) {
      std::cout << desc;
      return 0;
    }
    po::notify(vm);
  } catch (const po::error& ex) {
    return fail(2, ex.what());
  }
  // A serve config: this daemon is node N of a serving replica.
  if (serve::is_serve_config_file(opt.config)) {
    auto served = serve::load_serve_config(opt.config);
    if (!served)
      return fail(2, "config: " + served.message());
    return cli::run_serve_node(std::move(*served), opt.node_rank, "tuttid");
  }
  auto loaded = load_job_config(opt.config);
  if (!loaded)
    return fail(2, "config: " + loaded.message());
  job_config cfg = std::move(*loaded);
  elastic::keep_memory_for_replicas(cfg);
  if (!(opt.stop_grace_s > 0))
    return fail(2, "--stop-grace-s " + seconds_text(opt.stop_grace_s)
                     + " must be above 0");
  if (opt.stopped_status < 0 || opt.stopped_status > 255)
    return fail(2, "--stopped-status " + std::to_string(opt.stopped_status)
                     + " is outside 0..255");
  if (opt.spare && (vm.count("node-rank") || opt.rack.empty()))
    return fail(2, "--spare takes --rack and no --node-rank (the coordinator "
                   "assigns it one)");
  if (opt.spare && cfg.security.tls_on())
    return fail(2, "--spare needs security off (a node certificate names its "
                   "node rank)");
  if (!opt.spare && (opt.node_rank < 0 || opt.node_rank >= cfg.cluster.nnodes))
    return fail(2, "--node-rank " + std::to_string(opt.node_rank)
                     + " is outside 0.."
                     + std::to_string(cfg.cluster.nnodes - 1)
                     + " (cluster_config.nnodes)");
  if (auto usable = check_rank_device(cfg); !usable)
    return fail(2, usable.message());
  auto dir = opt.data_dir.empty() ? cfg.run.dir : opt.data_dir;
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (opt.node_rank == 0)
    std::filesystem::create_directories(cfg.run.dir, ec);
  const auto name = opt.spare ? "spare-" + std::to_string(::getpid())
                              : std::to_string(opt.node_rank);
  log_open((std::filesystem::path(dir) / ("tuttid-" + name + ".log.jsonl"))
             .string(),
           name);
  std::signal(SIGINT, on_signal);
  std::signal(SIGTERM, on_signal);
  // A peer that went away must be an error on its socket, not the end of
  // this daemon (aborted communicators shut their sockets down under Gloo).
  std::signal(SIGPIPE, SIG_IGN);
  tutti::return_large_buffers_on_free();
  // A spare runs without TLS (refused above): only the warning applies.
  if (auto secured = set_up_security(cfg, opt.spare ? 1 : opt.node_rank);
      !secured.ok()) {
    log_error("tuttid", "security: " + secured.message());
    log_close();
    return fail(2, "security: " + secured.message()
                     + " (not starting without valid security files)");
  }
  int status = serve_job(cfg, opt);
  log_close();
  return status;
}
