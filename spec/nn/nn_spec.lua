-- qlua.nn (docs/API.md "Neural networks"): modules (the subclass idiom, registration
-- order, PyTorch's dotted names, train/eval, to, state_dict and .safetensors round trips
-- with their errors), every layer's output against a plain-Lua reference or its
-- functional form, the losses against their formulas over Lua numbers, gradients by
-- gradcheck, the initialisers' statistics and nn.utils.
local T, qlua, test, gtest, both = require("qlua.testing").spec(_ENV)
local nn = require("qlua.nn")
local A = require("qlua.autograd")
local F = nn.functional
local F64 = "float64"

local function rnd(shape, dev) return qlua.randn(shape, { dtype = F64, device = dev }) end
local function close(a, b, tol) T.assert_close(a:detach():cpu():totable(), b, tol or 1e-12) end
local function errmsg(f, ...)
  local ok, e = pcall(f, ...)
  assert.is_false(ok)
  return tostring(e)
end

test("a Module subclass registers modules and parameters in assignment order, with dotted names", function()
  local Net = nn.Module:extend("Net")
  function Net:init(d)
    self.fc1 = nn.Linear(d, 3)
    self.scale = qlua.ones({ 3 }):requires_grad_()
    self.plain = 5
    self.body = nn.Sequential(nn.ReLU(), nn.Linear(3, 2, { bias = false }))
    self:register_buffer("steps", qlua.zeros({ 1 }))
  end
  function Net:forward(x) return self.body(self.fc1(x) * self.scale) end
  local net = Net(4)
  local names = {}
  for _, p in ipairs(net:named_parameters()) do names[#names + 1] = p[1] end
  -- as PyTorch's: a module's own parameters, then its children's, depth first
  assert.are.same({ "scale", "fc1.weight", "fc1.bias", "body.1.weight" }, names)
  assert.are.equal(4, #net:parameters())
  assert.are.equal(2, #net:children())      -- fc1, body
  assert.are.equal(5, #net:modules())       -- net, fc1, body and body's two
  local sd = net:state_dict()
  assert.truthy(sd["steps"] and sd["body.1.weight"])
  assert.are.equal(5, net.plain)
  local y = net(qlua.randn({ 2, 4 }))
  assert.are.same({ 2, 2 }, y:shape())
  y:sum():backward()
  assert.truthy(net.fc1.weight.grad)
  net:zero_grad()
  assert.is_nil(net.fc1.weight.grad)
  net:eval()
  assert.is_false(net.body:get(2).training)
  net:train()
  assert.is_true(net.body:get(2).training)
  assert.truthy(tostring(net):match("^Net%(\n  %(fc1%): Linear%(in_features=4"), tostring(net))
  assert.truthy(errmsg(function() nn.Module()(1) end):match("forward is not defined"))
end)

both("Linear: x W^T + b against plain Lua, PyTorch's init bounds, gradients by gradcheck", function(dev)
  local lin = nn.Linear(3, 2, { dtype = F64, device = dev })
  local bound = 1 / math.sqrt(3)
  for _, v in ipairs(lin.weight:detach():cpu():reshape({ -1 }):totable()) do assert.truthy(math.abs(v) <= bound) end
  local x = rnd({ 4, 3 }, dev)
  local W, b, X = lin.weight:detach():cpu():totable(), lin.bias:detach():cpu():totable(), x:cpu():totable()
  local want = {}
  for i = 1, 4 do
    want[i] = {}
    for o = 1, 2 do
      local s = b[o]
      for k = 1, 3 do s = s + X[i][k] * W[o][k] end
      want[i][o] = s
    end
  end
  close(lin(x), want)
  x:requires_grad_()
  assert.is_true(A.gradcheck(function(a, w, c) return F.linear(a, w, c) end, { x, lin.weight, lin.bias }))
  assert.truthy(errmsg(lin, rnd({ 4, 5 }, dev)):match("^linear: input has 5 features"))
end)

both("F.linear with a bias (one addmm over the rows) on 1-D to 4-D and strided inputs, with gradients", function(dev)
  local w, b = rnd({ 7, 5 }, dev), rnd({ 7 }, dev)
  local W, B = w:cpu():totable(), b:cpu():totable()
  for _, shape in ipairs({ { 5 }, { 4, 5 }, { 2, 3, 5 }, { 2, 2, 3, 5 }, { 0, 5 } }) do
    local x = rnd(shape, dev)
    local y = F.linear(x, w, b)
    local ys = y:shape()
    assert.are.equal(#shape, #ys)
    assert.are.equal(7, ys[#ys])
    local rows = x:reshape({ -1, 5 }):cpu():totable()
    local want = {}
    for i, r in ipairs(rows) do
      want[i] = {}
      for o = 1, 7 do
        local s = B[o]
        for k = 1, 5 do s = s + r[k] * W[o][k] end
        want[i][o] = s
      end
    end
    if #rows > 0 then close(y:reshape({ -1, 7 }), want) end
  end
  local xt = rnd({ 5, 3, 4 }, dev):transpose(1, 2)   -- not contiguous: the rows are copied
  local w2, b2 = rnd({ 6, 4 }, dev), rnd({ 6 }, dev)
  close(F.linear(xt, w2, b2), (xt:matmul(w2:t()) + b2):cpu():totable())
  local x3 = rnd({ 2, 3, 5 }, dev):requires_grad_()
  assert.is_true(A.gradcheck(function(a, ww, c) return F.linear(a, ww, c) end,
                             { x3, w:clone():requires_grad_(), b:clone():requires_grad_() }))
end)

both("LayerNorm, RMSNorm and GroupNorm against plain-Lua means and variances", function(dev)
  local x = rnd({ 2, 4, 3 }, dev)
  local X = x:cpu():totable()
  local ln = nn.LayerNorm(3, { dtype = F64, device = dev })
  local rms = nn.RMSNorm({ 3 }, { dtype = F64, device = dev, eps = 1e-6 })
  local want_ln, want_rms = {}, {}
  for i = 1, 2 do
    want_ln[i], want_rms[i] = {}, {}
    for j = 1, 4 do
      local r = X[i][j]
      local m = (r[1] + r[2] + r[3]) / 3
      local v = ((r[1] - m) ^ 2 + (r[2] - m) ^ 2 + (r[3] - m) ^ 2) / 3
      local ms = (r[1] ^ 2 + r[2] ^ 2 + r[3] ^ 2) / 3
      want_ln[i][j], want_rms[i][j] = {}, {}
      for k = 1, 3 do
        want_ln[i][j][k] = (r[k] - m) / math.sqrt(v + 1e-5)
        want_rms[i][j][k] = r[k] / math.sqrt(ms + 1e-6)
      end
    end
  end
  close(ln(x), want_ln, 1e-10)
  close(rms(x), want_rms, 1e-10)
  -- GroupNorm(2 groups of 2 channels) on N x C x L: each group's 2 x 3 values together
  local gn = nn.GroupNorm(2, 4, { dtype = F64, device = dev })
  local want_gn = {}
  for n = 1, 2 do
    want_gn[n] = {}
    for g = 0, 1 do
      local vals = {}
      for c = 2 * g + 1, 2 * g + 2 do for l = 1, 3 do vals[#vals + 1] = X[n][c][l] end end
      local m, v = 0, 0
      for _, a in ipairs(vals) do m = m + a / #vals end
      for _, a in ipairs(vals) do v = v + (a - m) ^ 2 / #vals end
      for c = 2 * g + 1, 2 * g + 2 do
        want_gn[n][c] = {}
        for l = 1, 3 do want_gn[n][c][l] = (X[n][c][l] - m) / math.sqrt(v + 1e-5) end
      end
    end
  end
  close(gn(x), want_gn, 1e-10)
  assert.truthy(errmsg(gn, rnd({ 2, 3, 3 }, dev)):match("^GroupNorm: input has 3 channels"))
  assert.truthy(errmsg(ln, rnd({ 2, 4 }, dev)):match("^layer_norm: input of shape 2x4"))
  -- gradients through the compositions
  local w = (qlua.rand({ 3 }, { dtype = F64, device = dev }) + 0.5):requires_grad_()
  local xs = rnd({ 2, 3 }, dev):requires_grad_()
  assert.is_true(A.gradcheck(function(a, b) return F.layer_norm(a, { 3 }, b, nil, 1e-5) end, { xs, w }))
  assert.is_true(A.gradcheck(function(a, b) return F.rms_norm(a, { 3 }, b, 1e-6) end, { xs, w }))
end)

both("BatchNorm: batch statistics while training, running ones moved by momentum, used in eval", function(dev)
  local bn = nn.BatchNorm1d(2, { dtype = F64, device = dev, momentum = 0.5 })
  local x = rnd({ 4, 2 }, dev)
  local X = x:cpu():totable()
  local y = bn(x):detach():cpu():totable()
  local rm, rv = {}, {}
  for c = 1, 2 do
    local m, v = 0, 0
    for n = 1, 4 do m = m + X[n][c] / 4 end
    for n = 1, 4 do v = v + (X[n][c] - m) ^ 2 / 4 end
    for n = 1, 4 do T.assert_close(y[n][c], (X[n][c] - m) / math.sqrt(v + 1e-5), 1e-10) end
    rm[c], rv[c] = 0.5 * m, 0.5 * 1 + 0.5 * v * 4 / 3
  end
  close(bn.running_mean, rm, 1e-12)
  close(bn.running_var, rv, 1e-12)
  assert.are.equal(1, bn.num_batches_tracked:item())
  bn:eval()
  local z = bn(x):detach():cpu():totable()
  for n = 1, 4 do for c = 1, 2 do T.assert_close(z[n][c], (X[n][c] - rm[c]) / math.sqrt(rv[c] + 1e-5), 1e-10) end end
  assert.truthy(errmsg(bn, rnd({ 4, 3 }, dev)):match("^BatchNorm1d: input has 3 channels"))
  local bn2 = nn.BatchNorm2d(3)
  assert.truthy(errmsg(bn2, qlua.randn({ 2, 3 })):match("^BatchNorm2d: expects an input of 4 dims"))
end)

both("Embedding (padding_idx gets no gradient), Dropout, Flatten, activations", function(dev)
  local emb = nn.Embedding(5, 3, { padding_idx = 2, dtype = F64, device = dev })
  assert.are.same({ 0, 0, 0 }, emb.weight:detach():cpu():totable()[2])
  local idx = qlua.tensor({ { 1, 2 }, { 2, 5 } }, { dtype = "int64", device = dev })
  local out = emb(idx)
  assert.are.same({ 2, 2, 3 }, out:shape())
  close(out:select(1, 2):select(1, 2), emb.weight:detach():cpu():totable()[5])
  out:sum():backward()
  local g = emb.weight.grad:cpu():totable()
  assert.are.same({ 1, 1, 1 }, g[1]); assert.are.same({ 0, 0, 0 }, g[2]); assert.are.same({ 1, 1, 1 }, g[5])
  -- dropout: identity in eval; in training about p zeroed, the rest scaled
  local d = nn.Dropout(0.25)
  local x = qlua.ones({ 4000 }, { device = dev })
  local y = d(x):cpu()
  local zeros = y:eq(0):sum()
  assert.truthy(zeros > 850 and zeros < 1150, zeros)
  T.assert_close(y:max(), 1 / 0.75, 1e-6)
  d:eval()
  assert.are.equal(4000, d(x):sum())
  assert.are.same({ 2, 12 }, nn.Flatten()(qlua.zeros({ 2, 3, 4 }, { device = dev })):shape())
  assert.are.same({ 6, 4 }, nn.Flatten(1, 2)(qlua.zeros({ 2, 3, 4 }, { device = dev })):shape())
  local a = rnd({ 5 }, dev)
  close(nn.GELU({ approximate = "tanh" })(a), (function()
    local r = {}
    for i, v in ipairs(a:cpu():totable()) do
      r[i] = 0.5 * v * (1 + math.tanh(math.sqrt(2 / math.pi) * (v + 0.044715 * v ^ 3)))
    end
    return r
  end)(), 1e-12)
  close(nn.Softmax(1)(a), a:softmax(1):cpu():totable())
end)

test("dropout: one seed, the same mask on both devices", function()
  if qlua.gpu_count() == 0 then return pending("no GPU here") end
  qlua.seed(11)
  local c = F.dropout(qlua.ones({ 64 }), 0.5, true):totable()
  qlua.seed(11)
  local g = F.dropout(qlua.ones({ 64 }, { device = "gpu" }), 0.5, true):cpu():totable()
  assert.are.same(c, g)
end)

-- the losses against their formulas over Lua numbers
local function mean(t) local s = 0; for _, v in ipairs(t) do s = s + v end; return s / #t end
both("losses: mse, l1, smooth_l1, bce, bce_with_logits, kl_div against plain Lua; gradients", function(dev)
  local x, y = rnd({ 6 }, dev), rnd({ 6 }, dev)
  local X, Y = x:cpu():totable(), y:cpu():totable()
  local per = { mse = {}, l1 = {}, sl1 = {}, bce = {}, bcel = {}, kl = {} }
  local P, Q = {}, {}
  for i = 1, 6 do
    local d = X[i] - Y[i]
    per.mse[i], per.l1[i] = d * d, math.abs(d)
    per.sl1[i] = math.abs(d) < 0.5 and 0.5 * d * d / 0.5 or math.abs(d) - 0.25
    P[i], Q[i] = 1 / (1 + math.exp(-X[i])), 1 / (1 + math.exp(-Y[i]))
    per.bce[i] = -(Q[i] * math.log(P[i]) + (1 - Q[i]) * math.log(1 - P[i]))
    per.bcel[i] = -(2 * Q[i] * math.log(P[i]) + (1 - Q[i]) * math.log(1 - P[i]))    -- pos_weight 2
    per.kl[i] = Q[i] * (math.log(Q[i]) - X[i])
  end
  local p, q = x:sigmoid(), y:sigmoid()
  T.assert_close(F.mse_loss(x, y):item(), mean(per.mse), 1e-12)
  T.assert_close(F.l1_loss(x, y, { reduction = "sum" }):item(), mean(per.l1) * 6, 1e-12)
  close(F.smooth_l1_loss(x, y, { beta = 0.5, reduction = "none" }), per.sl1)
  T.assert_close(F.binary_cross_entropy(p, q):item(), mean(per.bce), 1e-12)
  T.assert_close(F.binary_cross_entropy_with_logits(x, q, { pos_weight = 2 }):item(), mean(per.bcel), 1e-12)
  T.assert_close(F.kl_div(x, q, { reduction = "sum" }):item(), mean(per.kl) * 6, 1e-12)
  T.assert_close(F.kl_div(x, q:log(), { log_target = true, reduction = "batchmean" }):item(), mean(per.kl), 1e-12)
  x:requires_grad_()
  for _, f in ipairs({ F.mse_loss, F.l1_loss, F.smooth_l1_loss,
                       function(a, b) return F.binary_cross_entropy_with_logits(a, b:sigmoid()) end,
                       function(a, b) return F.binary_cross_entropy(a:sigmoid(), b:sigmoid()) end }) do
    assert.is_true(A.gradcheck(function(a) return f(a, y) end, { x }))
  end
  assert.truthy(errmsg(F.mse_loss, x, y, { reduction = "avg" }):match("^mse_loss: reduction"))
end)

both("nll_loss and cross_entropy with class weights and ignore_index against plain Lua", function(dev)
  local logits = rnd({ 4, 3 }, dev)
  local L = logits:cpu():totable()
  local target = qlua.tensor({ 1, 3, 2, 3 }, { dtype = "int64", device = dev })
  local weight = qlua.tensor({ 0.5, 2, 1 }, { dtype = F64, device = dev })
  local t, w = { 1, 3, 2, 3 }, { 0.5, 2, 1 }
  local num, den, num_ig, den_ig = 0, 0, 0, 0
  for i = 1, 4 do
    local z = 0
    for c = 1, 3 do z = z + math.exp(L[i][c]) end
    local nll = -(L[i][t[i]] - math.log(z))
    num, den = num + w[t[i]] * nll, den + w[t[i]]
    if t[i] ~= 3 then num_ig, den_ig = num_ig + nll, den_ig + 1 end
  end
  T.assert_close(F.cross_entropy(logits, target, { weight = weight }):item(), num / den, 1e-12)
  T.assert_close(F.nll_loss(logits:log_softmax(2), target, { ignore_index = 3 }):item(), num_ig / den_ig, 1e-12)
  T.assert_close(F.cross_entropy(logits, target, { ignore_index = 3 }):item(), num_ig / den_ig, 1e-12)
  logits:requires_grad_()
  assert.is_true(A.gradcheck(function(a) return F.cross_entropy(a, target, { weight = weight }) end, { logits }))
end)

test("initialisers: bounds, spreads and orthogonality", function()
  qlua.seed(3)
  local w = qlua.empty({ 200, 100 })
  nn.init.xavier_uniform_(w)
  local a = math.sqrt(6 / 300)
  assert.truthy(w:amax() <= a and w:amin() >= -a)
  nn.init.kaiming_normal_(w, { nonlinearity = "relu" })
  T.assert_close(w:std(), math.sqrt(2 / 100), 0.05)
  nn.init.trunc_normal_(w, 0, 1, -0.5, 0.5)
  assert.truthy(w:amax() <= 0.5 and w:amin() >= -0.5)
  T.assert_close(w:std(), 0.28, 0.05)    -- the standard normal cut at +-0.5: sd 0.2838
  local q = qlua.empty({ 6, 4 }, { dtype = F64 })
  nn.init.orthogonal_(q)
  local qtq = q:t():matmul(q):totable()
  for i = 1, 4 do for j = 1, 4 do T.assert_close(qtq[i][j], i == j and 1 or 0, 1e-10) end end
  T.assert_close(nn.init.calculate_gain("leaky_relu", 0.2), math.sqrt(2 / 1.04), 1e-15)
  assert.truthy(errmsg(nn.init.xavier_uniform_, qlua.empty({ 3 })):match("^xavier_uniform_: fan in"))
end)

both("utils: clip_grad_norm_ scales to max_norm and returns the norm; clip_grad_value_; vectors", function(dev)
  local a = qlua.tensor({ 3, 4 }, { dtype = F64, device = dev }):requires_grad_()
  local b = qlua.tensor({ 12 }, { dtype = F64, device = dev }):requires_grad_()
  ;(a * a * 0.5 + 0):sum():backward()
  ;(b * b * 0.5):sum():backward()
  local n = nn.utils.clip_grad_norm_({ a, b }, 6.5)
  T.assert_close(n:item(), 13, 1e-15)
  local s = 6.5 / (13 + 1e-6)                -- PyTorch's max_norm / (norm + 1e-6)
  close(a.grad, { 3 * s, 4 * s })
  close(b.grad, { 12 * s })
  nn.utils.clip_grad_value_({ a, b }, 1.75)
  close(a.grad, { 3 * s, 1.75 })
  local v = nn.utils.parameters_to_vector({ a, b })
  close(v, { 3, 4, 12 })
  nn.utils.vector_to_parameters(v * 2, { a, b })
  close(a, { 6, 8 })
end)

test("state_dict round trips through .safetensors; strict names the missing and unexpected keys", function()
  local function make() return nn.Sequential(nn.Linear(3, 4), nn.BatchNorm1d(4), nn.Linear(4, 2)) end
  local m1, m2 = make(), make()
  m1(qlua.randn({ 5, 3 }))                 -- moves the running statistics
  local path = os.tmpname() .. ".safetensors"
  nn.save(m1, path)
  nn.load(m2, path)
  os.remove(path)
  for k, v in pairs(m1:state_dict()) do assert.are.same(v:totable(), m2:state_dict()[k]:totable(), k) end
  local names = {}
  for k in pairs(m1:state_dict()) do names[#names + 1] = k end
  table.sort(names)
  assert.are.same({ "0.bias", "0.weight", "1.bias", "1.num_batches_tracked", "1.running_mean", "1.running_var",
                    "1.weight", "2.bias", "2.weight" }, names)
  local sd = m1:state_dict()
  sd["0.weight"] = nil
  sd["extra"] = qlua.zeros(1)
  local e = errmsg(m2.load_state_dict, m2, sd)
  assert.truthy(e:match("^Sequential: load_state_dict: missing keys {0.weight}, unexpected keys {extra}"), e)
  local r = m2:load_state_dict(sd, { strict = false })
  assert.are.same({ "0.weight" }, r.missing_keys)
  sd = m1:state_dict()
  sd["2.weight"] = qlua.zeros(3, 3)
  assert.truthy(errmsg(m2.load_state_dict, m2, sd):match("2.weight has shape 2x4 here, 3x3 in the state dict"))
end)

both("to(dtype) and to(device) replace the parameters, which stay leaves that require grad", function(dev)
  local m = nn.Sequential(nn.Linear(2, 3), nn.LayerNorm(3))
  m:to({ dtype = F64, device = dev })
  for _, p in ipairs(m:parameters()) do
    assert.are.equal(F64, p:dtype())
    assert.truthy(p:device():match("^" .. dev))
    assert.is_true(p:requires_grad() and p:is_leaf())
  end
  local y = m(qlua.randn({ 4, 2 }, { dtype = F64, device = dev }))
  y:sum():backward()
  assert.truthy(m:get(1).weight.grad)
end)
