#pragma once
// The training section of the job spec: the optimiser, the schedule and
// the dtypes of the training state (train_config, precision_config), each
// with the visit_fields overload that declares its keys (see
// job_config.hpp).

#include <cstdint>
#include <string>

#include "tutti/config/enums.hpp"
#include "tutti/config/field.hpp"

namespace tutti {

// What each kind of training state is stored in. bf16 parameters and
// gradients with fp32 master weights and fp32 or bf16 moments is the GPU
// convention `tutti plan` counts; training stores its moments in bf16 when
// asked (train/adam_moments.hpp) and everything else in fp32 today.
struct precision_config {
  storage_dtype params = storage_dtype::fp32;
  storage_dtype grads = storage_dtype::fp32;
  storage_dtype master_weights = storage_dtype::fp32;
  storage_dtype moments = storage_dtype::fp32;
};

template <class Visitor>
void visit_fields(Visitor& v, precision_config& c) {
  v.field("params", c.params,
          "the weights forward and backward read; bf16 is planned by `tutti "
          "plan` and refused by a job (training stores fp32)");
  v.field("grads", c.grads, "the gradients; as params");
  v.field("master_weights", c.master_weights,
          "the copy the optimizer updates when params are bf16 (none when "
          "they are fp32); sharded over data parallel with "
          "optimizer_sharding");
  v.field("moments", c.moments,
          "AdamW's m and v; sharded over data parallel with "
          "optimizer_sharding; bf16 runs (half their memory: each step "
          "widens them, updates in fp32 and rounds back; checkpoints hold "
          "them as fp32)");
}

struct train_config {
  int64_t steps = 0;
  int64_t global_batch_size = 0;
  int64_t seq_len = 0;
  double lr = 1e-3;
  double min_lr = 1e-4;
  int64_t warmup_steps = 0;
  double weight_decay = 0.0;
  double beta1 = 0.9;
  double beta2 = 0.95;
  double eps = 1e-8;
  double grad_clip = 1.0;
  // The member's name is also the enum's: the type is spelled qualified.
  tutti::gemm_precision gemm_precision = tutti::gemm_precision::fp32;
  uint64_t seed = 1234;
  int64_t micro_batches = 1;
  bool optimizer_sharding = false;
  precision_config precision;
  tutti::recompute_mode recompute = tutti::recompute_mode::none;
  bool keep_expert_activations = false; // per micro-batch in flight (PP)
  int64_t eval_interval = 0;
  int64_t eval_sequences = 0;
  int64_t log_interval = 1;
};

template <class Visitor>
void visit_fields(Visitor& v, train_config& c) {
  using namespace config;
  v.field("steps", c.steps, "training steps", required, at_least(1));
  v.field("global_batch_size", c.global_batch_size,
          "sequences per step over all ranks; divisible by world_size",
          required, at_least(1));
  v.field("seq_len", c.seq_len, "tokens per sequence; <= model.max_seq_len",
          required, at_least(1));
  v.field("lr", c.lr, "peak learning rate", above(0));
  v.field("min_lr", c.min_lr,
          "learning rate at the end of the cosine decay; "
          "in [0, lr]");
  v.field("warmup_steps", c.warmup_steps, "linear warmup steps", at_least(0));
  v.field("weight_decay", c.weight_decay, "AdamW weight decay", at_least(0));
  v.field("beta1", c.beta1, "AdamW beta1", in_range(0, 1, "[)"));
  v.field("beta2", c.beta2, "AdamW beta2", in_range(0, 1, "[)"));
  v.field("eps", c.eps, "AdamW epsilon", above(0));
  v.field("grad_clip", c.grad_clip, "global gradient norm clip",
          at_least(0, "0 = off"));
  v.field("gemm_precision", c.gemm_precision,
          "GEMM inputs; bf16 accumulates, keeps master weights and "
          "gradients in fp32 (cuBLAS; on the CPU oneDNN where it finds bf16 "
          "units, else fp32)");
  v.field("seed", c.seed, "seed of initialisation and data order");
  v.field("micro_batches", c.micro_batches,
          "gradient accumulation: each rank's batch runs as this many "
          "micro-batches, gradients summed in order; divides the per-rank "
          "batch",
          at_least(1));
  v.field("optimizer_sharding", c.optimizer_sharding,
          "distributed optimizer (ZeRO-1): dense gradients reduce-scattered, "
          "each rank updates its slice of AdamW state, weights all-gathered; "
          "same results, so a job may resume with it flipped",
          not_fingerprinted);
  v.field("precision", c.precision,
          "storage of parameters, gradients, master weights and moments");
  v.field("recompute", c.recompute,
          "activations backward recomputes instead of keeping: none, "
          "selective (attention core) or full (each layer from its input); "
          "same results to the bit",
          not_fingerprinted);
  v.field("keep_expert_activations", c.keep_expert_activations,
          "pipeline parallelism: the expert shard keeps each micro-batch in "
          "flight's saved forward for its backward (faster; `tutti plan` "
          "counts the memory) instead of running the experts' forward again "
          "before a backward whose micro-batch is not the layer's last "
          "forward (every stage but the last); moot with recompute full; "
          "same results to the bit",
          not_fingerprinted);
  v.field("eval_interval", c.eval_interval,
          "steps between evaluations (0 = only at the end)", at_least(0));
  v.field("eval_sequences", c.eval_sequences,
          "held-out sequences per evaluation; divisible by world_size");
  v.field("log_interval", c.log_interval, "steps between log lines",
          at_least(1), not_fingerprinted);
}

} // namespace tutti
