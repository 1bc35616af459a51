-- soak.lua — memory under load: for `seconds` (default 300), allocate, gather, multiply,
-- free and drop tensors of random sizes (up to `max_gib` GiB each, default 4), then check
-- that reserved device memory stayed bounded (its peak over the last third of the run is
-- no higher than over the first two thirds plus two largest tensors: it does not creep up;
-- checked on a GPU, when each part has 20 samples or more) and allocated memory came back
-- to where it started. (On the CPU "reserved" is what is allocated, garbage not yet
-- collected included, so its peaks follow the collector's timing: no creep check there.)
--   qlua samples/soak.lua [seconds] [max_gib]
-- Without a GPU it runs on the CPU with small sizes (a smoke test of the same loop).

local seconds = tonumber(arg[1]) or 300
local max_gib = tonumber(arg[2]) or 4
local gpu = qlua.gpu_count() > 0
local device = gpu and "gpu" or "cpu"
local max_elems = gpu and math.floor(max_gib * 2 ^ 30 / 4) or 1 << 20

local function mem() return qlua.memory(device) end
local start = mem()
local peak_reserved, iterations, dropped, freed = 0, 0, 0, 0
local peak_early, peak_late = 0, 0   -- peak reserved in the first two thirds / last third
local samples_early, samples_late = 0, 0
local rng = math.random
math.randomseed(12345)

local t_start = qlua.clock()
local t_end = t_start + seconds
local t_late = t_start + seconds * 2 / 3
while qlua.clock() < t_end do
  iterations = iterations + 1
  -- a big tensor of random size, sometimes freed, sometimes just dropped
  local n = rng(1, max_elems)
  local big = qlua.empty(n, {device = device})
  big:fill_(1)
  local idx = qlua.randint(1, n, math.min(n, 1 << 20), {dtype = "int32", device = device})
  local g = big:gather(idx)
  assert(g:numel() == idx:numel())
  if rng() < 0.5 then big:free(); freed = freed + 1 else dropped = dropped + 1 end
  -- a product of random size
  local m = rng(1, 512)
  local a = qlua.rand(m, m, {device = device})
  local p = a:matmul(a)
  assert(p:size(1) == m)
  if iterations % 10 == 0 then
    qlua.sync()
    local r = mem().reserved
    if r > peak_reserved then peak_reserved = r end
    if qlua.clock() < t_late then
      peak_early, samples_early = math.max(peak_early, r), samples_early + 1
    else
      peak_late, samples_late = math.max(peak_late, r), samples_late + 1
    end
  end
end
collectgarbage(); collectgarbage()
qlua.sync()
local final = mem()
print(("soak on %s: %d iterations in %g s (%d freed, %d dropped)"):format(
  device, iterations, seconds, freed, dropped))
print(("allocated at start %d, at end %d; peak reserved %.2f GiB; reserved at end %.2f GiB; peak allocated %.2f GiB"):format(
  start.allocated, final.allocated, peak_reserved / 2 ^ 30, final.reserved / 2 ^ 30, final.peak / 2 ^ 30))
print(("peak reserved over the first two thirds %.2f GiB (%d samples), over the last third %.2f GiB (%d samples)"):format(
  peak_early / 2 ^ 30, samples_early, peak_late / 2 ^ 30, samples_late))
assert(final.allocated == start.allocated, "allocated memory did not come back to its starting value")
if not gpu then
  print("(no creep check on the CPU: reserved there is allocated memory, garbage included)")
elseif samples_early >= 20 and samples_late >= 20 then
  assert(peak_late <= peak_early + 2 * max_elems * 4,
    "reserved memory crept up: the last third's peak exceeds the first two thirds' by more than two largest tensors")
else
  print("(too few samples to compare the thirds: run longer)")
end
print("soak ok")
