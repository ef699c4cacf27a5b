#pragma once
// How `tutti` commands reach a live job's coordinator: from a config (its
// cluster_config.coordinator) or from --connect HOST:PORT.

#include <caf/actor_system.hpp>

#include <string>

#include "tutti/actors/interfaces.hpp"

namespace tutti::cli {

// `target` is a config file or HOST:PORT. Returns an error text on failure.
std::string connect_coordinator(caf::actor_system& sys,
                                const std::string& target,
                                coordinator_actor& out);

// job_status as one JSON object, and as text lines.
std::string status_json(const job_status& s);
std::string status_text(const job_status& s);

} // namespace tutti::cli
