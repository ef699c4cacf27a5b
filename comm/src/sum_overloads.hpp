#pragma once
// Internal: the three all_reduce_sum overloads of communicator forwarded
// to one member template, `reduce<T>(T*, size_t)`, of the implementation
// (Gloo's and the in-process one sum every element type the same way).

#include <cstddef>
#include <cstdint>

#include "tutti/comm/communicator.hpp"

namespace tutti::comm {

template <class Impl>
class sums_by_template : public communicator {
public:
  status all_reduce_sum(float* data, size_t count) override {
    return impl().reduce(data, count);
  }
  status all_reduce_sum(double* data, size_t count) override {
    return impl().reduce(data, count);
  }
  status all_reduce_sum(int64_t* data, size_t count) override {
    return impl().reduce(data, count);
  }

private:
  Impl& impl() { return static_cast<Impl&>(*this); }
};

} // namespace tutti::comm
