// Training's commands: a job run, planned, checked, checkpointed, exported
// and fed.

#include "command_table.hpp"
#include "commands.hpp"

namespace tutti::cli {

command_group job_commands() {
  static const std::vector<command> table = {
    {"run",
     run_command,
     {{"run CONFIG [--quiet] [--fresh [--yes]]",
       "train in this process; resumes by itself"}}},
    {"plan",
     plan_command,
     {{"plan CONFIG [--json]",
       "capacity plan: memory, FLOPs, traffic per rank"}}},
    {"diag",
     diag_command,
     {{"diag CONFIG", "interconnect check across the config's daemons"}}},
    {"drill",
     drill_command,
     {{"drill DRILL.yaml", "run a job under scripted faults; report\n"
                           "detection, recovery and the loss curve"}}},
    {"ckpt",
     ckpt_command,
     {{"ckpt list RUN_DIR", "committed checkpoints (step, size, time)"},
      {"ckpt verify CKPT_DIR", "check every hash of a checkpoint"},
      {"ckpt show CKPT_DIR|SHARD",
       "a shard's tensors (name, shape, dtype, hash)"}}},
    {"export",
     export_command,
     {{"export CKPT_DIR --format hf --out DIR",
       "Hugging Face MixtralForCausalLM safetensors"}}},
    {"data",
     data_command,
     {{"data synth --out DIR ...", "synthetic order-2 Markov token data"},
      {"data prepare --input F|DIR... --out DIR [--tokenizer DIR]",
       "a corpus into token shards (all cores)"},
      {"data tokenizer train --input F|DIR... --vocab N --out DIR",
       "a SentencePiece tokenizer (unigram|bpe)"},
      {"data bench CONFIG", "loader tokens/s against the job's need"}}},
  };
  return table;
}

} // namespace tutti::cli
