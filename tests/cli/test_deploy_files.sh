#!/usr/bin/env bash
# Checks deploy/ and configs/ with the tools that understand them.
#   test_deploy_files.sh systemd   systemd-analyze verify on the unit
#   test_deploy_files.sh yaml      yamllint -d relaxed on the Kubernetes
#                                  manifests and configs/*.yaml (their
#                                  schemas: tests/deploy/test_manifests.sh)
#   test_deploy_files.sh shell     bash -n on deploy's scripts and the
#                                  sbatch scripts
# Exits 0 when the check passes, 1 when it fails, 77 (CTest: skipped) when
# the tool is missing on this machine.
set -uo pipefail

src=${TUTTI_SOURCE_DIR:-$(cd "$(dirname "$0")/../.." && pwd)}
bin=${TUTTI_BINARY_DIR:-$src/build}
mode=${1:-}

skip() { echo "SKIPPED: $*"; exit 77; }
fail() { echo "FAILED: $*"; exit 1; }

case "$mode" in
systemd)
  command -v systemd-analyze >/dev/null || skip "systemd-analyze is not installed (Debian package systemd)"
  unit=$src/deploy/systemd/tuttid.service
  [ -f "$unit" ] || fail "$unit is missing"
  # The unit as shipped points at /opt/tutti/bin/tuttid, which is not
  # installed here and which verify would (rightly) report. Verify a copy
  # whose ExecStart names the built daemon; everything else is unchanged.
  tuttid=$bin/apps/tuttid
  [ -x "$tuttid" ] || tuttid=$(command -v true)
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' EXIT
  grep -q '^ExecStart=/opt/tutti/bin/tuttid ' "$unit" || fail "ExecStart does not start /opt/tutti/bin/tuttid"
  sed "s#^ExecStart=/opt/tutti/bin/tuttid #ExecStart=$tuttid #" "$unit" > "$tmp/tuttid.service"
  grep -q "^ExecStart=$tuttid " "$tmp/tuttid.service" || fail "could not point ExecStart at $tuttid"
  # verify exits 0 on unknown keys and unparsable values (it only warns),
  # so any output at all counts as a finding.
  out=$(cd "$tmp" && timeout 60 systemd-analyze verify "$tmp/tuttid.service" 2>&1)
  rc=$?
  echo "systemd-analyze verify (ExecStart=$tuttid): rc=$rc"
  [ -n "$out" ] && echo "$out"
  [ $rc -eq 0 ] || fail "systemd-analyze verify exited $rc"
  [ -z "$out" ] || fail "systemd-analyze verify reported problems"
  # What a node daemon's unit must do: restart on failure, know its node rank.
  grep -q '^Restart=on-failure$' "$unit" || fail "no Restart=on-failure"
  grep -q -- '--node-rank' "$unit" || fail "ExecStart passes no --node-rank"
  echo "ok: $unit"
  ;;
yaml)
  command -v yamllint >/dev/null || skip "yamllint is not installed (Debian package yamllint; deploy/install-deps.sh)"
  files=("$src"/deploy/kubernetes/*.yaml "$src"/configs/*.yaml)
  out=$(timeout 60 yamllint -f parsable -d relaxed "${files[@]}" 2>&1)
  rc=$?
  echo "yamllint -d relaxed ${files[*]}: rc=$rc"
  [ -n "$out" ] && echo "$out"
  [ $rc -eq 0 ] || fail "yamllint found errors"
  echo "ok: ${#files[@]} files"
  ;;
shell)
  command -v bash >/dev/null || skip "bash is not installed"
  status=0
  for f in "$src"/deploy/*.sh "$src"/deploy/image/*.sh "$src"/deploy/slurm/*; do
    if out=$(bash -n "$f" 2>&1); then
      echo "ok: bash -n $f"
    else
      echo "FAILED: bash -n $f"
      echo "$out"
      status=1
    fi
  done
  exit $status
  ;;
*)
  echo "usage: $0 systemd|yaml|shell" >&2
  exit 2
  ;;
esac
