#!/bin/sh
# The train CLI under mpirun, end to end: two ranks on shards of each batch give the loss curve
# of one process on the whole batch (to float32 rounding), padded or packed; a run of one rank resumes in two and
# one of two in one; a batch the ranks cannot split is one message, a failure, and no run.
#   train_dist.sh <train binary> <work dir> <mpirun and its flags for two ranks...>
set -eu
train=$1
work=$2
shift 2
flags="--task sort --task-size 6 --layers 1 --d-model 32 --heads 2 --kv-heads 1
       --eval-every 5 --eval-examples 8 --samples 0 --threads 1"
rm -rf "$work" && mkdir -p "$work" && cd "$work"

# Every row of loss.csv $1 against $2: the losses within 1e-4 relative, and as many rows.
same_curve() {
  awk -F, 'NR == FNR { if (FNR > 1) a[$1] = $2; next }
           FNR > 1 { n++; d = $2 - a[$1]; if (d < 0) d = -d
                     if (!($1 in a) || d > 1e-4 * a[$1]) { print "step " $1 ": " a[$1] " vs " $2; bad = 1 } }
           END { if (n != length(a) || n == 0) bad = 1; exit bad }' "$1" "$2" ||
    { echo "loss curves differ: $1 $2"; exit 1; }
}

# shellcheck disable=SC2086
"$train" $flags --batch 16 --steps 10 --out one > one.log
# shellcheck disable=SC2086
"$@" "$train" $flags --batch 16 --steps 10 --out two > two.log
grep -q "2 processes (mpi) x 1 threads" two.log || { echo "not two ranks"; cat two.log; exit 1; }
same_curve one/loss.csv two/loss.csv

# shellcheck disable=SC2086
"$@" "$train" $flags --batch 16 --steps 15 --resume --out one > one2.log
# shellcheck disable=SC2086
"$train" $flags --batch 16 --steps 15 --resume --out two > two2.log
grep -q "(from 10)" one2.log && grep -q "(from 10)" two2.log || { echo "no resume"; exit 1; }
same_curve one/loss.csv two/loss.csv
[ "$(wc -l < one/loss.csv)" -eq 16 ] || { echo "loss.csv has the wrong rows"; exit 1; }

# Packed batches of random-size examples: each rank a run of whole sequences, weighted so that
# the ranks' average is the whole batch's mean.
# shellcheck disable=SC2086
"$train" $flags --random-sizes --batch 16 --steps 6 --out packed1 > packed1.log
# shellcheck disable=SC2086
"$@" "$train" $flags --random-sizes --batch 16 --steps 6 --out packed2 > packed2.log
grep -q "packed batches of" packed2.log || { echo "not packed"; cat packed2.log; exit 1; }
same_curve packed1/loss.csv packed2/loss.csv

set +e
# shellcheck disable=SC2086
"$@" "$train" $flags --batch 15 --steps 1 --out odd > odd.log 2>&1
status=$?
set -e
[ "$status" -ne 0 ] || { echo "an odd batch trained"; exit 1; }
[ "$(grep -c '\[--batch\] 15 sequences do not split over 2 processes' odd.log)" -eq 1 ] ||
  { echo "not one message"; cat odd.log; exit 1; }
[ ! -e odd/model.safetensors ] || { echo "an odd batch wrote a run"; exit 1; }
echo "two ranks train as one process (padded and packed); resumed across world sizes; odd batch refused once"
