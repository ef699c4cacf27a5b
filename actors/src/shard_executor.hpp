#pragma once
// The rank's side of its expert shard: each MoE block's expert work is one
// request to the shard actor, answered before the rank goes on.

#include <caf/blocking_actor.hpp>

#include "tutti/actors/interfaces.hpp"
#include "tutti/model/expert_executor.hpp"

namespace tutti {

class shard_executor final : public model::expert_executor {
public:
  shard_executor(caf::blocking_actor* self, expert_shard_actor shard,
                 std::chrono::milliseconds timeout)
    : self_(self), shard_(std::move(shard)), timeout_(timeout) {}

  status forward(int64_t layer, const float* x, const int64_t* rows,
                 int64_t m, float* y) override {
    auto task = std::make_shared<expert_task>(
      expert_task{layer, x, y, rows, m});
    return call(expert_fwd_atom_v, std::move(task));
  }

  status backward(int64_t layer, const float* dy, int64_t m,
                  float* dx) override {
    auto task = std::make_shared<expert_task>(
      expert_task{layer, dy, dx, nullptr, m});
    return call(expert_bwd_atom_v, std::move(task));
  }

private:
  template <class Atom>
  status call(Atom atom, expert_task_ptr task) {
    status result;
    self_->request(shard_, timeout_, atom, std::move(task))
      .receive([](caf::ok_atom) {},
               [&](caf::error& err) {
                 result = status::error("expert shard: "
                                        + self_->system().render(err));
               });
    return result;
  }

  caf::blocking_actor* self_;
  expert_shard_actor shard_;
  std::chrono::milliseconds timeout_;
};

} // namespace tutti
