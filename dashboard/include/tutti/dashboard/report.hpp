#pragma once
// A finished run as one self-contained HTML file: the dashboard's page
// with the run's step records, its events and its overview written into
// it, so it opens offline, from a file, with nothing to poll.

#include <filesystem>
#include <string>
#include <vector>

#include "tutti/dashboard/dashboard.hpp"

namespace tutti::dashboard {

// steps_file: RUN_DIR/metrics.jsonl. The heatmap's windows of the page
// (the last step, 10, 100, every step) are written in, each summed;
// `coactivation`: each layer's, as sources::coactivation gives it (none:
// empty).
std::string report_html(const overview& about,
                        const std::filesystem::path& steps_file,
                        const std::vector<timeline_event>& events,
                        const std::vector<std::string>& coactivation = {});

} // namespace tutti::dashboard
