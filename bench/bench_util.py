"""Timing helpers shared by the comparison scripts."""
import os
import statistics
import subprocess
import sys
import time


def once_ms(fn):
    """Wall time of one fn(), in milliseconds."""
    a = time.perf_counter()
    fn()
    return (time.perf_counter() - a) * 1e3


def median_ms(fn, reps=9):
    """Median wall time of fn() over reps runs after one warm-up, in milliseconds."""
    fn()
    ts = sorted(once_ms(fn) for _ in range(reps))
    return ts[len(ts) // 2]


def split_machine(out, threads):
    """Takes the benchmark's "machine" line out of its output; returns (header, other lines).
    The header says where both sides ran: the CPU and its ISA, tapegrad's kernels and GEMM
    library, PyTorch's CPU capability, the thread count."""
    import torch
    lines, header = [], "machine: unknown (the benchmark printed no machine line)"
    for line in out.splitlines():
        if line.startswith("machine\t"):
            f = line.split("\t")[1:]
            cap = torch.backends.cpu.get_cpu_capability()
            header = (f"machine: {f[0]}; tapegrad {f[1]}, {f[3]}; "
                      f"PyTorch {torch.__version__} CPU capability {cap}; {threads} threads")
        else:
            lines.append(line)
    return header, lines


def take_option(args, flag, default):
    """Removes `flag VALUE` from the list args; returns VALUE (default without the flag)."""
    if flag not in args:
        return default
    i = args.index(flag)
    if i + 1 >= len(args):
        sys.exit(f"{flag}: expected a value after it")
    value = args[i + 1]
    del args[i:i + 2]
    return value


def take_flag(args, flag):
    """Removes `flag` from the list args; returns whether it was there."""
    if flag not in args:
        return False
    args.remove(flag)
    return True


def served_env(forward, case=None, extra=None):
    """bench_sdpa's environment to serve runs on request (TAPEGRAD_BENCH_SDPA_PAIRED: the
    forward alone with `forward`), of `case` alone when given, with `extra` variables on top."""
    env = dict(os.environ, TAPEGRAD_BENCH_SDPA_PAIRED="forward" if forward else "1",
               **(extra or {}))
    if case:
        env["TAPEGRAD_BENCH_SDPA_CASES"] = case
    return env


def spread(ms):
    """A list of ms as "median (min-max)"."""
    return f"{statistics.median(ms):.2f} ({min(ms):.2f}-{max(ms):.2f})"


def served_cases(argv, env):
    """Runs a benchmark that serves cases (env sets TAPEGRAD_BENCH_SDPA_PAIRED) with stdin
    closed, so that each case only warms up once and names itself: returns its output and the
    names of its cases."""
    out = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True, text=True,
                         check=True, env=env).stdout
    return out, [x.split("\t")[1] for x in out.splitlines() if x.startswith("ready\t")]


class ServedCase:
    """A benchmark kept running on one case that times one run each time it is asked
    (bench_sdpa with TAPEGRAD_BENCH_SDPA_PAIRED=1: "ready <name>" once warmed up, then one run
    and its ms per line read from stdin, until stdin closes)."""

    def __init__(self, argv, env):
        self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     text=True, env=env)
        line = self.proc.stdout.readline()  # the machine line, then "ready"
        while line and not line.startswith("ready\t"):
            line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"{argv[0]} ended before it had its case ready (a build from "
                               "before the mode in TAPEGRAD_BENCH_SDPA_PAIRED, or no such case)")

    def once(self):
        """One run's ms."""
        self.proc.stdin.write("\n")
        self.proc.stdin.flush()
        return float(self.proc.stdout.readline())

    def close(self):
        self.proc.stdin.close()
        self.proc.wait()


def paired_ms(first, second, pairs):
    """Times first() and second() (each one run, returning its ms) one after the other `pairs`
    times, which goes first alternating; returns the two lists of ms."""
    a, b = [], []
    for i in range(pairs):
        if i % 2 == 0:
            a.append(first())
            b.append(second())
        else:
            b.append(second())
            a.append(first())
    return a, b


def ratio_summary(mine, theirs):
    """(median, lower quartile, upper quartile) of the pairs' ratios theirs / mine."""
    ratios = [t / m for m, t in zip(mine, theirs)]
    if len(ratios) == 1:
        return ratios[0], ratios[0], ratios[0]
    q1, _, q3 = statistics.quantiles(ratios, n=4)
    return statistics.median(ratios), q1, q3
