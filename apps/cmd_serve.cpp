// tutti serve CONFIG: OpenAI-style completions from a model (a `tutti
// export` / Hugging Face directory or a tutti checkpoint) in one process,
// until SIGINT or SIGTERM; across daemons (serve.nodes) this is node 0 and
// `tuttid --config CONFIG --node-rank N` the others. The config and the
// model are checked before anything listens; a bad one is one line and
// exit 2. Its log goes to serve.log_dir (default: the config's directory)
// as tutti-serve-PORT.log.jsonl, which `tutti logs CONFIG` shows.

#include "command_line.hpp"
#include "commands.hpp"
#include "serve_node.hpp"
#include "tutti/config/serve_config.hpp"

namespace tutti::cli {

int serve_command(const std::vector<std::string>& args) {
  command_line cl(
    "serve", "CONFIG [--listen HOST:PORT] [--plan]",
    "OpenAI-style completions (POST /v1/completions, /v1/chat/completions\n"
    "with the model's chat_template, GET /v1/models, /health, /ready,\n"
    "/metrics) from the model CONFIG names. CONFIG has a\n"
    "'serve:' section (model, listen, max_batch_tokens, max_sequences,\n"
    "max_queue, max_prompt_tokens, max_output_tokens, request_timeout_s,\n"
    "kv_cache_bytes, kv_block_tokens, max_body_bytes, http_threads, "
    "model_name,\nep_size, step_timeout_s, prefix_caching, nodes, "
    "rendezvous_port, model_version\n(NAME@VERSION published by `tutti "
    "publish`, instead of model), registry, log_dir)\n"
    "or is an InferenceService manifest (apiVersion, kind, metadata.name,\n"
    "spec.parallelism, spec.deployment) with those keys in spec.serve\n"
    "(every key: docs/config-reference.md).\n"
    "Stops on SIGINT or SIGTERM. `tutti status|shell|logs|chaos CONFIG` on\n"
    "this machine reach it through its listener (loopback only).\n"
    "--plan prints what each daemon would hold and exits.");
  cl.listen_option();
  cl.options()("plan",
               "print the bytes each daemon would hold (dense weights, its "
               "own experts, KV cache) against serve.memory_limit, and "
               "exit (1 when one is above it)");
  cl.required("config", "CONFIG");
  po::variables_map vm;
  if (auto done = cl.parse(args, vm))
    return *done;
  auto cfg = serve::load_serve_config(vm["config"].as<std::string>());
  if (!cfg)
    return fail(2, "serve: " + cfg.message());
  auto c = cfg.value();
  if (auto bad = cl.apply_listen(vm, c.host, c.port))
    return *bad;
  if (vm.count("plan"))
    return plan_serve(std::move(c), "serve");
  return run_serve_node(std::move(c), 0, "serve", true);
}

} // namespace tutti::cli
