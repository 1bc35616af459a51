-- qlua.fuzz.entries.meta — the fuzzer's entries for metamethods called directly, with
-- anything (getmetatable(t).__gc(5)).

return function(ctx)
  local R = ctx.R
  local entry = ctx.entry
  local g_junk = ctx.g_junk

  -- ---- metamethods called directly, with anything (scripts can: getmetatable(t).__gc(5))
  for _, m in ipairs({ { "__gc", {} }, { "__close", {} }, { "__index", { "index" } },
                       { "__newindex", { "index", "newindex" } }, { "__len", { "len" } },
                       { "__tostring", { "tostring" } }, { "__add", { "add" } },
                       { "__sub", { "sub" } }, { "__mul", { "mul" } }, { "__div", { "div" } },
                       { "__pow", { "pow" } }, { "__unm", { "neg", "unm" } } }) do
    local names = { m[1], m[1]:sub(3) }
    for _, alias in ipairs(m[2]) do names[#names + 1] = alias end
    entry { name = m[1], kind = "meta", ret = "any", names = names, weight = 0.3,
            mutates = (m[1] == "__gc" or m[1] == "__close" or m[1] == "__newindex"),
            gen = function(a, _, self)
              a.n = R:int(0, 3)
              for i = 1, a.n do a[i] = g_junk() end
              if a.n >= 1 and R:chance(0.5) then a[1] = self end
            end }
  end
end
