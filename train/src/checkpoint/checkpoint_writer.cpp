#include "checkpoint/checkpoint_writer.hpp"

#include <caf/actor_system.hpp>
#include <caf/stateful_actor.hpp>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <stdexcept>
#include <thread>
#include <utility>

#include "tutti/runtime/log.hpp"
#include "tutti/lifecycle/checkpoint_tiers.hpp"
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
  double min_free_gb = 0;
  bool space_alert = false; // the low-space alert is firing
};

// The shard's size on disk, near enough for a space check: its tensors and
// a header allowance.
uint64_t shard_bytes(const rank_snapshot& snap) {
  uint64_t bytes = 1 << 20;
  snap.for_each_tensor(
    [&](const owned_tensor& t) { bytes += t.data.size() * sizeof(float); });
  return bytes;
}

std::string megabytes(uint64_t bytes) {
  return std::to_string(bytes / (1 << 20)) + " MiB";
}

using writer_pointer =
  checkpoint_writer_actor::stateful_pointer<checkpoint_writer_state>;

checkpoint_writer_actor::behavior_type checkpoint_writer(
  writer_pointer self, coordinator_actor coordinator,
  std::shared_ptr<checkpoint_in_flight> in_flight, double min_free_gb) {
  auto& st = self->state;
  st.min_free_gb = min_free_gb;
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
      snap->for_each_tensor([&](const owned_tensor& t) {
        views.push_back({t.name, t.shape, t.data.data()});
      });
      auto file = std::filesystem::path(dir)
                  / store::shard_file_name(snap->rank);
      const auto t0 = std::chrono::steady_clock::now();
      // Space first: a save that cannot fit is refused before a byte is
      // written.
      const auto need = shard_bytes(*snap);
      const auto reserve = static_cast<uint64_t>(st.min_free_gb * 1e9);
      auto room = lifecycle::free_bytes(dir);
      if (made && room && *room < need + reserve)
        made = status::error(
          "checkpoint.dir: " + dir + " has " + megabytes(*room)
          + " free; the shard of rank " + std::to_string(snap->rank) + " needs "
          + megabytes(need) + " and checkpoint.min_free_gb keeps "
          + megabytes(reserve) + " free: not written");
      auto written = made ? store::write_shard_file(file, meta, views)
                          : expected<uint64_t>(made);
      // Then whether the next save would fit: the alert comes before the
      // disk is full, and resolves when space is back.
      if (auto left = lifecycle::free_bytes(dir); left) {
        const bool low = *left < need + reserve;
        if (low != st.space_alert) {
          st.space_alert = low;
          self->send(st.coordinator,
                     alert_report{"checkpoint_disk", "important",
                                  low ? dir + ": " + megabytes(*left)
                                          + " free, the next checkpoint needs "
                                          + megabytes(need) + " (+ checkpoint."
                                          + "min_free_gb): free space or lower "
                                            "keep_last"
                                      : std::string()});
        }
      }
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
  std::shared_ptr<checkpoint_in_flight> in_flight, double min_free_gb) {
  if (!in_flight)
    in_flight = std::make_shared<checkpoint_in_flight>();
  return sys.spawn<caf::detached>(checkpoint_writer, std::move(coordinator),
                                  std::move(in_flight), min_free_gb);
}

} // namespace tutti
