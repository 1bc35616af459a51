"""PyTorch side of bench/nn.lua: one optimizer step over 100 float32 tensors with random
gradients, with torch.optim's fused=True kernels: AdamW and SGD (momentum 0.9) over 100 x 1M
on the GPU (when torch sees one), AdamW over 100 x 100k on the CPU; conv2d forward and
backward (N=64 on the GPU in float32 and bfloat16, N=8 on the CPU, 64 -> 64 channels, 56x56,
3x3, padding 1); a training step of samples/cnn.lua's network in eager mode; and layer_norm
of 8192 x 8192 float32 on the GPU, forward and forward with backward. Prints
`case,seconds` lines (the median of 5 runs after a warm-up run, the device synchronised
after each run); prints nothing when torch is missing.

    python3 bench/torch_nn.py"""
import os
import sys
import time

try:
    import torch
except ImportError:
    sys.exit(0)


def step_time(dev, n, m, make):
    torch.manual_seed(3)
    params = [torch.randn(m, device=dev, requires_grad=True) for _ in range(n)]
    for p in params:
        p.grad = torch.randn(m, device=dev)
    return step_time_of(dev, make(params), 10)


def conv_time(dev, dtype, n):
    torch.manual_seed(5)
    x = torch.randn(n, 64, 56, 56, device=dev, dtype=dtype, requires_grad=True)
    w = (torch.randn(64, 64, 3, 3, device=dev, dtype=dtype) * 0.05).requires_grad_()
    dy = torch.randn(n, 64, 56, 56, device=dev, dtype=dtype)

    class Step:
        def step(self):
            x.grad, w.grad = None, None
            torch.nn.functional.conv2d(x, w, padding=1).backward(dy)
    return step_time_of(dev, Step(), 10 if dev == "cuda" else 2)


def cnn_time(dev):
    torch.manual_seed(9)
    nn = torch.nn

    def block(cin, cout):
        return [nn.Conv2d(cin, cout, 3, padding=1), nn.BatchNorm2d(cout), nn.ReLU(), nn.MaxPool2d(2)]
    net = nn.Sequential(*block(1, 16), *block(16, 32), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
                        nn.Linear(32, 4)).to(dev)
    opt = torch.optim.AdamW(net.parameters(), lr=0.01, weight_decay=1e-4)
    x = torch.randn(64, 1, 32, 32, device=dev)
    y = torch.randint(0, 4, (64,), device=dev)

    class Step:
        def step(self):
            loss = nn.functional.cross_entropy(net(x), y)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
    return step_time_of(dev, Step(), 20)


def layer_norm_times():
    torch.manual_seed(13)
    n = 8192
    x = torch.randn(n, n, device="cuda", requires_grad=True)
    w = torch.randn(n, device="cuda", requires_grad=True)
    b = torch.randn(n, device="cuda", requires_grad=True)
    dy = torch.randn(n, n, device="cuda")
    F = torch.nn.functional

    class Fwd:
        def step(self):
            with torch.no_grad():
                F.layer_norm(x, (n,), w, b)

    class Both:
        def step(self):
            x.grad, w.grad, b.grad = None, None, None
            F.layer_norm(x, (n,), w, b).backward(dy)
    return step_time_of("cuda", Fwd(), 10), step_time_of("cuda", Both(), 10)


def step_time_of(dev, s, calls, runs=5):
    def batch():
        for _ in range(calls):
            s.step()
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
    if torch.cuda.is_available():
        print("conv2d_f32_gpu,%.9g" % conv_time("cuda", torch.float32, 64), flush=True)
        print("conv2d_bf16_gpu,%.9g" % conv_time("cuda", torch.bfloat16, 64), flush=True)
        print("cnn_step_gpu,%.9g" % cnn_time("cuda"), flush=True)
        fwd, both = layer_norm_times()
        print("layer_norm_fwd_gpu,%.9g" % fwd, flush=True)
        print("layer_norm_fwdbwd_gpu,%.9g" % both, flush=True)
    print("conv2d_f32_cpu,%.9g" % conv_time("cpu", torch.float32, 8), flush=True)
    print("cnn_step_cpu,%.9g" % cnn_time("cpu"), flush=True)


if __name__ == "__main__":
    main()
