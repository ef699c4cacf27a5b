// Dispatch and combine on CUDA: the permute plan, row permutation and the
// gate-weighted combine, their backwards, and row gather/scatter.
//
// The plan is the CPU's stable counting sort by expert, done with one block
// per expert scanning the slots in order (a ballot-based block scan), so
// slot_of_row comes out identical to the CPU's. Every accumulation into a
// token's row goes through an explicit ordering (an inverse map of slots,
// or a radix sort by slot) instead of atomics, so rows add in slot order,
// as on the CPU, every run, wherever the placement put their experts.

#include <cub/device/device_radix_sort.cuh>

#include "cuda_common.cuh"

namespace tutti::kernels::cuda {
namespace {

constexpr int kPlanThreads = 256;

__global__ void plan_counts(const int32_t* topk_idx, int64_t slots,
                            int64_t* counts) {
  const int32_t e = int32_t(blockIdx.x);
  long long mine = 0;
  for (int64_t s = threadIdx.x; s < slots; s += blockDim.x)
    mine += topk_idx[s] == e;
  const long long total = block_sum(mine);
  if (threadIdx.x == 0)
    counts[e] = total;
}

// offsets[e] = sum of counts before e; offsets[experts] = total rows.
__global__ void plan_offsets(const int64_t* counts, int64_t experts,
                             int64_t* offsets) {
  int64_t acc = 0;
  for (int64_t e = 0; e < experts; ++e)
    offsets[e] = acc, acc += counts[e];
  offsets[experts] = acc;
}

// One block per expert: writes its slots, in slot order, from offsets[e].
// Chunks of blockDim slots; a slot's place in the chunk is the number of
// earlier matching slots (ballot within the warp, warp totals across).
__global__ void plan_fill(const int32_t* topk_idx, int64_t slots,
                          const int64_t* offsets, int32_t* slot_of_row) {
  __shared__ int warp_total[kPlanThreads / 32];
  const int32_t e = int32_t(blockIdx.x);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  int64_t next = offsets[e];
  for (int64_t base = 0; base < slots; base += blockDim.x) {
    const int64_t s = base + threadIdx.x;
    const bool mine = s < slots && topk_idx[s] == e;
    const unsigned ballot = __ballot_sync(0xffffffffu, mine);
    if (lane == 0)
      warp_total[warp] = __popc(ballot);
    __syncthreads();
    int before = __popc(ballot & ((1u << lane) - 1u)), chunk = 0;
    for (int w = 0; w < int(blockDim.x >> 5); ++w) {
      if (w < warp)
        before += warp_total[w];
      chunk += warp_total[w];
    }
    if (mine)
      slot_of_row[next + before] = int32_t(s);
    next += chunk;
    __syncthreads(); // warp_total is rewritten by the next chunk
  }
}

template <class T>
__global__ void permute_fwd(const T* x, const int32_t* slot_of_row, T* out,
                            int64_t rows, int64_t k, int64_t dim) {
  TUTTI_GRID_STRIDE(i, rows * dim) {
    const int64_t r = i / dim, c = i % dim;
    out[i] = x[(int64_t(slot_of_row[r]) / k) * dim + c];
  }
}

// row_of_slot[slot] = r for every routed row (the slots are distinct).
__global__ void invert_plan(const int32_t* slot_of_row, int64_t rows,
                            int32_t* row_of_slot) {
  TUTTI_GRID_STRIDE(r, rows) row_of_slot[slot_of_row[r]] = int32_t(r);
}

__global__ void remap_kernel(int32_t* topk_idx, int64_t slots,
                             const int32_t* slot_of_expert) {
  TUTTI_GRID_STRIDE(s, slots) {
    const int32_t e = topk_idx[s];
    if (e >= 0)
      topk_idx[s] = slot_of_expert[e];
  }
}

template <class T>
__global__ void combine_fwd(const T* y, const int32_t* slot_of_row,
                            const T* topk_gate, const int32_t* token_rows,
                            T* out, int64_t n, int64_t k, int64_t dim) {
  TUTTI_GRID_STRIDE(i, n * dim) {
    const int64_t t = i / dim, c = i % dim;
    T acc = T(0);
    for (int64_t q = 0; q < k; ++q) { // slot order; -1: dropped
      const int32_t r = token_rows[t * k + q];
      if (r < 0)
        continue;
      acc += topk_gate[slot_of_row[r]] * y[int64_t(r) * dim + c];
    }
    out[i] = acc;
  }
}

// One block per routed row: dy = gate * dout[t]; dgate = <dout[t], y[r]>.
template <class T>
__global__ void combine_bwd(const T* dout, const T* y,
                            const int32_t* slot_of_row, const T* topk_gate,
                            T* dy, T* dgate, int64_t k, int64_t dim) {
  const int64_t r = blockIdx.x;
  const int64_t slot = slot_of_row[r];
  const T g = topk_gate[slot];
  const T* d = dout + (slot / k) * dim;
  const T* yr = y + r * dim;
  double dot = 0.0;
  for (int64_t c = threadIdx.x; c < dim; c += blockDim.x) {
    dy[r * dim + c] = g * d[c];
    dot += double(d[c]) * double(yr[c]);
  }
  dot = block_sum(dot);
  if (threadIdx.x == 0)
    dgate[slot] = T(dot);
}

template <class T>
__global__ void gather_kernel(const T* src, const int64_t* index, T* dst,
                              int64_t rows, int64_t dim) {
  TUTTI_GRID_STRIDE(i, rows * dim) dst[i] = src[index[i / dim] * dim + i % dim];
}

template <class T>
__global__ void scatter_kernel(const T* src, const int64_t* index, T* dst,
                               int64_t rows, int64_t dim) {
  TUTTI_GRID_STRIDE(i, rows * dim) dst[index[i / dim] * dim + i % dim] = src[i];
}

// -- add_rows_by_key ---------------------------------------------------------------

// Sort keys: keys / divisor, or the whole key when the rows of one
// destination must add in key order (then divided in add_runs).
__global__ void make_keys(const int32_t* keys, int64_t divisor, int64_t rows,
                          bool whole_key, int32_t* key_out,
                          int32_t* index_out) {
  TUTTI_GRID_STRIDE(i, rows) {
    key_out[i] = whole_key ? keys[i] : int32_t(keys[i] / divisor);
    index_out[i] = int32_t(i);
  }
}

// Thread per (sorted position p, column) where p starts a run of one
// destination (key / divisor, divisor 1 when the keys are divided
// already): adds the run's rows in sorted order (the sort is stable).
template <class T>
__global__ void add_runs(const int32_t* key, const int32_t* index, const T* src,
                         T* dst, int64_t rows, int64_t dim, int64_t divisor) {
  TUTTI_GRID_STRIDE(i, rows * dim) {
    const int64_t p = i / dim, c = i % dim;
    const int64_t to = key[p] / divisor;
    if (p > 0 && key[p - 1] / divisor == to)
      continue;
    T* d = dst + to * dim + c;
    T acc = *d;
    for (int64_t q = p; q < rows && key[q] / divisor == to; ++q)
      acc += src[int64_t(index[q]) * dim + c];
    *d = acc;
  }
}

} // namespace

template <class T>
void add_rows_by_key(const stream& s, const int32_t* keys, int64_t divisor,
                     const T* src, T* dst, int64_t rows, int64_t dim,
                     bool in_key_order) {
  if (rows == 0 || dim == 0)
    return;
  const int items = as_int(rows, "add_rows_by_key rows");
  size_t sort_bytes = 0;
  TUTTI_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(
    nullptr, sort_bytes, static_cast<const int32_t*>(nullptr),
    static_cast<int32_t*>(nullptr), static_cast<const int32_t*>(nullptr),
    static_cast<int32_t*>(nullptr), items, 0, 32, raw(s)));
  carver size;
  for (int i = 0; i < 4; ++i)
    size.take<int32_t>(rows);
  size.take<unsigned char>(int64_t(sort_bytes));
  carver cut(scratch(s, size.bytes()));
  int32_t* key_in = cut.take<int32_t>(rows);
  int32_t* index_in = cut.take<int32_t>(rows);
  int32_t* key_out = cut.take<int32_t>(rows);
  int32_t* index_out = cut.take<int32_t>(rows);
  void* sort_temp = cut.take<unsigned char>(int64_t(sort_bytes));
  make_keys<<<grid_for(rows), kThreads, 0, raw(s)>>>(
    keys, divisor, rows, in_key_order, key_in, index_in);
  TUTTI_CUDA_LAUNCH_CHECK();
  TUTTI_CUDA_CHECK(
    cub::DeviceRadixSort::SortPairs(sort_temp, sort_bytes, key_in, key_out,
                                    index_in, index_out, items, 0, 32, raw(s)));
  add_runs<<<grid_for(rows * dim), kThreads, 0, raw(s)>>>(
    key_out, index_out, src, dst, rows, dim, in_key_order ? divisor : 1);
  TUTTI_CUDA_LAUNCH_CHECK();
}

int64_t permute_plan(const stream& s, const int32_t* topk_idx, int64_t n,
                     int64_t experts, int64_t k, int32_t* slot_of_row,
                     int64_t* counts) {
  if (experts == 0)
    return 0;
  const int64_t slots = n * k;
  as_int(slots, "permute_plan slots"); // slot_of_row holds int32
  auto* offsets = static_cast<int64_t*>(
    scratch(s, sizeof(int64_t) * (experts + 1)));
  const int blocks = as_int(experts, "experts");
  plan_counts<<<blocks, kPlanThreads, 0, raw(s)>>>(topk_idx, slots, counts);
  TUTTI_CUDA_LAUNCH_CHECK();
  plan_offsets<<<1, 1, 0, raw(s)>>>(counts, experts, offsets);
  TUTTI_CUDA_LAUNCH_CHECK();
  plan_fill<<<blocks, kPlanThreads, 0, raw(s)>>>(topk_idx, slots, offsets,
                                                 slot_of_row);
  TUTTI_CUDA_LAUNCH_CHECK();
  return value_to_host(s, offsets + experts);
}

void remap_experts(const stream& s, int32_t* topk_idx, int64_t slots,
                   const int32_t* slot_of_expert) {
  if (slots == 0)
    return;
  remap_kernel<<<grid_for(slots), kThreads, 0, raw(s)>>>(topk_idx, slots,
                                                         slot_of_expert);
  TUTTI_CUDA_LAUNCH_CHECK();
}

template <class T>
void permute_rows(const stream& s, const T* x, const int32_t* slot_of_row,
                  T* out, int64_t rows, int64_t k, int64_t dim) {
  if (rows * dim == 0)
    return;
  permute_fwd<<<grid_for(rows * dim), kThreads, 0, raw(s)>>>(x, slot_of_row,
                                                             out, rows, k, dim);
  TUTTI_CUDA_LAUNCH_CHECK();
}

template <class T>
void permute_rows_backward(const stream& s, const T* drows,
                           const int32_t* slot_of_row, T* dx, int64_t rows,
                           int64_t k, int64_t dim) {
  // The API gives no token count, so the rows are grouped by token with a
  // sort by slot rather than an inverse map of n * k slots: a token's rows
  // add in slot order.
  add_rows_by_key(s, slot_of_row, k, drows, dx, rows, dim, true);
}

template <class T>
void unpermute_combine(const stream& s, const T* y, const int32_t* slot_of_row,
                       const T* topk_gate, T* out, int64_t rows, int64_t n,
                       int64_t k, int64_t dim) {
  if (n * dim == 0)
    return;
  const int64_t slots = n * k;
  auto* token_rows = static_cast<int32_t*>(scratch(s, sizeof(int32_t) * slots));
  // 0xff bytes: every entry -1 (no row) until a row claims its slot.
  TUTTI_CUDA_CHECK(
    cudaMemsetAsync(token_rows, 0xff, sizeof(int32_t) * slots, raw(s)));
  if (rows > 0) {
    invert_plan<<<grid_for(rows), kThreads, 0, raw(s)>>>(slot_of_row, rows,
                                                         token_rows);
    TUTTI_CUDA_LAUNCH_CHECK();
  }
  combine_fwd<<<grid_for(n * dim), kThreads, 0, raw(s)>>>(
    y, slot_of_row, topk_gate, token_rows, out, n, k, dim);
  TUTTI_CUDA_LAUNCH_CHECK();
}

template <class T>
void unpermute_combine_backward(const stream& s, const T* dout, const T* y,
                                const int32_t* slot_of_row, const T* topk_gate,
                                T* dy, T* dgate, int64_t rows, int64_t n,
                                int64_t k, int64_t dim) {
  // Slots without a row (dropped) keep the zero: they contributed nothing.
  if (n * k > 0)
    TUTTI_CUDA_CHECK(cudaMemsetAsync(dgate, 0, sizeof(T) * n * k, raw(s)));
  if (rows == 0)
    return;
  combine_bwd<<<as_int(rows, "rows"), kThreads, 0, raw(s)>>>(
    dout, y, slot_of_row, topk_gate, dy, dgate, k, dim);
  TUTTI_CUDA_LAUNCH_CHECK();
}

template <class T>
void gather_rows(const stream& s, const T* src, const int64_t* index, T* dst,
                 int64_t rows, int64_t dim) {
  if (rows * dim == 0)
    return;
  gather_kernel<<<grid_for(rows * dim), kThreads, 0, raw(s)>>>(src, index, dst,
                                                               rows, dim);
  TUTTI_CUDA_LAUNCH_CHECK();
}

// Indices are expected distinct (a permutation); with repeats the winner
// is unspecified, unlike the CPU's last-one-wins.
template <class T>
void scatter_rows(const stream& s, const T* src, const int64_t* index, T* dst,
                  int64_t rows, int64_t dim) {
  if (rows * dim == 0)
    return;
  scatter_kernel<<<grid_for(rows * dim), kThreads, 0, raw(s)>>>(src, index, dst,
                                                                rows, dim);
  TUTTI_CUDA_LAUNCH_CHECK();
}

// add_rows_by_key is this backend's own helper (cuda_common.cuh), not an op.
template void add_rows_by_key<float>(const stream&, const int32_t*, int64_t,
                                     const float*, float*, int64_t, int64_t,
                                     bool);
template void add_rows_by_key<double>(const stream&, const int32_t*, int64_t,
                                      const double*, double*, int64_t, int64_t,
                                      bool);

#define TUTTI_OPS_FAMILY TUTTI_OPS_DISPATCH
#include "../instantiate_ops.inc"

} // namespace tutti::kernels::cuda
