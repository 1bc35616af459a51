--[[
qlua's REPL: through a pipe (plain lines, what scripts and editors drive) and on a
pseudo-terminal (readline: completion, history, Ctrl-C).

The pipe cases are also compared with lua5.4 where the two must agree (a piped `-i`
session prints the prompts and echoes each line, as Debian's readline-built lua5.4
does). The terminal cases run qlua under util-linux `script` with TERM=dumb, a fresh
$HOME and no inputrc; keystrokes are typed with pauses between them, and every run is
bounded by `timeout`, so nothing can hang. Results are checked through values the
session prints with a marker ("R:" .. value), which the echo of the typed line cannot
produce by itself.
]]

local P = require("spec.helpers.process")

local QLUA = P.qlua()
local LUA, no_lua = P.lua()

local CTRL_C, CTRL_D, TAB, UP = "\3", "\4", "\t", "\27[A"

local function piped(stdin, argv)
  local full = { QLUA, "-i" }
  for _, word in ipairs(argv or {}) do full[#full + 1] = word end
  return P.run(full, { stdin = stdin })
end

-- The lines of the session's stdout after the banner.
local function transcript(result)
  return (result.stdout:gsub("^[^\n]*\n", "", 1))
end

local function has(text, needle)
  return text:find(needle, 1, true) ~= nil
end

-- A tensor in this build? (The tensor type lands with the runtime; until then the
-- tensor cases are pending, saying so.)
local has_tensor = P.run({ QLUA, "-e", "os.exit(type(qlua.tensor) == 'function' and 0 or 3)" }).status == 0

describe("the REPL through a pipe", function()
  teardown(P.cleanup)

  it("prints the values of expressions, several separated by tabs", function()
    local r = piped("1 + 1\n'a', 2, nil\nx = 5\nx\n=x * 2\nmath.huge\n")
    assert.are.equal(0, r.status)
    assert.are.equal("", r.stderr)
    assert.are.equal(table.concat({
      "> 1 + 1", "2",
      "> 'a', 2, nil", "a\t2\tnil",
      "> x = 5",
      "> x", "5",
      "> =x * 2", "10",
      "> math.huge", "inf",
      "> ", "" }, "\n"), transcript(r))
  end)

  it("prints through the global print (so __tostring and a replaced print apply)", function()
    local r = piped("setmetatable({}, { __tostring = function() return 'custom!' end })\n" ..
                    "print = function(...) io.write('[', select('#', ...), ']\\n') end\n1, 2, 3\n")
    assert.truthy(has(r.stdout, "\ncustom!\n"))
    assert.truthy(has(r.stdout, "\n[3]\n"))
  end)

  it("continues multi-line statements with _PROMPT2", function()
    local r = piped("function twice(n)\nreturn 2 * n\nend\ntwice(21)\nlocal t = {\n1,\n2 }\n")
    assert.are.equal(table.concat({
      "> function twice(n)", ">> return 2 * n", ">> end",
      "> twice(21)", "42",
      "> local t = {", ">> 1,", ">> 2 }",
      "> ", "" }, "\n"), transcript(r))
  end)

  it("uses _PROMPT and _PROMPT2, through tostring", function()
    local r = piped("_PROMPT = 'qlua$ '\n_PROMPT2 = 3\nif true then\nend\n_PROMPT = nil\n")
    assert.are.equal(table.concat({
      "> _PROMPT = 'qlua$ '", "qlua$ _PROMPT2 = 3", "qlua$ if true then", "3end",
      "qlua$ _PROMPT = nil", "> ", "" }, "\n"), transcript(r))
  end)

  it("falls back to the default prompt when _PROMPT's __tostring raises", function()
    local r = piped("_PROMPT = setmetatable({}, { __tostring = function() error('no') end })\n1 + 2\n")
    assert.are.equal(0, r.status)
    assert.truthy(has(r.stdout, "\n> 1 + 2\n3\n"), r.stdout)
  end)

  it("reports errors on stderr and keeps the session going", function()
    local r = piped("error('first')\nlocal = 1\nnil + 1\nprint('still alive')\n")
    assert.are.equal(0, r.status)
    assert.truthy(has(r.stdout, "\nstill alive\n"))
    assert.truthy(has(r.stderr, "stdin:1: first\nstack traceback:"))
    assert.truthy(has(r.stderr, "stdin:1: <name> expected near '='"))
    assert.truthy(has(r.stderr, "attempt to perform arithmetic on a nil value"))
    assert.falsy(has(r.stderr, QLUA))   -- no program name inside the REPL
  end)

  it("reports an error raised by print itself", function()
    local r = piped("setmetatable({}, { __tostring = function() error('no string') end })\nprint('after')\n")
    assert.truthy(has(r.stderr, "error calling 'print' ("))
    assert.truthy(has(r.stdout, "\nafter\n"))
  end)

  it("reports a statement left unfinished at end of input", function()
    local r = piped("for i = 1, 2 do\n")
    assert.are.equal(0, r.status)
    assert.truthy(has(r.stderr, "'end' expected near <eof>"), r.stderr)
  end)

  it("ends at end of input with status 0, and os.exit still sets the status", function()
    assert.are.equal(0, piped("").status)
    assert.are.equal(7, piped("os.exit(7)\nprint('not reached')\n").status)
  end)

  it("keeps no history for piped sessions", function()
    local home = P.tempdir()
    local r = P.run({ QLUA, "-i" }, { stdin = "x = 1\n", env = { HOME = home } })
    assert.are.equal(0, r.status)
    assert.is_nil(P.read(home .. "/.qlua_history"))
  end)

  if LUA then
    it("prints exactly what lua5.4 prints for the same session", function()
      local session = "x = {1, 2, 3}\n#x\nfor i, v in ipairs(x) do\nprint(i, v)\nend\n" ..
                      "error('e')\n_PROMPT = '% '\n1, nil, false\nreturn\n\n"
      local q = P.run({ QLUA, "-i" }, { stdin = session })
      local l = P.run({ LUA, "-i" }, { stdin = session })
      assert.are.equal(transcript(l), transcript(q))
      assert.are.equal(l.stderr, q.stderr)
      assert.are.equal(l.status, q.status)
    end)
  else
    pending("prints exactly what lua5.4 prints for the same session [" .. no_lua .. "]")
  end

  if has_tensor then
    it("prints tensors with their __tostring", function()
      local r = piped("qlua.tensor({1, 2, 3})\n")
      local expected = P.run({ QLUA, "-e", "print(qlua.tensor({1, 2, 3}))" }).stdout
      assert.are.equal("", r.stderr)
      assert.truthy(has(r.stdout, "> qlua.tensor({1, 2, 3})\n" .. expected), r.stdout)
    end)

    it("prints each result on a line of its own when a tensor is among them", function()
      local r = piped("x = qlua.tensor({1, 2, 3})\nreturn x, 1\n'a', nil, x\nreturn 1, 2\n")
      local shown = P.run({ QLUA, "-e", "io.write(tostring(qlua.tensor({1, 2, 3})))" }).stdout
      assert.are.equal("", r.stderr)
      assert.are.equal(table.concat({
        "> x = qlua.tensor({1, 2, 3})",
        "> return x, 1", shown, "1",
        "> 'a', nil, x", "a", "nil", shown,
        "> return 1, 2", "1\t2",
        "> ", "" }, "\n"), transcript(r))
    end)

    it("stops printing the results at an error in print, as with one call", function()
      local r = piped("x = qlua.tensor({1})\n" ..
                      "x, setmetatable({}, { __tostring = function() error('no string') end }), 3\n" ..
                      "print('after')\n")
      assert.truthy(has(r.stderr, "error calling 'print' ("), r.stderr)
      assert.falsy(has(r.stdout, "\n3\n"), r.stdout)
      assert.truthy(has(r.stdout, "\nafter\n"), r.stdout)
    end)
  else
    pending("prints tensors with their __tostring [qlua.tensor is not in this build yet]")
  end
end)

describe("the REPL on a terminal", function()
  if not P.have("script") then
    pending("all terminal cases [util-linux `script` is not installed]")
    return
  end
  teardown(P.cleanup)

  local function session(keys, opts)
    local r = P.pty({ QLUA }, keys, opts)
    return r.output, r
  end

  it("shows the banner and a prompt, and Ctrl-D ends the session with status 0", function()
    local out, r = session({ CTRL_D })
    assert.are.equal(0, r.status)
    assert.truthy(out:find("^qlua %d+%.%d+%.%d+[%w%.%-]*  Lua 5%.4"), out)
    assert.truthy(has(out, "> "))
    if LUA then   -- the banner's line ends as lua5.4's does
      local banner = P.run({ LUA, "-v" }).stdout
      assert.are.equal(banner, out:match("^[^\n]*\n"):sub(-#banner))
    end
  end)

  it("completes global names and keywords", function()
    local out = session({ "zebra_unique_global = 424242\n", 0.2,
                          "print('R:' .. zebra_uniq" .. TAB .. ")\n", 0.2,
                          "local f = functi" .. TAB .. "() return 'R:kw' end print(f())\n", 0.2,
                          CTRL_D })
    assert.truthy(has(out, "R:424242"), out)
    assert.truthy(has(out, "R:kw\n"), out)
  end)

  it("completes string.fo to string.format", function()
    local out = session({ "print(string.fo" .. TAB .. "('R:%d!', 42))\n", 0.2, CTRL_D })
    assert.truthy(has(out, "string.format"), out)
    assert.truthy(has(out, "R:42!"), out)
  end)

  it("completes a chain of table fields", function()
    local out = session({ "cfg = { alpha = { beta = { gamma_value = 7 } } }\n", 0.2,
                          "print('R:' .. cfg.alp" .. TAB .. ".be" .. TAB .. ".gam" .. TAB .. ")\n", 0.2,
                          CTRL_D })
    assert.truthy(has(out, "R:7"), out)
  end)

  it("completes methods from a metatable's __index table, and string methods", function()
    local out = session({
      "Point = {} Point.__index = Point function Point:norm_squared() return self.x^2 + self.y^2 end\n", 0.2,
      "p = setmetatable({ x = 3, y = 4 }, Point)\n", 0.2,
      "print('R:' .. p:norm" .. TAB .. "())\n", 0.2,
      "s = 'abc'\n", 0.2,
      "print('R:' .. s:upp" .. TAB .. "())\n", 0.2,
      CTRL_D })
    assert.truthy(has(out, "R:25.0"), out)
    assert.truthy(has(out, "R:ABC"), out)
  end)

  it("completes methods listed in a metatable's __methods table (as tensors have)", function()
    local out = session({
      "local m = { frobnicate = function() return 'R:frob' end } " ..
      "obj = setmetatable({}, { __index = function(_, k) return m[k] end, __methods = m })\n", 0.2,
      "print(obj:frobn" .. TAB .. "())\n", 0.2,
      CTRL_D })
    assert.truthy(has(out, "R:frob"), out)
  end)

  it("survives completing through an __index that raises or never returns", function()
    local out, r = session({
      "bad = setmetatable({}, { __index = function() error('index exploded') end })\n", 0.2,
      "print('R:' .. tostring(pcall(function() return bad.x.y" .. TAB .. " end)))\n", 0.2,
      "loop = setmetatable({}, { __index = function() while true do end end })\n", 0.2,
      "loop.a.b" .. TAB, 1, CTRL_C, 0.3,
      "print('R:' .. 'alive')\n", 0.2, CTRL_D })
    assert.truthy(has(out, "R:false"), out)
    assert.truthy(has(out, "R:alive"), out)
    assert.are.equal(0, r.status)
  end)

  if has_tensor then
    it("completes tensor methods", function()
      local out = session({ "t = qlua.tensor({1, 2, 3})\n", 0.2,
                            "print('R:' .. t:nume" .. TAB .. "())\n", 0.2, CTRL_D })
      assert.truthy(has(out, "R:3"), out)
    end)
  else
    pending("completes tensor methods [qlua.tensor is not in this build yet]")
  end

  it("keeps history in $HOME/.qlua_history, a multi-line statement as one entry", function()
    local home = P.tempdir()
    local _, first = session({ "for i = 1, 2 do\n", "print('R:hist' .. i)\n", "end\n", 0.2,
                               "x_hist = 1\n", 0.2, CTRL_D }, { env = { HOME = home } })
    assert.are.equal(0, first.status)
    local saved = P.read(home .. "/.qlua_history")
    assert.truthy(saved, "no history file")
    assert.truthy(saved:find("#%d+\nfor i = 1, 2 do\nprint%('R:hist' %.%. i%)\nend\n#%d+\nx_hist = 1\n$"), saved)
    -- A new session recalls the loop with two Up arrows and runs it again.
    local out = session({ UP .. UP .. "\n", 0.3, CTRL_D }, { env = { HOME = home } })
    assert.truthy(has(out, "R:hist1\nR:hist2\n"), out)
  end)

  it("caps the history file", function()
    local home = P.tempdir()
    local lines = {}
    for i = 1, 1500 do lines[#lines + 1] = "#1700000000\nold_" .. i .. " = " .. i end
    P.write(home .. "/.qlua_history", table.concat(lines, "\n") .. "\n")
    local _, r = session({ "newest_entry = 1\n", 0.2, CTRL_D }, { env = { HOME = home } })
    assert.are.equal(0, r.status)
    local saved = P.read(home .. "/.qlua_history")
    local entries = 0
    for _ in saved:gmatch("#%d+\n") do entries = entries + 1 end
    assert.truthy(entries <= 1000, entries .. " entries kept")
    assert.truthy(entries >= 900, entries .. " entries kept")
    assert.truthy(saved:find("old_1500 = 1500\n", 1, true))
    assert.truthy(saved:find("newest_entry = 1\n$"))
  end)

  it("Ctrl-C interrupts a running statement and the session continues", function()
    local out, r = session({ "while true do end\n", 2, CTRL_C, 0.5,
                             "print('R:' .. 'after')\n", 0.3, CTRL_D })
    assert.truthy(has(out, "interrupted!"), out)
    assert.truthy(has(out, "R:after"), out)
    assert.are.equal(0, r.status)
  end)

  -- With a GPU: Ctrl-C lands while the loop keeps the GPU busy (queued products, a sync
  -- per sum); the statement stops at its next Lua instruction and the device stays usable.
  if P.run({ QLUA, "-e", "os.exit(qlua.gpu_count() > 0 and 0 or 3)" }).status == 0 then
    it("Ctrl-C during long GPU work returns to the prompt with the GPU usable", function()
      local out, r = session({
        "a = qlua.rand(4096, 4096, {device = 'gpu'}); print('R:' .. 'ready')\n", 1,
        "while true do a:matmul(a):sum() end\n", 3, CTRL_C, 1,
        "b = a:matmul(a); qlua.sync(); print('R:gpu ' .. tostring(b:sum() > 0))\n", 2, CTRL_D })
      assert.truthy(has(out, "R:ready"), out)
      assert.truthy(has(out, "interrupted!"), out)
      assert.truthy(has(out, "R:gpu true"), out)
      assert.are.equal(0, r.status)
    end)
  else
    pending("Ctrl-C during long GPU work [no GPU here]")
  end

  it("Ctrl-C at the prompt clears the line; at a continuation prompt drops the statement", function()
    local out, r = session({ "print('R:disca", 0.3, CTRL_C, 0.3,
                             "if true then\n", 0.3, "print('R:dropped')", 0.3, CTRL_C, 0.3,
                             "print('R:' .. 'clean')\n", 0.3, CTRL_D })
    assert.truthy(has(out, "R:clean"), out)
    assert.falsy(has(out, "unfinished string"), out)
    assert.falsy(out:find("R:dropped\n", 1, true), out)
    assert.are.equal(0, r.status)
  end)

  --[[
  No bytes typed at the prompt may crash or wedge the REPL. readline 8.2's callback
  interface crashed on `reproducer` (Ctrl-R, Esc, Ctrl-G, then garbage) inside
  rl_callback_read_char, on an xterm-like terminal only (TERM=dumb binds no escape
  sequences and never got there); so the sessions run as xterm, 80x24, and the
  reproducer's session checks the terminal really was one (readline turns bracketed
  paste on). Each session types its bytes, then Ctrl-C twice (the first leaves any
  search, unfinished statement or half-typed line, unless the bytes ended in Ctrl-V,
  which quotes it), then a line that must print R:42, then Ctrl-D, and must end with
  status 0; the sessions run side by side, so the case takes about as long as one.

  Filtered out of the random bytes, because they are the terminal's business, not
  readline's, and do the same to lua5.4: Ctrl-D (EOF when the line happens to be empty:
  a legitimate end of the session), Ctrl-Z and Ctrl-\ (SIGTSTP and SIGQUIT: stop and
  core dump, by their default actions) and Ctrl-S (XOFF: the terminal holds all output
  until a Ctrl-Q). Ctrl-C stays in: it reaches qlua as SIGINT in whatever state the
  bytes before it left readline; it is typed on its own with pauses around it, because
  the terminal flushes input it has not delivered yet when it raises SIGINT, and the
  sessions should see the same bytes on every run. The reproducer needs no filtering.
  ]]
  it("survives any bytes typed at the prompt (a known crash and random bytes)", function()
    local reproducer = "\x12\x1b\x07M=\xc8\x02\xab"
    -- Under `make asan` the random sessions check memory errors but not leaks: readline
    -- 8.2 itself leaks a few bytes when a search is aborted (Esc p, then Ctrl-G), which
    -- random bytes do; the next case covers qlua's own unwinding with leak checks on.
    local asan_options = os.getenv("ASAN_OPTIONS")
    if asan_options then asan_options = asan_options .. ":detect_leaks=0" end
    local filtered = { [4] = true, [26] = true, [28] = true, [19] = true }
    local sessions, names = {}, {}
    local function add(name, bytes, term)
      local keys = {}
      for chunk, ctrl_c in bytes:gmatch("([^\3]*)(\3?)") do
        if chunk ~= "" then keys[#keys + 1] = chunk end
        if ctrl_c ~= "" then
          keys[#keys + 1] = 0.1
          keys[#keys + 1] = CTRL_C
          keys[#keys + 1] = 0.1
        end
      end
      for _, step in ipairs({ 0.3, CTRL_C, 0.2, CTRL_C, 0.3, "print('R:' .. 6 * 7)\n", 0.5, CTRL_D }) do
        keys[#keys + 1] = step
      end
      names[#names + 1] = name
      sessions[#sessions + 1] = { { QLUA }, keys,
        { env = { TERM = term, ASAN_OPTIONS = asan_options }, stty = "cols 80 rows 24", timeout = 8 } }
    end
    add("the reproducer", reproducer, "xterm")
    for seed = 1, 12 do
      math.randomseed(seed)
      local bytes = {}
      while #bytes < 512 do
        local byte = math.random(0, 255)
        if not filtered[byte] then bytes[#bytes + 1] = string.char(byte) end
      end
      add("seed " .. seed, table.concat(bytes), seed % 4 == 0 and "dumb" or "xterm")
    end
    local results = P.pty_all(sessions)
    assert.truthy(has(results[1].output, "\27[?2004h"), "not an xterm-like terminal: " .. results[1].output)
    local failures = {}
    for i, r in ipairs(results) do
      if r.status ~= 0 or not has(r.output, "R:42") then
        failures[#failures + 1] = string.format("%s: status %s%s", names[i], tostring(r.status),
          has(r.output, "R:42") and "" or ", no R:42")
      end
    end
    assert.are.equal("", table.concat(failures, "; "))
  end)

  -- Ctrl-C reaches readline in whatever it is doing; each of these must end with the line
  -- dropped, "^C" shown and the next prompt taking input (Ctrl-C inside a bracketed paste
  -- once hung the REPL). They run side by side, as xterm (which has bracketed
  -- paste), and under `make asan` also prove that leaving them leaks nothing.
  it("Ctrl-C also leaves a search, a key sequence, a completion question and a paste", function()
    local many = "for i = 1, 400 do _G['zq' .. i] = i end\n"
    local cases = {
      { "an incremental search", { "x_hist = 1\n", 0.2, "\18x_h", 0.3 } },
      { "an Esc prefix", { "abc\27", 0.3 } },
      { "a Ctrl-X prefix", { "abc\24", 0.3 } },
      { "a numeric argument", { "\0274\0272", 0.3 } },
      { "the completion question", { many, 0.3, "zq" .. TAB .. TAB, 0.5 } },
      { "the completion pager", { many, 0.3, "zq" .. TAB .. TAB, 0.5, "y", 0.5 } },
      { "a bracketed paste", { "\27[200~abc", 0.3 } },
      { "a search at the continuation prompt", { "if true then\n", 0.2, "\18x", 0.3 } },
    }
    local sessions = {}
    for i, case in ipairs(cases) do
      local keys = {}
      for _, step in ipairs(case[2]) do keys[#keys + 1] = step end
      for _, step in ipairs({ CTRL_C, 0.3, "print('R:' .. 6 * 7)\n", 0.4, CTRL_D }) do
        keys[#keys + 1] = step
      end
      sessions[i] = { { QLUA }, keys, { env = { TERM = "xterm" }, stty = "cols 80 rows 24" } }
    end
    local failures = {}
    for i, r in ipairs(P.pty_all(sessions)) do
      local screen = r.output:gsub("\27%[%?2004[hl]", ""):gsub("\27%[K", "")
      if r.status ~= 0 or not has(screen, "^C") or
         not has(screen, "> print('R:' .. 6 * 7)\nR:42\n") then
        failures[#failures + 1] = cases[i][1] .. " (status " .. tostring(r.status) .. "): " .. screen
      end
    end
    assert.are.equal("", table.concat(failures, "\n"))
  end)

  -- Some bytes make readline 8.2 itself spin: Esc Ctrl-J switches to vi mode, and vi's
  -- "e" then never gets past this invalid UTF-8 in a UTF-8 locale (lua5.4 hangs too). No Ctrl-C
  -- can be answered there, but a second one must end qlua as lua.c's SIGINT handling
  -- does for a statement stuck in C (which could once only be killed).
  it("a second Ctrl-C ends a REPL stuck inside readline", function()
    local _, r = session({ "\27\n", 0.2, "\xfb\x87\xef\xa2\27e", 0.5, CTRL_C, 0.3, CTRL_C, 0.5 },
                         { env = { TERM = "xterm", LC_ALL = "C.UTF-8" }, stty = "cols 80 rows 24",
                           timeout = 6 })
    assert.are.equal(130, r.status)   -- 128 + SIGINT
  end)

  it("an error never ends the session", function()
    local out, r = session({ "error('R:' .. 'raised')\n", 0.2, "local = 1\n", 0.2,
                             "print('R:' .. 'next')\n", 0.2, CTRL_D })
    assert.truthy(has(out, "R:raised"), out)
    assert.truthy(has(out, "R:next"), out)
    assert.are.equal(0, r.status)
  end)
end)
