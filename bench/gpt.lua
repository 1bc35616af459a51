-- bench/gpt.lua — `make bench`, a GPT-2-small end to end (issue 26's targets), against the same
-- model in PyTorch eager in the same run (bench/torch_gpt.py). The model is samples/gpt_model.lua
-- (12 layers, width 768, 12 heads, vocabulary 50257, context 1024).
--
--   qlua bench/gpt.lua [--python PATH] [--csv build/bench_gpt.csv]
--
-- Cases (GPU only):
--   gpt_fwd_gpu       forward of bfloat16 weights, batch 8 x 1024 tokens: target >= 1x
--                     PyTorch's tokens/s (time <= 1x)
--   gpt_train_gpu     a training step (float32 weights, forward under autocast bfloat16,
--                     cross_entropy, backward, AdamW), batch 8 x 1024: target <= 1x
--   gpt_generate_gpu  generation with a KV cache, batch 1: a 128-token prompt, then 256
--                     tokens one at a time, greedy, bfloat16 weights: target <= 1x
local here = arg[0]:match("^(.*)/[^/]*$") or "."
package.path = here .. "/../lua/?.lua;" .. package.path
local nn, optim = require "qlua.nn", require "qlua.optim"
local F = nn.functional
local GPT = dofile(here .. "/../samples/gpt_model.lua")
local R = dofile(here .. "/report.lua")
local args = R.args(arg, "build/bench_gpt.csv")
local rows = {}

if qlua.gpu_count() == 0 then
  print("bench/gpt.lua: no GPU: nothing to measure")
  R.print(rows, args.csv)
  return
end
local base = R.baseline(args, "torch_gpt.py")
local V, C, L, H, D = 50257, 1024, 12, 12, 768
local cfg = { vocab = V, n_ctx = C, n_layer = L, n_head = H, d = D, device = "gpu" }

local function median(step, runs)
  step()
  qlua.sync()
  local t = {}
  for i = 1, runs do
    local t0 = qlua.clock()
    step()
    qlua.sync()
    t[i] = qlua.clock() - t0
  end
  table.sort(t)
  return t[(runs + 1) // 2]
end
local function row(case, t, tokens)
  local b = base[case]
  rows[#rows + 1] = { case = case, qlua = t, base = b, value = b and t / b, unit = "x PyTorch eager",
                      target = 1, at_most = true, extra = ("%.0f tokens/s"):format(tokens / t) }
end

qlua.seed(1)
local idx = qlua.randint(1, V, { 8, C }, { device = "gpu" })
do
  local model = GPT(cfg)
  model:to("bfloat16")
  model:eval()
  qlua.no_grad(function()
    row("gpt_fwd_gpu", median(function() model(idx) end, 5), 8 * C)
    local prompt = idx:narrow(1, 1, 1):narrow(2, 1, 128)
    local function generate()
      local caches = model:caches()
      local logits = model(prompt, caches)
      local tok = logits:select(2, 128):argmax(2):reshape({ 1, 1 })
      for _ = 1, 255 do
        logits = model(tok, caches)
        tok = logits:select(2, 1):argmax(2):reshape({ 1, 1 })
      end
    end
    row("gpt_generate_gpu", median(generate, 3), 256)
  end)
end
collectgarbage()
qlua.empty_cache()
do
  local model = GPT(cfg)
  local opt = optim.AdamW(model:parameters(), { lr = 1e-4 })
  local y = qlua.randint(1, V, { 8 * C }, { device = "gpu" })
  local function train()
    local loss = qlua.autocast("bfloat16", function()
      return F.cross_entropy(model(idx):reshape({ 8 * C, V }), y)
    end)
    opt:zero_grad()
    loss:backward()
    opt:step()
  end
  row("gpt_train_gpu", median(train, 5), 8 * C)
end

R.print(rows, args.csv)
