#!/bin/sh
# expect_failure.sh PATTERN COMMAND...: runs COMMAND, shows its output, and succeeds only when
# COMMAND exits non-zero and its output (stdout and stderr) matches the grep -E PATTERN.
pattern=$1
shift
out=$("$@" 2>&1)
status=$?
printf '%s\n' "$out"
if [ "$status" -eq 0 ]; then
  echo "expect_failure: the command succeeded" >&2
  exit 1
fi
printf '%s\n' "$out" | grep -Eq -- "$pattern" || {
  echo "expect_failure: no line matches: $pattern" >&2
  exit 1
}
