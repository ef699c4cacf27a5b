#!/usr/bin/env bash
# A two-rack testbed in network namespaces: 2 racks x 2 nodes. Each node is
# a namespace (tutti-tbTAG-r0n0 ... -r1n1, addresses 10.211.0.1-4/24) whose
# veth goes to its rack's bridge in a switch namespace (tutti-tbTAG-sw); the
# two rack bridges are joined by one veth pair, the inter-rack link. Every
# link is shaped with tc tbf: node links at INTRA_MBIT, the inter-rack link
# at INTER_MBIT (default 1/8 of intra, as seed 001's racks).
#
#   testbed-two-racks.sh up TAG [INTRA_MBIT] [INTER_MBIT]
#   testbed-two-racks.sh down TAG
#   testbed-two-racks.sh exec TAG NODE COMMAND...   (NODE: r0n0 ... r1n1)
#
# Needs root (CAP_SYS_ADMIN, CAP_NET_ADMIN), iproute2 and tc. `up` removes
# what it created if any step fails; `down` is idempotent.
set -euo pipefail

usage() {
  echo "usage: $0 up TAG [INTRA_MBIT] [INTER_MBIT] | down TAG | exec TAG NODE CMD..." >&2
  exit 2
}
[[ $# -ge 2 ]] || usage
cmd=$1
tag=$2
[[ $tag =~ ^[0-9a-z]{1,6}$ ]] || { echo "$0: TAG must be 1-6 of [0-9a-z]" >&2; exit 2; }
prefix=tutti-tb$tag
sw=$prefix-sw
nodes=(r0n0 r0n1 r1n0 r1n1)

down() {
  for n in "${nodes[@]}" sw; do
    ip netns del "$prefix-$n" 2>/dev/null || true
  done
}

up() {
  local intra=${1:-800} inter=${2:-}
  [[ -n $inter ]] || inter=$((intra / 8))
  trap 'down' ERR
  ip netns add "$sw"
  ip -n "$sw" link set lo up
  for r in 0 1; do
    ip -n "$sw" link add "b$r" type bridge
    ip -n "$sw" link set "b$r" up
  done
  ip -n "$sw" link add x0 type veth peer name x1
  for r in 0 1; do
    ip -n "$sw" link set "x$r" master "b$r"
    ip -n "$sw" link set "x$r" up
    # Both directions of the inter-rack link.
    tc -n "$sw" qdisc add dev "x$r" root tbf rate "${inter}mbit" burst 64kb latency 100ms
  done
  for i in 0 1 2 3; do
    local ns=$prefix-${nodes[$i]} rack=$((i / 2))
    ip netns add "$ns"
    ip -n "$ns" link set lo up
    ip -n "$sw" link add "p$i" type veth peer name e0 netns "$ns"
    ip -n "$sw" link set "p$i" master "b$rack"
    ip -n "$sw" link set "p$i" up
    ip -n "$ns" addr add "10.211.0.$((i + 1))/24" dev e0
    ip -n "$ns" link set e0 up
    tc -n "$ns" qdisc add dev e0 root tbf rate "${intra}mbit" burst 256kb latency 100ms
    tc -n "$sw" qdisc add dev "p$i" root tbf rate "${intra}mbit" burst 256kb latency 100ms
  done
  trap - ERR
}

case $cmd in
  up) up "${3:-}" "${4:-}" ;;
  down) down ;;
  exec)
    [[ $# -ge 4 ]] || usage
    node=$3
    shift 3
    exec ip netns exec "$prefix-$node" "$@"
    ;;
  *) usage ;;
esac
