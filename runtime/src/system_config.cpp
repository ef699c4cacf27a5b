#include "tutti/runtime/system_config.hpp"

#include <caf/io/middleman.hpp>
#include <caf/message.hpp>

#include "tutti/protocol/errors.hpp"
#include "tutti/protocol/type_ids.hpp"

namespace tutti {

system_options network_options(const recovery_config& recovery) {
  system_options o;
  o.network = true;
  o.heartbeat = std::chrono::milliseconds(recovery.heartbeat_interval_ms);
  o.connection_timeout = std::chrono::milliseconds(
    recovery.heartbeat_timeout_ms);
  return o;
}

tutti_system_config::tutti_system_config(const system_options& options) {
  add_message_types<caf::id_block::tutti>();
  // (CAF 0.17.6's add_error_category<T> does not compile; give the renderer
  // explicitly.)
  add_error_category(caf::atom("tutti"), [](uint8_t code, caf::atom_value,
                                            const caf::message& context) {
    std::string out = "tutti: ";
    out += to_string(static_cast<errc>(code));
    if (!context.empty())
      out += " " + caf::to_string(context);
    return out;
  });
  set("logger.console", caf::atom("none"));
  // An idle CAF worker polls its queue 500 times with 50 us sleeps before
  // it waits on its condition variable (which a message from outside the
  // scheduler wakes at once). The ranks and expert shards compute on their
  // own threads beside the workers: that polling took their cores. Go
  // straight from the short spin to the wait.
  set("work-stealing.moderate-poll-attempts", size_t{0});
  if (options.network) {
    load<caf::io::middleman>();
    set("middleman.heartbeat-interval", caf::timespan{options.heartbeat});
    set("middleman.connection-timeout",
        caf::timespan{options.connection_timeout});
    // Peers that are not tutti are refused at the handshake.
    set("middleman.app-identifiers", std::vector<std::string>{"tutti-1"});
  }
}

} // namespace tutti
