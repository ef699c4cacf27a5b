// The layouts a job goes on in without some of its nodes: the same model,
// batch, tensor and pipeline sizes on fewer data-parallel ranks, the most
// survivors that make a valid layout, and a one-line refusal otherwise.

#include <catch2/catch.hpp>

#include "tutti/elastic/shrink_layout.hpp"

using namespace tutti;

namespace {

// 4 nodes of 2 ranks in 2 racks; `extra` lines go under cluster_config.
job_config four_nodes(const std::string& extra = "", int batch = 24,
                      int min_nodes = 1) {
  std::string nodes;
  for (int n = 0; n < 4; ++n)
    nodes += "    - {host: 10.0.0." + std::to_string(n + 1)
             + ", port: 7101, rack: r" + std::to_string(n / 2) + "}\n";
  auto cfg = parse_job_config(
    "cluster_config:\n  world_size: 8\n  nnodes: 4\n  nproc_per_node: 2\n"
      + extra + "  nodes:\n" + nodes
      + "model:\n  vocab_size: 32\n  hidden_size: 32\n  intermediate_size: 64\n"
        "  num_hidden_layers: 2\n  num_attention_heads: 4\n"
        "  num_key_value_heads: 2\n  max_seq_len: 32\n"
        "moe_config:\n  num_experts: 4\n  router_top_k: 2\n"
        "train:\n  steps: 10\n  global_batch_size: "
      + std::to_string(batch)
      + "\n  seq_len: 32\n"
        "data:\n  dir: /tmp/d\nrun:\n  dir: /tmp/r\n"
        "elastic:\n  min_nodes: "
      + std::to_string(min_nodes) + "\n",
    "four_nodes.yaml");
  INFO(cfg.message());
  REQUIRE(cfg.ok());
  return cfg.value();
}

} // namespace

TEST_CASE("one node lost: three nodes train, the experts over fewer ranks",
          "[unit]") {
  const auto full = four_nodes();
  REQUIRE(full.ep_size() == 4);
  auto layout = elastic::shrink_layout(full, {0, 1, 3});
  REQUIRE(layout.ok());
  const auto& l = layout.value();
  CHECK(l.nodes == std::vector<int64_t>{0, 1, 3});
  CHECK(l.idle.empty());
  CHECK(l.cfg.cluster.world_size == 6);
  CHECK(l.cfg.cluster.nnodes == 3);
  CHECK(l.cfg.dp_size() == 6);
  CHECK(l.cfg.ep_size() == 2); // divides 4 experts and 6 ranks
  // Node 3 is the layout's third node: its address and rack come along.
  CHECK(l.cfg.cluster.node(2).host == "10.0.0.4");
  CHECK(l.cfg.cluster.node(2).rack == "r1");
  CHECK(l.cfg.train.global_batch_size == full.train.global_batch_size);
  INFO(l.summary);
  CHECK(l.summary.find("world 6 on nodes 0, 1, 3") != std::string::npos);
  CHECK(l.summary.find("ep_size 2 instead of 4") != std::string::npos);
}

TEST_CASE("all nodes: the config itself", "[unit]") {
  const auto full = four_nodes();
  auto same = elastic::config_on_nodes(full, {0, 1, 2, 3});
  CHECK(fingerprint_text(same) == fingerprint_text(full));
}

TEST_CASE("survivors the batch cannot be split over wait", "[unit]") {
  // 8 sequences do not split over 6 ranks: two nodes (4 ranks) train and
  // the third waits, named with the reason.
  const auto full = four_nodes("", 8);
  auto layout = elastic::shrink_layout(full, {3, 0, 1});
  REQUIRE(layout.ok());
  CHECK(layout.value().nodes == std::vector<int64_t>{0, 1});
  CHECK(layout.value().idle == std::vector<int64_t>{3});
  INFO(layout.value().summary);
  CHECK(layout.value().summary.find("node 3 waits") != std::string::npos);
  CHECK(layout.value().summary.find("global_batch_size") != std::string::npos);
}

TEST_CASE("below min_nodes, or no layout at all: one line naming why",
          "[unit]") {
  auto few = elastic::shrink_layout(four_nodes("", 24, 3), {0, 1});
  REQUIRE_FALSE(few.ok());
  CHECK(few.message() == "2 nodes left, fewer than elastic.min_nodes (3)");
  // Two stages of two TP ranks need two whole nodes' ranks.
  auto tp = elastic::shrink_layout(
    four_nodes("  tensor_model_parallel_size: 2\n"
               "  pipeline_model_parallel_size: 2\n",
               24, 1),
    {2});
  REQUIRE_FALSE(tp.ok());
  INFO(tp.message());
  CHECK(tp.message().find("no layout on 1 to 1 of nodes 2") == 0);
  CHECK(tp.message().find('\n') == std::string::npos);
}

TEST_CASE("a layout the survivors' devices cannot hold is passed over",
          "[unit]") {
  // The predicate stands for the memory plan: no more than 6 ranks' worth.
  const elastic::layout_fits at_least_six = [](const job_config& cfg) {
    return cfg.cluster.world_size >= 6
             ? status{}
             : status::error("world " + std::to_string(cfg.cluster.world_size)
                             + " needs more memory per rank");
  };
  auto three = elastic::shrink_layout(four_nodes(), {0, 1, 2}, at_least_six);
  REQUIRE(three.ok());
  CHECK(three.value().cfg.cluster.world_size == 6);
  auto two = elastic::shrink_layout(four_nodes(), {0, 1}, at_least_six);
  REQUIRE_FALSE(two.ok());
  CHECK(two.message().find("world 4 needs more memory per rank")
        != std::string::npos);
}
