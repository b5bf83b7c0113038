#!/bin/sh
# The train CLI on packed batches, end to end: tasks of random sizes pack by default; a run
# resumed halfway gives the uninterrupted loss curve bitwise; a run resumes only with its own
# packing; text trains on its lines, packed; generate decodes several prompts of different
# lengths at once (paged cache) as it decodes each alone.
#   train_packed.sh <train binary> <work dir> <a text file> <generate binary>
set -eu
train=$1
work=$2
text=$3
generate=$4
flags="--task reverse --task-size 5 --random-sizes --layers 1 --d-model 32 --heads 2
       --kv-heads 1 --batch 8 --eval-every 4 --eval-examples 16 --samples 2 --threads 1"
rm -rf "$work" && mkdir -p "$work" && cd "$work"

# shellcheck disable=SC2086
"$train" $flags --steps 12 --out whole > whole.log
grep -q "reverse (size 1 to 5)" whole.log && grep -q "packed batches of 80 tokens" whole.log ||
  { echo "not packed by default"; cat whole.log; exit 1; }
grep -q "final: exact match" whole.log || { echo "no evaluation"; cat whole.log; exit 1; }
# shellcheck disable=SC2086
"$train" $flags --steps 6 --out half > half.log
# shellcheck disable=SC2086
"$train" $flags --steps 12 --resume --out half > half2.log
cmp -s whole/loss.csv half/loss.csv || { echo "resumed curve differs"; diff whole/loss.csv half/loss.csv; exit 1; }

gen="$generate --checkpoint whole/model.safetensors --tokens 6 --block-size 4"
$gen --prompt "abc=" --prompt "e=" --prompt "dcbae=" > together.txt
printf 'e=\n\ndcbae=\n' > prompts.txt
$gen --prompt "abc=" --prompts prompts.txt > from_file.txt
for p in "abc=" "e=" "dcbae="; do $gen --prompt "$p"; done > alone.txt
[ "$(wc -l < together.txt)" -eq 3 ] && cmp -s together.txt alone.txt &&
  cmp -s together.txt from_file.txt ||
  { echo "prompts decoded together differ from each alone"; cat together.txt alone.txt from_file.txt; exit 1; }

set +e
# shellcheck disable=SC2086
"$train" $flags --steps 14 --resume --pack off --out half > other.log 2>&1
status=$?
set -e
[ "$status" -eq 2 ] && grep -q "trained on 'reverse:5:random:packed'" other.log ||
  { echo "resumed with other packing"; cat other.log; exit 1; }

"$train" --text "$text" --seq-len 24 --batch 4 --steps 3 --layers 1 --d-model 32 --heads 2 \
  --kv-heads 1 --eval-every 0 --threads 1 --out text > text.log
grep -q "(lines)" text.log && grep -q "final: validation loss" text.log ||
  { echo "text not packed"; cat text.log; exit 1; }
echo "packed training resumes bitwise and keeps its packing; text trains on its lines;"
echo "prompts decoded together equal each alone"
