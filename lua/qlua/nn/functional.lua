--[[
lua/qlua/nn/functional.lua — qlua.nn.functional: PyTorch's torch.nn.functional ops that
qlua.nn's layers are made of, written with qlua's tensor ops (so autograd differentiates
them, on every device and floating dtype). Dims are 1-based, as everywhere in qlua.

The normalisations here (layer_norm, rms_norm, group_norm, batch_norm) are compositions of
qlua's reductions, not yet the fused kernels docs/API.md's roadmap names.
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
  local y = x:matmul(weight:t())
  if bias ~= nil then y = y + bias end
  return y
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
  return x * 0.5 * (((x + x * x * x * 0.044715) * math.sqrt(2 / math.pi)):tanh() + 1)
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
  local dims = last_dims(x, normalized_shape, "layer_norm")
  local mean = x:mean(dims, true)
  local var = x:var(dims, { correction = 0, keepdim = true })
  local y = (x - mean) * (var + (eps or 1e-5)):rsqrt()
  if weight ~= nil then y = y * weight end
  if bias ~= nil then y = y + bias end
  return y
end

-- PyTorch's default eps for rms_norm: the dtype's machine epsilon
local EPS = { float32 = 2 ^ -23, float64 = 2 ^ -52, float16 = 2 ^ -10, bfloat16 = 2 ^ -7 }
function F.rms_norm(x, normalized_shape, weight, eps)
  local dims = last_dims(x, normalized_shape, "rms_norm")
  local y = x * ((x * x):mean(dims, true) + (eps or EPS[x:dtype()] or 2 ^ -23)):rsqrt()
  if weight ~= nil then y = y * weight end
  return y
end

-- channels are dim 2 (N, C, ...): a per-channel affine shape
local function channel_shape(x, n)
  local s = {}
  for d = 1, x:dim() do s[d] = 1 end
  s[2] = n
  return s
end

function F.group_norm(x, groups, weight, bias, eps)
  local shape = x:shape()
  local C = shape[2]
  if C == nil or C % groups ~= 0 then
    error(string.format("group_norm: %s channels do not split into %d groups", tostring(C), groups), 0)
  end
  local g = x:reshape({ shape[1], groups, -1 })
  local mean = g:mean(3, true)
  local var = g:var(3, { correction = 0, keepdim = true })
  local y = ((g - mean) * (var + (eps or 1e-5)):rsqrt()):reshape(shape)
  if weight ~= nil then y = y * weight:reshape(channel_shape(x, C)) end
  if bias ~= nil then y = y + bias:reshape(channel_shape(x, C)) end
  return y
end

-- over the batch and spatial dims per channel (dim 2). training: the batch's statistics,
-- and running_mean / running_var (when given) move by momentum toward them (the unbiased
-- variance, as PyTorch); otherwise the running statistics
function F.batch_norm(x, running_mean, running_var, weight, bias, training, momentum, eps)
  eps, momentum = eps or 1e-5, momentum or 0.1
  local C = x:size(2)
  local dims = { 1 }
  for d = 3, x:dim() do dims[#dims + 1] = d end
  local cs = channel_shape(x, C)
  local mean, var
  if training then
    mean = x:mean(dims, true)
    var = x:var(dims, { correction = 0, keepdim = true })
    if running_mean ~= nil then
      local n = x:numel() // C
      qlua.no_grad(function()
        running_mean:mul_(1 - momentum):add_(mean:detach():reshape({ C }) * momentum)
        running_var:mul_(1 - momentum):add_(var:detach():reshape({ C }) * (momentum * n / math.max(1, n - 1)))
      end)
    end
  else
    mean, var = running_mean:reshape(cs), running_var:reshape(cs)
  end
  local y = (x - mean) * (var + eps):rsqrt()
  if weight ~= nil then y = y * weight:reshape(cs) end
  if bias ~= nil then y = y + bias:reshape(cs) end
  return y
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
