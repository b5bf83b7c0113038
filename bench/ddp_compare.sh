#!/bin/sh
# Two builds of bench_ddp side by side on a noisy machine: every round runs one process, then
# 2 processes of build A, of build B, and B without reduction (the ceiling), back to back, and
# prints each one's samples/s, its ratio to the one process and its backward time. Take the
# medians over many rounds: a single run drifts more than the differences being measured.
#   bench/ddp_compare.sh <bench_ddp A> <bench_ddp B> [rounds (8)] [steps (20)]
set -eu
a=$1
b=$2
rounds=${3:-8}
steps=${4:-20}
. "$(dirname "$0")/mpi_env.sh"
pick() { awk '$1 == "samples_per_s" { s = $2 } $1 == "backward_ms" { b = $2 } END { print s, b }'; }
i=0
while [ "$i" -lt "$rounds" ]; do
  i=$((i + 1))
  one=$("$b" "$steps" | pick)
  ra=$(mpirun --oversubscribe -np 2 "$a" "$steps" | pick)
  rb=$(mpirun --oversubscribe -np 2 "$b" "$steps" | pick)
  rc=$(mpirun --oversubscribe -np 2 "$b" "$steps" 0 0 | pick)
  echo "$one $ra $rb $rc" | awk '{
    printf "one %.2f  A %.2f (%.2fx, backward %.1f ms)  B %.2f (%.2fx, backward %.1f ms)  ceiling %.2f (%.2fx)\n",
      $1, $3, $3 / $1, $4, $5, $5 / $1, $6, $7, $7 / $1 }'
done
