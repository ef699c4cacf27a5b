#pragma once
// Helpers for tests that run the real `tutti` binary as a subprocess.

#include <nlohmann/json.hpp>

#include <catch2/catch.hpp>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

namespace tutti::testing {

inline std::string source_dir() {
  const char* s = std::getenv("TUTTI_SOURCE_DIR");
  return s ? s : TUTTI_SOURCE_DIR_DEFAULT;
}

inline std::string binary_dir() {
  const char* s = std::getenv("TUTTI_BINARY_DIR");
  return s ? s : TUTTI_BINARY_DIR_DEFAULT;
}

inline std::string tutti_bin() { return binary_dir() + "/apps/tutti"; }

// A fresh scratch directory under the build tree.
inline std::filesystem::path scratch(const std::string& name) {
  // A test's TLS variant (TUTTI_TEST_TLS=1, its own CTest entry) may run
  // beside it under ctest -j: each gets its own directory.
  const char* tls = std::getenv("TUTTI_TEST_TLS");
  const bool tls_variant = tls != nullptr && std::string(tls) == "1";
  auto dir = std::filesystem::path(binary_dir()) / "test-scratch"
             / (tls_variant ? name + "_tls" : name);
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

struct command_result {
  int status = -1;
  std::string output; // stdout and stderr together
};

// Runs `command` through the shell with a deadline (coreutils timeout kills
// it and its children past `seconds`).
inline command_result run(const std::string& command, int seconds = 300) {
  command_result r;
  auto full = "timeout -k 5 " + std::to_string(seconds) + " " + command
              + " 2>&1";
  FILE* pipe = popen(full.c_str(), "r");
  if (!pipe)
    return r;
  char buf[4096];
  while (size_t n = fread(buf, 1, sizeof(buf), pipe))
    r.output.append(buf, n);
  int raw = pclose(pipe);
  r.status = WIFEXITED(raw) ? WEXITSTATUS(raw) : -1;
  return r;
}

// Synthetic order-2 Markov data for a test; true when `tutti data synth`
// succeeded.
inline bool synth_data(const std::filesystem::path& out, int vocab = 32,
                       int tokens = 60000, int seed = 5) {
  return run(tutti_bin() + " data synth --out " + out.string() + " --vocab "
             + std::to_string(vocab) + " --seed " + std::to_string(seed)
             + " --tokens " + std::to_string(tokens))
           .status
         == 0;
}

// The same, failing the test with the command's output if it fails.
inline void require_synth_data(const std::filesystem::path& out, int vocab = 32,
                               int tokens = 60000, int seed = 5) {
  auto r = run(tutti_bin() + " data synth --out " + out.string() + " --vocab "
                 + std::to_string(vocab) + " --seed " + std::to_string(seed)
                 + " --tokens " + std::to_string(tokens),
               60);
  INFO(r.output);
  REQUIRE(r.status == 0);
}

// A fresh scratch directory with synthetic data (synth_data's, of `tokens`
// tokens) in DIR/data.
struct scratch_job {
  std::filesystem::path dir, data;
};
inline scratch_job scratch_with_data(const std::string& name,
                                     int tokens = 60000) {
  auto dir = scratch(name);
  REQUIRE(synth_data(dir / "data", 32, tokens));
  return {dir, dir / "data"};
}

// True if `part` occurs in `text`.
inline bool has(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

// `text` with the first `from` replaced by `to` (`from` must be there).
inline std::string replace_once(std::string text, const std::string& from,
                                const std::string& to) {
  const auto at = text.find(from);
  REQUIRE(at != std::string::npos);
  return text.replace(at, from.size(), to);
}

// `text` with `lines` inserted after the first `anchor` (which must be
// there).
inline std::string insert_after(std::string text, const std::string& anchor,
                                const std::string& lines) {
  return replace_once(std::move(text), anchor, anchor + lines);
}

// `text` with the line `from` (without its newline) replaced by the line
// `to`, or removed if `to` is empty.
inline std::string replace_line(const std::string& text,
                                const std::string& from,
                                const std::string& to) {
  return replace_once(text, from + "\n", to.empty() ? to : to + "\n");
}

// The end of a log, for a failure's message.
inline std::string tail(const std::string& text, size_t n = 4000) {
  return text.size() > n ? text.substr(text.size() - n) : text;
}

inline void write_text(const std::filesystem::path& path,
                       const std::string& text) {
  std::ofstream out(path);
  out << text;
}

inline std::string read_text(const std::filesystem::path& path) {
  std::ifstream in(path);
  std::stringstream buf;
  buf << in.rdbuf();
  return buf.str();
}

// Writes the job config `text` to `config` and runs it (`tutti run
// --quiet`), which must succeed within `seconds`; what it printed.
inline command_result run_job(const std::filesystem::path& config,
                              const std::string& text, int seconds = 300) {
  write_text(config, text);
  auto r = run(tutti_bin() + " run " + config.string() + " --quiet", seconds);
  INFO(config.filename().string() << ": " << tail(r.output));
  REQUIRE(r.status == 0);
  return r;
}

// The value of a numeric field in each line of a metrics.jsonl.
inline std::vector<double> metric_series(const std::filesystem::path& path,
                                         const std::string& field) {
  std::vector<double> out;
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    const auto j = nlohmann::json::parse(line, nullptr, false);
    if (j.is_object() && j.contains(field) && j[field].is_number())
      out.push_back(j[field].get<double>());
  }
  return out;
}

// What two runs that must train to the same bits compare: every step's
// loss, aux_loss, z_loss and grad_norm from a metrics.jsonl, one after
// the other (4 x steps values).
inline std::vector<double> training_series(const std::filesystem::path& path) {
  std::vector<double> all;
  for (const char* field : {"loss", "aux_loss", "z_loss", "grad_norm"}) {
    auto s = metric_series(path, field);
    all.insert(all.end(), s.begin(), s.end());
  }
  return all;
}

// A small job config; `overrides` replaces whole lines by key prefix.
inline std::string small_config(const std::string& data_dir,
                                const std::string& run_dir, int world,
                                int steps, double capacity_factor = 0,
                                int global_batch = 8) {
  std::ostringstream c;
  c << "cluster_config:\n  world_size: " << world
    << "\n  nnodes: 1\n  nproc_per_node: " << world << "\n  ep_size: " << world
    << "\n  collective_timeout_ms: 30000\n"
       "model:\n  vocab_size: 32\n  hidden_size: 32\n  intermediate_size: 64\n"
       "  num_hidden_layers: 2\n  num_attention_heads: 4\n"
       "  num_key_value_heads: 2\n  max_seq_len: 32\n"
       "moe_config:\n  num_experts: 4\n  router_top_k: 2\n"
       "  capacity_factor: "
    << capacity_factor
    << "\n  aux_loss_coeff: 0.01\n  z_loss_coeff: 0.001\n"
       "  bias_update_rate: 0.001\n"
       "train:\n  steps: "
    << steps << "\n  global_batch_size: " << global_batch
    << "\n  seq_len: 32\n  lr: 0.003\n  warmup_steps: 5\n  seed: 99\n"
       "  eval_sequences: 8\n  log_interval: 10\n"
       "data:\n  dir: "
    << data_dir << "\nrun:\n  dir: " << run_dir << "\n";
  return c.str();
}

// small_config's model on 4 ranks, one on each of 4 nodes in 2 racks (the
// nodes' ports from `first_port`), 8 experts of which each token takes
// `top_k`; ranks talk over Gloo on loopback when `tcp`, else in memory.
inline std::string two_rack_config(const std::string& data_dir,
                                   const std::string& run_dir, int steps,
                                   int first_port, bool rack_aware, bool tcp,
                                   int top_k = 4) {
  auto text = small_config(data_dir, run_dir, 4, steps);
  std::string nodes;
  for (int n = 0; n < 4; ++n)
    nodes += "    - {host: 127.0.0.1, port: " + std::to_string(first_port + n)
             + ", rack: r" + std::to_string(n / 2) + "}\n";
  text = replace_once(text, "  nnodes: 1\n  nproc_per_node: 4\n",
                      "  nnodes: 4\n  nproc_per_node: 1\n"
                      "  local_transport: "
                        + std::string(tcp ? "tcp" : "memory") + "\n  nodes:\n"
                        + nodes);
  return replace_once(text, "  num_experts: 4\n  router_top_k: 2\n",
                      "  num_experts: 8\n  router_top_k: "
                        + std::to_string(top_k) + "\n  rack_aware_alltoall: "
                        + std::string(rack_aware ? "true" : "false") + "\n");
}

} // namespace tutti::testing
