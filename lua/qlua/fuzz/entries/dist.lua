-- qlua.fuzz.entries.dist — the fuzzer's entries for qlua.dist, in a world of one (the
-- process group is initialised when the entries are made, unless one is already): every
-- collective with the pool's tensors (any dtype, device, view, or freed), lists of them,
-- ranks and options near the valid ones, and now and then junk; each must succeed or raise.

return function(ctx)
  local R, entry, pool_pick, g_junk = ctx.R, ctx.entry, ctx.pool_pick, ctx.g_junk
  local dist = require("qlua.dist")
  if not dist.is_initialized() then dist.init_process_group() end

  local OPS = { "sum", "prod", "max", "min", "avg", "mean", 1 }
  local function g_opts(with_op)
    local r = R:float()
    if r < 0.3 then return nil end
    if r < 0.92 then
      local o = {}
      if with_op and R:chance(0.7) then o.op = R:pick(OPS) end
      if R:chance(0.3) then o.async_op = R:chance(0.5) end
      if R:chance(0.05) then o.bogus = 1 end
      return o
    end
    return g_junk()
  end
  local function g_tensor() if R:chance(0.9) then return pool_pick() end return g_junk() end
  local function g_list()
    if R:chance(0.1) then return g_junk() end
    local l = {}
    for i = 1, R:pick({ 1, 1, 1, 2, 0 }) do l[i] = g_tensor() end
    return l
  end
  local function g_rank() return R:chance(0.8) and 0 or R:pick({ 1, -1, 0.5, "0", 2 ^ 40 }) end

  local function one(name, fill)
    entry { name = "dist." .. name, names = { name }, kind = "module", ret = "any", weight = 0.5,
            gen = function(a) fill(a) end }
  end
  one("all_reduce", function(a) a.n = 2; a[1] = g_tensor(); a[2] = g_opts(true) end)
  one("broadcast", function(a) a.n = 3; a[1] = g_tensor(); a[2] = g_rank(); a[3] = g_opts(false) end)
  one("reduce", function(a) a.n = 3; a[1] = g_tensor(); a[2] = g_rank(); a[3] = g_opts(true) end)
  one("all_gather", function(a) a.n = 3; a[1] = g_list(); a[2] = g_tensor(); a[3] = g_opts(false) end)
  one("all_gather_into_tensor", function(a) a.n = 3; a[1] = g_tensor(); a[2] = g_tensor(); a[3] = g_opts(false) end)
  one("reduce_scatter", function(a) a.n = 3; a[1] = g_tensor(); a[2] = g_list(); a[3] = g_opts(true) end)
  one("reduce_scatter_tensor", function(a) a.n = 3; a[1] = g_tensor(); a[2] = g_tensor(); a[3] = g_opts(true) end)
  one("all_to_all", function(a) a.n = 3; a[1] = g_list(); a[2] = g_list(); a[3] = g_opts(false) end)
  one("all_to_all_single", function(a) a.n = 3; a[1] = g_tensor(); a[2] = g_tensor(); a[3] = g_opts(false) end)
  one("barrier", function(a) a.n = 0 end)
end
