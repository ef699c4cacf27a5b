#!/usr/bin/env bash
# The device check, for a bare GPU machine: CUDA driver, CUDA
# libraries and PyTorch there, no Debian packages, no package registry.
# It runs only what travels with the repository:
#   build/gpu-carry/ (or build/gpu-carry.tar.gz), made HERE, before, by
#   bench/collect_gpu_carry.sh: the GPU programs and their non-system libs.
# cuBLAS and NCCL come from the GPU machine itself (/usr/local/cuda, or the
# nvidia-* wheels next to its PyTorch): they must match its driver.
#
# Steps (each bounded by `timeout`; the whole is planned for < 8 minutes):
#   1. every CUDA op against the CPU reference  (tests/test_cuda_kernels)
#   2. the NCCL communicator, one rank per GPU  (tests/test_nccl_communicator)
#   3. 30 quickstart steps on the GPU vs CPU    (apps/tutti run, both devices)
#   4. PyTorch anchor for the MoE layer          (bench/moe_layer_torch.py)
#   5. the benchmark table                       (bench/gpu_bench)
# Ends with "N passed, M failed, K skipped"; exit 1 when anything failed.
# Logs and the table go to $GPU_CHECK_OUT (default: $OUT/gpu-check where
# $OUT is set, else /tmp/gpu-check).
#
# Usage: bash bench/gpu_check.sh
set -uo pipefail
cd "$(dirname "$0")/.."
root=$PWD
out=${GPU_CHECK_OUT:-${OUT:-/tmp}/gpu-check}
mkdir -p "$out"
rm -f "$out/summary.txt"
passed=0 failed=0 skipped=0
say() { echo "== $*"; }
result() { # result STEP STATUS [DETAIL]
  case $2 in
    PASS) passed=$((passed + 1)) ;;
    FAIL) failed=$((failed + 1)) ;;
    *) skipped=$((skipped + 1)) ;;
  esac
  echo "$2: $1${3:+ ($3)}" | tee -a "$out/summary.txt"
}

# -- what travelled ---------------------------------------------------------------
carry=${TUTTI_GPU_CARRY:-$root/build/gpu-carry}
if [ ! -d "$carry" ] && [ -f "$root/build/gpu-carry.tar.gz" ]; then
  mkdir -p /tmp/tutti-carry && tar -xzf "$root/build/gpu-carry.tar.gz" -C /tmp/tutti-carry
  carry=/tmp/tutti-carry/gpu-carry
fi
if [ ! -x "$carry/bin/test_cuda_kernels" ]; then
  echo "gpu_check: no carried build (run bench/collect_gpu_carry.sh on the build" \
       "machine and carry build/gpu-carry or build/gpu-carry.tar.gz)" >&2
  exit 1
fi
say "carried build"; cat "$carry/MANIFEST" 2>/dev/null

# -- this machine's CUDA libraries -------------------------------------------------
libdirs=()
add_dir() { for d in "$@"; do
  [ -d "$d" ] && ls "$d"/libcublas.so.* "$d"/libnccl.so.* >/dev/null 2>&1 && libdirs+=("$d")
done; }
add_dir /usr/local/cuda/lib64 /usr/local/cuda/lib /usr/local/cuda/targets/x86_64-linux/lib
py=$(command -v python3 || true)
if [ -n "$py" ]; then
  while read -r d; do add_dir "$d"; done < <("$py" - <<'EOF' 2>/dev/null
import glob, os, site, sys
roots = site.getsitepackages() + [site.getusersitepackages()] + sys.path
for r in dict.fromkeys(roots):
    for d in sorted(glob.glob(os.path.join(r, "nvidia", "*", "lib"))):
        print(d)
EOF
  )
fi
ld=$carry/lib
for d in "${libdirs[@]}"; do ld=$ld:$d; done
export LD_LIBRARY_PATH=$ld${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export NCCL_DEBUG=${NCCL_DEBUG:-WARN} # NCCL says why when it fails
say "LD_LIBRARY_PATH=$LD_LIBRARY_PATH"
for b in "$carry"/bin/*; do
  if ldd "$b" | grep -q "not found"; then
    echo "gpu_check: $(basename "$b") is missing libraries here (cuBLAS and NCCL" \
         "are looked for in /usr/local/cuda and python's nvidia/*/lib):" >&2
    ldd "$b" | grep "not found" >&2
    exit 1
  fi
done

say "device"
if command -v nvidia-smi >/dev/null; then
  nvidia-smi -L 2>&1 | head -8
  nvidia-smi --query-gpu=driver_version,clocks.sm,clocks.mem --format=csv 2>&1 | head -3
else
  echo "(no nvidia-smi here)"
fi

# -- 1, 2: correctness ---------------------------------------------------------------
run_test() { # run_test NAME SECONDS
  say "$1"
  timeout -k 10 "$2" "$carry/bin/$1" 2>&1 | tee "$out/$1.log"
  local rc=${PIPESTATUS[0]}
  case $rc in
    0) result "$1" PASS ;;
    77) result "$1" FAIL "skipped: no device answered on a GPU machine" ;;
    124 | 137) result "$1" FAIL "timed out after $2 s" ;;
    *) result "$1" FAIL "exit $rc" ;;
  esac
}
run_test test_cuda_kernels 240
run_test test_nccl_communicator 120

# -- 3: the quickstart model on the GPU --------------------------------------------
# configs/quickstart.yaml for 30 steps, twice with the carried `tutti run`:
# cluster_config.device cpu, then cuda (2 ranks + their expert shards on
# this GPU, Gloo staging through the host). Losses must agree to 1e-3
# relative at every step (fp32).
say "quickstart on GPU"
qs=$out/quickstart
rm -rf "$qs" && mkdir -p "$qs"
quickstart_run() { # quickstart_run DEVICE
  sed -e "s|^  communication_backend: gloo|&\n  device: $1|" \
      -e "s|^  steps: .*|  steps: 30|" \
      -e "s|^  dir: runs/quickstart/data|  dir: $qs/data|" \
      -e "s|^  dir: runs/quickstart\$|  dir: $qs/run-$1|" \
      configs/quickstart.yaml > "$qs/$1.yaml"
  timeout -k 10 180 "$carry/bin/tutti" run "$qs/$1.yaml" > "$qs/$1.log" 2>&1
}
if ! timeout -k 10 120 "$carry/bin/tutti" data synth --out "$qs/data" --vocab 16 \
     --seed 7 --tokens 400000 > "$qs/synth.log" 2>&1; then
  result "quickstart 30 steps GPU vs CPU" FAIL "data synth: $(tail -1 "$qs/synth.log")"
elif ! quickstart_run cpu; then
  result "quickstart 30 steps GPU vs CPU" FAIL "cpu run: $(tail -1 "$qs/cpu.log")"
elif ! quickstart_run cuda; then
  tail -20 "$qs/cuda.log"
  result "quickstart 30 steps GPU vs CPU" FAIL "cuda run: $(tail -1 "$qs/cuda.log")"
else
  verdict=$("${py:-python3}" - "$qs/run-cpu/metrics.jsonl" "$qs/run-cuda/metrics.jsonl" <<'EOF_PY'
import json, sys
def losses(path):
    out = {}
    for line in open(path):
        r = json.loads(line)
        if "loss" in r and "step" in r:
            out[r["step"]] = r["loss"]
    return out
cpu, gpu = losses(sys.argv[1]), losses(sys.argv[2])
steps = sorted(cpu)
if len(steps) != 30 or sorted(gpu) != steps:
    print(f"FAIL steps: cpu {len(cpu)}, gpu {len(gpu)}"); sys.exit()
worst = max(abs(gpu[s] - cpu[s]) / abs(cpu[s]) for s in steps)
at = max(steps, key=lambda s: abs(gpu[s] - cpu[s]) / abs(cpu[s]))
for s in (1, 10, 20, 30):
    print(f"  step {s}: cpu {cpu[s]:.6f} gpu {gpu[s]:.6f}", file=sys.stderr)
print(("PASS" if worst <= 1e-3 else "FAIL")
      + f" worst relative difference {worst:.2e} at step {at}")
EOF_PY
)
  echo "$verdict"
  case $verdict in
    PASS*) result "quickstart 30 steps GPU vs CPU" PASS "${verdict#PASS }" ;;
    *) result "quickstart 30 steps GPU vs CPU" FAIL "${verdict#FAIL }" ;;
  esac
fi

# -- 4, 5: benchmarks -----------------------------------------------------------------
sizes=(--tokens 4096 --dim 1024 --ffn 2816 --experts 8 --topk 2)
say "PyTorch anchor: MoE layer"
torch_ms=0
if [ -n "$py" ]; then
  PYTHONUNBUFFERED=1 timeout -k 10 180 "$py" bench/moe_layer_torch.py "${sizes[@]}" \
    2>&1 | tee "$out/moe_layer_torch.log"
  torch_ms=$(sed -n 's/^torch_moe_ms=//p' "$out/moe_layer_torch.log" | tail -1)
fi
if [ -n "$torch_ms" ] && [ "$torch_ms" != 0 ]; then
  result "PyTorch MoE layer anchor" PASS "$torch_ms ms"
else
  torch_ms=0
  result "PyTorch MoE layer anchor" FAIL "no timing (python3 with torch + CUDA?)"
fi

say "benchmark table"
timeout -k 10 240 "$carry/bin/gpu_bench" "${sizes[@]}" --torch-moe-ms "$torch_ms" \
  2>&1 | tee "$out/gpu_bench.log"
rc=${PIPESTATUS[0]}
if [ "$rc" = 0 ]; then
  { echo "$(date -u +%F), $(sed -n 's/^device: //p' "$out/gpu_bench.log")"; echo
    grep '^|' "$out/gpu_bench.log"; } > "$out/table.md"
  result "gpu_bench" PASS
else
  result "gpu_bench" FAIL "exit $rc"
fi

echo
cat "$out/summary.txt"
echo "$passed passed, $failed failed, $skipped skipped"
[ "$failed" = 0 ]
