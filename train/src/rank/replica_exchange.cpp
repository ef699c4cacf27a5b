#include "rank/replica_exchange.hpp"

#include "node/replica_store.hpp"
#include "rank/snapshot_codec.hpp"
#include "tutti/elastic/replica_peers.hpp"

namespace tutti {

namespace {

// Tags of the replica messages on the world communicator (no other sends
// use it): a size, then the bytes, told apart from the next step's.
uint32_t size_tag(int64_t step) {
  return 0x40000000u | static_cast<uint32_t>(step % 0x100000) << 1;
}
uint32_t bytes_tag(int64_t step) { return size_tag(step) | 1u; }

} // namespace

status exchange_replicas(const rank_args& a, comm::communicator& world,
                         rank_snapshot_ptr snap, int64_t& bytes_sent) {
  const auto& cfg = a.cfg;
  const auto world_size = cfg.cluster.world_size;
  a.replicas->put(world_size, snap);
  bytes_sent = 0;
  if (elastic::replica_shift(cfg) == 0)
    return {}; // one node: no other node to keep a copy
  const auto to = static_cast<int>(elastic::replica_target(cfg, a.rank));
  const auto from = static_cast<int>(elastic::replica_source(cfg, a.rank));
  const auto step = snap->step;
  const auto out = encode_snapshot(*snap);
  const uint64_t out_size = out.size();
  uint64_t in_size = 0;
  TUTTI_RETURN_IF_ERROR(world.send(to, size_tag(step), &out_size, 8));
  TUTTI_RETURN_IF_ERROR(world.send(to, bytes_tag(step), out.data(), out_size));
  TUTTI_RETURN_IF_ERROR(world.recv(from, size_tag(step), &in_size, 8));
  std::string in(in_size, '\0');
  TUTTI_RETURN_IF_ERROR(world.recv(from, bytes_tag(step), in.data(), in_size));
  TUTTI_RETURN_IF_ERROR(world.wait_sends());
  auto copy = decode_snapshot(in);
  if (!copy.ok())
    return status::error("from rank " + std::to_string(from) + ": "
                         + copy.message());
  if (copy.value()->rank != from || copy.value()->step != step)
    return status::error("replica from rank " + std::to_string(from)
                         + " holds rank "
                         + std::to_string(copy.value()->rank) + " step "
                         + std::to_string(copy.value()->step));
  a.replicas->put(world_size, std::move(copy.value()));
  bytes_sent = static_cast<int64_t>(out_size);
  return {};
}

} // namespace tutti
