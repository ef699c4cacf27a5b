#pragma once
// `tutti bench serve`: a load generator for any OpenAI-compatible
// completions or chat completions endpoint. Requests arrive as a Poisson process (gamma
// inter-arrival times with a burstiness shape; 1 = Poisson), at most
// `concurrency` in flight, each streamed. The figures follow vLLM's `bench
// serve`: TTFT (send to first streamed token), TPOT ((end - TTFT) /
// (output tokens - 1)), ITL (every gap between chunks), end-to-end latency,
// request and output token throughput, and goodput (requests per second
// meeting every SLO).

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "tutti/base/status.hpp"

namespace tutti::serve {

struct load_spec {
  std::string host = "127.0.0.1";
  uint16_t port = 8000;
  std::string model; // empty: not sent
  int64_t requests = 100;
  double rate = 0; // requests per second; 0: all at once
  double burstiness = 1.0;
  int64_t concurrency = 0; // 0: no cap
  int64_t prompt_tokens = 128;
  int64_t output_tokens = 128;
  int64_t vocab = 256;              // prompts are random token ids below it
  std::vector<std::string> prompts; // text prompts instead, used in turn
  // Token-id text to cut prompts from instead (a data set's held-out split,
  // `--prompts-from`): each prompt is prompt_tokens consecutive tokens at a
  // position drawn from the seed, so the load has the data's structure.
  std::vector<int32_t> prompt_source;
  // /v1/chat/completions instead, each prompt the one user message: text
  // prompts, or random lowercase text of prompt_tokens bytes.
  bool chat = false;
  uint64_t seed = 0;
  double temperature = 0;
  std::map<std::string, double> slo_ms; // ttft, tpot, itl, e2e -> limit
  double timeout_s = 600;
};

struct percentiles {
  double mean = 0, p50 = 0, p90 = 0, p99 = 0;
};

struct load_report {
  int64_t completed = 0, failed = 0;
  std::string first_error;
  double duration_s = 0;
  int64_t output_tokens = 0, prompt_tokens = 0;
  double request_throughput = 0, output_throughput = 0, goodput = 0;
  percentiles ttft_ms, tpot_ms, itl_ms, e2e_ms;
};

// "ttft=2000ms,tpot=200ms" (ms or s) into slo_ms.
status parse_slo(const std::string& text, std::map<std::string, double>& out);

// Runs the load; `progress(done, total)` after each request ends.
expected<load_report> run_load(
  const load_spec& spec,
  const std::function<void(int64_t, int64_t)>& progress = {});

percentiles percentiles_of(std::vector<double> values);

// The report as JSON and as a table for people.
std::string report_json(const load_spec& spec, const load_report& r);
std::string report_table(const load_spec& spec, const load_report& r);

} // namespace tutti::serve
