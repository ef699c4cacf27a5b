// The SwiGLU MLP a layer runs on every token, DeepSeek-V3's: in the leading
// dense layers (moe_config.first_k_dense_replace) in place of router and
// experts, and in the MoE layers as the shared experts
// (moe_config.n_shared_experts), whose output is added to the routed
// experts'. Its weights are dense ones (replicated, their gradients
// reduced over the data-parallel group like attention's); under tensor
// parallelism each rank holds a slice of the intermediate dimension (w1
// and w3 by rows, w2 by columns), so its output and, backward, its input
// gradient are partial sums, added to the routed experts' partial ones
// before the one sum over the TP group. Every EP rank computes it for its
// own tokens: nothing is dispatched.

#include "tutti/kernels/ops.hpp"
#include "tutti/model/tensor_names.hpp"
#include "tutti/train/rank_model.hpp"

namespace tutti::train {

namespace k = tutti::kernels;
namespace names = model::names;

namespace {

struct mlp_names {
  const char *w1, *w3, *w2;
};

mlp_names mlp_of(bool dense) {
  if (dense)
    return {names::dense_gate, names::dense_up, names::dense_down};
  return {names::shared_w1, names::shared_w3, names::shared_w2};
}

} // namespace

int64_t rank_model::mlp_width(int64_t l) const {
  const auto& e = cfg_.moe;
  const int64_t width = e.dense_layer(l) ? cfg_.model.dense_intermediate_size
                                         : e.shared_intermediate(cfg_.model);
  return width / cfg_.tp_size();
}

void rank_model::mlp_forward(int64_t l, int64_t n, float* out) {
  auto& a = acts_[l];
  const auto w = mlp_of(cfg_.moe.dense_layer(l));
  const int64_t d = cfg_.model.hidden_size, f = mlp_width(l);
  for (auto* t : {&a.mlp_gate, &a.mlp_up, &a.mlp_h})
    t->resize(stream_, n * f);
  k::linear_forward(stream_, a.xn2.data(), param(layer_name(l, w.w1)),
                    a.mlp_gate.data(), n, d, f);
  k::linear_forward(stream_, a.xn2.data(), param(layer_name(l, w.w3)),
                    a.mlp_up.data(), n, d, f);
  k::swiglu_forward(stream_, a.mlp_gate.data(), a.mlp_up.data(), a.mlp_h.data(),
                    n * f);
  k::linear_forward(stream_, a.mlp_h.data(), param(layer_name(l, w.w2)), out, n,
                    f, d);
}

void rank_model::mlp_backward(int64_t l, int64_t n, const float* dy,
                              float* dxn) {
  auto& a = acts_[l];
  const auto w = mlp_of(cfg_.moe.dense_layer(l));
  const int64_t d = cfg_.model.hidden_size, f = mlp_width(l);
  dmlp_h_.resize(stream_, n * f);
  dmlp_gate_.resize(stream_, n * f);
  dmlp_up_.resize(stream_, n * f);
  k::linear_backward(stream_, a.mlp_h.data(), param(layer_name(l, w.w2)), dy,
                     dmlp_h_.data(), grad(layer_name(l, w.w2)), n, f, d);
  k::swiglu_backward(stream_, a.mlp_gate.data(), a.mlp_up.data(),
                     dmlp_h_.data(), dmlp_gate_.data(), dmlp_up_.data(), n * f);
  // w1 and w3 read the same input: their input gradients are added to
  // dxn in the GEMMs themselves.
  const std::pair<const char*, const float*> in[] = {{w.w1, dmlp_gate_.data()},
                                                     {w.w3, dmlp_up_.data()}};
  for (const auto& [proj, dproj] : in) {
    k::linear_input_grad(stream_, param(layer_name(l, proj)), dproj, dxn, n, d,
                         f, true);
    k::linear_weight_grad_rows(stream_, a.xn2.data(), dproj,
                               grad(layer_name(l, proj)), n, d, f, 0, f);
  }
}

status rank_model::dense_layer_forward(int64_t l, int64_t n,
                                       step_timers& time) {
  const auto& m = cfg_.model;
  auto& a = acts_[l];
  const int64_t d = m.hidden_size;
  float* out = l + 1 < m.num_hidden_layers ? acts_[l + 1].x_in.data()
                                           : x_final_.data();
  k::rmsnorm_forward(stream_, a.x_mid.data(),
                     param(layer_name(l, names::post_norm)), a.xn2.data(),
                     a.rstd2.data(), n, d, static_cast<float>(m.rms_norm_eps));
  mlp_forward(l, n, out);
  TUTTI_RETURN_IF_ERROR(tp_sum(out, n * d, time));
  k::axpy(stream_, 1.0f, a.x_mid.data(), out, n * d);
  return {};
}

status rank_model::dense_layer_backward(int64_t l, int64_t n, tensor<float>& dx,
                                        step_timers& time) {
  auto& a = acts_[l];
  const int64_t d = cfg_.model.hidden_size;
  dtmp_.zeros(stream_, n * d);
  dtmp2_.resize(stream_, n * d);
  mlp_backward(l, n, dx.data(), dtmp_.data());
  TUTTI_RETURN_IF_ERROR(tp_sum(dtmp_.data(), n * d, time));
  k::rmsnorm_backward(stream_, a.x_mid.data(),
                      param(layer_name(l, names::post_norm)), a.rstd2.data(),
                      dtmp_.data(), dtmp2_.data(),
                      grad(layer_name(l, names::post_norm)), n, d);
  k::axpy(stream_, 1.0f, dtmp2_.data(), dx.data(), n * d);
  return {};
}

} // namespace tutti::train
