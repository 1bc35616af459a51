-- A model's state dict written by PyTorch loads into the same architecture built with
-- qlua.nn (its dotted names, buffers included), and gives PyTorch's output (docs/API.md
-- "Neural networks"); so do a MultiheadAttention, and scaled_dot_product_attention's outputs
-- and gradients. PyTorch writes the files (spec/fixtures/torch_model.py); without a
-- Python that has torch (this machine, CI), the cases are pending.
local T, qlua, test, gtest, both = require("qlua.testing").spec(_ENV)
local nn = require("qlua.nn")
local P = require("spec.helpers.process")

local python
for _, c in ipairs({ "python3", "/usr/bin/python3" }) do
  if os.execute(c .. " -c 'import torch' >/dev/null 2>&1") == true then python = c; break end
end

local function net_like_torch(dev)
  return nn.Sequential(nn.Conv2d(1, 4, 3, { padding = 1, device = dev }), nn.BatchNorm2d(4, { device = dev }),
                       nn.ReLU(), nn.MaxPool2d(2),
                       nn.Conv2d(4, 6, 3, { stride = 2, padding = 1, groups = 2, device = dev }), nn.Flatten(),
                       nn.Linear(6 * 2 * 2, 3, { device = dev }), nn.LayerNorm(3, { device = dev }))
end

local dir
if python then
  dir = P.tempdir()
  local r = P.run({ python, "spec/fixtures/torch_model.py", dir }, { timeout = 120 })
  if r.status ~= 0 then error("torch_model.py failed: " .. tostring(r.stderr) .. tostring(r.stdout)) end
end

local function case(name, fn)
  if python then return both(name, fn) end
  return pending(name .. " (no Python with torch here)")
end

case("a PyTorch state dict loads strictly (BatchNorm's buffers too) and the outputs match PyTorch's", function(dev)
  local net = net_like_torch(dev)
  local res = nn.load(net, dir .. "/model.safetensors")
  assert.are.same({}, res.missing_keys)
  assert.are.same({}, res.unexpected_keys)
  net:eval()
  local io = qlua.load_safetensors(dir .. "/io.safetensors")
  qlua.set_cudnn_tf32(false)   -- PyTorch's CPU output is exact float32
  local y = qlua.no_grad(function() return net(io.input:to(dev)) end)
  qlua.set_cudnn_tf32(true)
  T.assert_close(y:cpu():totable(), io.output:totable(), 1e-5)
end)

case("MultiheadAttention loads PyTorch's state dict and gives its output and averaged weights", function(dev)
  local m = nn.MultiheadAttention(8, 2, { dtype = "float64", device = dev })
  local res = nn.load(m, dir .. "/mha.safetensors")
  assert.are.same({}, res.missing_keys)
  assert.are.same({}, res.unexpected_keys)
  local io = qlua.load_safetensors(dir .. "/mha_io.safetensors")
  local function d(t) return t:to(dev) end
  local out, w = m(d(io.q), d(io.k), d(io.v), { key_padding_mask = d(io.kpm):ne(0), attn_mask = d(io.am):ne(0) })
  T.assert_close(out:detach():cpu():totable(), io.out:totable(), 1e-12, "output")
  T.assert_close(w:detach():cpu():totable(), io.weights:totable(), 1e-12, "weights")
end)

case("scaled_dot_product_attention gives PyTorch's outputs and gradients (causal, grouped-query, float mask)", function(dev)
  local io = qlua.load_safetensors(dir .. "/sdpa.safetensors")
  local A = require("qlua.autograd")
  for _, name in ipairs({ "causal", "gqa", "mask" }) do
    local q, k, v = io[name .. ".q"]:to(dev):requires_grad_(), io[name .. ".k"]:to(dev):requires_grad_(),
                    io[name .. ".v"]:to(dev):requires_grad_()
    local opts = ({ causal = { is_causal = true }, gqa = { enable_gqa = true },
                    mask = { attn_mask = io["mask.mask"] and io["mask.mask"]:to(dev) } })[name]
    local y = nn.functional.scaled_dot_product_attention(q, k, v, opts)
    T.assert_close(y:detach():cpu():totable(), io[name .. ".out"]:totable(), 1e-12, name .. " output")
    local g = A.grad(y, { q, k, v }, { grad_outputs = { io[name .. ".g"]:to(dev) } })
    for i, t in ipairs({ "q", "k", "v" }) do
      T.assert_close(g[i]:cpu():totable(), io[name .. ".d" .. t]:totable(), 1e-11, name .. " d" .. t)
    end
  end
end)

teardown(function() P.cleanup() end)
