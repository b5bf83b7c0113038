#!/usr/bin/env python3
"""Runs bench_ops and the same ops in PyTorch (CPU, same thread count), prints the ratios.

    python bench/compare_torch.py build/bench/bench/bench_ops [threads]

PyTorch is the yardstick only: install it in a virtual environment (pip install torch);
it is never a dependency of the library, its tests or CI.
"""
import subprocess
import sys
import torch

from bench_util import median_ms


def torch_cases():
    g = torch.Generator().manual_seed(1)
    cases = {}
    for n in (256, 512, 1024):
        a, b = torch.randn(n, n, generator=g), torch.randn(n, n, generator=g)
        cases[f"matmul_f32_{n}"] = lambda a=a, b=b: a @ b
    a, b = torch.randn(8, 64, 256, 64, generator=g), torch.randn(8, 64, 64, 256, generator=g)
    cases["bmm_f32_512x256x64x256"] = lambda: a @ b
    x, y = torch.randn(1 << 22, generator=g), torch.randn(1 << 22, generator=g)
    cases["add_f32_4M"] = lambda: x + y
    cases["gelu_f32_4M"] = lambda: torch.nn.functional.gelu(x, approximate="tanh")
    m = x.reshape(4096, 1024)
    cases["sum_lastdim_f32_4096x1024"] = lambda: m.sum(1)
    cases["softmax_f32_4096x1024"] = lambda: torch.softmax(m, -1)
    mg = m.clone().requires_grad_()
    gout = torch.randn(4096, 1024, generator=g)

    def fwd_bwd():
        torch.softmax(mg, -1).backward(gout)
        mg.grad = None

    cases["softmax_fwd_bwd_f32_4096x1024"] = fwd_bwd
    mt = m.t()
    cases["transpose_copy_f32_1024x4096"] = lambda: mt.contiguous()
    return cases


def main():
    exe = sys.argv[1]
    threads = int(sys.argv[2]) if len(sys.argv) > 2 else 2
    torch.set_num_threads(threads)
    out = subprocess.run([exe, str(threads)], check=True, capture_output=True, text=True).stdout
    ours = {}
    for line in out.splitlines():
        name, t_ours, t_ref = line.split("\t")
        ours[name] = (float(t_ours), float(t_ref))
    cases = torch_cases()
    print(f"torch {torch.__version__}, {threads} threads; times are medians in ms")
    print("| case | tapegrad | plain reference | PyTorch | PyTorch / tapegrad |")
    print("| --- | ---: | ---: | ---: | ---: |")
    for name, (t, ref) in ours.items():
        pt = median_ms(cases[name])
        ref_s = f"{ref:.3f}" if ref > 0 else "-"
        print(f"| {name} | {t:.3f} | {ref_s} | {pt:.3f} | {pt / t:.2f} |")


if __name__ == "__main__":
    main()
