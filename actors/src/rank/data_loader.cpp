#include "rank/data_loader.hpp"

#include <caf/actor_system.hpp>
#include <caf/stateful_actor.hpp>

#include <chrono>
#include <map>
#include <thread>

#include "tutti/actors/log.hpp"
#include "tutti/data/batch_sampler.hpp"
#include "tutti/data/dataset.hpp"
#include "tutti/data/shard_format.hpp"
#include "tutti/protocol/errors.hpp"

namespace tutti {

namespace {

struct data_loader_state {
  static inline const char* name = "data_loader";

  job_config cfg;
  // The rank's data-parallel index: the ranks of one TP group read the
  // same batches.
  int32_t rank = 0;
  data::batch_sampler sampler;
  data::batch eval; // this rank's held-out windows
  std::map<int64_t, token_batch_ptr> queue;
  int64_t next_prefetch = 1;
  uint32_t token_bytes = 4; // on disk, per token
  // data.read_mb_s: bytes read so far against the time reading began.
  double bytes_read = 0;
  std::chrono::steady_clock::time_point read_start;

  int64_t local_seqs() const {
    return cfg.train.global_batch_size / cfg.dp_size();
  }

  expected<token_batch_ptr> make(int64_t step) {
    const auto& t = cfg.train;
    auto ids = sampler.rank_batch(t.seed, step - 1, t.global_batch_size, rank,
                                  cfg.dp_size(),
                                  cfg.data.shard_per_rank);
    if (!ids.ok())
      return status::error(ids.message());
    auto b = sampler.materialize(ids.value());
    throttle(static_cast<double>(b.rows) * (b.seq_len + 1) * token_bytes);
    auto out = std::make_shared<token_batch>();
    out->step = step;
    out->seqs = static_cast<int64_t>(b.rows);
    out->seq_len = b.seq_len;
    out->inputs = std::move(b.inputs);
    out->targets = std::move(b.targets);
    return out;
  }

  // Holds the reader to data.read_mb_s: sleeps until the bytes read so far
  // are due at that rate.
  void throttle(double bytes) {
    const double rate = cfg.data.read_mb_s * 1e6;
    if (rate <= 0)
      return;
    if (bytes_read == 0)
      read_start = std::chrono::steady_clock::now();
    bytes_read += bytes;
    std::this_thread::sleep_until(
      read_start
      + std::chrono::duration_cast<std::chrono::steady_clock::duration>(
        std::chrono::duration<double>(bytes_read / rate)));
  }

  token_batch_ptr eval_chunk(int64_t chunk) const {
    const int64_t s = cfg.train.seq_len;
    const int64_t rows = static_cast<int64_t>(eval.rows);
    const int64_t first = std::min(rows, chunk * local_seqs());
    const int64_t last = std::min(rows, first + local_seqs());
    auto out = std::make_shared<token_batch>();
    out->step = chunk;
    out->seqs = last - first;
    out->seq_len = s;
    out->inputs.assign(eval.inputs.begin() + first * s,
                       eval.inputs.begin() + last * s);
    out->targets.assign(eval.targets.begin() + first * s,
                        eval.targets.begin() + last * s);
    return out;
  }

  status load() {
    auto meta = data::read_meta(cfg.data.dir);
    if (!meta.ok())
      return status::error(meta.message());
    token_bytes = data::token_width_for(meta.value().vocab_size);
    auto train = data::load_split(cfg.data.dir, "train");
    if (!train.ok())
      return status::error(train.message());
    auto sampler_or = data::batch_sampler::create(
      std::move(train.value()), static_cast<uint32_t>(cfg.train.seq_len));
    if (!sampler_or.ok())
      return status::error(sampler_or.message());
    sampler = std::move(sampler_or.value());
    if (cfg.train.eval_sequences > 0) {
      auto val = data::load_split(cfg.data.dir, "val");
      if (!val.ok())
        return status::error(val.message());
      // Each rank evaluates its own contiguous slice of the held-out set.
      const int64_t per_rank = cfg.train.eval_sequences
                               / cfg.dp_size();
      auto all = data::eval_windows(val.value(),
                                    static_cast<uint32_t>(cfg.train.seq_len),
                                    cfg.train.eval_sequences);
      if (static_cast<int64_t>(all.rows) < cfg.train.eval_sequences)
        return status::error("data: " + cfg.data.dir + ": held-out split has "
                             + std::to_string(all.rows)
                             + " windows, train.eval_sequences " + "asks for "
                             + std::to_string(cfg.train.eval_sequences));
      const int64_t s = cfg.train.seq_len, first = rank * per_rank;
      eval.rows = per_rank;
      eval.seq_len = static_cast<uint32_t>(s);
      eval.inputs.assign(all.inputs.begin() + first * s,
                         all.inputs.begin() + (first + per_rank) * s);
      eval.targets.assign(all.targets.begin() + first * s,
                          all.targets.begin() + (first + per_rank) * s);
    }
    return {};
  }
};

using loader_pointer = data_loader_actor::stateful_pointer<data_loader_state>;

data_loader_actor::behavior_type data_loader(loader_pointer self,
                                             data_loader_args args) {
  auto& st = self->state;
  st.cfg = std::move(args.cfg);
  st.rank = static_cast<int32_t>(st.cfg.dp_rank_of(args.rank));
  if (auto err = st.load(); !err) {
    // Quitting here ends the actor before it handles anything; its
    // supervisor sees the reason in the down message.
    log_error("data_loader", err.message());
    self->quit(caf::make_error(errc::data_failed, err.message()));
  }
  return {
    [self](next_batch_atom, int64_t step) -> caf::result<token_batch_ptr> {
      auto& st = self->state;
      token_batch_ptr out;
      if (auto i = st.queue.find(step); i != st.queue.end()) {
        out = i->second;
        st.queue.erase(st.queue.begin(), std::next(i));
      } else {
        auto made = st.make(step);
        if (!made.ok())
          return caf::make_error(errc::data_failed, made.message());
        out = made.value();
        st.queue.clear();
        st.next_prefetch = step + 1;
      }
      self->send(self, prefetch_atom_v);
      return out;
    },
    [self](eval_batch_atom, int64_t chunk) -> token_batch_ptr {
      return self->state.eval_chunk(chunk);
    },
    [self](mailbox_atom) -> int64_t {
      return static_cast<int64_t>(self->mailbox().size());
    },
    [self](prefetch_atom) {
      auto& st = self->state;
      while (static_cast<int64_t>(st.queue.size()) < st.cfg.data.prefetch
             && st.next_prefetch <= st.cfg.train.steps) {
        auto made = st.make(st.next_prefetch);
        if (!made.ok())
          return; // reported when the rank asks for that step
        st.queue.emplace(st.next_prefetch++, made.value());
      }
    },
  };
}

} // namespace

data_loader_actor spawn_data_loader(caf::actor_system& sys,
                                    data_loader_args args) {
  return sys.spawn<caf::detached>(data_loader, std::move(args));
}

} // namespace tutti
