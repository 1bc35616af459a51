"""PyTorch side of bench/nn.lua: one optimizer step over 100 float32 tensors with random
gradients, with torch.optim's fused=True kernels: AdamW and SGD (momentum 0.9) over 100 x 1M
on the GPU (when torch sees one), AdamW over 100 x 100k on the CPU. Prints `case,seconds`
lines (the median of 5 runs of 10 steps after a warm-up run, the device synchronised after
each run); prints nothing when torch is missing.

    python3 bench/torch_nn.py"""
import os
import sys
import time

try:
    import torch
except ImportError:
    sys.exit(0)


def step_time(dev, n, m, make, calls=10, runs=5):
    torch.manual_seed(3)
    params = [torch.randn(m, device=dev, requires_grad=True) for _ in range(n)]
    for p in params:
        p.grad = torch.randn(m, device=dev)
    opt = make(params)

    def batch():
        for _ in range(calls):
            opt.step()
        if dev == "cuda":
            torch.cuda.synchronize()

    batch()
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        batch()
        times.append((time.perf_counter() - t0) / calls)
    times.sort()
    return times[len(times) // 2]


def main():
    torch.set_num_threads(os.cpu_count() or 1)
    cases = []
    if torch.cuda.is_available():
        cases += [
            ("adamw_100m_gpu", "cuda", 100, 1000000,
             lambda p: torch.optim.AdamW(p, lr=1e-3, fused=True)),
            ("sgd_100m_gpu", "cuda", 100, 1000000,
             lambda p: torch.optim.SGD(p, lr=1e-3, momentum=0.9, fused=True)),
        ]
    cases.append(("adamw_10m_cpu", "cpu", 100, 100000,
                  lambda p: torch.optim.AdamW(p, lr=1e-3, fused=True)))
    for name, dev, n, m, make in cases:
        try:
            print("%s,%.9g" % (name, step_time(dev, n, m, make)), flush=True)
        except (RuntimeError, TypeError) as e:   # an older torch without fused=True there
            print("bench/torch_nn.py: %s: %s" % (name, e), file=sys.stderr)
        if dev == "cuda":
            torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
