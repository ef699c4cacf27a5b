#!/usr/bin/env bash
# The device check, sized to the lent GPU machine (one H100 or H200, no
# package registry, at most 10 minutes a command, 15 minutes of device time
# in all, 64 MiB of carried files). bench/GPU_PLAN.md is the plan; in short:
#
#   run 1 (cap 420 s)  environment, every CUDA op against the CPU, NCCL on
#                      one GPU (one rank, then several ranks sharing it)
#   run 2 (cap 420 s)  30 quickstart steps on the GPU against the CPU run,
#                      the PyTorch MoE anchor and the benchmark table
#
# Each run needs its own carry, built HERE by bench/collect_gpu_carry.sh
# (build/gpu-run1/carry.tar.xz, build/gpu-run2/carry.tar.xz). Its first
# step, gpu_probe, prints the driver, CUDA runtime, cuBLAS and NCCL it finds
# and stops the run with a verdict when they cannot run the carry. Every
# other step fails or skips alone, with its reason; the rest still run. The
# step timeouts of a run add up to less than its cap, and a step that would
# not fit in what is left of the cap is skipped, so a run ends in time.
#
# Usage:
#   bash bench/gpu_check.sh --run 1|2 [--steps A,B] [--cap S]   on the GPU
#   bash bench/gpu_check.sh --dry-run                           anywhere
#     --steps   only these steps of the run (after the probe): a rerun
#     --cap     a smaller cap where less device time is left
#     --dry-run the device found here, what the carry needs, the plan, the
#               carries' sizes, the library search and gpu_probe; exit 77
# Without a GPU (no /dev/nvidia0, no nvidia-smi) a run is a dry run too.
# Ends with "N passed, M failed, K skipped"; exit 0 when nothing failed, 1
# when a step failed or the carry cannot run here, 2 on bad arguments.
# Logs: $GPU_CHECK_OUT, default $OUT where set (the device tool brings back
# at most 8 files), else /tmp/gpu-check.
#
# Environment: TUTTI_GPU_CARRY, an unpacked carry folder instead of the
# archive; TUTTI_CUDA_LIB_DIRS, folders (a:b) searched first for the CUDA
# libraries; GPU_CHECK_SYSTEM_DIRS, folders that replace the fixed ones
# and ldconfig in that search; GPU_CHECK_ASSUME_GPU=1, a real run where no
# GPU is seen. The last two are for this script's own tests
# (tests/cli/test_gpu_check.py), which drive it with a fake carry;
# GPU_CHECK_BUILD_DIR, the build tree holding gpu-runN/ (default: build).
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
root=$PWD
build=${GPU_CHECK_BUILD_DIR:-$root/build} # where the carries are

# -- the plan: STEP:TIMEOUT_S per run, and each run's cap -------------------
default_cap_s=420
unpack_s=20 # unpacking the carry and searching the libraries
steps_run1=(probe:20 test_cuda_kernels:240 test_nccl_communicator:60
  test_nccl_ranks:60)
steps_run2=(probe:20 synth:30 quickstart_cpu:60 quickstart_cuda:90
  torch_anchor:60 gpu_bench:90)
describe() { # what a step runs, and what it needs beyond the carry
  case $1 in
    probe) echo "gpu_probe: driver, GPU, cuBLAS, NCCL; stops the run when the carry cannot run" ;;
    test_cuda_kernels) echo "every CUDA op against the CPU reference; needs cuBLAS" ;;
    test_nccl_communicator) echo "NCCL, one rank per GPU; needs NCCL" ;;
    test_nccl_ranks) echo "NCCL, three ranks on one GPU (sends, receives, abort); needs NCCL" ;;
    synth) echo "tutti data synth: the quickstart's data" ;;
    quickstart_cpu) echo "tutti run, 30 quickstart steps on the CPU" ;;
    quickstart_cuda) echo "the same 30 steps with device cuda; losses within 1e-3; needs cuBLAS" ;;
    torch_anchor) echo "bench/moe_layer_torch.py: the MoE layer in PyTorch; needs python3 + torch" ;;
    gpu_bench) echo "the benchmark table (grouped GEMM, permute, MoE layer); needs cuBLAS" ;;
  esac
}
steps_of() { local -n s=steps_run$1; printf '%s\n' "${s[@]}"; }
run_total() { # the timeouts of run N plus unpacking
  local t=$unpack_s st
  for st in $(steps_of "$1"); do t=$((t + ${st#*:})); done
  echo "$t"
}

run=1 dry=0 only="" cap_s=$default_cap_s
while [ $# -gt 0 ]; do
  case $1 in
    --run) run=${2:-}; shift 2 || shift ;;
    --steps) only=${2:-}; shift 2 || shift ;;
    --cap) cap_s=${2:-}; shift 2 || shift ;;
    --dry-run | --plan) dry=1; shift ;;
    -h | --help) sed -n '2,38p' "$0"; exit 0 ;;
    *) echo "gpu_check: unknown argument $1 (--run 1|2, --steps A,B, --cap S, --dry-run)" >&2; exit 2 ;;
  esac
done
case $run in 1 | 2) ;; *) echo "gpu_check: --run takes 1 or 2, not '$run'" >&2; exit 2 ;; esac
case $cap_s in
  '' | *[!0-9]*) echo "gpu_check: --cap takes whole seconds, not '$cap_s'" >&2; exit 2 ;;
esac
for r in 1 2; do # the plan must fit its cap, whatever is edited above
  if [ "$(run_total $r)" -ge "$default_cap_s" ]; then
    echo "gpu_check: run $r's timeouts add up to $(run_total $r) s, over its cap" \
         "of $default_cap_s s: fix the plan at the top of $0" >&2
    exit 2
  fi
done
if [ -n "$only" ]; then
  for name in ${only//,/ }; do
    steps_of "$run" | grep -q "^$name:" \
      || { echo "gpu_check: run $run has no step '$name' ($(steps_of "$run" | cut -d: -f1 | tr '\n' ' '))" >&2; exit 2; }
  done
fi
selected() { [ -z "$only" ] || [ "$1" = probe ] || [[ ",$only," == *",$1,"* ]]; }

# -- the CUDA libraries, one at a time ----------------------------------------
manifest_value() { sed -n "s/^$1: //p" "$2" 2>/dev/null | head -1; }
python_lib_dirs() { # every lib folder under python's nvidia/ packages
  local py
  py=$(command -v python3) || return 0
  "$py" - <<'EOF' 2>/dev/null
import glob, os, site, sys
roots = site.getsitepackages() + [site.getusersitepackages()] + sys.path
for r in dict.fromkeys(roots):
    for pattern in ("nvidia/*/lib", "nvidia/*/*/lib", "nvidia/*/lib64"):
        for d in sorted(glob.glob(os.path.join(r, pattern))):
            print(d)
EOF
}
search_dirs=()
system_dirs=/usr/local/nvidia/lib64:/usr/local/nvidia/lib:/usr/local/cuda/lib64
system_dirs+=:/usr/local/cuda/lib:/usr/local/cuda/targets/x86_64-linux/lib
set_search_dirs() {
  local d fixed=()
  IFS=: read -r -a search_dirs <<< "${TUTTI_CUDA_LIB_DIRS:-}"
  IFS=: read -r -a fixed <<< "${GPU_CHECK_SYSTEM_DIRS-$system_dirs}"
  search_dirs+=("${fixed[@]}")
  if [ -z "${GPU_CHECK_SYSTEM_DIRS+set}" ]; then
    for d in /usr/local/cuda-*/lib64; do [ -d "$d" ] && search_dirs+=("$d"); done
  fi
  while read -r d; do search_dirs+=("$d"); done < <(python_lib_dirs)
}
find_lib() { # NAME: prints the folder that holds it, else nothing
  local d
  for d in "${search_dirs[@]}"; do
    [ -n "$d" ] && [ -e "$d/$1" ] && { echo "$d"; return; }
  done
  [ -n "${GPU_CHECK_SYSTEM_DIRS+set}" ] && return
  ldconfig -p 2>/dev/null | awk -v n="$1" '$1 == n { print $NF; exit }' \
    | xargs -r dirname
}
search_libs() { # MANIFEST: finds each library, sets TUTTI_FOUND_LIB_PATH
  local cublas nccl name dir ld=""
  cublas=$(manifest_value cublas_major "$1"); nccl=$(manifest_value nccl_major "$1")
  set_search_dirs
  for name in libcuda.so.1 libcublas.so.${cublas:-13} libcublasLt.so.${cublas:-13} \
              ${nccl:+libnccl.so.$nccl}; do
    [ "$name" = libnccl.so.none ] && continue
    dir=$(find_lib "$name")
    if [ -n "$dir" ]; then
      printf '  %-20s %s\n' "$name" "$dir"
      case ":$ld:" in *":$dir:"*) ;; *) ld=$ld${ld:+:}$dir ;; esac
    else
      printf '  %-20s NOT FOUND\n' "$name"
    fi
  done
  local also=" and ldconfig"
  [ -n "${GPU_CHECK_SYSTEM_DIRS+set}" ] && also=""
  echo "  (searched: ${search_dirs[*]}$also)"
  TUTTI_FOUND_LIB_PATH=$ld
}
needs() { # MANIFEST: what a machine must have to run this carry
  local rt cublas nccl
  rt=$(manifest_value cuda_runtime "$1" | cut -d' ' -f1)
  cublas=$(manifest_value cublas_major "$1"); nccl=$(manifest_value nccl_major "$1")
  rt=${rt:-0}
  echo "  driver   supporting CUDA $((rt / 1000)).x (the carry links the CUDA $((rt / 1000)).$(((rt % 1000) / 10)) runtime statically$( [ "$((rt / 1000))" -ge 13 ] && echo '; driver 580 or newer'))"
  echo "  GPU      Hopper or newer (sm_90 code, compute_90 PTX)"
  echo "  cuBLAS   libcublas.so.$cublas and libcublasLt.so.$cublas"
  echo "  NCCL     libnccl.so.${nccl:-?} 2.14 or newer, for the NCCL steps only"
}

# -- the dry run: the plan, what it needs, what is here ----------------------
have_gpu() {
  [ "${GPU_CHECK_ASSUME_GPU:-0}" = 1 ] || [ -e /dev/nvidia0 ] || command -v nvidia-smi > /dev/null
}
tree_bytes() { # what the device tool sends besides the carry
  (git ls-files -z; git ls-files -z --others --exclude-standard) \
    | du -cb --files0-from=- 2>/dev/null | tail -1 | cut -f1
}
dry_run() { # WHY
  echo "gpu_check: DRY RUN ($1): nothing is run and nothing passes"
  if [ -e /dev/nvidia0 ] || command -v nvidia-smi > /dev/null; then
    echo "device: this machine has a GPU (/dev/nvidia0 or nvidia-smi)"
  else
    echo "device: none here (no /dev/nvidia0, no nvidia-smi)"
  fi
  local m r st tree archive tmp
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' EXIT
  m=$tmp/MANIFEST
  archive=$build/gpu-run1/carry.tar.xz
  if ! tar -xOJf "$archive" gpu-carry/MANIFEST > "$m" 2>/dev/null; then
    # Not packed yet: what the toolkit here would give it.
    { echo "cuda_runtime: $(sed -n 's/^#define CUDART_VERSION *\([0-9]*\)/\1/p' \
        /usr/local/cuda/include/cuda_runtime_api.h 2>/dev/null | head -1)"
      echo "cublas_major: $(sed -n 's/^#define CUBLAS_VER_MAJOR *\([0-9]*\)/\1/p' \
        /usr/local/cuda/include/cublas_api.h 2>/dev/null | head -1)"
      echo "nccl_major: $(sed -n 's/^#define NCCL_MAJOR *\([0-9]*\)/\1/p' \
        /usr/local/cuda/include/nccl.h 2>/dev/null | head -1)"; } > "$m"
    echo "what a carry built with /usr/local/cuda needs on the GPU machine:"
  else
    echo "what the carry needs on the GPU machine:"
  fi
  needs "$m"
  tree=$(tree_bytes)
  for r in 1 2; do
    echo
    echo "run $r: $(run_total $r) s of timeouts (unpack $unpack_s s included), cap $default_cap_s s;" \
         "device call: command \"bash bench/gpu_check.sh --run $r\"," \
         "carry [\"build/gpu-run$r\"], timeout_s $((default_cap_s + 60))"
    for st in $(steps_of $r); do
      printf '  %-24s %4s s  %s\n' "${st%%:*}" "${st#*:}" "$(describe "${st%%:*}")"
    done
    archive=$build/gpu-run$r/carry.tar.xz
    if [ -f "$archive" ]; then
      awk -v a="$(stat -c %s "$archive")" -v t="$tree" 'BEGIN { m = 1048576; s = a + t;
        printf "  carry %.1f MiB + working tree %.1f MiB = %.1f MiB of 64 MiB: %s\n",
          a / m, t / m, s / m, s < 64 * m ? "fits" : "OVER THE LIMIT" }'
      tar -xOJf "$archive" gpu-carry/MANIFEST 2>/dev/null | sed 's/^/  | /'
    else
      echo "  carry: build/gpu-run$r/carry.tar.xz not built (bench/collect_gpu_carry.sh)"
    fi
  done
  echo
  echo "the CUDA libraries this machine would give the carry:"
  search_libs "$m"
  echo
  local probe=$build/bench/gpu_probe
  if tar -xJf "$build/gpu-run1/carry.tar.xz" -C "$tmp" gpu-carry/bin/gpu_probe 2> /dev/null; then
    probe=$tmp/gpu-carry/bin/gpu_probe
  fi
  if [ -x "$probe" ]; then
    echo "gpu_probe here (${probe#"$tmp/"}):"
    timeout -k 5 20 "$probe" 2>&1 | sed 's/^/  /'
    echo "  (exit ${PIPESTATUS[0]}: 0 ready, 3 kernels only, 1 cannot run, 77 no device)"
  else
    echo "gpu_probe: not built here (bench/collect_gpu_carry.sh builds it)"
  fi
  echo
  echo "On the GPU machine: run 1, then run 2 on the same lease only while the device"
  echo "tool's budget_left_s is at least $((default_cap_s + 60)); then a rerun of what failed:"
  echo "bash bench/gpu_check.sh --run N --steps A,B (bench/GPU_PLAN.md)."
  echo "DRY RUN: 0 passed, 0 failed, $(( ${#steps_run1[@]} + ${#steps_run2[@]} )) not run"
  exit 77
}
[ "$dry" = 1 ] && dry_run "asked for"
have_gpu || dry_run "no GPU here"

# -- a real run ---------------------------------------------------------------
out=${GPU_CHECK_OUT:-${OUT:-/tmp/gpu-check}}
logs=$(mktemp -d -t "gpu-check-run$run.XXXXXX")
mkdir -p "$out"
exec > >(tee "$out/gpu-check-run$run.log") 2>&1
started=$SECONDS
passed=0 failed=0 skipped=0
say() { echo "== $*"; }
result() { # STEP PASS|FAIL|SKIP [DETAIL]
  case $2 in
    PASS) passed=$((passed + 1)) ;;
    FAIL) failed=$((failed + 1)) ;;
    *) skipped=$((skipped + 1)) ;;
  esac
  echo "$2: $1${3:+ ($3)}" | tee -a "$logs/summary.txt"
}
finish() { # EXIT_STATUS
  echo
  cat "$logs/summary.txt" 2>/dev/null
  echo "run $run took $((SECONDS - started)) s of its $cap_s s cap"
  echo "$passed passed, $failed failed, $skipped skipped"
  cp "$logs/summary.txt" "$out/summary-run$run.txt" 2>/dev/null
  tar -C "$logs" -czf "$out/logs-run$run.tar.gz" . 2>/dev/null
  exit "$1"
}

say "run $run: $(steps_of "$run" | cut -d: -f1 | while read -r s; do selected "$s" && echo "$s"; done | tr '\n' ' ')(cap $cap_s s)"
carry=${TUTTI_GPU_CARRY:-}
if [ -z "$carry" ]; then
  archive=$build/gpu-run$run/carry.tar.xz
  if [ ! -f "$archive" ]; then
    echo "gpu_check: no $archive: run bench/collect_gpu_carry.sh on the build" \
         "machine and carry build/gpu-run$run"
    result carry FAIL "not carried"
    finish 1
  fi
  unpacked=$(mktemp -d -t "tutti-carry-run$run.XXXXXX")
  # xz, or Python's lzma where the machine has no xz
  tar -xJf "$archive" -C "$unpacked" 2> /dev/null \
    || python3 -c 'import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2])' \
      "$archive" "$unpacked" \
    || { result carry FAIL "unpack"; finish 1; }
  carry=$unpacked/gpu-carry
fi
sed 's/^/  /' "$carry/MANIFEST"
say "what the carry needs"
needs "$carry/MANIFEST"
say "CUDA libraries"
search_libs "$carry/MANIFEST"
# Only the carried programs see the carried libraries (Debian's OpenSSL,
# zlib, ...): python3 and nvidia-smi keep the machine's own.
carry_ld=$carry/lib${TUTTI_FOUND_LIB_PATH:+:$TUTTI_FOUND_LIB_PATH}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
carried() { # PROGRAM ARGS...: a carried program, with its libraries
  LD_LIBRARY_PATH=$carry_ld "$@"
}
export NCCL_DEBUG=${NCCL_DEBUG:-WARN} # NCCL says why when it fails
echo "  LD_LIBRARY_PATH for the carried programs: $carry_ld"
command -v nvidia-smi > /dev/null \
  && nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1 | sed 's/^/  /'

nccl_ok=0 probe_nccl=""
# Can the step start? Prints the reason it cannot; the caller records it.
blocked() { # SECONDS BINARY NEEDS_NCCL
  local left=$((cap_s - (SECONDS - started)))
  if [ "$1" -gt "$left" ]; then echo "SKIP:run budget: $left s left of $cap_s, step needs $1"; return; fi
  if [ ! -x "$carry/bin/$2" ]; then echo "FAIL:$2 is not in this carry"; return; fi
  local missing
  missing=$(carried ldd "$carry/bin/$2" 2>&1 | awk '/not found/ { printf "%s%s", sep, $1; sep = ", " }')
  if [ -n "$missing" ]; then echo "FAIL:$2 cannot load $missing"; return; fi
  if [ "$3" = 1 ] && [ "$nccl_ok" = 0 ]; then echo "SKIP:no usable NCCL: $probe_nccl"; return; fi
}
# Runs a carried test program; a GPU test that skips on a GPU machine failed.
run_test() { # STEP SECONDS NEEDS_NCCL
  say "$1"
  local why
  why=$(blocked "$2" "$1" "$3")
  if [ -n "$why" ]; then result "$1" "${why%%:*}" "${why#*:}"; return; fi
  carried timeout -k 5 "$2" "$carry/bin/$1" > "$logs/$1.log" 2>&1
  local rc=$?
  tail -25 "$logs/$1.log"
  case $rc in
    0) result "$1" PASS ;;
    77) result "$1" FAIL "skipped on a GPU machine: $(grep -m1 SKIPPED "$logs/$1.log")" ;;
    124 | 137) result "$1" FAIL "timed out after $2 s" ;;
    *) result "$1" FAIL "exit $rc" ;;
  esac
}

step_probe() { # the verdict: stop, or go on with or without NCCL
  say "probe"
  local why
  why=$(blocked "$1" gpu_probe 0)
  if [ -n "$why" ]; then result probe FAIL "${why#*:}"; finish 1; fi
  carried timeout -k 5 "$1" "$carry/bin/gpu_probe" > "$logs/probe.log" 2>&1
  local rc=$? verdict
  cat "$logs/probe.log"
  verdict=$(sed -n 's/^verdict: //p' "$logs/probe.log")
  probe_nccl=$(sed -n 's/^nccl: //p' "$logs/probe.log")
  case $rc in
    0) nccl_ok=1; result probe PASS "$verdict" ;;
    3) result probe PASS "$verdict" ;;
    77) result probe FAIL "$verdict; nvidia-smi sees a GPU but CUDA does not"; finish 1 ;;
    *) result probe FAIL "${verdict:-exit $rc}"
       echo "gpu_check: the carry cannot run here; nothing else is tried"; finish 1 ;;
  esac
}

# -- run 2's steps ------------------------------------------------------------
qs=$logs/quickstart
quickstart_config() { # DEVICE: the quickstart, 30 steps, its data and run here
  sed -e "s|^  communication_backend: gloo|&\n  device: $1|" \
      -e "s|^  steps: .*|  steps: 30|" \
      -e "s|^  dir: runs/quickstart/data|  dir: $qs/data|" \
      -e "s|^  dir: runs/quickstart\$|  dir: $qs/run-$1|" \
      configs/quickstart.yaml > "$qs/$1.yaml"
}
step_tutti() { # STEP SECONDS ARGS...: a tutti command as a step
  local name=$1 secs=$2 why
  shift 2
  say "$name"
  why=$(blocked "$secs" tutti 0)
  if [ -n "$why" ]; then result "$name" "${why%%:*}" "${why#*:}"; return 1; fi
  carried timeout -k 5 "$secs" "$carry/bin/tutti" "$@" > "$logs/$name.log" 2>&1
  local rc=$?
  tail -5 "$logs/$name.log"
  case $rc in
    0) return 0 ;;
    124 | 137) result "$name" FAIL "timed out after $secs s" ;;
    *) result "$name" FAIL "exit $rc: $(tail -1 "$logs/$name.log")" ;;
  esac
  return 1
}
compare_losses() {
  "${py:-python3}" - "$qs/run-cpu/metrics.jsonl" "$qs/run-cuda/metrics.jsonl" <<'EOF'
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
for s in (steps[0], steps[9], steps[19], steps[29]):
    print(f"  step {s}: cpu {cpu[s]:.6f} gpu {gpu[s]:.6f}", file=sys.stderr)
print(("PASS" if worst <= 1e-3 else "FAIL")
      + f" worst relative difference {worst:.2e} at step {at}")
EOF
}

py=$(command -v python3 || true)
torch_ms=0 data_ok=0 cpu_ok=0
sizes=(--tokens 4096 --dim 1024 --ffn 2816 --experts 8 --topk 2)
for st in $(steps_of "$run"); do
  name=${st%%:*} secs=${st#*:}
  selected "$name" || continue
  case $name in
    probe) step_probe "$secs" ;;
    test_cuda_kernels) run_test "$name" "$secs" 0 ;;
    test_nccl_communicator | test_nccl_ranks) run_test "$name" "$secs" 1 ;;
    synth)
      mkdir -p "$qs"
      step_tutti synth "$secs" data synth --out "$qs/data" --vocab 16 --seed 7 \
        --tokens 400000 && { data_ok=1; result synth PASS; } ;;
    quickstart_cpu)
      if [ "$data_ok" = 0 ]; then result "$name" SKIP "no data (synth failed or not selected)"; continue; fi
      quickstart_config cpu
      step_tutti "$name" "$secs" run "$qs/cpu.yaml" && { cpu_ok=1; result "$name" PASS; } ;;
    quickstart_cuda)
      if [ "$cpu_ok" = 0 ]; then result "$name" SKIP "no CPU run to compare with"; continue; fi
      quickstart_config cuda
      if step_tutti "$name" "$secs" run "$qs/cuda.yaml"; then
        verdict=$(compare_losses)
        echo "$verdict"
        case $verdict in
          PASS*) result "$name" PASS "${verdict#PASS }" ;;
          *) result "$name" FAIL "${verdict#FAIL }" ;;
        esac
      fi ;;
    torch_anchor)
      say "$name"
      if [ -z "$py" ]; then result "$name" SKIP "no python3"; continue; fi
      PYTHONUNBUFFERED=1 timeout -k 5 "$secs" "$py" bench/moe_layer_torch.py "${sizes[@]}" \
        > "$logs/$name.log" 2>&1
      tail -5 "$logs/$name.log"
      torch_ms=$(sed -n 's/^torch_moe_ms=//p' "$logs/$name.log" | tail -1)
      if [ -n "$torch_ms" ] && [ "$torch_ms" != 0 ]; then
        result "$name" PASS "$torch_ms ms"
      else
        torch_ms=0
        result "$name" FAIL "no timing (python3 with torch + CUDA?)"
      fi ;;
    gpu_bench)
      say "$name"
      why=$(blocked "$secs" gpu_bench 0)
      if [ -n "$why" ]; then result "$name" "${why%%:*}" "${why#*:}"; continue; fi
      carried timeout -k 5 "$secs" "$carry/bin/gpu_bench" "${sizes[@]}" --torch-moe-ms "$torch_ms" \
        > "$logs/$name.log" 2>&1
      rc=$?
      cat "$logs/$name.log"
      if [ "$rc" = 0 ]; then
        { echo "$(date -u +%F), $(sed -n 's/^device: //p' "$logs/$name.log")"; echo
          grep '^|' "$logs/$name.log"; } > "$out/table.md"
        result "$name" PASS "table in $out/table.md"
      else
        result "$name" FAIL "exit $rc"
      fi ;;
  esac
done
[ "$failed" = 0 ] && finish 0
finish 1
