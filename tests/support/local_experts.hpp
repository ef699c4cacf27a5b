#pragma once
// Every expert of a model on one rank, run directly in the test's thread:
// the expert_executor a rank_model needs when a test runs the training
// forward without actors (test_export, test_serve_engine). Forward only.

#include <vector>

#include "tutti/config/job_config.hpp"
#include "tutti/kernels/stream.hpp"
#include "tutti/train/expert_executor.hpp"
#include "tutti/train/expert_ffn.hpp"
#include "tutti/model/param_layout.hpp"

namespace tutti::testing {

struct local_experts : train::expert_executor {
  explicit local_experts(const job_config& c)
    : layout(model::expert_layout(c.model, 0, c.moe.num_experts)),
      params(layout.total()), grads(layout.total()),
      ffn(c.model.num_hidden_layers, c.moe.num_experts, c.model.hidden_size,
          c.model.intermediate_size) {}
  train::expert_block block(int64_t l) {
    auto at = [&](const char* w) {
      return layout.at(model::expert_block_name(l, w)).offset;
    };
    return {params.data() + at("w1"), params.data() + at("w3"),
            params.data() + at("w2"), grads.data() + at("w1"),
            grads.data() + at("w3"),  grads.data() + at("w2")};
  }
  status forward(int64_t l, const float* x, const int64_t* rows, int64_t,
                 float* y, bool append) override {
    ffn.forward(kernels::cpu_stream(), l, block(l), x, rows, y, append);
    return {};
  }
  status backward(int64_t, const float*, int64_t, float*, const int64_t*,
                  int64_t) override {
    return status::error("not used");
  }
  model::param_layout layout;
  std::vector<float> params, grads;
  train::expert_ffn ffn;
};

} // namespace tutti::testing
