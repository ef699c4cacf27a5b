// A model for serving: the weights the model loader reads (Hugging Face /
// `tutti export` directories, tutti checkpoints; model/weights.hpp) laid
// out and packed for the serving forward.

#include <cmath>
#include <fstream>
#include <tuple>
#include <sstream>

#include <nlohmann/json.hpp>

#include "tutti/model/family.hpp"
#include "tutti/model/tensor_names.hpp"
#include "model_parts.hpp"
#include "tutti/serve/model.hpp"
#include "tutti/tokenizer/tokenizer.hpp"

namespace tutti::serve {

namespace fs = std::filesystem;
namespace names = model::names;

namespace {

std::string shape_text(const std::vector<int64_t>& s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i)
    out += (i ? "," : "") + std::to_string(s[i]);
  return out + "]";
}

// Moves tensor `name` out of `t` after checking its shape; errors name it
// as the family's checkpoints do.
expected<std::vector<float>> take(tensor_map& t, const shape_map& shapes,
                                  const std::string& name,
                                  const std::vector<int64_t>& want,
                                  const std::string& source,
                                  model_family family) {
  auto it = t.find(name);
  const auto shown = model::hf_tensor_name(family, name);
  if (it == t.end())
    return status::error(source + ": tensor " + shown + " missing");
  if (shapes.at(name) != want)
    return status::error(source + ": tensor " + shown + " has shape "
                         + shape_text(shapes.at(name)) + ", expected "
                         + shape_text(want));
  auto v = std::move(it->second);
  t.erase(it);
  return v;
}

// A special token in tokenizer_config.json: its text, or an object with
// its "content" (AddedToken), or null.
expected<std::string> special_token(const nlohmann::json& j, const char* key,
                                    const std::string& file) {
  if (!j.contains(key) || j[key].is_null())
    return std::string();
  const auto& v = j[key];
  if (v.is_string())
    return v.get<std::string>();
  if (v.is_object() && v.contains("content") && v["content"].is_string())
    return v["content"].get<std::string>();
  return status::error(file + ": " + key
                       + " must be a string or an object with a content "
                         "string");
}

// tokenizer_config.json's chat_template (a string, or Hugging Face's list
// of named templates: the one named "default") and special tokens.
status load_chat_template(const fs::path& file, served_model& m) {
  std::ifstream in(file);
  std::stringstream text;
  text << in.rdbuf();
  const auto j = nlohmann::json::parse(text.str(), nullptr, false);
  if (!in || j.is_discarded() || !j.is_object())
    return status::error(file.string() + ": not a JSON object");
  if (j.contains("chat_template") && !j["chat_template"].is_null()) {
    const auto& t = j["chat_template"];
    if (t.is_string()) {
      m.chat_template = t.get<std::string>();
    } else if (t.is_array()) {
      for (const auto& named : t)
        if (named.is_object() && named.value("name", "") == "default"
            && named.contains("template") && named["template"].is_string())
          m.chat_template = named["template"].get<std::string>();
      if (m.chat_template.empty())
        return status::error(file.string()
                             + ": chat_template lists no template named "
                               "'default'");
    } else {
      return status::error(file.string()
                           + ": chat_template must be a string or a list");
    }
  }
  auto bos = special_token(j, "bos_token", file.string());
  if (!bos)
    return bos.error();
  auto eos = special_token(j, "eos_token", file.string());
  if (!eos)
    return eos.error();
  m.bos_token = bos.value();
  m.eos_token = eos.value();
  return {};
}

// Whether `t` holds int8 codes: whole numbers in [-128, 127].
bool are_codes(const std::vector<float>& t) {
  for (float v : t)
    if (!(v >= -128.0f && v <= 127.0f) || v != std::nearbyint(v))
      return false;
  return true;
}

// The experts of `w` packed: float, or int8 with their scales (the
// row-major copies then go: only the packed ones serve).
void pack_experts(layer_weights& w, const model_shape& s, bool bf16 = false) {
  const int64_t D = s.hidden, F = s.intermediate, E = s.experts;
  const bool int8 = !w.w1_scale.empty();
  w.w13_t.assign(E, {});
  w.w2_t.assign(E, {});
  for (int64_t e = 0; e < E; ++e)
    pack_expert(w, e, s,
                {w.w1.data() + e * F * D, w.w3.data() + e * F * D,
                 w.w2.data() + e * D * F,
                 int8 ? w.w1_scale.data() + e * F : nullptr,
                 int8 ? w.w3_scale.data() + e * F : nullptr,
                 int8 ? w.w2_scale.data() + e * D : nullptr, nullptr,
                 bf16 && !int8});
  if (int8 || bf16)
    for (auto* v : {&w.w1, &w.w3, &w.w2, &w.w1_scale, &w.w3_scale,
                    &w.w2_scale})
      std::vector<float>().swap(*v);
}

// Multi-head latent attention's projections packed, and kv_b_proj's key
// half transposed per head for the absorbed decode.
void pack_mla(layer_weights& w, const model_shape& s) {
  const int64_t D = s.hidden, H = s.q_heads, qk = s.qk_head_dim();
  const int64_t ql = s.q_lora_rank, kvl = s.kv_lora_rank;
  const int64_t nope = s.qk_nope_head_dim, per = nope + s.v_head_dim;
  if (ql > 0) {
    w.q_a_t = kernels::pack_matrix(w.q_a.data(), ql, D);
    w.q_b_t = kernels::pack_matrix(w.q_b.data(), H * qk, ql);
  } else {
    w.q_t = kernels::pack_matrix(w.q.data(), H * qk, D);
  }
  w.kv_a_t = kernels::pack_matrix(w.kv_a.data(), kvl + s.qk_rope_head_dim, D);
  w.o_t = kernels::pack_matrix(w.o.data(), D, H * s.v_head_dim);
  w.kv_b_key_t.assign(H * kvl * nope, 0.0f);
  for (int64_t h = 0; h < H; ++h)
    for (int64_t i = 0; i < nope; ++i)
      for (int64_t c = 0; c < kvl; ++c)
        w.kv_b_key_t[(h * kvl + c) * nope + i] =
          w.kv_b[(h * per + i) * kvl + c];
}

} // namespace

void pack_expert(layer_weights& w, int64_t e, const model_shape& s,
                 const expert_matrices& x) {
  const int64_t D = s.hidden, F = s.intermediate;
  std::vector<float> stacked;
  if (!x.w13) {
    stacked.resize(2 * F * D);
    std::copy_n(x.w1, F * D, stacked.data());
    std::copy_n(x.w3, F * D, stacked.data() + F * D);
  }
  const float* w13 = x.w13 ? x.w13 : stacked.data();
  if (!x.w1_scale) {
    const auto pack = x.bf16 ? kernels::pack_matrix_bf16 : kernels::pack_matrix;
    w.w13_t[e] = pack(w13, 2 * F, D);
    w.w2_t[e] = pack(x.w2, D, F);
    return;
  }
  std::vector<float> s13(2 * F);
  std::copy_n(x.w1_scale, F, s13.data());
  std::copy_n(x.w3_scale, F, s13.data() + F);
  w.w13_t[e] = kernels::pack_matrix_int8(w13, s13.data(), 2 * F, D);
  w.w2_t[e] = kernels::pack_matrix_int8(x.w2, x.w2_scale, D, F);
}

status take_dense(served_model& m, tensor_map& tensors, const shape_map& shapes,
                  const std::string& source) {
  const auto& shape = m.shape;
  const int64_t D = shape.hidden, E = shape.experts;
  const int64_t Q = shape.q_heads * shape.head_dim;
  const int64_t KV = shape.kv_heads * shape.head_dim;
  status bad;
  auto get = [&](const std::string& name, std::vector<int64_t> want,
                 std::vector<float>& out) {
    if (!bad.ok())
      return;
    auto v = take(tensors, shapes, name, want, source, shape.family);
    if (!v)
      bad = v.error();
    else
      out = std::move(v.value());
  };
  // Multi-head latent attention's tensors of layer l.
  auto get_mla = [&](int64_t l, layer_weights& w) {
    const int64_t H = shape.q_heads, qk = shape.qk_head_dim();
    const int64_t ql = shape.q_lora_rank, kvl = shape.kv_lora_rank;
    if (ql > 0) {
      get(names::layer(l, names::q_a_proj), {ql, D}, w.q_a);
      get(names::layer(l, names::q_a_norm), {ql}, w.q_a_norm);
      get(names::layer(l, names::q_b_proj), {H * qk, ql}, w.q_b);
    } else {
      get(names::layer(l, names::q_proj), {H * qk, D}, w.q);
    }
    get(names::layer(l, names::kv_a_proj), {kvl + shape.qk_rope_head_dim, D},
        w.kv_a);
    get(names::layer(l, names::kv_a_norm), {kvl}, w.kv_a_norm);
    get(names::layer(l, names::kv_b_proj),
        {H * (shape.qk_nope_head_dim + shape.v_head_dim), kvl}, w.kv_b);
    get(names::layer(l, names::o_proj), {D, H * shape.v_head_dim}, w.o);
  };
  get(names::embed, {shape.vocab, D}, m.embed);
  get(names::final_norm, {D}, m.final_norm);
  get(names::lm_head, {shape.vocab, D}, m.lm_head);
  m.layers.resize(shape.layers);
  for (int64_t l = 0; l < shape.layers && bad.ok(); ++l) {
    auto& w = m.layers[l];
    get(names::layer(l, names::input_norm), {D}, w.input_norm);
    if (shape.mla()) {
      get_mla(l, w);
    } else {
      get(names::layer(l, names::q_proj), {Q, D}, w.q);
      get(names::layer(l, names::k_proj), {KV, D}, w.k);
      get(names::layer(l, names::v_proj), {KV, D}, w.v);
      if (shape.qk_norm) {
        get(names::layer(l, names::q_norm), {shape.head_dim}, w.q_norm);
        get(names::layer(l, names::k_norm), {shape.head_dim}, w.k_norm);
      }
      get(names::layer(l, names::o_proj), {D, Q}, w.o);
    }
    get(names::layer(l, names::post_norm), {D}, w.post_norm);
    const bool dense = shape.dense_layer(l);
    if (const int64_t f = dense ? shape.dense_intermediate
                                : shape.shared_intermediate();
        f > 0) {
      get(names::layer(l, dense ? names::dense_gate : names::shared_w1), {f, D},
          w.mlp_w1);
      get(names::layer(l, dense ? names::dense_up : names::shared_w3), {f, D},
          w.mlp_w3);
      get(names::layer(l, dense ? names::dense_down : names::shared_w2), {D, f},
          w.mlp_w2);
    }
    if (dense)
      continue; // no router, no experts
    get(names::layer(l, names::router), {E, D}, w.router);
    const auto bias = names::layer(l, names::router_bias);
    if (tensors.count(bias))
      get(bias, {E}, w.router_bias);
    else
      w.router_bias.assign(E, 0.0f);
  }
  return bad;
}

void pack_dense(served_model& m) {
  const auto& s = m.shape;
  const int64_t D = s.hidden, E = s.experts;
  const int64_t Q = s.q_heads * s.head_dim, KV = s.kv_heads * s.head_dim;
  m.lm_head_t = kernels::pack_matrix(m.lm_head.data(), s.vocab, D);
  for (auto& w : m.layers) {
    if (const int64_t f = static_cast<int64_t>(w.mlp_w1.size()) / D; f > 0) {
      std::vector<float> w13(w.mlp_w1);
      w13.insert(w13.end(), w.mlp_w3.begin(), w.mlp_w3.end());
      w.mlp_w13_t = kernels::pack_matrix(w13.data(), 2 * f, D);
      w.mlp_w2_t = kernels::pack_matrix(w.mlp_w2.data(), D, f);
    }
    if (!w.router.empty()) // a dense layer has none
      w.router_t = kernels::pack_matrix(w.router.data(), E, D);
    if (s.mla()) {
      pack_mla(w, s);
      continue;
    }
    w.q_t = kernels::pack_matrix(w.q.data(), Q, D);
    w.k_t = kernels::pack_matrix(w.k.data(), KV, D);
    w.v_t = kernels::pack_matrix(w.v.data(), KV, D);
    w.o_t = kernels::pack_matrix(w.o.data(), D, Q);
  }
}

expected<served_model> model_from_tensors(const model_shape& shape,
                                          tensor_map tensors,
                                          const shape_map& shapes,
                                          const std::string& source) {
  served_model m;
  m.shape = shape;
  m.name = fs::path(source).filename().string();
  if (m.name.empty())
    m.name = fs::path(source).parent_path().filename().string();
  const int64_t F = shape.intermediate, E = shape.experts;
  const int64_t D = shape.hidden;
  status bad;
  auto get = [&](const std::string& name, std::vector<int64_t> want,
                 std::vector<float>& out) {
    if (!bad.ok())
      return;
    auto v = take(tensors, shapes, name, want, source, shape.family);
    if (!v)
      bad = v.error();
    else
      out = std::move(v.value());
  };
  // int8 experts (`tutti export --dtype int8`): a scale beside the first
  // (of the first MoE layer).
  const bool int8 =
    tensors.count(names::expert(shape.dense_layers, 0, "w1") + "_scale") > 0;
  TUTTI_RETURN_IF_ERROR(take_dense(m, tensors, shapes, source));
  for (int64_t l = shape.dense_layers; l < shape.layers && bad.ok(); ++l) {
    auto& w = m.layers[l];
    struct expert_matrix {
      const char* which;
      int64_t rows, cols;
      std::vector<float>&weights, &scales;
    };
    for (const expert_matrix& x :
         {expert_matrix{"w1", F, D, w.w1, w.w1_scale},
          expert_matrix{"w3", F, D, w.w3, w.w3_scale},
          expert_matrix{"w2", D, F, w.w2, w.w2_scale}}) {
      x.weights.resize(E * x.rows * x.cols);
      if (int8)
        x.scales.resize(E * x.rows);
      for (int64_t e = 0; e < E && bad.ok(); ++e) {
        const auto name = names::expert(l, e, x.which);
        std::vector<float> t;
        get(name, {x.rows, x.cols}, t);
        if (int8 && bad.ok() && !are_codes(t))
          bad = status::error(source + ": tensor "
                              + model::hf_tensor_name(shape.family, name)
                              + " is not int8 codes, as the other experts "
                                "(with _scale tensors) are");
        std::copy(t.begin(), t.end(), x.weights.begin() + e * x.rows * x.cols);
        if (!int8 || !bad.ok())
          continue;
        const auto scale = name + "_scale";
        if (!tensors.count(scale)) {
          const auto shown = model::hf_tensor_name(shape.family, name);
          bad = status::error(source + ": tensor " + shown
                              + " is int8 but its scales " + shown
                              + "_scale are missing");
          break;
        }
        // compressed-tensors' [out, 1], or [out].
        get(scale,
            shapes.at(scale).size() == 1 ? std::vector<int64_t>{x.rows}
                                         : std::vector<int64_t>{x.rows, 1},
            t);
        std::copy(t.begin(), t.end(), x.scales.begin() + e * x.rows);
      }
    }
  }
  if (!bad.ok())
    return bad;
  if (!tensors.empty())
    return status::error(
      source + ": unexpected tensor "
      + model::hf_tensor_name(shape.family, tensors.begin()->first));
  m.expert_dtype = int8 ? weight_dtype::int8 : weight_dtype::fp32;
  pack_for_serving(m);
  return m;
}

void pack_for_serving(served_model& m) {
  pack_dense(m);
  for (auto& w : m.layers)
    if (!w.router.empty()) // a dense layer has no experts
      pack_experts(w, m.shape);
}

void quantize_experts(served_model& m, weight_dtype to) {
  if (m.expert_dtype != weight_dtype::fp32 || to == weight_dtype::fp32)
    return; // experts from an int8 checkpoint stay as they are
  const int64_t D = m.shape.hidden, F = m.shape.intermediate;
  const int64_t E = m.shape.experts;
  for (auto& w : m.layers) {
    if (w.router.empty())
      continue; // a dense layer: no experts
    if (to == weight_dtype::int8)
      for (auto [weights, scales, rows, cols] :
           {std::tuple{&w.w1, &w.w1_scale, F, D},
            std::tuple{&w.w3, &w.w3_scale, F, D},
            std::tuple{&w.w2, &w.w2_scale, D, F}}) {
        scales->resize(E * rows);
        // In place: each row is read whole before its codes are written.
        kernels::quantize_matrix_int8(weights->data(), E * rows, cols,
                                      weights->data(), scales->data());
      }
    pack_experts(w, m.shape, to == weight_dtype::bf16);
  }
  m.expert_dtype = to;
  m.quantized_at_load = true;
}

status use_int8_rows(served_model& m) {
  if (m.expert_dtype != weight_dtype::int8)
    return status::error(
      "serve.activation_dtype: int8 multiplies int8 experts, and this "
      "model's are " + std::string(to_string(m.expert_dtype))
      + " (set serve.weight_dtype: int8, or serve an int8 export)");
  for (auto& w : m.layers)
    for (auto* experts : {&w.w13_t, &w.w2_t})
      for (auto& p : *experts)
        p = kernels::with_int8_rows(std::move(p));
  m.int8_rows = true;
  return {};
}

namespace {

std::string kernel_of(const served_model& m) {
  switch (m.expert_dtype) {
    case weight_dtype::int8:
      return m.int8_rows ? kernels::int8_dot_gemm_kernel()
                         : kernels::int8_gemm_kernel();
    case weight_dtype::bf16: return kernels::bf16_gemm_kernel();
    case weight_dtype::fp32: break;
  }
  return {};
}

} // namespace

std::string expert_weights_text(const served_model& m) {
  std::string text = std::string("experts ") + to_string(m.expert_dtype);
  if (m.expert_dtype != weight_dtype::fp32)
    text += std::string(m.quantized_at_load ? " (quantized at load)"
                                            : " (from the checkpoint)")
            + (m.int8_rows ? ", rows int8" : "") + ", kernel " + kernel_of(m);
  return text + "; CPU: " + kernels::cpu_capabilities();
}

std::string expert_kernel_name(const served_model& m) {
  if (m.expert_dtype == weight_dtype::fp32)
    return "packed_fp32";
  const auto kernel = kernel_of(m);
  return std::string(m.int8_rows ? "w8a8" : to_string(m.expert_dtype)) + "_"
         + kernel.substr(0, kernel.find(' '));
}

expected<served_model> model_from_weights(model::model_weights weights,
                                          const std::string& source) {
  tensor_map tensors;
  shape_map shapes;
  for (auto& t : weights.tensors) {
    shapes[t.name] = t.shape;
    tensors[t.name] = std::move(t.data);
  }
  return model_from_tensors(weights.shape, std::move(tensors), shapes, source);
}

expected<served_model> load_model(const fs::path& dir) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec))
    return status::error(dir.string() + ": not a directory");
  auto weights = model::load_weights(dir);
  if (!weights)
    return weights.error();
  const auto skipped_mtp = weights.value().skipped_mtp_tensors;
  auto m = model_from_weights(std::move(weights.value()), dir.string());
  if (!m)
    return m;
  m.value().skipped_mtp_tensors = skipped_mtp;
  TUTTI_RETURN_IF_ERROR(load_beside_weights(dir, m.value()));
  return m;
}

status load_beside_weights(const fs::path& dir, served_model& m) {
  std::error_code ec;
  const auto config = dir / "tokenizer_config.json";
  if (fs::exists(config, ec))
    TUTTI_RETURN_IF_ERROR(load_chat_template(config, m));
  const auto file = dir / tokenizer::model_file_name;
  if (!fs::exists(file, ec))
    return {};
  auto tok = tokenizer::tokenizer::load(file);
  if (!tok)
    return status::error(file.string() + ": " + tok.message());
  if (tok.value().vocab_size() > static_cast<uint32_t>(m.shape.vocab))
    return status::error(file.string() + ": its vocabulary of "
                         + std::to_string(tok.value().vocab_size())
                         + " is larger than the model's "
                         + std::to_string(m.shape.vocab));
  m.text_tokenizer = std::make_shared<const tokenizer::tokenizer>(
    std::move(tok.value()));
  return {};
}

} // namespace tutti::serve
