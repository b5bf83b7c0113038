#!/usr/bin/env bash
# Every test: install what is missing, build from scratch with -Werror, run ctest; build an
# out-of-tree consumer against the installed package; run the suite again under
# AddressSanitizer + UndefinedBehaviorSanitizer (a second build tree, with Eigen GEMM instead of
# OpenBLAS so that both GEMM paths are tested; allocator_may_return_null lets an allocation too
# large for the machine fail as glibc's does, so the "[alloc] out of memory" error is tested
# there too instead of ASan aborting).
#
# CI's time goes to building (two cores): Ninja, which compiles a target's objects while the
# targets it links to are still building (Make waits for them), and CUDA code for one
# architecture, sm_90 (the H100 the GPU sessions test on; users' builds default to sm_80 and
# sm_90), which compiles every kernel as the default does at half the device-code time (the
# SDPA's mma.sync backward alone took 361 s for both). The sm_90a warpgroup kernels build as
# always. The sanitizer build keeps line tables only (-g1: the reports' stack traces still name
# file and line), which builds a quarter faster than -g.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/deps.sh ninja-build
jobs=$(nproc 2>/dev/null || echo 2)
start=$(date +%s)
generator=()
command -v ninja >/dev/null && generator=(-G Ninja)
# A tree configured with another generator cannot be reconfigured: start it afresh.
for tree in build/test build/sanitize; do
  if [ -f "$tree/CMakeCache.txt" ] &&
    ! grep -q "^CMAKE_GENERATOR:INTERNAL=${generator[1]:-Unix Makefiles}$" "$tree/CMakeCache.txt"; then
    rm -rf "$tree"
  fi
done

echo "== release build (-Werror) and tests"
cmake -S . -B build/test "${generator[@]}" -DCMAKE_BUILD_TYPE=Release -DTAPEGRAD_WERROR=ON \
  -DCMAKE_CUDA_ARCHITECTURES=90 >/dev/null
cmake --build build/test -j "$jobs"
ctest --test-dir build/test --output-on-failure -j "$jobs"

echo "== install and build an out-of-tree find_package(tapegrad) consumer"
rm -rf build/install build/consumer
cmake --install build/test --prefix build/install >/dev/null
cmake -S tests/consumer -B build/consumer -DCMAKE_PREFIX_PATH="$PWD/build/install" >/dev/null
cmake --build build/consumer -j "$jobs"
./build/consumer/consumer

echo "== AddressSanitizer + UndefinedBehaviorSanitizer build and tests"
cmake -S . -B build/sanitize "${generator[@]}" -DCMAKE_BUILD_TYPE=Debug -DTAPEGRAD_CUDA=OFF -DTAPEGRAD_WERROR=ON \
  -DTAPEGRAD_BLAS=OFF -DTAPEGRAD_SANITIZE=address,undefined -DCMAKE_CXX_FLAGS="-O1 -fno-sanitize-recover=all" \
  -DCMAKE_CXX_FLAGS_DEBUG=-g1 >/dev/null
cmake --build build/sanitize -j "$jobs"
ASAN_OPTIONS=detect_leaks=1:allocator_may_return_null=1 UBSAN_OPTIONS=print_stacktrace=1 \
  ctest --test-dir build/sanitize --output-on-failure -j "$jobs"
echo "== all tests passed in $(( $(date +%s) - start )) s"
