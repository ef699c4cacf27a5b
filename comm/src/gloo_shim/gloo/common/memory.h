#pragma once
// Debian's libgloo-dev (0.0~git20220518) installs gloo/transport/tcp/pair.h
// and unbound_buffer.h but not the gloo/common/memory.h they include.
// gloo_abort.cpp needs them only for the offsets of Pair::fd_ and Pair::m_
// and for UnboundBuffer::signalException, which these pointer wrappers
// (each one smart pointer, as in Gloo, declared after those members) do not
// change. So minimal stand-ins do; this directory is on the include path of
// that one file only.

#include <memory>

namespace gloo {

template <typename T>
class NonOwningPtr {
  std::shared_ptr<T> ptr_;
};

template <typename T>
class ShareableNonOwningPtr {
public:
  std::shared_ptr<T> ptr_;
};

template <typename T>
class WeakNonOwningPtr {
public:
  WeakNonOwningPtr() = default;
  explicit WeakNonOwningPtr(const ShareableNonOwningPtr<T>& p)
    : ptr_(p.ptr_) {}

private:
  std::weak_ptr<T> ptr_;
};

} // namespace gloo
