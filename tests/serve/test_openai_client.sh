#!/usr/bin/env bash
# `tutti serve` driven by the official OpenAI client library (npm openai,
# locked in tests/serve/openai_client, installed by deploy/install-deps.sh)
# on a tiny byte-level model whose tokenizer_config.json carries Qwen2.5's
# chat template. Exits 77 (CTest: skipped) where node or the client is
# missing.
set -euo pipefail
src=${TUTTI_SOURCE_DIR:?} bin=${TUTTI_BINARY_DIR:?}
client=$src/tests/serve/openai_client
source "$src/tests/support/serve_script_support.sh"
require_node_package test_openai_client "$client" openai "deploy/install-deps.sh"
make_scratch tutti_openai_client
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
start_serve "$work/serve.yaml" 120
cd "$client"
timeout 60 node check_openai_client.mjs "$url" model
# tutti bench serve --chat against the same server: every request answered.
timeout 60 "$tutti" bench serve --chat --url "$url" --requests 4 --prompt-tokens 16 \
  --output-tokens 4 --no-progress --json "$work/bench.json" >/dev/null
node -e 'const r = JSON.parse(require("fs").readFileSync(process.argv[1], "utf8"));
  const x = Array.isArray(r) ? r[0] : r;
  if (x.completed !== 4 || x.failed !== 0) { console.error("bench serve --chat:", JSON.stringify(x)); process.exit(1); }
  console.log("tutti bench serve --chat: 4 of 4 answered");' "$work/bench.json"
