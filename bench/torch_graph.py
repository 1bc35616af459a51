"""PyTorch side of bench/graph.lua: samples/classifier.lua's step (torch.nn.Sequential
32 -> 128 -> 10, cross_entropy, autograd, SGD momentum 0.9, batch 256) over an epoch of
`steps` batches, eagerly and captured once with torch.cuda.graph (after the warm-up on a
side stream that PyTorch's recipe asks for) and replayed with the batch picked by copy_
into the graph's index input. Prints `epoch_eager,seconds` and `epoch_graph,seconds` (the
median of 5 and 7 epochs after one), nothing without torch or a GPU.

    python3 bench/torch_graph.py [steps]"""
import sys
import time

try:
    import torch
except ImportError:
    sys.exit(0)

D, H, C, B = 32, 128, 10, 256


def median(ts):
    ts = sorted(ts)
    return ts[(len(ts) - 1) // 2]


def timed(fn, runs):
    fn()
    torch.cuda.synchronize()
    ts = []
    for _ in range(runs):
        t0 = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        ts.append(time.perf_counter() - t0)
    return median(ts)


def main():
    if not torch.cuda.is_available():
        return
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 781
    dev = "cuda"
    torch.manual_seed(7)
    x = torch.randn(n * B, D, device=dev)
    y = torch.randint(0, C, (n * B,), device=dev)
    order = torch.randperm(n * B, device=dev)

    def new_step():
        net = torch.nn.Sequential(torch.nn.Linear(D, H), torch.nn.ReLU(), torch.nn.Linear(H, C)).to(dev)
        opt = torch.optim.SGD(net.parameters(), lr=0.05, momentum=0.9)

        def step(idx):
            opt.zero_grad(set_to_none=True)
            loss = torch.nn.functional.cross_entropy(net(x.index_select(0, idx)), y.index_select(0, idx))
            loss.backward()
            opt.step()
            return loss
        return step

    step = new_step()

    def epoch_eager():
        for i in range(n):
            step(order[i * B:(i + 1) * B])

    print("epoch_eager,%.9g" % timed(epoch_eager, 5), flush=True)

    gstep = new_step()
    idx = order[:B].clone()
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            gstep(idx)
    torch.cuda.current_stream().wait_stream(side)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        gstep(idx)

    def epoch_graph():
        for i in range(n):
            idx.copy_(order[i * B:(i + 1) * B])
            g.replay()

    print("epoch_graph,%.9g" % timed(epoch_graph, 7), flush=True)


if __name__ == "__main__":
    main()
