--[[
qlua.testing.ref — the plain-Lua references of qlua.testing (T.ref), installed by
qlua.testing (require that; this file returns the installer).

Each op is written from its contract in docs/API.md, in float64 or exact integers, over
nested tables (T.array's { shape =, data = } form inside): the "CPU twin" a spec compares
a tensor op with. The scalar references the specs share live here too, once: erf, lgamma,
sign, the C library's rounding functions with their signed zeros, tanh, and the tables of
unary and binary ops (T.ref.unary, T.ref.binary) with the inputs each spec draws for them.
]]

return function(T)
  -- Internal array form used by the references: { shape = {...}, data = flat }.
  local function arr(x, shape)
    if type(x) == "table" and rawget(x, "data") and rawget(x, "shape") then return x end
    local flat, s = T.flatten(x)
    return { shape = shape or s, data = flat }
  end
  T.array = arr

  -- Element at multi-index pos.
  local function aget(a, pos) return a.data[T.linear(a.shape, pos)] end

  ------------------------------------------------------------------------ references

  local ref = {}
  T.ref = ref
  local shallow_copy = T.copy_list

  -- The sizes around dim (1-based) of shape, as three: the product of the sizes before
  -- it, its size, the product after it (a 0-d shape is 1, 1, 1).
  function ref.split_dim(shape, dim)
    local outer, n, inner = 1, 1, 1
    for d = 1, #shape do
      if d < dim then outer = outer * shape[d]
      elseif d == dim then n = shape[d]
      else inner = inner * shape[d] end
    end
    return outer, n, inner
  end

  -- Elementwise f over one nested table.
  function ref.map(x, f)
    local a = arr(x)
    local out = {}
    for i = 1, #a.data do out[i] = f(a.data[i]) end
    return T.unflatten(out, a.shape)
  end

  -- NumPy broadcasting of two shapes; nil when they do not broadcast.
  function ref.broadcast_shapes(sa, sb)
    local n = math.max(#sa, #sb)
    local out = {}
    for i = 1, n do
      local da = sa[#sa - n + i] or 1
      local db = sb[#sb - n + i] or 1
      if da == db or db == 1 then out[i] = da
      elseif da == 1 then out[i] = db
      else return nil end
    end
    return out
  end

  -- The value of a (shape sa) at position pos of the broadcast shape.
  local function bget(a, pos, nout)
    local sa = a.shape
    local k, acc = 0, 1
    for d = #sa, 1, -1 do
      local p = pos[nout - #sa + d]
      if sa[d] == 1 then p = 1 end
      k = k + (p - 1) * acc
      acc = acc * sa[d]
    end
    return a.data[k + 1]
  end

  -- Elementwise f(x, y) with broadcasting; x or y may be a plain number. Returns a nested
  -- table (or a number when both are scalars). shapes (optional) gives the shapes of x, y
  -- explicitly (for empty operands).
  function ref.map2(x, y, f, shapes)
    if type(x) == "number" and type(y) == "number" then return f(x, y) end
    local a = type(x) == "number" and { shape = {}, data = { x } } or arr(x, shapes and shapes[1])
    local b = type(y) == "number" and { shape = {}, data = { y } } or arr(y, shapes and shapes[2])
    local shape = assert(ref.broadcast_shapes(a.shape, b.shape), "map2: shapes do not broadcast")
    local out, n = {}, #shape
    T.each_index(shape, function(pos, k) out[k] = f(bget(a, pos, n), bget(b, pos, n)) end)
    if #shape == 0 then return out[1] end
    return T.unflatten(out, shape)
  end

  -- x broadcast to shape (a nested table).
  function ref.expand(x, shape)
    local a = arr(x)
    local out, n = {}, #shape
    T.each_index(shape, function(pos, k) out[k] = bget(a, pos, n) end)
    return T.unflatten(out, shape)
  end

  -- torch.gather: out[pos] = src[pos with dim replaced by index[pos]].
  function ref.gather(src, dim, index)
    local s, ix = arr(src), arr(index)
    local out, q = {}, {}
    T.each_index(ix.shape, function(pos, k)
      for d = 1, #pos do q[d] = pos[d] end
      q[dim] = ix.data[k]
      out[k] = aget(s, q)
    end)
    return T.unflatten(out, ix.shape)
  end

  -- Whole slices of src along dim, in the order of the 1-D list index.
  function ref.index_select(src, dim, index)
    local s = arr(src)
    local idx = arr(index).data
    local shape = shallow_copy(s.shape)
    shape[dim] = #idx
    local out, q = {}, {}
    T.each_index(shape, function(pos, k)
      for d = 1, #pos do q[d] = pos[d] end
      q[dim] = idx[pos[dim]]
      out[k] = aget(s, q)
    end)
    return T.unflatten(out, shape)
  end

  -- Gather over the flattened (row-major) source; the result has index's shape.
  function ref.take(src, index)
    local s, ix = arr(src), arr(index)
    local out = {}
    for k = 1, #ix.data do out[k] = s.data[ix.data[k]] end
    return T.unflatten(out, ix.shape)
  end

  -- dst with dst[pos with dim replaced by index[pos]] = src[pos] (src a nested table or a
  -- number); returns a new nested table. Later writes win (specs avoid duplicates).
  function ref.scatter(dst, dim, index, src)
    local d = arr(dst)
    local out = shallow_copy(d.data)
    local ix = arr(index)
    local s = type(src) ~= "number" and arr(src) or nil
    local q = {}
    T.each_index(ix.shape, function(pos, k)
      for i = 1, #pos do q[i] = pos[i] end
      q[dim] = ix.data[k]
      out[T.linear(d.shape, q)] = s and aget(s, pos) or src
    end)
    return T.unflatten(out, d.shape)
  end

  -- dst with dst.select(dim, index[k]) += src.select(dim, k); duplicates accumulate.
  -- round(x) (optional) rounds each sum as the dtype would (float32).
  function ref.index_add(dst, dim, index, src, round)
    local d, s = arr(dst), arr(src)
    local idx = arr(index).data
    local out = shallow_copy(d.data)
    local q = {}
    T.each_index(s.shape, function(pos, k)
      for i = 1, #pos do q[i] = pos[i] end
      q[dim] = idx[pos[dim]]
      local l = T.linear(d.shape, q)
      out[l] = out[l] + s.data[k]
      if round then out[l] = round(out[l]) end
    end)
    return T.unflatten(out, d.shape)
  end

  -- Matrix product with torch.matmul's rules for 1-D, 2-D and batched (broadcast batch)
  -- operands; returns a nested table (a number for 1-D . 1-D). Accumulates in float64.
  function ref.matmul(x, y)
    local a, b = arr(x), arr(y)
    local na, nb = #a.shape, #b.shape
    if na == 1 and nb == 1 then
      assert(a.shape[1] == b.shape[1], "ref.matmul: sizes differ")
      local s = 0
      for i = 1, a.shape[1] do s = s + a.data[i] * b.data[i] end
      return s
    end
    -- promote 1-D operands to matrices, remember which dims to drop
    local drop_m, drop_n = false, false
    local ashape, bshape = shallow_copy(a.shape), shallow_copy(b.shape)
    if na == 1 then table.insert(ashape, 1, 1); drop_m = true end
    if nb == 1 then bshape[#bshape + 1] = 1; drop_n = true end
    local m, k = ashape[#ashape - 1], ashape[#ashape]
    local k2, n = bshape[#bshape - 1], bshape[#bshape]
    assert(k == k2, "ref.matmul: inner sizes differ")
    local abatch, bbatch = {}, {}
    for i = 1, #ashape - 2 do abatch[i] = ashape[i] end
    for i = 1, #bshape - 2 do bbatch[i] = bshape[i] end
    local batch = assert(ref.broadcast_shapes(abatch, bbatch), "ref.matmul: batch dims")
    local A = { shape = ashape, data = a.data }
    local B = { shape = bshape, data = b.data }
    local out = {}
    local nbatch = #batch
    local qa, qb = {}, {}
    local function batch_pos(shape, bpos, q)
      local nbd = #shape - 2
      for d = 1, nbd do
        local p = bpos[nbatch - nbd + d]
        q[d] = shape[d] == 1 and 1 or p
      end
      return nbd
    end
    local function one_batch(bpos)
      local oa = batch_pos(ashape, bpos, qa)
      local ob = batch_pos(bshape, bpos, qb)
      for i = 1, m do
        for j = 1, n do
          local s = 0
          for l = 1, k do
            qa[oa + 1], qa[oa + 2] = i, l
            qb[ob + 1], qb[ob + 2] = l, j
            s = s + aget(A, qa) * aget(B, qb)
          end
          out[#out + 1] = s
        end
      end
    end
    if nbatch == 0 then one_batch({}) else T.each_index(batch, one_batch) end
    local shape = shallow_copy(batch)
    if not drop_m then shape[#shape + 1] = m end
    if not drop_n then shape[#shape + 1] = n end
    if #shape == 0 then return out[1] end
    return T.unflatten(out, shape)
  end

  -- Reductions. op: "sum", "mean", "max", "min", "argmax", "argmin". Without dim: a
  -- number (arg*: the 1-based flat position). With dim: a nested table with dim removed;
  -- for max/min a second nested table of 1-based positions. NaN propagates through
  -- max/min; ties go to the first position.
  local function reduce_list(op, list)
    local n = #list
    if op == "sum" then
      local s = 0
      for i = 1, n do s = s + list[i] end
      return s
    elseif op == "mean" then
      local s = 0.0
      for i = 1, n do s = s + list[i] end
      return n == 0 and 0 / 0 or s / n
    end
    assert(n > 0, "reduce of an empty list")
    local want_max = (op == "max" or op == "argmax")
    local best, at = list[1], 1
    if best ~= best then return best, at end
    for i = 2, n do
      local v = list[i]
      if v ~= v then return v, i end
      if (want_max and v > best) or (not want_max and v < best) then best, at = v, i end
    end
    return best, at
  end

  function ref.reduce(op, x, dim, shape)
    local a = arr(x, shape)
    if dim == nil then
      local v, at = reduce_list(op, a.data)
      if op == "argmax" or op == "argmin" then return at end
      return v
    end
    local oshape = {}
    for d = 1, #a.shape do if d ~= dim then oshape[#oshape + 1] = a.shape[d] end end
    local vals, idxs = {}, {}
    local q = {}
    local function one(opos, k)
      local list = {}
      local o = 1
      for d = 1, #a.shape do
        if d ~= dim then q[d] = opos[o]; o = o + 1 end
      end
      for i = 1, a.shape[dim] do
        q[dim] = i
        list[i] = aget(a, q)
      end
      local v, at = reduce_list(op, list)
      if op == "argmax" or op == "argmin" then vals[k] = at else vals[k], idxs[k] = v, at end
    end
    if #oshape == 0 then one({}, 1) else T.each_index(oshape, one) end
    if #oshape == 0 then
      return vals[1], idxs[1]
    end
    local values = T.unflatten(vals, oshape)
    if op == "max" or op == "min" then return values, T.unflatten(idxs, oshape) end
    return values
  end

  -- Views in nested-table form (for the views spec).
  function ref.permute(x, perm)
    local a = arr(x)
    local shape = {}
    for i = 1, #perm do shape[i] = a.shape[perm[i]] end
    local out, q = {}, {}
    T.each_index(shape, function(pos, k)
      for i = 1, #perm do q[perm[i]] = pos[i] end
      out[k] = aget(a, q)
    end)
    return T.unflatten(out, shape)
  end

  function ref.transpose(x, d1, d2)
    local perm = {}
    for i = 1, #T.shape_of(x) do perm[i] = i end
    perm[d1], perm[d2] = perm[d2], perm[d1]
    return ref.permute(x, perm)
  end

  function ref.narrow(x, dim, start, length)
    local a = arr(x)
    local shape = shallow_copy(a.shape)
    shape[dim] = length
    local out, q = {}, {}
    T.each_index(shape, function(pos, k)
      for i = 1, #pos do q[i] = pos[i] end
      q[dim] = pos[dim] + start - 1
      out[k] = aget(a, q)
    end)
    return T.unflatten(out, shape)
  end

  function ref.select(x, dim, i)
    local a = arr(x)
    local shape = {}
    for d = 1, #a.shape do if d ~= dim then shape[#shape + 1] = a.shape[d] end end
    local out, q = {}, {}
    local function one(pos, k)
      local o = 1
      for d = 1, #a.shape do
        if d == dim then q[d] = i else q[d] = pos[o]; o = o + 1 end
      end
      out[k] = aget(a, q)
    end
    if #shape == 0 then one({}, 1); return out[1] end
    T.each_index(shape, one)
    return T.unflatten(out, shape)
  end

  ------------------------------------------------------------------------ scalar references

  local floor, exp, log, sqrt = math.floor, math.exp, math.log, math.sqrt

  -- erf by its Taylor series: double precision for |x| <= 3 (the terms' cancellation costs
  -- about two digits), +-1 past 6.
  function ref.erf(x)
    if x ~= x or x == 0 then return x end
    if x > 6 then return 1 elseif x < -6 then return -1 end
    local sum, term, n = x, x, 0
    repeat
      n = n + 1
      term = -term * x * x / n
      local add = term / (2 * n + 1)
      sum = sum + add
    until math.abs(add) <= 1e-17 * math.abs(sum)
    return 2 / sqrt(math.pi) * sum
  end
  local erf = ref.erf

  -- log |gamma(x)| for x > 0: the recurrence up to z >= 20, then Stirling's series.
  function ref.lgamma(x)
    local shift = 0
    while x < 20 do shift = shift + log(x); x = x + 1 end
    local z = x
    local s = (z - 0.5) * log(z) - z + 0.5 * log(2 * math.pi) + 1 / (12 * z) - 1 / (360 * z ^ 3)
      + 1 / (1260 * z ^ 5) - 1 / (1680 * z ^ 7)
    return s - shift
  end

  -- -1, 0 or 1; NaN stays NaN.
  function ref.sign(x)
    if x ~= x then return x end
    if x > 0 then return 1 elseif x < 0 then return -1 end
    return 0
  end

  -- The C library's rounding functions: float results, and -0.0 where a negative input
  -- rounds to zero (ceilf(-0.5), truncf(-0.5), rintf(-0.25) are -0.0); NaN and the
  -- infinities stay as they are.
  local function signed_zero(r, x)
    r = r + 0.0
    if r == 0 and (x < 0 or 1 / x < 0) then return -0.0 end
    return r
  end
  function ref.trunc(x) return signed_zero(x >= 0 and floor(x) or -floor(-x), x) end
  -- nearest, ties to even
  function ref.rint(x)
    local f = floor(x)
    local d = x - f
    if d > 0.5 or (d == 0.5 and f % 2 == 1) then f = f + 1 end
    return signed_zero(f, x)
  end
  function ref.floor(x) return signed_zero(floor(x), x) end
  function ref.ceil(x) return signed_zero(math.ceil(x), x) end
  local trunc = ref.trunc

  -- tanh through exp, +-1 past 20 (where exp(2x) would overflow to inf / inf).
  function ref.tanh(x)
    if x > 20 then return 1.0 elseif x < -20 then return -1.0 end
    local e = exp(2 * x)
    return (e - 1) / (e + 1)
  end

  --[[
  The unary elementwise ops: name -> {
    f         the reference (float64 in, float64 out),
    ints      the op is defined on integers: an integer tensor keeps its dtype (the others
              compute integer inputs in float64 and give float64),
    data      {lo, hi}: the random inputs the math part of elementwise_spec draws (the ops
              it tests have one),
    positive  the op needs inputs > 0 (the arithmetic part's draws),
    half      {lo, hi, steps}: the inputs the 16-bit spec draws and the 16-bit steps allowed
              (0: exact: the float32 op is exactly rounded or exact, and one rounding to the
              16-bit type follows) }.
  Each spec walks its own list of names, in the order it draws their inputs.
  ]]
  ref.unary = {
    neg = { f = function(x) return -x end, ints = true, half = { -100, 100, 0 } },
    abs = { f = math.abs, ints = true, half = { -100, 100, 0 } },
    relu = { f = function(x) return x < 0 and x - x or x end, ints = true,   -- x - x: 0 of x's type
             half = { -10, 10, 0 } },
    exp = { f = exp, half = { -10, 10, 1 } },
    log = { f = log, positive = true, half = { 0.001, 1000, 1 } },
    sqrt = { f = sqrt, positive = true, half = { 0, 1000, 0 } },
    tanh = { f = ref.tanh, half = { -5, 5, 1 } },
    sigmoid = { f = function(x) return 1 / (1 + exp(-x)) end, half = { -12, 12, 1 } },
    sin = { f = math.sin, data = { -4, 4 }, half = { -6, 6, 1 } },
    cos = { f = math.cos, data = { -4, 4 }, half = { -6, 6, 1 } },
    tan = { f = math.tan, data = { -1.2, 1.2 } },
    asin = { f = math.asin, data = { -1, 1 } },
    acos = { f = math.acos, data = { -1, 1 } },
    atan = { f = math.atan, data = { -5, 5 }, half = { -10, 10, 1 } },
    sinh = { f = function(x) return (exp(x) - exp(-x)) / 2 end, data = { -3, 3 } },
    cosh = { f = function(x) return (exp(x) + exp(-x)) / 2 end, data = { -3, 3 } },
    asinh = { f = function(x) return log(x + sqrt(x * x + 1)) end, data = { 0.1, 4 } },
    acosh = { f = function(x) return log(x + sqrt(x * x - 1)) end, data = { 1.1, 5 } },
    atanh = { f = function(x) return 0.5 * log((1 + x) / (1 - x)) end, data = { -0.9, 0.9 } },
    floor = { f = ref.floor, ints = true, data = { -5, 5 }, half = { -50, 50, 0 } },
    ceil = { f = ref.ceil, ints = true, data = { -5, 5 }, half = { -50, 50, 0 } },
    round = { f = ref.rint, ints = true, data = { -5, 5 }, half = { -50, 50, 0 } },
    trunc = { f = trunc, ints = true, data = { -5, 5 }, half = { -50, 50, 0 } },
    frac = { f = function(x) return x - trunc(x) end, data = { -5, 5 }, half = { -50, 50, 0 } },
    sign = { f = ref.sign, ints = true, data = { -5, 5 } },
    log1p = { f = function(x) return log(1 + x) end, data = { 0.5, 3 }, half = { 0, 10, 1 } },
    expm1 = { f = function(x) return exp(x) - 1 end, data = { 0.5, 2 }, half = { 0.1, 5, 1 } },
    log2 = { f = function(x) return log(x, 2) end, data = { 0.1, 9 }, half = { 0.01, 100, 1 } },
    log10 = { f = function(x) return log(x, 10) end, data = { 0.1, 9 } },
    exp2 = { f = function(x) return 2 ^ x end, data = { -4, 4 }, half = { -10, 10, 1 } },
    rsqrt = { f = function(x) return 1 / sqrt(x) end, data = { 0.1, 9 }, half = { 0.01, 100, 1 } },
    reciprocal = { f = function(x) return 1 / x end, data = { 0.5, 4 }, half = { 0.01, 100, 1 } },
    square = { f = function(x) return x * x end, ints = true, data = { -5, 5 }, half = { -100, 100, 0 } },
    erf = { f = erf, data = { -2.5, 2.5 }, half = { -3, 3, 1 } },
    erfc = { f = function(x) return 1 - erf(x) end, data = { -1.5, 1.5 } },
    lgamma = { f = ref.lgamma, data = { 0.2, 8 } },
    softplus = { f = function(x) return x > 20 and x or log(1 + exp(x)) end, data = { -4, 4 },
                 half = { -8, 8, 1 } },
    gelu = { f = function(x) return 0.5 * x * (1 + erf(x / sqrt(2))) end, data = { -3, 3 },
             half = { -4, 4, 1 } },
    gelu_tanh = { f = function(x)   -- tanh(z) as (e^2z - 1) / (e^2z + 1) (math.tanh is a 5.1 relic)
                    local u = exp(2 * sqrt(2 / math.pi) * (x + 0.044715 * x ^ 3))
                    return 0.5 * x * (1 + (u == math.huge and 1 or (u - 1) / (u + 1)))
                  end, data = { -3, 3 }, half = { -4, 4, 1 } },
    silu = { f = function(x) return x / (1 + exp(-x)) end, data = { -4, 4 }, half = { -8, 8, 1 } },
    -- erf's inverse, by bisection on erf (60 halvings of (-6, 6): below double's resolution)
    erfinv = { f = function(y)
                 if y <= -1 or y >= 1 then return y == 1 and math.huge or y == -1 and -math.huge or 0 / 0 end
                 if y == 0 then return y end
                 local lo, hi = -6.0, 6.0
                 for _ = 1, 60 do
                   local mid = (lo + hi) / 2
                   if erf(mid) < y then lo = mid else hi = mid end
                 end
                 return (lo + hi) / 2
               end, data = { -0.9, 0.9 } },
    -- the predicates (bool results)
    isnan = { f = function(x) return x ~= x end, ints = true, bool = true },
    isinf = { f = function(x) return x == math.huge or x == -math.huge end, ints = true, bool = true },
    isfinite = { f = function(x) return x == x and x ~= math.huge and x ~= -math.huge end,
                 ints = true, bool = true },
  }

  -- a ^ b for integers a and b >= 0, by repeated products (wrapping as int64 does)
  local function ipow(a, b)
    local r = 1
    for _ = 1, b do r = r * a end
    return r
  end
  ref.ipow = ipow

  -- The binary elementwise ops: name -> { f(a, b, rd): the value the result dtype rd holds
  -- for two numbers already of the operands' dtypes (also the Lua operator itself on two
  -- tensors, where op is given), op: the Lua operator, cmp: a comparison (bool results),
  -- nonzero: b must not be 0 (a float x/0 is not what these references compute) }.
  ref.binary = {
    add = { f = function(a, b) return a + b end, op = "+" },
    sub = { f = function(a, b) return a - b end, op = "-" },
    mul = { f = function(a, b) return a * b end, op = "*" },
    div = { f = function(a, b) return a / b end, op = "/" },
    pow = {
      f = function(a, b, rd)
        if T.is_float_dtype(rd) then return a ^ b end
        return ipow(a, b)
      end,
      op = "^",
    },
    maximum = { f = function(a, b) return math.max(a, b) end },
    minimum = { f = function(a, b) return math.min(a, b) end },
    eq = { f = function(a, b) return a == b end, cmp = true },
    ne = { f = function(a, b) return a ~= b end, cmp = true },
    lt = { f = function(a, b) return a < b end, cmp = true },
    le = { f = function(a, b) return a <= b end, cmp = true },
    gt = { f = function(a, b) return a > b end, cmp = true },
    ge = { f = function(a, b) return a >= b end, cmp = true },
    logical_and = { f = function(a, b) return a ~= 0 and b ~= 0 end, cmp = true },
    logical_or = { f = function(a, b) return a ~= 0 or b ~= 0 end, cmp = true },
    logical_xor = { f = function(a, b) return (a ~= 0) ~= (b ~= 0) end, cmp = true },
    atan2 = { f = function(a, b) return math.atan(a, b) end },
    hypot = { f = function(a, b) return math.sqrt(a * a + b * b) end },
    fmod = { f = function(a, b) return math.fmod(a, b) end, nonzero = true },
    remainder = { f = function(a, b) return a % b end, nonzero = true },
    floor_divide = { f = function(a, b) return a // b end, nonzero = true },
    -- g times the derivative at x (autograd's fused backward ops)
    gelu_backward = { f = function(g, x)
                        return g * (0.5 * (1 + ref.erf(x / math.sqrt(2))) + x * math.exp(-0.5 * x * x) / math.sqrt(2 * math.pi))
                      end },
    gelu_tanh_backward = { f = function(g, x)
                             local c, a = math.sqrt(2 / math.pi), 0.044715
                             local u = math.exp(2 * c * (x + a * x ^ 3))
                             local h = u == math.huge and 1 or (u - 1) / (u + 1)
                             return g * (0.5 * (1 + h) + 0.5 * x * (1 - h * h) * c * (1 + 3 * a * x * x))
                           end },
  }
end
