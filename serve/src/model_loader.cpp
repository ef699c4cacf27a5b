// Loading a model for serving: Hugging Face / `tutti export` directories
// and tutti checkpoints, both mapped onto served_model.

#include <nlohmann/json.hpp>

#include <fstream>
#include <set>
#include <sstream>

#include "tutti/serve/model.hpp"
#include "tutti/store/checkpoint_files.hpp"
#include "tutti/store/expert_blocks.hpp"
#include "tutti/store/safetensors.hpp"
#include "tutti/tokenizer/tokenizer.hpp"

namespace tutti::serve {

namespace fs = std::filesystem;

namespace {

using tensor_map = std::map<std::string, std::vector<float>>;
using shape_map = std::map<std::string, std::vector<int64_t>>;

std::string layer_prefix(int64_t l) {
  return "model.layers." + std::to_string(l) + ".";
}

std::string shape_text(const std::vector<int64_t>& s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i)
    out += (i ? "," : "") + std::to_string(s[i]);
  return out + "]";
}

// Moves tensor `name` out of `t` after checking its shape.
expected<std::vector<float>> take(tensor_map& t, const shape_map& shapes,
                                  const std::string& name,
                                  const std::vector<int64_t>& want,
                                  const std::string& source) {
  auto it = t.find(name);
  if (it == t.end())
    return status::error(source + ": tensor " + name + " missing");
  if (shapes.at(name) != want)
    return status::error(source + ": tensor " + name + " has shape "
                         + shape_text(shapes.at(name)) + ", expected "
                         + shape_text(want));
  auto v = std::move(it->second);
  t.erase(it);
  return v;
}

expected<std::string> read_text(const fs::path& file) {
  std::ifstream in(file, std::ios::binary);
  if (!in)
    return status::error(file.string() + ": cannot be read");
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

// config.json of a Mixtral model. Required integers are named when missing.
expected<model_shape> shape_from_config_json(const fs::path& file) {
  auto text = read_text(file);
  if (!text)
    return text.error();
  auto j = nlohmann::json::parse(text.value(), nullptr, false);
  if (j.is_discarded() || !j.is_object())
    return status::error(file.string() + ": not a JSON object");
  model_shape s;
  status bad;
  auto integer = [&](const char* key, int64_t& out, bool required) {
    if (!bad.ok())
      return;
    if (!j.contains(key)) {
      if (required)
        bad = status::error(file.string() + ": key " + key + " missing");
      return;
    }
    if (!j[key].is_number_integer() || j[key].get<int64_t>() <= 0) {
      bad = status::error(file.string() + ": key " + key
                          + " must be a positive integer");
      return;
    }
    out = j[key].get<int64_t>();
  };
  auto number = [&](const char* key, double& out) {
    if (!bad.ok() || !j.contains(key))
      return;
    if (!j[key].is_number() || j[key].get<double>() <= 0) {
      bad = status::error(file.string() + ": key " + key
                          + " must be a positive number");
      return;
    }
    out = j[key].get<double>();
  };
  integer("vocab_size", s.vocab, true);
  integer("hidden_size", s.hidden, true);
  integer("intermediate_size", s.intermediate, true);
  integer("num_hidden_layers", s.layers, true);
  integer("num_attention_heads", s.q_heads, true);
  integer("num_key_value_heads", s.kv_heads, true);
  integer("num_local_experts", s.experts, true);
  integer("num_experts_per_tok", s.top_k, true);
  integer("max_position_embeddings", s.max_positions, true);
  if (bad.ok() && s.q_heads > 0)
    s.head_dim = s.hidden / s.q_heads;
  integer("head_dim", s.head_dim, false);
  number("rope_theta", s.rope_theta);
  number("rms_norm_eps", s.rms_norm_eps);
  number("router_temperature", s.router_temperature);
  if (!bad.ok())
    return bad;
  if (auto c = check_shape(s); !c.ok())
    return status::error(file.string() + ": " + c.message());
  return s;
}

// The safetensors files of a Hugging Face directory: the index's shards, or
// model.safetensors.
expected<std::vector<fs::path>> weight_files(const fs::path& dir) {
  const auto index = dir / "model.safetensors.index.json";
  if (!fs::exists(index)) {
    if (!fs::exists(dir / "model.safetensors"))
      return status::error((dir / "model.safetensors").string()
                           + ": missing (and no model.safetensors.index.json)");
    return std::vector<fs::path>{dir / "model.safetensors"};
  }
  auto text = read_text(index);
  if (!text)
    return text.error();
  auto j = nlohmann::json::parse(text.value(), nullptr, false);
  if (j.is_discarded() || !j.contains("weight_map")
      || !j["weight_map"].is_object())
    return status::error(index.string() + ": no weight_map object");
  std::set<std::string> files;
  for (const auto& [name, file] : j["weight_map"].items()) {
    if (!file.is_string())
      return status::error(index.string() + ": weight_map." + name
                           + " is not a file name");
    const auto f = file.get<std::string>();
    if (f.empty() || f.find('/') != std::string::npos || f == "..")
      return status::error(index.string() + ": weight_map." + name
                           + " names a file outside the directory");
    files.insert(f);
  }
  std::vector<fs::path> out;
  for (const auto& f : files)
    out.push_back(dir / f);
  return out;
}

expected<served_model> load_hf_dir(const fs::path& dir) {
  auto shape = shape_from_config_json(dir / "config.json");
  if (!shape)
    return shape.error();
  auto files = weight_files(dir);
  if (!files)
    return files.error();
  tensor_map tensors;
  shape_map shapes;
  for (const auto& file : files.value()) {
    auto read = store::read_safetensors_as_f32(file);
    if (!read)
      return read.error();
    for (auto& t : read.value()) {
      if (tensors.count(t.name))
        return status::error(file.string() + ": tensor " + t.name
                             + " appears twice");
      shapes[t.name] = t.shape;
      tensors[t.name] = std::move(t.data);
    }
  }
  return model_from_tensors(shape.value(), std::move(tensors), shapes,
                            dir.string());
}

// A tutti checkpoint: the same renaming as `tutti export` (router_bias per
// layer, expert blocks split per expert by global index).
expected<served_model> load_checkpoint_dir(const fs::path& dir) {
  if (auto v = store::verify_checkpoint(dir); !v.ok())
    return v;
  auto manifest = store::read_manifest(dir);
  if (!manifest)
    return manifest.error();
  tensor_map tensors;
  shape_map shapes;
  model_shape s;
  bool have_meta = false;
  for (const auto& entry : manifest.value().shards) {
    auto shard = store::read_shard_file(dir / entry.file);
    if (!shard)
      return shard.error();
    const auto& meta = shard.value().meta;
    const auto& ints = meta.ints;
    if (meta.rank == 0) {
      auto i = [&](const char* k) { return ints.count(k) ? ints.at(k) : 0; };
      auto d = [&](const char* k, double fallback) {
        return meta.strings.count(k) ? std::atof(meta.strings.at(k).c_str())
                                     : fallback;
      };
      s.vocab = i("vocab_size");
      s.hidden = i("hidden_size");
      s.intermediate = i("intermediate_size");
      s.layers = i("num_hidden_layers");
      s.q_heads = i("num_attention_heads");
      s.kv_heads = i("num_key_value_heads");
      s.head_dim = s.q_heads > 0 ? s.hidden / s.q_heads : 0;
      s.experts = i("num_experts");
      s.top_k = i("router_top_k");
      s.max_positions = i("max_seq_len");
      s.rope_theta = d("rope_theta", 10000.0);
      s.rms_norm_eps = d("rms_norm_eps", 1e-5);
      s.router_temperature = d("router_temperature", 1.0);
      have_meta = true;
    }
    auto held = store::block_experts_of(meta);
    if (!held)
      return held.error();
    for (auto& t : shard.value().tensors) {
      if (t.name.rfind("adam_", 0) == 0)
        continue;
      if (t.name == "router_bias" && t.shape.size() == 2) {
        const int64_t e = t.shape[1];
        for (int64_t l = 0; l < t.shape[0]; ++l) {
          auto name = layer_prefix(l)
                      + "block_sparse_moe.gate.e_score_correction_bias";
          shapes[name] = {e};
          tensors[name].assign(t.data.begin() + l * e,
                               t.data.begin() + (l + 1) * e);
        }
        continue;
      }
      if (t.name.find(".block_sparse_moe.experts.") == std::string::npos
          || t.shape.size() != 3) {
        shapes[t.name] = t.shape;
        tensors[t.name] = std::move(t.data);
        continue;
      }
      const auto which = t.name.substr(t.name.rfind('.') + 1);
      const auto prefix = t.name.substr(0, t.name.rfind('.'));
      const int64_t per = t.shape[1] * t.shape[2];
      const int64_t layer = std::stoll(t.name.substr(13)); // model.layers.L.
      for (int64_t j = 0; j < t.shape[0]; ++j) {
        auto name = prefix + "." + std::to_string(held.value().at(layer, j))
                    + "." + which + ".weight";
        shapes[name] = {t.shape[1], t.shape[2]};
        tensors[name].assign(t.data.begin() + j * per,
                             t.data.begin() + (j + 1) * per);
      }
    }
  }
  if (!have_meta)
    return status::error(dir.string() + ": no rank-0 shard with the model");
  if (auto c = check_shape(s); !c.ok())
    return status::error((dir / store::shard_file_name(0)).string() + ": "
                         + c.message());
  return model_from_tensors(s, std::move(tensors), shapes, dir.string());
}

} // namespace

status check_shape(const model_shape& s) {
  const std::pair<const char*, int64_t> sizes[] = {
    {"vocab_size", s.vocab},
    {"hidden_size", s.hidden},
    {"intermediate_size", s.intermediate},
    {"num_hidden_layers", s.layers},
    {"num_attention_heads", s.q_heads},
    {"num_key_value_heads", s.kv_heads},
    {"head_dim", s.head_dim},
    {"num_local_experts", s.experts},
    {"num_experts_per_tok", s.top_k},
    {"max_position_embeddings", s.max_positions}};
  for (const auto& [key, v] : sizes)
    if (v <= 0)
      return status::error(std::string(key) + " must be positive");
  if (s.q_heads % s.kv_heads != 0)
    return status::error(
      "num_attention_heads must be a multiple of num_key_value_heads");
  if (s.head_dim % 2 != 0)
    return status::error("head_dim must be even (rotary embedding)");
  if (s.top_k > s.experts)
    return status::error("num_experts_per_tok must be <= num_local_experts");
  return {};
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
  const int64_t D = shape.hidden, F = shape.intermediate, E = shape.experts;
  const int64_t Q = shape.q_heads * shape.head_dim;
  const int64_t KV = shape.kv_heads * shape.head_dim;
  status bad;
  auto get = [&](const std::string& name, std::vector<int64_t> want,
                 std::vector<float>& out) {
    if (!bad.ok())
      return;
    auto v = take(tensors, shapes, name, want, source);
    if (!v)
      bad = v.error();
    else
      out = std::move(v.value());
  };
  get("model.embed_tokens.weight", {shape.vocab, D}, m.embed);
  get("model.norm.weight", {D}, m.final_norm);
  get("lm_head.weight", {shape.vocab, D}, m.lm_head);
  m.layers.resize(shape.layers);
  for (int64_t l = 0; l < shape.layers && bad.ok(); ++l) {
    auto& w = m.layers[l];
    const auto p = layer_prefix(l);
    get(p + "input_layernorm.weight", {D}, w.input_norm);
    get(p + "self_attn.q_proj.weight", {Q, D}, w.q);
    get(p + "self_attn.k_proj.weight", {KV, D}, w.k);
    get(p + "self_attn.v_proj.weight", {KV, D}, w.v);
    get(p + "self_attn.o_proj.weight", {D, Q}, w.o);
    get(p + "post_attention_layernorm.weight", {D}, w.post_norm);
    get(p + "block_sparse_moe.gate.weight", {E, D}, w.router);
    const auto bias = p + "block_sparse_moe.gate.e_score_correction_bias";
    if (tensors.count(bias))
      get(bias, {E}, w.router_bias);
    else
      w.router_bias.assign(E, 0.0f);
    w.w1.resize(E * F * D);
    w.w3.resize(E * F * D);
    w.w2.resize(E * D * F);
    for (int64_t e = 0; e < E && bad.ok(); ++e) {
      const auto ep = p + "block_sparse_moe.experts." + std::to_string(e) + ".";
      std::vector<float> t;
      get(ep + "w1.weight", {F, D}, t);
      std::copy(t.begin(), t.end(), w.w1.begin() + e * F * D);
      get(ep + "w3.weight", {F, D}, t);
      std::copy(t.begin(), t.end(), w.w3.begin() + e * F * D);
      get(ep + "w2.weight", {D, F}, t);
      std::copy(t.begin(), t.end(), w.w2.begin() + e * D * F);
    }
  }
  if (!bad.ok())
    return bad;
  if (!tensors.empty())
    return status::error(source + ": unexpected tensor "
                         + tensors.begin()->first);
  pack_for_serving(m);
  return m;
}

void pack_for_serving(served_model& m) {
  const auto& s = m.shape;
  const int64_t D = s.hidden, F = s.intermediate, E = s.experts;
  const int64_t Q = s.q_heads * s.head_dim, KV = s.kv_heads * s.head_dim;
  m.lm_head_t = pack_matrix(m.lm_head.data(), s.vocab, D);
  for (auto& w : m.layers) {
    w.q_t = pack_matrix(w.q.data(), Q, D);
    w.k_t = pack_matrix(w.k.data(), KV, D);
    w.v_t = pack_matrix(w.v.data(), KV, D);
    w.o_t = pack_matrix(w.o.data(), D, Q);
    w.router_t = pack_matrix(w.router.data(), E, D);
    w.w13_t.clear();
    w.w2_t.clear();
    std::vector<float> w13(2 * F * D);
    for (int64_t e = 0; e < E; ++e) {
      std::copy_n(w.w1.data() + e * F * D, F * D, w13.data());
      std::copy_n(w.w3.data() + e * F * D, F * D, w13.data() + F * D);
      w.w13_t.push_back(pack_matrix(w13.data(), 2 * F, D));
      w.w2_t.push_back(pack_matrix(w.w2.data() + e * D * F, D, F));
    }
  }
}

namespace {

expected<served_model> load_weights(const fs::path& dir) {
  if (fs::exists(dir / "config.json"))
    return load_hf_dir(dir);
  if (fs::exists(dir / "MANIFEST"))
    return load_checkpoint_dir(dir);
  return status::error(dir.string()
                       + ": neither a model directory (config.json) nor a "
                         "tutti checkpoint (MANIFEST)");
}

} // namespace

expected<served_model> load_model(const fs::path& dir) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec))
    return status::error(dir.string() + ": not a directory");
  auto m = load_weights(dir);
  if (!m)
    return m;
  const auto file = dir / tokenizer::model_file_name;
  if (!fs::exists(file, ec))
    return m;
  auto tok = tokenizer::tokenizer::load(file);
  if (!tok)
    return status::error(file.string() + ": " + tok.message());
  if (tok.value().vocab_size() > static_cast<uint32_t>(m.value().shape.vocab))
    return status::error(file.string() + ": its vocabulary of "
                         + std::to_string(tok.value().vocab_size())
                         + " is larger than the model's "
                         + std::to_string(m.value().shape.vocab));
  m.value().text_tokenizer = std::make_shared<const tokenizer::tokenizer>(
    std::move(tok.value()));
  return m;
}

} // namespace tutti::serve
