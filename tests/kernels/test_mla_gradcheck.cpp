// Multi-head latent attention (train/mla_attention.hpp, the chain training
// runs) against central finite differences, in double: the query through
// q_proj or through its latent (q_a_proj, RMSNorm, q_b_proj), the key /
// value latent and its RMSNorm, kv_b_proj, the rotary embedding on the
// rotated slices only (interleaved or paired), the shared rotated key, the
// attention core with values narrower than the keys, and the packed
// output.

#include <catch2/catch.hpp>

#include <cstdint>
#include <random>
#include <vector>

#include "tutti/kernels/ops.hpp"
#include "tutti/train/mla_attention.hpp"

#include "gradcheck_support.hpp"
#include "kernel_inputs.hpp"

namespace k = tutti::kernels;
namespace mla = tutti::train::mla;
using Vec = std::vector<double>;
using tutti::testing::check_grad;
using tutti::testing::dot;
using tutti::testing::randn;

TEST_CASE("gradcheck multi-head latent attention", "[kernels][gradcheck]") {
  const int64_t q_rank = GENERATE(0, 4);
  const bool interleave = GENERATE(false, true);
  INFO("q_lora_rank " << q_rank << ", rope_interleave " << interleave);
  const k::stream S = k::cpu_stream();
  std::mt19937_64 rng(23 + q_rank + interleave);
  mla::dims d;
  d.batch = 2;
  d.seq = 3;
  d.hidden = 6;
  d.heads = 2;
  d.q_rank = q_rank;
  d.kv_rank = 5;
  d.nope = 3;
  d.rope = 4;
  d.v = 2;
  d.theta = 100.0;
  d.interleave = interleave;
  d.eps = 1e-6;
  const int64_t n = d.tokens(), h = d.heads, qk = d.qk();
  const int64_t q_in = q_rank > 0 ? q_rank : d.hidden;
  Vec x = randn(n * d.hidden, rng), wq = randn(h * qk * q_in, rng),
      wqa = randn(q_rank * d.hidden, rng), wqn = randn(q_rank, rng),
      wkva = randn(d.latent() * d.hidden, rng), wkvn = randn(d.kv_rank, rng),
      wkvb = randn(h * (d.nope + d.v) * d.kv_rank, rng),
      G = randn(n * h * d.v, rng);
  auto weights = [&] {
    mla::weights<double> w;
    if (q_rank > 0) {
      w.q_a = wqa.data();
      w.q_a_norm = wqn.data();
      w.q_b = wq.data();
    } else {
      w.q_proj = wq.data();
    }
    w.kv_a = wkva.data();
    w.kv_a_norm = wkvn.data();
    w.kv_b = wkvb.data();
    return w;
  };
  struct run {
    mla::acts<double> a;
    Vec q, k, v, pe, probs, attn, out;
  };
  auto forward = [&] {
    run r;
    r.a.resize(S, d);
    for (auto* buf : {&r.q, &r.k, &r.v, &r.attn})
      buf->assign(n * h * qk, 0.0);
    r.pe.assign(n * h * d.rope, 0.0);
    r.probs.assign(d.batch * h * d.seq * d.seq, 0.0);
    r.out.assign(n * h * d.v, 0.0);
    mla::forward(S, d, weights(), x.data(), r.a, r.q.data(), r.k.data(),
                 r.v.data(), r.pe.data());
    k::attention_forward(S, r.q.data(), r.k.data(), r.v.data(), r.attn.data(),
                         r.probs.data(), d.batch, d.seq, h, h, qk);
    mla::pack_output(S, d, r.attn.data(), r.out.data());
    return r;
  };
  auto loss = [&] { return dot(G, forward().out); };

  auto r = forward();
  Vec dattn(n * h * qk), dq(n * h * qk), dk(n * h * qk), dv(n * h * qk);
  mla::unpack_output_grad(S, d, G.data(), dattn.data());
  k::attention_backward(S, r.q.data(), r.k.data(), r.v.data(), r.probs.data(),
                        dattn.data(), dq.data(), dk.data(), dv.data(), d.batch,
                        d.seq, h, h, qk);
  Vec dx(x.size()), dwq(wq.size(), 0.0), dwqa(wqa.size(), 0.0),
    dwqn(wqn.size(), 0.0), dwkva(wkva.size(), 0.0), dwkvn(wkvn.size(), 0.0),
    dwkvb(wkvb.size(), 0.0);
  mla::grads<double> g;
  if (q_rank > 0) {
    g.q_a = dwqa.data();
    g.q_a_norm = dwqn.data();
    g.q_b = dwq.data();
  } else {
    g.q_proj = dwq.data();
  }
  g.kv_a = dwkva.data();
  g.kv_a_norm = dwkvn.data();
  g.kv_b = dwkvb.data();
  mla::scratch<double> tmp;
  mla::backward(S, d, weights(), x.data(), r.a, dq.data(), dk.data(), dv.data(),
                g, tmp, dx.data());

  check_grad("x", dx, x, loss);
  check_grad(q_rank > 0 ? "q_b_proj" : "q_proj", dwq, wq, loss);
  if (q_rank > 0) {
    check_grad("q_a_proj", dwqa, wqa, loss);
    check_grad("q_a_layernorm", dwqn, wqn, loss);
  }
  check_grad("kv_a_proj_with_mqa", dwkva, wkva, loss);
  check_grad("kv_a_layernorm", dwkvn, wkvn, loss);
  check_grad("kv_b_proj", dwkvb, wkvb, loss);
}
