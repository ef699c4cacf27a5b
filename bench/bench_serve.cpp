// Serving on the medium model (vocab 256, hidden 256, intermediate 512, 4
// layers, 8 experts top-2, 8 q / 4 kv heads; random weights), one engine
// thread:
//   - prefill of 128 tokens, against the same projections as OpenBLAS
//     GEMMs of 128 rows (single-threaded): the price of batch-invariant
//     kernels at prefill;
//   - single-request decode tokens/s, against the same projections as
//     OpenBLAS calls of one row;
//   - single-request decode tokens/s with the experts int8
//     (serve.weight_dtype), against float32 experts;
//   - output tokens/s through the scheduler at concurrency 8 and 32,
//     against concurrency 1 (continuous batching's gain);
//   - output tokens/s at concurrency 32 on 2 expert-parallel rank actors
//     (each its own thread, half the sequences and half the experts),
//     against the one engine thread;
//   - packed_gemm on 32 rows (256 -> 512) in one call (blocks of rows
//     sharing each weight load) against 32 one-row calls, the fastest of
//     200 interleaved runs each (robust to a loaded machine).
// Usage: bench_serve [requests per level, default 32]
//        bench_serve decode B [int8|bf16]   (decode steps at batch B only,
//        to profile; the experts in 8 or 16 bits)
//        bench_serve limit   (a decode step of 32 requests against the
//        machine's limit for it: bytes / bandwidth + FLOPs / GEMM rate;
//        experts fp32, bf16 and int8)

#include <cstdlib>
#include <random>

#include "bench_util.hpp"
#include "tutti/kernels/ops.hpp"
#include "tutti/model/param_layout.hpp"
#include <caf/actor_system.hpp>

#include "tutti/runtime/system_config.hpp"
#include "tutti/serve/engine.hpp"
#include "tutti/serve/ep_ranks.hpp"
#include "tutti/kernels/invariant_ops.hpp"
#include "tutti/serve/scheduler.hpp"

using namespace tutti;

namespace {

constexpr int64_t V = 256, D = 256, F = 512, L = 4, HQ = 8, HKV = 4, E = 8,
                  K = 2, HD = D / HQ, MAXPOS = 512;

serve::served_model medium() {
  job_config cfg;
  cfg.model = {model_family::mixtral, V, D, F, L, HQ, HKV, 10000.0, MAXPOS,
               1e-5, 0.02};
  cfg.moe.num_experts = E;
  cfg.moe.router_top_k = K;
  std::map<std::string, std::vector<float>> t;
  std::map<std::string, std::vector<int64_t>> shapes;
  const auto dense = model::dense_layout(cfg.model, cfg.moe);
  std::vector<float> v(dense.total());
  model::init_params(dense, v.data(), 7, 0.02);
  for (const auto& s : dense.tensors()) {
    t[s.name].assign(v.begin() + s.offset, v.begin() + s.offset + s.numel);
    shapes[s.name] = s.shape;
  }
  const auto experts = model::expert_layout(cfg.model, 0, E);
  std::vector<float> ev(experts.total());
  model::init_expert_params(experts, ev.data(), cfg.model, 0, E, 7, 0.02);
  for (const auto& s : experts.tensors()) {
    const auto which = s.name.substr(s.name.rfind('.') + 1);
    const auto prefix = s.name.substr(0, s.name.rfind('.'));
    const int64_t per = s.shape[1] * s.shape[2];
    for (int64_t e = 0; e < E; ++e) {
      auto name = prefix + "." + std::to_string(e) + "." + which + ".weight";
      t[name].assign(ev.begin() + s.offset + e * per,
                     ev.begin() + s.offset + (e + 1) * per);
      shapes[name] = {s.shape[1], s.shape[2]};
    }
  }
  serve::model_shape shape{model_family::mixtral, V, D, F, L, HQ, HKV, HD, E,
                          K, MAXPOS};
  auto m = serve::model_from_tensors(shape, std::move(t), shapes, "medium");
  if (!m.ok()) {
    std::fprintf(stderr, "bench_serve: %s\n", m.message().c_str());
    std::exit(1);
  }
  return std::move(m.value());
}

// The projections of `rows` tokens through every layer as OpenBLAS GEMMs
// (top-2 of 8 experts, the routed rows spread evenly), and the LM head
// on `head_rows`.
double blas_projections_s(int64_t rows, int64_t head_rows, int reps) {
  const auto s = kernels::cpu_stream();
  std::vector<float> x(rows * F, 0.01f), y(rows * F), w(F * D, 0.02f),
    head(V * D, 0.02f);
  // rows * K expert rows in all, spread evenly over the experts they reach.
  const int64_t used = std::min<int64_t>(E, rows * K);
  const int64_t per_expert = rows * K / used;
  std::vector<double> times;
  for (int r = 0; r < reps; ++r) {
    const double t0 = bench::now_s();
    for (int64_t l = 0; l < L; ++l) {
      kernels::linear_forward(s, x.data(), w.data(), y.data(), rows, D,
                              HQ * HD);
      kernels::linear_forward(s, x.data(), w.data(), y.data(), rows, D,
                              HKV * HD);
      kernels::linear_forward(s, x.data(), w.data(), y.data(), rows, D,
                              HKV * HD);
      kernels::linear_forward(s, x.data(), w.data(), y.data(), rows, HQ * HD,
                              D);
      kernels::linear_forward(s, x.data(), w.data(), y.data(), rows, D, E);
      for (int64_t e = 0; e < used; ++e) {
        kernels::linear_forward(s, x.data(), w.data(), y.data(), per_expert, D,
                                F);
        kernels::linear_forward(s, x.data(), w.data(), y.data(), per_expert, D,
                                F);
        kernels::linear_forward(s, x.data(), w.data(), y.data(), per_expert, F,
                                D);
      }
    }
    kernels::linear_forward(s, x.data(), head.data(), y.data(), head_rows, D,
                            V);
    times.push_back(bench::now_s() - t0);
  }
  return bench::median(times);
}

double prefill_s(const serve::served_model& m, int64_t n, int reps) {
  std::vector<int32_t> tokens(n);
  for (int64_t i = 0; i < n; ++i)
    tokens[i] = static_cast<int32_t>((i * 37) % V);
  std::vector<double> times;
  for (int r = 0; r < reps; ++r) {
    serve::kv_cache cache({L, HKV, HD, 16}, 64);
    serve::engine e(m, cache);
    std::vector<int32_t> blocks;
    cache.reserve(blocks, n);
    std::vector<float> logits;
    const double t0 = bench::now_s();
    (void)e.forward(
      {{tokens.data(), n, 0, &blocks, serve::seq_chunk::logits::last}}, logits);
    times.push_back(bench::now_s() - t0);
  }
  return bench::median(times);
}

// Seconds per decoded token of `batch` requests decoding together, each
// with a context from `start` on.
double decode_s(const serve::served_model& m, int64_t start, int64_t steps,
                int64_t batch = 1) {
  serve::kv_cache cache({L, HKV, HD, 16}, 64 * batch);
  serve::engine e(m, cache);
  // Each sequence its own random tokens, so that a batch's rows route to
  // experts as different requests' would.
  std::mt19937 rng(11);
  std::vector<std::vector<int32_t>> tokens(batch);
  for (auto& t : tokens)
    for (int64_t i = 0; i < start + steps; ++i)
      t.push_back(static_cast<int32_t>(rng() % V));
  std::vector<std::vector<int32_t>> blocks(batch);
  std::vector<float> logits;
  for (int64_t b = 0; b < batch; ++b) {
    cache.reserve(blocks[b], start + steps);
    (void)e.forward({{tokens[b].data(), start, 0, &blocks[b],
                      serve::seq_chunk::logits::last}},
                    logits);
  }
  const double t0 = bench::now_s();
  for (int64_t i = 0; i < steps; ++i) {
    std::vector<serve::seq_chunk> chunks;
    for (int64_t b = 0; b < batch; ++b)
      chunks.push_back({tokens[b].data() + start + i, 1, start + i, &blocks[b],
                        serve::seq_chunk::logits::last});
    (void)e.forward(chunks, logits);
  }
  return (bench::now_s() - t0) / double(steps * batch);
}

// Output tokens per second of `requests` requests, `concurrency` at a time
// (a new one joins as one leaves), through the scheduler.
// With `ranks` > 0, on that many expert-parallel rank actors.
double throughput(const serve::served_model& m, int64_t concurrency,
                  int64_t requests, int64_t prompt, int64_t output,
                  int64_t ranks = 0) {
  serve::kv_cache cache({L, HKV, HD, 16}, 2048);
  serve::engine e(m, cache);
  std::unique_ptr<serve::scheduler> sched;
  tutti_system_config cfg;
  caf::actor_system sys{cfg};
  std::unique_ptr<serve::ep_ranks> group;
  if (ranks == 0) {
    sched = std::make_unique<serve::scheduler>(
      e, cache, serve::batch_limits{512, concurrency});
  } else {
    serve::ep_options o;
    o.ranks = ranks;
    o.blocks_per_rank = 2048 / ranks;
    auto g = serve::ep_ranks::start(sys, m, o);
    if (!g)
      std::exit(1);
    group = std::move(g.value());
    std::vector<serve::kv_cache*> caches;
    for (int64_t r = 0; r < ranks; ++r)
      caches.push_back(&group->cache(r));
    auto* gp = group.get();
    sched = std::make_unique<serve::scheduler>(
      m, caches,
      [gp](const std::vector<serve::seq_chunk>& b, std::vector<float>& l) {
        return gp->forward(b, l);
      },
      serve::batch_limits{512, concurrency});
  }
  auto& s = *sched;
  int64_t added = 0, done = 0, tokens = 0;
  std::mt19937 rng(1);
  auto add = [&] {
    auto r = std::make_unique<serve::request>();
    r->id = static_cast<uint64_t>(added++);
    for (int64_t i = 0; i < prompt; ++i)
      r->prompt.push_back(static_cast<int32_t>(rng() % V));
    r->max_tokens = output;
    r->sampling.temperature = 0;
    r->sink = [&](serve::request_event ev) {
      tokens += static_cast<int64_t>(ev.tokens.size());
      done += ev.finish != serve::finish_reason::none;
    };
    s.add(std::move(r));
  };
  for (int64_t i = 0; i < std::min(concurrency, requests); ++i)
    add();
  const double t0 = bench::now_s();
  while (done < requests) {
    const int64_t before = done;
    if (!s.step().ok())
      std::exit(1);
    for (int64_t i = before; i < done && added < requests; ++i)
      add();
  }
  return double(tokens) / (bench::now_s() - t0);
}

// Seconds of the batched call and of the row-by-row calls, the fastest
// of `reps` interleaved runs each.
std::pair<double, double> linear_rows_s(int reps) {
  const int64_t m = 32, k = D, n = 2 * D;
  std::vector<float> x(m * k), w(n * k), y(m * n);
  std::mt19937 rng(2);
  std::uniform_real_distribution<float> u(-1, 1);
  for (auto& v : x)
    v = u(rng);
  for (auto& v : w)
    v = u(rng);
  const auto packed = kernels::pack_matrix(w.data(), n, k);
  double batched = 1e30, rows = 1e30;
  for (int r = 0; r < reps; ++r) {
    const double t0 = bench::now_s();
    kernels::packed_gemm(x.data(), packed, y.data(), m);
    const double t1 = bench::now_s();
    for (int64_t i = 0; i < m; ++i)
      kernels::packed_gemm(x.data() + i * k, packed, y.data() + i * n, 1);
    const double t2 = bench::now_s();
    batched = std::min(batched, t1 - t0);
    rows = std::min(rows, t2 - t1);
  }
  return {batched, rows};
}

// One core's read bandwidth from memory, bytes/s: the best of 5 sums
// over a buffer far larger than the caches (eight accumulators, so the
// loop waits on loads, not on additions).
double read_bandwidth() {
  std::vector<float> buf(size_t(1) << 28, 1.0f); // 1 GiB
  double best = 0, sink = 0;
  for (int r = 0; r < 5; ++r) {
    float acc[8] = {};
    const double t0 = bench::now_s();
    for (size_t i = 0; i < buf.size(); i += 8)
      for (int j = 0; j < 8; ++j)
        acc[j] += buf[i + j];
    const double t = bench::now_s() - t0;
    for (float a : acc)
      sink += a;
    best = std::max(best, double(buf.size() * sizeof(float)) / t);
  }
  if (sink < 0)
    std::printf("%f\n", sink);
  return best;
}

// One core's GEMM rate through the kernels' linear_forward, FLOP/s (a
// large square shape: the rate the machine reaches at all), in float32 or
// with bf16 inputs (oneDNN on bf16 units; float32 where there are none).
double gemm_rate(kernels::gemm_precision precision) {
  auto s = kernels::cpu_stream();
  s.gemm = precision;
  const int64_t n = 1024;
  std::vector<float> x(n * n, 0.01f), w(n * n, 0.02f), y(n * n);
  double best = 0;
  for (int r = 0; r < 4; ++r) {
    const double t0 = bench::now_s();
    kernels::linear_forward(s, x.data(), w.data(), y.data(), n, n, n);
    if (r > 0)
      best = std::max(best, 2.0 * n * n * n / (bench::now_s() - t0));
  }
  return best;
}

// `bench_serve limit`: a decode step of 32 requests (contexts 128-160)
// against the machine's limit for it, the bytes it must read over one
// core's bandwidth plus its FLOPs over one core's GEMM rate (the experts'
// at the bf16 rate when they are bf16). Every expert counts as read: 32
// tokens x top-2 leave one of 8 idle with probability (6/8)^32 = 1e-4.
int decode_limit() {
  const int64_t B = 32, ctx = 144; // the steps' mean context
  const double bw = read_bandwidth();
  const double rate = gemm_rate(kernels::gemm_precision::fp32);
  const double bf16_rate = gemm_rate(kernels::gemm_precision::bf16);
  const double attn_w = double(D) * HQ * HD + 2.0 * D * HKV * HD + HQ * HD * D;
  const double dense_w = L * (attn_w + D * E + 2.0 * D) + V * D + D;
  const double expert_w = double(L) * E * 3 * D * F;
  const double kv = double(B) * ctx * L * 2 * HKV * HD * 4;
  const double expert_flops = double(B) * L * 2 * K * 3.0 * D * F;
  const double other_flops =
    B * (L * (2 * (attn_w + D * E) + 4.0 * ctx * HQ * HD) + 2.0 * V * D);
  std::printf("one core: read bandwidth %.1f GB/s, GEMM rate %.1f GFLOP/s "
              "float32, %.1f GFLOP/s bf16 (%s); bf16 experts' kernel: %s\n",
              bw / 1e9, rate / 1e9, bf16_rate / 1e9,
              kernels::cpu_bf16_support().isa,
              kernels::bf16_gemm_kernel().c_str());
  std::printf("| experts | decode step, 32 requests (ms) | bytes read (MB) | "
              "FLOPs (M) | limit: bytes / bandwidth + FLOPs / rate (ms) | "
              "step / limit (target <= 1.5) |\n|---|---:|---:|---:|---:|---:|\n");
  const auto m = medium();
  for (auto dtype : {weight_dtype::fp32, weight_dtype::bf16, weight_dtype::int8}) {
    auto served = m;
    serve::quantize_experts(served, dtype);
    // int8: a byte a weight and a float32 scale per output row; bf16: two.
    const double experts =
      dtype == weight_dtype::int8   ? expert_w + double(L) * E * (2 * F + D) * 4
      : dtype == weight_dtype::bf16 ? expert_w * 2
                                    : expert_w * 4;
    const double bytes = dense_w * 4 + experts + kv;
    const double step = decode_s(served, 128, 32, B) * B;
    const double limit =
      bytes / bw + other_flops / rate
      + expert_flops / (dtype == weight_dtype::bf16 ? bf16_rate : rate);
    std::printf("| %s | %.3f | %.1f | %.0f | %.3f | %.2f |\n",
                to_string(dtype), step * 1e3, bytes / 1e6,
                (expert_flops + other_flops) / 1e6, limit * 1e3, step / limit);
  }
  // The kernel this CPU picks against the portable one (what a CPU
  // without AVX2 and FMA runs), on an expert's matrix and 32 rows.
  std::vector<float> w(F * D, 0.02f), x(B * D, 0.5f), y(B * F);
  const auto packed = kernels::pack_matrix(w.data(), F, D);
  double picked = 1e30, portable = 1e30;
  for (int r = 0; r < 20; ++r) {
    const double t0 = bench::now_s();
    kernels::packed_gemm(x.data(), packed, y.data(), B);
    const double t1 = bench::now_s();
    kernels::packed_gemm_portable_float(x.data(), D, packed, y.data(), F, B);
    picked = std::min(picked, t1 - t0);
    portable = std::min(portable, bench::now_s() - t1);
  }
  std::printf("packed_gemm, 32 rows 256 -> 512: this CPU's kernel %.1f us, "
              "the portable one %.1f us (%.1fx)\n",
              picked * 1e6, portable * 1e6, portable / picked);
  return 0;
}

} // namespace

int main(int argc, char** argv) {
  kernels::use_single_threaded_blas();
  if (argc > 1 && std::string(argv[1]) == "limit")
    return decode_limit();
  const auto m = medium();
  auto m_int8 = m;
  serve::quantize_experts(m_int8, weight_dtype::int8);
  // `bench_serve decode B [int8|bf16|w8a8]`: only decode steps at batch
  // B, for a profiler; w8a8: int8 experts times int8 rows.
  if (argc > 2 && std::string(argv[1]) == "decode") {
    const int64_t b = std::atoll(argv[2]);
    const std::string asked = argc > 3 ? argv[3] : "fp32";
    const bool w8a8 = asked == "w8a8";
    const auto dtype = from_string<weight_dtype>(w8a8 ? "int8" : asked);
    if (!dtype) {
      std::fprintf(stderr, "bench_serve: experts %s or w8a8, not %s\n",
                   enum_choices<weight_dtype>().c_str(), argv[3]);
      return 2;
    }
    auto served = m;
    serve::quantize_experts(served, *dtype);
    if (w8a8)
      (void)serve::use_int8_rows(served); // int8 experts: cannot fail
    std::printf("decode, %lld requests in one batch, experts %s: %.1f tok/s\n",
                static_cast<long long>(b), asked.c_str(),
                1.0 / decode_s(served, 128, 64, b));
    return 0;
  }
  const int64_t requests = argc > 1 ? std::atoll(argv[1]) : 32;
  bench::table t;
  const double pre = prefill_s(m, 128, 5);
  const double pre_blas = blas_projections_s(128, 1, 5);
  t.add("prefill 128 tokens (ms)", bench::fmt("%.2f", pre * 1e3),
        "its projections as OpenBLAS GEMMs (ms)",
        bench::fmt("%.2f", pre_blas * 1e3), pre / pre_blas);
  const double dec = decode_s(m, 128, 64);
  const double dec_blas = blas_projections_s(1, 1, 64);
  t.add("decode, 1 request, context 128-192 (tok/s)",
        bench::fmt("%.1f", 1.0 / dec),
        "its projections as 1-row OpenBLAS calls (tok/s)",
        bench::fmt("%.1f", 1.0 / dec_blas), dec_blas / dec);
  const double dec_int8 = decode_s(m_int8, 128, 64);
  t.add("decode, 1 request, experts int8 (tok/s)",
        bench::fmt("%.1f", 1.0 / dec_int8), "the same, experts fp32 (tok/s)",
        bench::fmt("%.1f", 1.0 / dec), dec / dec_int8);
  const double dec8 = decode_s(m, 128, 32, 8);
  t.add("decode, 8 requests in one batch, context 128-160 (tok/s)",
        bench::fmt("%.1f", 1.0 / dec8), "decode, 1 request (tok/s)",
        bench::fmt("%.1f", 1.0 / dec), dec / dec8);
  const double dec32 = decode_s(m, 128, 32, 32);
  t.add("decode, 32 requests in one batch, context 128-160 (tok/s)",
        bench::fmt("%.1f", 1.0 / dec32), "decode, 1 request (tok/s)",
        bench::fmt("%.1f", 1.0 / dec), dec / dec32);
  // Concurrency 1 is measured before and after the others and averaged:
  // these machines drift.
  const int64_t few = std::max<int64_t>(4, requests / 8);
  const double c1_before = throughput(m, 1, few, 64, 64);
  std::vector<std::pair<int64_t, double>> levels;
  for (int64_t c : {8, 32})
    levels.emplace_back(c, throughput(m, c, requests, 64, 64));
  const double c1 = 0.5 * (c1_before + throughput(m, 1, few, 64, 64));
  for (const auto& [c, tc] : levels)
    t.add("output tok/s at concurrency " + std::to_string(c)
            + " (prompt 64, output 64)",
          bench::fmt("%.1f", tc), "output tok/s at concurrency 1",
          bench::fmt("%.1f", c1), tc / c1);
  const double ep2 = throughput(m, 32, requests, 64, 64, 2);
  const double one = throughput(m, 32, requests, 64, 64);
  t.add("output tok/s at concurrency 32, 2 expert-parallel ranks",
        bench::fmt("%.1f", ep2), "output tok/s at concurrency 32, one engine",
        bench::fmt("%.1f", one), ep2 / one);
  const auto [batched, one_by_one] = linear_rows_s(200);
  t.add("kernels::packed_gemm, 32 rows 256 -> 512 in one call (us)",
        bench::fmt("%.1f", batched * 1e6), "32 one-row calls (us)",
        bench::fmt("%.1f", one_by_one * 1e6), batched / one_by_one);
  t.print();
  return 0;
}
