"""PyTorch side of bench/autograd.lua: samples/classifier.lua's network (32 -> 128 -> 10,
batch 256) trained with eager autograd and torch.optim.SGD(momentum=0.9), the way a
PyTorch user writes it, on the GPU (when torch sees one) and on the CPU (all cores).
Each batch is picked with a random permutation's slice, as the qlua side does.
Prints `train_gpu,seconds_per_step` and `train_cpu,seconds_per_step` lines, and
`train_nn_<dev>` for the same network as torch.nn.Sequential (the median of
`runs` batches of `steps` steps after a warm-up batch); prints nothing when torch is missing.

    python3 bench/torch_autograd.py [steps [runs]]"""
import os
import sys
import time

try:
    import torch
except ImportError:
    sys.exit(0)

D, H, C, B = 32, 128, 10, 256


def step_time(dev, steps, runs, make_step):
    """Seconds per training step. make_step(dev) returns step(xb, yb): one forward, backward
    and update on a batch; the data, the shuffling and the timing are the same for every
    form."""
    torch.manual_seed(7)
    n = B * steps
    x = torch.randn(n, D, device=dev)
    y = torch.randint(0, C, (n,), device=dev)
    step = make_step(dev)

    def batch():
        order = torch.randperm(n, device=dev)
        for first in range(0, n, B):
            idx = order[first:first + B]
            step(x.index_select(0, idx), y.index_select(0, idx))
        if dev == "cuda":
            torch.cuda.synchronize()

    batch()
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        batch()
        times.append((time.perf_counter() - t0) / steps)
    times.sort()
    return times[len(times) // 2]


def autograd_step(dev):
    """The network as tensors (bench/autograd.lua's train rows)."""
    w1 = (torch.randn(D, H, device=dev) * (2 / D) ** 0.5).requires_grad_()
    b1 = torch.zeros(H, device=dev, requires_grad=True)
    w2 = (torch.randn(H, C, device=dev) * (1 / H) ** 0.5).requires_grad_()
    b2 = torch.zeros(C, device=dev, requires_grad=True)
    opt = torch.optim.SGD([w1, b1, w2, b2], lr=0.05, momentum=0.9)

    def step(xb, yb):
        logits = torch.relu(xb @ w1 + b1) @ w2 + b2
        loss = torch.nn.functional.cross_entropy(logits, yb)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
    return step


def nn_step(dev):
    """The same with torch.nn.Sequential (bench/autograd.lua's train_nn rows)."""
    net = torch.nn.Sequential(torch.nn.Linear(D, H), torch.nn.ReLU(), torch.nn.Linear(H, C)).to(dev)
    opt = torch.optim.SGD(net.parameters(), lr=0.05, momentum=0.9)

    def step(xb, yb):
        loss = torch.nn.functional.cross_entropy(net(xb), yb)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
    return step


def main():
    steps = int(sys.argv[1]) if len(sys.argv) > 1 else 200
    runs = int(sys.argv[2]) if len(sys.argv) > 2 else 5
    torch.set_num_threads(os.cpu_count() or 1)
    devices = (["cuda"] if torch.cuda.is_available() else []) + ["cpu"]
    for dev in devices:
        name = "gpu" if dev == "cuda" else "cpu"
        print("train_%s,%.9g" % (name, step_time(dev, steps, runs, autograd_step)), flush=True)
        print("train_nn_%s,%.9g" % (name, step_time(dev, steps, runs, nn_step)), flush=True)


if __name__ == "__main__":
    main()
