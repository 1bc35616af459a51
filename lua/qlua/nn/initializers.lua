--[[
lua/qlua/nn/initializers.lua — qlua.nn.init (not init.lua, which package.path reads as qlua.nn itself): PyTorch's torch.nn.init fills, in place, under
qlua.no_grad, with qlua's generator (qlua.seed makes them reproducible). fan_in and
fan_out are PyTorch's: dim 2 and dim 1 of a weight, times the product of the dims after
them (a convolution's kernel).
]]
local qlua = rawget(_G, "qlua") or require("qlua")

local I = {}

local function fans(t, who)
  if t:dim() < 2 then
    error(who .. ": fan in and fan out need a tensor of at least 2 dims, got " .. t:dim(), 0)
  end
  local field = 1
  for d = 3, t:dim() do field = field * t:size(d) end
  return t:size(2) * field, t:size(1) * field
end

local GAINS = { linear = 1, conv1d = 1, conv2d = 1, conv3d = 1, sigmoid = 1, tanh = 5 / 3,
                relu = math.sqrt(2), selu = 3 / 4 }
-- nonlinearity's recommended gain; leaky_relu takes its negative slope (default 0.01)
function I.calculate_gain(nonlinearity, param)
  if nonlinearity == "leaky_relu" then
    local slope = param or 0.01
    return math.sqrt(2 / (1 + slope * slope))
  end
  local g = GAINS[nonlinearity]
  if g == nil then error("calculate_gain: unknown nonlinearity " .. tostring(nonlinearity), 0) end
  return g
end

local function fill(t, f) qlua.no_grad(f); return t end

function I.uniform_(t, a, b) return fill(t, function() t:uniform_(a or 0, b or 1) end) end
function I.normal_(t, mean, std) return fill(t, function() t:normal_(mean or 0, std or 1) end) end
function I.constant_(t, v) return fill(t, function() t:fill_(v) end) end
function I.zeros_(t) return I.constant_(t, 0) end
function I.ones_(t) return I.constant_(t, 1) end

function I.xavier_uniform_(t, gain)
  local fi, fo = fans(t, "xavier_uniform_")
  local a = (gain or 1) * math.sqrt(6 / (fi + fo))
  return I.uniform_(t, -a, a)
end
function I.xavier_normal_(t, gain)
  local fi, fo = fans(t, "xavier_normal_")
  return I.normal_(t, 0, (gain or 1) * math.sqrt(2 / (fi + fo)))
end

-- opts: a (the negative slope, default 0), mode ("fan_in" or "fan_out"), nonlinearity
-- ("leaky_relu" by default, as PyTorch)
local function kaiming_std(t, opts, who)
  opts = opts or {}
  local fi, fo = fans(t, who)
  local mode = opts.mode or "fan_in"
  if mode ~= "fan_in" and mode ~= "fan_out" then
    error(who .. ": mode must be \"fan_in\" or \"fan_out\", got " .. tostring(mode), 0)
  end
  local gain = I.calculate_gain(opts.nonlinearity or "leaky_relu", opts.a or 0)
  return gain / math.sqrt(mode == "fan_in" and fi or fo)
end
function I.kaiming_uniform_(t, opts)
  local bound = math.sqrt(3) * kaiming_std(t, opts, "kaiming_uniform_")
  return I.uniform_(t, -bound, bound)
end
function I.kaiming_normal_(t, opts)
  return I.normal_(t, 0, kaiming_std(t, opts, "kaiming_normal_"))
end

-- normal(mean, std) restricted to [a, b] by inverting the normal's CDF on a uniform draw
-- between the bounds' CDF values (PyTorch's method)
function I.trunc_normal_(t, mean, std, a, b)
  mean, std, a, b = mean or 0, std or 1, a or -2, b or 2
  if not (a < b) then error("trunc_normal_: needs a < b", 0) end
  local function cdf(x) return (1 + qlua.tensor((x - mean) / std / math.sqrt(2), { dtype = "float64" }):erf():item()) / 2 end
  local lo, hi = cdf(a), cdf(b)
  return fill(t, function()
    t:uniform_(2 * lo - 1, 2 * hi - 1)
    t:copy_((t:double():erfinv() * (std * math.sqrt(2)) + mean):clamp(a, b))
  end)
end

-- a (semi-)orthogonal matrix from the QR of a normal one (Gram-Schmidt on the host, in
-- float64: fine for the layer sizes initialisation meets), times gain
function I.orthogonal_(t, gain)
  if t:dim() < 2 then error("orthogonal_: needs a tensor of at least 2 dims, got " .. t:dim(), 0) end
  local rows = t:size(1)
  local cols = t:numel() // rows
  local n, m = math.max(rows, cols), math.min(rows, cols)
  local a = qlua.randn({ n, m }, { dtype = "float64" }):totable()
  local q = {}
  for j = 1, m do
    local v = {}
    for i = 1, n do v[i] = a[i][j] end
    for k = 1, j - 1 do
      local dot = 0
      for i = 1, n do dot = dot + q[k][i] * v[i] end
      for i = 1, n do v[i] = v[i] - dot * q[k][i] end
    end
    local norm = 0
    for i = 1, n do norm = norm + v[i] * v[i] end
    norm = math.sqrt(norm)
    for i = 1, n do v[i] = v[i] / norm end
    q[j] = v
  end
  local out = {}
  for r = 1, rows do
    out[r] = {}
    for c = 1, cols do
      out[r][c] = (rows >= cols and q[c][r] or q[r][c]) * (gain or 1)
    end
  end
  local src = qlua.tensor(out, { dtype = "float64" })
  return fill(t, function() t:copy_(src:reshape(t:shape())) end)
end

return I
