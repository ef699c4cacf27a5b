#pragma once
// The JSON both the live routes and a report give the page.

#include <string>
#include <vector>

#include "tutti/dashboard/dashboard.hpp"

namespace tutti::dashboard {

// The page (HTML with its CSS and JS inlined), as embedded.
std::string page_html();

std::string overview_json(const overview& about);
std::string events_json(const std::vector<timeline_event>& events);

} // namespace tutti::dashboard
