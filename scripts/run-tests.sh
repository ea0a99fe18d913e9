#!/usr/bin/env bash
# The test job, from a fresh Debian 12 machine: set up and build (scripts/setup.sh), then run every
# test that needs no GPU (labels cpu, slow and mpi; GPU tests are built and run on the GPU machine). The mpi
# tests start `mpirun` as root on two cores: allowed by the two OMPI_ALLOW_RUN_AS_ROOT variables.
#
# The tests build the CPU-only configuration (CNNSCALE_CUDA=OFF, the GPU test option at its default):
# what a machine without the CUDA toolkit builds, so this job proves that configuration builds and
# works wherever it runs. Where the toolkit is, the CUDA backend is compiled as well, in a tree of its
# own (BUILD_DIR-cuda), so that CUDA code broken by a change of the interfaces fails here too: only that
# library and the two it stands on, not the whole program a second time. Set CNNSCALE_CUDA_CHECK=0
# to skip it.
#
# The CPU-only tree is a unity build (CMAKE_UNITY_BUILD: each target's sources compiled eight to a
# translation unit): most of a file's compile time is code generation for the JSON, formatting and
# GoogleTest templates it shares with its neighbours, which a unity build generates once per eight
# files, not once per file (docs/measurements/ has the figures). The same sources then compile one
# way here and the other way in every non-unity build (scripts/setup.sh's default), so a name defined
# in two files' anonymous namespaces is an error here ("redefinition of ..."): give one a name of its
# own. -DCMAKE_UNITY_BUILD=ON in CMAKE_ARGS reproduces this build elsewhere.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${BUILD_DIR:-build}
BUILD_DIR=$build CNNSCALE_CUDA=OFF CMAKE_ARGS="-DCMAKE_UNITY_BUILD=ON ${CMAKE_ARGS:-}" bash scripts/setup.sh
if [ "${CNNSCALE_CUDA_CHECK:-1}" = 1 ]; then
  mkdir -p "$build-cuda"
  # shellcheck disable=SC2086  # CMAKE_ARGS is a list of arguments
  cmake -S . -B "$build-cuda" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCNNSCALE_CUDA=AUTO -DCNNSCALE_GPU_TESTS=OFF \
    ${CMAKE_ARGS:-} > "$build-cuda/cnnscale-configure.log"
  # cmake/Cuda.cmake says which way AUTO went.
  if grep -q "cnnscale: CUDA backend ON" "$build-cuda/cnnscale-configure.log"; then
    cmake --build "$build-cuda" -j "${JOBS:-$(nproc)}" --target cnnscale_backend_cuda cnnscale_backend
  else
    echo "run-tests.sh: no CUDA toolkit here: only the CPU-only configuration was built"
  fi
fi
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
ctest --test-dir "$build" -LE "gpu|multigpu" --output-on-failure -j2
