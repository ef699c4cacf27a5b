#!/usr/bin/env bash
# What /dashboard costs a training step: the quickstart job run alone and
# with a client polling the dashboard's JSON as the page does (overview
# once, then metrics, steps and events every 500 ms, four times faster than
# the page's default), interleaved: alone, polled, alone, polled. Prints the
# median step time of each run (metrics.jsonl, after the first 10 steps) and
# the polled runs' difference from the alone ones; the anchor is the runs'
# own spread. A curl poller, not a browser: a browser's own rendering would
# take the CPUs the ranks run on, which is not the server's cost.
# Usage: bench/bench_dashboard.sh [BUILD_DIR] [STEPS]
set -euo pipefail
cd "$(dirname "$0")/.."
build=$(cd "${1:-build}" && pwd)
steps=${2:-600}
tutti=$build/apps/tutti
work=$build/bench-dashboard
rm -rf "$work"
mkdir -p "$work"
poller=
trap '[ -n "$poller" ] && kill "$poller" 2>/dev/null; rm -rf "$work"' EXIT

"$tutti" data synth --out "$work/data" --vocab 16 --seed 7 --tokens 300000 >/dev/null
port=$((20000 + RANDOM % 10000))

make_config() { # run_dir
  python3 - "$1" "$work/data" "$steps" "$port" <<'PY'
import re, sys
run_dir, data, steps, port = sys.argv[1:]
text = open("configs/quickstart.yaml").read()
text = re.sub(r"(?m)^  steps: .*", "  steps: " + steps, text)
text = re.sub(r"(?m)^  eval_interval: .*", "  eval_interval: 0", text)
text = text.replace("dir: runs/quickstart/data", "dir: " + data)
text = text.replace("dir: runs/quickstart", "dir: " + run_dir)
text = re.sub(r"(?m)^metrics:\n(  .*\n)*", "", text)
text += "metrics:\n  port: %s\n" % port
print(text)
PY
}

poll() { # base url: as the page polls, until killed
  local base=$1 last=0
  curl -s -o /dev/null "$base/overview" || true
  while true; do
    curl -s -o /dev/null "$base/metrics" || true
    last=$(curl -s "$base/steps?since=$last&window=100" \
      | python3 -c 'import json,sys
try: print(json.load(sys.stdin)["last_step"])
except Exception: print(0)' 2>/dev/null) || last=0
    curl -s -o /dev/null "$base/events?since=0" || true
    sleep 0.5
  done
}

run_job() { # name polled(0|1)
  make_config "$work/$1" >"$work/$1.yaml"
  if [ "$2" = 1 ]; then
    poll "http://127.0.0.1:$port/dashboard/api" & poller=$!
  fi
  "$tutti" run "$work/$1.yaml" --quiet >/dev/null
  if [ -n "$poller" ]; then kill "$poller" 2>/dev/null; wait "$poller" 2>/dev/null || true; poller=; fi
}

run_job alone1 0; run_job polled1 1; run_job alone2 0; run_job polled2 1

python3 - "$work" <<'PY'
import json, statistics, sys
work = sys.argv[1]
def median_step(run):
    rows = [json.loads(l) for l in open(f"{work}/{run}/metrics.jsonl")]
    return statistics.median(r["step_time_s"] for r in rows if r["step"] > 10)
m = {r: median_step(r) for r in ("alone1", "polled1", "alone2", "polled2")}
alone = (m["alone1"] + m["alone2"]) / 2
polled = (m["polled1"] + m["polled2"]) / 2
spread = abs(m["alone1"] - m["alone2"])
print("| run | median step (ms) |")
print("| --- | --- |")
for r, v in m.items():
    print(f"| {r} | {v * 1e3:.2f} |")
print(f"\npolled - alone: {(polled - alone) * 1e3:+.2f} ms per step "
      f"({(polled / alone - 1) * 100:+.1f}%); alone runs differ by "
      f"{spread * 1e3:.2f} ms (the noise)")
PY
