# Sourced by the benchmarks on the two-rack testbed (bench_two_rack.sh,
# bench_serve_two_rack.sh) after they set name, tutti, tuttid, testbed and
# tag: their checks (exit 2 unbuilt, 77 where network namespaces are not
# allowed) and the teardown of the testbed and of every process whose pid
# they add to `procs`, on any exit.

testbed_preflight() {
  local bin
  for bin in "$tutti" "$tuttid"; do
    [[ -x $bin ]] || { echo "$name: $bin is not built" >&2; exit 2; }
  done
  if [[ $(id -u) != 0 ]]; then
    echo "$name: skipped: not root (network namespaces need CAP_SYS_ADMIN)"
    exit 77
  fi
  if ! ip netns add "tutti-tbprobe-$$" 2>/dev/null; then
    echo "$name: skipped: \`ip netns add\` is not allowed here"
    exit 77
  fi
  ip netns del "tutti-tbprobe-$$"
}

procs=()
testbed_cleanup() {
  local pid
  for pid in "${procs[@]}"; do kill -9 "$pid" 2>/dev/null || true; done
  "$testbed" down "$tag" >/dev/null 2>&1 || true
}
trap testbed_cleanup EXIT
trap 'exit 1' INT TERM
