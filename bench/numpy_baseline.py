"""NumPy side of `make bench`: the CPU cases, timed the way bench/bench.lua times qlua
(`calls` back-to-back calls, wall-clock / calls, median of `runs` batches after a warm-up).
Prints `case,seconds_per_call` lines; prints nothing (exit 0) when NumPy is missing.

    python3 bench/numpy_baseline.py [case[:calls:runs] ...]    (no case: all of them)

Where torch imports, each case is also timed on PyTorch's CPU backend, on all cores
(torch.set_num_threads of os.cpu_count()) and on one, printed as `torch:case,seconds` and
`torch1:case,seconds` (the one-core baseline).

bench.lua owns the case list, the targets and each case's calls and runs (it passes them
as case:calls:runs; the numbers below are the defaults for running this script alone);
this file only mirrors each case's work with the same shapes and dtypes. Every call
allocates its result fresh and drops it (NumPy frees it at once by reference counting;
bench.lua frees qlua's result inside the timed call to match)."""
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


def report(name, fn, calls, runs):
    print("%s,%.9g" % (name, time_calls(fn, calls, runs)), flush=True)


# The 4096x4096 float32 cases: (name, calls, runs, op on the inputs). qlua dims are 1-based,
# so qlua's sum(1) is NumPy's sum(axis=0). qlua's max(dim) also returns the indices; the
# NumPy line is what a NumPy user writes for the values (see bench.lua).
N = 4096
MATRIX_CASES = [
    ("cpu_sum_all", 10, 7, lambda a, b, v, idx: a.sum()),
    ("cpu_sum_dim1", 10, 7, lambda a, b, v, idx: a.sum(0)),
    ("cpu_sum_dim2", 10, 7, lambda a, b, v, idx: a.sum(1)),
    ("cpu_max_dim1", 10, 7, lambda a, b, v, idx: a.max(0)),
    ("cpu_max_dim2", 10, 7, lambda a, b, v, idx: a.max(1)),
    ("cpu_argmax_dim2", 10, 7, lambda a, b, v, idx: a.argmax(1)),
    ("cpu_add", 3, 7, lambda a, b, v, idx: a + b),
    ("cpu_mul_bcast", 3, 7, lambda a, b, v, idx: a * v),
    ("cpu_exp", 2, 7, lambda a, b, v, idx: np.exp(a)),
    ("cpu_transpose_copy", 1, 7, lambda a, b, v, idx: np.ascontiguousarray(a.T)),
    ("cpu_index_select", 3, 7, lambda a, b, v, idx: a.take(idx, axis=0)),
    ("cpu_to_f64", 3, 7, lambda a, b, v, idx: a.astype(np.float64)),
    ("cpu_clone", 3, 7, lambda a, b, v, idx: a.copy()),
]


# The same cases on PyTorch's CPU tensors (values and indices for max(dim), as qlua).
TORCH_CASES = {
    "cpu_sum_all": lambda t, a, b, v, idx: a.sum(),
    "cpu_sum_dim1": lambda t, a, b, v, idx: a.sum(0),
    "cpu_sum_dim2": lambda t, a, b, v, idx: a.sum(1),
    "cpu_max_dim1": lambda t, a, b, v, idx: a.max(0),
    "cpu_max_dim2": lambda t, a, b, v, idx: a.max(1),
    "cpu_argmax_dim2": lambda t, a, b, v, idx: a.argmax(1),
    "cpu_add": lambda t, a, b, v, idx: a + b,
    "cpu_mul_bcast": lambda t, a, b, v, idx: a * v,
    "cpu_exp": lambda t, a, b, v, idx: t.exp(a),
    "cpu_transpose_copy": lambda t, a, b, v, idx: a.t().contiguous(),
    "cpu_index_select": lambda t, a, b, v, idx: a.index_select(0, idx),
    "cpu_to_f64": lambda t, a, b, v, idx: a.to(t.float64),
    "cpu_clone": lambda t, a, b, v, idx: a.clone(),
}


def torch_cases(wanted):
    try:
        import os
        import torch
    except ImportError:
        return

    def selected(name):
        return not wanted or name in wanted

    g = torch.Generator().manual_seed(3)
    cores = os.cpu_count() or 1
    for tag, threads in (("torch", cores), ("torch1", 1)):
        torch.set_num_threads(threads)
        with torch.no_grad():
            if selected("cpu_matmul_1024"):
                a = torch.rand(1024, 1024, generator=g)
                b = torch.rand(1024, 1024, generator=g)
                calls, runs = wanted.get("cpu_matmul_1024") or (5, 9)
                report(tag + ":cpu_matmul_1024", lambda: torch.matmul(a, b), calls, runs)
            if selected("cpu_gather_1m"):
                src = torch.rand(16 << 20, generator=g)
                idx = torch.randint(0, 16 << 20, (1 << 20,), generator=g)
                calls, runs = wanted.get("cpu_gather_1m") or (20, 9)
                report(tag + ":cpu_gather_1m", lambda: torch.take(src, idx), calls, runs)
            todo = [c for c in MATRIX_CASES if selected(c[0])]
            if todo:
                a = torch.rand(N, N, generator=g)
                b = torch.rand(N, N, generator=g)
                v = torch.rand(N, generator=g)
                idx = torch.randint(0, N, (N,), generator=g)
                for name, calls, runs, _ in todo:
                    calls, runs = wanted.get(name) or (calls, runs)
                    op = TORCH_CASES[name]
                    report(tag + ":" + name, lambda op=op: op(torch, a, b, v, idx), calls, runs)


def parse_args(argv):
    """case[:calls:runs] arguments -> {case: (calls, runs) or None}; a malformed
    count is ignored (the case keeps its default) rather than failing the whole run."""
    wanted = {}
    for arg in argv:
        parts = arg.split(":")
        counts = None
        if len(parts) == 3 and parts[1].isdigit() and parts[2].isdigit():
            counts = (max(1, int(parts[1])), max(1, int(parts[2])))
        wanted[parts[0]] = counts
    return wanted


def main(wanted):
    def run(name, fn, calls, runs):
        calls, runs = wanted.get(name) or (calls, runs)
        report(name, fn, calls, runs)

    def selected(name):
        return not wanted or name in wanted

    rng = np.random.default_rng(3)
    if selected("cpu_matmul_1024"):
        a = rng.random((1024, 1024), dtype=np.float32)
        b = rng.random((1024, 1024), dtype=np.float32)
        run("cpu_matmul_1024", lambda: np.matmul(a, b), 5, 9)
    if selected("cpu_gather_1m"):
        src = rng.random(16 << 20, dtype=np.float32)
        idx = rng.integers(0, 16 << 20, 1 << 20, dtype=np.int64)
        run("cpu_gather_1m", lambda: np.take(src, idx), 20, 9)
    todo = [c for c in MATRIX_CASES if selected(c[0])]
    if todo:
        a = rng.random((N, N), dtype=np.float32)
        b = rng.random((N, N), dtype=np.float32)
        v = rng.random(N, dtype=np.float32)
        idx = rng.integers(0, N, N, dtype=np.int64)
        for name, calls, runs, op in todo:
            run(name, lambda op=op: op(a, b, v, idx), calls, runs)


if __name__ == "__main__":
    wanted = parse_args(sys.argv[1:])
    main(wanted)
    torch_cases(wanted)
