#!/usr/bin/env bash
# The test job, from a fresh Debian 12 machine: set up and build (scripts/setup.sh), then run every
# test that needs no GPU (labels cpu, slow and mpi; GPU tests are built and run on the GPU machine). The mpi
# tests start `mpirun` as root on two cores: allowed by the two OMPI_ALLOW_RUN_AS_ROOT variables.
set -euo pipefail
cd "$(dirname "$0")/.."
# The gpu and multigpu test binaries are not built here: no test of this job would run them.
CMAKE_ARGS="${CMAKE_ARGS:-} -DCNNSCALE_GPU_TESTS=OFF" bash scripts/setup.sh
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
ctest --test-dir "${BUILD_DIR:-build}" -LE "gpu|multigpu" --output-on-failure -j2
