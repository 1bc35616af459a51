-- Sampling (docs/API.md "Creating tensors"): t:uniform_, t:normal_, t:random_,
-- t:exponential_, qlua.bernoulli and qlua.multinomial. Draws are seeded, so each case
-- checks exact properties (bounds, integrality, counts) and statistics with wide margins
-- for its fixed seed, and the GPU parity cases check that a seed gives the CPU's numbers.
local T, qlua, _, gtest, both = require("qlua.testing").spec(_ENV)

local function mean_var(list)
  local s, n = 0, #list
  for _, x in ipairs(list) do s = s + x end
  local m = s / n
  local v = 0
  for _, x in ipairs(list) do v = v + (x - m) ^ 2 end
  return m, v / (n - 1)
end

local function flat(t) return T.flatten(t:totable()) end

describe("in-place fills", function()
  both("uniform_ stays in [lo, hi) with the uniform's mean and variance, on views", function(dev)
    qlua.seed(11)
    for _, dtype in ipairs(T.float_dtypes) do
      local base = qlua.zeros(200, 100, { dtype = dtype, device = dev })
      local v = base:t()
      assert.is_true(rawequal(v, v:uniform_(-2, 3)))
      local xs = flat(base)
      for _, x in ipairs(xs) do assert(x >= -2 and x < 3, x) end
      local m, var = mean_var(xs)
      assert(math.abs(m - 0.5) < 0.05, m)
      assert(math.abs(var - 25 / 12) < 0.1, var)
    end
    local t = qlua.zeros(1000, { device = dev }):uniform_()
    for _, x in ipairs(flat(t)) do assert(x >= 0 and x < 1, x) end
  end)

  both("normal_ has the mean and sd asked for", function(dev)
    qlua.seed(12)
    local xs = flat(qlua.zeros(20000, { dtype = "float64", device = dev }):normal_(3, 0.5))
    local m, var = mean_var(xs)
    assert(math.abs(m - 3) < 0.02, m)
    assert(math.abs(math.sqrt(var) - 0.5) < 0.02, var)
    T.assert_equal(qlua.zeros(3, { device = dev }):normal_(7, 0), { 7, 7, 7 })
  end)

  both("random_ draws integers in lo..hi inclusive, in any dtype", function(dev)
    qlua.seed(13)
    for _, dtype in ipairs(T.all_dtypes) do
      local lo, hi = 1, 6
      if dtype == "bool" then lo, hi = 0, 1 end
      local t = qlua.zeros(3000, { dtype = dtype, device = dev })
      t:random_(lo, hi)
      local seen = {}
      for _, x in ipairs(flat(t)) do
        if type(x) == "boolean" then x = x and 1 or 0 end
        assert(x >= lo and x <= hi and x == math.floor(x), dtype .. ": " .. x)
        seen[x] = (seen[x] or 0) + 1
      end
      for v = lo, hi do assert((seen[v] or 0) > 3000 / (hi - lo + 1) * 0.8, dtype .. " value " .. v) end
    end
    local t = qlua.zeros(500, { dtype = "int64", device = dev }):random_(3)
    for _, x in ipairs(flat(t)) do assert(x >= 1 and x <= 3, x) end
    T.assert_error(function() qlua.zeros(2, { dtype = "uint8", device = dev }):random_(0, 256) end,
      "random_", "do not fit uint8")
    T.assert_error(function() qlua.zeros(2, { device = dev }):random_(5, 1) end, "random_", "empty range")
  end)

  both("exponential_ has mean 1 / lambda and no negative values", function(dev)
    qlua.seed(14)
    local xs = flat(qlua.zeros(20000, { dtype = "float64", device = dev }):exponential_(4))
    for _, x in ipairs(xs) do assert(x >= 0, x) end
    local m = mean_var(xs)
    assert(math.abs(m - 0.25) < 0.01, m)
  end)

  both("bad arguments name the op and the values", function(dev)
    local i = qlua.zeros(2, { dtype = "int32", device = dev })
    T.assert_error(function() i:uniform_() end, "uniform_", "needs a float tensor, got int32")
    T.assert_error(function() i:normal_() end, "normal_", "needs a float tensor")
    T.assert_error(function() i:exponential_() end, "exponential_", "needs a float tensor")
    local f = qlua.zeros(2, { device = dev })
    T.assert_error(function() f:uniform_(3, 1) end, "uniform_", "lo <= hi")
    T.assert_error(function() f:normal_(0, -1) end, "normal_", "sd >= 0")
    T.assert_error(function() f:exponential_(0) end, "exponential_", "lambda 0")
    T.assert_error(function() f:uniform_("a") end, "uniform_", "lo must be a number")
    T.assert_error(function() qlua.zeros(2, { device = dev }):expand(2, 2):uniform_() end, "uniform_",
      "expanded")
  end)
end)

describe("bernoulli and multinomial", function()
  both("bernoulli: 0 or 1 in p's dtype, as often as p says", function(dev)
    qlua.seed(15)
    local p = qlua.tensor({ 0, 0.25, 1, 0.5 }, { dtype = "float64", device = dev })
    local hits = { 0, 0, 0, 0 }
    for _ = 1, 400 do
      local d = qlua.bernoulli(p)
      assert.equal("float64", d:dtype())
      for k, x in ipairs(d:totable()) do
        assert(x == 0 or x == 1, x)
        hits[k] = hits[k] + x
      end
    end
    assert.equal(0, hits[1])
    assert.equal(400, hits[3])
    assert(math.abs(hits[2] - 100) < 30, hits[2])
    assert(math.abs(hits[4] - 200) < 40, hits[4])
    T.assert_shape(qlua.bernoulli(qlua.full({ 2, 3 }, 0.5, { device = dev })), { 2, 3 })
    T.assert_error(function() qlua.bernoulli(qlua.tensor({ 1.5 }, { device = dev })) end, "bernoulli",
      "[0, 1], found 1.5")
    T.assert_error(function() qlua.bernoulli(qlua.tensor({ 0 / 0 }, { device = dev })) end, "bernoulli",
      "NaN")
  end)

  both("multinomial with replacement follows the weights; zero weights are never drawn", function(dev)
    qlua.seed(16)
    local w = qlua.tensor({ 1, 0, 6, 3 }, { device = dev })
    local d = qlua.multinomial(w, 20000, true)
    assert.equal("int64", d:dtype())
    T.assert_shape(d, { 20000 })
    local count = { 0, 0, 0, 0 }
    for _, c in ipairs(flat(d)) do count[c] = count[c] + 1 end
    assert.equal(0, count[2])
    assert(math.abs(count[1] / 20000 - 0.1) < 0.01, count[1])
    assert(math.abs(count[3] / 20000 - 0.6) < 0.015, count[3])
    local rows = qlua.multinomial(qlua.tensor({ { 0, 1 }, { 1, 0 } }, { device = dev }), 5, true)
    T.assert_equal(rows, { { 2, 2, 2, 2, 2 }, { 1, 1, 1, 1, 1 } })
  end)

  both("multinomial without replacement draws distinct categories, the heavy ones first", function(dev)
    qlua.seed(17)
    local w = qlua.tensor({ 1, 100, 1, 0, 1 }, { dtype = "float64", device = dev })
    local first2 = 0
    for _ = 1, 100 do
      local d = qlua.multinomial(w, 4):totable()
      local seen = {}
      for _, c in ipairs(d) do
        assert(not seen[c], "drawn twice: " .. c)
        assert(c ~= 4, "a zero weight was drawn")
        seen[c] = true
      end
      if d[1] == 2 then first2 = first2 + 1 end
    end
    assert(first2 > 90, first2)
    T.assert_shape(qlua.multinomial(qlua.ones(3, 5, { device = dev }), 5), { 3, 5 })
    T.assert_error(function() qlua.multinomial(w, 5) end, "multinomial",
      "cannot draw 5 samples without replacement from 4 categories of nonzero probability")
    T.assert_error(function() qlua.multinomial(w, 9) end, "multinomial", "from 5 categories")
    T.assert_error(function() qlua.multinomial(qlua.tensor({ 1, -1 }, { device = dev }), 1) end,
      "multinomial", ">= 0, found -1")
    T.assert_error(function() qlua.multinomial(qlua.zeros(3, { device = dev }), 1, true) end,
      "multinomial", "sums to 0")
    T.assert_error(function() qlua.multinomial(qlua.zeros(2, 2, 2, { device = dev }), 1) end,
      "multinomial", "1-D or 2-D")
  end)
end)

gtest("the GPU draws the CPU's numbers for a seed", function()
  local function draws(dev)
    qlua.seed(99)
    local out = {}
    out[1] = qlua.zeros(64, { dtype = "float64", device = dev }):uniform_(-1, 1):cpu()
    out[2] = qlua.zeros(64, { dtype = "float64", device = dev }):normal_(2, 3):cpu()
    out[3] = qlua.zeros(64, { dtype = "int64", device = dev }):random_(1, 1000):cpu()
    out[4] = qlua.zeros(64, { dtype = "float64", device = dev }):exponential_(2):cpu()
    out[5] = qlua.bernoulli(qlua.full({ 64 }, 0.5, { dtype = "float64", device = dev })):cpu()
    out[6] = qlua.multinomial(qlua.tensor({ 1, 2, 3, 4 }, { device = dev }), 64, true):cpu()
    out[7] = qlua.multinomial(qlua.tensor({ 1, 2, 3, 4, 5, 6 }, { device = dev }), 6):cpu()
    return out
  end
  local c, g = draws("cpu"), draws("gpu")
  for k = 1, #c do T.assert_close(g[k], c[k]:totable(), 1e-12, "draw " .. k) end
end)
