#include "tutti/actors/checkpoint_writer.hpp"

#include <caf/actor_system.hpp>
#include <caf/stateful_actor.hpp>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <thread>

#include "tutti/actors/log.hpp"
#include "tutti/store/atomic_file.hpp"
#include "tutti/store/checkpoint_files.hpp"

namespace tutti {

namespace {

struct checkpoint_writer_state {
  // Not an aggregate: CAF would try to build it from the actor pointer.
  checkpoint_writer_state() = default;
  static inline const char* name = "checkpoint_writer";
  coordinator_actor coordinator;
  int64_t delay_ms = 0;
};

using writer_pointer =
  checkpoint_writer_actor::stateful_pointer<checkpoint_writer_state>;

checkpoint_writer_actor::behavior_type
checkpoint_writer(writer_pointer self, coordinator_actor coordinator) {
  self->state.coordinator = std::move(coordinator);
  if (const char* d = std::getenv("TUTTI_CKPT_WRITE_DELAY_MS"))
    self->state.delay_ms = std::atoll(d);
  return {
    [self](ckpt_write_atom, rank_snapshot_ptr snap, const std::string& dir) {
      auto& st = self->state;
      // The directory entries are fsynced too, not only the files.
      auto made = store::create_directories_durable(dir);
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
      auto written = made ? store::failure<uint64_t>(*made)
                          : store::write_shard_file(file, meta, views);
      const double took = std::chrono::duration<double>(
                            std::chrono::steady_clock::now() - t0)
                            .count();
      if (!written.ok()) {
        log_error("checkpoint_writer", written.error);
        self->send(st.coordinator, ckpt_failed_atom_v, snap->step,
                   static_cast<int32_t>(snap->rank), written.error);
        return;
      }
      // bench/bench_checkpoint.sh reads this line for the save throughput.
      log_info("checkpoint_writer",
               "shard written: " + file.string() + " bytes "
                 + std::to_string(written.value) + " seconds "
                 + std::to_string(took));
      if (st.delay_ms > 0)
        std::this_thread::sleep_for(std::chrono::milliseconds(st.delay_ms));
      self->send(st.coordinator, ckpt_saved_atom_v, snap->step,
                 static_cast<int32_t>(snap->rank),
                 static_cast<int64_t>(written.value));
    },
  };
}

} // namespace

checkpoint_writer_actor spawn_checkpoint_writer(caf::actor_system& sys,
                                                coordinator_actor coordinator) {
  return sys.spawn<caf::detached>(checkpoint_writer, std::move(coordinator));
}

} // namespace tutti
