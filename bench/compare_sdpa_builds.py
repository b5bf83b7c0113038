#!/usr/bin/env python3
"""Two builds of bench_sdpa (or one build under two environments) against each other, run by
run: for each case both stay running (TAPEGRAD_BENCH_SDPA_PAIRED=1) and the script alternates one
forward+backward of each, N pairs, the two runs of a pair milliseconds apart, so that a change of
a few percent shows on a machine whose speed moves 10-50% from minute to minute.

    python bench/compare_sdpa_builds.py <new bench_sdpa> <old bench_sdpa> [threads] [cpu|cuda] \
        [--precision fp32|bf16|fp16] [--pairs N] [--forward] [--new-env NAME=VALUE ...] \
        [--old-env NAME=VALUE ...]

The two may be the same file, told apart by --new-env / --old-env (say
TAPEGRAD_CUDA_SDPA_WARP_ROWS=32 against the default). TAPEGRAD_BENCH_SDPA_CASES in the
environment picks the cases, as for bench_sdpa; --forward times the forward alone. Prints each
side's median and range and the median and quartiles of the pairs' ratios, old / new: above 1,
the new build is faster.
"""
import sys

from bench_util import (ServedCase, paired_ms, ratio_summary, served_cases, served_env, spread,
                        take_flag, take_option)


def take_envs(args, flag):
    """Removes every `flag NAME=VALUE` from args; returns them as a dict."""
    env = {}
    while flag in args:
        pair = take_option(args, flag, "")
        if "=" not in pair:
            sys.exit(f"{flag}: expected NAME=VALUE, got '{pair}'")
        name, value = pair.split("=", 1)
        env[name] = value
    return env


def main():
    args = sys.argv[1:]
    precision = take_option(args, "--precision", "fp32")
    pairs = int(take_option(args, "--pairs", "21"))
    if pairs < 1:
        sys.exit(f"--pairs: expected at least 1, got {pairs}")
    forward = take_flag(args, "--forward")
    envs = {"new": take_envs(args, "--new-env"), "old": take_envs(args, "--old-env")}
    if len(args) < 2:
        sys.exit(__doc__)
    exes = {"new": args[0], "old": args[1]}
    threads = args[2] if len(args) > 2 else "2"
    device = args[3] if len(args) > 3 else "cpu"
    if device not in ("cpu", "cuda"):
        sys.exit(f"device: expected cpu or cuda, got '{device}'")

    def argv(side):
        return [exes[side], threads, device, "--precision", precision]

    out, names = served_cases(argv("new"), served_env(forward, extra=envs["new"]))
    machine = [x for x in out.splitlines() if x.startswith("machine\t")]
    print(" ".join(machine[0].split("\t")[1:]) if machine else "machine: not printed")

    def described(side):
        return " ".join([exes[side]] + [f"{k}={v}" for k, v in envs[side].items()])

    print(f"new {described('new')}, old {described('old')}; "
          f"{threads} threads, {device}, {precision}; "
          f"{'forward' if forward else 'forward+backward'} in {pairs} pairs of runs "
          "(which goes first alternates); ratio = old / new per pair")
    print("| case | new ms: median (min-max) | old ms: median (min-max) | ratio: median "
          "(quartiles) |")
    print("| --- | ---: | ---: | ---: |")
    for name in names:
        served = {side: ServedCase(argv(side), served_env(forward, name + "$", envs[side]))
                  for side in ("new", "old")}
        new, old = paired_ms(served["new"].once, served["old"].once, pairs)
        for s in served.values():
            s.close()
        ratio, q1, q3 = ratio_summary(new, old)
        print(f"| {name} | {spread(new)} | {spread(old)} | {ratio:.2f} ({q1:.2f}-{q3:.2f}) |")


if __name__ == "__main__":
    main()
