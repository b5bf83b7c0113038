#!/bin/sh
# A checkpoint save killed at each of its stages, then --resume: the run must continue from the
# previous checkpoint or the new one and end with the uninterrupted run's loss curve, bitwise.
#   checkpoint_faults.sh <train binary> <work dir>
set -eu
train=$1
work=$2
flags="--layers 1 --d-model 32 --heads 2 --kv-heads 1 --batch 8 --steps 4 --eval-every 2
       --eval-examples 4 --samples 0"
rm -rf "$work" && mkdir -p "$work" && cd "$work"
# shellcheck disable=SC2086
"$train" $flags --out whole > /dev/null
for stage in model optimizer extra commit rename; do
  rm -rf "$stage"
  set +e
  # shellcheck disable=SC2086
  TAPEGRAD_CHECKPOINT_FAULT="$stage:2" "$train" $flags --out "$stage" > /dev/null 2>&1
  status=$?
  set -e
  [ "$status" -eq 3 ] || { echo "$stage: the writer was not stopped (status $status)"; exit 1; }
  # shellcheck disable=SC2086
  "$train" $flags --resume --out "$stage" > "$stage.log"
  cmp whole/loss.csv "$stage/loss.csv" || { echo "$stage: loss curve differs"; exit 1; }
  if ls "$stage" | grep -q next; then echo "$stage: files of the cut save left"; exit 1; fi
  echo "$stage: resumed from step $(sed -n 's/.*(from \([0-9]*\)).*/\1/p' "$stage.log"), same curve"
done
