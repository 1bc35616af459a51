--[[
lua/qlua/nn/utils.lua — qlua.nn.utils: gradient clipping and flattening, PyTorch's
torch.nn.utils. params: a list of tensors (module:parameters()) or one tensor.
]]
local qlua = rawget(_G, "qlua") or require("qlua")

local U = {}

local function list(params)
  if qlua.is_tensor(params) then return { params } end
  return params
end

-- scales every .grad so that their joint norm (p-norm, default 2; math.huge: the largest
-- |g|) is at most max_norm; returns the norm before, a 0-d tensor. The scale stays on the
-- device (no wait for the norm). error_if_nonfinite: a NaN or inf norm is an error (that
-- one waits).
function U.clip_grad_norm_(params, max_norm, norm_type, opts)
  norm_type = norm_type or 2
  local grads = {}
  for _, p in ipairs(list(params)) do if p.grad ~= nil then grads[#grads + 1] = p.grad end end
  if #grads == 0 then return qlua.tensor(0) end
  return qlua.no_grad(function()
    local norms = {}
    for i, g in ipairs(grads) do
      local dims = {}
      for d = 1, g:dim() do dims[d] = d end
      norms[i] = (g:dim() == 0 and g:abs() or g:norm(norm_type, dims)):reshape({ 1 }):to(grads[1]:dtype())
    end
    local all = qlua.cat(norms, 1)
    local total = norm_type == math.huge and all:amax({ 1 }) or all:norm(norm_type, { 1 })
    if opts and opts.error_if_nonfinite and not total:isfinite():item() then
      error("clip_grad_norm_: the gradients' norm is " .. tostring(total:item()), 0)
    end
    local scale = (total + 1e-6):reciprocal():mul_(max_norm):clamp(nil, 1)
    for _, g in ipairs(grads) do g:mul_(scale:to(g:dtype()):to(g:device())) end
    return total
  end)
end

-- clamps every .grad into [-clip_value, clip_value]
function U.clip_grad_value_(params, clip_value)
  qlua.no_grad(function()
    for _, p in ipairs(list(params)) do
      if p.grad ~= nil then p.grad:clamp_(-clip_value, clip_value) end
    end
  end)
end

-- the parameters flattened and joined (a new tensor); vector_to_parameters copies back
function U.parameters_to_vector(params)
  local flat = {}
  for i, p in ipairs(list(params)) do flat[i] = p:reshape({ -1 }) end
  return qlua.cat(flat, 1)
end
function U.vector_to_parameters(vec, params)
  local at = 1
  qlua.no_grad(function()
    for _, p in ipairs(list(params)) do
      local n = p:numel()
      p:copy_(vec:narrow(1, at, n):reshape(p:shape()))
      at = at + n
    end
  end)
  if at - 1 ~= vec:numel() then
    error(string.format("vector_to_parameters: the vector has %d elements, the parameters %d", vec:numel(), at - 1), 0)
  end
end

return U
