#!/usr/bin/env python3
"""Runs bench_sdpa and PyTorch's CPU scaled_dot_product_attention (flash kernel, and the
unfused math path) on the same shapes and thread count; prints a table with the ratios.

    python bench/compare_sdpa_torch.py build/bench/bench/bench_sdpa [threads]

PyTorch is the yardstick only (pip install torch in a virtual environment).
"""
import subprocess
import sys
import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

from bench_util import median_ms


def torch_times(b, hq, hk, s, d, causal, backend):
    g = torch.Generator().manual_seed(1)
    q = torch.randn(b, hq, s, d, generator=g, requires_grad=True)
    k = torch.randn(b, hk, s, d, generator=g, requires_grad=True)
    v = torch.randn(b, hk, s, d, generator=g, requires_grad=True)
    dout = torch.randn(b, hq, s, d, generator=g)
    gqa = hq != hk
    reps = 3 if s >= 1024 else 5

    def fwd():
        with torch.no_grad(), sdpa_kernel(backend):
            F.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=gqa)

    def fwd_bwd():
        with sdpa_kernel(backend):
            out = F.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=gqa)
        torch.autograd.grad(out, (q, k, v), dout)

    return median_ms(fwd, reps), median_ms(fwd_bwd, reps)


def main():
    exe = sys.argv[1]
    threads = int(sys.argv[2]) if len(sys.argv) > 2 else 2
    torch.set_num_threads(threads)
    out = subprocess.run([exe, str(threads)], check=True, capture_output=True, text=True).stdout
    print(f"torch {torch.__version__}, {threads} threads, float32; times are medians in ms")
    print("| case | fwd | fwd GFLOP/s | fwd+bwd | fwd+bwd GFLOP/s | torch flash fwd+bwd | "
          "flash / ours | torch math fwd+bwd | math / ours | sdpa_reference fwd+bwd |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    mem = []
    for line in out.splitlines():
        f = line.split("\t")
        if f[0] == "mem":
            mem.append(f)
            continue
        name, fwd, fb, rf, rfb, gf, gfb = f[0], *map(float, f[1:])
        parts = name.split("_")
        b, hq, hk, s, d = (int(p[len(p.rstrip("0123456789")):]) for p in parts[:5])
        causal = name.endswith("causal")
        _, flash_fb = torch_times(b, hq, hk, s, d, causal, SDPBackend.FLASH_ATTENTION)
        _, math_fb = torch_times(b, hq, hk, s, d, causal, SDPBackend.MATH)
        print(f"| {name} | {fwd:.2f} | {gf:.1f} | {fb:.2f} | {gfb:.1f} | {flash_fb:.2f} | "
              f"{flash_fb / fb:.2f} | {math_fb:.2f} | {math_fb / fb:.2f} | {rfb:.2f} |")
    for _, s, peak, rss in mem:
        print(f"memory S={s}: tensor storage beyond inputs/results {peak} MiB, "
              f"process high-water growth {rss} MiB")


if __name__ == "__main__":
    main()
