#pragma once
// The key reference: Markdown tables of every declared config key (key,
// type, default, allowed values, doc), generated from the visit_fields
// declarations of each kind of config file. docs/config-reference.md is
// config_reference_document(); `config_keys --update` writes it, and a
// test (config_reference_doc) fails when the committed file differs.

#include <string>

namespace tutti {

// One table each, every line ending in '\n': the job's sections
// (job_config.hpp), a serve file's serve: section, the InferenceService
// manifest around spec.serve (serve_config.hpp), a gateway file
// (gateway_config.hpp).
std::string job_key_reference();
std::string serve_key_reference();
std::string manifest_key_reference();
std::string gateway_key_reference();

// docs/config-reference.md: the tables under their headings.
std::string config_reference_document();

} // namespace tutti
