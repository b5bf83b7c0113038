#!/bin/sh
# SIGINT or SIGTERM to a training run: it finishes the step, writes a checkpoint, says where,
# and ends with status 128 + the signal; --resume then continues from that step.
#   signal_stop.sh <train binary> <work dir> <INT|TERM> <expected status>
set -eu
train=$1
work=$2
sig=$3
expected=$4
flags="--layers 1 --d-model 32 --heads 2 --kv-heads 1 --batch 8 --eval-every 0 --eval-examples 4
       --samples 0"
rm -rf "$work" && mkdir -p "$work" && cd "$work"
# shellcheck disable=SC2086
"$train" $flags --steps 1000000 --out run > out.log 2>&1 &
pid=$!
tries=0
until grep -q "^steps" out.log; do  # the header: the handlers are in place
  sleep 0.1
  tries=$((tries + 1))
  if [ "$tries" -gt 600 ]; then kill -9 "$pid"; echo "the run never started"; exit 1; fi
done
sleep 0.5
kill -s "$sig" "$pid"
set +e
wait "$pid"
status=$?
set -e
[ "$status" -eq "$expected" ] || { echo "status $status, expected $expected"; cat out.log; exit 1; }
step=$(sed -n 's/.* after step \([0-9]*\): wrote the checkpoint.*/\1/p' out.log)
[ -n "$step" ] || { echo "no checkpoint message"; cat out.log; exit 1; }
# shellcheck disable=SC2086
"$train" $flags --steps $((step + 2)) --resume --out run > resume.log
grep -q "(from $step)" resume.log || { echo "did not resume from step $step"; exit 1; }
[ "$(wc -l < run/loss.csv)" -eq $((step + 3)) ] || { echo "loss.csv has the wrong rows"; exit 1; }
echo "SIG$sig: stopped after step $step with status $status, resumed from it"
