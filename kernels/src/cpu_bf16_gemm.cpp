// bf16 GEMMs on the CPU's matrix units (train.gemm_precision: bf16), through
// oneDNN's matmul: AMX tiles or AVX512-BF16 dot products, whichever oneDNN
// finds. The rule is the CUDA backend's (cuda_linear.cu): the float inputs
// are rounded to bfloat16 (nearest even), multiplied with float32
// accumulation, and written float32.
//
// oneDNN runs on the calling thread only (one OpenMP thread), as OpenBLAS
// does here: a rank owns its core, and with one thread the blocking and the
// summation order depend only on the sizes, so results are reproducible.

#include "cpu_blas.hpp"

#include <oneapi/dnnl/dnnl.h>
#include <omp.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <string>
#include <tuple>
#include <vector>

#include "tutti/kernels/device_memory.hpp"
#include "tutti/kernels/stream.hpp"

namespace tutti::kernels::detail {

namespace {

[[noreturn]] void throw_dnnl_error(dnnl_status_t status, const char* call,
                                   const char* file, int line) {
  throw device_error(std::string("oneDNN: ") + call + " failed (status "
                     + std::to_string(static_cast<int>(status)) + ") at " + file
                     + ":" + std::to_string(line));
}

#define TUTTI_DNNL_CHECK(call)                                                 \
  do {                                                                         \
    const dnnl_status_t tutti_dnnl_status_ = (call);                           \
    if (tutti_dnnl_status_ != dnnl_success)                                    \
      throw_dnnl_error(tutti_dnnl_status_, #call, __FILE__, __LINE__);         \
  } while (false)

bool has_isa(dnnl_cpu_isa_t isa, dnnl_cpu_isa_t wanted) {
  return (static_cast<unsigned>(isa) & static_cast<unsigned>(wanted))
         == static_cast<unsigned>(wanted);
}

const char* isa_name(dnnl_cpu_isa_t isa) {
  if (has_isa(isa, dnnl_cpu_isa_avx512_core_amx))
    return "avx512_core_amx";
  if (has_isa(isa, dnnl_cpu_isa_avx512_core_bf16))
    return "avx512_core_bf16";
  if (has_isa(isa, dnnl_cpu_isa_avx512_core))
    return "avx512_core";
  if (has_isa(isa, dnnl_cpu_isa_avx2))
    return "avx2";
  return "below avx2";
}

// One matmul shape's primitive and its memory objects, whose data handles
// are set per call.
struct matmul_entry {
  dnnl_primitive_t primitive = nullptr;
  dnnl_memory_t src = nullptr, weights = nullptr, dst = nullptr;
};

// The calling thread's engine, stream, primitives and bf16 staging.
struct thread_state {
  dnnl_engine_t engine = nullptr;
  dnnl_stream_t stream = nullptr;
  // (m, n, k, A transposed, B transposed, ldc, accumulate)
  std::map<std::tuple<int64_t, int64_t, int64_t, bool, bool, int64_t, bool>,
           matmul_entry>
    matmuls;
  std::vector<uint16_t> a, b;
  std::vector<float> c; // the product's rows when m is padded

  thread_state() {
    omp_set_num_threads(1); // this thread's OpenMP teams: itself only
    TUTTI_DNNL_CHECK(dnnl_engine_create(&engine, dnnl_cpu, 0));
    TUTTI_DNNL_CHECK(
      dnnl_stream_create(&stream, engine, dnnl_stream_default_flags));
  }
  ~thread_state() {
    clear();
    dnnl_stream_destroy(stream);
    dnnl_engine_destroy(engine);
  }
  void clear() {
    for (auto& [key, e] : matmuls) {
      dnnl_memory_destroy(e.src);
      dnnl_memory_destroy(e.weights);
      dnnl_memory_destroy(e.dst);
      dnnl_primitive_destroy(e.primitive);
    }
    matmuls.clear();
  }

  // Shapes are padded to sizes that repeat (padded_size); past this many
  // the cache starts again rather than grow without bound.
  static constexpr size_t max_shapes = 512;

  matmul_entry& matmul(int64_t m, int64_t n, int64_t k, bool ta, bool tb,
                       int64_t ldc, bool accumulate) {
    const auto key = std::tuple{m, n, k, ta, tb, ldc, accumulate};
    if (auto it = matmuls.find(key); it != matmuls.end())
      return it->second;
    if (matmuls.size() >= max_shapes)
      clear();
    dnnl_memory_desc_t src_md, weights_md, dst_md;
    const dnnl_dims_t src_dims = {m, k}, weights_dims = {k, n},
                      dst_dims = {m, n}, dst_strides = {ldc, 1};
    // op(A) is [m, k] and op(B) [k, n], each staged as it is stored: a
    // transposed one in format ba.
    TUTTI_DNNL_CHECK(dnnl_memory_desc_init_by_tag(
      &src_md, 2, src_dims, dnnl_bf16, ta ? dnnl_ba : dnnl_ab));
    TUTTI_DNNL_CHECK(dnnl_memory_desc_init_by_tag(
      &weights_md, 2, weights_dims, dnnl_bf16, tb ? dnnl_ba : dnnl_ab));
    TUTTI_DNNL_CHECK(dnnl_memory_desc_init_by_strides(&dst_md, 2, dst_dims,
                                                      dnnl_f32, dst_strides));
    dnnl_matmul_desc_t desc;
    TUTTI_DNNL_CHECK(
      dnnl_matmul_desc_init(&desc, &src_md, &weights_md, nullptr, &dst_md));
    dnnl_primitive_attr_t attr;
    TUTTI_DNNL_CHECK(dnnl_primitive_attr_create(&attr));
    dnnl_post_ops_t post_ops = nullptr;
    if (accumulate) { // C += A B: oneDNN's sum post-op, in float32
      TUTTI_DNNL_CHECK(dnnl_post_ops_create(&post_ops));
      TUTTI_DNNL_CHECK(dnnl_post_ops_append_sum(post_ops, 1.0f));
      TUTTI_DNNL_CHECK(dnnl_primitive_attr_set_post_ops(attr, post_ops));
    }
    dnnl_primitive_desc_t pd;
    TUTTI_DNNL_CHECK(
      dnnl_primitive_desc_create(&pd, &desc, attr, engine, nullptr));
    matmul_entry e;
    TUTTI_DNNL_CHECK(dnnl_primitive_create(&e.primitive, pd));
    dnnl_primitive_desc_destroy(pd);
    if (post_ops != nullptr)
      dnnl_post_ops_destroy(post_ops);
    dnnl_primitive_attr_destroy(attr);
    TUTTI_DNNL_CHECK(
      dnnl_memory_create(&e.src, &src_md, engine, DNNL_MEMORY_NONE));
    TUTTI_DNNL_CHECK(
      dnnl_memory_create(&e.weights, &weights_md, engine, DNNL_MEMORY_NONE));
    TUTTI_DNNL_CHECK(
      dnnl_memory_create(&e.dst, &dst_md, engine, DNNL_MEMORY_NONE));
    return matmuls.emplace(key, e).first->second;
  }
};

thread_state& state() {
  thread_local thread_state s;
  return s;
}

// Rounded up to one of eight sizes an octave, at least 16. An expert's
// rows change every step, and so do the m and the inner dimension of its
// products; each shape's primitive is JIT-compiled once, so the shapes
// are padded (with zeros, which add nothing) to sizes that repeat.
// Powers of two, and multiples of an eighth of theirs, stay as they are.
int64_t padded_size(int64_t v) {
  if (v <= 16)
    return 16;
  const int64_t octave = int64_t{1} << (63 - __builtin_clzll(v - 1));
  const int64_t step = octave / 8;
  return (v + step - 1) / step * step;
}

// rows x cols floats, `ld` apart, rounded to bfloat16 into a rows_to x
// cols_to buffer, the rest zeros.
void stage(const float* src, int64_t rows, int64_t cols, int64_t ld,
           int64_t rows_to, int64_t cols_to, std::vector<uint16_t>& dst) {
  dst.resize(static_cast<size_t>(rows_to * cols_to));
  round_rows_to_bf16(src, rows, cols, ld, dst.data(), cols_to);
  if (cols_to > cols)
    for (int64_t r = 0; r < rows; ++r)
      std::fill_n(dst.data() + r * cols_to + cols, cols_to - cols, 0);
  std::fill(dst.begin() + rows * cols_to, dst.end(), 0);
}

} // namespace

void gemm_bf16(bool ta, bool tb, int64_t m, int64_t n, int64_t kk,
               const float* a, int64_t lda, const float* b, int64_t ldb,
               float beta, float* c, int64_t ldc) {
  if (m == 0 || n == 0)
    return;
  if (kk == 0) {
    gemm(ta, tb, m, n, kk, 1.0f, a, lda, b, ldb, beta, c, ldc);
    return;
  }
  auto& s = state();
  // Each operand rounded to bf16 as it is stored (rows of its leading
  // dimension, packed): O(m k + k n) against the product's O(m n k); m
  // and k padded (padded_size).
  const int64_t M = padded_size(m), K = padded_size(kk);
  if (ta)
    stage(a, kk, m, lda, K, M, s.a);
  else
    stage(a, m, kk, lda, M, K, s.a);
  if (tb)
    stage(b, n, kk, ldb, n, K, s.b);
  else
    stage(b, kk, n, ldb, K, n, s.b);
  // The product's rows: c itself, or a buffer of M rows holding c's.
  const bool accumulate = beta != 0.0f;
  float* out = c;
  int64_t ld_out = ldc;
  if (M != m) {
    // The padding's rows are never read back: left as they are.
    s.c.resize(static_cast<size_t>(M * n));
    if (accumulate)
      for (int64_t r = 0; r < m; ++r)
        std::copy_n(c + r * ldc, n, s.c.data() + r * n);
    out = s.c.data();
    ld_out = n;
  }
  auto& e = s.matmul(M, n, K, ta, tb, ld_out, accumulate);
  TUTTI_DNNL_CHECK(dnnl_memory_set_data_handle(e.src, s.a.data()));
  TUTTI_DNNL_CHECK(dnnl_memory_set_data_handle(e.weights, s.b.data()));
  TUTTI_DNNL_CHECK(dnnl_memory_set_data_handle(e.dst, out));
  const dnnl_exec_arg_t args[] = {{DNNL_ARG_SRC, e.src},
                                  {DNNL_ARG_WEIGHTS, e.weights},
                                  {DNNL_ARG_DST, e.dst}};
  TUTTI_DNNL_CHECK(dnnl_primitive_execute(e.primitive, s.stream, 3, args));
  TUTTI_DNNL_CHECK(dnnl_stream_wait(s.stream));
  if (out != c)
    for (int64_t r = 0; r < m; ++r)
      std::copy_n(out + r * n, n, c + r * ldc);
}

} // namespace tutti::kernels::detail

namespace tutti::kernels {

cpu_bf16_status cpu_bf16_support() {
  static const cpu_bf16_status support = [] {
    const dnnl_cpu_isa_t isa = dnnl_get_effective_cpu_isa();
    return cpu_bf16_status{detail::has_isa(isa, dnnl_cpu_isa_avx512_core_bf16),
                           detail::isa_name(isa)};
  }();
  return support;
}

} // namespace tutti::kernels
