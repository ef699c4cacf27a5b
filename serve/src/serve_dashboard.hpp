#pragma once
// What the dashboard (dashboard/) shows of a serving replica: its model's
// layers and experts, its ranks and their racks, where each expert lives
// (serve.placement and offload), its /metrics text and, as its timeline,
// the warnings and errors of its log (restarts, replans, refusals).

#include "tutti/config/serve_config.hpp"
#include "tutti/dashboard/dashboard.hpp"
#include "tutti/serve/service.hpp"

namespace tutti::serve {

dashboard::sources serve_dashboard(service& svc, const serve_config& cfg);

} // namespace tutti::serve
