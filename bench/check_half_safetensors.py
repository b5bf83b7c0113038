"""Checks that a bfloat16/float16 safetensors file written by tapegrad loads in Python's
safetensors library as torch.bfloat16 / torch.float16 with the values PyTorch's own rounding
gives (round to nearest even from float64). Needs PyTorch and safetensors (a virtual environment; never a tapegrad dependency):

    python bench/check_half_safetensors.py [build/bench/bench]
"""
import subprocess
import sys
import tempfile
from pathlib import Path

import torch
from safetensors.torch import load_file


def main():
    build = Path(sys.argv[1] if len(sys.argv) > 1 else "build/bench/bench")
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "half.safetensors"
        subprocess.run([str(build / "write_half_checkpoint"), str(path)], check=True)
        t = load_file(str(path))
        x = torch.arange(-8.0, 8.0, 0.37, dtype=torch.float64)
        edge = torch.tensor([65504.0, 70000.0, 1e-6, -3e-8, 1.0 / 3.0], dtype=torch.float64)
        want = {
            "bf16": x.to(torch.bfloat16),
            "f16": x.to(torch.float16).reshape(2, -1),
            "f32": x.to(torch.float32),
            "edge_bf16": edge.to(torch.bfloat16),
            "edge_f16": edge.to(torch.float16),
        }
        ok = True
        for name, w in want.items():
            got = t[name]
            same = got.dtype == w.dtype and got.shape == w.shape and torch.equal(got, w)
            print(f"{name:10s} {str(got.dtype):15s} {tuple(got.shape)} {'ok' if same else 'DIFFERS'}")
            if not same:
                print("  got ", got.flatten()[:8].tolist())
                print("  want", w.flatten()[:8].tolist())
            ok = ok and same
        print("all equal" if ok else "MISMATCH")
        return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
