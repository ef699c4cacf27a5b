#pragma once
// tutti's error codes as a CAF error category, so failures travel between
// actors (and nodes) as values with a readable context.

#include <caf/error.hpp>
#include <caf/make_message.hpp>
#include <caf/message.hpp>

#include <cstdint>
#include <string>

namespace tutti {

enum class errc : uint8_t {
  none = 0,
  rendezvous_failed,
  collective_failed,
  expert_failed,
  data_failed,
  rank_failed,
  config_refused,
  coordinator_lost,
};

const char* to_string(errc code);

} // namespace tutti

CAF_ERROR_CODE_ENUM(tutti::errc, "tutti")
