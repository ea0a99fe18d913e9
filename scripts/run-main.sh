#!/usr/bin/env bash
# The main job, from a fresh Debian 12 machine: set up and build (scripts/setup.sh), then train
# LeNet on Fashion-MNIST for one epoch on the CPU; progress on stderr, one JSON result line on stdout.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
"${BUILD_DIR:-build}/bin/cnnscale" train --net lenet --data fashion-mnist --epochs 1 --batch 64 --device cpu --json
