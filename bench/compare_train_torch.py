#!/usr/bin/env python3
"""Runs bench_train_step and the same transformer and training step in PyTorch eager
(same shapes, same thread count): RoPE on adjacent pairs, GQA through
scaled_dot_product_attention(enable_gqa=True), SwiGLU, RMSNorm, untied head, cross-entropy,
global-norm clipping and AdamW. Prints both and the ratio.

    python bench/compare_train_torch.py build/bench/bench/bench_train_step [threads] [steps] [cpu|cuda] [rounds] [--precision fp32|bf16|fp16]

--precision (default fp32) runs both sides in mixed precision: bench_train_step --precision P,
and PyTorch's forward under torch.autocast(dtype=bfloat16|float16) with float32 parameters,
plus torch.amp.GradScaler for fp16 (as tapegrad's train_step does).

The two run alternately for `rounds` rounds (default 3) so that a slow spell of a shared
machine hits both; each round reports a median over `steps` steps, and the final ratio is
between the medians of the rounds.

PyTorch is the yardstick only (pip install torch in a virtual environment).
"""
import subprocess
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

from bench_util import median_ms, split_machine

VOCAB, D, LAYERS, HQ, HK, FFN, B, S = 256, 256, 4, 8, 2, 768, 16, 128
DH = D // HQ


def rope(x, theta=10000.0):
    """x (B, S, H, Dh): rotate adjacent pairs (2i, 2i+1) by t * theta^(-2i/Dh)."""
    s, dh = x.shape[1], x.shape[-1]
    freq = theta ** (-torch.arange(0, dh, 2, dtype=torch.float64, device=x.device) / dh)
    ang = torch.arange(s, dtype=torch.float64, device=x.device)[:, None] * freq
    cos = ang.cos().to(x.dtype)[:, None, :]
    sin = ang.sin().to(x.dtype)[:, None, :]
    xe, xo = x[..., 0::2], x[..., 1::2]
    return torch.stack((xe * cos - xo * sin, xe * sin + xo * cos), -1).flatten(-2)


class RMSNorm(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(d))

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * self.weight


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.n1, self.n2 = RMSNorm(D), RMSNorm(D)
        self.wq = nn.Linear(D, HQ * DH, bias=False)
        self.wk = nn.Linear(D, HK * DH, bias=False)
        self.wv = nn.Linear(D, HK * DH, bias=False)
        self.wo = nn.Linear(HQ * DH, D, bias=False)
        self.w1 = nn.Linear(D, FFN, bias=False)
        self.w3 = nn.Linear(D, FFN, bias=False)
        self.w2 = nn.Linear(FFN, D, bias=False)

    def forward(self, x):
        b, s, _ = x.shape
        h = self.n1(x)
        q = rope(self.wq(h).view(b, s, HQ, DH)).transpose(1, 2)
        k = rope(self.wk(h).view(b, s, HK, DH)).transpose(1, 2)
        v = self.wv(h).view(b, s, HK, DH).transpose(1, 2)
        o = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
        x = x + self.wo(o.transpose(1, 2).reshape(b, s, HQ * DH))
        h = self.n2(x)
        return x + self.w2(F.silu(self.w1(h)) * self.w3(h))


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(VOCAB, D)
        self.blocks = nn.ModuleList(Block() for _ in range(LAYERS))
        self.norm = RMSNorm(D)
        self.head = nn.Linear(D, VOCAB, bias=False)

    def forward(self, ids):
        h = self.embed(ids)
        for blk in self.blocks:
            h = blk(h)
        return self.head(self.norm(h))


LOW = {"fp32": None, "bf16": torch.bfloat16, "fp16": torch.float16}


def torch_step_ms(steps, device, precision):
    torch.manual_seed(0)
    model = Model().to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4, betas=(0.9, 0.95), weight_decay=0.1)
    g = torch.Generator().manual_seed(7)
    low = LOW[precision]
    scaler = torch.amp.GradScaler(device) if precision == "fp16" else None

    def step():
        t = torch.randint(0, VOCAB, (B, S + 1), generator=g).to(device)
        with torch.autocast(device_type=device, dtype=low, enabled=low is not None):
            logits = model(t[:, :-1])
        loss = F.cross_entropy(logits.float().reshape(-1, VOCAB), t[:, 1:].reshape(-1))
        opt.zero_grad(set_to_none=True)
        if scaler is None:
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
        else:
            scaler.scale(loss).backward()
            scaler.unscale_(opt)
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            scaler.step(opt)
            scaler.update()
        loss.item()

    step()  # median_ms warms up once more
    return median_ms(step, steps)


def main():
    argv = sys.argv[1:]
    precision = "fp32"
    if "--precision" in argv:
        i = argv.index("--precision")
        if i + 1 >= len(argv) or argv[i + 1] not in LOW:
            sys.exit("--precision takes fp32, bf16 or fp16")
        precision = argv[i + 1]
        del argv[i:i + 2]
    exe = argv[0]
    threads = int(argv[1]) if len(argv) > 1 else 2
    steps = int(argv[2]) if len(argv) > 2 else 5
    device = argv[3] if len(argv) > 3 else "cpu"
    rounds = int(argv[4]) if len(argv) > 4 else 3
    torch.set_num_threads(threads)
    ours, theirs = [], []
    for r in range(rounds):
        out = subprocess.run([exe, str(threads), str(steps), device, "--precision", precision],
                             check=True, capture_output=True, text=True).stdout
        header, lines = split_machine(out, threads)
        if r == 0:
            print(header)
            print("\n".join(lines))
        ours.append(float(next(l.split("\t")[1] for l in out.splitlines()
                               if l.startswith("step_ms"))))
        theirs.append(torch_step_ms(steps, device, precision))
        print(f"round {r + 1}: tapegrad {ours[-1]:.1f} ms, pytorch {theirs[-1]:.1f} ms")
    a, b = sorted(ours)[len(ours) // 2], sorted(theirs)[len(theirs) // 2]
    tokens = B * S
    print(f"\n{'':12}{'ms/step':>10}{'tokens/s':>10}   (median of {rounds} rounds)")
    print(f"{'tapegrad':12}{a:10.1f}{tokens / a * 1e3:10.0f}")
    print(f"{'pytorch':12}{b:10.1f}{tokens / b * 1e3:10.0f}")
    print(f"speedup (pytorch ms / tapegrad ms): {b / a:.2f}x  [torch {torch.__version__}, "
          f"{threads} threads, {device}, {precision}]")
    print(f"rounds: tapegrad {' / '.join(f'{x:.1f}' for x in ours)} ms, "
          f"pytorch {' / '.join(f'{x:.1f}' for x in theirs)} ms")
    print(header)


if __name__ == "__main__":
    main()
