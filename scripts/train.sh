#!/usr/bin/env bash
# The main job: install what is missing, build, and train the example model.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/deps.sh
jobs=$(nproc 2>/dev/null || echo 2)
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DTAPEGRAD_TESTS=OFF >/dev/null
cmake --build build -j "$jobs" --target train_mlp
./build/examples/train_mlp "$@"
