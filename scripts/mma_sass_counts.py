#!/usr/bin/env python3
"""Instructions per key (or query) tile of the tensor-core SDPA kernels' interior path, from
their SASS, without a GPU: the static check docs/PERFORMANCE.md's "instructions per HMMA" come
from. The kernels' source (backends/cuda/cuda_sdpa_mma_forward.cu and _backward.cu) is copied
and specialised first: every tile interior, no dropout, 16-byte copies only, so that each
kernel's main loop holds just the path an interior tile takes, and its instructions are what
one tile executes. The forward's tiles are also taken to move no row's base maximum (the
accumulators' rescale is skipped), as all but the first few do.

  python3 scripts/mma_sass_counts.py [git revision] [--dtype bfloat16|float]   (default: the
  working tree, bfloat16; a revision from the split of cuda_sdpa_mma.cu into those files on;
  float: the 3xTF32 kernels, whose products split their float32 fragments into TF32 halves)

Needs nvcc (sm_90) and cuobjdump with nvdisasm: the toolkit's, or the nvidia-cuda-cuobjdump
and nvidia-cuda-nvdisasm wheels (`pip download --no-deps nvidia-cuda-cuobjdump
nvidia-cuda-nvdisasm`, unzip both, put their nvidia/cu13/bin on PATH).
"""
import collections
import os
import re
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NVCC = os.environ.get("NVCC", "/usr/local/cuda/bin/nvcc")


KERNEL_FILES = ("cuda_sdpa_mma_forward.cu", "cuda_sdpa_mma_backward.cu")
# --dtype's names as the kernels' demangled template arguments read.
CXX_TYPES = {"bfloat16": "__nv_bfloat16", "float": "float"}


def specialise(tree):
    """Rewrites the copied kernels so that only the interior path is left."""
    for name in KERNEL_FILES:
        cu = os.path.join(tree, "backends/cuda", name)
        s = re.sub(r"interior\(a, sq, [^;]*?\)(?=[;)&])", "true", open(cu).read())
        # dQ's sums added by the dK/dV pass: whole slices of real rows and columns.
        s = re.sub(r"interior_sums\([^;]*?\)(?=\))", "true", s)
        # Plain options (no mask, ALiBi or softcap): the path the edge tiles' inline
        # visibility shares with the interior ones.
        s = s.replace("a.plain()", "true")
        s = s.replace("a.scale > 0 && true", "true").replace("!(a.dropout_p > 0)", "true")
        # The forward's accumulators are rescaled only at tiles that move some row's base
        # maximum (by more than 2^8), rare after the first: the interior path skips it.
        s = s.replace("__any_sync(0xffffffffu, moved)", "false")
        # Rows whose products are rounded first (scores near 10^6 and beyond) are rare too.
        s = s.replace("warp_has_huge_base(lane_huge)", "false")
        open(cu, "w").write(s.replace("a.dropout_p > 0", "false"))
    tiles = os.path.join(tree, "backends/cuda/cuda_sdpa_mma_tiles.cuh")
    t = open(tiles).read().replace("\n  if (vec) {", "\n  if (true) {")
    open(tiles, "w").write(t.replace("\n    if (at)\n", "\n    if (false)\n"))


def kernels(sass):
    """Kernel name -> [(address, opcode, instruction)]."""
    out = {}
    for part in re.split(r"\n\s*Function : ", sass)[1:]:
        name = subprocess.run(["c++filt"], input=part.split("\n", 1)[0].strip(),
                              capture_output=True, text=True).stdout.strip()
        name = re.sub(r"\(anonymous namespace\)::|^void tg::cuda::(mma_sdpa::)?", "", name)
        name = re.sub(r"\(tg::cuda::Args.*", "", name)
        name = re.sub(r"\(tg::cuda::(mma_sdpa::)?DkvPart\)", "part ", name)
        ins = []
        for m in re.finditer(r"/\*([0-9a-f]{4,})\*/\s+(.*?);", part):
            text = re.sub(r"^@!?U?P\w+\s+", "", m.group(2).strip())
            ins.append((int(m.group(1), 16), text.split()[0].split(".")[0], text))
        out[name] = ins
    return out


def main_loop(ins):
    """The widest backward branch's range that holds tensor-core products."""
    best = None
    for addr, op, text in ins:
        m = re.search(r"0x([0-9a-f]+)", text) if op == "BRA" else None
        if m and int(m.group(1), 16) < addr:
            lo = int(m.group(1), 16)
            if any(lo <= a <= addr and o == "HMMA" for a, o, _ in ins):
                if best is None or addr - lo > best[1] - best[0]:
                    best = (lo, addr)
    return collections.Counter(o for a, o, _ in ins if best and best[0] <= a <= best[1])


def main():
    args = sys.argv[1:]
    dtype = "bfloat16"
    if "--dtype" in args:
        i = args.index("--dtype")
        if i + 1 >= len(args) or args[i + 1] not in ("bfloat16", "float"):
            sys.exit("mma_sass_counts.py: --dtype takes bfloat16 or float")
        dtype = args[i + 1]
        del args[i:i + 2]
    rev = args[0] if args else None
    with tempfile.TemporaryDirectory() as tree:
        if rev:
            arch = subprocess.run(["git", "-C", ROOT, "archive", rev, "backends", "core"],
                                  check=True, capture_output=True).stdout
            subprocess.run(["tar", "-x", "-C", tree], input=arch, check=True)
        else:
            for d in ("backends", "core"):
                subprocess.run(["cp", "-r", os.path.join(ROOT, d), tree], check=True)
        specialise(tree)
        sass = ""
        for name in KERNEL_FILES:
            cubin = os.path.join(tree, name + ".cubin")
            subprocess.run([NVCC, "-I" + tree, "-I/usr/local/cuda/include", "-O3", "-DNDEBUG",
                            "-arch=sm_90", "--expt-relaxed-constexpr", "-std=c++17", "-cubin",
                            "-x", "cu", os.path.join(tree, "backends/cuda", name), "-o", cubin],
                           check=True)
            sass += subprocess.run(["cuobjdump", "-sass", cubin], check=True,
                                   capture_output=True, text=True).stdout
    print(f"{'kernel (interior path, one tile)':58} {'instr':>6} {'HMMA':>5} {'LDSM':>5} "
          f"{'MUFU':>5} {'LDL':>4} {'REDG':>4} {'per HMMA':>8}")
    for name, ins in sorted(kernels(sass).items()):
        # The kernels' last template argument is kPlainOnly: that kind only where there is one
        # (float32 has only the general kernels, specialised above to the same path).
        plain_kind = dtype == "bfloat16" and name.endswith(", false>")
        if f"<{CXX_TYPES[dtype]}," not in name or "delta" in name or plain_kind:
            continue
        h = main_loop(ins)
        n = sum(h.values())
        if h["HMMA"]:
            print(f"{name:58} {n:6} {h['HMMA']:5} {h['LDSM']:5} {h['MUFU']:5} {h['LDL']:4} "
                  f"{h['REDG']:4} {n / h['HMMA']:8.1f}")


if __name__ == "__main__":
    main()
