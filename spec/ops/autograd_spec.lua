-- qlua.autograd (docs/API.md "Automatic differentiation"): every derivative it has,
-- checked against central differences in float64 (gradcheck: not against another
-- writing of the same formula), on contiguous and strided inputs, with broadcasting, on
-- the CPU and through `both` on the GPU; double backward for the elementwise, reduction,
-- product, softmax and shape ops (gradgradcheck); and the engine's rules: accumulation,
-- retain_graph, no_grad / enable_grad, the version counter, in-place ops on leaves,
-- views, custom functions, memory, 16-bit gradients, and the errors.
--
-- Loading qlua.autograd wraps qlua.Tensor's methods for the rest of the process; the
-- specs that run after this one are the check that the wrapping changes nothing else.
local T, qlua, test, gtest, both = require("qlua.testing").spec(_ENV)
local A = require("qlua.autograd")

local F64 = "float64"

-- a float64 leaf of shape with T.random_table's values (pos: their |x| + 0.5), in a layout
local function leaf(shape, dev, layout, pos)
  local t = T.make(T.random_table(shape, F64), F64, layout or "contiguous", dev, shape)
  if pos then
    t = A.no_grad(function() return t:abs() + 0.5 end)
  end
  return t:requires_grad_()
end

-- name, fn, the inputs' shapes, and which inputs are positive
local CASES = {
  { "add broadcast", function(a, b) return a + b end, { { 3, 4 }, { 4 } } },
  { "sub number", function(a) return 2 - a end, { { 3 } } },
  { "mul broadcast", function(a, b) return a * b end, { { 3, 1 }, { 1, 4 } } },
  { "div", function(a, b) return a / b end, { { 2, 3 }, { 2, 3 } }, { false, true } },
  { "pow number", function(a) return a ^ 2.5 end, { { 5 } }, { true } },
  { "pow tensor", function(a, b) return a:pow(b) end, { { 2, 3 }, { 2, 3 } }, { true, false } },
  { "neg abs square", function(a) return -a:abs() + a:square() end, { { 6 } } },
  { "exp log sqrt", function(a) return a:exp() + a:log() + a:sqrt() + a:rsqrt() end, { { 2, 3 } }, { true } },
  { "log1p expm1 log2 log10 exp2", function(a)
      return a:log1p() + a:expm1() + a:log2() + a:log10() + a:exp2() end, { { 4 } }, { true } },
  { "trigonometry", function(a)
      return a:sin() + a:cos() + a:tan() + (a:tanh() * 0.5):asin() + (a:tanh() * 0.5):acos() + a:atan() end, { { 2, 3 } } },
  { "hyperbolic", function(a)
      return a:sinh() + a:cosh() + a:tanh() + a:asinh() + (a * a + 1.5):acosh() + (a:tanh() * 0.5):atanh() end, { { 5 } } },
  { "sigmoid reciprocal", function(a) return a:sigmoid() + a:reciprocal() end, { { 4 } }, { true } },
  { "relu gelu gelu_tanh silu softplus", function(a) return a:relu() + a:gelu() + a:gelu_tanh() + a:silu() + a:softplus() end, { { 8 } } },
  { "erf erfc", function(a) return a:erf() + a:erfc() end, { { 5 } } },
  { "clamp", function(a) return a:clamp(-0.5, 0.5) + a:clamp(nil, 0.2) end, { { 9 } } },
  { "maximum minimum", function(a, b) return a:maximum(b) + a:minimum(b) end, { { 3, 4 }, { 4 } } },
  { "where", function(a, b) return qlua.where(a:gt(0), a, b) end, { { 3, 4 }, { 3, 4 } } },
  { "sum all", function(a) return a:sum() end, { { 3, 4 } } },
  { "sum dim", function(a) return a:sum(2) end, { { 3, 4 } } },
  { "sum dims keepdim", function(a) return a:sum({ 1, 3 }, true) end, { { 2, 3, 2 } } },
  { "mean", function(a) return a:mean(1) + a:mean() end, { { 3, 4 } } },
  { "logsumexp", function(a) return a:logsumexp(2) end, { { 3, 4 } } },
  { "softmax", function(a) return a:softmax(2) end, { { 3, 4 } } },
  { "log_softmax", function(a) return a:log_softmax(1) end, { { 3, 4 } } },
  { "cross_entropy mean", function(a) return qlua.cross_entropy(a, qlua.tensor({ 1, 3, 2 }, { device = a:device() })) end, { { 3, 4 } } },
  { "cross_entropy none", function(a)
      return qlua.cross_entropy(a, qlua.tensor({ 4, 1 }, { device = a:device() }), { reduction = "none" }) end, { { 2, 4 } } },
  { "matmul 2-D", function(a, b) return a:matmul(b) end, { { 3, 4 }, { 4, 2 } } },
  { "matmul batched broadcast", function(a, b) return qlua.matmul(a, b) end, { { 2, 3, 4 }, { 4, 2 } } },
  { "matmul 1-D left", function(a, b) return a:matmul(b) end, { { 4 }, { 2, 4, 3 } } },
  { "matmul 1-D right", function(a, b) return a:matmul(b) end, { { 3, 4 }, { 4 } } },
  { "dot mv outer bmm", function(a, b)
      return a:dot(b) + a:outer(b):sum() end, { { 4 }, { 4 } } },
  { "view reshape flatten", function(a) return a:reshape({ 4, 3 }):view({ 2, 6 }):flatten() * 2 end, { { 3, 4 } } },
  { "transpose t permute", function(a) return a:transpose(1, 3):permute(2, 3, 1) * 3 end, { { 2, 3, 4 } } },
  { "squeeze unsqueeze expand", function(a) return a:unsqueeze(1):expand({ 2, 3, 1 }):squeeze(3) * 1.5 end, { { 3, 1 } } },
  { "narrow select", function(a) return a:narrow(2, 2, 2):select(1, 3) * 2 end, { { 3, 4 } } },
  { "t[{...}] read", function(a) return a[{ 2, { 1, 3 } }] * 2 end, { { 3, 4 } } },
  { "cat stack", function(a, b) return qlua.stack({ qlua.cat({ a, b }, 1):sum(1), b:sum(1) }, 1) end, { { 2, 3 }, { 1, 3 } } },
  { "split chunk", function(a)
      local p, q = a:split(1, 1), a:chunk(2, 2)
      return p[1] * p[2] + q[1]:sum() end, { { 2, 4 } } },
  { "flip contiguous clone", function(a) return a:flip(1):contiguous():clone() * 2 end, { { 3, 2 } } },
  { "atan2 hypot fmod remainder", function(a, b)
      return a:atan2(b) + a:hypot(b) + a:fmod(b) + a:remainder(b) + (a * 3) % 2 end, { { 2, 3 }, { 3 } }, { false, true } },
  { "erfinv nan_to_num lerp", function(a, b, w)
      return (a:tanh() * 0.5):erfinv() + a:nan_to_num() + a:lerp(b, 0.3) + a:lerp(b, w) end,
    { { 2, 3 }, { 2, 3 }, { 3 } } },
  { "prod", function(a) return a:prod(2) + a:prod(1, true):sum() + a:prod() end, { { 3, 4 } } },
  { "max min median kthvalue (dim)", function(a)
      return a:max(2) + a:min(2, true):squeeze(2) + a:median(2) + a:kthvalue(2, 2) end, { { 3, 4 } } },
  { "amax amin aminmax", function(a)
      local lo, hi = a:aminmax(1)
      return a:amax(1) + a:amin({ 1, 2 }) + lo * hi end, { { 3, 4 } } },
  { "max() min() median() of all", function(a) return a:max() + a:min() * 2 + a:median() * 3 end, { { 3, 4 } } },
  { "var std", function(a)
      return a:var(2) + a:std(2, { correction = 0 }) + a:var() + a:std(1, true):sum() end, { { 3, 4 } } },
  { "norm", function(a)
      return a:norm() + a:norm(1, 2):sum() + a:norm(3, { 1, 2 }) + a:norm(math.huge, 1):sum() end, { { 3, 4 } } },
  { "cumsum cumprod logcumsumexp", function(a)
      return a:cumsum(2) + a:cumprod(1) + a:logcumsumexp(2) end, { { 3, 4 } } },
  { "cummax cummin sort topk", function(a)
      local v = a:sort(2, true)
      return a:cummax(2) + a:cummin(1) + v + a:topk(4, 2, false) end, { { 3, 4 } } },
  { "gather take index_select", function(a)
      local dev = a:device()
      local i2 = qlua.tensor({ { 1, 3 }, { 2, 2 }, { 4, 1 } }, { dtype = "int64", device = dev })
      local flat = qlua.tensor({ 12, 1, 5, 5 }, { dtype = "int32", device = dev })
      local rows = qlua.tensor({ 3, 1, 3 }, { dtype = "int64", device = dev })
      return qlua.cat({ a:gather(2, i2):reshape({ -1 }), a:take(flat), a:index_select(1, rows):reshape({ -1 }) }, 1)
    end, { { 3, 4 } } },
  { "masked_fill masked_select t[mask] t[index]", function(a, v)
      local dev = a:device()
      local m = qlua.tensor({ { true, false, true, false }, { false, false, true, true }, { true, true, false, false } },
                            { dtype = "bool", device = dev })
      local row = qlua.tensor({ false, true, true, false }, { dtype = "bool", device = dev })
      local idx = qlua.tensor({ { 3 }, { 1 }, { 3 } }, { dtype = "int64", device = dev })
      return qlua.cat({ a:masked_fill(m, v):reshape({ -1 }), a:masked_fill(row, 0.5):reshape({ -1 }),
                        a:masked_select(row), a[m], a[idx]:reshape({ -1 }) }, 1)
    end, { { 3, 4 }, {} } },
  { "t[...] = v and in-place ops recorded", function(a, b)
      local dev = a:device()
      local c = a * 2
      c[{ 2, { 1, 2 } }] = b
      c[qlua.tensor({ true, false, false, true }, { dtype = "bool", device = dev })] = 0.5
      c:mul_(a):add_(b:sum()):div_(a:abs() + 1):clamp_(-0.5, 0.6)
      return c:sigmoid_() * a
    end, { { 3, 4 }, { 2 } } },
  { "index ops in place", function(a, b)
      local dev = a:device()
      local idx = qlua.tensor({ 3, 1 }, { dtype = "int64", device = dev })
      local i2 = qlua.tensor({ { 1, 3 }, { 2, 2 } }, { dtype = "int64", device = dev })
      local c = a:clone()
      c:index_add_(1, idx, b)
      local d = a * 1
      d:index_copy_(1, idx, b):index_fill_(2, qlua.tensor({ 4 }, { dtype = "int64", device = dev }), 0.25)
      local e = qlua.zeros({ 3, 4 }, { dtype = a:dtype(), device = dev })
      e:scatter_add_(2, i2, b:narrow(2, 1, 2))
      local f = a * 3                -- scatter_ with distinct positions per row (a repeated
      f:scatter_(2, i2:cumsum(2), b:narrow(2, 1, 2))   -- one has no one right gradient)
      return c * d + e + f
    end, { { 3, 4 }, { 2, 4 } } },
  { "copy_ fill_ zero_ into buffers", function(a)
      local buf = qlua.zeros({ 3, 4 }, { dtype = a:dtype(), device = a:device() })
      buf:copy_(a:sum(1))               -- broadcast source
      local z = a * 1
      z:zero_(); z:add_(a)
      local f = a * 1
      f:fill_(2)
      return buf * a + z * f
    end, { { 3, 4 } } },
  { "addcmul_ addcdiv_", function(a, b, c)
      local t = a * 1
      t:addcmul_(b, c, 0.5):addcdiv_(a, c, 2)
      return t
    end, { { 2, 3 }, { 2, 3 }, { 3 } }, { false, false, true } },
  { "roll repeat_tensor movedim tril triu", function(a)
      return a:roll(1, 2) + a:roll({ -1, 2 }, { 1, 2 }) + a:roll(5) + a:repeat_tensor({ 2, 1 }):narrow(1, 2, 3) * 2
        + a:repeat_tensor({ 2, 1, 2 }):sum(1):narrow(2, 3, 4) + a:movedim(1, 2):t() + a:tril(1) * 3 + a:triu(-1)
    end, { { 3, 4 } } },
  { "slice diag diagonal", function(a, v)
      return qlua.cat({ a:slice(2, 1, 4, 2):reshape({ -1 }), a:slice(1, -2, -1):reshape({ -1 }), a:diag(1), a:diag(-1),
                        a:diagonal(), a:diagonal(1):sin(), v:diag(-1):reshape({ -1 }), v:diag(2):reshape({ -1 }) }, 1)
    end, { { 3, 4 }, { 3 } } },
  { "addmm", function(c, a, b)
      return qlua.addmm(c, a, b, { beta = 0.5, alpha = 2 }) + c:addmm(a, b) end, { { 2 }, { 3, 4 }, { 4, 2 } } },
  { "einsum", function(a, b, v)
      return qlua.einsum("ij,jk->ik", a, b):sum(2) + qlua.einsum("ij->i", a) + qlua.einsum("ij,j", a, v)
        + qlua.einsum("ij,jk", { a, b }):sum(2) + qlua.einsum("...j,jk->...", a, b)
    end, { { 3, 4 }, { 4, 2 }, { 4 } } },
  { "cross_entropy ignore_index label_smoothing", function(a, p)
      local t = qlua.tensor({ 1, 3, 3, 5 }, { device = a:device() })
      return qlua.cross_entropy(a, t, { ignore_index = 3 }) + qlua.cross_entropy(a, t, { label_smoothing = 0.1 })
        + qlua.cross_entropy(a, t, { ignore_index = 5, label_smoothing = 0.2, reduction = "sum" })
        + qlua.cross_entropy(a, p:softmax(2), { label_smoothing = 0.3 })
        + qlua.cross_entropy(a:select(1, 2), 4, { label_smoothing = 0.1 })
    end, { { 4, 5 }, { 4, 5 } } },
  -- through float32: differences of 1e-2 (the function is linear)
  { "conversions", function(a) return a:float():double() * 2 + a:to("float32"):to("float64") end, { { 3 } }, {},
    { eps = 1e-2, atol = 1e-4 } },
}

for _, case in ipairs(CASES) do
  local name, fn, shapes, pos, opts = case[1], case[2], case[3], case[4] or {}, case[5]
  both("gradcheck " .. name, function(dev)
    for _, layout in ipairs({ "contiguous", "transposed" }) do
      local inputs = {}
      for i, s in ipairs(shapes) do inputs[i] = leaf(s, dev, layout, pos[i]) end
      assert.is_true(A.gradcheck(fn, inputs, opts), name .. " " .. layout)
    end
  end)
end

local DOUBLE = {
  { "elementwise", function(a, b) return (a * b):tanh() + a:exp() * b:sigmoid() end, { { 2, 3 }, { 3 } } },
  { "pow div", function(a, b) return a ^ 3 / b end, { { 4 }, { 4 } }, { true, true } },
  { "reductions", function(a) return (a * a):sum(2) + a:mean(1):sum() + a:logsumexp(2) end, { { 3, 2 } } },
  { "matmul", function(a, b) return a:matmul(b):sin() end, { { 2, 3 }, { 3, 2 } } },
  { "softmax log_softmax", function(a) return a:softmax(2) * a + a:log_softmax(1) end, { { 2, 3 } } },
  { "shape ops", function(a) return (a:t():reshape({ 6 }):narrow(1, 2, 3) ^ 2):unsqueeze(1) end, { { 2, 3 } } },
  { "prod var std norm cumsum cumprod", function(a)
      return a:prod(2) + a:var(2) + a:std(2) + a:norm(2, 2) + a:cumsum(2):sum(2) + a:cumprod(2):sum(2) end, { { 2, 3 } } },
  { "max amax gather", function(a)
      local i = qlua.tensor({ { 2 }, { 1 } }, { dtype = "int64", device = a:device() })
      return a:max(2) * a:amax(2) + a:gather(2, i):squeeze(2) ^ 2 end, { { 2, 3 } } },
  { "in place and t[k] = v", function(a)
      local c = a * a
      c[{ 1, 2 }] = a[{ 2, 3 }] * 2
      c:mul_(a)
      return c
    end, { { 2, 3 } } },
}
for _, case in ipairs(DOUBLE) do
  local name, fn, shapes, pos = case[1], case[2], case[3], case[4] or {}
  both("gradgradcheck " .. name, function(dev)
    local inputs = {}
    for i, s in ipairs(shapes) do inputs[i] = leaf(s, dev, "contiguous", pos[i]) end
    assert.is_true(A.gradgradcheck(fn, inputs))
  end)
end

both("gradcheck reports a wrong derivative", function(dev)
  local Wrong = A.Function{
    forward = function(_, x) return x * x end,
    backward = function(_, g) return g end,  -- should be 2 x g
  }
  local x = leaf({ 3 }, dev, "contiguous", true)
  local ok, msg = A.gradcheck(function(a) return Wrong(a) end, { x }, { raise_exception = false })
  assert.is_false(ok)
  assert.truthy(msg:match("analytic"), msg)
  assert.has_error(function() A.gradcheck(function(a) return Wrong(a) end, { x }) end)
end)

both("backward: the leaves' .grad, accumulated; retain_graph", function(dev)
  local x = leaf({ 2, 3 }, dev)
  local y = (x * x):sum()
  assert.are.equal(0, y:dim())
  assert.are.equal("sum", y:grad_fn())
  y:backward({ retain_graph = true })
  local g1 = x.grad:cpu():totable()
  local xs = x:detach():cpu():totable()
  for i = 1, 2 do for j = 1, 3 do T.assert_close(g1[i][j], 2 * xs[i][j], 1e-12) end end
  y:backward()                               -- accumulates
  local g2 = x.grad:cpu():totable()
  for i = 1, 2 do for j = 1, 3 do T.assert_close(g2[i][j], 4 * xs[i][j], 1e-12) end end
  local ok, err = pcall(y.backward, y)
  assert.is_false(ok)
  assert.truthy(tostring(err):match("retain_graph"), err)
  x.grad = nil
  assert.is_nil(x.grad)
  assert.is_true(x:is_leaf())
  assert.is_false(y:is_leaf())
  assert.is_nil(x:grad_fn())
end)

test("backward needs a gradient for a tensor of several elements, of its shape", function()
  local x = leaf({ 3 }, "cpu")
  local y = x * 2
  assert.has_error(function() y:backward() end)
  local ok, err = pcall(y.backward, y, qlua.ones({ 2 }, { dtype = F64 }))
  assert.is_false(ok)
  assert.truthy(err:match("shape"), err)
  y:backward(qlua.tensor({ 1, 2, 3 }, { dtype = F64 }))
  assert.are.same({ 2, 4, 6 }, x.grad:totable())
  local z = qlua.ones({ 2 })
  assert.has_error(function() z:backward() end)
end)

test("requires_grad: floating dtypes only; creation takes {requires_grad = true}", function()
  for _, dt in ipairs({ "int32", "int64", "uint8", "bool" }) do
    local ok, err = pcall(function() return qlua.zeros({ 2 }, { dtype = dt }):requires_grad_() end)
    assert.is_false(ok)
    assert.truthy(err:match("requires_grad_") and err:match(dt), err)
  end
  local t = qlua.zeros({ 2 }, { requires_grad = true })
  assert.is_true(t:requires_grad())
  assert.is_false(qlua.zeros({ 2 }):requires_grad())
  assert.is_true(qlua.randn({ 2 }, { dtype = "float16", requires_grad = true }):requires_grad())
  assert.is_false(t:requires_grad_(false):requires_grad())
end)

test("the .grad field: a tensor of the same shape, dtype and device, or nil", function()
  local x = leaf({ 2 }, "cpu")
  x.grad = qlua.ones({ 2 }, { dtype = F64 })
  assert.are.same({ 1, 1 }, x.grad:totable())
  assert.has_error(function() x.grad = qlua.ones({ 3 }, { dtype = F64 }) end)
  assert.has_error(function() x.grad = qlua.ones({ 2 }) end)     -- float32
  assert.has_error(function() x.grad = 5 end)
  assert.has_error(function() x.other = 1 end)
  assert.is_nil(x.other)
end)

test("no_grad and enable_grad: nothing recorded, and the mode comes back after an error", function()
  local x = leaf({ 3 }, "cpu")
  local y = qlua.no_grad(function() return x * 2 end)
  assert.is_false(y:requires_grad())
  assert.is_true(qlua.is_grad_enabled())
  local ok, err = pcall(qlua.no_grad, function() error("inside") end)
  assert.is_false(ok)
  assert.truthy(err:match("inside"))
  assert.is_true(qlua.is_grad_enabled())
  qlua.no_grad(function()
    assert.is_false(qlua.is_grad_enabled())
    local z = qlua.enable_grad(function() return x * 2 end)
    assert.is_true(z:requires_grad())
    assert.is_false(pcall(qlua.enable_grad, function() error("again") end))
    assert.is_false(qlua.is_grad_enabled())
  end)
  -- results of no_grad are plain: sum() is a number again
  assert.are.equal("number", type(qlua.no_grad(function() return x:sum() end)))
end)

test("in-place ops: refused on a leaf that requires grad (allowed under no_grad)", function()
  local x = leaf({ 3 }, "cpu")
  local ok, err = pcall(x.add_, x, 1)
  assert.is_false(ok)
  assert.truthy(err:match("^add_:") and err:match("leaf"), err)
  assert.is_false(pcall(function() x[1] = 5 end))
  local part = x:narrow(1, 1, 2)
  assert.is_false(pcall(part.fill_, part, 0))
  local before = x:detach():totable()
  qlua.no_grad(function() x:mul_(2) end)
  local after = x:detach():totable()
  for i = 1, 3 do T.assert_close(after[i], 2 * before[i], 1e-15) end
end)

test("the version counter: a saved tensor changed in place fails backward, naming the op", function()
  local x = leaf({ 3 }, "cpu")
  local c = qlua.tensor({ 1, 2, 3 }, { dtype = F64 })
  local y = (x * c):sum()
  local v = c:_version()
  c:mul_(2)
  assert.are.equal(v + 1, c:_version())
  local ok, err = pcall(y.backward, y)
  assert.is_false(ok)
  assert.truthy(err:match("mul") and err:match("version"), err)
  -- a write through another view of the same storage counts too
  local base = qlua.zeros({ 4 }, { dtype = F64 })
  local view = base:narrow(1, 2, 2)
  local y2 = (x:narrow(1, 1, 2) * view):sum()
  base[1] = 7
  assert.is_false(pcall(y2.backward, y2))
end)

test("every in-place method moves the storage's version", function()
  local methods = rawget(qlua.Tensor, "__methods")
  local moved = 0
  for name in pairs(methods) do
    if name:sub(-1) == "_" and name ~= "requires_grad_" and name ~= "detach_" then
      local t = qlua.rand({ 4 }, { dtype = F64 }) + 1
      local v = t:_version()
      local args = ({ clamp_ = { 0, 1 }, lerp_ = { t, 0.5 }, addcmul_ = { t, t },
                      addcdiv_ = { t, t }, masked_fill_ = { t:gt(1), 0 },
                      index_fill_ = { 1, qlua.tensor({ 1 }), 0 }, index_copy_ = { 1, qlua.tensor({ 1 }), qlua.ones({ 1 }, { dtype = F64 }) },
                      index_add_ = { 1, qlua.tensor({ 1 }), qlua.ones({ 1 }, { dtype = F64 }) },
                      scatter_ = { 1, qlua.tensor({ 1 }), 0 }, scatter_add_ = { 1, qlua.tensor({ 1 }), qlua.ones({ 1 }, { dtype = F64 }) },
                      fill_ = { 1 }, copy_ = { t:clone() }, pow_ = { 2 }, random_ = { 1, 3 },
                      atan2_ = { t }, hypot_ = { t }, fmod_ = { 2 }, remainder_ = { 2 },
                      floor_divide_ = { 2 }, maximum_ = { t }, minimum_ = { t }, add_ = { 1 },
                      sub_ = { 1 }, mul_ = { 2 }, div_ = { 2 }, eq_ = { t }, ne_ = { t },
                      lt_ = { t }, le_ = { t }, gt_ = { t }, ge_ = { t }, logical_and_ = { t },
                      logical_or_ = { t }, logical_xor_ = { t }, addmm_ = nil })[name] or {}
      local ok = pcall(t[name], t, table.unpack(args))
      if ok then
        assert(t:_version() > v, name .. " wrote without moving the version")
        moved = moved + 1
      end
    end
  end
  assert.truthy(moved > 60, moved)
end)

test("views of a tensor that requires grad are differentiable", function()
  local x = leaf({ 4 }, "cpu")
  local v = x:narrow(1, 2, 2)
  assert.is_true(v:requires_grad())
  assert.is_false(v:is_leaf())
  ;(v * 3):sum():backward()
  assert.are.same({ 0, 3, 3, 0 }, x.grad:totable())
  local ok, err = pcall(v.mul_, v, 2)
  assert.is_false(ok)
  assert.truthy(err:match("^mul_:"), err)
  local d = x:detach()
  assert.is_false(d:requires_grad())
  qlua.no_grad(function() d:zero_() end)
  assert.are.same({ 0, 0, 0, 0 }, x:detach():totable())   -- detach shares the storage
end)

both("in-place ops on tensors in a graph are recorded, with PyTorch's rules", function(dev)
  local x = leaf({ 4 }, dev)
  local y = x * 2
  y:mul_(x)                                     -- y = 2 x^2
  assert.are.equal("mul_", y:grad_fn())
  y:sum():backward()
  local xs = x:detach():cpu():totable()
  local g = x.grad:cpu():totable()
  for i = 1, 4 do T.assert_close(g[i], 4 * xs[i], 1e-12) end
  -- a plain buffer written from a tensor that requires grad joins the graph
  local buf = qlua.zeros({ 4 }, { dtype = F64, device = dev })
  buf:copy_(x)
  assert.is_true(buf:requires_grad())
  -- a result that a derivative reads, changed in place: backward fails naming the op
  local e = x:exp()
  e:mul_(2)
  local ok, err = pcall(function() e:sum():backward() end)
  assert.truthy(not ok and err:match("exp") and err:match("changed in place"), err)
  -- in place on a view of a tensor in a graph: refused (clone it, or write the base)
  local v = (x * 1):narrow(1, 2, 2)
  ok, err = pcall(v.add_, v, 1)
  assert.truthy(not ok and err:match("^add_:") and err:match("view"), err)
  -- in place on part of a plain buffer, from a tensor that requires grad: refused (the
  -- buffer's graph would miss it); base[k] = v records
  local plain = qlua.zeros({ 6 }, { dtype = F64, device = dev })
  local part = plain:narrow(1, 1, 4)
  ok, err = pcall(part.copy_, part, x)
  assert.truthy(not ok and err:match("^copy_:") and err:match("view"), err)
  plain[{ { 2, 5 } }] = x
  assert.are.equal("index_put", plain:grad_fn())
  -- a view used after its base changed in place: refused, it would see the new values
  local base = x * 1
  local view = base:narrow(1, 1, 2)
  base:add_(1)
  ok, err = pcall(function() return view * 2 end)
  assert.truthy(not ok and err:match("view") and err:match("changed in place"), err)
end)

both("ties: amax, amin and max() share the gradient; max(dim) gives it to the index it returns", function(dev)
  local function g_of(f)
    local x = qlua.tensor({ { 1, 3, 3, 2 }, { 5, 5, 5, 0 } }, { dtype = F64, device = dev }):requires_grad_()
    f(x):sum():backward()
    return x.grad:cpu():totable()
  end
  assert.are.same({ { 0, 0.5, 0.5, 0 }, { 1 / 3, 1 / 3, 1 / 3, 0 } }, g_of(function(x) return x:amax(2) end))
  assert.are.same({ { 0, 0, 0, 0 }, { 1 / 3, 1 / 3, 1 / 3, 0 } }, g_of(function(x) return x:max() end))
  assert.are.same({ { 0.5, 0, 0, 0 }, { 0, 0, 0, 0.5 } }, g_of(function(x) return x:amin({ 1, 2 }) * 0 + x:amin(2) * 0.5 end))
  local x = qlua.tensor({ { 1, 3, 3, 2 } }, { dtype = F64, device = dev }):requires_grad_()
  local v, i = x:max(2)
  v:sum():backward()
  local want = { 0, 0, 0, 0 }
  want[i:cpu():totable()[1]] = 1
  assert.are.same({ want }, x.grad:cpu():totable())
end)

both("prod and cumprod through zeros (one zero, two zeros) against central differences", function(dev)
  local x = qlua.tensor({ { 1.5, 0, 2, 0.5 }, { 0, 0, 3, 1 }, { 2, -1, 0.5, 0.75 } }, { dtype = F64, device = dev })
  x:requires_grad_()
  assert.is_true(A.gradcheck(function(a) return a:prod(2) end, { x }))
  assert.is_true(A.gradcheck(function(a) return a:cumprod(2) end, { x }))
  assert.is_true(A.gradcheck(function(a) return a:prod() + a:t():prod(1):sum() end, { x }))
  -- prod's gradient is a product of the others, so its own gradient is exact at zeros too
  -- (cumprod's second derivative is exact away from zeros: docs/API.md)
  local g = qlua.tensor({ { 2, 0, 3 }, { 0, 0, 1.5 } }, { dtype = F64, device = dev }):requires_grad_()
  assert.is_true(A.gradgradcheck(function(a) return a:prod(2) end, { g }))
end)

test("ops without a derivative raise; integer results record nothing", function()
  local x = leaf({ 5 }, "cpu")
  local ok, err = pcall(x.lgamma, x)
  assert.is_false(ok)
  assert.truthy(err:match("^lgamma:") and err:match("derivative"), err)
  ok, err = pcall(x.histc, x)
  assert.truthy(not ok and err:match("^histc:"), err)
  assert.are.equal("int64", x:argmax(1):dtype())
  assert.is_false(x:gt(0):requires_grad())
  assert.are.equal(5, x:numel())
  local y = qlua.no_grad(function() return x:lgamma() end)
  assert.is_false(y:requires_grad())
end)

test("argument errors read as they do without autograd", function()
  local x = qlua.zeros({ 2, 3 })
  local ok, err = pcall(function() return x:narrow(1, 1.5, 1) end)
  assert.is_false(ok)
  assert.truthy(err:match("narrow"), err)
  assert.is_nil(err:match("'%?'"), err)
  ok, err = pcall(function() return qlua.zeros("x") end)
  assert.truthy(err:match("zeros"), err)
end)

both("autograd.grad: the gradients as a list, .grad untouched; allow_unused; create_graph", function(dev)
  local x, w = leaf({ 3 }, dev), leaf({ 3 }, dev)
  local y = (x * w):sum()
  local gx, gw = table.unpack(A.grad(y, { x, w }, { retain_graph = true }))
  assert.is_nil(x.grad)
  T.assert_close(gx:cpu():totable(), w:detach():cpu():totable(), 1e-12)
  T.assert_close(gw:cpu():totable(), x:detach():cpu():totable(), 1e-12)
  local u = leaf({ 2 }, dev)
  assert.has_error(function() A.grad(y, { u }, { retain_graph = true }) end)
  assert.is_nil(A.grad(y, { u }, { allow_unused = true, retain_graph = true })[1])
  -- a Hessian-vector product: d/dx (x . v)^2 ... by create_graph
  local z = (x * x * x):sum()
  local g = A.grad(z, { x }, { create_graph = true })[1]
  local h = A.grad(g:sum(), { x })[1]
  T.assert_close(h:cpu():totable(), (x:detach() * 6):cpu():totable(), 1e-12)
end)

both("custom functions: ctx, save_for_backward, needs_input_grad, mark_non_differentiable", function(dev)
  local seen
  local Cube = A.Function{
    forward = function(ctx, x, k)
      ctx:save_for_backward(x)
      seen = ctx.needs_input_grad
      return x ^ 3 * k, x:gt(0)
    end,
    backward = function(ctx, g)
      local x = ctx.saved_tensors[1]
      return g * x * x * 3
    end,
  }
  local x = leaf({ 4 }, dev)
  local y, mask = Cube(x, 1)
  assert.are.same({ true, false }, seen)
  assert.is_false(mask:requires_grad())
  y:sum():backward()
  T.assert_close(x.grad:cpu():totable(), (x:detach() ^ 2 * 3):cpu():totable(), 1e-12)
  assert.is_true(A.gradcheck(function(a) return (Cube.apply(a, 1)) end, { x }))
  -- gradcheck moved x (its differences): what Cube saved is stale, and backward says so
  local z = Cube(x, 1)
  qlua.no_grad(function() x:add_(1) end)
  assert.has_error(function() z:sum():backward() end)
end)

gtest("a custom function around a qlua.kernel", function()
  local k = qlua.kernel([[
    extern "C" __global__ void twice(const double *x, double *y, long long n) {
      long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
      if (i < n) y[i] = 2.0 * x[i];
    }]], "twice")
  local Twice = A.Function{
    forward = function(_, x)
      local y = qlua.empty_like(x)
      k(1, 64, x, y, x:numel())
      return y
    end,
    backward = function(_, g) return g * 2 end,
  }
  local x = leaf({ 10 }, "gpu")
  assert.is_true(A.gradcheck(function(a) return Twice(a) end, { x }))
end)

both("memory: backward lets go of what it saved while the graph's output lives on", function(dev)
  collectgarbage(); collectgarbage()
  local base = qlua.memory(dev).allocated
  local x = qlua.randn({ 256, 256 }, { device = dev, requires_grad = true })
  local bytes = 256 * 256 * 4
  local y = ((x:tanh() * x):exp() * 2):sum()
  collectgarbage(); collectgarbage()
  local held = qlua.memory(dev).allocated - base     -- x, and tanh's, mul's and exp's tensors
  assert.truthy(held >= 4 * bytes, held)
  y:backward()
  collectgarbage(); collectgarbage()
  local after = qlua.memory(dev).allocated - base    -- x and x.grad (y is one element)
  assert.truthy(after <= 2 * bytes + 4096, after)
  assert.are.equal(0, y:dim())
end)

test("memory: a graph's saved tensors go after backward and collection", function()
  collectgarbage(); collectgarbage()
  local before = qlua.memory("cpu").allocated
  do
    local x = qlua.randn({ 256, 256 }, { requires_grad = true })
    local y = (x:tanh() * x):sum()
    y:backward()
    x.grad = nil
  end
  collectgarbage(); collectgarbage()
  assert.are.equal(before, qlua.memory("cpu").allocated)
end)

both("float16 and bfloat16 gradients agree with float32's", function(dev)
  local base = T.random_table({ 3, 4 }, "float32")
  local function grads(dtype)
    local x = qlua.tensor(base, { dtype = dtype, device = dev, requires_grad = true })
    ;(x:tanh() * x):sum():backward()
    return x.grad:float():cpu():totable()
  end
  local ref = grads("float32")
  for _, dt in ipairs({ "float16", "bfloat16" }) do
    local g = grads(dt)
    for i = 1, 3 do for j = 1, 4 do
      assert(math.abs(g[i][j] - ref[i][j]) <= 0.05 * (1 + math.abs(ref[i][j])),
             dt .. " gradient " .. g[i][j] .. " vs " .. ref[i][j])
    end end
  end
end)

-- A leaf's first gradient is taken as its .grad without a copy when nothing else sees that
-- memory; these are the cases where something does.
both("leaves' gradients never share memory with each other or with the caller's gradient", function(dev)
  local x = qlua.tensor({ 0.5, -1.0, 2.0 }, { dtype = "float64", device = dev }):requires_grad_()
  -- the product's gradient reaches x through three sums, and the exp and sin paths read it
  -- after x has taken it
  ;((x + x:exp() + x:sin()) * 3):sum():backward()
  local want = {}
  for i, v in ipairs({ 0.5, -1.0, 2.0 }) do want[i] = 3 * (1 + math.exp(v) + math.cos(v)) end
  T.assert_close(x.grad:cpu():totable(), want, 1e-12)
  -- one tensor to both sides of an add: a's and b's gradients are two tensors
  local a = qlua.tensor({ 1.0, 2.0 }, { dtype = "float64", device = dev }):requires_grad_()
  local b = qlua.tensor({ 3.0, 4.0 }, { dtype = "float64", device = dev }):requires_grad_()
  ;((a + b) * 2):sum():backward()
  a.grad:mul_(10)
  assert.are.same({ 2.0, 2.0 }, b.grad:cpu():totable())
  assert.are.same({ 20.0, 20.0 }, a.grad:cpu():totable())
  -- the caller's gradient passed straight through is copied, not kept
  local c = qlua.tensor({ 1.0, 2.0, 3.0 }, { dtype = "float64", device = dev }):requires_grad_()
  local dy = qlua.tensor({ 0.25, 0.5, 0.75 }, { dtype = "float64", device = dev })
  ;(c + 0):backward(dy)
  dy:fill_(9)
  assert.are.same({ 0.25, 0.5, 0.75 }, c.grad:cpu():totable())
  -- a later backward adds into the kept gradient in place, and only there
  local kept = a.grad
  ;((a + b) * 2):sum():backward()
  assert.is_true(rawequal(kept, a.grad))
  assert.are.same({ 22.0, 22.0 }, a.grad:cpu():totable())
  assert.are.same({ 4.0, 4.0 }, b.grad:cpu():totable())
end)

both("post-accumulate-grad hooks fire once per pass with the leaf's whole gradient; callbacks after the pass", function(dev)
  local o = { dtype = F64, device = dev }
  local w = qlua.randn({ 3, 2 }, o):requires_grad_()
  local b = qlua.randn({ 2 }, o):requires_grad_()
  local x = qlua.randn({ 4, 3 }, o)
  local log = {}
  local hw = w:register_post_accumulate_grad_hook(function(t)
    assert.is_true(rawequal(t, w))
    log[#log + 1] = { "w", t.grad:clone() }
  end)
  b:register_post_accumulate_grad_hook(function()
    log[#log + 1] = { "b" }
    A.queue_callback(function() log[#log + 1] = { "after" } end)
  end)
  -- w reaches the loss twice: its hook waits for both contributions
  local loss = ((x:matmul(w) + b):tanh() ^ 2):sum() + (w * w):sum()
  loss:backward()
  local names = {}
  for i, e in ipairs(log) do names[i] = e[1] end
  assert.are.same({ "b", "w", "after" }, names)
  T.assert_close(log[2][2]:totable(), w.grad:totable(), 0)
  -- a second pass fires again (accumulating); a removed hook no more
  hw.remove()
  log = {}
  loss = (x:matmul(w) + b):sum()
  loss:backward()
  assert.are.same({ { "b" }, { "after" } }, log)
  -- a leaf that is the root itself
  local r = qlua.randn({ 2 }, o):requires_grad_()
  local fired = 0
  r:register_post_accumulate_grad_hook(function() fired = fired + 1 end)
  r:backward(qlua.ones({ 2 }, o))
  assert.are.equal(1, fired)
  -- autograd.grad accumulates into no .grad: no hook fires
  A.grad((r * 2):sum(), r)
  assert.are.equal(1, fired)
  local function err(f, ...) local ok, e = pcall(f, ...); assert.is_false(ok); return tostring(e) end
  assert.truthy(err(w.register_post_accumulate_grad_hook, w, 3):match("a function expected"))
  assert.truthy(err(w.register_post_accumulate_grad_hook, w * 2, print):match("only a leaf that requires grad"))
  assert.truthy(err(A.queue_callback, print):match("^queue_callback: only during a backward pass"))
end)
