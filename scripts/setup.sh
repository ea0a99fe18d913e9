#!/usr/bin/env bash
# Sets up a Debian 12 machine for cnnscale and builds it: installs the packages (sudo only when not
# root), configures with CMake/Ninja and builds. Idempotent: apt-get and Ninja skip what is done.
# Env: BUILD_DIR (build), CNNSCALE_CUDA (AUTO: CUDA backend only if nvcc, cuDNN and NCCL are found),
#      JOBS (nproc), CNNSCALE_SKIP_APT=1 to skip the package step, CMAKE_ARGS (extra configure args).
set -euo pipefail
cd "$(dirname "$0")/.."

PACKAGES=(cmake ninja-build g++ libopenmpi-dev openmpi-bin libhdf5-dev libyaml-cpp-dev libopenblas-dev
  libgtest-dev libcli11-dev nlohmann-json3-dev libfmt-dev zlib1g-dev dataset-fashion-mnist python3-h5py
  pkg-config python3-matplotlib python3-numpy python3-pandas libopencv-dev)

if [ "${CNNSCALE_SKIP_APT:-0}" != 1 ]; then
  SUDO=()
  if [ "$(id -u)" -ne 0 ]; then
    command -v sudo >/dev/null || { echo "setup.sh: not root and no sudo: install ${PACKAGES[*]}" >&2; exit 1; }
    SUDO=(sudo)
  fi
  "${SUDO[@]}" apt-get update -q
  "${SUDO[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${PACKAGES[@]}"
fi

BUILD_DIR=${BUILD_DIR:-build}
# shellcheck disable=SC2086  # CMAKE_ARGS is a list of arguments
cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCNNSCALE_CUDA="${CNNSCALE_CUDA:-AUTO}" ${CMAKE_ARGS:-}
cmake --build "$BUILD_DIR" -j "${JOBS:-$(nproc)}"
