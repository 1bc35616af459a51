--[[
lua/qlua/nn/parallel.lua — qlua.nn.parallel.DistributedDataParallel (PyTorch's DDP): one
copy of a module per rank, kept identical by averaging gradients over the ranks during
backward.

  local ddp = nn.parallel.DistributedDataParallel(model)   -- after dist.init_process_group
  local loss = loss_fn(ddp(x), y); loss:backward()          -- .grad is the ranks' average
  opt:step()

At wrap time every parameter and buffer is broadcast from rank 0. The parameters are put in
buckets in reverse order (the order backward produces their gradients): about 1 MiB for
the first, bucket_cap_mb (25) for the rest, one device and dtype each. A hook on each
parameter (register_post_accumulate_grad_hook) marks its gradient ready; once a bucket's
are all ready and so are the buckets before it (every rank launches in one order), the
bucket's gradients are copied into one flat tensor and averaged with an asynchronous
all_reduce while backward goes on. A callback at the end of the pass (autograd.queue_callback)
waits for every bucket and copies the averages back into .grad. no_sync(fn, ...) runs fn
without any of this, so gradients accumulate locally until a later backward reduces them.
]]
return function(nn)
  local qlua = rawget(_G, "qlua") or require("qlua")
  local A = require("qlua.autograd")
  local parallel = {}

  local DDP = nn.Module:extend("DistributedDataParallel")
  parallel.DistributedDataParallel = DDP

  local KNOWN = { bucket_cap_mb = true, broadcast_buffers = true, find_unused_parameters = true,
                  device_ids = true, output_device = true }
  local FIRST_BUCKET = 1 << 20
  local SIZE = { float32 = 4, float64 = 8, float16 = 2, bfloat16 = 2 }

  local function fail(fmt, ...) error("DistributedDataParallel: " .. string.format(fmt, ...), 0) end

  function DDP:init(module, opts)
    opts = opts or {}
    if type(opts) ~= "table" then fail("options must be a table") end
    for k in pairs(opts) do
      if not KNOWN[k] then
        fail("unknown option '%s' (it takes bucket_cap_mb, broadcast_buffers, find_unused_parameters)", tostring(k))
      end
    end
    if not nn.is_module(module) then fail("a module expected, got a %s", type(module)) end
    local dist = require("qlua.dist")
    if not dist.is_initialized() then fail("no process group: call qlua.dist.init_process_group() first") end
    self.module = module
    local cap = (opts.bucket_cap_mb or 25) * (1 << 20)
    if type(cap) ~= "number" or cap <= 0 then fail("bucket_cap_mb must be > 0") end
    -- plain state, kept out of _fields (it holds no module or parameter)
    local st = { dist = dist, broadcast_buffers = opts.broadcast_buffers ~= false,
                 find_unused = opts.find_unused_parameters and true or false, buckets = {},
                 where = {}, names = {}, sync = true, pass = nil }
    rawset(self, "_ddp", st)
    local params = {}
    for i, kv in ipairs(module:named_parameters()) do params[i], st.names[kv[2]] = kv[2], kv[1] end
    qlua.no_grad(function()
      for _, p in ipairs(params) do dist.broadcast(p, 0) end
      for _, b in ipairs(module:buffers()) do dist.broadcast(b, 0) end
    end)
    -- buckets, last parameter first
    local bucket
    for i = #params, 1, -1 do
      local p = params[i]
      local bytes = p:numel() * (SIZE[p:dtype()] or 8)
      local limit = #st.buckets == 1 and math.min(FIRST_BUCKET, cap) or cap
      if bucket == nil or bucket.device ~= p:device() or bucket.dtype ~= p:dtype() or
         (bucket.bytes + bytes > limit and #bucket.params > 0) then
        bucket = { params = {}, offsets = {}, numel = 0, bytes = 0, device = p:device(), dtype = p:dtype() }
        st.buckets[#st.buckets + 1] = bucket
      end
      bucket.params[#bucket.params + 1] = p
      bucket.offsets[#bucket.offsets + 1] = bucket.numel
      bucket.numel = bucket.numel + p:numel()
      bucket.bytes = bucket.bytes + bytes
      st.where[p] = #st.buckets
      p:register_post_accumulate_grad_hook(function(t) self:_ready(t) end)
    end
  end

  -- the bucket's gradients in one flat tensor, averaged over the ranks asynchronously
  local function launch(st, b)
    if b.flat == nil then b.flat = qlua.empty({ b.numel }, { dtype = b.dtype, device = b.device }) end
    for i, p in ipairs(b.params) do
      local slice = b.flat:narrow(1, b.offsets[i] + 1, p:numel())
      if p.grad ~= nil then slice:copy_(p.grad:reshape({ -1 })) else slice:zero_() end
    end
    b.work = st.dist.all_reduce(b.flat, { op = "avg", async_op = true })
  end

  -- launches, in bucket order, every bucket that is ready and whose predecessors are
  local function launch_ready(st)
    local pass = st.pass
    while pass.next <= #st.buckets and pass.ready[pass.next] == #st.buckets[pass.next].params do
      launch(st, st.buckets[pass.next])
      pass.next = pass.next + 1
    end
  end

  local function finish(self)
    local st = rawget(self, "_ddp")
    local pass = st.pass
    st.pass = nil
    if pass.next <= #st.buckets then
      local missing = {}
      for bi = pass.next, #st.buckets do
        for i, p in ipairs(st.buckets[bi].params) do
          if not pass.seen[p] then missing[#missing + 1] = st.names[p] or ("parameter " .. i) end
        end
      end
      if #missing > 0 and not st.find_unused then
        fail("%d parameters got no gradient in this backward pass (%s): pass find_unused_parameters = true " ..
             "when some parameters do not take part in the loss", #missing, table.concat(missing, ", "))
      end
      for bi = pass.next, #st.buckets do launch(st, st.buckets[bi]) end
    end
    for _, b in ipairs(st.buckets) do
      b.work:wait()
      b.work = nil
      for i, p in ipairs(b.params) do
        local avg = b.flat:narrow(1, b.offsets[i] + 1, p:numel()):view(p:shape())
        if p.grad ~= nil then p.grad:copy_(avg) else p.grad = avg:clone() end
      end
    end
  end

  function DDP:_ready(p)
    local st = rawget(self, "_ddp")
    if not st.sync then return end
    local pass = st.pass
    if pass == nil then
      pass = { ready = {}, seen = {}, next = 1 }
      st.pass = pass
      A.queue_callback(function() finish(self) end)
    end
    if pass.seen[p] then return end
    pass.seen[p] = true
    local b = st.where[p]
    pass.ready[b] = (pass.ready[b] or 0) + 1
    launch_ready(st)
  end

  function DDP:forward(...)
    local st = rawget(self, "_ddp")
    if st.broadcast_buffers and st.dist.get_world_size() > 1 then
      qlua.no_grad(function()
        for _, b in ipairs(self.module:buffers()) do st.dist.broadcast(b, 0) end
      end)
    end
    return self.module(...)
  end

  --- ddp:no_sync(fn, ...): fn(...) with gradient averaging off (local accumulation); returns
  -- fn's results.
  function DDP:no_sync(fn, ...)
    local st = rawget(self, "_ddp")
    local saved = st.sync
    st.sync = false
    local r = table.pack(pcall(fn, ...))
    st.sync = saved
    if not r[1] then error(r[2], 0) end
    return table.unpack(r, 2, r.n)
  end

  function DDP:bucket_count() return #rawget(self, "_ddp").buckets end

  return parallel
end
