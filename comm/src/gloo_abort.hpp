#pragma once
// Aborting a Gloo context from another thread. Gloo 2022 has no abort:
// closeConnections() unregisters a pair's socket without waking the
// operations waiting on it. shutdown(2) on each pair's socket does: the
// pair's event loop sees the end of the stream, fails every pending
// operation on both ends, and the peer sees it too. It does not wake a
// send already queued on the socket (Pair::signalException skips unbound
// buffers in its transmit queue), so the buffers of the operation in flight
// are failed as well.

#include <functional>
#include <string>

namespace gloo {
class Context;
namespace transport {
class UnboundBuffer;
}
} // namespace gloo

namespace tutti::comm {

// Shuts down the socket of every pair of `context` (TCP transport). Safe
// to call while another thread waits in a collective on it.
void shutdown_gloo_pairs(gloo::Context& context);

// Runs `body` holding every pair's lock (each that can be had within
// 100 ms): no pair's event loop is then reading into or writing from a
// buffer's memory, nor can start to on a buffer `body` destroys. A failed
// collective frees its buffers this way: its pairs may still be moving
// bytes for it (an abort fails the buffers before the loops see the
// sockets end).
void with_gloo_pairs_locked(gloo::Context& context,
                            const std::function<void()>& body);

// Fails every wait on `buffer` (TCP transport) with `message`: a waitSend
// or waitRecv under way, or to come, throws it at once.
void fail_gloo_buffer(gloo::transport::UnboundBuffer& buffer,
                      const std::string& message);

} // namespace tutti::comm
