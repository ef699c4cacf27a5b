#pragma once
// The audit writer: a detached actor (file appends with fsync stay off
// CAF's shared workers) that appends each record to the run's hash-chained
// audit.jsonl and copies it into the job store's events (kind "audit").

#include <caf/actor.hpp>
#include <caf/actor_system.hpp>

#include <string>

#include "tutti/protocol/interfaces.hpp"
#include "tutti/security/audit_log.hpp"

namespace tutti {

// Records go to it as the JSON of an audit_record without seq, prev and
// hash (json_line of a record whose chain fields are empty).
caf::actor spawn_audit_writer(caf::actor_system& sys, const std::string& path,
                              journal_actor journal);

// The JSON the writer takes.
std::string audit_request(const security::audit_record& r);

} // namespace tutti
