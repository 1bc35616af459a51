--[[
The API fuzzer (lua/qlua/fuzz.lua), inside `make test`: a short seeded run of the
qlua under test, plus checks that the fuzzer itself works — the same seed makes the same
calls, and a planted bad error message or a non-string error is reported as a finding.

The long runs are `make fuzz N=100000` (release build) and `make asan` / `make asan-fuzz`
(sanitizers). QLUA_FUZZ_N and QLUA_FUZZ_SEED change this spec's run (default 10000, 1).
Findings of longer runs that come from known bugs are pinned in spec/host/regressions_spec.lua.
]]

local P = require("spec.helpers.process")

local QLUA = P.qlua()
local N = tonumber(os.getenv("QLUA_FUZZ_N") or "") or 10000
local SEED = tonumber(os.getenv("QLUA_FUZZ_SEED") or "") or 1

-- A memory limit keeps a runaway allocation from taking the machine, where one can be
-- set: ASan and the CUDA runtime reserve terabytes of address space, so neither can run
-- under ulimit -v.
local qlua = rawget(_G, "qlua") or require("qlua")
local LIMIT = (os.getenv("ASAN_OPTIONS") == nil and qlua.gpu_count() == 0) and "ulimit -v 8388608; " or ""

-- The fuzzer in a child process, so a crash fails this spec instead of the whole run.
local function run_fuzzer(args, timeout)
  local words = { P.quote(QLUA), "lua/qlua/fuzz.lua" }
  for _, a in ipairs(args) do words[#words + 1] = P.quote(a) end
  local cmd = LIMIT .. "exec " .. table.concat(words, " ")
  return P.run({ "sh", "-c", cmd }, { timeout = timeout or 300 })
end

local function summary(stdout)
  return stdout:match("fuzz: seed %d+, [^\n]*")
end

describe("fuzz", function()
  after_each(function() P.cleanup() end)

  it("a seeded run finds nothing", function()
    local r = run_fuzzer({ tostring(N), tostring(SEED), "--quiet" })
    local line = summary(r.stdout)
    assert(line, "no summary line; status " .. r.status .. "\n" .. r.stdout .. r.stderr)
    assert(r.status == 0 and line:find(" 0 findings", 1, true),
           "the fuzzer reported findings (status " .. r.status .. "):\n" .. r.stdout .. r.stderr)
    local calls = tonumber(line:match("(%d+) calls"))
    assert(calls and calls >= N, line)
  end)

  it("is reproducible: the same seed makes the same calls", function()
    -- long and often enough that data-dependent shapes (unique, nonzero, ... of what
    -- empty() handed out) come up: the calls, not only their counts, are the same (the
    -- temporary directory aside); before empty()'s results were zeroed, about one run in
    -- three of these seeds differed
    local function counts(out) return (out:gsub("%s+[%d.]+ s\n", "\n"):gsub("; [%d.]+ s", "")) end
    -- the trace lines only (a sanitizer's warnings carry the process id)
    local function calls(err)
      local lines = {}
      for line in err:gmatch("[^\n]+") do
        if line:match("^%[%d+%] ") then lines[#lines + 1] = (line:gsub("/tmp/lua_%w+", "TMP")) end
      end
      return table.concat(lines, "\n")
    end
    for _, seed in ipairs({ "1", "3" }) do
      local a = run_fuzzer({ "5000", seed, "--quiet", "--stats", "--trace" }, 120)
      assert.truthy(#calls(a.stderr) > 0)
      for _ = 1, 3 do
        local b = run_fuzzer({ "5000", seed, "--quiet", "--stats", "--trace" }, 120)
        assert.are.equal(counts(a.stdout), counts(b.stdout))
        assert(calls(a.stderr) == calls(b.stderr), "seed " .. seed .. ": the calls differ between runs")
      end
    end
    local a = run_fuzzer({ "400", "7", "--quiet", "--stats" }, 120)
    local c = run_fuzzer({ "400", "8", "--quiet", "--stats" }, 120)
    assert.are_not.equal(counts(a.stdout), counts(c.stdout))
  end)

  it("--show prints the call of an iteration and how its tensors were made", function()
    local r = run_fuzzer({ "50", "3", "--show", "50" }, 120)
    assert.are.equal(0, r.status, r.stderr)
    assert.truthy(r.stdout:find("-- seed 3 iteration 50", 1, true), r.stdout)
    assert.truthy(r.stdout:find("(the finding)", 1, true), r.stdout)
  end)

  -- The fuzzer's own checks, against a module table whose `ones` misbehaves (everything
  -- else is the real qlua). In a child process too: the run reaches the runtime's bugs
  -- as any run does, and a sanitizer abort must not end the spec run.
  describe("reports", function()
    local function run_planted(ones_src)
      local code = string.format([[
package.path = "./lua/?.lua;" .. package.path
local fuzz = require("qlua.fuzz")
local planted = setmetatable({ ones = %s }, { __index = qlua })
local report = fuzz.run({ n = 600, seed = 5, quiet = true, max_print = 1, qlua = planted,
                          only = "ones" })
local own = 0
for _, f in ipairs(report.findings) do if f.key:find("^ones") then own = own + 1 end end
print("findings about ones: " .. own)]], ones_src)
      local argv = { "sh", "-c", LIMIT .. "exec \"$0\" \"$@\"", QLUA, "-e", code }
      local r = P.run(argv, { timeout = 120 })
      local own = tonumber(r.stdout:match("findings about ones: (%d+)"))
      assert(own, "the planted run did not finish (status " .. r.status .. "):\n" .. r.stdout .. r.stderr)
      return own, r.stdout
    end

    it("an error message that does not name the function", function()
      local own, text = run_planted([[function() error("something went wrong", 0) end]])
      assert.truthy(own > 0, "no finding")
      assert.truthy(text:find("error message does not name 'ones': something went wrong", 1, true), text)
      assert.truthy(text:find("FINDING seed 5 iteration %d+: ones"), text)
      assert.truthy(text:find("qlua.ones(", 1, true), text)
    end)

    it("an error that is not a string", function()
      local own, text = run_planted([[function() error({ code = 1 }) end]])
      assert.truthy(own > 0, "no finding")
      assert.truthy(text:find("raised a table", 1, true), text)
    end)

    it("a result that is not a valid tensor", function()
      local own, text = run_planted([[function() return 42 end]])
      assert.truthy(own > 0, "no finding")
      assert.truthy(text:find("result is a number, not a tensor", 1, true), text)
    end)

    it("nothing when the function behaves", function()
      local own = run_planted([[function(...) return qlua.ones(...) end]])
      assert.are.equal(0, own)
    end)
  end)
end)
