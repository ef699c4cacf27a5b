#!/usr/bin/env bash
# Builds tutti's OCI image from Debian packages only: no base image, no
# registry. mmdebstrap makes a minimal Debian root file system (variant
# essential: no apt, no compiler) from Debian's archive with the runtime
# packages the built programs load (found with ldd and dpkg -S); the
# programs go to /opt/tutti/bin, debug info stripped; umoci assembles it:
#
#   OUT/oci/                  OCI image layout, tag VERSION (cpu) or
#                             VERSION-gpu, the name `tutti` in the manifests
#   OUT/tutti-TAG.oci.tar     the same as one archive: `skopeo copy
#                             oci-archive:OUT/tutti-TAG.oci.tar:TAG
#                             docker://REGISTRY/tutti:TAG`, `podman load -i`
#
# Layer 1 is the root file system; layer 2 is one file,
# /opt/tutti/image-digest: layer 1's digest and the image's name. tuttid
# reports it when it joins a job, and the coordinator refuses (or warns
# about, diag.environment) a node whose image differs. Config: user
# tutti (10001), entry point tuttid, labels org.opencontainers.image.*
# (version, revision, created) and io.tutti.* (variant, rootfs digest).
#
# The variant follows the build: cpu for a build without the CUDA
# backend (every library from a Debian package), gpu for one with it. The
# gpu image carries the CUDA libraries the programs load (NCCL, cuBLAS,
# cuBLASLt, about 800 MB) and expects the host's driver (libcuda) from the
# NVIDIA container toolkit; --cuda-libs-from-host DIR carries none and
# looks in DIR instead (a site that mounts its CUDA installation there).
#
# Usage: deploy/image/build-image.sh [--build-dir DIR] [--out DIR]
#          [--cuda-libs-from-host DIR]
# Environment: TUTTI_IMAGE_MIRROR (default http://deb.debian.org/debian),
# TUTTI_IMAGE_SECURITY_MIRROR (http://deb.debian.org/debian-security),
# TUTTI_IMAGE_DEADLINE_S (900: mmdebstrap's limit).
# Exit: 0 built, 1 failed, 2 bad usage, 3 cannot build here (no root, a
# tool missing, the archive unreachable; the reason is printed).
set -euo pipefail
src=$(cd "$(dirname "$0")/../.." && pwd)
build=$src/build
out=""
host_cuda=""
mirror=${TUTTI_IMAGE_MIRROR:-http://deb.debian.org/debian}
security=${TUTTI_IMAGE_SECURITY_MIRROR:-http://deb.debian.org/debian-security}
deadline=${TUTTI_IMAGE_DEADLINE_S:-900}

usage() { sed -n '/^# Usage:/,/^# Exit:/p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }
die() { echo "build-image: $*" >&2; exit 1; }
cannot() { echo "build-image: cannot build here: $*" >&2; exit 3; }

while [ $# -gt 0 ]; do
  case $1 in
  --build-dir) build=$(realpath -m "${2:?}"); shift 2 ;;
  --out) out=$(realpath -m "${2:?}"); shift 2 ;;
  --cuda-libs-from-host) host_cuda=${2:?}; shift 2 ;;
  -h | --help) usage ;;
  *) echo "build-image: unknown argument '$1'" >&2; usage ;;
  esac
done
out=${out:-$build/image}

# -- what this machine must have ------------------------------------------------
[ "$(id -u)" = 0 ] || cannot "needs root (mmdebstrap's root mode, file owners in the layers)"
for tool in mmdebstrap umoci python3 curl; do
  command -v "$tool" >/dev/null || cannot "$tool is not installed (deploy/install-deps.sh installs it)"
done
# The programs were built against this Debian release: the image is it.
. /etc/os-release
[ "${ID:-}" = debian ] && [ -n "${VERSION_CODENAME:-}" ] ||
  cannot "the programs were built on ${PRETTY_NAME:-an unknown system}, not Debian"
suite=$VERSION_CODENAME
curl -sfI --max-time 20 "$mirror/dists/$suite/InRelease" >/dev/null ||
  cannot "Debian's archive is not reachable at $mirror (set TUTTI_IMAGE_MIRROR)"

programs=(tutti tuttid tutti-serve tutti-gateway)
for p in "${programs[@]}"; do
  [ -x "$build/apps/$p" ] || die "$build/apps/$p is missing: build first (deploy/build.sh)"
done
# A build with the CUDA backend compiled kernels with nvcc and was told
# where cuBLAS is (TUTTI_CUBLAS_DIR, loaded when first used).
cuda_dir=$(grep -o 'TUTTI_CUBLAS_DIR=\\"[^\\]*' "$build/build.ninja" 2>/dev/null | head -1 | cut -d'"' -f2)
cuda_build=0
[ -n "$cuda_dir" ] && cuda_build=1
variant=cpu
[ $cuda_build = 1 ] && variant=gpu
[ -z "$host_cuda" ] || [ $variant = gpu ] ||
  die "--cuda-libs-from-host: $build has no CUDA backend (a cpu image)"

version=$(sed -n 's/^project(tutti VERSION \([0-9.]*\).*/\1/p' "$src/CMakeLists.txt")
[ -n "$version" ] || die "no project(tutti VERSION ...) in $src/CMakeLists.txt"
tag=$version
[ $variant = gpu ] && tag=$version-gpu
revision=$(git -C "$src" rev-parse HEAD 2>/dev/null || echo unknown)
git -C "$src" diff --quiet HEAD 2>/dev/null || revision="$revision+changes"
created=$(date -u +%Y-%m-%dT%H:%M:%SZ)

# -- the runtime packages: the Debian package of every library loaded ---------
packages=() cuda_libs=()
package_of() { # a library's path -> its Debian package, or nothing
  local real candidate pkg
  real=$(readlink -f "$1")
  for candidate in "$real" "/usr$real" "$1"; do
    pkg=$(dpkg -S "$candidate" 2>/dev/null | grep -v '^diversion' | head -1 | cut -d: -f1)
    [ -n "$pkg" ] && { echo "$pkg"; return; }
  done
  return 0
}
while read -r name path; do
  pkg=$(package_of "$path")
  if [ -n "$pkg" ]; then
    packages+=("$pkg")
  elif [ $variant = gpu ] && [[ $name =~ ^lib(nccl|cublas|cublasLt|cudart)\. ]]; then
    cuda_libs+=("$path")
  else
    die "$name ($path) is not from a Debian package: the image holds Debian's libraries only"
  fi
done < <(for p in "${programs[@]}"; do ldd "$build/apps/$p"; done |
  awk '$2 == "=>" && $3 ~ /^\// { print $1, $3 }' | sort -u)
if [ $variant = gpu ]; then
  # cuBLAS and NCCL are loaded when first used (kernels/src/cuda/
  # cublas_loader.cpp, comm/src/nccl_library.cpp), from these directories.
  nccl_dir=$(grep -o 'TUTTI_NCCL_DIR=\\"[^\\]*' "$build/build.ninja" | head -1 | cut -d'"' -f2)
  for lib in "$cuda_dir"/libcublas.so.[0-9]* "$cuda_dir"/libcublasLt.so.[0-9]* \
    ${nccl_dir:+"$nccl_dir"/libnccl.so.[0-9]*}; do
    [[ $lib =~ \.so\.[0-9]+$ ]] && cuda_libs+=("$lib")
  done
  mapfile -t cuda_libs < <(printf '%s\n' "${cuda_libs[@]}" | sort -u)
fi
mapfile -t packages < <(printf '%s\n' "${packages[@]}" | sort -u)
echo "build-image: tutti:$tag ($variant) from Debian $suite; runtime packages: ${packages[*]}"

# -- the root file system -------------------------------------------------------
rm -rf "$out"
mkdir -p "$out/tmp"
export TMPDIR=$out/tmp # mmdebstrap's downloads stay here and go with it
rootfs=$out/rootfs
trap 'rm -rf "$out/tmp" "$out/rootfs" "$out/digest"' EXIT
include=$(IFS=,; echo "${packages[*]}")
timeout "$deadline" mmdebstrap --variant=essential --mode=root \
  --include="$include" \
  --aptopt='Acquire::Retries "3"' \
  --dpkgopt='path-exclude=/usr/share/man/*' \
  --dpkgopt='path-exclude=/usr/share/locale/*' \
  --dpkgopt='path-exclude=/usr/share/doc/*' \
  --dpkgopt='path-include=/usr/share/doc/*/copyright' \
  "$suite" "$rootfs" \
  "deb $mirror $suite main" "deb $mirror $suite-updates main" \
  "deb $security $suite-security main" ||
  die "mmdebstrap failed (exit $?; 124: past TUTTI_IMAGE_DEADLINE_S=$deadline s)"

install -d "$rootfs/opt/tutti/bin" "$rootfs/opt/tutti/configs"
for p in "${programs[@]}"; do
  install -m 0755 "$build/apps/$p" "$rootfs/opt/tutti/bin/$p"
  strip --strip-debug "$rootfs/opt/tutti/bin/$p" # keeps the build-id note
done
cp "$src"/configs/*.yaml "$rootfs/opt/tutti/configs/"
library_path=""
if [ $variant = gpu ]; then
  if [ -n "$host_cuda" ]; then
    library_path=$host_cuda
  else
    install -d "$rootfs/opt/tutti/lib"
    for lib in "${cuda_libs[@]}"; do cp -L "$lib" "$rootfs/opt/tutti/lib/$(basename "$lib")"; done
    library_path=/opt/tutti/lib
  fi
fi
# The user the containers run as; its home holds the daemon's state.
echo 'tutti:x:10001:10001:tutti:/var/lib/tutti:/usr/sbin/nologin' >>"$rootfs/etc/passwd"
echo 'tutti:x:10001:' >>"$rootfs/etc/group"
[ -f "$rootfs/etc/shadow" ] && echo 'tutti:!:19000::::::' >>"$rootfs/etc/shadow"
install -d -o 10001 -g 10001 -m 0750 "$rootfs/var/lib/tutti"

# -- the OCI image ----------------------------------------------------------------
layout=$out/oci
umoci init --layout "$layout"
umoci new --image "$layout:$tag"
umoci insert --image "$layout:$tag" --history.created_by "mmdebstrap $suite + tutti" \
  "$rootfs" /
# The digest of that layer (its uncompressed content), from the layout.
rootfs_digest=$(python3 - "$layout" "$tag" <<'EOF'
import json, sys
layout, tag = sys.argv[1:]
def blob(digest):
    algo, hexd = digest.split(":")
    return json.load(open(f"{layout}/blobs/{algo}/{hexd}"))
index = json.load(open(f"{layout}/index.json"))
manifest = next(m for m in index["manifests"]
                if m.get("annotations", {}).get("org.opencontainers.image.ref.name") == tag)
print(blob(blob(manifest["digest"])["config"]["digest"])["rootfs"]["diff_ids"][-1])
EOF
)
echo "$rootfs_digest (tutti:$tag)" >"$out/digest"
umoci insert --image "$layout:$tag" --history.created_by "tutti image digest" \
  "$out/digest" /opt/tutti/image-digest
env_args=(--config.env "PATH=/opt/tutti/bin:/usr/local/bin:/usr/bin:/bin")
if [ $variant = gpu ]; then
  env_args+=(--config.env "LD_LIBRARY_PATH=$library_path"
    --config.env NVIDIA_VISIBLE_DEVICES=all
    --config.env NVIDIA_DRIVER_CAPABILITIES=compute,utility)
fi
umoci config --image "$layout:$tag" --history.created_by "tutti config" \
  --created "$created" --author "tutti deploy/image/build-image.sh" \
  --config.user 10001:10001 --config.workingdir /var/lib/tutti \
  --config.entrypoint /opt/tutti/bin/tuttid --config.stopsignal SIGTERM \
  "${env_args[@]}" \
  --config.label org.opencontainers.image.title=tutti \
  --config.label "org.opencontainers.image.description=tutti MoE training and serving ($variant)" \
  --config.label "org.opencontainers.image.version=$version" \
  --config.label "org.opencontainers.image.revision=$revision" \
  --config.label "org.opencontainers.image.created=$created" \
  --config.label "org.opencontainers.image.base.name=debian:$suite (mmdebstrap, variant essential)" \
  --config.label "io.tutti.variant=$variant" \
  --config.label "io.tutti.rootfs-digest=$rootfs_digest" \
  ${library_path:+--config.label "io.tutti.cuda-libs=$library_path"}
umoci gc --layout "$layout"
tar -C "$layout" -cf "$out/tutti-$tag.oci.tar" .
echo "build-image: tutti:$tag in $layout and $out/tutti-$tag.oci.tar"
echo "build-image: image digest (root file system layer) $rootfs_digest"
du -sh "$out/tutti-$tag.oci.tar" | sed 's/^/build-image: size /'
