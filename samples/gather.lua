-- gather.lua — the seeds' case: gather 1Mi random indices from a 128Mi-element float32
-- tensor on the GPU, check the result against the CPU, and time it.
--   qlua samples/gather.lua [source_elements] [index_elements]
-- Without a GPU it runs the same gather on the CPU only (with smaller defaults).

local has_gpu = qlua.gpu_count() > 0
local n = tonumber(arg[1]) or (has_gpu and 128 * 1024 * 1024 or 16 * 1024 * 1024)
local k = tonumber(arg[2]) or 1024 * 1024
n, k = math.tointeger(n), math.tointeger(k)

qlua.seed(1)
local source = qlua.rand(n)                                   -- float32 on the CPU
local index = qlua.randint(1, n, k, {dtype = "int32"})
local expected = source:gather(index)                         -- the CPU reference

local function time_it(fn, runs)
  fn(); qlua.sync()                                           -- warm up
  local times = {}
  for r = 1, runs do
    local t0 = qlua.clock()
    fn(); qlua.sync()
    times[r] = qlua.clock() - t0
  end
  table.sort(times)
  return times[(runs + 1) // 2]
end

if not has_gpu then
  local t = time_it(function() return source:gather(index) end, 11)
  print(("cpu gather: %d indices from %d float32: %.3f ms (no GPU here)"):format(k, n, t * 1e3))
  return
end

local gsource, gindex = source:gpu(), index:gpu()
local result = gsource:gather(gindex)
local diff = (result:cpu() - expected):abs():max()
assert(diff == 0, "gather on the GPU differs from the CPU by " .. diff)
print(("gpu gather matches the cpu (%d indices from %d float32)"):format(k, n))

-- Many calls in a row, then one sync: what a script doing real work sees per call.
local runs = 200
local t0 = qlua.clock()
for _ = 1, runs do local _ = gsource:gather(gindex) end
qlua.sync()
local per_call = (qlua.clock() - t0) / runs
print(("gpu gather: %.4f ms per call (%d calls, one sync)"):format(per_call * 1e3, runs))
print(("            %.4f ms for one call with its sync"):format(
  time_it(function() return gsource:gather(gindex) end, 51) * 1e3))
