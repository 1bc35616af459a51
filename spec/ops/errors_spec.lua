-- Bad input (docs/API.md "Conventions"): each must raise a Lua error naming the
-- function and the offending value, and leave the process and the other tensors intact.
local T, qlua, test = require("qlua.testing").spec(_ENV)

describe("bad input", function()
  -- A tensor made before every test; each test checks it is unharmed at the end.
  local witness, witness_data
  before_each(function()
    witness_data = T.random_table({ 3, 4 }, "float64")
    witness = qlua.tensor(witness_data, { dtype = "float64" })
  end)
  after_each(function()
    T.assert_equal(witness, witness_data, "a tensor made before the error")
    T.assert_equal(witness:t():contiguous():t(), witness_data)
  end)

  test("wrong argument types name the function", function()
    local t = qlua.zeros(2, 3)
    T.assert_error(function() local _ = qlua.zeros("a") end, "zeros")
    T.assert_error(function() local _ = qlua.ones({ "a" }) end, "ones")
    T.assert_error(function() local _ = qlua.empty(true) end, "empty")
    T.assert_error(function() local _ = qlua.full({ 2 }, "x") end, "full")
    T.assert_error(function() local _ = qlua.tensor("yes") end, "tensor")
    T.assert_error(function() local _ = qlua.range("a", 3) end, "range")
    T.assert_error(function() local _ = qlua.randint(1, "b", { 2 }) end, "randint")
    T.assert_error(function() local _ = t:narrow("a", 1, 1) end, "narrow")
    T.assert_error(function() local _ = t:view("a") end, "view")
    T.assert_error(function() local _ = t:gather(1, "x") end, "gather")
    T.assert_error(function() local _ = t:index_select(1, 5) end, "index_select")
    T.assert_error(function() local _ = t:take(nil) end, "take")
    T.assert_error(function() local _ = t:add("x") end, "add")
    T.assert_error(function() local _ = t:clamp("a", 1) end, "clamp")
    T.assert_error(function() local _ = qlua.matmul(1, 2) end, "matmul")
    T.assert_error(function() local _ = t:matmul({}) end, "matmul")
    T.assert_error(function() t:copy_(nil) end, "copy_")
    T.assert_error(function() t:fill_("x") end, "fill_")
    T.assert_error(function() local _ = qlua.zeros(2, { dtype = 5 }) end, "zeros")
    -- a method called on something that is not a tensor
    assert.has_error(function() local _ = t.sum(5) end)
    assert.has_error(function() local _ = t.add({}, 1) end)
  end)

  test("negative sizes name the size", function()
    T.assert_error(function() local _ = qlua.zeros(-1) end, "zeros", "-1")
    T.assert_error(function() local _ = qlua.empty({ 2, -3 }) end, "empty", "-3")
    T.assert_error(function() local _ = qlua.ones(4, -2, 3) end, "ones", "-2")
    T.assert_error(function() local _ = qlua.rand(-5) end, "rand", "-5")
    T.assert_error(function() local _ = qlua.full({ -7 }, 1) end, "full", "-7")
    T.assert_error(function() local _ = qlua.zeros(6):view(-2, 3) end, "view", "-2")
    T.assert_error(function() local _ = qlua.zeros(3, 1):expand(3, -4) end, "expand", "-4")
  end)

  test("non-integer sizes name the size", function()
    T.assert_error(function() local _ = qlua.zeros(2.5) end, "zeros", "2.5")
    T.assert_error(function() local _ = qlua.empty({ 1.5, 2 }) end, "empty", "1.5")
    T.assert_error(function() local _ = qlua.zeros(6):view(1.5, 4) end, "view", "1.5")
    -- method arguments: the value, or Lua's own "bad argument #n to 'narrow'" wording
    for _, case in ipairs({ { 1.5, 2, "1.5" }, { 1, 2.5, "2.5" } }) do
      local msg = T.assert_error(function() local _ = qlua.zeros(6):narrow(1, case[1], case[2]) end, "narrow")
      assert.is_truthy(msg:find(case[3], 1, true) or msg:find("bad argument", 1, true), msg)
    end
  end)

  test("shapes whose product overflows are refused", function()
    T.assert_error(function() local _ = qlua.empty({ 1 << 40, 1 << 40 }) end, "empty")
    T.assert_error(function() local _ = qlua.zeros(1 << 62, 4) end, "zeros")
    T.assert_error(function() local _ = qlua.empty({ 1 << 31, 1 << 31, 1 << 31 }) end, "empty")
    T.assert_error(function() local _ = qlua.zeros(1):expand(1 << 40, 1 << 40) end, "expand")
  end)

  test("an allocation too large for the machine is an error, not a crash", function()
    -- 2^58 float32 elements: the product fits int64, the bytes (2^60) do not fit memory
    T.assert_error(function() local _ = qlua.empty({ 1 << 58 }) end, "empty")
    T.assert_error(function() local _ = qlua.zeros(1 << 29, 1 << 29) end, "zeros")
  end)

  test("too many dims is an error", function()
    local shape = {}
    for i = 1, 40 do shape[i] = 1 end
    T.assert_error(function() local _ = qlua.zeros(shape) end, "zeros")
  end)

  test("view to an incompatible shape", function()
    local t = qlua.zeros(2, 3)
    T.assert_error(function() local _ = t:view(4) end, "view")
    T.assert_error(function() local _ = t:view(5, -1) end, "view")
    T.assert_error(function() local _ = t:t():view(6) end, "view")
    T.assert_error(function() local _ = t:narrow(2, 1, 2):view(4) end, "view")
  end)

  test("dims out of range name the dim", function()
    local t = qlua.zeros(2, 3)
    local cases = {
      { "size", function() return t:size(3) end, "3" },
      { "stride", function() return t:stride(0) end, "0" },
      { "narrow", function() return t:narrow(3, 1, 1) end, "3" },
      { "select", function() return t:select(0, 1) end, "0" },
      { "transpose", function() return t:transpose(1, 3) end, "3" },
      { "transpose", function() return t:transpose(-1, 2) end, "-1" },
      { "permute", function() return t:permute(1, 3) end, "3" },
      { "sum", function() return t:sum(3) end, "3" },
      { "mean", function() return t:mean(0) end, "0" },
      { "max", function() return t:max(4) end, "4" },
      { "argmin", function() return t:argmin(3) end, "3" },
      { "gather", function() return t:gather(3, { { 1 } }) end, "3" },
      { "index_select", function() return t:index_select(3, { 1 }) end, "3" },
      { "scatter", function() return t:scatter_(5, { { 1 } }, 1) end, "5" },
      { "index_add", function() return t:index_add_(3, { 1 }, qlua.zeros(2, 3)) end, "3" },
    }
    for _, c in ipairs(cases) do
      local msg = T.assert_error(c[2], c[1], c[3])
      assert.matches("^" .. c[1], msg)
    end
  end)

  test("float index tensors name the dtype", function()
    local t = qlua.zeros(4, 3)
    local f = qlua.ones(2, 3)
    T.assert_error(function() return t:gather(1, f) end, "gather", "float32")
    T.assert_error(function() return t:index_select(1, qlua.ones(2, { dtype = "float64" })) end, "index_select", "float64")
    T.assert_error(function() return t:take(f) end, "take", "float32")
    T.assert_error(function() return t:scatter_(1, f, qlua.ones(2, 3)) end, "scatter", "float32")
    T.assert_error(function() return t:index_add_(1, qlua.ones(2), qlua.ones(2, 3)) end, "index_add", "float32")
    T.assert_error(function() return t:gather(1, { { 1.5, 1, 1 } }) end, "gather", "1.5")
  end)

  test("unknown dtypes and devices name them", function()
    T.assert_error(function() return qlua.zeros(2, { dtype = "float8" }) end, "float8")
    T.assert_error(function() return qlua.tensor({ 1 }, { dtype = "complex" }) end, "complex")
    T.assert_error(function() return qlua.zeros(2, { device = "tpu" }) end, "tpu")
    T.assert_error(function() return qlua.rand(2, { device = "cuda" }) end, "cuda")
    T.assert_error(function() return qlua.zeros(2):to("bfloat17") end, "bfloat17")
    T.assert_error(function() return qlua.zeros(2, { device = "gpu:x" }) end, "gpu:x")
  end)

  test("without a GPU, GPU requests raise a clear error", function()
    if T.has_gpu() then pending("a GPU is present") return end
    assert.equal(0, qlua.gpu_count())
    local t = qlua.zeros(3)
    for _, fn in ipairs({
      function() return t:gpu() end,
      function() return t:gpu(0) end,
      function() return t:to("gpu") end,
      function() return t:to("gpu:0") end,
      function() return qlua.zeros(3, { device = "gpu" }) end,
      function() return qlua.rand(3, { device = "gpu:0" }) end,
      function() return qlua.device_name(0) end,
      function() return qlua.sync("gpu") end,
      function() return qlua.memory("gpu") end,
    }) do
      local msg = T.error_of(fn)
      assert.matches("[Gg][Pp][Uu]", msg)
    end
    -- and the CPU keeps working
    T.assert_equal(t + 1, { 1, 1, 1 })
  end)

  test("a GPU ordinal that does not exist is an error naming it", function()
    local n = qlua.gpu_count()
    local msg = T.assert_error(function() return qlua.zeros(2, { device = "gpu:" .. (n + 3) }) end, "zeros")
    if n > 0 then
      assert.is_truthy(msg:find("gpu:" .. (n + 3), 1, true), msg)
    else
      assert.matches("[Gg][Pp][Uu]", msg)
    end
  end)

  test("errors are ordinary, catchable Lua errors with string messages", function()
    local ok, err = pcall(qlua.zeros, -1)
    assert.is_false(ok)
    assert.is_string(err)
    -- the state keeps working after many errors
    for _ = 1, 200 do pcall(function() return qlua.zeros(3):gather({ 0 }) end) end
    T.assert_equal(qlua.range(1, 3):gather({ 3, 1 }), { 3, 1 })
  end)
end)
