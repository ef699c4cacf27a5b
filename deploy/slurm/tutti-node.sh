#!/usr/bin/env bash
# One node daemon of a tutti job under Slurm; srun runs it once per node
# (tutti.sbatch). SLURM_NODEID is the node rank. The allocation's hosts
# (TUTTI_HOSTS, space-separated, in node order; TUTTI_RACKS beside them)
# replace the coordinator and node list of the job's config (TUTTI_CONFIG),
# so that the same config runs on whatever nodes a requeued job gets:
# node 0 hosts the coordinator on TUTTI_PORT (default 7100), node N listens
# on TUTTI_PORT + 1 + N. run.dir must be on a file system every node
# shares: node 0 finds the checkpoints and the job's store there and
# resumes (a changed node list is a new config version, not a new job).
#
# Exits as tuttid does, with --stopped-status 3: 3 when SIGTERM (the time
# limit's --signal, a preemption) stopped the job before its end. The
# stop's checkpoint gets TUTTI_STOP_GRACE_S seconds (default 90): keep it
# under the time between the signal and SIGKILL.
set -euo pipefail
config=${TUTTI_CONFIG:?TUTTI_CONFIG: the job config}
read -r -a hosts <<<"${TUTTI_HOSTS:?TUTTI_HOSTS: the hosts of the allocation}"
read -r -a racks <<<"${TUTTI_RACKS:-}"
rank=${SLURM_NODEID:?SLURM_NODEID: run under srun}
port=${TUTTI_PORT:-7100}
tuttid=${TUTTI_TUTTID:-tuttid}

generated=$(
  echo "  coordinator: \"${hosts[0]}:$port\""
  echo "  nnodes: ${#hosts[@]}"
  echo "  nodes:"
  for i in "${!hosts[@]}"; do
    echo "    - {host: ${hosts[$i]}, port: $((port + 1 + i)), rack: ${racks[$i]:-r0}}"
  done
)

# The config with cluster_config's coordinator, nnodes and nodes replaced.
allocation_config=${TMPDIR:-/tmp}/tutti-${SLURM_JOB_ID:-local}-$rank.yaml
awk -v generated="$generated" '
  /^cluster_config:/ { print; print generated; in_cluster = 1; next }
  in_cluster && /^[^ #]/ { in_cluster = 0 }
  in_cluster && /^  (coordinator|nnodes|nodes):/ { dropping = 1; next }
  dropping && /^    / { next }
  { dropping = 0; print }
' "$config" >"$allocation_config"
grep -q '^cluster_config:' "$allocation_config" ||
  { echo "tutti-node: $config has no cluster_config section" >&2; exit 2; }

exec "$tuttid" --config "$allocation_config" --node-rank "$rank" \
  --stopped-status 3 --stop-grace-s "${TUTTI_STOP_GRACE_S:-90}"
