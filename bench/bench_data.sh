#!/usr/bin/env bash
# The data path against anchors measured in the same run
# (docs/architecture.md, "Performance anchors"):
#   - `tutti data prepare` throughput (MB/s of text read, all cores) against
#     SentencePiece's own encoder, `spm_encode` (Debian package sentencepiece),
#     on the same files, the same tokenizer model and the same cores (one
#     spm_encode per core on an equal slice of the text);
#   - one data loader's tokens/s against the job's consumption per rank
#     (RUN_DIR/metrics.jsonl of configs/text.yaml's run, when it exists) and
#     the shards' read + verify against `dd` sequential reads of them.
# Corpus: the Python documentation's sources (Debian's python3-doc).
# Usage: bench/bench_data.sh [BUILD_DIR] [RUN_DIR]   (RUN_DIR: runs/text)
set -euo pipefail
cd "$(dirname "$0")/.."
build=$(cd "${1:-build}" && pwd)
run_dir=${2:-runs/text}
tutti=$build/apps/tutti
corpus=/usr/share/doc/python3.11/html/_sources
for need in "$corpus" /usr/bin/spm_encode; do
  [ -e "$need" ] || { echo "bench_data: $need missing (deploy/install-deps.sh)"; exit 77; }
done
work=$build/bench-data
rm -rf "$work"
mkdir -p "$work"
trap 'rm -rf "$work"' EXIT
cores=$(nproc)
now() { date +%s.%N; }

echo "bench_data: $(date -u +%FT%TZ), $cores cores, load $(cut -d' ' -f1-3 /proc/loadavg)"
if [ -f "$run_dir/data/tokenizer.model" ]; then
  cp "$run_dir/data/tokenizer.model" "$work/"
else
  "$tutti" data tokenizer train --input "$corpus" --vocab 2048 --out "$work" >/dev/null
fi

# The same text both sides read: the corpus files, concatenated for
# spm_encode and cut into one slice per core on line boundaries.
find "$corpus" -type f -name '*.txt' | sort | xargs cat >"$work/all.txt"
bytes=$(stat -c %s "$work/all.txt")
split -n l/"$cores" -d "$work/all.txt" "$work/slice."
slices=$(ls "$work"/slice.*)

best_prepare=0 best_spm=0
for _ in 1 2 3; do # interleaved, best of 3: the machine is shared
  rm -rf "$work/ds"
  t0=$(now)
  "$tutti" data prepare --input "$corpus" --tokenizer "$work" --out "$work/ds" \
    --threads "$cores" >/dev/null
  t1=$(now)
  echo "$slices" | xargs -P "$cores" -I{} sh -c \
    'spm_encode --model "$0/tokenizer.model" --output_format=id < "$1" > "$1.ids"' "$work" {}
  t2=$(now)
  best_prepare=$(python3 -c "print(max($best_prepare, $bytes / 1e6 / ($t1 - $t0)))")
  best_spm=$(python3 -c "print(max($best_spm, $bytes / 1e6 / ($t2 - $t1)))")
done
spm_tokens=$(cat "$work"/slice.*.ids | wc -w)
rm -f "$work"/slice.* "$work/all.txt"
prep_tokens=$(python3 -c "import json; r=json.load(open('$work/ds/report.json')); print(r['train_tokens'] + r['val_tokens'] - r['documents'])")

# dd: sequential reads of the prepared shards, cold where O_DIRECT works.
shards=$(ls "$work"/ds/*.tok)
shard_bytes=$(cat $shards | wc -c)
t0=$(now)
for f in $shards; do dd if="$f" of=/dev/null bs=4M iflag=direct 2>/dev/null \
  || dd if="$f" of=/dev/null bs=4M 2>/dev/null; done
t1=$(now)
dd_mb_s=$(python3 -c "print($shard_bytes / 1e6 / ($t1 - $t0))")

# One loader on the prepared shards, with configs/text.yaml's batch shape.
sed -e "s#dir: runs/text/data#dir: $work/ds#" -e "s#dir: runs/text\$#dir: $run_dir#" \
  configs/text.yaml >"$work/text.yaml"
loader=$("$tutti" data bench "$work/text.yaml" --run "$run_dir" --steps 400 | tail -1)

python3 - "$best_prepare" "$best_spm" "$prep_tokens" "$spm_tokens" "$dd_mb_s" "$loader" "$cores" <<'PY'
import json, sys
prep, spm, prep_tok, spm_tok, dd, loader, cores = sys.argv[1:]
prep, spm, dd = float(prep), float(spm), float(dd)
l = json.loads(loader)
rows = [
  ("tutti data prepare, %s threads" % cores, "%.2f MB/s" % prep,
   "spm_encode x %s processes" % cores, "%.2f MB/s" % spm, prep / spm),
  ("tokens (prepare without EOS / spm_encode)", prep_tok, "", spm_tok,
   int(prep_tok) / max(1, int(spm_tok))),
  ("shards read + verified, through a read buffer, cold", "%.0f MB/s" % l["verify_buffered_mb_s"],
   "dd sequential read", "%.0f MB/s" % dd, l["verify_buffered_mb_s"] / dd),
  ("shards read + verified, mapped (load_split), cold", "%.0f MB/s" % l["verify_mb_s"],
   "dd sequential read", "%.0f MB/s" % dd, l["verify_mb_s"] / dd),
  ("`tutti data warm`, then mapped read + verified", "%.0f MB/s" % l["warm_verify_mb_s"],
   "dd sequential read", "%.0f MB/s" % dd, l["warm_verify_mb_s"] / dd),
  # The disk's speed in the loader's unit: 2 bytes a token on disk.
  ("one loader", "%.0f tok/s" % l["loader_tokens_per_s"],
   "dd read, as tokens (2 B each)", "%.0f tok/s" % (dd * 1e6 / 2),
   l["loader_tokens_per_s"] / (dd * 1e6 / 2)),
]
if l["job_tokens_per_s_per_rank"] > 0:
  rows.append(("one loader", "%.0f tok/s" % l["loader_tokens_per_s"],
               "job's consumption per rank", "%.0f tok/s" % l["job_tokens_per_s_per_rank"],
               l["headroom"]))
else:
  rows.append(("one loader", "%.0f tok/s" % l["loader_tokens_per_s"],
               "job's consumption per rank", "(no run)", float("nan")))
print("| figure | value | anchor | anchor value | ratio |")
print("|---|---:|---|---:|---:|")
for r in rows:
  print("| %s | %s | %s | %s | %.3g |" % r)
PY
