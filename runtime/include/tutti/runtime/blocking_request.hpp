#pragma once

// A blocking actor's request whose answer is awaited until a deadline on
// the actor's own thread. CAF's timed request (`request(dest, timeout,
// ...).receive(...)`) hands the timeout to the clock thread and cancels it
// when the answer comes: two wakeups of that thread a request, which on a
// path taken for every served token cost more than the message itself.
// Here the request carries no timeout and the receive waits with one
// (caf::after): the same deadline, no other thread involved.

#include <caf/after.hpp>
#include <caf/blocking_actor.hpp>
#include <caf/sec.hpp>

#include <algorithm>
#include <chrono>
#include <utility>

namespace tutti {

// Runs on_answer with the answer to the request `id` (sent with
// caf::infinite), or on_error with its error, or with sec::request_timeout
// once `deadline` passes.
template <class OnAnswer, class OnError>
void await_answer(caf::blocking_actor* self, caf::message_id id,
                  std::chrono::steady_clock::time_point deadline,
                  OnAnswer on_answer, OnError on_error) {
  const auto left = std::max(deadline - std::chrono::steady_clock::now(),
                             std::chrono::steady_clock::duration::zero());
  caf::blocking_actor::accept_one_cond once;
  self->varargs_receive(
    once, id, std::move(on_answer), on_error,
    caf::after(std::chrono::duration_cast<std::chrono::microseconds>(left))
      >> [&] {
          caf::error e = caf::sec::request_timeout;
          on_error(e);
        });
}

// Sends xs to dest and awaits its answer as await_answer does.
template <class Dest, class OnAnswer, class OnError, class... Ts>
void request_until(caf::blocking_actor* self, const Dest& dest,
                   std::chrono::steady_clock::time_point deadline,
                   OnAnswer on_answer, OnError on_error, Ts&&... xs) {
  auto handle = self->request(dest, caf::infinite, std::forward<Ts>(xs)...);
  await_answer(self, handle.id(), deadline, std::move(on_answer),
               std::move(on_error));
}

} // namespace tutti
