#pragma once
// The checks across a serve config's keys, after each key was read and
// checked on its own: combinations that cannot work, each refused in one
// line naming the key path (serve.max_queue, spec.serve.max_queue).

#include <string>

#include "tutti/config/serve_config.hpp"
#include "yaml_reader.hpp"

namespace tutti::config {

// A serve: file. Sets what depends on whether a key was given
// (serve_config::replan).
status check_serve_file(serve::serve_config& c, const given_keys& given);

// A manifest: its spec.serve's keys, then those against the manifest's.
status check_serve_manifest(serve::serve_config& c, const given_keys& given);

} // namespace tutti::config
