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

R.print(rows, args.csv)
