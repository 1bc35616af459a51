-- gpt.lua — a GPT-2 language model in qlua.nn, trained on characters: token and position
-- embeddings (wte, wpe), a stack of nn.TransformerBlock (h.0, h.1, ...: pre-norm causal
-- self-attention and a tanh-GELU MLP), a final LayerNorm (ln_f) and the LM head tied to wte,
-- all under Hugging Face's GPT-2 parameter names, initialised as GPT-2 is. It learns the
-- license texts every Debian machine has (/usr/share/common-licenses, the files in sorted
-- order, a file whose text is already there — GPL, LGPL and GFDL are links to the versioned
-- ones — read once; its distinct bytes are the vocabulary), 90% for training and the last
-- 10% for validation, with AdamW (weight decay 0.1 on the 2-D weights, none on biases,
-- LayerNorms and embeddings), gradient clipping at norm 1 and a cosine learning rate after
-- a linear warm-up; on the GPU the forward and the loss run under
-- qlua.autocast("bfloat16"). Then it writes text from a prompt, one token a step through a
-- KVCache per block, each token drawn by nn.functional.sample (temperature 0.8, top 40).
--   qlua samples/gpt.lua [--steps N] [--cpu] [--seed N] [--save PATH.safetensors]
--                        [--prompt TEXT] [--tokens N] [--target LOSS]
--   qlua samples/gpt.lua --load PATH [--prompt TEXT | --ids "ID ..."] [--tokens N] [--seed N] [--cpu]
--   qlua samples/gpt.lua --load gpt2.safetensors --hf --ids "464 3290 ..." [--n_head N]
--   qlua --nproc N samples/gpt.lua [training flags]   (data parallel: a rank per GPU)
-- Two configurations, picked by the device (--cpu forces the small one):
--   GPU: 6 layers, 6 heads, d 384, context 256, batch 64, dropout 0.2, lr 1e-3 after 100
--        warm-up steps: nanoGPT's shakespeare-char model, but 600 steps, not its 5000: on
--        these 213 KB the validation loss is lowest near step 600 and then climbs as the
--        model learns the training text by heart (past 2.0 by step 2500). It must reach a
--        validation loss of 1.55 nats/char or less by its last step (an H200 reached 1.41,
--        in 34 s of training at 320K tokens/s).
--   CPU: 2 layers, 2 heads, d 64, context 64, batch 32, 600 steps, lr 5e-3, in about 50 s
--        on a 2-core machine; it must reach a validation loss of 2.00 or less (it reaches
--        1.85; seeds 1 to 3 gave 1.82 to 1.88).
-- The target is checked when the run has the configuration's own step count (or --target
-- gives one); any run checks that the loss fell and that validation beats the uniform
-- guess, log(vocab). A failed check is an error.
-- --save writes the trained model with nn.save, its configuration and vocabulary in the
-- file's metadata; --load reads such a file back and only generates (the same seed, the
-- same text). --hf loads a Hugging Face GPT-2 checkpoint instead (model.safetensors of
-- gpt2 and its larger sizes: their Conv1D weights are stored (in, out) and are transposed
-- here, attn.bias / attn.masked_bias buffers, a "transformer." prefix and the tied
-- lm_head.weight are skipped). The limit: GPT-2's byte-pair tokenizer is not part of qlua,
-- so with --hf the prompt is given as token ids (--ids, 0-based as Hugging Face's, e.g.
-- from tiktoken or GPT2TokenizerFast) and the output is ids too, not text; n_head is not in
-- the weights, so it is d / 64 (every GPT-2 size) unless --n_head says.
-- Under qlua --nproc N (or torchrun's variables) the training is data parallel: each rank
-- takes its GPU (LOCAL_RANK), draws batch / N of the batch's windows, and
-- DistributedDataParallel averages the gradients, so the run follows one GPU's with the
-- same global batch; rank 0 prints (the validation loss averaged over the ranks), saves
-- and generates.
package.path = (arg[0]:match("^(.*)/[^/]*$") or ".") .. "/../lua/?.lua;" .. package.path
local nn, optim = require "qlua.nn", require "qlua.optim"
local F = nn.functional

-- ------------------------------------------------------------- command line
local opt = {}
do
  local flags = { cpu = true, hf = true }
  local i = 1
  while i <= #arg do
    local name = arg[i]:match("^%-%-([%w_]+)$")
    if not name then error("gpt: unexpected argument '" .. arg[i] .. "' (flags are --name [value])", 0) end
    if flags[name] then
      opt[name] = true
      i = i + 1
    else
      if arg[i + 1] == nil then error("gpt: --" .. name .. " needs a value", 0) end
      opt[name] = arg[i + 1]
      i = i + 2
    end
  end
  local known = { cpu = 1, hf = 1, steps = 1, seed = 1, save = 1, load = 1, prompt = 1, tokens = 1,
                  ids = 1, target = 1, n_head = 1 }
  for k in pairs(opt) do
    if not known[k] then error("gpt: unknown flag --" .. k, 0) end
  end
end
local function int_flag(name, default)
  if opt[name] == nil then return default end
  local v = math.tointeger(tonumber(opt[name]))
  if not v or v < 0 then error(("gpt: --%s takes a whole number >= 0, got '%s'"):format(name, opt[name]), 0) end
  return v
end

local dev = (qlua.gpu_count() > 0 and not opt.cpu) and "gpu" or "cpu"
local seed = int_flag("seed", 1337)
qlua.seed(seed)

-- data parallel under qlua --nproc N: "gpu" is this rank's GPU
local world = math.tointeger(tonumber(os.getenv("WORLD_SIZE") or "")) or 1
local dist, rank = nil, 0
if world > 1 then
  if opt.load then error("gpt: --load generates on one process: run it without --nproc", 0) end
  dist = require "qlua.dist"
  dist.init_process_group()
  rank = dist.get_rank()
  if dev == "gpu" then
    if qlua.gpu_count() <= dist.get_local_rank() then
      error(("gpt: rank %d has no GPU of its own (%d GPUs): use --cpu or fewer ranks"):format(rank, qlua.gpu_count()), 0)
    end
    qlua.set_device(dist.get_local_rank())
  end
end
local function say(...) if rank == 0 then print(...) end end
if opt.hf and not opt.load then error("gpt: --hf goes with --load PATH", 0) end

-- the time, honest on the GPU: the queued work is finished first
local function now()
  if dev == "gpu" then qlua.sync() end
  return qlua.clock()
end

-- ------------------------------------------------------------- the model
-- (samples/gpt_model.lua, which bench/gpt.lua measures too)
local GPT = dofile((arg[0]:match("^(.*)/[^/]*$") or ".") .. "/gpt_model.lua")

-- ------------------------------------------------------------- generation
-- ids: a list of 1-based prompt tokens; n new ones, drawn one a step through the caches.
-- When the context is full the caches are refilled from the last half of it (positions
-- start again at 1, as in training). Returns the new ids and the tokens per second.
local function generate(model, ids, n)
  model:eval()
  local ctx = model.cfg.n_ctx
  local out, all = {}, {}
  for i, v in ipairs(ids) do all[i] = v end
  local t0
  qlua.no_grad(function()
    local caches = model:caches()
    local function feed(list)
      return model(qlua.tensor({ list }, { dtype = "int64", device = dev }), caches)
    end
    local start = math.max(1, #all - ctx + 1)
    local logits = feed(table.move(all, start, #all, 1, {}))
    t0 = now()
    for k = 1, n do
      local last = logits:select(2, logits:size(2))           -- (1, vocab)
      local tok = math.tointeger(F.sample(last, { temperature = 0.8, top_k = 40 }):item())
      out[k], all[#all + 1] = tok, tok
      if k == n then break end
      if caches[1].len >= ctx then
        for _, c in ipairs(caches) do c:reset() end
        logits = feed(table.move(all, #all - ctx // 2 + 1, #all, 1, {}))
      else
        logits = feed({ tok })
      end
    end
  end)
  local rate = n / math.max(now() - t0, 1e-9)
  model:train()
  return out, rate
end

-- ------------------------------------------------------------- checkpoints
local HF_CONV1D = { ["attn.c_attn.weight"] = true, ["attn.c_proj.weight"] = true,
                    ["mlp.c_fc.weight"] = true, ["mlp.c_proj.weight"] = true }

local function save_checkpoint(model, path, vocab)
  local codes = {}
  for i = 1, #vocab do codes[i] = tostring(vocab:byte(i)) end
  local c = model.cfg
  nn.save(model, path, { format = "qlua-gpt-char", vocab = table.concat(codes, " "),
    n_layer = tostring(c.n_layer), n_head = tostring(c.n_head), n_embd = tostring(c.d),
    n_ctx = tostring(c.n_ctx) })
end

-- -> model, vocab (a string of bytes; nil for a Hugging Face file)
local function load_checkpoint(path)
  local sd, meta = qlua.load_safetensors(path)
  local vocab
  local cfg = { dropout = 0 }
  if opt.hf then
    local hf = {}
    for name, t in pairs(sd) do
      name = name:gsub("^transformer%.", "")
      local tail = name:match("^h%.%d+%.(.*)$")
      if tail == "attn.bias" or tail == "attn.masked_bias" or name == "lm_head.weight" then
        -- causal-mask buffers and the tied head: nothing to load
      elseif tail and HF_CONV1D[tail] then
        hf[name] = t:transpose(1, 2)                            -- Conv1D (in, out) -> Linear (out, in)
      else
        hf[name] = t
      end
    end
    sd = hf
    if not sd["wte.weight"] or not sd["wpe.weight"] then
      error("gpt: " .. path .. " has no wte.weight / wpe.weight: not a GPT-2 checkpoint", 0)
    end
    cfg.vocab, cfg.d = sd["wte.weight"]:size(1), sd["wte.weight"]:size(2)
    cfg.n_ctx = sd["wpe.weight"]:size(1)
    cfg.n_layer = 0
    while sd["h." .. cfg.n_layer .. ".ln_1.weight"] do cfg.n_layer = cfg.n_layer + 1 end
    cfg.n_head = int_flag("n_head", cfg.d // 64)
  else
    if meta.format ~= "qlua-gpt-char" then
      error("gpt: " .. path .. " is not a checkpoint of this sample (no format = qlua-gpt-char in its " ..
            "metadata; a Hugging Face GPT-2 file needs --hf)", 0)
    end
    local codes = {}
    for c in meta.vocab:gmatch("%d+") do codes[#codes + 1] = tonumber(c) end
    vocab = string.char(table.unpack(codes))
    cfg.vocab, cfg.d, cfg.n_ctx = #vocab, tonumber(meta.n_embd), tonumber(meta.n_ctx)
    cfg.n_layer, cfg.n_head = tonumber(meta.n_layer), tonumber(meta.n_head)
  end
  if cfg.n_head < 1 or cfg.d % cfg.n_head ~= 0 then
    error(("gpt: n_head %d does not divide d %d"):format(cfg.n_head, cfg.d), 0)
  end
  cfg.device = dev
  local model = GPT(cfg)
  model:load_state_dict(sd)
  return model, vocab
end

-- text <-> 1-based ids over vocab
local function encoder(vocab)
  local id = {}
  for i = 1, #vocab do id[vocab:byte(i)] = i end
  local function encode(s)
    local ids = {}
    for i = 1, #s do
      local v = id[s:byte(i)]
      if not v then error(("gpt: the prompt's character %q is not in the vocabulary"):format(s:sub(i, i)), 0) end
      ids[i] = v
    end
    return ids
  end
  local function decode(ids)
    local b = {}
    for i, v in ipairs(ids) do b[i] = vocab:sub(v, v) end
    return table.concat(b)
  end
  return encode, decode
end

local function count_params(model)
  local n = 0
  for _, p in ipairs(model:parameters()) do n = n + p:numel() end
  return n
end

local prompt = opt.prompt or "Permission is hereby granted"

-- ------------------------------------------------------------- inference only
if opt.load then
  local model, vocab = load_checkpoint(opt.load)
  local c = model.cfg
  print(("gpt: loaded %s (%s layout): %d layers, %d heads, d %d, context %d, vocab %d, %.2fM parameters, on %s")
    :format(opt.load, opt.hf and "Hugging Face" or "qlua", c.n_layer, c.n_head, c.d, c.n_ctx, c.vocab,
            count_params(model) / 1e6, dev))
  local n = int_flag("tokens", 200)
  assert(n >= 1, "gpt: --tokens must be at least 1")
  local ids
  if opt.ids then                                       -- 0-based, as Hugging Face's
    ids = {}
    for w in opt.ids:gmatch("%S+") do
      local v = math.tointeger(tonumber(w))
      if not v or v < 0 or v >= c.vocab then error(("gpt: --ids: '%s' is no token id in 0..%d"):format(w, c.vocab - 1), 0) end
      ids[#ids + 1] = v + 1
    end
    if #ids == 0 then error("gpt: --ids is empty", 0) end
  elseif opt.hf then
    error("gpt: --hf needs the prompt as GPT-2 token ids (--ids \"464 3290 ...\"): qlua has no BPE tokenizer", 0)
  else
    local encode = encoder(vocab)
    ids = encode(prompt)
  end
  local new, rate = generate(model, ids, n)
  if vocab and not opt.ids then
    local _, decode = encoder(vocab)
    print(("gpt: generated %d tokens (%.0f tokens/s), prompt %q:"):format(n, rate, prompt))
    print(prompt .. decode(new))
  else
    local zero = {}
    for i, v in ipairs(new) do zero[i] = tostring(v - 1) end
    print(("gpt: generated %d tokens (%.0f tokens/s), ids (0-based):"):format(n, rate))
    print(table.concat(zero, " "))
    if vocab then local _, decode = encoder(vocab); print("gpt: as text: " .. decode(new)) end
  end
  return
end

-- ------------------------------------------------------------- the data
local DIR = "/usr/share/common-licenses"
local names = {}
do
  local ls = io.popen("ls -1 " .. DIR .. " 2>/dev/null")
  for line in ls:lines() do names[#names + 1] = line end
  ls:close()
end
table.sort(names)
local parts, seen = {}, {}
for _, name in ipairs(names) do
  local f = io.open(DIR .. "/" .. name, "rb")
  if f then
    local s = f:read("a")
    f:close()
    if s and #s > 0 and not seen[s] then seen[s] = true; parts[#parts + 1] = s end
  end
end
local text = table.concat(parts)
if #text < 100000 then
  error(("gpt: %s holds %d bytes of text; this sample needs the Debian license files (100 KB or more)"):format(DIR, #text), 0)
end
local vocab
do
  local present, bytes = {}, {}
  for i = 1, #text do present[text:byte(i)] = true end
  for b = 0, 255 do if present[b] then bytes[#bytes + 1] = b end end
  vocab = string.char(table.unpack(bytes))
end
local encode, decode = encoder(vocab)
local data = qlua.tensor(encode(text), { dtype = "int64", device = dev })
local n_train = math.floor(#text * 0.9)
local train_data, val_data = data:narrow(1, 1, n_train), data:narrow(1, n_train + 1, #text - n_train)

-- ------------------------------------------------------------- the configuration
local CONFIGS = {
  gpu = { n_layer = 6, n_head = 6, d = 384, n_ctx = 256, batch = 64, dropout = 0.2, steps = 600,
          lr = 1e-3, warmup = 100, eval_every = 100, eval_batches = 20, print_every = 50, target = 1.55 },
  cpu = { n_layer = 2, n_head = 2, d = 64, n_ctx = 64, batch = 32, dropout = 0, steps = 600,
          lr = 5e-3, warmup = 50, eval_every = 150, eval_batches = 20, print_every = 50, target = 2.00 },
}
local cfg = CONFIGS[dev]
cfg.vocab = #vocab
local steps = int_flag("steps", cfg.steps)
assert(steps >= 1, "gpt: --steps must be at least 1")
local target = opt.target and tonumber(opt.target) or (steps == cfg.steps and cfg.target or nil)
if opt.target and not target then error("gpt: --target takes a number, got '" .. opt.target .. "'", 0) end
if cfg.batch % world ~= 0 then error(("gpt: the batch of %d does not split over %d ranks"):format(cfg.batch, world), 0) end
local B, T = cfg.batch // world, cfg.n_ctx   -- this rank's share of the batch
local min_lr = cfg.lr / 10

cfg.device = dev
local model = GPT(cfg)
local decay, no_decay = {}, {}
for _, np in ipairs(model:named_parameters()) do
  local name, p = np[1], np[2]
  if p:dim() == 2 and not name:match("^wte%.") and not name:match("^wpe%.") then decay[#decay + 1] = p
  else no_decay[#no_decay + 1] = p end
end
local params = model:parameters()
-- data parallel: rank 0's weights everywhere, gradients averaged; each rank its own windows
local net = dist and nn.parallel.DistributedDataParallel(model) or model
if dist then qlua.seed(seed + 1000 * rank) end
local opt_w = optim.AdamW({ { params = decay, weight_decay = 0.1 }, { params = no_decay, weight_decay = 0 } },
                          { lr = cfg.lr, betas = { 0.9, 0.99 } })

-- warm-up from lr / warmup to lr, then a cosine down to min_lr at the last step
local function lr_at(step)
  if step <= cfg.warmup then return cfg.lr * step / cfg.warmup end
  local span = math.max(steps - cfg.warmup, 1)
  local r = math.min((step - cfg.warmup) / span, 1)
  return min_lr + 0.5 * (cfg.lr - min_lr) * (1 + math.cos(math.pi * r))
end

-- B random windows of split: inputs (B, T) and the next characters (B, T)
local span = qlua.arange(0, T, { device = dev }):reshape({ 1, T })
local function batch(split)
  local off = qlua.randint(1, split:size(1) - T, { B, 1 }, { device = dev })
  local idx = (off + span):reshape({ -1 })
  return split:index_select(1, idx):reshape({ B, T }), split:index_select(1, idx + 1):reshape({ B, T })
end

local function loss_of(x, y, m)
  local logits = (m or model)(x)
  if logits:dtype() ~= "float32" then logits = logits:float() end
  return F.cross_entropy(logits:reshape({ B * T, cfg.vocab }), y:reshape({ B * T }))
end
local function forward_loss(x, y, m)
  if dev == "gpu" then
    if qlua.autocast == nil then error("gpt: qlua.autocast is missing (lua/qlua/amp.lua): the GPU run needs it", 0) end
    return qlua.autocast("bfloat16", loss_of, x, y, m)
  end
  return loss_of(x, y, m)
end

local function val_loss()
  model:eval()
  local sum = qlua.no_grad(function()
    local s = 0
    for _ = 1, cfg.eval_batches do s = s + forward_loss(batch(val_data)):item() end
    return s
  end)
  model:train()
  if dist then   -- the ranks' mean, so every rank judges the same number
    local t = qlua.tensor({ sum / cfg.eval_batches }, { dtype = "float64" })
    dist.all_reduce(t, { op = "avg" })
    return t[1]
  end
  return sum / cfg.eval_batches
end

say(("gpt: %d bytes of license text (%d files), vocabulary %d, %d train / %d validation"):format(
  #text, #parts, #vocab, n_train, #text - n_train))
say(("gpt: on %s, %d layers, %d heads, d %d, context %d, batch %d, %.2fM parameters, %d steps, lr %g%s%s"):format(
  dev, cfg.n_layer, cfg.n_head, cfg.d, T, cfg.batch, count_params(model) / 1e6, steps, cfg.lr,
  dev == "gpu" and ", bfloat16 autocast" or "", dist and (", data parallel over %d ranks"):format(world) or ""))
say(("gpt: validation loss target %s"):format(target and ("%.2f by the last step"):format(target)
  or "none for this step count (the loss must still fall below log(vocab))"))

local t_start = now()
local t_mark, tokens_mark = t_start, 0
local first_loss, last_val
for step = 1, steps do
  local lr = lr_at(step)
  for _, g in ipairs(opt_w.param_groups) do g.lr = lr end
  local x, y = batch(train_data)
  local loss = forward_loss(x, y, net)
  opt_w:zero_grad()
  loss:backward()
  nn.utils.clip_grad_norm_(params, 1.0)
  opt_w:step()
  tokens_mark = tokens_mark + B * T * world
  if step == 1 then first_loss = loss:item() end
  if step % cfg.print_every == 0 or step == steps then
    local l = loss:item()
    local t = now()
    say(("  step %5d  loss %.4f  lr %.2e  %8.0f tokens/s"):format(step, l, lr, tokens_mark / (t - t_mark)))
    if step % cfg.eval_every == 0 or step == steps then
      last_val = val_loss()
      say(("  step %5d  validation loss %.4f"):format(step, last_val))
    end
    t_mark, tokens_mark = now(), 0
  end
end
local train_s = now() - t_start

local uniform = math.log(#vocab)
assert(last_val < first_loss - 0.5 and last_val < uniform - 0.5,
  ("gpt: the loss did not fall: first training loss %.4f, final validation loss %.4f, log(vocab) %.4f"):format(
    first_loss, last_val, uniform))
if target and last_val > target then
  error(("gpt: final validation loss %.4f is above the target %.2f"):format(last_val, target), 0)
end
say(("gpt: final validation loss %.4f (%s), %.1f s of training"):format(last_val,
  target and ("target %.2f met"):format(target) or "no target for this step count", train_s))
if dist then
  local r = rank
  dist.destroy_process_group()
  if r ~= 0 then return end   -- rank 0 saves and generates
end

if opt.save then
  save_checkpoint(model, opt.save, vocab)
  print("gpt: saved " .. opt.save)
end

local n = int_flag("tokens", 200)
local new, rate = generate(model, encode(prompt), n)
print(("gpt: generated %d tokens (%.0f tokens/s), prompt %q:"):format(n, rate, prompt))
print(prompt .. decode(new))
