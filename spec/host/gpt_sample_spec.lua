--[[
spec/host/gpt_sample_spec.lua — samples/gpt.lua, run as a user runs it: the CPU
configuration trained in full (its own validation-loss target checked by the sample), saved
with --save and generated from with --load (the same seed gives the same text, another seed
other text), prompts given as token ids (--ids), and a Hugging Face-layout copy of the
checkpoint (Conv1D weights stored (in, out), a "transformer." prefix, attn.bias buffers, a
tied lm_head.weight) loaded with --hf to the same generation as the qlua-layout file.
]]

local P = require("spec.helpers.process")

local SAMPLE = "samples/gpt.lua"
local PROMPT = "Permission is hereby granted"

local function run_ok(args, what, timeout)
  local argv = { P.qlua(), SAMPLE }
  for _, a in ipairs(args) do argv[#argv + 1] = a end
  return P.run_ok(argv, what, { timeout = timeout or 60 })
end

-- the output without its tokens/s figures (the only part that changes from run to run)
local function steady(out)
  return (out:gsub("%(%d+ tokens/s%)", "(N tokens/s)"))
end

-- the line of ids after "ids (0-based):"
local function ids_of(out)
  local line = out:match("ids %(0%-based%):\n([%d ]+)\n")
  assert.truthy(line, "no ids in the output:\n" .. out)
  return line
end

describe("samples/gpt.lua", function()
  local ckpt = P.tmpname(".safetensors")
  local trained = false

  it("trains the CPU configuration to its validation-loss target, saves it and writes text", function()
    -- the whole CPU configuration (about 50 s on a 2-core machine); under a sanitizer (make
    -- asan sets ASAN_OPTIONS), where it runs ten times slower, 40 steps and no target
    local sanitized = os.getenv("ASAN_OPTIONS") ~= nil
    local args = { "--cpu", "--save", ckpt, "--tokens", "120" }
    if sanitized then args[#args + 1], args[#args + 2] = "--steps", "40" end
    local out = run_ok(args, "gpt.lua training", 300)
    assert.matches("gpt: on cpu, 2 layers, 2 heads, d 64, context 64, batch 32", out, 1, true)
    if sanitized then
      assert.matches("gpt: final validation loss [%d.]+ %(no target for this step count%)", out)
    else
      assert.matches("validation loss target 2.00 by the last step", out, 1, true)
      assert.matches("step +600 +validation loss %d%.%d+", out)
      assert.matches("step +%d+ +loss %d%.%d+ +lr [%d.e+-]+ +%d+ tokens/s", out)
      assert.matches("gpt: final validation loss [%d.]+ %(target 2.00 met%)", out)
    end
    assert.matches("gpt: saved " .. ckpt, out, 1, true)
    assert.matches('gpt: generated 120 tokens %(%d+ tokens/s%), prompt "' .. PROMPT .. '":', out)
    local text = out:match('prompt "' .. PROMPT .. '":\n(.*)$')
    assert.truthy(text and text:sub(1, #PROMPT) == PROMPT, "no generated text after the prompt:\n" .. out)
    assert.is_true(#text >= #PROMPT + 120, "fewer than 120 generated characters:\n" .. out)
    local f = io.open(ckpt, "rb")
    assert.truthy(f, "no checkpoint written at " .. ckpt)
    f:close()
    trained = true
  end)

  it("generates from the checkpoint: the same seed gives the same text, another seed other text", function()
    assert(trained, "the training test did not write its checkpoint")
    local args = { "--load", ckpt, "--seed", "5", "--tokens", "150", "--prompt", "The licensee" }
    local a = run_ok(args, "gpt.lua --load")
    local b = run_ok(args, "gpt.lua --load (again)")
    assert.matches("gpt: loaded " .. ckpt .. " (qlua layout): 2 layers, 2 heads, d 64, context 64", a, 1, true)
    assert.matches('gpt: generated 150 tokens %(%d+ tokens/s%), prompt "The licensee":\nThe licensee', a)
    assert.are.equal(steady(a), steady(b))
    args[4] = "6"
    local c = run_ok(args, "gpt.lua --load --seed 6")
    assert.are_not.equal(steady(a), steady(c))
  end)

  it("takes the prompt as 0-based token ids (--ids) and prints ids", function()
    assert(trained, "the training test did not write its checkpoint")
    local out = run_ok({ "--load", ckpt, "--ids", "10 20 30", "--tokens", "30", "--seed", "2" }, "gpt.lua --ids")
    local ids = {}
    for w in ids_of(out):gmatch("%d+") do ids[#ids + 1] = tonumber(w) end
    assert.are.equal(30, #ids)
    local _, meta = qlua.load_safetensors(ckpt)
    local vocab = select(2, meta.vocab:gsub("%d+", ""))
    for _, v in ipairs(ids) do assert.is_true(v >= 0 and v < vocab) end
    assert.matches("gpt: as text: ", out, 1, true)
    local bad = P.run({ P.qlua(), SAMPLE, "--load", ckpt, "--ids", "10 9999" }, { timeout = 60 })
    assert.are_not.equal(0, bad.status)
    assert.matches("'9999' is no token id", bad.stderr, 1, true)
  end)

  it("loads a Hugging Face GPT-2 layout with --hf (Conv1D weights transposed) to the same generation", function()
    assert(trained, "the training test did not write its checkpoint")
    local sd = qlua.load_safetensors(ckpt)
    local hf = {}
    for name, t in pairs(sd) do
      if name:match("^h%.%d+%.attn%.c_attn%.weight$") or name:match("^h%.%d+%.attn%.c_proj%.weight$")
         or name:match("^h%.%d+%.mlp%.c_fc%.weight$") or name:match("^h%.%d+%.mlp%.c_proj%.weight$") then
        t = t:transpose(1, 2):contiguous()                  -- Linear (out, in) -> Conv1D (in, out)
      end
      hf["transformer." .. name] = t
    end
    local n_ctx = sd["wpe.weight"]:size(1)
    for i = 0, 1 do
      hf["transformer.h." .. i .. ".attn.bias"] = qlua.ones({ 1, 1, n_ctx, n_ctx }):tril()
      hf["transformer.h." .. i .. ".attn.masked_bias"] = qlua.tensor(-1e4)
    end
    hf["lm_head.weight"] = sd["wte.weight"]
    local path = P.tmpname(".safetensors")
    qlua.save_safetensors(path, hf, { format = "pt" })
    local ids = "45 12 7 33 60 2"
    local mine = run_ok({ "--load", ckpt, "--ids", ids, "--tokens", "60", "--seed", "9" }, "gpt.lua --load --ids")
    local theirs = run_ok({ "--load", path, "--hf", "--n_head", "2", "--ids", ids, "--tokens", "60", "--seed", "9" },
                          "gpt.lua --load --hf")
    assert.matches("(Hugging Face layout): 2 layers, 2 heads, d 64, context 64", theirs, 1, true)
    assert.are.equal(ids_of(mine), ids_of(theirs))
    -- the Conv1D layout read as qlua's (no --hf) is refused, not silently wrong
    local bad = P.run({ P.qlua(), SAMPLE, "--load", path, "--ids", ids }, { timeout = 60 })
    assert.are_not.equal(0, bad.status)
    assert.matches("needs --hf", bad.stderr, 1, true)
    local no_ids = P.run({ P.qlua(), SAMPLE, "--load", path, "--hf", "--n_head", "2" }, { timeout = 60 })
    assert.are_not.equal(0, no_ids.status)
    assert.matches("no BPE tokenizer", no_ids.stderr, 1, true)
  end)

  it("trains data parallel under qlua --nproc 2 (rank 0 prints, the loss falls, one generation)", function()
    local out = P.run_ok({ P.qlua(), "--nproc", "2", SAMPLE, "--cpu", "--steps", "60", "--tokens", "20" },
                         "gpt.lua --nproc 2", { timeout = 300, env = { RANK = false, WORLD_SIZE = false, MASTER_PORT = false } })
    assert.matches("data parallel over 2 ranks", out, 1, true)
    local _, starts = out:gsub("gpt: on cpu", "")
    assert.are.equal(1, starts, "only rank 0 prints:\n" .. out)
    local val = tonumber(out:match("final validation loss ([%d.]+)"))
    assert.truthy(val and val < math.log(80) - 0.5, out)
    assert.matches("generated 20 tokens", out, 1, true)
  end)
end)

teardown(function() P.cleanup() end)
