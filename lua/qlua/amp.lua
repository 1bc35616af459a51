--[[
lua/qlua/amp.lua — mixed precision (docs/API.md "Mixed precision"): qlua.autocast and
qlua.amp.GradScaler, PyTorch's torch.autocast and torch.amp.GradScaler in qlua's style.

  qlua.autocast(dtype, fn, ...) runs fn(...) with the ops of PyTorch's CUDA autocast lists
  changed: the lower-precision ones (products, convolutions, attention) take their float32
  operands cast to dtype ("bfloat16" or "float16"), the float32 ones (softmax, log_softmax,
  logsumexp, cross_entropy, the normalisations, exp, log, pow) take their 16-bit operands
  cast to float32. Other ops run in their inputs' dtype (mixed operands promote as usual),
  float64 is left alone, and the casts are ordinary recorded ops, so autograd's gradients
  reach the float32 leaves in float32. Nested calls use the innermost dtype;
  qlua.autocast(false, fn, ...) turns it off inside. It wraps the autograd-aware functions
  (loaded first), once.
]]
local qlua = rawget(_G, "qlua") or require("qlua")
require("qlua.autograd")
if qlua.amp then return qlua.amp end

local amp = {}
local current = nil   -- the autocast dtype now, or nil
local METHODS = rawget(qlua.Tensor, "__methods")   -- t:name(...) looks here (autograd's wrappers)

-- PyTorch's lists (torch/csrc/autograd/... autocast_mode.cpp, CUDA), for the ops qlua has
local LOWER_METHODS = { "matmul", "mm", "bmm" }
local LOWER_FUNCTIONS = { "matmul", "addmm", "einsum", "conv2d", "conv_transpose2d", "_attention" }
local FP32_METHODS = { "softmax", "log_softmax", "logsumexp", "exp", "log", "pow", "cumsum" }
local FP32_FUNCTIONS = { "cross_entropy", "_norm" }

local function is_tensor(x) return qlua.is_tensor(x) end
local HALF = { float16 = true, bfloat16 = true }

local function down(x)   -- float32 -> the autocast dtype
  if is_tensor(x) and x:dtype() == "float32" then return x:to(current) end
  return x
end
local function up(x)     -- 16-bit -> float32
  if is_tensor(x) and HALF[x:dtype()] then return x:float() end
  return x
end

-- f's tensor arguments (and those in a list argument, einsum's, cat's) through cast
local function cast_args(cast, ...)
  local n = select("#", ...)
  local args = { ... }
  for i = 1, n do
    local a = args[i]
    if type(a) == "table" and not is_tensor(a) and a[1] ~= nil and is_tensor(a[1]) then
      local l = {}
      for j, t in ipairs(a) do l[j] = cast(t) end
      args[i] = l
    else
      args[i] = cast(a)
    end
  end
  return table.unpack(args, 1, n)
end

-- qlua.help finds functions by identity too: a wrapper takes over its function's entry
local api = debug.getregistry()["qlua.api"]
local function wrap(fn, cast)
  local w = function(...)
    if current == nil then return fn(...) end
    return fn(cast_args(cast, ...))
  end
  if type(api) == "table" then
    for _, e in ipairs(api) do
      if e.fn == fn then e.fn = w end
    end
  end
  return w
end

for _, name in ipairs(LOWER_METHODS) do
  local fn = METHODS[name]
  if fn then METHODS[name] = wrap(fn, down) end
end
for _, name in ipairs(FP32_METHODS) do
  local fn = METHODS[name]
  if fn then METHODS[name] = wrap(fn, up) end
end
for _, name in ipairs(LOWER_FUNCTIONS) do
  local fn = qlua[name]
  if fn then qlua[name] = wrap(fn, down) end
end
for _, name in ipairs(FP32_FUNCTIONS) do
  local fn = qlua[name]
  if fn then qlua[name] = wrap(fn, up) end
end

-- autocast(dtype, fn, ...): fn(...)'s results, computed under autocast to dtype
function amp.autocast(dtype, fn, ...)
  if dtype ~= false and not HALF[dtype] then
    error("autocast: dtype must be \"bfloat16\", \"float16\" or false, got " .. tostring(dtype), 0)
  end
  if type(fn) ~= "function" then error("autocast: fn must be a function, got a " .. type(fn), 0) end
  local before = current
  current = dtype or nil
  local r = table.pack(pcall(fn, ...))
  current = before
  if not r[1] then error(r[2], 0) end
  return table.unpack(r, 2, r.n)
end
-- the autocast dtype in effect, or nil
function amp.autocast_dtype() return current end

-- ------------------------------------------------------------- GradScaler

-- GradScaler([{init_scale = 2^16, growth_factor = 2, backoff_factor = 0.5,
-- growth_interval = 2000, enabled = true}]), PyTorch's dynamic loss scaling for float16:
--   scaler:scale(loss):backward(); scaler:step(opt); scaler:update()
-- step unscales the gradients (unless unscale_ did, for clipping in between), checks them
-- for inf and NaN on their device (one all-finite flag for the step; one wait for it), and
-- skips opt:step() when any is not finite; update then halves the scale (backoff), or grows
-- it after growth_interval finite steps in a row.
local GradScaler = {}
GradScaler.__index = GradScaler
amp.GradScaler = setmetatable(GradScaler, { __call = function(cls, opts)
  opts = opts or {}
  local s = setmetatable({ scale_ = opts.init_scale or 65536.0, growth_factor = opts.growth_factor or 2.0,
                           backoff_factor = opts.backoff_factor or 0.5,
                           growth_interval = opts.growth_interval or 2000,
                           enabled = opts.enabled ~= false, tracker = 0, per_opt = {} }, cls)
  if not (s.scale_ > 0 and s.growth_factor > 1 and s.backoff_factor > 0 and s.backoff_factor < 1) then
    error("GradScaler: init_scale must be > 0, growth_factor > 1 and backoff_factor in (0, 1)", 0)
  end
  if math.type(s.growth_interval) ~= "integer" or s.growth_interval < 1 then
    error("GradScaler: growth_interval must be an integer >= 1", 0)
  end
  return s
end })

function GradScaler:get_scale() return self.enabled and self.scale_ or 1.0 end
function GradScaler:is_enabled() return self.enabled end

-- loss * scale (a tensor, or a list of them)
function GradScaler:scale(loss)
  if not self.enabled then return loss end
  if type(loss) == "table" and not is_tensor(loss) then
    local out = {}
    for i, l in ipairs(loss) do out[i] = l * self.scale_ end
    return out
  end
  return loss * self.scale_
end

local function opt_params(opt)
  local list = {}
  if opt.param_groups then
    for _, g in ipairs(opt.param_groups) do for _, p in ipairs(g.params) do list[#list + 1] = p end end
  elseif opt.params then
    for _, p in ipairs(opt.params) do list[#list + 1] = p end
  end
  return list
end

-- divides opt's gradients by the scale in place and notes whether they are all finite (a
-- device flag, not read yet); once per step
function GradScaler:unscale_(opt)
  if not self.enabled then return end
  local st = self.per_opt[opt]
  if st and st.unscaled then error("GradScaler: unscale_ was already called for this optimizer since update()", 0) end
  local inv = 1 / self.scale_
  local ok = nil
  qlua.no_grad(function()
    for _, p in ipairs(opt_params(opt)) do
      local g = p.grad
      if g ~= nil then
        local fin = g:reshape({ -1 }):isfinite():all(1)
        ok = ok and ok:logical_and(fin) or fin
        g:mul_(inv)
      end
    end
  end)
  self.per_opt[opt] = { unscaled = true, ok = ok }
end

-- opt:step() unless a gradient was inf or NaN; returns whether it stepped
function GradScaler:step(opt, ...)
  if not self.enabled then opt:step(...); return true end
  if not (self.per_opt[opt] and self.per_opt[opt].unscaled) then self:unscale_(opt) end
  local st = self.per_opt[opt]
  local finite = st.ok == nil or st.ok:item()
  st.found_inf = not finite
  if finite then opt:step(...) end
  return finite
end

-- the next step's scale: backoff after a skipped step, growth after growth_interval good ones
function GradScaler:update(new_scale)
  if not self.enabled then return end
  local found = false
  for _, st in pairs(self.per_opt) do found = found or st.found_inf == true end
  if new_scale ~= nil then
    self.scale_ = new_scale
  elseif found then
    self.scale_ = self.scale_ * self.backoff_factor
    self.tracker = 0
  else
    self.tracker = self.tracker + 1
    if self.tracker >= self.growth_interval then
      self.scale_ = self.scale_ * self.growth_factor
      self.tracker = 0
    end
  end
  self.per_opt = {}
end

function GradScaler:state_dict()
  return { scale = self.scale_, growth_factor = self.growth_factor, backoff_factor = self.backoff_factor,
           growth_interval = self.growth_interval, _growth_tracker = self.tracker }
end
function GradScaler:load_state_dict(sd)
  self.scale_, self.growth_factor, self.backoff_factor = sd.scale, sd.growth_factor, sd.backoff_factor
  self.growth_interval, self.tracker = sd.growth_interval, sd._growth_tracker or 0
end

qlua.amp = amp
qlua.autocast = amp.autocast
-- qlua.help's entry (the registry's list the binding's rows make)
do
  if type(api) == "table" then
    api[#api + 1] = { topic = "qlua", name = "autocast", fn = amp.autocast, args = "(dtype, fn, ...)",
                      help = "fn(...) with products, convolutions and attention in dtype (\"bfloat16\", \"float16\"; false: off), as torch.autocast" }
  end
end
return amp
