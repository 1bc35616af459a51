-- What makes qlua readable at the REPL (docs/API.md "Printing"): qlua.help's one-liners and
-- the tostring of t:shape(). The one-liners live in one table (runtime/binding/l_help.c);
-- this spec lists the qlua table and the Tensor methods at run time and fails when a
-- function has no entry, or when an entry names nothing that exists, so the table cannot
-- go stale. (The REPL's printing of several results is in repl_spec.lua.)
local T, qlua = require("qlua.testing").spec(_ENV)

-- Names documented ahead of their functions, which are being written now. The reverse
-- check skips them (and says which are still missing); empty it once they have landed.
local not_yet = {
}

-- What qlua.help(...) printed, through the global print it calls, as a list of lines;
-- the second result is how many values help returned.
local function help(...)
  local lines, saved = {}, _G.print
  _G.print = function(...)
    local parts = {}
    for i = 1, select("#", ...) do parts[i] = tostring((select(i, ...))) end
    for line in (table.concat(parts, "\t") .. "\n"):gmatch("([^\n]*)\n") do
      lines[#lines + 1] = line
    end
  end
  local packed = table.pack(pcall(qlua.help, ...))
  _G.print = saved
  if not packed[1] then error(packed[2], 0) end
  return lines, packed.n - 1
end

-- Where each kind of entry lives at run time: its signature prefix in the one-liners,
-- and the table of its functions (nil: not reachable from here).
local function kernel_methods()
  local mt = debug.getregistry()["qlua.Kernel"]
  return mt and type(mt.__index) == "table" and mt.__index or nil
end

local function module_methods()
  -- qlua.Module's __index is a function (m.name finds a kernel); its methods table is
  -- one of its upvalues: the one holding functions.
  local mt = debug.getregistry()["qlua.Module"]
  if not mt or type(mt.__index) ~= "function" then return nil end
  for i = 1, 10 do
    local name, v = debug.getupvalue(mt.__index, i)
    if name == nil then break end
    if type(v) == "table" and type(next(v) and v[next(v)]) == "function" then return v end
  end
  return nil
end

local KINDS = {
  { topic = "qlua", prefix = "qlua.", place = qlua },
  { topic = "Tensor", prefix = "t:", place = getmetatable(qlua.zeros(1)).__methods },
  { topic = "Kernel", prefix = "k:", place = kernel_methods() },
  { topic = "Module", prefix = "m:", place = module_methods() },
}

local function escape(s) return (s:gsub("%p", "%%%0")) end

-- The entries of a topic: name -> line.
local function entries(kind)
  local out = {}
  for _, line in ipairs((help(kind.topic))) do
    local name = line:match("^" .. escape(kind.prefix) .. "([%w_]+)")
    assert(name, kind.topic .. ": an entry whose signature does not start with " ..
                 kind.prefix .. ": " .. line)
    assert(out[name] == nil, kind.topic .. ": two entries for " .. name)
    out[name] = line
  end
  return out
end

local function sorted_keys(t)
  local out = {}
  for k in pairs(t) do out[#out + 1] = k end
  table.sort(out)
  return out
end

describe("qlua.help", function()
  it("has an entry for every qlua function", function()
    local doc = entries(KINDS[1])
    local missing = {}
    for _, name in ipairs(sorted_keys(qlua)) do
      if type(qlua[name]) == "function" and not doc[name] then missing[#missing + 1] = name end
    end
    assert.are.same({}, missing)
  end)

  it("has an entry for every Tensor method", function()
    local methods = KINDS[2].place
    assert.are.equal("table", type(methods))
    local doc = entries(KINDS[2])
    local missing = {}
    for _, name in ipairs(sorted_keys(methods)) do
      if not doc[name] then missing[#missing + 1] = name end
    end
    assert.are.same({}, missing)
  end)

  it("has an entry for every qlua.Kernel and qlua.Module method", function()
    for k = 3, 4 do
      local kind = KINDS[k]
      assert.are.equal("table", type(kind.place), kind.topic .. "'s methods not found")
      local doc = entries(kind)
      local missing = {}
      for _, name in ipairs(sorted_keys(kind.place)) do
        if not doc[name] then missing[#missing + 1] = kind.topic .. "." .. name end
      end
      assert.are.same({}, missing)
    end
  end)

  it("documents only what exists (besides the names not written yet)", function()
    local stale, waiting, landed = {}, {}, {}
    for _, kind in ipairs(KINDS) do
      local label = kind.topic == "qlua" and "qlua." or kind.topic .. "."
      for _, name in ipairs(sorted_keys(entries(kind))) do
        local exists = kind.place ~= nil and rawget(kind.place, name) ~= nil
        local full = label .. name
        if not_yet[full] then
          if exists then landed[#landed + 1] = full else waiting[#waiting + 1] = full end
        elseif not exists then
          stale[#stale + 1] = full
        end
      end
    end
    if #waiting > 0 then
      print("help_spec: documented, not written yet: " .. table.concat(waiting, ", "))
    end
    if #landed > 0 then
      print("help_spec: in not_yet but present now (take them out): " ..
            table.concat(landed, ", "))
    end
    assert.are.same({}, stale)
  end)

  it("finds every qlua function and Tensor method by identity too", function()
    for _, kind in ipairs({ KINDS[1], KINDS[2] }) do
      local doc = entries(kind)
      for _, name in ipairs(sorted_keys(kind.place)) do
        local f = kind.place[name]
        if type(f) == "function" then
          local lines = help(f)
          assert.are.same({ doc[name] }, lines)
        end
      end
    end
  end)

  it("prints one line, signature -- purpose, for a name in each spelling", function()
    local cat = help("cat")
    assert.are.equal(1, #cat)
    assert.truthy(cat[1]:find("^qlua%.cat%(list %[, dim%]%) %-%- %S"), cat[1])
    assert.are.same(cat, help("qlua.cat"))
    assert.are.same(cat, help(qlua.cat))
    local slice = help("Tensor.slice")
    assert.are.equal(1, #slice)
    assert.truthy(slice[1]:find("^t:slice%(dim, first, last %[, step%]%) %-%- %S"), slice[1])
    assert.are.same(slice, help("slice"))
    assert.are.same(slice, help("t:slice"))
    assert.are.same(slice, help("Tensor:slice"))
    assert.are.same(slice, help(qlua.zeros(1).slice))
    assert.are.same({ "t:t() -- the transpose of a 2-D tensor (1-D and 0-d as they are)" },
                    help("t"))
  end)

  it("prints every kind a bare name has (qlua.matmul and t:matmul)", function()
    local lines = help("matmul")
    assert.are.equal(2, #lines)
    assert.truthy(lines[1]:find("^qlua%.matmul%("), lines[1])
    assert.truthy(lines[2]:find("^t:matmul%("), lines[2])
    assert.are.same({ lines[1] }, help("qlua.matmul"))
    assert.are.same({ lines[2] }, help("Tensor.matmul"))
  end)

  it("lists a whole topic, each line an entry", function()
    for _, kind in ipairs(KINDS) do
      for _, line in ipairs((help(kind.topic))) do
        assert.truthy(line:find("^" .. escape(kind.prefix) .. "[%w_]+.- %-%- %S"), line)
      end
    end
  end)

  it("returns nothing (so the REPL does not print the text twice)", function()
    local _, n = help("cat")
    assert.are.equal(0, n)
    _, n = help()
    assert.are.equal(0, n)
  end)

  it("prints a usage line without an argument", function()
    local lines = help()
    assert.are.equal(1, #lines)
    assert.truthy(lines[1]:find("^usage: qlua%.help%("), lines[1])
  end)

  it("raises for a name or a function it does not know, and for other values", function()
    assert.are.equal("help: no documentation for 'xyz'", T.error_of(function() help("xyz") end))
    assert.are.equal("help: no documentation for 'Tensor.cat'",
                     T.error_of(function() help("Tensor.cat") end))
    assert.truthy(T.error_of(function() help(print) end)
                  :find("help: no documentation for this function", 1, true))
    assert.truthy(T.error_of(function() help(42) end):find("string or function expected", 1, true))
    assert.truthy(T.error_of(function() help("cat", 2) end)
                  :find("help: unexpected argument #2", 1, true))
  end)
end)

describe("t:shape()", function()
  it("prints as {2, 3}, {} for a 0-d tensor", function()
    assert.are.equal("{2, 3}", tostring(qlua.zeros(2, 3):shape()))
    assert.are.equal("{4}", tostring(qlua.zeros(4):shape()))
    assert.are.equal("{0, 5}", tostring(qlua.zeros(0, 5):shape()))
    assert.are.equal("{}", tostring(qlua.tensor(3):shape()))
    assert.are.equal("{2, 1, 3}", tostring(qlua.zeros(2, 3):unsqueeze(2):shape()))
  end)

  it("stays a plain table of integers at keys 1..n", function()
    local s = qlua.zeros(2, 3):shape()
    assert.are.equal("table", type(s))
    assert.are.equal(2, #s)
    assert.are.equal(2, s[1])
    assert.are.equal(3, s[2])
    assert.are.equal("integer", math.type(s[1]))
    assert.is_nil(s[3])
    assert.are.same({ 2, 3 }, s)
    local seen = {}
    for i, v in ipairs(s) do seen[i] = v end
    assert.are.same({ 2, 3 }, seen)
    assert.are.equal(0, #qlua.tensor(3):shape())
    -- a shape table is accepted where shapes are
    assert.are.same({ 2, 3 }, qlua.zeros(s):shape())
    assert.are.same({ 3, 2 }, qlua.zeros(6):view({ s[2], s[1] }):shape())
  end)

  it("is a fresh table each call, compared by identity, printing what it holds", function()
    local x = qlua.zeros(2, 3)
    local a, b = x:shape(), x:shape()
    assert.is_false(rawequal(a, b))
    assert.is_false(a == b)
    a[1] = 7
    assert.are.equal("{7, 3}", tostring(a))
    assert.are.equal("{2, 3}", tostring(x:shape()))
  end)

  it("has the metatable qlua.Shape, shared; size() gives the same kind of table", function()
    local x = qlua.zeros(2, 3)
    local mt = getmetatable(x:shape())
    assert.are.equal("qlua.Shape", mt.__name)
    assert.are.equal(mt, getmetatable(qlua.ones(5):shape()))
    assert.are.equal(mt, getmetatable(x:size()))
    assert.are.equal("{2, 3}", tostring(x:size()))
    assert.are.equal(3, x:size(2))
  end)
end)
