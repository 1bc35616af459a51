-- soak.lua — memory under load: for `seconds` (default 300), allocate, gather, multiply,
-- free and drop tensors of random sizes (up to `max_gib` GiB each, default 4), then check
--   * that reserved device memory stayed within 2x the peak of allocated memory: the
--     highest `reserved` seen (read after every allocation, the only moment it can grow)
--     against qlua.memory().peak, both over the whole run ("reserved/peak allocated
--     ratio"); reserved up to 256 MiB always passes, the allocator's fixed cache floor;
--   * that it does not creep up: its peak over the last third of the run is no higher than
--     over the first two thirds plus two largest tensors (when each part has 20 samples);
--   * that allocated memory came back to where it started.
-- Both reserved checks run on a GPU only: on the CPU "reserved" is what is allocated,
-- garbage not yet collected included, so its peaks follow the collector's timing.
--   qlua samples/soak.lua [seconds] [max_gib]
-- Without a GPU it runs on the CPU with small sizes (a smoke test of the same loop).
--
-- Each iteration makes what a program's step makes: a big tensor of random size that is
-- freed or just dropped (then the collector, driven by device bytes, gets it), an index of
-- random length and the gather through it, a small matrix product; and now and then one
-- of four long-lived tensors (up to a quarter of the largest size, living ~16 iterations,
-- like weights or caches that outlive the step) is replaced. Lifetimes that interleave are
-- what fragments a caching allocator, so the working set is part of the load.

local seconds = tonumber(arg[1]) or 300
local max_gib = tonumber(arg[2]) or 4
local gpu = qlua.gpu_count() > 0
local device = gpu and "gpu" or "cpu"
local max_elems = gpu and math.floor(max_gib * 2 ^ 30 / 4) or 1 << 20
local CACHE_FLOOR = 256 * 2 ^ 20   -- kernels/cuda_device.cu, CUDA_CACHE_FLOOR
local KEEP = 4                     -- long-lived tensors

local function mem() return qlua.memory(device) end
local function fail(msg)
  io.stderr:write("soak FAILED: ", msg, "\n")
  os.exit(1)
end

local start = mem()
local max_reserved, iterations, dropped, freed, replaced = start.reserved, 0, 0, 0, 0
local peak_early, peak_late = 0, 0   -- peak reserved in the first two thirds / last third
local samples_early, samples_late = 0, 0
local rng = math.random
math.randomseed(12345)

local t_start = qlua.clock()
local t_end = t_start + seconds
local t_late = t_start + seconds * 2 / 3
local late = false

-- After every allocation: reserved memory grows only inside one.
local function note()
  local r = mem().reserved
  if r > max_reserved then max_reserved = r end
  if late then peak_late = math.max(peak_late, r) else peak_early = math.max(peak_early, r) end
end

local function release(t)
  if rng() < 0.5 then t:free(); freed = freed + 1 else dropped = dropped + 1 end
end

local keep = {}
while qlua.clock() < t_end do
  iterations = iterations + 1
  late = qlua.clock() >= t_late
  -- a big tensor of random size, sometimes freed, sometimes just dropped
  local n = rng(1, max_elems)
  local big = qlua.empty(n, {device = device}); note()
  big:fill_(1)
  local idx = qlua.randint(1, n, rng(1, math.min(n, 1 << 20)), {dtype = "int32", device = device})
  note()
  local g = big:gather(idx); note()
  assert(g:numel() == idx:numel())
  release(big)
  -- a product of random size
  local m = rng(1, 512)
  local a = qlua.rand(m, m, {device = device}); note()
  local p = a:matmul(a); note()
  assert(p:size(1) == m)
  -- now and then, a long-lived tensor replaced
  if rng() < 0.25 then
    local slot = rng(1, KEEP)
    if keep[slot] then release(keep[slot]) end
    keep[slot] = qlua.empty(rng(1, math.max(1, max_elems // KEEP)), {device = device}); note()
    keep[slot]:fill_(2)
    replaced = replaced + 1
  end
  if iterations % 10 == 0 then
    qlua.sync()
    if late then samples_late = samples_late + 1 else samples_early = samples_early + 1 end
  end
end
keep = nil
collectgarbage(); collectgarbage()
qlua.sync()
local final = mem()
print(("soak on %s: %d iterations in %g s (%d freed, %d dropped, %d long-lived replaced)"):format(
  device, iterations, seconds, freed, dropped, replaced))
print(("allocated at start %d, at end %d; peak reserved %.2f GiB; reserved at end %.2f GiB; peak allocated %.2f GiB"):format(
  start.allocated, final.allocated, max_reserved / 2 ^ 30, final.reserved / 2 ^ 30, final.peak / 2 ^ 30))
print(("peak reserved over the first two thirds %.2f GiB (%d samples), over the last third %.2f GiB (%d samples)"):format(
  peak_early / 2 ^ 30, samples_early, peak_late / 2 ^ 30, samples_late))
local ratio = final.peak > 0 and max_reserved / final.peak or 0
print(("reserved/peak allocated ratio %.2f"):format(ratio))
if final.allocated ~= start.allocated then
  fail(("allocated memory did not come back to its starting value (%d at start, %d at end)"):format(
    start.allocated, final.allocated))
end
if not gpu then
  print("(no reserved checks on the CPU: reserved there is allocated memory, garbage included)")
else
  if max_reserved > 2 * final.peak and max_reserved > CACHE_FLOOR then
    fail(("reserved memory reached %.2f GiB, %.2fx the peak allocated %.2f GiB (at most 2x)"):format(
      max_reserved / 2 ^ 30, ratio, final.peak / 2 ^ 30))
  end
  if samples_early >= 20 and samples_late >= 20 then
    if peak_late > peak_early + 2 * max_elems * 4 then
      fail(("reserved memory crept up: the last third's peak %.2f GiB exceeds the first two "
        .. "thirds' %.2f GiB by more than two largest tensors"):format(peak_late / 2 ^ 30, peak_early / 2 ^ 30))
    end
  else
    print("(too few samples to compare the thirds: run longer)")
  end
end
print("soak ok")
