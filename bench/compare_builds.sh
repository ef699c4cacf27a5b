#!/usr/bin/env bash
# A change against the tree before it, in one run on one machine (these
# machines are noisy: only a same-run comparison says whether a change
# slowed anything). Two build directories, OLD and NEW, each with
# apps/tutti and bench/bench_step, are measured alternately ROUNDS times:
#   - training: bench_step's figure, the quickstart's step time under
#     `tutti run`, and its anchor (the same steps without actors);
#   - serving: `tutti serve` of each build on the medium model
#     (configs/medium.yaml, randomly initialised), driven by the NEW
#     build's `tutti bench serve` at concurrency 1 and 8 (output tokens/s,
#     TTFT and TPOT medians), and the server's CPU seconds for that work.
# Prints a markdown table: OLD, NEW and NEW/OLD of each figure's median,
# and each side's spread over the rounds.
# Usage: bench/compare_builds.sh OLD_BUILD NEW_BUILD [ROUNDS]   (ROUNDS: 3)
set -euo pipefail
cd "$(dirname "$0")/.."
old=$(cd "$1" && pwd)
new=$(cd "$2" && pwd)
rounds=${3:-3}
for b in "$old" "$new"; do
  for f in apps/tutti bench/bench_step; do
    [ -x "$b/$f" ] || { echo "compare_builds: $b/$f missing" >&2; exit 2; }
  done
done
work=$(mktemp -d /tmp/compare_builds.XXXXXX)
server=""
cleanup() {
  [ -n "$server" ] && kill "$server" 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT

"$new/apps/tutti" export --init configs/medium.yaml --format hf \
  --out "$work/medium" >/dev/null

# bench_step's "tutti run" step time and its anchor, in ms, for one build.
train_round() {
  local build=$1 out=$2
  TUTTI_BINARY_DIR="$build" TUTTI_SOURCE_DIR="$PWD" TUTTI_BENCH_REPS=1 \
    "$build/bench/bench_step" > "$out.txt"
  python3 - "$out.txt" >> "$out.tsv" <<'EOF'
import re, sys
def first_number(cell):
    return float(re.match(r"\s*([0-9.]+)", cell).group(1))
for line in open(sys.argv[1]):
    cells = [c.strip() for c in line.split("|")[1:-1]]
    if len(cells) == 5 and cells[0].startswith("step time, tutti run, world"):
        world = cells[0].rsplit(" ", 1)[1]
        print(f"train step ms, world {world}\t{first_number(cells[1])}")
        print(f"train anchor ms, world {world}\t{first_number(cells[3])}")
EOF
}

# One server of `build` on the medium model, driven by NEW's load generator.
serve_round() {
  local build=$1 out=$2
  cat > "$work/serve.yaml" <<EOF
serve:
  model: $work/medium
  listen: 127.0.0.1:0
  max_sequences: 8
  max_batch_tokens: 512
  kv_cache_bytes: 64MiB
EOF
  "$build/apps/tutti" serve "$work/serve.yaml" > "$work/serve.log" 2>&1 &
  server=$!
  local url=""
  for _ in $(seq 1 600); do
    url=$(grep -o 'http://127.0.0.1:[0-9]*' "$work/serve.log" | head -1 || true)
    [ -n "$url" ] && curl -sf "$url/ready" >/dev/null 2>&1 && break
    sleep 0.1
  done
  [ -n "$url" ] || { echo "compare_builds: no server" >&2; exit 1; }
  # The server's CPU time for the same work: steadier than tokens/s when
  # the other core is busy.
  local cpu_before cpu_after
  cpu_before=$(awk '{print $14 + $15}' "/proc/$server/stat")
  "$new/apps/tutti" bench serve --url "$url" --requests 24 \
    --concurrency 1,8 --prompt-tokens 64 --output-tokens 32 \
    --json "$work/bench.json" --no-progress > /dev/null
  cpu_after=$(awk '{print $14 + $15}' "/proc/$server/stat")
  echo -e "serve server CPU s, both levels\t$(( cpu_after - cpu_before ))e-2" \
    >> "$out.tsv"
  kill "$server"
  wait "$server" 2>/dev/null || true
  server=""
  python3 - "$work/bench.json" >> "$out.tsv" <<'EOF'
import json, sys
for r in json.load(open(sys.argv[1])):
    c = r["concurrency"]
    print(f"serve output tok/s, concurrency {c}\t{r['output_token_throughput']}")
    print(f"serve TTFT p50 ms, concurrency {c}\t{r['ttft_ms']['p50']}")
    print(f"serve TPOT p50 ms, concurrency {c}\t{r['tpot_ms']['p50']}")
EOF
}

for round in $(seq 1 "$rounds"); do
  for side in old new; do
    build=${!side}
    echo "round $round: $side ($build)" >&2
    train_round "$build" "$work/$side"
    serve_round "$build" "$work/$side"
  done
done

echo "# $(date -u +%F) on $(nproc) cores: $(lscpu | sed -n 's/^Model name: *//p'), $rounds rounds, medians"
python3 - "$work/old.tsv" "$work/new.tsv" <<'EOF'
import statistics, sys
def read(path):
    out = {}
    for line in open(path):
        key, value = line.rstrip("\n").split("\t")
        out.setdefault(key, []).append(float(value))
    return out
old, new = read(sys.argv[1]), read(sys.argv[2])
# The rounds' spread beside each median: a ratio inside it is noise.
print("| figure | old | new | new / old | old min-max | new min-max |")
print("|---|---:|---:|---:|---:|---:|")
for key in old:
    o, n = statistics.median(old[key]), statistics.median(new[key])
    print(f"| {key} | {o:.2f} | {n:.2f} | {n / o:.3f} "
          f"| {min(old[key]):.2f}-{max(old[key]):.2f} "
          f"| {min(new[key]):.2f}-{max(new[key]):.2f} |")
EOF
