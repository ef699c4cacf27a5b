// estimate_step and search_layouts: the layouts a cluster admits, the
// stages' layer split that keeps the fullest small, ranked by step time.

#include <algorithm>
#include <cmath>
#include <functional>

#include "plan_shapes.hpp"
#include "tutti/train/capacity_plan.hpp"

namespace tutti::train {

namespace {

std::string list_text(const std::vector<int64_t>& xs) {
  std::string out = "[";
  for (size_t i = 0; i < xs.size(); ++i)
    out += (i ? ", " : "") + std::to_string(xs[i]);
  return out + "]";
}

bool uneven(const std::vector<int64_t>& xs) {
  return std::adjacent_find(xs.begin(), xs.end(), std::not_equal_to<>())
         != xs.end();
}

step_estimate estimate(const job_config& cfg, const parallel_layout& l,
                       const hardware& hw, const capacity_plan& plan) {
  const shapes x = shapes_of(cfg, l);
  const stage_model model(cfg, l);
  const double act = model.act_bytes();
  const auto counts = stage_counts(cfg, l);
  const double layers_max =
    static_cast<double>(*std::max_element(counts.begin(), counts.end()));
  const double layers = static_cast<double>(cfg.model.num_hidden_layers);
  const double world = static_cast<double>(l.tp * l.pp * l.dp);
  step_estimate e;
  // Forward is a third of forward + backward; recomputation repeats it
  // (selective: the attention core's share only). The stage with the most
  // layers sets the pace.
  double flops = plan.flops_per_step / world * layers_max * l.pp / layers;
  const double attention_share = 2.0 * 2 * x.hq * l.tp * x.hd * x.s / 2
                                 / (plan.flops_per_token / 3 + 1);
  if (l.recompute == recompute_mode::full)
    flops *= 4.0 / 3;
  else if (l.recompute == recompute_mode::selective)
    flops *= 1 + attention_share / 3;
  const double p = l.pp, m = l.micro_batches, v = l.virtual_stages;
  // Under PP the shard keeps one saved forward per layer unless told to
  // keep one per micro-batch: all but about one backward per chunk run the
  // experts' forward (2 x 3 d f per row) again first.
  if (p > 1 && !l.keep_expert_activations
      && l.recompute != recompute_mode::full)
    flops += layers_max * x.recv * 6 * x.d * x.f * (m - 1);
  e.compute_s = flops / (hw.device_tflops * 1e12);
  e.bubble = (p - 1) / (v * m + p - 1);
  const double pipelined = e.compute_s / (1 - e.bubble);

  auto seconds = [](double bytes, double gbps) {
    return bytes * 8 / (gbps * 1e9);
  };
  const int64_t per_node = cfg.cluster.nproc_per_node;
  const double tensor = x.n * x.d * act; // one micro-batch's hidden states
  double comm = 0;
  if (l.tp > 1) // 2 all-reduces forward, 2 backward per layer, ring
    comm += 4 * layers_max * m
            * seconds(2.0 * (l.tp - 1) / l.tp * tensor,
                      l.tp <= per_node ? hw.intra_node_gbps
                                       : hw.inter_node_gbps);
  if (l.ep > 1) // dispatch + combine, forward + backward
    comm += 4 * layers_max * m
            * seconds(x.recv * x.d * act * (l.ep - 1) / l.ep,
                      l.ep * l.tp <= per_node ? hw.intra_node_gbps
                                              : hw.inter_node_gbps);
  if (l.pp > 1) // activations forward, their gradients backward, per chunk
    comm += 2 * (v * m + p - 1) * seconds(tensor, hw.inter_node_gbps);
  // Gradient reduction (reduce-scatter + all-gather when sharded moves
  // the same bytes) overlaps the last micro-batch's backward.
  const layer_sums sums(cfg, l.tp, l.ep);
  const double grad = act; // gradients travel in the parameters' dtype
  const double grads =
    (sums.dense_in(0, cfg.model.num_hidden_layers) / p + x.v * x.d) * grad;
  const double edp = static_cast<double>(l.dp) / l.ep;
  double dp_s = 0;
  if (l.dp > 1)
    dp_s += seconds(2.0 * (l.dp - 1) / l.dp * grads,
                    l.dp * l.tp * l.pp <= per_node ? hw.intra_node_gbps
                                                   : hw.inter_node_gbps);
  if (edp > 1)
    dp_s += seconds(2.0 * (edp - 1) / edp
                      * sums.experts_in(0, cfg.model.num_hidden_layers) / p
                      * grad,
                    hw.inter_node_gbps);
  comm += std::max(0.0, dp_s - e.compute_s / m * 2 / 3);
  e.exposed_comm_s = comm;
  e.step_s = pipelined + comm;
  return e;
}

} // namespace

std::vector<int64_t> balanced_stage_layers(const job_config& cfg,
                                           const parallel_layout& l) {
  const int64_t layers = cfg.model.num_hidden_layers;
  if (l.pp <= 1 || l.pp > layers)
    return {layers};
  // Each stage's bytes are a + b * (its layers), at the layers' mean
  // parameters; a layer at a time to the stage it grows least.
  const stage_model model(cfg, l);
  const layer_sums sums(cfg, l.tp, l.ep);
  const double dense = sums.dense_in(0, layers) / layers;
  const double experts = sums.experts_in(0, layers) / layers;
  std::vector<double> a(l.pp), b(l.pp);
  for (int64_t s = 0; s < l.pp; ++s) {
    a[s] = model.at(s, 0, 0, 0).total;
    b[s] = model.at(s, 1, dense, experts).total - a[s];
  }
  std::vector<int64_t> out(static_cast<size_t>(l.pp), 1);
  for (int64_t placed = l.pp; placed < layers; ++placed) {
    size_t best = 0;
    for (size_t s = 1; s < out.size(); ++s)
      if (a[s] + b[s] * (out[s] + 1) < a[best] + b[best] * (out[best] + 1))
        best = s;
    ++out[best];
  }
  return out;
}

step_estimate estimate_step(const job_config& cfg, const parallel_layout& l,
                            const hardware& hw) {
  return estimate(cfg, l, hw, make_capacity_plan(cfg));
}

std::vector<layout_choice> search_layouts(const job_config& cfg,
                                          const hardware& hw,
                                          int64_t& considered) {
  std::vector<layout_choice> out;
  considered = 0;
  const auto& c = cfg.cluster;
  const auto& m = cfg.model;
  const int64_t world = c.world_size, E = cfg.moe.num_experts;
  const int64_t layers = m.num_hidden_layers;
  const double budget = c.device_memory_gb * 1e9;
  const auto plan = make_capacity_plan(cfg); // FLOPs, once
  for (int64_t tp = 1; tp <= std::min<int64_t>(8, c.nproc_per_node); tp *= 2) {
    if (m.num_attention_heads % tp != 0 || m.intermediate_size % tp != 0
        || m.vocab_size % tp != 0
        || (m.num_key_value_heads % tp != 0 && tp % m.num_key_value_heads != 0))
      continue;
    for (int64_t pp = 1; pp <= std::min<int64_t>(64, layers); pp *= 2) {
      if (world % (tp * pp) != 0)
        continue;
      const int64_t dp = world / (tp * pp);
      if (cfg.train.global_batch_size % dp != 0
          || cfg.train.eval_sequences % dp != 0)
        continue;
      const int64_t per_dp = cfg.train.global_batch_size / dp;
      for (int64_t ep = 1; ep <= std::min(E, dp); ep *= 2) {
        if (E % ep != 0 || dp % ep != 0)
          continue;
        for (int64_t micro = 1; micro <= std::min<int64_t>(per_dp, 256);
             micro *= 2) {
          if (per_dp % micro != 0)
            continue;
          for (auto rc : {recompute_mode::none, recompute_mode::selective,
                          recompute_mode::full})
            for (bool shard : {false, true}) {
              if (shard && dp == 1) // nothing to shard over
                continue;
              ++considered;
              parallel_layout l{tp, pp, ep, dp, micro, rc, shard, {}};
              // Equal stages where they divide, unless a split holds less.
              l.stage_layers = balanced_stage_layers(cfg, l);
              auto mem = plan_memory(cfg, l);
              if (pp > 1 && layers % pp == 0 && uneven(l.stage_layers)) {
                parallel_layout equal = l;
                equal.stage_layers.assign(static_cast<size_t>(pp),
                                          layers / pp);
                auto even = plan_memory(cfg, equal);
                if (even.total <= mem.total) {
                  l = equal;
                  mem = even;
                }
              }
              if (mem.total > budget)
                continue;
              out.push_back({l, mem, estimate(cfg, l, hw, plan)});
              // Interleaved stages: a smaller bubble for more activations
              // in flight and more exchanges (run on the CPU only yet).
              std::vector<parallel_layout> variants{l};
              if (pp > 1 && !uneven(l.stage_layers) && micro % pp == 0
                  && cfg.cluster.device == compute_device::cpu)
                for (int64_t v = 2; v <= 4 && layers % (pp * v) == 0;
                     v *= 2) {
                  variants.push_back(l);
                  variants.back().virtual_stages = v;
                }
              // Each also keeping the experts' activations (no replayed
              // forwards, more memory).
              if (pp > 1 && micro > 1 && rc != recompute_mode::full)
                for (size_t i = 0, n = variants.size(); i < n; ++i) {
                  variants.push_back(variants[i]);
                  variants.back().keep_expert_activations = true;
                }
              for (size_t i = 1; i < variants.size(); ++i) {
                ++considered;
                auto held = plan_memory(cfg, variants[i]);
                if (held.total <= budget)
                  out.push_back({variants[i], held,
                                 estimate(cfg, variants[i], hw, plan)});
              }
            }
        }
      }
    }
  }
  std::stable_sort(out.begin(), out.end(), [](const auto& a, const auto& b) {
    return a.step.step_s < b.step.step_s;
  });
  return out;
}

std::string layout_text(const parallel_layout& l) {
  return "TP" + std::to_string(l.tp) + " PP" + std::to_string(l.pp)
         + (uneven(l.stage_layers) ? " layers " + list_text(l.stage_layers)
                                   : "")
         + (l.virtual_stages > 1
              ? " interleaved x" + std::to_string(l.virtual_stages)
              : "")
         + (l.keep_expert_activations ? " keeping expert activations" : "")
         + " EP" + std::to_string(l.ep) + " DP" + std::to_string(l.dp) + " m"
         + std::to_string(l.micro_batches) + " recompute "
         + to_string(l.recompute)
         + (l.optimizer_sharding ? " sharded-optimizer" : "");
}

std::string layout_keys_text(const job_config& cfg, const parallel_layout& l) {
  const auto& p = cfg.train.precision;
  const bool mixed = p.params != storage_dtype::fp32
                     || p.grads != storage_dtype::fp32
                     || p.master_weights != storage_dtype::fp32
                     || p.moments != storage_dtype::fp32;
  return "cluster_config: {tensor_model_parallel_size: " + std::to_string(l.tp)
         + ", pipeline_model_parallel_size: " + std::to_string(l.pp)
         + (uneven(l.stage_layers)
              ? ", pipeline_layers: " + list_text(l.stage_layers)
              : "")
         + (l.virtual_stages > 1 ? ", pipeline_virtual_stages: "
                                     + std::to_string(l.virtual_stages)
                                 : "")
         + ", ep_size: " + std::to_string(l.ep)
         + "}, train: {micro_batches: " + std::to_string(l.micro_batches)
         + ", recompute: " + to_string(l.recompute) + ", optimizer_sharding: "
         + (l.optimizer_sharding ? "true" : "false")
         + (l.keep_expert_activations ? ", keep_expert_activations: true"
                                      : "")
         + (mixed ? std::string(", precision: {params: ") + to_string(p.params)
                      + ", grads: " + to_string(p.grads)
                      + ", master_weights: " + to_string(p.master_weights)
                      + ", moments: " + to_string(p.moments) + "}"
                  : "")
         + "}";
}

} // namespace tutti::train
