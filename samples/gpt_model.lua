-- gpt_model.lua — the GPT-2 architecture of samples/gpt.lua (and bench/gpt.lua) in qlua.nn:
-- token and position embeddings (wte, wpe), a stack of nn.TransformerBlock (h.0, h.1, ...),
-- a final LayerNorm (ln_f) and the LM head tied to wte, under Hugging Face's GPT-2 names,
-- initialised as GPT-2 is.
--   local GPT = dofile("samples/gpt_model.lua")
--   local model = GPT({vocab =, n_ctx =, n_layer =, n_head =, d =, dropout =, device =})
local nn = require "qlua.nn"
local F = nn.functional

local GPT = nn.Module:extend("GPT")
-- cfg: {vocab, n_ctx, n_layer, n_head, d, dropout, device}
function GPT:init(cfg)
  self.cfg = cfg
  local dev = cfg.device
  local o = { device = dev }
  self.wte = nn.Embedding(cfg.vocab, cfg.d, o)
  self.wpe = nn.Embedding(cfg.n_ctx, cfg.d, o)
  local blocks = {}
  for i = 1, cfg.n_layer do
    blocks[i] = nn.TransformerBlock(cfg.d, cfg.n_head, { approximate = "tanh", dropout = cfg.dropout, device = dev })
  end
  self.h = nn.ModuleList(blocks)
  self.ln_f = nn.LayerNorm(cfg.d, o)
  -- GPT-2's initialisation: N(0, 0.02) weights, zero biases, and the projections into the
  -- residual stream scaled by 1 / sqrt(2 * n_layer)
  for _, np in ipairs(self:named_parameters()) do
    local name, p = np[1], np[2]
    if name:match("^ln") or name:match("%.ln_%d%.") then   -- LayerNorms keep ones and zeros
    elseif name:match("bias$") then nn.init.zeros_(p)
    elseif name:match("c_proj%.weight$") then nn.init.normal_(p, 0, 0.02 / math.sqrt(2 * cfg.n_layer))
    else nn.init.normal_(p, 0, 0.02) end
  end
end
-- idx (B, T) int64 1-based token ids [, caches: a KVCache per block, positions then go on
-- from their length] -> logits (B, T, vocab)
function GPT:forward(idx, caches)
  local t = idx:size(2)
  local past = caches and caches[1].len or 0
  if past + t > self.cfg.n_ctx then
    error(("gpt: %d positions asked for, the model has %d"):format(past + t, self.cfg.n_ctx), 0)
  end
  local pos = qlua.arange(past + 1, past + t + 1, { device = idx:device() })
  local x = self.wte(idx) + self.wpe(pos)
  local p = self.training and self.cfg.dropout or 0
  x = F.dropout(x, p, p > 0)
  for i, blk in self.h:ipairs() do x = blk(x, caches and caches[i]) end
  return F.linear(self.ln_f(x), self.wte.weight)   -- the head tied to the token embedding
end
function GPT:caches()
  local c = {}
  local hd = self.cfg.d // self.cfg.n_head
  for i = 1, self.cfg.n_layer do
    c[i] = nn.KVCache(1, self.cfg.n_head, self.cfg.n_ctx, hd, { device = self.wte.weight:device(),
                                                               dtype = self.wte.weight:dtype() })
  end
  return c
end

return GPT
