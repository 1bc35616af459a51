-- bench/attention.lua — `make bench`, scaled dot-product attention (issue 26's targets),
-- against PyTorch's F.scaled_dot_product_attention in the same run (bench/torch_attention.py).
--
--   qlua bench/attention.lua [--python PATH] [--csv build/bench_attention.csv]
--
-- Cases (GPU ones only where there is a GPU), causal, B=8 H=16 D=128:
--   sdpa_f32_peak_gpu      the device bytes a float32 S=1024 forward+backward takes above
--                          what was allocated before it, against PyTorch's: target <= 1.2x
--                          (measured first: qlua's peak counter does not reset)
--   sdpa_f32_fwd_gpu       float32, S=1024, forward: target <= 1.2x PyTorch's float32 SDPA
--   sdpa_f32_fwdbwd_gpu    that with its backward (all three gradients): measured
--   sdpa_bf16_fwd_gpu      bfloat16, S=4096, forward: target >= 0.95x PyTorch's speed, so
--   sdpa_bf16_fwdbwd_gpu   time <= 1.053x; forward+backward the same
--   sdpa_f32_cpu           float32 B=2 H=4 S=512 D=64 forward+backward on the CPU: measured
package.path = (arg[0]:match("^(.*)/[^/]*$") or ".") .. "/../lua/?.lua;" .. package.path
local nn = require "qlua.nn"
local F = nn.functional
local R = dofile((arg[0]:match("^(.*)/[^/]*$") or ".") .. "/report.lua")
local args = R.args(arg, "build/bench_attention.csv")

local base = R.baseline(args, "torch_attention.py")
local rows = {}

local function operands(dev, dt, b, h, s, d)
  qlua.seed(21)
  local function r() return qlua.randn({ b, h, s, d }, { device = dev, dtype = dt }):requires_grad_() end
  return r(), r(), r(), qlua.randn({ b, h, s, d }, { device = dev, dtype = dt })
end

local function flop(b, h, s, d, backward)   -- causal: half the scores; backward 2.5x forward
  local f = 4 * b * h * s * s * d / 2
  return backward and f * 3.5 or f
end

local function time(dev, dt, b, h, s, d, backward, calls)
  local q, k, v, dy = operands(dev, dt, b, h, s, d)
  local t = qlua.bench(function()
    if backward then
      q.grad, k.grad, v.grad = nil, nil, nil
      F.scaled_dot_product_attention(q, k, v, { is_causal = true }):backward(dy)
    else
      qlua.no_grad(F.scaled_dot_product_attention, q, k, v, { is_causal = true })
    end
  end, { calls = calls, runs = 5, warmup = 1 }).median
  local path = F.attention_path(q, k, v, { is_causal = true })
  for _, x in ipairs({ q, k, v, dy }) do x:free() end
  return t, path
end

if qlua.gpu_count() > 0 then
  -- peak first: the bytes above what was there before one forward+backward
  qlua.sync()
  local before = qlua.memory().allocated
  local q, k, v, dy = operands("gpu", "float32", 8, 16, 1024, 128)
  F.scaled_dot_product_attention(q, k, v, { is_causal = true }):backward(dy)
  qlua.sync()
  local peak = qlua.memory().peak - before
  local b = base.sdpa_f32_peak_gpu
  rows[#rows + 1] = { case = "sdpa_f32_peak_gpu", qlua = peak, base = b, value = b and peak / b,
                      unit = "x PyTorch bytes", target = 1.2, at_most = true, raw = true,
                      extra = ("%.0f MiB"):format(peak / 2 ^ 20) }
  for _, x in ipairs({ q, k, v, dy, q.grad, k.grad, v.grad }) do x:free() end
  for _, c in ipairs({ { "sdpa_f32_fwd_gpu", "float32", 1024, false, 1.2 },
                       { "sdpa_f32_fwdbwd_gpu", "float32", 1024, true },
                       { "sdpa_bf16_fwd_gpu", "bfloat16", 4096, false, 1.053 },
                       { "sdpa_bf16_fwdbwd_gpu", "bfloat16", 4096, true, 1.053 } }) do
    local case, dt, s, backward, target = table.unpack(c)
    local t, path = time("gpu", dt, 8, 16, s, 128, backward, 3)
    local b0 = base[case]
    rows[#rows + 1] = { case = case, qlua = t, base = b0, value = b0 and t / b0, unit = "x PyTorch",
                        target = target, at_most = true,
                        extra = ("%.0f TFLOP/s, %s"):format(flop(8, 16, s, 128, backward) / t / 1e12, path) }
  end
end
do
  local t, path = time("cpu", "float32", 2, 4, 512, 64, true, 1)
  local b0 = base.sdpa_f32_cpu
  rows[#rows + 1] = { case = "sdpa_f32_cpu", qlua = t, base = b0, value = b0 and t / b0, unit = "x PyTorch",
                      extra = ("%.1f GFLOP/s, %s"):format(flop(2, 4, 512, 64, true) / t / 1e9, path) }
end

R.print(rows, args.csv)
