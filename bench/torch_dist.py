"""bench/torch_dist.py: PyTorch's side of bench/dist.lua, printed as case,seconds lines.

all_reduce_256m: dist.all_reduce of 256 MiB float32 with NCCL over every GPU (a process
each, the slowest rank's mean of 20 after a warm-up); peer_copy_256m: copy_ from cuda:0 to
cuda:1 (cudaMemcpyPeerAsync), median of 5 batches of 5."""
import os
import socket
import statistics
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

N = 64 * 1024 * 1024


def rank(r, world, port, out):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("nccl", rank=r, world_size=world)
    torch.cuda.set_device(r)
    t = torch.ones(N, device="cuda")
    for _ in range(3):
        dist.all_reduce(t)
    torch.cuda.synchronize()
    dist.barrier()
    t0 = time.perf_counter()
    for _ in range(20):
        dist.all_reduce(t)
    torch.cuda.synchronize()
    s = torch.tensor([(time.perf_counter() - t0) / 20], device="cuda")
    dist.all_reduce(s, op=dist.ReduceOp.MAX)
    if r == 0:
        out.put(s.item())
    dist.destroy_process_group()


def main():
    n = torch.cuda.device_count()
    if n < 2:
        return
    with socket.socket() as sk:
        sk.bind(("127.0.0.1", 0))
        port = sk.getsockname()[1]
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    ps = [ctx.Process(target=rank, args=(r, n, port, q)) for r in range(n)]
    for p in ps:
        p.start()
    for p in ps:
        p.join()
    print("all_reduce_256m,%.9g" % q.get(), flush=True)
    a = torch.ones(N, device="cuda:0")
    b = torch.empty(N, device="cuda:1")
    runs = []
    b.copy_(a)
    torch.cuda.synchronize("cuda:1")
    for _ in range(5):
        t0 = time.perf_counter()
        for _ in range(5):
            b.copy_(a)
        torch.cuda.synchronize("cuda:1")
        runs.append((time.perf_counter() - t0) / 5)
    print("peer_copy_256m,%.9g" % statistics.median(runs), flush=True)


if __name__ == "__main__":
    main()
