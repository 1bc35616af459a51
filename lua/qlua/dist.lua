--[[
lua/qlua/dist.lua — qlua.dist: process groups and collectives, in torch.distributed's names.

  local dist = require "qlua.dist"      -- also qlua.dist once required
  dist.init_process_group()             -- ranks from RANK / WORLD_SIZE (torchrun, qlua --nproc)
  dist.all_reduce(t)                    -- t = the sum over the ranks, in place
  dist.destroy_process_group()

A job is one process per GPU (or CPU worker), started by `qlua --nproc N script.lua`,
qlua.dist.launch, torchrun-style variables set by hand, or OpenMPI's mpirun. The ranks meet
at MASTER_ADDR:MASTER_PORT (rank 0 listens there) and every collective runs on its tensors'
device: NCCL on GPUs (rank 0's unique id sent over that connection), the connection itself
through rank 0 on the CPU. A rank that exits or fails makes the others' collectives fail
with "lost rank N", and a rank that never answers fails them after the timeout, instead of
hanging the job. The C half is qlua._dist (runtime/binding/l_dist.c).
]]

local qlua = rawget(_G, "qlua") or require("qlua")
if qlua.dist then return qlua.dist end

-- The C half's functions, called through pcall: an error then carries no position inside
-- this file (luaL_error names the Lua caller), only "<op>: ...", as qlua's errors do.
local RAW = qlua._dist
local pack, unpack = table.pack, table.unpack
local C = {}
for k, f in pairs(RAW) do
  C[k] = function(...)
    local r = pack(pcall(f, ...))
    if not r[1] then error(r[2], 0) end
    return unpack(r, 2, r.n)
  end
end
local dist = {}
local default, backend_name   -- the default process group (a userdata) and what init named

dist.ReduceOp = { SUM = "sum", PRODUCT = "prod", MAX = "max", MIN = "min", AVG = "avg" }
local OPS = { sum = true, prod = true, max = true, min = true, avg = true }

local function fail(op, fmt, ...) error(op .. ": " .. string.format(fmt, ...), 0) end

local function check_opts(op, opts, known)
  if opts == nil then return {} end
  if type(opts) ~= "table" then fail(op, "options must be a table, got %s", type(opts)) end
  for k in pairs(opts) do
    if not known[k] then
      local names = {}
      for n in pairs(known) do names[#names + 1] = n end
      table.sort(names)
      fail(op, "unknown option '%s' (it takes %s)", tostring(k), table.concat(names, ", "))
    end
  end
  return opts
end

local function env_number(names)
  for _, n in ipairs(names) do
    local v = os.getenv(n)
    if v ~= nil and v ~= "" then
      local x = math.tointeger(tonumber(v))
      if x == nil then error(("init_process_group: %s=%s is not an integer"):format(n, v), 0) end
      return x, n
    end
  end
end

local function group(op)
  if default == nil then
    fail(op, "no process group: call qlua.dist.init_process_group() first")
  end
  return default
end

-- ------------------------------------------------------------- the default group
local INIT = { backend = true, rank = true, world_size = true, master_addr = true,
               master_port = true, timeout = true }
local BACKENDS = { nccl = true, gloo = true, ["cpu:gloo,cuda:nccl"] = true }

--- init_process_group([{backend, rank, world_size, master_addr, master_port, timeout}])
-- Joins this rank to the job's group. Every option defaults from the environment:
-- RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT (torchrun, qlua --nproc), or OpenMPI's
-- OMPI_COMM_WORLD_RANK / OMPI_COMM_WORLD_SIZE; without any, a world of one. timeout
-- (seconds, default QLUA_DIST_TIMEOUT or 600) bounds the rendezvous and every step of a
-- collective. backend is accepted as PyTorch's ("nccl", "gloo"): the tensors' device picks
-- the transport.
function dist.init_process_group(opts)
  local op = "init_process_group"
  opts = check_opts(op, opts, INIT)
  if default ~= nil then fail(op, "the process group is initialized already (destroy_process_group first)") end
  if opts.backend ~= nil and not BACKENDS[opts.backend] then
    fail(op, "unknown backend '%s' (nccl, gloo, or cpu:gloo,cuda:nccl)", tostring(opts.backend))
  end
  local rank = opts.rank or env_number({ "RANK", "OMPI_COMM_WORLD_RANK" }) or 0
  local world = opts.world_size or env_number({ "WORLD_SIZE", "OMPI_COMM_WORLD_SIZE" }) or 1
  if math.type(rank) ~= "integer" or math.type(world) ~= "integer" then
    fail(op, "rank and world_size must be integers")
  end
  local addr = opts.master_addr or os.getenv("MASTER_ADDR")
  if (addr == nil or addr == "") and world > 1 then
    -- mpirun on one host: every rank is local
    local locals = env_number({ "OMPI_COMM_WORLD_LOCAL_SIZE" })
    if locals == world then addr = "127.0.0.1" end
  end
  local port = opts.master_port or env_number({ "MASTER_PORT" })
  if port == nil and os.getenv("OMPI_COMM_WORLD_SIZE") then port = 29500 end   -- torchrun's default
  if world > 1 and (addr == nil or addr == "") then
    fail(op, "MASTER_ADDR is not set: rank 0's host is needed for a world of %d", world)
  end
  if world > 1 and port == nil then
    fail(op, "MASTER_PORT is not set: the port rank 0 listens on is needed for a world of %d", world)
  end
  local timeout = opts.timeout or tonumber(os.getenv("QLUA_DIST_TIMEOUT") or "") or 600
  if type(timeout) ~= "number" or not (timeout > 0) then fail(op, "timeout must be a number of seconds > 0") end
  default = C.init(rank, world, addr, port, timeout)
  backend_name = opts.backend or "cpu:gloo,cuda:nccl"
end

function dist.is_initialized() return default ~= nil end
function dist.is_available() return true end
function dist.get_rank() return default and C.rank(default) or 0 end
function dist.get_world_size() return default and C.world(default) or 1 end
function dist.get_backend() group("get_backend"); return backend_name end
--- The rank among this host's ranks: LOCAL_RANK (torchrun, qlua --nproc) or OpenMPI's.
function dist.get_local_rank()
  local v = tonumber(os.getenv("LOCAL_RANK") or os.getenv("OMPI_COMM_WORLD_LOCAL_RANK") or "")
  return math.tointeger(v) or 0
end

function dist.destroy_process_group()
  if default ~= nil then C.destroy(default) end
  default, backend_name = nil, nil
end

function dist.barrier() C.barrier(group("barrier")) end

-- ------------------------------------------------------------- collectives
local COLL = { op = true, async_op = true }

local function reduce_op(op, o)
  local r = o.op or "sum"
  if not OPS[r] then fail(op, "unknown op '%s' (sum, prod, max, min, avg: dist.ReduceOp)", tostring(r)) end
  return r
end

local function check_rank(op, r, what)
  if math.type(r) ~= "integer" then fail(op, "%s must be an integer rank, got %s", what, tostring(r)) end
  return r
end

-- A finished work, for a collective whose result needed a step after the wait.
local Done = {}
Done.__index = Done
function Done:wait() if self.after then self.after(); self.after = nil end return true end
function Done:is_completed() return self.after == nil end

-- runs kind on (input, output); finish (may be nil) copies results out after the wait
local function run(op, kind, o, root, input, output, finish, send, recv)
  local r = pack(pcall(RAW.collective, group(op), kind, kind == "broadcast" and "sum" or reduce_op(op, o),
                       root, input, output, o.async_op and finish == nil, send, recv))
  if not r[1] then   -- "all_gather: ..." from the C half, said as all_gather_into_tensor's
    local msg = tostring(r[2])
    if op ~= kind and msg:sub(1, #kind + 2) == kind .. ": " then msg = op .. msg:sub(#kind + 1) end
    error(msg, 0)
  end
  local work = r[2]
  if o.async_op then
    if finish == nil then return work end
    return setmetatable({ after = finish }, Done)
  end
  if finish then finish() end
end

local function tensor_arg(op, t, what)
  if not qlua.is_tensor(t) then fail(op, "%s must be a tensor, got %s", what, type(t)) end
  return t
end

local function tensor_list(op, list, what, n)
  if type(list) ~= "table" or qlua.is_tensor(list) then fail(op, "%s must be a list of tensors", what) end
  if #list ~= n then fail(op, "%s has %d tensors, the world is %d", what, #list, n) end
  for i = 1, n do tensor_arg(op, list[i], what .. "[" .. i .. "]") end
  return list
end

--- all_reduce(t [, {op = "sum", async_op}]): t becomes op over every rank's t.
function dist.all_reduce(t, opts)
  local o = check_opts("all_reduce", opts, COLL)
  tensor_arg("all_reduce", t, "the tensor")
  return run("all_reduce", "all_reduce", o, 0, t, t)
end

--- broadcast(t, src [, {async_op}]): every rank's t becomes rank src's.
function dist.broadcast(t, src, opts)
  local o = check_opts("broadcast", opts, { async_op = true })
  tensor_arg("broadcast", t, "the tensor")
  return run("broadcast", "broadcast", o, check_rank("broadcast", src, "src"), t, t)
end

--- reduce(t, dst [, {op, async_op}]): rank dst's t becomes op over every rank's t.
function dist.reduce(t, dst, opts)
  local o = check_opts("reduce", opts, COLL)
  tensor_arg("reduce", t, "the tensor")
  return run("reduce", "reduce", o, check_rank("reduce", dst, "dst"), t, t)
end

--- all_gather_into_tensor(out, t [, {async_op}]): out (world x t's elements, contiguous)
-- holds every rank's t, rank r's at part r.
function dist.all_gather_into_tensor(out, t, opts)
  local op = "all_gather_into_tensor"
  local o = check_opts(op, opts, { async_op = true })
  return run(op, "all_gather", o, 0, tensor_arg(op, t, "the input"), tensor_arg(op, out, "the output"))
end

-- the parts of flat (w parts of n elements) copied into list's tensors, after the wait
local function scatter_parts(flat, list, w, n)
  return function()
    for r = 1, w do list[r]:copy_(flat:narrow(1, (r - 1) * n + 1, n):view(list[r]:shape())) end
  end
end

-- list's tensors flattened into one contiguous tensor
local function joined(list)
  local flat = {}
  for i, t in ipairs(list) do flat[i] = t:reshape({ -1 }) end
  return qlua.cat(flat)
end

--- all_gather(list, t [, {async_op}]): list[r + 1] (world tensors of t's shape) gets rank r's t.
function dist.all_gather(list, t, opts)
  local op = "all_gather"
  local o = check_opts(op, opts, { async_op = true })
  tensor_arg(op, t, "the input")
  local w = dist.get_world_size()
  tensor_list(op, list, "the output list", w)
  local n = t:numel()
  local flat = qlua.empty({ w * n }, { dtype = t:dtype(), device = t:device() })
  return run(op, "all_gather", o, 0, t:contiguous(), flat, scatter_parts(flat, list, w, n))
end

--- reduce_scatter_tensor(out, input [, {op, async_op}]): input holds world parts of out's
-- size; rank r's out becomes op over every rank's part r.
function dist.reduce_scatter_tensor(out, input, opts)
  local op = "reduce_scatter_tensor"
  local o = check_opts(op, opts, COLL)
  return run(op, "reduce_scatter", o, 0, tensor_arg(op, input, "the input"), tensor_arg(op, out, "the output"))
end

--- reduce_scatter(out, list [, {op, async_op}]): list (world tensors of out's shape); rank r's
-- out becomes op over every rank's list[r + 1].
function dist.reduce_scatter(out, list, opts)
  local op = "reduce_scatter"
  local o = check_opts(op, opts, COLL)
  tensor_arg(op, out, "the output")
  tensor_list(op, list, "the input list", dist.get_world_size())
  return run(op, "reduce_scatter", o, 0, joined(list), out)
end

-- split sizes (rows of dim 1, as PyTorch's) as element counts per rank, or nil for equal parts
local function split_counts(op, t, sizes, what, w)
  if sizes == nil then return nil end
  if type(sizes) ~= "table" or #sizes ~= w then fail(op, "%s must be a list of %d sizes", what, w) end
  local rows = t:dim() > 0 and t:size(1) or 1
  local per = rows > 0 and t:numel() // rows or 0
  local counts, total = {}, 0
  for i = 1, w do
    local v = sizes[i]
    if math.type(v) ~= "integer" or v < 0 then fail(op, "%s[%d] must be an integer >= 0, got %s", what, i, tostring(v)) end
    counts[i], total = v * per, total + v
  end
  if total ~= rows then fail(op, "%s sum to %d rows, the tensor has %d", what, total, rows) end
  return counts
end

--- all_to_all_single(out, input [, output_split_sizes, input_split_sizes] [, {async_op}]): part
-- j of rank i's input becomes part i of rank j's out: world equal parts, or the split sizes
-- (rows of dim 1 per rank, as PyTorch's; rank i's input_split_sizes[j + 1] must be rank j's
-- output_split_sizes[i + 1]).
function dist.all_to_all_single(out, input, a, b, c)
  local op = "all_to_all_single"
  local opts = c
  if type(a) == "table" and a[1] == nil and next(a) ~= nil then opts, a, b = a, nil, nil
  elseif type(b) == "table" and b[1] == nil and next(b) ~= nil then opts, b = b, nil end
  local o = check_opts(op, opts, { async_op = true })
  tensor_arg(op, input, "the input")
  tensor_arg(op, out, "the output")
  local w = dist.get_world_size()
  local recv = split_counts(op, out, a, "output_split_sizes", w)
  local send = split_counts(op, input, b, "input_split_sizes", w)
  if (send == nil) ~= (recv == nil) then
    local n = send and out or input
    local even = {}
    local rows = n:dim() > 0 and n:size(1) or 1
    if rows % w ~= 0 then fail(op, "without split sizes, %d rows do not split over %d ranks", rows, w) end
    for i = 1, w do even[i] = rows // w end
    if send == nil then send = split_counts(op, input, even, "input_split_sizes", w)
    else recv = split_counts(op, out, even, "output_split_sizes", w) end
  end
  return run(op, "all_to_all", o, 0, input, out, nil, send, recv)
end

--- all_to_all(outs, ins [, {async_op}]): ins[j + 1] goes to rank j, outs[i + 1] comes from
-- rank i (world tensors each, of any sizes: rank i's ins[j + 1] must have rank j's
-- outs[i + 1]'s elements).
function dist.all_to_all(outs, ins, opts)
  local op = "all_to_all"
  local o = check_opts(op, opts, { async_op = true })
  local w = dist.get_world_size()
  tensor_list(op, ins, "the input list", w)
  tensor_list(op, outs, "the output list", w)
  local input = joined(ins)
  local send, recv, total = {}, {}, 0
  for i = 1, w do
    send[i], recv[i] = ins[i]:numel(), outs[i]:numel()
    total = total + recv[i]
  end
  local out = qlua.empty({ total }, { dtype = input:dtype(), device = input:device() })
  return run(op, "all_to_all", o, 0, input, out, function()
    local at = 0
    for r = 1, w do
      local n = recv[r]
      if n > 0 then outs[r]:copy_(out:narrow(1, at + 1, n):view(outs[r]:shape())) end
      at = at + n
    end
  end, send, recv)
end

-- ------------------------------------------------------------- one process, several GPUs
local Local = {}
Local.__index = Local

--- local_group(devices or tensors): the GPUs of this process as the ranks of a group (NCCL's
-- ncclCommInitAll), rank r the (r + 1)-th; its collectives take one tensor per GPU.
function dist.local_group(list)
  if type(list) ~= "table" or qlua.is_tensor(list) then
    fail("local_group", "a list of GPUs (devices or tensors) expected")
  end
  return setmetatable({ g = C.local_group(list), n = #list }, Local)
end

local function each(op, list, n, what)
  tensor_list(op, list, what, n)
  return list
end

function Local:all_reduce(list, opts)
  local o = check_opts("all_reduce", opts, { op = true })
  each("all_reduce", list, self.n, "the tensors")
  C.collective_local(self.g, "all_reduce", reduce_op("all_reduce", o), 0, list, list)
end
function Local:broadcast(list, src)
  each("broadcast", list, self.n, "the tensors")
  C.collective_local(self.g, "broadcast", "sum", check_rank("broadcast", src, "src"), list, list)
end
function Local:reduce(list, dst, opts)
  local o = check_opts("reduce", opts, { op = true })
  each("reduce", list, self.n, "the tensors")
  C.collective_local(self.g, "reduce", reduce_op("reduce", o), check_rank("reduce", dst, "dst"), list, list)
end
function Local:all_gather(outs, ins)
  C.collective_local(self.g, "all_gather", "sum", 0, each("all_gather", ins, self.n, "the inputs"),
                     each("all_gather", outs, self.n, "the outputs"))
end
function Local:reduce_scatter(outs, ins, opts)
  local o = check_opts("reduce_scatter", opts, { op = true })
  C.collective_local(self.g, "reduce_scatter", reduce_op("reduce_scatter", o), 0,
                     each("reduce_scatter", ins, self.n, "the inputs"), each("reduce_scatter", outs, self.n, "the outputs"))
end
function Local:size() return self.n end
function Local:free() C.destroy(self.g) end

-- ------------------------------------------------------------- starting a job
--- launch(n, script, ...): runs script with its arguments as n local ranks (as qlua --nproc n
-- does) and waits; returns the first failing rank's exit status, 0 when all succeed.
function dist.launch(n, script, ...)
  if math.type(n) ~= "integer" or n < 1 then fail("launch", "the number of processes must be an integer >= 1") end
  if type(script) ~= "string" then fail("launch", "the script must be a file name") end
  local exe, is_qlua = C.exe()
  if exe == nil then fail("launch", "cannot find this program (no /proc/self/exe)") end
  local argv = { exe }
  if not is_qlua then argv[#argv + 1] = "-l"; argv[#argv + 1] = "qlua" end
  argv[#argv + 1] = script
  for i = 1, select("#", ...) do argv[#argv + 1] = tostring((select(i, ...))) end
  return C.spawn(n, argv, 10)
end

-- ------------------------------------------------------------- splitting data by rank
local Sampler = {}
Sampler.__index = Sampler

-- splitmix64: the same permutation on every rank for one seed, without touching qlua's
-- generator or math.random
local function splitmix(state)
  state = state + 0x9E3779B97F4A7C15
  local z = state
  z = (z ~ (z >> 30)) * 0xBF58476D1CE4E5B9
  z = (z ~ (z >> 27)) * 0x94D049BB133111EB
  return state, z ~ (z >> 31)
end

--- DistributedSampler(n or dataset [, {num_replicas, rank, shuffle = true, seed = 0,
-- drop_last = false}]): the 1-based indices of this rank's share of n samples
-- (torch.utils.data.DistributedSampler): the same shuffle on every rank (seed + epoch),
-- padded by repeating the first indices to a multiple of num_replicas (or cut, drop_last),
-- and every num_replicas-th index from the rank's own.
function dist.DistributedSampler(data, opts)
  local op = "DistributedSampler"
  local o = check_opts(op, opts, { num_replicas = true, rank = true, shuffle = true, seed = true, drop_last = true })
  local n = data
  if type(data) == "table" then n = #data end
  if math.type(n) ~= "integer" or n < 0 then fail(op, "a sample count or a sequence expected") end
  local R = o.num_replicas or dist.get_world_size()
  local rank = o.rank or dist.get_rank()
  if math.type(R) ~= "integer" or R < 1 then fail(op, "num_replicas must be an integer >= 1") end
  if math.type(rank) ~= "integer" or rank < 0 or rank >= R then
    fail(op, "rank %s is not in 0..%d", tostring(rank), R - 1)
  end
  local per = o.drop_last and n // R or (n + R - 1) // R
  return setmetatable({ n = n, R = R, rank = rank, shuffle = o.shuffle ~= false, seed = o.seed or 0,
                        drop_last = o.drop_last and true or false, per = per, epoch = 0 }, Sampler)
end

function Sampler:set_epoch(e) self.epoch = e end
function Sampler:__len() return self.per end

function Sampler:indices()
  local order = {}
  for i = 1, self.n do order[i] = i end
  if self.shuffle then
    local s = self.seed * 1000003 + self.epoch
    for i = self.n, 2, -1 do
      local z
      s, z = splitmix(s)
      local j = (z & 0x7FFFFFFFFFFFFFFF) % i + 1
      order[i], order[j] = order[j], order[i]
    end
  end
  local total = self.per * self.R
  for i = self.n + 1, total do order[i] = order[(i - self.n - 1) % math.max(self.n, 1) + 1] end
  local mine = {}
  for i = self.rank + 1, total, self.R do mine[#mine + 1] = order[i] end
  return mine
end

function Sampler:iter()
  local idx, i = self:indices(), 0
  return function()
    i = i + 1
    return idx[i]
  end
end

-- Every function names itself in its failures, those of the ops it is made of too
-- ("all_gather: view: shape ..."), and no position inside this file shows.
local function named(name, fn)
  return function(...)
    local r = pack(pcall(fn, ...))
    if r[1] then return unpack(r, 2, r.n) end
    local msg = tostring(r[2]):gsub("^[^\n]-%.lua:%d+: ", "", 1)
    if msg:sub(1, #name + 2) ~= name .. ": " then msg = name .. ": " .. msg end
    error(msg, 0)
  end
end
for _, name in ipairs({ "init_process_group", "destroy_process_group", "barrier", "get_backend",
                        "all_reduce", "broadcast", "reduce", "all_gather", "all_gather_into_tensor",
                        "reduce_scatter", "reduce_scatter_tensor", "all_to_all", "all_to_all_single",
                        "local_group", "launch", "DistributedSampler" }) do
  dist[name] = named(name, dist[name])
end
for _, name in ipairs({ "all_reduce", "broadcast", "reduce", "all_gather", "reduce_scatter", "size", "free" }) do
  Local[name] = named(name, Local[name])
end

qlua.dist = dist
return dist
