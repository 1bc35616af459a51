--[[
lua/qlua/optim/schedules.lua — learning-rate schedules (torch.optim.lr_scheduler's), for
lua/qlua/optim.lua. A schedule remembers each group's starting lr (base_lrs) and sets the
group's lr from the epoch count: made at epoch 0 (the lr is set then), sched:step()
moves one epoch on. Closed forms of PyTorch's formulas, so a schedule gives the same lr
whatever came before. sched:get_last_lr() returns the lrs it set last.
]]
return function(optim)
local S = {}

local Schedule = {}
Schedule.__index = Schedule

local function make(name, opt, lr_at, init)
  if type(opt) ~= "table" or type(opt.param_groups) ~= "table" then
    error(name .. ": the first argument must be an optimizer", 0)
  end
  local self = setmetatable({ optimizer = opt, name = name, last_epoch = 0, lr_at = lr_at,
                              base_lrs = {} }, Schedule)
  for i, g in ipairs(opt.param_groups) do
    if g.initial_lr == nil then g.initial_lr = g.lr end
    self.base_lrs[i] = g.initial_lr
  end
  if init then init(self) end
  self:apply()
  return self
end

function Schedule:apply()
  self.last_lr = {}
  for i, g in ipairs(self.optimizer.param_groups) do
    g.lr = self.lr_at(self, self.base_lrs[i], self.last_epoch, g, i)
    self.last_lr[i] = g.lr
  end
end
function Schedule:step()
  self.last_epoch = self.last_epoch + 1
  self:apply()
end
function Schedule:get_last_lr() return { table.unpack(self.last_lr) } end
function Schedule:state_dict() return { last_epoch = self.last_epoch, base_lrs = { table.unpack(self.base_lrs) } } end
function Schedule:load_state_dict(sd)
  self.last_epoch, self.base_lrs = sd.last_epoch, { table.unpack(sd.base_lrs) }
  self:apply()
end

local function number(name, key, v, min)
  if type(v) ~= "number" or (min and v < min) then
    error(string.format("%s: %s must be a number%s, got %s", name, key, min and (" >= " .. min) or "", tostring(v)), 0)
  end
  return v
end

-- every step_size epochs, lr times gamma
function S.StepLR(opt, opts)
  opts = opts or {}
  local size = number("StepLR", "step_size", opts.step_size, 1)
  local gamma = opts.gamma or 0.1
  return make("StepLR", opt, function(_, base, e) return base * gamma ^ (e // size) end)
end
-- at each milestone (an epoch), lr times gamma
function S.MultiStepLR(opt, opts)
  opts = opts or {}
  if type(opts.milestones) ~= "table" then error("MultiStepLR: milestones must be a list of epochs", 0) end
  local gamma = opts.gamma or 0.1
  return make("MultiStepLR", opt, function(_, base, e)
    local n = 0
    for _, m in ipairs(opts.milestones) do if e >= m then n = n + 1 end end
    return base * gamma ^ n
  end)
end
function S.ExponentialLR(opt, opts)
  local gamma = number("ExponentialLR", "gamma", (opts or {}).gamma)
  return make("ExponentialLR", opt, function(_, base, e) return base * gamma ^ e end)
end
-- half a cosine from the base lr down to eta_min over T_max epochs (and back up after, as
-- PyTorch's closed form)
function S.CosineAnnealingLR(opt, opts)
  opts = opts or {}
  local T = number("CosineAnnealingLR", "T_max", opts.T_max, 1)
  local eta = opts.eta_min or 0
  return make("CosineAnnealingLR", opt, function(_, base, e)
    return eta + (base - eta) * (1 + math.cos(math.pi * e / T)) / 2
  end)
end
-- the factor goes linearly from start_factor to end_factor over total_iters epochs
function S.LinearLR(opt, opts)
  opts = opts or {}
  local a, b = opts.start_factor or 1 / 3, opts.end_factor or 1
  local n = opts.total_iters or 5
  if a <= 0 or a > 1 or b < 0 or b > 1 then
    error("LinearLR: start_factor must be in (0, 1] and end_factor in [0, 1]", 0)
  end
  return make("LinearLR", opt, function(_, base, e)
    return base * (a + (b - a) * math.min(e, n) / n)
  end)
end
-- lr_lambda(epoch) (one function, or one per group) times the base lr
function S.LambdaLR(opt, opts)
  opts = opts or {}
  local f = opts.lr_lambda
  if type(f) ~= "function" and type(f) ~= "table" then
    error("LambdaLR: lr_lambda must be a function (or a list of them, one per group)", 0)
  end
  return make("LambdaLR", opt, function(_, base, e, _, i)
    local fi = type(f) == "table" and f[i] or f
    return base * fi(e)
  end)
end
-- OneCycleLR: up from max_lr / div_factor to max_lr over pct_start of total_steps, then
-- down to initial / final_div_factor (cos or linear), with the momentum (SGD's momentum,
-- Adam's beta 1) cycled the other way between base_momentum and max_momentum
function S.OneCycleLR(opt, opts)
  opts = opts or {}
  local total = opts.total_steps
  if total == nil and opts.epochs and opts.steps_per_epoch then total = opts.epochs * opts.steps_per_epoch end
  number("OneCycleLR", "total_steps", total, 1)
  local pct = opts.pct_start or 0.3
  local div, final_div = opts.div_factor or 25, opts.final_div_factor or 1e4
  local strategy = opts.anneal_strategy or "cos"
  if strategy ~= "cos" and strategy ~= "linear" then
    error("OneCycleLR: anneal_strategy must be \"cos\" or \"linear\", got " .. tostring(strategy), 0)
  end
  local cycle = opts.cycle_momentum ~= false
  local base_m, max_m = opts.base_momentum or 0.85, opts.max_momentum or 0.95
  local function anneal(from, to, f)
    if strategy == "cos" then return to + (from - to) / 2 * (1 + math.cos(math.pi * f)) end
    return (to - from) * f + from
  end
  local phases
  if opts.three_phase then
    phases = { { pct * total - 1, "initial", "max", max_m, base_m }, { 2 * pct * total - 2, "max", "initial", base_m, max_m },
               { total - 1, "initial", "min", max_m, max_m } }
  else
    phases = { { pct * total - 1, "initial", "max", max_m, base_m }, { total - 1, "max", "min", base_m, max_m } }
  end
  local max_lr = opts.max_lr
  local sched = make("OneCycleLR", opt, function(self, _, e, g, i)
    if e >= total then
      error(string.format("OneCycleLR: stepped %d times, past total_steps = %d", e + 1, total), 0)
    end
    local lrs = { initial = self.initial[i], max = self.max[i], min = self.initial[i] / final_div }
    local start = 0
    for k, ph in ipairs(phases) do
      local stop = ph[1]
      if e <= stop or k == #phases then
        local f = stop > start and (e - start) / (stop - start) or 0
        if cycle then
          local m = anneal(ph[4], ph[5], f)
          if g.betas then g.betas = { m, g.betas[2] } elseif g.momentum ~= nil then g.momentum = m end
        end
        return anneal(lrs[ph[2]], lrs[ph[3]], f)
      end
      start = stop
    end
  end, function(self)
    self.initial, self.max = {}, {}
    for i, g in ipairs(opt.param_groups) do
      local m = type(max_lr) == "table" and max_lr[i] or max_lr
      number("OneCycleLR", "max_lr", m, 0)
      self.max[i], self.initial[i] = m, m / div
      self.base_lrs[i] = m / div
      if cycle and g.betas == nil and g.momentum == nil then
        error("OneCycleLR: cycle_momentum needs an optimizer with momentum or betas (or cycle_momentum = false)", 0)
      end
    end
  end)
  return sched
end

return S
end
