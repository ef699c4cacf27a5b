#include "tutti/protocol/errors.hpp"

#include <caf/message.hpp>

namespace tutti {

const char* to_string(errc code) {
  switch (code) {
  case errc::none:
    return "none";
  case errc::rendezvous_failed:
    return "rendezvous_failed";
  case errc::collective_failed:
    return "collective_failed";
  case errc::expert_failed:
    return "expert_failed";
  case errc::data_failed:
    return "data_failed";
  case errc::rank_failed:
    return "rank_failed";
  case errc::config_refused:
    return "config_refused";
  case errc::coordinator_lost:
    return "coordinator_lost";
  }
  return "unknown";
}

} // namespace tutti
