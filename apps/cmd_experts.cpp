// tutti experts stats RUN_DIR|HOST:PORT: the routing statistics a job kept
// in its store (RUN_DIR/state, read-only, so a live job's too), or those a
// serving replica counts (its /metrics): tokens per expert, the most
// co-activated pairs, a co-activation heatmap (jobs only), and JSON.

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <tuple>

#include "command_line.hpp"
#include "commands.hpp"
#include "tutti/net/http_client.hpp"
#include "tutti/placement/routing_stats.hpp"
#include "tutti/config/host_port.hpp"
#include "tutti/serve/served_routing_stats.hpp"
#include "tutti/store/atomic_file.hpp"
#include "tutti/store/job_store.hpp"

namespace tutti::cli {

namespace {

using placement::routing_stats;

void print_load_table(const routing_stats& s) {
  std::printf("\ntokens per expert (share of the layer's routed tokens, %%)\n");
  std::printf("%8s", "expert");
  for (int64_t l = 0; l < s.layers; ++l)
    std::printf(" %8s", ("layer " + std::to_string(l)).c_str());
  std::printf("\n");
  for (int64_t e = 0; e < s.experts; ++e) {
    std::printf("%8lld", static_cast<long long>(e));
    for (int64_t l = 0; l < s.layers; ++l) {
      const double total = double(s.tokens * s.top_k);
      std::printf(" %8.2f",
                  total > 0 ? 100.0 * double(s.load_at(l, e)) / total : 0.0);
    }
    std::printf("\n");
  }
  std::printf("%8s", "max/mean");
  for (int64_t l = 0; l < s.layers; ++l)
    std::printf(" %8.3f", s.imbalance(l));
  std::printf("\n");
}

void print_top_pairs(const routing_stats& s, int64_t top) {
  std::vector<std::tuple<int64_t, int64_t, int64_t, int64_t>> pairs;
  for (int64_t l = 0; l < s.layers; ++l)
    for (int64_t e = 0; e < s.experts; ++e)
      for (int64_t f = e + 1; f < s.experts; ++f)
        if (s.coactivation_at(l, e, f) > 0)
          pairs.emplace_back(s.coactivation_at(l, e, f), l, e, f);
  std::stable_sort(pairs.begin(), pairs.end(), [](auto& a, auto& b) {
    return std::get<0>(a) > std::get<0>(b);
  });
  std::printf("\ntop co-activated pairs (tokens choosing both; lift = over "
              "independent choice)\n");
  std::printf("%6s %7s %7s %12s %8s %6s\n", "layer", "expert", "expert",
              "tokens", "share%", "lift");
  for (size_t i = 0; i < pairs.size() && int64_t(i) < top; ++i) {
    auto [count, l, e, f] = pairs[i];
    const double n = double(std::max<int64_t>(s.tokens, 1));
    const double pe = double(s.load_at(l, e)) / n,
                 pf = double(s.load_at(l, f)) / n;
    const double lift = pe * pf > 0 ? (double(count) / n) / (pe * pf) : 0.0;
    std::printf("%6lld %7lld %7lld %12lld %8.2f %6.2f\n",
                static_cast<long long>(l), static_cast<long long>(e),
                static_cast<long long>(f), static_cast<long long>(count),
                100.0 * double(count) / n, lift);
  }
}

// One character per cell, darker for more co-activation (relative to the
// layer's largest pair).
void print_heatmap(const routing_stats& s, int64_t l) {
  static const char shades[] = " .:-=+*#%@";
  int64_t most = 0;
  for (int64_t e = 0; e < s.experts; ++e)
    for (int64_t f = 0; f < s.experts; ++f)
      most = std::max(most, s.coactivation_at(l, e, f));
  std::printf("\nco-activation heatmap, layer %lld (row, column: expert; "
              "'@' = %lld tokens)\n",
              static_cast<long long>(l), static_cast<long long>(most));
  for (int64_t e = 0; e < s.experts; ++e) {
    std::printf("%5lld |", static_cast<long long>(e));
    for (int64_t f = 0; f < s.experts; ++f) {
      const int64_t c = s.coactivation_at(l, e, f);
      const int shade = most > 0 && c > 0
                          ? 1 + int(8.999 * double(c) / double(most))
                          : 0;
      std::putchar(e == f ? '\\' : shades[shade]);
    }
    std::printf("|\n");
  }
}

// The windows a job kept, summed (or the last); the error's exit status.
expected<routing_stats> job_stats(const std::filesystem::path& run_dir,
                                  const std::string& which, int& code) {
  code = 1;
  const auto dir = run_dir / "state";
  auto db = store::job_store::open_read_only(dir);
  if (!db.ok()) {
    code = 2;
    return status::error(db.message());
  }
  auto windows = db.value()->routing_windows();
  if (!windows.ok())
    return windows.error();
  if (windows.value().empty())
    return status::error("no routing statistics in " + dir.string()
                         + " (moe_config.routing_stats_window is 0, or no "
                           "window has ended yet)");
  routing_stats total;
  size_t used = 0;
  for (size_t i = which == "last" ? windows.value().size() - 1 : 0;
       i < windows.value().size(); ++i, ++used) {
    auto w = routing_stats::from_json(windows.value()[i].second);
    if (!w.ok())
      return status::error("window ending at step "
                           + std::to_string(windows.value()[i].first) + ": "
                           + w.message());
    if (used == 0)
      total = std::move(w.value());
    else if (auto err = total.merge(w.value()); !err)
      return err;
  }
  std::printf(
    "routing statistics: %zu window(s), steps %lld..%lld, %lld "
    "tokens, %lld layers x %lld experts, top-%lld\n",
    used, static_cast<long long>(total.first_step),
    static_cast<long long>(total.last_step),
    static_cast<long long>(total.tokens), static_cast<long long>(total.layers),
    static_cast<long long>(total.experts), static_cast<long long>(total.top_k));
  return total;
}

// A serving replica's counts since its start, from its /metrics.
expected<routing_stats> served_stats(const std::string& host, uint16_t port) {
  net::client_options o;
  o.host = host;
  o.port = port;
  o.connect_timeout = std::chrono::seconds(5);
  o.read_timeout = std::chrono::seconds(30);
  net::http_client cli(o);
  const auto where = host + ":" + std::to_string(port);
  auto r = cli.get("/metrics");
  if (!r)
    return status::error(where + ": " + r.message());
  if (r->status != 200)
    return status::error(where + "/metrics answered "
                         + std::to_string(r->status));
  auto st = serve::routing_stats_from_metrics(r->body);
  if (!st)
    return status::error(where + ": " + st.message());
  std::printf("routing statistics of the replica at %s since its start: "
              "%lld (token, slot) pairs per layer, %lld layers x %lld "
              "experts (serving counts no co-activation)\n",
              where.c_str(), static_cast<long long>(st.value().tokens),
              static_cast<long long>(st.value().layers),
              static_cast<long long>(st.value().experts));
  return st;
}

int stats(const std::vector<std::string>& args) {
  std::string json_out, which;
  int64_t layer = 0, top = 10;
  command_line cl("experts stats",
                  "RUN_DIR|HOST:PORT [--json FILE] [--layer L]",
                  "routing statistics kept by a job (moe_config."
                  "routing_stats_window): tokens per expert, co-activated "
                  "pairs, a heatmap; works on a live job's run directory. "
                  "HOST:PORT: a serving replica's tokens per expert (its "
                  "/metrics), e.g. for serve.offload");
  cl.options()("json", po::value(&json_out),
               "also write the statistics "
               "as JSON (the planner's --stats, serve.offload.stats)")(
    "layer", po::value(&layer)->default_value(0), "layer of the heatmap")(
    "top", po::value(&top)->default_value(10), "co-activated pairs to list")(
    "window", po::value(&which)->default_value("all"), "all (summed) or last");
  cl.required("run_dir", "RUN_DIR or HOST:PORT");
  po::variables_map vm;
  if (auto done = cl.parse(args, vm))
    return *done;
  if (which != "all" && which != "last")
    return cl.bad("--window must be all or last, got " + which);
  const auto source = vm["run_dir"].as<std::string>();
  std::string host;
  uint16_t port = 0;
  const bool served = !std::filesystem::exists(source)
                      && parse_host_port(source, host, port).ok();
  int code = 1;
  auto got = served ? served_stats(host, port)
                    : job_stats(source, which, code);
  if (!got)
    return fail(code, "experts stats: " + got.message());
  const auto& total = got.value();
  if (layer < 0 || layer >= total.layers)
    return cl.bad("--layer must be in [0, " + std::to_string(total.layers)
                  + ")");
  print_load_table(total);
  if (!served) {
    print_top_pairs(total, top);
    print_heatmap(total, layer);
  }
  if (!json_out.empty()) {
    if (auto err = store::write_file_atomic(json_out, total.to_json() + "\n");
        !err)
      return fail(1, "experts stats: " + err.message());
    std::printf("\nwrote %s\n", json_out.c_str());
  }
  return 0;
}

} // namespace

int experts_command(const std::vector<std::string>& args) {
  if (!args.empty() && args[0] == "stats")
    return stats({args.begin() + 1, args.end()});
  if (!args.empty() && (args[0] == "--help" || args[0] == "-h")) {
    command_line cl("experts",
                    "stats RUN_DIR|HOST:PORT [--json FILE] [options]",
                    "subcommands:\n  stats RUN_DIR   routing statistics a job "
                    "kept: load, co-activation, heatmap, JSON\n  stats "
                    "HOST:PORT   a serving replica's load per expert");
    po::variables_map vm;
    return cl.parse(args, vm).value_or(0);
  }
  return fail(2, "experts: expected a subcommand: stats");
}

} // namespace tutti::cli
