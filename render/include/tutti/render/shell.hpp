#pragma once
// The coordinator's answer to a shell command, rendered: as text for
// people (what `tutti shell` prints) or as JSON for scripts (--json).
// `command` is the command that was asked; it says which part of the reply
// holds the answer. A refused reply renders as its error: one line of text,
// or {"error": ...}. A service's (tutti serve) `status` is its own: the
// model, readiness, requests, KV cache, expert shards and tokens.

#include <string>

#include "tutti/protocol/shell_messages.hpp"

namespace tutti::render {

// Ends with a newline (one per line of the answer).
std::string shell_text(const std::string& command, const shell_reply& reply);

// One JSON value, without a trailing newline.
std::string shell_json(const std::string& command, const shell_reply& reply);

} // namespace tutti::render
