#!/usr/bin/env bash
#PBS -N cnnscale
#PBS -l select=1:ncpus=64:ngpus=4:mpiprocs=4
#PBS -l walltime=02:00:00
#PBS -j oe
# PBS job, one MPI rank per GPU on every node of the allocation; submit from the repository root:
#   qsub -v CNNSCALE_ARGS="train --net resnet34 --data synthetic --batch 256 --device gpu" launch/pbs.sh
#   qsub -l select=2:ncpus=64:ngpus=4:mpiprocs=4 -v CNNSCALE_ARGS="bench allreduce -b 8 -e 1G" launch/pbs.sh
# (qsub passes no arguments to a script; run directly, `launch/pbs.sh <cnnscale arguments...>` works
# too.) Ranks: one per line of $PBS_NODEFILE (mpiprocs per node), or GPUS_PER_NODE per node when
# set; mapped GPUS_PER_NODE per node, each on the GPU of its node-local rank. Env: CNNSCALE_BIN,
# MPIRUN, MPIRUN_ARGS, NCCL_*. Exit: mpirun's, but 75 when every rank stopped for requeue (SIGTERM
# at the walltime or on pre-emption; mpirun itself then reports 1): submit again, with train
# --checkpoint-dir DIR --resume auto, to continue.
set -euo pipefail
launcher="launch/pbs.sh"
root=${CNNSCALE_ROOT:-${PBS_O_WORKDIR:-$PWD}}
if [ ! -f "$root/launch/common.sh" ]; then
  echo "$launcher: $root is not the cnnscale repository: submit from its root or set CNNSCALE_ROOT" >&2
  exit 2
fi
cd "$root"
# shellcheck source=launch/common.sh
source "$root/launch/common.sh"
if [ $# -eq 0 ]; then
  # shellcheck disable=SC2206  # CNNSCALE_ARGS is a list of words
  args=(${CNNSCALE_ARGS:-})
  set -- "${args[@]}"
fi
if [ $# -eq 0 ]; then
  echo "usage: qsub -v CNNSCALE_ARGS=\"<cnnscale arguments>\" $launcher   (or $launcher <cnnscale arguments...>)" >&2
  exit 2
fi
nodefile=${PBS_NODEFILE:?not inside a PBS job (PBS_NODEFILE unset)}
bin=$(find_cnnscale_bin)

nodes=$(sort -u "$nodefile" | wc -l)
slots=$(grep -c . "$nodefile")
per_node=${GPUS_PER_NODE:-$(( slots / nodes ))}
if ! [[ "$per_node" =~ ^[1-9][0-9]*$ ]]; then
  echo "$launcher: GPUS_PER_NODE must be a positive integer, got '$per_node'" >&2
  exit 2
fi
ranks=$(( nodes * per_node ))
# One line per node with as many slots as ranks there, whatever mpiprocs put in the node file.
# In the node file's order: its first node runs this script, and so rank 0, which writes the
# requeue record in this node's temporary folder.
hostfile=$(mktemp "${TMPDIR:-/tmp}/cnnscale-hosts.XXXXXX")
remove_on_exit "$hostfile"
awk '!seen[$0]++' "$nodefile" | sed "s/\$/ slots=$per_node/" > "$hostfile"
echo "$launcher: $ranks rank(s) on $nodes node(s), $per_node per node: $bin $*" >&2

new_requeue_record
mapfile -t env_args < <(mpirun_env_args)
# Not exec: the host file is removed afterwards, and run_launch passes stop signals on and ends
# with 75 when every rank stopped for requeue, also where mpirun reports 1 for it (launch/common.sh).
rc=0
# shellcheck disable=SC2086  # MPIRUN_ARGS is a list of arguments
run_launch "${MPIRUN:-mpirun}" -np "$ranks" --hostfile "$hostfile" --map-by "ppr:${per_node}:node" --bind-to none \
  "${env_args[@]}" ${MPIRUN_ARGS:-} "$bin" "$@" || rc=$?
exit "$rc"
