// Dispatch and combine: turning the router's (token, slot) assignments into
// rows grouped by expert, and back.
//
// The plan is a counting sort by expert over slots in (token, slot) order,
// i.e. stable. Whatever adds into a token's row (the combine, the backward
// of the permutation) does so in slot order, the router's ranking, not in
// row order: rows are grouped by where the experts live (the placement),
// and the sum must not depend on it.

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

void remap_experts(const stream&, int32_t* topk_idx, int64_t slots,
                   const int32_t* slot_of_expert) {
  for (int64_t s = 0; s < slots; ++s)
    if (topk_idx[s] >= 0)
      topk_idx[s] = slot_of_expert[topk_idx[s]];
}

template <class T>
void permute_rows(const stream&, const T* x, const int32_t* slot_of_row, T* out,
                  int64_t rows, int64_t k, int64_t dim) {
  for (int64_t r = 0; r < rows; ++r)
    std::memcpy(out + r * dim, x + (slot_of_row[r] / k) * dim, sizeof(T) * dim);
}

namespace {

// The rows in slot order (each slot has at most one row).
std::vector<int32_t> rows_by_slot(const int32_t* slot_of_row, int64_t rows) {
  std::vector<int32_t> order(rows);
  for (int64_t r = 0; r < rows; ++r)
    order[r] = static_cast<int32_t>(r);
  std::sort(order.begin(), order.end(), [&](int32_t a, int32_t b) {
    return slot_of_row[a] < slot_of_row[b];
  });
  return order;
}

} // namespace

template <class T>
void permute_rows_backward(const stream&, const T* drows,
                           const int32_t* slot_of_row, T* dx, int64_t rows,
                           int64_t k, int64_t dim) {
  for (const int32_t r : rows_by_slot(slot_of_row, rows)) {
    T* d = dx + (slot_of_row[r] / k) * dim;
    const T* g = drows + int64_t(r) * dim;
    for (int64_t j = 0; j < dim; ++j)
      d[j] += g[j];
  }
}

template <class T>
void unpermute_combine(const stream&, const T* y, const int32_t* slot_of_row,
                       const T* topk_gate, T* out, int64_t rows, int64_t n,
                       int64_t k, int64_t dim) {
  std::fill(out, out + n * dim, T(0));
  for (const int32_t r : rows_by_slot(slot_of_row, rows)) {
    const int64_t slot = slot_of_row[r];
    const T g = topk_gate[slot];
    T* o = out + (slot / k) * dim;
    const T* yr = y + int64_t(r) * dim;
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
