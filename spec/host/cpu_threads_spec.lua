-- spec/host/cpu_threads_spec.lua — the CPU device's thread pool, block cache, vector builds and
-- BLAS: qlua.set_num_threads / get_num_threads / cpu_info, results that do not
-- depend on the number of threads for every op family the pool runs (bit for bit: the
-- pieces a reduction is folded in never depend on it), the cache's accounting, and
-- QLUA_NUM_THREADS / QLUA_CPU_CACHE in fresh processes.
local T = require("qlua.testing")

local QLUA = os.getenv("QLUA") or "build/qlua"

-- Runs a qlua child with the environment prefix env and the chunk code; its stdout.
local function child(env, code)
  local script = os.tmpname()
  local f = assert(io.open(script, "w"))
  f:write(code)
  f:close()
  local p = assert(io.popen(env .. " " .. QLUA .. " " .. script .. " 2>&1"))
  local out = p:read("a")
  local ok, _, status = p:close()
  os.remove(script)
  return out, ok and 0 or status
end

-- The bytes of every tensor in the list, through .npy files: an exact fingerprint.
local function bytes_of(list)
  local parts = {}
  local path = os.tmpname()
  for i, t in ipairs(list) do
    if type(t) == "userdata" then
      -- bfloat16 has no .npy code: its float32 widening is exact (bits << 16)
      if t:dtype() == "bfloat16" then t = t:to("float32") end
      qlua.save(path, t:cpu():contiguous())
      local f = assert(io.open(path, "rb"))
      parts[i] = f:read("a")
      f:close()
    else
      parts[i] = string.format("%.17g", t)
    end
  end
  os.remove(path)
  return parts
end

-- Runs fn under 1, 2, 3 and 8 threads and asserts the results are the same bytes.
local function same_for_threads(what, fn)
  local saved = qlua.get_num_threads()
  local ref
  for _, n in ipairs({ 1, 2, 3, 8 }) do
    qlua.set_num_threads(n)
    local got = bytes_of(fn())
    if ref == nil then
      ref = got
    else
      assert.equal(#ref, #got, what)
      for i = 1, #ref do
        assert(ref[i] == got[i], ("%s: result %d differs between 1 and %d threads"):format(what, i, n))
      end
    end
  end
  qlua.set_num_threads(saved)
end

describe("the CPU thread pool", function()
  -- large enough for the pool (pieces of 32Ki elements, reductions of 64Ki), odd sizes so
  -- that pieces cut rows
  local a, b, v, idx, idx2, wide
  setup(function()
    qlua.seed(21)
    a = qlua.randn(700, 531)
    b = qlua.randn(700, 531)
    v = qlua.randn(531)
    idx = qlua.randint(1, 700, 900, { dtype = "int64" })
    idx2 = qlua.randint(1, 531, { 700, 200 }, { dtype = "int64" })
    wide = qlua.randn(3, 70001)
  end)

  it("set_num_threads and get_num_threads, with errors naming the op", function()
    local saved = qlua.get_num_threads()
    assert.is_true(saved >= 1)
    qlua.set_num_threads(3)
    assert.equal(3, qlua.get_num_threads())
    assert.equal(3, qlua.cpu_info().threads)
    qlua.set_num_threads(saved)
    T.assert_error(function() qlua.set_num_threads(0) end, "set_num_threads", "0 threads")
    T.assert_error(function() qlua.set_num_threads(257) end, "set_num_threads", "257")
    T.assert_error(function() qlua.set_num_threads("x") end, "set_num_threads")
    local info = qlua.cpu_info()
    assert.is_truthy(({ avx512 = true, avx2 = true, generic = true })[info.simd], info.simd)
  end)

  it("elementwise ops, copies and conversions give the same bits on any number of threads", function()
    same_for_threads("elementwise", function()
      local t = a:t()  -- strided
      return {
        a + b, a * v, a:exp(), t:sin(), a:sigmoid(), a:gt(b), a:maximum(t:t()), a % 0.7,
        t:contiguous(), a:to("float64"), t:to("int32"), a:to("float16"), a:to("bfloat16"),
        a:to("float16"):to("float32"), (a:to("bfloat16") + b:to("bfloat16")),
        qlua.full({ 700, 531 }, 2.5), a:clone():fill_(-1), qlua.where(a:gt(0), a, b),
        a:clamp(-0.5, 0.5), a:abs():sqrt(),
      }
    end)
  end)

  it("gathers and index ops give the same bits on any number of threads", function()
    same_for_threads("index", function()
      return {
        a:index_select(1, idx), a:gather(2, idx2),
        a:take(qlua.tensor({ 1, 5, 371700, 9 })), a:t():index_select(2, idx),
      }
    end)
  end)

  it("a bad index is named by its first position, on any number of threads", function()
    local saved = qlua.get_num_threads()
    local src = qlua.randn(1000)
    for _, dtype in ipairs({ "int64", "int32" }) do
      local big = qlua.randint(1, 1000, 300001, { dtype = dtype })
      big[250001] = 1001                -- in a late piece
      big[299999] = 0                   -- a later bad one, in another piece
      local strided = qlua.randint(1, 1000, { 300001, 2 }, { dtype = dtype }):select(2, 2)
      strided[200000] = -3
      for _, n in ipairs({ 1, 3, 8 }) do
        qlua.set_num_threads(n)
        T.assert_error(function() return src:gather(big) end,
          "gather: index 1001 out of range (1..1000) at position 250001")
        T.assert_error(function() return src:index_select(1, strided) end,
          "index_select: index -3 out of range (1..1000) at position 200000")
        T.assert_error(function() return src:take(big:narrow(1, 250002, 50000)) end,
          "take: index 0 out of range (1..1000) at position 49998")
      end
    end
    -- the extremes of int64 (the check subtracts 1 without overflowing: UBSan watches)
    local ext = qlua.randint(1, 1000, 70000)
    ext[5] = math.mininteger
    ext[9] = math.maxinteger
    for _, n in ipairs({ 1, 8 }) do
      qlua.set_num_threads(n)
      T.assert_error(function() return src:gather(ext) end,
        ("gather: index %d out of range (1..1000) at position 5"):format(math.mininteger))
      T.assert_error(function() return qlua.zeros(1000):scatter_add_(1, ext:narrow(1, 6, 60000), qlua.ones(60000)) end,
        ("scatter_add_: index %d out of range (1..1000) at position 4"):format(math.maxinteger))
    end
    qlua.set_num_threads(saved)
  end)

  it("index_select of whole slices, many per thread, matches plain Lua", function()
    local saved = qlua.get_num_threads()
    local x = qlua.randn(6, 50, 40)                       -- slices of 40 floats (160 bytes)
    local k = qlua.randint(1, 50, 3000)
    local xs, ks = x:totable(), k:totable()
    for _, n in ipairs({ 1, 8 }) do
      qlua.set_num_threads(n)
      local r = x:index_select(2, k)
      T.assert_shape(r, { 6, 3000, 40 })
      local rs = r:totable()
      for o = 1, 6 do
        for q = 1, 3000, 7 do
          for j = 1, 40, 13 do
            assert(rs[o][q][j] == xs[o][ks[q]][j], ("index_select slice (%d, %d)"):format(o, q))
          end
        end
      end
    end
    qlua.set_num_threads(saved)
  end)

  it("reductions along a dim of a wide matrix are cut into narrow column blocks", function()
    local saved = qlua.get_num_threads()
    local m = qlua.randn(40, 4096, { dtype = "float64" })
    local rows = m:totable()
    same_for_threads("wide dim reductions", function()
      return { m:sum(1), m:sum(2), m:max(1), m:argmin(1), m:t():sum(2), m:var(1) }
    end)
    qlua.set_num_threads(8)
    local s1 = m:sum(1):totable()
    for j = 1, 4096, 97 do
      local want = 0
      for i = 1, 40 do want = want + rows[i][j] end
      assert(math.abs(s1[j] - want) <= 1e-12 * 40, "sum(1) column " .. j)
    end
    qlua.set_num_threads(saved)
  end)

  it("reductions give the same bits on any number of threads", function()
    same_for_threads("reductions", function()
      local r = {}
      for _, op in ipairs({ "sum", "mean", "max", "min", "argmax", "argmin", "prod", "var", "std" }) do
        r[#r + 1] = a[op](a)
        r[#r + 1] = a[op](a, 1)
        r[#r + 1] = a[op](a, 2)
        r[#r + 1] = a:t()[op](a:t(), 1)
        r[#r + 1] = wide[op](wide, 2)
        r[#r + 1] = wide[op](wide)
      end
      r[#r + 1] = a:norm(3, 1)
      r[#r + 1] = a:logsumexp(2)
      r[#r + 1] = a:to("float16"):sum()
      r[#r + 1] = a:to("int32"):sum(1)
      return r
    end)
  end)

  -- the float32 runs have SSE2 and AVX-512 code of their own (rows of 64 and up take the
  -- vector loops): against plain Lua, with ties, NaNs and signed zeros placed anywhere
  it("max, min, argmax and argmin of long float32 rows match a plain-Lua reference", function()
    local rows, n = 12, 1000
    local data = {}
    for r = 1, rows do
      local row = {}
      for j = 1, n do row[j] = ((j * 7919 + r * 104729) % 997) / 4 - 120 end  -- many ties
      data[r] = row
    end
    data[2][700] = 0 / 0; data[2][301] = 0 / 0        -- NaNs: the first one wins
    data[3][999] = 0 / 0
    for j = 1, n do data[4][j] = 0.0 end              -- zeros of both signs
    data[4][5] = -0.0; data[4][900] = 1e-30
    for j = 1, n do data[5][j] = 5 end; data[5][n] = 6  -- the best in the tail
    data[6][1] = 1e9                                   -- the best first
    local x = qlua.tensor(data)
    data = x:totable()  -- the float32 values the reference must see
    for r = 1, rows do
      local row = data[r]
      local mx, mn, amx, amn, nan_at = row[1], row[1], 1, 1, nil
      for j = 1, n do
        local v = row[j]
        if v ~= v then nan_at = nan_at or j end
        if v > mx then mx, amx = v, j end
        if v < mn then mn, amn = v, j end
      end
      local vmax, imax = x[r]:max(1)
      local vmin, imin = x[r]:min(1)
      if nan_at then
        assert.is_true(vmax:item() ~= vmax:item(), "row " .. r .. ": max is not NaN")
        assert.equal(nan_at, imax:item(), "row " .. r .. ": argmax of the first NaN")
        assert.equal(nan_at, x[r]:argmin(1):item(), "row " .. r .. ": argmin of the first NaN")
      else
        assert.equal(mx, vmax:item(), "row " .. r .. ": max")
        assert.equal(amx, imax:item(), "row " .. r .. ": argmax (first of the ties)")
        assert.equal(mn, vmin:item(), "row " .. r .. ": min")
        assert.equal(amn, imin:item(), "row " .. r .. ": argmin (first of the ties)")
        assert.equal(mx, x[r]:max(), "row " .. r .. ": full max")
        assert.equal(amx, x[r]:argmax(), "row " .. r .. ": full argmax")
      end
    end
    local vs, is = x:max(2)
    for r = 1, rows do assert.equal(x[r]:argmax(1):item(), is[r]) end
    assert.equal(12, #vs)
  end)

  it("the SSE2 and AVX-512 reductions give the same results (QLUA_CPU_ISA)", function()
    local code = [[
qlua.seed(9)
local x = qlua.randn(50, 777):to("float16"):to("float32")  -- coarse values: many ties
x[{7, 100}] = 0 / 0
local out = {}
for _, op in ipairs({ "max", "min", "argmax", "argmin", "sum" }) do
  for d = 1, 2 do
    local r = x[op](x, d)
    for _, v in ipairs(r:to("float64"):totable()) do out[#out + 1] = string.format("%.9g", v) end
  end
  out[#out + 1] = string.format("%.9g", x[op](x))
end
print(table.concat(out, " "))]]
    local generic = child("QLUA_CPU_ISA=generic", code)
    local best = child("", code)
    assert.is_truthy(#generic > 1000, generic)
    assert.equal(generic, best)
  end)

  it("a full sum over many pieces matches a float64 reference", function()
    local n = 1000003
    local x = qlua.rand(n, { dtype = "float64" })
    local ref = 0
    for _, e in ipairs(x:totable()) do ref = ref + e end
    for _, threads in ipairs({ 1, 4 }) do
      qlua.set_num_threads(threads)
      assert.is_true(math.abs(x:sum() - ref) <= 1e-9 * math.abs(ref))
      local m, i = x:max(), x:argmax()
      assert.equal(m, x[i])
    end
    qlua.set_num_threads(2)
  end)

  it("random fills give the same numbers on any number of threads", function()
    same_for_threads("random", function()
      qlua.seed(5)
      local u = qlua.rand(200000)
      local nrm = qlua.randn(200000, { dtype = "float64" })
      local ints = qlua.randint(-5, 5000, 200000, { dtype = "int32" })
      return { u, nrm, ints, qlua.rand(100001, { dtype = "float16" }) }
    end)
  end)

  -- OpenBLAS's pool follows set_num_threads, and its kernels for one thread and for
  -- several may sum a product's terms in other orders: the last bits may differ (as in
  -- NumPy and PyTorch), so products are compared with a tolerance.
  it("matmul on any number of threads agrees within rounding", function()
    local saved = qlua.get_num_threads()
    local ref64 = a:to("float64"):matmul(b:t():to("float64"))
    for _, n in ipairs({ 1, 2, 5 }) do
      qlua.set_num_threads(n)
      local c = a:matmul(b:t())
      local err = ((c:to("float64") - ref64):abs():max()) / ref64:abs():max()
      assert.is_true(err < 1e-5, ("matmul on %d threads: relative error %g"):format(n, err))
    end
    qlua.set_num_threads(saved)
  end)

  it("QLUA_NUM_THREADS sets the pool's size in a fresh process", function()
    local out = child("QLUA_NUM_THREADS=3", "print(qlua.get_num_threads())")
    assert.equal("3", out:match("^(%d+)"), out)
    out = child("QLUA_NUM_THREADS=1", [[
local x = qlua.randn(500, 500)
print(qlua.get_num_threads(), (x + x):sum() == 2 * x:sum())]])
    assert.is_truthy(out:find("^1%s+true"), out)
  end)
end)

describe("the CPU block cache", function()
  it("keeps freed blocks as reserved, not allocated, and empty_cache gives them back", function()
    collectgarbage()
    qlua.empty_cache()
    local before = qlua.memory("cpu")
    local t = qlua.empty(1 << 20)   -- 4 MiB
    local during = qlua.memory("cpu")
    assert.is_true(during.allocated >= before.allocated + 4 * (1 << 20))
    t:free()
    local after = qlua.memory("cpu")
    assert.equal(before.allocated, after.allocated)
    assert.is_true(after.reserved >= after.allocated)
    -- the next block of that class comes from the cache: reserved does not grow
    local u = qlua.empty(1 << 20)
    local again = qlua.memory("cpu")
    assert.is_true(again.reserved <= after.reserved + 4 * (1 << 20) + 4096)
    u:free()
    qlua.empty_cache()
    local emptied = qlua.memory("cpu")
    assert.equal(emptied.allocated, emptied.reserved)
  end)

  it("QLUA_CPU_CACHE=0 turns it off; a reused block holds what is written to it", function()
    local out = child("QLUA_CPU_CACHE=0", [[
local t = qlua.empty(1 << 20); t:free()
local m = qlua.memory("cpu")
print(m.allocated == m.reserved)]])
    assert.is_truthy(out:find("^true"), out)
    for k = 1, 3 do
      local x = qlua.full({ 1 << 18 }, k)
      assert.equal(k * (1 << 18), x:sum())
      x:free()
    end
  end)
end)
