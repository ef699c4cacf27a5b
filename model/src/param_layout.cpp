#include "tutti/model/param_layout.hpp"

#include <cmath>
#include <random>
#include <stdexcept>

#include "tutti/model/tensor_names.hpp"

namespace tutti::model {

const tensor_spec& param_layout::add(std::string name,
                                     std::vector<int64_t> shape) {
  int64_t numel = 1;
  for (auto d : shape)
    numel *= d;
  tensors_.push_back({std::move(name), std::move(shape), total_, numel});
  total_ += numel;
  return tensors_.back();
}

const tensor_spec& param_layout::at(const std::string& name) const {
  for (const auto& t : tensors_)
    if (t.name == name)
      return t;
  throw std::out_of_range("no tensor named " + name);
}

const tensor_spec* param_layout::find(const std::string& name) const {
  for (const auto& t : tensors_)
    if (t.name == name)
      return &t;
  return nullptr;
}

namespace {

// Multi-head latent attention's tensors of layer l, in Hugging Face's order.
void add_mla(param_layout& p, const model_config& m, int64_t l) {
  const int64_t d = m.hidden_size, h = m.num_attention_heads;
  const int64_t qk = m.qk_head_dim(), rank = m.kv_lora_rank;
  if (m.q_lora_rank > 0) {
    p.add(names::layer(l, names::q_a_proj), {m.q_lora_rank, d});
    p.add(names::layer(l, names::q_a_norm), {m.q_lora_rank});
    p.add(names::layer(l, names::q_b_proj), {h * qk, m.q_lora_rank});
  } else {
    p.add(names::layer(l, names::q_proj), {h * qk, d});
  }
  p.add(names::layer(l, names::kv_a_proj), {rank + m.qk_rope_head_dim, d});
  p.add(names::layer(l, names::kv_a_norm), {rank});
  p.add(names::layer(l, names::kv_b_proj),
        {h * (m.qk_nope_head_dim + m.v_head_dim), rank});
  p.add(names::layer(l, names::o_proj), {d, h * m.v_head_dim});
}

} // namespace

param_layout dense_layout(const model_config& m, const moe_config& e) {
  param_layout p;
  const int64_t d = m.hidden_size, hd = m.head_dim();
  p.add(names::embed, {m.vocab_size, d});
  for (int64_t l = 0; l < m.num_hidden_layers; ++l) {
    p.add(names::layer(l, names::input_norm), {d});
    if (m.mla()) {
      add_mla(p, m, l);
    } else {
      p.add(names::layer(l, names::q_proj), {m.num_attention_heads * hd, d});
      p.add(names::layer(l, names::k_proj), {m.num_key_value_heads * hd, d});
      p.add(names::layer(l, names::v_proj), {m.num_key_value_heads * hd, d});
      if (m.qk_norm()) {
        p.add(names::layer(l, names::q_norm), {hd});
        p.add(names::layer(l, names::k_norm), {hd});
      }
      p.add(names::layer(l, names::o_proj), {d, m.num_attention_heads * hd});
    }
    p.add(names::layer(l, names::post_norm), {d});
    if (e.dense_layer(l)) {
      const int64_t f = m.dense_intermediate_size;
      p.add(names::layer(l, names::dense_gate), {f, d});
      p.add(names::layer(l, names::dense_up), {f, d});
      p.add(names::layer(l, names::dense_down), {d, f});
      continue;
    }
    p.add(names::layer(l, names::router), {e.num_experts, d});
    if (const int64_t f = e.shared_intermediate(m); f > 0) {
      p.add(names::layer(l, names::shared_w1), {f, d});
      p.add(names::layer(l, names::shared_w3), {f, d});
      p.add(names::layer(l, names::shared_w2), {d, f});
    }
  }
  p.add(names::final_norm, {d});
  p.add(names::lm_head, {m.vocab_size, d});
  return p;
}

std::string expert_block_name(int64_t layer, const char* which) {
  return names::expert_block(layer, which);
}

param_layout expert_layout(const model_config& m, int64_t first_expert,
                           int64_t count) {
  (void)first_expert;
  param_layout p;
  const int64_t d = m.hidden_size, f = m.intermediate_size;
  for (int64_t l = 0; l < m.num_hidden_layers; ++l) {
    p.add(expert_block_name(l, "w1"), {count, f, d});
    p.add(expert_block_name(l, "w3"), {count, f, d});
    p.add(expert_block_name(l, "w2"), {count, d, f});
  }
  return p;
}

namespace {

// FNV-1a: a stable per-name seed on every platform.
uint64_t name_seed(uint64_t seed, const std::string& name) {
  uint64_t h = 1469598103934665603ull ^ seed;
  for (unsigned char c : name) {
    h ^= c;
    h *= 1099511628211ull;
  }
  return h;
}

// Box-Muller over mt19937_64 bits: the same numbers on every standard
// library (std::normal_distribution is implementation-defined).
void fill_normal(float* out, int64_t n, uint64_t seed, double std) {
  std::mt19937_64 rng(seed);
  auto uniform = [&] {
    return ((rng() >> 11) + 0.5) * (1.0 / 9007199254740992.0);
  };
  for (int64_t i = 0; i < n; i += 2) {
    double u1 = uniform(), u2 = uniform();
    double r = std::sqrt(-2.0 * std::log(u1));
    out[i] = static_cast<float>(std * r * std::cos(2 * M_PI * u2));
    if (i + 1 < n)
      out[i + 1] = static_cast<float>(std * r * std::sin(2 * M_PI * u2));
  }
}

bool is_norm(const std::string& name) {
  return name.find("norm") != std::string::npos;
}

} // namespace

void init_params(const param_layout& layout, float* values, uint64_t seed,
                 double std) {
  for (const auto& t : layout.tensors()) {
    if (is_norm(t.name)) {
      for (int64_t i = 0; i < t.numel; ++i)
        values[t.offset + i] = 1.0f;
    } else {
      fill_normal(values + t.offset, t.numel, name_seed(seed, t.name), std);
    }
  }
}

void init_expert_params(const param_layout& layout, float* values,
                        const model_config& m,
                        const std::vector<int32_t>& expert_ids, int64_t count,
                        uint64_t seed, double std) {
  const int64_t per = m.intermediate_size * m.hidden_size;
  for (int64_t l = 0; l < m.num_hidden_layers; ++l) {
    if (!layout.find(expert_block_name(l, "w1")))
      continue; // another pipeline stage's layer
    for (const char* which : {"w1", "w3", "w2"}) {
      const auto& block = layout.at(expert_block_name(l, which));
      for (int64_t j = 0; j < count; ++j) {
        const auto name = names::expert(l, expert_ids.at(l * count + j), which);
        fill_normal(values + block.offset + j * per, per, name_seed(seed, name),
                    std);
      }
    }
  }
}

void init_expert_params(const param_layout& layout, float* values,
                        const model_config& m, int64_t first_expert,
                        int64_t count, uint64_t seed, double std) {
  std::vector<int32_t> ids;
  for (int64_t l = 0; l < m.num_hidden_layers; ++l)
    for (int64_t j = 0; j < count; ++j)
      ids.push_back(static_cast<int32_t>(first_expert + j));
  init_expert_params(layout, values, m, ids, count, seed, std);
}

} // namespace tutti::model
