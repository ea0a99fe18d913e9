#!/usr/bin/env bash
# One node, N ranks, one per GPU:  launch/mpirun.sh N <cnnscale arguments...>
#   launch/mpirun.sh 4 train --net resnet34 --data synthetic --batch 256 --device gpu
#   launch/mpirun.sh 2 bench allreduce -b 8 -e 1G -f 2
# Each rank uses the GPU of its node-local rank (or train's --gpus). Env: CNNSCALE_BIN (binary;
# default build-gpu/bin or build/bin), MPIRUN (default mpirun), MPIRUN_ARGS (extra mpirun
# arguments, e.g. --oversubscribe), CNNSCALE_BIND=none|numa (default none), NCCL_* (forwarded).
# Exit: mpirun's, but 75 when every rank stopped for requeue after a stop signal (SIGTERM, SIGINT,
# SIGUSR1 to this script or to mpirun), also where mpirun itself reports 1 for it. That needs rank 0
# on this script's node: rank 0 writes the record of the stop to a private folder of this node's
# $TMPDIR (launch/common.sh). Ranks on other nodes (a --hostfile or --host in MPIRUN_ARGS) are fine
# as long as this node comes first; where rank 0 runs elsewhere, a job stopped by a signal to
# mpirun ends with mpirun's 1, not 75, and is not requeued.
set -euo pipefail
launcher="launch/mpirun.sh"
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# shellcheck source=launch/common.sh
source "$root/launch/common.sh"

if [ $# -lt 2 ]; then
  echo "usage: $launcher N <cnnscale arguments...>  (N ranks on this node, one per GPU)" >&2
  exit 2
fi
ranks=$1
shift
if ! [[ "$ranks" =~ ^[1-9][0-9]*$ ]]; then
  echo "$launcher: the number of ranks must be a positive integer, got '$ranks'" >&2
  exit 2
fi
bin=$(find_cnnscale_bin)

# Binding: none by default. Ranks drive their GPU from a few host threads (loader, prefetch,
# progress) and the OS keeps them near their memory; Open MPI's default (one core per rank for
# np <= 2) would squeeze those threads onto one core. numa keeps each rank inside one NUMA domain,
# round-robin over domains; it helps only where that matches the GPUs' NUMA affinity.
case "${CNNSCALE_BIND:-none}" in
  none) bind=(--bind-to none) ;;
  numa) bind=(--map-by numa --bind-to numa) ;;
  *) echo "$launcher: CNNSCALE_BIND must be none or numa, got '$CNNSCALE_BIND'" >&2; exit 2 ;;
esac

new_requeue_record
mapfile -t env_args < <(mpirun_env_args)
# Not exec: run_launch turns mpirun's 1 for a job stopped for requeue into 75 (launch/common.sh).
rc=0
# shellcheck disable=SC2086  # MPIRUN_ARGS is a list of arguments
run_launch "${MPIRUN:-mpirun}" -np "$ranks" "${bind[@]}" "${env_args[@]}" ${MPIRUN_ARGS:-} "$bin" "$@" || rc=$?
exit "$rc"
