#pragma once
// tensor<T>: a flat array in the memory of a stream's device: a host vector
// for a cpu stream, cudaMalloc'd memory for a cuda stream. The model, the
// expert shards and their checkpoints hold their weights, moments and
// activations in these, so the same code trains on a CPU or a GPU; only
// what must be read on the host (counts, losses, snapshots) is copied
// there, explicitly.
//
// Every call that touches memory takes the stream: on CUDA it orders the
// work (growth copies, fills) after the kernels queued before it. A tensor
// stays on the kind of device it was first sized for.

#include <algorithm>
#include <cstddef>
#include <stdexcept>
#include <vector>

#include "tutti/kernels/device_memory.hpp"

namespace tutti::kernels {

template <class T>
class tensor {
public:
  tensor() = default;
  tensor(const stream& s, size_t n) { resize(s, n); }

  T* data() { return on_device_ ? device_.data() : host_.data(); }
  const T* data() const { return on_device_ ? device_.data() : host_.data(); }
  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  bool on_device() const { return on_device_; }

  // Keeps the first min(size, n) values; the rest are unspecified (zero on
  // the CPU). Capacity only grows.
  void resize(const stream& s, size_t n) {
    reserve(s, n);
    if (!on_device_)
      host_.resize(n);
    size_ = n;
  }

  // Room for n values without reallocating (the dispatch buffers are sized
  // up front so that steps do not grow them).
  void reserve(const stream& s, size_t n) {
    place(s);
    if (!on_device_) {
      host_.reserve(n);
    } else if (n > device_.size()) {
      device_array<T> grown(std::max(n, device_.size() * 3 / 2));
      copy_on(s, grown.data(), device_.data(), size_ * sizeof(T));
      wait(s); // the old block is freed below
      device_ = std::move(grown);
    }
  }

  // n zeros.
  void zeros(const stream& s, size_t n) {
    resize(s, n);
    zero_bytes(s, data(), n * sizeof(T));
  }

  // n values from `src`, in the memory of s's device.
  void assign(const stream& s, const T* src, size_t n) {
    resize(s, n);
    copy_on(s, data(), src, n * sizeof(T));
  }
  void assign(const stream& s, const tensor& other) {
    assign(s, other.data(), other.size());
  }

  // n values from host memory, from `offset` on (growing to fit).
  void upload(const stream& s, const T* host, size_t n, size_t offset = 0) {
    if (offset + n > size_)
      resize(s, offset + n);
    kernels::upload(s, data() + offset, host, n * sizeof(T));
  }
  void upload(const stream& s, const std::vector<T>& host) {
    resize(s, host.size());
    upload(s, host.data(), host.size());
  }

  // n values from `offset` into host memory; complete on return.
  void download(const stream& s, T* host, size_t n, size_t offset = 0) const {
    if (offset + n > size_)
      throw std::out_of_range("tensor::download past the end");
    kernels::download(s, host, data() + offset, n * sizeof(T));
  }
  std::vector<T> to_host(const stream& s) const {
    std::vector<T> out(size_);
    download(s, out.data(), size_);
    return out;
  }

  // The values readable on the host: the tensor's own memory on a CPU,
  // else a copy in `staging`.
  const T* host_view(const stream& s, std::vector<T>& staging) const {
    if (!on_device_)
      return host_.data();
    staging.resize(size_);
    download(s, staging.data(), size_);
    return staging.data();
  }

private:
  void place(const stream& s) {
    const bool device = s.device == device_kind::cuda;
    if (size_ == 0 && host_.capacity() == 0 && device_.size() == 0)
      on_device_ = device;
    else if (device != on_device_)
      throw std::logic_error("tensor: used with a stream of another device");
  }

  std::vector<T> host_;
  device_array<T> device_; // its size() is the capacity
  size_t size_ = 0;
  bool on_device_ = false;
};

} // namespace tutti::kernels
