-- qlua.fuzz.entries.formats — the fuzzer's entries for files: qlua.save/load and
-- save_safetensors/load_safetensors (paths and files from fuzz/files.lua).

return function(ctx)
  local R = ctx.R
  local entry, pool_pick = ctx.entry, ctx.pool_pick
  local read_problem, tensor_problem = ctx.read_problem, ctx.tensor_problem
  local LOAD_PATHS, SAVE_PATHS, ST_LOAD_PATHS = ctx.LOAD_PATHS, ctx.SAVE_PATHS, ctx.ST_LOAD_PATHS
  local st_mutate, ST_MUTATED, ST_SAVE_PATHS = ctx.st_mutate, ctx.ST_MUTATED, ctx.ST_SAVE_PATHS
  local write_file = ctx.write_file
  local g_junk, g_opts = ctx.g_junk, ctx.g_opts

  entry { name = "save", kind = "module", ret = "any", weight = 0.5,
          gen = function(a) a.n = 2; a[1] = R:pick(SAVE_PATHS); a[2] = pool_pick() end }
  entry { name = "load", kind = "module", ret = "tensor", weight = 0.5,
          gen = function(a)
            a.n = 1; a[1] = R:pick(LOAD_PATHS)
            if R:chance(0.3) then a.n = 2; a[2] = g_opts() end
          end }
  -- safetensors: saves of pool tensors under odd names with odd metadata (sometimes junk
  -- keys and values), loads of saved, valid, missing and freshly mutated files
  local ST_NAMES = { "w", "layer.0.weight", "", "é", "x", ("n"):rep(300), "q\"uote\n" }
  local ST_BAD_NAMES = { "__metadata__", "a\0b", "\255", "\192\128" }
  local function g_st_metadata()
    local r = R:float()
    if r < 0.5 then return { format = R:pick({ "pt", "", "\0", "é", ("v"):rep(200) }) } end
    if r < 0.7 then
      return { [R:pick(R:chance(0.8) and ST_NAMES or ST_BAD_NAMES)] = R:pick({ "v", "\255", "a\0b" }) }
    end
    local m = {}
    local k, v = g_junk(), g_junk()
    if k ~= nil and k == k then m[k] = v end
    return m
  end
  entry { name = "save_safetensors", kind = "module", ret = "any", weight = 2,
          gen = function(a)
            a.n = 2; a[1] = R:pick(R:chance(0.7) and { ST_SAVE_PATHS[1], ST_SAVE_PATHS[2] } or ST_SAVE_PATHS)
            local t = {}
            for _ = 1, R:int(0, 4) do
              local r = R:float()
              local name = r < 0.9 and R:pick(ST_NAMES) or r < 0.95 and R:pick(ST_BAD_NAMES) or g_junk()
              local v = R:chance(0.85) and pool_pick() or g_junk()
              if name ~= nil and name == name then t[name] = v end
            end
            a[2] = R:chance(0.9) and t or g_junk()
            if R:chance(0.5) then a.n = 3; a[3] = R:chance(0.85) and g_st_metadata() or g_junk() end
          end }
  entry { name = "load_safetensors", kind = "module", ret = "any", weight = 6,
          gen = function(a)
            a.n = 1
            if R:chance(0.75) then
              write_file("mut.safetensors", st_mutate())
              a[1] = ST_MUTATED
            else
              a[1] = R:pick(ST_LOAD_PATHS)
            end
            if R:chance(0.3) then a.n = 2; a[2] = g_opts() end
          end,
          expect = function(_, _, res)
            local t, m = res[1], res[2]
            if res.n ~= 2 or type(t) ~= "table" or type(m) ~= "table" then
              return "returned " .. res.n .. " values: " .. type(t) .. ", " .. type(m)
            end
            for k, v in pairs(t) do
              if type(k) ~= "string" then return "a tensor name is a " .. type(k) end
              local p = tensor_problem(v) or read_problem(v)
              if p then return "tensor '" .. k .. "': " .. p end
            end
            for k, v in pairs(m) do
              if type(k) ~= "string" or type(v) ~= "string" then
                return "metadata maps a " .. type(k) .. " to a " .. type(v)
              end
            end
          end }
end
