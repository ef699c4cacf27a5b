#include "tutti/model/weights.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "fp8_weights.hpp"
#include "tutti/model/family.hpp"
#include "tutti/model/hf_config.hpp"
#include "tutti/model/tensor_names.hpp"
#include "tutti/store/expert_blocks.hpp"

namespace tutti::model {

namespace fs = std::filesystem;

namespace {

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
  std::ifstream in(index, std::ios::binary);
  if (!in)
    return status::error(index.string() + ": cannot be read");
  std::ostringstream text;
  text << in.rdbuf();
  auto j = nlohmann::json::parse(text.str(), nullptr, false);
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

// One shard's tensors under Hugging Face's names, appended to `out`.
status add_shard_tensors(store::shard_file& shard,
                         std::vector<store::named_tensor>& out) {
  auto held = store::block_experts_of(shard.meta);
  if (!held)
    return held.error();
  for (auto& t : shard.tensors) {
    if (t.name.rfind("adam_", 0) == 0)
      continue; // optimizer state stays with tutti
    if (t.name == "router_bias" && t.shape.size() == 2) {
      // Selection-only biases, under DeepSeek-V3's Hugging Face name.
      const int64_t experts = t.shape[1];
      for (int64_t l = 0; l < t.shape[0]; ++l)
        out.push_back({names::layer(l, names::router_bias),
                       {experts},
                       std::vector<float>(t.data.begin() + l * experts,
                                          t.data.begin() + (l + 1) * experts)});
      continue;
    }
    if (t.name.find(".block_sparse_moe.experts.") == std::string::npos
        || t.shape.size() != 3) {
      out.push_back({t.name, t.shape, std::move(t.data)});
      continue;
    }
    // A block [count, out, in] of this shard's experts: one tensor per
    // expert, named by its global index.
    const auto which = t.name.substr(t.name.rfind('.') + 1); // w1|w2|w3
    const int64_t layer = std::stoll(t.name.substr(13));     // model.layers.L.
    const int64_t count = t.shape[0], per = t.shape[1] * t.shape[2];
    for (int64_t j = 0; j < count; ++j)
      out.push_back(
        {names::expert(layer, held.value().at(layer, j), which.c_str()),
         {t.shape[1], t.shape[2]},
         std::vector<float>(t.data.begin() + j * per,
                            t.data.begin() + (j + 1) * per)});
  }
  return {};
}

// A tensor of one of the multi-token-prediction layers `s` declares:
// model.layers.N.* with layers <= N < layers + mtp_layers (its own
// embedding, norms, projection, head and a whole decoder layer).
bool mtp_tensor(const model_shape& s, const std::string& hf) {
  const std::string prefix = "model.layers.";
  if (s.mtp_layers == 0 || hf.rfind(prefix, 0) != 0)
    return false;
  const auto dot = hf.find('.', prefix.size());
  const auto digits = hf.substr(prefix.size(), dot - prefix.size());
  if (dot == std::string::npos || digits.empty() || digits.size() > 9
      || digits.find_first_not_of("0123456789") != std::string::npos)
    return false;
  const int64_t layer = std::stoll(digits);
  return layer >= s.layers && layer < s.layers + s.mtp_layers;
}

using detail::shape_text;

} // namespace

status check_feed_forward_tensors(
  const model_shape& s, const std::vector<store::named_tensor>& tensors) {
  std::map<std::string, const store::named_tensor*> by_name;
  for (const auto& t : tensors)
    by_name[t.name] = &t;
  auto need = [&](const std::string& name,
                  std::vector<int64_t> shape) -> status {
    const auto it = by_name.find(name);
    const auto hf = hf_tensor_name(s.family, name);
    if (it == by_name.end())
      return status::error("tensor " + hf + " missing");
    if (it->second->shape != shape)
      return status::error("tensor " + hf + " has shape "
                           + shape_text(it->second->shape) + ", expected "
                           + shape_text(shape));
    return {};
  };
  const int64_t d = s.hidden;
  for (int64_t l = 0; l < s.layers; ++l) {
    const bool dense = s.dense_layer(l);
    const int64_t f = dense ? s.dense_intermediate : s.shared_intermediate();
    if (f == 0)
      continue;
    const char* gate = dense ? names::dense_gate : names::shared_w1;
    const char* up = dense ? names::dense_up : names::shared_w3;
    const char* down = dense ? names::dense_down : names::shared_w2;
    TUTTI_RETURN_IF_ERROR(need(names::layer(l, gate), {f, d}));
    TUTTI_RETURN_IF_ERROR(need(names::layer(l, up), {f, d}));
    TUTTI_RETURN_IF_ERROR(need(names::layer(l, down), {d, f}));
  }
  return {};
}

expected<model_weights> read_hf_dir(const fs::path& dir) {
  auto shape = read_hf_config(dir / "config.json");
  if (!shape)
    return shape.error();
  auto blocks = read_hf_quantization(dir / "config.json");
  if (!blocks)
    return blocks.error();
  auto files = weight_files(dir);
  if (!files)
    return files.error();
  model_weights w;
  w.shape = shape.value();
  detail::fp8_names fp8(dir.string(), blocks.value());
  detail::fp8_pairs pairs(dir.string(), blocks.value());
  auto add = [&](store::named_tensor&& t) {
    t.name = tutti_tensor_name(w.shape.family, t.name);
    w.tensors.push_back(std::move(t));
    return status{};
  };
  std::set<std::string> seen;
  for (const auto& file : files.value()) {
    auto read = store::read_safetensors_as_f32(file);
    if (!read)
      return read.error();
    for (auto& t : read.value()) {
      if (!seen.insert(t.name).second)
        return status::error(file.string() + ": tensor " + t.name
                             + " appears twice");
      if (mtp_tensor(w.shape, t.name)) {
        ++w.skipped_mtp_tensors;
        continue;
      }
      // Under tutti's names whatever the family (family.hpp); a name that
      // does not come back is another family's. An FP8 weight's scales
      // go with it.
      if (detail::scaled_weight_of(t.name).empty()
          && hf_tensor_name(w.shape.family,
                            tutti_tensor_name(w.shape.family, t.name))
               != t.name)
        return status::error(file.string() + ": tensor " + t.name
                             + " is not a " + to_string(w.shape.family)
                             + " tensor");
      TUTTI_RETURN_IF_ERROR(fp8.note(t.name, t.fp8_e4m3
                                               ? store::stored_as::fp8_e4m3
                                               : store::stored_as::floating));
      if (detail::fp8_pairs::takes(t))
        TUTTI_RETURN_IF_ERROR(pairs.put(std::move(t), add));
      else
        TUTTI_RETURN_IF_ERROR(add(std::move(t)));
    }
  }
  TUTTI_RETURN_IF_ERROR(fp8.check());
  // An int8 weight is its codes and their scales: never one without the
  // other.
  for (const auto& t : w.tensors)
    if (t.int8
        && !seen.count(hf_tensor_name(w.shape.family, t.name + "_scale"))) {
      const auto hf = hf_tensor_name(w.shape.family, t.name);
      return status::error(dir.string() + ": tensor " + hf
                           + " is int8 but its scales " + hf
                           + "_scale are missing");
    }
  if (auto c = check_feed_forward_tensors(w.shape, w.tensors); !c.ok())
    return status::error(dir.string() + ": " + c.message());
  return w;
}

expected<model_weights> read_checkpoint(const fs::path& dir) {
  TUTTI_RETURN_IF_ERROR(store::verify_checkpoint(dir));
  auto manifest = store::read_manifest(dir);
  if (!manifest)
    return manifest.error();
  model_weights w;
  bool have_rank0 = false;
  for (const auto& entry : manifest.value().shards) {
    auto shard = store::read_shard_file(dir / entry.file);
    if (!shard)
      return shard.error();
    if (shard.value().meta.rank == 0) {
      w.rank0 = shard.value().meta;
      w.step = w.rank0.step;
      have_rank0 = true;
    }
    TUTTI_RETURN_IF_ERROR(add_shard_tensors(shard.value(), w.tensors));
  }
  if (!have_rank0)
    return status::error(dir.string() + ": no rank-0 shard with the model");
  w.shape = shape_of(w.rank0);
  if (auto c = check_shape(w.shape); !c.ok())
    return status::error((dir / store::shard_file_name(0)).string() + ": "
                         + c.message());
  // Training keeps a block of experts and router biases for every layer;
  // a leading dense layer's are never used, and are not the model's.
  const auto dense_layers = w.shape.dense_layers;
  std::erase_if(w.tensors, [&](const store::named_tensor& t) {
    const bool routed = t.name.find(".block_sparse_moe.experts.")
                          != std::string::npos
                        || t.name.find(names::router_bias) != std::string::npos;
    return routed && t.name.rfind("model.layers.", 0) == 0
           && std::stoll(t.name.substr(13)) < dense_layers;
  });
  if (auto c = check_feed_forward_tensors(w.shape, w.tensors); !c.ok())
    return status::error(dir.string() + ": " + c.message());
  return w;
}

namespace {

expected<model_shape> stream_hf_dir(const fs::path& dir,
                                    const weight_filter& keep,
                                    const store::tensor_sink& sink,
                                    int64_t* skipped_mtp_tensors) {
  auto shape = read_hf_config(dir / "config.json");
  if (!shape)
    return shape.error();
  auto blocks = read_hf_quantization(dir / "config.json");
  if (!blocks)
    return blocks.error();
  auto files = weight_files(dir);
  if (!files)
    return files.error();
  const auto family = shape.value().family;
  std::set<std::string> seen;
  std::vector<std::string> int8_names;
  detail::fp8_names fp8(dir.string(), blocks.value());
  detail::fp8_pairs pairs(dir.string(), blocks.value());
  // Whether `keep` took an FP8 weight, by Hugging Face's name: asked once,
  // for the weight and its scales together.
  std::map<std::string, bool> fp8_kept;
  auto renamed = [&](store::named_tensor&& t) {
    t.name = tutti_tensor_name(family, t.name);
    return sink(std::move(t));
  };
  for (const auto& file : files.value()) {
    // A name that is bad is kept so that the sink refuses it, as
    // read_hf_dir does (and ends the read).
    status bad;
    auto s = store::read_safetensors_each(
      file,
      [&](const std::string& hf, store::stored_as how) {
        if (!bad.ok())
          return false;
        if (!seen.insert(hf).second) {
          bad = status::error(file.string() + ": tensor " + hf
                              + " appears twice");
          return true;
        }
        if (mtp_tensor(shape.value(), hf)) {
          if (skipped_mtp_tensors)
            ++*skipped_mtp_tensors;
          return false;
        }
        if (auto noted = fp8.note(hf, how); !noted.ok()) {
          bad = noted;
          return true;
        }
        const auto scaled = detail::scaled_weight_of(hf);
        if (scaled.empty()
            && hf_tensor_name(family, tutti_tensor_name(family, hf)) != hf) {
          bad = status::error(file.string() + ": tensor " + hf + " is not a "
                              + to_string(family) + " tensor");
          return true;
        }
        const bool int8 = how == store::stored_as::int8;
        if (int8)
          int8_names.push_back(tutti_tensor_name(family, hf));
        if (scaled.empty() && how != store::stored_as::fp8_e4m3)
          return keep(shape.value(), tutti_tensor_name(family, hf), int8);
        const auto& weight = scaled.empty() ? hf : scaled;
        if (const auto it = fp8_kept.find(weight); it != fp8_kept.end())
          return it->second;
        // Dequantized, the weight is float.
        return fp8_kept[weight] = keep(
                 shape.value(), tutti_tensor_name(family, weight), false);
      },
      [&](store::named_tensor&& t) -> status {
        if (!bad.ok())
          return bad;
        if (detail::fp8_pairs::takes(t))
          return pairs.put(std::move(t), renamed);
        return renamed(std::move(t));
      });
    if (!s.ok())
      return s;
    if (!bad.ok())
      return bad;
  }
  TUTTI_RETURN_IF_ERROR(fp8.check());
  for (const auto& name : int8_names)
    if (!seen.count(hf_tensor_name(family, name + "_scale"))) {
      const auto hf = hf_tensor_name(family, name);
      return status::error(dir.string() + ": tensor " + hf
                           + " is int8 but its scales " + hf
                           + "_scale are missing");
    }
  return shape;
}

expected<model_shape> stream_checkpoint(const fs::path& dir,
                                        const weight_filter& keep,
                                        const store::tensor_sink& sink) {
  TUTTI_RETURN_IF_ERROR(store::verify_checkpoint(dir));
  auto manifest = store::read_manifest(dir);
  if (!manifest)
    return manifest.error();
  // The shape first, from rank 0's header alone.
  const auto rank0_file = dir / store::shard_file_name(0);
  auto rank0 = store::read_shard_file(rank0_file, false);
  if (!rank0)
    return status::error(dir.string() + ": no rank-0 shard with the model");
  const auto shape = shape_of(rank0.value().meta);
  if (auto c = check_shape(shape); !c.ok())
    return status::error(rank0_file.string() + ": " + c.message());
  for (const auto& entry : manifest.value().shards) {
    auto shard = store::read_shard_file(dir / entry.file);
    if (!shard)
      return shard.error();
    std::vector<store::named_tensor> tensors;
    TUTTI_RETURN_IF_ERROR(add_shard_tensors(shard.value(), tensors));
    shard.value().tensors.clear();
    for (auto& t : tensors)
      if (keep(shape, t.name, false))
        TUTTI_RETURN_IF_ERROR(sink(std::move(t)));
  }
  return shape;
}

} // namespace

expected<model_shape> stream_weights(const fs::path& dir,
                                     const weight_filter& keep,
                                     const store::tensor_sink& sink,
                                     int64_t* skipped_mtp_tensors) {
  if (fs::exists(dir / "config.json"))
    return stream_hf_dir(dir, keep, sink, skipped_mtp_tensors);
  if (fs::exists(dir / "MANIFEST"))
    return stream_checkpoint(dir, keep, sink);
  return status::error(dir.string()
                       + ": neither a model directory (config.json) nor a "
                         "tutti checkpoint (MANIFEST)");
}

expected<weights_info> read_weights_info(const fs::path& dir) {
  weights_info info;
  if (!fs::exists(dir / "config.json") && fs::exists(dir / "MANIFEST")) {
    // A checkpoint's experts are float; its shape is in rank 0's header.
    const auto rank0_file = dir / store::shard_file_name(0);
    auto rank0 = store::read_shard_file(rank0_file, false);
    if (!rank0)
      return rank0.error();
    info.shape = shape_of(rank0.value().meta);
    if (auto c = check_shape(info.shape); !c.ok())
      return status::error(rank0_file.string() + ": " + c.message());
    return info;
  }
  auto shape = stream_weights(
    dir,
    [&](const model_shape&, const std::string& name, bool int8) {
      if (int8 && name.find(".block_sparse_moe.experts.") != std::string::npos)
        info.int8_experts = true;
      return false;
    },
    [](store::named_tensor&&) { return status{}; });
  if (!shape)
    return shape.error();
  info.shape = shape.value();
  return info;
}

expected<model_weights> load_weights(const fs::path& dir) {
  if (fs::exists(dir / "config.json"))
    return read_hf_dir(dir);
  if (fs::exists(dir / "MANIFEST"))
    return read_checkpoint(dir);
  return status::error(dir.string()
                       + ": neither a model directory (config.json) nor a "
                         "tutti checkpoint (MANIFEST)");
}

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

} // namespace tutti::model
