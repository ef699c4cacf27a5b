// request_until / await_answer: a blocking actor's request answered, or
// refused with request_timeout at its deadline, with real actors.

#include <catch2/catch.hpp>

#include <caf/actor_system.hpp>
#include <caf/event_based_actor.hpp>
#include <caf/scoped_actor.hpp>

#include "tutti/runtime/blocking_request.hpp"
#include "tutti/runtime/system_config.hpp"

using namespace tutti;

namespace {

using ask_atom = caf::atom_constant<caf::atom("ask")>;
constexpr ask_atom ask_atom_v{};

// Doubles a number; never answers a negative one (its promise is dropped
// unanswered only when the actor ends, long after the deadlines here).
caf::behavior doubler(caf::event_based_actor* self) {
  auto held = std::make_shared<std::vector<caf::response_promise>>();
  return {
    [self, held](ask_atom, int64_t x) -> caf::result<int64_t> {
      if (x >= 0)
        return 2 * x;
      held->push_back(self->make_response_promise());
      return caf::delegated<int64_t>{};
    },
  };
}

} // namespace

TEST_CASE("request_until gives the answer before the deadline") {
  tutti_system_config cfg;
  caf::actor_system sys{cfg};
  caf::scoped_actor self{sys};
  auto d = sys.spawn(doubler);
  for (int64_t x = 0; x < 3; ++x) {
    int64_t got = -1;
    std::string why;
    request_until(
      self.ptr(), d, std::chrono::steady_clock::now() + std::chrono::seconds(5),
      [&](int64_t y) { got = y; },
      [&](caf::error& e) { why = sys.render(e); }, ask_atom_v, x);
    CHECK(why.empty());
    CHECK(got == 2 * x);
  }
  self->send_exit(d, caf::exit_reason::user_shutdown);
}

TEST_CASE("request_until ends in request_timeout at the deadline, and the "
          "next request still gets its own answer") {
  tutti_system_config cfg;
  caf::actor_system sys{cfg};
  caf::scoped_actor self{sys};
  auto d = sys.spawn(doubler);
  bool timed_out = false;
  const auto start = std::chrono::steady_clock::now();
  request_until(
    self.ptr(), d, start + std::chrono::milliseconds(100),
    [&](int64_t) { FAIL("a negative number is never answered"); },
    [&](caf::error& e) { timed_out = e == caf::sec::request_timeout; },
    ask_atom_v, int64_t{-1});
  const auto waited = std::chrono::steady_clock::now() - start;
  CHECK(timed_out);
  CHECK(waited >= std::chrono::milliseconds(100));
  CHECK(waited < std::chrono::seconds(5));
  int64_t got = -1;
  request_until(
    self.ptr(), d, std::chrono::steady_clock::now() + std::chrono::seconds(5),
    [&](int64_t y) { got = y; }, [&](caf::error&) {}, ask_atom_v,
    int64_t{21});
  CHECK(got == 42);
  self->send_exit(d, caf::exit_reason::user_shutdown);
}

TEST_CASE("request_until reports a receiver that is gone at once") {
  tutti_system_config cfg;
  caf::actor_system sys{cfg};
  caf::scoped_actor self{sys};
  auto d = sys.spawn(doubler);
  self->send_exit(d, caf::exit_reason::user_shutdown);
  self->wait_for(d);
  std::string why;
  const auto start = std::chrono::steady_clock::now();
  request_until(
    self.ptr(), d, start + std::chrono::seconds(5), [&](int64_t) {},
    [&](caf::error& e) { why = sys.render(e); }, ask_atom_v, int64_t{1});
  CHECK(!why.empty());
  CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(5));
}
