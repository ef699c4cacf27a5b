#!/usr/bin/env bash
# Installs what tutti needs to build and test, from Debian packages only.
# Idempotent: apt-get update runs only when a package is missing.
set -euo pipefail

packages=(
  build-essential cmake ninja-build pkg-config git
  libcaf-dev libgloo-dev libopenblas-dev librocksdb-dev libmsgpack-cxx-dev
  libboost-program-options-dev libyaml-cpp-dev libxxhash-dev catch2
  libdnnl-dev # bf16 GEMMs on the CPU (kernels/src/cpu_bf16_gemm.cpp)
  nlohmann-json3-dev
  python3 iperf3 yamllint iproute2
  libedit-dev tmux prometheus
  libsentencepiece-dev sentencepiece zlib1g-dev python3-doc
  libcpp-httplib-dev curl
  libssl-dev
  libcrypt-dev
  libonig-dev
  xz-utils # the GPU carries (bench/collect_gpu_carry.sh) and their test
  chromium # the dashboard's browser test
  mmdebstrap umoci # the OCI image (deploy/image/build-image.sh) and its test
  nodejs # the Kubernetes manifests' check (tests/deploy)
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
else
  echo "install-deps: installing ${missing[*]}"
  sudo_cmd=""
  [ "$(id -u)" -eq 0 ] || sudo_cmd="sudo"
  export DEBIAN_FRONTEND=noninteractive
  $sudo_cmd apt-get update -qq
  $sudo_cmd apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

# npm for the manifests' check below: Debian's, unless node came with its own.
if ! command -v npm >/dev/null; then
  sudo_cmd=""
  [ "$(id -u)" -eq 0 ] || sudo_cmd="sudo"
  DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq --no-install-recommends npm
fi

# The Kubernetes API's schemas, for the offline check of deploy/kubernetes
# (tests/deploy/validate_manifests.mjs): kubernetes-models and yaml from
# npm, at the versions locked in tests/deploy/package-lock.json, into
# tests/deploy/node_modules (git-ignored).
deploy_checks="$(cd "$(dirname "$0")/.." && pwd)/tests/deploy"
if [ ! -d "$deploy_checks/node_modules/kubernetes-models" ]; then
  (cd "$deploy_checks" && npm ci --no-audit --no-fund --loglevel=error)
  echo "install-deps: Kubernetes API schemas (kubernetes-models) in $deploy_checks/node_modules"
fi

# The official OpenAI client library (tests/serve/test_openai_client.sh):
# npm openai at the version locked in tests/serve/openai_client/
# package-lock.json, into its node_modules (git-ignored).
openai_client="$(cd "$(dirname "$0")/.." && pwd)/tests/serve/openai_client"
if [ ! -d "$openai_client/node_modules/openai" ]; then
  (cd "$openai_client" && npm ci --no-audit --no-fund --loglevel=error)
  echo "install-deps: the OpenAI client library (openai) in $openai_client/node_modules"
fi

# llama.cpp, the serving peer (bench/bench_vs_llama.sh, tests/peer/test_llama_peer.sh):
# node-llama-cpp's prebuilt CPU binaries from npm, at the versions locked in
# bench/peer/package-lock.json, into bench/peer/node_modules (git-ignored).
# npm install, not npm ci: the lock cannot list the other platforms' binaries,
# which npm ci then calls missing.
# Its install script is not run and it never builds or downloads llama.cpp,
# so everything after this step works offline.
if [ "${1:-}" = "--bench" ]; then
  node_major=$(node -p 'process.versions.node.split(".")[0]' 2>/dev/null || echo 0)
  if [ "$node_major" -lt 20 ]; then
    echo "install-deps: node-llama-cpp needs node 20 or newer (found ${node_major}); llama.cpp peer not installed"
  else
    peer_dir="$(cd "$(dirname "$0")/.." && pwd)/bench/peer"
    (cd "$peer_dir" && NODE_LLAMA_CPP_SKIP_DOWNLOAD=true npm install --omit=optional \
      --ignore-scripts --no-audit --no-fund --loglevel=error)
    echo "install-deps: llama.cpp peer (node-llama-cpp) in $peer_dir/node_modules"
  fi
fi
