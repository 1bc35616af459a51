-- The fused normalisations and poolings (docs/API.md "Neural networks"): layer_norm,
-- rms_norm, group_norm and batch_norm (qlua._norm) against plain-Lua statistics over the
-- tensors' numbers, in every float dtype, on strided inputs and on both devices; their
-- fused backward (qlua._norm_backward) against the plain-Lua formula, gradcheck and
-- gradgradcheck (the recorded-ops backward); batch_norm's running statistics; max and avg
-- pooling's kernels (qlua._pool2d) in every dtype and on views, ceil_mode, NaN, second
-- order; and the errors, which name the op.
local T, qlua, test, gtest, both = require("qlua.testing").spec(_ENV)
local nn = require("qlua.nn")
local A = require("qlua.autograd")
local F = nn.functional
local F64 = "float64"
local DTYPES = { "float64", "float32", "float16", "bfloat16" }
local TOL = { float64 = 1e-10, float32 = 2e-5, float16 = 4e-3, bfloat16 = 3e-2 }

local function rnd(shape, dev, dt) return qlua.randn(shape, { dtype = dt or F64, device = dev }) end
local function numbers(t) return t:detach():cpu():double():reshape({ -1 }):totable() end
local function errmsg(f, ...)
  local ok, e = pcall(f, ...)
  assert.is_false(ok)
  return tostring(e)
end

-- f(key, at, ch) for every element of an (n, c, inner) list, in order: at its 1-based
-- position, ch its 0-based channel, key(b, ch) the statistics it belongs to
local function each(n, c, inner, key, f)
  for b = 0, n - 1 do
    for ch = 0, c - 1 do
      local k = key(b, ch)
      for i = 0, inner - 1 do f(k, (b * c + ch) * inner + i + 1, ch) end
    end
  end
end

-- The reference: x's numbers as a flat list in (n, c, inner) order, normalised over the
-- sets `key(b, ch)` names, with weight and bias per channel; returns y and the statistics
-- by key.
local function norm_ref(X, n, c, inner, key, eps, rms, W, B)
  local sums, cnt = {}, {}
  each(n, c, inner, key, function(k, at)
    sums[k] = (sums[k] or 0) + (rms and 0 or X[at])
    cnt[k] = (cnt[k] or 0) + 1
  end)
  local mean, var = {}, {}
  for k, s in pairs(sums) do mean[k], var[k] = s / cnt[k], 0 end
  each(n, c, inner, key, function(k, at) var[k] = var[k] + (X[at] - mean[k]) ^ 2 / cnt[k] end)
  local Y = {}
  each(n, c, inner, key, function(k, at, ch)
    local y = (X[at] - mean[k]) / math.sqrt(var[k] + eps)
    if W then y = y * W[ch + 1] end
    if B then y = y + B[ch + 1] end
    Y[at] = y
  end)
  return Y, mean, var
end

-- the cases: name, x's shape, the call, the reference's (n, c, inner, key, rms)
local CASES = {
  { "layer_norm over 1 dim", { 4, 3, 10 }, function(x, w, b) return F.layer_norm(x, { 10 }, w, b) end,
    { 12, 10, 1, function(bb) return bb end }, { 10 } },
  { "layer_norm over 2 dims", { 3, 4, 5 }, function(x, w, b) return F.layer_norm(x, { 4, 5 }, w, b) end,
    { 3, 20, 1, function(bb) return bb end }, { 4, 5 } },
  { "rms_norm", { 5, 8 }, function(x, w) return F.rms_norm(x, { 8 }, w, 1e-6) end,
    { 5, 8, 1, function(bb) return bb end, true }, { 8 }, 1e-6 },
  { "group_norm, 3 groups of 2 channels", { 2, 6, 3, 4 }, function(x, w, b) return F.group_norm(x, 3, w, b) end,
    { 2, 6, 12, function(bb, ch) return bb * 3 + ch // 2 end }, { 6 } },
  { "batch_norm, training, N x C x L", { 4, 3, 5 }, function(x, w, b) return F.batch_norm(x, nil, nil, w, b, true) end,
    { 4, 3, 5, function(_, ch) return ch end }, { 3 } },
  { "batch_norm, training, N x C", { 7, 5 }, function(x, w, b) return F.batch_norm(x, nil, nil, w, b, true) end,
    { 7, 5, 1, function(_, ch) return ch end }, { 5 } },
}

both("the norms against plain-Lua statistics, in every float dtype, with and without affine", function(dev)
  for _, c in ipairs(CASES) do
    for _, dt in ipairs(DTYPES) do
      local x = rnd(c[2], dev, dt) * 2 + 0.5
      local w, b = rnd(c[5], dev, dt), rnd(c[5], dev, dt)
      local r = c[4]
      local eps = c[6] or 1e-5
      local want = norm_ref(numbers(x), r[1], r[2], r[3], r[4], eps, r[5], numbers(w), not r[5] and numbers(b) or nil)
      local y = c[3](x, w, not r[5] and b or nil)
      assert.are.equal(dt, y:dtype())
      assert.are.same(x:shape(), y:shape())
      T.assert_close(numbers(y), want, TOL[dt], c[1] .. " " .. dt)
      T.assert_close(numbers(c[3](x)), norm_ref(numbers(x), r[1], r[2], r[3], r[4], eps, r[5]), TOL[dt],
                     c[1] .. " " .. dt .. " without affine")
    end
  end
end)

both("the norms of strided views equal those of their contiguous copies", function(dev)
  local x = rnd({ 6, 4, 5 }, dev):transpose(1, 3)        -- 5 x 4 x 6, not contiguous
  local w, b = rnd({ 6 }, dev), rnd({ 6 }, dev)
  T.assert_close(numbers(F.layer_norm(x, { 6 }, w, b)), numbers(F.layer_norm(x:contiguous(), { 6 }, w, b)), 1e-12)
  local wg = rnd({ 4 }, dev)
  T.assert_close(numbers(F.group_norm(x, 2, wg, wg)), numbers(F.group_norm(x:contiguous(), 2, wg, wg)), 1e-12)
  T.assert_close(numbers(F.batch_norm(x, nil, nil, wg, nil, true)),
                 numbers(F.batch_norm(x:contiguous(), nil, nil, wg, nil, true)), 1e-12)
  -- a weight that is itself a view (every other element of a longer vector)
  local wl = rnd({ 12 }, dev)
  T.assert_close(numbers(F.layer_norm(x, { 6 }, wl:slice(1, 1, 12, 2))),
                 numbers(F.layer_norm(x, { 6 }, wl:slice(1, 1, 12, 2):contiguous())), 1e-12)
end)

-- dx, dw, db from the written-out formula over the reference's sets
local function norm_grad_ref(X, G, n, c, inner, key, eps, rms, W)
  local _, mean, var = norm_ref(X, n, c, inner, key, eps, rms)
  local sg, sgx, cnt = {}, {}, {}
  local function xhat(k, at) return (X[at] - mean[k]) / math.sqrt(var[k] + eps) end
  local DW, DB = {}, {}
  for ch = 1, c do DW[ch], DB[ch] = 0, 0 end
  each(n, c, inner, key, function(k, at, ch)
    local g = G[at] * (W and W[ch + 1] or 1)
    sg[k], sgx[k], cnt[k] = (sg[k] or 0) + g, (sgx[k] or 0) + g * xhat(k, at), (cnt[k] or 0) + 1
    DW[ch + 1] = DW[ch + 1] + G[at] * xhat(k, at)
    DB[ch + 1] = DB[ch + 1] + G[at]
  end)
  local DX = {}
  each(n, c, inner, key, function(k, at, ch)
    local t = G[at] * (W and W[ch + 1] or 1) - xhat(k, at) * sgx[k] / cnt[k]
    if not rms then t = t - sg[k] / cnt[k] end
    DX[at] = t / math.sqrt(var[k] + eps)
  end)
  return DX, DW, DB
end

both("the fused backward against the written-out gradients, in every float dtype", function(dev)
  for _, c in ipairs(CASES) do
    for _, dt in ipairs(DTYPES) do
      local x = (rnd(c[2], dev, dt) * 2 + 0.5):requires_grad_()
      local w, b = rnd(c[5], dev, dt):requires_grad_(), rnd(c[5], dev, dt):requires_grad_()
      local r = c[4]
      local y = c[3](x, w, not r[5] and b or nil)
      local g = rnd(c[2], dev, dt)
      y:backward(g)
      local DX, DW, DB = norm_grad_ref(numbers(x), numbers(g), r[1], r[2], r[3], r[4], c[6] or 1e-5, r[5], numbers(w))
      local tol = TOL[dt] * 4
      T.assert_close(numbers(x.grad), DX, tol, c[1] .. " " .. dt .. " dx")
      T.assert_close(numbers(w.grad), DW, tol, c[1] .. " " .. dt .. " dweight")
      if not r[5] then T.assert_close(numbers(b.grad), DB, tol, c[1] .. " " .. dt .. " dbias") end
      assert.are.same(w:shape(), w.grad:shape())
    end
  end
end)

both("gradcheck and gradgradcheck of every norm (float64), the recorded backward's too", function(dev)
  for _, c in ipairs(CASES) do
    local x = rnd(c[2], dev):requires_grad_()
    local w, b = (rnd(c[5], dev) * 0.5 + 1):requires_grad_(), rnd(c[5], dev):requires_grad_()
    if c[4][5] then
      assert.is_true(A.gradcheck(function(a, v) return c[3](a, v) end, { x, w }), c[1])
      assert.is_true(A.gradgradcheck(function(a, v) return c[3](a, v) end, { x, w }), c[1])
    else
      assert.is_true(A.gradcheck(function(a, v, u) return c[3](a, v, u) end, { x, w, b }), c[1])
      assert.is_true(A.gradgradcheck(function(a, v, u) return c[3](a, v, u) end, { x, w, b }), c[1])
    end
    assert.is_true(A.gradcheck(function(a) return c[3](a) end, { x }), c[1] .. " without affine")
  end
  -- eval batch_norm: the running statistics are constants
  local x = rnd({ 3, 2, 4 }, dev):requires_grad_()
  local rm, rv = rnd({ 2 }, dev), qlua.rand({ 2 }, { dtype = F64, device = dev }) + 0.5
  local w = rnd({ 2 }, dev):requires_grad_()
  assert.is_true(A.gradcheck(function(a, v) return F.batch_norm(a, rm, rv, v, nil, false) end, { x, w }))
  assert.is_true(A.gradgradcheck(function(a, v) return F.batch_norm(a, rm, rv, v, nil, false) end, { x, w }))
end)

-- the fused backward (no create_graph) against the recorded-ops one (create_graph): two
-- independent implementations of one formula
local function both_backwards(f, inputs, g)
  local fused = A.grad(f(table.unpack(inputs)), inputs, { grad_outputs = { g } })
  local recorded = A.grad(f(table.unpack(inputs)), inputs, { grad_outputs = { g }, create_graph = true })
  return fused, recorded
end

both("the fused backward equals the recorded one on many rows, long rows and big batches", function(dev)
  local shapes = {
    { "layer_norm, 3000 rows of 8 (blocks walk many rows)", { 3000, 8 }, function(x, w, b) return F.layer_norm(x, { 8 }, w, b) end, { 8 } },
    { "layer_norm, rows of 9000 (past the one-pass backward)", { 3, 9000 }, function(x, w, b) return F.layer_norm(x, { 9000 }, w, b) end, { 9000 } },
    { "rms_norm, 2500 rows of 40", { 2500, 40 }, function(x, w) return F.rms_norm(x, { 40 }, w) end, { 40 } },
    { "group_norm, 4 groups, inner 50", { 3, 8, 50 }, function(x, w, b) return F.group_norm(x, 4, w, b) end, { 8 } },
    { "batch_norm, inner 40 (per-segment sums)", { 70, 3, 40 }, function(x, w, b) return F.batch_norm(x, nil, nil, w, b, true) end, { 3 } },
    { "batch_norm, 600 x 37 (per-column sums)", { 600, 37 }, function(x, w, b) return F.batch_norm(x, nil, nil, w, b, true) end, { 37 } },
  }
  for _, c in ipairs(shapes) do
    for _, dt in ipairs({ "float64", "float32" }) do
      local x = rnd(c[2], dev, dt):requires_grad_()
      local w, b = rnd(c[4], dev, dt):requires_grad_(), rnd(c[4], dev, dt):requires_grad_()
      local inputs = c[1]:match("^rms") and { x, w } or { x, w, b }
      local fused, recorded = both_backwards(c[3], inputs, rnd(c[2], dev, dt))
      for k = 1, #inputs do
        T.assert_close(numbers(fused[k]), numbers(recorded[k]), dt == "float64" and 1e-9 or 1e-4, c[1] .. " " .. dt .. " gradient " .. k)
      end
    end
  end
end)

both("batch_norm: running statistics move by momentum (unbiased variance); eval uses them", function(dev)
  for _, dt in ipairs({ "float64", "float32", "bfloat16" }) do
    local x = rnd({ 6, 3, 4 }, dev, dt) * 3 + 1
    local rm = qlua.zeros({ 3 }, { dtype = dt, device = dev })
    local rv = qlua.ones({ 3 }, { dtype = dt, device = dev })
    F.batch_norm(x, rm, rv, nil, nil, true, 0.25)
    local _, mean, var = norm_ref(numbers(x), 6, 3, 4, function(_, ch) return ch end, 1e-5)
    local wm, wv = {}, {}
    for ch = 0, 2 do
      wm[ch + 1] = 0.25 * mean[ch]
      wv[ch + 1] = 0.75 + 0.25 * var[ch] * 24 / 23
    end
    T.assert_close(numbers(rm), wm, TOL[dt] * 4, dt .. " running_mean")
    T.assert_close(numbers(rv), wv, TOL[dt] * 4, dt .. " running_var")
    local y = F.batch_norm(x, rm, rv, nil, nil, false)
    local X, RM, RV, want = numbers(x), numbers(rm), numbers(rv), {}
    for k = 1, #X do
      local ch = ((k - 1) // 4) % 3 + 1
      want[k] = (X[k] - RM[ch]) / math.sqrt(RV[ch] + 1e-5)
    end
    T.assert_close(numbers(y), want, TOL[dt] * 2, dt .. " eval")
  end
end)

both("the norms' errors name the op and the values", function(dev)
  local x = rnd({ 2, 4, 3 }, dev)
  assert.truthy(errmsg(F.layer_norm, x, { 3 }, rnd({ 4 }, dev)):match("^layer_norm: the weight is 4, an input of 2x4x3 needs the normalized shape"))
  assert.truthy(errmsg(F.layer_norm, x, { 3 }, rnd({ 3 }, dev, "float32")):match("^layer_norm: the weight is float32, the input float64"))
  assert.truthy(errmsg(F.group_norm, x, 3):match("^group_norm: 4 channels do not split into 3 groups"))
  assert.truthy(errmsg(F.group_norm, x, 2, rnd({ 3 }, dev)):match("^group_norm: the weight is 3, an input of 2x4x3 needs 1%-D of its channels"))
  assert.truthy(errmsg(F.batch_norm, rnd({ 1, 3 }, dev), nil, nil, nil, nil, true):match("^batch_norm: training needs more than one value per channel"))
  assert.truthy(errmsg(F.batch_norm, x, nil, nil, nil, nil, false):match("^batch_norm: evaluation needs running_mean and running_var"))
  assert.truthy(errmsg(F.batch_norm, x, rnd({ 3 }, dev), rnd({ 4 }, dev), nil, nil, false):match("^batch_norm: the running_mean must be 1%-D of 4, got 3"))
  assert.truthy(errmsg(F.layer_norm, qlua.ones({ 2, 3 }, { dtype = "int32", device = dev }), { 3 }):match("^layer_norm: a float input expected, got int32"))
  assert.truthy(errmsg(F.layer_norm, x, { 3 }, nil, nil, -1):match("^layer_norm: eps must be a finite number >= 0, got %-1"))
  assert.truthy(errmsg(qlua._norm, "rms", x, nil, rnd({ 3 }, dev), { normalized = 1 }):match("^rms_norm: takes no bias"))
  assert.truthy(errmsg(qlua._norm_backward, "layer", rnd({ 2, 4 }, dev), x, nil, nil, rnd({ 8 }, dev), { normalized = 1 }, true)
                :match("^layer_norm: the gradient is float64 2x4, the input float64 2x4x3"))
  if dev == "gpu" then
    assert.truthy(errmsg(F.layer_norm, x, { 3 }, rnd({ 3 }, "cpu")):match("^layer_norm: .*gpu.*cpu"))
  end
  -- empty inputs: empty outputs, zero parameter gradients
  local e = rnd({ 0, 3 }, dev):requires_grad_()
  local we = rnd({ 3 }, dev):requires_grad_()
  local ye = F.layer_norm(e, { 3 }, we)
  assert.are.same({ 0, 3 }, ye:shape())
  ye:sum():backward()
  assert.are.same({ 0, 0, 0 }, numbers(we.grad))
end)

-- ------------------------------------------------------------- pooling kernels
local function pool_ref(X, N, C, H, W, k, s, p, d, ceil, how, opts)
  local function out(n, kk, ss, pp, dd)
    local span = dd * (kk - 1) + 1
    local room = n + 2 * pp - span
    local m = (ceil and -((-room) // ss) or room // ss) + 1
    if ceil and (m - 1) * ss >= n + pp then m = m - 1 end
    return m
  end
  local P, Q = out(H, k[1], s[1], p[1], d[1]), out(W, k[2], s[2], p[2], d[2])
  local Y, I = {}, {}
  for pl = 0, N * C - 1 do
    for i = 0, P - 1 do
      for j = 0, Q - 1 do
        local hs, ws = i * s[1] - p[1], j * s[2] - p[2]
        local best, at, sum, inside = -math.huge, nil, 0, 0
        for a = 0, k[1] - 1 do
          for b = 0, k[2] - 1 do
            local ih, iw = hs + a * d[1], ws + b * d[2]
            if ih >= 0 and ih < H and iw >= 0 and iw < W then
              local v = X[pl * H * W + ih * W + iw + 1]
              if at == nil or v > best or v ~= v then best, at = v, ih * W + iw + 1 end
              sum, inside = sum + v, inside + 1
            end
          end
        end
        local o = (pl * P + i) * Q + j + 1
        if how == "max" then
          Y[o], I[o] = best, at
        else
          local he, we = math.min(hs + k[1], H + p[1]), math.min(ws + k[2], W + p[2])
          local div = opts.divisor_override or (opts.count_include_pad ~= false and (he - hs) * (we - ws) or inside)
          Y[o] = sum / div
        end
      end
    end
  end
  return Y, I, P, Q
end

local POOLS = {
  { 3, 2, 1, 1, false }, { 2, 2, 0, 1, true }, { 3, 2, 1, 2, true }, { { 3, 2 }, { 1, 2 }, { 1, 0 }, 1, false },
}
local function pair(v) return type(v) == "table" and v or { v, v } end

both("max_pool2d and avg_pool2d kernels in every float dtype, on views, with ceil_mode", function(dev)
  for _, dt in ipairs(DTYPES) do
    local x = rnd({ 2, 3, 9, 7 }, dev, dt)
    local X = numbers(x)
    for _, c in ipairs(POOLS) do
      local k, s, p, d, ceil = pair(c[1]), pair(c[2]), pair(c[3]), pair(c[4]), c[5]
      local v, i = F.max_pool2d(x, k, { stride = s, padding = p, dilation = d, ceil_mode = ceil, return_indices = true })
      local want, wi, P, Q = pool_ref(X, 2, 3, 9, 7, k, s, p, d, ceil, "max")
      assert.are.same({ 2, 3, P, Q }, v:shape())
      T.assert_close(numbers(v), want, 0, dt)
      assert.are.same(wi, numbers(i))
      for _, o in ipairs({ {}, { count_include_pad = false }, { divisor_override = 5 } }) do
        local a = F.avg_pool2d(x, k, { stride = s, padding = p, ceil_mode = ceil, count_include_pad = o.count_include_pad,
                                       divisor_override = o.divisor_override })
        local wa = pool_ref(X, 2, 3, 9, 7, k, s, p, { 1, 1 }, ceil, "avg", o)
        T.assert_close(numbers(a), wa, TOL[dt], dt .. " avg")
      end
    end
  end
  -- a view: the transposed planes pool as their contiguous copy
  local xt = rnd({ 2, 3, 7, 9 }, dev):transpose(3, 4)
  T.assert_close(numbers(F.max_pool2d(xt, 3, { stride = 2 })), numbers(F.max_pool2d(xt:contiguous(), 3, { stride = 2 })), 0)
  T.assert_close(numbers(F.avg_pool2d(xt, 2)), numbers(F.avg_pool2d(xt:contiguous(), 2)), 1e-12)
  -- 3-D input (C, H, W), and a NaN wins its window
  local x3 = rnd({ 2, 4, 4 }, dev)
  x3[{ 1, 2, 3 }] = 0 / 0
  local m3, i3 = F.max_pool2d(x3, 2, { return_indices = true })
  assert.are.same({ 2, 2, 2 }, m3:shape())
  local mv = m3:cpu():totable()
  assert.is_true(mv[1][1][2] ~= mv[1][1][2])
  assert.are.equal(7, i3:cpu():totable()[1][1][2])   -- row 2, column 3 of 4: (2 - 1) * 4 + 3
end)

both("pooling gradients: gradcheck and gradgradcheck, the max's to its indices", function(dev)
  local x = rnd({ 2, 2, 6, 5 }, dev):requires_grad_()
  for _, c in ipairs(POOLS) do
    local k, s, p, d, ceil = pair(c[1]), pair(c[2]), pair(c[3]), pair(c[4]), c[5]
    assert.is_true(A.gradcheck(function(a) return F.max_pool2d(a, k, { stride = s, padding = p, dilation = d, ceil_mode = ceil }) end, { x }))
    assert.is_true(A.gradcheck(function(a) return F.avg_pool2d(a, k, { stride = s, padding = p, ceil_mode = ceil, count_include_pad = false }) end, { x }))
  end
  assert.is_true(A.gradgradcheck(function(a) return F.max_pool2d(a, 3, { stride = 2, padding = 1 }) end, { x }))
  assert.is_true(A.gradgradcheck(function(a) return F.avg_pool2d(a, 3, { stride = 2, padding = 1, ceil_mode = true }) end, { x }))
  -- 16-bit backward: avg's gradient is each output's share, max's goes where the max was
  local xb = rnd({ 1, 1, 4, 4 }, dev, "bfloat16"):requires_grad_()
  F.avg_pool2d(xb, 2):sum():backward()
  T.assert_close(numbers(xb.grad), numbers(qlua.full({ 16 }, 0.25)), 0)
  local xm = qlua.arange(1, 17, { dtype = "float16", device = dev }):reshape({ 1, 1, 4, 4 }):requires_grad_()
  F.max_pool2d(xm, 2):sum():backward()
  local want = {}
  for k = 1, 16 do want[k] = (k == 6 or k == 8 or k == 14 or k == 16) and 1 or 0 end
  assert.are.same(want, numbers(xm.grad))
end)

both("the pooling errors name the op and the values", function(dev)
  local x = rnd({ 1, 2, 5, 5 }, dev)
  assert.truthy(errmsg(F.avg_pool2d, x, 2, { divisor_override = 0 }):match("^avg_pool2d: divisor_override must be an integer >= 1, got 0"))
  assert.truthy(errmsg(F.max_pool2d, x, 6):match("^max_pool2d: an input of 1x2x5x5 is smaller than the window %(6%)"))
  assert.truthy(errmsg(F.max_pool2d, qlua.ones({ 1, 1, 4, 4 }, { dtype = "int64", device = dev }), 2):match("^max_pool2d: a float input expected, got int64"))
  assert.truthy(errmsg(qlua._pool2d, "avg_backward", rnd({ 1, 2, 3, 3 }, dev), x, { kernel_size = 2 }):match("^avg_pool2d_backward: an input of 1x2x5x5 gives an output of float64 1x2x2x2, the gradient is float64 1x2x3x3"))
  assert.truthy(errmsg(qlua._pool2d, "max", x, { kernel_size = 2, dilation = 0 }):match("^max_pool2d: kernel_size, stride and dilation must be >= 1"))
end)
