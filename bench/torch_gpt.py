"""PyTorch side of bench/gpt.lua: a GPT-2-small (12 layers, width 768, 12 heads, vocabulary
50257, context 1024, GELU tanh, tied head) written as bench/gpt.lua's qlua model is, in eager
mode with F.scaled_dot_product_attention:
  gpt_fwd_gpu       forward of bfloat16 weights, batch 8 x 1024 tokens
  gpt_train_gpu     a training step: float32 weights, forward under autocast bfloat16,
                    cross_entropy, backward, AdamW(fused=True), batch 8 x 1024
  gpt_generate_gpu  generation with a KV cache, batch 1: a 128-token prompt, then 256 tokens
                    one at a time, greedy, bfloat16 weights
Prints `case,seconds` lines (the median of 5 runs after a warm-up run; generation: 3 runs),
the device synchronised after each run; nothing when torch or a GPU is missing.

    python3 bench/torch_gpt.py"""
import math
import sys
import time

try:
    import torch
except ImportError:
    sys.exit(0)

V, C, L, H, D = 50257, 1024, 12, 12, 768
F = None


class Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        nn = torch.nn
        self.ln_1, self.ln_2 = nn.LayerNorm(D), nn.LayerNorm(D)
        self.c_attn, self.c_proj = nn.Linear(D, 3 * D), nn.Linear(D, D)
        self.c_fc, self.mlp_proj = nn.Linear(D, 4 * D), nn.Linear(4 * D, D)

    def forward(self, x, cache=None):
        b, t, _ = x.shape
        q, k, v = self.c_attn(self.ln_1(x)).split(D, dim=2)
        q, k, v = (z.view(b, t, H, D // H).transpose(1, 2) for z in (q, k, v))
        if cache is None:
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            n = cache["len"]
            cache["k"][:, :, n:n + t] = k
            cache["v"][:, :, n:n + t] = v
            cache["len"] = n + t
            kk, vv = cache["k"][:, :, :n + t], cache["v"][:, :, :n + t]
            if t > 1:
                rows = torch.arange(n, n + t, device=x.device).view(t, 1)
                mask = torch.arange(0, n + t, device=x.device).view(1, n + t) <= rows
                y = F.scaled_dot_product_attention(q, kk, vv, attn_mask=mask)
            else:
                y = F.scaled_dot_product_attention(q, kk, vv)
        x = x + self.c_proj(y.transpose(1, 2).reshape(b, t, D))
        return x + self.mlp_proj(F.gelu(self.c_fc(self.ln_2(x)), approximate="tanh"))


class GPT(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.wte, self.wpe = torch.nn.Embedding(V, D), torch.nn.Embedding(C, D)
        self.h = torch.nn.ModuleList([Block() for _ in range(L)])
        self.ln_f = torch.nn.LayerNorm(D)

    def forward(self, idx, caches=None, start=0):
        t = idx.shape[1]
        x = self.wte(idx) + self.wpe(torch.arange(start, start + t, device=idx.device))
        for i, blk in enumerate(self.h):
            x = blk(x, caches[i] if caches else None)
        return self.ln_f(x) @ self.wte.weight.t()


def median_time(step, runs=5):
    step()
    torch.cuda.synchronize()
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        step()
        torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
    times.sort()
    return times[len(times) // 2]


def main():
    global F
    F = torch.nn.functional
    if not torch.cuda.is_available():
        return
    torch.manual_seed(1)
    idx = torch.randint(0, V, (8, C), device="cuda")
    model = GPT().cuda().to(torch.bfloat16)
    with torch.no_grad():
        print("gpt_fwd_gpu,%.9g" % median_time(lambda: model(idx)), flush=True)
        prompt = idx[:1, :128]

        def generate():
            caches = [{"k": torch.empty(1, H, 384, D // H, device="cuda", dtype=torch.bfloat16),
                       "v": torch.empty(1, H, 384, D // H, device="cuda", dtype=torch.bfloat16), "len": 0}
                      for _ in range(L)]
            logits = model(prompt, caches, 0)
            tok = logits[:, -1].argmax(-1, keepdim=True)
            for s in range(255):
                logits = model(tok, caches, 128 + s)
                tok = logits[:, -1].argmax(-1, keepdim=True)
        print("gpt_generate_gpu,%.9g" % median_time(generate, 3), flush=True)
    del model
    torch.cuda.empty_cache()
    model = GPT().cuda()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)
    y = torch.randint(0, V, (8, C), device="cuda")

    def train():
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = F.cross_entropy(model(idx).view(-1, V), y.view(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
    print("gpt_train_gpu,%.9g" % median_time(train), flush=True)


if __name__ == "__main__":
    main()
