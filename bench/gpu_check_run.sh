# shellcheck shell=bash disable=SC2154 # run, cap_s, build, ...: from gpu_check.sh
# A real run of bench/gpu_check.sh on the GPU machine, sourced by it once
# the plan, the arguments and the library search are set (run, cap_s,
# only, build, steps_of, selected, search_libs, needs): unpack the carry,
# the probe's verdict, then each step of the run, failing or skipping
# alone, within the cap.

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
