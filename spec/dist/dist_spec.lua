-- qlua.dist (docs/API.md "Several processes and GPUs"): process groups, every collective
-- over every dtype against plain-Lua references, in a world of one (in this process) and in
-- jobs of several processes started by `qlua --nproc` (the CPU through rank 0; NCCL where
-- the GPUs are); a rank that dies or hangs failing the others with a clear error instead
-- of a hang; DistributedDataParallel against one process on the whole batch; the
-- distributed sampler; and the errors.
local T, qlua, test, gtest, both = require("qlua.testing").spec(_ENV)
local P = require("spec.helpers.process")
local dist = require("qlua.dist")
local nn = require("qlua.nn")

local QLUA = P.qlua()
local ENV = { LUA_PATH = "./lua/?.lua;;", RANK = false, WORLD_SIZE = false, MASTER_ADDR = false,
              MASTER_PORT = false, LOCAL_RANK = false, QLUA_DIST_TIMEOUT = false }

local function errmsg(f, ...)
  local ok, e = pcall(f, ...)
  assert.is_false(ok)
  return tostring(e)
end

-- qlua --nproc n script args...: its result, with every line of stdout in a set
local function job(n, script, args, timeout, env)
  local argv = { QLUA, "--nproc", tostring(n), script }
  for _, a in ipairs(args or {}) do argv[#argv + 1] = a end
  local e = {}
  for k, v in pairs(ENV) do e[k] = v end
  for k, v in pairs(env or {}) do e[k] = v end
  local r = P.run(argv, { env = e, timeout = timeout or 120 })
  r.lines = {}
  for line in r.stdout:gmatch("[^\n]+") do r.lines[line] = true end
  return r
end

local function script(text)
  local dir = P.tempdir()
  return P.write(dir .. "/rank.lua", text)
end

teardown(function() P.cleanup() end)

-- ------------------------------------------------------------- a world of one, here
local function world_of_one(fn)
  dist.init_process_group()
  local ok, e = pcall(fn)
  dist.destroy_process_group()
  if not ok then error(e, 0) end
end

test("a world of one without any environment: rank 0 of 1, and the state functions", function()
  assert.is_false(dist.is_initialized())
  assert.are.equal(0, dist.get_rank())
  assert.are.equal(1, dist.get_world_size())
  world_of_one(function()
    assert.is_true(dist.is_initialized())
    assert.are.equal(0, dist.get_rank())
    assert.are.equal(1, dist.get_world_size())
    assert.are.equal("cpu:gloo,cuda:nccl", dist.get_backend())
    assert.truthy(errmsg(dist.init_process_group):match("^init_process_group: the process group is initialized already"))
    dist.barrier()
  end)
  assert.is_false(dist.is_initialized())
  assert.truthy(errmsg(dist.all_reduce, qlua.ones({ 2 })):match("^all_reduce: no process group"))
  assert.truthy(errmsg(dist.barrier):match("^barrier: no process group"))
end)

both("every collective in a world of one leaves its input (or gathers it once), on every dtype", function(dev)
  world_of_one(function()
    for _, dt in ipairs({ "float32", "float64", "float16", "bfloat16", "int32", "int64", "uint8", "bool" }) do
      local vals = dt == "bool" and { true, false, true } or { 3, 0, 7 }
      local function fresh() return qlua.tensor(vals, { dtype = dt, device = dev }) end
      for _, op in ipairs({ "sum", "prod", "max", "min" }) do
        local t = fresh()
        dist.all_reduce(t, { op = op })
        assert.are.same(vals, t:cpu():totable(), dt .. " " .. op)
      end
      local t = fresh(); dist.broadcast(t, 0); assert.are.same(vals, t:cpu():totable())
      t = fresh(); dist.reduce(t, 0); assert.are.same(vals, t:cpu():totable())
      local out = qlua.empty({ 3 }, { dtype = dt, device = dev })
      dist.all_gather_into_tensor(out, fresh()); assert.are.same(vals, out:cpu():totable())
      out = qlua.empty({ 3 }, { dtype = dt, device = dev })
      dist.all_to_all_single(out, fresh()); assert.are.same(vals, out:cpu():totable())
      if dt ~= "bool" then
        out = qlua.empty({ 3 }, { dtype = dt, device = dev })
        dist.reduce_scatter_tensor(out, fresh()); assert.are.same(vals, out:cpu():totable())
      end
    end
    local f = qlua.tensor({ 1.5, -2 }, { device = dev })
    dist.all_reduce(f, { op = dist.ReduceOp.AVG })
    assert.are.same({ 1.5, -2 }, f:cpu():totable())
    local w = dist.all_reduce(f, { async_op = true })
    assert.is_true(w:wait())
    assert.is_true(w:is_completed())
  end)
end)

both("collective errors name the op and the values, and the group stays usable", function(dev)
  world_of_one(function()
    local t = qlua.ones({ 4 }, { device = dev })
    assert.truthy(errmsg(dist.all_reduce, qlua.ones({ 2, 3 }, { device = dev }):t()):match("^all_reduce: tensors must be contiguous"))
    assert.truthy(errmsg(dist.all_reduce, qlua.ones({ 2 }, { dtype = "int64", device = dev }), { op = "avg" }):match("^all_reduce: op avg needs a float tensor, got int64"))
    assert.truthy(errmsg(dist.all_reduce, t, { op = "mean" }):match("^all_reduce: unknown op 'mean'"))
    assert.truthy(errmsg(dist.all_reduce, t, { opp = "sum" }):match("^all_reduce: unknown option 'opp'"))
    assert.truthy(errmsg(dist.all_reduce, 3):match("^all_reduce: the tensor must be a tensor, got number"))
    assert.truthy(errmsg(dist.broadcast, t, 1):match("^broadcast: rank 1 is not in 0..0"))
    assert.truthy(errmsg(dist.broadcast, t, 0.5):match("^broadcast: src must be an integer rank"))
    assert.truthy(errmsg(dist.reduce, t, -1):match("^reduce: rank %-1 is not in 0..0"))
    assert.truthy(errmsg(dist.all_gather_into_tensor, qlua.empty({ 3 }, { device = dev }), t):match("^all_gather_into_tensor: input of 4 and output of 3 elements"))
    assert.truthy(errmsg(dist.all_gather_into_tensor, qlua.empty({ 4 }, { dtype = "float64", device = dev }), t):match("^all_gather_into_tensor: the input is float32 and the output float64"))
    -- a list form names itself in the failures of the ops it is made of
    local gone = qlua.ones({ 4 }, { device = dev }); gone:free()
    assert.truthy(errmsg(dist.reduce_scatter, t, { gone }):match("^reduce_scatter: [%w_]+: tensor has been freed"))
    assert.truthy(errmsg(dist.all_gather, { qlua.empty({ 3 }, { device = dev }) }, t):match("^all_gather: view: "))
    assert.truthy(errmsg(dist.all_gather, { t, t }, t):match("^all_gather: the output list has 2 tensors, the world is 1"))
    assert.truthy(errmsg(dist.all_to_all_single, qlua.empty({ 4 }, { device = dev }), t, { 3 }, { 4 }):match("^all_to_all_single: output_split_sizes sum to 3 rows, the tensor has 4"))
    assert.truthy(errmsg(dist.all_to_all_single, t, t, { 1, 3 }, nil):match("^all_to_all_single: output_split_sizes must be a list of 1 sizes"))
    assert.truthy(errmsg(dist.all_to_all_single, t, t, { -4 }, { 4 }):match("must be an integer >= 0, got %-4"))
    local freed = qlua.ones({ 2 }, { device = dev }); freed:free()
    assert.truthy(errmsg(dist.all_reduce, freed):match("^all_reduce: tensor has been freed"))
    if dev ~= "cpu" then
      assert.truthy(errmsg(dist.all_gather_into_tensor, qlua.empty({ 4 }), t):match("^all_gather: tensors on"))
    end
    dist.all_reduce(t)   -- still working
    assert.are.same({ 1, 1, 1, 1 }, t:cpu():totable())
  end)
end)

test("init_process_group checks its options and the environment's values", function()
  assert.truthy(errmsg(dist.init_process_group, { backend = "mpi" }):match("^init_process_group: unknown backend 'mpi'"))
  assert.truthy(errmsg(dist.init_process_group, { ranks = 1 }):match("^init_process_group: unknown option 'ranks'"))
  assert.truthy(errmsg(dist.init_process_group, { rank = 2, world_size = 2, master_addr = "127.0.0.1", master_port = 1 }):match("^init_process_group: rank 2 is not in 0..1"))
  assert.truthy(errmsg(dist.init_process_group, { rank = 0, world_size = 2 }):match("MASTER_ADDR is not set"))
  assert.truthy(errmsg(dist.init_process_group, { rank = 0, world_size = 2, master_addr = "127.0.0.1" }):match("MASTER_PORT is not set"))
  assert.truthy(errmsg(dist.init_process_group, { timeout = 0 }):match("timeout must be a number of seconds > 0"))
  -- rank 0 alone in a world of two: the rendezvous ends at the timeout, naming who came
  local t0 = os.time()
  local e = errmsg(dist.init_process_group, { rank = 0, world_size = 2, master_addr = "127.0.0.1",
                                              master_port = qlua._dist.free_port(), timeout = 1 })
  assert.truthy(e:match("only 1 of 2 ranks joined within the timeout %(1 s%)"), e)
  assert.is_true(os.time() - t0 < 10)
  assert.is_false(dist.is_initialized())
end)

-- ------------------------------------------------------------- jobs of several processes
test("qlua --nproc 3: every collective over every dtype on the CPU, against the reference on each rank", function()
  local r = job(3, "spec/fixtures/dist_ranks.lua", { "cpu" })
  assert.are.equal(0, r.status, r.stderr)
  for rank = 0, 2 do assert.is_true(r.lines[("rank %d of 3: 137 checks"):format(rank)], r.stdout) end
end)

test("qlua --nproc 2 and dist.launch: the same job, and the variables each rank sees", function()
  local r = job(2, "spec/fixtures/dist_ranks.lua", { "cpu" })
  assert.are.equal(0, r.status, r.stderr)
  assert.is_true(r.lines["rank 1 of 2: 120 checks"], r.stdout)
  local s = script([[
    print(os.getenv("RANK"), os.getenv("LOCAL_RANK"), os.getenv("WORLD_SIZE"), os.getenv("MASTER_ADDR"),
          math.tointeger(tonumber(os.getenv("MASTER_PORT"))) ~= nil, arg[1], arg[2])
  ]])
  r = job(2, s, { "x", "y z" })
  assert.are.equal(0, r.status, r.stderr)
  assert.is_true(r.lines["0\t0\t2\t127.0.0.1\ttrue\tx\ty z"], r.stdout)
  assert.is_true(r.lines["1\t1\t2\t127.0.0.1\ttrue\tx\ty z"], r.stdout)
  -- dist.launch from a script: the ranks' exit status comes back
  local launcher = script(([[
    local dist = require "qlua.dist"
    print("status", dist.launch(2, %q, "a"))
  ]]):format(s))
  r = P.run({ QLUA, launcher }, { env = ENV, timeout = 60 })
  assert.are.equal(0, r.status, r.stderr)
  assert.truthy(r.stdout:find("1\t1\t2\t127.0.0.1\ttrue\ta", 1, true), r.stdout)
  assert.truthy(r.stdout:find("status\t0", 1, true), r.stdout)
end)

test("OpenMPI's mpirun starts the same job: ranks from OMPI_COMM_WORLD_*, rank 0 on this host", function()
  if not P.have("mpirun") then return pending("mpirun is not installed (apt-get install openmpi-bin)") end
  local e = {}
  for k, v in pairs(ENV) do e[k] = v end
  e.MASTER_PORT = tostring(qlua._dist.free_port())
  local r = P.run({ "mpirun", "--allow-run-as-root", "--oversubscribe", "-np", "2", "-x", "LUA_PATH",
                    "-x", "MASTER_PORT", QLUA, "spec/fixtures/dist_ranks.lua", "cpu" }, { env = e, timeout = 120 })
  assert.are.equal(0, r.status, r.stdout .. r.stderr)
  assert.truthy(r.stdout:find("rank 0 of 2: 120 checks", 1, true), r.stdout)
  assert.truthy(r.stdout:find("rank 1 of 2: 120 checks", 1, true), r.stdout)
end)

test("qlua --nproc: bad counts are refused; a rank's failure is the job's exit status", function()
  local r = P.run({ QLUA, "--nproc", "0", "x.lua" }, { env = ENV })
  assert.are_not.equal(0, r.status)
  assert.truthy(r.stderr:find("--nproc needs a number of processes (1 to 1024)", 1, true), r.stderr)
  r = P.run({ QLUA, "--nproc" }, { env = ENV })
  assert.are_not.equal(0, r.status)
  local s = script([[ if os.getenv("RANK") == "1" then os.exit(7) end ]])
  r = job(3, s)
  assert.are.equal(7, r.status)
  assert.truthy(r.stderr:find("rank 1 of 3 exited with status 7", 1, true), r.stderr)
end)

test("a rank that exits or is killed mid-job fails the others' next collective at once, naming it; the group stays failed", function()
  local s = script([[
    local dist = require "qlua.dist"
    dist.init_process_group({ timeout = 60 })
    local r = dist.get_rank()
    dist.all_reduce(qlua.ones({ 3 }))
    if r == 1 and arg[1] == "kill" then   -- SIGKILL, as the OOM killer would: no exit path runs
      local pid = io.open("/proc/self/stat"):read("a"):match("^(%d+)")
      os.execute("kill -KILL " .. pid)
    end
    if r == 1 then os.exit(3) end
    local t0 = os.time()
    local ok, e = pcall(dist.all_reduce, qlua.ones({ 3 }))
    print(r, ok, os.time() - t0 < 20, e)
    local ok2, e2 = pcall(dist.broadcast, qlua.ones({ 3 }), 0)
    print(r, "again", ok2, e2)
  ]])
  for _, how in ipairs({ "exit", "kill" }) do
    local r = job(3, s, { how })
    assert.are.equal(how == "kill" and 137 or 3, r.status, how)
    assert.truthy(r.stderr:find(("rank 1 of 3 exited with status %d"):format(how == "kill" and 137 or 3), 1, true), r.stderr)
    -- rank 0 sees rank 1 go; rank 2 sees rank 0 close its connections
    assert.truthy(r.stdout:find("0\tfalse\ttrue\t[^\n]*all_reduce: lost rank 1 %(its connection closed"), how .. ": " .. r.stdout)
    assert.truthy(r.stdout:find("2\tfalse\ttrue\t[^\n]*all_reduce: lost rank 0"), how .. ": " .. r.stdout)
    assert.truthy(r.stdout:find("0\tagain\tfalse\t[^\n]*broadcast: the process group failed earlier %(all_reduce: lost rank 1"), r.stdout)
  end
end)

test("a rank that stops answering fails the others after the timeout; different sizes name both", function()
  local s = script([[
    local dist = require "qlua.dist"
    dist.init_process_group({ timeout = 1 })
    local r = dist.get_rank()
    if arg[1] == "sizes" then
      local ok, e = pcall(dist.all_reduce, qlua.ones({ r == 0 and 3 or 4 }))
      print(r, ok, e)
      return
    end
    if arg[1] == "counts" then   -- rank 1 sends rank 0 two elements, rank 0 expects one
      local outs = r == 0 and { qlua.empty({ 1 }), qlua.empty({ 1 }) } or { qlua.empty({ 2 }), qlua.empty({ 1 }) }
      local ins = { qlua.ones({ r == 0 and 1 or 2 }), qlua.ones({ 1 }) }
      local ok, e = pcall(dist.all_to_all, outs, ins)
      print(r, ok, e)
      return
    end
    if r == 1 then os.execute("sleep 4") end
    local ok, e = pcall(dist.all_reduce, qlua.ones({ 3 }))
    print(r, ok, e)
  ]])
  local r = job(2, s, {}, 60)
  assert.truthy(r.stdout:find("0\tfalse\t[^\n]*all_reduce: rank 1 did not answer within the timeout %(1 s%)"), r.stdout)
  r = job(2, s, { "sizes" }, 60)
  assert.truthy(r.stdout:find("0\tfalse\t[^\n]*all_reduce: rank 1 sent 16 bytes where 12 were expected: the ranks called different collectives or passed tensors of different sizes"), r.stdout)
  -- uneven all_to_all whose counts disagree: rank 0 names the ranks and counts, rank 1 fails on the size
  r = job(2, s, { "counts" }, 60)
  assert.truthy(r.stdout:find("0\tfalse\t[^\n]*all_to_all: rank 0 sends rank 1 1 elements, rank 1 expects 2"), r.stdout)
  assert.truthy(r.stdout:find("1\tfalse\t[^\n]*all_to_all: rank 0 sent 0 bytes where"), r.stdout)
end)

test("DistributedDataParallel over 2 and 3 ranks matches one process on the whole batch (steps, no_sync, unused parameters)", function()
  for _, n in ipairs({ 2, 3 }) do
    local r = job(n, "spec/fixtures/dist_ddp.lua", { "cpu" })
    assert.are.equal(0, r.status, r.stderr)
    for rank = 0, n - 1 do assert.is_true(r.lines[("rank %d of %d: ddp ok"):format(rank, n)], r.stdout .. r.stderr) end
  end
end)

test("DistributedDataParallel in a world of one: the module's own gradients, its names under module.", function()
  world_of_one(function()
    qlua.seed(3)
    local net = nn.Linear(4, 2, { dtype = "float64" })
    local ddp = nn.parallel.DistributedDataParallel(net)
    local x = qlua.randn({ 5, 4 }, { dtype = "float64" })
    ddp(x):sum():backward()
    local g = net.weight.grad:clone()
    net.weight.grad, net.bias.grad = nil, nil
    net(x):sum():backward()
    T.assert_close(g:totable(), net.weight.grad:totable(), 0)
    assert.is_not_nil(ddp:state_dict()["module.weight"])
    assert.truthy(errmsg(nn.parallel.DistributedDataParallel, net, { bucket_cap = 1 }):match("unknown option 'bucket_cap'"))
  end)
  assert.truthy(errmsg(nn.parallel.DistributedDataParallel, nn.Linear(2, 2)):match("no process group"))
end)

test("DistributedSampler splits, pads and shuffles as PyTorch's", function()
  local S = dist.DistributedSampler
  -- 10 samples over 3 ranks: 4 each, padded with the first indices, rank r every third
  local seen = {}
  for r = 0, 2 do
    local s = S(10, { num_replicas = 3, rank = r, shuffle = false })
    assert.are.equal(4, #s)
    local idx = s:indices()
    local want = {}
    for i = r + 1, 12, 3 do want[#want + 1] = (i - 1) % 10 + 1 end
    assert.are.same(want, idx)
    for _, i in ipairs(idx) do seen[i] = true end
  end
  for i = 1, 10 do assert.is_true(seen[i]) end
  assert.are.same({ 1, 4, 7 }, S(10, { num_replicas = 3, rank = 0, shuffle = false, drop_last = true }):indices())
  -- the shuffle is a permutation, the same on every rank, and changes with the epoch
  local a, b = S(50, { num_replicas = 2, rank = 0, seed = 4 }), S(50, { num_replicas = 2, rank = 1, seed = 4 })
  local all = {}
  for _, i in ipairs(a:indices()) do all[#all + 1] = i end
  for _, i in ipairs(b:indices()) do all[#all + 1] = i end
  table.sort(all)
  for i = 1, 50 do assert.are.equal(i, all[i]) end
  local first = a:indices()
  a:set_epoch(1)
  assert.are_not.same(first, a:indices())
  local n = 0
  for _ in b:iter() do n = n + 1 end
  assert.are.equal(25, n)
  assert.truthy(errmsg(S, 10, { num_replicas = 2, rank = 2 }):match("rank 2 is not in 0..1"))
  assert.truthy(errmsg(S, "x"):match("a sample count or a sequence expected"))
end)

-- ------------------------------------------------------------- the GPUs
gtest("NCCL runs the GPU's collectives: qlua.backend names it, and a job of one rank per GPU checks every collective", function()
  assert.truthy(qlua.backend("dist", "gpu"):match("^NCCL %d+%.%d+%.%d+$"), qlua.backend("dist", "gpu"))
  assert.are.equal("TCP through rank 0", qlua.backend("dist", "cpu"))
  local n = qlua.gpu_count()
  local r = job(n, "spec/fixtures/dist_ranks.lua", { "gpu" }, 300)
  assert.are.equal(0, r.status, r.stderr)
  assert.truthy(r.stdout:find(("rank 0 of %d: "):format(n), 1, true), r.stdout)
  r = job(n, "spec/fixtures/dist_ddp.lua", { "gpu" }, 300)
  assert.are.equal(0, r.status, r.stderr)
  assert.is_true(r.lines[("rank 0 of %d: ddp ok"):format(n)], r.stdout)
end)

gtest("a local group runs one tensor per GPU of this process (ncclCommInitAll's form)", function()
  local n = qlua.gpu_count()
  local devs = {}
  for i = 0, n - 1 do devs[#devs + 1] = "gpu:" .. i end
  local g = dist.local_group(devs)
  assert.are.equal(n, g:size())
  local ts, want = {}, {}
  for i = 1, n do ts[i] = qlua.tensor({ i, 2 * i, -i }, { device = devs[i] }) end
  for j = 1, 3 do
    local s = 0
    for i = 1, n do s = s + ({ i, 2 * i, -i })[j] end
    want[j] = s
  end
  g:all_reduce(ts)
  for i = 1, n do assert.are.same(want, ts[i]:cpu():totable()) end
  local b = {}
  for i = 1, n do b[i] = qlua.full({ 2 }, i, { device = devs[i] }) end
  g:broadcast(b, n - 1)
  for i = 1, n do assert.are.same({ n, n }, b[i]:cpu():totable()) end
  local outs = {}
  for i = 1, n do outs[i] = qlua.empty({ 2 * n }, { device = devs[i] }) end
  g:all_gather(outs, b)
  assert.are.equal(2 * n, outs[1]:numel())
  assert.truthy(errmsg(g.all_reduce, g, { ts[1], ts[1] }):match("the tensors has 2 tensors, the world is " .. n) or n == 2)
  assert.truthy(errmsg(dist.local_group, { "gpu:0", "gpu:0" }):match("gpu:0 is given twice"))
  assert.truthy(errmsg(dist.local_group, { "cpu" }):match("cpu cannot run in a local group"))
  g:free()
end)

gtest("collectives cannot be captured into a CUDA graph: the capture's error names them", function()
  world_of_one(function()
    local t = qlua.ones({ 4 }, { device = "gpu" })
    local e = errmsg(qlua.graph, function() dist.all_reduce(t) end)
    assert.truthy(e:match("all_reduce: cannot run while a CUDA graph is being captured"), e)
    dist.all_reduce(t)
    assert.are.same({ 1, 1, 1, 1 }, t:cpu():totable())
  end)
end)

-- ------------------------------------------------------------- two GPUs of this process
local GPUS = qlua.gpu_count()
local function two_gpus(name, fn)
  if GPUS >= 2 then it(name, fn)
  else it(name, function() pending("needs 2 GPUs: qlua.gpu_count() == " .. GPUS) end) end
end

two_gpus("t:to('gpu:1'), t:gpu(1) and copy_ between GPUs copy device to device: views, dtypes, both ways", function()
  qlua.seed(4)
  local a = qlua.randn({ 64, 33 }, { device = "gpu:0", dtype = "float64" })
  local ref = a:cpu():totable()
  local b = a:to("gpu:1")
  assert.are.equal("gpu:1", b:device())
  T.assert_close(b:cpu():totable(), ref, 0)
  assert.are.equal("gpu:1", a:gpu(1):device())
  -- a strided view, converted on the way
  local v = a:t():narrow(1, 3, 10)
  local dst = qlua.empty({ 10, 64 }, { device = "gpu:1", dtype = "float32" })
  dst:copy_(v)
  T.assert_close(dst:cpu():totable(), v:cpu():float():totable(), 0)
  -- back, into a view of a larger tensor
  local back = qlua.zeros({ 3, 64, 33 }, { device = "gpu:0", dtype = "float64" })
  back[2]:copy_(b)
  T.assert_close(back[2]:cpu():totable(), ref, 0)
  T.assert_close(back[1]:cpu():abs():max(), 0, 0)
  -- work queued on gpu:0 before the copy is seen by it
  local c = a * 2
  T.assert_close(c:to("gpu:1"):cpu():totable(), (a * 2):cpu():totable(), 0)
  assert.truthy(errmsg(function() return a + b end):match("tensors on gpu:0 and gpu:1"))
end)

two_gpus("each GPU has its own allocator: memory and empty_cache per device", function()
  qlua.empty_cache()
  local before1 = qlua.memory("gpu:1").allocated
  local t = qlua.empty({ 1 << 20 }, { device = "gpu:1" })
  assert.are.equal(before1 + 4 * (1 << 20), qlua.memory("gpu:1").allocated)
  t:free()
  assert.are.equal(before1, qlua.memory("gpu:1").allocated)
  local held1 = qlua.memory("gpu:1").reserved
  -- a block freed on gpu:0 stays cached there while gpu:1's cache is emptied
  qlua.empty({ 1 << 20 }, { device = "gpu:0" }):free()
  local held0 = qlua.memory("gpu:0").reserved
  qlua.empty_cache("gpu:1")
  assert.is_true(qlua.memory("gpu:1").reserved < held1)
  assert.are.equal(held0, qlua.memory("gpu:0").reserved)
  assert.are.equal(qlua.gpu_count(), qlua.device_count())
end)

test("empty_cache takes one device; device_count counts the GPUs", function()
  qlua.empty_cache("cpu")
  assert.are.equal(qlua.gpu_count(), qlua.device_count())
  assert.truthy(errmsg(qlua.empty_cache, "tpu"):match("^empty_cache: "))
end)
