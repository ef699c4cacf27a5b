# Shared by the shell tests that drive a live `tutti serve` from node
# (sourced, not run): the skip when node or an npm package is missing, a
# scratch directory removed on exit with the server, and the server's start.

# Exits 77 (CTest: skipped), naming TEST, unless node runs and DIR holds the
# npm package PACKAGE; HINT says how to install it.
require_node_package() {
  local test=$1 dir=$2 package=$3 hint=$4
  if ! command -v node >/dev/null; then
    echo "SKIPPED $test: node is not installed"; exit 77
  fi
  if [ ! -d "$dir/node_modules/$package" ]; then
    echo "SKIPPED $test: $package is not installed ($hint)"; exit 77
  fi
}

# Makes $work, removed on exit together with the server started below.
make_scratch() {
  work=$(mktemp -d "${TMPDIR:-/tmp}/$1.XXXXXX")
  server=""
  trap stop_scratch EXIT
}
stop_scratch() {
  [ -z "$server" ] || kill "$server" 2>/dev/null || true
  [ -z "$server" ] || wait "$server" 2>/dev/null || true
  rm -rf "$work"
}

# Starts `tutti serve CONFIG` on a free port for at most SECONDS, its log in
# $work/serve.log; sets $server and $url once it listens (30 s at most).
start_serve() {
  local config=$1 seconds=$2
  timeout "$seconds" "$tutti" serve "$config" --listen 127.0.0.1:0 \
    >"$work/serve.log" 2>&1 &
  server=$!
  url=""
  for _ in $(seq 1 300); do
    url=$(grep -o 'on http://[0-9.:]*' "$work/serve.log" | head -1 | cut -c4-) || true
    [ -n "$url" ] && return 0
    kill -0 "$server" 2>/dev/null || { cat "$work/serve.log"; exit 1; }
    sleep 0.1
  done
  echo "tutti serve did not start"; cat "$work/serve.log"; exit 1
}
