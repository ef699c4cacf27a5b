// Dispatch and combine: turning the router's (token, slot) assignments into
// rows grouped by expert, and back.
//
// The plan is a counting sort by expert over slots in (token, slot) order,
// i.e. stable. Each op walks its rows in index order, so every row that
// adds into the same token does so in the same order on every run.

#include "backends.hpp"

#include <algorithm>
#include <cstring>
#include <vector>

namespace tutti::kernels::cpu {

int64_t permute_plan(const stream&, const int32_t* topk_idx, int64_t n,
                     int64_t experts, int64_t k, int32_t* slot_of_row,
                     int64_t* counts) {
  std::fill(counts, counts + experts, int64_t(0));
  for (int64_t s = 0; s < n * k; ++s)
    if (topk_idx[s] >= 0)
      ++counts[topk_idx[s]]; // -1: dropped by capacity
  std::vector<int64_t> next(experts);
  int64_t total = 0;
  for (int64_t e = 0; e < experts; ++e)
    next[e] = total, total += counts[e];
  for (int64_t s = 0; s < n * k; ++s)
    if (topk_idx[s] >= 0)
      slot_of_row[next[topk_idx[s]]++] = static_cast<int32_t>(s);
  return total;
}

template <class T>
void permute_rows(const stream&, const T* x, const int32_t* slot_of_row, T* out,
                  int64_t rows, int64_t k, int64_t dim) {
  for (int64_t r = 0; r < rows; ++r)
    std::memcpy(out + r * dim, x + (slot_of_row[r] / k) * dim, sizeof(T) * dim);
}

template <class T>
void permute_rows_backward(const stream&, const T* drows,
                           const int32_t* slot_of_row, T* dx, int64_t rows,
                           int64_t k, int64_t dim) {
  for (int64_t r = 0; r < rows; ++r) {
    T* d = dx + (slot_of_row[r] / k) * dim;
    const T* g = drows + r * dim;
    for (int64_t j = 0; j < dim; ++j)
      d[j] += g[j];
  }
}

template <class T>
void unpermute_combine(const stream&, const T* y, const int32_t* slot_of_row,
                       const T* topk_gate, T* out, int64_t rows, int64_t n,
                       int64_t k, int64_t dim) {
  std::fill(out, out + n * dim, T(0));
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t slot = slot_of_row[r];
    const T g = topk_gate[slot];
    T* o = out + (slot / k) * dim;
    const T* yr = y + r * dim;
    for (int64_t j = 0; j < dim; ++j)
      o[j] += g * yr[j];
  }
}

template <class T>
void unpermute_combine_backward(const stream&, const T* dout, const T* y,
                                const int32_t* slot_of_row, const T* topk_gate,
                                T* dy, T* dgate, int64_t rows, int64_t n,
                                int64_t k, int64_t dim) {
  // Slots without a row (dropped) keep the zero: they contributed nothing.
  std::fill(dgate, dgate + n * k, T(0));
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t slot = slot_of_row[r];
    const T g = topk_gate[slot];
    const T* d = dout + (slot / k) * dim;
    const T* yr = y + r * dim;
    T* dyr = dy + r * dim;
    double dot = 0.0;
    for (int64_t j = 0; j < dim; ++j) {
      dyr[j] = g * d[j];
      dot += double(d[j]) * double(yr[j]);
    }
    dgate[slot] = T(dot);
  }
}

template <class T>
void gather_rows(const stream&, const T* src, const int64_t* index, T* dst,
                 int64_t rows, int64_t dim) {
  for (int64_t i = 0; i < rows; ++i)
    std::memcpy(dst + i * dim, src + index[i] * dim, sizeof(T) * dim);
}

template <class T>
void scatter_rows(const stream&, const T* src, const int64_t* index, T* dst,
                  int64_t rows, int64_t dim) {
  for (int64_t i = 0; i < rows; ++i)
    std::memcpy(dst + index[i] * dim, src + i * dim, sizeof(T) * dim);
}

#define TUTTI_OPS_FAMILY TUTTI_OPS_DISPATCH
#include "instantiate_ops.inc"

} // namespace tutti::kernels::cpu
