"""PyTorch side of bench/attention.lua: F.scaled_dot_product_attention, causal, B=8 H=16
D=128 on the GPU (when torch sees one): the bytes a float32 S=1024 forward+backward takes
above what was allocated before it; float32 S=1024 and bfloat16 S=4096, forward and forward
with backward; and float32 B=2 H=4 S=512 D=64 forward+backward on the CPU. Prints
`case,seconds` lines (bytes for the peak), the median of 5 runs after a warm-up run, the
device synchronised after each run; prints nothing when torch is missing.

    python3 bench/torch_attention.py"""
import os
import sys
import time

try:
    import torch
except ImportError:
    sys.exit(0)

F = None


def operands(dev, dtype, b, h, s, d):
    torch.manual_seed(21)
    def r():
        return torch.randn(b, h, s, d, device=dev, dtype=dtype, requires_grad=True)
    return r(), r(), r(), torch.randn(b, h, s, d, device=dev, dtype=dtype)


def median_time(dev, step, calls, runs=5):
    def batch():
        for _ in range(calls):
            step()
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


def sdpa_time(dev, dtype, b, h, s, d, backward, calls):
    q, k, v, dy = operands(dev, dtype, b, h, s, d)

    def step():
        if backward:
            q.grad, k.grad, v.grad = None, None, None
            F.scaled_dot_product_attention(q, k, v, is_causal=True).backward(dy)
        else:
            with torch.no_grad():
                F.scaled_dot_product_attention(q, k, v, is_causal=True)
    return median_time(dev, step, calls)


def peak_bytes():
    torch.cuda.synchronize()
    before = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    q, k, v, dy = operands("cuda", torch.float32, 8, 16, 1024, 128)
    F.scaled_dot_product_attention(q, k, v, is_causal=True).backward(dy)
    torch.cuda.synchronize()
    return torch.cuda.max_memory_allocated() - before


def main():
    global F
    F = torch.nn.functional
    torch.set_num_threads(os.cpu_count() or 1)
    if torch.cuda.is_available():
        print("sdpa_f32_peak_gpu,%d" % peak_bytes(), flush=True)
        torch.cuda.empty_cache()
        for name, dtype, s, backward in (("sdpa_f32_fwd_gpu", torch.float32, 1024, False),
                                         ("sdpa_f32_fwdbwd_gpu", torch.float32, 1024, True),
                                         ("sdpa_bf16_fwd_gpu", torch.bfloat16, 4096, False),
                                         ("sdpa_bf16_fwdbwd_gpu", torch.bfloat16, 4096, True)):
            print("%s,%.9g" % (name, sdpa_time("cuda", dtype, 8, 16, s, 128, backward, 3)), flush=True)
            torch.cuda.empty_cache()
    print("sdpa_f32_cpu,%.9g" % sdpa_time("cpu", torch.float32, 2, 4, 512, 64, True, 1), flush=True)


if __name__ == "__main__":
    main()
