#!/usr/bin/env bash
# The gateway's operations figures, on the randomly initialised
# medium model (configs/medium.yaml), each beside an anchor from the same run:
#
# 1. Rollback: a canary whose version is broken (lm_head NaN, so every
#    request it takes is an error) at 10% of the traffic; the gateway's
#    time from the canary's first failed request to the rollback
#    (rollback_after_failure_s). Anchor: the time the breaker needs to see
#    breaker_failures canary requests at the measured request rate,
#    breaker_failures / (0.10 * requests per second).
# 2. Scale-up: p99 TTFT of a load (concurrency C) that makes the gateway
#    put its warm spare to work mid-run, against the same load right after
#    with both replicas serving (steady state).
# 3. Warm spare against cold start: the time from the scale-up decision to
#    the added replica's first request (last_take_traffic_s), with a warm
#    spare and without one (a new `tutti serve` process loads the model).
#
# Usage: bench/bench_gateway.sh [BUILD_DIR]   (C=8 REQUESTS=160 by default)
# Prints the table rows for bench/RESULTS.md with the load average.
set -euo pipefail
cd "$(dirname "$0")/.."
build=$(cd "${1:-build}" && pwd)
tutti=$build/apps/tutti
c=${C:-8} requests=${REQUESTS:-160}
[ -x "$tutti" ] || { echo "bench_gateway: $tutti not built" >&2; exit 1; }

scratch=$(mktemp -d /tmp/bench_gateway.XXXXXX)
pids=()
cleanup() {
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
  rm -rf "$scratch"
}
trap cleanup EXIT

free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}
json_get() { # FILE-or-URL EXPR: a Python expression over j
  python3 -c "import json,sys,urllib.request
src=sys.argv[1]
j=json.load(urllib.request.urlopen(src) if src.startswith('http') else open(src))
print(eval(sys.argv[2]))" "$1" "$2"
}
# Starts `tutti gateway CONFIG` on a free port; waits until N replicas are
# healthy. Sets $gw_port and $gw_pid.
start_gateway() {
  gw_port=$(free_port)
  "$tutti" gateway "$1" --listen "127.0.0.1:$gw_port" \
    --replica-logs "$scratch/replicas-$gw_port" >"$scratch/gateway-$gw_port.log" 2>&1 &
  gw_pid=$!
  pids+=("$gw_pid")
  for _ in $(seq 1 600); do
    n=$(json_get "http://127.0.0.1:$gw_port/admin/status" \
          "sum(1 for r in j['replicas'] if r['healthy'])" 2>/dev/null || echo 0)
    [ "$n" -ge "$2" ] && return 0
    sleep 0.2
  done
  echo "bench_gateway: the gateway's replicas did not come up" >&2
  cat "$scratch/gateway-$gw_port.log" >&2
  exit 1
}
stop_gateway() { kill "$gw_pid"; wait "$gw_pid" 2>/dev/null || true; }
bench() { # JSON_OUT CONCURRENCY REQUESTS
  "$tutti" bench serve --url "http://127.0.0.1:$gw_port" --requests "$3" \
    --concurrency "$2" --prompt-tokens 32 --output-tokens 32 --no-progress \
    --json "$1" >/dev/null || true # the broken canary's requests fail
  [ -s "$1" ] || { echo "bench_gateway: tutti bench serve wrote no $1" >&2; exit 1; }
}

"$tutti" export --init configs/medium.yaml --format hf --out "$scratch/v1" >/dev/null
cp -r "$scratch/v1" "$scratch/v2"
python3 - "$scratch/v2/model.safetensors" <<'PY'
import json, struct, sys
p = sys.argv[1]
b = bytearray(open(p, 'rb').read())
n = struct.unpack('<Q', b[:8])[0]
h = json.loads(b[8:8 + n])
t = h['lm_head.weight']
assert t['dtype'] == 'F32'
s, e = t['data_offsets']
b[8 + n + s:8 + n + e] = struct.pack('<f', float('nan')) * ((e - s) // 4)
open(p, 'wb').write(b)
PY
for v in v1 v2; do
  "$tutti" publish "$scratch/$v" --name medium --version "$v" --registry "$scratch/registry" >/dev/null
  printf 'serve:\n  model_version: medium@%s\n  registry: %s\n  ep_size: 1\n' \
    "$v" "$scratch/registry" >"$scratch/serve-$v.yaml"
done
load=$(cut -d' ' -f1-3 /proc/loadavg)

# 1. Rollback.
cat >"$scratch/canary.yaml" <<YAML
gateway:
  health_interval_s: 0.5
  breaker_failures: 3
stable:
  version: medium@v1
  serve_config: $scratch/serve-v1.yaml
canary:
  version: medium@v2
  serve_config: $scratch/serve-v2.yaml
  steps: [10, 50, 100]
  step_s: 600
  min_requests: 20
YAML
start_gateway "$scratch/canary.yaml" 2
bench "$scratch/canary.json" 4 "$requests"
status=http://127.0.0.1:$gw_port/admin/status
rollback_s=$(json_get "$status" "j.get('rollback_after_failure_s', -1)")
rps=$(json_get "$scratch/canary.json" "j[0]['request_throughput']")
anchor=$(python3 -c "print(3 / (0.10 * $rps))")
stop_gateway

# 2 and 3. Scale-up with a warm spare, then without.
scale_config() { # WARM_SPARES
  cat <<YAML
gateway:
  health_interval_s: 0.2
stable:
  version: medium@v1
  serve_config: $scratch/serve-v1.yaml
autoscale:
  min_replicas: 1
  max_replicas: 2
  warm_spares: $1
  scale_up_queue: 2
  scale_up_after_s: 1
  scale_down_idle_s: 600
YAML
}
scale_config 1 >"$scratch/warm.yaml"
start_gateway "$scratch/warm.yaml" 2
status=http://127.0.0.1:$gw_port/admin/status
bench "$scratch/scaleup.json" "$c" "$requests"
warm_s=$(json_get "$status" "j.get('last_take_traffic_s', -1)")
bench "$scratch/steady.json" "$c" "$requests"
p99_up=$(json_get "$scratch/scaleup.json" "j[0]['ttft_ms']['p99']")
p99_steady=$(json_get "$scratch/steady.json" "j[0]['ttft_ms']['p99']")
stop_gateway
scale_config 0 >"$scratch/cold.yaml"
start_gateway "$scratch/cold.yaml" 1
status=http://127.0.0.1:$gw_port/admin/status
bench "$scratch/cold.json" "$c" "$requests"
cold_s=$(json_get "$status" "j.get('last_take_traffic_s', -1)")
stop_gateway

echo "load average before: $load"
python3 - "$rollback_s" "$anchor" "$p99_up" "$p99_steady" "$warm_s" "$cold_s" <<'PY'
import sys
rb, an, up, st, warm, cold = map(float, sys.argv[1:])
r = lambda a, b: f"{a / b:.2f}" if b > 0 else "n/a"
print("| figure | value | anchor | anchor value | ratio |")
print("|---|---:|---|---:|---:|")
print(f"| canary failure to full rollback (10% share, breaker 3) | {rb:.3f} s | 3 canary requests at the measured rate | {an:.3f} s | {r(rb, an)} |")
print(f"| p99 TTFT during scale-up (1 -> 2 replicas, warm spare) | {up:.1f} ms | same load, 2 replicas steady | {st:.1f} ms | {r(up, st)} |")
print(f"| scale-up decision to first request, warm spare | {warm:.3f} s | cold start (new tutti serve) | {cold:.3f} s | {r(warm, cold)} |")
PY
