-- The GPU device against the CPU device (ggml's test-backend-ops idea): every op
-- in every dtype it supports, on contiguous and non-contiguous inputs, with the GPU's
-- memory poisoned before the op, compared with the CPU's result — exactly for copies,
-- indexing, integer ops and the uniform/integer generators; ‖gpu − cpu‖/‖cpu‖ < 1e-5 for
-- float32 arithmetic and reductions; < 3e-3 for TF32 matmul. Plus transfers, bad
-- indices, out-of-memory, GC pressure, freed tensors, mixed devices and qlua.memory.
--
-- Without a GPU every test here is reported as pending with the reason.
local T, qlua, _, gtest = require("qlua.testing").spec(_ENV)
local ref = T.ref

local HAS_GPU = T.gpu_status()
local GPU = "gpu:0"   -- what t:device() says for the default GPU
local MiB, GiB = 1024 * 1024, 1024 * 1024 * 1024

local TOL = { float32 = 1e-5, float64 = 1e-12 }

local function numel_bytes(t)
  local size = (t:dtype() == "float32" or t:dtype() == "int32") and 4 or 8
  return math.max(1, t:numel()) * size
end

-- g (a GPU result) against c (the CPU result): same dtype, shape, and values (exact, or
-- relative-norm within tol for float dtypes when tol is given).
local function compare(g, c, what, tol)
  if type(c) == "number" then
    assert.is_number(g, what)
    if tol and math.type(c) == "float" then T.assert_close(g, c, tol, what)
    else assert.equal(c, g, what) end
    return
  end
  assert.equal(GPU, g:device(), what .. ": device")
  assert.equal(c:dtype(), g:dtype(), what .. ": dtype")
  T.assert_shape(g, c:shape(), what)
  local back = g:cpu()
  assert.equal("cpu", back:device())
  if tol and T.is_float_dtype(c:dtype()) then T.assert_close(back, c, tol, what)
  else T.assert_equal(back, c, what) end
end

-- Runs build("cpu") and build("gpu") (same data, same layouts, closed over by build) and
-- compares every result. GPU memory is poisoned (NaN bytes handed back to the cache)
-- before the GPU run so outputs the op forgets to write show up.
local function parity(what, build, tol)
  local cres = table.pack(build("cpu"))
  local bytes = 0
  for i = 1, cres.n do
    if qlua.is_tensor(cres[i]) then bytes = math.max(bytes, numel_bytes(cres[i])) end
  end
  T.poison_pool("gpu", math.max(bytes, 64))
  local gres = table.pack(build("gpu"))
  assert.equal(cres.n, gres.n, what .. ": number of results")
  for i = 1, cres.n do compare(gres[i], cres[i], what .. (cres.n > 1 and " result " .. i or ""), tol) end
end

-- Index values in the forms the API takes, on the given device.
local function index_on(idx, form, device, shape)
  if form == "table" then return idx end
  local dtype, layout = form:match("^(%w+)%s*(%w*)$")
  return T.make(idx, dtype, layout ~= "" and layout or "contiguous", device, shape)
end
local INDEX_FORMS = { "table", "int64", "int32", "int32 transposed", "int64 stepped" }

describe("gpu", function()
  --------------------------------------------------------------------- devices, transfers

  describe("devices", function()
    gtest("gpu_count, device_name and set_device", function()
      assert.is_true(qlua.gpu_count() >= 1)
      local name = qlua.device_name(0)
      assert.is_string(name)
      assert.is_true(#name > 0)
      assert.has_no.errors(function() qlua.set_device(0) end)
      assert.equal(GPU, qlua.zeros(2, { device = "gpu" }):device())
      assert.equal(GPU, qlua.zeros(2, { device = "gpu:0" }):device())
      local n = qlua.gpu_count()
      T.assert_error(function() return qlua.zeros(2, { device = "gpu:" .. n }) end, "gpu:" .. n)
      T.assert_error(function() return qlua.device_name(n) end)
    end)

    gtest(":gpu() and :cpu() keep every dtype and round-trip exactly, from any layout", function()
      for _, dtype in ipairs(T.dtypes) do
        for _, layout in ipairs(T.layouts) do
          local data = T.random_table({ 5, 7 }, dtype)
          local c = T.make(data, dtype, layout, "cpu")
          local g = c:gpu()
          local what = dtype .. " " .. layout
          assert.equal(GPU, g:device(), what)
          assert.equal(dtype, g:dtype(), what)
          T.assert_shape(g, { 5, 7 }, what)
          local back = g:cpu()
          assert.equal(dtype, back:dtype(), what)
          T.assert_equal(back, data, what)
          -- a non-contiguous GPU view moved to the CPU
          local gv = T.make(data, dtype, layout, "gpu")
          T.assert_equal(gv:cpu(), data, what .. " (GPU view)")
          T.assert_equal(c:to("gpu"):to("cpu"), data, what .. " (to)")
          T.assert_equal(c:gpu(0):cpu(), data, what .. " (gpu(0))")
          T.assert_equal(c:to(GPU):cpu(), data, what .. " (to gpu:0)")
        end
      end
    end)

    gtest("a tensor already on the device is returned as is", function()
      local g = qlua.zeros(3, { device = "gpu" })
      assert.is_true(rawequal(g, g:gpu()))
      assert.is_true(rawequal(g, g:to("gpu")))
      assert.is_true(rawequal(g, g:to(GPU)))
      assert.is_true(rawequal(g, g:to("float32")))
      local c = qlua.zeros(3)
      assert.is_true(rawequal(c, c:cpu()))
    end)

    gtest("large transfers are exact both ways", function()
      local c = qlua.rand(16 * MiB)           -- 64 MiB of float32
      local back = c:gpu():cpu()
      assert.equal(0, (back - c):abs():max())
      local i = qlua.randint(-(1 << 40), 1 << 40, { 4 * MiB })
      assert.equal(0, (i:gpu():cpu() - i):abs():max())
      local tc = qlua.rand(2048, 1024):t()    -- non-contiguous, 8 MiB
      assert.equal(0, (tc:gpu():cpu() - tc):abs():max())
    end)

    gtest("element access, item, totable and tostring read GPU tensors", function()
      local data = T.random_table({ 4 }, "float64")
      local g = qlua.tensor(data, { dtype = "float64", device = "gpu" })
      for i = 1, 4 do assert.equal(data[i], g[i]) end
      g[2] = 0.5
      data[2] = 0.5
      T.assert_equal(g:totable(), data)
      assert.equal(data[3], g:narrow(1, 3, 1):item())
      local s = tostring(g)
      assert.is_truthy(s:find(GPU, 1, true), s)
      assert.is_truthy(s:find("float64", 1, true), s)
      local m = qlua.zeros(3, 4, { device = "gpu", dtype = "int32" })
      m[2] = 7
      T.assert_equal(m[2], { 7, 7, 7, 7 })
      assert.is_truthy(tostring(qlua.zeros(2000, 3000, { device = "gpu" })):find("...", 1, true))
    end)

    gtest("views on the GPU share storage", function()
      local g = qlua.zeros(4, 5, { device = "gpu" })
      g:narrow(2, 2, 3):fill_(1)
      g:t()[5]:fill_(2)
      g:select(1, 4):narrow(1, 1, 2):add_(10)
      local want = {
        { 0, 1, 1, 1, 2 }, { 0, 1, 1, 1, 2 }, { 0, 1, 1, 1, 2 }, { 10, 11, 1, 1, 2 },
      }
      T.assert_equal(g:cpu(), want)
    end)
  end)

  --------------------------------------------------------------------- creation and random

  describe("creation", function()
    gtest("tensor, empty+fill_, zeros, ones, full, range on the GPU", function()
      for _, dtype in ipairs(T.dtypes) do
        local opts = { dtype = dtype, device = "gpu" }
        local data = T.random_table({ 3, 4 }, dtype)
        T.assert_equal(qlua.tensor(data, opts):cpu(), data)
        T.poison_pool("gpu", 4096)
        T.assert_equal(qlua.zeros(3, 4, opts):cpu(), qlua.zeros(3, 4, { dtype = dtype }))
        T.assert_equal(qlua.ones({ 3, 4 }, opts):cpu(), qlua.ones(3, 4, { dtype = dtype }))
        local v = T.random_value(dtype)
        T.assert_equal(qlua.full({ 5 }, v, opts):cpu(), { v, v, v, v, v })
        T.assert_equal(qlua.empty(6, opts):fill_(v):cpu(), { v, v, v, v, v, v })
        T.assert_equal(qlua.range(1, 9, 2, opts):cpu(), { 1, 3, 5, 7, 9 })
        assert.equal(dtype, qlua.range(1, 9, 2, opts):dtype())
      end
      T.assert_shape(qlua.zeros(0, 3, { device = "gpu" }), { 0, 3 })
      assert.equal(GPU, qlua.tensor(3.5, { device = "gpu" }):device())
      assert.equal(3.5, qlua.tensor(3.5, { device = "gpu" }):item())
    end)

    gtest("rand and randint give the CPU's numbers for the same seed, exactly", function()
      local cases = {
        function(dev) return qlua.rand({ 1000, 37 }, { device = dev }) end,
        function(dev) return qlua.rand({ 777 }, { dtype = "float64", device = dev }) end,
        function(dev) return qlua.randint(-5, 1000, { 50, 50 }, { device = dev }) end,
        function(dev) return qlua.randint(0, 9, { 999 }, { dtype = "int32", device = dev }) end,
        function(dev) return qlua.randint(-(1 << 50), 1 << 50, { 333 }, { device = dev }) end,
      }
      for k, gen in ipairs(cases) do
        qlua.seed(7)
        local c1, c2 = gen("cpu"), gen("cpu")
        qlua.seed(7)
        local g1, g2 = gen("gpu"), gen("gpu")
        compare(g1, c1, "generator " .. k .. ", first call")
        compare(g2, c2, "generator " .. k .. ", second call")
      end
    end)

    gtest("the generator's position is shared by the devices", function()
      qlua.seed(9)
      local a = qlua.rand(100)
      local b = qlua.rand(100, { device = "gpu" })
      qlua.seed(9)
      local a2 = qlua.rand(100, { device = "gpu" })
      local b2 = qlua.rand(100)
      T.assert_equal(a2:cpu(), a)
      T.assert_equal(b:cpu(), b2)
    end)

    gtest("randn gives the CPU's normals to within 1e-6", function()
      for _, dtype in ipairs(T.float_dtypes) do
        qlua.seed(11)
        local c = qlua.randn({ 4096, 3 }, { dtype = dtype })
        qlua.seed(11)
        local g = qlua.randn({ 4096, 3 }, { dtype = dtype, device = "gpu" })
        assert.equal(dtype, g:dtype())
        local diff = (g:cpu() - c):abs():max()
        assert.is_true(diff <= 1e-6, dtype .. ": max difference " .. diff)
      end
    end)
  end)

  --------------------------------------------------------------------- copies and casts

  describe("copies and casts", function()
    gtest("to(dtype) for every pair and layout", function()
      for _, from in ipairs(T.dtypes) do
        for _, to in ipairs(T.dtypes) do
          for _, layout in ipairs(T.layouts) do
            local data = T.random_table({ 4, 6 }, from, T.is_float_dtype(from) and { lo = -100, hi = 100 } or nil)
            parity(from .. " -> " .. to .. " " .. layout, function(dev)
              return T.make(data, from, layout, dev):to(to)
            end)
          end
        end
      end
    end)

    gtest("clone, contiguous and copy_ with broadcasting on the GPU", function()
      for _, dtype in ipairs(T.dtypes) do
        for _, layout in ipairs(T.layouts) do
          local data = T.random_table({ 3, 4, 5 }, dtype)
          local row = T.random_table({ 5 }, T.dtypes[math.random(1, 4)])
          local row_dtype = math.type(row[1]) == "integer" and "int64" or "float64"
          parity("clone " .. dtype .. " " .. layout, function(dev) return T.make(data, dtype, layout, dev):clone() end)
          parity("contiguous " .. dtype .. " " .. layout, function(dev) return T.make(data, dtype, layout, dev):contiguous() end)
          parity("copy_ " .. dtype .. " " .. layout, function(dev)
            local dst = T.poison(T.make(data, dtype, layout, dev))
            return dst:copy_(T.make(row, row_dtype, "stepped", dev))
          end)
        end
      end
    end)

    -- the row copies (kernels/elementwise.cu): dense rows of whole 16-byte units under up
    -- to four outer dims (heads merged: (b, h, l, d) -> (b, l, h, d)), a broadcast row
    -- (stride 0: addmm's bias), and rows that miss 16 bytes (the per-element kernel)
    gtest("copies of rows under outer dims and of a broadcast row match the CPU's", function()
      for _, dtype in ipairs({ "float32", "float64", "bfloat16", "float16", "int32", "uint8" }) do
        for _, d in ipairs({ 8, 16, 64, 13 }) do
          local data = T.random_table({ 2, 3, 4, d }, "float64", { lo = 0, hi = 100 })   -- fits every dtype here
          parity(("merge heads %s d=%d"):format(dtype, d), function(dev)
            return qlua.tensor(data, { device = dev }):to(dtype):transpose(2, 3):contiguous()
          end)
          parity(("5-D permute %s d=%d"):format(dtype, d), function(dev)
            local t = qlua.tensor(data, { device = dev }):to(dtype):reshape({ 2, 3, 2, 2, d })
            return t:permute({ 3, 1, 4, 2, 5 }):contiguous()
          end)
          parity(("broadcast row %s d=%d"):format(dtype, d), function(dev)
            local row = qlua.tensor(data[1][1][1], { device = dev }):to(dtype)
            local o = { dtype = dtype, device = dev }   -- T.poison has no uint8 value: 255 is none of the data's
            local dst = dtype == "uint8" and qlua.full({ 5, 7, d }, 255, o) or T.poison(qlua.empty({ 5, 7, d }, o))
            return dst:copy_(row)
          end)
          parity(("addmm bias %s d=%d"):format(dtype, d), function(dev)
            if dtype ~= "float32" and dtype ~= "float64" then return qlua.zeros({ 1 }, { device = dev }) end
            local a = qlua.tensor(data[1][1], { device = dev }):to(dtype):t()
            local bias = qlua.tensor(data[2][1][1], { device = dev }):to(dtype)
            return qlua.addmm(bias, a, qlua.tensor(data[1][2], { device = dev }):to(dtype))
          end, 1e-5)
        end
      end
    end)

    gtest("copy_ between devices, both ways, into views", function()
      for _, dtype in ipairs(T.dtypes) do
        local data = T.random_table({ 4, 3 }, dtype)
        local g = T.poison(qlua.empty(3, 4, { dtype = dtype, device = "gpu" }))
        g:t():copy_(T.make(data, dtype, "stepped", "cpu"))
        T.assert_equal(g:t():cpu(), data)
        local c = T.poison(qlua.empty(4, 3, { dtype = "float64" }))
        c:copy_(T.make(data, dtype, "transposed", "gpu"))
        T.assert_equal(c, T.ref.map(data, function(v) return v + 0.0 end))
        -- a row broadcast from the other device
        local b = qlua.zeros(2, 3, { dtype = dtype, device = "gpu" })
        b:copy_(qlua.tensor(data[1], { dtype = dtype }))
        T.assert_equal(b:cpu(), { data[1], data[1] })
      end
    end)
  end)

  --------------------------------------------------------------------- elementwise

  local BINARY = { "add", "sub", "mul", "div", "pow", "maximum", "minimum", "eq", "ne", "lt", "le", "gt", "ge" }

  describe("elementwise", function()
    gtest("every binary op, dtype and layout, with broadcasting", function()
      for _, name in ipairs(BINARY) do
        for _, dtype in ipairs(T.dtypes) do
          for _, layout in ipairs(T.layouts) do
            for _, shapes in ipairs({ { { 3, 4, 5 }, { 3, 4, 5 } }, { { 3, 4, 5 }, { 4, 1 } }, { { 1, 5 }, { 3, 4, 5 } } }) do
              local a = T.binary_operand(name, 1, shapes[1], dtype)
              local b = T.binary_operand(name, 2, shapes[2], dtype)
              local lb = T.layouts[math.random(1, 4)]
              parity(string.format("%s %s %s/%s %s,%s", name, dtype, layout, lb, T.shape_str(shapes[1]), T.shape_str(shapes[2])),
                function(dev)
                  local ta, tb = T.make(a, dtype, layout, dev), T.make(b, dtype, lb, dev)
                  return ta[name](ta, tb)
                end, TOL[dtype])
            end
          end
        end
      end
    end)

    gtest("mixed dtypes promote as on the CPU", function()
      for _, name in ipairs({ "add", "mul", "div", "pow", "lt", "maximum" }) do
        for _, da in ipairs(T.dtypes) do
          for _, db in ipairs(T.dtypes) do
            local a = T.binary_operand(name, 1, { 4, 5 }, da)
            if name == "pow" and (T.is_float_dtype(da) or T.is_float_dtype(db)) then
              a = T.random_table({ 4, 5 }, da, T.is_float_dtype(da) and { positive = true } or { lo = 1, hi = 9 })
            end
            local b = T.binary_operand(name, 2, { 4, 5 }, db)
            local tol = (da == "float32" and db == "float32") and TOL.float32 or TOL.float64
            parity(name .. " " .. da .. " " .. db, function(dev)
              local ta = T.make(a, da, "transposed", dev)
              return ta[name](ta, T.make(b, db, "narrowed", dev))
            end, tol)
          end
        end
      end
    end)

    gtest("numbers on either side and the operators", function()
      for _, dtype in ipairs(T.dtypes) do
        for _, layout in ipairs(T.layouts) do
          local a = T.random_table({ 6, 7 }, dtype, T.is_float_dtype(dtype) and { positive = true } or { lo = 1, hi = 9 })
          local e = T.random_table({ 6, 7 }, dtype, T.is_float_dtype(dtype) and { lo = -2, hi = 2 } or { lo = 0, hi = 3, zero = true })
          local cases = {
            function(t) return t + 3 end, function(t) return 3 - t end, function(t) return t * 2.5 end,
            function(t) return 2 / t end, function(t) return t / 4 end, function(t) return -t end,
            function(t) return t ^ 2 end, function(t) return t:maximum(4) end, function(t) return t:minimum(2.5) end,
            function(t) return t:gt(3) end, function(t) return t:eq(2) end, function(t) return t:le(1.5) end,
            function(t) return t:sub(1.25) end,
          }
          for k, f in ipairs(cases) do
            parity(string.format("scalar case %d %s %s", k, dtype, layout), function(dev) return f(T.make(a, dtype, layout, dev)) end, TOL.float32)
          end
          parity("2 ^ t " .. dtype, function(dev) return 2 ^ T.make(e, dtype, layout, dev) end, TOL.float32)
        end
      end
    end)

    gtest("every unary op and clamp, dtype and layout", function()
      local UNARY = { "neg", "abs", "exp", "log", "sqrt", "tanh", "sigmoid", "relu" }
      for _, name in ipairs(UNARY) do
        for _, dtype in ipairs(T.dtypes) do
          for _, layout in ipairs(T.layouts) do
            local positive = name == "log" or name == "sqrt"
            local a
            if T.is_float_dtype(dtype) then
              a = T.random_table({ 5, 6 }, dtype, positive and { positive = true, lo = 0.1, hi = 9 } or { lo = 0.1, hi = 3 })
            else
              a = T.random_table({ 5, 6 }, dtype, positive and { lo = 1, hi = 50 } or { lo = -10, hi = 10 })
            end
            parity(name .. " " .. dtype .. " " .. layout, function(dev)
              local t = T.make(a, dtype, layout, dev)
              return t[name](t)
            end, TOL[T.is_float_dtype(dtype) and dtype or "float64"])
          end
        end
      end
      for _, dtype in ipairs(T.dtypes) do
        local a = T.random_table({ 5, 6 }, dtype, T.is_float_dtype(dtype) and { lo = -3, hi = 3 } or { lo = -9, hi = 9 })
        local lo, hi = -1, 2
        parity("clamp " .. dtype, function(dev)
          local t = T.make(a, dtype, "stepped", dev)
          return t:clamp(lo, hi), t:clamp(nil, hi), t:clamp(lo)
        end)
      end
    end)

    gtest("in-place ops on views", function()
      for _, dtype in ipairs(T.dtypes) do
        for _, layout in ipairs(T.layouts) do
          local a = T.random_table({ 4, 5 }, dtype)
          local b = T.random_table({ 5 }, dtype)
          parity("in-place " .. dtype .. " " .. layout, function(dev)
            local t = T.make(a, dtype, layout, dev)
            t:add_(T.make(b, dtype, "stepped", dev)):mul_(3):maximum_(-2):sub_(1)
            if T.is_float_dtype(dtype) then t:div_(2):exp_():sqrt_() else t:abs_():neg_() end
            t:narrow(2, 2, 2):fill_(5)
            t:select(1, 1):zero_()
            return t
          end, TOL[dtype])
        end
      end
    end)

    gtest("large non-contiguous elementwise", function()
      local a = qlua.rand(1536, 1024)
      local b = qlua.rand(1024)
      local c = a:t():contiguous():t() * b + a:sigmoid()
      local g = a:gpu():t():contiguous():t() * b:gpu() + a:gpu():sigmoid()
      local diff = (g:cpu() - c):abs():max()
      assert.is_true(diff < 1e-5, "max difference " .. diff)
    end)
  end)

  --------------------------------------------------------------------- reductions

  describe("reductions", function()
    local OPS = { "sum", "mean", "max", "min", "argmax", "argmin" }

    gtest("every reduction, dtype and layout, over all and along each dim", function()
      for _, dtype in ipairs(T.dtypes) do
        for _, layout in ipairs(T.layouts) do
          for _, ties in ipairs({ false, true }) do
            local data
            if ties then
              local l = {}
              for i = 1, 60 do l[i] = T.as_dtype(math.random(1, 3), dtype) end
              data = T.unflatten(l, { 3, 4, 5 })
            else
              data = T.random_table({ 3, 4, 5 }, dtype)
            end
            for _, op in ipairs(OPS) do
              parity(op .. " " .. dtype .. " " .. layout, function(dev)
                local t = T.make(data, dtype, layout, dev)
                return t[op](t)
              end, TOL[T.is_float_dtype(dtype) and dtype or "float64"])
              for dim = 1, 3 do
                parity(string.format("%s(%d) %s %s", op, dim, dtype, layout), function(dev)
                  local t = T.make(data, dtype, layout, dev)
                  return t[op](t, dim)
                end, TOL[T.is_float_dtype(dtype) and dtype or "float64"])
              end
            end
          end
        end
      end
    end)

    gtest("large reductions (tree reduction, float64 accumulation)", function()
      local c = qlua.rand(10 * 1000 * 1000)
      local g = c:gpu()
      T.assert_close(g:sum(), c:sum(), 1e-5, "sum")
      T.assert_close(g:mean(), c:mean(), 1e-5, "mean")
      assert.equal(c:max(), g:max())
      assert.equal(c:argmin(), g:argmin())
      local m = qlua.randn(3000, 700)
      compare(m:gpu():sum(1), m:sum(1), "sum(1)", 1e-5)
      compare(m:gpu():t():sum(1), m:t():sum(1), "sum(1) of the transpose", 1e-5)
      compare(m:gpu():mean(2), m:mean(2), "mean(2)", 1e-5)
      local v, i = m:gpu():max(2)
      local cv, ci = m:max(2)
      compare(v, cv, "max(2) values")
      compare(i, ci, "max(2) indices")
      local ints = qlua.randint(-1000, 1000, { 5 * 1000 * 1000 }, { dtype = "int32" })
      assert.equal(ints:sum(), ints:gpu():sum())
    end)

    gtest("NaN, empty inputs and errors as on the CPU", function()
      local g = qlua.tensor({ { 1, 0 / 0, 3 }, { 4, 5, 6 } }, { device = "gpu" })
      assert.is_true(T.isnan(g:max()))
      assert.is_true(T.isnan(g:min()))
      local mx = g:max(2):cpu():totable()
      assert.is_true(T.isnan(mx[1]))
      assert.equal(6, mx[2])
      local e = qlua.zeros(0, { device = "gpu" })
      assert.equal(0, e:sum())
      assert.is_true(T.isnan(e:mean()))
      T.assert_error(function() return e:max() end, "max")
      T.assert_error(function() return g:sum(3) end, "sum")
    end)
  end)

  --------------------------------------------------------------------- indexing

  describe("indexing", function()
    gtest("gather without dim and along each dim of 2-D and 3-D sources", function()
      for _, dtype in ipairs(T.dtypes) do
        for _, layout in ipairs(T.layouts) do
          local src1 = T.random_table({ 40 }, dtype)
          local idx1 = T.random_index({ 64 }, 40)
          for _, form in ipairs(INDEX_FORMS) do
            parity("gather 1-D " .. dtype .. " " .. layout .. " " .. form, function(dev)
              return T.make(src1, dtype, layout, dev):gather(index_on(idx1, form, dev))
            end)
          end
          local src = T.random_table({ 4, 5, 6 }, dtype)
          for dim = 1, 3 do
            local ishape = { math.random(1, 4), math.random(1, 5), math.random(1, 6) }
            ishape[dim] = math.random(1, 9)
            local idx = T.random_index(ishape, ({ 4, 5, 6 })[dim])
            local form = INDEX_FORMS[math.random(1, #INDEX_FORMS)]
            parity(string.format("gather(%d) %s %s %s", dim, dtype, layout, form), function(dev)
              return T.make(src, dtype, layout, dev):gather(dim, index_on(idx, form, dev, ishape))
            end)
          end
          local m = T.random_table({ 5, 6 }, dtype)
          local mi = T.random_index({ 5, 4 }, 6)
          parity("gather(2) 2-D " .. dtype .. " " .. layout, function(dev)
            return T.make(m, dtype, layout, dev):gather(2, index_on(mi, "int32 transposed", dev))
          end)
        end
      end
    end)

    gtest("index_select and take", function()
      for _, dtype in ipairs(T.dtypes) do
        for _, layout in ipairs(T.layouts) do
          local src = T.random_table({ 4, 5, 6 }, dtype)
          for dim = 1, 3 do
            local idx = T.random_index({ math.random(1, 8) }, ({ 4, 5, 6 })[dim])
            local form = INDEX_FORMS[math.random(1, #INDEX_FORMS)]
            parity(string.format("index_select(%d) %s %s %s", dim, dtype, layout, form), function(dev)
              return T.make(src, dtype, layout, dev):index_select(dim, index_on(idx, form, dev))
            end)
          end
          local tidx = T.random_index({ 3, 7 }, 120)
          for _, form in ipairs(INDEX_FORMS) do
            parity("take " .. dtype .. " " .. layout .. " " .. form, function(dev)
              return T.make(src, dtype, layout, dev):take(index_on(tidx, form, dev))
            end)
          end
        end
      end
    end)

    gtest("scatter_ with tensors and numbers into poisoned destinations", function()
      for _, dtype in ipairs(T.dtypes) do
        for _, layout in ipairs(T.layouts) do
          for dim = 1, 2 do
            local dshape = { 6, 7 }
            local ishape = { 4, 5 }
            -- distinct index values along dim in each line: no duplicate writes
            local idx = {}
            for i = 1, ishape[1] do idx[i] = {} end
            for j = 1, ishape[3 - dim] do
              local perm = T.permutation(dshape[dim])
              for i = 1, ishape[dim] do
                if dim == 1 then idx[i][j] = perm[i] else idx[j][i] = perm[i] end
              end
            end
            local src = T.random_table({ 5, 6 }, dtype)
            local form = INDEX_FORMS[math.random(1, #INDEX_FORMS)]
            parity(string.format("scatter_(%d) %s %s %s", dim, dtype, layout, form), function(dev)
              local dst = T.poison(T.make(T.random_table(dshape, dtype), dtype, layout, dev))
              return dst:scatter_(dim, index_on(idx, form, dev), T.make(src, dtype, "transposed", dev))
            end)
            local v = T.random_value(dtype)
            local dup = T.random_index(ishape, dshape[dim])
            local base = T.random_table(dshape, dtype)
            parity(string.format("scatter_(%d) number %s %s", dim, dtype, layout), function(dev)
              return T.make(base, dtype, layout, dev):scatter_(dim, index_on(dup, form, dev), v)
            end)
          end
        end
      end
    end)

    gtest("index_add_ accumulates duplicates (atomics)", function()
      for _, dtype in ipairs(T.dtypes) do
        for _, layout in ipairs(T.layouts) do
          for dim = 1, 2 do
            local dshape = { 5, 6 }
            local n = 40
            local idx = T.random_index({ n }, dshape[dim])
            local sshape = { 5, 6 }
            sshape[dim] = n
            local src = T.random_table(sshape, dtype)
            local dst = T.random_table(dshape, dtype)
            local form = INDEX_FORMS[math.random(1, #INDEX_FORMS)]
            parity(string.format("index_add_(%d) %s %s %s", dim, dtype, layout, form), function(dev)
              return T.make(dst, dtype, layout, dev):index_add_(dim, index_on(idx, form, dev), T.make(src, dtype, "stepped", dev))
            end, TOL[T.is_float_dtype(dtype) and dtype or "float64"])
          end
        end
      end
      -- many duplicates into one row
      local g = qlua.zeros(2, 3, { dtype = "int64", device = "gpu" })
      local ones = qlua.ones(10000, 3, { dtype = "int64", device = "gpu" })
      local idx = qlua.full({ 10000 }, 2, { dtype = "int64", device = "gpu" })
      g:index_add_(1, idx, ones)
      T.assert_equal(g:cpu(), { { 0, 0, 0 }, { 10000, 10000, 10000 } })
    end)

    gtest("the seeds' case: 1Mi random indices into 16Mi float32", function()
      local n = 16 * MiB
      local src = qlua.rand(n, { device = "gpu" })
      for _, dtype in ipairs(T.int_dtypes) do
        local idx = qlua.randint(1, n, { MiB }, { dtype = dtype, device = "gpu" })
        local g = src:gather(idx)
        local c = src:cpu():gather(idx:cpu())
        assert.equal(MiB, g:numel())
        assert.equal(0, (g:cpu() - c):abs():max())
        assert.equal(0, (src:take(idx):cpu() - c):abs():max())
        assert.equal(0, (src:index_select(1, idx):cpu() - c):abs():max())
      end
    end)

    gtest("index tensors must be on the source's device", function()
      local g = qlua.rand(10, { device = "gpu" })
      local cidx = qlua.tensor({ 1, 2 })
      T.assert_error(function() return g:gather(cidx) end, "gather", "cpu", GPU)
      T.assert_error(function() return g:index_select(1, cidx) end, "index_select", "cpu", GPU)
      T.assert_error(function() return g:take(cidx) end, "take", "cpu", GPU)
      T.assert_error(function() return g:index_add_(1, cidx, qlua.ones(2, { device = "gpu" })) end, "index_add", "cpu", GPU)
      T.assert_error(function() return g:index_add_(1, cidx:gpu(), qlua.ones(2)) end, "index_add", "cpu", GPU)
      -- a Lua table is converted for the source's device
      T.assert_equal(g:gather({ 2, 1 }):cpu(), { g[2], g[1] })
    end)
  end)

  --------------------------------------------------------------------- bad indices

  describe("bad index values", function()
    -- Each case: op name, valid bound, 1-based position of the bad value, and a function
    -- running the op with the bad value on the GPU (returning the result, if any).
    local function cases(bad)
      local src1 = qlua.rand(100, { device = "gpu" })
      local m = qlua.rand(4, 6, { device = "gpu" })
      local idx8 = { 3, 1, 4, 1, bad, 5, 2, 6 }   -- all valid for every bound but one
      local idx2 = { { 1, 2, 3, 4, 5 }, { 6, 5, bad, 3, 2 }, { 1, 1, 1, 1, 1 } }
      return {
        { "gather", 100, 5, function(form) return src1:gather(index_on(idx8, form, "gpu")) end },
        { "gather", 6, 8, function(form) return m:gather(2, index_on(idx2, form, "gpu")) end },
        { "index_select", 6, 5, function(form) return m:index_select(2, index_on(idx8, form, "gpu")) end },
        { "take", 24, 5, function(form) return m:take(index_on(idx8, form, "gpu")) end },
        { "scatter_?", 6, 8, function(form) return m:clone():scatter_(2, index_on(idx2, form, "gpu"), qlua.rand(3, 5, { device = "gpu" })) end },
        { "scatter_?", 6, 8, function(form) return m:clone():scatter_(2, index_on(idx2, form, "gpu"), 1.5) end },
        { "index_add_?", 100, 5, function(form) return src1:clone():index_add_(1, index_on(idx8, form, "gpu"), qlua.rand(8, { device = "gpu" })) end },
      }
    end

    gtest("raise at the op or the next sync, name op/value/range/position, and the GPU goes on", function()
      for _, bad in ipairs({ 0, -3, 1000 }) do
        for _, c in ipairs(cases(bad)) do
          local op, bound, pos, run = c[1], c[2], c[3], c[4]
          for _, form in ipairs({ "int64", "int32", "table", "int32 transposed" }) do
            local out
            local what = string.format("%s with %d (%s)", op, bad, form)
            local msg = T.assert_error(function()
              out = run(form)
              qlua.sync()
            end, string.format(": index %d out of range (1..%d) at position %d", bad, bound, pos))
            assert.matches("^" .. op .. ": index", msg, nil, nil, what)
            -- the CUDA context is alive: a normal op right after works, and no stale
            -- error comes back at the next sync
            local a = qlua.rand(1000, { device = "gpu" })
            local want = a:cpu():sum() * 2
            T.assert_close((a * 2):sum(), want, 1e-5, what .. ": op after the error")
            assert.has_no.errors(function() qlua.sync() end)
            -- gather/take/index_select write 0 where the value was bad (docs/API.md)
            if out and (op == "gather" or op == "take") then
              local v = T.flatten(out:cpu():totable())
              assert.equal(0, v[pos], what .. ": output at the bad position")
            end
          end
        end
      end
    end)

    gtest("a bad index does not break later indexing ops", function()
      local src = qlua.rand(50, { device = "gpu" })
      pcall(function() local _ = src:gather({ 51 }); qlua.sync() end)
      local idx = T.random_index({ 30 }, 50)
      T.assert_equal(src:gather(idx):cpu(), src:cpu():gather(idx))
    end)
  end)

  --------------------------------------------------------------------- matmul

  describe("matmul", function()
    local function mm_parity(sa, sb, dtype, la, lb, tol)
      local a, b = T.random_table(sa, dtype), T.random_table(sb, dtype)
      parity(string.format("matmul %s %s(%s) @ %s(%s)", dtype, T.shape_str(sa), la, T.shape_str(sb), lb),
        function(dev) return T.make(a, dtype, la, dev):matmul(T.make(b, dtype, lb, dev)) end, tol or TOL[dtype])
    end

    gtest("every form and layout, float32 and float64", function()
      for _, dtype in ipairs(T.float_dtypes) do
        for _, la in ipairs(T.layouts) do
          for _, lb in ipairs(T.layouts) do
            mm_parity({ 13, 17 }, { 17, 9 }, dtype, la, lb)
          end
          mm_parity({ 33 }, { 33 }, dtype, la, "stepped")
          mm_parity({ 8, 33 }, { 33 }, dtype, la, "narrowed")
          mm_parity({ 33 }, { 33, 8 }, dtype, "transposed", la)
          mm_parity({ 3, 7, 5 }, { 3, 5, 4 }, dtype, la, T.layouts[math.random(1, 4)])
          mm_parity({ 1, 7, 5 }, { 3, 5, 4 }, dtype, la, "transposed")
          mm_parity({ 3, 7, 5 }, { 5, 4 }, dtype, la, "stepped")
          mm_parity({ 2, 1, 7, 5 }, { 3, 5, 4 }, dtype, la, "contiguous")
        end
      end
    end)

    -- Products past the small-matrix kernel's limits (128 per dim) go through cuBLAS:
    -- the same layouts again there, batched and broadcast too.
    gtest("every layout through cuBLAS (dims past 128), float32 and float64", function()
      for _, dtype in ipairs(T.float_dtypes) do
        for _, la in ipairs(T.layouts) do
          for _, lb in ipairs(T.layouts) do
            mm_parity({ 150, 131 }, { 131, 140 }, dtype, la, lb)
          end
          mm_parity({ 3, 150, 131 }, { 131, 129 }, dtype, la, "transposed")
          mm_parity({ 2, 140, 135 }, { 2, 135, 130 }, dtype, "stepped", la)
        end
      end
    end)

    gtest("512x512 float32: exact FP32 by default, TF32 within 3e-3 when allowed", function()
      local a, b = qlua.randn(512, 512), qlua.randn(512, 512)
      local c = a:matmul(b)
      local ga, gb = a:gpu(), b:gpu()
      compare(ga:matmul(gb), c, "fp32", 1e-5)
      compare(ga:t():matmul(gb:t()), a:t():matmul(b:t()), "fp32 transposed", 1e-5)
      qlua.set_tf32(true)
      local ok, err = pcall(function()
        compare(ga:matmul(gb), c, "tf32", 3e-3)
        compare(ga:t():matmul(gb), a:t():matmul(b), "tf32 transposed", 3e-3)
      end)
      qlua.set_tf32(false)
      assert(ok, err)
      compare(ga:matmul(gb), c, "fp32 again after set_tf32(false)", 1e-5)
      local d = qlua.randn({ 512, 512 }, { dtype = "float64" })
      compare(d:gpu():matmul(d:gpu()), d:matmul(d), "float64", 1e-12)
    end)

    gtest("errors as on the CPU", function()
      local g = qlua.zeros(2, 3, { device = "gpu" })
      T.assert_error(function() return g:matmul(qlua.zeros(4, 5, { device = "gpu" })) end, "matmul: shapes 2x3 and 4x5 do not match")
      T.assert_error(function() return qlua.ones(2, 2, { dtype = "int64", device = "gpu" }):matmul(qlua.ones(2, 2, { dtype = "int64", device = "gpu" })) end, "matmul")
      T.assert_error(function() return g:matmul(qlua.zeros(3, 2)) end, "matmul", "cpu", GPU)
    end)
  end)

  --------------------------------------------------------------------- memory

  describe("memory", function()
    gtest("memory() reports the GPU and follows allocations and frees", function()
      collectgarbage()
      local m0 = qlua.memory()
      for _, field in ipairs({ "allocated", "reserved", "peak", "total", "free" }) do
        assert.equal("integer", math.type(m0[field]), field)
      end
      assert.is_true(m0.total > 0)
      assert.is_true(m0.free > 0 and m0.free <= m0.total)
      assert.equal(m0.total, qlua.memory(GPU).total)
      local t = qlua.empty(16 * MiB, { device = "gpu" })   -- 64 MiB
      local m1 = qlua.memory()
      assert.is_true(m1.allocated - m0.allocated >= 64 * MiB, "allocated grew by " .. (m1.allocated - m0.allocated))
      assert.is_true(m1.reserved >= m1.allocated)
      assert.is_true(m1.peak >= m1.allocated)
      t:free()
      local m2 = qlua.memory()
      assert.is_true(m2.allocated <= m1.allocated - 64 * MiB)
      assert.is_true(m2.peak >= m1.allocated)
      assert.is_number(qlua.memory("cpu").allocated)
    end)

    gtest("empty_cache gives cached blocks back", function()
      local t = qlua.empty(64 * MiB, { device = "gpu" })   -- 256 MiB
      t:fill_(1)
      t:free()
      local r1 = qlua.memory().reserved
      qlua.empty_cache()
      local r2 = qlua.memory().reserved
      assert.is_true(r2 < r1, "reserved " .. r1 .. " -> " .. r2)
      assert.is_true(r1 - r2 >= 256 * MiB, "gave back " .. (r1 - r2))
    end)

    gtest("an allocation larger than the GPU raises an error with the bytes, and the process goes on", function()
      collectgarbage()
      local before = qlua.memory().allocated
      local msg = T.error_of(function() return qlua.empty({ 100000000000 }, { device = "gpu" }) end)  -- 400 GB
      assert.is_truthy(msg:find("400000000000", 1, true), msg)
      assert.is_truthy(msg:find("allocated", 1, true), msg)
      assert.is_truthy(msg:find("reserved", 1, true) or msg:find("cached", 1, true), msg)
      assert.equal(before, qlua.memory().allocated)
      local t = qlua.ones(1000, { device = "gpu" })
      assert.equal(1000, t:sum())
    end)

    gtest("out of memory collects garbage and empties the cache before giving up", function()
      collectgarbage()
      qlua.empty_cache()
      local free = qlua.memory().free
      local function drop_big()
        local a = qlua.empty(math.floor(free * 0.45 / 4), { device = "gpu" })
        a:narrow(1, 1, 1000):fill_(1)
      end
      collectgarbage("stop")   -- only the runtime may collect now
      local ok, res = pcall(function()
        drop_big()             -- 45% of the free memory, dropped without free
        local b = qlua.empty(math.floor(free * 0.7 / 4), { device = "gpu" })   -- fits only if that goes
        b:narrow(1, 1, 10):fill_(2)
        local s = b:narrow(1, 1, 10):sum()
        b:free()
        return s
      end)
      collectgarbage("restart")
      assert(ok, res)
      assert.equal(20, res)
    end)

    gtest("holding tensors until the GPU is full: a Lua error, then allocation works again", function()
      collectgarbage()
      qlua.empty_cache()
      local chunk = 2 * GiB
      local held, msg = {}, nil
      for _ = 1, 1000 do   -- 2 TB: more than any GPU, so this ends in an error
        local ok, t = pcall(qlua.empty, chunk // 4, { device = "gpu" })
        if not ok then msg = t; break end
        held[#held + 1] = t
      end
      assert.is_truthy(msg, "never ran out after " .. #held .. " chunks")
      assert.is_truthy(msg:find("out of memory", 1, true), msg)
      assert.is_truthy(msg:find(tostring(chunk), 1, true), msg)
      assert.is_true(#held >= 1)
      held = nil
      collectgarbage()
      local t = qlua.empty(chunk // 4, { device = "gpu" })
      t:narrow(1, 1, 8):fill_(3)
      assert.equal(24, t:narrow(1, 1, 8):sum())
      t:free()
      qlua.empty_cache()
    end)

    gtest("1000 dropped 1 GiB tensors: no out-of-memory, reserved stays bounded", function()
      collectgarbage()
      qlua.empty_cache()
      local most = 0
      for i = 1, 1000 do
        local t = qlua.empty(256 * MiB, { device = "gpu" })   -- 1 GiB of float32, never freed
        t:narrow(1, 1, 1024):fill_(i)
        most = math.max(most, qlua.memory().reserved)
      end
      assert.is_true(most < 8 * GiB, "reserved reached " .. most .. " bytes")
      collectgarbage()
    end)

    gtest("freed GPU tensors: the memory goes back at once, every use raises", function()
      collectgarbage()
      local g = qlua.rand(4 * MiB, { device = "gpu" })
      local v = g:narrow(1, 1, 10)
      local before = qlua.memory().allocated
      g:free()
      assert.is_true(qlua.memory().allocated <= before - 16 * MiB)
      for _, use in ipairs({
        { "sum", function() return g:sum() end },
        { "add", function() return g + 1 end },
        { "gather", function() return g:gather({ 1 }) end },
        { nil, function() return g:cpu() end },
        { "clone", function() return v:clone() end },
        { "narrow", function() return g:narrow(1, 1, 1) end },
      }) do
        local msg = T.assert_error(use[2], "tensor has been freed")
        if use[1] then assert.matches("^" .. use[1], msg) end
      end
      assert.has_no.errors(function() g:free(); v:free(); collectgarbage() end)
      local w
      do
        local t <close> = qlua.ones(8, { device = "gpu" })
        w = t
      end
      T.assert_error(function() return w:sum() end, "sum: tensor has been freed")
    end)

    gtest("mixing devices is an error naming both", function()
      local c, g = qlua.rand(3), qlua.rand(3, { device = "gpu" })
      T.assert_error(function() return c + g end, "add: tensors on cpu and " .. GPU)
      T.assert_error(function() return g + c end, "add: tensors on " .. GPU .. " and cpu")
      T.assert_error(function() return g:mul(c) end, "mul: tensors on " .. GPU .. " and cpu")
      T.assert_error(function() return c:maximum(g) end, "maximum", "cpu", GPU)
      T.assert_error(function() return g:add_(c) end, "add_", "cpu", GPU)
      -- the tensors are fine afterwards
      T.assert_close((g + 1):cpu(), (g:cpu() + 1), 1e-7)
    end)
  end)
end)
