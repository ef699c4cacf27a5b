#pragma once
// Offload of rarely used experts (serve.offload): an expert whose share of
// its layer's routed tokens is below a threshold moves to one designated
// rank (in one process a rank; across daemons the node of serve.nodes with
// that index, a cheaper machine). That rank holds only such experts: the
// ones it held by the base layout that are used more go, one at a time, to
// the other rank holding the fewest of that layer. Tokens are unchanged;
// what it costs in latency is measured (serve_metrics: offload).

#include <cstdint>
#include <vector>

#include "tutti/base/status.hpp"
#include "tutti/serve/expert_layout.hpp"

namespace tutti::serve {

// `load`: tokens routed to each expert, [layer][expert] (routing_stats'
// load, or a replica's expert activations). A layer without tokens has no
// rare expert (nothing says which are): the offload rank holds none of it.
expected<expert_layout> with_offload(const expert_layout& base,
                                     const std::vector<int64_t>& load,
                                     double threshold, int64_t rank);

} // namespace tutti::serve
