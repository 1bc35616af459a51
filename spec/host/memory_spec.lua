-- Memory (docs/API.md "Memory and devices"): t:free(), <close>, __gc, all idempotent;
-- "<op>: tensor has been freed" on every kind of use, views of a freed storage
-- included; mixed-device errors (with a GPU); qlua.memory fields; clock and version.
local T, qlua, test = require("qlua.testing").spec(_ENV)

local FREED = "tensor has been freed"

-- Each use of a freed tensor x (with a live tensor `other` of the same shape, float32)
-- and the op name its message must start with (nil: only the freed message is checked).
local function uses(x, other)
  return {
    { "sum", function() return x:sum() end },
    { "sum", function() return x:sum(1) end },
    { "max", function() return x:max() end },
    { "add", function() return x + 1 end },
    { "add", function() return other + x end },
    { "mul", function() return x:mul(other) end },
    { "neg", function() return -x end },
    { "exp", function() return x:exp() end },
    { "clone", function() return x:clone() end },
    { nil, function() return x:t():contiguous() end },
    { "totable", function() return x:totable() end },
    { nil, function() return x:narrow(1, 1, 1):narrow(2, 1, 1):item() end },
    { "narrow", function() return x:narrow(1, 1, 1) end },
    { "view", function() return x:view(-1) end },
    { "reshape", function() return x:reshape(-1) end },
    { "to", function() return x:to("float64") end },
    { "gather", function() return x:gather(1, { { 1, 1, 1 } }) end },
    { "gather", function()
      local idx = qlua.ones(1, 3, { dtype = "int64" })
      idx:free()
      return other:gather(1, idx)
    end },
    { "index_select", function() return x:index_select(1, { 1 }) end },
    { "take", function() return x:take({ 1 }) end },
    { "matmul", function() return x:matmul(other:t()) end },
    { "matmul", function() return other:t():matmul(x) end },
    { "fill_", function() return x:fill_(1) end },
    { "add_", function() return x:add_(1) end },
    { "copy_", function() return x:copy_(other) end },
    { "copy_", function() return other:copy_(x) end },
    { "scatter", function() return x:scatter_(1, { { 1, 1, 1 } }, 2) end },
    { "index_add", function() return x:index_add_(1, { 1 }, other:narrow(1, 1, 1)) end },
    { nil, function() return x[1] end },
    { nil, function() x[1] = 3 end },
  }
end

local function check_all_uses_fail(x, other, what)
  for _, use in ipairs(uses(x, other)) do
    local msg = T.assert_error(use[2], FREED)
    if use[1] then
      assert.matches("^" .. use[1], msg, nil, nil, what .. ": message should start with " .. use[1])
    end
  end
end

describe("free", function()
  test("makes every later use raise '<op>: tensor has been freed'", function()
    local x = qlua.rand(2, 3)
    local other = qlua.rand(2, 3)
    x:free()
    check_all_uses_fail(x, other, "freed tensor")
    -- the other tensor is untouched and usable
    T.assert_equal(other + 0, other:totable())
  end)

  test("the exact message for a view of a freed tensor", function()
    local t = qlua.rand(4)
    t:free()
    T.assert_error(function() local _ = t:narrow(1, 1, 2) end, "narrow: tensor has been freed")
  end)

  test("frees the storage: views made before become freed too", function()
    local base = qlua.rand(4, 3)
    local views = {
      base:narrow(1, 2, 2), base:t():narrow(2, 1, 2):t(), base:select(2, 1):view(1, 4):expand(2, 4),
      base[1]:view(1, 3):expand(2, 3),
    }
    local other = qlua.rand(2, 3)
    base:free()
    for i, v in ipairs(views) do
      T.assert_error(function() return v:sum() end, "sum: " .. FREED)
      T.assert_error(function() return v:clone() end, FREED)
      if i == 1 then check_all_uses_fail(v, other, "view of a freed tensor") end
    end
  end)

  test("freeing a view frees the storage it shares", function()
    local base = qlua.rand(3, 3)
    local v = base:narrow(1, 1, 1)
    v:free()
    T.assert_error(function() return base:sum() end, "sum: " .. FREED)
  end)

  test("a copy made before the free stays usable", function()
    local data = T.random_table({ 3, 2 }, "float64")
    local t = qlua.tensor(data, { dtype = "float64" })
    local c = t:clone()
    local k = t:contiguous():t():contiguous()   -- a copy (t is contiguous, t() is not)
    t:free()
    T.assert_equal(c, data)
    T.assert_equal(k:t(), data)
  end)

  test("is idempotent and never raises", function()
    local t = qlua.rand(10)
    local v = t:narrow(1, 1, 2)
    assert.has_no.errors(function() t:free() end)
    assert.has_no.errors(function() t:free() end)
    assert.has_no.errors(function() v:free() end)
    t = nil
    v = nil
    assert.has_no.errors(function() collectgarbage(); collectgarbage() end)
  end)

  test("tostring of a freed tensor does not crash", function()
    local t = qlua.rand(3)
    t:free()
    local ok, s = pcall(tostring, t)
    assert.is_string(s)
    if ok then assert.is_truthy(s:find("freed", 1, true), s) end
  end)

  test("works on empty and 0-d tensors", function()
    local e = qlua.zeros(0)
    e:free()
    local s = qlua.tensor(2.5)
    s:free()
    T.assert_error(function() return s:item() end, FREED)
  end)
end)

describe("<close>", function()
  test("frees the tensor at scope exit", function()
    local escaped
    do
      local t <close> = qlua.rand(5)
      escaped = t
      assert.equal(5, t:numel())
    end
    T.assert_error(function() return escaped:sum() end, "sum: " .. FREED)
  end)

  test("frees on an error leaving the scope too", function()
    local escaped
    pcall(function()
      local t <close> = qlua.rand(5)
      escaped = t
      error("leaving")
    end)
    T.assert_error(function() return escaped:sum() end, FREED)
  end)

  test("after an explicit free, and then the GC, nothing raises", function()
    local escaped
    assert.has_no.errors(function()
      do
        local t <close> = qlua.rand(5)
        t:free()
        escaped = t
      end
    end)
    escaped = nil
    assert.has_no.errors(function() collectgarbage() end)
  end)
end)

describe("garbage collection", function()
  test("collects dropped tensors and views in any order", function()
    for _ = 1, 50 do
      local t = qlua.rand(64, 64)
      local v = t:t():narrow(1, 2, 10)
      local w = v:select(1, 3)
      t = nil
      if math.random() < 0.5 then v = nil end
      collectgarbage()
      T.assert_shape(w, { 64 })
      assert.is_number(w:sum())
    end
    collectgarbage()
    collectgarbage()
  end)

  test("many allocations without free do not pile up", function()
    -- 400 x 8 MiB = 3.2 GiB allocated in all (the CPU is a device too, docs/API.md:
    -- "Device memory is counted and drives Lua's garbage collector"), so the dropped
    -- tensors must be collected on the way. Not filled, so pages are never touched.
    collectgarbage()
    local most = 0
    for _ = 1, 400 do
      local _ = qlua.empty(2 * 1024 * 1024)
      most = math.max(most, qlua.memory("cpu").allocated)
    end
    collectgarbage()
    assert.is_true(most < 2 * 1024 ^ 3, "allocated reached " .. most .. " bytes")
  end)
end)

describe("qlua.memory", function()
  test("reports the five fields as integers", function()
    for _, m in ipairs({ qlua.memory(), qlua.memory("cpu") }) do
      for _, field in ipairs({ "allocated", "reserved", "peak", "total", "free" }) do
        assert.is_number(m[field], field)
        assert.equal("integer", math.type(m[field]), field)
        assert.is_true(m[field] >= 0, field)
      end
      assert.is_true(m.peak >= m.allocated)
      assert.is_true(m.reserved >= m.allocated)
    end
  end)

  test("counts CPU tensor bytes", function()
    collectgarbage()
    local before = qlua.memory("cpu").allocated
    local t = qlua.empty(1024 * 1024, { dtype = "float64" })   -- 8 MiB
    local during = qlua.memory("cpu")
    assert.is_true(during.allocated - before >= 8 * 1024 * 1024, "allocated grew by " .. during.allocated - before)
    assert.is_true(during.peak >= during.allocated)
    t:free()
    assert.is_true(qlua.memory("cpu").allocated <= during.allocated - 8 * 1024 * 1024)
  end)

  test("empty_cache runs on any machine", function()
    assert.has_no.errors(function() qlua.empty_cache() end)
  end)
end)

describe("devices", function()
  local has_gpu, reason = T.gpu_status()

  test("gpu_count is a non-negative integer", function()
    local n = qlua.gpu_count()
    assert.equal("integer", math.type(n))
    assert.is_true(n >= 0)
  end)

  test("mixing devices is an error naming both", function()
    if not has_gpu then pending("no GPU: " .. tostring(reason)) return end
    local c, g = qlua.rand(3), qlua.rand(3, { device = "gpu" })
    T.assert_error(function() return c + g end, "add: tensors on cpu and gpu:0")
    T.assert_error(function() return g + c end, "add: tensors on gpu:0 and cpu")
    T.assert_error(function() return c:matmul(g) end, "matmul", "cpu", "gpu:0")
    T.assert_error(function() return c:gather(qlua.tensor({ 1 }, { device = "gpu" })) end, "gather", "cpu", "gpu:0")
  end)
end)

describe("qlua.clock and qlua.version", function()
  test("clock is a monotonic float", function()
    local a = qlua.clock()
    local b = qlua.clock()
    assert.equal("float", math.type(a))
    assert.is_true(b >= a)
  end)

  test("version is a string", function()
    assert.is_string(qlua.version)
    assert.is_true(#qlua.version > 0)
  end)
end)
