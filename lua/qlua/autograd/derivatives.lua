--[[
lua/qlua/autograd/derivatives.lua — every derivative qlua.autograd knows, one entry per op,
written in terms of qlua's own ops (so each runs on every device and dtype, and records
again under create_graph). lua/qlua/autograd.lua is the engine that calls them.

  D[name] = { backward = function(g, args, out, node) -> { [argument position] = gradient },
              out = true when backward reads the op's result,
              multi = true (or "list") when the op returns several tensors: g is then the
                      list of their gradients, nil where one got none,
              list = true when argument 1 is a list of tensors (cat, stack), or the
                     position of that list (einsum's 2),
              saves = the argument positions whose values backward reads (a set), false
                      for none; left out: every tensor argument. The engine checks their
                      version counters (an in-place change since the op is an error),
              self_free = true when backward reads nothing of argument 1 but its shape:
                          the in-place form name_ then keeps no copy of the old value }
The in-place form t:name_(...) uses D.name_ when there is one, else D.name, with argument 1
the value t had before.

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

-- uses_out: f reads the result, not the input
local function unary(f, uses_out)
  return { out = uses_out, self_free = uses_out, saves = not uses_out and { true } or false,
           backward = function(g, a, out) return { f(g, a[1], out) } end }
end

D.neg = unary(function(g) return -g end, true)
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
-- gelu's: one fused pass (g:gelu_backward(x), g:gelu_tanh_backward(x)) unless the backward
-- itself is recorded (create_graph), which differentiates the composed form
D.gelu = unary(function(g, x)
  if not A.is_grad_enabled() then return g:gelu_backward(x) end
  local cdf = ((x * (1 / math.sqrt(2))):erf() + 1) * 0.5
  local pdf = (x * x * -0.5):exp() * (1 / math.sqrt(2 * math.pi))
  return g * (cdf + x * pdf)
end)
-- d/dx 0.5 x (1 + tanh(u)), u = c (x + a x^3): 0.5 (1 + t) + 0.5 x (1 - t^2) c (1 + 3 a x^2)
D.gelu_tanh = unary(function(g, x)
  if not A.is_grad_enabled() then return g:gelu_tanh_backward(x) end
  local c, a = math.sqrt(2 / math.pi), 0.044715
  local t = ((x + x * x * x * a) * c):tanh()
  return g * ((t + 1) * 0.5 + x * (-(t * t) + 1) * (x * x * (3 * a * c) + c) * 0.5)
end)
local function zero_grad(g) return g * 0 end
for _, name in ipairs({ "floor", "ceil", "round", "trunc", "sign" }) do D[name] = unary(zero_grad, true) end
D.frac = unary(function(g) return g end, true)
D.clamp = { backward = function(g, a)
  local x, lo, hi = a[1], a[2], a[3]
  local keep
  if lo ~= nil then keep = x:ge(lo) end
  if hi ~= nil then keep = keep and keep:logical_and(x:le(hi)) or x:le(hi) end
  return { keep and where0(keep, g) or g }
end }

-- binary ops: either operand may be a number (then it gets no gradient)
local function binary(fa, fb, uses_out, saves, self_free)
  return { out = uses_out, saves = saves, self_free = self_free, backward = function(g, a, out)
    local x, y = a[1], a[2]
    return { is_tensor(x) and fa(g, x, y, out) or nil, is_tensor(y) and fb(g, x, y, out) or nil }
  end }
end
D.add = binary(function(g) return g end, function(g) return g end, false, false, true)
D.sub = binary(function(g) return g end, function(g) return -g end, false, false, true)
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

D.where = { saves = { true }, backward = function(g, a)
  local cond, x, y = a[1], a[2], a[3]
  return { nil, is_tensor(x) and qlua.where(cond, g, 0) or nil,
           is_tensor(y) and qlua.where(cond, 0, g) or nil }
end }

-- reductions
D.sum = { saves = false, backward = function(g, a) return { unreduce(g, a[1], a[2], a[3]) } end }
D.mean = { saves = false, backward = function(g, a)
  return { unreduce(g, a[1], a[2], a[3]) / count_of(a[1], a[2]) }
end }
D.logsumexp = { out = true, saves = { true }, backward = function(g, a, out)
  local x, dim, keepdim = a[1], a[2], a[3]
  local back = unreduce(out, x, dim, keepdim)
  return { unreduce(g, x, dim, keepdim) * (x - back):exp() }
end }

-- softmax family
D.softmax = { out = true, saves = false, backward = function(g, a, y)
  return { y * (g - (g * y):sum(a[2], true)) }
end }
D.log_softmax = { out = true, saves = false, backward = function(g, a, y)
  return { g - y:exp() * g:sum(a[2], true) }
end }
-- the class targets as an int64 tensor on the logits' device (a Lua number or table too)
local function class_targets(target, logits)
  if is_tensor(target) then return target end
  return qlua.tensor(target, { dtype = "int64", device = logits:device() })
end
D.cross_entropy = { saves = false, backward = function(g, a)
  local logits, target, opts = a[1], a[2], a[3] or {}
  local cdim = logits:dim() == 1 and 1 or 2
  local C = logits:size(cdim)
  local eps = opts.label_smoothing or 0
  local p = logits:softmax(cdim)
  -- without create_graph the gradient is built in place in p, a tensor of its own: a class
  -- target's -1 scattered in and the scale multiplied in, with no one-hot tensor and no
  -- further pass over (N, C) (a language model's logits are gigabytes)
  local in_place = not A.is_grad_enabled()
  local grad, keep, count
  if is_tensor(target) and FLOAT[target:dtype()] then
    grad = p - (eps ~= 0 and target * (1 - eps) + eps / C or target)
  else
    local t = class_targets(target, logits)
    if opts.ignore_index ~= nil then
      keep = t:ne(opts.ignore_index)
      t = qlua.where(keep, t, 1)
      count = keep:sum({ 1 }):to(logits:dtype())          -- 0-d: no wait for the count
      if cdim == 2 then keep = keep:unsqueeze(2) end
    end
    local idx = cdim == 2 and t:unsqueeze(2) or t:reshape({ 1 })
    if in_place and eps == 0 then
      grad = p:scatter_add_(cdim, idx, qlua.full(idx:shape(), -1, { dtype = p:dtype(), device = p:device() }))
    else
      local want = A.no_grad(function() return qlua.zeros_like(logits):scatter_(cdim, idx, 1) end)
      if eps ~= 0 then want = want * (1 - eps) + eps / C end
      grad = p - want
    end
  end
  if keep then grad = qlua.where(keep, grad, 0) end
  -- probabilities that require grad get -log_softmax (times 1 - eps)
  local gt = requires(target) and logits:log_softmax(cdim) * -(1 - eps) or nil
  local red = opts.reduction or "mean"
  local scale = g
  if red == "none" then
    if cdim == 2 then scale = g:unsqueeze(2) end
  elseif red == "mean" then
    if count then scale = g / count
    elseif cdim == 2 then scale = g / logits:size(1) end
  end
  return { in_place and grad:mul_(scale) or grad * scale, gt and gt * scale or nil }
end }

-- products
-- the gradients of a @ b (matmul's broadcasting and 1-D rules), each only when wanted
local function mm_grads(g, a, b, want_a, want_b)
  if a:dim() == 1 and b:dim() == 1 then
    return want_a and g * b or nil, want_b and g * a or nil
  end
  local A2 = a:dim() == 1 and a:unsqueeze(1) or a
  local B2 = b:dim() == 1 and b:unsqueeze(2) or b
  local G = g
  if a:dim() == 1 then G = G:unsqueeze(G:dim()) end
  if b:dim() == 1 then G = G:unsqueeze(G:dim() + 1) end
  local ga = want_a and sum_to(G:matmul(last_two(B2)), A2:shape()):reshape(a:shape()) or nil
  local gb = want_b and sum_to(last_two(A2):matmul(G), B2:shape()):reshape(b:shape()) or nil
  return ga, gb
end
local function product(g, x, y)
  local ga, gb = mm_grads(g, x, y, requires(x), requires(y))
  return { ga, gb }
end
D.matmul = { backward = function(g, a) return product(g, a[1], a[2]) end }
D.mv, D.dot, D.bmm = D.matmul, D.matmul, D.matmul
D.outer = { backward = function(g, a)
  return { g:matmul(a[2]), g:t():matmul(a[1]) }
end }

-- shape ops and copies
-- (these read only shapes: saves = false)
local function back_shape(g, a) return { g:reshape(a[1]:shape()) } end
D.view = { saves = false, backward = back_shape }
D.reshape, D.flatten, D.squeeze, D.unflatten = D.view, D.view, D.view, D.view
D.view_as = D.view
D.unsqueeze = { saves = false, backward = function(g, a) return { g:squeeze(a[2]) } end }
D.transpose = { saves = false, backward = function(g, a) return { g:transpose(a[2], a[3]) } end }
D.t = { saves = false, backward = function(g) return { g:t() } end }
D.permute = { saves = false, backward = function(g, a)
  local perm = type(a[2]) == "table" and a[2] or { select(2, unpack(a, 1, a.n)) }
  local inv = {}
  for i, p in ipairs(perm) do inv[p] = i end
  return { g:permute(inv) }
end }
D.expand = { saves = false, backward = function(g, a) return { sum_to(g, a[1]:shape()) } end }
D.expand_as = D.expand
D.contiguous = { saves = false, backward = function(g) return { g } end }
D.clone = D.contiguous
D.flip = { saves = false, backward = function(g, a) return { g:flip(a[2]) } end }
local function to_like(g, x) return g:to(x:dtype()):to(x:device()) end
for _, name in ipairs({ "to", "float", "double", "half", "bfloat16", "cpu", "gpu" }) do
  D[name] = { saves = false, backward = function(g, a) return { to_like(g, a[1]) } end }
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
D.narrow = { saves = false, backward = function(g, a) return { pad_along(g, a[1], a[2], a[3], a[4]) } end }
D.cat = { backward = function(g, a)
  local list, dim = a[1], a[2] or 1
  local grads, at = {}, 1
  for i, t in ipairs(list) do
    local n = t:size(dim)
    grads[i] = g:narrow(dim, at, n)
    at = at + n
  end
  return { grads }
end, list = true, saves = false }
D.stack = { backward = function(g, a)
  local list, dim = a[1], a[2] or 1
  local grads = {}
  for i = 1, #list do grads[i] = g:select(dim, i) end
  return { grads }
end, list = true, saves = false }
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
D.split = { multi = "list", saves = false, backward = split_back }
D.chunk = D.split


-- ------------------------------------------------------------- more elementwise
D.atan2 = binary(function(g, x, y) return g * y / (x * x + y * y) end,
                 function(g, x, y) return -(g * x / (x * x + y * y)) end)
D.hypot = binary(function(g, x, _, out) return g * x / out end,
                 function(g, _, y, out) return g * y / out end, true)
D.fmod = binary(function(g) return g end, function(g, x, y) return -(g * (x / y):trunc()) end)
D.remainder = binary(function(g) return g end, function(g, x, y) return -(g * (x / y):floor()) end)
D.__mod = D.remainder
D.floor_divide = binary(zero_grad, zero_grad)
D.__idiv = D.floor_divide
D.erfinv = unary(function(g, _, y) return g * (y * y):exp() * (math.sqrt(math.pi) / 2) end, true)
D.nan_to_num = { saves = { true }, backward = function(g, a) return { where0(a[1]:isfinite(), g) } end }
-- lerp(a, b, w) = a + w (b - a)
D.lerp = { backward = function(g, a)
  local x, y, w = a[1], a[2], a[3]
  local gw = is_tensor(w) and g * (y - x) or nil
  local one_minus = is_tensor(w) and -w + 1 or 1 - w
  return { g * one_minus, is_tensor(y) and g * w or nil, gw }
end }
-- t += value * a * b, t += value * a / b (in place only)
D.addcmul_ = { self_free = true, saves = { [2] = true, [3] = true }, backward = function(g, a)
  local v = a[4] or 1
  return { g, g * a[3] * v, g * a[2] * v }
end }
D.addcdiv_ = { self_free = true, saves = { [2] = true, [3] = true }, backward = function(g, a)
  local x, y, v = a[2], a[3], a[4] or 1
  return { g, g * v / y, -(g * v * x / (y * y)) }
end }
D.copy_ = { self_free = true, saves = false, backward = function(g, a)
  return { nil, to_like(g, a[2]) }
end }
D.fill_ = { self_free = true, saves = false, backward = function() return {} end }
D.zero_ = D.fill_

-- ------------------------------------------------------------- more reductions
local function norm_dim(x, d) if d < 0 then return d + x:dim() + 1 end return d end
local function zeros_of(x, g) return qlua.zeros(x:shape(), { dtype = g:dtype(), device = g:device() }) end

-- g of a value-selecting reduction along dim (max(dim), median, kthvalue) at the positions
-- its indices name; the others get 0
local function select_back(g, x, dim, idx, keepdim)
  if x:dim() == 0 then return g:reshape({}) end
  dim = norm_dim(x, dim)
  if not keepdim then g, idx = g:unsqueeze(dim), idx:unsqueeze(dim) end
  return zeros_of(x, g):scatter_add_(dim, idx, g)
end
local function selecting(dim_at, keep_at)
  return { multi = true, out = true, saves = false, backward = function(gs, a, outs)
    local x = a[1]
    local dim = a[dim_at]
    if dim == nil then dim = x:dim() end
    return { select_back(gs[1], x, dim, outs[2], a[keep_at]) }
  end }
end
D.max, D.min, D.median = selecting(2, 3), selecting(2, 3), selecting(2, 3)
D.kthvalue = selecting(3, 4)
-- the ties of amax / amin (and max(), min(), median() of all elements) share the gradient
-- equally, as PyTorch's do
local function share_ties(g, x, dim, keepdim, out)
  local mask = x:eq(unreduce(out, x, dim, keepdim))
  local count = x:dim() == 0 and 1 or mask:sum(dim_list(x, dim), true):to(g:dtype())
  return where0(mask, unreduce(g, x, dim, keepdim) / count)
end
D.amax = { out = true, saves = { true }, backward = function(g, a, out)
  return { share_ties(g, a[1], a[2], a[3], out) }
end }
D.amin = D.amax
D.median_all = { out = true, saves = { true }, backward = function(g, a, out)
  return { share_ties(g, a[1], nil, false, out) }
end }
D.aminmax = { multi = true, out = true, saves = { true }, backward = function(gs, a, outs)
  local x, dim, keepdim = a[1], a[2], a[3]
  local r
  if gs[1] then r = share_ties(gs[1], x, dim, keepdim, outs[1]) end
  if gs[2] then
    local m = share_ties(gs[2], x, dim, keepdim, outs[2])
    r = r and r + m or m
  end
  return { r }
end }

-- the product of the elements before each position along d (1 at the first)
local function exclusive_cumprod(x, d)
  local n = x:size(d)
  local s = x:shape(); s[d] = 1
  local one = qlua.ones(s, { dtype = x:dtype(), device = x:device() })
  if n <= 1 then return n == 1 and one or x end
  return qlua.cat({ one, x:narrow(d, 1, n - 1) }, d):cumprod(d)
end
-- d prod / d x_i = the product of all the others: the products before and after i, so that
-- zeros need no division (one zero: only its position gets a gradient; two: none)
local function others_product(x, d)
  return exclusive_cumprod(x, d) * exclusive_cumprod(x:flip(d), d):flip(d)
end
D.prod = { saves = { true }, backward = function(g, a)
  local x, dim, keepdim = a[1], a[2], a[3]
  if x:numel() == 0 then return { zeros_of(x, g) } end
  if dim == nil then
    return { (others_product(x:reshape({ -1 }), 1) * g):reshape(x:shape()) }
  end
  if x:dim() == 0 then return { g:reshape({}) } end
  dim = norm_dim(x, dim)
  return { others_product(x, dim) * unreduce(g, x, dim, keepdim) }
end }

-- var, std: opts is keepdim (a boolean), the correction (a number) or {correction, keepdim}
local function var_opts(o)
  if type(o) == "boolean" then return 1, o end
  if type(o) == "number" then return o, false end
  if type(o) == "table" then
    local c = o.correction
    if c == nil then c = 1 end
    return c, o.keepdim or false
  end
  return 1, false
end
local function centered(x, dims)
  if x:dim() == 0 then return x * 0 end
  return x - x:mean(dim_list(x, dims), true)
end
D.var = { saves = { true }, backward = function(g, a)
  local x, dims = a[1], a[2]
  local c, keepdim = var_opts(a[3])
  local div = math.max(0, count_of(x, dims) - c)
  return { unreduce(g, x, dims, keepdim) * centered(x, dims) * (2 / div) }
end }
D.std = { out = true, saves = { true }, backward = function(g, a, out)
  local x, dims = a[1], a[2]
  local c, keepdim = var_opts(a[3])
  local div = math.max(0, count_of(x, dims) - c)
  local s = unreduce(out, x, dims, keepdim)
  return { qlua.where(s:eq(0), 0, unreduce(g, x, dims, keepdim) / s) * centered(x, dims) * (1 / div) }
end }
-- norm(p, dims, keepdim): x |x|^(p-2) / norm^(p-1) (p = 2: x / norm; inf: the largest |x|)
D.norm = { out = true, saves = { true }, backward = function(g, a, out)
  local x, p, dims, keepdim = a[1], a[2], a[3], a[4]
  if p == nil then p = 2 end
  local G = unreduce(g, x, dims, keepdim)
  if p == 0 then return { x * 0 } end
  if p == 1 then return { G * x:sign() } end
  local N = unreduce(out, x, dims, keepdim)
  if p == 2 then return { qlua.where(N:eq(0), 0, G * x / N) } end
  if p == math.huge or p == -math.huge then
    local ax = x:abs()
    return { share_ties(g, ax, dims, keepdim, out) * x:sign() }
  end
  local zero = x:eq(0):logical_or(N:eq(0))
  return { qlua.where(zero, 0, G * x * x:abs() ^ (p - 2) / N ^ (p - 1)) }
end }

-- ------------------------------------------------------------- scans
local function revcumsum(v, d) return v:flip(d):cumsum(d):flip(d) end
D.cumsum = { saves = false, backward = function(g, a) return { revcumsum(g, a[2]) } end }
-- d y_i / d x_k = y_i / x_k for i >= k, written so that zeros divide nothing: before a
-- line's first zero the quotient form; at the first zero the products with it left out;
-- after it 0
D.cumprod = { out = true, saves = { true }, backward = function(g, a, y)
  local x, d = a[1], a[2]
  local zero = x:eq(0)
  local seen = zero:cumsum(d)
  local before, first = seen:eq(0), zero:logical_and(seen:eq(1))
  local part = qlua.where(before, revcumsum(g * y, d) / qlua.where(before, x, 1), 0)
  local y1 = qlua.where(first, 1, x):cumprod(d)
  local at = qlua.where(first, revcumsum(qlua.where(seen:ge(1), g * y1, 0), d), 0)
  return { part + at }
end }
-- sum over i >= k of g_i exp(x_k - y_i), in log space (the positive and negative parts of g
-- apart), so that no exp overflows
local function revlogcumsumexp(v, d) return v:flip(d):logcumsumexp(d):flip(d) end
D.logcumsumexp = { out = true, saves = { true }, backward = function(g, a, y)
  local x, d = a[1], a[2]
  local function part(mask, mag)
    local l = qlua.where(mask, qlua.where(mask, mag, 1):log() - y, -math.huge)
    return (revlogcumsumexp(l, d) + x):exp()
  end
  return { part(g:gt(0), g) - part(g:lt(0), -g) }
end }
-- cummax/cummin, sort and topk: their values' gradient back at the indices they returned
-- (select_back with the dim kept: the indices have the values' shape)
local function to_indices(dim_at)
  return { multi = true, out = true, saves = false, backward = function(gs, a, outs)
    local x = a[1]
    return { select_back(gs[1], x, a[dim_at] or x:dim(), outs[2], true) }
  end }
end
D.cummax, D.cummin, D.sort, D.topk = to_indices(2), to_indices(2), to_indices(2), to_indices(3)

-- ------------------------------------------------------------- indexing
D.gather = { saves = { [2] = true, [3] = true }, backward = function(g, a)
  local x, dim, idx = a[1], a[2], a[3]
  if idx == nil then dim, idx = 1, dim end
  return { zeros_of(x, g):scatter_add_(dim, idx, g) }
end }
D.take = { saves = { [2] = true }, backward = function(g, a)
  local x, idx = a[1], a[2]
  local flat = qlua.zeros({ x:numel() }, { dtype = g:dtype(), device = g:device() })
  return { flat:scatter_add_(1, idx:reshape({ -1 }), g:reshape({ -1 })):reshape(x:shape()) }
end }
D.index_select = { saves = { [3] = true }, backward = function(g, a)
  return { zeros_of(a[1], g):index_add_(a[2], a[3], g) }
end }
D.index_add_ = { self_free = true, saves = { [3] = true }, backward = function(g, a)
  return { g, nil, nil, g:index_select(a[2], a[3]) }
end }
D.index_copy_ = { self_free = true, saves = { [3] = true }, backward = function(g, a)
  return { g:clone():index_fill_(a[2], a[3], 0), nil, nil, g:index_select(a[2], a[3]) }
end }
D.index_fill_ = { self_free = true, saves = { [3] = true }, backward = function(g, a)
  return { g:clone():index_fill_(a[2], a[3], 0), nil, nil, is_tensor(a[4]) and g:index_select(a[2], a[3]) or nil }
end }
D.scatter_ = { self_free = true, saves = { [3] = true }, backward = function(g, a)
  local dim, idx, src = a[2], a[3], a[4]
  return { g:clone():scatter_(dim, idx, 0), nil, nil, is_tensor(src) and g:gather(dim, idx) or nil }
end }
D.scatter_add_ = { self_free = true, saves = { [3] = true }, backward = function(g, a)
  return { g, nil, nil, g:gather(a[2], a[3]) }
end }
D.masked_fill = { saves = { [2] = true }, self_free = true, backward = function(g, a)
  local mask, v = a[2], a[3]
  return { qlua.where(mask, 0, g), nil, is_tensor(v) and where0(mask, g) or nil }
end }
D.masked_fill_ = D.masked_fill
-- masked_select: element k of g goes to the k-th true position of mask (broadcast with x)
local function unmask(g, x, mask)
  local m = mask:logical_and(qlua.ones(x:shape(), { dtype = "bool", device = x:device() }))
  local shape = m:shape()
  if g:numel() == 0 then return qlua.zeros(shape, { dtype = g:dtype(), device = g:device() }) end
  local flat = m:reshape({ -1 })
  local rank = flat:long():cumsum(1):clamp(1, g:numel())
  return where0(flat, g:gather(1, rank)):reshape(shape)
end
D.masked_select = { saves = { [2] = true }, backward = function(g, a) return { unmask(g, a[1], a[2]) } end }
-- t[k]: the read's elements get g back (tensor keys as index_select and masked_select, so
-- that a position named twice sums; numbers and ranges as the same view of zeros)
D.index = { saves = { [2] = true }, backward = function(g, a)
  local x, k = a[1], a[2]
  if is_tensor(k) then
    if k:dtype() == "bool" then return { unmask(g, x, k) } end
    if k:dim() == 0 then return { D.select.backward(g, { x, 1, k:item() }) [1] } end
    local flat = k:reshape({ -1 })
    local rows = g:reshape({ flat:numel(), select(2, unpack(x:shape())) })
    return { zeros_of(x, g):index_add_(1, flat, rows) }
  end
  local gx = zeros_of(x, g)
  gx[k] = g                     -- recorded under create_graph (index_put)
  return { gx }
end }
-- t[k] = v (recorded in place): t's old value gets g where the write did not land, v the
-- rest (summed back to v's shape by the engine)
D.index_put = { self_free = true, saves = { [2] = true }, backward = function(g, a)
  local k, v = a[2], a[3]
  local keep = A.no_grad(function()
    local m = qlua.ones(g:shape(), { dtype = g:dtype(), device = g:device() })
    m[k] = 0
    return m
  end)
  return { g * keep, nil, is_tensor(v) and g[k] or nil }
end }

-- ------------------------------------------------------------- more shape ops
D.select = { saves = false, backward = function(g, a)
  local x, dim = a[1], norm_dim(a[1], a[2])
  local i = a[3]
  if i < 0 then i = i + x:size(dim) + 1 end
  return { pad_along(g:unsqueeze(dim), x, dim, i, 1) }
end }
-- slice(dim, first, last, step): step > 1 spreads g with step - 1 zeros after each element
D.slice = { saves = false, backward = function(g, a)
  local x, dim = a[1], norm_dim(a[1], a[2])
  local n = x:size(dim)
  local first, step = a[3], a[5] or 1
  if first < 0 then first = first + n + 1 end
  local len = g:size(dim)
  if len == 0 then return { zeros_of(x, g) } end
  if step > 1 then
    local e = g:unsqueeze(dim + 1)                 -- each element, then step - 1 zeros
    local zs = e:shape(); zs[dim + 1] = step - 1
    local spread = qlua.cat({ e, qlua.zeros(zs, { dtype = g:dtype(), device = g:device() }) }, dim + 1)
    local sh = g:shape(); sh[dim] = len * step
    g = spread:reshape(sh):narrow(dim, 1, (len - 1) * step + 1)
  end
  return { pad_along(g, x, dim, first, g:size(dim)) }
end }
D.movedim = { saves = false, backward = function(g, a) return { g:movedim(a[3], a[2]) } end }
D.roll = { saves = false, backward = function(g, a)
  local shifts = a[2]
  if type(shifts) == "table" then
    local neg = {}
    for i, s in ipairs(shifts) do neg[i] = -s end
    shifts = neg
  else
    shifts = -shifts
  end
  if a[3] == nil then return { g:reshape({ -1 }):roll(shifts):reshape(a[1]:shape()) } end
  return { g:roll(shifts, a[3]) }
end }
-- repeat_tensor(sizes): each dim d of the result is sizes[d] copies of t's dim: summed back
D.repeat_tensor = { saves = false, backward = function(g, a)
  local x, sizes = a[1], a[2]
  local xs = x:shape()
  local lead = #sizes - #xs
  local split, dims = {}, {}
  for d = 1, #sizes do
    local own = d > lead and xs[d - lead] or 1
    split[#split + 1] = sizes[d]; dims[#dims + 1] = #split
    split[#split + 1] = own
  end
  if g:numel() == 0 then return { zeros_of(x, g) } end
  return { g:reshape(split):sum(dims):reshape(xs) }
end }
D.tril = { saves = false, backward = function(g, a) return { g:tril(a[2]) } end }
D.triu = { saves = false, backward = function(g, a) return { g:triu(a[2]) } end }
D.tril_ = { self_free = true, saves = false, backward = D.tril.backward }
D.triu_ = { self_free = true, saves = false, backward = D.triu.backward }
-- t grown or cut to shape, one dim at a time (zeros added at the end)
local function fit(t, shape)
  for d = 1, #shape do
    local have = t:size(d)
    if have > shape[d] then t = t:narrow(d, 1, shape[d])
    elseif have < shape[d] then
      local s = t:shape(); s[d] = shape[d] - have
      t = qlua.cat({ t, qlua.zeros(s, { dtype = t:dtype(), device = t:device() }) }, d)
    end
  end
  return t
end
D.diag = { saves = false, backward = function(g, a)
  local x, k = a[1], a[2] or 0
  if x:dim() == 1 then return { g:diagonal(k) } end
  return { fit(g:diag(k), x:shape()) }
end }
-- diagonal (a view): g written back onto the diagonal of zeros (first order only)
D.diagonal = { saves = false, backward = function(g, a)
  if A.is_grad_enabled() and requires(g) then
    error("backward: create_graph through diagonal is not recorded yet", 0)
  end
  return { A.no_grad(function()
    local gx = zeros_of(a[1], g)
    gx:diagonal(a[2] or 0, a[3] or 1, a[4] or 2):copy_(g)
    return gx
  end) }
end }

-- ------------------------------------------------------------- more products
local function addmm_opts(o) o = o or {}; return o.beta or 1, o.alpha or 1 end
D.addmm = { saves = { [2] = true, [3] = true }, backward = function(g, a)
  local x, y = a[2], a[3]
  local beta, alpha = addmm_opts(a[4])
  local function scaled(t, s) if s == 1 then return t end return t * s end   -- no pass for 1
  return { scaled(g, beta), requires(x) and scaled(g:matmul(y:t()), alpha) or nil,
           requires(y) and scaled(x:t():matmul(g), alpha) or nil }
end }
D.addmm_ = { self_free = true, saves = D.addmm.saves, backward = D.addmm.backward }

-- einsum: an operand's gradient is the einsum of the others and g, with its own letters as
-- the output; a letter only it has (summed in its own operand) comes back by expanding
local function einsum_parts(spec, nops)
  spec = spec:gsub("%s", "")
  local lhs, rhs = spec:match("^(.-)%->(.*)$")
  lhs = lhs or spec
  local ins = {}
  for part in (lhs .. ","):gmatch("([^,]*),") do ins[#ins + 1] = part end
  if rhs == nil then
    local count, ell = {}, false
    for _, p in ipairs(ins) do
      if p:find("...", 1, true) then ell = true end
      for c in p:gsub("%.%.%.", ""):gmatch("%a") do count[c] = (count[c] or 0) + 1 end
    end
    local once = {}
    for c, n in pairs(count) do if n == 1 then once[#once + 1] = c end end
    table.sort(once)
    rhs = (ell and "..." or "") .. table.concat(once)
  end
  if #ins ~= nops then error("einsum: the spec names " .. #ins .. " operands", 0) end
  return ins, rhs
end
D.einsum = { list = 2, backward = function(g, a)
  local listed = type(a[2]) == "table" and not is_tensor(a[2])
  local ops = {}
  if listed then ops = a[2] else for i = 2, a.n do ops[#ops + 1] = a[i] end end
  local ins, rhs = einsum_parts(a[1], #ops)
  local grads = {}
  for i, op in ipairs(ops) do
    if requires(op) then
      local mine = ins[i]
      local letters = mine:gsub("%.%.%.", "")
      local seen = {}
      for c in letters:gmatch("%a") do
        if seen[c] then
          error("einsum: no derivative yet for a letter repeated within one operand ('" .. mine .. "')", 0)
        end
        seen[c] = true
      end
      local elsewhere = rhs
      local subs, args = {}, {}
      for j, other in ipairs(ops) do
        if j ~= i then subs[#subs + 1] = ins[j]; args[#args + 1] = other; elsewhere = elsewhere .. ins[j] end
      end
      subs[#subs + 1] = rhs; args[#args + 1] = g
      -- the output: my letters that something else has ("..." only if something has it)
      local out, missing, pos = {}, {}, 0
      local has_ell = elsewhere:find("...", 1, true) ~= nil
      local ndim, nletters = op:dim(), #letters
      local k = 1
      while k <= #mine do
        if mine:sub(k, k + 2) == "..." then
          local n = ndim - nletters
          if has_ell then out[#out + 1] = "..." else
            for e = 1, n do missing[#missing + 1] = pos + e end
          end
          pos, k = pos + n, k + 3
        else
          local c = mine:sub(k, k)
          pos = pos + 1
          if elsewhere:find(c, 1, true) then out[#out + 1] = c else missing[#missing + 1] = pos end
          k = k + 1
        end
      end
      local r = qlua.einsum(table.concat(subs, ",") .. "->" .. table.concat(out), table.unpack(args))
      local shape = op:shape()
      if #missing > 0 then
        for _, d in ipairs(missing) do r = r:unsqueeze(d) end
        local es = r:shape()
        for _, d in ipairs(missing) do es[d] = shape[d] end
        r = r:expand(es)
      end
      grads[i] = sum_to(r, shape)
    end
  end
  if listed then return { nil, grads } end
  local res = {}
  for i = 1, #ops do res[i + 1] = grads[i] end
  return res
end }


-- ------------------------------------------------------------- convolutions
-- conv2d(x, w [, bias] [, opts]): opts may stand where the bias would
local function conv_args(a)
  local x, w, b, o = a[1], a[2], a[3], a[4]
  if b ~= nil and not is_tensor(b) then o, b = b, nil end
  return x, w, b, o
end
-- conv_transpose2d's options without output_padding, for the forward convolutions
local function forward_opts(o)
  if o == nil or o.output_padding == nil then return o end
  local c = {}
  for k, v in pairs(o) do if k ~= "output_padding" then c[k] = v end end
  return c
end
local function bias_grad(g, b, pos)
  local r = {}
  if b ~= nil and requires(b) then r[pos] = g:sum({ 1, 3, 4 }) end
  return r
end
D.conv2d = { backward = function(g, a)
  local x, w, b, o = conv_args(a)
  local r = bias_grad(g, b, 3)
  if requires(x) then r[1] = qlua.conv2d_input(x:shape(), w, g, o) end
  if requires(w) then r[2] = qlua.conv2d_weight(x, w:shape(), g, o) end
  return r
end }
-- y = conv2d_input(size, w, x): x plays conv2d's output gradient
D.conv_transpose2d = { backward = function(g, a)
  local x, w, b, o = conv_args(a)
  local fo = forward_opts(o)
  local r = bias_grad(g, b, 3)
  if requires(x) then r[1] = qlua.conv2d(g, w, nil, fo) end
  if requires(w) then r[2] = qlua.conv2d_weight(g, w:shape(), x, fo) end
  return r
end }
-- both gradients are linear in each operand: their own derivatives close the family
D.conv2d_input = { saves = { [2] = true, [3] = true }, backward = function(g, a)
  local w, dy, o = a[2], a[3], a[4]
  return { nil, requires(w) and qlua.conv2d_weight(g, w:shape(), dy, o) or nil,
           requires(dy) and qlua.conv2d(g, w, nil, o) or nil }
end }
D.conv2d_weight = { saves = { [1] = true, [3] = true }, backward = function(g, a)
  local x, dy, o = a[1], a[3], a[4]
  return { requires(x) and qlua.conv2d_input(x:shape(), g, dy, o) or nil, nil,
           requires(dy) and qlua.conv2d(x, g, nil, o) or nil }
end }


-- ------------------------------------------------------------- normalisation, pooling
-- _norm(kind, x, weight, bias, opts) -> y, mean, rstd (runtime/core/ops_norm.c). Without
-- create_graph the fused backward; with it the same formulas written in recorded ops, the
-- statistics recomputed from x (so they carry x's graph), which close under differentiation
-- (x viewed (rows, groups, channels a group, inner) for layer/rms/group, (n, c, inner) for
-- batch)
local function norm_backward_ops(kind, g, x, w, o, rstd_given)
  local shape, n = x:shape(), x:size(1)
  local X, G, W, dims, pdims
  if kind == "batch" then
    local c = x:size(2)
    X, G = x:reshape({ n, c, -1 }), g:reshape({ n, c, -1 })
    W = w and w:reshape({ 1, c, 1 })
    dims, pdims = { 1, 3 }, { 1, 3 }
  else
    local groups, inner = 1, 1
    local cpg = w and w:numel() or nil
    if kind == "group" then
      groups, inner = o.groups, x:numel() // (n * x:size(2))
      cpg = x:size(2) // groups
    else
      cpg = 1
      for d = #shape - (o.normalized or 1) + 1, #shape do cpg = cpg * shape[d] end
    end
    X = x:reshape({ -1, groups, cpg, inner })
    G = g:reshape({ -1, groups, cpg, inner })
    W = w and w:reshape({ 1, groups, cpg, 1 })
    dims, pdims = { 3, 4 }, { 1, 4 }
  end
  local mean, rstd, xhat
  if rstd_given then   -- batch_norm's eval: the statistics are constants
    mean, rstd = rstd_given[1]:reshape({ 1, -1, 1 }):to(x:dtype()), rstd_given[2]:reshape({ 1, -1, 1 }):to(x:dtype())
  else
    mean = kind ~= "rms" and X:mean(dims, true) or nil
    local d = mean and X - mean or X
    rstd = ((d * d):mean(dims, true) + (o.eps or 1e-5)):rsqrt()
  end
  xhat = (mean and X - mean or X) * rstd
  local Gw = W and G * W or G
  local dx
  if rstd_given then
    dx = Gw * rstd
  else
    local t = Gw - xhat * (Gw * xhat):mean(dims, true)
    if kind ~= "rms" then t = t - Gw:mean(dims, true) end
    dx = rstd * t
  end
  local dw = w and (G * xhat):sum(pdims):reshape(w:shape())
  return dx:reshape(shape), dw, G:sum(pdims)
end
D._norm = { multi = true, out = true, saves = { [2] = true, [3] = true }, backward = function(gs, a, outs)
  local g = gs[1]
  if g == nil then return {} end
  local kind, x, w, b, o = a[1], a[2], a[3], a[4], a[5]
  local wx, ww, wb = requires(x), w ~= nil and requires(w), b ~= nil and requires(b)
  local given = kind == "batch" and o.eval and { outs[2], outs[3] } or nil
  if A.is_grad_enabled() then
    local dx, dw, db = norm_backward_ops(kind, g, x, w, o, given)
    return { nil, wx and dx or nil, ww and dw or nil, wb and db:reshape(b:shape()) or nil }
  end
  local dx, dw, db = qlua._norm_backward(kind, g, x, w, outs[2], outs[3], o, wx, ww, wb)
  return { nil, dx, dw, db and db:reshape(b:shape()) }
end }

-- _attention(q, k, v, mask, opts) -> o, lse. The fused backward recomputes the probabilities
-- from lse; under create_graph the same formulas run as recorded ops (the S x S scores per
-- head are then made), so a second derivative closes. The mask gets no gradient.
local function attention_backward_ops(g, q, k, v, mask, o)
  if (o.dropout_p or 0) > 0 then
    error("backward: create_graph through scaled_dot_product_attention with dropout is not "
          .. "supported", 0)
  end
  local n = q:dim()
  local group = n >= 3 and q:size(n - 2) // k:size(n - 2) or 1
  local function widen(t)   -- (..., hk, s, e) -> (..., hk * group, s, e), head h reading h // group
    if group == 1 then return t end
    local shape = t:shape()
    local wide = {}
    for d = 1, n - 2 do wide[#wide + 1] = shape[d] end
    wide[#wide + 1] = group
    wide[#wide + 1], wide[#wide + 2] = shape[n - 1], shape[n]
    local sh = {}
    for d = 1, n - 3 do sh[#sh + 1] = shape[d] end
    sh[#sh + 1] = shape[n - 2] * group
    sh[#sh + 1], sh[#sh + 2] = shape[n - 1], shape[n]
    return t:unsqueeze(n - 1):expand(wide):reshape(sh)
  end
  local function narrow_heads(t)   -- the sum over each group of query heads
    if group == 1 then return t end
    local shape = t:shape()
    local sh = {}
    for d = 1, n - 3 do sh[#sh + 1] = shape[d] end
    sh[#sh + 1], sh[#sh + 2] = shape[n - 2] // group, group
    sh[#sh + 1], sh[#sh + 2] = shape[n - 1], shape[n]
    return t:reshape(sh):sum(n - 1)
  end
  local kw, vw = widen(k), widen(v)
  local scale = o.scale or 1 / math.sqrt(q:size(n))
  local s = q:matmul(last_two(kw)) * scale
  local sq, sk = q:size(n - 1), k:size(n - 1)
  if mask ~= nil then
    if mask:dtype() == "bool" then s = s:masked_fill(mask:logical_not(), -math.huge)
    else s = s + mask:to(s:dtype()) end
  end
  if o.is_causal then
    local above = qlua.ones({ sq, sk }, { dtype = "bool", device = q:device() }):triu(1)
    s = s:masked_fill(above, -math.huge)
  end
  local p = s:softmax(n)
  p = qlua.where(p:isnan(), 0, p)   -- rows with every key masked
  local dp = g:matmul(last_two(vw))
  local ds = p * (dp - (dp * p):sum(n, true))
  return ds:matmul(kw) * scale, narrow_heads(last_two(ds):matmul(q) * scale),
         narrow_heads(last_two(p):matmul(g))
end

D._attention = { multi = true, out = true, saves = { true, true, true }, backward = function(gs, a, outs)
  local g = gs[1]
  if g == nil then return {} end
  local q, k, v, mask, o = a[1], a[2], a[3], a[4], a[5]
  local wq, wk, wv = requires(q), requires(k), requires(v)
  if A.is_grad_enabled() then
    local dq, dk, dv = attention_backward_ops(g, q, k, v, mask, o)
    return { wq and dq or nil, wk and dk or nil, wv and dv or nil }
  end
  local dq, dk, dv = qlua._attention_backward(g, q, k, v, mask, outs[1], outs[2], o, wq, wk, wv)
  return { dq, dk, dv }
end }

-- _pool2d(mode, ...): max's gradient goes to the maxima's positions (a scatter_add, which
-- records under create_graph); avg's is the avg_backward mode, whose own gradient is avg
D._pool2d = { multi = true, out = true, saves = false, backward = function(gs, a, outs)
  local g, mode = gs[1], a[1]
  if g == nil then return {} end
  if mode == "max" then
    local x, idx = a[2], outs[2]
    if idx == nil then
      error("backward: max_pool2d was called without its indices (call it through "
            .. "qlua.nn.functional.max_pool2d)", 0)
    end
    local planes = x:numel() // (x:size(x:dim()) * x:size(x:dim() - 1))
    local flat = zeros_of(x, g):reshape({ planes, -1 })
    flat:scatter_add_(2, idx:reshape({ planes, -1 }), g:reshape({ planes, -1 }))
    return { nil, flat:reshape(x:shape()) }
  elseif mode == "avg" then
    return { nil, qlua._pool2d("avg_backward", g, a[2], a[3]) }
  end
  return { nil, qlua._pool2d("avg", g, a[4]) }   -- avg_backward(dy, x, opts): linear in dy
end }

end
