#include "rank/data_loader.hpp"

#include <caf/actor_system.hpp>
#include <caf/stateful_actor.hpp>

#include <chrono>
#include <map>
#include <thread>

#include "tutti/runtime/log.hpp"
#include "tutti/data/affinity_deal.hpp"
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
  // data.rack_affinity: the epoch's placement (token_experts), the rack of
  // each member of this rank's EP group, and which member holds each
  // [layer][expert].
  std::shared_ptr<const placement::placement_plan> plan;
  std::vector<int64_t> rack_of_member, member_of_expert;
  std::map<int64_t, token_batch_ptr> queue;
  int64_t next_prefetch = 1;
  uint32_t token_bytes = 4; // on disk, per token
  // data.read_mb_s: bytes read so far against the time reading began.
  double bytes_read = 0;
  std::chrono::steady_clock::time_point read_start;

  int64_t local_seqs() const {
    return cfg.train.global_batch_size / cfg.dp_size();
  }

  // data.rack_affinity: this rank's windows of its EP group's share of the
  // global batch, dealt by the racks (then ranks) of their tokens' experts.
  std::vector<uint64_t> dealt(int64_t step) const {
    const auto& t = cfg.train;
    const auto ep = cfg.ep_size(), per = local_seqs();
    const auto global = sampler.global_batch(t.seed, step - 1,
                                             t.global_batch_size);
    const auto first = global.begin() + (rank / ep) * ep * per;
    const std::vector<uint64_t> group(first, first + ep * per);
    const auto tokens = sampler.materialize(group);
    const auto k = plan->token_top_k, L = plan->layers, E = plan->experts;
    std::vector<std::vector<double>> votes(group.size(),
                                           std::vector<double>(ep, 0.0));
    for (size_t w = 0; w < group.size(); ++w)
      for (uint32_t i = 0; i < tokens.seq_len; ++i) {
        const auto* picks = plan->token_experts.data()
                            + tokens.inputs[w * tokens.seq_len + i] * L * k;
        for (int64_t l = 0; l < L; ++l)
          for (int64_t j = 0; j < k; ++j)
            votes[w][member_of_expert[l * E + picks[l * k + j]]] += 1;
      }
    const auto mine = data::deal_by_affinity(votes, rack_of_member,
                                             per)[rank % ep];
    std::vector<uint64_t> out;
    for (auto w : mine)
      out.push_back(group[w]);
    return out;
  }

  expected<token_batch_ptr> make(int64_t step) {
    const auto& t = cfg.train;
    auto ids = plan ? expected<std::vector<uint64_t>>(dealt(step))
                    : sampler.rank_batch(t.seed, step - 1, t.global_batch_size,
                                         rank, cfg.dp_size(),
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
    if (cfg.data.rack_affinity) {
      if (!plan || plan->token_top_k < 1
          || plan->token_vocab() < int64_t(meta.value().vocab_size))
        return status::error("data.rack_affinity: the epoch's placement has "
                             "no token_experts for this data's vocabulary");
      // Racks by label, numbered as they first appear in the group.
      const auto ep = cfg.ep_size(), first = (rank / ep) * ep;
      std::vector<std::string> labels;
      for (int64_t m = 0; m < ep; ++m) {
        const auto label =
          cfg.cluster.node((first + m) / cfg.cluster.nproc_per_node).rack;
        auto at = std::find(labels.begin(), labels.end(), label);
        if (at == labels.end())
          at = labels.insert(labels.end(), label);
        rack_of_member.push_back(at - labels.begin());
      }
      const auto L = plan->layers, E = plan->experts;
      member_of_expert.resize(L * E);
      for (int64_t l = 0; l < L; ++l)
        for (int64_t s = 0; s < E; ++s)
          member_of_expert[l * E + plan->expert_in(l, s)] =
            s / plan->slots_per_rank();
    } else {
      plan = nullptr;
    }
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
  st.plan = std::move(args.plan);
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
