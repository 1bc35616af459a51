-- Mixed precision (docs/API.md "Mixed precision"): qlua.autocast's op lists (products,
-- convolutions and attention in the 16-bit dtype from float32 operands; softmax, the losses
-- and the normalisations in float32 from 16-bit ones; the rest in their inputs' dtypes),
-- gradients reaching float32 leaves in float32, nesting and errors; qlua.amp.GradScaler's
-- scaling, unscaling, skip-on-overflow and scale schedule against the written-out rules.
local T, qlua, test, gtest, both = require("qlua.testing").spec(_ENV)
local nn = require("qlua.nn")
local optim = require("qlua.optim")
local F = nn.functional

local function numbers(t) return t:detach():cpu():double():reshape({ -1 }):totable() end
local function errmsg(f, ...)
  local ok, e = pcall(f, ...)
  assert.is_false(ok)
  return tostring(e)
end

both("autocast follows PyTorch's lists: lower precision, float32, and the rest as given", function(dev)
  for _, dt in ipairs({ "bfloat16", "float16" }) do
    local a, b = qlua.randn({ 4, 8 }, { device = dev }), qlua.randn({ 8, 3 }, { device = dev })
    local w = qlua.randn({ 5, 3, 3, 3 }, { device = dev })
    local x = qlua.randn({ 2, 3, 6, 6 }, { device = dev })
    local q = qlua.randn({ 1, 2, 4, 8 }, { device = dev })
    qlua.autocast(dt, function()
      local p = a:matmul(b)
      assert.are.equal(dt, p:dtype())
      T.assert_close(numbers(p), numbers(a:to(dt):matmul(b:to(dt))), 0, "matmul is the 16-bit product")
      assert.are.equal(dt, qlua.matmul(a, b):dtype())
      assert.are.equal(dt, F.linear(a, b:t()):dtype())
      -- a float32 bias is lowered with the operands (PyTorch's linear), not promoted
      local bias = qlua.randn({ 3 }, { device = dev })
      local lin = F.linear(a, b:t(), bias)
      assert.are.equal(dt, lin:dtype())
      T.assert_close(numbers(lin), numbers(a:to(dt):matmul(b:to(dt)) + bias:to(dt)), 2e-2, "linear with a bias")
      assert.are.equal(dt, qlua.conv2d(x, w, nil, { padding = 1 }):dtype())
      assert.are.equal(dt, F.scaled_dot_product_attention(q, q, q):dtype())
      -- the float32 list: 16-bit in, float32 out
      assert.are.equal("float32", p:softmax(2):dtype())
      assert.are.equal("float32", p:log_softmax(2):dtype())
      assert.are.equal("float32", p:exp():dtype())
      assert.are.equal("float32", F.layer_norm(p, { 3 }):dtype())
      local loss = F.cross_entropy(p, qlua.randint(1, 3, 4, { device = dev }))
      assert.are.equal("float32", loss:dtype())
      -- the rest keep their dtypes; float64 is left alone
      assert.are.equal(dt, p:relu():dtype())
      assert.are.equal("float32", (p + a:narrow(2, 1, 3)):dtype())   -- promotion, as without autocast
      assert.are.equal("float64", a:double():matmul(b:double()):dtype())
      assert.are.equal(dt, qlua.amp.autocast_dtype())
      -- nested: false turns it off inside, another dtype overrides
      qlua.autocast(false, function() assert.are.equal("float32", a:matmul(b):dtype()) end)
      qlua.autocast("float16", function() assert.are.equal("float16", a:matmul(b):dtype()) end)
      assert.are.equal(dt, a:matmul(b):dtype())
    end)
    assert.is_nil(qlua.amp.autocast_dtype())
    assert.are.equal("float32", a:matmul(b):dtype())
  end
end)

both("gradients through autocast reach the float32 leaves in float32, close to the float32 ones", function(dev)
  local net = nn.Sequential(nn.Linear(16, 32, { device = dev }), nn.GELU(), nn.Linear(32, 4, { device = dev }))
  local x, y = qlua.randn({ 8, 16 }, { device = dev }), qlua.randint(1, 4, 8, { device = dev })
  local loss = qlua.autocast("bfloat16", function() return F.cross_entropy(net(x), y) end)
  assert.are.equal("float32", loss:dtype())
  loss:backward()
  local g16 = {}
  for i, p in ipairs(net:parameters()) do
    assert.are.equal("float32", p.grad:dtype())
    g16[i] = numbers(p.grad)
  end
  net:zero_grad()
  F.cross_entropy(net(x), y):backward()
  for i, p in ipairs(net:parameters()) do T.assert_close(g16[i], numbers(p.grad), 0.05, "gradient " .. i) end
end)

test("autocast: errors name it, and an error inside leaves autocast off", function()
  assert.truthy(errmsg(qlua.autocast, "float32", function() end):match("autocast: dtype must be \"bfloat16\", \"float16\" or false"))
  assert.truthy(errmsg(qlua.autocast, "bfloat16", 3):match("autocast: fn must be a function"))
  assert.truthy(errmsg(qlua.autocast, "bfloat16", function() error("inner", 0) end):match("^inner$"))
  assert.is_nil(qlua.amp.autocast_dtype())
  assert.are.same({ 1, 2, 3 }, { qlua.autocast("bfloat16", function(a, b) return a, b, 3 end, 1, 2) })
end)

both("GradScaler: scale, unscale, skip on inf or NaN, back off, and grow after growth_interval steps", function(dev)
  local w = qlua.tensor({ 1, 2, 3 }, { dtype = "float32", device = dev }):requires_grad_()
  local opt = optim.SGD({ w }, { lr = 0.1 })
  local s = qlua.amp.GradScaler({ init_scale = 8, growth_interval = 2 })
  assert.are.equal(8, s:get_scale())
  -- a finite step: the gradient is unscaled before the update
  local loss = (w * w):sum({ 1 })
  s:scale(loss):backward()
  T.assert_close(numbers(w.grad), { 16, 32, 48 }, 0, "scaled gradient")
  assert.is_true(s:step(opt))
  T.assert_close(numbers(w.grad), { 2, 4, 6 }, 0, "unscaled gradient")
  T.assert_close(numbers(w), { 0.8, 1.6, 2.4 }, 1e-6, "stepped")
  s:update()
  assert.are.equal(8, s:get_scale())
  -- an overflow: the step is skipped and the scale backs off
  opt:zero_grad()
  s:scale((w * w):sum({ 1 })):backward()
  qlua.no_grad(function() w.grad[2] = math.huge end)
  assert.is_false(s:step(opt))
  T.assert_close(numbers(w), { 0.8, 1.6, 2.4 }, 1e-6, "not stepped")
  s:update()
  assert.are.equal(4, s:get_scale())
  -- NaN too; then two finite steps in a row double the scale
  opt:zero_grad()
  s:scale((w * w):sum({ 1 })):backward()
  qlua.no_grad(function() w.grad[1] = 0 / 0 end)
  assert.is_false(s:step(opt))
  s:update()
  assert.are.equal(2, s:get_scale())
  for _ = 1, 2 do
    opt:zero_grad()
    s:scale((w * w):sum({ 1 })):backward()
    -- unscale_ first (for clipping), then step does not unscale twice
    s:unscale_(opt)
    T.assert_close(numbers(w.grad), numbers(w * 2), 1e-6, "unscale_ then step")
    assert.truthy(errmsg(s.unscale_, s, opt):match("unscale_ was already called"))
    assert.is_true(s:step(opt))
    s:update()
  end
  assert.are.equal(4, s:get_scale())
  -- disabled: a pass-through
  local off = qlua.amp.GradScaler({ enabled = false })
  assert.are.equal(loss, off:scale(loss))
  assert.are.equal(1, off:get_scale())
  assert.truthy(errmsg(qlua.amp.GradScaler, { backoff_factor = 2 }):match("GradScaler: .*backoff_factor in %(0, 1%)"))
end)

both("sample: greedy is the argmax; top_k and top_p keep only their tokens, in proportion; a seed repeats", function(dev)
  local logits = qlua.tensor({ { 0, 5, 1, 4 }, { 3, 0, 0, 0 } }, { dtype = "float32", device = dev })
  assert.are.same({ 2, 1 }, numbers(F.sample(logits, { greedy = true })))
  assert.are.same({ 2, 1 }, numbers(F.sample(logits, { temperature = 0 })))
  local n = 4000
  local rows = logits:reshape({ 2, 1, 4 }):expand({ 2, n, 4 }):reshape({ 2 * n, 4 })
  local function counts(opts)
    local c = { 0, 0, 0, 0 }
    for _, t in ipairs(numbers(F.sample(rows:narrow(1, 1, n), opts))) do c[t] = c[t] + 1 end
    return c
  end
  -- top_k = 2: tokens 2 and 4 only, as e^5 : e^4
  local c = counts({ top_k = 2 })
  assert.are.equal(0, c[1] + c[3])
  local want = math.exp(5) / (math.exp(5) + math.exp(4))
  assert.is_true(math.abs(c[2] / n - want) < 0.03, "top_k share " .. c[2] / n)
  -- top_p = 0.5: token 2 alone reaches it (0.70 of the mass)
  c = counts({ top_p = 0.5 })
  assert.are.equal(n, c[2])
  -- top_p = 0.9: tokens 2 and 4 (0.70 + 0.26), renormalised
  c = counts({ top_p = 0.9 })
  assert.are.equal(0, c[1] + c[3])
  -- temperature 2 flattens: token 1 (logit 0) appears
  c = counts({ temperature = 2 })
  local p = {}
  local z = 0
  for i, l in ipairs({ 0, 5, 1, 4 }) do p[i] = math.exp(l / 2); z = z + p[i] end
  for i = 1, 4 do assert.is_true(math.abs(c[i] / n - p[i] / z) < 0.03, "temperature share " .. i) end
  -- a seed repeats the draws; shapes (..., vocab) give (...)
  qlua.seed(77)
  local a = numbers(F.sample(rows, { top_k = 3 }))
  qlua.seed(77)
  assert.are.same(a, numbers(F.sample(rows, { top_k = 3 })))
  assert.are.same({ 3, 2 }, F.sample(qlua.randn({ 3, 2, 10 }, { device = dev })):shape())
  assert.truthy(errmsg(F.sample, logits, { top_p = 0 }):match("sample: top_p must be in %(0, 1%], got 0"))
  assert.truthy(errmsg(F.sample, logits, { top_k = 0 }):match("sample: top_k must be an integer >= 1, got 0"))
  assert.truthy(errmsg(F.sample, logits, { temperature = -1 }):match("sample: temperature must be a number >= 0"))
end)
