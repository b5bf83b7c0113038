#!/bin/sh
# Data-parallel scaling on this machine: bench_ddp as 1 process x 1 thread, then as N processes
# x 1 thread under mpirun; prints both reports and the samples/s ratio.
#   bench/ddp_scaling.sh <bench_ddp binary> [processes (2)] [steps (10)]
set -eu
bin=$1
n=${2:-2}
steps=${3:-10}
export OMP_NUM_THREADS=1
if [ "$(id -u)" -eq 0 ]; then  # Open MPI refuses root unless told
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
fi
one=$("$bin" "$steps")
many=$(mpirun --oversubscribe -np "$n" "$bin" "$steps")
printf '%s\n\n%s\n\n' "$one" "$many"
a=$(printf '%s\n' "$one" | awk '$1 == "samples_per_s" { print $2 }')
b=$(printf '%s\n' "$many" | awk '$1 == "samples_per_s" { print $2 }')
awk -v a="$a" -v b="$b" -v n="$n" 'BEGIN { printf "scaling\t%d processes / 1\t%.2fx samples/s\n", n, b / a }'
