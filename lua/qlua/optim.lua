--[[
lua/qlua/optim.lua — optimizers and learning-rate schedules, PyTorch's torch.optim in
qlua's style (docs/API.md "Optimizers").

  local optim = require "qlua.optim"
  local opt = optim.SGD(model:parameters(), {lr = 0.05, momentum = 0.9})
  for step = 1, n do
    opt:zero_grad()
    loss_of(batch):backward()
    opt:step()
  end

Each optimizer holds param_groups (lists of tensors with their options; a plain list of
tensors is one group with the defaults) and a state per parameter, and follows PyTorch's
update formulas and defaults. The updates run under qlua.no_grad with qlua's in-place
ops, so they work on every device and floating dtype; the schedules in
lua/qlua/optim/schedules.lua set each group's lr.
]]
local qlua = rawget(_G, "qlua") or require("qlua")
local autograd = require("qlua.autograd")
local is_tensor = qlua.is_tensor

local optim = {}

-- ------------------------------------------------------------- the base
local Optimizer = {}
Optimizer.__index = Optimizer
optim.Optimizer = Optimizer

local function check_option(who, key, v, allowed)
  if allowed[key] == nil then
    local names = {}
    for k in pairs(allowed) do names[#names + 1] = k end
    table.sort(names)
    error(string.format("%s: unknown option '%s' (it takes %s)", who, tostring(key), table.concat(names, ", ")), 0)
  end
  local want = type(allowed[key])
  if want ~= "nil" and type(v) ~= want then
    error(string.format("%s: option %s must be a %s, got a %s", who, key, want, type(v)), 0)
  end
end

-- params: a list of tensors, or a list of groups {params = {tensors...}, <option> = ...}
local function make(class, who, params, opts, defaults)
  opts = opts or {}
  if type(params) ~= "table" or is_tensor(params) then
    error(who .. ": params must be a list of tensors or of parameter groups", 0)
  end
  local d = {}
  for k, v in pairs(defaults) do d[k] = v end
  for k, v in pairs(opts) do check_option(who, k, v, defaults); d[k] = v end
  local self = setmetatable({ defaults = d, param_groups = {}, state = {}, name = who }, class)
  local groups = params
  if type(params[1]) ~= "table" then groups = { { params = params } } end   -- tensors, not groups
  for _, g in ipairs(groups) do self:add_param_group(g) end
  return self
end

function Optimizer:add_param_group(group)
  if type(group) ~= "table" or type(group.params) ~= "table" then
    error(self.name .. ": a parameter group is {params = {tensors...}, <option> = ...}", 0)
  end
  local g = { params = {} }
  for k, v in pairs(group) do
    if k ~= "params" then check_option(self.name, k, v, self.defaults); g[k] = v end
  end
  for k, v in pairs(self.defaults) do if g[k] == nil then g[k] = v end end
  local seen = {}
  for _, gr in ipairs(self.param_groups) do for _, p in ipairs(gr.params) do seen[p] = true end end
  for i, p in ipairs(group.params) do
    if not is_tensor(p) then error(string.format("%s: parameter %d is a %s, not a tensor", self.name, i, type(p)), 0) end
    if not p:requires_grad() or not p:is_leaf() then
      error(string.format("%s: parameter %d must be a leaf tensor that requires grad", self.name, i), 0)
    end
    if seen[p] then error(string.format("%s: parameter %d appears in more than one group", self.name, i), 0) end
    seen[p] = true
    g.params[#g.params + 1] = p
  end
  if self.validate then self:validate(g) end     -- before it joins: a bad group is not kept
  self.param_groups[#self.param_groups + 1] = g
end

-- set_to_none (default true, as PyTorch 2): .grad = nil; false: zeroed in place
function Optimizer:zero_grad(opts)
  local none = not (opts and opts.set_to_none == false)
  for _, g in ipairs(self.param_groups) do
    for _, p in ipairs(g.params) do
      if none then p.grad = nil
      elseif p.grad ~= nil then qlua.no_grad(function() p.grad:zero_() end) end
    end
  end
end

-- step([closure]): closure() re-evaluates the loss (with grad on) and returns it
function Optimizer:step(closure)
  local loss
  if closure ~= nil then loss = qlua.enable_grad(closure) end
  qlua.no_grad(function()
    for _, g in ipairs(self.param_groups) do
      if self.fused_update ~= nil and g.fused ~= false then
        self:fused_update(g)
      else
        for _, p in ipairs(g.params) do
          local grad = p.grad
          if grad ~= nil then
            local s = self.state[p]
            if s == nil then s = {}; self.state[p] = s end
            self:update(p, grad, s, g)
          end
        end
      end
    end
  end)
  return loss
end

-- The fused path (qlua._optim_step, docs/API.md "Optimizers"): the group's parameters with
-- a gradient, in buckets of one device, dtype and state age(s) (a number or a boolean),
-- each a list of {params, grads, states}, for one device call each. A parameter the
-- kernel cannot take (strided, or a gradient of another dtype or device) takes the
-- op-by-op update at once.
local function fused_buckets(self, g, age)
  local buckets, order = {}, {}
  for _, p in ipairs(g.params) do
    local grad = p.grad
    if grad ~= nil then
      local s = self.state[p]
      if s == nil then s = {}; self.state[p] = s end
      local dev, dt = p:device(), p:dtype()
      if p:is_contiguous() and grad:is_contiguous() and grad:dtype() == dt and grad:device() == dev then
        local a = age(s)
        local by_dev = buckets[dev]
        if by_dev == nil then by_dev = {}; buckets[dev] = by_dev end
        local by_dt = by_dev[dt]
        if by_dt == nil then by_dt = {}; by_dev[dt] = by_dt end
        local b = by_dt[a]
        if b == nil then
          b = { params = {}, grads = {}, states = {}, age = a }
          by_dt[a] = b
          order[#order + 1] = b
        end
        local n = #b.params + 1
        b.params[n], b.grads[n], b.states[n] = p, grad, s
      else
        self:update(p, grad, s, g)
      end
    end
  end
  return order
end

-- {state = {[i] = {name = tensor or number}}, param_groups = {{<options>, params = {i...}}}},
-- i numbering the parameters across the groups in order, as PyTorch's
function Optimizer:state_dict()
  local sd = { state = {}, param_groups = {} }
  local i = 0
  for _, g in ipairs(self.param_groups) do
    local pg = { params = {} }
    for k, v in pairs(g) do if k ~= "params" then pg[k] = v end end
    for _, p in ipairs(g.params) do
      i = i + 1
      pg.params[#pg.params + 1] = i
      local s = self.state[p]
      if s then
        local copy = {}
        for k, v in pairs(s) do copy[k] = is_tensor(v) and qlua.no_grad(v.clone, v) or v end
        sd.state[i] = copy
      end
    end
    sd.param_groups[#sd.param_groups + 1] = pg
  end
  return sd
end

function Optimizer:load_state_dict(sd)
  if type(sd) ~= "table" or type(sd.param_groups) ~= "table" or #sd.param_groups ~= #self.param_groups then
    error(self.name .. ": load_state_dict: the state dict has " ..
          (type(sd) == "table" and type(sd.param_groups) == "table" and #sd.param_groups or "no") ..
          " parameter groups, this optimizer " .. #self.param_groups, 0)
  end
  local by_index, i = {}, 0
  for gi, g in ipairs(self.param_groups) do
    local pg = sd.param_groups[gi]
    if type(pg.params) ~= "table" or #pg.params ~= #g.params then
      error(string.format("%s: load_state_dict: group %d has %d parameters here, %s in the state dict",
        self.name, gi, #g.params, type(pg.params) == "table" and #pg.params or "none"), 0)
    end
    for _, p in ipairs(g.params) do i = i + 1; by_index[i] = p end
  end
  for gi, g in ipairs(self.param_groups) do
    for k, v in pairs(sd.param_groups[gi]) do if k ~= "params" then g[k] = v end end
  end
  self.state = {}
  for idx, s in pairs(sd.state or {}) do
    local p = by_index[idx]
    if p == nil then error(self.name .. ": load_state_dict: state for parameter " .. tostring(idx) .. ", which is not here", 0) end
    local copy = {}
    for k, v in pairs(s) do
      copy[k] = is_tensor(v) and qlua.no_grad(function() return v:to(p:device()):to(p:dtype()):clone() end) or v
    end
    self.state[p] = copy
  end
end

local function class(name, defaults, update, validate, fused_update)
  local C = {}
  C.__index = C
  C.update, C.validate, C.fused_update = update, validate, fused_update
  return setmetatable(C, {
    __index = Optimizer,
    __call = function(_, params, opts) return make(C, name, params, opts, defaults) end,
  })
end

local function positive(who, g, key)
  if g[key] < 0 then error(string.format("%s: %s must be >= 0, got %s", who, key, tostring(g[key])), 0) end
end

-- The step count as device state (PyTorch's capturable = true): one float64 0-d tensor shared
-- by the parameters stepped together, advanced on the device and read by the update when it
-- runs, so a step captured by qlua.graph replays with the count of each replay. A group
-- asks for it with capturable = true; a step count that is a tensor stays one.
local function capturable(g, age) return g.capturable or is_tensor(age) end
local function device_count(n, dev) return qlua.full({}, n, { dtype = "float64", device = dev }) end

-- A capture (qlua.graph) records the update, not the Lua that decides it: state made then
-- would be made again at every replay (a momentum buffer set to the gradient, a step count
-- back at its start), so the state must exist before, from an eager step, and Adam's step
-- count must be on the device.
local function check_capture(self, g, p, s, fresh)
  if not qlua.is_capturing(p:device()) then return end
  if fresh then
    error(string.format("%s: a step captured by qlua.graph needs the optimizer's state from an eager " ..
      "step before the capture (qlua.graph's warmup option runs one)", self.name), 0)
  end
  if s ~= nil and s.step ~= nil and not is_tensor(s.step) then
    error(string.format("%s: a step captured by qlua.graph needs capturable = true from the first " ..
      "step on (the step count kept on the device)", self.name), 0)
  end
end

-- ------------------------------------------------------------- SGD
optim.SGD = class("SGD", { lr = 1e-3, momentum = 0, dampening = 0, weight_decay = 0, nesterov = false,
                           maximize = false, fused = true },
  function(self, p, grad, s, g)
    if g.maximize then grad = -grad end
    if g.weight_decay ~= 0 then grad = grad + p * g.weight_decay end
    if g.momentum ~= 0 then
      local buf = s.momentum_buffer
      check_capture(self, g, p, nil, buf == nil)
      if buf == nil then
        buf = grad:clone()
        s.momentum_buffer = buf
      else
        buf:mul_(g.momentum)
        if g.dampening ~= 0 then buf:add_(grad * (1 - g.dampening)) else buf:add_(grad) end
      end
      if g.nesterov then grad = grad + buf * g.momentum else grad = buf end
    end
    p:sub_(grad * g.lr)
  end,
  function(self, g)
    for _, k in ipairs({ "lr", "momentum", "weight_decay" }) do positive(self.name, g, k) end
    if g.nesterov and (g.momentum <= 0 or g.dampening ~= 0) then
      error("SGD: nesterov needs a momentum > 0 and zero dampening", 0)
    end
  end,
  function(self, g)
    local momentum = g.momentum ~= 0
    local age = function(s) return momentum and s.momentum_buffer == nil end   -- true: new buffers
    for _, b in ipairs(fused_buckets(self, g, age)) do
      local states = {}
      if momentum then
        local bufs = {}
        for k, s in ipairs(b.states) do
          check_capture(self, g, b.params[k], nil, s.momentum_buffer == nil)
          if s.momentum_buffer == nil then s.momentum_buffer = qlua.empty_like(b.params[k]) end
          bufs[k] = s.momentum_buffer
        end
        states[1] = bufs
      end
      qlua._optim_step("sgd", g, b.params, b.grads, states, b.age and 1 or 2)
    end
  end)

-- ------------------------------------------------------------- Adam, AdamW
local function adam_update(decoupled)
  return function(self, p, grad, s, g)
    if g.maximize then grad = -grad end
    local b1, b2 = g.betas[1], g.betas[2]
    if g.weight_decay ~= 0 then
      if decoupled then p:mul_(1 - g.lr * g.weight_decay)
      else grad = grad + p * g.weight_decay end
    end
    check_capture(self, g, p, s, s.step == nil)
    if s.step == nil then
      s.step = 0
      s.exp_avg, s.exp_avg_sq = qlua.zeros_like(p), qlua.zeros_like(p)
      if g.amsgrad then s.max_exp_avg_sq = qlua.zeros_like(p) end
    end
    if capturable(g, s.step) and not is_tensor(s.step) then
      s.step = device_count(s.step, p:device())
    end
    if is_tensor(s.step) then s.step:add_(1) else s.step = s.step + 1 end
    s.exp_avg:lerp_(grad, 1 - b1)
    s.exp_avg_sq:mul_(b2):addcmul_(grad, grad, 1 - b2)
    local sq = s.exp_avg_sq
    if g.amsgrad then
      s.max_exp_avg_sq:maximum_(s.exp_avg_sq)
      sq = s.max_exp_avg_sq
    end
    if is_tensor(s.step) then      -- the bias corrections from the device's count
      local dt = p:dtype()
      local bc1 = 1 - (s.step * math.log(b1)):exp()
      local bc2 = 1 - (s.step * math.log(b2)):exp()
      local denom = sq:sqrt() / bc2:sqrt():to(dt) + g.eps
      p:sub_(s.exp_avg / denom * (bc1:reciprocal() * g.lr):to(dt))
      return
    end
    local bc1, bc2 = 1 - b1 ^ s.step, 1 - b2 ^ s.step
    local denom = sq:sqrt() / math.sqrt(bc2) + g.eps
    p:addcdiv_(s.exp_avg, denom, -g.lr / bc1)
  end
end
local function adam_validate(self, g)
  for _, k in ipairs({ "lr", "eps", "weight_decay" }) do positive(self.name, g, k) end
  local b = g.betas
  if type(b) ~= "table" or type(b[1]) ~= "number" or type(b[2]) ~= "number" or b[1] < 0 or b[1] >= 1
     or b[2] < 0 or b[2] >= 1 then
    error(self.name .. ": betas must be {b1, b2} with each in [0, 1)", 0)
  end
end
local function adam_fused(kind)
  local age = function(s) return s.step or 0 end
  return function(self, g)
    for _, b in ipairs(fused_buckets(self, g, age)) do
      local m, v, vmax = {}, {}, g.amsgrad and {} or nil
      local on_device = capturable(g, b.age)
      for k, s in ipairs(b.states) do
        check_capture(self, g, b.params[k], s, s.step == nil)
        if s.step == nil then
          local p = b.params[k]
          s.step = 0
          s.exp_avg, s.exp_avg_sq = qlua.zeros_like(p), qlua.zeros_like(p)
          if g.amsgrad then s.max_exp_avg_sq = qlua.zeros_like(p) end
        end
        if not on_device then s.step = s.step + 1 end
        m[k], v[k] = s.exp_avg, s.exp_avg_sq
        if vmax then
          if s.max_exp_avg_sq == nil then s.max_exp_avg_sq = qlua.zeros_like(b.params[k]) end
          vmax[k] = s.max_exp_avg_sq
        end
      end
      if on_device then
        local count = b.age
        if not is_tensor(count) then
          count = device_count(count, b.params[1]:device())
          for _, s in ipairs(b.states) do s.step = count end
        end
        count:add_(1)
        qlua._optim_step(kind, g, b.params, b.grads, { m, v, vmax }, count)
      else
        qlua._optim_step(kind, g, b.params, b.grads, { m, v, vmax }, b.age + 1)
      end
    end
  end
end
optim.Adam = class("Adam", { lr = 1e-3, betas = { 0.9, 0.999 }, eps = 1e-8, weight_decay = 0,
                             amsgrad = false, maximize = false, fused = true, capturable = false },
                   adam_update(false), adam_validate, adam_fused("adam"))
optim.AdamW = class("AdamW", { lr = 1e-3, betas = { 0.9, 0.999 }, eps = 1e-8, weight_decay = 1e-2,
                               amsgrad = false, maximize = false, fused = true, capturable = false },
                    adam_update(true), adam_validate, adam_fused("adamw"))

-- ------------------------------------------------------------- RMSprop
optim.RMSprop = class("RMSprop", { lr = 1e-2, alpha = 0.99, eps = 1e-8, weight_decay = 0, momentum = 0,
                                   centered = false, maximize = false },
  function(_, p, grad, s, g)
    if g.maximize then grad = -grad end
    if g.weight_decay ~= 0 then grad = grad + p * g.weight_decay end
    if s.step == nil then
      s.step = 0
      s.square_avg = qlua.zeros_like(p)
      if g.momentum > 0 then s.momentum_buffer = qlua.zeros_like(p) end
      if g.centered then s.grad_avg = qlua.zeros_like(p) end
    end
    s.step = s.step + 1
    s.square_avg:mul_(g.alpha):addcmul_(grad, grad, 1 - g.alpha)
    local avg
    if g.centered then
      s.grad_avg:lerp_(grad, 1 - g.alpha)
      avg = (s.square_avg - s.grad_avg * s.grad_avg):sqrt() + g.eps
    else
      avg = s.square_avg:sqrt() + g.eps
    end
    if g.momentum > 0 then
      s.momentum_buffer:mul_(g.momentum):addcdiv_(grad, avg)
      p:sub_(s.momentum_buffer * g.lr)
    else
      p:addcdiv_(grad, avg, -g.lr)
    end
  end,
  function(self, g)
    for _, k in ipairs({ "lr", "alpha", "eps", "weight_decay", "momentum" }) do positive(self.name, g, k) end
  end)

-- ------------------------------------------------------------- Adagrad
optim.Adagrad = class("Adagrad", { lr = 1e-2, lr_decay = 0, weight_decay = 0, initial_accumulator_value = 0,
                                   eps = 1e-10, maximize = false },
  function(_, p, grad, s, g)
    if g.maximize then grad = -grad end
    if s.step == nil then
      s.step = 0
      s.sum = qlua.full_like(p, g.initial_accumulator_value)
    end
    s.step = s.step + 1
    if g.weight_decay ~= 0 then grad = grad + p * g.weight_decay end
    local clr = g.lr / (1 + (s.step - 1) * g.lr_decay)
    s.sum:addcmul_(grad, grad, 1)
    p:addcdiv_(grad, s.sum:sqrt() + g.eps, -clr)
  end,
  function(self, g)
    for _, k in ipairs({ "lr", "lr_decay", "weight_decay", "initial_accumulator_value", "eps" }) do
      positive(self.name, g, k)
    end
  end)

-- the schedules
for k, v in pairs(require("qlua.optim.schedules")(optim)) do optim[k] = v end

return optim
