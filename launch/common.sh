# Shared by the launch scripts (sourced, not run): finds the cnnscale binary and builds the list of
# environment variables forwarded to every rank. Expects $root (the repository) and $launcher (the
# script's name, for messages) to be set.
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
