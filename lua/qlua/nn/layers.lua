--[[
lua/qlua/nn/layers.lua — qlua.nn's layers, each a Module subclass with PyTorch's name,
arguments (options in a table), parameter names and initialisation; forward is the
matching qlua.nn.functional op. opts.dtype and opts.device place the parameters.

The convolutions run on the runtime's qlua.conv2d (cuDNN on the GPU); the poolings are
compositions of strided views (nn/functional.lua). Not here yet: fused normalisation
kernels.
]]
return function(nn)
local qlua = rawget(_G, "qlua") or require("qlua")
local F, I, Module = nn.functional, nn.init, nn.Module

local function param(shape, opts)
  opts = opts or {}
  return qlua.zeros(shape, { dtype = opts.dtype, device = opts.device }):requires_grad_()
end
local function count(name, v)
  if math.type(v) ~= "integer" or v < 0 then
    error(string.format("%s: sizes must be integers >= 0, got %s", name, tostring(v)), 0)
  end
  return v
end
-- the bias bound of Linear and Bilinear: 1 / sqrt(fan_in)
local function bound_of(fan_in) return fan_in > 0 and 1 / math.sqrt(fan_in) or 0 end

-- ------------------------------------------------------------- Linear, Bilinear
local Linear = Module:extend("Linear")
nn.Linear = Linear
function Linear:init(in_features, out_features, opts)
  opts = opts or {}
  self.in_features, self.out_features = count("Linear", in_features), count("Linear", out_features)
  self.weight = param({ out_features, in_features }, opts)
  I.kaiming_uniform_(self.weight, { a = math.sqrt(5) })
  if opts.bias ~= false then
    self.bias = param({ out_features }, opts)
    local b = bound_of(in_features)
    I.uniform_(self.bias, -b, b)
  end
end
function Linear:forward(x) return F.linear(x, self.weight, self.bias) end
function Linear:extra_repr()
  return ("in_features=%d, out_features=%d, bias=%s"):format(self.in_features, self.out_features, tostring(self.bias ~= nil))
end

local Bilinear = Module:extend("Bilinear")
nn.Bilinear = Bilinear
function Bilinear:init(in1, in2, out, opts)
  opts = opts or {}
  count("Bilinear", in1); count("Bilinear", in2); count("Bilinear", out)
  local b = bound_of(in1)
  self.weight = param({ out, in1, in2 }, opts)
  I.uniform_(self.weight, -b, b)
  if opts.bias ~= false then
    self.bias = param({ out }, opts)
    I.uniform_(self.bias, -b, b)
  end
end
function Bilinear:forward(x1, x2) return F.bilinear(x1, x2, self.weight, self.bias) end

-- ------------------------------------------------------------- convolutions
-- Conv1d/Conv2d(in, out, kernel_size [, {stride, padding, dilation, groups, bias = true,
-- padding_mode = "zeros", dtype, device}]), ConvTranspose2d(... {output_padding}): weight
-- (out, in / groups, k...) (ConvTranspose2d: (in, out / groups, kh, kw)) initialised as
-- PyTorch's, kaiming_uniform_ with a = sqrt(5), the bias uniform in +-1/sqrt(fan_in)
local PADDING_MODES = { zeros = "constant", reflect = "reflect", replicate = "replicate" }
local function conv_layer(name, dims, transposed)
  local C = Module:extend(name)
  function C:init(cin, cout, kernel_size, opts)
    opts = opts or {}
    count(name, cin); count(name, cout)
    local groups = opts.groups or 1
    if math.type(groups) ~= "integer" or groups < 1 or cin % groups ~= 0 or cout % groups ~= 0 then
      error(("%s: groups must divide in_channels (%d) and out_channels (%d), got %s"):format(name, cin, cout, tostring(groups)), 0)
    end
    local k = type(kernel_size) == "table" and kernel_size or {}
    if type(kernel_size) == "number" then for d = 1, dims do k[d] = kernel_size end end
    if #k ~= dims then error(("%s: kernel_size must be a number or %d numbers"):format(name, dims), 0) end
    for d = 1, dims do count(name, k[d]) end
    self.padding_mode = opts.padding_mode or "zeros"
    if PADDING_MODES[self.padding_mode] == nil then
      error(name .. ": padding_mode must be \"zeros\", \"reflect\" or \"replicate\", got " .. tostring(self.padding_mode), 0)
    end
    if transposed and self.padding_mode ~= "zeros" then
      error(name .. ": only padding_mode \"zeros\" is supported, as PyTorch's", 0)
    end
    self.in_channels, self.out_channels, self.kernel_size, self.groups = cin, cout, k, groups
    self.stride, self.padding, self.dilation = opts.stride or 1, opts.padding or 0, opts.dilation or 1
    self.output_padding = opts.output_padding
    local shape = transposed and { cin, cout // groups } or { cout, cin // groups }
    for d = 1, dims do shape[#shape + 1] = k[d] end
    self.weight = param(shape, opts)
    I.kaiming_uniform_(self.weight, { a = math.sqrt(5) })
    if opts.bias ~= false then
      self.bias = param({ cout }, opts)
      local fan_in = shape[2]
      for d = 1, dims do fan_in = fan_in * k[d] end
      local b = bound_of(fan_in)
      I.uniform_(self.bias, -b, b)
    end
  end
  function C:conv_opts()
    return { stride = self.stride, padding = self.padding, dilation = self.dilation, groups = self.groups,
             output_padding = self.output_padding }
  end
  function C:forward(x)
    if not qlua.is_tensor(x) or x:dim() ~= dims + 2 or x:size(2) ~= self.in_channels then
      error(("%s: expected an input (N, %d, %s) of %d channels, got %s"):format(name, self.in_channels,
        dims == 1 and "L" or "H, W", self.in_channels,
        qlua.is_tensor(x) and table.concat(x:shape(), "x") or type(x)), 0)
    end
    local o = self:conv_opts()
    if self.padding_mode ~= "zeros" and o.padding ~= 0 then
      -- pad explicitly with the mode, then convolve without padding
      local p = type(o.padding) == "table" and o.padding or {}
      if type(o.padding) == "number" then for d = 1, dims do p[d] = o.padding end end
      if type(o.padding) == "string" then error(name .. ": padding_mode needs numeric padding", 0) end
      local pads = {}
      for d = dims, 1, -1 do pads[#pads + 1] = p[d]; pads[#pads + 1] = p[d] end
      x = F.pad(x, pads, PADDING_MODES[self.padding_mode])
      o.padding = 0
    end
    if transposed then return F.conv_transpose2d(x, self.weight, self.bias, o) end
    if dims == 1 then return F.conv1d(x, self.weight, self.bias, o) end
    o.output_padding = nil
    return F.conv2d(x, self.weight, self.bias, o)
  end
  function C:extra_repr()
    return ("%d, %d, kernel_size=%s, stride=%s"):format(self.in_channels, self.out_channels,
      table.concat(self.kernel_size, "x"), type(self.stride) == "table" and table.concat(self.stride, "x") or tostring(self.stride))
  end
  return C
end
nn.Conv1d = conv_layer("Conv1d", 1, false)
nn.Conv2d = conv_layer("Conv2d", 2, false)
nn.ConvTranspose2d = conv_layer("ConvTranspose2d", 2, true)

-- ------------------------------------------------------------- pooling
local function pool_layer(name, fn, fields)
  local C = Module:extend(name)
  function C:init(first, opts)
    self.opts = {}
    for k, v in pairs(opts or {}) do
      if not fields[k] then error(("%s: unknown option '%s'"):format(name, tostring(k)), 0) end
      self.opts[k] = v
    end
    self.size = first
  end
  function C:forward(x) return fn(x, self.size, self.opts) end
  return C
end
nn.MaxPool2d = pool_layer("MaxPool2d", F.max_pool2d,
  { stride = true, padding = true, dilation = true, ceil_mode = true, return_indices = true })
nn.AvgPool2d = pool_layer("AvgPool2d", F.avg_pool2d,
  { stride = true, padding = true, ceil_mode = true, count_include_pad = true, divisor_override = true })
nn.AdaptiveAvgPool2d = pool_layer("AdaptiveAvgPool2d", function(x, size) return F.adaptive_avg_pool2d(x, size) end, {})

-- ------------------------------------------------------------- Embedding
local Embedding = Module:extend("Embedding")
nn.Embedding = Embedding
-- padding_idx (1-based): that row starts at zero and gets no gradient
local function embedding_fn(pad)
  return qlua.autograd.Function{
    name = "embedding",
    forward = function(ctx, idx, w)
      ctx:save_for_backward(idx)
      ctx.rows = w:size(1)
      return F.embedding(idx, w)
    end,
    backward = function(ctx, g)
      local idx = ctx.saved_tensors[1]
      local d = g:size(g:dim())
      local gw = qlua.zeros({ ctx.rows, d }, { dtype = g:dtype(), device = g:device() })
      gw:index_add_(1, idx:reshape({ -1 }), g:reshape({ -1, d }))
      if pad then gw:select(1, pad):zero_() end
      return nil, gw
    end,
  }
end
function Embedding:init(num, dim, opts)
  opts = opts or {}
  count("Embedding", num); count("Embedding", dim)
  self.num_embeddings, self.embedding_dim = num, dim
  local pad = opts.padding_idx
  if pad ~= nil and pad < 0 then pad = pad + num + 1 end
  if pad ~= nil and (pad < 1 or pad > num) then
    error(string.format("Embedding: padding_idx %s out of range (1..%d)", tostring(opts.padding_idx), num), 0)
  end
  self.padding_idx = pad
  self.weight = param({ num, dim }, opts)
  I.normal_(self.weight)
  if pad then qlua.no_grad(function() self.weight:select(1, pad):zero_() end) end
  self._fn = embedding_fn(pad)
end
function Embedding:forward(idx)
  if self.padding_idx then return self._fn(idx, self.weight) end
  return F.embedding(idx, self.weight)
end

-- ------------------------------------------------------------- shape and activations
local function simple(name, fn, fields)
  local C = Module:extend(name)
  nn[name] = C
  -- the fields positionally (Softmax(2), Dropout(0.1)) or by name in one table
  -- (GELU{approximate = "tanh"}, Flatten{start_dim = 1})
  function C:init(...)
    local args = { ... }
    local named = type(args[1]) == "table" and not qlua.is_tensor(args[1]) and args[1] or nil
    for i, f in ipairs(fields or {}) do
      local v
      if named then v = named[f[1]] else v = args[i] end
      if v == nil then v = f[2] end
      self[f[1]] = v
    end
  end
  C.forward = fn
  return C
end
simple("Identity", function(_, x) return x end)
-- Flatten(start_dim = 2, end_dim = -1): PyTorch's Flatten(1, -1), 1-based
simple("Flatten", function(self, x)
  local s, e = self.start_dim, self.end_dim
  local n = x:dim()
  if s < 0 then s = s + n + 1 end
  if e < 0 then e = e + n + 1 end
  local shape, merged = {}, 1
  for d = 1, n do
    if d < s or d > e then shape[#shape + 1] = x:size(d)
    else
      merged = merged * x:size(d)
      if d == e then shape[#shape + 1] = merged end
    end
  end
  return x:reshape(shape)
end, { { "start_dim", 2 }, { "end_dim", -1 } })
simple("ReLU", function(_, x) return x:relu() end)
simple("SiLU", function(_, x) return x:silu() end)
simple("Tanh", function(_, x) return x:tanh() end)
simple("Sigmoid", function(_, x) return x:sigmoid() end)
simple("GELU", function(self, x) return F.gelu(x, { approximate = self.approximate }) end, { { "approximate", "none" } })
simple("Softmax", function(self, x) return x:softmax(self.dim) end, { { "dim", -1 } })
simple("LogSoftmax", function(self, x) return x:log_softmax(self.dim) end, { { "dim", -1 } })
simple("Dropout", function(self, x) return F.dropout(x, self.p, self.training) end, { { "p", 0.5 } })

-- ------------------------------------------------------------- normalisation
local function shape_of(s) return type(s) == "number" and { s } or s end

local LayerNorm = Module:extend("LayerNorm")
nn.LayerNorm = LayerNorm
function LayerNorm:init(normalized_shape, opts)
  opts = opts or {}
  self.normalized_shape, self.eps = shape_of(normalized_shape), opts.eps or 1e-5
  if opts.elementwise_affine ~= false then
    self.weight = param(self.normalized_shape, opts)
    I.ones_(self.weight)
    if opts.bias ~= false then self.bias = param(self.normalized_shape, opts) end
  end
end
function LayerNorm:forward(x) return F.layer_norm(x, self.normalized_shape, self.weight, self.bias, self.eps) end

local RMSNorm = Module:extend("RMSNorm")
nn.RMSNorm = RMSNorm
function RMSNorm:init(normalized_shape, opts)
  opts = opts or {}
  self.normalized_shape, self.eps = shape_of(normalized_shape), opts.eps
  if opts.elementwise_affine ~= false then
    self.weight = param(self.normalized_shape, opts)
    I.ones_(self.weight)
  end
end
function RMSNorm:forward(x) return F.rms_norm(x, self.normalized_shape, self.weight, self.eps) end

local GroupNorm = Module:extend("GroupNorm")
nn.GroupNorm = GroupNorm
function GroupNorm:init(groups, channels, opts)
  opts = opts or {}
  if channels % groups ~= 0 then
    error(string.format("GroupNorm: %d channels do not split into %d groups", channels, groups), 0)
  end
  self.num_groups, self.num_channels, self.eps = groups, channels, opts.eps or 1e-5
  if opts.affine ~= false then
    self.weight = param({ channels }, opts); I.ones_(self.weight)
    self.bias = param({ channels }, opts)
  end
end
function GroupNorm:forward(x)
  if x:size(2) ~= self.num_channels then
    error(string.format("GroupNorm: input has %d channels (dim 2), the layer %d", x:size(2), self.num_channels), 0)
  end
  return F.group_norm(x, self.num_groups, self.weight, self.bias, self.eps)
end

-- BatchNorm1d (N x C or N x C x L) and BatchNorm2d (N x C x H x W): running_mean,
-- running_var and num_batches_tracked are buffers
local function batch_norm_class(name, dims)
  local C = Module:extend(name)
  nn[name] = C
  function C:init(features, opts)
    opts = opts or {}
    self.num_features, self.eps = features, opts.eps or 1e-5
    self.momentum = opts.momentum == nil and 0.1 or opts.momentum
    local o = { dtype = opts.dtype, device = opts.device }
    if opts.affine ~= false then
      self.weight = param({ features }, o); I.ones_(self.weight)
      self.bias = param({ features }, o)
    end
    if opts.track_running_stats ~= false then
      self:register_buffer("running_mean", qlua.zeros({ features }, o))
      self:register_buffer("running_var", qlua.ones({ features }, o))
      self:register_buffer("num_batches_tracked", qlua.zeros({}, { dtype = "int64", device = opts.device }))
    end
  end
  function C:forward(x)
    local ok = false
    for _, d in ipairs(dims) do if x:dim() == d then ok = true end end
    if not ok then
      error(string.format("%s: expects an input of %s dims, got %d", name, table.concat(dims, " or "), x:dim()), 0)
    end
    if x:size(2) ~= self.num_features then
      error(string.format("%s: input has %d channels (dim 2), the layer %d", name, x:size(2), self.num_features), 0)
    end
    local training = self.training or self.running_mean == nil
    if self.training and self.running_mean ~= nil then
      qlua.no_grad(function() self.num_batches_tracked:add_(1) end)
    end
    return F.batch_norm(x, self.running_mean, self.running_var, self.weight, self.bias, training,
                        self.momentum, self.eps)
  end
end
batch_norm_class("BatchNorm1d", { 2, 3 })
batch_norm_class("BatchNorm2d", { 4 })

-- ------------------------------------------------------------- containers
local Sequential = Module:extend("Sequential")
nn.Sequential = Sequential
-- Sequential(m1, m2, ...) or Sequential{m1, m2, ...}. The children are named "0", "1",
-- ... as PyTorch's (so state_dict names match a PyTorch model's: "0.weight"); get(i) and
-- ipairs count from 1, as Lua does.
function Sequential:init(...)
  local list = { ... }
  if #list == 1 and not nn.is_module(list[1]) and type(list[1]) == "table" then list = list[1] end
  for i, m in ipairs(list) do
    if not nn.is_module(m) then error(string.format("Sequential: item %d is not a module", i), 0) end
    self[tostring(i - 1)] = m
  end
  self.n = #list
end
function Sequential:forward(x)
  for i = 0, self.n - 1 do x = self[tostring(i)](x) end
  return x
end
function Sequential:get(i) return self[tostring(i - 1)] end
function Sequential:len() return self.n end
function Sequential:append(m) self[tostring(self.n)] = m; self.n = self.n + 1; return self end

local ModuleList = Module:extend("ModuleList")
nn.ModuleList = ModuleList
function ModuleList:init(list)
  self.n = 0
  for _, m in ipairs(list or {}) do self:append(m) end
end
-- (children "0", "1", ... as Sequential's)
function ModuleList:append(m)
  if not nn.is_module(m) then error("ModuleList: append takes a module", 0) end
  self[tostring(self.n)] = m
  self.n = self.n + 1
  return self
end
function ModuleList:get(i) return self[tostring(i - 1)] end
function ModuleList:len() return self.n end
function ModuleList:ipairs()
  local i = 0
  return function() i = i + 1; if i <= self.n then return i, self[tostring(i - 1)] end end
end

local ModuleDict = Module:extend("ModuleDict")
nn.ModuleDict = ModuleDict
-- ModuleDict{name = module, ...}: children in the names' sorted order
function ModuleDict:init(map)
  local names = {}
  for k in pairs(map or {}) do names[#names + 1] = k end
  table.sort(names)
  for _, k in ipairs(names) do self[k] = map[k] end
end
function ModuleDict:get(k) return self[k] end
end
