#!/usr/bin/env bash
# The main job, from a fresh Debian 12 machine: set up and build (scripts/setup.sh), run the
# quickstart experiment (experiments/quickstart.yaml: LeNet on Fashion-MNIST and a small synthetic
# CNN, 1 and 2 ranks, two batch sizes; on the GPUs when the machine has them, else on the CPU),
# build its report (tables and figures) and print where it is. Finished runs are kept and skipped
# when run again.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bin="${BUILD_DIR:-build}/bin/cnnscale"
# Open MPI refuses root unless told; containers and CI machines often run as root.
if [ "$(id -u)" -eq 0 ]; then export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1; fi
results="${CNNSCALE_RESULTS:-results}"
"$bin" sweep experiments/quickstart.yaml --results "$results"
"$bin" report "$results/quickstart"
echo "report: $results/quickstart/report/report.md"
