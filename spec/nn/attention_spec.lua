-- Scaled dot-product attention (docs/API.md "Attention"): qlua.nn.functional's
-- scaled_dot_product_attention (qlua._attention) against a plain-Lua reference over the
-- tensors' numbers — scores, masks, causal, grouped-query heads, dropout drawn from the
-- Lua Philox — in every float dtype, on views and on both devices, through each kernel
-- (tiled and rows on the GPU, attention_path says which); the fused backward against
-- autograd through the naive matmul-softmax-matmul form, gradcheck and gradgradcheck;
-- rotary embeddings against the written-out rotation; and the errors, which name the op.
local T, qlua, test, gtest, both = require("qlua.testing").spec(_ENV)
local nn = require("qlua.nn")
local A = require("qlua.autograd")
local F = nn.functional
local F64 = "float64"
local DTYPES = { "float64", "float32", "float16", "bfloat16" }
local TOL = { float64 = 1e-10, float32 = 2e-5, float16 = 5e-3, bfloat16 = 3e-2 }

local function rnd(shape, dev, dt) return qlua.randn(shape, { dtype = dt or F64, device = dev }) end
local function numbers(t) return t:detach():cpu():double():reshape({ -1 }):totable() end
local function errmsg(f, ...)
  local ok, e = pcall(f, ...)
  assert.is_false(ok)
  return tostring(e)
end

-- fn on both devices, and on the GPU a second time with cuDNN disabled: float16 and bfloat16
-- calls cuDNN's fused attention takes then run on the tiled kernels instead
local function both_paths(name, fn)
  both(name, fn)
  gtest(name .. " (gpu, without cuDNN: the tiled kernels)", function()
    qlua.set_cudnn_enabled(false)
    local ok, e = pcall(fn, "gpu")
    qlua.set_cudnn_enabled(true)
    if not ok then error(e, 0) end
  end)
end

-- The reference over flat row-major lists. q (b, hq, sq, d), k (b, hk, sk, d), v (b, hk, sk,
-- dv); o: scale, causal, mask(b, h, i, j) -> nil (masked) or an added number, drop (p, seed,
-- offset). Returns o (b, hq, sq, dv) and lse (b, hq, sq).
local function attn_ref(Q, K, V, g, o)
  local O, L = {}, {}
  local scale = o.scale or 1 / math.sqrt(g.d)
  for b = 0, g.b - 1 do
    for h = 0, g.hq - 1 do
      local kh = h // (g.hq // g.hk)
      for i = 0, g.sq - 1 do
        local s, m = {}, -math.huge
        for j = 0, g.sk - 1 do
          local x = nil
          if not (o.causal and j > i) then
            local add = 0
            if o.mask then add = o.mask(b, h, i, j) end
            if add ~= nil then
              x = add
              for c = 0, g.d - 1 do
                x = x + scale * Q[((b * g.hq + h) * g.sq + i) * g.d + c + 1] * K[((b * g.hk + kh) * g.sk + j) * g.d + c + 1]
              end
              if x == -math.huge then x = nil end
            end
          end
          s[j] = x
          if x and x > m then m = x end
        end
        local l = 0
        for j = 0, g.sk - 1 do if s[j] then l = l + math.exp(s[j] - m) end end
        local row = (b * g.hq + h) * g.sq + i
        L[row + 1] = l > 0 and m + math.log(l) or -math.huge
        for c = 0, g.dv - 1 do
          local acc = 0
          for j = 0, g.sk - 1 do
            if s[j] then
              local p = math.exp(s[j] - m) / l
              if o.drop then
                local u = T.philox_uniform(o.drop.seed, o.drop.offset + row * g.sk + j, "float32")
                p = u < o.drop.p and 0 or p / (1 - o.drop.p)
              end
              acc = acc + p * V[((b * g.hk + kh) * g.sk + j) * g.dv + c + 1]
            end
          end
          O[row * g.dv + c + 1] = acc
        end
      end
    end
  end
  return O, L
end

local function geom(b, hq, hk, sq, sk, d, dv)
  return { b = b, hq = hq, hk = hk, sq = sq, sk = sk, d = d, dv = dv or d }
end

local function qkv(g, dev, dt)
  return rnd({ g.b, g.hq, g.sq, g.d }, dev, dt), rnd({ g.b, g.hk, g.sk, g.d }, dev, dt),
         rnd({ g.b, g.hk, g.sk, g.dv }, dev, dt)
end

-- the cases: name, geometry, opts for F, opts for the reference (made from the tensors)
local function cases(dev)
  local bool_mask = qlua.rand({ 5, 7 }, { device = dev }):gt(0.3)   -- (sq, sk), broadcast
  local bm = numbers(bool_mask)
  local float_mask = rnd({ 2, 1, 5, 7 }, dev)                       -- (b, 1, sq, sk)
  local fm = numbers(float_mask)
  return {
    { "plain, sk > sq, dv != d", geom(2, 3, 3, 5, 7, 4, 6), {}, {} },
    { "causal, sq < sk", geom(2, 2, 2, 5, 7, 8), { is_causal = true }, { causal = true } },
    { "causal, sq > sk (rows past the keys see them all)", geom(1, 2, 2, 9, 4, 8), { is_causal = true }, { causal = true } },
    { "bool mask broadcast over batch and heads", geom(2, 3, 3, 5, 7, 4),
      { attn_mask = bool_mask }, { mask = function(_, _, i, j) return bm[i * 7 + j + 1] ~= 0 and 0 or nil end } },
    { "float mask of (b, 1, sq, sk)", geom(2, 3, 3, 5, 7, 4), { attn_mask = float_mask },
      { mask = function(b, _, i, j) return fm[(b * 5 + i) * 7 + j + 1] end } },
    { "grouped-query, 6 query heads on 2", geom(2, 6, 2, 5, 7, 8), { enable_gqa = true }, {} },
    { "scale given", geom(1, 2, 2, 4, 4, 8), { scale = 0.7 }, { scale = 0.7 } },
    { "odd lengths across tiles, head_dim 80", geom(1, 2, 2, 67, 130, 80), { is_causal = true }, { causal = true } },
    { "head_dim 64", geom(1, 2, 1, 70, 65, 64), { enable_gqa = true }, {} },
    { "head_dim 128", geom(1, 1, 1, 66, 70, 128), {}, {} },
    { "head_dim 200, value dim 136", geom(1, 2, 2, 9, 11, 200, 136), {}, {} },
    { "head_dim 300 (the GPU's rows kernel)", geom(1, 1, 1, 5, 6, 300, 20), {}, {} },
    { "keys a multiple of 128 (cuDNN's backward), causal, grouped", geom(1, 4, 2, 64, 128, 64),
      { is_causal = true, enable_gqa = true }, { causal = true } },
    { "keys 128 of head_dim 128", geom(1, 1, 1, 70, 128, 128), {}, {} },
  }
end

both_paths("scaled_dot_product_attention against the plain-Lua reference, in every float dtype", function(dev)
  for _, c in ipairs(cases(dev)) do
    local g = c[2]
    for _, dt in ipairs(DTYPES) do
      local q, k, v = qkv(g, dev, dt)
      local want, lse_want = attn_ref(numbers(q), numbers(k), numbers(v), g, c[4])
      local o, lse = qlua._attention(q, k, v, c[3].attn_mask, c[3])
      assert.are.equal(dt, o:dtype())
      assert.are.same({ g.b, g.hq, g.sq, g.dv }, o:shape())
      assert.are.equal(dt == F64 and F64 or "float32", lse:dtype())
      T.assert_close(numbers(o), want, TOL[dt], c[1] .. " " .. dt)
      T.assert_close(numbers(lse), lse_want, TOL[dt], c[1] .. " " .. dt .. " lse")
      T.assert_close(numbers(F.scaled_dot_product_attention(q, k, v, c[3])), want, TOL[dt], c[1] .. " through F")
    end
  end
end)

both("dropout: the mask is Philox's uniform draw per score, the same on every device", function(dev)
  local g = geom(2, 2, 2, 6, 9, 8)
  for _, dt in ipairs({ F64, "float32", "bfloat16" }) do
    local q, k, v = qkv(g, dev, dt)
    qlua.seed(123)
    local opts = { dropout_p = 0.3, is_causal = true }
    local o = qlua._attention(q, k, v, nil, opts)
    assert.are.equal(123, opts.seed)
    local want = attn_ref(numbers(q), numbers(k), numbers(v), g,
                          { causal = true, drop = { p = 0.3, seed = opts.seed, offset = opts.offset } })
    T.assert_close(numbers(o), want, TOL[dt], "dropout " .. dt)
    -- the generator moved past the scores' counters: the next call drops differently
    local opts2 = { dropout_p = 0.3 }
    qlua._attention(q, k, v, nil, opts2)
    assert.are.equal(opts.offset + g.b * g.hq * g.sq * g.sk, opts2.offset)
  end
  -- p = 1 drops everything; p = 0 is plain attention
  local q, k, v = qkv(g, dev)
  T.assert_close(numbers(F.scaled_dot_product_attention(q, k, v, { dropout_p = 1 })), numbers(qlua.zeros({ 2, 2, 6, 8 })), 0)
  T.assert_close(numbers(F.scaled_dot_product_attention(q, k, v, { dropout_p = 0 })),
                 (attn_ref(numbers(q), numbers(k), numbers(v), g, {})), 1e-10)
end)

gtest("dropout draws the same mask on the GPU as on the CPU for one seed", function()
  local g = geom(2, 3, 3, 17, 70, 16)
  local q, k, v = qkv(g, "cpu")
  qlua.seed(9)
  local oc = F.scaled_dot_product_attention(q, k, v, { dropout_p = 0.4 })
  qlua.seed(9)
  local og = F.scaled_dot_product_attention(q:gpu(), k:gpu(), v:gpu(), { dropout_p = 0.4 })
  T.assert_close(numbers(og), numbers(oc), 1e-10)
  qlua.seed(9)
  local of = F.scaled_dot_product_attention(q:float():gpu(), k:float():gpu(), v:float():gpu(), { dropout_p = 0.4 })
  T.assert_close(numbers(of), numbers(oc), 1e-5, "the tiled kernel's mask")
end)

both("strided views (q as (b, s, h, d) transposed) equal their contiguous copies; 2-D and 3-D inputs", function(dev)
  for _, dt in ipairs({ F64, "float32" }) do
    local qs, ks, vs = rnd({ 2, 9, 3, 8 }, dev, dt), rnd({ 2, 11, 3, 8 }, dev, dt), rnd({ 2, 11, 3, 8 }, dev, dt)
    local q, k, v = qs:transpose(2, 3), ks:transpose(2, 3), vs:transpose(2, 3)
    assert.is_false(q:is_contiguous())
    local tol = dt == F64 and 1e-12 or 1e-5
    T.assert_close(numbers(F.scaled_dot_product_attention(q, k, v, { is_causal = true })),
                   numbers(F.scaled_dot_product_attention(q:contiguous(), k:contiguous(), v:contiguous(), { is_causal = true })), tol)
    -- a head dim that is not the last stride-1 dim is copied
    local qt = rnd({ 2, 3, 8, 9 }, dev, dt):transpose(3, 4)
    T.assert_close(numbers(F.scaled_dot_product_attention(qt, k, v)),
                   numbers(F.scaled_dot_product_attention(qt:contiguous(), k, v)), tol)
  end
  local q2, k2, v2 = rnd({ 5, 4 }, dev), rnd({ 6, 4 }, dev), rnd({ 6, 3 }, dev)
  local o2 = F.scaled_dot_product_attention(q2, k2, v2)
  assert.are.same({ 5, 3 }, o2:shape())
  T.assert_close(numbers(o2), (attn_ref(numbers(q2), numbers(k2), numbers(v2), geom(1, 1, 1, 5, 6, 4, 3), {})), 1e-10)
  local o3 = F.scaled_dot_product_attention(q2:unsqueeze(1), k2:unsqueeze(1), v2:unsqueeze(1))
  assert.are.same({ 1, 5, 3 }, o3:shape())
  -- leading batch dims of several sizes
  local q5, k5, v5 = rnd({ 2, 3, 2, 4, 8 }, dev), rnd({ 2, 3, 2, 5, 8 }, dev), rnd({ 2, 3, 2, 5, 8 }, dev)
  local o5 = F.scaled_dot_product_attention(q5, k5, v5)
  assert.are.same({ 2, 3, 2, 4, 8 }, o5:shape())
  T.assert_close(numbers(o5), numbers(F.scaled_dot_product_attention(q5:reshape({ 6, 2, 4, 8 }), k5:reshape({ 6, 2, 5, 8 }),
                                                                     v5:reshape({ 6, 2, 5, 8 }))), 1e-12)
end)

both("rows whose keys are all masked give 0 and lse -inf; no keys at all give 0; no queries give empties", function(dev)
  local g = geom(1, 2, 2, 4, 5, 8)
  local q, k, v = qkv(g, dev)
  local mask = qlua.ones({ 4, 5 }, { dtype = "bool", device = dev })
  mask[2] = false   -- query row 2 sees nothing
  local o, lse = qlua._attention(q, k, v, mask, {})
  local on, ln = numbers(o), numbers(lse)
  for h = 0, 1 do
    for c = 1, 8 do assert.are.equal(0, on[(h * 4 + 1) * 8 + c]) end
    assert.are.equal(-math.huge, ln[h * 4 + 2])
  end
  q:requires_grad_()
  F.scaled_dot_product_attention(q, k, v, { attn_mask = mask }):sum():backward()
  for _, x in ipairs(numbers(q.grad)) do assert.is_true(x == x) end
  local none = F.scaled_dot_product_attention(q:detach(), k:narrow(3, 1, 0), v:narrow(3, 1, 0))
  T.assert_close(numbers(none), numbers(qlua.zeros({ 1, 2, 4, 8 })), 0)
  local empty = F.scaled_dot_product_attention(q:detach():narrow(3, 1, 0), k, v)
  assert.are.same({ 1, 2, 0, 8 }, empty:shape())
end)

-- the naive form through autograd: softmax(q k^T scale + mask) (dropped) v, GQA by repeat
local function naive(q, k, v, o, drop)
  local n = q:dim()
  local group = q:size(n - 2) // k:size(n - 2)
  if group > 1 then
    local function widen(t)
      local s = t:shape()
      return t:unsqueeze(n - 1):expand({ s[1], s[2], group, s[3], s[4] }):reshape({ s[1], s[2] * group, s[3], s[4] })
    end
    k, v = widen(k), widen(v)
  end
  local s = q:matmul(k:transpose(n - 1, n)) * (o.scale or 1 / math.sqrt(q:size(n)))
  if o.attn_mask then
    if o.attn_mask:dtype() == "bool" then s = s:masked_fill(o.attn_mask:logical_not(), -math.huge)
    else s = s + o.attn_mask end
  end
  if o.is_causal then
    s = s:masked_fill(qlua.ones({ q:size(n - 1), k:size(n - 1) }, { dtype = "bool", device = q:device() }):triu(1), -math.huge)
  end
  local p = s:softmax(n)
  if drop then p = p * drop end
  return p:matmul(v)
end

both_paths("the fused backward against autograd through the naive form, in every float dtype", function(dev)
  for _, c in ipairs(cases(dev)) do
    local g = c[2]
    for _, dt in ipairs(DTYPES) do
      if not (c[1]:match("head_dim 300") and dt ~= F64) then
        local q, k, v = qkv(g, dev, dt)
        local gout = rnd({ g.b, g.hq, g.sq, g.dv }, dev, dt)
        local opts = {}
        for key, val in pairs(c[3]) do opts[key] = val end
        if opts.attn_mask and opts.attn_mask:dtype() ~= "bool" then opts.attn_mask = opts.attn_mask:to(dt) end
        local fused = A.grad(F.scaled_dot_product_attention(q:requires_grad_(), k:requires_grad_(), v:requires_grad_(), opts),
                             { q, k, v }, { grad_outputs = { gout } })
        local q64, k64, v64 = q:detach():double():requires_grad_(), k:detach():double():requires_grad_(), v:detach():double():requires_grad_()
        local o64 = {}
        for key, val in pairs(opts) do o64[key] = val end
        if o64.attn_mask and o64.attn_mask:dtype() ~= "bool" then o64.attn_mask = o64.attn_mask:double() end
        local ref = A.grad(naive(q64, k64, v64, o64), { q64, k64, v64 }, { grad_outputs = { gout:double() } })
        for i, name in ipairs({ "dq", "dk", "dv" }) do
          T.assert_close(numbers(fused[i]), numbers(ref[i]), TOL[dt] * 6, c[1] .. " " .. dt .. " " .. name)
        end
      end
    end
  end
end)

both("the backward with dropout against the naive form with the same mask", function(dev)
  local g = geom(2, 4, 2, 6, 9, 8)
  for _, dt in ipairs({ F64, "float32" }) do
    local q, k, v = qkv(g, dev, dt)
    qlua.seed(31)
    local opts = { dropout_p = 0.25, enable_gqa = true }
    local gout = rnd({ 2, 4, 6, 8 }, dev, dt)
    qlua.seed(31)
    local o = F.scaled_dot_product_attention(q:requires_grad_(), k:requires_grad_(), v:requires_grad_(), opts)
    local fused = A.grad(o, { q, k, v }, { grad_outputs = { gout } })
    -- the mask as a tensor from the Lua Philox (seed 31, offset 0)
    local z = {}
    for r = 0, 2 * 4 * 6 * 9 - 1 do z[r + 1] = T.philox_uniform(31, r, "float32") < 0.25 and 0 or 1 / 0.75 end
    local drop = qlua.tensor(z, { dtype = F64, device = dev }):reshape({ 2, 4, 6, 9 })
    local q64, k64, v64 = q:detach():double():requires_grad_(), k:detach():double():requires_grad_(), v:detach():double():requires_grad_()
    local ref = A.grad(naive(q64, k64, v64, {}, drop), { q64, k64, v64 }, { grad_outputs = { gout:double() } })
    for i = 1, 3 do T.assert_close(numbers(fused[i]), numbers(ref[i]), TOL[dt] * 6, "dropout " .. dt .. " gradient " .. i) end
  end
end)

both("gradcheck (float64) of the memory-efficient kernels, and gradgradcheck of the recorded backward", function(dev)
  local q, k, v = rnd({ 1, 2, 3, 4 }, dev):requires_grad_(), rnd({ 1, 2, 5, 4 }, dev):requires_grad_(),
                  rnd({ 1, 2, 5, 3 }, dev):requires_grad_()
  local fmask = rnd({ 3, 5 }, dev)
  for _, opts in ipairs({ {}, { is_causal = true }, { attn_mask = fmask }, { scale = 0.3 } }) do
    local f = function(a, b, c) return F.scaled_dot_product_attention(a, b, c, opts) end
    assert.is_true(A.gradcheck(f, { q, k, v }))
    assert.is_true(A.gradgradcheck(f, { q, k, v }))
  end
  local kg, vg = rnd({ 1, 1, 5, 4 }, dev):requires_grad_(), rnd({ 1, 1, 5, 3 }, dev):requires_grad_()
  local f = function(a, b, c) return F.scaled_dot_product_attention(a, b, c, { enable_gqa = true }) end
  assert.is_true(A.gradcheck(f, { q, kg, vg }))
  assert.is_true(A.gradgradcheck(f, { q, kg, vg }))
  -- dropout: each call reseeds, so every evaluation drops the same scores
  local fd = function(a, b, c)
    qlua.seed(5)
    return F.scaled_dot_product_attention(a, b, c, { dropout_p = 0.3 })
  end
  assert.is_true(A.gradcheck(fd, { q, k, v }))
end)

both("attention_path names the kernels a call takes", function(dev)
  local function path(d, dt)
    local q = rnd({ 1, 1, 4, d }, dev, dt)
    return F.attention_path(q, q, q)
  end
  if dev == "cpu" then
    assert.are.equal("cpu blocked (float32)", path(8, "float32"))
    assert.are.equal("cpu blocked (float64)", path(8, F64))
    assert.are.equal("cpu blocked (float32)", (path(8, "bfloat16")))
    -- rows closer than their length (a query broadcast along the sequence) go by rows
    local q = rnd({ 1, 2, 1, 8 }, dev):expand({ 1, 2, 5, 8 })
    local k, v = rnd({ 1, 2, 6, 8 }, dev), rnd({ 1, 2, 6, 8 }, dev)
    local f, b = F.attention_path(q, k, v)
    assert.are.equal("cpu rows (float64)", f)
    assert.are.equal(f, b)
    T.assert_close(numbers(F.scaled_dot_product_attention(q, k, v, { is_causal = true })),
                   numbers(F.scaled_dot_product_attention(q:contiguous(), k, v, { is_causal = true })), 1e-12)
    -- the rows' backward against the blocked one: the same gradients
    local gout = rnd({ 1, 2, 5, 8 }, dev)
    k:requires_grad_(); v:requires_grad_()
    local rows = A.grad(F.scaled_dot_product_attention(q, k, v, { is_causal = true }), { k, v }, { grad_outputs = { gout } })
    local blocked = A.grad(F.scaled_dot_product_attention(q:contiguous(), k, v, { is_causal = true }), { k, v },
                           { grad_outputs = { gout } })
    T.assert_close(numbers(rows[1]), numbers(blocked[1]), 1e-12, "dk")
    T.assert_close(numbers(rows[2]), numbers(blocked[2]), 1e-12, "dv")
  else
    assert.are.equal("gpu tiled (float32 accumulate, head_dim <= 64)", path(64, "float32"))
    assert.are.equal("gpu rows (float64 accumulate)", path(64, F64))
    -- cuDNN's fused attention forward; its backward wants keys in multiples of 128
    local q80 = rnd({ 1, 1, 64, 80 }, dev, "bfloat16")
    local f, b = F.attention_path(q80, q80, q80)
    assert.are.equal("cuDNN fused attention", f)
    assert.are.equal("gpu tiled (float32 accumulate, head_dim <= 128); cuDNN not taken: cuDNN 9.14 backward: key "
                     .. "length a multiple of 128", b)
    -- a generation's one-row steps stay off cuDNN (a plan per key length)
    assert.are.equal("gpu tiled (float32 accumulate, head_dim <= 128); cuDNN not taken: cuDNN path: 64 query rows "
                     .. "or more (each new shape compiles a plan)", (path(80, "bfloat16")))
    local q = rnd({ 1, 2, 128, 64 }, dev, "float16")
    f, b = F.attention_path(q, q, q, { is_causal = true })
    assert.are.equal("cuDNN fused attention", f)
    assert.are.equal("cuDNN fused attention", b)
    assert.truthy(F.attention_path(q, q, q, { attn_mask = qlua.ones({ 128, 128 }, { dtype = "bool", device = dev }) })
                    :match("^gpu tiled .*; cuDNN not taken: cuDNN path: no attn_mask$"))
    qlua.set_cudnn_enabled(false)
    f = F.attention_path(q, q, q)
    qlua.set_cudnn_enabled(true)
    assert.are.equal("gpu tiled (float32 accumulate, head_dim <= 64); cuDNN not taken: cuDNN disabled by "
                     .. "qlua.set_cudnn_enabled", f)
    f, b = path(300, "float16")
    assert.are.equal("gpu rows (float32 accumulate); cuDNN not taken: cuDNN path: head dims multiples of 8 up to 256", f)
    assert.are.equal(f, b)
  end
end)

both("rotary embeddings turn each pair by position times frequency; offset continues the positions", function(dev)
  local x = rnd({ 2, 3, 5, 8 }, dev)
  local X, Y = numbers(x), numbers(F.rotary(x, { base = 100 }))
  local want = {}
  for r = 0, 2 * 3 * 5 - 1 do
    local pos = r % 5
    for i = 0, 3 do
      local ang = pos * 100 ^ (-2 * i / 8)
      local a, b = X[r * 8 + i + 1], X[r * 8 + i + 5]
      want[r * 8 + i + 1] = a * math.cos(ang) - b * math.sin(ang)
      want[r * 8 + i + 5] = b * math.cos(ang) + a * math.sin(ang)
    end
  end
  T.assert_close(Y, want, 1e-12)
  -- rows 4..5 with offset 3 are rows 4..5 of the whole
  local tail = F.rotary(x:narrow(3, 4, 2), { base = 100, offset = 3 })
  T.assert_close(numbers(tail), numbers(F.rotary(x, { base = 100 }):narrow(3, 4, 2)), 1e-12)
  local xs = rnd({ 3, 4 }, dev):requires_grad_()
  assert.is_true(A.gradcheck(function(a) return F.rotary(a) end, { xs }))
  assert.truthy(errmsg(F.rotary, rnd({ 3, 5 }, dev)):match("rotary: the last dim must be even, got 5"))
end)

both("errors name the op and the values", function(dev)
  local q, k, v = rnd({ 1, 4, 3, 8 }, dev), rnd({ 1, 2, 5, 8 }, dev), rnd({ 1, 2, 5, 6 }, dev)
  local sdpa = F.scaled_dot_product_attention
  assert.truthy(errmsg(sdpa, q, k, v):match("4 query heads and 2 key/value heads %(pass enable_gqa"))
  assert.truthy(errmsg(sdpa, rnd({ 1, 3, 3, 8 }, dev), k, v, { enable_gqa = true }):match("3 query heads are not a multiple of 2"))
  assert.truthy(errmsg(sdpa, q, rnd({ 1, 4, 5, 7 }, dev), rnd({ 1, 4, 5, 6 }, dev)):match("do not fit a query of 1x4x3x8"))
  assert.truthy(errmsg(sdpa, q, k:float(), v, { enable_gqa = true }):match("one dtype, got float64, float32 and float64"))
  assert.truthy(errmsg(sdpa, q, k, v, { enable_gqa = true, attn_mask = rnd({ 4, 5 }, dev) }):match("attn_mask of 4x5 does not broadcast to the scores' 1x4x3x5"))
  assert.truthy(errmsg(sdpa, q, k, v, { enable_gqa = true, attn_mask = rnd({ 3, 5 }, dev), is_causal = true }):match("attn_mask and is_causal cannot both be given"))
  assert.truthy(errmsg(sdpa, q, k, v, { enable_gqa = true, dropout_p = 1.5 }):match("dropout_p must be a number in %[0, 1%], got 1.5"))
  assert.truthy(errmsg(sdpa, q, k, v, { enable_gqa = true, attn_mask = qlua.ones({ 3, 5 }, { dtype = "int32", device = dev }) }):match("attn_mask must be bool or float, got int32"))
  assert.truthy(errmsg(sdpa, rnd({ 3, 8 }, dev):long(), rnd({ 3, 8 }, dev):long(), rnd({ 3, 8 }, dev):long()):match("a float query expected, got int64"))
  assert.truthy(errmsg(sdpa, rnd({ 8 }, dev), rnd({ 8 }, dev), rnd({ 8 }, dev)):match("rank >= 2"))
  assert.truthy(errmsg(sdpa, q, k, v, { enable_gqa = true, attn_mask = rnd({ 3, 5 }, dev):requires_grad_() }):match("attn_mask gets no gradient"))
  assert.truthy(errmsg(sdpa, q, k, v, { enable_gqa = true, scale = "x" }):match("scale must be a number"))
  if dev == "gpu" then
    assert.truthy(errmsg(sdpa, q, k:cpu(), v, { enable_gqa = true }):match("scaled_dot_product_attention: .*gpu:0.*cpu"))
  end
end)

-- MultiheadAttention written out with the layer's own parameters: softmax over heads of
-- (x Wq^T + bq)(x Wk^T + bk)^T / sqrt(head_dim) + mask, times (x Wv^T + bv), then out_proj
local function mha_ref(m, q, k, v, add)   -- q, k, v (N, L, E) batch-first; add (N, H, L, S) or nil
  local e, h = m.embed_dim, m.num_heads
  local w, b = m.in_proj_weight, m.in_proj_bias
  local function proj(x, i)
    local y = x:matmul(w:narrow(1, i * e + 1, e):t()) + b:narrow(1, i * e + 1, e)
    return y:reshape({ x:size(1), x:size(2), h, e // h }):transpose(2, 3)
  end
  local s = proj(q, 0):matmul(proj(k, 1):transpose(3, 4)) / math.sqrt(e // h)
  if add then s = s + add end
  local p = s:softmax(4)
  local o = p:matmul(proj(v, 2)):transpose(2, 3):reshape({ q:size(1), q:size(2), e })
  return o:matmul(m.out_proj.weight:t()) + m.out_proj.bias, p:mean(2)
end

both("MultiheadAttention against the written-out formula: layouts, masks, need_weights", function(dev)
  local m = nn.MultiheadAttention(8, 2, { dtype = F64, device = dev })
  -- PyTorch's names and initialisation: biases zero, in_proj xavier
  local names = {}
  for _, kv in ipairs(m:named_parameters()) do names[#names + 1] = kv[1] end
  table.sort(names)
  assert.are.same({ "in_proj_bias", "in_proj_weight", "out_proj.bias", "out_proj.weight" }, names)
  assert.are.equal(0, m.in_proj_bias:detach():abs():max())
  for _, x in ipairs(numbers(m.in_proj_weight)) do assert.is_true(math.abs(x) <= math.sqrt(6 / (8 + 24)) + 1e-12) end
  -- non-zero biases, so the test sees them
  qlua.no_grad(function() m.in_proj_bias:normal_(); m.out_proj.bias:normal_() end)
  local q, k, v = rnd({ 3, 4, 8 }, dev), rnd({ 6, 4, 8 }, dev), rnd({ 6, 4, 8 }, dev)   -- (L, N, E), (S, N, E)
  local want, wts = mha_ref(m, q:transpose(1, 2), k:transpose(1, 2), v:transpose(1, 2))
  local out, weights = m(q, k, v)
  T.assert_close(numbers(out), numbers(want:transpose(1, 2)), 1e-12, "sequence-first")
  T.assert_close(numbers(weights), numbers(wts), 1e-12, "averaged weights")
  local fast = m(q, k, v, { need_weights = false })
  T.assert_close(numbers(fast), numbers(out), 1e-12, "need_weights = false (the fused kernels)")
  -- key_padding_mask (true: padding) and a bool attn_mask (true: not allowed)
  local kpm = qlua.zeros({ 4, 6 }, { dtype = "bool", device = dev })
  kpm[{ 2, { 5, 6 } }] = true
  local am = qlua.zeros({ 3, 6 }, { dtype = "bool", device = dev })
  am[{ 1, 1 }] = true
  local add = qlua.zeros({ 4, 1, 3, 6 }, { dtype = F64, device = dev })
  add = add:masked_fill(kpm:reshape({ 4, 1, 1, 6 }), -math.huge):masked_fill(am, -math.huge)
  local want2 = mha_ref(m, q:transpose(1, 2), k:transpose(1, 2), v:transpose(1, 2), add)
  local got = m(q, k, v, { key_padding_mask = kpm, attn_mask = am, need_weights = false })
  T.assert_close(numbers(got), numbers(want2:transpose(1, 2)), 1e-12, "masks")
  local float_am = rnd({ 3, 6 }, dev)
  local want3 = mha_ref(m, q:transpose(1, 2), k:transpose(1, 2), v:transpose(1, 2), float_am)
  T.assert_close(numbers(m(q, k, v, { attn_mask = float_am })), numbers(want3:transpose(1, 2)), 1e-12, "float attn_mask")
  -- batch_first and unbatched
  local mb = nn.MultiheadAttention(8, 2, { dtype = F64, device = dev, batch_first = true })
  mb:load_state_dict(m:state_dict())
  T.assert_close(numbers(mb(q:transpose(1, 2), k:transpose(1, 2), v:transpose(1, 2))), numbers(want), 1e-12, "batch_first")
  local one = m(q:select(2, 1), k:select(2, 1), v:select(2, 1))
  T.assert_close(numbers(one), numbers(want:select(1, 1)), 1e-12, "unbatched")
  -- gradients reach every parameter through the fused path
  m(q, k, v, { need_weights = false }):sum():backward()
  for _, kv in ipairs(m:named_parameters()) do assert.is_true(kv[2].grad:abs():max() > 0, kv[1]) end
  assert.truthy(errmsg(nn.MultiheadAttention, 10, 3):match("embed_dim %(10%) must be divisible by num_heads %(3%)"))
  assert.truthy(errmsg(m, rnd({ 3, 4, 5 }, dev), k, v):match("embed dims 5, 8, 8 given, the layer takes 8, 8, 8"))
end)

both("TransformerBlock: token-by-token generation through a KVCache equals the causal forward", function(dev)
  for _, dt in ipairs({ F64, "float32" }) do
    local blk = nn.TransformerBlock(16, 4, { dtype = dt, device = dev })
    blk:eval()
    local names = {}
    for _, kv in ipairs(blk:named_parameters()) do names[#names + 1] = kv[1] end
    table.sort(names)
    assert.are.same({ "attn.c_attn.bias", "attn.c_attn.weight", "attn.c_proj.bias", "attn.c_proj.weight",
                      "ln_1.bias", "ln_1.weight", "ln_2.bias", "ln_2.weight", "mlp.c_fc.bias",
                      "mlp.c_fc.weight", "mlp.c_proj.bias", "mlp.c_proj.weight" }, names)
    local x = rnd({ 2, 7, 16 }, dev, dt)
    local full = qlua.no_grad(function() return blk(x) end)
    local cache = nn.KVCache(2, 4, 10, 4, { dtype = dt, device = dev })
    local rows = {}
    qlua.no_grad(function()
      rows[1] = blk(x:narrow(2, 1, 3), cache)        -- a prompt of 3, then one at a time
      for t = 4, 7 do rows[#rows + 1] = blk(x:narrow(2, t, 1), cache) end
    end)
    assert.are.equal(7, cache.len)
    local tol = dt == F64 and 1e-12 or 1e-5
    T.assert_close(numbers(qlua.cat(rows, 2)), numbers(full), tol, "cached " .. dt)
    -- append fills the cache's own storage and hands back views of it (no copy, no new cache)
    local k0 = cache.k
    local kall = cache:append(rnd({ 2, 4, 1, 4 }, dev, dt), rnd({ 2, 4, 1, 4 }, dev, dt))
    assert.is_true(rawequal(k0, cache.k))
    cache.k[{ 1, 1, 8, 1 }] = 42
    assert.are.equal(42, kall[{ 1, 1, 8, 1 }]:item())
    assert.truthy(errmsg(function() qlua.no_grad(function() blk(x:narrow(2, 1, 3), cache) end) end)
                    :match("KVCache: 8 rows and 3 new ones pass max_len 10"))
  end
end)
