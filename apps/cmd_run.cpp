// tutti run CONFIG: the whole job in this process.

#include <csignal>
#include <cmath>
#include <cstdio>
#include <filesystem>

#include "tutti/elastic/replica_memory.hpp"
#include "command_line.hpp"
#include "commands.hpp"
#include "job_start.hpp"
#include "tutti/train/local_job.hpp"
#include "tutti/runtime/log.hpp"
#include "tutti/train/rank.hpp"
#include "tutti/data/dataset.hpp"
#include "tutti/model/param_layout.hpp"
#include "tutti/config/job_config.hpp"

namespace tutti::cli {

namespace {

std::atomic<bool> interrupted{false};

void on_signal(int) { interrupted.store(true); }

// Checks the data directory before any actor starts, so bad data is one
// clear line and nothing is written.
int check_data(const job_config& cfg, data::dataset_meta& meta) {
  auto m = data::read_meta(cfg.data.dir);
  if (!m.ok())
    return fail(2, "run: data.dir: " + m.message());
  meta = m.value();
  if (meta.vocab_size > cfg.model.vocab_size)
    return fail(2,
                "run: model.vocab_size: " + std::to_string(cfg.model.vocab_size)
                  + " is smaller than the data's vocabulary ("
                  + std::to_string(meta.vocab_size) + " in " + cfg.data.dir
                  + "/meta.json)");
  for (const char* split : {"train", "val"}) {
    if (std::string(split) == "val" && cfg.train.eval_sequences == 0)
      continue;
    auto shards = data::load_split(cfg.data.dir, split);
    if (!shards.ok())
      return fail(2, "run: " + shards.message());
    // The sampler cuts shards into windows of seq_len + 1 tokens.
    const uint64_t window = static_cast<uint64_t>(cfg.train.seq_len) + 1;
    uint64_t windows = 0;
    for (const auto& shard : shards.value())
      windows += shard.size() / window;
    if (std::string(split) == "train" && windows == 0)
      return fail(2, "run: train.seq_len: " + std::to_string(cfg.train.seq_len)
                       + " is longer than every training shard in "
                       + cfg.data.dir);
    if (std::string(split) == "val"
        && windows < static_cast<uint64_t>(cfg.train.eval_sequences))
      return fail(2, "run: train.eval_sequences: "
                       + std::to_string(cfg.train.eval_sequences)
                       + " held-out sequences asked for, " + cfg.data.dir
                       + " holds " + std::to_string(windows));
  }
  return 0;
}

} // namespace

int run_command(const std::vector<std::string>& args) {
  command_line cl("run", "CONFIG [--quiet] [--fresh [--yes]]",
                  "continues an unfinished job in run.dir from its newest "
                  "verified checkpoint;\n--fresh starts over (asks first "
                  "unless --yes)");
  cl.options()("quiet", "no progress lines")(
    "fresh", "forget the job's state and checkpoints, start over")(
    "yes", "with --fresh: do not ask");
  cl.required("config", "CONFIG");
  po::variables_map vm;
  if (auto done = cl.parse(args, vm))
    return *done;
  return run_job_file(vm["config"].as<std::string>(), vm.count("quiet") > 0,
                      vm.count("fresh") > 0, vm.count("yes") > 0);
}

int run_job_file(const std::string& path, bool quiet, bool fresh, bool yes) {
  auto loaded = load_job_config(path);
  if (!loaded)
    return fail(2, "config: " + loaded.message());
  job_config cfg = std::move(*loaded);
  elastic::keep_memory_for_replicas(cfg);
  if (auto usable = check_rank_device(cfg); !usable)
    return fail(2, "run: " + usable.message());
  data::dataset_meta meta;
  if (int status = check_data(cfg, meta))
    return status;

  std::error_code ec;
  std::filesystem::create_directories(cfg.run.dir, ec);
  if (ec)
    return fail(1, "run: run.dir: cannot create " + cfg.run.dir + ": "
                     + ec.message());
  log_open((std::filesystem::path(cfg.run.dir) / "tutti.log.jsonl").string(),
           "0");
  std::signal(SIGINT, on_signal);
  std::signal(SIGTERM, on_signal);
  auto start = open_job(cfg, path,
                        (std::filesystem::path(cfg.run.dir) / "state").string(),
                        fresh, yes, "tutti");
  if (start.status != 0)
    return start.status;
  if (start.completed)
    return 0;

  // Counted from the layouts the ranks and shards allocate.
  const auto dense = model::dense_layout(cfg.model, cfg.moe).total();
  const auto experts =
    model::expert_layout(cfg.model, 0, cfg.moe.num_experts).total();
  if (!quiet) {
    std::printf("tutti run %s: world %lld (ep %lld), %lld experts top-%lld, "
                "%lld steps\n",
                path.c_str(), static_cast<long long>(cfg.cluster.world_size),
                static_cast<long long>(cfg.ep_size()),
                static_cast<long long>(cfg.moe.num_experts),
                static_cast<long long>(cfg.moe.router_top_k),
                static_cast<long long>(cfg.train.steps));
    std::printf("parameters: %lld (dense %lld, experts %lld)\n",
                static_cast<long long>(dense + experts),
                static_cast<long long>(dense), static_cast<long long>(experts));
  }
  // One process: every listener (Gloo's too) on loopback, whatever
  // addresses the config gives its daemons; nothing to secure, nothing
  // reachable from outside.
  cfg.cluster.host = "127.0.0.1";
  for (auto& node : cfg.cluster.nodes)
    node.host = "127.0.0.1";
  auto result = run_local_job(cfg, quiet, interrupted, start.db,
                              start.resume_step);
  if (!result.ok) {
    fail(1, "run: " + result.message);
    std::fflush(nullptr);
    log_close();
    std::_Exit(1);
  }
  if (!result.message.empty())
    std::printf("%s\n", result.message.c_str()); // e.g. stopped at step N
  if (std::isfinite(result.final_eval_loss)) {
    std::printf("final held-out loss %.4f nats/token", result.final_eval_loss);
    if (meta.entropy_rate_nats) {
      const double gap = result.final_eval_loss - *meta.entropy_rate_nats;
      std::printf(" | data entropy rate %.4f nats/token | gap %.4f (%s 0.05)",
                  *meta.entropy_rate_nats, gap,
                  gap <= 0.05 ? "within" : "NOT within");
    }
    std::printf("\n");
  }
  std::printf("metrics: %s/metrics.jsonl\n", cfg.run.dir.c_str());
  log_close();
  return 0;
}

} // namespace tutti::cli
