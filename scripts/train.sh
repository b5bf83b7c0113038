#!/usr/bin/env bash
# The main job: install what is missing, build, and train the transformer with the CLI's
# defaults (sequence reversal; about a minute on two cores). Extra arguments go to `train`
# (`bash scripts/train.sh --help` lists them). Output: runs/train/.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/deps.sh gnuplot-nox  # gnuplot only draws loss.png; training works without it
jobs=$(nproc 2>/dev/null || echo 2)
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DTAPEGRAD_TESTS=OFF >/dev/null
cmake --build build -j "$jobs" --target train generate
./build/examples/train "$@"
