-- samples/extension/gather.lua — the seed's Gather through a C extension: gather_ext.so
-- (samples/extension/, built by `make extension`) runs its own CUDA kernel on qlua's
-- stream; its results are checked against qlua's built-in gather and index_select, on
-- int32 and int64 indices and float32/float64 sources, its errors shown, and both timed.
--   qlua samples/extension/gather.lua [dir of gather_ext.so] [source_elements] [index_elements]
-- The directory defaults to build/extension. Without a GPU it says so and exits (status 0).

local dir = arg[1] or "build/extension"
local n = math.tointeger(tonumber(arg[2]) or 16 * 1024 * 1024)
local k = math.tointeger(tonumber(arg[3]) or 1024 * 1024)

if qlua.gpu_count() == 0 then
  print("gather_ext: no GPU here (qlua.gpu_count() is 0); the extension runs on GPU tensors only")
  return
end

package.cpath = dir .. "/?.so;" .. package.cpath
local found, ext = pcall(require, "gather_ext")
if not found then
  error("cannot load gather_ext from " .. dir .. " (run `make extension`): " .. tostring(ext), 0)
end

qlua.seed(1)
for _, dtype in ipairs({ "float32", "float64" }) do
  local src = qlua.rand(n, { dtype = dtype, device = "gpu" })
  for _, itype in ipairs({ "int32", "int64" }) do
    local index = qlua.randint(1, n, k, { dtype = itype, device = "gpu" })
    local out = ext.gather(src, index)
    assert(out:dtype() == dtype and out:device() == src:device() and out:numel() == k)
    local d1 = (out - src:gather(index)):abs():max()
    local d2 = (out - src:index_select(1, index)):abs():max()
    assert(d1 == 0 and d2 == 0, ("gather_ext differs from the built-in ops (%g, %g)"):format(d1, d2))
    print(("gather_ext matches gather and index_select: %d %s indices from %d %s"):format(
      k, itype, n, dtype))
  end
end

-- strided views work as they are: every other element of a source, a reversed index
local src = qlua.range(1, 20, { device = "gpu" }):to("float32")
local view = src:view(10, 2):select(2, 1)              -- 1, 3, 5, ... stride 2
local index = qlua.tensor({ 10, 1, 5 }, { dtype = "int32", device = "gpu" })
print("gather_ext on a strided view:", ext.gather(view, index))

-- errors name the function and the values; the process and the GPU carry on
for _, case in ipairs({
  { "a CPU source", function() return ext.gather(qlua.ones(4), index) end },
  { "a float index", function() return ext.gather(view, index:to("float32")) end },
  { "an index past the end", function()
      return ext.gather(view, qlua.tensor({ 1, 11, 2 }, { dtype = "int64", device = "gpu" }))
    end },
}) do
  local ok, err = pcall(case[2])
  assert(not ok, case[1] .. " was accepted")
  print(("error for %s: %s"):format(case[1], err))
end

-- timing: the extension waits for its kernel on every call (it checks the indices right
-- away), the built-in gather does not (a bad index is reported at the next sync)
local big = qlua.rand(n, { device = "gpu" })
local idx = qlua.randint(1, n, k, { dtype = "int32", device = "gpu" })
local e = qlua.bench(function() return ext.gather(big, idx) end, { calls = 20, runs = 11 })
local b = qlua.bench(function() return big:gather(idx) end, { calls = 20, runs = 11 })
print(("gather of %d from %d float32: gather_ext %.4f ms per call, built-in gather %.4f ms"):format(
  k, n, e.median * 1e3, b.median * 1e3))
print("gather_ext done")
