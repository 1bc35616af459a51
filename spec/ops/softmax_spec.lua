-- The softmax family (docs/API.md "Softmax and cross-entropy"): softmax and
-- log_softmax along a dim and qlua.cross_entropy, against plain-Lua references (the
-- max-subtracted formula in double) in every dtype and layout, with empty and 0-d tensors,
-- NaN and infinities, inputs of 1e4, rows near 1e4 and 1e6 to tight tolerances, and bad
-- arguments. Every case is a function of the device: it runs on the CPU here and, through
-- gtest, on the GPU (pending without one), where the row lengths reach each of
-- softmax.cu's kernels.
local T, qlua, test, gtest = require("qlua.testing").spec(_ENV)

local NaN, inf = 0 / 0, math.huge

------------------------------------------------------------------------ references

local function numeric(flat)
  local out = {}
  for i, v in ipairs(flat) do
    if type(v) == "boolean" then out[i] = v and 1 or 0 else out[i] = v + 0.0 end
  end
  return out
end

-- softmax (log: log_softmax) of a flat row-major list along dim: the max (NaN wins), the
-- sum of exp(x - max), then exp(x - max) / sum or x - max - log(sum).
local function ref_softmax(flat, shape, dim, log)
  local outer, n, inner = T.ref.split_dim(shape, dim)
  local out = {}
  for o = 0, outer - 1 do
    for i = 0, inner - 1 do
      local function at(k) return (o * n + k) * inner + i + 1 end
      local m = -inf
      for k = 0, n - 1 do
        local x = flat[at(k)]
        if m == m and (x > m or x ~= x) then m = x end
      end
      local s = 0.0
      for k = 0, n - 1 do s = s + math.exp(flat[at(k)] - m) end
      for k = 0, n - 1 do
        local v = flat[at(k)] - m
        out[at(k)] = log and v - math.log(s) or math.exp(v) / s
      end
    end
  end
  return out
end

local function check_softmax(t, flat, shape, dim, dtype, log, tol, what)
  local name = log and "log_softmax" or "softmax"
  local r = t[name](t, dim)
  local rd = T.result_dtype("softmax", dtype)
  assert.equal(rd, r:dtype(), what .. ": dtype")
  T.assert_shape(r, shape, what)
  local expected = ref_softmax(numeric(flat), shape, dim, log)
  for i = 1, #expected do expected[i] = T.as_dtype(expected[i], rd) end
  T.assert_close((T.values_of(r)), expected, tol or T.tol[rd] * 10, what)
end

local SHAPES = { { 7 }, { 3, 5 }, { 2, 3, 4 }, { 1, 6 }, { 4, 1 } }

------------------------------------------------------------------------ softmax cases

local function every_dtype_layout_dim(device)
  for _, log in ipairs({ false, true }) do
    for _, dtype in ipairs(T.all_dtypes) do
      for _, shape in ipairs(SHAPES) do
        local flat = T.random_list(T.numel(shape), dtype, dtype == "uint8" and { lo = 0, hi = 20, zero = true } or nil)
        local nested = T.unflatten(flat, shape)
        for _, layout in ipairs(T.layouts) do
          local t = T.make(nested, dtype, layout, device, shape)
          for dim = 1, #shape do
            check_softmax(t, flat, shape, dim, dtype, log, nil, string.format("%s %s %s %s dim %d on %s",
              log and "log_softmax" or "softmax", dtype, T.shape_str(shape), layout, dim, device))
          end
        end
      end
    end
  end
end

local function empty_and_0d(device)
  for _, name in ipairs({ "softmax", "log_softmax" }) do
    for _, dtype in ipairs(T.all_dtypes) do
      for _, shape in ipairs({ { 0 }, { 2, 0 }, { 0, 3 } }) do
        local t = qlua.empty(shape, { dtype = dtype, device = device })
        for dim = 1, #shape do
          local r = t[name](t, dim)
          T.assert_shape(r, shape, name .. " of an empty " .. dtype)
          assert.equal(T.result_dtype("softmax", dtype), r:dtype())
        end
      end
      local s = qlua.tensor(T.random_value(dtype), { dtype = dtype, device = device })
      local r = s[name](s, 1)
      T.assert_shape(r, {}, name .. " of a 0-d " .. dtype)
      assert.equal(name == "softmax" and 1 or 0, r:item())
    end
  end
end

local function special_values(device)
  for _, dtype in ipairs(T.float_dtypes) do
    local function f(rows) return qlua.tensor(rows, { dtype = dtype, device = device }) end
    -- no overflow at 1e4: the max is subtracted first
    local big = f({ { 1e4, 1e4 - 1, 0 }, { -1e4, -1e4, -1e4 } })
    local e1 = math.exp(-1)
    T.assert_close(big:softmax(2), { { 1 / (1 + e1), e1 / (1 + e1), 0 }, { 1 / 3, 1 / 3, 1 / 3 } }, 1e-6)
    T.assert_close(big:log_softmax(2), { { -math.log(1 + e1), -1 - math.log(1 + e1), -1e4 - math.log(1 + e1) },
      { -math.log(3), -math.log(3), -math.log(3) } }, 1e-6)
    -- a NaN or a +inf makes its row NaN, a row of only -inf too; -inf beside finite is 0
    local x = f({ { 1, NaN, 2 }, { 1, inf, 2 }, { -inf, -inf, -inf }, { -inf, 0, 0 }, { 1, 2, 3 } })
    local sm, lsm = x:softmax(2), x:log_softmax(2)
    T.assert_equal(sm[1], { NaN, NaN, NaN }); T.assert_equal(lsm[1], { NaN, NaN, NaN })
    T.assert_equal(sm[2], { NaN, NaN, NaN }); T.assert_equal(lsm[2], { NaN, NaN, NaN })
    T.assert_equal(sm[3], { NaN, NaN, NaN }); T.assert_equal(lsm[3], { NaN, NaN, NaN })
    T.assert_close(sm[4], { 0, 0.5, 0.5 }, 1e-7)
    T.assert_close(lsm[4], { -inf, -math.log(2), -math.log(2) }, 1e-7)
    T.assert_close(sm[5], ref_softmax({ 1, 2, 3 }, { 3 }, 1, false), 1e-6)
    -- the same along dim 1 (the column kernels)
    local xt = x:t():contiguous()
    T.assert_close(xt:softmax(1):t(), sm, 1e-6)
    T.assert_close(xt:log_softmax(1):t(), lsm, 1e-6)
  end
  assert.equal("float64", qlua.tensor({ 1, 2, 3 }, { device = device }):softmax(1):dtype())
  assert.equal("float64", qlua.tensor({ true, false }, { device = device }):log_softmax(1):dtype())
end

-- Row lengths that reach every GPU kernel: a warp per row (<= 512), a block of 128 .. 1024
-- per row (<= 16384, vectors when n % 4 == 0, single elements otherwise), the long-row
-- kernel (> 16384), and a thread per column (dim not the last).
local function large(device)
  local cases = {
    { { 300, 10 }, 2 }, { { 40, 513 }, 2 }, { { 20, 1023 }, 2 }, { { 20, 2048 }, 2 },
    { { 8, 4100 }, 2 }, { { 8, 8192 }, 2 }, { { 4, 16384 }, 2 }, { { 3, 16385 }, 2 },
    { { 2, 40000 }, 2 }, { { 500, 30 }, 1 }, { { 3, 700, 5 }, 2 },
  }
  for _, c in ipairs(cases) do
    local shape, dim = c[1], c[2]
    for _, dtype in ipairs(T.float_dtypes) do
      local flat = T.random_list(T.numel(shape), dtype, { lo = -20, hi = 20 })
      local t = T.from_flat(flat, shape, dtype, device)
      for _, log in ipairs({ false, true }) do
        check_softmax(t, flat, shape, dim, dtype, log, dtype == "float32" and 1e-5 or nil,
          string.format("%s %s %s dim %d on %s", log and "log_softmax" or "softmax", dtype,
            T.shape_str(shape), dim, device))
      end
    end
  end
end

-- Rows far from 0: 1e4 and 1e6 plus values in [-20, 20]. log_softmax must be computed as
-- (x - max) - log(sum): x - max is exact there and log(sum) small. x - (max + log(sum))
-- rounds max + log(sum) at the rows' magnitude, one error for a whole row of up to half an
-- ulp: 4.9e-4 at 1e4 in float32, 0.031 at 1e6, 9.1e-13 and 5.8e-11 in float64. The
-- reference is the same formula in double on the stored values, its sum compensated
-- (Neumaier), so it is good to about an ulp of float64 for rows of 40000; every element is
-- compared alone: absolutely for log_softmax and cross_entropy, relatively for softmax,
-- within an ulp or two of the result for logsumexp.
local FAR = {
  float32 = { abs = 3e-5, rel = 1e-5, ulp = 2 ^ -23 },
  float64 = { abs = 2e-13, rel = 2e-13, ulp = 2 ^ -52 },
}

-- Shapes (and dims) that reach every GPU kernel: a warp per row (10), a block per row of
-- 128 .. 1024 threads (513 single elements; 2048, 4096, 16384 vectors; 8190 vectors in
-- float64 only), the long-row kernel (16385, 40000), and a thread per column (dim 1 of
-- 500 x 30, dim 2 of 3 x 700 x 5). Several rows each: the wrong formula's error is a
-- row's own, anywhere within half an ulp.
local FAR_SHAPES = {
  { { 8, 10 }, 2 }, { { 6, 513 }, 2 }, { { 6, 2048 }, 2 }, { { 4, 4096 }, 2 },
  { { 4, 8190 }, 2 }, { { 3, 16384 }, 2 }, { { 3, 16385 }, 2 }, { { 3, 40000 }, 2 },
  { { 500, 30 }, 1 }, { { 3, 700, 5 }, 2 },
}

-- log_softmax, softmax and logsumexp of finite values along dim (the slices' results in
-- row-major order of the other dims). Locals: a global's lookup costs more in a spec.
local exp, log, abs, max = math.exp, math.log, math.abs, math.max
local function ref_accurate(flat, shape, dim)
  local outer, n, inner = T.ref.split_dim(shape, dim)
  local lsm, sm, lse = {}, {}, {}
  for o = 0, outer - 1 do
    for i = 0, inner - 1 do
      local function at(k) return (o * n + k) * inner + i + 1 end
      local m = -inf
      for k = 0, n - 1 do m = max(m, flat[at(k)]) end
      local s, c = 0.0, 0.0
      for k = 0, n - 1 do
        local t = exp(flat[at(k)] - m)
        local u = s + t
        if s >= t then c = c + ((s - u) + t) else c = c + ((t - u) + s) end
        s = u
      end
      s = s + c
      local ls = log(s)
      for k = 0, n - 1 do
        local d = flat[at(k)] - m
        lsm[at(k)], sm[at(k)] = d - ls, exp(d) / s
      end
      lse[o * inner + i + 1] = m + ls
    end
  end
  return lsm, sm, lse
end

-- Every element within atol + rtol * |expected| (a NaN fails).
local function assert_each_close(actual, expected, atol, rtol, what)
  assert.equal(#expected, #actual, what .. ": elements")
  for i = 1, #expected do
    local a, e = actual[i], expected[i]
    local err, allowed = abs(a - e), atol + rtol * abs(e)
    if not (err <= allowed) then
      error(string.format("%s: element %d is %.17g, expected %.17g (error %.3g, allowed %.3g)",
        what, i, a, e, err, allowed), 2)
    end
  end
end

-- count values in base + [-20, 20]: in float32 multiples of its spacing there (2^-10 at
-- 1e4, 2^-4 at 1e6: the whole interval is one binade), so each is stored exactly.
local function far_values(count, base, dtype)
  local flat = {}
  if dtype == "float32" then
    local step = 2.0 ^ (math.floor(math.log(base, 2)) - 23)
    local k = math.floor(20 / step)
    for i = 1, count do flat[i] = base + math.random(-k, k) * step end
  else
    for i = 1, count do flat[i] = base + (40 * math.random() - 20) end
  end
  return flat
end

local function far_from_zero(device)
  for _, base in ipairs({ 1e4, 1e6 }) do
    for _, dtype in ipairs(T.float_dtypes) do
      local tol = FAR[dtype]
      for _, c in ipairs(FAR_SHAPES) do
        local shape, dim = c[1], c[2]
        local flat = far_values(T.numel(shape), base, dtype)
        local t = T.from_flat(flat, shape, dtype, device)
        local what = string.format("%s near %g, %s dim %d on %s", dtype, base, T.shape_str(shape),
          dim, device)
        local lsm, sm, lse = ref_accurate(flat, shape, dim)
        assert_each_close((T.values_of(t:log_softmax(dim))), lsm, tol.abs, 0, "log_softmax " .. what)
        assert_each_close((T.values_of(t:softmax(dim))), sm, 0, tol.rel, "softmax " .. what)
        assert_each_close((T.values_of(t:logsumexp(dim))), lse, 0, tol.ulp, "logsumexp " .. what)
      end
    end
  end
end

-- cross_entropy composes log_softmax: its losses near 1e4 and 1e6 are as exact, for class
-- indices (with and without label smoothing) and for probabilities.
local function cross_entropy_far(device)
  for _, base in ipairs({ 1e4, 1e6 }) do
    for _, dtype in ipairs(T.float_dtypes) do
      for _, NC in ipairs({ { 8, 10 }, { 4, 2048 } }) do
        local N, C = NC[1], NC[2]
        local flat = far_values(N * C, base, dtype)
        local lt = T.from_flat(flat, { N, C }, dtype, device)
        local lsm = ref_accurate(flat, { N, C }, 2)
        local classes, probs = {}, {}
        for r = 1, N do
          classes[r] = math.random(1, C)
          local total = 0.0
          for k = 1, C do
            local q = math.random() + 0.01
            probs[(r - 1) * C + k], total = q, total + q
          end
          for k = 1, C do probs[(r - 1) * C + k] = probs[(r - 1) * C + k] / total end
        end
        local what = string.format("cross_entropy %s near %g, %dx%d on %s", dtype, base, N, C, device)
        for _, eps in ipairs({ 0, 0.1 }) do
          local want = {}
          for r = 0, N - 1 do
            local sumlp = 0.0
            for k = 1, C do sumlp = sumlp + lsm[r * C + k] end
            want[r + 1] = -(1 - eps) * lsm[r * C + classes[r + 1]] - eps / C * sumlp
          end
          local loss = qlua.cross_entropy(lt, classes, { reduction = "none", label_smoothing = eps })
          assert_each_close((T.values_of(loss)), want, FAR[dtype].abs, 0, what .. " eps " .. eps)
        end
        local want = {}
        for r = 0, N - 1 do
          local l = 0.0
          for k = 1, C do l = l - probs[r * C + k] * lsm[r * C + k] end
          want[r + 1] = l
        end
        local pt = T.from_flat(probs, { N, C }, "float64", device)
        local loss = qlua.cross_entropy(lt, pt, { reduction = "none" })
        assert_each_close((T.values_of(loss)), want, FAR[dtype].abs, 0, what .. " probabilities")
      end
    end
  end
end

local function softmax_errors(device)
  local t = qlua.zeros({ 2, 3 }, { device = device })
  for _, name in ipairs({ "softmax", "log_softmax" }) do
    assert.equal(name .. ": dim 3 out of range (1..2)", T.error_of(function() return t[name](t, 3) end))
    assert.equal(name .. ": dim 0 out of range (1..2)", T.error_of(function() return t[name](t, 0) end))
    assert.equal(name .. ": dim 2 out of range (a 0-d tensor takes dim 1)",
      T.error_of(function() local s = qlua.tensor(1.5, { device = device }); return s[name](s, 2) end))
    assert.truthy(T.error_of(function() return t[name](t) end):find("number expected", 1, true))
  end
end

------------------------------------------------------------------------ cross_entropy

-- The losses of each sample (rows of a flat N x C list) for class indices (1-based, or
-- ignore) or probabilities, PyTorch's formula, and the reduction.
local function ref_cross_entropy(logits, N, C, target, opts)
  opts = opts or {}
  local eps = opts.label_smoothing or 0
  local lp = ref_softmax(logits, { N, C }, 2, true)
  local losses, total, count = {}, 0.0, 0
  for r = 0, N - 1 do
    local loss, sumlp = 0.0, 0.0
    for c = 1, C do sumlp = sumlp + lp[r * C + c] end
    if type(target[1]) == "number" and math.type(target[1]) == "integer" then
      local y = target[r + 1]
      if opts.ignore_index ~= nil and y == opts.ignore_index then
        loss = 0.0
      else
        loss = -(1 - eps) * lp[r * C + y] - eps / C * sumlp
        count = count + 1
      end
    else
      for c = 1, C do
        local q = (1 - eps) * target[r * C + c] + eps / C
        loss = loss - q * lp[r * C + c]
      end
      count = count + 1
    end
    losses[r + 1] = loss
    total = total + loss
  end
  local reduction = opts.reduction or "mean"
  if reduction == "none" then return losses end
  if reduction == "sum" then return total end
  return total / count
end

local function cross_entropy_cases(device)
  local N, C = 6, 5
  for _, dtype in ipairs({ "float32", "float64", "int64" }) do
    local logits = T.random_list(N * C, dtype, dtype == "int64" and { lo = -5, hi = 5, zero = true } or nil)
    local lt = T.from_flat(logits, { N, C }, dtype, device)
    local rd = T.result_dtype("softmax", dtype)
    local classes = {}
    for i = 1, N do classes[i] = math.random(1, C) end
    local probs = T.random_list(N * C, "float64", { lo = 0, hi = 1, positive = true })
    for _, reduction in ipairs({ "mean", "sum", "none" }) do
      for _, eps in ipairs({ 0, 0.1 }) do
        local opts = { reduction = reduction, label_smoothing = eps }
        local what = string.format("cross_entropy %s %s eps %g on %s", dtype, reduction, eps, device)
        -- class indices: int64, int32, a Lua table
        for _, target in ipairs({ T.from_flat(classes, { N }, "int64", device),
                                  T.from_flat(classes, { N }, "int32", device), classes }) do
          local loss = qlua.cross_entropy(lt, target, opts)
          assert.equal(rd, loss:dtype(), what)
          local want = ref_cross_entropy(numeric(logits), N, C, classes, opts)
          if reduction == "none" then T.assert_shape(loss, { N }, what) else T.assert_shape(loss, {}, what) end
          T.assert_close(reduction == "none" and (T.values_of(loss)) or { loss:item() },
            reduction == "none" and want or { want }, 1e-5, what)
        end
        -- probabilities, float32 and float64, in a transposed layout
        for _, pd in ipairs(T.float_dtypes) do
          local pt = T.make(T.unflatten(probs, { N, C }), pd, "transposed", device, { N, C })
          local loss = qlua.cross_entropy(lt, pt, opts)
          assert.equal(rd, loss:dtype(), what .. " probabilities")
          local want = ref_cross_entropy(numeric(logits), N, C, numeric(T.values_of(pt)), opts)
          T.assert_close(reduction == "none" and (T.values_of(loss)) or { loss:item() },
            reduction == "none" and want or { want }, 1e-5, what .. " probabilities")
        end
      end
      -- ignore_index: those samples count for nothing, and mean divides by the others
      local ig = T.copy_list(classes)
      ig[2], ig[5] = -100, -100
      local opts = { reduction = reduction, ignore_index = -100 }
      local loss = qlua.cross_entropy(lt, T.from_flat(ig, { N }, "int64", device), opts)
      local want = ref_cross_entropy(numeric(logits), N, C, ig, opts)
      T.assert_close(reduction == "none" and (T.values_of(loss)) or { loss:item() },
        reduction == "none" and want or { want }, 1e-5, "ignore_index " .. reduction)
    end
  end
  -- one sample: C logits and a 0-d class (or a number)
  local one = qlua.tensor({ 1.0, 2.0, 3.0 }, { device = device })
  local want = -(3 - math.log(math.exp(1) + math.exp(2) + math.exp(3)))
  T.assert_close(qlua.cross_entropy(one, 3):item(), want, 1e-6)
  T.assert_shape(qlua.cross_entropy(one, qlua.tensor(3, { device = device }), { reduction = "none" }), {})
  -- stable: logits of 1e4 give a finite loss
  local big = qlua.tensor({ { 1e4, 0, -1e4 } }, { device = device })
  T.assert_close(qlua.cross_entropy(big, { 1 }):item(), 0, 1e-6)
  T.assert_close(qlua.cross_entropy(big, { 2 }):item(), 1e4, 1e-6)
  -- every sample ignored: mean is NaN (0 / 0), sum 0; no samples: mean NaN, none empty
  local all = qlua.cross_entropy(big, { 7 }, { ignore_index = 7 })
  assert.is_true(all:item() ~= all:item())
  assert.equal(0, qlua.cross_entropy(big, { 7 }, { ignore_index = 7, reduction = "sum" }):item())
  local none = qlua.zeros({ 0, 4 }, { device = device })
  T.assert_shape(qlua.cross_entropy(none, qlua.zeros(0, { dtype = "int64", device = device }),
    { reduction = "none" }), { 0 })
end

local function cross_entropy_errors(device)
  local lt = qlua.zeros({ 3, 4 }, { device = device })
  local function err(...) local a = table.pack(...); return T.error_of(function() return qlua.cross_entropy(table.unpack(a, 1, a.n)) end) end
  assert.equal("cross_entropy: class 5 out of range (1..4) at position 2", err(lt, { 1, 5, 2 }))
  assert.equal("cross_entropy: class 0 out of range (1..4) at position 1", err(lt, { 0, 1, 2 }))
  assert.equal("cross_entropy: class -100 out of range (1..4) at position 3", err(lt, { 1, 1, -100 }))
  assert.equal("cross_entropy: class indices of shape 2 for logits of shape 3x4 (expected 3)", err(lt, { 1, 2 }))
  assert.equal("cross_entropy: probabilities of shape 3x3 for logits of shape 3x4",
    err(lt, qlua.zeros({ 3, 3 }, { device = device })))
  assert.equal("cross_entropy: logits must be C or N x C, got shape 2x3x4",
    err(qlua.zeros({ 2, 3, 4 }, { device = device }), { 1, 1 }))
  assert.equal("cross_entropy: no classes (logits of shape 3x0)", err(qlua.zeros({ 3, 0 }, { device = device }), { 1, 1, 1 }))
  assert.equal("cross_entropy: ignore_index needs class indices, not probabilities",
    err(lt, qlua.zeros({ 3, 4 }, { device = device }), { ignore_index = 1 }))
  assert.equal("cross_entropy: target must be class indices (an integer dtype) or probabilities "
    .. "(a float dtype), got bool", err(lt, qlua.tensor({ true, false, true }, { device = device })))
  assert.equal("cross_entropy: label_smoothing 1.5 is not in [0, 1]", err(lt, { 1, 1, 1 }, { label_smoothing = 1.5 }))
  assert.equal('cross_entropy: opts.reduction must be "mean", "sum" or "none", got avg',
    err(lt, { 1, 1, 1 }, { reduction = "avg" }))
  assert.equal("cross_entropy: unknown option 'weight' (reduction, ignore_index, label_smoothing)",
    err(lt, { 1, 1, 1 }, { weight = 1 }))
  assert.equal("cross_entropy: opts.ignore_index must be an integer, got 1.5",
    err(lt, { 1, 1, 1 }, { ignore_index = 1.5 }))
  if device == "gpu" then
    assert.truthy(err(lt, qlua.tensor({ 1, 1, 1 })):find("cross_entropy: tensors on", 1, true))
  end
end

local CASES = {
  { "softmax and log_softmax in every dtype, layout and dim", every_dtype_layout_dim },
  { "softmax of empty and 0-d tensors", empty_and_0d },
  { "softmax at 1e4, with NaN and infinities", special_values },
  { "softmax of long rows and columns (every GPU kernel)", large },
  { "log_softmax, softmax and logsumexp of rows near 1e4 and 1e6 (every GPU kernel)", far_from_zero },
  { "cross_entropy of logits near 1e4 and 1e6", cross_entropy_far },
  { "softmax errors name the op and the values", softmax_errors },
  { "cross_entropy: indices, probabilities, reductions, ignore_index, label_smoothing", cross_entropy_cases },
  { "cross_entropy errors name the values and positions", cross_entropy_errors },
}

describe("softmax family on the CPU", function()
  for _, c in ipairs(CASES) do test(c[1], function() c[2]("cpu") end) end
end)

describe("softmax family on the GPU", function()
  for _, c in ipairs(CASES) do gtest(c[1], function() c[2]("gpu") end) end
  gtest("the GPU gives the CPU's results", function()
    for _, dtype in ipairs(T.all_dtypes) do
      local shape = { 6, 7, 8 }
      local c = T.from_flat(T.random_list(T.numel(shape), dtype), shape, dtype, "cpu")
      local g = c:gpu()
      for dim = 1, 3 do
        T.assert_close(g:softmax(dim):cpu(), c:softmax(dim), 1e-5, "softmax " .. dtype)
        T.assert_close(g:log_softmax(dim):cpu(), c:log_softmax(dim), 1e-5, "log_softmax " .. dtype)
      end
    end
    local logits = qlua.randn(16, 10)
    local target = qlua.randint(1, 10, 16)
    T.assert_close(qlua.cross_entropy(logits:gpu(), target:gpu()):item(),
      qlua.cross_entropy(logits, target):item(), 1e-5)
  end)
end)
