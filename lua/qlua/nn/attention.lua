--[[
lua/qlua/nn/attention.lua — qlua.nn's attention layers over
nn.functional.scaled_dot_product_attention:

  MultiheadAttention  PyTorch's nn.MultiheadAttention: its arguments, parameter names
                      (in_proj_weight, in_proj_bias, out_proj; q/k/v_proj_weight when kdim or
                      vdim differ from embed_dim), initialisation, masks (bool true = not
                      allowed, as PyTorch's layer, the opposite of SDPA's) and need_weights.
  KVCache             per-layer keys and values for generation: preallocated to max_len and
                      filled in place, so a step appends without copying what is there.
  TransformerBlock    a pre-norm GPT block: x + attn(ln_1(x)), then x + mlp(ln_2(x)), causal
                      self-attention and a GELU MLP, with GPT-2's part names (ln_1, attn.c_attn,
                      attn.c_proj, ln_2, mlp.c_fc, mlp.c_proj; weights (out, in) as Linear's).
]]
return function(nn)
local qlua = rawget(_G, "qlua") or require("qlua")
local F, I, Module = nn.functional, nn.init, nn.Module

local function param(shape, opts)
  return qlua.zeros(shape, { dtype = opts.dtype, device = opts.device }):requires_grad_()
end

-- (N, L, E) -> (N, H, L, E / H)
local function heads(x, h)
  local n, l, e = x:size(1), x:size(2), x:size(3)
  return x:reshape({ n, l, h, e // h }):transpose(2, 3)
end
-- (N, H, L, D) -> (N, L, H * D)
local function merge(x)
  local n, h, l, d = x:size(1), x:size(2), x:size(3), x:size(4)
  return x:transpose(2, 3):reshape({ n, l, h * d })
end

-- ------------------------------------------------------------- MultiheadAttention
local MHA = Module:extend("MultiheadAttention")
nn.MultiheadAttention = MHA
-- MultiheadAttention(embed_dim, num_heads [, {dropout = 0, bias = true, kdim, vdim,
-- batch_first = false, dtype, device}])
function MHA:init(embed_dim, num_heads, opts)
  opts = opts or {}
  if math.type(embed_dim) ~= "integer" or math.type(num_heads) ~= "integer" or num_heads < 1
     or embed_dim % num_heads ~= 0 then
    error(("MultiheadAttention: embed_dim (%s) must be divisible by num_heads (%s)"):format(
      tostring(embed_dim), tostring(num_heads)), 0)
  end
  self.embed_dim, self.num_heads, self.head_dim = embed_dim, num_heads, embed_dim // num_heads
  self.kdim, self.vdim = opts.kdim or embed_dim, opts.vdim or embed_dim
  self.dropout, self.batch_first = opts.dropout or 0, opts.batch_first or false
  self.same_dims = self.kdim == embed_dim and self.vdim == embed_dim
  if self.same_dims then
    self.in_proj_weight = param({ 3 * embed_dim, embed_dim }, opts)
    I.xavier_uniform_(self.in_proj_weight)
  else
    self.q_proj_weight = param({ embed_dim, embed_dim }, opts)
    self.k_proj_weight = param({ embed_dim, self.kdim }, opts)
    self.v_proj_weight = param({ embed_dim, self.vdim }, opts)
    I.xavier_uniform_(self.q_proj_weight)
    I.xavier_uniform_(self.k_proj_weight)
    I.xavier_uniform_(self.v_proj_weight)
  end
  if opts.bias ~= false then self.in_proj_bias = param({ 3 * embed_dim }, opts) end
  self.out_proj = nn.Linear(embed_dim, embed_dim, { bias = opts.bias, dtype = opts.dtype, device = opts.device })
  if self.out_proj.bias then I.zeros_(self.out_proj.bias) end
end
function MHA:extra_repr()
  return ("embed_dim=%d, num_heads=%d, batch_first=%s"):format(self.embed_dim, self.num_heads, tostring(self.batch_first))
end

function MHA:projections()
  local e = self.embed_dim
  local b = self.in_proj_bias
  local bq, bk, bv = b and b:narrow(1, 1, e), b and b:narrow(1, e + 1, e), b and b:narrow(1, 2 * e + 1, e)
  if self.same_dims then
    local w = self.in_proj_weight
    return w:narrow(1, 1, e), w:narrow(1, e + 1, e), w:narrow(1, 2 * e + 1, e), bq, bk, bv
  end
  return self.q_proj_weight, self.k_proj_weight, self.v_proj_weight, bq, bk, bv
end

-- The two masks as one SDPA mask over (N, H, L, S): bool (true takes part) unless either is
-- float (then added, -inf where masked). attn_mask (L, S) or (N * H, L, S); key_padding_mask
-- (N, S); both bool true = masked, or float added.
local function combine_masks(attn_mask, kpm, n, h, l, s, dtype)
  local function additive(m)
    if m:dtype() == "bool" then
      return qlua.zeros(m:shape(), { dtype = dtype, device = m:device() }):masked_fill(m, -math.huge)
    end
    return m:to(dtype)
  end
  local am, pm
  if attn_mask ~= nil then
    if attn_mask:dim() == 3 then am = attn_mask:reshape({ n, h, l, s })
    elseif attn_mask:dim() == 2 then am = attn_mask
    else error("MultiheadAttention: attn_mask must be (L, S) or (N * num_heads, L, S), got "
               .. table.concat(attn_mask:shape(), "x"), 0) end
  end
  if kpm ~= nil then
    if kpm:dim() ~= 2 or kpm:size(1) ~= n or kpm:size(2) ~= s then
      error(("MultiheadAttention: key_padding_mask must be (N, S) = %dx%d, got %s"):format(n, s,
        table.concat(kpm:shape(), "x")), 0)
    end
    pm = kpm:reshape({ n, 1, 1, s })
  end
  if am == nil and pm == nil then return nil end
  local all_bool = (am == nil or am:dtype() == "bool") and (pm == nil or pm:dtype() == "bool")
  if all_bool then
    local blocked = am and pm and am:logical_or(pm) or am or pm
    return blocked:logical_not()
  end
  if am and pm then return additive(am) + additive(pm) end
  return additive(am or pm)
end

-- forward(query, key, value [, {key_padding_mask, need_weights = true, attn_mask,
-- average_attn_weights = true, is_causal}]) -> output, weights (nil unless need_weights).
-- Inputs (L, N, E), or (N, L, E) with batch_first, or unbatched (L, E).
function MHA:forward(query, key, value, opts)
  opts = opts or {}
  local who = "MultiheadAttention"
  for name, t in pairs({ query = query, key = key, value = value }) do
    if not qlua.is_tensor(t) or (t:dim() ~= 2 and t:dim() ~= 3) then
      error(("%s: the %s must be a 2-D or 3-D tensor"):format(who, name), 0)
    end
  end
  local unbatched = query:dim() == 2
  if unbatched then
    query, key, value = query:unsqueeze(1), key:unsqueeze(1), value:unsqueeze(1)
  elseif not self.batch_first then
    query, key, value = query:transpose(1, 2), key:transpose(1, 2), value:transpose(1, 2)
  end
  if query:size(3) ~= self.embed_dim or key:size(3) ~= self.kdim or value:size(3) ~= self.vdim then
    error(("%s: embed dims %d, %d, %d given, the layer takes %d, %d, %d"):format(who, query:size(3),
      key:size(3), value:size(3), self.embed_dim, self.kdim, self.vdim), 0)
  end
  local wq, wk, wv, bq, bk, bv = self:projections()
  local h = self.num_heads
  local q, k, v = heads(F.linear(query, wq, bq), h), heads(F.linear(key, wk, bk), h), heads(F.linear(value, wv, bv), h)
  local n, l, s = q:size(1), q:size(3), k:size(3)
  local kpm = opts.key_padding_mask
  if kpm and unbatched then kpm = kpm:unsqueeze(1) end
  local am = opts.attn_mask
  if am and unbatched and am:dim() == 3 then am = am:unsqueeze(1) end
  local mask = combine_masks(am, kpm, n, h, l, s, q:dtype())
  local p = self.training and self.dropout or 0
  local causal = opts.is_causal and mask == nil
  local out, weights
  if opts.need_weights == false then
    out = F.scaled_dot_product_attention(q, k, v, { attn_mask = mask, dropout_p = p, is_causal = causal })
  else   -- the weights themselves: the S x S softmax, made explicitly
    local sc = q:matmul(k:transpose(3, 4)) * (1 / math.sqrt(self.head_dim))
    if mask ~= nil then
      sc = mask:dtype() == "bool" and sc:masked_fill(mask:logical_not(), -math.huge) or sc + mask
    end
    if causal then
      sc = sc:masked_fill(qlua.ones({ l, s }, { dtype = "bool", device = q:device() }):triu(1), -math.huge)
    end
    weights = sc:softmax(4)
    out = F.dropout(weights, p, p > 0):matmul(v)
    if opts.average_attn_weights ~= false then weights = weights:mean(2) end
    if unbatched then weights = weights:squeeze(1) end
  end
  out = self.out_proj(merge(out))
  if unbatched then out = out:squeeze(1)
  elseif not self.batch_first then out = out:transpose(1, 2) end
  return out, weights
end

-- ------------------------------------------------------------- KVCache
local KVCache = {}
KVCache.__index = KVCache
nn.KVCache = KVCache
-- KVCache(batch, heads, max_len, head_dim [, {dtype, device}]): len 0 to begin with
setmetatable(KVCache, { __call = function(_, b, h, max_len, d, opts)
  opts = opts or {}
  for _, x in ipairs({ b, h, max_len, d }) do
    if math.type(x) ~= "integer" or x < 1 then error("KVCache: sizes must be integers >= 1", 0) end
  end
  local o = { dtype = opts.dtype, device = opts.device }
  return setmetatable({ k = qlua.zeros({ b, h, max_len, d }, o), v = qlua.zeros({ b, h, max_len, d }, o),
                        len = 0, max_len = max_len }, KVCache)
end })
-- append(k, v): (b, h, t, d) new rows after the ones there; returns the keys and values so
-- far (views of the cache, (b, h, len, d))
function KVCache:append(k, v)
  local t = k:size(3)
  if self.len + t > self.max_len then
    error(("KVCache: %d rows and %d new ones pass max_len %d"):format(self.len, t, self.max_len), 0)
  end
  qlua.no_grad(function()
    self.k:narrow(3, self.len + 1, t):copy_(k)
    self.v:narrow(3, self.len + 1, t):copy_(v)
  end)
  self.len = self.len + t
  return self.k:narrow(3, 1, self.len), self.v:narrow(3, 1, self.len)
end
function KVCache:reset() self.len = 0 end

-- ------------------------------------------------------------- TransformerBlock
local Attn = Module:extend("CausalSelfAttention")
function Attn:init(d, h, opts)
  self.n_head = h
  self.c_attn = nn.Linear(d, 3 * d, opts)
  self.c_proj = nn.Linear(d, d, opts)
  self.dropout = opts.dropout or 0
end
-- x (N, T, C); cache: a KVCache (new rows at positions len .. len + T - 1)
function Attn:forward(x, cache)
  local n, t, c = x:size(1), x:size(2), x:size(3)
  local qkv = self.c_attn(x)
  local q, k, v = heads(qkv:narrow(3, 1, c), self.n_head), heads(qkv:narrow(3, c + 1, c), self.n_head),
                  heads(qkv:narrow(3, 2 * c + 1, c), self.n_head)
  local p = self.training and self.dropout or 0
  local y
  if cache == nil then
    y = F.scaled_dot_product_attention(q, k, v, { is_causal = true, dropout_p = p })
  else
    local past = cache.len
    k, v = cache:append(k, v)
    local mask = nil
    if t > 1 then   -- row i sees the keys up to its position past + i (bottom-right aligned)
      local rows = qlua.arange(past + 1, past + t + 1, { device = x:device() }):reshape({ t, 1 })
      mask = qlua.arange(1, past + t + 1, { device = x:device() }):reshape({ 1, past + t }):le(rows)
    end
    y = F.scaled_dot_product_attention(q, k, v, { attn_mask = mask, dropout_p = p })
  end
  return self.c_proj(merge(y))
end

local MLP = Module:extend("MLP")
function MLP:init(d, hidden, opts)
  self.c_fc = nn.Linear(d, hidden, opts)
  self.c_proj = nn.Linear(hidden, d, opts)
  self.approximate = opts.approximate or "tanh"
end
function MLP:forward(x) return self.c_proj(F.gelu(self.c_fc(x), { approximate = self.approximate })) end

local Block = Module:extend("TransformerBlock")
nn.TransformerBlock = Block
-- TransformerBlock(d_model, n_head [, {mlp_ratio = 4, dropout = 0, eps = 1e-5, bias = true,
-- approximate = "tanh" (GPT-2's GELU), dtype, device}])
function Block:init(d, h, opts)
  opts = opts or {}
  if math.type(d) ~= "integer" or math.type(h) ~= "integer" or h < 1 or d % h ~= 0 then
    error(("TransformerBlock: d_model (%s) must be divisible by n_head (%s)"):format(tostring(d), tostring(h)), 0)
  end
  local lo = { bias = opts.bias, dtype = opts.dtype, device = opts.device, dropout = opts.dropout,
               approximate = opts.approximate }
  self.ln_1 = nn.LayerNorm(d, { eps = opts.eps, dtype = opts.dtype, device = opts.device })
  self.attn = Attn(d, h, lo)
  self.ln_2 = nn.LayerNorm(d, { eps = opts.eps, dtype = opts.dtype, device = opts.device })
  self.mlp = MLP(d, (opts.mlp_ratio or 4) * d, lo)
  self.dropout = opts.dropout or 0
end
-- forward(x (N, T, C) [, cache])
function Block:forward(x, cache)
  local p = self.training and self.dropout or 0
  x = x + F.dropout(self.attn(self.ln_1(x), cache), p, p > 0)
  return x + F.dropout(self.mlp(self.ln_2(x)), p, p > 0)
end
end
