#include "serve_node.hpp"

#include <csignal>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

#include "tutti/base/handoff_threads.hpp"
#include "tutti/runtime/log.hpp"
#include "tutti/runtime/node_tls.hpp"
#include "tutti/serve/expert_node.hpp"
#include "tutti/serve/http_front.hpp"
#include "tutti/serve/model_registry.hpp"
#include "tutti/serve/serve_layout.hpp"
#include "tutti/serve/serve_memory.hpp"
#include "tutti/serve/expert_loading.hpp"
#include "tutti/model/weights.hpp"

namespace tutti::cli {

namespace {

int fail(int status, const char* prog, const std::string& what) {
  std::fprintf(stderr, "%s: %s\n", prog, what.c_str());
  return status;
}

std::atomic<bool> follower_stop{false};
void on_follower_signal(int) { follower_stop = true; }

int follow(serve::served_model& model, const serve::service_limits& l,
           const char* prog) {
  std::signal(SIGINT, on_follower_signal);
  std::signal(SIGTERM, on_follower_signal);
  std::signal(SIGPIPE, SIG_IGN);
  const auto& cl = l.cluster;
  auto s = serve::run_expert_node(model, l, follower_stop, [&] {
    const int64_t first = cl.node_rank * l.ep_ranks;
    const auto ranks = l.ep_ranks > 1
                         ? "ranks " + std::to_string(first) + "-"
                             + std::to_string(first + l.ep_ranks - 1)
                         : "rank " + std::to_string(first);
    std::printf("serve node %lld of %zu: experts of %s joined node 0 "
                "at %s:%u\n",
                static_cast<long long>(cl.node_rank), cl.nodes.size(),
                ranks.c_str(), cl.nodes[0].c_str(),
                static_cast<unsigned>(cl.rendezvous_port));
    std::fflush(stdout);
  });
  if (!s.ok())
    return fail(1, prog, s.message());
  std::printf("serve node %lld: stopped\n", static_cast<long long>(cl.node_rank));
  return 0;
}

// The service's log, which `tutti logs CONFIG` reads back through it; one
// file per port, as replicas of one config (tutti gateway) share log_dir.
void open_serve_log(const std::string& dir, uint16_t port, const char* prog) {
  const auto path = std::filesystem::path(dir)
                    / ("tutti-serve-" + std::to_string(port) + ".log.jsonl");
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (!std::ofstream(path, std::ios::app)) {
    std::fprintf(stderr,
                 "%s: cannot write the log %s (serve.log_dir): `tutti logs` "
                 "will show nothing\n",
                 prog, path.string().c_str());
    return;
  }
  log_open(path.string(), "0");
  std::printf("serve: log %s\n", path.string().c_str());
  std::fflush(stdout);
}

// Across daemons: mutual TLS with the cluster's node certificates (the
// security section), or a loud warning that the rendezvous is plaintext.
expected<basp_guard::tls_options> daemon_tls(const serve::serve_config& c,
                                             int64_t node_rank,
                                             const char* prog) {
  if (!c.limits.cluster.spans_daemons())
    return basp_guard::tls_options{};
  if (c.security.tls_on())
    return set_up_node_tls(c.security, node_rank);
  if (c.security.required)
    return status::error("security.required is set but security.tls is "
                         "not: refusing to serve across daemons in the "
                         "clear");
  const std::string warning =
    "WARNING: no security.tls: the daemons of this service talk in the "
    "clear, and anyone who can reach serve.rendezvous_port can join it";
  std::fprintf(stderr, "%s: %s\n", prog, warning.c_str());
  log_warn("serve", warning);
  return basp_guard::tls_options{};
}

// What a node of the service needs before it loads: the model's shape
// and expert dtype, the layout it starts with and each daemon's memory.
struct serve_prep {
  std::filesystem::path dir;
  model::weights_info info;
  weight_dtype dtype = weight_dtype::fp32;            // the experts as served
  std::shared_ptr<const serve::expert_layout> layout; // null: contiguous
  std::shared_ptr<const serve::expert_layout> start;  // across daemons
  std::vector<serve::daemon_memory> memory;
};

expected<serve_prep> prepare(serve::serve_config& c) {
  serve_prep p;
  auto dir = serve::served_model_dir(c); // a published version is verified
  if (!dir)
    return dir.error();
  p.dir = dir.value();
  auto info = model::read_weights_info(p.dir);
  if (!info)
    return info.error();
  p.info = info.value();
  p.dtype = p.info.int8_experts ? weight_dtype::int8 : c.weights;
  const auto& shape = p.info.shape;
  c.limits.ep_ranks = c.ep_ranks_for(shape.experts);
  auto layout = serve::layout_for(c, shape);
  if (!layout)
    return layout.error();
  p.layout = layout.value();
  if (c.limits.cluster.spans_daemons()) {
    auto start = serve::start_layout(c, shape);
    if (!start)
      return start.error();
    p.start = start.value();
  }
  p.memory = serve::predict_memory(c, shape, p.dtype, p.start.get());
  return p;
}

} // namespace

int plan_serve(serve::serve_config c, const char* prog) {
  auto prep = prepare(c);
  if (!prep)
    return fail(2, prog, prep.message());
  const auto& p = prep.value();
  std::fputs(serve::memory_plan_text(c, p.info.shape, p.dtype, p.memory).c_str(),
             stdout);
  for (const auto& d : p.memory)
    if (!serve::check_memory_limit(c, d).ok())
      return 1;
  return 0;
}

int run_serve_node(serve::serve_config c, int64_t node_rank, const char* prog,
                   bool write_log) {
  auto& cl = c.limits.cluster;
  const auto nodes = static_cast<int64_t>(std::max<size_t>(cl.nodes.size(), 1));
  if (node_rank < 0 || node_rank >= nodes)
    return fail(2, prog,
                "--node-rank " + std::to_string(node_rank)
                  + " is outside 0.." + std::to_string(nodes - 1)
                  + " (serve.nodes)");
  cl.node_rank = node_rank;
  auto prep = prepare(c);
  if (!prep)
    return fail(2, prog, prep.message());
  const auto& p = prep.value();
  // Refused before anything loads, naming the figures.
  const auto& memory = p.memory.at(cl.spans_daemons() ? node_rank : 0);
  if (auto s = serve::check_memory_limit(c, memory); !s.ok())
    return fail(2, prog, s.message());
  // Across daemons each holds the dense weights and only the experts its
  // rank computes: the others' bytes are never read.
  std::vector<int64_t> own_ranks; // this daemon's ranks of the group
  for (int64_t i = 0; i < c.limits.ep_ranks; ++i)
    own_ranks.push_back(node_rank * c.limits.ep_ranks + i);
  auto model = cl.spans_daemons() ? serve::load_model_part(
                 p.dir, serve::experts_on(*p.start, own_ranks), c.weights)
                                  : serve::load_model(p.dir);
  if (!model)
    return fail(2, prog, model.message());
  if (const auto mtp = model.value().skipped_mtp_tensors; mtp > 0)
    std::printf("serve: skipping %lld multi-token-prediction tensors "
                "(num_nextn_predict_layers: %lld)\n",
                static_cast<long long>(mtp),
                static_cast<long long>(model.value().shape.mtp_layers));
  if (!c.model_name.empty())
    model.value().name = c.model_name;
  serve::quantize_experts(model.value(), c.weights);
  if (c.activations == activation_dtype::int8)
    if (auto s = serve::use_int8_rows(model.value()); !s.ok())
      return fail(2, prog, s.message());
  // Which kernel multiplies the experts, and why: said once, at the start
  // (once the config is known to be good).
  const auto weights_text = serve::expert_weights_text(model.value());
  // The config's limits, and what they need built from the files it names.
  serve::service_limits limits{c.limits};
  limits.layout = p.layout;
  if (cl.spans_daemons()) {
    limits.model_dir = p.dir.string();
    std::printf("serve: node %lld holds %lld bytes: dense %lld + %lld own "
                "experts %lld + KV cache %lld\n",
                static_cast<long long>(node_rank),
                static_cast<long long>(memory.total()),
                static_cast<long long>(memory.dense_bytes),
                static_cast<long long>(memory.experts),
                static_cast<long long>(memory.expert_bytes),
                static_cast<long long>(memory.kv_cache_bytes));
  }
  auto replan = serve::replan_for(c);
  if (!replan)
    return fail(2, prog, replan.message());
  limits.replan = replan.value();
  auto affinity = serve::affinity_for(c);
  if (!affinity)
    return fail(2, prog, affinity.message());
  limits.affinity = affinity.value();
  if (auto tls = daemon_tls(c, node_rank, prog); !tls)
    return fail(2, prog, tls.message());
  else
    limits.guard_tls = std::move(tls.value());
  // Before the daemon's threads start, so that every one inherits it.
  run_without_wakeup_preemption();
  if (node_rank > 0) {
    std::printf("serve: %s\n", weights_text.c_str());
    return follow(model.value(), limits, prog);
  }
  auto svc = serve::service::create(std::move(model.value()), limits);
  if (!svc)
    return fail(2, prog, svc.message());
  std::printf("serve: %s\n", weights_text.c_str());
  if (cl.spans_daemons())
    std::printf("serve: expert parallelism over %zu daemons (%lld rank%s "
                "each, rendezvous on %s:%u)\n",
                cl.nodes.size(), static_cast<long long>(c.limits.ep_ranks),
                c.limits.ep_ranks == 1 ? "" : "s", cl.nodes[0].c_str(),
                static_cast<unsigned>(cl.rendezvous_port));
  else if (c.devices() > 1)
    std::printf("serve: the manifest asks for expert parallelism over %lld "
                "devices (%lld nodes x %lld); this process runs %lld "
                "expert-parallel ranks\n",
                static_cast<long long>(c.devices()),
                static_cast<long long>(c.num_nodes),
                static_cast<long long>(c.num_gpus_per_node),
                static_cast<long long>(c.limits.ep_ranks));
  if (!c.placement.empty())
    std::printf("serve: experts placed by %s\n", c.placement.c_str());
  if (cl.data_parallel_attention)
    std::printf("serve: every daemon's rank holds sequences "
                "(serve.data_parallel_attention)\n");
  if (c.rack_affinity)
    std::printf("serve: requests start in the rack of their prompt's "
                "experts (serve.rack_affinity)\n");
  if (const auto& x = limits.layout; x && x->offload_rank >= 0) {
    int64_t n = 0;
    for (char o : x->offloaded)
      n += o ? 1 : 0;
    std::printf("serve: %lld of %lld (layer, expert) pairs used below %g of "
                "their layer's tokens (%s) are offloaded to rank %lld\n",
                static_cast<long long>(n),
                static_cast<long long>(x->layers * x->experts),
                c.offload.threshold, c.offload.stats.c_str(),
                static_cast<long long>(x->offload_rank));
  }
  if (limits.replan.enabled() && c.replan)
    std::printf("serve: experts replanned by rack when more than %g of a "
                "window's rows cross racks (every %lld steps)\n",
                limits.replan.max_cross_rack_share,
                static_cast<long long>(limits.replan.window_steps));

  // The signals are taken by sigwait below, so every thread blocks them.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);

  auto& service = *svc.value();
  service.start();
  auto front = serve::http_front::start(service, c);
  if (!front) {
    service.stop();
    return fail(1, prog, front.message());
  }
  const auto& s = service.model().shape;
  std::printf("serving %s on %s://%s:%u (vocab %lld, %lld layers, %lld "
              "experts top-%lld; KV cache %lld blocks of %lld tokens)\n",
              service.model().name.c_str(),
              front.value()->tls() ? "https" : "http", c.host.c_str(),
              static_cast<unsigned>(front.value()->port()),
              static_cast<long long>(s.vocab), static_cast<long long>(s.layers),
              static_cast<long long>(s.experts),
              static_cast<long long>(s.top_k),
              static_cast<long long>(service.kv_blocks()),
              static_cast<long long>(c.limits.kv_block_tokens));
  std::fflush(stdout);
  const auto address = c.host + ":" + std::to_string(front.value()->port());
  if (write_log)
    open_serve_log(c.log_dir, front.value()->port(), prog);
  log_info("serve", "serving " + service.model().name + " on " + address
                      + " (" + std::to_string(service.kv_blocks())
                      + " KV blocks, "
                      + std::to_string(c.limits.ep_ranks)
                      + " expert-parallel ranks; " + weights_text + ")");
  // Until a stop signal here or on another daemon of the service, or the
  // replica fails (its expert tier gave up), checked every tenth of a
  // second: then the process ends non-zero, so what runs it replaces it,
  // instead of answering requests it cannot serve.
  const timespec tick{0, 100'000'000};
  int sig = -1;
  std::string failure;
  while (sig < 0 && !service.stop_wanted()
         && (failure = service.failure()).empty())
    sig = sigtimedwait(&stop_signals, nullptr, &tick);
  if (!failure.empty()) {
    std::fprintf(stderr, "%s: %s; exiting\n", prog, failure.c_str());
    log_error("serve", failure + "; exiting");
  } else {
    const auto why = sig >= 0 ? "signal " + std::to_string(sig)
                              : std::string("another daemon stopping");
    const auto grace = std::chrono::milliseconds(
      static_cast<int64_t>(c.limits.drain_timeout_s * 1000));
    std::printf("serve: stopping (%s): draining for up to %g s\n",
                why.c_str(), c.limits.drain_timeout_s);
    std::fflush(stdout);
    log_info("serve", "stopping (" + why + "), draining");
    if (!service.drain(grace))
      log_warn("serve", "requests still running after the drain timeout "
                        "end cancelled");
  }
  // The engine first: requests left end (503, or an error event on a
  // stream) instead of holding the HTTP threads until they finish.
  service.stop();
  front.value()->stop();
  return failure.empty() ? 0 : 1;
}

} // namespace tutti::cli
