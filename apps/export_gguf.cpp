#include "export_gguf.hpp"

#include <cstdlib>
#include <map>
#include <tuple>

#include "tutti/model/model_shape.hpp"
#include "tutti/model/tensor_names.hpp"
#include "tutti/store/gguf.hpp"

namespace tutti::cli {

namespace names = model::names;

std::vector<float> rope_rows_for_gguf(const std::vector<float>& w,
                                      int64_t heads, int64_t head_dim,
                                      int64_t in) {
  std::vector<float> out(w.size());
  const int64_t half = head_dim / 2;
  for (int64_t h = 0; h < heads; ++h)
    for (int64_t a = 0; a < 2; ++a)
      for (int64_t j = 0; j < half; ++j) {
        const int64_t from = h * head_dim + a * half + j;
        const int64_t to = h * head_dim + 2 * j + a;
        std::copy(w.begin() + from * in, w.begin() + (from + 1) * in,
                  out.begin() + to * in);
      }
  return out;
}

namespace {

// A layer's multi-head latent attention and its dense or shared MLP in
// llama.cpp's deepseek2 names. kv_b_proj goes as its two halves per head,
// the key half transposed ([heads, kv_lora_rank, qk_nope]) and the value
// half ([heads, v_head_dim, kv_lora_rank]), as llama.cpp's absorbed
// attention reads them.
template <class Get, class Add>
void deepseek2_layer(const model::model_shape& s, int64_t l,
                     const std::string& blk, Get get, Add add,
                     std::vector<std::vector<float>>& owned,
                     std::vector<store::gguf_tensor>& out, status& missing) {
  if (s.q_lora_rank > 0) {
    add(blk + "attn_q_a.weight", names::layer(l, names::q_a_proj));
    add(blk + "attn_q_a_norm.weight", names::layer(l, names::q_a_norm));
    add(blk + "attn_q_b.weight", names::layer(l, names::q_b_proj));
  } else {
    add(blk + "attn_q.weight", names::layer(l, names::q_proj));
  }
  add(blk + "attn_kv_a_mqa.weight", names::layer(l, names::kv_a_proj));
  add(blk + "attn_kv_a_norm.weight", names::layer(l, names::kv_a_norm));
  if (const auto* kv_b = get(names::layer(l, names::kv_b_proj))) {
    const int64_t H = s.q_heads, kvl = s.kv_lora_rank;
    const int64_t nope = s.qk_nope_head_dim, v = s.v_head_dim;
    auto& k_b = owned.emplace_back(H * kvl * nope);
    for (int64_t h = 0; h < H; ++h)
      for (int64_t c = 0; c < kvl; ++c)
        for (int64_t i = 0; i < nope; ++i)
          k_b[(h * kvl + c) * nope + i] =
            kv_b->data[(h * (nope + v) + i) * kvl + c];
    out.push_back({blk + "attn_k_b.weight", {H, kvl, nope}, k_b.data()});
    auto& v_b = owned.emplace_back(H * v * kvl);
    for (int64_t h = 0; h < H; ++h)
      std::copy_n(kv_b->data.data() + (h * (nope + v) + nope) * kvl, v * kvl,
                  v_b.data() + h * v * kvl);
    out.push_back({blk + "attn_v_b.weight", {H, v, kvl}, v_b.data()});
  } else if (missing.ok()) {
    missing = status::error("gguf: tensor " + names::layer(l, names::kv_b_proj)
                            + " missing");
  }
  add(blk + "attn_output.weight", names::layer(l, names::o_proj));
  add(blk + "ffn_norm.weight", names::layer(l, names::post_norm));
  if (s.dense_layer(l)) {
    add(blk + "ffn_gate.weight", names::layer(l, names::dense_gate));
    add(blk + "ffn_up.weight", names::layer(l, names::dense_up));
    add(blk + "ffn_down.weight", names::layer(l, names::dense_down));
  } else if (s.shared_experts > 0) {
    add(blk + "ffn_gate_shexp.weight", names::layer(l, names::shared_w1));
    add(blk + "ffn_up_shexp.weight", names::layer(l, names::shared_w3));
    add(blk + "ffn_down_shexp.weight", names::layer(l, names::shared_w2));
  }
}

} // namespace

status export_gguf(const std::vector<store::named_tensor>& tensors,
                   const store::shard_meta& meta,
                   const std::filesystem::path& file, gguf_dtype dtype,
                   bool& dropped_biases) {
  auto i = [&](const char* k) {
    return meta.ints.count(k) ? meta.ints.at(k) : int64_t(0);
  };
  auto d = [&](const char* k, double fallback) {
    return meta.strings.count(k) ? std::atof(meta.strings.at(k).c_str())
                                 : fallback;
  };
  const auto shape = model::shape_of(meta);
  const bool qwen3 = shape.family == model_family::qwen3_moe;
  if (qwen3 && !shape.norm_topk_prob)
    return status::error("gguf: moe_config.norm_topk_prob false: llama.cpp's "
                         "qwen3moe renormalises its gates");
  // llama.cpp's "deepseek2" runs multi-head latent attention, shared
  // experts, dense layers and the sigmoid router; its rotation pairs
  // neighbours (NORM), which is DeepSeek's stored interleaved layout.
  const bool mla = shape.mla();
  if (mla && !shape.rope_interleave)
    return status::error("gguf: model.rope_interleave false: llama.cpp's "
                         "deepseek2 rotates interleaved pairs");
  if (!mla && shape.scoring != scoring_func::softmax)
    return status::error("gguf: moe_config.scoring_func sigmoid: llama.cpp's "
                         + std::string(qwen3 ? "qwen3moe" : "llama")
                         + " routes by softmax (deepseek2, for a model with "
                           "multi-head latent attention, does not)");
  if (!mla && (shape.shared_experts > 0 || shape.dense_layers > 0))
    return status::error("gguf: moe_config.n_shared_experts and "
                         "first_k_dense_replace: llama.cpp's "
                         + std::string(qwen3 ? "qwen3moe" : "llama")
                         + " has no shared experts or dense layers");
  // llama.cpp's architecture: its "llama" runs Mixtral; "qwen3moe" rotates
  // as Hugging Face does (NEOX: pairs a half head apart), so Q and K keep
  // their rows there.
  const std::string arch = mla ? "deepseek2" : qwen3 ? "qwen3moe" : "llama";
  const int64_t vocab = i("vocab_size"), D = i("hidden_size");
  const int64_t F = i("intermediate_size"), L = i("num_hidden_layers");
  const int64_t hq = i("num_attention_heads"), hkv = i("num_key_value_heads");
  const int64_t E = i("num_experts"), hd = shape.head_dim;
  if (vocab <= 0 || D <= 0 || F <= 0 || L <= 0 || hq <= 0 || hkv <= 0 || E <= 0)
    return status::error("gguf: the checkpoint does not describe its model");
  std::map<std::string, const store::named_tensor*> by_name;
  for (const auto& t : tensors)
    by_name[t.name] = &t;
  auto get = [&](const std::string& name) -> const store::named_tensor* {
    auto it = by_name.find(name);
    return it == by_name.end() ? nullptr : it->second;
  };

  std::vector<std::vector<float>> owned; // permuted and stacked tensors
  owned.reserve(2 * L + 3 * L);          // deepseek2: 2 + 3 a layer too
  std::vector<store::gguf_tensor> out;
  status missing;
  auto add = [&](const std::string& gguf, const std::string& hf) {
    const auto* t = get(hf);
    if (!t) {
      if (missing.ok())
        missing = status::error("gguf: tensor " + hf + " missing");
      return;
    }
    out.push_back({gguf, t->shape, t->data.data()});
  };
  // A layer's experts as llama.cpp's stacked [experts, out, in] tensors.
  auto stack_experts = [&](const std::string& blk, int64_t l) {
    for (auto [gguf, w] :
         {std::pair{"ffn_gate_exps", "w1"}, std::pair{"ffn_down_exps", "w2"},
          std::pair{"ffn_up_exps", "w3"}}) {
      auto& stacked = owned.emplace_back();
      std::vector<int64_t> shape;
      for (int64_t e = 0; e < E; ++e) {
        const auto* t = get(names::expert(l, e, w));
        if (!t) {
          missing = status::error("gguf: expert " + std::to_string(e) + " " + w
                                  + " of layer " + std::to_string(l)
                                  + " missing");
          break;
        }
        shape = {E, t->shape[0], t->shape[1]};
        stacked.insert(stacked.end(), t->data.begin(), t->data.end());
      }
      out.push_back({blk + gguf + ".weight", shape, stacked.data(),
                     dtype == gguf_dtype::q8_0});
    }
  };
  add("token_embd.weight", names::embed);
  for (int64_t l = 0; l < L; ++l) {
    const auto blk = "blk." + std::to_string(l) + ".";
    add(blk + "attn_norm.weight", names::layer(l, names::input_norm));
    if (mla) {
      deepseek2_layer(shape, l, blk, get, add, owned, out, missing);
      if (shape.dense_layer(l))
        continue;
      add(blk + "ffn_gate_inp.weight", names::layer(l, names::router));
      if (get(names::layer(l, names::router_bias)))
        add(blk + "exp_probs_b.bias", names::layer(l, names::router_bias));
      stack_experts(blk, l);
      continue;
    }
    for (auto [which, proj, heads] : {std::tuple{"q", names::q_proj, hq},
                                      std::tuple{"k", names::k_proj, hkv}}) {
      const auto* t = get(names::layer(l, proj));
      if (!t) {
        missing = status::error("gguf: tensor " + names::layer(l, proj)
                                + " missing");
        continue;
      }
      if (qwen3) {
        out.push_back(
          {blk + "attn_" + which + ".weight", t->shape, t->data.data()});
        continue;
      }
      owned.push_back(rope_rows_for_gguf(t->data, heads, hd, D));
      out.push_back(
        {blk + "attn_" + which + ".weight", t->shape, owned.back().data()});
    }
    if (qwen3) {
      add(blk + "attn_q_norm.weight", names::layer(l, names::q_norm));
      add(blk + "attn_k_norm.weight", names::layer(l, names::k_norm));
    }
    add(blk + "attn_v.weight", names::layer(l, names::v_proj));
    add(blk + "attn_output.weight", names::layer(l, names::o_proj));
    add(blk + "ffn_norm.weight", names::layer(l, names::post_norm));
    add(blk + "ffn_gate_inp.weight", names::layer(l, names::router));
    if (const auto* b = get(names::layer(l, names::router_bias)))
      for (float v : b->data)
        dropped_biases = dropped_biases || v != 0.0f;
    stack_experts(blk, l);
  }
  add("output_norm.weight", "model.norm.weight");
  add("output.weight", "lm_head.weight");
  if (!missing.ok())
    return missing;

  std::vector<std::string> tokens;
  std::vector<float> scores;
  std::vector<int32_t> types;
  for (int64_t t = 0; t < vocab; ++t) {
    char name[16];
    if (t < 256)
      std::snprintf(name, sizeof name, "<0x%02X>", static_cast<int>(t));
    else
      std::snprintf(name, sizeof name, "<|%d|>", static_cast<int>(t));
    tokens.push_back(name);
    scores.push_back(0.0f);
    types.push_back(t < 256 ? 6 : 1); // byte, normal
  }
  std::vector<std::pair<std::string, store::gguf_value>> kv = {
    {"general.architecture", arch},
    {"general.name", std::string("tutti step ") + std::to_string(meta.step)},
    // llama.cpp's LLAMA_FTYPE_ALL_F32, MOSTLY_F16, MOSTLY_Q8_0.
    {"general.file_type", uint32_t(dtype == gguf_dtype::f16    ? 1
                                   : dtype == gguf_dtype::q8_0 ? 7
                                                               : 0)},
    {arch + ".context_length", uint32_t(i("max_seq_len"))},
    {arch + ".embedding_length", uint32_t(D)},
    {arch + ".block_count", uint32_t(L)},
    {arch + ".feed_forward_length", uint32_t(F)},
    {arch + ".rope.dimension_count", uint32_t(hd)},
    {arch + ".attention.head_count", uint32_t(hq)},
    {arch + ".attention.head_count_kv", uint32_t(hkv)},
    {arch + ".attention.layer_norm_rms_epsilon",
     float(d("rms_norm_eps", 1e-5))},
    {arch + ".rope.freq_base", float(d("rope_theta", 10000.0))},
    {arch + ".expert_count", uint32_t(E)},
    {arch + ".expert_used_count", uint32_t(i("router_top_k"))},
    {arch + ".vocab_size", uint32_t(vocab)},
    {"tokenizer.ggml.model", std::string("llama")},
    {"tokenizer.ggml.tokens", tokens},
    {"tokenizer.ggml.scores", scores},
    {"tokenizer.ggml.token_type", types},
    {"tokenizer.ggml.add_bos_token", false},
    {"tokenizer.ggml.add_eos_token", false},
  };
  if (qwen3) // heads of their own size, experts of theirs
    kv.insert(kv.begin() + 10,
              {{arch + ".attention.key_length", uint32_t(hd)},
               {arch + ".attention.value_length", uint32_t(hd)},
               {arch + ".expert_feed_forward_length", uint32_t(F)}});
  if (mla) {
    // One latent "head" for keys and values (MQA), the MLA sizes, the
    // experts' and the router's keys.
    auto set = [&](const std::string& key, store::gguf_value value) {
      for (auto& [k, v] : kv)
        if (k == arch + "." + key) {
          v = std::move(value);
          return;
        }
      kv.emplace_back(arch + "." + key, std::move(value));
    };
    const auto kvl = uint32_t(shape.kv_lora_rank);
    const auto rope = uint32_t(shape.qk_rope_head_dim);
    set("attention.head_count_kv", uint32_t(1));
    set("rope.dimension_count", rope);
    set("feed_forward_length",
        uint32_t(shape.dense_layers > 0 ? shape.dense_intermediate : F));
    set("expert_feed_forward_length", uint32_t(F));
    set("attention.key_length", kvl + rope);
    set("attention.value_length", kvl);
    set("attention.key_length_mla", uint32_t(shape.qk_head_dim()));
    set("attention.value_length_mla", uint32_t(shape.v_head_dim));
    if (shape.q_lora_rank > 0)
      set("attention.q_lora_rank", uint32_t(shape.q_lora_rank));
    set("attention.kv_lora_rank", kvl);
    set("leading_dense_block_count", uint32_t(shape.dense_layers));
    set("expert_shared_count", uint32_t(shape.shared_experts));
    set("expert_weights_scale", float(shape.routed_scaling_factor));
    set("expert_weights_norm", shape.norm_topk_prob);
    // llama.cpp's LLAMA_EXPERT_GATING_FUNC_TYPE_SOFTMAX, _SIGMOID.
    set("expert_gating_func",
        uint32_t(shape.scoring == scoring_func::sigmoid ? 2 : 1));
    set("expert_group_count", uint32_t(shape.n_group));
    set("expert_group_used_count", uint32_t(shape.topk_group));
  }
  return store::write_gguf(file, kv, out, dtype == gguf_dtype::f16);
}

} // namespace tutti::cli
