#pragma once
// How an EP group moves one layer's routed rows: the dispatch (each row to
// the member holding its expert, the per-expert counts shared on the way)
// and the way back (each row to the member it came from), for training and
// serving alike. One interface, as Megatron-Core's token dispatcher, with
// the strategy chosen once by make_token_exchange:
//
//   self   an EP group of one: the dispatch order is the experts' order,
//          so rows are only permuted, and the way back moves nothing
//   runs   members in one process, on the CPU: rows are copied straight
//          from the dispatch order into the experts' order and back
//          (comm::communicator::all_to_all_runs), with no regrouping
//   flat   an all_to_all_v of counts, then of rows, regrouped by expert
//          on arrival; the way back in chunks, overlapping the experts
//   rack   one relay per rack (rack_exchange.hpp): a token crosses to a
//          rack once, and given the router's gates (training) the relays
//          also sum a token's outputs and take its output gradient once
//
// Whatever the strategy, the rows land and return as the same bits: only
// the traffic on each link class differs. Every member of the group must
// make the same calls in the same order (they are collectives).
//
// With an 8-bit dispatch (moe_config.dispatch_dtype int8 or fp8), the
// base's dispatch quantizes each token's row (kernels/row_quant.hpp: d
// bytes and a float32 scale, padded to whole floats) before the strategy
// moves it, and dequantizes what lands into the float32 landing buffer:
// every strategy, self included, moves and counts the quantized rows, so
// the result is the same at every EP size. The way back and the
// backward's dispatch of gradients stay float32.

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "tutti/base/status.hpp"
#include "tutti/comm/communicator.hpp"
#include "tutti/kernels/stream.hpp"
#include "tutti/kernels/tensor.hpp"
#include "tutti/moe/exchange_plan.hpp"
#include "tutti/moe/rack_exchange.hpp"

namespace tutti::moe {

// Told when the exchange starts and stops communicating, so a caller can
// time that apart from the kernels around it (training's step timers);
// the stream's queued work is waited for first. The base does nothing.
class exchange_clock {
public:
  virtual ~exchange_clock() = default;
  virtual void start() {}
  virtual void stop() {}
};

// Which strategy, from the config.
struct exchange_options {
  // moe_config.rack_aware_alltoall / serve.rack_aware_alltoall, and where
  // the group's members sit; in one rack the flat exchange is the same.
  bool rack_aware = false;
  rack_layout racks;
  // Chunks of the flat way back (moe_config.combine_chunks, at most one
  // per local expert); one where there is nothing to overlap.
  int64_t combine_chunks = 1;
  // moe_config.dispatch_dtype / serve.dispatch_dtype: 8-bit needs the CPU.
  dispatch_dtype dispatch = dispatch_dtype::fp32;
};

// Bytes one dispatched row of d floats takes on the wire.
int64_t dispatch_row_bytes(dispatch_dtype dtype, int64_t d);

class token_exchange {
public:
  virtual ~token_exchange() = default;

  // Says where the rows land, once the counts are known (plan's receive
  // side filled): a buffer of plan.recv_rows rows of d floats, in the
  // experts' order, in the stream's memory.
  using landing = std::function<expected<float*>(const exchange_plan&)>;

  // The dispatch: fills `plan` and lands every member's rows for this
  // member's experts where `land` says. `dispatch_order` is the caller's
  // buffer for the rows in dispatch order, where an exchange needs them
  // packed (it resizes it; a caller that keeps such a buffer for its
  // backward pass lends it, so no second one is held). Quantized on the
  // way with an 8-bit dispatch_dtype (quantized_dispatch.cpp).
  status dispatch(const routed_rows& rows, exchange_plan& plan,
                  kernels::tensor<float>& dispatch_order, const landing& land,
                  exchange_clock& clock);

  // The way back of plan.chunks[chunk] (every member calls it for every
  // chunk, in order): its rows in the experts' order (`experts_order`
  // holds all of them, chunk.start on) return to their senders' dispatch
  // order (`dispatch_order`, plan.rows rows). `kind` says what they are:
  // an exchange that sums on the way sums outputs weighed by their gates
  // (then plan.combine_gates) and input gradients plain, the latter with
  // the gate gradients of the rows it summed into `gate_grads`
  // ([tokens * k], others untouched).
  virtual status combine(exchange_plan& plan, size_t chunk, combine_kind kind,
                         const float* experts_order, float* dispatch_order,
                         float* gate_grads, exchange_clock& clock) = 0;

  // The backward pass's dispatch of the rows' gradients (`dispatch_order`,
  // from unpermute_combine_backward on what the combine left) into the
  // experts' order. `dout` ([tokens, d]) is the combined output's
  // gradient, from which the rack relays compute the gradients of the
  // rows they summed. Gate gradients are complete only after the input
  // gradients' combine.
  virtual status dispatch_gradient(exchange_plan& plan, const float* dout,
                                   const float* dispatch_order,
                                   float* experts_order,
                                   exchange_clock& clock) = 0;

  // A group of one: the experts' order is the dispatch order. Callers then
  // let the experts read and write the dispatch-order rows in place and
  // pass the same buffer as both orders, and the exchange moves nothing.
  virtual bool experts_order_is_dispatch_order() const { return false; }

  // Room for `rows` received rows in the exchange's own staging, sized up
  // front so steps do not grow it (moe_config.communication_buffer_size).
  virtual void reserve(int64_t /*rows*/, int64_t /*d*/) {}

  // "self", "runs", "flat" or "rack": which strategy the factory chose.
  virtual const char* strategy() const = 0;

  // Bytes this member sent to each member (itself included), rows and any
  // relay metadata, since the last reset_bytes().
  const std::vector<int64_t>& bytes_to() const { return bytes_to_; }
  void reset_bytes() { bytes_to_.assign(bytes_to_.size(), 0); }

protected:
  token_exchange(comm::communicator& group, kernels::stream s, int64_t chunks)
    : group_(group), stream_(s), chunks_(chunks), bytes_to_(group.size(), 0) {}

  // The strategy's dispatch, of rows as they come (dispatch above).
  virtual status dispatch_rows(const routed_rows& rows, exchange_plan& plan,
                               kernels::tensor<float>& dispatch_order,
                               const landing& land, exchange_clock& clock) = 0;

  // The plan's dispatch side, the counts' sharing through `share` (fills
  // plan.recv_expert), the receive side and the landing buffer.
  expected<float*> plan_and_land(
    const routed_rows& rows, exchange_plan& plan, const landing& land,
    const std::function<status(exchange_plan&)>& share);
  // The flat exchange of per-expert counts: member p gets the counts of
  // its experts from every member.
  status share_counts(exchange_plan& plan, exchange_clock& clock);
  void count_rows(const std::vector<int64_t>& rows_to, int64_t d);
  void count_bytes(const std::vector<int64_t>& bytes_to);

  comm::communicator& group_;
  kernels::stream stream_;
  int64_t chunks_; // of the way back
  std::vector<int64_t> bytes_to_;

private:
  friend expected<std::unique_ptr<token_exchange>> make_token_exchange(
    comm::communicator& group, kernels::stream s, const exchange_options& o);

  dispatch_dtype dtype_ = dispatch_dtype::fp32;
  // An 8-bit dispatch's quantized tokens, and where they land.
  kernels::tensor<float> quantized_tokens_, quantized_landing_;
};

// The exchange for `group` (which must outlive it) on stream `s`: rack
// when rack-aware over more than one rack, else self for a group of one,
// runs for an in-process group on the CPU, else flat (in one chunk in
// process: there the way back is the members' own copies, competing with
// the experts for the same cores, so chunks would only add steps).
expected<std::unique_ptr<token_exchange>> make_token_exchange(
  comm::communicator& group, kernels::stream s, const exchange_options& o);

} // namespace tutti::moe
