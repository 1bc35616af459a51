-- bench/nn.lua — `make bench`, the qlua.nn / qlua.optim part (issue 25's targets), against
-- PyTorch in the same run (bench/torch_nn.py).
--
--   qlua bench/nn.lua [--python PATH] [--csv build/bench_nn.csv]
--
-- Cases (GPU ones only where there is a GPU):
--   adamw_100m_gpu   one AdamW step over 100 float32 tensors of 1M elements (100M
--                    parameters), the fused kernel, against torch.optim.AdamW(fused=True):
--                    target <= 1.1x
--   adamw_10m_cpu    the same over 100 tensors of 100k elements on the CPU, against
--                    PyTorch's CPU AdamW(fused=True) (no target: measured)
--   sgd_100m_gpu     SGD with momentum 0.9 over the 100M parameters, against
--                    torch.optim.SGD(fused=True) (no target: measured)
--   conv2d_f32_gpu   conv2d forward and backward (both gradients), N=64, 64 -> 64 channels,
--   conv2d_bf16_gpu  56x56, 3x3, padding 1, against PyTorch's (both call cuDNN; float32 on
--                    TF32, the default of both): target <= 1.05x
--   conv2d_f32_cpu   the same with N=8 on the CPU against PyTorch's CPU: target <= 2x
--   cnn_step_gpu     one training step of samples/cnn.lua's network (batch 64, AdamW)
--   cnn_step_cpu     against the same network in PyTorch eager: target <= 1x on the GPU
--   layer_norm_fwd_gpu     F.layer_norm of 8192 x 8192 float32 with weight and bias, and
--   layer_norm_fwdbwd_gpu  that with its backward (all three gradients), against PyTorch's:
--                          target <= 1x, and >= 85% of copy bandwidth: the bytes the op
--                          must move (forward x and y; backward also dy and dx) over its
--                          time, against a same-size copy's in the same run
package.path = (arg[0]:match("^(.*)/[^/]*$") or ".") .. "/../lua/?.lua;" .. package.path
local optim = require "qlua.optim"
local R = dofile((arg[0]:match("^(.*)/[^/]*$") or ".") .. "/report.lua")
local args = R.args(arg, "build/bench_nn.csv")

local base = R.baseline(args, "torch_nn.py")
local rows = {}

-- seconds per step of make(params) over n tensors of m elements with random gradients
local function step_time(dev, n, m, make)
  qlua.seed(3)
  local params = {}
  for k = 1, n do
    params[k] = qlua.randn(m, { device = dev }):requires_grad_()
    params[k].grad = qlua.randn(m, { device = dev })
  end
  local opt = make(params)
  local t = qlua.bench(function() opt:step() end, { calls = 10, runs = 5, warmup = 1 }).median
  for k = 1, n do params[k].grad:free(); params[k]:free() end
  for _, s in pairs(opt.state) do for _, v in pairs(s) do if qlua.is_tensor(v) then v:free() end end end
  return t
end

local CASES = {
  { "adamw_100m", "gpu", 100, 1000000, function(p) return optim.AdamW(p, { lr = 1e-3 }) end, 1.1 },
  { "sgd_100m", "gpu", 100, 1000000, function(p) return optim.SGD(p, { lr = 1e-3, momentum = 0.9 }) end },
  { "adamw_10m", "cpu", 100, 100000, function(p) return optim.AdamW(p, { lr = 1e-3 }) end },
}
for _, c in ipairs(CASES) do
  local name, dev, n, m, make, target = table.unpack(c)
  if dev == "cpu" or qlua.gpu_count() > 0 then
    local case = name .. "_" .. dev
    local t = step_time(dev, n, m, make)
    local b = base[case]
    local bytes = n * m * 4 * (name:match("^adamw") and 7 or 5)   -- read and written per step
    rows[#rows + 1] = { case = case, qlua = t, base = b, value = b and t / b, unit = "x PyTorch fused",
                        target = target, at_most = true,
                        extra = ("%.0f GB/s"):format(bytes / t / 1e9) }
  end
end

-- ---------------------------------------------------------------- convolution
local function conv_time(dev, dt, n)
  qlua.seed(5)
  local x = qlua.randn({ n, 64, 56, 56 }, { device = dev, dtype = dt }):requires_grad_()
  local w = (qlua.randn({ 64, 64, 3, 3 }, { device = dev, dtype = dt }) * 0.05):requires_grad_()
  local dy = qlua.randn({ n, 64, 56, 56 }, { device = dev, dtype = dt })
  local o = { padding = 1 }
  return qlua.bench(function()
    x.grad, w.grad = nil, nil
    qlua.conv2d(x, w, nil, o):backward(dy)
  end, { calls = dev == "gpu" and 10 or 2, runs = 5, warmup = 1 }).median
end
for _, c in ipairs({ { "conv2d_f32_gpu", "gpu", "float32", 64, 1.05 }, { "conv2d_bf16_gpu", "gpu", "bfloat16", 64, 1.05 },
                     { "conv2d_f32_cpu", "cpu", "float32", 8, 2 } }) do
  local case, dev, dt, n, target = table.unpack(c)
  if dev == "cpu" or qlua.gpu_count() > 0 then
    local t, b = conv_time(dev, dt, n), base[case]
    local flop = 3 * 2 * n * 64 * 56 * 56 * 64 * 9
    rows[#rows + 1] = { case = case, qlua = t, base = b, value = b and t / b, unit = "x PyTorch",
                        target = target, at_most = true, extra = ("%.0f GFLOP/s"):format(flop / t / 1e9) }
  end
end

-- ---------------------------------------------------------------- the CNN sample's step
local function cnn_step_time(dev)
  local nn, optim = require "qlua.nn", require "qlua.optim"
  qlua.seed(9)
  local function block(cin, cout)
    return nn.Conv2d(cin, cout, 3, { padding = 1, device = dev }), nn.BatchNorm2d(cout, { device = dev }),
           nn.ReLU(), nn.MaxPool2d(2)
  end
  local c1, b1, r1, p1 = block(1, 16)
  local c2, b2, r2, p2 = block(16, 32)
  local net = nn.Sequential(c1, b1, r1, p1, c2, b2, r2, p2, nn.AdaptiveAvgPool2d(1), nn.Flatten(),
                            nn.Linear(32, 4, { device = dev }))
  local opt = optim.AdamW(net:parameters(), { lr = 0.01, weight_decay = 1e-4 })
  local x = qlua.randn({ 64, 1, 32, 32 }, { device = dev })
  local y = qlua.randint(1, 4, 64, { device = dev })
  return qlua.bench(function()
    local loss = nn.functional.cross_entropy(net(x), y)
    opt:zero_grad()
    loss:backward()
    opt:step()
  end, { calls = 20, runs = 5, warmup = 1 }).median
end
for _, dev in ipairs({ "gpu", "cpu" }) do
  if dev == "cpu" or qlua.gpu_count() > 0 then
    local case = "cnn_step_" .. dev
    local t, b = cnn_step_time(dev), base[case]
    rows[#rows + 1] = { case = case, qlua = t, base = b, value = b and t / b, unit = "x PyTorch eager",
                        target = dev == "gpu" and 1 or nil, at_most = true }
  end
end

-- ---------------------------------------------------------------- layer_norm
if qlua.gpu_count() > 0 then
  local F = require("qlua.nn").functional
  qlua.seed(13)
  local n = 8192
  local x = qlua.randn({ n, n }, { device = "gpu" }):requires_grad_()
  local w = qlua.randn({ n }, { device = "gpu" }):requires_grad_()
  local b = qlua.randn({ n }, { device = "gpu" }):requires_grad_()
  local dy = qlua.randn({ n, n }, { device = "gpu" })
  local copy_to = qlua.empty({ n, n }, { device = "gpu" })
  local o = { calls = 10, runs = 5, warmup = 1 }
  local t_copy = qlua.bench(function() copy_to:copy_(dy) end, o).median
  local t_fwd = qlua.bench(function() qlua.no_grad(function() F.layer_norm(x, { n }, w, b) end) end, o).median
  local t_both = qlua.bench(function()
    x.grad, w.grad, b.grad = nil, nil, nil
    F.layer_norm(x, { n }, w, b):backward(dy)
  end, o).median
  -- a copy moves 2 arrays; the forward 2 (x, y), forward and backward 5 (x, y; x, dy, dx)
  for _, c in ipairs({ { "layer_norm_fwd_gpu", t_fwd, 2 }, { "layer_norm_fwdbwd_gpu", t_both, 5 } }) do
    local case, t, arrays = table.unpack(c)
    local b0 = base[case]
    rows[#rows + 1] = { case = case, qlua = t, base = b0, value = b0 and t / b0, unit = "x PyTorch",
                        target = 1, at_most = true,
                        extra = ("%.0f%% of copy bandwidth (>= 85%%), %.0f GB/s"):format(
                          100 * (arrays / 2) * t_copy / t, arrays * n * n * 4 / t / 1e9) }
  end
  for _, t in ipairs({ x, w, b, dy, copy_to }) do t:free() end
end

R.print(rows, args.csv)
