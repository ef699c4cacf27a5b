#include "checkpoint/checkpoint_writer.hpp"

#include <caf/actor_system.hpp>
#include <caf/stateful_actor.hpp>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <stdexcept>
#include <thread>
#include <utility>

#include "tutti/actors/log.hpp"
#include "tutti/protocol/errors.hpp"
#include "tutti/store/atomic_file.hpp"
#include "tutti/store/checkpoint_files.hpp"

namespace tutti {

namespace {

struct checkpoint_writer_state {
  // Not an aggregate: CAF would try to build it from the actor pointer.
  checkpoint_writer_state() = default;
  static inline const char* name = "checkpoint_writer";
  coordinator_actor coordinator;
  std::shared_ptr<checkpoint_in_flight> in_flight;
  int64_t delay_ms = 0;
  bool crash_next = false;
};

using writer_pointer =
  checkpoint_writer_actor::stateful_pointer<checkpoint_writer_state>;

checkpoint_writer_actor::behavior_type checkpoint_writer(
  writer_pointer self, coordinator_actor coordinator,
  std::shared_ptr<checkpoint_in_flight> in_flight) {
  auto& st = self->state;
  st.coordinator = std::move(coordinator);
  st.in_flight = std::move(in_flight);
  if (const char* d = std::getenv("TUTTI_CKPT_WRITE_DELAY_MS"))
    st.delay_ms = std::atoll(d);
  {
    // A predecessor crashed: what it left undone comes first.
    std::lock_guard<std::mutex> guard(st.in_flight->mutex);
    for (const auto& [snap, dir] : st.in_flight->writes) {
      log_warn("checkpoint_writer", "restarted; writing again " + dir
                                      + " (rank " + std::to_string(snap->rank)
                                      + ")");
      self->send(self, ckpt_write_atom_v, snap, dir);
    }
  }
  return {
    [self](mailbox_atom) -> int64_t {
      return static_cast<int64_t>(self->mailbox().size());
    },
    [self](chaos_atom, const std::string& fault) {
      self->state.crash_next = fault == "crash_checkpoint";
    },
    [self](ckpt_write_atom, rank_snapshot_ptr snap, const std::string& dir) {
      auto& st = self->state;
      // The directory entries are fsynced too, not only the files.
      auto made = store::create_directories_durable(dir);
      if (std::exchange(st.crash_next, false)) {
        // As if the writer died half-way: the shard file is not there, the
        // write stays queued for the restarted writer.
        auto why = "injected crash during the checkpoint write of step "
                   + std::to_string(snap->step);
        log_error("checkpoint_writer", why);
        self->quit(caf::make_error(errc::rank_failed, why));
        return;
      }
      store::shard_meta meta;
      meta.rank = snap->rank;
      meta.step = snap->step;
      meta.epoch = snap->epoch;
      meta.ints = snap->ints;
      meta.strings = snap->strings;
      std::vector<store::tensor_view> views;
      for (const auto& t : snap->tensors)
        views.push_back({t.name, t.shape, t.data.data()});
      auto file = std::filesystem::path(dir)
                  / store::shard_file_name(snap->rank);
      const auto t0 = std::chrono::steady_clock::now();
      auto written = made ? store::write_shard_file(file, meta, views)
                          : expected<uint64_t>(made);
      const double took = std::chrono::duration<double>(
                            std::chrono::steady_clock::now() - t0)
                            .count();
      st.in_flight->done(snap);
      if (!written.ok()) {
        log_error("checkpoint_writer", written.message());
        self->send(st.coordinator,
                   shard_failed{snap->step, static_cast<int32_t>(snap->rank),
                                written.message(), snap->epoch});
        return;
      }
      // bench/bench_checkpoint.sh reads this line for the save throughput.
      log_info("checkpoint_writer", "shard written: " + file.string()
                                      + " bytes "
                                      + std::to_string(written.value())
                                      + " seconds " + std::to_string(took));
      if (st.delay_ms > 0)
        std::this_thread::sleep_for(std::chrono::milliseconds(st.delay_ms));
      self->send(st.coordinator,
                 shard_saved{snap->step, static_cast<int32_t>(snap->rank),
                             static_cast<int64_t>(written.value()),
                             snap->epoch});
    },
  };
}

} // namespace

checkpoint_writer_actor spawn_checkpoint_writer(
  caf::actor_system& sys, coordinator_actor coordinator,
  std::shared_ptr<checkpoint_in_flight> in_flight) {
  if (!in_flight)
    in_flight = std::make_shared<checkpoint_in_flight>();
  return sys.spawn<caf::detached>(checkpoint_writer, std::move(coordinator),
                                  std::move(in_flight));
}

} // namespace tutti
