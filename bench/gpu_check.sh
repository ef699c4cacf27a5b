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

# -- a real run: bench/gpu_check_run.sh ------------------------------------
# shellcheck source=bench/gpu_check_run.sh
source "$root/bench/gpu_check_run.sh"
