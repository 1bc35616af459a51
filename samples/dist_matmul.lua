-- samples/dist_matmul.lua — one large product split over the ranks of a job.
--
--   qlua --nproc 2 samples/dist_matmul.lua [n]     (a rank per GPU; CPU ranks without GPUs)
--
-- Every rank makes the same A and B (one seed), multiplies its block of A's rows by B, and
-- all_gather puts C together on every rank. Rank 0 then checks C against the product made
-- on one rank alone and prints both times and the speed-up. On CPU ranks each rank gets
-- its share of the cores, so the split competes fairly with one rank using them all.
local dist = require "qlua.dist"
dist.init_process_group()
local rank, world = dist.get_rank(), dist.get_world_size()
local gpus = qlua.gpu_count()
local dev = gpus >= world and "gpu:" .. dist.get_local_rank() or "cpu"
local n = tonumber(arg[1]) or (dev == "cpu" and 768 or 8192)
n = math.max(world, n // world * world)              -- rows split evenly
local threads = qlua.get_num_threads()
if dev == "cpu" then qlua.set_num_threads(math.max(1, threads // world)) end
local dtype = dev == "cpu" and "float64" or "float32"

qlua.seed(2024)
local A = qlua.randn({ n, n }, { device = dev, dtype = dtype })
local B = qlua.randn({ n, n }, { device = dev, dtype = dtype })
local rows = n // world
local mine = A:narrow(1, rank * rows + 1, rows)
local C = qlua.empty({ n, n }, { device = dev, dtype = dtype })

local function split()
  local part = mine:matmul(B)
  dist.all_gather_into_tensor(C, part)
  qlua.sync(dev)
end
split()                                               -- warm-up: NCCL's and cuBLAS's setup
dist.barrier()
local t_split = qlua.bench(split, { calls = 1, runs = 3, warmup = 1 }).median

-- rank 0 alone, with every core, for the comparison
local t_one, err
if dev == "cpu" then qlua.set_num_threads(threads) end
if rank == 0 then
  local full
  t_one = qlua.bench(function() full = A:matmul(B); qlua.sync(dev) end, { calls = 1, runs = 3, warmup = 1 }).median
  err = (C - full):abs():max() / full:abs():max()
end
dist.barrier()
if rank == 0 then
  local flop = 2 * n ^ 3
  print(("%d x %d x %d %s on %d rank%s (%s): split %.2f ms (%.0f GFLOP/s), one rank %.2f ms, speed-up %.2fx, max relative error %.1e")
        :format(n, n, n, dtype, world, world > 1 and "s" or "", dev == "cpu" and "CPU" or "GPUs",
                t_split * 1e3, flop / t_split / 1e9, t_one * 1e3, t_one / t_split, err))
  assert(err < (dtype == "float64" and 1e-12 or 1e-4), "the gathered product differs")
end
dist.destroy_process_group()
