// Loading part of a model: the dense weights and the experts a daemon
// holds, each expert packed as soon as its matrices are read so that no
// more than one expert's row-major copy is held beside the packed ones.

#include "tutti/serve/expert_loading.hpp"

#include <array>
#include <map>
#include <optional>
#include <string>

#include "model_parts.hpp"
#include "tutti/model/family.hpp"
#include "tutti/model/tensor_names.hpp"
#include "tutti/runtime/log.hpp"

namespace tutti::serve {

namespace fs = std::filesystem;

namespace {

// "model.layers.L.block_sparse_moe.experts.E.wN.weight[_scale]"
struct expert_tensor {
  int64_t layer = 0, expert = 0;
  int which = 0; // 0 w1, 1 w3, 2 w2
  bool scale = false;
};

std::optional<expert_tensor> parse_expert(const std::string& name) {
  static const std::string head = "model.layers.";
  static const std::string mid = ".block_sparse_moe.experts.";
  if (name.rfind(head, 0) != 0)
    return std::nullopt;
  size_t at = head.size(), used = 0;
  expert_tensor t;
  try {
    t.layer = std::stoll(name.substr(at), &used);
    at += used;
    if (name.compare(at, mid.size(), mid) != 0)
      return std::nullopt;
    at += mid.size();
    t.expert = std::stoll(name.substr(at), &used);
    at += used;
  } catch (const std::exception&) {
    return std::nullopt;
  }
  const auto rest = name.substr(at);
  static const std::array<const char*, 3> which{".w1.", ".w3.", ".w2."};
  for (int w = 0; w < 3; ++w)
    if (rest.rfind(which[w], 0) == 0) {
      const auto tail = rest.substr(4);
      if (tail != "weight" && tail != "weight_scale")
        return std::nullopt;
      t.which = w;
      t.scale = tail == "weight_scale";
      return t;
    }
  return std::nullopt;
}

int64_t packed_bytes(const kernels::packed_matrix& p) {
  return static_cast<int64_t>(p.t.size() * 4 + p.codes.size()
                              + p.scales.size() * 4 + p.bf16_pairs.size() * 4
                              + p.int8_quads.size() * 4
                              + p.code_sums.size() * 4);
}

// Expert matrices as they are read, packed into the model once an
// expert's are all there.
class expert_stager {
public:
  // `to`: what float experts become (serve.weight_dtype).
  expert_stager(served_model& m, std::string source, weight_dtype to)
    : m_(m), source_(std::move(source)), to_(to) {}

  status put(const expert_tensor& id, store::named_tensor&& t) {
    const auto& s = m_.shape;
    const int64_t D = s.hidden, F = s.intermediate;
    const int64_t rows = id.which == 2 ? D : F, cols = id.which == 2 ? F : D;
    const auto shown = model::hf_tensor_name(s.family, t.name);
    const std::vector<int64_t> want = id.scale
                                        ? (t.shape.size() == 1
                                             ? std::vector<int64_t>{rows}
                                             : std::vector<int64_t>{rows, 1})
                                        : std::vector<int64_t>{rows, cols};
    if (t.shape != want)
      return status::error(source_ + ": tensor " + shown + " has shape "
                           + shape_text(t.shape) + ", expected "
                           + shape_text(want));
    auto& x = staged_[{id.layer, id.expert}];
    if (!id.scale && id.which < 2) {
      // w1 and w3 straight into their stack, the one copy packing reads.
      x.w13.resize(2 * F * D);
      std::copy(t.data.begin(), t.data.end(), x.w13.begin() + id.which * F * D);
      std::vector<float>().swap(t.data);
    } else {
      (id.scale ? x.scales : x.weights)[id.which] = std::move(t.data);
    }
    (id.scale ? x.have_scale : x.have)[id.which] = true;
    x.int8 = x.int8 || t.int8 || id.scale;
    if (!(x.have[0] && x.have[1] && x.have[2]))
      return {};
    if (x.int8 && !(x.have_scale[0] && x.have_scale[1] && x.have_scale[2]))
      return {};
    pack(id.layer, id.expert, x);
    staged_.erase({id.layer, id.expert});
    return {};
  }

  // Every expert in `want` packed, or the first tensor missing.
  status finish(const expert_set& want) const {
    const auto& s = m_.shape;
    for (int64_t l = s.dense_layers; l < s.layers; ++l) // dense: no experts
      for (int64_t e = 0; e < s.experts; ++e) {
        if (!want[l * s.experts + e] || m_.layers[l].w13_t[e].out > 0)
          continue;
        auto it = staged_.find({l, e});
        static const std::array<const char*, 3> which{"w1", "w3", "w2"};
        int w = 0;
        bool scale = false;
        if (it != staged_.end()) {
          while (w < 3 && it->second.have[w])
            ++w;
          if (w == 3) { // a weight's scales are missing
            scale = true;
            w = 0;
            while (it->second.have_scale[w])
              ++w;
          }
        }
        const auto name = model::names::expert(l, e, which[w]);
        const auto shown = model::hf_tensor_name(s.family, name);
        return status::error(
          source_ + ": tensor " + shown
          + (scale ? " is int8 but its scales " + shown + "_scale are missing"
                   : std::string(" missing")));
      }
    return {};
  }

  int64_t bytes() const { return bytes_; }
  int64_t packed() const { return packed_; }
  bool any_int8() const { return any_int8_; }

private:
  struct staged {
    std::vector<float> w13; // w1 then w3, [2 * intermediate, hidden]
    std::array<std::vector<float>, 3> weights, scales; // w2's weights only
    std::array<bool, 3> have{}, have_scale{};
    bool int8 = false;
  };

  static std::string shape_text(const std::vector<int64_t>& v) {
    std::string out = "[";
    for (size_t i = 0; i < v.size(); ++i)
      out += (i ? "," : "") + std::to_string(v[i]);
    return out + "]";
  }

  void pack(int64_t l, int64_t e, staged& x) {
    const auto& s = m_.shape;
    const int64_t D = s.hidden, F = s.intermediate;
    if (!x.int8 && to_ == weight_dtype::int8) {
      // Per output row, as quantize_experts does for a layer's stack.
      const std::array<float*, 3> data{x.w13.data(), x.w13.data() + F * D,
                                       x.weights[2].data()};
      const std::array<int64_t, 3> rows{F, F, D}, cols{D, D, F};
      for (int w = 0; w < 3; ++w) {
        x.scales[w].resize(rows[w]);
        kernels::quantize_matrix_int8(data[w], rows[w], cols[w], data[w],
                                      x.scales[w].data());
      }
      x.int8 = true;
    }
    auto& w = m_.layers[l];
    expert_matrices in;
    in.w13 = x.w13.data();
    in.w2 = x.weights[2].data();
    in.bf16 = !x.int8 && to_ == weight_dtype::bf16;
    if (x.int8) {
      in.w1_scale = x.scales[0].data();
      in.w3_scale = x.scales[1].data();
      in.w2_scale = x.scales[2].data();
    }
    pack_expert(w, e, s, in);
    if (m_.int8_rows) // as the experts loaded before (use_int8_rows)
      for (auto* p : {&w.w13_t[e], &w.w2_t[e]})
        *p = kernels::with_int8_rows(std::move(*p));
    bytes_ += packed_bytes(w.w13_t[e]) + packed_bytes(w.w2_t[e]);
    ++packed_;
    any_int8_ = any_int8_ || x.int8;
  }

  served_model& m_;
  std::string source_;
  weight_dtype to_ = weight_dtype::fp32;
  std::map<std::pair<int64_t, int64_t>, staged> staged_;
  int64_t bytes_ = 0, packed_ = 0;
  bool any_int8_ = false;
};

bool in_model(const model_shape& s, const expert_tensor& t) {
  return t.layer >= s.dense_layers && t.layer < s.layers && t.expert >= 0
         && t.expert < s.experts;
}

} // namespace

expert_set experts_on(const expert_layout& x,
                      const std::vector<int64_t>& ranks) {
  expert_set out(x.layers * x.experts, 0);
  for (int64_t l = 0; l < x.layers; ++l)
    for (int64_t r : ranks)
      for (int64_t p = x.begin(l, r); p < x.end(l, r); ++p)
        out[l * x.experts + x.expert_at(l, p)] = 1;
  return out;
}

expected<served_model> load_model_part(const fs::path& dir,
                                       const expert_set& held,
                                       weight_dtype weights) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec))
    return status::error(dir.string() + ": not a directory");
  const auto source = dir.string();
  served_model m;
  m.name = dir.filename().string();
  if (m.name.empty())
    m.name = dir.parent_path().filename().string();
  tensor_map dense;
  shape_map shapes;
  std::optional<expert_stager> stager;
  bool file_int8 = false;
  status bad;
  int64_t skipped_mtp = 0;
  auto shape = model::stream_weights(
    dir,
    [&](const model_shape& s, const std::string& name, bool int8) {
      if (!stager) {
        m.shape = s;
        m.layers.resize(s.layers);
        for (auto& w : m.layers) {
          w.w13_t.assign(s.experts, {});
          w.w2_t.assign(s.experts, {});
        }
        if (static_cast<int64_t>(held.size()) != s.layers * s.experts)
          bad = status::error(source
                              + ": the experts to hold are for "
                                "another model's shape");
        stager.emplace(m, source, weights);
      }
      const auto id = parse_expert(name);
      if (!id || !in_model(s, *id))
        return true; // dense; or refused below as unexpected
      file_int8 = file_int8 || int8 || id->scale;
      return bad.ok() && held[id->layer * s.experts + id->expert] != 0;
    },
    [&](store::named_tensor&& t) -> status {
      TUTTI_RETURN_IF_ERROR(bad);
      const auto id = parse_expert(t.name);
      if (id && in_model(m.shape, *id))
        return stager->put(*id, std::move(t));
      shapes[t.name] = t.shape;
      dense[t.name] = std::move(t.data);
      return {};
    },
    &skipped_mtp);
  if (!shape)
    return shape.error();
  TUTTI_RETURN_IF_ERROR(bad);
  if (!stager)
    return status::error(source + ": no tensors");
  TUTTI_RETURN_IF_ERROR(stager->finish(held));
  TUTTI_RETURN_IF_ERROR(take_dense(m, dense, shapes, source));
  if (!dense.empty())
    return status::error(
      source + ": unexpected tensor "
      + model::hf_tensor_name(m.shape.family, dense.begin()->first));
  pack_dense(m);
  // An int8 checkpoint is served as it is, whatever serve.weight_dtype.
  m.expert_dtype = file_int8 ? weight_dtype::int8 : weights;
  m.quantized_at_load = !file_int8 && weights != weight_dtype::fp32;
  m.held_experts = held;
  m.skipped_mtp_tensors = skipped_mtp;
  TUTTI_RETURN_IF_ERROR(load_beside_weights(dir, m));
  return m;
}

expected<int64_t> expert_loader::hold_rank(const expert_layout& x,
                                           int64_t rank) {
  std::lock_guard lock(mutex_);
  auto& m = *model_;
  const auto& s = m.shape;
  if (m.held_experts.empty())
    return int64_t{0}; // every expert is here
  expert_set want(s.layers * s.experts, 0);
  int64_t missing = 0;
  for (int64_t l = 0; l < x.layers; ++l)
    for (int64_t p = x.begin(l, rank); p < x.end(l, rank); ++p)
      if (const auto e = x.expert_at(l, p); !m.holds_expert(l, e)) {
        want[l * s.experts + e] = 1;
        ++missing;
      }
  if (missing == 0)
    return int64_t{0};
  // Float experts become what the others became at load.
  expert_stager stager(m, dir_.string(),
                       m.quantized_at_load ? m.expert_dtype : weight_dtype::fp32);
  auto read = model::stream_weights(
    dir_,
    [&](const model_shape&, const std::string& name, bool) {
      const auto id = parse_expert(name);
      return id && in_model(s, *id) && want[id->layer * s.experts + id->expert];
    },
    [&](store::named_tensor&& t) -> status {
      return stager.put(*parse_expert(t.name), std::move(t));
    });
  if (!read)
    return status::error("loading the experts a new layout moves to rank "
                         + std::to_string(rank) + ": " + read.message());
  if (auto done = stager.finish(want); !done.ok())
    return status::error("loading the experts a new layout moves to rank "
                         + std::to_string(rank) + ": " + done.message());
  for (size_t i = 0; i < want.size(); ++i)
    if (want[i])
      m.held_experts[i] = 1;
  loaded_bytes_ += stager.bytes();
  loaded_experts_ += stager.packed();
  log_info("serve", "loaded " + std::to_string(stager.packed()) + " experts ("
                      + std::to_string(stager.bytes())
                      + " bytes) that the new expert layout moves to rank "
                      + std::to_string(rank) + ", from " + dir_.string());
  return stager.bytes();
}

} // namespace tutti::serve
