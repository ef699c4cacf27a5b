// tutti bench serve: a load generator against any OpenAI-compatible
// completions endpoint (serve/load_generator.hpp), with a sweep over
// concurrency, SLO goodput, a progress bar, a table and JSON.

#include <cstdio>
#include <fstream>
#include <sstream>

#include "command_line.hpp"
#include "commands.hpp"
#include "tutti/data/dataset.hpp"
#include "tutti/serve/load_generator.hpp"
#include "tutti/config/host_port.hpp"

namespace tutti::cli {

namespace {

std::vector<int64_t> parse_list(const std::string& text, bool& ok) {
  std::vector<int64_t> out;
  std::stringstream s(text);
  std::string item;
  ok = true;
  while (std::getline(s, item, ',')) {
    size_t used = 0;
    long long v = 0;
    try {
      v = std::stoll(item, &used);
    } catch (...) {
      used = 0;
    }
    if (used == 0 || used != item.size() || v < 0)
      ok = false;
    out.push_back(v);
  }
  ok = ok && !out.empty();
  return out;
}

int bench_serve(const std::vector<std::string>& args) {
  command_line cl(
    "bench serve", "[--url http://HOST:PORT] [options]",
    "Streams completion (--chat: chat completion) requests to an OpenAI-\n"
    "compatible server and reports TTFT, TPOT, ITL and end-to-end latency\n"
    "(mean, p50, p90, p99), request and output-token throughput, and\n"
    "goodput under --slo.");
  cl.options()(
    "url", po::value<std::string>()->default_value("http://127.0.0.1:8000"),
    "the server")("model", po::value<std::string>(), "model name to send")(
    "requests", po::value<int64_t>()->default_value(100), "requests per run")(
    "rate", po::value<double>()->default_value(0),
    "requests per second, Poisson arrivals (0: all at once)")(
    "burstiness", po::value<double>()->default_value(1.0),
    "gamma shape of the inter-arrival times (1: Poisson)")(
    "concurrency", po::value<std::string>()->default_value("0"),
    "in-flight cap; a list (1,8,32) sweeps (0: no cap)")(
    "prompt-tokens", po::value<int64_t>()->default_value(128),
    "random token-id prompt length")("output-tokens",
                                     po::value<int64_t>()->default_value(128),
                                     "max_tokens of each request")(
    "vocab", po::value<int64_t>()->default_value(256),
    "prompt token ids are drawn below this")(
    "prompts-file", po::value<std::string>(),
    "text prompts, one a line, used in turn instead")(
    "prompts-from", po::value<std::string>(),
    "a tutti data directory: token-id prompts cut from its held-out split "
    "at seeded positions instead")(
    "temperature", po::value<double>()->default_value(0), "sampling")(
    "seed", po::value<uint64_t>()->default_value(0),
    "prompts and arrivals")("slo", po::value<std::string>(),
                            "goodput limits, e.g. ttft=2000ms,tpot=200ms")(
    "json", po::value<std::string>(),
    "write the results here as JSON")("no-progress", "no progress bar")(
    "chat", "POST /v1/chat/completions, each prompt as one user message "
            "(text prompts, or random lowercase text)");
  po::variables_map vm;
  if (auto done = cl.parse(args, vm))
    return *done;
  serve::load_spec spec;
  auto url = vm["url"].as<std::string>();
  if (url.rfind("http://", 0) == 0)
    url = url.substr(7);
  while (!url.empty() && url.back() == '/')
    url.pop_back();
  if (auto s = parse_host_port(url, spec.host, spec.port); !s.ok())
    return cl.bad("--url: " + s.message());
  if (vm.count("model"))
    spec.model = vm["model"].as<std::string>();
  spec.requests = vm["requests"].as<int64_t>();
  spec.rate = vm["rate"].as<double>();
  spec.burstiness = vm["burstiness"].as<double>();
  spec.prompt_tokens = vm["prompt-tokens"].as<int64_t>();
  spec.output_tokens = vm["output-tokens"].as<int64_t>();
  spec.vocab = vm["vocab"].as<int64_t>();
  spec.temperature = vm["temperature"].as<double>();
  spec.seed = vm["seed"].as<uint64_t>();
  if (spec.requests < 1 || spec.rate < 0 || spec.burstiness <= 0
      || spec.prompt_tokens < 1 || spec.output_tokens < 1 || spec.vocab < 1)
    return cl.bad("--requests, --prompt-tokens, --output-tokens, --vocab and "
                  "--burstiness must be positive, --rate >= 0");
  if (vm.count("prompts-file")) {
    std::ifstream in(vm["prompts-file"].as<std::string>());
    if (!in)
      return cl.bad("--prompts-file: cannot read "
                    + vm["prompts-file"].as<std::string>());
    for (std::string line; std::getline(in, line);)
      if (!line.empty())
        spec.prompts.push_back(line);
    if (spec.prompts.empty())
      return cl.bad("--prompts-file: no prompts in it");
  }
  if (vm.count("prompts-from")) {
    if (vm.count("prompts-file"))
      return cl.bad("--prompts-from and --prompts-file: give one");
    const auto dir = vm["prompts-from"].as<std::string>();
    auto val = data::load_split(dir, "val");
    if (!val)
      return cl.bad("--prompts-from: " + val.message());
    for (const auto& shard : val.value())
      spec.prompt_source.insert(spec.prompt_source.end(), shard.begin(),
                                shard.end());
    if (int64_t(spec.prompt_source.size()) < spec.prompt_tokens)
      return cl.bad("--prompts-from: " + dir + " holds "
                    + std::to_string(spec.prompt_source.size())
                    + " held-out tokens, fewer than --prompt-tokens");
  }
  spec.chat = vm.count("chat") > 0;
  if (spec.chat && vm.count("prompts-from"))
    return cl.bad("--chat and --prompts-from: chat messages are text "
                  "(--prompts-file, or random text)");
  if (vm.count("slo"))
    if (auto s = serve::parse_slo(vm["slo"].as<std::string>(), spec.slo_ms);
        !s.ok())
      return cl.bad(s.message());
  bool ok = true;
  const auto sweep = parse_list(vm["concurrency"].as<std::string>(), ok);
  if (!ok)
    return cl.bad("--concurrency: a number or a list like 1,8,32");
  const bool progress = !vm.count("no-progress");

  std::string json = "[";
  int status = 0;
  for (size_t i = 0; i < sweep.size(); ++i) {
    spec.concurrency = sweep[i];
    auto r = serve::run_load(spec, [&](int64_t done, int64_t total) {
      if (!progress)
        return;
      const int width = 30;
      const int filled = static_cast<int>(width * done / total);
      std::fprintf(stderr, "\r[%s%s] %lld/%lld",
                   std::string(filled, '#').c_str(),
                   std::string(width - filled, '.').c_str(),
                   static_cast<long long>(done), static_cast<long long>(total));
      if (done == total)
        std::fprintf(stderr, "\n");
    });
    if (!r.ok())
      return cl.bad(r.message());
    std::printf("%s\n", serve::report_table(spec, r.value()).c_str());
    json += (i ? ",\n" : "\n") + serve::report_json(spec, r.value());
    if (r.value().failed > 0)
      status = 1;
  }
  json += "\n]\n";
  if (vm.count("json")) {
    std::ofstream out(vm["json"].as<std::string>());
    out << json;
    if (!out)
      return fail(1,
                  "bench serve: cannot write " + vm["json"].as<std::string>());
  }
  return status;
}

} // namespace

int bench_command(const std::vector<std::string>& args) {
  if (!args.empty() && args[0] == "serve")
    return bench_serve({args.begin() + 1, args.end()});
  if (!args.empty() && (args[0] == "--help" || args[0] == "-h")) {
    std::printf("usage: tutti bench serve [options]  (tutti bench serve "
                "--help)\n");
    return 0;
  }
  return fail(2, "bench: usage: tutti bench serve [options]");
}

} // namespace tutti::cli
