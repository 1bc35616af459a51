-- Reductions (docs/API.md "Reductions"): sum, mean, max, min, argmax, argmin, over all
-- elements (a Lua number) and along a dim (a tensor without that dim), with their result
-- dtypes, NaN, ties and empty inputs.
local T, qlua, test = require("qlua.testing").spec(_ENV)
local ref = T.ref

local OPS = { "sum", "mean", "max", "min", "argmax", "argmin" }

local function tol_of(dtype) return T.is_float_dtype(dtype) and T.tol[dtype] or 1e-12 end

-- Integer data with few distinct values makes ties likely.
local function data_for(shape, dtype, ties)
  if ties then
    local list = {}
    for i = 1, T.numel(shape) do
      local v = math.random(1, 3)
      list[i] = T.is_float_dtype(dtype) and v + 0.0 or v
    end
    return T.unflatten(list, shape)
  end
  return T.random_table(shape, dtype)
end

describe("reductions over all elements", function()
  test("return Lua numbers matching the reference in every dtype and layout", function()
    for _, dtype in ipairs(T.dtypes) do
      for _, layout in ipairs(T.layouts) do
        for _, ties in ipairs({ false, true }) do
          local data = data_for({ 4, 5, 3 }, dtype, ties)
          local t = T.make(data, dtype, layout)
          for _, op in ipairs(OPS) do
            local what = op .. " " .. dtype .. " " .. layout .. (ties and " ties" or "")
            local got = t[op](t)
            local want = ref.reduce(op, data)
            assert.is_number(got, what)
            if op == "argmax" or op == "argmin" then
              assert.equal(want, got, what)
              assert.equal("integer", math.type(got), what)
            elseif T.is_float_dtype(dtype) or op == "mean" then
              T.assert_close(got, want, tol_of(dtype), what)
            else
              assert.equal(want, got, what)
              assert.equal("integer", math.type(got), what .. ": an integer")
            end
          end
        end
      end
    end
  end)

  test("sums integers in int64 and floats with float64 accumulation", function()
    local big = qlua.full(10, 1 << 30, { dtype = "int32" })
    assert.equal(10 * (1 << 30), big:sum())
    -- 2^24 followed by 1000 ones: float32 accumulation would lose every 1
    local list = { 2.0 ^ 24 }
    for i = 2, 1001 do list[i] = 1.0 end
    assert.equal(2 ^ 24 + 1000, qlua.tensor(list):sum())
    local m = qlua.tensor(list):view(1, 1001)
    assert.equal(2 ^ 24 + 1000, m:sum(2):item())
    assert.equal("float32", m:sum(2):dtype())
  end)

  test("int64 sums, max and argmax are exact beyond 2^53", function()
    local big = 1 << 60
    local t = qlua.tensor({ big, 1, 2, big + 1 })
    assert.equal(2 * big + 4, t:sum())
    assert.equal(big + 1, t:max())
    assert.equal(4, t:argmax())
    assert.equal(1, t:min())
    T.assert_equal(t:view(2, 2):sum(1), { big + 2, big + 2 })
    T.assert_equal(t:view(2, 2):sum(2), { big + 1, big + 3 })
    local v, i = t:view(2, 2):max(2)
    T.assert_equal(v, { big, big + 1 })
    T.assert_equal(i, { 1, 2 })
  end)

  test("mean of integers is a float", function()
    local t = qlua.tensor({ 1, 2, 3, 5 })
    assert.equal(2.75, t:mean())
    assert.equal("float", math.type(t:mean()))
    assert.equal(2.75, qlua.tensor({ 1, 2, 3, 5 }, { dtype = "int32" }):mean())
  end)

  test("max and min of integers are integers", function()
    local t = qlua.tensor({ 3, -7, 12 }, { dtype = "int32" })
    assert.equal(12, t:max())
    assert.equal(-7, t:min())
    assert.equal("integer", math.type(t:max()))
  end)

  test("ties go to the first position", function()
    local t = qlua.tensor({ 3, 7, 1, 7, 1 })
    assert.equal(2, t:argmax())
    assert.equal(3, t:argmin())
    local f = qlua.tensor({ { 2.5, 9 }, { 1, 9 } })
    assert.equal(2, f:argmax())
    assert.equal(3, f:argmin())
    -- flat positions follow the logical row-major order, not the storage order
    assert.equal(3, f:t():argmax())
    assert.equal(2, f:t():argmin())
  end)

  test("NaN propagates through max and min", function()
    local t = qlua.tensor({ 1, 0 / 0, 3 })
    assert.is_true(T.isnan(t:max()))
    assert.is_true(T.isnan(t:min()))
    assert.is_true(T.isnan(t:sum()))
    assert.is_true(T.isnan(qlua.tensor({ 0 / 0, 1, 2 }, { dtype = "float64" }):max()))
    assert.is_true(T.isnan(qlua.tensor({ 1, 2, 0 / 0 }, { dtype = "float64" }):min()))
  end)

  -- The compensated sums once computed inf - inf for their correction and gave NaN.
  test("sums and means with infinities are infinite, not NaN", function()
    local inf = math.huge
    for _, dtype in ipairs({ "float32", "float64" }) do
      assert.equal(inf, qlua.tensor({ 1, inf }, { dtype = dtype }):sum())
      assert.equal(-inf, qlua.tensor({ -inf, 2.5, 1 }, { dtype = dtype }):sum())
      assert.equal(inf, qlua.tensor({ 1, inf, 3 }, { dtype = dtype }):mean())
      assert.is_true(T.isnan(qlua.tensor({ inf, 1, -inf }, { dtype = dtype }):sum()))
      -- a long run (the pairwise blocks) with one inf in the middle
      local long = qlua.rand(5000, { dtype = dtype })
      long[2500] = inf
      assert.equal(inf, long:sum())
      -- along each dim: the vertical (dim 1) and horizontal (dim 2) loops
      local m = qlua.tensor({ { 1, inf, 2 }, { 3, 4, -inf }, { 5, 6, 7 } }, { dtype = dtype })
      T.assert_equal(m:sum(1), qlua.tensor({ 9, inf, -inf }, { dtype = dtype }))
      T.assert_equal(m:sum(2), qlua.tensor({ inf, -inf, 18 }, { dtype = dtype }))
      T.assert_equal(m:mean(1), qlua.tensor({ 3, inf, -inf }, { dtype = dtype }))
      local tall = qlua.rand(300, 4, { dtype = dtype })
      tall[17][2] = inf
      tall[200][3] = -inf
      local s = tall:sum(1)
      assert.equal(inf, s[2])
      assert.equal(-inf, s[3])
      assert.is_false(T.isnan(s[1]) or T.isnan(s[4]))
    end
    -- float64 sums that overflow are infinite too
    assert.equal(inf, qlua.tensor({ 1e308, 1e308 }, { dtype = "float64" }):sum())
  end)

  test("empty input: sum 0, mean NaN, the others an error", function()
    for _, dtype in ipairs(T.dtypes) do
      local e = qlua.zeros(0, { dtype = dtype })
      assert.equal(0, e:sum())
      assert.is_true(T.isnan(e:mean()))
      for _, op in ipairs({ "max", "min", "argmax", "argmin" }) do
        T.assert_error(function() local _ = e[op](e) end, op)
      end
    end
    assert.equal(0, qlua.zeros(3, 0):sum())
  end)

  test("a 0-d tensor reduces to its value", function()
    local s = qlua.tensor(4.5)
    assert.equal(4.5, s:sum())
    assert.equal(4.5, s:max())
    assert.equal(1, s:argmax())
  end)
end)

describe("reductions along a dim", function()
  test("remove the dim and match the reference in every dtype, layout and dim", function()
    for _, dtype in ipairs(T.dtypes) do
      for _, layout in ipairs(T.layouts) do
        for _, ties in ipairs({ false, true }) do
          local data = data_for({ 3, 4, 5 }, dtype, ties)
          local t = T.make(data, dtype, layout)
          for dim = 1, 3 do
            for _, op in ipairs(OPS) do
              local what = string.format("%s(%d) %s %s%s", op, dim, dtype, layout, ties and " ties" or "")
              local r, idx = t[op](t, dim)
              local rd = T.result_dtype(op, dtype)
              local want, want_idx = ref.reduce(op, data, dim)
              local shape = { 3, 4, 5 }
              table.remove(shape, dim)
              T.assert_shape(r, shape, what)
              assert.equal(rd, r:dtype(), what)
              if T.is_float_dtype(rd) then T.assert_close(r, want, tol_of(rd), what)
              else T.assert_equal(r, want, what) end
              if op == "max" or op == "min" then
                assert.is_true(qlua.is_tensor(idx), what .. " returns indices")
                assert.equal("int64", idx:dtype(), what)
                T.assert_shape(idx, shape, what)
                T.assert_equal(idx, want_idx, what .. " indices")
              end
            end
          end
        end
      end
    end
  end)

  test("of a 1-D tensor give 0-d tensors", function()
    local t = qlua.tensor({ 4, 9, 2 })
    local s = t:sum(1)
    assert.is_true(qlua.is_tensor(s))
    assert.equal(0, s:dim())
    assert.equal(15, s:item())
    local v, i = t:max(1)
    assert.equal(9, v:item())
    assert.equal(2, i:item())
  end)

  test("NaN propagates along the dim", function()
    local t = qlua.tensor({ { 1, 0 / 0, 3 }, { 4, 5, 6 } })
    local mx = t:max(2):totable()
    assert.is_true(T.isnan(mx[1]))
    assert.equal(6, mx[2])
    local mn = t:min(1):totable()
    assert.is_true(T.isnan(mn[2]))
    assert.equal(1, mn[1])
  end)

  test("over an empty dim: sum gives zeros, max is an error", function()
    local e = qlua.zeros(0, 3)
    T.assert_equal(e:sum(1), { 0, 0, 0 })
    T.assert_shape(e:sum(2), { 0 })
    local m = e:mean(1):totable()
    assert.is_true(T.isnan(m[1]))
    T.assert_error(function() local _ = e:max(1) end, "max")
    T.assert_error(function() local _ = e:argmin(1) end, "argmin")
  end)

  test("refuse dims out of range", function()
    local t = qlua.zeros(2, 3)
    for _, op in ipairs(OPS) do
      T.assert_error(function() local _ = t[op](t, 3) end, op)
      T.assert_error(function() local _ = t[op](t, 0) end, op)
      T.assert_error(function() local _ = t[op](t, -1) end, op)
    end
  end)

  test("on bigger random data", function()
    local data = T.random_table({ 64, 200 }, "float32")
    local t = T.make(data, "float32", "transposed")
    T.assert_close(t:sum(1), ref.reduce("sum", data, 1), 1e-6)
    T.assert_close(t:mean(2), ref.reduce("mean", data, 2), 1e-6)
    T.assert_close(t:sum(), ref.reduce("sum", data), 1e-6)
    T.assert_equal(t:argmax(2), ref.reduce("argmax", data, 2))
    assert.equal(ref.reduce("argmin", data), t:argmin())
  end)
end)
