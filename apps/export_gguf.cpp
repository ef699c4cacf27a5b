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
  if (shape.mla())
    return status::error("gguf: model.kv_lora_rank > 0: multi-head latent "
                         "attention is not exported to GGUF (export to "
                         "Hugging Face's format instead)");
  if (shape.scoring != scoring_func::softmax)
    return status::error("gguf: moe_config.scoring_func sigmoid: llama.cpp's "
                         + std::string(qwen3 ? "qwen3moe" : "llama")
                         + " routes by softmax");
  if (shape.shared_experts > 0 || shape.dense_layers > 0)
    return status::error("gguf: moe_config.n_shared_experts and "
                         "first_k_dense_replace: llama.cpp's "
                         + std::string(qwen3 ? "qwen3moe" : "llama")
                         + " has no shared experts or dense layers");
  // llama.cpp's architecture: its "llama" runs Mixtral; "qwen3moe" rotates
  // as Hugging Face does (NEOX: pairs a half head apart), so Q and K keep
  // their rows there.
  const std::string arch = qwen3 ? "qwen3moe" : "llama";
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
  owned.reserve(2 * L + 3 * L);
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
  add("token_embd.weight", names::embed);
  for (int64_t l = 0; l < L; ++l) {
    const auto blk = "blk." + std::to_string(l) + ".";
    add(blk + "attn_norm.weight", names::layer(l, names::input_norm));
    for (auto [which, proj, heads] : {std::tuple{"q", names::q_proj, hq},
                                      std::tuple{"k", names::k_proj, hkv}}) {
      const auto* t = get(names::layer(l, proj));
      if (!t) {
        missing = status::error("gguf: tensor " + names::layer(l, proj)
                                + " missing");
        continue;
      }
      if (qwen3) {
        out.push_back({blk + "attn_" + which + ".weight", t->shape,
                       t->data.data()});
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
  return store::write_gguf(file, kv, out, dtype == gguf_dtype::f16);
}

} // namespace tutti::cli
