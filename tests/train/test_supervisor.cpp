// OTP supervision on CAF: strategies, restart types and intensity, with
// real actors that crash on request.

#include <catch2/catch.hpp>

#include <caf/actor_system.hpp>
#include <caf/event_based_actor.hpp>
#include <caf/scoped_actor.hpp>

#include <map>

#include "tutti/runtime/supervisor.hpp"
#include "tutti/runtime/system_config.hpp"
#include "tutti/protocol/errors.hpp"

using namespace tutti;

namespace {

using crash_atom = caf::atom_constant<caf::atom("crash")>;
using finish_atom = caf::atom_constant<caf::atom("finish")>;

// A child that tells `observer` it started, then ends on request: with an
// error (crash) or normally (finish).
caf::behavior dummy(caf::event_based_actor* self, std::string id,
                    caf::actor observer) {
  caf::anon_send(observer, id, caf::actor{self});
  return {
    [self](crash_atom) {
      self->quit(caf::make_error(errc::expert_failed, "injected"));
    },
    [self](finish_atom) { self->quit(); },
  };
}

supervisor_flags flags_of(restart_strategy s, int64_t max = 10) {
  return {s, max, std::chrono::milliseconds(5000)};
}

struct fixture {
  tutti_system_config cfg;
  caf::actor_system sys{cfg};
  caf::scoped_actor self{sys};
  std::map<std::string, caf::actor> live; // id -> newest handle
  std::map<std::string, int> starts;

  child_spec spec(std::string id, restart_type type) {
    caf::actor observer = self;
    return {id, type, [id, observer](caf::actor_system& s) {
              return s.spawn(dummy, id, observer);
            }};
  }

  // Collects `n` start announcements (each within 5 s).
  void expect_starts(int n) {
    for (int i = 0; i < n; ++i)
      self->receive(
        [&](const std::string& id, const caf::actor& h) {
          live[id] = h;
          ++starts[id];
        },
        caf::after(std::chrono::seconds(5)) >> [&] { FAIL("no start"); });
  }

  // Nothing else arrives within a short while.
  void expect_quiet() {
    bool quiet = true;
    self->receive(
      [&](const std::string& id, const caf::actor&) {
        quiet = false;
        FAIL("unexpected start of " << id);
      },
      caf::after(std::chrono::milliseconds(300)) >> [] {});
    CHECK(quiet);
  }

  // A supervisor of three permanent children a, b and c, all started.
  // (Keep the handle: CAF ends an actor nobody can reach any more.)
  supervisor_actor spawn_abc(restart_strategy strategy) {
    auto sup = spawn_supervisor(sys, "t", flags_of(strategy),
                                {spec("a", restart_type::permanent),
                                 spec("b", restart_type::permanent),
                                 spec("c", restart_type::permanent)},
                                self);
    expect_starts(3);
    return sup;
  }

  // How many times each child has started in all.
  void check_starts(
    std::initializer_list<std::pair<const char*, int>> expected) {
    for (auto [id, n] : expected) {
      INFO("child " << id);
      CHECK(starts[id] == n);
    }
  }

  std::vector<child_status> children(const supervisor_actor& sup) {
    std::vector<child_status> out;
    self->request(sup, std::chrono::seconds(5), children_atom_v)
      .receive([&](std::vector<child_status>& c) { out = std::move(c); },
               [&](caf::error& e) { FAIL(sys.render(e)); });
    return out;
  }
};

} // namespace

TEST_CASE("one_for_one restarts only the child that failed", "[unit]") {
  fixture f;
  auto sup = f.spawn_abc(restart_strategy::one_for_one);
  auto old_a = f.live["a"];
  f.self->send(f.live["b"], crash_atom::value);
  f.expect_starts(1);
  CHECK(f.starts["b"] == 2);
  f.expect_quiet();
  CHECK(f.live["a"] == old_a);
  auto c = f.children(sup);
  REQUIRE(c.size() == 3);
  CHECK(c[1].restarts == 1);
  CHECK(c[0].restarts == 0);
  CHECK(c[2].running);
  f.self->send(sup, stop_atom_v);
}

namespace {

// Crashes `child` of a/b/c under `strategy`: `restarted` children start
// again, and then each has started as often as `expected` says.
void check_restarts(
  restart_strategy strategy, const char* child, int restarted,
  std::initializer_list<std::pair<const char*, int>> expected) {
  fixture f;
  auto sup = f.spawn_abc(strategy);
  f.self->send(f.live[child], crash_atom::value);
  f.expect_starts(restarted);
  f.expect_quiet();
  f.check_starts(expected);
  f.self->send(sup, stop_atom_v);
}

} // namespace

TEST_CASE("rest_for_one restarts the child and those after it", "[unit]") {
  check_restarts(restart_strategy::rest_for_one, "b", 2,
                 {{"a", 1}, {"b", 2}, {"c", 2}});
}

TEST_CASE("one_for_all restarts every child", "[unit]") {
  check_restarts(restart_strategy::one_for_all, "c", 3,
                 {{"a", 2}, {"b", 2}, {"c", 2}});
}

TEST_CASE("restart types: permanent, transient, temporary", "[unit]") {
  fixture f;
  auto sup = spawn_supervisor(f.sys, "t",
                              flags_of(restart_strategy::one_for_one),
                              {f.spec("perm", restart_type::permanent),
                               f.spec("trans", restart_type::transient),
                               f.spec("temp", restart_type::temporary)},
                              f.self);
  f.expect_starts(3);
  f.self->send(f.live["perm"], finish_atom::value); // normal exit: still back
  f.expect_starts(1);
  CHECK(f.starts["perm"] == 2);
  f.self->send(f.live["trans"], finish_atom::value); // normal: stays down
  f.self->send(f.live["temp"], crash_atom::value);   // never back
  f.expect_quiet();
  auto c = f.children(sup);
  CHECK(c[1].running == false);
  CHECK(c[2].running == false);
  f.self->send(sup, stop_atom_v);
}

TEST_CASE("a transient child that fails is restarted", "[unit]") {
  fixture f;
  auto sup = spawn_supervisor(
    f.sys, "t", flags_of(restart_strategy::one_for_one),
    {f.spec("trans", restart_type::transient)}, f.self);
  f.expect_starts(1);
  f.self->send(f.live["trans"], crash_atom::value);
  f.expect_starts(1);
  CHECK(f.starts["trans"] == 2);
  f.self->send(sup, stop_atom_v);
}

TEST_CASE("past the restart intensity the supervisor escalates", "[unit]") {
  fixture f;
  auto sup = spawn_supervisor(f.sys, "shard-sup",
                              flags_of(restart_strategy::one_for_one, 2),
                              {f.spec("a", restart_type::permanent),
                               f.spec("b", restart_type::permanent)},
                              f.self);
  f.self->monitor(sup);
  f.expect_starts(2);
  for (int i = 0; i < 2; ++i) {
    f.self->send(f.live["b"], crash_atom::value);
    f.expect_starts(1);
  }
  f.self->send(f.live["b"], crash_atom::value); // the third within 5 s
  std::string why;
  bool down = false;
  for (int i = 0; i < 2; ++i)
    f.self->receive(
      [&](escalate_atom, const std::string& w) { why = w; },
      [&](caf::down_msg& dm) { down = dm.source == sup.address(); },
      caf::after(std::chrono::seconds(5)) >> [] { FAIL("no escalation"); });
  INFO(why);
  CHECK(why.find("shard-sup") != std::string::npos);
  CHECK(why.find("more than 2 restarts") != std::string::npos);
  CHECK(down);
}
