"""Checks that a bfloat16/float16 safetensors file written by tapegrad loads in Python's
safetensors library as torch.bfloat16 / torch.float16 with the values PyTorch's own rounding
gives (round to nearest even from float64), empty tensors included, and that a file Python's
library writes with empty tensors (at offset [0, 0]) loads in tapegrad. Needs PyTorch and safetensors (a virtual environment; never a tapegrad dependency):

    python bench/check_half_safetensors.py [build/bench/bench]
"""
import subprocess
import sys
import tempfile
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file


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
            "empty_first": torch.zeros(0, dtype=torch.float32),
            "empty_mid": torch.zeros(2, 0, dtype=torch.bfloat16),
            "empty_last": torch.zeros(0, 3, dtype=torch.int64),
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
        # The other way: a file of Python's with empty tensors, read by tapegrad.
        py = Path(tmp) / "python.safetensors"
        theirs = {"a": torch.ones(2), "b": torch.zeros(0), "c": torch.zeros(3, 0, dtype=torch.float16),
                  "d": torch.arange(6, dtype=torch.int64).reshape(2, 3)}
        save_file(theirs, str(py))
        out = subprocess.run([str(build / "read_safetensors"), str(py)], check=True,
                             capture_output=True, text=True).stdout.split("\n")
        got = {line.split(" ")[0]: line for line in out if line}
        for name, w in theirs.items():
            line = got.get(name, "missing")
            shape = "[" + ", ".join(str(d) for d in w.shape) + "]"
            same = line != "missing" and shape in line and float(line.split(" ")[-1]) == float(w.double().sum())
            print(f"python -> tapegrad {name:3s} {line:40s} {'ok' if same else 'DIFFERS'}")
            ok = ok and same
        print("all equal" if ok else "MISMATCH")
        return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
