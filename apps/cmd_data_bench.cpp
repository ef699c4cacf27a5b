// tutti data bench CONFIG: does the data path keep up? One loader's
// tokens/s (what each rank's loader does per step: sample window ids,
// copy the windows) against what the job consumes per rank, and reading
// and verifying the shards (mapped, and through a read buffer) against the
// disk's sequential read, cold and after a cache warm-up.
// tutti data warm DIR|CONFIG: that warm-up, before a job.

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "command_line.hpp"
#include "commands.hpp"
#include "data_commands.hpp"
#include "tutti/config/job_config.hpp"
#include "tutti/data/batch_sampler.hpp"
#include "tutti/data/dataset.hpp"
#include "tutti/data/shard_format.hpp"
#include "tutti/store/atomic_file.hpp"

namespace tutti::cli {

namespace {

namespace fs = std::filesystem;
using clock_type = std::chrono::steady_clock;

double seconds_since(clock_type::time_point t0) {
  return std::chrono::duration<double>(clock_type::now() - t0).count();
}

// Asks the kernel to drop the files' cached pages (honoured for clean
// pages: what follows reads cold where the kernel lets it).
void drop_cache(const std::vector<fs::path>& files) {
  for (const auto& f : files) {
    const int fd = ::open(f.c_str(), O_RDONLY);
    if (fd < 0)
      continue; // the read that follows names it
    ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED); // advice only
    ::close(fd);
  }
}

// Sequential read of every shard, 4 MiB at a time, cold.
expected<std::pair<double, double>> read_files(
  const std::vector<fs::path>& files) {
  std::vector<char> buffer(4 << 20);
  double bytes = 0;
  drop_cache(files);
  const auto t0 = clock_type::now();
  for (const auto& f : files) {
    const int fd = ::open(f.c_str(), O_RDONLY);
    if (fd < 0)
      return status::error(f.string() + ": cannot open");
    ssize_t n = 0;
    while ((n = ::read(fd, buffer.data(), buffer.size())) > 0)
      bytes += static_cast<double>(n);
    ::close(fd);
    if (n < 0)
      return status::error(f.string() + ": read failed");
  }
  return std::pair{bytes, seconds_since(t0)};
}

// Median tokens/s of a finished or running job's metrics.jsonl, or 0.
double job_tokens_per_s(const fs::path& metrics) {
  std::ifstream in(metrics);
  std::vector<double> rates;
  for (std::string line; std::getline(in, line);) {
    auto j = nlohmann::json::parse(line, nullptr, false);
    if (j.is_object() && j.contains("tokens_per_s")
        && j["tokens_per_s"].is_number())
      rates.push_back(j["tokens_per_s"].get<double>());
  }
  if (rates.empty())
    return 0;
  std::nth_element(rates.begin(), rates.begin() + rates.size() / 2,
                   rates.end());
  return rates[rates.size() / 2];
}

} // namespace

int data_bench(const std::vector<std::string>& args) {
  std::string run_dir;
  std::int64_t steps = 200;
  command_line cl(
    "data bench", "CONFIG [--steps N] [--run DIR]",
    "Measures one data loader's tokens/s on the config's data (the batches\n"
    "of --steps steps, as rank 0 makes them) against the job's consumption\n"
    "per rank (median tokens/s in RUN_DIR/metrics.jsonl, when the job has\n"
    "run), and reading + verifying the shards against a plain sequential\n"
    "read of the same files.");
  cl.options()("steps", po::value(&steps)->default_value(200),
               "steps of batches to make")(
    "run", po::value(&run_dir), "run directory (default: the config's)");
  cl.required("config", "CONFIG");
  po::variables_map vm;
  if (auto done = cl.parse(args, vm))
    return *done;
  if (steps < 1)
    return cl.bad("--steps must be >= 1");
  auto loaded = load_job_config(vm["config"].as<std::string>());
  if (!loaded)
    return fail(2, "config: " + loaded.message());
  const job_config cfg = std::move(*loaded);
  const fs::path dir = cfg.data.dir;
  auto meta = data::read_meta(dir);
  if (!meta.ok())
    return fail(2, "data bench: " + meta.message());

  std::vector<fs::path> files;
  for (std::uint32_t i = 0; i < meta.value().train_shards; ++i)
    files.push_back(data::shard_path(dir, "train", i));
  auto raw = read_files(files);
  if (!raw.ok())
    return fail(2, "data bench: " + raw.message());

  // Read + verify + widen, cold: through a read buffer (the loader before
  // shards were mapped), then mapped (load_split), then mapped after
  // `tutti data warm` (its time included).
  drop_cache(files);
  auto t0 = clock_type::now();
  for (const auto& f : files) {
    auto bytes = store::read_file(f);
    if (!bytes.ok())
      return fail(2, "data bench: " + bytes.message());
    if (auto decoded = data::decode_shard(bytes.value(), f.string());
        !decoded.ok())
      return fail(2, "data bench: " + decoded.message());
  }
  const double buffered_s = seconds_since(t0);
  drop_cache(files);
  t0 = clock_type::now();
  if (auto mapped = data::load_split(dir, "train"); !mapped.ok())
    return fail(2, "data bench: " + mapped.message());
  const double verify_s = seconds_since(t0);
  drop_cache(files);
  t0 = clock_type::now();
  if (auto w = data::warm(dir); !w.ok())
    return fail(2, "data bench: " + w.message());
  auto train = data::load_split(dir, "train");
  if (!train.ok())
    return fail(2, "data bench: " + train.message());
  const double warm_s = seconds_since(t0);
  auto sampler = data::batch_sampler::create(
    std::move(train.value()), static_cast<std::uint32_t>(cfg.train.seq_len));
  if (!sampler.ok())
    return fail(2, "data bench: " + sampler.message());

  const auto world = static_cast<std::uint32_t>(cfg.cluster.world_size);
  std::uint64_t tokens = 0;
  t0 = clock_type::now();
  for (std::int64_t s = 0; s < steps; ++s) {
    auto ids = sampler.value().rank_batch(
      cfg.train.seed, static_cast<std::uint64_t>(s),
      static_cast<std::uint64_t>(cfg.train.global_batch_size), 0, world,
      cfg.data.shard_per_rank);
    if (!ids.ok())
      return fail(2, "data bench: " + ids.message());
    auto b = sampler.value().materialize(ids.value());
    tokens += b.inputs.size();
  }
  const double loader_s = seconds_since(t0);
  const double loader_rate = static_cast<double>(tokens) / loader_s;

  const fs::path run = run_dir.empty() ? fs::path(cfg.run.dir)
                                       : fs::path(run_dir);
  const double job_rate = job_tokens_per_s(run / "metrics.jsonl");
  const double per_rank_need = job_rate / world;

  const double mb = raw.value().first / 1e6;
  std::printf("data bench: %s, %u train shards, %.1f MB, world %u\n",
              dir.c_str(), meta.value().train_shards, mb, world);
  std::printf("%-36s %14s\n", "figure", "value");
  std::printf("%-36s %11.0f MB/s\n", "sequential read of the shards",
              mb / raw.value().second);
  std::printf("%-36s %11.0f MB/s\n", "read + verify, read buffer",
              mb / buffered_s);
  std::printf("%-36s %11.0f MB/s\n", "read + verify, mapped (load_split)",
              mb / verify_s);
  std::printf("%-36s %11.0f MB/s\n", "warm + read + verify, mapped",
              mb / warm_s);
  std::printf("%-36s %9.0f tok/s\n", "one loader (rank 0's batches)",
              loader_rate);
  if (job_rate > 0) {
    std::printf("%-36s %9.0f tok/s\n", "job's consumption, per rank",
                per_rank_need);
    std::printf("%-36s %11.1fx\n", "loader headroom (loader / need)",
                loader_rate / per_rank_need);
  } else {
    std::printf("%-36s %14s\n", "job's consumption, per rank",
                "(no metrics yet)");
  }
  nlohmann::ordered_json j;
  j["read_mb_s"] = mb / raw.value().second;
  j["verify_buffered_mb_s"] = mb / buffered_s;
  j["verify_mb_s"] = mb / verify_s;
  j["warm_verify_mb_s"] = mb / warm_s;
  j["loader_tokens_per_s"] = loader_rate;
  j["job_tokens_per_s_per_rank"] = per_rank_need;
  j["headroom"] = per_rank_need > 0 ? loader_rate / per_rank_need : 0.0;
  std::printf("%s\n", j.dump().c_str());
  return 0;
}

int data_warm(const std::vector<std::string>& args) {
  command_line cl("data warm", "DIR|CONFIG",
                  "Asks the kernel to read every shard of a dataset (DIR, or "
                  "CONFIG's\ndata.dir) into its page cache in the "
                  "background, so that a job\nstarting next loads them from "
                  "memory.");
  cl.required("target", "DIR or CONFIG");
  po::variables_map vm;
  if (auto done = cl.parse(args, vm))
    return *done;
  fs::path dir = vm["target"].as<std::string>();
  if (std::error_code ec; !fs::exists(dir, ec))
    return fail(2, "data warm: " + dir.string()
                     + ": no such dataset directory or config");
  if (!fs::is_directory(dir)) {
    auto loaded = load_job_config(dir.string());
    if (!loaded)
      return fail(2, "config: " + loaded.message());
    dir = loaded->data.dir;
  }
  auto r = data::warm(dir);
  if (!r.ok())
    return fail(2, "data warm: " + r.message());
  std::printf("data warm: %s: %u shards, %.1f MB asked into the page cache\n",
              dir.c_str(), r.value().files,
              static_cast<double>(r.value().bytes) / 1e6);
  return 0;
}

} // namespace tutti::cli
