#pragma once
// Aborting a Gloo context from another thread. Gloo 2022 has no abort:
// closeConnections() unregisters a pair's socket without waking the
// operations waiting on it. shutdown(2) on each pair's socket does: the
// pair's event loop sees the end of the stream, fails every pending
// operation on both ends, and the peer sees it too.

namespace gloo {
class Context;
}

namespace tutti::comm {

// Shuts down the socket of every pair of `context` (TCP transport). Safe
// to call while another thread waits in a collective on it.
void shutdown_gloo_pairs(gloo::Context& context);

} // namespace tutti::comm
