--[[
lua/qlua/autograd/derivatives.lua — every derivative qlua.autograd knows, one entry per op,
written in terms of qlua's own ops (so each runs on every device and dtype, and records
again under create_graph). lua/qlua/autograd.lua is the engine that calls them.

  D[name] = { backward = function(g, args, out, node) -> { [argument position] = gradient },
              out = true when backward reads the op's result,
              multi = true (or "list") when the op returns several tensors: g is then the
                      list of their gradients, nil where one got none,
              list = true when argument 1 is a list of tensors (cat, stack) }

args are the call's arguments (args[1] is self for a method). A gradient may come in a
broadcast shape: the engine sums it back to the input's. An op with no entry raises when an
operand requires grad.
]]
return function(A, D, env)
local qlua, is_tensor, requires, FLOAT = env.qlua, env.is_tensor, env.requires, env.FLOAT
local raw_newindex, sum_to = env.raw_newindex, A.sum_to
local unpack, select, type, ipairs = table.unpack, select, type, ipairs


-- the dims a reduction took, as a sorted list (nil: all)
local function dim_list(x, dim)
  if dim == nil then
    local l = {}
    for d = 1, x:dim() do l[d] = d end
    return l
  end
  local l = type(dim) == "table" and { unpack(dim) } or { dim }
  table.sort(l)
  return l
end

-- g of a reduction's result, back to x's shape (keepdim or not)
local function unreduce(g, x, dim, keepdim)
  if x:dim() == 0 then return g:reshape({}) end
  if not keepdim then
    for _, d in ipairs(dim_list(x, dim)) do g = g:unsqueeze(d) end
  end
  return g:expand(x:shape())
end

local function count_of(x, dim)
  local n, shape = 1, x:shape()
  for _, d in ipairs(dim_list(x, dim)) do n = n * shape[d] end
  return n
end

local function last_two(t) local n = t:dim(); return t:transpose(n - 1, n) end

local function where0(mask, g) return qlua.where(mask, g, 0) end

-- ------------------------------------------------------------- the table
-- D[name] = { backward = function(g, args, out) -> { [arg position] = gradient } ,
--             out = true when backward reads the result, multi = true when the op returns
--             several tensors (g and out are then lists) }
-- args are the call's arguments (args[1] is self for a method). A gradient may be given
-- in a broadcast shape: the engine sums it back to the input's (sum_to).

local function unary(f, uses_out)
  return { out = uses_out, backward = function(g, a, out) return { f(g, a[1], out) } end }
end

D.neg = unary(function(g) return -g end)
D.__unm = D.neg
D.exp = unary(function(g, _, y) return g * y end, true)
D.exp2 = unary(function(g, _, y) return g * y * math.log(2) end, true)
D.expm1 = unary(function(g, _, y) return g * (y + 1) end, true)
D.log = unary(function(g, x) return g / x end)
D.log2 = unary(function(g, x) return g / (x * math.log(2)) end)
D.log10 = unary(function(g, x) return g / (x * math.log(10)) end)
D.log1p = unary(function(g, x) return g / (x + 1) end)
D.sqrt = unary(function(g, _, y) return g * 0.5 / y end, true)
D.rsqrt = unary(function(g, _, y) return g * -0.5 * y * y * y end, true)
D.sin = unary(function(g, x) return g * x:cos() end)
D.cos = unary(function(g, x) return -(g * x:sin()) end)
D.tan = unary(function(g, _, y) return g * (y * y + 1) end, true)
D.asin = unary(function(g, x) return g * (-(x * x) + 1):rsqrt() end)
D.acos = unary(function(g, x) return -(g * (-(x * x) + 1):rsqrt()) end)
D.atan = unary(function(g, x) return g / (x * x + 1) end)
D.sinh = unary(function(g, x) return g * x:cosh() end)
D.cosh = unary(function(g, x) return g * x:sinh() end)
D.tanh = unary(function(g, _, y) return g * (-(y * y) + 1) end, true)
D.asinh = unary(function(g, x) return g * (x * x + 1):rsqrt() end)
D.acosh = unary(function(g, x) return g * (x * x - 1):rsqrt() end)
D.atanh = unary(function(g, x) return g / (-(x * x) + 1) end)
D.sigmoid = unary(function(g, _, y) return g * y * (-y + 1) end, true)
D.square = unary(function(g, x) return g * x * 2 end)
D.reciprocal = unary(function(g, _, y) return -(g * y * y) end, true)
D.abs = unary(function(g, x) return g * x:sign() end)
D.relu = unary(function(g, x) return where0(x:gt(0), g) end)
D.erf = unary(function(g, x) return g * (-(x * x)):exp() * (2 / math.sqrt(math.pi)) end)
D.erfc = unary(function(g, x) return g * (-(x * x)):exp() * (-2 / math.sqrt(math.pi)) end)
D.silu = unary(function(g, x)
  local s = x:sigmoid()
  return g * s * (x * (-s + 1) + 1)
end)
D.softplus = unary(function(g, x) return g * x:sigmoid() end)
D.gelu = unary(function(g, x)
  local cdf = ((x * (1 / math.sqrt(2))):erf() + 1) * 0.5
  local pdf = (x * x * -0.5):exp() * (1 / math.sqrt(2 * math.pi))
  return g * (cdf + x * pdf)
end)
local function zero_grad(g) return g * 0 end
for _, name in ipairs({ "floor", "ceil", "round", "trunc", "sign" }) do D[name] = unary(zero_grad) end
D.frac = unary(function(g) return g end)
D.clamp = { backward = function(g, a)
  local x, lo, hi = a[1], a[2], a[3]
  local keep
  if lo ~= nil then keep = x:ge(lo) end
  if hi ~= nil then keep = keep and keep:logical_and(x:le(hi)) or x:le(hi) end
  return { keep and where0(keep, g) or g }
end }

-- binary ops: either operand may be a number (then it gets no gradient)
local function binary(fa, fb, uses_out)
  return { out = uses_out, backward = function(g, a, out)
    local x, y = a[1], a[2]
    return { is_tensor(x) and fa(g, x, y, out) or nil, is_tensor(y) and fb(g, x, y, out) or nil }
  end }
end
D.add = binary(function(g) return g end, function(g) return g end)
D.sub = binary(function(g) return g end, function(g) return -g end)
D.mul = binary(function(g, _, y) return g * y end, function(g, x) return g * x end)
D.div = binary(function(g, _, y) return g / y end,
               function(g, x, y) return -(g * x / (y * y)) end)
D.pow = binary(function(g, x, y)
                 if y == 0 then return g * 0 end   -- x ^ -1 would make 0 * inf at x = 0
                 return g * y * x ^ (y - 1)
               end,
               function(g, x, _, out)
                 if type(x) == "number" then return g * out * math.log(x) end
                 return g * out * x:log()
               end, true)
-- ties: each side gets half, as PyTorch's maximum and minimum
local function pick_grad(cmp)
  return function(g, x, y)
    local m = x[cmp](x, y)
    local tie = x:eq(y)
    return where0(m, g) + where0(tie, g * 0.5)
  end
end
D.maximum = binary(pick_grad("gt"), function(g, x, y) return pick_grad("gt")(g, y, x) end)
D.minimum = binary(pick_grad("lt"), function(g, x, y) return pick_grad("lt")(g, y, x) end)
D.__add, D.__sub, D.__mul, D.__div, D.__pow = D.add, D.sub, D.mul, D.div, D.pow

D.where = { backward = function(g, a)
  local cond, x, y = a[1], a[2], a[3]
  return { nil, is_tensor(x) and qlua.where(cond, g, 0) or nil,
           is_tensor(y) and qlua.where(cond, 0, g) or nil }
end }

-- reductions
D.sum = { backward = function(g, a) return { unreduce(g, a[1], a[2], a[3]) } end }
D.mean = { backward = function(g, a)
  return { unreduce(g, a[1], a[2], a[3]) / count_of(a[1], a[2]) }
end }
D.logsumexp = { out = true, backward = function(g, a, out)
  local x, dim, keepdim = a[1], a[2], a[3]
  local back = unreduce(out, x, dim, keepdim)
  return { unreduce(g, x, dim, keepdim) * (x - back):exp() }
end }

-- softmax family
D.softmax = { out = true, backward = function(g, a, y)
  return { y * (g - (g * y):sum(a[2], true)) }
end }
D.log_softmax = { out = true, backward = function(g, a, y)
  return { g - y:exp() * g:sum(a[2], true) }
end }
D.cross_entropy = { backward = function(g, a)
  local logits, target, opts = a[1], a[2], a[3] or {}
  if opts.ignore_index ~= nil or (opts.label_smoothing or 0) ~= 0 then
    error("cross_entropy: no derivative for ignore_index or label_smoothing yet", 0)
  end
  local cdim = logits:dim() == 1 and 1 or 2
  local p = logits:softmax(cdim)
  local want
  if FLOAT[target:dtype()] then
    want = target
  else
    local t = cdim == 2 and target:unsqueeze(2) or target
    want = A.no_grad(function()
      return qlua.zeros_like(logits):scatter_(cdim, t, 1)
    end)
  end
  local grad = p - want
  local red = opts.reduction or "mean"
  if red == "none" then
    if cdim == 2 then g = g:unsqueeze(2) end
    return { grad * g }
  elseif red == "mean" and cdim == 2 then
    return { grad * g / logits:size(1) }
  end
  return { grad * g }
end }

-- products
local function mm_grads(g, a, b)
  local A2 = a:dim() == 1 and a:unsqueeze(1) or a
  local B2 = b:dim() == 1 and b:unsqueeze(2) or b
  local G = g
  if a:dim() == 1 and b:dim() == 1 then
    return g * b, g * a
  end
  if a:dim() == 1 then G = G:unsqueeze(G:dim()) end
  if b:dim() == 1 then G = G:unsqueeze(G:dim() + 1) end
  local ga = sum_to(G:matmul(last_two(B2)), A2:shape()):reshape(a:shape())
  local gb = sum_to(last_two(A2):matmul(G), B2:shape()):reshape(b:shape())
  return ga, gb
end
local function product(g, x, y)
  local ga, gb = mm_grads(g, x, y)
  return { requires(x) and ga or nil, requires(y) and gb or nil }
end
D.matmul = { backward = function(g, a) return product(g, a[1], a[2]) end }
D.mv, D.dot, D.bmm = D.matmul, D.matmul, D.matmul
D.outer = { backward = function(g, a)
  return { g:matmul(a[2]), g:t():matmul(a[1]) }
end }

-- shape ops and copies
local function back_shape(g, a) return { g:reshape(a[1]:shape()) } end
D.view = { backward = back_shape }
D.reshape, D.flatten, D.squeeze, D.unflatten = D.view, D.view, D.view, D.view
D.view_as = { backward = back_shape }
D.unsqueeze = { backward = function(g, a) return { g:squeeze(a[2]) } end }
D.transpose = { backward = function(g, a) return { g:transpose(a[2], a[3]) } end }
D.t = { backward = function(g) return { g:t() } end }
D.permute = { backward = function(g, a)
  local perm = type(a[2]) == "table" and a[2] or { select(2, unpack(a, 1, a.n)) }
  local inv = {}
  for i, p in ipairs(perm) do inv[p] = i end
  return { g:permute(inv) }
end }
D.expand = { backward = function(g, a) return { sum_to(g, a[1]:shape()) } end }
D.expand_as = D.expand
D.contiguous = { backward = function(g) return { g } end }
D.clone = D.contiguous
D.flip = { backward = function(g, a) return { g:flip(a[2]) } end }
local function to_like(g, x) return g:to(x:dtype()):to(x:device()) end
for _, name in ipairs({ "to", "float", "double", "half", "bfloat16", "cpu", "gpu" }) do
  D[name] = { backward = function(g, a) return { to_like(g, a[1]) } end }
end

-- g placed at [start, start + length) of dim in zeros of x's shape (differentiable: cat)
local function pad_along(g, x, dim, start, length)
  local size = x:size(dim)
  local parts = {}
  local function zeros(n)
    local s = x:shape(); s[dim] = n
    return qlua.zeros(s, { dtype = g:dtype(), device = g:device() })
  end
  if start > 1 then parts[#parts + 1] = zeros(start - 1) end
  parts[#parts + 1] = g
  if start + length - 1 < size then parts[#parts + 1] = zeros(size - start - length + 1) end
  if #parts == 1 then return g end
  return qlua.cat(parts, dim)
end
D.narrow = { backward = function(g, a) return { pad_along(g, a[1], a[2], a[3], a[4]) } end }
D.select = { backward = function(g, a)
  return { pad_along(g:unsqueeze(a[2]), a[1], a[2], a[3], 1) }
end }
D.cat = { backward = function(g, a)
  local list, dim = a[1], a[2] or 1
  local grads, at = {}, 1
  for i, t in ipairs(list) do
    local n = t:size(dim)
    grads[i] = g:narrow(dim, at, n)
    at = at + n
  end
  return { grads }
end, list = true }
D.stack = { backward = function(g, a)
  local list, dim = a[1], a[2] or 1
  local grads = {}
  for i = 1, #list do grads[i] = g:select(dim, i) end
  return { grads }
end, list = true }
local function split_back(gs, a, _, node)
  local x = a[1]
  local dim = a[3] or 1
  local parts = {}
  for i = 1, node.nout do
    local sh = node.shapes[i]
    parts[i] = gs[i] or qlua.zeros(sh[1], { dtype = sh[2], device = sh[3] })
  end
  return { #parts == 1 and parts[1] or qlua.cat(parts, dim):reshape(x:shape()) }
end
D.split = { multi = "list", backward = split_back }
-- t[k]: the gradient written back where the read took its elements (first order only:
-- the write is not recorded)
D.index = { backward = function(g, a)
  local x, k = a[1], a[2]
  if A.is_grad_enabled() and requires(g) then
    error("backward: create_graph through a t[...] read is not recorded yet (use narrow or select)", 0)
  end
  return { A.no_grad(function()
    local gx = qlua.zeros(x:shape(), { dtype = g:dtype(), device = g:device() })
    raw_newindex(gx, k, g)
    return gx
  end) }
end }
D.chunk = { multi = "list", backward = split_back }

end
