#pragma once
// A published model version's name, NAME@VERSION: how serve.model_version
// names one and how `tutti publish` checks the parts it registers
// (serve/model_registry.hpp keeps the registry itself).

#include <string>

#include "tutti/base/status.hpp"

namespace tutti {

// A name or a version: 1..128 letters, digits, '.', '-' or '_', not
// starting with '.' (each is a directory name in the registry). `what`
// names it in the refusal.
status check_version_part(const std::string& what, const std::string& part);

// "NAME@VERSION" into its parts; refuses anything else.
status parse_version_ref(const std::string& ref, std::string& name,
                         std::string& version);

} // namespace tutti
