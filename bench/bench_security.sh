#!/usr/bin/env bash
# Control-plane TLS against none, on the same 2-daemon job
# (configs/cluster-2node.yaml, 2 x 2 ranks on loopback), runs interleaved
# off/on/off/on...: median step time and all-to-all time (steps 11..N of
# each run). The data plane (Gloo) does not pass through TLS, so the goal is
# a difference within noise. Then the handshake time per connection
# (bench_tls_handshake).
# Usage: bench/bench_security.sh [BUILD_DIR] [PAIRS] [STEPS]
set -euo pipefail
cd "$(dirname "$0")/.."
build=$(cd "${1:-build}" && pwd)
pairs=${2:-3}
steps=${3:-120}
tutti=$build/apps/tutti
tuttid=$build/apps/tuttid
work=$build/bench-security
rm -rf "$work"
mkdir -p "$work"
trap 'rm -rf "$work"' EXIT

"$tutti" data synth --out "$work/data" --vocab 16 --seed 7 --tokens 300000 >/dev/null
"$tutti" certs init "$work/pki" >/dev/null
for n in 0 1; do "$tutti" certs issue --ca "$work/pki" --node $n >/dev/null; done

make_config() { # name port tls(0|1)
  python3 - "$work" "$1" "$2" "$3" "$steps" <<'PY'
import re, sys
work, name, port, tls, steps = sys.argv[1:]
port = int(port)
text = open("configs/cluster-2node.yaml").read()
text = re.sub(r'coordinator: "127.0.0.1:\d+"', f'coordinator: "127.0.0.1:{port}"', text)
text = re.sub(r"port: 7101", f"port: {port + 1}", text)
text = re.sub(r"port: 7102", f"port: {port + 2}", text)
text = re.sub(r"(?m)^  steps: .*", f"  steps: {steps}", text)
text = re.sub(r"(?m)^  eval_interval: .*", "  eval_interval: 0", text)
text = text.replace("dir: runs/quickstart/data", f"dir: {work}/data")
text = text.replace("dir: runs/cluster-2node", f"dir: {work}/{name}")
if tls == "1":
    p = f"{work}/pki"
    text += (f"\nsecurity:\n  required: true\n  tls:\n    ca: {p}/ca.crt\n"
             f"    cert: {p}/node-{{node}}.crt\n    key: {p}/node-{{node}}.key\n")
open(f"{work}/{name}.yaml", "w").write(text)
PY
}

median() { # run_dir field
  python3 - "$1/metrics.jsonl" "$2" <<'PY'
import json, sys, statistics
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
print(statistics.median(r[sys.argv[2]] for r in rows if r["step"] > 10))
PY
}

base=$((7300 + RANDOM % 500 * 4))
declare -a off_step on_step off_a2a on_a2a
for i in $(seq 1 "$pairs"); do
  for tls in 0 1; do
    name=run-$i-$tls
    port=$((base + (i * 2 + tls) * 4))
    make_config "$name" "$port" "$tls"
    "$tuttid" --config "$work/$name.yaml" --node-rank 1 >"$work/$name.n1" 2>&1 &
    n1=$!
    timeout 600 "$tuttid" --config "$work/$name.yaml" --node-rank 0 >"$work/$name.n0" 2>&1
    wait $n1
    s=$(median "$work/$name" step_time_s)
    a=$(median "$work/$name" time_alltoall_s)
    if [ "$tls" = 1 ]; then on_step+=("$s"); on_a2a+=("$a"); else off_step+=("$s"); off_a2a+=("$a"); fi
    echo "pair $i, TLS $tls: step $s s, all-to-all $a s"
  done
done
python3 - "${off_step[*]}" "${on_step[*]}" "${off_a2a[*]}" "${on_a2a[*]}" <<'PY'
import statistics, sys
off, on, off_a, on_a = ([float(x) for x in a.split()] for a in sys.argv[1:])
print("figure | value | anchor | anchor value | ratio")
m_on, m_off = statistics.median(on), statistics.median(off)
print(f"step time, control plane TLS on (median of runs) | {m_on*1e3:.2f} ms | TLS off, same job, interleaved | {m_off*1e3:.2f} ms | {m_on/m_off:.3f}")
a_on, a_off = statistics.median(on_a), statistics.median(off_a)
print(f"all-to-all time, TLS on | {a_on*1e3:.2f} ms | TLS off | {a_off*1e3:.2f} ms | {a_on/a_off:.3f}")
print(f"spread of step time across TLS-off runs: {min(off)*1e3:.2f}..{max(off)*1e3:.2f} ms")
PY
"$build/bench/bench_tls_handshake" 200
