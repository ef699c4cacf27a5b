#!/usr/bin/env bash
# tutti against its peer, PyTorch eager (Debian's python3-torch), training
# the same Mixtral-style MoE on this machine's CPU cores, one core per rank:
#
#   quickstart shape: vocab 16, D64, F128, 2 layers, 4 experts top-2, 4/2
#                     heads, 32 sequences of 64 tokens per step
#   medium:           vocab 256, D256, F512, 4 layers, 8 experts top-2, 8/4
#                     heads, 16 sequences of 128 tokens per step
#
# For each model, interleaved, REPS times: `tutti run` at world 1 pinned to
# one core, bench/train_step_torch.py (1 thread) pinned to the same core,
# and `tutti run` at world 2 (two ranks in one process, experts split, each
# rank on a core of its own) on two cores, as configured by default (a rank
# waiting in an exchange computes tiles of the busier shard:
# moe_config.share_idle_cores) and without that sharing. Tokens/s are medians over steps after warm-up (tutti: its
# metrics.jsonl; PyTorch: its own timer around the same step). Each side's
# achieved GFLOP/s is `tutti plan`'s FLOPs per step over the step time, next
# to bench_sgemm (one core, the same OpenBLAS kernels) measured in the same
# run: the model FLOPs utilisation.
#
# PyTorch links the same OpenBLAS, which on CPUs newer than it knows falls
# back to generic kernels (kernels/include/tutti/kernels/blas_core.hpp);
# the peer runs with OPENBLAS_CORETYPE set to the core tutti chose, so both
# sides multiply with the same BLAS. Its figure without it is printed too.
#
# PRECISION=bf16 runs both sides in bf16: tutti with train.gemm_precision
# bf16 (oneDNN on the CPU's bf16 units), PyTorch under torch.autocast("cpu",
# bfloat16); the anchors stay float32 sgemm.
#
# Needs deploy/install-deps.sh --bench (python3-torch).
# Usage: bench/bench_vs_torch.sh [BUILD_DIR]
#   (REPS=2 STEPS=30 PRECISION=fp32 by default)
set -euo pipefail
cd "$(dirname "$0")/.."
build=$(cd "${1:-build}" && pwd)
reps=${REPS:-2}
steps=${STEPS:-30}
precision=${PRECISION:-fp32}
case $precision in
  fp32) autocast="" ;;
  bf16) autocast="--autocast" ;;
  *) echo "bench_vs_torch: PRECISION must be fp32 or bf16" >&2; exit 2 ;;
esac
warm=3
python=/usr/bin/python3
for tool in "$build/apps/tutti" "$build/bench/bench_sgemm"; do
  [ -x "$tool" ] || { echo "bench_vs_torch: $tool not built" >&2; exit 1; }
done
"$python" -c 'import torch' 2>/dev/null \
  || { echo "bench_vs_torch: PyTorch missing (apt-get install python3-torch)" >&2; exit 1; }
[ "$(nproc)" -ge 2 ] || { echo "bench_vs_torch: needs 2 cores" >&2; exit 1; }

scratch=$(mktemp -d /tmp/bench_vs_torch.XXXXXX)
trap 'rm -rf "$scratch"' EXIT
tutti=$build/apps/tutti

# model name -> "vocab dim ffn layers heads kv experts seq batch"
declare -A shape=(
  [quickstart]="16 64 128 2 4 2 4 64 32"
  [medium]="256 256 512 4 8 4 8 128 16"
)

write_config() { # NAME WORLD [SHARE_IDLE_CORES] -> config path
  local name=$1 world=$2 share=${3:-true} s
  read -r -a s <<<"${shape[$name]}"
  local dir=$scratch/$name-w$world
  [ "$share" = true ] || dir=$dir-alone
  cat >"$dir.yaml" <<EOF
cluster_config:
  world_size: $world
  nnodes: 1
  nproc_per_node: $world
  communication_backend: gloo
  ep_size: $world
model:
  vocab_size: ${s[0]}
  hidden_size: ${s[1]}
  intermediate_size: ${s[2]}
  num_hidden_layers: ${s[3]}
  num_attention_heads: ${s[4]}
  num_key_value_heads: ${s[5]}
  rope_theta: 10000
  max_seq_len: ${s[7]}
moe_config:
  num_experts: ${s[6]}
  router_top_k: 2
  capacity_factor: 0
  aux_loss_coeff: 0.01
  z_loss_coeff: 0.001
  bias_update_rate: 0.001
  share_idle_cores: $share
train:
  steps: $steps
  global_batch_size: ${s[8]}
  seq_len: ${s[7]}
  lr: 0.001
  min_lr: 0.0001
  warmup_steps: 2
  grad_clip: 1.0
  seed: 1234
  gemm_precision: $precision
  eval_interval: 0
  eval_sequences: 0
  log_interval: 1
checkpoint:
  interval_steps: 0
data:
  dir: $scratch/data-$name
run:
  dir: $dir
EOF
  echo "$dir.yaml"
}

# Median tokens/s, step time, all-to-all share and, of the step, the part of
# the all-to-all spent waiting for the other rank (uneven expert load) over
# steps after warm-up.
tutti_figures() { # RUN_DIR
  "$python" - "$1/metrics.jsonl" "$warm" "$steps" <<'EOF'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
warm, steps = int(sys.argv[2]), int(sys.argv[3])
rows = [r for r in rows if "step_time_s" in r and warm < r["step"] < steps]
med = lambda k: statistics.median(r[k] for r in rows)
share = statistics.median(r["time_alltoall_s"] / r["step_time_s"] for r in rows)
wait = statistics.median(r.get("time_alltoall_wait_s", 0) / r["step_time_s"] for r in rows)
print(f"{statistics.median(r['tokens'] / r['step_time_s'] for r in rows):.1f} "
      f"{med('step_time_s'):.4f} {share:.4f} {wait:.4f}")
EOF
}

torch_args() { # NAME
  local s
  read -r -a s <<<"${shape[$1]}"
  echo "--vocab ${s[0]} --dim ${s[1]} --ffn ${s[2]} --layers ${s[3]}" \
    "--heads ${s[4]} --kv-heads ${s[5]} --experts ${s[6]} --seq ${s[7]}" \
    "--batch ${s[8]} --steps $((steps - warm - 1)) --warmup $warm $autocast"
}

sgemm=$(taskset -c 0 "$build/bench/bench_sgemm")
core=$(sed -n 's/.*core=\([A-Za-z0-9]*\).*/\1/p' <<<"$sgemm")
echo "# $(date -u +%F) on $(nproc) cores ($(lscpu | sed -n 's/^Model name: *//p')); OpenBLAS core $core; $precision GEMMs"
echo "# anchor: $sgemm"

declare -A w1 w2 w2alone torch torch_default a2a flops
for name in quickstart medium; do
  read -r -a s <<<"${shape[$name]}"
  "$tutti" data synth --out "$scratch/data-$name" --vocab "${s[0]}" --seed 7 \
    --tokens 400000 >/dev/null
  flops[$name]=$("$tutti" plan "$(write_config "$name" 1)" --json \
    | "$python" -c 'import json,sys; print(json.load(sys.stdin)["flops_per_step"])')
done

for rep in $(seq "$reps"); do
  for name in quickstart medium; do
    c1=$(write_config "$name" 1)
    c2=$(write_config "$name" 2)
    c2alone=$(write_config "$name" 2 false)
    rm -rf "$scratch/$name-w1" "$scratch/$name-w2" "$scratch/$name-w2-alone"
    taskset -c 0 "$tutti" run "$c1" --quiet >/dev/null
    w1[$name]+="$(tutti_figures "$scratch/$name-w1");"
    # shellcheck disable=SC2046
    torch[$name]+="$(OPENBLAS_CORETYPE=$core taskset -c 0 "$python" \
      bench/train_step_torch.py $(torch_args "$name") | sed -n 's/torch_tokens_per_s=\([0-9.]*\).*/\1/p');"
    taskset -c 0,1 "$tutti" run "$c2" --quiet >/dev/null
    w2[$name]+="$(tutti_figures "$scratch/$name-w2");"
    taskset -c 0,1 "$tutti" run "$c2alone" --quiet >/dev/null
    w2alone[$name]+="$(tutti_figures "$scratch/$name-w2-alone");"
  done
done
for name in quickstart medium; do
  # shellcheck disable=SC2046
  torch_default[$name]=$(env -u OPENBLAS_CORETYPE taskset -c 0 "$python" \
    bench/train_step_torch.py $(torch_args "$name") \
    | sed -n 's/torch_tokens_per_s=\([0-9.]*\).*/\1/p')
done

"$python" - "$sgemm" <<EOF
import statistics, sys
sgemm = float(sys.argv[1].split("sgemm_gflops=")[1].split()[0])
def runs(text): return [r.split() for r in text.strip(";").split(";")]
def med(rows, i): return statistics.median(float(r[i]) for r in rows)
models = {"quickstart": ("${w1[quickstart]}", "${w2[quickstart]}", "${torch[quickstart]}", ${flops[quickstart]}, ${torch_default[quickstart]}, "${w2alone[quickstart]}"),
          "medium": ("${w1[medium]}", "${w2[medium]}", "${torch[medium]}", ${flops[medium]}, ${torch_default[medium]}, "${w2alone[medium]}")}
print()
print("| model | tutti world 1, tokens/s | PyTorch eager 1 thread, tokens/s | ratio | tutti world 2, tokens/s | world 2 / world 1 | all-to-all share, world 2 | of it waiting for the other rank | world 2 without tile sharing: tokens/s, a2a share | tutti world 1 GFLOP/s (MFU of sgemm) | PyTorch GFLOP/s (MFU) |")
print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
for name, (a, b, t, flops, tdef, c) in models.items():
    a, b, c = runs(a), runs(b), runs(c)
    tt = [float(x) for x in t.strip(";").split(";")]
    t1, t2, tp = med(a, 0), med(b, 0), statistics.median(tt)
    tokens = t1 * med(a, 1)
    g1 = flops / med(a, 1) / 1e9
    gp = flops / (tokens / tp) / 1e9
    print(f"| {name} | {t1:,.0f} | {tp:,.0f} | {t1 / tp:.2f} | {t2:,.0f} | {t2 / t1:.2f} "
          f"| {100 * med(b, 2):.1f}% | {100 * med(b, 3):.1f}% "
          f"| {med(c, 0):,.0f}, {100 * med(c, 2):.1f}% | {g1:.1f} ({100 * g1 / sgemm:.0f}%) | {gp:.1f} ({100 * gp / sgemm:.0f}%) |")
print()
# What 1.5x the peer asks of tutti's whole step, against the anchor: above
# 100% means a step faster than the BLAS itself runs one large GEMM.
for name, (a, b, t, flops, tdef, c) in models.items():
    tp = statistics.median(float(x) for x in t.strip(";").split(";"))
    tokens = med(runs(a), 0) * med(runs(a), 1)
    need = 1.5 * flops / (tokens / tp) / 1e9
    print(f"{name}: 1.5x PyTorch needs {need:.1f} GFLOP/s for the whole step, "
          f"{100 * need / sgemm:.0f}% of the sgemm anchor")
print(f"single-core sgemm anchor: {sgemm:.1f} GFLOP/s; PyTorch with the OpenBLAS "
      f"kernels it picks itself: quickstart {models['quickstart'][4]:,.0f}, "
      f"medium {models['medium'][4]:,.0f} tokens/s")
print("runs (tokens/s): " + "; ".join(
    f"{n}: tutti w1 {[round(float(r.split()[0])) for r in m[0].strip(';').split(';')]}, "
    f"torch {[round(float(x)) for x in m[2].strip(';').split(';')]}, "
    f"tutti w2 {[round(float(r.split()[0])) for r in m[1].strip(';').split(';')]}"
    for n, m in models.items()))
EOF
