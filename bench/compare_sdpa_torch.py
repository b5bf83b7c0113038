#!/usr/bin/env python3
"""Runs bench_sdpa and PyTorch's scaled_dot_product_attention (its fused kernel, and the
unfused math path) on the same shapes, device, dtype and thread count; prints a table with the
ratios. On the CPU the fused kernel is PyTorch's flash kernel; on CUDA it is FlashAttention-2
for bfloat16 / float16 and the memory-efficient kernel for float32 (flash needs 16-bit inputs
there).

    python bench/compare_sdpa_torch.py build/bench/bench/bench_sdpa [threads] [cpu|cuda|decode] \
        [--precision fp32|bf16|fp16] [--rounds N | --paired N [--forward]]

decode: bench_sdpa's decoding cases (the CPU's forward alone, one or four query rows a head
against a long cache of keys) against PyTorch's flash kernel and math path on the same inputs'
shapes.

With --rounds N (default 1), N rounds follow the first table, and a second table gives each
round's forward+backward times and ratio, and the median of the rounds' ratios: on a shared
machine one run's times can move 20-50% from minute to minute, for either side. A round takes
the cases one at a time, ours (bench_sdpa on that case alone, sdpa_reference untimed) and then
PyTorch's fused kernel, so that the two sides of a ratio are timed seconds apart, not the
minute a whole run of bench_sdpa takes.

With --paired N, the comparison is finer still and nothing else runs: for each case bench_sdpa
stays running (TAPEGRAD_BENCH_SDPA_PAIRED=1) and times one forward+backward whenever asked, and
the script alternates one run of ours with one of PyTorch's fused kernel, N pairs, the two runs of
a pair milliseconds apart. It prints each side's median and range, the median and quartiles of
the pairs' ratios, and our GFLOP/s at our median (forward+backward counted as 3.5 times the
forward's 4 B H S^2 D, halved when causal, as bench_sdpa counts them). --forward: the forward
alone, without the gradient.

On CUDA, tapegrad's SDPA runs on the tensor cores, float32 with each product as three TF32 ones
(3xTF32) like PyTorch's memory-efficient kernel (TAPEGRAD_CUDA_SDPA_TENSOR_CORES=0 in the
environment: on the float32 kernels instead, for comparison). PyTorch is the yardstick only
(pip install torch in a virtual environment).
"""
import os
import statistics
import subprocess
import sys
import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

from bench_util import (ServedCase, median_ms, once_ms, paired_ms, ratio_summary,
                        served_cases, served_env, split_machine, spread, take_flag,
                        take_option)


DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}


def case_shape(name):
    """The numbers of a case's name in order: B<b>_Hq<hq>_Hk<hk>_S<s>_D<d> first (then an
    option's, if any), or the decoding cases' decode_B<b>_Hq<hq>_Hk<hk>_Sq<sq>_Skv<skv>_D<d>."""
    parts = [p for p in name.split("_") if p[-1:].isdigit()]
    return tuple(int(p[len(p.rstrip("0123456789")):]) for p in parts)


def torch_steps(b, hq, hk, s, d, causal, backend, device, dtype):
    """PyTorch's forward and forward+backward on one case's inputs, as two functions that each
    run once (ending with a device sync)."""
    g = torch.Generator().manual_seed(1)

    def randn(*shape, grad=True):
        return torch.randn(*shape, generator=g).to(device, dtype).requires_grad_(grad)

    q, k, v = randn(b, hq, s, d), randn(b, hk, s, d), randn(b, hk, s, d)
    dout = randn(b, hq, s, d, grad=False)
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    gqa = hq != hk
    # Only flash (and math) take grouped heads; for the memory-efficient kernel (float32 on
    # CUDA) K and V are repeated to Hq heads inside the timed region, as PyTorch's warning
    # advises and a float32 model would have to.
    repeat = gqa and backend == SDPBackend.EFFICIENT_ATTENTION

    def attend():
        kk, vv = k, v
        if repeat:
            kk, vv = k.repeat_interleave(hq // hk, dim=1), v.repeat_interleave(hq // hk, dim=1)
        with sdpa_kernel(backend):
            return F.scaled_dot_product_attention(q, kk, vv, is_causal=causal,
                                                  enable_gqa=gqa and not repeat)

    def fwd():
        with torch.no_grad():
            attend()
        sync()

    def fwd_bwd():
        torch.autograd.grad(attend(), (q, k, v), dout)
        sync()

    return fwd, fwd_bwd


def torch_times(b, hq, hk, s, d, causal, backend, device, dtype, forward=True):
    """Median ms of PyTorch's forward (None when not `forward`) and forward+backward."""
    fwd, fwd_bwd = torch_steps(b, hq, hk, s, d, causal, backend, device, dtype)
    reps = 3 if s >= 1024 else 5
    return median_ms(fwd, reps) if forward else None, median_ms(fwd_bwd, reps)


def torch_decode_ms(b, hq, hk, sq, skv, d, backend, dtype):
    g = torch.Generator().manual_seed(3)
    q = torch.randn(b, hq, sq, d, generator=g).to(dtype)
    k = torch.randn(b, hk, skv, d, generator=g).to(dtype)
    v = torch.randn(b, hk, skv, d, generator=g).to(dtype)

    def fwd():
        with torch.no_grad(), sdpa_kernel(backend):
            F.scaled_dot_product_attention(q, k, v, enable_gqa=hq != hk)

    return median_ms(fwd, 20)


def compare_decode(ours, threads, dtype, rounds):
    """The decode lines of bench_sdpa against PyTorch's forward, alternated `rounds` times."""
    header, lines = split_machine(ours(), threads)
    print(header)
    print(f"torch {torch.__version__}, cpu, {threads} threads, {dtype}; forward alone, no "
          "gradient; times are medians in ms")
    cases = {}  # name: (shape, [ours ms], [torch flash ms])
    for round_ in range(rounds):
        if round_ > 0:
            lines = split_machine(ours(), threads)[1]
        for line in lines:
            f = line.split("\t")
            if f[0] != "decode":
                continue
            name, ms = f[1], float(f[2])
            shape = case_shape(name)
            entry = cases.setdefault(name, (shape, [], []))
            entry[1].append(ms)
            entry[2].append(torch_decode_ms(*shape, SDPBackend.FLASH_ATTENTION, dtype))
    print("| case | ours | K, V read at GB/s | torch FLASH_ATTENTION | flash / ours | torch math | "
          "math / ours |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: |")
    for name, ((b, hq, hk, sq, skv, d), mine, theirs) in cases.items():
        m, t = sorted(mine)[len(mine) // 2], sorted(theirs)[len(theirs) // 2]
        math = torch_decode_ms(b, hq, hk, sq, skv, d, SDPBackend.MATH, dtype)
        gbs = 2.0 * b * hk * skv * d * dtype.itemsize / m * 1e-6
        print(f"| {name} | {m:.2f} | {gbs:.1f} | {t:.2f} | {t / m:.2f} | {math:.2f} | "
              f"{math / m:.2f} |")
    if rounds > 1:
        print(f"\nin {rounds} alternated rounds (ms, ours / torch FLASH_ATTENTION = ratio)")
        for name, (_, mine, theirs) in cases.items():
            cells = ", ".join(f"{m:.2f} / {t:.2f} = {t / m:.2f}" for m, t in zip(mine, theirs))
            print(f"{name}: {cells}")


def compare_paired(ours_argv, threads, device, dtype, fused, pairs, forward):
    """Each case's forward+backward (its forward, with `forward`), ours and PyTorch's fused
    kernel one run each in turn, `pairs` times (bench_sdpa kept running on the case between its
    runs: ServedCase)."""
    out, names = served_cases(ours_argv, served_env(forward))
    header, _ = split_machine(out, threads)
    print(header)
    what = "forward" if forward else "forward+backward"
    print(f"torch {torch.__version__}, {device}, {threads} threads, {dtype}; {what} "
          f"in {pairs} pairs of runs, ours and torch {fused.name} one after the other (which "
          "goes first alternates); ratio = torch / ours per pair")
    print("| case | ours ms: median (min-max) | torch ms: median (min-max) | ratio: median "
          "(quartiles) | ours GFLOP/s at its median |")
    print("| --- | ---: | ---: | ---: | ---: |")
    for name in names:
        b, hq, hk, s, d = case_shape(name)[:5]
        causal = name.endswith("causal")
        served = ServedCase(ours_argv, served_env(forward, name + "$"))
        steps = torch_steps(b, hq, hk, s, d, causal, fused, device, dtype)
        step = steps[0] if forward else steps[1]
        step()  # warm-up
        mine, theirs = paired_ms(served.once, lambda: once_ms(step), pairs)
        served.close()
        ratio, q1, q3 = ratio_summary(mine, theirs)
        m = statistics.median(mine)
        flops = (1.0 if forward else 3.5) * 4.0 * b * hq * s * s * d * (0.5 if causal else 1.0)
        print(f"| {name} | {spread(mine)} | {spread(theirs)} | {ratio:.2f} ({q1:.2f}-{q3:.2f}) | "
              f"{flops / m * 1e-6:.1f} |")


def main():
    args = sys.argv[1:]
    precision = take_option(args, "--precision", "fp32")
    if precision not in DTYPES:
        sys.exit(f"--precision: expected fp32, bf16 or fp16, got '{precision}'")
    rounds = int(take_option(args, "--rounds", "1"))
    if rounds < 1:
        sys.exit(f"--rounds: expected at least 1, got {rounds}")
    pairs = int(take_option(args, "--paired", "0"))
    if "--paired" in sys.argv and pairs < 1:
        sys.exit(f"--paired: expected at least 1, got {pairs}")
    if pairs and rounds > 1:
        sys.exit("--rounds and --paired: one or the other")
    forward = take_flag(args, "--forward")
    if forward and not pairs:
        sys.exit("--forward: with --paired N only")
    exe = args[0]
    threads = int(args[1]) if len(args) > 1 else 2
    device = args[2] if len(args) > 2 else "cpu"
    dtype = DTYPES[precision]
    fused = (SDPBackend.EFFICIENT_ATTENTION if device == "cuda" and precision == "fp32"
             else SDPBackend.FLASH_ATTENTION)
    torch.set_num_threads(threads)

    def ours(case=None):
        """bench_sdpa's output: every case, or (case given) that one alone without the
        reference."""
        env = dict(os.environ)
        if case:
            env.update(TAPEGRAD_BENCH_SDPA_CASES=case, TAPEGRAD_BENCH_SDPA_REFERENCE="0")
        return subprocess.run([exe, str(threads), device, "--precision", precision], check=True,
                              capture_output=True, text=True, env=env).stdout

    if device == "decode":
        if pairs:
            sys.exit("--paired: the cpu and cuda cases only, not decode")
        compare_decode(ours, threads, dtype, rounds)
        return
    if pairs:
        compare_paired([exe, str(threads), device, "--precision", precision], threads, device,
                       dtype, fused, pairs, forward)
        return
    out = ours()
    header, lines = split_machine(out, threads)
    print(header)
    print(f"torch {torch.__version__}, {device}, {threads} threads, {dtype}; "
          "times are medians in ms")
    for line in [x for x in lines if x.startswith("cuda_sdpa\t")]:
        print(f"tapegrad SDPA kernels: {line.split(chr(9))[1]}")
        lines.remove(line)
    print(f"| case | fwd | fwd GFLOP/s | fwd+bwd | fwd+bwd GFLOP/s | torch {fused.name} fwd+bwd | "
          "fused / ours | torch math fwd+bwd | math / ours | sdpa_reference fwd+bwd |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    mem = []
    per_round = {}  # case: ([ours fwd+bwd], [torch fused fwd+bwd]), one entry a round
    for line in lines:
        f = line.split("\t")
        if f[0] == "mem":
            mem.append(f)
            continue
        name, fwd, fb, rf, rfb, gf, gfb = f[0], *map(float, f[1:])
        b, hq, hk, s, d = case_shape(name)[:5]
        causal = name.endswith("causal")
        _, flash_fb = torch_times(b, hq, hk, s, d, causal, fused, device, dtype)
        _, math_fb = torch_times(b, hq, hk, s, d, causal, SDPBackend.MATH, device, dtype)
        per_round[name] = ([], [], (b, hq, hk, s, d, causal))
        print(f"| {name} | {fwd:.2f} | {gf:.1f} | {fb:.2f} | {gfb:.1f} | {flash_fb:.2f} | "
              f"{flash_fb / fb:.2f} | {math_fb:.2f} | {math_fb / fb:.2f} | {rfb:.2f} |")
    for _, s, peak, rss in mem:
        print(f"memory S={s}: tensor storage beyond inputs/results {peak} MiB, "
              f"process high-water growth {rss} MiB")
    if rounds == 1:
        return
    for _ in range(rounds):
        for name, (mine, theirs, shape) in per_round.items():
            line = [x for x in ours(name + "$").splitlines() if x.split("\t")[0] == name][0]
            mine.append(float(line.split("\t")[2]))
            theirs.append(torch_times(*shape, fused, device, dtype, forward=False)[1])
    print(f"\nforward+backward in {rounds} rounds, each case's two sides timed one after the "
          f"other (ms, ours / torch {fused.name} = ratio), and the median of the rounds' ratios")
    print("| case | " + " | ".join(f"round {r + 1}" for r in range(rounds)) + " | median ratio |")
    print("| --- |" + " ---: |" * (rounds + 1))
    for name, (mine, theirs, _) in per_round.items():
        ratio = statistics.median(t / m for m, t in zip(mine, theirs))
        cells = " | ".join(f"{m:.2f} / {t:.2f} = {t / m:.2f}" for m, t in zip(mine, theirs))
        print(f"| {name} | {cells} | {ratio:.2f} |")


if __name__ == "__main__":
    main()
