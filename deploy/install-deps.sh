#!/usr/bin/env bash
# Installs what tutti needs to build and test, from Debian packages only.
# Idempotent: apt-get update runs only when a package is missing.
set -euo pipefail

packages=(
  build-essential cmake ninja-build pkg-config git
  libcaf-dev libgloo-dev libopenblas-dev librocksdb-dev libmsgpack-cxx-dev
  libboost-program-options-dev libyaml-cpp-dev libxxhash-dev catch2
  nlohmann-json3-dev
  python3 iperf3 yamllint iproute2
  libedit-dev tmux prometheus
  libsentencepiece-dev sentencepiece zlib1g-dev python3-doc
  libcpp-httplib-dev curl
  libssl-dev
  libcrypt-dev
  libonig-dev
)

# The benchmarks' peers and profiler (bench/bench_vs_torch.sh), not needed to
# build or test: `deploy/install-deps.sh --bench` adds them.
bench_packages=(python3-torch linux-perf time)
if [ "${1:-}" = "--bench" ]; then
  packages+=("${bench_packages[@]}")
fi

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all ${#packages[@]} packages present"
  exit 0
fi

echo "install-deps: installing ${missing[*]}"
sudo_cmd=""
[ "$(id -u)" -eq 0 ] || sudo_cmd="sudo"
export DEBIAN_FRONTEND=noninteractive
$sudo_cmd apt-get update -qq
$sudo_cmd apt-get install -y -qq --no-install-recommends "${missing[@]}"
