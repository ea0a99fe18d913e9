# Shared by the launch scripts (sourced, not run): finds the cnnscale binary, builds the list of
# environment variables forwarded to every rank, and runs the launcher so that a job stopped for
# requeue ends with 75. Expects $root (the repository) and $launcher (the script's name, for
# messages) to be set.
# shellcheck shell=bash disable=SC2154

# The binary: $CNNSCALE_BIN, else build-gpu/ (the GPU machines' build), else build/.
find_cnnscale_bin() {
  if [ -n "${CNNSCALE_BIN:-}" ]; then
    [ -x "$CNNSCALE_BIN" ] || { echo "$launcher: CNNSCALE_BIN=$CNNSCALE_BIN is not an executable" >&2; exit 2; }
    echo "$CNNSCALE_BIN"
    return
  fi
  for candidate in "$root/build-gpu/bin/cnnscale" "$root/build/bin/cnnscale"; do
    if [ -x "$candidate" ]; then
      echo "$candidate"
      return
    fi
  done
  echo "$launcher: no cnnscale binary in $root/build-gpu/bin or $root/build/bin: build it or set CNNSCALE_BIN" >&2
  exit 2
}

# NVLink SHARP (multicast) stays off unless the caller turns it on: the project's multi-GPU hosts
# are shared and must not use it (see README, "Launching on clusters").
export NCCL_NVLS_ENABLE="${NCCL_NVLS_ENABLE:-0}"

# Open MPI's mpirun starts remote ranks with its own environment: name what they need (-x VAR).
mpirun_env_args() {
  local var
  for var in $(compgen -e | grep -E '^(NCCL_|CNNSCALE_|CUDA_|OMP_|OPENBLAS_|UCX_)' || true); do
    printf -- '-x\n%s\n' "$var"
  done
}

# Paths removed when the script exits, however it ends.
cleanup_paths=()
remove_on_exit() {
  cleanup_paths+=("$1")
  trap 'rm -rf -- "${cleanup_paths[@]}"' EXIT
}

# A fresh requeue record for this launch: the job's rank 0 writes $CNNSCALE_REQUEUE_RECORD when
# every rank stopped for requeue (exit 75). Its folder is made here, private (mktemp -d, mode
# 0700), so nothing else and no earlier launch can have put a file there. Call it before
# mpirun_env_args, which forwards the variable to remote ranks.
new_requeue_record() {
  local dir
  dir=$(mktemp -d "${TMPDIR:-/tmp}/cnnscale-launch.XXXXXX") ||
    { echo "$launcher: cannot make a folder in ${TMPDIR:-/tmp} for the requeue record" >&2; exit 1; }
  remove_on_exit "$dir"
  export CNNSCALE_REQUEUE_RECORD="$dir/requeue"
}

# Runs the launcher command "$@" (mpirun or srun with its ranks) and returns its exit status, but 75
# for a job stopped for requeue: mpirun told to stop (SIGTERM, SIGINT) ends with 1 whatever its
# ranks return, so a failed launch counts as stopped for requeue when, and only when, its rank 0
# left this launch's record (new_requeue_record). The command runs in the background so that this
# shell takes the stop signals (Slurm's --signal=B:USR1, scancel's SIGTERM, Ctrl-C) and passes them
# on; mpirun and srun pass them to every rank. A SIGUSR1 (Slurm's --signal=B:USR1) goes on as
# SIGTERM: Open MPI's mpirun does not pass SIGUSR1 on everywhere (4.1.6 on Ubuntu 24.04 keeps it to
# itself, and the ranks train on), while every launcher passes SIGTERM on. A SIGTERM is not passed
# on inside a Slurm or PBS job (or with CNNSCALE_PASS_TERM=0): there the batch system's stop
# (scancel, qdel, the time limit) reaches every process of the job, mpirun and the ranks included,
# and a second SIGTERM from here would make mpirun kill the ranks before they saved their state.
#
# mpirun told to stop passes the signal on to its ranks after odls_base_sigkill_timeout seconds and
# kills them as long again later, finished or not: that is the ranks' time to write their checkpoint
# and results. Open MPI's 1 s is too short for a large network's checkpoint, so it is 10 s here
# unless set (Slurm's KillWait, 30 s by default, ends a job whose every process was signalled
# after that anyway; there the ranks got the signal themselves at once).
export OMPI_MCA_odls_base_sigkill_timeout="${OMPI_MCA_odls_base_sigkill_timeout:-10}"
run_launch() {
  local child rc
  "$@" &
  child=$!
  pass_stop() {
    kill "-$1" "$child" 2>/dev/null || true
  }
  local pass_term=${CNNSCALE_PASS_TERM:-1}
  if [ -n "${SLURM_JOB_ID:-}${PBS_JOBID:-}" ]; then pass_term=${CNNSCALE_PASS_TERM:-0}; fi
  trap 'pass_stop TERM' USR1
  if [ "$pass_term" = 0 ]; then trap ':' TERM; else trap 'pass_stop TERM' TERM; fi
  trap 'pass_stop INT' INT
  # A trapped signal interrupts `wait` while the launcher still runs: wait again until it has ended;
  # then `wait` gives its saved exit status (also when bash reaped it in between).
  while kill -0 "$child" 2>/dev/null; do
    wait "$child" || true
  done
  rc=0
  wait "$child" || rc=$?
  trap - USR1 TERM INT
  local record=${CNNSCALE_REQUEUE_RECORD:-}
  if [ "$rc" -ne 0 ] && [ "$rc" -ne 75 ] && [ -n "$record" ] && [ -f "$record" ] && [ ! -L "$record" ]; then
    echo "$launcher: $1 exited with $rc after every rank stopped for requeue ($(head -n 1 "$record")): exit 75" >&2
    rc=75
  fi
  return "$rc"
}
