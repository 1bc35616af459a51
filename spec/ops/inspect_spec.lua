-- Inspecting tensors (docs/API.md "Inspecting"): shape, size, stride, dim, numel, #,
-- dtype, device, is_contiguous, item, totable, tostring, qlua.is_tensor.
local T, qlua, test = require("qlua.testing").spec(_ENV)

-- Does s show the shape {a, b, ...} in some usual spelling ("2x3", "2, 3", "{2,3}", "2 × 3")?
local function shows_shape(s, shape)
  local parts = {}
  for i, n in ipairs(shape) do parts[i] = tostring(n) end
  local pattern = table.concat(parts, "%s*[x,×]%s*")
  return s:find(pattern) ~= nil
end

describe("tensor geometry", function()
  test("shape and size return fresh tables", function()
    local t = qlua.zeros(2, 3, 4)
    assert.same({ 2, 3, 4 }, t:shape())
    assert.same({ 2, 3, 4 }, t:size())
    local s = t:shape()
    s[1] = 99
    assert.same({ 2, 3, 4 }, t:shape())
    assert.same({}, qlua.tensor(1.5):shape())
  end)

  test("size(dim), dim, numel and # agree with the shape", function()
    for _ = 1, 10 do
      local nd = math.random(1, 4)
      local shape = {}
      for i = 1, nd do shape[i] = math.random(1, 5) end
      local t = qlua.empty(shape)
      assert.equal(nd, t:dim())
      assert.equal(T.numel(shape), t:numel())
      assert.equal(shape[1], #t)
      for d = 1, nd do assert.equal(shape[d], t:size(d)) end
    end
    assert.equal(0, qlua.tensor(3):dim())
    assert.equal(1, qlua.tensor(3):numel())
    assert.equal(0, qlua.empty(0, 5):numel())
    assert.equal(0, #qlua.empty(0, 5))
  end)

  test("size(dim) and stride(dim) refuse dims out of range", function()
    local t = qlua.zeros(2, 3)
    T.assert_error(function() local _ = t:size(0) end, "size")
    T.assert_error(function() local _ = t:size(3) end, "size")
    T.assert_error(function() local _ = t:stride(3) end, "stride")
    T.assert_error(function() local _ = t:size(-1) end, "size")
  end)

  test("# of a 0-d tensor is an error", function()
    local s = qlua.tensor(2.5)
    assert.has_error(function() local _ = #s end)
  end)

  test("stride is in elements: row-major, swapped by transpose, 0 when expanded", function()
    local t = qlua.zeros(2, 3, 4)
    assert.same({ 12, 4, 1 }, t:stride())
    assert.equal(4, t:stride(2))
    assert.same({ 1, 4, 12 }, t:permute(3, 2, 1):stride())
    assert.same({ 4, 12, 1 }, t:transpose(1, 2):stride())
    local e = qlua.zeros(3, 1):expand(3, 5)
    assert.same({ 1, 0 }, e:stride())
    assert.same({ 12, 1 }, t:select(2, 2):stride())
    assert.same({}, qlua.tensor(1):stride())
  end)

  test("dtype and device", function()
    for _, dtype in ipairs(T.dtypes) do
      local t = qlua.zeros(2, { dtype = dtype })
      assert.equal(dtype, t:dtype())
      assert.equal("cpu", t:device())
    end
  end)

  test("is_contiguous tells row-major views from the others", function()
    local t = qlua.zeros(4, 5)
    assert.is_true(t:is_contiguous())
    assert.is_false(t:t():is_contiguous())
    assert.is_true(t:narrow(1, 2, 2):is_contiguous())
    assert.is_false(t:narrow(2, 2, 2):is_contiguous())
    assert.is_true(t:select(1, 3):is_contiguous())
    assert.is_false(t:select(2, 3):is_contiguous())
    assert.is_false(qlua.zeros(4, 1):expand(4, 3):is_contiguous())
    for _, layout in ipairs(T.noncontiguous_layouts) do
      local v = T.make(T.random_table({ 3, 4 }, "float32"), "float32", layout)
      assert.is_false(v:is_contiguous(), layout)
      assert.is_true(v:contiguous():is_contiguous(), layout)
    end
  end)

  test("qlua.is_tensor", function()
    assert.is_true(qlua.is_tensor(qlua.zeros(1)))
    assert.is_true(qlua.is_tensor(qlua.zeros(3):t()))
    assert.is_false(qlua.is_tensor(1))
    assert.is_false(qlua.is_tensor({}))
    assert.is_false(qlua.is_tensor(nil))
    assert.is_false(qlua.is_tensor("tensor"))
    assert.is_false(qlua.is_tensor(io.stdout))
  end)
end)

describe("reading values", function()
  test("item gives an integer for int dtypes and a float for float dtypes", function()
    for _, dtype in ipairs(T.dtypes) do
      local v = T.random_value(dtype)
      for _, shape in ipairs({ {}, { 1 }, { 1, 1, 1 } }) do
        local t = qlua.full(shape, v, { dtype = dtype })
        local got = t:item()
        assert.equal(v, got)
        assert.equal(T.is_float_dtype(dtype) and "float" or "integer", math.type(got), dtype)
      end
    end
  end)

  test("item of a view reads the viewed element", function()
    local t = qlua.tensor({ { 1, 2, 3 }, { 4, 5, 6 } })
    assert.equal(6, t:narrow(1, 2, 1):narrow(2, 3, 1):item())
    assert.equal(2, t:t():narrow(1, 2, 1):narrow(2, 1, 1):item())
  end)

  test("item refuses tensors of more or fewer than one element", function()
    T.assert_error(function() local _ = qlua.zeros(2):item() end, "item")
    T.assert_error(function() local _ = qlua.zeros(0):item() end, "item")
  end)

  test("totable gives nested tables of the right number types", function()
    for _, dtype in ipairs(T.dtypes) do
      for _, layout in ipairs(T.layouts) do
        local data = T.random_table({ 3, 2, 4 }, dtype)
        local t = T.make(data, dtype, layout)
        local got = t:totable()
        assert.same(data, got)
        assert.equal(T.is_float_dtype(dtype) and "float" or "integer", math.type(got[2][2][3]))
      end
    end
    assert.equal(4.5, qlua.tensor(4.5):totable())
    assert.same({}, qlua.zeros(0):totable())
    assert.same({ {}, {}, {} }, qlua.zeros(3, 0):totable())
  end)
end)

describe("tostring", function()
  test("shows values, dtype, shape and device", function()
    local s = tostring(qlua.tensor({ { 11, 22, 33 }, { 44, 55, 66 } }))
    for _, v in ipairs({ "11", "22", "33", "44", "55", "66", "int64", "cpu" }) do
      assert.is_truthy(s:find(v, 1, true), "missing " .. v .. " in:\n" .. s)
    end
    assert.is_true(shows_shape(s, { 2, 3 }), "no shape 2x3 in:\n" .. s)
    local f = tostring(qlua.tensor({ 0.5, -1.25 }, { dtype = "float64" }))
    assert.is_truthy(f:find("0.5", 1, true), f)
    assert.is_truthy(f:find("-1.25", 1, true), f)
    assert.is_truthy(f:find("float64", 1, true), f)
    assert.is_truthy(tostring(qlua.zeros(2, { dtype = "int32" })):find("int32", 1, true))
    assert.is_truthy(tostring(qlua.zeros(2)):find("float32", 1, true))
  end)

  test("prints int64 values exactly", function()
    local s = tostring(qlua.tensor({ math.maxinteger, -5 }))
    assert.is_truthy(s:find("9223372036854775807", 1, true), s)
  end)

  test("works for 0-d, empty and non-contiguous tensors", function()
    local s = tostring(qlua.tensor(42))
    assert.is_truthy(s:find("42", 1, true), s)
    assert.is_string(tostring(qlua.zeros(0)))
    assert.is_string(tostring(qlua.zeros(2, 0, 3)))
    local t = tostring(qlua.tensor({ { 1, 2 }, { 3, 4 } }):t())
    assert.is_truthy(t:find("1"), t)
    assert.is_string(tostring(qlua.zeros(3, 1):expand(3, 4)))
  end)

  test("shows up to 1000 elements in full", function()
    local s = tostring(qlua.range(11, 1010))
    assert.is_falsy(s:find("...", 1, true), "1000 elements should not be summarised")
    assert.is_truthy(s:find("500", 1, true))
  end)

  test("summarises more than 1000 elements with ... and the first and last 3", function()
    local s = tostring(qlua.range(11, 1011))
    assert.is_truthy(s:find("...", 1, true), s)
    for _, v in ipairs({ "11", "12", "13", "1009", "1010", "1011", "int64", "cpu" }) do
      assert.is_truthy(s:find(v, 1, true), "missing " .. v .. " in:\n" .. s)
    end
    assert.is_falsy(s:find("500", 1, true), "a middle value is shown:\n" .. s)
    local m = qlua.range(1, 40 * 50):view(40, 50)
    local ms = tostring(m)
    assert.is_truthy(ms:find("...", 1, true), ms)
    assert.is_true(shows_shape(ms, { 40, 50 }), ms)
    assert.is_truthy(ms:find("2000", 1, true), ms)   -- the last element
    assert.is_falsy(ms:find("1025", 1, true), ms)    -- row 21, column 25: hidden
    assert.is_truthy(tostring(qlua.zeros(100, 100, 100)):find("...", 1, true))
  end)

  test("summarises a huge tensor without reading it all", function()
    -- 2*10^7 float32 elements (80 MB): a full print would be enormous and slow; the
    -- test only has to finish (no timing asserted).
    local big = qlua.empty({ 20000000 })
    local s = tostring(big)
    assert.is_truthy(s:find("...", 1, true))
    assert.is_truthy(s:find("float32", 1, true), s)
    assert.is_truthy(s:find("20000000", 1, true), s)
    assert.is_truthy(s:find("cpu", 1, true), s)
    assert.is_true(#s < 10000, "summary of " .. #s .. " characters")
    local wide = qlua.empty(4000, 5000)
    local w = tostring(wide)
    assert.is_true(#w < 10000, "summary of " .. #w .. " characters")
    assert.is_true(shows_shape(w, { 4000, 5000 }), w)
    big:free()
    wide:free()
  end)
end)
