#!/bin/sh
# Data-parallel scaling on this machine: bench_ddp as 1 process x 1 thread, then as N processes
# x 1 thread under mpirun, with DDP and without (every rank on its shard alone, no gradient
# crossing: the ceiling the machine's shared memory and caches set); prints the reports and the
# samples/s ratios.
#   bench/ddp_scaling.sh <bench_ddp binary> [processes (2)] [steps (10)]
set -eu
bin=$1
n=${2:-2}
steps=${3:-10}
. "$(dirname "$0")/mpi_env.sh"
one=$("$bin" "$steps")
many=$(mpirun --oversubscribe -np "$n" "$bin" "$steps")
alone=$(mpirun --oversubscribe -np "$n" "$bin" "$steps" 0 0)
printf '%s\n\n%s\n\n%s\n\n' "$one" "$many" "$alone"
rate() { printf '%s\n' "$1" | awk '$1 == "samples_per_s" { print $2 }'; }
a=$(rate "$one")
b=$(rate "$many")
c=$(rate "$alone")
awk -v a="$a" -v b="$b" -v c="$c" -v n="$n" 'BEGIN {
  printf "scaling\t%d processes / 1\t%.2fx samples/s\n", n, b / a
  printf "ceiling\t%d processes without reduction / 1\t%.2fx samples/s\n", n, c / a
  printf "ddp_efficiency\tDDP / without reduction\t%.1f%%\n", 100 * b / c
}'
