-- fused_elementwise.lua — one elementwise kernel instead of several built-in ops:
-- qlua.elementwise fuses w = x * y + z into one pass over memory, where the built-in
-- ops `x * y + z` take two (a multiply into a temporary, then an add). Checked against
-- the built-in ops and timed next to them.
--   qlua samples/fused_elementwise.lua [elements]   (float32, default 16Mi)
-- Needs a GPU; without one it says so and exits.

if qlua.gpu_count() == 0 then
  print("fused_elementwise: needs a GPU (qlua.gpu_count() == 0 here); nothing to run")
  return
end

local n = math.tointeger(tonumber(arg[1]) or 16 * 1024 * 1024)
assert(n and n > 0, "usage: qlua samples/fused_elementwise.lua [elements]")

-- T is generic: the kernel is compiled for each dtype it meets, on first use.
local fused = qlua.elementwise("T x, T y, T z", "T w", "w = x * y + z", "fused_mul_add")

qlua.seed(2)
local x = qlua.rand(n, {device = "gpu"})
local y = qlua.rand(n, {device = "gpu"})
local z = qlua.rand(n, {device = "gpu"})

-- Checked against the built-in ops. NVRTC may contract x * y + z into one fused
-- multiply-add, rounded once instead of twice, so results may differ in the last bit.
local got, want = fused(x, y, z), x * y + z
local diff = (got - want):abs():max()
assert(diff <= 1e-6, "the fused kernel differs from x * y + z by " .. diff)
print(("%d float32: fused_mul_add(x, y, z) equals x * y + z (largest difference %.1g)"):format(n, diff))
got:free(); want:free()

-- Each result (and the built-in ops' temporary) is freed in the call, so both sides pay
-- for their allocations and nothing piles up between batches.
local function fused_call() fused(x, y, z):free() end
local function builtin_call()
  local xy = x * y
  local w = xy + z
  xy:free(); w:free()
end
local t_fused = qlua.bench(fused_call, {calls = 20, runs = 9}).median
local t_builtin = qlua.bench(builtin_call, {calls = 20, runs = 9}).median
-- bytes moved: fused reads x, y, z and writes w; the built-ins read 4 and write 2 arrays
local gb = function(arrays, t) return arrays * 4 * n / t / 1e9 end
print(("fused kernel:    %8.3f ms  (%6.0f GB/s, one pass)"):format(t_fused * 1e3, gb(4, t_fused)))
print(("x * y + z ops:   %8.3f ms  (%6.0f GB/s, two passes)"):format(t_builtin * 1e3, gb(6, t_builtin)))
print(("speed-up of the fused kernel: %.2fx"):format(t_builtin / t_fused))
