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
