// tutti: run an MoE training job, prepare its data.

#include <csignal>
#include <cstdio>
#include <exception>
#include <string>
#include <vector>

#include "commands.hpp"
#include "tutti/base/process_memory.hpp"

namespace {

const char* usage =
  "usage: tutti <command> [args]\n"
  "\n"
  "commands:\n"
  "  run CONFIG [--quiet] [--fresh [--yes]]\n"
  "                              train in this process; resumes by itself\n"
  "  plan CONFIG [--json]        capacity plan: memory, FLOPs, traffic per "
  "rank\n"
  "  diag CONFIG                 interconnect check across the config's "
  "daemons\n"
  "  status CONFIG|HOST:PORT [--json]\n"
  "                              a live job: state, step, loss, recoveries\n"
  "  chaos CONFIG|HOST:PORT FAULT [--rank R] [--node N] [--seconds S]\n"
  "                              inject a fault into a live job\n"
  "  drill DRILL.yaml            run a job under scripted faults; report\n"
  "                              detection, recovery and the loss curve\n"
  "  shell [--connect HOST:PORT] [-c \"CMD; CMD\"] [--json]\n"
  "                              watch and steer a live job (any daemon),\n"
  "                              a gateway (service), a stopped job (rollback)\n"
  "  logs CONFIG|HOST:PORT [--node N] [--level L] [--follow]\n"
  "                              every daemon's log, merged by time\n"
  "  ckpt list RUN_DIR           committed checkpoints (step, size, time)\n"
  "  ckpt verify CKPT_DIR        check every hash of a checkpoint\n"
  "  ckpt show CKPT_DIR|SHARD    a shard's tensors (name, shape, dtype, hash)\n"
  "  export CKPT_DIR --format hf --out DIR\n"
  "                              Hugging Face MixtralForCausalLM safetensors\n"
  "  data synth --out DIR ...    synthetic order-2 Markov token data\n"
  "  data prepare --input F|DIR... --out DIR [--tokenizer DIR]\n"
  "                              a corpus into token shards (all cores)\n"
  "  data tokenizer train --input F|DIR... --vocab N --out DIR\n"
  "                              a SentencePiece tokenizer (unigram|bpe)\n"
  "  data bench CONFIG           loader tokens/s against the job's need\n"
  "  sample RUN_DIR --prompt TEXT\n"
  "                              continue a prompt with a trained model\n"
  "  serve CONFIG [--listen HOST:PORT]\n"
  "                              OpenAI-style completions from a model\n"
  "  bench serve [--url URL] ...  load generator for OpenAI-style servers\n"
  "  gateway CONFIG [--listen HOST:PORT]\n"
  "                              one endpoint in front of serve replicas\n"
  "  service status|events|promote|rollback HOST:PORT [--token-file F]\n"
  "                              a gateway's rollout, shown and steered\n"
  "  publish DIR --name N --version V [--registry R]\n"
  "                              register an immutable, verified model version\n"
  "  certs init|issue|show|revoke\n"
  "                              the cluster CA, node and user certificates\n"
  "  audit [list|verify] RUN_DIR operator actions and refusals; check the\n"
  "                              hash chain\n"
  "  token issue --policy FILE --user NAME --role ROLE\n"
  "                              an access token (only its hash is kept)\n"
  "  config history|diff RUN_DIR ...\n"
  "                              a job's config versions and their changes\n"
  "  rollback RUN_DIR --to-version V [--checkpoint STEP]\n"
  "                              restart a job on an earlier config version\n"
  "  experts stats RUN_DIR|HOST:PORT [--json FILE]\n"
  "                              routing statistics: load, co-activation\n"
  "  placement plan CONFIG --stats STATS.json [--out PLAN]\n"
  "                              rack-aware expert placement\n"
  "\n"
  "'tutti <command> --help' describes each command.\n";

} // namespace

int main(int argc, char** argv) {
  // Closed sockets are errors to handle, not a reason to die (Gloo writes
  // to peers that may be gone; recovery shuts sockets down on purpose).
  std::signal(SIGPIPE, SIG_IGN);
  tutti::return_large_buffers_on_free();
  std::vector<std::string> args(argv + 1, argv + argc);
  if (args.empty() || args[0] == "--help" || args[0] == "-h") {
    std::fputs(usage, args.empty() ? stderr : stdout);
    return args.empty() ? 2 : 0;
  }
  const auto command = args[0];
  args.erase(args.begin());
  try {
    if (command == "run")
      return tutti::cli::run_command(args);
    if (command == "data")
      return tutti::cli::data_command(args);
    if (command == "plan")
      return tutti::cli::plan_command(args);
    if (command == "diag")
      return tutti::cli::diag_command(args);
    if (command == "ckpt")
      return tutti::cli::ckpt_command(args);
    if (command == "export")
      return tutti::cli::export_command(args);
    if (command == "status")
      return tutti::cli::status_command(args);
    if (command == "chaos")
      return tutti::cli::chaos_command(args);
    if (command == "drill")
      return tutti::cli::drill_command(args);
    if (command == "shell")
      return tutti::cli::shell_command(args);
    if (command == "logs")
      return tutti::cli::logs_command(args);
    if (command == "sample")
      return tutti::cli::sample_command(args);
    if (command == "serve")
      return tutti::cli::serve_command(args);
    if (command == "bench")
      return tutti::cli::bench_command(args);
    if (command == "certs")
      return tutti::cli::certs_command(args);
    if (command == "audit")
      return tutti::cli::audit_command(args);
    if (command == "token")
      return tutti::cli::token_command(args);
    if (command == "config")
      return tutti::cli::config_command(args);
    if (command == "gateway")
      return tutti::cli::gateway_command(args);
    if (command == "service")
      return tutti::cli::service_command(args);
    if (command == "publish")
      return tutti::cli::publish_command(args);
    if (command == "rollback")
      return tutti::cli::rollback_command(args);
    if (command == "experts")
      return tutti::cli::experts_command(args);
    if (command == "placement")
      return tutti::cli::placement_command(args);
  } catch (const std::exception& ex) {
    return tutti::cli::fail(1, command + ": " + ex.what());
  }
  return tutti::cli::fail(
    2, "unknown command '" + command
         + "' (try: run, plan, diag, status, shell, logs, chaos, drill, ckpt, "
           "export, data, sample, serve, bench, certs, audit, token, config, "
           "rollback, experts, placement, publish, gateway, service; see tutti --help)");
}
