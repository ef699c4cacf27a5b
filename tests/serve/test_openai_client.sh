#!/usr/bin/env bash
# `tutti serve` driven by the official OpenAI client library (npm openai,
# locked in tests/serve/openai_client, installed by deploy/install-deps.sh)
# on a tiny byte-level model whose tokenizer_config.json carries Qwen2.5's
# chat template. Exits 77 (CTest: skipped) where node or the client is
# missing.
set -euo pipefail
src=${TUTTI_SOURCE_DIR:?} bin=${TUTTI_BINARY_DIR:?}
client=$src/tests/serve/openai_client
if ! command -v node >/dev/null; then
  echo "SKIPPED test_openai_client: node is not installed"; exit 77
fi
if [ ! -d "$client/node_modules/openai" ]; then
  echo "SKIPPED test_openai_client: the openai client is not installed (deploy/install-deps.sh)"; exit 77
fi
work=$(mktemp -d "${TMPDIR:-/tmp}/tutti_openai_client.XXXXXX")
server=""
cleanup() {
  [ -z "$server" ] || kill "$server" 2>/dev/null || true
  [ -z "$server" ] || wait "$server" 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT
tutti=$bin/apps/tutti
# The quickstart model with a byte vocabulary and room for the prompts.
sed -e 's/vocab_size: 16/vocab_size: 256/' -e 's/max_seq_len: 64/max_seq_len: 256/' \
  "$src/configs/quickstart.yaml" >"$work/model.yaml"
timeout 60 "$tutti" export --init "$work/model.yaml" --format hf --out "$work/model" >/dev/null
node -e 'const fs = require("fs");
  fs.writeFileSync(process.argv[2], JSON.stringify({
    chat_template: fs.readFileSync(process.argv[1], "utf8"),
    bos_token: null, eos_token: "<|im_end|>" }));' \
  "$src/tests/serve/chat_templates/qwen2.5.jinja" "$work/model/tokenizer_config.json"
printf 'serve:\n  model: %s\n' "$work/model" >"$work/serve.yaml"
timeout 120 "$tutti" serve "$work/serve.yaml" --listen 127.0.0.1:0 >"$work/serve.log" 2>&1 &
server=$!
url=""
for _ in $(seq 1 300); do
  url=$(grep -o 'on http://[0-9.:]*' "$work/serve.log" | head -1 | cut -c4-) || true
  [ -n "$url" ] && break
  kill -0 "$server" 2>/dev/null || { cat "$work/serve.log"; exit 1; }
  sleep 0.1
done
[ -n "$url" ] || { echo "tutti serve did not start"; cat "$work/serve.log"; exit 1; }
cd "$client"
timeout 60 node check_openai_client.mjs "$url" model
# tutti bench serve --chat against the same server: every request answered.
timeout 60 "$tutti" bench serve --chat --url "$url" --requests 4 --prompt-tokens 16 \
  --output-tokens 4 --no-progress --json "$work/bench.json" >/dev/null
node -e 'const r = JSON.parse(require("fs").readFileSync(process.argv[1], "utf8"));
  const x = Array.isArray(r) ? r[0] : r;
  if (x.completed !== 4 || x.failed !== 0) { console.error("bench serve --chat:", JSON.stringify(x)); process.exit(1); }
  console.log("tutti bench serve --chat: 4 of 4 answered");' "$work/bench.json"
