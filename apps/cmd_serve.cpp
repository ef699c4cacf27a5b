// tutti serve CONFIG: OpenAI-style completions from a model (a `tutti
// export` / Hugging Face directory or a tutti checkpoint) in one process,
// until SIGINT or SIGTERM. The config and the model are checked before
// anything listens; a bad one is one line and exit 2.

#include <csignal>
#include <cstdio>

#include "command_line.hpp"
#include "commands.hpp"
#include "tutti/serve/http_front.hpp"
#include "tutti/serve/serve_config.hpp"

namespace tutti::cli {

int serve_command(const std::vector<std::string>& args) {
  command_line cl(
    "serve", "CONFIG [--listen HOST:PORT]",
    "OpenAI-style completions (POST /v1/completions, GET /v1/models,\n"
    "/health, /ready, /metrics) from the model CONFIG names. CONFIG has a\n"
    "'serve:' section (model, listen, max_batch_tokens, max_sequences,\n"
    "max_queue, max_prompt_tokens, max_output_tokens, request_timeout_s,\n"
    "kv_cache_bytes, kv_block_tokens, max_body_bytes, http_threads, "
    "model_name,\nep_size, step_timeout_s, prefix_caching, model_version (NAME@VERSION\n"
    "published by `tutti publish`, instead of model), registry)\n"
    "or is an InferenceService manifest (apiVersion, kind, metadata.name,\n"
    "spec.parallelism, spec.deployment) with those keys in spec.serve.\n"
    "Stops on SIGINT or SIGTERM.");
  cl.options()("listen", po::value<std::string>(),
               "HOST:PORT to listen on, over the config's (port 0: any)");
  cl.positional("config");
  po::variables_map vm;
  if (auto done = cl.parse(args, vm))
    return *done;
  if (!vm.count("config"))
    return cl.bad("usage: " + cl.usage_line());
  auto cfg = serve::load_serve_config(vm["config"].as<std::string>());
  if (!cfg)
    return fail(2, "serve: " + cfg.message());
  auto c = cfg.value();
  if (vm.count("listen"))
    if (auto s = serve::parse_listen_address(vm["listen"].as<std::string>(),
                                             c.host, c.port);
        !s.ok())
      return cl.bad("--listen: " + s.message());
  auto dir = serve::served_model_dir(c);
  if (!dir)
    return fail(2, "serve: " + dir.message());
  auto model = serve::load_model(dir.value());
  if (!model)
    return fail(2, "serve: " + model.message());
  if (!c.model_name.empty())
    model.value().name = c.model_name;
  c.limits.ep_ranks = c.ep_ranks_for(model.value().shape.experts);
  auto svc = serve::service::create(std::move(model.value()), c.limits);
  if (!svc)
    return fail(2, "serve: " + svc.message());
  if (c.devices() > 1)
    std::printf("serve: the manifest asks for expert parallelism over %lld "
                "devices (%lld nodes x %lld); this process runs %lld "
                "expert-parallel ranks\n",
                static_cast<long long>(c.devices()),
                static_cast<long long>(c.num_nodes),
                static_cast<long long>(c.num_gpus_per_node),
                static_cast<long long>(c.limits.ep_ranks));

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
    return fail(1, "serve: " + front.message());
  }
  const auto& s = service.model().shape;
  std::printf("serving %s on http://%s:%u (vocab %lld, %lld layers, %lld "
              "experts top-%lld; KV cache %lld blocks of %lld tokens)\n",
              service.model().name.c_str(), c.host.c_str(),
              static_cast<unsigned>(front.value()->port()),
              static_cast<long long>(s.vocab), static_cast<long long>(s.layers),
              static_cast<long long>(s.experts),
              static_cast<long long>(s.top_k),
              static_cast<long long>(service.kv_blocks()),
              static_cast<long long>(c.limits.kv_block_tokens));
  std::fflush(stdout);
  int sig = 0;
  sigwait(&stop_signals, &sig);
  std::printf("serve: stopping (signal %d)\n", sig);
  // The engine first: requests in flight end (503, or an error event on a
  // stream) instead of holding the HTTP threads until they finish.
  service.stop();
  front.value()->stop();
  return 0;
}

} // namespace tutti::cli
