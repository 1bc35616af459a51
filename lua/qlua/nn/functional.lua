--[[
lua/qlua/nn/functional.lua — qlua.nn.functional: PyTorch's torch.nn.functional ops that
qlua.nn's layers are made of, written with qlua's tensor ops (so autograd differentiates
them, on every device and floating dtype). Dims are 1-based, as everywhere in qlua.

The normalisations (layer_norm, rms_norm, group_norm, batch_norm), max/avg pooling and
scaled_dot_product_attention run as fused kernels of their own (qlua._norm, qlua._pool2d and
qlua._attention: runtime/core/ops_norm.c, ops_pool2d.c and ops_attention.c), forward and
backward; the rest are compositions of qlua's ops.
]]
local qlua = rawget(_G, "qlua") or require("qlua")
local is_tensor = qlua.is_tensor

local F = {}

-- sum or mean of every element as a 0-d tensor (t:sum() is a Lua number when nothing
-- records; a loss is a tensor either way, as PyTorch's)
local function whole(t, how)
  if t:dim() == 0 then return t end
  local dims = {}
  for d = 1, t:dim() do dims[d] = d end
  return how == "sum" and t:sum(dims) or t:mean(dims)
end

local function reduce(loss, reduction, who)
  reduction = reduction or "mean"
  if reduction == "mean" or reduction == "sum" then return whole(loss, reduction) end
  if reduction == "none" then return loss end
  error(who .. ": reduction must be \"mean\", \"sum\" or \"none\", got " .. tostring(reduction), 0)
end

local function check_tensor(who, name, x)
  if not is_tensor(x) then error(string.format("%s: %s must be a tensor, got a %s", who, name, type(x)), 0) end
end

-- ------------------------------------------------------------- layers' ops
-- x @ weight^T + bias, weight (out_features, in_features) as PyTorch's
function F.linear(x, weight, bias)
  check_tensor("linear", "input", x)
  local n = x:size(x:dim())
  if n ~= weight:size(2) then
    error(string.format("linear: input has %d features (last dim), the weight takes %d", n, weight:size(2)), 0)
  end
  if bias == nil then return x:matmul(weight:t()) end
  -- with a bias, one addmm over the rows (x flattened to 2-D): the bias is written into the
  -- result and the GEMM adds the product to it (beta = 1), which costs no pass of its own,
  -- and autocast lowers the bias with the operands (PyTorch's linear), so a 16-bit product
  -- stays 16-bit rather than promoting to the bias's float32
  local d = x:dim()
  if d == 2 then return qlua.addmm(bias, x, weight:t()) end
  local shape = x:shape()
  local rows = x:reshape({ -1, n })
  shape[d] = weight:size(1)
  return qlua.addmm(bias, rows, weight:t()):reshape(shape)
end

-- x1^T A x2 per output: weight (out, in1, in2)
function F.bilinear(x1, x2, weight, bias)
  local y = qlua.einsum("...i,oij,...j->...o", x1, weight, x2)
  if bias ~= nil then y = y + bias end
  return y
end

function F.relu(x) return x:relu() end
function F.silu(x) return x:silu() end
function F.sigmoid(x) return x:sigmoid() end
function F.tanh(x) return x:tanh() end
-- approximate = "none" (the erf form, default) or "tanh"
function F.gelu(x, opts)
  local approximate = opts and opts.approximate or "none"
  if approximate == "none" then return x:gelu() end
  if approximate ~= "tanh" then
    error("gelu: approximate must be \"none\" or \"tanh\", got " .. tostring(approximate), 0)
  end
  return x:gelu_tanh()
end
function F.softmax(x, dim) return x:softmax(dim) end
function F.log_softmax(x, dim) return x:log_softmax(dim) end

-- zeroes each element with probability p while training, scaling the rest by 1 / (1 - p);
-- the mask comes from qlua's generator (rand_like), so one seed gives the same mask on
-- every device
function F.dropout(x, p, training)
  p = p or 0.5
  if type(p) ~= "number" or p < 0 or p > 1 then error("dropout: p must be in [0, 1], got " .. tostring(p), 0) end
  if training == false or p == 0 then return x end
  if p == 1 then return x * 0 end
  return qlua.where(qlua.rand_like(x):ge(p), x * (1 / (1 - p)), 0)
end

-- weight's rows at idx (any integer shape): idx's shape followed by weight's second dim
function F.embedding(idx, weight)
  check_tensor("embedding", "indices", idx)
  local shape = idx:shape()
  shape[#shape + 1] = weight:size(2)
  return weight:index_select(1, idx:reshape({ -1 })):reshape(shape)
end

-- int64 one-hot rows of 1-based classes: idx's shape followed by num_classes
function F.one_hot(idx, num_classes)
  check_tensor("one_hot", "indices", idx)
  if num_classes == nil then num_classes = idx:numel() > 0 and math.tointeger(idx:max()) or 0 end
  local shape = idx:shape()
  shape[#shape + 1] = num_classes
  local out = qlua.zeros(shape, { dtype = "int64", device = idx:device() })
  if idx:numel() == 0 then return out end
  return out:scatter_(#shape, idx:unsqueeze(#shape):long(), 1)
end

-- ------------------------------------------------------------- padding
-- pad = {left, right [, top, bottom [, front, back]]}: from the last dim inwards, as
-- PyTorch's F.pad; mode "constant" (value), "reflect" or "replicate". A composition of
-- narrow, flip, expand and cat, so autograd differentiates it.
function F.pad(x, pad, mode, value)
  check_tensor("pad", "input", x)
  mode = mode or "constant"
  if type(pad) ~= "table" or #pad % 2 ~= 0 or #pad // 2 > x:dim() then
    error(("pad: pad must be a list of pairs, one pair per dim from the last, at most %d pairs"):format(x:dim()), 0)
  end
  if mode ~= "constant" and mode ~= "reflect" and mode ~= "replicate" then
    error("pad: mode must be \"constant\", \"reflect\" or \"replicate\", got " .. tostring(mode), 0)
  end
  local y = x
  for k = 1, #pad // 2 do
    local d, lo, hi = x:dim() - k + 1, pad[2 * k - 1], pad[2 * k]
    if math.type(lo) ~= "integer" or math.type(hi) ~= "integer" then
      error("pad: the padding must be integers", 0)
    end
    local n = y:size(d)
    if lo < 0 or hi < 0 then
      -- negative padding crops, as PyTorch's
      local first, len = 1 + math.max(-lo, 0), n - math.max(-lo, 0) - math.max(-hi, 0)
      if len < 0 then error("pad: the negative padding removes more than dim " .. d .. " has", 0) end
      y = y:narrow(d, first, len)
      lo, hi, n = math.max(lo, 0), math.max(hi, 0), len
    end
    if mode == "reflect" and (lo >= n or hi >= n) then
      error(("pad: reflect padding of %d, %d must be below dim %d's size %d"):format(lo, hi, d, n), 0)
    end
    if mode == "replicate" and n == 0 and (lo > 0 or hi > 0) then
      error("pad: replicate padding of an empty dim " .. d, 0)
    end
    local function side(count, at_start)
      local shape = y:shape()
      shape[d] = count
      if mode == "constant" then
        return qlua.full(shape, value or 0, { dtype = y:dtype(), device = y:device() })
      elseif mode == "replicate" then
        return y:narrow(d, at_start and 1 or n, 1):expand(shape)
      end
      return y:narrow(d, at_start and 2 or n - count, count):flip(d)
    end
    local parts = {}
    if lo > 0 then parts[#parts + 1] = side(lo, true) end
    parts[#parts + 1] = y
    if hi > 0 then parts[#parts + 1] = side(hi, false) end
    if #parts > 1 then y = qlua.cat(parts, d) end
  end
  return y
end

-- ------------------------------------------------------------- convolutions
-- NCHW, weight (out, in / groups, kh, kw); opts stride, padding (a number, {h, w}, "same",
-- "valid"), dilation, groups: the runtime's qlua.conv2d (cuDNN on the GPU, im2col and
-- OpenBLAS on the CPU)
function F.conv2d(x, weight, bias, opts) return qlua.conv2d(x, weight, bias, opts) end
-- weight (in, out / groups, kh, kw); opts add output_padding
function F.conv_transpose2d(x, weight, bias, opts) return qlua.conv_transpose2d(x, weight, bias, opts) end

-- (N, C, L) as the 2-D convolution of (N, C, 1, L)
local CONV1D_H = { stride = 1, padding = 0, dilation = 1 }
function F.conv1d(x, weight, bias, opts)
  check_tensor("conv1d", "input", x)
  check_tensor("conv1d", "weight", weight)
  if x:dim() ~= 3 or weight:dim() ~= 3 then
    error(("conv1d: a 3-D input (N, C, L) and weight (out, in / groups, k) expected, got %d-D and %d-D"):format(x:dim(), weight:dim()), 0)
  end
  local o = {}
  for k, v in pairs(opts or {}) do
    if type(v) == "table" and #v == 1 then v = v[1] end
    if CONV1D_H[k] ~= nil and type(v) == "number" then o[k] = { CONV1D_H[k], v } else o[k] = v end
  end
  return qlua.conv2d(x:unsqueeze(3), weight:unsqueeze(3), bias, o):squeeze(3)
end

-- ------------------------------------------------------------- pooling
local function pair(v, who, what)
  if type(v) == "number" then v = { v, v } end
  if type(v) ~= "table" or #v ~= 2 or math.type(v[1]) ~= "integer" or math.type(v[2]) ~= "integer" then
    error(("%s: %s must be an integer or {h, w}"):format(who, what), 0)
  end
  return v
end

local function pool_opts(who, kernel_size, opts)
  opts = opts or {}
  local k = pair(kernel_size, who, "kernel_size")
  return k, pair(opts.stride or k, who, "stride"), pair(opts.padding or 0, who, "padding"),
         pair(opts.dilation or 1, who, "dilation")
end

-- max_pool2d(x, kernel_size [, {stride = kernel_size, padding = 0, dilation = 1,
-- ceil_mode = false, return_indices = false}]): the max of each window (padding is -inf);
-- with return_indices, also each max's 1-based flat position in its input plane (H * W),
-- the first of equal ones in window order, as PyTorch's (plus one)
function F.max_pool2d(x, kernel_size, opts)
  opts = opts or {}
  check_tensor("max_pool2d", "input", x)
  local k, s, p, d = pool_opts("max_pool2d", kernel_size, opts)
  local o = { kernel_size = k, stride = s, padding = p, dilation = d, ceil_mode = opts.ceil_mode }
  -- the positions are what the backward scatters to: made whenever the call records
  local want = opts.return_indices or (qlua.is_grad_enabled ~= nil and qlua.is_grad_enabled()
                                       and x:requires_grad())
  local y, idx = qlua._pool2d("max", x, o, want and true or false)
  if opts.return_indices then return y, idx end
  return y
end

-- avg_pool2d(x, kernel_size [, {stride = kernel_size, padding = 0, count_include_pad = true,
-- divisor_override}]): each window's mean (zeros for the padding; without
-- count_include_pad the divisor counts the input's elements only)
function F.avg_pool2d(x, kernel_size, opts)
  opts = opts or {}
  check_tensor("avg_pool2d", "input", x)
  local k, s, p = pool_opts("avg_pool2d", kernel_size, { stride = opts.stride, padding = opts.padding })
  return (qlua._pool2d("avg", x, { kernel_size = k, stride = s, padding = p, ceil_mode = opts.ceil_mode,
                                   count_include_pad = opts.count_include_pad ~= false,
                                   divisor_override = opts.divisor_override }))
end

-- adaptive_avg_pool2d(x, output_size): output cell (i, j) averages rows floor(i H / P) ..
-- ceil((i + 1) H / P) - 1 (0-based) and the same of the columns, as PyTorch's; separable, so
-- the rows are pooled first, then the columns
function F.adaptive_avg_pool2d(x, output_size)
  check_tensor("adaptive_avg_pool2d", "input", x)
  if x:dim() ~= 4 and x:dim() ~= 3 then
    error(("adaptive_avg_pool2d: a 3-D or 4-D input expected, got %d-D"):format(x:dim()), 0)
  end
  local size = type(output_size) == "number" and { output_size, output_size } or output_size
  local y = x
  for a = 1, 2 do
    local d = x:dim() - 2 + a
    local n, m = x:size(d), size[a]
    if m == nil then m = n end   -- nil keeps the input's size, as PyTorch's None
    if math.type(m) ~= "integer" or m < 1 then
      error("adaptive_avg_pool2d: output sizes must be integers >= 1", 0)
    end
    if n % m == 0 then
      local shape = y:shape()
      shape[d] = n // m
      table.insert(shape, d, m)
      y = y:reshape(shape):mean(d + 1)
    else
      local parts = {}
      for i = 0, m - 1 do
        local lo, hi = (i * n) // m, -((-(i + 1) * n) // m)
        parts[#parts + 1] = y:narrow(d, lo + 1, hi - lo):mean(d, true)
      end
      y = qlua.cat(parts, d)
    end
  end
  return y
end

-- ------------------------------------------------------------- interpolate
-- interpolate(x, {size = | scale_factor =, mode = "nearest" | "bilinear" | "linear",
-- align_corners = false}) over the dims after (N, C): PyTorch's source coordinates (for a
-- scale_factor, 1 / scale_factor maps them, as PyTorch's without recompute_scale_factor),
-- each dim on its own (the modes are separable): index_select of the source rows, and for
-- the linear modes their lerp, so autograd differentiates it
function F.interpolate(x, opts)
  check_tensor("interpolate", "input", x)
  opts = opts or {}
  local mode = opts.mode or "nearest"
  local nsp = x:dim() - 2
  if nsp < 1 or nsp > 2 then
    error(("interpolate: a 3-D (N, C, L) or 4-D (N, C, H, W) input expected, got %d-D"):format(x:dim()), 0)
  end
  if mode ~= "nearest" and mode ~= "bilinear" and mode ~= "linear" then
    error("interpolate: mode must be \"nearest\", \"linear\" or \"bilinear\", got " .. tostring(mode), 0)
  end
  if (mode == "bilinear" and nsp ~= 2) or (mode == "linear" and nsp ~= 1) then
    error(("interpolate: mode %s needs a %d-D input"):format(mode, mode == "bilinear" and 4 or 3), 0)
  end
  if (opts.size == nil) == (opts.scale_factor == nil) then
    error("interpolate: give exactly one of size and scale_factor", 0)
  end
  if mode == "nearest" and opts.align_corners ~= nil then
    error("interpolate: align_corners goes with the linear modes only", 0)
  end
  local function per_dim(v, what)
    if type(v) == "number" then local t = {}; for a = 1, nsp do t[a] = v end; return t end
    if type(v) ~= "table" or #v ~= nsp then error(("interpolate: %s must be a number or %d numbers"):format(what, nsp), 0) end
    return v
  end
  local sizes = opts.size and per_dim(opts.size, "size")
  local scales = opts.scale_factor and per_dim(opts.scale_factor, "scale_factor")
  local y = x
  for a = 1, nsp do
    local d = 2 + a
    local n = x:size(d)
    local m = sizes and sizes[a] or math.floor(n * scales[a])
    if math.type(m) ~= "integer" or m < 1 then error("interpolate: output sizes must be integers >= 1", 0) end
    local scale = scales and 1 / scales[a] or n / m
    local dev = x:device()
    local i0, i1, w = {}, {}, {}
    for j = 0, m - 1 do
      if mode == "nearest" then
        i0[j + 1] = math.min(math.floor(j * scale), n - 1) + 1
      else
        local src
        if opts.align_corners then src = m > 1 and j * (n - 1) / (m - 1) or 0
        else src = math.max((j + 0.5) * scale - 0.5, 0) end
        local lo = math.min(math.floor(src), n - 1)
        i0[j + 1], i1[j + 1], w[j + 1] = lo + 1, math.min(lo + 1, n - 1) + 1, src - lo
      end
    end
    local lo = y:index_select(d, qlua.tensor(i0, { dtype = "int64", device = dev }))
    if mode == "nearest" then
      y = lo
    else
      local hi = y:index_select(d, qlua.tensor(i1, { dtype = "int64", device = dev }))
      local shape = {}
      for k = 1, x:dim() do shape[k] = 1 end
      shape[d] = m
      local wt = qlua.tensor(w, { dtype = x:dtype(), device = dev }):reshape(shape)
      y = lo + (hi - lo) * wt
    end
  end
  return y
end

-- ------------------------------------------------------------- normalisation
local function last_dims(x, shape, who)
  if type(shape) == "number" then shape = { shape } end
  local nd, ns = x:dim(), #shape
  local dims = {}
  for k = 1, ns do
    local d = nd - ns + k
    if d < 1 or x:size(d) ~= shape[k] then
      error(string.format("%s: input of shape %s does not end in the normalized shape %s", who,
        table.concat(x:shape(), "x"), table.concat(shape, "x")), 0)
    end
    dims[k] = d
  end
  return dims
end

-- normalised over the last dims (those of normalized_shape), then weight and bias
function F.layer_norm(x, normalized_shape, weight, bias, eps)
  check_tensor("layer_norm", "input", x)
  local dims = last_dims(x, normalized_shape, "layer_norm")
  return (qlua._norm("layer", x, weight, bias, { eps = eps or 1e-5, normalized = #dims }))
end

-- PyTorch's default eps for rms_norm: the dtype's machine epsilon
local EPS = { float32 = 2 ^ -23, float64 = 2 ^ -52, float16 = 2 ^ -10, bfloat16 = 2 ^ -7 }
function F.rms_norm(x, normalized_shape, weight, eps)
  check_tensor("rms_norm", "input", x)
  local dims = last_dims(x, normalized_shape, "rms_norm")
  return (qlua._norm("rms", x, weight, nil, { eps = eps or EPS[x:dtype()] or 2 ^ -23, normalized = #dims }))
end

function F.group_norm(x, groups, weight, bias, eps)
  check_tensor("group_norm", "input", x)
  if math.type(groups) ~= "integer" then
    error("group_norm: groups must be an integer, got " .. tostring(groups), 0)
  end
  return (qlua._norm("group", x, weight, bias, { eps = eps or 1e-5, groups = groups }))
end

-- over the batch and spatial dims per channel (dim 2). training: the batch's statistics,
-- and running_mean / running_var (when given) move by momentum toward them (the unbiased
-- variance, as PyTorch); otherwise the running statistics
function F.batch_norm(x, running_mean, running_var, weight, bias, training, momentum, eps)
  eps, momentum = eps or 1e-5, momentum or 0.1
  check_tensor("batch_norm", "input", x)
  if not training then
    if running_mean == nil or running_var == nil then
      error("batch_norm: evaluation needs running_mean and running_var", 0)
    end
    return (qlua._norm("batch", x, weight, bias, { eps = eps, eval = true,
                                                   running_mean = running_mean, running_var = running_var }))
  end
  local y, mean, rstd = qlua._norm("batch", x, weight, bias, { eps = eps })
  if running_mean ~= nil or running_var ~= nil then
    local n = x:numel() // x:size(2)
    qlua.no_grad(function()   -- r += momentum (batch - r), in r's dtype
      local function move(r, t)
        r:lerp_(t:dtype() == r:dtype() and t or t:to(r:dtype()), momentum)
      end
      if running_mean ~= nil then move(running_mean, mean) end
      if running_var ~= nil then   -- the biased variance is rstd^-2 - eps; unbiased * n / (n - 1)
        move(running_var, rstd:pow(-2):sub(eps):mul(n / math.max(1, n - 1)))
      end
    end)
  end
  return y
end

-- ------------------------------------------------------------- attention

-- the options scaled_dot_product_attention passes down: a fresh table per call, which
-- _attention fills with the dropout counters it drew (its backward reads them there)
local function attention_opts(who, q, opts)
  opts = opts or {}
  if type(opts) ~= "table" then error(who .. ": opts must be a table, got a " .. type(opts), 0) end
  local mask = opts.attn_mask
  if mask ~= nil then
    check_tensor(who, "attn_mask", mask)
    if opts.is_causal then error(who .. ": attn_mask and is_causal cannot both be given", 0) end
    if qlua.is_grad_enabled() and mask:requires_grad() then
      error(who .. ": attn_mask gets no gradient here; pass it detached (mask:detach())", 0)
    end
  end
  local p = opts.dropout_p or 0
  if type(p) ~= "number" or not (p >= 0 and p <= 1) then
    error(who .. ": dropout_p must be a number in [0, 1], got " .. tostring(p), 0)
  end
  if opts.scale ~= nil and type(opts.scale) ~= "number" then
    error(who .. ": scale must be a number, got a " .. type(opts.scale), 0)
  end
  return mask, { dropout_p = p, is_causal = opts.is_causal and true or false, scale = opts.scale,
                 enable_gqa = opts.enable_gqa and true or false }
end

-- PyTorch's scaled_dot_product_attention: softmax(q k^T * scale + mask) v over the last two
-- dims, q (..., heads, L, E), k (..., kv_heads, S, E), v (..., kv_heads, S, Ev). opts:
-- attn_mask (bool: true takes part; float: added), is_causal (top-left aligned), dropout_p,
-- scale (default 1 / sqrt(E)), enable_gqa (kv_heads dividing heads). Fused kernels with an
-- online softmax on every device (qlua._attention), forward and backward; a row whose keys
-- are all masked gives 0
function F.scaled_dot_product_attention(q, k, v, opts)
  local who = "scaled_dot_product_attention"
  check_tensor(who, "query", q)
  check_tensor(who, "key", k)
  check_tensor(who, "value", v)
  local mask, o = attention_opts(who, q, opts)
  return (qlua._attention(q, k, v, mask, o))
end

-- which kernels scaled_dot_product_attention runs for these operands and opts: the
-- forward's name and the backward's
function F.attention_path(q, k, v, opts)
  local mask, o = attention_opts("attention_path", q, opts)
  return qlua._attention_path(q, k, v, mask, o)
end

-- rotary position embedding (RoFormer; the rotate-half layout of GPT-NeoX and Hugging Face's
-- Llama): x (..., seq, dim) with dim even; position offset + t of row t turns the pairs
-- (x_i, x_(i + dim/2)) by angle pos * base^(-2i / dim). opts: base (10000), offset (0: the
-- first position, for a KV cache's new rows)
local rotary_tables = setmetatable({}, { __mode = "v" })
function F.rotary(x, opts)
  check_tensor("rotary", "input", x)
  opts = opts or {}
  local base, offset = opts.base or 10000, opts.offset or 0
  local n = x:dim()
  if n < 2 then error("rotary: an input of (..., seq, dim) expected, got " .. x:dim() .. "-D", 0) end
  local seq, dim = x:size(n - 1), x:size(n)
  if dim % 2 ~= 0 then error("rotary: the last dim must be even, got " .. dim, 0) end
  if math.type(offset) ~= "integer" or offset < 0 then
    error("rotary: offset must be an integer >= 0, got " .. tostring(offset), 0)
  end
  local key = table.concat({ seq, dim, base, offset, x:device(), x:dtype() }, ":")
  local t = rotary_tables[key]
  if t == nil then
    local half = dim // 2
    local inv = qlua.arange(0, half, { dtype = "float64" }):mul(-2 / dim):mul(math.log(base)):exp()
    local pos = qlua.arange(offset, offset + seq, { dtype = "float64" })
    local ang = pos:reshape({ seq, 1 }) * inv:reshape({ 1, half })
    ang = qlua.cat({ ang, ang }, 2)
    t = { cos = ang:cos():to(x:dtype()):to(x:device()), sin = ang:sin():to(x:dtype()):to(x:device()) }
    rotary_tables[key] = t
  end
  local half = dim // 2
  local x1, x2 = x:narrow(n, 1, half), x:narrow(n, half + 1, half)
  return x * t.cos + qlua.cat({ -x2, x1 }, n) * t.sin
end

-- ------------------------------------------------------------- sampling

-- next tokens from logits (..., vocab): a 1-based int64 index per row, drawn on the logits'
-- device from qlua's generator (so a seed repeats a generation). opts: temperature (1; 0
-- means greedy), greedy (argmax), top_k (keep the k largest), top_p (keep the smallest set
-- of the largest whose probabilities sum to at least p: nucleus sampling)
function F.sample(logits, opts)
  check_tensor("sample", "logits", logits)
  opts = opts or {}
  local n = logits:dim()
  if n < 1 then error("sample: logits of (..., vocab) expected, got a 0-d tensor", 0) end
  local vocab = logits:size(n)
  local shape = logits:shape()
  shape[n] = nil
  local rows = qlua.no_grad(function() return logits:detach():reshape({ -1, vocab }):float() end)
  local t = opts.temperature or 1
  if type(t) ~= "number" or t < 0 then error("sample: temperature must be a number >= 0, got " .. tostring(t), 0) end
  if opts.greedy or t == 0 then return rows:argmax(2):reshape(shape) end
  rows = rows / t
  local pick   -- row r's choice maps through pick's indices when the row was cut down
  local k = opts.top_k
  if k ~= nil then
    if math.type(k) ~= "integer" or k < 1 then error("sample: top_k must be an integer >= 1, got " .. tostring(k), 0) end
    if k < vocab then rows, pick = rows:topk(k, 2) end
  end
  local p = opts.top_p
  if p ~= nil then
    if type(p) ~= "number" or not (p > 0 and p <= 1) then error("sample: top_p must be in (0, 1], got " .. tostring(p), 0) end
    local sorted, order = rows:sort(2, true)
    local probs = sorted:softmax(2)
    -- drop a token when the ones above it already reach p (the first always stays)
    local drop = (probs:cumsum(2) - probs):ge(p)
    rows = sorted:masked_fill(drop, -math.huge)
    pick = pick and pick:gather(2, order) or order
  end
  local choice = qlua.multinomial(rows:softmax(2), 1)
  if pick then choice = pick:gather(2, choice) end
  return choice:reshape(shape)
end

-- ------------------------------------------------------------- losses
function F.mse_loss(x, y, opts)
  return reduce((x - y) ^ 2, opts and opts.reduction, "mse_loss")
end
function F.l1_loss(x, y, opts)
  return reduce((x - y):abs(), opts and opts.reduction, "l1_loss")
end
-- |d| < beta: 0.5 d^2 / beta, else |d| - 0.5 beta
function F.smooth_l1_loss(x, y, opts)
  local beta = opts and opts.beta or 1
  local d = (x - y):abs()
  local loss = beta == 0 and d or qlua.where(d:lt(beta), d * d * (0.5 / beta), d - 0.5 * beta)
  return reduce(loss, opts and opts.reduction, "smooth_l1_loss")
end

-- log-probabilities (N x C, or C) and 1-based class targets; opts: weight (per class),
-- ignore_index, reduction ("mean" divides by the targets' summed weights, as PyTorch)
function F.nll_loss(logp, target, opts)
  opts = opts or {}
  local cdim = logp:dim() == 1 and 1 or 2
  if not is_tensor(target) then target = qlua.tensor(target, { dtype = "int64", device = logp:device() }) end
  local t = target
  local keep
  if opts.ignore_index ~= nil then
    keep = t:ne(opts.ignore_index)
    t = qlua.where(keep, t, 1)
  end
  local idx = cdim == 2 and t:reshape({ -1, 1 }) or t:reshape({ 1 })
  local picked = -logp:gather(cdim, idx:long()):reshape(t:shape())
  local w
  if opts.weight ~= nil then w = opts.weight:index_select(1, t:reshape({ -1 }):long()):reshape(t:shape()) end
  if keep then
    local k = keep:to(logp:dtype())
    w = w and w * k or k
  end
  if w then picked = picked * w end
  local red = opts.reduction or "mean"
  if red == "mean" and w then return whole(picked, "sum") / whole(w, "sum") end
  return reduce(picked, red, "nll_loss")
end

-- qlua.cross_entropy, with class weights through log_softmax and nll_loss
function F.cross_entropy(logits, target, opts)
  opts = opts or {}
  if opts.weight == nil then
    local o = {}
    for k, v in pairs(opts) do if k ~= "weight" then o[k] = v end end
    return qlua.cross_entropy(logits, target, o)
  end
  if (opts.label_smoothing or 0) ~= 0 then
    error("cross_entropy: class weights with label_smoothing are not supported yet", 0)
  end
  local cdim = logits:dim() == 1 and 1 or 2
  return F.nll_loss(logits:log_softmax(cdim), target, opts)
end

-- -(y log p + (1 - y) log(1 - p)), each log clamped at -100 as PyTorch's
function F.binary_cross_entropy(p, y, opts)
  opts = opts or {}
  local loss = -(y * p:log():clamp(-100, nil) + (-y + 1) * (-p + 1):log():clamp(-100, nil))
  if opts.weight ~= nil then loss = loss * opts.weight end
  return reduce(loss, opts.reduction, "binary_cross_entropy")
end

-- the stable form: (1 - y) x + (1 + (pos_weight - 1) y) (log1p(exp(-|x|)) + max(-x, 0))
function F.binary_cross_entropy_with_logits(x, y, opts)
  opts = opts or {}
  local soft = (-x:abs()):exp():log1p() + (-x):relu()
  local scale = opts.pos_weight ~= nil and (y * (opts.pos_weight - 1) + 1) or 1
  local loss = (-y + 1) * x + soft * scale
  if opts.weight ~= nil then loss = loss * opts.weight end
  return reduce(loss, opts.reduction, "binary_cross_entropy_with_logits")
end

-- input: log-probabilities; target: probabilities (log_target: log-probabilities);
-- target log(target / exp(input)), 0 where target is 0; reduction "mean" (every element),
-- "batchmean" (the first dim), "sum", "none"
function F.kl_div(input, target, opts)
  opts = opts or {}
  local loss
  if opts.log_target then
    loss = target:exp() * (target - input)
  else
    loss = qlua.where(target:gt(0), target * (qlua.where(target:gt(0), target, 1):log() - input), 0)
  end
  local red = opts.reduction or "mean"
  if red == "batchmean" then return whole(loss, "sum") / (input:dim() > 0 and input:size(1) or 1) end
  return reduce(loss, red, "kl_div")
end

return F
