-- bench/dist.lua — issue 28's targets, on a machine with two GPUs or more (elsewhere it says
-- so and measures nothing), against PyTorch in the same run (bench/torch_dist.py):
--   all_reduce_256m  all_reduce of 256 MiB float32 over every GPU (a rank each, qlua --nproc),
--                    as bus bandwidth 2 (n - 1) / n x bytes / time: >= 0.95x PyTorch's
--                    dist.all_reduce (NCCL both)
--   peer_copy_256m   a 256 MiB copy from gpu:0 to gpu:1 (copy_): >= 0.95x PyTorch's copy_
--                    (cudaMemcpyPeerAsync both)
--
--   qlua bench/dist.lua [--csv PATH] [--python PATH]
--   (qlua --nproc N bench/dist.lua --rank: one rank of the all_reduce; rank 0 prints seconds)
package.path = (arg[0]:match("^(.*)/[^/]*$") or ".") .. "/../lua/?.lua;" .. package.path
local MIB256 = 64 * 1024 * 1024   -- float32 elements

if arg[1] == "--rank" then
  local dist = require "qlua.dist"
  dist.init_process_group()
  local t = qlua.ones({ MIB256 }, { device = "gpu:" .. dist.get_local_rank() })
  for _ = 1, 3 do dist.all_reduce(t) end
  qlua.sync()
  dist.barrier()
  local n = 20
  local t0 = qlua.clock()
  for _ = 1, n do dist.all_reduce(t) end
  qlua.sync()
  local s = (qlua.clock() - t0) / n
  local all = qlua.tensor({ s }, { dtype = "float64" })
  dist.all_reduce(all, { op = "max" })
  if dist.get_rank() == 0 then print(("all_reduce_256m,%.9g"):format(all[1])) end
  dist.destroy_process_group()
  return
end

local R = dofile((arg[0]:match("^(.*)/[^/]*$") or ".") .. "/report.lua")
local args = R.args(arg, "build/bench_dist.csv")
local n = qlua.gpu_count()
if n < 2 then
  print(("dist: %d GPU%s here: all_reduce_256m and peer_copy_256m need two or more, not run"):format(n, n == 1 and "" or "s"))
  return
end
local rows = {}
local base = R.baseline(args, "torch_dist.py")

-- all_reduce: the ranks in child processes
local exe = qlua._dist.exe()
local pipe = io.popen(("%q --nproc %d %q --rank 2>&1"):format(exe, n, arg[0]))
local out = pipe:read("a")
pipe:close()
local t = tonumber(out:match("all_reduce_256m,([%d%.eE+-]+)"))
if not t then error("dist: the all_reduce ranks printed no time:\n" .. out, 0) end
local bytes = MIB256 * 4
local function busbw(s) return 2 * (n - 1) / n * bytes / s / 1e9 end
local b = base.all_reduce_256m
rows[#rows + 1] = { case = "all_reduce_256m", qlua = t, base = b, value = b and b / t,
                    unit = "x PyTorch bus bandwidth", target = 0.95,
                    extra = ("%.0f GB/s bus bandwidth on %d GPUs%s"):format(busbw(t), n,
                      b and (", PyTorch %.0f"):format(busbw(b)) or "") }

-- peer copy in this process
local src = qlua.ones({ MIB256 }, { device = "gpu:0" })
local dst = qlua.empty({ MIB256 }, { device = "gpu:1" })
local tc = qlua.bench(function() dst:copy_(src); qlua.sync("gpu:1") end, { calls = 5, runs = 5, warmup = 1 }).median
local bc = base.peer_copy_256m
rows[#rows + 1] = { case = "peer_copy_256m", qlua = tc, base = bc, value = bc and bc / tc,
                    unit = "x PyTorch bandwidth", target = 0.95,
                    extra = ("%.0f GB/s"):format(bytes / tc / 1e9) }
R.print(rows, args.csv)
