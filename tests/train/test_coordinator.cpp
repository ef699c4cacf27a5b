// The coordinator's membership epochs and checkpoint commits, one message at
// a time on CAF's deterministic test scheduler (caf/test/dsl.hpp). The
// coordinator is the real actor; the node supervisors and the journal are
// stand-ins that the test steps by hand, so every message between them is
// checked in order. The DSL reports through CAF's own test engine, so this
// is a CAF unit-test executable with CAF's main, not a Catch2 one.

#define CAF_SUITE coordinator

#include <caf/test/dsl.hpp>
#include <caf/test/unit_test_impl.hpp> // CAF's test main()

#include <cstdlib>
#include <filesystem>
#include <map>
#include <memory>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include "tutti/train/coordinator.hpp"
#include "tutti/runtime/system_config.hpp"

using namespace tutti;

namespace {

// A node daemon's supervisor that takes what the coordinator sends it and
// does nothing; the test reads each message before this actor consumes it.
caf::behavior silent_node(caf::event_based_actor*) {
  return {
    [](const epoch_start&) {}, [](abort_atom, int64_t /*epoch*/) {},
    [](const job_outcome&) {}, [](caf::ok_atom) {}, // registered
    [](int64_t /*epoch*/) {},                       // heartbeat answered
  };
}

// The journal, without RocksDB or shard files (the real one is detached, on
// its own thread, out of the test scheduler's reach). It holds each commit
// until the test answers it with (ok_atom, step): 1024 bytes committed, or
// an error where the step is in `failing`. Dynamically typed for that extra
// message; the coordinator sees it as a journal_actor.
struct journal_stub_state {
  std::shared_ptr<std::set<int64_t>> failing;
  std::map<int64_t, caf::typed_response_promise<int64_t>> commits;
  static inline const char* name = "journal_stub";
};

caf::behavior journal_stub(caf::stateful_actor<journal_stub_state>* self,
                           std::shared_ptr<std::set<int64_t>> failing) {
  self->state.failing = std::move(failing);
  return {
    [self](const commit_request& req) -> caf::result<int64_t> {
      auto promise = self->make_response_promise<int64_t>();
      self->state.commits.emplace(req.step, promise);
      return promise;
    },
    [self](caf::ok_atom, int64_t step) {
      auto& st = self->state;
      auto i = st.commits.find(step);
      if (i == st.commits.end())
        CAF_FAIL("no commit of step " << step << " is waiting");
      if (st.failing->count(step))
        i->second.deliver(
          caf::make_error(caf::sec::runtime_error, "disk full"));
      else
        i->second.deliver(int64_t{1024});
      st.commits.erase(i);
    },
    [](const job_event&) {},
    [](const job_final_state&) {},
    [](events_atom, int64_t) { return std::vector<std::string>{}; },
  };
}

// Owns the run directory; a base of the fixture listed before CAF's, so it
// is removed after the actor system (and its metrics writer) is gone.
struct temp_run_dir {
  std::filesystem::path run_dir;
  temp_run_dir() {
    std::string dir_template = (std::filesystem::temp_directory_path()
                                / "tutti_coordinator_XXXXXX")
                                 .string();
    if (mkdtemp(dir_template.data()) == nullptr)
      throw std::runtime_error("cannot create a temporary run directory");
    run_dir = dir_template;
  }
  ~temp_run_dir() {
    std::error_code ec;
    std::filesystem::remove_all(run_dir, ec);
  }
};

constexpr int64_t world = 2; // two nodes of one rank each

struct fixture : temp_run_dir, test_coordinator_fixture<tutti_system_config> {
  job_config job;
  std::shared_ptr<std::set<int64_t>> failing_commits =
    std::make_shared<std::set<int64_t>>();
  journal_actor journal;
  caf::actor listener;
  std::vector<caf::actor> nodes;
  coordinator_actor coord;

  fixture() {
    job.cluster.nnodes = world;
    job.cluster.nproc_per_node = 1;
    job.cluster.world_size = world;
    job.train.steps = 100;
    job.run.dir = run_dir.string(); // the metrics writer's metrics.jsonl
    // Heartbeats are timed by the real clock: never miss one in a test.
    job.recovery.heartbeat_timeout_ms = 3'600'000;
    job.recovery.max_wait_s = 3600;
    journal = caf::actor_cast<journal_actor>(
      sys.spawn(journal_stub, failing_commits));
    listener = sys.spawn(silent_node);
    for (int64_t n = 0; n < world; ++n)
      nodes.push_back(sys.spawn(silent_node));
    coordinator_args args;
    args.cfg = job;
    args.listener = listener;
    args.quiet = true;
    args.journal = journal;
    coord = spawn_coordinator(sys, std::move(args));
    consume_messages(); // the actors start; the coordinator's first tick
  }

  ~fixture() override {
    // The coordinator's tick re-arms itself, and the fixture's teardown
    // fires timers until none is left: end the actors first.
    caf::anon_send_exit(coord, caf::exit_reason::kill);
    caf::anon_send_exit(journal, caf::exit_reason::kill);
    caf::anon_send_exit(listener, caf::exit_reason::kill);
    for (auto& n : nodes)
      caf::anon_send_exit(n, caf::exit_reason::kill);
    consume_messages();
  }

  node_registration registration(int64_t node) const {
    node_registration reg;
    reg.node_rank = node;
    reg.host = "127.0.0.1";
    reg.port = job.cluster.node(node).port;
    reg.devices = 1;
    reg.config_fingerprint = fingerprint_text(job);
    return reg;
  }

  void join(int64_t node, const caf::actor& handle) {
    caf::send_as(handle, coord, register_atom_v, registration(node), handle);
    expect((register_atom, node_registration, caf::actor),
           from(handle).to(coord).with(_, _, handle));
  }

  // Both nodes join; the job starts in epoch 0 from step 0. The last to
  // join is told to start before it gets its registration's answer.
  void start_job() {
    join(0, nodes[0]);
    expect((caf::ok_atom), from(coord).to(nodes[0]).with(_));
    join(1, nodes[1]);
    started(0, 0);
    expect((caf::ok_atom), from(coord).to(nodes[1]).with(_));
  }

  job_status status() {
    auto answer = self->request(coord, caf::infinite, status_atom_v);
    expect((status_atom), from(_).to(coord).with(_));
    job_status out;
    answer.receive([&](job_status& s) { out = std::move(s); },
                   [&](caf::error& err) { CAF_FAIL(sys.render(err)); });
    return out;
  }

  // The journal's events (failures, recoveries, alerts) are not what these
  // tests check; take them so that the next commit request is at the head.
  void skip_journal_events() {
    while (allow((job_event), from(coord).to(journal)))
      ;
  }

  void saved(int64_t step, int32_t rank, int64_t epoch) {
    const tutti::shard_saved msg{step, rank, 1024, epoch};
    caf::send_as(nodes[0], coord, msg);
    expect((tutti::shard_saved), from(_).to(coord).with(msg));
  }

  void shard_failed(int64_t step, int32_t rank, int64_t epoch) {
    const tutti::shard_failed msg{step, rank, "no space left on device", epoch};
    caf::send_as(nodes[0], coord, msg);
    expect((tutti::shard_failed), from(_).to(coord).with(msg));
  }

  void rank_failed(int32_t rank, int64_t epoch) {
    const tutti::rank_failed msg{rank, "communicator timed out", epoch};
    caf::send_as(nodes[0], coord, msg);
    expect((tutti::rank_failed), from(_).to(coord).with(msg));
  }

  void aborted(int64_t node, int64_t epoch) {
    caf::send_as(nodes[node], coord, node_aborted{node, epoch});
    expect((node_aborted),
           from(nodes[node]).to(coord).with(node_aborted{node, epoch}));
  }

  // The journal is asked to commit `step` of `epoch`, and answers.
  void commit_requested(int64_t step, int64_t epoch) {
    skip_journal_events();
    expect((commit_request),
           from(coord).to(journal).with(commit_request{step, world, epoch}));
  }
  void commit_answered(int64_t step) {
    skip_journal_events();
    caf::anon_send(caf::actor_cast<caf::actor>(journal), caf::ok_atom_v, step);
    expect((caf::ok_atom, int64_t), from(_).to(journal).with(_, step));
    expect((int64_t), from(journal).to(coord).with(int64_t{1024}));
  }
  void commit_refused(int64_t step) {
    skip_journal_events();
    caf::anon_send(caf::actor_cast<caf::actor>(journal), caf::ok_atom_v, step);
    expect((caf::ok_atom, int64_t), from(_).to(journal).with(_, step));
    expect((caf::error), from(journal).to(coord).with(_));
  }
  void no_commit_requested() {
    skip_journal_events();
    disallow((commit_request), from(coord).to(journal));
  }

  // A shard saved that does not complete a set (or must not count).
  void saved_without_commit(int64_t step, int32_t rank, int64_t epoch) {
    saved(step, rank, epoch);
    no_commit_requested();
  }
  int64_t latest_checkpoint() { return status().last_checkpoint; }

  // Every rank saved its shard of `step`: the journal is asked to commit.
  void all_saved(int64_t step, int64_t epoch) {
    for (int32_t rank = 0; rank < world; ++rank)
      saved(step, rank, epoch);
    commit_requested(step, epoch);
  }
  void committed(int64_t step, int64_t epoch) {
    all_saved(step, epoch);
    commit_answered(step);
  }

  // A rank of epoch `epoch` fails, and every node aborts its ranks.
  void interrupted(int64_t epoch) {
    rank_failed(0, epoch);
    for (auto& n : nodes)
      expect((abort_atom, int64_t), from(coord).to(n).with(_, epoch + 1));
    for (int64_t n = 0; n < world; ++n)
      aborted(n, epoch + 1);
  }
  void started(int64_t from_step, int64_t epoch) {
    for (auto& n : nodes)
      expect((epoch_start),
             from(coord).to(n).with(epoch_start{from_step, epoch, {}}));
  }
  // ... and the coordinator starts epoch + 1 from the newest checkpoint.
  void recover(int64_t epoch, int64_t from_step) {
    interrupted(epoch);
    started(from_step, epoch + 1);
  }
};

} // namespace

CAF_TEST_FIXTURE_SCOPE(coordinator_tests, fixture)

CAF_TEST(the loss of a node starts a new epoch and ignores the old one) {
  start_job();
  CAF_CHECK_EQUAL(status().epoch, 0);
  // Node 1's daemon dies: its connection's down message.
  caf::anon_send_exit(nodes[1], caf::exit_reason::kill);
  expect((caf::exit_msg), from(_).to(nodes[1]).with(_));
  expect((caf::down_msg), from(_).to(coord).with(_));
  expect((abort_atom, int64_t), from(coord).to(nodes[0]).with(_, int64_t{1}));
  auto s = status();
  CAF_CHECK_EQUAL(s.state, "recovering");
  CAF_CHECK_EQUAL(s.epoch, 1);
  CAF_CHECK_EQUAL(s.recoveries, 1);
  CAF_CHECK_EQUAL(s.nodes, std::vector<int64_t>{0});
  // Heartbeats learn the new epoch.
  caf::send_as(nodes[0], coord, node_heartbeat{0, 0, 0});
  expect((node_heartbeat),
         from(nodes[0]).to(coord).with(node_heartbeat{0, 0, 0}));
  expect((int64_t), from(coord).to(nodes[0]).with(int64_t{1}));
  // A rank of epoch 0 failing now is the failure already handled: no
  // second recovery, no second abort.
  rank_failed(1, 0);
  disallow((abort_atom, int64_t), from(coord).to(nodes[0]));
  CAF_CHECK_EQUAL(status().epoch, 1);
  // Node 1 comes back (a new daemon); node 0 reports epoch 0's abort late,
  // which does not count, then epoch 1's: the job restarts in epoch 1.
  nodes[1] = sys.spawn(silent_node);
  consume_messages();
  join(1, nodes[1]);
  expect((caf::ok_atom), from(coord).to(nodes[1]).with(_));
  aborted(0, 0);
  disallow((epoch_start), from(coord).to(nodes[0]));
  CAF_CHECK_EQUAL(status().state, "recovering");
  aborted(0, 1);
  started(0, 1);
  s = status();
  CAF_CHECK_EQUAL(s.state, "running");
  CAF_CHECK_EQUAL(s.epoch, 1);
  CAF_CHECK_EQUAL(s.nodes, (std::vector<int64_t>{0, 1}));
}

CAF_TEST(a rank failure of an older epoch is ignored) {
  start_job();
  recover(0, 0);
  rank_failed(0, 0);
  for (auto& n : nodes)
    disallow((abort_atom, int64_t), from(coord).to(n));
  auto s = status();
  CAF_CHECK_EQUAL(s.state, "running");
  CAF_CHECK_EQUAL(s.epoch, 1);
  CAF_CHECK_EQUAL(s.recoveries, 1);
}

CAF_TEST(a checkpoint commits only once every shard of its step is saved) {
  start_job();
  saved_without_commit(4, 0, 0);
  CAF_CHECK_EQUAL(latest_checkpoint(), 0);
  saved(4, 1, 0);
  commit_requested(4, 0);
  // Latest moves when the journal has committed, not before.
  CAF_CHECK_EQUAL(latest_checkpoint(), 0);
  commit_answered(4);
  CAF_CHECK_EQUAL(latest_checkpoint(), 4);
  // The next step's checkpoint moves it again.
  committed(8, 0);
  CAF_CHECK_EQUAL(latest_checkpoint(), 8);
}

CAF_TEST(a failed shard or a failed commit leaves the latest checkpoint) {
  start_job();
  committed(4, 0);
  // Step 8: rank 1's shard failed; rank 0's saved shard, before or after,
  // makes no commit.
  saved(8, 0, 0);
  shard_failed(8, 1, 0);
  saved_without_commit(8, 1, 0);
  CAF_CHECK_EQUAL(latest_checkpoint(), 4);
  // Step 12: every shard saved, but the journal cannot commit.
  failing_commits->insert(12);
  all_saved(12, 0);
  commit_refused(12);
  auto s = status();
  CAF_CHECK_EQUAL(s.last_checkpoint, 4);
  CAF_CHECK_EQUAL(s.state, "running"); // training goes on
}

CAF_TEST(shards of an aborted epoch do not count toward a commit) {
  start_job();
  saved(4, 0, 0); // rank 0 of epoch 0 saved step 4; then the epoch ends
  recover(0, 0);
  // Epoch 1's rank 1 and epoch 0's rank 0 (before the failure, or late)
  // are not a full set.
  saved_without_commit(4, 1, 1);
  saved_without_commit(4, 0, 0);
  CAF_CHECK_EQUAL(latest_checkpoint(), 0);
  saved(4, 0, 1);
  commit_requested(4, 1);
  commit_answered(4);
  CAF_CHECK_EQUAL(latest_checkpoint(), 4);
}

CAF_TEST(a shard failure of an aborted epoch does not fail the step) {
  start_job();
  recover(0, 0);
  shard_failed(4, 0, 0); // epoch 0's write of step 4: taken again
  committed(4, 1);
  CAF_CHECK_EQUAL(latest_checkpoint(), 4);
}

CAF_TEST(recovery waits for a commit under way and resumes from it) {
  start_job();
  all_saved(4, 0);
  interrupted(0);
  for (auto& n : nodes)
    disallow((epoch_start), from(coord).to(n));
  commit_answered(4);
  started(4, 1);
  auto s = status();
  CAF_CHECK_EQUAL(s.epoch, 1);
  CAF_CHECK_EQUAL(s.last_checkpoint, 4);
}

CAF_TEST(recovery after a failed commit resumes from the one before) {
  start_job();
  committed(4, 0);
  failing_commits->insert(8);
  all_saved(8, 0);
  interrupted(0);
  commit_refused(8);
  started(4, 1);
  CAF_CHECK_EQUAL(latest_checkpoint(), 4);
}

CAF_TEST_FIXTURE_SCOPE_END()
