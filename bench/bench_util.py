"""Timing helper shared by the PyTorch comparison scripts."""
import time


def median_ms(fn, reps=9):
    """Median wall time of fn() over reps runs after one warm-up, in milliseconds."""
    fn()
    ts = []
    for _ in range(reps):
        a = time.perf_counter()
        fn()
        ts.append((time.perf_counter() - a) * 1e3)
    ts.sort()
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
