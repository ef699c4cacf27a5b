#pragma once
// The training forward (train::rank_model, one rank, every expert local) of
// a model given by tensor (serve_test_support.hpp's tensor_map): what the
// serving tests compare the served logits with.

#include <catch2/catch.hpp>

#include <gloo/rendezvous/hash_store.h>

#include <memory>
#include <vector>

#include "local_experts.hpp"
#include "serve_test_support.hpp"
#include "tutti/comm/gloo_communicator.hpp"
#include "tutti/train/rank_model.hpp"

namespace tutti::testing {

// The training forward's log-probabilities logp[p][j] of one sequence:
// cross-entropy with a single target (j at position p; the others -1,
// which the loss ignores) is -log softmax(logits_p)[j]. The router biases
// are optional (zero without).
inline std::vector<std::vector<double>> training_logprobs(
  const job_config& cfg, const tensor_map& t,
  const std::vector<int32_t>& tokens) {
  gloo::rendezvous::HashStore store;
  std::unique_ptr<comm::communicator> world;
  REQUIRE(comm::make_gloo_communicator(store, 0, 1, {}, world).ok());
  local_experts experts(cfg);
  train::rank_model m(cfg, {world.get(), world.get(), nullptr}, experts);
  for (const auto& spec : m.layout().tensors())
    m.params().upload(m.stream(), t.at(spec.name).data(), spec.numel,
                      spec.offset);
  const auto& md = cfg.model;
  const int64_t E = cfg.moe.num_experts;
  const int64_t per = md.intermediate_size * md.hidden_size;
  // A leading dense layer's experts and router biases are never used.
  for (int64_t l = cfg.moe.first_k_dense_replace; l < md.num_hidden_layers;
       ++l) {
    for (const char* w : {"w1", "w2", "w3"}) {
      auto off = experts.layout.at(model::expert_block_name(l, w)).offset;
      for (int64_t e = 0; e < E; ++e) {
        const auto& v = t.at(model::names::expert(l, e, w));
        std::copy(v.begin(), v.end(), experts.params.begin() + off + e * per);
      }
    }
    const auto bias = t.find(model::names::layer(l, model::names::router_bias));
    if (bias != t.end())
      m.router_bias().upload(m.stream(), bias->second.data(), E, l * E);
  }
  const int64_t P = static_cast<int64_t>(tokens.size()), V = md.vocab_size;
  std::vector<std::vector<double>> out(P, std::vector<double>(V));
  std::vector<int32_t> targets(P, -1);
  for (int64_t p = 0; p < P; ++p)
    for (int64_t j = 0; j < V; ++j) {
      targets.assign(P, -1);
      targets[p] = static_cast<int32_t>(j);
      double sum = 0;
      int64_t n = 0;
      train::step_timers timers;
      REQUIRE(
        m.evaluate(tokens.data(), targets.data(), 1, sum, n, timers).ok());
      out[p][j] = -sum;
    }
  return out;
}

} // namespace tutti::testing
