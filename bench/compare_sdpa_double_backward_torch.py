#!/usr/bin/env python3
"""Runs bench_sdpa_double_backward and PyTorch's SDPA double backward on the CPU, same shape
and thread count, and prints the ratios. PyTorch's fused CPU kernel refuses a double
backward, so its math path (autograd through the composed ops) is the yardstick: the only one
it has. Each side: forward, backward with create_graph, then the gradients of
<c, (dq, dk, dv)> with respect to q, k, v and dout (the "double backward" column). Memory,
the peak over the three passes beyond the inputs: tapegrad's tensor storage, and for PyTorch
the growth of the resident set, measured in a process of its own with glibc's mmap threshold
fixed at 64 KiB, so that every tensor's pages are mapped on allocation and returned on free
(the high-water mark is reset through /proc/self/clear_refs after the inputs are made).

    python bench/compare_sdpa_double_backward_torch.py build/bench/bench/bench_sdpa_double_backward \
        [threads] [B H S D] [causal]

PyTorch is the yardstick only (pip install torch in a virtual environment).
"""
import os
import subprocess
import sys
import time

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

from bench_util import split_machine


def rss_kib(field):
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise RuntimeError(f"no {field} in /proc/self/status")


def torch_once(b, h, s, d, causal, memory=None):
    g = torch.Generator().manual_seed(1)
    q, k, v, dout = (torch.randn(b, h, s, d, generator=g).requires_grad_() for _ in range(4))
    cot = [torch.randn(b, h, s, d, generator=g) for _ in range(3)]
    if memory is not None:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")  # VmHWM := VmRSS
        memory.append(rss_kib("VmRSS"))
    a = time.perf_counter()
    with sdpa_kernel(SDPBackend.MATH):
        out = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
    fwd = time.perf_counter() - a
    a = time.perf_counter()
    grads = torch.autograd.grad(out, (q, k, v), dout, create_graph=True)
    l2 = sum((gi * ci).sum() for gi, ci in zip(grads, cot))
    bwd = time.perf_counter() - a
    a = time.perf_counter()
    torch.autograd.grad(l2, (q, k, v, dout))
    dbl = time.perf_counter() - a
    if memory is not None:
        memory.append(rss_kib("VmHWM"))
    return fwd * 1e3, bwd * 1e3, dbl * 1e3


def torch_peak_mib(threads, shape, causal):
    """PyTorch's peak growth over the three passes, from a child process (see the top)."""
    env = dict(os.environ, MALLOC_MMAP_THRESHOLD_="65536")
    out = subprocess.run([sys.executable, __file__, "--torch-memory", str(threads), *map(str, shape),
                          str(int(causal))], check=True, capture_output=True, text=True, env=env)
    return float(out.stdout.split()[-1])


def main():
    if sys.argv[1] == "--torch-memory":
        torch.set_num_threads(int(sys.argv[2]))
        shape, causal = [int(x) for x in sys.argv[3:7]], sys.argv[7] != "0"
        torch_once(*shape, causal)  # warm-up
        memory = []
        torch_once(*shape, causal, memory)
        print((memory[1] - memory[0]) / 1024)
        return
    exe = sys.argv[1]
    threads = int(sys.argv[2]) if len(sys.argv) > 2 else 2
    shape = [int(x) for x in sys.argv[3:7]] if len(sys.argv) > 6 else [1, 8, 1024, 64]
    causal = len(sys.argv) > 7 and sys.argv[7] != "0"
    torch.set_num_threads(threads)
    out = subprocess.run([exe, str(threads), *map(str, shape), str(int(causal))], check=True,
                         capture_output=True, text=True).stdout
    header, lines = split_machine(out, threads)
    ours = {}
    for line in lines:
        f = line.split("\t")
        if f[0] in ("sdpa", "sdpa_reference"):
            ours[f[0]] = [float(x) for x in f[1:]]
    torch_once(*shape, causal)  # warm-up
    runs = sorted((torch_once(*shape, causal) for _ in range(3)), key=lambda r: r[2])
    t = runs[1]
    print(header)
    print(f"shape B{shape[0]} H{shape[1]} S{shape[2]} D{shape[3]}{' causal' if causal else ''},"
          " float32")
    print(f"{'':16}{'fwd ms':>10}{'bwd(create_graph) ms':>22}{'double bwd ms':>15}{'MiB':>8}"
          f"{'speed-up (double bwd)':>24}")
    mib = torch_peak_mib(threads, shape, causal)
    print(f"{'torch math':16}{t[0]:10.2f}{t[1]:22.2f}{t[2]:15.2f}{mib:8.0f}{'1.00x':>24}")
    for name, r in ours.items():
        print(f"{'tapegrad ' + name.replace('sdpa_reference', 'ref'):16}{r[0]:10.2f}{r[1]:22.2f}"
              f"{r[2]:15.2f}{r[3]:8.0f}{t[2] / r[2]:23.2f}x")


if __name__ == "__main__":
    main()
