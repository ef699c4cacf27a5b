// A placement applied in training changes where experts live, never the
// numbers: 8 experts over 4 EP ranks, top-3 routing (so a token's expert
// outputs add in an order a placement could disturb), capacity drops and
// gradient clipping on every step (so the gradient norm's bits matter).
//   - contiguous for 6 steps (the reference);
//   - contiguous for 3 steps, then resumed from that checkpoint with a plan
//     that moves experts of both layers across ranks, to step 6;
//   - that plan from the start, 6 steps;
// give the same loss and gradient norm at every step, to the bit, and the
// last checkpoints hold the experts where the plan put them; exported, the
// three are the same model tensor for tensor. The same plan from the start
// under TP2 and PP2 (world 8, each EP group of 4 placed alike) likewise.

#include <catch2/catch.hpp>

#include <map>

#include "test_support.hpp"
#include "tutti/store/checkpoint_files.hpp"
#include "tutti/store/expert_blocks.hpp"
#include "tutti/store/safetensors.hpp"

using namespace tutti;
using namespace tutti::testing;

namespace {

// Constant learning rate (lr == min_lr, no warmup): a job of 3 steps
// continued to 6 trains exactly as one of 6.
// `layout`: model-parallel keys (world 8 with TP2 or PP2, EP over each
// TP index's or stage's 4 data-parallel ranks).
std::string config(const std::string& data, const std::string& run_dir,
                   int steps, const std::string& plan,
                   const std::string& layout = "") {
  const std::string world = layout.empty() ? "4" : "8";
  return "cluster_config:\n  world_size: " + world
         + "\n  nnodes: 1\n  nproc_per_node: " + world + "\n  ep_size: 4\n"
         + layout
         + "  collective_timeout_ms: 30000\n"
           "model:\n  vocab_size: 32\n  hidden_size: 16\n"
           "  intermediate_size: 32\n  num_hidden_layers: 2\n"
           "  num_attention_heads: 2\n  num_key_value_heads: "
         + (layout.empty() ? "1" : "2") // TP splits key/value heads
         + "\n"
           "  max_seq_len: 16\n"
           "moe_config:\n  num_experts: 8\n  router_top_k: 3\n"
           "  capacity_factor: 1.0\n  aux_loss_coeff: 0.01\n"
           "  z_loss_coeff: 0.001\n  bias_update_rate: 0.001\n"
         + (plan.empty() ? "" : "  placement: " + plan + "\n")
         + "train:\n  steps: " + std::to_string(steps)
         + "\n  global_batch_size: 8\n  seq_len: 16\n  lr: 0.01\n"
           "  min_lr: 0.01\n  warmup_steps: 0\n  grad_clip: 0.05\n"
           "  seed: 7\n  log_interval: 100\n"
           "data:\n  dir: "
         + data + "\nrun:\n  dir: " + run_dir + "\n";
}

// step -> value of `field` (a resumed job's later lines win).
std::map<int64_t, double> by_step(const std::filesystem::path& metrics,
                                  const std::string& field) {
  std::map<int64_t, double> out;
  std::ifstream in(metrics);
  std::string line;
  while (std::getline(in, line)) {
    const auto j = nlohmann::json::parse(line, nullptr, false);
    if (j.is_object() && j.contains("step") && j.contains(field))
      out[j["step"].get<int64_t>()] = j[field].get<double>();
  }
  return out;
}

// The experts each EP rank's shard of the checkpoint holds, "l0;l1" lists:
// the shard files of `writers`, the first EP group's ranks (stage 0, TP
// index 0).
std::vector<std::string> held_experts(const std::filesystem::path& run_dir,
                                      int64_t step,
                                      std::vector<int> writers = {0, 1, 2, 3}) {
  std::vector<std::string> out;
  const auto dir = run_dir / "checkpoints" / store::checkpoint_dir_name(step);
  for (int rank : writers) {
    auto f = store::read_shard_file(dir / store::shard_file_name(rank), false);
    REQUIRE(f.ok());
    auto held = store::block_experts_of(f.value().meta);
    REQUIRE(held.ok());
    std::string text;
    for (int64_t l = 0; l < 2; ++l)
      text += (l ? ";" : "") + std::to_string(held.value().at(l, 0)) + ","
              + std::to_string(held.value().at(l, 1));
    out.push_back(text);
  }
  return out;
}

// The run's step-6 checkpoint exported (`tutti export --format hf`), by
// tensor name.
std::map<std::string, std::vector<float>> exported(
  const std::filesystem::path& run_dir) {
  const auto out = run_dir / "export";
  auto r = run(
    tutti_bin() + " export "
      + (run_dir / "checkpoints" / store::checkpoint_dir_name(6)).string()
      + " --format hf --out " + out.string(),
    60);
  INFO(r.output);
  REQUIRE(r.status == 0);
  auto read = store::read_safetensors(out / "model.safetensors");
  REQUIRE(read.ok());
  std::map<std::string, std::vector<float>> by_name;
  for (auto& t : read.value())
    by_name[t.name] = std::move(t.data);
  return by_name;
}

// dir/plan.json: layer 0 reversed, layer 1 interleaved, so every expert
// changes rank.
std::filesystem::path moving_plan(const std::filesystem::path& dir) {
  const auto plan = dir / "plan.json";
  write_text(plan, "{\"format\": \"tutti-placement-1\", \"layers\": 2, "
                   "\"experts\": 8, \"ranks\": 4, \"expert_at\": "
                   "[[7, 6, 5, 4, 3, 2, 1, 0], [1, 3, 5, 7, 0, 2, 4, 6]]}\n");
  return plan;
}

} // namespace

TEST_CASE("a placement moves experts, not the loss", "[integration]") {
  auto job = scratch_with_data("placement_apply");
  const auto data = job.data.string();
  const auto plan = moving_plan(job.dir);

  const auto ref = job.dir / "contiguous";
  run_job(job.dir / "ref.yaml", config(data, ref.string(), 6, ""), 120);
  const auto changed = job.dir / "changed";
  run_job(job.dir / "changed.yaml", config(data, changed.string(), 3, ""), 120);
  CHECK(
    held_experts(changed, 3)
    == std::vector<std::string>{"0,1;0,1", "2,3;2,3", "4,5;4,5", "6,7;6,7"});
  // The same run directory, more steps and the plan: a new config version,
  // resumed from step 3 with the experts moved.
  run_job(job.dir / "changed.yaml",
          config(data, changed.string(), 6, plan.string()), 120);
  const auto planned = job.dir / "planned";
  run_job(job.dir / "planned.yaml",
          config(data, planned.string(), 6, plan.string()), 120);

  const std::vector<std::string> moved{"7,6;1,3", "5,4;5,7", "3,2;0,2",
                                       "1,0;4,6"};
  CHECK(held_experts(changed, 6) == moved);
  CHECK(held_experts(planned, 6) == moved);

  for (const char* field : {"loss", "grad_norm", "aux_loss"}) {
    const auto want = by_step(ref / "metrics.jsonl", field);
    REQUIRE(want.size() == 6);
    for (const auto& run_dir : {changed, planned}) {
      const auto got = by_step(run_dir / "metrics.jsonl", field);
      REQUIRE(got.size() == 6);
      for (const auto& [step, value] : want) {
        INFO(run_dir.filename().string()
             << " " << field << " at step " << step);
        CHECK(got.at(step) == value); // bit for bit
      }
    }
  }
  // Clipping was on (the norm's bits reach the update) and training moved.
  const auto norms = by_step(ref / "metrics.jsonl", "grad_norm");
  CHECK(norms.at(1) > 0.05);
  const auto losses = by_step(ref / "metrics.jsonl", "loss");
  CHECK(losses.at(6) < losses.at(1));
  const auto dropped = by_step(ref / "metrics.jsonl", "dropped_tokens");
  double drops = 0;
  for (const auto& [step, d] : dropped)
    drops += d;
  CHECK(drops > 0); // capacity dropped rows, which the remap keeps dropped

  // Exported (which names each block row by expert_ids), the moved model is
  // the contiguous one, tensor for tensor.
  const auto want = exported(ref);
  CHECK(want.count("model.layers.1.block_sparse_moe.experts.7.w2.weight"));
  CHECK(exported(changed) == want);
  CHECK(exported(planned) == want);
}

TEST_CASE("a plan that does not fit the job is refused at start",
          "[integration]") {
  auto job = scratch_with_data("placement_refused");
  const auto& dir = job.dir;
  const auto plan = dir / "plan.json";
  write_text(plan, "{\"format\": \"tutti-placement-1\", \"layers\": 2, "
                   "\"experts\": 8, \"ranks\": 2, \"expert_at\": "
                   "[[0, 1, 2, 3, 4, 5, 6, 7], [0, 1, 2, 3, 4, 5, 6, 7]]}\n");
  const auto cfg = dir / "job.yaml";
  write_text(
    cfg, config(job.data.string(), (dir / "run").string(), 2, plan.string()));
  auto r = run(tutti_bin() + " run " + cfg.string() + " --quiet", 60);
  INFO(r.output);
  CHECK(r.status == 2);
  CHECK(r.output.find("moe_config.placement: " + plan.string()
                      + " places 8 experts of 2 layers on 2 ranks; the job "
                        "has 8 experts, 2 layers and ep_size 4")
        != std::string::npos);
}

TEST_CASE("a placement moves experts, not the loss, under TP and PP",
          "[integration]") {
  auto job = scratch_with_data("placement_apply_model_parallel");
  const auto data = job.data.string();
  const auto plan = moving_plan(job.dir);
  for (const std::string layout : {"  tensor_model_parallel_size: 2\n",
                                   "  pipeline_model_parallel_size: 2\n"}) {
    INFO(layout);
    const auto ref = job.dir / "contiguous";
    const auto planned = job.dir / "planned";
    std::filesystem::remove_all(ref);
    std::filesystem::remove_all(planned);
    run_job(job.dir / "ref.yaml", config(data, ref.string(), 6, "", layout),
            120);
    run_job(job.dir / "planned.yaml",
            config(data, planned.string(), 6, plan.string(), layout), 120);
    for (const char* field : {"loss", "grad_norm", "aux_loss"}) {
      const auto want = by_step(ref / "metrics.jsonl", field);
      const auto got = by_step(planned / "metrics.jsonl", field);
      REQUIRE(want.size() == 6);
      REQUIRE(got.size() == 6);
      for (const auto& [step, value] : want) {
        INFO(field << " at step " << step);
        CHECK(got.at(step) == value); // bit for bit
      }
    }
    // The checkpoint's EP shards hold the experts where the plan put them
    // (TP's slices joined, the stages' layers gathered; under TP2 the
    // TP index 0 ranks 0, 2, 4, 6 write them), and exported it is the
    // contiguous model.
    const bool tp = layout.find("tensor") != std::string::npos;
    CHECK(
      held_experts(planned, 6,
                   tp ? std::vector<int>{0, 2, 4, 6}
                      : std::vector<int>{0, 1, 2, 3})
      == std::vector<std::string>{"7,6;1,3", "5,4;5,7", "3,2;0,2", "1,0;4,6"});
    CHECK(exported(planned) == exported(ref));
  }
}
