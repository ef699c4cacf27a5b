#!/usr/bin/env bash
# The OCI image of deploy/image/build-image.sh, as a platform team would
# check it before pushing it.
#   test_image.sh build   builds it from this build tree (into
#                         BUILD/test-scratch/image) and inspects the OCI
#                         layout's JSON: entry point, user, labels, the two
#                         layers and the digest file, the archive
#   test_image.sh run     unpacks that image with umoci and runs its
#                         programs in a chroot as the image's user: --help,
#                         and a 2-step training job; then a 2-daemon job with
#                         node 0 in the image and node 1 outside it, which
#                         the coordinator refuses, naming the image
# A CUDA build makes the gpu variant: its CUDA libraries are left on the
# host (--cuda-libs-from-host) and bound into the chroot, so that the test
# does not copy 800 MB; the image that carries them is built the same way.
# Exits 0 when the check passes, 1 when it fails, 77 (CTest: skipped) when
# this machine cannot build or run it (no root, no mmdebstrap or umoci, the
# Debian archive unreachable, no chroot or mount here), saying why.
set -uo pipefail

src=${TUTTI_SOURCE_DIR:-$(cd "$(dirname "$0")/../.." && pwd)}
bin=${TUTTI_BINARY_DIR:-$src/build}
out=$bin/test-scratch/image
mode=${1:-}

skip() { echo "SKIPPED: $*"; exit 77; }
fail() { echo "FAILED: $*"; exit 1; }
ok() { echo "ok: $*"; }

# The directory of the CUDA libraries a CUDA build's programs load (cuBLAS,
# NCCL: when first used, from where the build found them); "" for a build
# without the CUDA backend.
host_cuda_dir() {
  grep -o 'TUTTI_CUBLAS_DIR=\\"[^\\]*' "$bin/build.ninja" 2>/dev/null | head -1 | cut -d'"' -f2
}

# The image's tag and config, from the layout's index.json.
image_json() {
  python3 - "$out/oci" <<'EOF'
import json, sys
layout = sys.argv[1]
def blob(digest):
    algo, hexd = digest.split(":")
    return json.load(open(f"{layout}/blobs/{algo}/{hexd}"))
index = json.load(open(f"{layout}/index.json"))
assert len(index["manifests"]) == 1, "one image in the layout"
entry = index["manifests"][0]
manifest = blob(entry["digest"])
config = blob(manifest["config"]["digest"])
print(json.dumps({"tag": entry["annotations"]["org.opencontainers.image.ref.name"],
                  "manifest": manifest, "config": config}))
EOF
}

build() {
  [ "$(id -u)" = 0 ] || skip "building the image needs root (mmdebstrap's root mode)"
  for tool in mmdebstrap umoci; do
    command -v $tool >/dev/null || skip "$tool is not installed (Debian package $tool; deploy/install-deps.sh)"
  done
  extra=()
  cuda=$(host_cuda_dir)
  [ -n "$cuda" ] && extra=(--cuda-libs-from-host "$cuda")
  start=$(date +%s)
  timeout -k 10 900 "$src/deploy/image/build-image.sh" --build-dir "$bin" --out "$out" "${extra[@]}"
  rc=$?
  case $rc in
  0) ok "built in $(($(date +%s) - start)) s" ;;
  3) skip "deploy/image/build-image.sh cannot build here (its reason above)" ;;
  124 | 137) fail "deploy/image/build-image.sh ran past 900 s" ;;
  *) fail "deploy/image/build-image.sh exited $rc" ;;
  esac
  json=$(image_json) || fail "the OCI layout in $out/oci cannot be read"
  python3 - "$json" "$src" <<'EOF' || exit 1
import json, re, sys
image = json.loads(sys.argv[1])
src = sys.argv[2]
version = re.search(r"project\(tutti VERSION ([0-9.]+)", open(f"{src}/CMakeLists.txt").read()).group(1)
cfg = image["config"]["config"]
labels = cfg.get("Labels", {})
problems = []
def expect(what, ok):
    print(("ok: " if ok else "FAILED: ") + what)
    if not ok:
        problems.append(what)
variant = labels.get("io.tutti.variant")
expect(f"variant cpu or gpu ({variant})", variant in ("cpu", "gpu"))
expect(f"tag {image['tag']} is the version {version}",
       image["tag"] == version + ("-gpu" if variant == "gpu" else ""))
expect(f"entry point {cfg.get('Entrypoint')}", cfg.get("Entrypoint") == ["/opt/tutti/bin/tuttid"])
expect(f"user {cfg.get('User')} (not root)", cfg.get("User") == "10001:10001")
expect(f"working directory {cfg.get('WorkingDir')}", cfg.get("WorkingDir") == "/var/lib/tutti")
expect(f"stop signal {cfg.get('StopSignal')}", cfg.get("StopSignal") == "SIGTERM")
for key in ("version", "revision", "created"):
    value = labels.get(f"org.opencontainers.image.{key}", "")
    expect(f"label org.opencontainers.image.{key} = {value}", value != "")
expect("label version = " + version, labels.get("org.opencontainers.image.version") == version)
diff_ids = image["config"]["rootfs"]["diff_ids"]
expect(f"two layers (root file system, digest file): {len(diff_ids)}", len(diff_ids) == 2
       and len(image["manifest"]["layers"]) == 2)
expect("label io.tutti.rootfs-digest is layer 1's digest",
       labels.get("io.tutti.rootfs-digest") == diff_ids[0])
expect("os linux, architecture amd64", image["config"].get("os") == "linux"
       and image["config"].get("architecture") == "amd64")
sys.exit(1 if problems else 0)
EOF
  tag=$(echo "$json" | python3 -c 'import json,sys; print(json.load(sys.stdin)["tag"])')
  archive=$out/tutti-$tag.oci.tar
  [ -f "$archive" ] || fail "no archive $archive"
  entries=$(tar -tf "$archive") || fail "$archive is not a tar archive"
  grep -qx './oci-layout' <<<"$entries" || fail "$archive holds no oci-layout"
  grep -qx './index.json' <<<"$entries" || fail "$archive holds no index.json"
  ok "archive $archive ($(du -h "$archive" | cut -f1))"
}

# Runs COMMAND... in the unpacked image as a container runtime would: as
# the image's user, with only the image's environment, /proc, /dev and
# (gpu) the host's CUDA libraries mounted, in a mount namespace of its own;
# for $limit seconds at most (default 120).
in_image() {
  local root=$out/bundle/rootfs cuda
  local -a environment
  cuda=$(host_cuda_dir)
  mapfile -t environment < <(image_json | python3 -c 'import json,sys; print("\n".join(json.load(sys.stdin)["config"]["config"].get("Env", [])))')
  set -- /usr/bin/env -i "${environment[@]}" "$@"
  timeout -k 5 "${limit:-120}" unshare --mount --fork sh -c '
    root=$1 cuda=$2; shift 2
    mount -t proc proc "$root/proc" && mount --rbind /dev "$root/dev" || exit 90
    if [ -n "$cuda" ]; then
      mkdir -p "$root$cuda" && mount --bind -o ro "$cuda" "$root$cuda" || exit 90
    fi
    exec chroot --userspec=10001:10001 "$root" "$@"' sh "$root" "$cuda" "$@"
}

run_image() {
  [ -d "$out/oci" ] || skip "no image in $out/oci: test_image_build did not build one here"
  [ "$(id -u)" = 0 ] || skip "chroot needs root"
  tag=$(image_json | python3 -c 'import json,sys; print(json.load(sys.stdin)["tag"])')
  rm -rf "$out/bundle"
  umoci unpack --image "$out/oci:$tag" "$out/bundle" >/dev/null ||
    fail "umoci unpack $out/oci:$tag"
  root=$out/bundle/rootfs
  for p in tutti tuttid tutti-serve tutti-gateway; do
    [ -x "$root/opt/tutti/bin/$p" ] || fail "no /opt/tutti/bin/$p in the image"
  done
  for absent in usr/bin/gcc usr/bin/g++ usr/bin/cmake usr/include/c++; do
    [ ! -e "$root/$absent" ] || fail "/$absent is in the image: the build chain must not be"
  done
  grep -q '^tutti:x:10001:10001:' "$root/etc/passwd" || fail "no user tutti (10001) in /etc/passwd"
  digest=$(cat "$root/opt/tutti/image-digest")
  [[ $digest == "sha256:"*" (tutti:$tag)" ]] || fail "/opt/tutti/image-digest: '$digest'"
  ok "the programs, the user, no build chain; image digest $digest"

  probe=$(in_image /bin/true 2>&1)
  case $? in
  0) ;;
  90) skip "cannot mount /proc or /dev for the chroot here: $probe" ;;
  *) skip "cannot chroot into the image here: $probe" ;;
  esac
  for p in tuttid tutti tutti-serve tutti-gateway; do
    help=$(in_image "/opt/tutti/bin/$p" --help 2>&1) || fail "$p --help in the image: $help"
    ok "$p --help runs in the image as user tutti"
  done

  # A 2-step job inside the image: the libraries resolve, the kernels run.
  job=$root/tmp/job
  mkdir -p "$job"
  { echo "cluster_config: {world_size: 2, nnodes: 1, nproc_per_node: 2, ep_size: 2}"
    job_sections
    printf 'data:\n  dir: /tmp/job/data\nrun:\n  dir: /tmp/job/run\n'; } >"$job/job.yaml"
  chown -R 10001:10001 "$job"
  r=$(in_image /opt/tutti/bin/tutti data synth --out /tmp/job/data --vocab 16 --seed 5 --tokens 20000 2>&1) ||
    fail "tutti data synth in the image: $r"
  r=$(in_image /opt/tutti/bin/tutti run /tmp/job/job.yaml --quiet 2>&1) ||
    fail "tutti run in the image: $r"
  [ "$(wc -l <"$job/run/metrics.jsonl")" = 2 ] || fail "the job in the image did not train 2 steps: $r"
  ok "a 2-step job trained in the image"
  join_check
  rm -rf "$out/bundle" # 400 MB unpacked; the layout and the archive stay
}

# The model and training of the jobs in the image: tiny, 2 steps.
job_sections() {
  cat <<'EOF'
model: {vocab_size: 16, hidden_size: 32, intermediate_size: 64, num_hidden_layers: 2,
        num_attention_heads: 4, num_key_value_heads: 2, max_seq_len: 32}
moe_config: {num_experts: 4, router_top_k: 2, capacity_factor: 0}
train: {steps: 2, global_batch_size: 4, seq_len: 32, lr: 0.003, warmup_steps: 1,
        seed: 7, eval_sequences: 4}
EOF
}

# Node 0 runs in the image, node 1 from the build tree outside it: the same
# build id, the image differs, and the coordinator names it.
join_check() {
  local dir=$root/tmp/join port=$((17000 + $$ % 1000 * 3))
  mkdir -p "$dir" && cp -r "$job/data" "$dir/data" && chown -R 10001:10001 "$dir"
  { job_sections
    cat <<EOF
data:
  dir: data
run:
  dir: run
cluster_config:
  world_size: 2
  nnodes: 2
  nproc_per_node: 1
  ep_size: 2
  coordinator: 127.0.0.1:$port
  join_timeout_s: 20
  nodes:
    - {host: 127.0.0.1, port: $((port + 1)), rack: r0}
    - {host: 127.0.0.1, port: $((port + 2)), rack: r1}
EOF
  } >"$dir/job.yaml"
  chown 10001:10001 "$dir/job.yaml"
  limit=40 in_image sh -c 'cd /tmp/join && exec /opt/tutti/bin/tuttid --config job.yaml --node-rank 0' \
    >"$out/join0.log" 2>&1 &
  local node0=$!
  (cd "$dir" && timeout 40 "$bin/apps/tuttid" --config job.yaml --node-rank 1 \
    --data-dir "$out/join1-state" >"$out/join1.log" 2>&1)
  local s1=$?
  wait $node0 # it ends once node 1 is refused; its limit is 40 s
  grep -q "differs in image: $digest on node 0 (the coordinator's), none on node 1" "$out/join1.log" ||
    fail "node 1 outside the image was not refused for its image (exit $s1): $(tail -5 "$out/join1.log")"
  ok "node 1 outside the image is refused at join: $(grep -o 'node 1 ([^)]*) differs in image[^;]*' "$out/join1.log" | head -1)"
}

case "$mode" in
build) build ;;
run) run_image ;;
*) echo "usage: $0 build|run" >&2; exit 2 ;;
esac
