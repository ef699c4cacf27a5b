#!/usr/bin/env bash
# Runs validate_manifests.mjs on deploy/kubernetes (check) or its
# self-test. Exits 77 (CTest: skipped) when node or the schemas
# (tests/deploy/node_modules, from deploy/install-deps.sh) are missing.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
src=${TUTTI_SOURCE_DIR:-$(cd "$here/../.." && pwd)}
command -v node >/dev/null || { echo "SKIPPED: node is not installed (Debian package nodejs; deploy/install-deps.sh)"; exit 77; }
[ -d "$here/node_modules/kubernetes-models" ] ||
  { echo "SKIPPED: no Kubernetes API schemas in $here/node_modules (deploy/install-deps.sh runs npm ci there)"; exit 77; }
bin=${TUTTI_BINARY_DIR:-$src/build}

# The job config the training ConfigMap holds, checked by tutti itself.
check_job_config() {
  local config
  config=$(mktemp) || exit 1
  trap 'rm -f "$config"' RETURN
  (cd "$here" && node --input-type=module -e '
    import { readFileSync } from "node:fs";
    import { parseAllDocuments } from "yaml";
    const docs = parseAllDocuments(readFileSync(process.argv[1], "utf8")).map((d) => d.toJS());
    process.stdout.write(docs.find((d) => d?.metadata?.name === "tutti-train-config").data["cluster.yaml"]);
  ' "$src/deploy/kubernetes/train-job.yaml") >"$config" || { echo "FAILED: no tutti-train-config"; exit 1; }
  out=$(timeout 60 "$bin/apps/tutti" plan "$config" 2>&1) ||
    { echo "FAILED: tutti plan on tutti-train-config's cluster.yaml: $out"; exit 1; }
  echo "ok: tutti plan accepts tutti-train-config's cluster.yaml"
}

case ${1:-} in
check)
  timeout 100 node "$here/validate_manifests.mjs" "$src" || exit 1
  check_job_config
  ;;
self-test) exec timeout 100 node "$here/validate_manifests.mjs" "$src" --self-test ;;
*) echo "usage: $0 check|self-test" >&2; exit 2 ;;
esac
