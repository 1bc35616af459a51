--[[
lua/qlua/nn.lua — qlua.nn: modules, PyTorch's torch.nn in qlua's style (docs/API.md
"Neural networks"). The layers are in lua/qlua/nn/layers.lua (the attention layers in
nn/attention.lua), the ops they are made of in nn/functional.lua (qlua.nn.functional), the
fills in nn/initializers.lua (qlua.nn.init).

  local nn = require "qlua.nn"
  local Net = nn.Module:extend("Net")
  function Net:init(d, h, c)
    self.fc1 = nn.Linear(d, h)       -- a module or a tensor that requires grad, assigned
    self.fc2 = nn.Linear(h, c)       -- to a field, is registered, in assignment order
  end
  function Net:forward(x) return self.fc2(self.fc1(x):relu()) end
  local net = Net(32, 128, 10)       -- net(x) calls forward; net:parameters() lists 4

A module's fields live in its _fields table behind __index/__newindex, so that assigning
a module, a parameter (a leaf tensor that requires grad) or, through register_buffer, a
buffer records its name in order: the order of parameters() and the names of
state_dict(), which are PyTorch's dotted ones ("fc1.weight").
]]
local qlua = rawget(_G, "qlua") or require("qlua")
require("qlua.autograd")
require("qlua.amp")   -- qlua.autocast, qlua.amp.GradScaler
local is_tensor = qlua.is_tensor

local nn = {}

-- ------------------------------------------------------------- Module
local Module = { __name = "Module" }
nn.Module = Module

local function is_module(v) return type(v) == "table" and rawget(v, "_fields") ~= nil end
nn.is_module = is_module
local function is_parameter(v) return is_tensor(v) and v:requires_grad() and v:is_leaf() end
local FLOAT = { float32 = true, float64 = true, float16 = true, bfloat16 = true }

-- the instance metatable of a class: fields first, then the class's methods
local function instance_meta(class)
  return {
    __index = function(self, k)
      local v = rawget(self, "_fields")[k]
      if v ~= nil then return v end
      return class[k]
    end,
    __newindex = function(self, k, v)
      local f = rawget(self, "_fields")
      if f[k] == nil and (is_module(v) or is_parameter(v)) then
        local order = rawget(self, "_order")
        order[#order + 1] = k
      end
      f[k] = v
    end,
    __call = function(self, ...) return self:forward(...) end,
    __tostring = function(self) return self:repr() end,
    __name = class.__name,
  }
end

-- Class:extend(name) -> a subclass; Subclass(...) makes an instance and calls its init(...)
function Module:extend(name)
  local class = setmetatable({ __name = name or "Module", super = self }, { __index = self })
  class.__meta = instance_meta(class)
  getmetatable(class).__call = function(c, ...) return c:new(...) end
  return class
end
function Module:new(...)
  local obj = setmetatable({ _fields = {}, _order = {}, _buffers = {} }, self.__meta)
  obj.training = true
  if self.init then self.init(obj, ...) end
  return obj
end
Module.__meta = instance_meta(Module)
setmetatable(Module, { __call = function(c, ...) return c:new(...) end })

function Module:forward()
  error(self.__name .. ": forward is not defined (give the class a forward method)", 0)
end

-- buffers: tensors that are part of the state but not parameters (BatchNorm's running
-- statistics); persistent = false leaves one out of state_dict
function Module:register_buffer(name, t, persistent)
  local f = rawget(self, "_fields")
  if f[name] == nil then local o = rawget(self, "_order"); o[#o + 1] = name end
  f[name] = t
  rawget(self, "_buffers")[name] = persistent ~= false and "persistent" or "transient"
end
function Module:add_module(name, m) self[name] = m end

-- the registered names, in order, of the kind asked ("module", "parameter", "buffer")
local function own(self, kind)
  local out = {}
  local f, bufs = rawget(self, "_fields"), rawget(self, "_buffers")
  for _, k in ipairs(rawget(self, "_order")) do
    local v = f[k]
    if v ~= nil then
      if kind == "module" and is_module(v) then out[#out + 1] = k
      elseif kind == "parameter" and is_tensor(v) and not bufs[k] and v:requires_grad() then out[#out + 1] = k
      elseif kind == "buffer" and is_tensor(v) and bufs[k] then out[#out + 1] = k end
    end
  end
  return out
end

-- {name, module} pairs, self first ("" its name), then each child's, depth first
function Module:named_modules(prefix, out)
  out, prefix = out or {}, prefix or ""
  out[#out + 1] = { prefix, self }
  for _, k in ipairs(own(self, "module")) do
    self[k]:named_modules(prefix == "" and k or (prefix .. "." .. k), out)
  end
  return out
end
function Module:modules()
  local l = {}
  for _, p in ipairs(self:named_modules()) do l[#l + 1] = p[2] end
  return l
end
function Module:children()
  local l = {}
  for _, k in ipairs(own(self, "module")) do l[#l + 1] = self[k] end
  return l
end
function Module:named_children()
  local l = {}
  for _, k in ipairs(own(self, "module")) do l[#l + 1] = { k, self[k] } end
  return l
end

local function named(self, kind)
  local out = {}
  for _, pm in ipairs(self:named_modules()) do
    local prefix, m = pm[1], pm[2]
    for _, k in ipairs(own(m, kind)) do
      out[#out + 1] = { prefix == "" and k or (prefix .. "." .. k), m[k] }
    end
  end
  return out
end
function Module:named_parameters() return named(self, "parameter") end
function Module:parameters()
  local l = {}
  for _, p in ipairs(self:named_parameters()) do l[#l + 1] = p[2] end
  return l
end
function Module:named_buffers() return named(self, "buffer") end
function Module:buffers()
  local l = {}
  for _, p in ipairs(self:named_buffers()) do l[#l + 1] = p[2] end
  return l
end

function Module:train(mode)
  if mode == nil then mode = true end
  for _, m in ipairs(self:modules()) do rawget(m, "_fields").training = mode and true or false end
  return self
end
function Module:eval() return self:train(false) end
function Module:zero_grad()
  for _, p in ipairs(self:parameters()) do p.grad = nil end
end
function Module:apply(fn)
  for _, m in ipairs(self:modules()) do fn(m) end
  return self
end

-- to(device), to(dtype) or to{device =, dtype =}: every parameter and buffer is replaced
-- by its copy there (floating ones only change dtype); parameters stay leaves that
-- require grad. Make the optimizer after moving the model.
function Module:to(where)
  local device, dtype
  if type(where) == "table" then device, dtype = where.device, where.dtype
  elseif where == "cpu" or where == "gpu" or (type(where) == "string" and where:match("^gpu:%d+$")) then device = where
  else dtype = where end
  -- the device's full name ("gpu" is "gpu:0"), as tensors report theirs
  if device then device = qlua.tensor(0, { device = device }):device() end
  for _, m in ipairs(self:modules()) do
    local f, bufs = rawget(m, "_fields"), rawget(m, "_buffers")
    for _, k in ipairs(rawget(m, "_order")) do
      local v = f[k]
      if is_tensor(v) then
        local param = not bufs[k] and v:requires_grad()
        local dev = device or v:device()
        local dt = (dtype and FLOAT[v:dtype()]) and dtype or v:dtype()
        if dev ~= v:device() or dt ~= v:dtype() then
          -- (one of the two conversions copies: t is new storage)
          local t = qlua.no_grad(function() return v:detach():to(dev):to(dt) end)
          if param then t:requires_grad_() end
          f[k] = t
        end
      end
    end
  end
  return self
end
function Module:gpu() return self:to("gpu") end
function Module:cpu() return self:to("cpu") end

-- name -> tensor (detached, sharing storage) for every parameter and persistent buffer
function Module:state_dict()
  local sd = {}
  for _, p in ipairs(self:named_parameters()) do sd[p[1]] = p[2]:detach() end
  for _, pm in ipairs(self:named_modules()) do
    local prefix, m = pm[1], pm[2]
    local bufs = rawget(m, "_buffers")
    for _, k in ipairs(own(m, "buffer")) do
      if bufs[k] == "persistent" then sd[prefix == "" and k or (prefix .. "." .. k)] = m[k]:detach() end
    end
  end
  return sd
end

-- copies sd's tensors in (converted to each one's dtype and device); strict (default):
-- a missing or unexpected key, or a shape that differs, is an error naming them. Returns
-- {missing_keys =, unexpected_keys =}.
function Module:load_state_dict(sd, opts)
  local strict = not (opts and opts.strict == false)
  if type(sd) ~= "table" then error(self.__name .. ": load_state_dict: a table of name = tensor expected", 0) end
  local mine = self:state_dict()
  local missing, unexpected = {}, {}
  for k in pairs(mine) do if sd[k] == nil then missing[#missing + 1] = k end end
  for k in pairs(sd) do if mine[k] == nil then unexpected[#unexpected + 1] = k end end
  table.sort(missing); table.sort(unexpected)
  if strict and (#missing > 0 or #unexpected > 0) then
    error(string.format("%s: load_state_dict: missing keys {%s}, unexpected keys {%s}", self.__name,
      table.concat(missing, ", "), table.concat(unexpected, ", ")), 0)
  end
  for k, dst in pairs(mine) do
    local src = sd[k]
    if src ~= nil then
      if not is_tensor(src) then error(self.__name .. ": load_state_dict: " .. k .. " is not a tensor", 0) end
      local a, b = table.concat(dst:shape(), "x"), table.concat(src:shape(), "x")
      if a ~= b then
        error(string.format("%s: load_state_dict: %s has shape %s here, %s in the state dict", self.__name, k, a, b), 0)
      end
      qlua.no_grad(function() dst:copy_(src) end)
    end
  end
  return { missing_keys = missing, unexpected_keys = unexpected }
end

-- a one-line summary per module, indented by depth
function Module:extra_repr() return "" end
function Module:repr(indent)
  indent = indent or ""
  local head = self.__name .. "(" .. self:extra_repr()
  local kids = self:named_children()
  if #kids == 0 then return head .. ")" end
  local lines = { head }
  for _, c in ipairs(kids) do lines[#lines + 1] = indent .. "  (" .. c[1] .. "): " .. c[2]:repr(indent .. "  ") end
  lines[#lines + 1] = indent .. ")"
  return table.concat(lines, "\n")
end

-- ------------------------------------------------------------- files
-- nn.save(module, path [, metadata]): the state dict as .safetensors (qlua.save_safetensors)
function nn.save(module, path, metadata)
  qlua.save_safetensors(path, module:state_dict(), metadata)
end
-- nn.load(module, path [, opts]): reads it back into module (opts.strict as load_state_dict)
function nn.load(module, path, opts)
  local sd = qlua.load_safetensors(path)
  return module:load_state_dict(sd, opts)
end

nn.functional = require("qlua.nn.functional")
nn.init = require("qlua.nn.initializers")
require("qlua.nn.layers")(nn)
require("qlua.nn.attention")(nn)
nn.utils = require("qlua.nn.utils")
nn.parallel = require("qlua.nn.parallel")(nn)
return nn
