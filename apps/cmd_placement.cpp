// tutti placement plan CONFIG --stats STATS.json [--out PLAN]: where each
// layer's experts should live, from routing statistics, compared with the
// contiguous layout and a load-only balancer (EPLB). --method affinity
// --model EXPORT_DIR: each token's experts at each layer when it stands
// alone (data.rack_affinity deals windows by them), and a plan made with
// the racks those tokens will be dealt to (plan_token_affinity).

#include <nlohmann/json.hpp>

#include <cstdio>
#include <map>
#include <vector>

#include "command_line.hpp"
#include "commands.hpp"
#include "tutti/config/job_config.hpp"
#include "tutti/moe/token_exchange.hpp"
#include "tutti/placement/planner.hpp"
#include "tutti/placement/token_experts.hpp"
#include "tutti/store/atomic_file.hpp"
#include "tutti/store/safetensors.hpp"

namespace tutti::cli {

namespace {

// Why the affinity plan cannot predict this model's experts ("" when it
// can): its one-position forward knows grouped-query attention, every
// layer a MoE layer and the softmax router, and would predict others wrong.
std::string affinity_unsupported(const job_config& cfg) {
  const auto& e = cfg.moe;
  const char* key = cfg.model.mla()           ? "model.kv_lora_rank"
                    : e.first_k_dense_replace ? "moe_config.first_k_dense_replace"
                    : e.n_shared_experts      ? "moe_config.n_shared_experts"
                    : e.scoring != scoring_func::softmax
                      ? "moe_config.scoring_func"
                      : nullptr;
  return key == nullptr
           ? ""
           : std::string(key)
               + ": --method affinity predicts the experts of models with "
                 "grouped-query attention, no dense or shared MLPs and the "
                 "softmax router only";
}

// The exported model's experts per token and layer (token_experts.hpp).
expected<std::vector<int32_t>> token_experts_of(const job_config& cfg,
                                                const std::string& dir) {
  auto read = store::read_safetensors_as_f32(
    (std::filesystem::path(dir) / "model.safetensors").string());
  if (!read.ok())
    return read.error();
  std::map<std::string, store::named_tensor*> by_name;
  for (auto& t : read.value())
    by_name[t.name] = &t;
  // An int8 export's experts (`tutti export --dtype int8`): code x scale.
  for (auto& [name, t] : by_name) {
    if (!t->int8)
      continue;
    auto scale = by_name.find(name + "_scale");
    if (scale == by_name.end() || t->shape.size() != 2
        || scale->second->data.size() != size_t(t->shape[0]))
      return status::error(dir + ": tensor " + name
                           + " is int8 without its scales " + name + "_scale");
    const int64_t cols = t->shape[1];
    for (size_t i = 0; i < t->data.size(); ++i)
      t->data[i] *= scale->second->data[i / cols];
  }
  const auto& m = cfg.model;
  placement::token_model tm;
  tm.vocab = m.vocab_size;
  tm.hidden = m.hidden_size;
  tm.intermediate = m.intermediate_size;
  tm.layers = m.num_hidden_layers;
  tm.heads = m.num_attention_heads;
  tm.kv_heads = m.num_key_value_heads;
  tm.experts = cfg.moe.num_experts;
  tm.top_k = cfg.moe.router_top_k;
  tm.rms_norm_eps = m.rms_norm_eps;
  tm.router_temperature = cfg.moe.router_temperature;
  tm.tensor = [&](const std::string& name) -> std::span<const float> {
    auto at = by_name.find(name);
    return at == by_name.end() ? std::span<const float>()
                               : std::span<const float>(at->second->data);
  };
  auto out = placement::experts_per_token(tm);
  if (!out.ok())
    return out.error().with_context(dir + ": ");
  return out;
}

int plan(const std::vector<std::string>& args) {
  std::string stats_file, out, method = "tutti", model_dir;
  double max_imbalance = 1.1;
  command_line cl("placement plan", "CONFIG --stats STATS.json [--out PLAN [--method M]]",
                  "assign each layer's experts to ranks, rack -> node -> "
                  "rank, keeping co-activated experts together under a load "
                  "bound; compares contiguous, EPLB and this plan");
  cl.options()("stats", po::value(&stats_file)->required(),
               "routing statistics (tutti experts stats --json)")(
    "out", po::value(&out), "write the plan here (moe_config.placement)")(
    "method", po::value(&method)->default_value("tutti"),
    "which plan --out writes: tutti, eplb or contiguous (for comparisons), "
    "or affinity (planned with the racks --model's tokens are dealt to, "
    "by their experts per token and layer, for data.rack_affinity)")(
    "model", po::value(&model_dir),
    "with --method affinity: the job's model exported (tutti export)")(
    "max-imbalance", po::value(&max_imbalance)->default_value(1.1),
    "per-rank load bound, max/mean tokens")(
    "json", "the comparison as one JSON object");
  cl.required("config", "CONFIG");
  po::variables_map vm;
  if (auto done = cl.parse(args, vm))
    return *done;
  auto cfg = load_job_config(vm["config"].as<std::string>());
  if (!cfg)
    return fail(2, "config: " + cfg.message());
  if (method == "affinity")
    if (auto why = affinity_unsupported(*cfg); !why.empty())
      return fail(2, "placement plan: " + why);
  auto topo = placement::topology::from_config(*cfg);
  if (!topo.ok())
    return fail(2, "placement plan: " + topo.message());
  auto text = store::read_file(stats_file);
  if (!text.ok())
    return fail(2, "placement plan: " + text.message());
  auto st = placement::routing_stats::from_json(text.value());
  if (!st.ok())
    return fail(2, "placement plan: " + stats_file + ": " + st.message());
  const auto& s = st.value();
  if (s.experts != cfg->moe.num_experts
      || s.layers != cfg->model.num_hidden_layers)
    return fail(2, "placement plan: " + stats_file + " has "
                     + std::to_string(s.layers) + " layers x "
                     + std::to_string(s.experts) + " experts, the config "
                     + std::to_string(cfg->model.num_hidden_layers) + " x "
                     + std::to_string(cfg->moe.num_experts));
  if (method != "tutti" && method != "eplb" && method != "contiguous"
      && method != "affinity")
    return cl.bad("--method: '" + method
                  + "' is not one of tutti, eplb, contiguous, affinity");
  if ((method == "affinity") != !model_dir.empty())
    return cl.bad("--model goes with --method affinity, and it with --model");
  auto mine = placement::plan_rack_aware(s, topo.value(), {max_imbalance});
  if (!mine.ok())
    return fail(2, "placement plan: " + mine.message());
  // Four crossings a layer (dispatch and combine, forward and backward) of
  // one hidden vector: float32, but the forward dispatch's in
  // moe_config.dispatch_dtype.
  const int64_t d = cfg->model.hidden_size;
  const double bytes = 3.0 * double(d) * sizeof(float)
                       + double(moe::dispatch_row_bytes(cfg->moe.dispatch, d));
  const auto& t = topo.value();
  placement::placement_plan affinity;
  // With --method affinity: the share of the tokens' own picks in the rack
  // each would be dealt to, for the chained plan and for the one made with
  // the tokens' racks.
  double chained_share = 0, affinity_share = 0;
  if (method == "affinity") {
    auto chained = placement::plan_rack_aware(s, t, {max_imbalance, true});
    if (!chained.ok())
      return fail(2, "placement plan: " + chained.message());
    auto tokens = token_experts_of(*cfg, model_dir);
    if (!tokens.ok())
      return fail(2, "placement plan: --model " + tokens.message());
    const auto k = cfg->moe.router_top_k;
    auto made = placement::plan_token_affinity(s, t, tokens.value(), k,
                                               {max_imbalance});
    if (!made.ok())
      return fail(2, "placement plan: " + made.message());
    chained_share =
      placement::token_picks_in_rack(chained.value(), t, tokens.value(), k);
    affinity = std::move(made.value());
    affinity_share =
      placement::token_picks_in_rack(affinity, t, tokens.value(), k);
    affinity.token_experts = std::move(tokens.value());
    affinity.token_top_k = k;
  }
  struct row {
    const char* name;
    placement::plan_cost cost;
  };
  std::vector<row> rows = {
    {"contiguous", placement::evaluate(placement::placement_plan::contiguous(
                                         s.layers, s.experts, t.ranks),
                                       s, t, bytes)},
    {"eplb", placement::evaluate(placement::plan_eplb(s, t), s, t, bytes)},
    {"tutti", placement::evaluate(mine.value(), s, t, bytes)}};
  // Its traffic as if tokens started anywhere; data.rack_affinity starts
  // them in the rack of their first experts, which this model cannot see.
  if (method == "affinity")
    rows.push_back({"affinity", placement::evaluate(affinity, s, t, bytes)});
  // The plan the config names now, if any, for comparison.
  if (!cfg->moe.placement.empty()) {
    auto named = placement::placement_plan::read(cfg->moe.placement);
    if (!named.ok())
      return fail(2, "moe_config.placement: " + named.message());
    if (named.value().layers != s.layers || named.value().experts != s.experts
        || named.value().ranks != t.ranks)
      return fail(2, "moe_config.placement: " + cfg->moe.placement
                       + " is for another shape of layers, experts or ranks");
    rows.push_back(
      {"configured", placement::evaluate(named.value(), s, t, bytes)});
  }
  if (vm.count("json")) {
    nlohmann::ordered_json j;
    for (const auto& r : rows)
      j[r.name] = {
        {"cross_rack_bytes_per_token", r.cost.cross_rack_flat},
        {"cross_rack_bytes_per_token_rack_aware", r.cost.cross_rack_dedup},
        {"cross_node_bytes_per_token", r.cost.cross_node_flat},
        {"cross_node_bytes_per_token_rack_aware", r.cost.cross_node_dedup},
        {"load_imbalance", r.cost.imbalance}};
    if (method == "affinity")
      j["affinity"]["token_picks_in_rack"] = affinity_share,
      j["affinity"]["token_picks_in_rack_chained_plan"] = chained_share;
    std::printf("%s\n", j.dump().c_str());
  } else {
    std::printf(
      "placement of %lld experts x %lld layers (top-%lld) on %lld "
      "ranks, %lld nodes, %lld racks (inter-rack %.1f Gb/s, "
      "intra-rack %.1f Gb/s)\n"
      "expected bytes per token and step (dispatch + combine, "
      "forward + backward); cross-rack rack-aware = what training's "
      "rack relays (moe_config.rack_aware_alltoall) send: a token crosses "
      "to each remote rack holding any of its experts once per exchange, "
      "exact for top-2 (for top-k > 2 the combine and its input gradients "
      "come back once per rack only for a token's leading top-k slots "
      "there, else once per expert, and the column subtracts pairs only: "
      "it may promise less than is sent); rows only, not the relays' "
      "4-12 B of instructions and gate values per row. Cross-node rack-aware: the same per node, which no engine "
      "does (the relays fan out inside a rack per expert). Serving "
      "deduplicates its dispatch only.\n\n",
      static_cast<long long>(s.experts), static_cast<long long>(s.layers),
      static_cast<long long>(s.top_k), static_cast<long long>(t.ranks),
      static_cast<long long>(t.nodes()), static_cast<long long>(t.racks()),
      t.inter_rack_gbps, t.intra_rack_gbps);
    std::printf("%-11s %14s %14s %14s %14s %9s\n", "layout", "cross-rack",
                "cross-rack", "cross-node", "cross-node", "load");
    std::printf("%-11s %14s %14s %14s %14s %9s\n", "", "flat", "rack-aware",
                "flat", "rack-aware", "max/mean");
    for (const auto& r : rows)
      std::printf("%-11s %14.1f %14.1f %14.1f %14.1f %9.3f\n", r.name,
                  r.cost.cross_rack_flat, r.cost.cross_rack_dedup,
                  r.cost.cross_node_flat, r.cost.cross_node_dedup,
                  r.cost.imbalance);
    if (method == "affinity")
      std::printf("\naffinity: %.3f of the tokens' own picks in the rack "
                  "each is dealt to (tutti's plan with chained layers: "
                  "%.3f); the rows above start tokens anywhere\n",
                  affinity_share, chained_share);
  }
  if (!out.empty()) {
    const auto written = method == "eplb" ? placement::plan_eplb(s, t)
                         : method == "contiguous"
                           ? placement::placement_plan::contiguous(
                             s.layers, s.experts, t.ranks)
                         : method == "affinity" ? affinity
                                                : mine.value();
    if (auto err = written.write(out); !err)
      return fail(1, "placement plan: " + err.message());
    if (!vm.count("json"))
      std::printf("\nwrote the %s plan to %s (name it in "
                  "moe_config.placement)\n",
                  method.c_str(), out.c_str());
  }
  return 0;
}

} // namespace

int placement_command(const std::vector<std::string>& args) {
  if (!args.empty() && args[0] == "plan")
    return plan({args.begin() + 1, args.end()});
  if (!args.empty() && (args[0] == "--help" || args[0] == "-h")) {
    command_line cl(
      "placement", "plan CONFIG --stats STATS.json [--out PLAN] [options]",
      "subcommands:\n  plan CONFIG --stats STATS.json   rack-aware expert "
      "placement, compared with contiguous and EPLB");
    po::variables_map vm;
    return cl.parse(args, vm).value_or(0);
  }
  return fail(2, "placement: expected a subcommand: plan");
}

} // namespace tutti::cli
