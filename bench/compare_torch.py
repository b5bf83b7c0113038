#!/usr/bin/env python3
"""Runs bench_ops and the same ops in PyTorch (same device, same thread count), prints the
ratios.

    python bench/compare_torch.py build/bench/bench/bench_ops [threads] [cpu|cuda]

PyTorch is the yardstick only: install it in a virtual environment (pip install torch);
it is never a dependency of the library, its tests or CI.
"""
import subprocess
import sys
import torch

from bench_util import median_ms, split_machine


def torch_cases(device):
    g = torch.Generator().manual_seed(1)

    def randn(*shape):
        return torch.randn(*shape, generator=g).to(device)

    cases = {}
    for n in (256, 512, 1024):
        a, b = randn(n, n), randn(n, n)
        cases[f"matmul_f32_{n}"] = lambda a=a, b=b: a @ b
    a, b = randn(8, 64, 256, 64), randn(8, 64, 64, 256)
    cases["bmm_f32_512x256x64x256"] = lambda: a @ b
    x, y = randn(1 << 22), randn(1 << 22)
    cases["add_f32_4M"] = lambda: x + y
    cases["gelu_f32_4M"] = lambda: torch.nn.functional.gelu(x, approximate="tanh")
    cases["exp_f32_4M"] = lambda: torch.exp(x)
    cases["tanh_f32_4M"] = lambda: torch.tanh(x)
    cases["sigmoid_f32_4M"] = lambda: torch.sigmoid(x)
    cases["pow2_f32_4M"] = lambda: x.pow(2.0)
    xa = x.abs()
    cases["sqrt_f32_4M"] = lambda: torch.sqrt(xa)
    cases["rsqrt_f32_4M"] = lambda: torch.rsqrt(xa)
    cases["log_f32_4M"] = lambda: torch.log(xa)
    cases["log1p_f32_4M"] = lambda: torch.log1p(xa)
    cases["expm1_f32_4M"] = lambda: torch.expm1(x)
    cases["pow3_f32_4M"] = lambda: x.pow(3.0)
    cases["pow_half_f32_4M"] = lambda: xa.pow(0.5)
    cases["softplus_f32_4M"] = lambda: torch.nn.functional.softplus(x)
    above = x > y
    cases["where_f32_4M"] = lambda: torch.where(above, x, y)
    m = x.reshape(4096, 1024)
    cases["sum_lastdim_f32_4096x1024"] = lambda: m.sum(1)
    cases["softmax_f32_4096x1024"] = lambda: torch.softmax(m, -1)
    mg = m.clone().requires_grad_()
    gout = randn(4096, 1024)

    def fwd_bwd():
        torch.softmax(mg, -1).backward(gout)
        mg.grad = None

    cases["softmax_fwd_bwd_f32_4096x1024"] = fwd_bwd
    for name, op in (("tanh", torch.tanh), ("relu", torch.relu),
                     ("softplus", torch.nn.functional.softplus)):

        def unary_fwd_bwd(op=op):
            op(mg).backward(gout)
            mg.grad = None

        cases[f"{name}_fwd_bwd_f32_4096x1024"] = unary_fwd_bwd
    mt = m.t()
    cases["transpose_copy_f32_1024x4096"] = lambda: mt.contiguous()
    cases["sum_dim0_f32_4096x1024"] = lambda: m.sum(0)
    cases["max_lastdim_f32_4096x1024"] = lambda: m.amax(1)
    cases["max_dim0_f32_4096x1024"] = lambda: m.amax(0)
    m2 = randn(1024, 4096)
    cases["add_transposed_f32_4096x1024"] = lambda: m + m2.t()
    w = randn(1024)
    cases["mul_row_broadcast_f32_4096x1024"] = lambda: m * w
    wg = w.clone().requires_grad_()

    def rms_norm_fwd_bwd():
        torch.nn.functional.rms_norm(mg, (1024,), wg, 1e-6).backward(gout)
        mg.grad = None
        wg.grad = None

    cases["rms_norm_fwd_bwd_f32_4096x1024"] = rms_norm_fwd_bwd
    cases["logsumexp_lastdim_f32_4096x1024"] = lambda: torch.logsumexp(m, 1)
    cases["var_lastdim_f32_4096x1024"] = lambda: m.var(1)
    cases["cat_dim1_f32_4096x1024x2"] = lambda: torch.cat([m, m], 1)
    targets = torch.randint(0, 1024, (4096,), generator=g).to(device)

    def cross_entropy_fwd_bwd():
        torch.nn.functional.cross_entropy(mg, targets).backward()
        mg.grad = None

    cases["cross_entropy_fwd_bwd_f32_4096x1024"] = cross_entropy_fwd_bwd
    if device == "cuda":  # time the work, not the launch
        cases = {k: (lambda f=f: (f(), torch.cuda.synchronize())) for k, f in cases.items()}
    return cases


def main():
    exe = sys.argv[1]
    threads = int(sys.argv[2]) if len(sys.argv) > 2 else 2
    device = sys.argv[3] if len(sys.argv) > 3 else "cpu"
    torch.set_num_threads(threads)
    out = subprocess.run([exe, str(threads), device], check=True, capture_output=True,
                         text=True).stdout
    header, lines = split_machine(out, threads)
    print(header)
    ours = {}
    for line in lines:
        name, t_ours, t_ref = line.split("\t")
        ours[name] = (float(t_ours), float(t_ref))
    cases = torch_cases(device)
    print(f"torch {torch.__version__}, {device}, {threads} threads; times are medians in ms")
    print("| case | tapegrad | plain reference | PyTorch | PyTorch / tapegrad |")
    print("| --- | ---: | ---: | ---: | ---: |")
    for name, (t, ref) in ours.items():
        pt = median_ms(cases[name])
        ref_s = f"{ref:.3f}" if ref > 0 else "-"
        print(f"| {name} | {t:.3f} | {ref_s} | {pt:.3f} | {pt / t:.2f} |")


if __name__ == "__main__":
    main()
