#!/usr/bin/env bash
# Checkpoint save throughput and training stall, each next to an anchor
# measured in the same run (docs/architecture.md, "Performance anchors"):
#   - save throughput: bytes of each checkpoint over the writer's time for
#     them, against `dd conv=fsync` of the same bytes on the same disk;
#   - stall: the time a rank spends at a checkpoint step boundary copying its
#     state to host memory, against the median step time; and the whole
#     run's extra time with checkpoints every 10 steps against the same run
#     checkpointing only at the end.
# Usage: bench/bench_checkpoint.sh [BUILD_DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
build=$(cd "${1:-build}" && pwd)
tutti=$build/apps/tutti
work=$build/bench-checkpoint
rm -rf "$work"
mkdir -p "$work"
trap 'rm -rf "$work"' EXIT

"$tutti" data synth --out "$work/data" --vocab 16 --seed 7 --tokens 300000 >/dev/null

make_config() { # run_dir interval
  python3 - "$1" "$2" "$work/data" <<'PY'
import re, sys
run_dir, interval, data = sys.argv[1:]
text = open("configs/quickstart.yaml").read()
text = re.sub(r"(?m)^  steps: .*", "  steps: 60", text)
text = re.sub(r"(?m)^  eval_interval: .*", "  eval_interval: 0", text)
text = re.sub(r"(?m)^  eval_sequences: .*", "  eval_sequences: 32", text)
text = text.replace("dir: runs/quickstart/data", "dir: " + data)
text = text.replace("dir: runs/quickstart", "dir: " + run_dir)
text += "checkpoint:\n  interval_steps: %s\n  keep_last: 2\n" % interval
print(text)
PY
}

run_job() { # name interval -> seconds
  make_config "$work/$1" "$2" >"$work/$1.yaml"
  local t0=$(date +%s.%N)
  "$tutti" run "$work/$1.yaml" --quiet >/dev/null
  python3 -c "import sys; print(float(sys.argv[1]) - float(sys.argv[2]))" "$(date +%s.%N)" "$t0"
}

dd_gbps() { # bytes -> GB/s of dd conv=fsync writing them
  local bytes=$1
  local out
  out=$(dd if=/dev/zero of="$work/dd.bin" bs="$bytes" count=1 conv=fsync 2>&1 | tail -n 1)
  rm -f "$work/dd.bin"
  python3 -c "import re,sys; m=re.search(r'copied, ([0-9.e-]+) s', sys.argv[1]); print(${bytes}/float(m.group(1))/1e9)" "$out"
}

# Interleave: end-only, every-10, end-only, every-10.
t_end1=$(run_job end1 0); t_ck1=$(run_job ck1 10)
t_end2=$(run_job end2 0); t_ck2=$(run_job ck2 10)

python3 - "$work" "$t_end1" "$t_end2" "$t_ck1" "$t_ck2" <<'PY' >"$work/figures"
import json, re, statistics, sys
work, e1, e2, c1, c2 = sys.argv[1], *map(float, sys.argv[2:])
per_ckpt, seconds = {}, {}
for run in ("ck1", "ck2"):
    for line in open(f"{work}/{run}/tutti.log.jsonl"):
        m = re.search(r"shard written: .*step-(\d+)/\S+ bytes (\d+) seconds ([0-9.]+)", line)
        if m:
            key = (run, int(m.group(1)))
            per_ckpt[key] = per_ckpt.get(key, 0) + int(m.group(2))
            seconds[key] = seconds.get(key, 0) + float(m.group(3))
steps = [json.loads(l) for run in ("ck1", "ck2") for l in open(f"{work}/{run}/metrics.jsonl")]
ck = [s["time_other_s"] for s in steps if s["step"] % 10 == 0 and s["step"] < 60]
plain = [s["time_other_s"] for s in steps if s["step"] % 10 != 0]
step_time = statistics.median(s["step_time_s"] for s in steps if s["step"] % 10 != 0)
stall = statistics.median(ck) - statistics.median(plain)
bytes_per = statistics.median(per_ckpt.values())
gbps = statistics.median(per_ckpt[k] / seconds[k] / 1e9 for k in per_ckpt)
extra = ((c1 + c2) - (e1 + e2)) / 2 / 5  # five more checkpoints per run
print(bytes_per, gbps, stall, step_time, extra)
PY
read -r bytes gbps stall step_time extra <"$work/figures"
dd1=$(dd_gbps "${bytes%.*}"); dd2=$(dd_gbps "${bytes%.*}"); dd3=$(dd_gbps "${bytes%.*}")
dd=$(printf '%s\n' "$dd1" "$dd2" "$dd3" | sort -g | sed -n 2p)

echo "# checkpoint: quickstart model, 60 steps, every 10 steps, 2 runs each way"
echo
echo "| figure | value | anchor | anchor value | ratio |"
echo "|---|---:|---|---:|---:|"
python3 - "$bytes" "$gbps" "$dd" "$stall" "$step_time" "$extra" <<'PY'
import sys
b, gbps, dd, stall, step, extra = map(float, sys.argv[1:])
print(f"| save throughput ({b/1e6:.2f} MB per checkpoint) | {gbps:.3f} GB/s | dd conv=fsync, same bytes, same disk | {dd:.3f} GB/s | {gbps/dd:.2f} |")
print(f"| stall at a checkpoint step (snapshot to host memory) | {stall*1e3:.2f} ms | median step time | {step*1e3:.1f} ms | {stall/step:.3f} |")
print(f"| whole-run extra time per checkpoint (writer competing for the cores) | {extra*1e3:.1f} ms | median step time | {step*1e3:.1f} ms | {extra/step:.3f} |")
PY
