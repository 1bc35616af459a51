"""NumPy side of `make bench`: the CPU cases, timed the way bench/bench.lua times qlua
(`calls` back-to-back calls, wall-clock / calls, median of `runs` batches after a warm-up).
Prints `case,seconds_per_call` lines; prints nothing (exit 0) when NumPy is missing."""
import sys
import time

try:
    import numpy as np
except ImportError:
    sys.exit(0)


def time_calls(fn, calls, runs):
    fn()
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        times.append((time.perf_counter() - t0) / calls)
    times.sort()
    return times[len(times) // 2]


def main(names):
    rng = np.random.default_rng(3)
    if not names or "cpu_matmul_1024" in names:
        a = rng.random((1024, 1024), dtype=np.float32)
        b = rng.random((1024, 1024), dtype=np.float32)
        print("cpu_matmul_1024,%.9g" % time_calls(lambda: np.matmul(a, b), 5, 9), flush=True)
    if not names or "cpu_gather_1m" in names:
        src = rng.random(16 << 20, dtype=np.float32)
        idx = rng.integers(0, 16 << 20, 1 << 20, dtype=np.int64)
        print("cpu_gather_1m,%.9g" % time_calls(lambda: np.take(src, idx), 20, 9), flush=True)


if __name__ == "__main__":
    main(set(sys.argv[1:]))
