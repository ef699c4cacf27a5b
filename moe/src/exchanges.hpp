#pragma once
// The strategies behind token_exchange (token_exchange.hpp), one file each;
// only make_token_exchange builds them.

#include <vector>

#include "tutti/kernels/ops.hpp"
#include "tutti/moe/staged_collectives.hpp"
#include "tutti/moe/token_exchange.hpp"

namespace tutti::moe {

// Brackets a collective for the caller's clock, after the kernels queued
// before it (they count as the caller's compute).
class clocked {
public:
  clocked(exchange_clock& c, const kernels::stream& s) : clock_(c) {
    kernels::wait(s);
    clock_.start();
  }
  ~clocked() { clock_.stop(); }
  clocked(const clocked&) = delete;
  clocked& operator=(const clocked&) = delete;

private:
  exchange_clock& clock_;
};

// An EP group of one (self_exchange.cpp).
class self_exchange final : public token_exchange {
public:
  self_exchange(comm::communicator& group, kernels::stream s)
    : token_exchange(group, s, 1) {}
  status dispatch_rows(const routed_rows& rows, exchange_plan& plan,
                       kernels::tensor<float>& dispatch_order,
                       const landing& land, exchange_clock& clock) override;
  status combine(exchange_plan& plan, size_t chunk, combine_kind kind,
                 const float* experts_order, float* dispatch_order,
                 float* gate_grads, exchange_clock& clock) override;
  status dispatch_gradient(exchange_plan& plan, const float* dout,
                           const float* dispatch_order, float* experts_order,
                           exchange_clock& clock) override;
  bool experts_order_is_dispatch_order() const override { return true; }
  const char* strategy() const override { return "self"; }
};

// Members in one process, by runs (runs_exchange.cpp).
class runs_exchange final : public token_exchange {
public:
  runs_exchange(comm::communicator& group, kernels::stream s)
    : token_exchange(group, s, 1) {}
  status dispatch_rows(const routed_rows& rows, exchange_plan& plan,
                       kernels::tensor<float>& dispatch_order,
                       const landing& land, exchange_clock& clock) override;
  status combine(exchange_plan& plan, size_t chunk, combine_kind kind,
                 const float* experts_order, float* dispatch_order,
                 float* gate_grads, exchange_clock& clock) override;
  status dispatch_gradient(exchange_plan& plan, const float* dout,
                           const float* dispatch_order, float* experts_order,
                           exchange_clock& clock) override;
  const char* strategy() const override { return "runs"; }
};

// The flat all_to_all_v, the way back in chunks (flat_exchange.cpp).
class flat_exchange final : public token_exchange {
public:
  flat_exchange(comm::communicator& group, kernels::stream s, int64_t chunks)
    : token_exchange(group, s, chunks), collectives_(s) {}
  status dispatch_rows(const routed_rows& rows, exchange_plan& plan,
                       kernels::tensor<float>& dispatch_order,
                       const landing& land, exchange_clock& clock) override;
  status combine(exchange_plan& plan, size_t chunk, combine_kind kind,
                 const float* experts_order, float* dispatch_order,
                 float* gate_grads, exchange_clock& clock) override;
  status dispatch_gradient(exchange_plan& plan, const float* dout,
                           const float* dispatch_order, float* experts_order,
                           exchange_clock& clock) override;
  void reserve(int64_t rows, int64_t d) override;
  const char* strategy() const override { return "flat"; }

private:
  // Rows of d floats, packed by member, in and out of received_.
  status exchange_rows(const float* send, const std::vector<int64_t>& send_rows,
                       float* recv, const std::vector<int64_t>& recv_rows,
                       int64_t d, exchange_clock& clock);

  staged_collectives collectives_;
  kernels::tensor<float> received_, chunk_send_, chunk_recv_;
  kernels::tensor<int64_t> chunk_index_;
};

// Through one relay per rack (rack_token_exchange.cpp).
class rack_token_exchange final : public token_exchange {
public:
  rack_token_exchange(comm::communicator& group, kernels::stream s,
                      rack_layout racks)
    : token_exchange(group, s, 1), rack_(std::move(racks), s), collectives_(s) {
  }
  status dispatch_rows(const routed_rows& rows, exchange_plan& plan,
                       kernels::tensor<float>& dispatch_order,
                       const landing& land, exchange_clock& clock) override;
  status combine(exchange_plan& plan, size_t chunk, combine_kind kind,
                 const float* experts_order, float* dispatch_order,
                 float* gate_grads, exchange_clock& clock) override;
  status dispatch_gradient(exchange_plan& plan, const float* dout,
                           const float* dispatch_order, float* experts_order,
                           exchange_clock& clock) override;
  void reserve(int64_t rows, int64_t d) override;
  const char* strategy() const override { return "rack"; }

private:
  // The routed dispatch's gates for the home's combine (plan.relay_gates).
  void plan_combine_gates(exchange_plan& plan, const float* gates);
  void count_rack();

  rack_exchange rack_;
  staged_collectives collectives_;
  kernels::tensor<float> received_, chunk_send_;
  kernels::tensor<int64_t> chunk_index_;
  std::vector<int32_t> slot_host_;
  std::vector<float> gate_host_, gate_mix_;
};

// The experts'-order rows of `chunk`, regrouped by the member they go back
// to (for each member, its rows of each expert of the chunk), into `out`;
// the rows themselves when the chunk is one expert (already in member
// order). Shared by the exchanges that send the way back packed.
const float* pack_chunk(const kernels::stream& s, const exchange_plan& plan,
                        const exchange_plan::chunk& ch,
                        const float* experts_order,
                        kernels::tensor<int64_t>& index,
                        kernels::tensor<float>& out);

} // namespace tutti::moe
