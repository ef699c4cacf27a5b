#pragma once
// Debian's libgloo-dev (0.0~git20220518) installs gloo/transport/tcp/pair.h
// but not the gloo/common/memory.h it includes. gloo_abort.cpp needs
// pair.h only for the offset of Pair::fd_, which these pointer wrappers
// (declared after it) do not change, and calls nothing that uses them. So
// minimal stand-ins do; this directory is on the include path of that one
// file only.

#include <memory>

namespace gloo {

template <typename T>
class NonOwningPtr {
  std::shared_ptr<T> ptr_;
};

template <typename T>
class WeakNonOwningPtr {
  std::weak_ptr<T> ptr_;
};

template <typename T>
class ShareableNonOwningPtr {
  std::shared_ptr<T> ptr_;
};

} // namespace gloo
