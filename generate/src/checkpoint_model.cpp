#include "tutti/generate/checkpoint_model.hpp"

#include <algorithm>
#include <cstdlib>

#include "tutti/kernels/device_memory.hpp"
#include "tutti/kernels/ops.hpp"
#include "tutti/store/checkpoint_files.hpp"
#include "tutti/store/expert_blocks.hpp"

namespace tutti::generate {

namespace k = tutti::kernels;
namespace fs = std::filesystem;

namespace {

constexpr std::string_view experts_infix = ".block_sparse_moe.experts.";

// "model.layers.3.block_sparse_moe.experts.w1" -> 3
std::int64_t layer_of(const std::string& name) {
  const std::string prefix = "model.layers.";
  return std::strtoll(name.c_str() + prefix.size(), nullptr, 10);
}

double number(const store::shard_meta& m, const char* key, double fallback) {
  auto i = m.strings.find(key);
  return i == m.strings.end() ? fallback
                              : std::strtod(i->second.c_str(), nullptr);
}

} // namespace

expected<fs::path> latest_checkpoint(const fs::path& run_dir) {
  const auto root = run_dir / "checkpoints";
  std::error_code ec;
  std::vector<fs::path> found;
  for (auto it = fs::directory_iterator(root, ec);
       !ec && it != fs::directory_iterator(); it.increment(ec))
    if (it->path().filename().string().rfind("step-", 0) == 0
        && fs::exists(it->path() / "MANIFEST"))
      found.push_back(it->path());
  if (found.empty())
    return status::error(root.string() + ": no committed checkpoint (is "
                         + run_dir.string() + " a run directory?)");
  std::sort(found.begin(), found.end()); // step-%08d sorts by step
  return found.back();
}

expected<checkpoint_model> checkpoint_model::load(const fs::path& dir) {
  TUTTI_RETURN_IF_ERROR(store::verify_checkpoint(dir));
  auto manifest = store::read_manifest(dir);
  if (!manifest.ok())
    return manifest.error();
  checkpoint_model m;
  bool have_shape = false;
  struct expert_part {
    std::int64_t layer, count;
    std::vector<std::int64_t> experts; // of each row
    std::string which;
    std::vector<float> data;
  };
  std::vector<expert_part> parts;
  for (const auto& entry : manifest.value().shards) {
    auto shard = store::read_shard_file(dir / entry.file);
    if (!shard.ok())
      return shard.error();
    auto& meta = shard.value().meta;
    if (meta.rank == 0) {
      auto i = [&](const char* key) {
        return meta.ints.count(key) ? meta.ints.at(key) : 0;
      };
      auto& s = m.shape_;
      s.vocab_size = i("vocab_size");
      s.hidden_size = i("hidden_size");
      s.intermediate_size = i("intermediate_size");
      s.num_hidden_layers = i("num_hidden_layers");
      s.num_attention_heads = i("num_attention_heads");
      s.num_key_value_heads = i("num_key_value_heads");
      s.max_seq_len = i("max_seq_len");
      s.num_experts = i("num_experts");
      s.router_top_k = i("router_top_k");
      s.rope_theta = number(meta, "rope_theta", 10000);
      s.rms_norm_eps = number(meta, "rms_norm_eps", 1e-5);
      s.router_temperature = number(meta, "router_temperature", 1);
      m.step_ = meta.step;
      have_shape = true;
    }
    auto held = store::block_experts_of(meta);
    if (!held.ok())
      return held.error();
    for (auto& t : shard.value().tensors) {
      if (t.name.rfind("adam_", 0) == 0)
        continue;
      if (t.name == "router_bias") {
        m.router_bias_ = std::move(t.data);
        continue;
      }
      if (t.name.find(experts_infix) != std::string::npos) {
        const auto layer = layer_of(t.name);
        std::vector<std::int64_t> experts;
        for (std::int64_t j = 0; j < t.shape.at(0); ++j)
          experts.push_back(held.value().at(layer, j));
        parts.push_back({layer, t.shape.at(0), std::move(experts),
                         t.name.substr(t.name.rfind('.') + 1),
                         std::move(t.data)});
        continue;
      }
      m.dense_[t.name] = std::move(t.data);
    }
  }
  const auto& s = m.shape_;
  if (!have_shape || s.vocab_size <= 0 || s.num_experts <= 0
      || s.num_attention_heads <= 0 || s.num_key_value_heads <= 0)
    return status::error(dir.string()
                         + ": rank 0's shard does not describe the model");
  const std::int64_t L = s.num_hidden_layers, E = s.num_experts,
                     F = s.intermediate_size, D = s.hidden_size;
  m.w1_.assign(L, std::vector<float>(E * F * D));
  m.w3_.assign(L, std::vector<float>(E * F * D));
  m.w2_.assign(L, std::vector<float>(E * D * F));
  std::vector<std::int64_t> filled(L * 3, 0);
  for (auto& p : parts) {
    const bool fits = std::all_of(p.experts.begin(), p.experts.end(),
                                  [&](std::int64_t e) { return e < E; });
    if (p.layer < 0 || p.layer >= L || !fits
        || static_cast<std::int64_t>(p.data.size()) != p.count * F * D)
      return status::error(dir.string() + ": expert block of layer "
                           + std::to_string(p.layer) + " does not fit "
                           + std::to_string(E) + " experts of "
                           + std::to_string(F) + " x " + std::to_string(D));
    auto& target = p.which == "w1" ? m.w1_ : p.which == "w3" ? m.w3_ : m.w2_;
    for (std::int64_t j = 0; j < p.count; ++j)
      std::copy_n(p.data.begin() + j * F * D, F * D,
                  target[p.layer].begin() + p.experts[j] * F * D);
    filled[p.layer * 3
           + (p.which == "w1"   ? 0
              : p.which == "w3" ? 1
                                : 2)] += p.count;
  }
  for (std::int64_t l = 0; l < L * 3; ++l)
    if (filled[l] != E)
      return status::error(dir.string() + ": layer " + std::to_string(l / 3)
                           + " has " + std::to_string(filled[l]) + " of "
                           + std::to_string(E) + " experts");
  if (m.router_bias_.size() != static_cast<std::size_t>(L * E))
    m.router_bias_.assign(L * E, 0.0f);
  for (const char* name :
       {"model.embed_tokens.weight", "model.norm.weight", "lm_head.weight"})
    if (!m.dense_.count(name))
      return status::error(dir.string() + ": no tensor " + name);
  return m;
}

const std::vector<float>& checkpoint_model::tensor(
  const std::string& name) const {
  return dense_.at(name);
}

expected<std::vector<float>> checkpoint_model::next_logits(
  std::span<const std::int32_t> context) const {
  const auto& m = shape_;
  if (context.empty())
    return status::error(std::string("next_logits: empty context"));
  if (static_cast<std::int64_t>(context.size()) > m.max_seq_len)
    context = context.subspan(context.size() - m.max_seq_len);
  for (auto id : context)
    if (id < 0 || id >= m.vocab_size)
      return status::error("token " + std::to_string(id)
                           + " is outside the model's vocabulary of "
                           + std::to_string(m.vocab_size));
  const auto st = k::cpu_stream();
  const std::int64_t n = static_cast<std::int64_t>(context.size());
  const std::int64_t d = m.hidden_size, hq = m.num_attention_heads,
                     hkv = m.num_key_value_heads, hd = d / hq,
                     E = m.num_experts, K = m.router_top_k,
                     F = m.intermediate_size;
  const float eps = static_cast<float>(m.rms_norm_eps);
  auto layer = [](std::int64_t l, const char* suffix) {
    return "model.layers." + std::to_string(l) + "." + suffix;
  };
  std::vector<float> x(n * d), xn(n * d), rstd(n), q(n * hq * hd),
    kk(n * hkv * hd), v(n * hkv * hd), attn(n * hq * hd), probs(hq * n * n),
    mid(n * d), router(n * E), rprobs(n * E), gate(n * K), a(F), b(F), h(F),
    y(d);
  std::vector<std::int32_t> topk(n * K);
  k::embedding_forward(st, context.data(),
                       tensor("model.embed_tokens.weight").data(), x.data(), n,
                       d);
  for (std::int64_t l = 0; l < m.num_hidden_layers; ++l) {
    k::rmsnorm_forward(st, x.data(),
                       tensor(layer(l, "input_layernorm.weight")).data(),
                       xn.data(), rstd.data(), n, d, eps);
    k::linear_forward(st, xn.data(),
                      tensor(layer(l, "self_attn.q_proj.weight")).data(),
                      q.data(), n, d, hq * hd);
    k::linear_forward(st, xn.data(),
                      tensor(layer(l, "self_attn.k_proj.weight")).data(),
                      kk.data(), n, d, hkv * hd);
    k::linear_forward(st, xn.data(),
                      tensor(layer(l, "self_attn.v_proj.weight")).data(),
                      v.data(), n, d, hkv * hd);
    k::rope_forward(st, q.data(), 1, n, hq, hd, m.rope_theta);
    k::rope_forward(st, kk.data(), 1, n, hkv, hd, m.rope_theta);
    k::attention_forward(st, q.data(), kk.data(), v.data(), attn.data(),
                         probs.data(), 1, n, hq, hkv, hd);
    k::linear_forward(st, attn.data(),
                      tensor(layer(l, "self_attn.o_proj.weight")).data(),
                      mid.data(), n, hq * hd, d);
    k::axpy(st, 1.0f, x.data(), mid.data(), n * d);

    k::rmsnorm_forward(
      st, mid.data(),
      tensor(layer(l, "post_attention_layernorm.weight")).data(), xn.data(),
      rstd.data(), n, d, eps);
    k::linear_forward(st, xn.data(),
                      tensor(layer(l, "block_sparse_moe.gate.weight")).data(),
                      router.data(), n, d, E);
    k::router_topk_forward(st, router.data(), router_bias_.data() + l * E,
                           topk.data(), gate.data(), rprobs.data(), n, E, K,
                           static_cast<float>(m.router_temperature));
    x = mid; // the residual; each token's experts add to it
    for (std::int64_t t = 0; t < n; ++t)
      for (std::int64_t j = 0; j < K; ++j) {
        const std::int64_t e = topk[t * K + j];
        const float* row = xn.data() + t * d;
        k::linear_forward(st, row, w1_[l].data() + e * F * d, a.data(), 1, d,
                          F);
        k::linear_forward(st, row, w3_[l].data() + e * F * d, b.data(), 1, d,
                          F);
        k::swiglu_forward(st, a.data(), b.data(), h.data(), F);
        k::linear_forward(st, h.data(), w2_[l].data() + e * d * F, y.data(), 1,
                          F, d);
        k::axpy(st, gate[t * K + j], y.data(), x.data() + t * d, d);
      }
  }
  // Only the last position's logits are needed.
  k::rmsnorm_forward(st, x.data() + (n - 1) * d,
                     tensor("model.norm.weight").data(), xn.data(), rstd.data(),
                     1, d, eps);
  std::vector<float> logits(m.vocab_size);
  k::linear_forward(st, xn.data(), tensor("lm_head.weight").data(),
                    logits.data(), 1, d, m.vocab_size);
  k::wait(st);
  return logits;
}

} // namespace tutti::generate
