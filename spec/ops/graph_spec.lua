-- qlua.graph (docs/API.md "CUDA graphs"): a function's GPU work captured once and replayed.
-- On the GPU: replays equal eager runs (bitwise for deterministic ops), inputs updated by
-- copy_, the same output tensors every replay, random ops advancing per replay as the eager
-- generator does, autograd and the optimizers' fused steps inside a capture, every refused
-- host op (a clear error; the stream, the allocator and the process usable after it), the
-- pool's memory kept while the graph lives and given back after free, and two graphs
-- sharing a pool. On the CPU: the eager fallback with the same semantics.
local T, qlua, test, gtest, both = require("qlua.testing").spec(_ENV)
local nn, optim = require("qlua.nn"), require("qlua.optim")
local F = nn.functional

local function same(a, b)
  assert.are.same(a:cpu():totable(), b:cpu():totable())
end

-- a small network's training step: forward, autograd backward, the optimizer's update
local D, H, C, B = 8, 16, 4, 32
local function trainer(dev, make_opt, seed)
  qlua.seed(seed or 5)
  local net = nn.Sequential(nn.Linear(D, H, { device = dev }), nn.ReLU(), nn.Linear(H, C, { device = dev }))
  local opt = make_opt(net:parameters())
  local x = qlua.randn({ 4 * B, D }, { device = dev })
  local y = qlua.randint(1, C, 4 * B, { device = dev })
  local function step(idx)
    opt:zero_grad()
    local loss = F.cross_entropy(net(x:index_select(1, idx)), y:index_select(1, idx))
    loss:backward()
    opt:step()
    return loss
  end
  return step, net
end
local function batches(dev, n)
  local list = {}
  for i = 1, n do list[i] = qlua.randperm(4 * B):narrow(1, 1, B):to(dev) end
  return list
end
local function weights(net)
  local out = {}
  for _, p in ipairs(net:parameters()) do out[#out + 1] = p:detach():cpu() end
  return out
end

local sgd = function(ps) return optim.SGD(ps, { lr = 0.1, momentum = 0.9 }) end
local adamw = function(ps) return optim.AdamW(ps, { lr = 0.01 }) end

-- ---------------------------------------------------------------- both devices

both("replays give fn's results in the same tensors, with inputs updated by copy_", function(dev)
  local x = qlua.randn({ 5, 7 }, { device = dev })
  local w = qlua.randn({ 7, 3 }, { device = dev })
  local function f(a) return (a:matmul(w) * 2 + 1):relu():sum(2), 42 end
  local g = qlua.graph(f, x)
  assert.equal(dev, g:device():match("^%a+"))
  local out, n = g:replay()
  assert.equal(42, n)
  same(out, f(x))
  local xs = {}
  for r = 1, 3 do
    xs[r] = qlua.randn({ 5, 7 }, { device = dev })
    x:copy_(xs[r])
    local again = g()
    assert.is_true(rawequal(out, again))
    same(again, f(xs[r]))
  end
  g:free()
end)

both("random ops draw on every replay what an eager run draws from the same seed", function(dev)
  local function f(t) return qlua.rand({ 3, 4 }, { device = dev }) + t, qlua.randn(5, { device = dev }) end
  local t = qlua.zeros({ 3, 4 }, { device = dev })
  qlua.seed(99)
  local eager = {}
  for r = 1, 3 do
    local a, b = f(t)
    eager[r] = { a:cpu(), b:cpu() }
    qlua.rand(2, { device = dev })   -- eager draws between the replays move the generator too
  end
  qlua.seed(99)
  local g = qlua.graph(f, t)
  for r = 1, 3 do
    local a, b = g:replay()
    same(a, eager[r][1])
    T.assert_close(b:cpu():totable(), eager[r][2]:totable(), 1e-6)
    qlua.rand(2, { device = dev })
  end
  g:free()
end)

-- n steps run eagerly against one eager warm-up step, then the step captured and replayed
-- for the other n - 1 batches, picked by copy_ into the graph's index input
local function replays_as_eager(dev, eager_opt, graph_opt, n)
  local list = batches(dev, n)
  local step, net = trainer(dev, eager_opt)
  for i = 1, n do step(list[i]) end
  local want = weights(net)
  local gstep, gnet = trainer(dev, graph_opt)
  gstep(list[1])                       -- warm-up: the optimizer's state exists from here
  local idx = list[2]:clone()
  local g = qlua.graph(gstep, idx)
  for i = 2, n do
    idx:copy_(list[i])
    g:replay()
  end
  local got = weights(gnet)
  for k = 1, #want do T.assert_close(got[k]:totable(), want[k]:totable(), 1e-5) end
  g:free()
end

both("a training step with autograd and SGD momentum replays as it trains eagerly", function(dev)
  replays_as_eager(dev, sgd, sgd, 6)
end)

both("AdamW's fused step inside a capture counts its steps on the device", function(dev)
  replays_as_eager(dev, adamw, function(ps) return optim.AdamW(ps, { lr = 0.01, capturable = true }) end, 5)
end)

gtest("capturing an optimizer's first step, or Adam's host step count, is an error naming it", function()
  local list = batches("gpu", 2)
  local step = trainer("gpu", sgd)
  qlua.randn({ 2, 2 }, { device = "gpu" }):matmul(qlua.randn({ 2, 2 }, { device = "gpu" }))   -- cuBLAS warm
  local ok, msg = pcall(qlua.graph, step, list[1])
  assert.is_false(ok)
  assert.matches("SGD: a step captured by qlua.graph needs the optimizer's state from an eager step", msg)
  step(list[1])                                   -- with the warm-up it captures
  qlua.graph(step, list[2]):free()
  local astep = trainer("gpu", adamw)
  astep(list[1])
  ok, msg = pcall(qlua.graph, astep, list[2])
  assert.is_false(ok)
  assert.matches("AdamW: a step captured by qlua.graph needs capturable = true", msg)
  assert.is_false(qlua.is_capturing())
end)

both("warmup runs fn eagerly before the capture", function(dev)
  local n = qlua.zeros(1, { device = dev })
  local g = qlua.graph({ warmup = 2 }, function(t) t:add_(1) end, n)
  assert.equal(2, n:cpu()[1])
  g:replay()
  assert.equal(3, n:cpu()[1])
  g:free()
end)

both("errors: arguments, options, a freed graph", function(dev)
  local x = qlua.rand(3, { device = dev })
  local function err(pat, f, ...)
    local ok, msg = pcall(f, ...)
    assert.is_false(ok)
    assert.matches(pat, tostring(msg))
  end
  err("graph: expects %[opts,%] fn", qlua.graph, 3)
  err("graph: unknown option 'bogus'", qlua.graph, { bogus = 1 }, function() end)
  err("warmup must be an integer >= 0", qlua.graph, { warmup = -1 }, function() end)
  err("option pool must be a qlua.Graph", qlua.graph, { pool = {} }, function() end)
  local g = qlua.graph(function(t) return t + 1 end, x)
  g:free()
  g:free()   -- twice is harmless
  err("replay: the graph has been freed", g.replay, g)
  err("the graph given as pool has been freed", qlua.graph, { pool = g }, function() end)
  assert.equal("qlua.Graph(freed)", tostring(g))
  do
    local h <close> = qlua.graph(function(t) return t * 3 end, x)
    same(h:replay(), x * 3)
  end
  if dev == "gpu" then   -- the capture runs fn (the CPU's eager form runs it at replay)
    err("boom", qlua.graph, function() error("boom") end)   -- fn's error, as it is
    assert.is_false(qlua.is_capturing(dev))
  end
end)

test("the CPU runs fn eagerly at each replay", function()
  local x = qlua.rand(4)
  local calls = 0
  local g = qlua.graph(function(t) calls = calls + 1; return t * 2 end, x)
  assert.equal(0, calls)
  assert.equal("qlua.Graph(cpu, eager)", tostring(g))
  g()
  g()
  assert.equal(2, calls)
  assert.is_false(qlua.is_capturing("cpu"))
  local k = 0
  local bad = qlua.graph(function(t) k = k + 1; return k == 1 and qlua.zeros(9) or t end, x)
  bad()
  local ok, msg = pcall(bad.replay, bad)   -- the kept output is 9 long, the new one 4
  assert.is_false(ok)
  assert.matches("copy_", msg)
end)

-- ---------------------------------------------------------------- the GPU only

gtest("a deterministic chain replays bitwise equal to its eager run", function()
  local x = qlua.randn({ 64, 33 }, { device = "gpu" })
  local w = qlua.randn({ 33, 17 }, { device = "gpu" })
  local function f(a)
    local h = (a:matmul(w):tanh() * 3 - a:sum(2, true)):softmax(2)
    return h:cumsum(2), h:max(2)
  end
  local e1, e2 = f(x)
  local g = qlua.graph(f, x)
  local r1, r2 = g:replay()
  same(r1, e1)
  same(r2, e2)
  g:free()
end)

gtest("inside a capture, what needs the host refuses, naming the op; then all is usable", function()
  local x = qlua.rand(8, { device = "gpu" })
  local cases = {
    { "item", function() return x:narrow(1, 1, 1):item() end },
    { "sum", function() return x:sum() end },   -- a whole-tensor reduction gives a number
    { "cpu", function() return x:cpu() end },
    { "sync", function() qlua.sync() end },
    { "tensor", function() return qlua.tensor({ 1, 2, 3 }, { device = "gpu" }) end },
    { "randperm", function() return qlua.randperm(10, { device = "gpu" }) end },
    { "masked_select", function() return x:masked_select(x:gt(0.5)) end },
    { "nonzero", function() return x:gt(0.5):nonzero() end },
    { "tostring", function() return tostring(x) end },
    { "empty_cache", function() qlua.empty_cache() end },
    { "graph", function() return qlua.graph(function() end) end },
    { "index", function() return x[1] end },                 -- element access
    { "index", function() x[2] = 0.5 end },
    { "totable", function() return x:totable() end },
    { "unique", function() return x:unique() end },
    { "bernoulli", function() return qlua.bernoulli(x) end },  -- its probabilities' check
  }
  for _, c in ipairs(cases) do
    local before = qlua.memory("gpu").graph
    local ok, msg = pcall(qlua.graph, function() x:add_(0); return c[2]() end)
    assert.is_false(ok, c[1])
    msg = tostring(msg)
    assert.is_truthy(msg:find("CUDA graph", 1, true) or msg:find("capture", 1, true), c[1] .. ": " .. msg)
    assert.is_truthy(msg:find(c[1] .. ": ", 1, true), "the message names " .. c[1] .. ": " .. msg)
    assert.is_false(qlua.is_capturing(), c[1])
    -- the stream and the allocator run as before
    local y = x * 2 + 1
    T.assert_close(y:cpu():totable(), (x:cpu() * 2 + 1):totable(), 1e-6)
    collectgarbage()
    assert.is_true(qlua.memory("gpu").graph <= before, c[1])
  end
  qlua.sync()
end)

gtest("a result on another device is refused (its work is not captured)", function()
  local ok, msg = pcall(qlua.graph, function() return qlua.ones(3) end, qlua.ones(3, { device = "gpu" }))
  assert.is_false(ok)
  assert.matches("result 1 is on cpu, but the capture is on gpu:0", msg)
  assert.is_false(qlua.is_capturing())
end)

gtest("is_capturing is true inside fn only", function()
  local seen
  local g = qlua.graph(function() seen = qlua.is_capturing() end)
  assert.is_true(seen)
  assert.is_false(qlua.is_capturing())
  g:free()
end)

gtest("the pool keeps its memory while the graph lives and gives it back after free", function()
  collectgarbage()
  qlua.sync()
  local base = qlua.memory("gpu").graph
  local x = qlua.rand(1 << 20, { device = "gpu" })
  local g = qlua.graph(function(a)
    local tmp = a * 3                -- freed inside the capture: reused by it
    return tmp + 1, (tmp * 2):sum(1)
  end, x)
  assert.is_true(qlua.memory("gpu").graph > base)
  local out = g:replay()
  same(out, x * 3 + 1)
  -- the outputs' memory is not handed to eager tensors, even once they are collected
  out = nil
  collectgarbage()
  local others = {}
  for i = 1, 8 do others[i] = qlua.full({ 1 << 20 }, i, { device = "gpu" }) end
  g:replay()
  for i = 1, 8 do assert.equal(i, others[i]:max()) end
  g:free()
  collectgarbage()
  qlua.sync()
  assert.equal(base, qlua.memory("gpu").graph)
end)

gtest("blocks of the device's cache freed during a capture stay the graph's", function()
  local a = qlua.rand(1 << 18, { device = "gpu" })
  local want = (a * 2):cpu()
  local g = qlua.graph(function()
    local b = a * 2
    a:free()                          -- the graph reads a's memory at every replay
    return b
  end)
  local c = qlua.full({ 1 << 18 }, 5, { device = "gpu" })   -- may not take a's block
  local b = g:replay()
  same(b, want)
  assert.equal(5, c:min())
  assert.equal(5, c:max())
  g:free()
end)

gtest("two graphs share a pool when asked, and both replay right", function()
  collectgarbage()
  qlua.sync()
  local base = qlua.memory("gpu").graph
  local x = qlua.rand(1000, { device = "gpu" })
  local g1 = qlua.graph(function(a) return a + 1 end, x)
  local after1 = qlua.memory("gpu").graph
  local g2 = qlua.graph({ pool = g1 }, function(a) return a * 5 end, x)
  assert.equal(after1, qlua.memory("gpu").graph)   -- the shared pool had room
  local o1 = g1:replay()
  local o2 = g2:replay()
  same(o1, x + 1)
  same(o2, x * 5)
  x:copy_(qlua.rand(1000, { device = "gpu" }))
  same(g2:replay(), x * 5)
  same(g1:replay(), x + 1)
  g1:free()
  same(g2:replay(), x * 5)          -- the pool lives while a graph uses it
  o1, o2 = nil, nil
  g2:free()
  collectgarbage()
  qlua.sync()
  assert.equal(base, qlua.memory("gpu").graph)
end)

gtest("dropout inside attention advances per replay like the eager generator", function()
  local q = qlua.randn({ 1, 2, 16, 8 }, { device = "gpu" })
  local function f(t) return F.scaled_dot_product_attention(t, t, t, { dropout_p = 0.5 }) end
  qlua.seed(4)
  local e1, e2 = f(q):cpu(), f(q):cpu()
  qlua.seed(4)
  local g = qlua.graph(f, q)
  T.assert_close(g:replay():cpu():totable(), e1:totable(), 1e-6)
  T.assert_close(g:replay():cpu():totable(), e2:totable(), 1e-6)
  g:free()
end)

gtest("a replay costs no host work per op: 100 captured adds in one launch", function()
  local a = qlua.zeros(16, { device = "gpu" })
  local g = qlua.graph(function(t) for _ = 1, 100 do t:add_(1) end end, a)
  g:replay()
  g:replay()
  assert.equal(200, a:cpu()[1])
  g:free()
end)

gtest("cross_entropy in a capture: classes checked on the device, ignore_index refused", function()
  local logits = qlua.randn({ 4, 3 }, { device = "gpu" })
  local t = qlua.tensor({ 1, 2, 3, 1 }, { dtype = "int64" }):gpu()
  local want = qlua.cross_entropy(logits, t):item()
  local g = qlua.graph(function(l, y) return qlua.cross_entropy(l, y) end, logits, t)
  T.assert_close({ g:replay():item() }, { want }, 1e-6)
  t:copy_(qlua.tensor({ 1, 9, 3, 1 }, { dtype = "int64" }))
  g:replay()
  local ok, msg = pcall(qlua.sync)
  assert.is_false(ok)
  assert.matches("index 9 out of range %(1%.%.3%)", msg)
  qlua.sync()                          -- reported once, then the device runs on
  ok, msg = pcall(qlua.graph, function() return qlua.cross_entropy(logits, t, { ignore_index = 1 }) end)
  assert.is_false(ok)
  assert.matches("cross_entropy: ignore_index cannot run while a CUDA graph is being captured", msg)
  g:free()
end)

gtest("a process's first product may happen inside a capture (cuBLAS's handle made there)", function()
  local P = require("spec.helpers.process")
  local script = [[
    local a = qlua.randn({ 64, 64 }, { device = "gpu" })
    local g = qlua.graph(function(x) return x:matmul(x) end, a)
    local r = g:replay()
    print("apart", (r:cpu() - a:cpu():matmul(a:cpu())):abs():max())
  ]]
  local out = P.run_ok({ P.qlua(), "-e", script }, "a first matmul inside a capture", { timeout = 60 })
  local apart = tonumber(out:match("apart%s+(%S+)"))
  assert.is_true(apart ~= nil and apart < 1e-3, out)
end)
