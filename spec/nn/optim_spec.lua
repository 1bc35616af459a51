-- qlua.optim (docs/API.md "Optimizers"): every optimizer's steps against the update
-- formula written out in plain Lua over numbers, several steps, on both devices; the
-- options' errors; parameter groups; state_dict round trips; and the schedules' lrs at
-- known epochs.
local T, qlua, test, gtest, both = require("qlua.testing").spec(_ENV)
local optim = require("qlua.optim")

local F64 = "float64"
local START = { 0.5, -1.25, 2.0, 0.75 }
local TARGET = { 1.0, 0.5, -1.0, 0.25 }
local W = { 1.0, 2.0, 0.5, 3.0 }

-- the loss sum(w (p - target)^2), whose gradient is 2 w (p - target)
local function grad_of(p)
  local g = {}
  for i = 1, #p do g[i] = 2 * W[i] * (p[i] - TARGET[i]) end
  return g
end

-- steps the optimizer through backward on the device, and the reference on numbers
local function compare(make, reference, dev, steps)
  local p = qlua.tensor(START, { dtype = F64, device = dev }):requires_grad_()
  local target = qlua.tensor(TARGET, { dtype = F64, device = dev })
  local w = qlua.tensor(W, { dtype = F64, device = dev })
  local opt = make({ p })
  local ref = { table.unpack(START) }
  local state = {}
  for step = 1, steps or 6 do
    opt:zero_grad()
    ;((p - target) ^ 2 * w):sum():backward()
    opt:step()
    reference(ref, grad_of(ref), state, step)
  end
  T.assert_close(p:detach():cpu():totable(), ref, 1e-12)
  return opt, p
end

-- the references, written from PyTorch's documented algorithms
local function sgd_ref(o)
  return function(p, g, s)
    for i = 1, #p do
      local d = g[i]
      if o.maximize then d = -d end
      d = d + (o.weight_decay or 0) * p[i]
      if (o.momentum or 0) ~= 0 then
        s[i] = s[i] == nil and d or (o.momentum * s[i] + (1 - (o.dampening or 0)) * d)
        d = o.nesterov and d + o.momentum * s[i] or s[i]
      end
      p[i] = p[i] - o.lr * d
    end
  end
end
local function adam_ref(o, decoupled)
  local b1, b2 = o.betas and o.betas[1] or 0.9, o.betas and o.betas[2] or 0.999
  local eps, wd = o.eps or 1e-8, o.weight_decay or (decoupled and 1e-2 or 0)
  return function(p, g, s, t)
    for i = 1, #p do
      local d = g[i]
      if o.maximize then d = -d end
      if decoupled then p[i] = p[i] * (1 - o.lr * wd) else d = d + wd * p[i] end
      local st = s[i] or { m = 0, v = 0, vmax = 0 }
      s[i] = st
      st.m = b1 * st.m + (1 - b1) * d
      st.v = b2 * st.v + (1 - b2) * d * d
      st.vmax = math.max(st.vmax, st.v)
      local v = o.amsgrad and st.vmax or st.v
      local denom = math.sqrt(v) / math.sqrt(1 - b2 ^ t) + eps
      p[i] = p[i] - o.lr / (1 - b1 ^ t) * st.m / denom
    end
  end
end
local function rmsprop_ref(o)
  local alpha, eps, mom = o.alpha or 0.99, o.eps or 1e-8, o.momentum or 0
  return function(p, g, s)
    for i = 1, #p do
      local d = g[i] + (o.weight_decay or 0) * p[i]
      local st = s[i] or { sq = 0, ga = 0, buf = 0 }
      s[i] = st
      st.sq = alpha * st.sq + (1 - alpha) * d * d
      local avg
      if o.centered then
        st.ga = alpha * st.ga + (1 - alpha) * d
        avg = math.sqrt(st.sq - st.ga * st.ga) + eps
      else
        avg = math.sqrt(st.sq) + eps
      end
      if mom > 0 then
        st.buf = mom * st.buf + d / avg
        p[i] = p[i] - o.lr * st.buf
      else
        p[i] = p[i] - o.lr * d / avg
      end
    end
  end
end
local function adagrad_ref(o)
  return function(p, g, s, t)
    for i = 1, #p do
      local d = g[i] + (o.weight_decay or 0) * p[i]
      s[i] = (s[i] or (o.initial_accumulator_value or 0)) + d * d
      local clr = o.lr / (1 + (t - 1) * (o.lr_decay or 0))
      p[i] = p[i] - clr * d / (math.sqrt(s[i]) + (o.eps or 1e-10))
    end
  end
end

local CASES = {
  { "SGD", optim.SGD, { lr = 0.05 }, sgd_ref },
  { "SGD momentum dampening weight_decay", optim.SGD,
    { lr = 0.05, momentum = 0.9, dampening = 0.1, weight_decay = 0.01 }, sgd_ref },
  { "SGD nesterov", optim.SGD, { lr = 0.05, momentum = 0.8, nesterov = true }, sgd_ref },
  { "SGD maximize", optim.SGD, { lr = 0.01, momentum = 0.5, maximize = true }, sgd_ref },
  { "Adam", optim.Adam, { lr = 0.1 }, adam_ref },
  { "Adam amsgrad weight_decay betas", optim.Adam,
    { lr = 0.1, amsgrad = true, weight_decay = 0.05, betas = { 0.8, 0.99 } }, adam_ref },
  { "AdamW", optim.AdamW, { lr = 0.1 }, function(o) return adam_ref(o, true) end },
  { "AdamW amsgrad", optim.AdamW, { lr = 0.05, weight_decay = 0.1, amsgrad = true },
    function(o) return adam_ref(o, true) end },
  { "RMSprop", optim.RMSprop, { lr = 0.01 }, rmsprop_ref },
  { "RMSprop centered momentum weight_decay", optim.RMSprop,
    { lr = 0.01, centered = true, momentum = 0.9, weight_decay = 0.02, alpha = 0.9 }, rmsprop_ref },
  { "Adagrad", optim.Adagrad, { lr = 0.1 }, adagrad_ref },
  { "Adagrad lr_decay weight_decay initial accumulator", optim.Adagrad,
    { lr = 0.1, lr_decay = 0.05, weight_decay = 0.01, initial_accumulator_value = 0.5 }, adagrad_ref },
}
for _, c in ipairs(CASES) do
  local name, ctor, opts, ref = c[1], c[2], c[3], c[4]
  both(name .. ": six steps against the written-out update", function(dev)
    compare(function(params) return ctor(params, opts) end, ref(opts), dev)
  end)
  if ctor.fused_update then    -- SGD, Adam, AdamW: the fused kernel by default, and the ops
    both(name .. ", fused = false (op by op): six steps against the written-out update", function(dev)
      local o = { fused = false }
      for k, v in pairs(opts) do o[k] = v end
      compare(function(params) return ctor(params, o) end, ref(opts), dev)
    end)
  end
  if opts.betas ~= nil or ctor == optim.Adam or ctor == optim.AdamW then
    -- capturable: the step count a float64 tensor on the device, read when the update runs
    -- (as qlua.graph captures it), fused and op by op
    for _, fused in ipairs({ true, false }) do
      both(name .. ", capturable, fused = " .. tostring(fused) .. ": six steps against the update", function(dev)
        local o = { capturable = true, fused = fused }
        for k, v in pairs(opts) do o[k] = v end
        local opt, p = compare(function(params) return ctor(params, o) end, ref(opts), dev)
        local step = opt.state[p].step
        assert.is_true(qlua.is_tensor(step))
        assert.equal("float64", step:dtype())
        assert.equal(6, step:cpu():item())
      end)
    end
  end
end

-- The fused kernel over many tensors at once: sizes around its block and chunk lengths
-- (4096 on the CPU, 16384 on the GPU), empty ones, more tensors than one GPU launch takes
-- (48), a strided parameter (which goes op by op), every float dtype; three steps each
-- against the written-out update over the tensors' own values.
local SIZES = { 1, 7, 0, 33, 4095, 4097, 16385, 3 }
local FUSED = {
  { "SGD momentum nesterov weight_decay", optim.SGD,
    { lr = 0.05, momentum = 0.9, nesterov = true, weight_decay = 0.01 }, sgd_ref },
  { "SGD no momentum maximize", optim.SGD, { lr = 0.05, maximize = true }, sgd_ref },
  { "Adam maximize weight_decay", optim.Adam, { lr = 0.01, maximize = true, weight_decay = 0.1 }, adam_ref },
  { "AdamW amsgrad", optim.AdamW, { lr = 0.01, amsgrad = true, weight_decay = 0.1, betas = { 0.8, 0.9 } },
    function(o) return adam_ref(o, true) end },
}
local TOL = { float64 = 1e-12, float32 = 1e-5, float16 = 4e-3, bfloat16 = 3e-2 }
for _, c in ipairs(FUSED) do
  local name, ctor, opts, ref = c[1], c[2], c[3], c[4]
  both(name .. ": fused over 53 tensors of many sizes and every float dtype", function(dev)
    for _, dt in ipairs({ "float32", "float64", "float16", "bfloat16" }) do
      qlua.seed(7)
      local params, refs, states, update = {}, {}, {}, ref(opts)
      for k = 1, 52 do
        local n = SIZES[(k - 1) % #SIZES + 1]
        params[k] = qlua.randn(n, { dtype = dt, device = dev }):requires_grad_()
      end
      params[53] = qlua.randn(6, 5, { dtype = dt, device = dev }):t():requires_grad_()   -- strided
      for k, p in ipairs(params) do
        refs[k] = p:detach():cpu():double():reshape(p:numel()):totable()
        states[k] = {}
      end
      local opt = ctor(params, opts)
      for step = 1, 3 do
        for k, p in ipairs(params) do
          local g = qlua.randn(p:numel(), { dtype = dt, device = dev })
          p.grad = k == 53 and g:reshape(6, 5):t() or g:reshape(p:shape())
          update(refs[k], p.grad:cpu():double():reshape(p:numel()):totable(), states[k], step)
        end
        opt:step()
      end
      local got, want = {}, {}
      for k, p in ipairs(params) do
        for _, v in ipairs(p:detach():cpu():double():reshape(p:numel()):totable()) do got[#got + 1] = v end
        for _, v in ipairs(refs[k]) do want[#want + 1] = v end
      end
      T.assert_close(got, want, TOL[dt], dt)
    end
  end)
end

both("the fused update moves the versions of what it writes, and its errors name the op and the tensors", function(dev)
  local function t(n, o) o = o or {}; o.device = dev; return qlua.zeros(n, o) end
  local p, g, buf = t(3), t(3), t(3)
  local v0 = p:_version()
  qlua._optim_step("sgd", { lr = 0.1, momentum = 0.9 }, { p }, { g }, { { buf } }, 1)
  assert.truthy(p:_version() > v0 and buf:_version() > 0)
  local function err_of(...)
    local ok, e = pcall(qlua._optim_step, ...)
    assert.is_false(ok)
    return e
  end
  local sgd = { lr = 0.1 }
  assert.truthy(err_of("sgd", sgd, { p }, { t(4) }, {}, 1):match("^_optim_step: parameter 1 is .* but its gradient is"))
  assert.truthy(err_of("sgd", sgd, { t(3, { dtype = "int32" }) }, { t(3, { dtype = "int32" }) }, {}, 1)
                :match("takes float tensors"))
  assert.truthy(err_of("sgd", sgd, { p }, { t(3, { dtype = "float64" }) }, {}, 1):match("one dtype per call"))
  assert.truthy(err_of("sgd", sgd, { p, p }, { g, t(3) }, {}, 1)
                :match("parameter 1's parameter and parameter 2's parameter share memory"))
  assert.truthy(err_of("sgd", sgd, { p }, { p }, {}, 1):match("share memory"))
  assert.truthy(err_of("sgd", sgd, { t(6):reshape(2, 3):t() }, { t(6):reshape(3, 2) }, {}, 1):match("not contiguous"))
  assert.truthy(err_of("sgd", sgd, { p }, { g, g }, {}, 1):match("1 parameters but 2 gradients"))
  assert.truthy(err_of("sgd", { lr = 0.1, momentum = 0.9 }, { p }, { g }, {}, 1):match("0 lists of state tensors given, 1 expected"))
  assert.truthy(err_of("adam", { lr = 0.1 }, { p }, { g }, { { buf }, { t(3) } }, 0):match("Adam's step 0"))
  assert.truthy(err_of("adam", { lr = 0.1, eps = "x" }, { p }, { g }, { { buf }, { t(3) } }, 1):match("eps must be a number"))
  assert.truthy(err_of("sgd", {}, { p }, { g }, {}, 1):match("no lr"))
  assert.truthy(err_of("rmsprop", sgd, { p }, { g }, {}, 1):match("invalid option 'rmsprop'"))
  assert.truthy(err_of("sgd", sgd, { p }, { 5 }, {}, 1):match("gradients 1 is a number"))
  if dev ~= "cpu" then
    assert.truthy(err_of("sgd", sgd, { p }, { qlua.zeros(3) }, {}, 1):match("tensors on gpu:%d+ and cpu"))
  end
  p:free()
  assert.truthy(err_of("sgd", sgd, { p }, { g }, {}, 1):match("freed"))
end)

both("parameter groups take their own options; the others come from the defaults", function(dev)
  local a = qlua.tensor({ 1, 2 }, { dtype = F64, device = dev }):requires_grad_()
  local b = qlua.tensor({ 3 }, { dtype = F64, device = dev }):requires_grad_()
  local opt = optim.SGD({ { params = { a } }, { params = { b }, lr = 0.5 } }, { lr = 0.1, momentum = 0 })
  assert.are.equal(0.1, opt.param_groups[1].lr)
  assert.are.equal(0.5, opt.param_groups[2].lr)
  ;(a:sum() + b:sum()):backward()
  opt:step()
  T.assert_close(a:detach():cpu():totable(), { 0.9, 1.9 }, 1e-15)
  T.assert_close(b:detach():cpu():totable(), { 2.5 }, 1e-15)
  -- a parameter without a gradient is left alone
  local c = qlua.tensor({ 7 }, { dtype = F64, device = dev }):requires_grad_()
  opt:add_param_group({ params = { c }, lr = 1 })
  opt:zero_grad()
  assert.is_nil(a.grad)
  opt:step()
  assert.are.same({ 7 }, c:detach():cpu():totable())
end)

test("zero_grad: set_to_none by default, zeroed in place on request", function()
  local p = qlua.tensor({ 1, 2 }, { dtype = F64 }):requires_grad_()
  local opt = optim.SGD({ p }, { lr = 0.1 })
  p:sum():backward()
  local g = p.grad
  opt:zero_grad({ set_to_none = false })
  assert.are.equal(g, p.grad)
  assert.are.same({ 0, 0 }, p.grad:totable())
  opt:zero_grad()
  assert.is_nil(p.grad)
end)

test("step(closure) evaluates the loss with grad on and returns it", function()
  local p = qlua.tensor({ 1, 2 }, { dtype = F64 }):requires_grad_()
  local opt = optim.SGD({ p }, { lr = 0.25 })
  local loss = qlua.no_grad(function()
    return opt:step(function()
      opt:zero_grad()
      local l = (p * p):sum()
      l:backward()
      return l
    end)
  end)
  assert.are.equal(5, loss:item())
  assert.are.same({ 0.5, 1 }, p:detach():totable())
end)

both("state_dict and load_state_dict carry the state: a reloaded optimizer goes on the same", function(dev)
  local opts = { lr = 0.05, amsgrad = true }
  local function fresh() return qlua.tensor(START, { dtype = F64, device = dev }):requires_grad_() end
  local p1, p2 = fresh(), fresh()
  local target = qlua.tensor(TARGET, { dtype = F64, device = dev })
  local o1 = optim.Adam({ p1 }, opts)
  local function step(o, p)
    o:zero_grad(); ;((p - target) ^ 2):sum():backward(); o:step()
  end
  for _ = 1, 3 do step(o1, p1) end
  local sd = o1:state_dict()
  assert.are.equal(3, sd.state[1].step)
  assert.are.same({ 1 }, sd.param_groups[1].params)
  qlua.no_grad(function() p2:copy_(p1) end)
  local o2 = optim.Adam({ p2 }, { lr = 0.5 })
  o2:load_state_dict(sd)
  assert.are.equal(0.05, o2.param_groups[1].lr)
  for _ = 1, 3 do step(o1, p1); step(o2, p2) end
  assert.are.same(p1:detach():cpu():totable(), p2:detach():cpu():totable())
  local ok, err = pcall(o2.load_state_dict, o2, { param_groups = {}, state = {} })
  assert.truthy(not ok and err:match("^Adam: load_state_dict"), err)
end)

test("bad options and parameters are errors naming the optimizer and the option", function()
  local p = qlua.tensor({ 1 }, { dtype = F64 }):requires_grad_()
  local function err_of(f, ...)
    local ok, e = pcall(f, ...)
    assert.is_false(ok)
    return e
  end
  assert.truthy(err_of(optim.SGD, { p }, { lr = -1 }):match("^SGD: lr must be >= 0"))
  assert.truthy(err_of(optim.SGD, { p }, { learning_rate = 1 }):match("^SGD: unknown option 'learning_rate'"))
  assert.truthy(err_of(optim.SGD, { p }, { lr = "1" }):match("^SGD: option lr must be a number"))
  assert.truthy(err_of(optim.SGD, { p }, { lr = 1, nesterov = true }):match("nesterov"))
  assert.truthy(err_of(optim.Adam, { p }, { betas = { 1, 0.9 } }):match("^Adam: betas"))
  assert.truthy(err_of(optim.Adam, { qlua.ones(2) }):match("^Adam: parameter 1 must be a leaf tensor that requires grad"))
  assert.truthy(err_of(optim.Adam, { p, p }):match("more than one group"))
  assert.truthy(err_of(optim.Adam, p):match("^Adam: params must be"))
  assert.truthy(err_of(optim.Adam, { 5 }):match("^Adam: parameter 1 is a number"))
end)

-- ------------------------------------------------------------- schedules
local function lrs(make, n, lr)
  local p = qlua.tensor({ 1 }, { dtype = F64 }):requires_grad_()
  local opt = optim.SGD({ p }, { lr = lr or 1, momentum = 0.9 })
  local s = make(opt)
  local out = { opt.param_groups[1].lr }
  for _ = 2, n do s:step(); out[#out + 1] = opt.param_groups[1].lr end
  assert.are.same(out[#out], s:get_last_lr()[1])
  return out, opt
end

test("StepLR, MultiStepLR, ExponentialLR, LinearLR and LambdaLR at known epochs", function()
  T.assert_close(lrs(function(o) return optim.StepLR(o, { step_size = 2, gamma = 0.5 }) end, 6),
                 { 1, 1, 0.5, 0.5, 0.25, 0.25 }, 1e-15)
  T.assert_close(lrs(function(o) return optim.MultiStepLR(o, { milestones = { 2, 4 }, gamma = 0.1 }) end, 6),
                 { 1, 1, 0.1, 0.1, 0.01, 0.01 }, 1e-15)
  T.assert_close(lrs(function(o) return optim.ExponentialLR(o, { gamma = 0.5 }) end, 4), { 1, 0.5, 0.25, 0.125 }, 1e-15)
  T.assert_close(lrs(function(o) return optim.LinearLR(o, { start_factor = 0.5, total_iters = 4 }) end, 7),
                 { 0.5, 0.625, 0.75, 0.875, 1, 1, 1 }, 1e-15)
  T.assert_close(lrs(function(o) return optim.LambdaLR(o, { lr_lambda = function(e) return 1 / (e + 1) end }) end, 4),
                 { 1, 1 / 2, 1 / 3, 1 / 4 }, 1e-15)
end)

test("CosineAnnealingLR: the base lr, the midpoint, eta_min at T_max", function()
  local l = lrs(function(o) return optim.CosineAnnealingLR(o, { T_max = 4, eta_min = 0.2 }) end, 5, 1)
  T.assert_close(l, { 1, 0.2 + 0.8 * (1 + math.cos(math.pi / 4)) / 2, 0.6, 0.2 + 0.8 * (1 + math.cos(3 * math.pi / 4)) / 2, 0.2 }, 1e-15)
end)

test("OneCycleLR: max_lr / div_factor, up to max_lr, down to initial / final_div_factor; momentum the other way", function()
  local l, opt = lrs(function(o) return optim.OneCycleLR(o, { max_lr = 1, total_steps = 11, pct_start = 0.3 }) end, 11)
  T.assert_close(l[1], 1 / 25, 1e-15)
  -- the peak is at step pct_start * total - 1 = 2.3 (epoch count from 0): between 2 and 3
  assert.truthy(l[3] > 0.9 and l[4] > 0.9, l[3] .. " " .. l[4])
  T.assert_close(l[11], 1 / 25 / 1e4, 1e-12)
  for i = 5, 11 do assert.truthy(l[i] <= l[i - 1] + 1e-15) end
  T.assert_close(opt.param_groups[1].momentum, 0.95, 1e-12)
  local ok, err = pcall(optim.OneCycleLR, optim.Adam({ qlua.ones(1):requires_grad_() }), {})
  assert.truthy(not ok and err:match("OneCycleLR: total_steps"), err)
end)
