#pragma once
// Every Gloo call goes through TUTTI_GLOO_CHECK: Gloo reports failures by
// throwing; this turns them into a status that names the call and file:line.

#include <exception>
#include <string>

#include "tutti/base/status.hpp"

#define TUTTI_GLOO_CHECK(call)                                                 \
  do {                                                                         \
    try {                                                                      \
      call;                                                                    \
    } catch (const std::exception& tutti_ex_) {                                \
      return ::tutti::status::error(                                           \
        std::string("gloo: ") + #call + " at " + __FILE__ + ":"                \
        + std::to_string(__LINE__) + ": " + tutti_ex_.what());                 \
    }                                                                          \
  } while (false)
