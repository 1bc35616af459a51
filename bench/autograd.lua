-- bench/autograd.lua — `make bench`, the autograd part (issue 24's targets): what recording
-- costs, how backward compares with its forward, and training samples/classifier.lua's
-- network against PyTorch's eager autograd in the same run.
--
--   qlua bench/autograd.lua [--python PATH] [--csv build/bench_autograd.csv]
--
-- Cases (GPU ones only where there is a GPU):
--   record_add_16_<dev>   100k 16-element a + b with requires_grad, minus the same without:
--                         target <= 1.5 us per op (on the GPU)
--   chain_1000_<dev>      backward of a 1000-op elementwise chain on 16 elements against
--                         the forward that recorded it: target <= 2x
--   train_<dev>           32 -> 128 -> 10, batch 256, autograd + SGD momentum 0.9, samples/s
--                         against bench/torch_autograd.py: target >= 2x PyTorch on the GPU,
--                         >= 1x on the CPU
--   train_nn_<dev>        the same with qlua.nn and qlua.optim against torch.nn and
--                         torch.optim (no target yet: issue 25's layer, measured)
package.path = (arg[0]:match("^(.*)/[^/]*$") or ".") .. "/../lua/?.lua;" .. package.path
local autograd = require "qlua.autograd"

local R = dofile((arg[0]:match("^(.*)/[^/]*$") or ".") .. "/report.lua")
local args = R.args(arg, "build/bench_autograd.csv")

local devices = { "cpu" }
if qlua.gpu_count() > 0 then table.insert(devices, 1, "gpu") end
local rows = {}
local function row(r) rows[#rows + 1] = r end

-- ---------------------------------------------------------------- recording cost
for _, dev in ipairs(devices) do
  local a, b = qlua.rand(16, { device = dev }), qlua.rand(16, { device = dev })
  local ag = qlua.rand(16, { device = dev, requires_grad = true })
  local bg = qlua.rand(16, { device = dev, requires_grad = true })
  local opts = { calls = 100000, runs = 5, warmup = 1 }
  local plain = qlua.bench(function() return a + b end, opts).median
  local rec = qlua.bench(function() return ag + bg end, opts).median
  local extra = rec - plain
  row({ case = "record_add_16_" .. dev, qlua = rec, base = plain, value = extra * 1e6,
        unit = "us above no-grad", target = dev == "gpu" and 1.5 or nil, at_most = true })
end

-- ---------------------------------------------------------------- backward of a chain
for _, dev in ipairs(devices) do
  local x = qlua.rand(16, { device = dev, requires_grad = true })
  local fwd, bwd = {}, {}
  for r = 1, 10 do
    qlua.sync()
    local t0 = qlua.clock()
    local y = x
    for _ = 1, 1000 do y = y * 1.0001 end
    local s = y:sum()
    qlua.sync()
    local t1 = qlua.clock()
    s:backward()
    qlua.sync()
    local t2 = qlua.clock()
    if r > 1 then fwd[#fwd + 1], bwd[#bwd + 1] = t1 - t0, t2 - t1 end
    x.grad = nil
  end
  table.sort(fwd); table.sort(bwd)
  local f, b = fwd[#fwd // 2 + 1], bwd[#bwd // 2 + 1]
  row({ case = "chain_1000_" .. dev, qlua = b, base = f, value = b / f, unit = "x the forward",
        target = 2, at_most = true })
end

-- ---------------------------------------------------------------- training
local D, H, C, B = 32, 128, 10, 256
local STEPS, RUNS = 200, 5
-- seconds per training step: make_step(dev) returns step(xb, yb), one forward, backward
-- and update on a batch; the data, the shuffling and the timing are the same for every form
local function step_time(dev, make_step)
  qlua.seed(7)
  local n = B * STEPS
  local x = qlua.randn({ n, D }, { device = dev })
  local y = qlua.randint(1, C, n, { device = dev })
  local step = make_step(dev)
  local function batch()
    local order = qlua.randperm(n, { device = dev })
    for first = 1, n - B + 1, B do
      local idx = order:narrow(1, first, B)
      step(x:index_select(1, idx), y:index_select(1, idx))
    end
  end
  return qlua.bench(batch, { calls = 1, runs = RUNS, warmup = 1 }).median / STEPS
end

-- the network as tensors, autograd and qlua.optim.SGD (as PyTorch's side uses torch.optim.SGD:
-- the update users write; qlua's is the fused kernel, qlua._optim_step)
local function autograd_step(dev)
  local optim = require "qlua.optim"
  local p = {
    w1 = qlua.randn({ D, H }, { device = dev }) * math.sqrt(2 / D), b1 = qlua.zeros({ H }, { device = dev }),
    w2 = qlua.randn({ H, C }, { device = dev }) * math.sqrt(1 / H), b2 = qlua.zeros({ C }, { device = dev }),
  }
  for _, k in ipairs({ "w1", "b1", "w2", "b2" }) do p[k]:requires_grad_() end
  local opt = optim.SGD({ p.w1, p.b1, p.w2, p.b2 }, { lr = 0.05, momentum = 0.9 })
  return function(xb, yb)
    local logits = (xb:matmul(p.w1) + p.b1):relu():matmul(p.w2) + p.b2
    opt:zero_grad()
    qlua.cross_entropy(logits, yb):backward()
    opt:step()
  end
end

-- the same written with qlua.nn and qlua.optim (issue 25's layer over autograd)
local function nn_step(dev)
  local nn, optim = require "qlua.nn", require "qlua.optim"
  local net = nn.Sequential(nn.Linear(D, H, { device = dev }), nn.ReLU(), nn.Linear(H, C, { device = dev }))
  local opt = optim.SGD(net:parameters(), { lr = 0.05, momentum = 0.9 })
  return function(xb, yb)
    local loss = nn.functional.cross_entropy(net(xb), yb)
    opt:zero_grad()
    loss:backward()
    opt:step()
  end
end

local base = R.baseline(args, "torch_autograd.py", STEPS .. " " .. RUNS)
for _, dev in ipairs(devices) do
  local t = step_time(dev, autograd_step)
  local torch_t = base["train_" .. dev]
  row({ case = "train_" .. dev, qlua = t, base = torch_t, value = torch_t and torch_t / t,
        unit = "x PyTorch samples/s", target = dev == "gpu" and 2 or 1, at_most = false,
        extra = ("qlua %.3f M samples/s%s"):format(B / t / 1e6,
          torch_t and (", PyTorch %.3f M"):format(B / torch_t / 1e6) or "") })
end

for _, dev in ipairs(devices) do
  local t = step_time(dev, nn_step)
  local torch_t = base["train_nn_" .. dev]
  row({ case = "train_nn_" .. dev, qlua = t, base = torch_t, value = torch_t and torch_t / t,
        unit = "x PyTorch samples/s", extra = ("qlua.nn + qlua.optim %.3f M samples/s%s"):format(B / t / 1e6,
          torch_t and (", torch.nn + torch.optim %.3f M"):format(B / torch_t / 1e6) or "") })
end

R.print(rows, args.csv)
