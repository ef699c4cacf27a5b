// Framework overhead per step. The quickstart model trained by `tutti run`
// (rank, expert-shard, data-loader and coordinator actors) against the same
// steps done in this process with no actors: one thread per rank calling
// rank_model and an expert_ffn directly, exchanging as `tutti run` does
// (through memory unless the config says tcp), i.e. the step's kernels and
// collectives timed alone. Runs alternate between the two, for world size 2
// (the quickstart as written) and 1; medians over repetitions. At world 2
// also with the two ranks on loopback TCP instead of memory, over TCP
// without chunked combine, without restart in place (step time and peak
// RSS), without tile sharing between the ranks and with the ranks' threads
// not pinned, to show what each costs or buys. Needs /usr/bin/time
// (deploy/install-deps.sh --bench).
// The anchor pins each rank thread to its own core: on a small shared VM the
// scheduler otherwise stacks the ranks on one core and every collective
// waits for it. The unpinned loop is reported too, to show that effect.

#include <gloo/rendezvous/hash_store.h>
#include <pthread.h>
#include <sched.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <regex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "bench_util.hpp"
#include "tutti/comm/gloo_communicator.hpp"
#include "tutti/comm/memory_communicator.hpp"
#include "tutti/data/batch_sampler.hpp"
#include "tutti/data/dataset.hpp"
#include "tutti/kernels/ops.hpp"
#include "tutti/train/expert_ffn.hpp"
#include "tutti/train/idle_core_pool.hpp"
#include "tutti/train/rank_model.hpp"

namespace fs = std::filesystem;
namespace k = tutti::kernels;
using namespace tutti;
using namespace tutti::bench;

namespace {

constexpr int steps = 40, warmup = 5;
// Three runs of each keep the benchmark near a minute; set TUTTI_BENCH_REPS
// for more on a machine as noisy as the one in RESULTS.md.
const int reps = std::max(1, std::atoi(std::getenv("TUTTI_BENCH_REPS")
                                         ? std::getenv("TUTTI_BENCH_REPS")
                                         : "3"));

fs::path scratch; // removed on the way out, failing or not

[[noreturn]] void die(const std::string& what) {
  std::fprintf(stderr, "bench_step: %s\n", what.c_str());
  std::error_code ignored;
  if (!scratch.empty())
    fs::remove_all(scratch, ignored);
  std::_Exit(1);
}

void check(const status& s) {
  if (!s.ok())
    die(s.message());
}

std::string env_or(const char* name, const char* fallback) {
  const char* v = std::getenv(name);
  return v ? v : fallback;
}

std::string read_text(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream buf;
  buf << in.rdbuf();
  return buf.str();
}

// Replaces the value of `key` in the YAML block `block` (two-space indent).
std::string set_key(const std::string& yaml, const std::string& block,
                    const std::string& key, const std::string& value) {
  std::regex re("(\\n" + block + ":\\n(?:  [^\\n]*\\n)*?  " + key
                + ":)[^\\n]*");
  if (!std::regex_search(yaml, re))
    die("quickstart.yaml has no " + block + "." + key);
  return std::regex_replace(yaml, re, "$1 " + value,
                            std::regex_constants::format_first_only);
}

// Adds `key: value` as the first line of the YAML block `block`.
std::string add_key(const std::string& yaml, const std::string& block,
                    const std::string& key, const std::string& value) {
  const std::string head = "\n" + block + ":\n";
  const auto at = yaml.find(head);
  if (at == std::string::npos)
    die("quickstart.yaml has no " + block);
  std::string out = yaml;
  out.insert(at + head.size(), "  " + key + ": " + value + "\n");
  return out;
}

// Mean per-step times over the steps after warm-up, in seconds.
struct split {
  double step = 0, compute = 0, a2a = 0, ar = 0, other = 0;
  double peak_rss_mb = 0; // tutti run's, from /usr/bin/time
};

// The run with the median step time, whole, so that its parts add up.
split median_of(std::vector<split> v) {
  std::sort(v.begin(), v.end(),
            [](const split& a, const split& b) { return a.step < b.step; });
  return v[v.size() / 2];
}

// -- the figure: a real job --------------------------------------------------

split from_metrics(const fs::path& path) {
  split sum;
  int n = 0;
  std::ifstream in(path);
  std::string line;
  auto field = [&](const char* name) {
    std::smatch m;
    std::regex re(std::string("\"") + name + "\":([-0-9.eE+]+)");
    if (!std::regex_search(line, m, re))
      die(path.string() + ": no " + name);
    return std::stod(m[1]);
  };
  while (std::getline(in, line)) {
    if (field("step") <= warmup)
      continue;
    sum.step += field("step_time_s");
    sum.compute += field("time_compute_s");
    sum.a2a += field("time_alltoall_s");
    sum.ar += field("time_allreduce_s");
    sum.other += field("time_other_s");
    ++n;
  }
  if (n != steps - warmup)
    die(path.string() + ": expected " + std::to_string(steps) + " steps");
  return {sum.step / n, sum.compute / n, sum.a2a / n, sum.ar / n,
          sum.other / n};
}

split run_tutti(const std::string& tutti, const fs::path& cfg,
                const fs::path& run_dir) {
  fs::remove_all(run_dir);
  const std::string cmd = "timeout 300 /usr/bin/time -f peak_rss_kb=%M " + tutti
                          + " run " + cfg.string() + " --quiet 2>&1";
  std::string out;
  FILE* p = popen(cmd.c_str(), "r");
  char buf[4096];
  while (size_t n = fread(buf, 1, sizeof(buf), p))
    out.append(buf, n);
  if (pclose(p) != 0)
    die("tutti run failed:\n" + out);
  split s = from_metrics(run_dir / "metrics.jsonl");
  const auto at = out.rfind("peak_rss_kb=");
  if (at != std::string::npos)
    s.peak_rss_mb = std::atof(out.c_str() + at + 12) / 1024;
  return s;
}

// -- the anchor: the same step, no actors ----------------------------------

// What the expert shard actor does, called directly.
class local_experts final : public train::expert_executor {
public:
  local_experts(const job_config& c, int rank) : cfg_(c) {
    const int64_t count = c.experts_per_rank();
    const int64_t first = (rank % c.ep_size()) * count;
    layout_ = model::expert_layout(c.model, first, count);
    params_.resize(layout_.total());
    model::init_expert_params(layout_, params_.data(), c.model, first, count,
                              c.train.seed, c.model.init_std);
    grads_.assign(layout_.total(), 0.0f);
    m_.assign(layout_.total(), 0.0f);
    v_.assign(layout_.total(), 0.0f);
    ffn_ = std::make_unique<train::expert_ffn>(c.model.num_hidden_layers, count,
                                               c.model.hidden_size,
                                               c.model.intermediate_size);
    // Tiles, shared with the waiting rank, as the job's shards do.
    ffn_->split_into_tiles(train::expert_tiles_for(c, -1));
    if (train::shares_expert_tiles(c, -1)) {
      train::idle_core_pool::process().join();
      ffn_->share_idle_cores(true);
    }
  }
  ~local_experts() {
    if (train::shares_expert_tiles(cfg_, -1))
      train::idle_core_pool::process().leave();
  }

  status forward(int64_t layer, const float* x, const int64_t* rows, int64_t m,
                 float* y, bool append) override {
    ffn_->forward(s_, layer, block(layer), x, rows, y, append);
    return {};
  }
  status backward(int64_t layer, const float* dy, int64_t m, float* dx,
                  const int64_t* rows, int64_t first_row) override {
    ffn_->backward(s_, layer, block(layer), dy, dx, rows, first_row);
    return {};
  }

  double grad_sum_squares() const {
    return k::sum_squares(s_, grads_.data(),
                          static_cast<int64_t>(grads_.size()));
  }

  void optimize(int64_t step, double lr, double scale) {
    const auto& t = cfg_.train;
    for (const auto& sp : layout_.tensors())
      k::adamw_step(s_, params_.data() + sp.offset, grads_.data() + sp.offset,
                    m_.data() + sp.offset, v_.data() + sp.offset, sp.numel, lr,
                    t.beta1, t.beta2, t.eps, t.weight_decay, step, scale);
    k::fill_zero(s_, grads_.data(), static_cast<int64_t>(grads_.size()));
  }

private:
  train::expert_block block(int64_t layer) {
    auto at = [&](const char* w) {
      return layout_.at(model::expert_block_name(layer, w)).offset;
    };
    return {params_.data() + at("w1"), params_.data() + at("w3"),
            params_.data() + at("w2"), grads_.data() + at("w1"),
            grads_.data() + at("w3"),  grads_.data() + at("w2")};
  }

  job_config cfg_;
  k::stream s_;
  model::param_layout layout_;
  std::vector<float> params_, grads_, m_, v_;
  std::unique_ptr<train::expert_ffn> ffn_;
};

// One rank's steps, as train/src/rank/rank.cpp's step_loop does them, minus the
// actors. time[step][0..2] = total, all-to-all, all-reduce seconds.
void in_process_rank(const job_config& cfg, int rank,
                     const data::batch_sampler& sampler,
                     gloo::rendezvous::Store& store, comm::memory_hub& hub,
                     bool pin, std::vector<std::vector<double>>& time) {
  k::use_single_threaded_blas();
  if (pin) {
    cpu_set_t one;
    CPU_ZERO(&one);
    CPU_SET(rank % std::thread::hardware_concurrency(), &one);
    pthread_setaffinity_np(pthread_self(), sizeof(one), &one);
  }
  const int W = static_cast<int>(cfg.cluster.world_size);
  const auto& t = cfg.train;
  // The ranks exchange as tutti run's do: through memory unless the config
  // asks for loopback TCP.
  std::unique_ptr<comm::communicator> world;
  const std::chrono::milliseconds timeout(cfg.cluster.collective_timeout_ms);
  if (cfg.cluster.local_transport == local_transport_kind::memory) {
    comm::memory_options o{"world", timeout, timeout};
    if (train::shares_expert_tiles(cfg, -1))
      o.while_waiting = [](double& ran_s) {
        return train::idle_core_pool::process().help_one(&ran_s);
      };
    check(comm::make_memory_communicator(hub, rank, W, o, world));
  }
  else
    check(comm::make_gloo_communicator(
      store, rank, W, {cfg.cluster.host, "world", timeout, timeout, {}},
      world));
  local_experts experts(cfg, rank);
  train::rank_model m(cfg, {world.get(), world.get(), nullptr}, experts);
  for (int64_t step = 1; step <= steps; ++step) {
    // The batch is ready before the clock starts: data loading is the
    // loader actor's job, counted as "other" in the real run.
    auto ids = sampler.rank_batch(t.seed, step - 1, t.global_batch_size, rank,
                                  W, cfg.data.shard_per_rank);
    if (!ids.ok())
      die(ids.message());
    auto b = sampler.materialize(ids.value());
    const double t0 = now_s();
    train::step_stats stats;
    check(m.train_step(b.inputs.data(), b.targets.data(),
                       static_cast<int64_t>(b.rows), stats));
    double dense_sq = 0;
    check(m.reduce_dense_grads(dense_sq, stats.time));
    double expert_sq = experts.grad_sum_squares();
    if (W > 1) {
      train::scoped_timer timer(stats.time.allreduce_s);
      check(world->all_reduce_sum(&expert_sq, 1));
    }
    const double norm = std::sqrt(dense_sq + expert_sq);
    const double scale = t.grad_clip > 0 && norm > t.grad_clip
                           ? t.grad_clip / (norm + 1e-6)
                           : 1;
    const double lr = train::learning_rate(t, step);
    check(m.apply_optimizer(step, lr, scale));
    experts.optimize(step, lr, scale);
    time[step - 1] = {now_s() - t0, stats.time.alltoall_s,
                      stats.time.allreduce_s};
  }
}

// Merged as the coordinator merges reports: the step takes its slowest
// rank's time; the parts are means over ranks.
split run_in_process(const job_config& cfg, const data::batch_sampler& sampler,
                     bool pin) {
  const int W = static_cast<int>(cfg.cluster.world_size);
  if (cfg.ep_size() != W)
    die("the in-process anchor assumes ep_size == world_size");
  std::vector<std::vector<std::vector<double>>> time(
    W, std::vector<std::vector<double>>(steps));
  gloo::rendezvous::HashStore store;
  comm::memory_hub hub(0, W);
  std::vector<std::thread> ranks;
  for (int r = 0; r < W; ++r)
    ranks.emplace_back(
      [&, r] { in_process_rank(cfg, r, sampler, store, hub, pin, time[r]); });
  for (auto& th : ranks)
    th.join();
  split sum;
  for (int s = warmup; s < steps; ++s) {
    double slowest = 0;
    for (int r = 0; r < W; ++r) {
      const auto& x = time[r][s];
      slowest = std::max(slowest, x[0]);
      sum.compute += (x[0] - x[1] - x[2]) / W;
      sum.a2a += x[1] / W;
      sum.ar += x[2] / W;
    }
    sum.step += slowest;
  }
  const double n = steps - warmup;
  return {sum.step / n, sum.compute / n, sum.a2a / n, sum.ar / n, 0};
}

int run() {
  const std::string src = env_or("TUTTI_SOURCE_DIR", TUTTI_SOURCE_DIR_DEFAULT);
  const std::string tutti = env_or("TUTTI_BINARY_DIR", TUTTI_BINARY_DIR_DEFAULT)
                            + "/apps/tutti";
  char tmpl[] = "/tmp/tutti-bench-step-XXXXXX";
  if (!mkdtemp(tmpl))
    die("mkdtemp failed");
  scratch = tmpl;
  const fs::path dir = scratch, data = dir / "data";
  // The quickstart as written (world 2, EP 2), and the same model and global
  // batch on one rank; evaluation only after the last step.
  const fs::path quickstart = fs::path(src) / "configs/quickstart.yaml";
  std::string base = read_text(quickstart);
  const auto quickstart_cfg = parse_job_config(base, quickstart.string());
  if (!quickstart_cfg)
    die(quickstart_cfg.message());
  const auto vocab = quickstart_cfg->model.vocab_size;
  if (std::system((tutti + " data synth --out " + data.string() + " --vocab "
                   + std::to_string(vocab)
                   + " --seed 7 --tokens 200000 >/dev/null")
                    .c_str())
      != 0)
    die("tutti data synth failed");
  base = set_key(base, "train", "steps", std::to_string(steps));
  base = set_key(base, "train", "eval_interval", "0");
  base = set_key(base, "data", "dir", data.string());
  struct world_case {
    int world = 0;
    fs::path cfg_path, run_dir;
    job_config cfg;
    std::vector<split> tutti, pinned, unpinned;
    // World 2 only: the same job without one feature each, so the table
    // shows what the feature buys or costs: Gloo over loopback instead of
    // memory between the two ranks (cluster_config.local_transport: tcp),
    // and over TCP, where chunks apply (through memory the combine is one
    // chunk anyway), the combine in one piece (combine_chunks: 1); and
    // expert shards that may not restart, so keep no state to restart in
    // place (supervision.expert_shard.max_restarts: 0); a rank that waits
    // in an exchange and does not compute the other shard's tiles
    // (moe_config.share_idle_cores: false); and rank threads the scheduler
    // moves between the cores (cluster_config.pin_rank_cores: false).
    fs::path one_chunk_cfg, tcp_cfg, no_restart_cfg, no_share_cfg, no_pin_cfg;
    std::vector<split> one_chunk, tcp, no_restart, no_share, no_pin;
  };
  std::vector<world_case> cases;
  for (int w : {2, 1}) {
    world_case c;
    c.world = w;
    c.cfg_path = dir / ("w" + std::to_string(w) + ".yaml");
    c.run_dir = dir / ("run-w" + std::to_string(w));
    std::string y = set_key(base, "run", "dir", c.run_dir.string());
    for (const char* key : {"world_size", "nproc_per_node", "ep_size"})
      y = set_key(y, "cluster_config", key, std::to_string(w));
    std::ofstream(c.cfg_path) << y;
    if (w > 1) {
      c.one_chunk_cfg = dir / "w2-one-chunk.yaml";
      c.tcp_cfg = dir / "w2-tcp.yaml";
      c.no_restart_cfg = dir / "w2-no-restart.yaml";
      std::ofstream(c.no_restart_cfg)
        << y << "supervision:\n  expert_shard:\n    max_restarts: 0\n";
      const auto tcp = add_key(y, "cluster_config", "local_transport", "tcp");
      std::ofstream(c.tcp_cfg) << tcp;
      std::ofstream(c.one_chunk_cfg)
        << add_key(tcp, "moe_config", "combine_chunks", "1");
      c.no_share_cfg = dir / "w2-no-share.yaml";
      std::ofstream(c.no_share_cfg)
        << add_key(y, "moe_config", "share_idle_cores", "false");
      c.no_pin_cfg = dir / "w2-no-pin.yaml";
      std::ofstream(c.no_pin_cfg)
        << add_key(y, "cluster_config", "pin_rank_cores", "false");
    }
    auto parsed = parse_job_config(y, c.cfg_path.string());
    if (!parsed)
      die(parsed.message());
    c.cfg = std::move(*parsed);
    cases.push_back(std::move(c));
  }

  auto train = data::load_split(data, "train");
  if (!train.ok())
    die(train.message());
  auto sampler = data::batch_sampler::create(
    std::move(train.value()),
    static_cast<uint32_t>(cases[0].cfg.train.seq_len));
  if (!sampler.ok())
    die(sampler.message());

  // Each run on stderr too, to see the spread behind the medians.
  auto note = [](const char* what, int world, const split& s) {
    std::fprintf(stderr,
                 "  %-9s world %d: step %.1f ms = compute %.1f + a2a %.1f + "
                 "ar %.1f + other %.1f\n",
                 what, world, s.step * 1e3, s.compute * 1e3, s.a2a * 1e3,
                 s.ar * 1e3, s.other * 1e3);
    return s;
  };
  for (int rep = 0; rep < reps; ++rep)
    for (auto& c : cases) {
      // Rotate the order, so no method always runs first. With one rank
      // there is nothing to stack, so world 1 runs only the pinned anchor.
      const int methods = c.world > 1 ? 8 : 2;
      for (int i = 0; i < methods; ++i)
        switch ((rep + i) % methods) {
        case 0:
          c.tutti.push_back(note("tutti run", c.world,
                                 run_tutti(tutti, c.cfg_path, c.run_dir)));
          break;
        case 1:
          c.pinned.push_back(note(
            "pinned", c.world, run_in_process(c.cfg, sampler.value(), true)));
          break;
        case 2:
          c.unpinned.push_back(
            note("unpinned", c.world,
                 run_in_process(c.cfg, sampler.value(), false)));
          break;
        case 3:
          c.one_chunk.push_back(note(
            "1 chunk", c.world, run_tutti(tutti, c.one_chunk_cfg, c.run_dir)));
          break;
        case 4:
          c.tcp.push_back(
            note("tcp", c.world, run_tutti(tutti, c.tcp_cfg, c.run_dir)));
          break;
        case 5:
          c.no_restart.push_back(
            note("no restart", c.world,
                 run_tutti(tutti, c.no_restart_cfg, c.run_dir)));
          break;
        case 6:
          c.no_share.push_back(note(
            "no share", c.world, run_tutti(tutti, c.no_share_cfg, c.run_dir)));
          break;
        default:
          c.no_pin.push_back(note("no pin", c.world,
                                  run_tutti(tutti, c.no_pin_cfg, c.run_dir)));
        }
    }

  const auto& q = cases[0].cfg;
  std::printf(
    "quickstart model (D%lld F%lld, %lld layers, %lld experts top-%lld, "
    "%lld x %lld tokens per step): mean over steps %d..%d of the "
    "run with the median step time of %d (range over runs in brackets)\n\n",
    (long long)q.model.hidden_size, (long long)q.model.intermediate_size,
    (long long)q.model.num_hidden_layers, (long long)q.moe.num_experts,
    (long long)q.moe.router_top_k, (long long)q.train.global_batch_size,
    (long long)q.train.seq_len, warmup + 1, steps, reps);
  table t;
  auto ms = [](double s) { return fmt("%.1f ms", s * 1e3); };
  // Step times with the range over runs, so the noise is in the table.
  auto ms_range = [](const std::vector<split>& v) {
    auto [lo, hi] = std::minmax_element(
      v.begin(), v.end(),
      [](const split& a, const split& b) { return a.step < b.step; });
    return fmt("%.1f ms", median_of(v).step * 1e3)
           + fmt(" (%.0f", lo->step * 1e3) + fmt("-%.0f)", hi->step * 1e3);
  };
  for (auto& c : cases) {
    const split a = median_of(c.tutti), b = median_of(c.pinned);
    const std::string w = ", world " + std::to_string(c.world);
    const std::string anchor = "same steps in-process, no actors, pinned";
    t.add("step time, tutti run" + w, ms_range(c.tutti), anchor,
          ms_range(c.pinned), a.step / b.step);
    t.add("  compute (incl. expert-shard messages)" + w, ms(a.compute),
          anchor + ": compute", ms(b.compute), a.compute / b.compute);
    if (c.world > 1) {
      t.add("  all-to-all" + w, ms(a.a2a), anchor + ": all-to-all", ms(b.a2a),
            a.a2a / b.a2a);
      t.add("  all-reduce" + w, ms(a.ar), anchor + ": all-reduce", ms(b.ar),
            a.ar / b.ar);
    }
    t.add("  other (batch fetch)" + w, ms(a.other), "tutti step time",
          ms(a.step), a.other / a.step);
    const double by_metrics = a.step - (a.compute + a.a2a + a.ar);
    t.add("overhead by metrics: step - (compute + a2a + ar)" + w,
          ms(by_metrics), "tutti step time", ms(a.step), by_metrics / a.step);
    t.add("overhead per step: tutti - in-process" + w, ms(a.step - b.step),
          anchor, ms(b.step), (a.step - b.step) / b.step);
    if (c.world > 1) {
      const split u = median_of(c.unpinned);
      t.add("step time, same steps in-process unpinned" + w,
            ms_range(c.unpinned), anchor, ms(b.step), u.step / b.step);
      const std::string as_is = "tutti run as configured";
      const split t_tcp = median_of(c.tcp);
      t.add("step time, ranks over loopback TCP (local_transport: tcp)" + w,
            ms_range(c.tcp), as_is, ms(a.step), t_tcp.step / a.step);
      t.add("  all-to-all, local_transport: tcp" + w, ms(t_tcp.a2a),
            "all-to-all, through memory", ms(a.a2a),
            t_tcp.a2a / std::max(a.a2a, 1e-9));
      t.add("step time over TCP, combine in one chunk (combine_chunks: 1)" + w,
            ms_range(c.one_chunk), "over TCP, chunked as configured",
            ms(t_tcp.step), median_of(c.one_chunk).step / t_tcp.step);
      const split off = median_of(c.no_restart);
      t.add("step time, no restart in place (expert_shard.max_restarts: 0)" + w,
            ms_range(c.no_restart), as_is, ms(a.step), off.step / a.step);
      t.add("  peak RSS, no restart in place" + w,
            fmt("%.0f MB", off.peak_rss_mb), "peak RSS, as configured",
            fmt("%.0f MB", a.peak_rss_mb), off.peak_rss_mb / a.peak_rss_mb);
      const split alone = median_of(c.no_share);
      t.add("step time, no tile sharing (share_idle_cores: false)" + w,
            ms_range(c.no_share), as_is, ms(a.step), alone.step / a.step);
      t.add("  all-to-all, no tile sharing" + w, ms(alone.a2a),
            "all-to-all, as configured", ms(a.a2a),
            alone.a2a / std::max(a.a2a, 1e-9));
      t.add("step time, ranks not pinned (pin_rank_cores: false)" + w,
            ms_range(c.no_pin), as_is, ms(a.step),
            median_of(c.no_pin).step / a.step);
    }
  }
  t.print();
  fs::remove_all(dir);
  return 0;
}

} // namespace

int main() {
  try {
    return run();
  } catch (const std::exception& e) { // a refused config, say
    die(e.what());
  }
}
