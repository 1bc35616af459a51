-- qlua.fuzz.entries.nn — the fuzzer's entries for the runtime ops under qlua.nn and
-- qlua.optim: qlua.conv2d, conv_transpose2d, conv2d_input, conv2d_weight, qlua._norm,
-- _norm_backward, _pool2d, _attention, _attention_backward and _optim_step, with shapes and options mostly near the valid
-- ones (a channel count, a stride, a padding or a list off by one) and now and then junk;
-- each must succeed or raise, whatever it is given.

return function(ctx)
  local R, entry, tdevice = ctx.R, ctx.entry, ctx.tdevice
  local DTYPES, g_junk, pool_pick = ctx.DTYPES, ctx.g_junk, ctx.pool_pick
  local make_tensor_shaped = ctx.make_tensor_shaped
  local FLOATS = { "float32", "float64", "float16", "bfloat16" }

  local function small() return R:int(0, 4) end
  local function g_dtype() return R:chance(0.85) and R:pick(FLOATS) or R:pick(DTYPES) end
  -- an option value: a number, a pair, a string or junk
  local function g_opt_value(key)
    local r = R:float()
    if r < 0.5 then return R:int(key == "padding" and 0 or 1, 3) end
    if r < 0.7 then return { R:int(0, 3), R:int(-1, 3) } end
    if r < 0.8 and key == "padding" then return R:pick({ "same", "valid", "full" }) end
    if r < 0.9 then return R:int(-2, 0) end
    return g_junk()
  end
  local function g_conv_opts(transposed)
    if R:chance(0.3) then return nil end
    local o = {}
    for _, k in ipairs({ "stride", "padding", "dilation", "groups" }) do
      if R:chance(0.4) then o[k] = k == "groups" and R:pick({ 1, 1, 2, 3, 0 }) or g_opt_value(k) end
    end
    if transposed and R:chance(0.4) then o.output_padding = g_opt_value("output_padding") end
    if R:chance(0.05) then o.strides = 1 end
    return o
  end
  -- (x, w) of one dtype and device, channels matching most of the time
  local function g_pair(transposed)
    local dt, dev = g_dtype(), tdevice(pool_pick())
    local n, c, k = R:int(0, 2), R:int(1, 4), R:int(1, 4)
    local xs = { n, c, R:int(1, 7), R:int(1, 7) }
    local ws = transposed and { c, k, R:int(1, 3), R:int(1, 3) } or { k, c, R:int(1, 3), R:int(1, 3) }
    if R:chance(0.15) then ws[2] = ws[2] + 1 end
    if R:chance(0.05) then table.remove(xs) end
    local x = make_tensor_shaped(xs, dt, dev)
    local w = make_tensor_shaped(ws, R:chance(0.9) and dt or R:pick(DTYPES), dev)
    return x, w, k
  end
  for _, name in ipairs({ "conv2d", "conv_transpose2d" }) do
    local transposed = name == "conv_transpose2d"
    entry { name = name, kind = "module", ret = "tensor", weight = 1,
            gen = function(a)
              local x, w, k = g_pair(transposed)
              if not (x and w) then return false end
              a.n = 2; a[1], a[2] = x, w
              local r = R:float()
              if r < 0.3 then
                a.n = 3; a[3] = make_tensor_shaped({ R:chance(0.8) and k or k + 1 }, x:dtype(), tdevice(x))
                if R:chance(0.5) then a.n = 4; a[4] = g_conv_opts(transposed) end
              elseif r < 0.9 then
                a.n = 3; a[3] = g_conv_opts(transposed)
              elseif r < 0.95 then
                a.n = 3; a[3] = g_junk()
              end
            end }
  end
  entry { name = "conv2d_input", kind = "module", ret = "tensor", weight = 0.5,
          gen = function(a)
            local x, w = g_pair(false)
            if not (x and w) then return false end
            local ok, y = pcall(qlua.conv2d, x, w)
            local dy = ok and y or make_tensor_shaped({ small(), small(), small(), small() }, x:dtype(), tdevice(x))
            if not dy then return false end
            a.n = 3; a[1], a[2], a[3] = R:chance(0.9) and x:shape() or { small(), small() }, w, dy
          end }
  entry { name = "conv2d_weight", kind = "module", ret = "tensor", weight = 0.5,
          gen = function(a)
            local x, w = g_pair(false)
            if not (x and w) then return false end
            local ok, y = pcall(qlua.conv2d, x, w)
            local dy = ok and y or make_tensor_shaped({ small(), small(), small(), small() }, x:dtype(), tdevice(x))
            if not dy then return false end
            a.n = 3; a[1], a[2], a[3] = x, R:chance(0.9) and w:shape() or { small(), -1, 2, 2 }, dy
          end }
  -- qlua._norm and _norm_backward: an input of 1..4 dims, a weight and bias of the size
  -- the kind wants most of the time, statistics from a forward call or of a wrong size
  local NORM_KINDS = { "layer", "rms", "group", "batch", "instance" }
  local function g_norm(a)
    local dt, dev = g_dtype(), tdevice(pool_pick())
    local kind = R:pick(NORM_KINDS)
    local shape = {}
    for d = 1, R:int(1, 4) do shape[d] = R:int(0, 4) end
    local x = make_tensor_shaped(shape, dt, dev)
    if not x then return nil end
    local c = (kind == "layer" or kind == "rms") and shape[#shape] or shape[2] or 1
    if R:chance(0.15) then c = R:int(0, 5) end
    local w = R:chance(0.7) and make_tensor_shaped({ c }, R:chance(0.9) and dt or R:pick(DTYPES), dev) or nil
    local b = R:chance(0.5) and make_tensor_shaped({ c }, dt, dev) or nil
    local o = { eps = R:pick({ 1e-5, 0, -1, 1 / 0 }), normalized = R:pick({ 1, 1, 2, 0, 5 }),
                groups = R:pick({ 1, 2, 3, 0 }), eval = R:chance(0.3) }
    if o.eval then
      o.running_mean = make_tensor_shaped({ R:chance(0.9) and c or c + 1 }, dt, dev)
      o.running_var = R:chance(0.9) and make_tensor_shaped({ c }, "float32", dev) or g_junk()
    end
    if R:chance(0.05) then o = g_junk() end
    return kind, x, w, b, o
  end
  entry { name = "_norm", kind = "module", ret = "tensor", names = { "_norm", "layer_norm", "rms_norm", "group_norm", "batch_norm" }, weight = 0.5,
          gen = function(a)
            local kind, x, w, b, o = g_norm(a)
            if not kind then return false end
            a.n = 5; a[1], a[2], a[3], a[4], a[5] = kind, x, w, b, o
          end }
  entry { name = "_norm_backward", kind = "module", ret = "any",
          names = { "_norm_backward", "layer_norm", "rms_norm", "group_norm", "batch_norm" }, weight = 0.5,
          gen = function(a)
            local kind, x, w, b, o = g_norm(a)
            if not kind then return false end
            local ok, _, mean, rstd = pcall(qlua._norm, kind, x, w, b, o)
            if not ok or R:chance(0.1) then
              mean = make_tensor_shaped({ small() }, "float32", tdevice(x))
              rstd = make_tensor_shaped({ small() }, R:pick({ "float32", "float64", "int32" }), tdevice(x))
            end
            if not rstd then return false end
            local dy = R:chance(0.9) and make_tensor_shaped(x:shape(), x:dtype(), tdevice(x))
                       or make_tensor_shaped({ small(), small() }, x:dtype(), tdevice(x))
            if not dy then return false end
            a.n = 10
            a[1], a[2], a[3], a[4], a[5], a[6], a[7] = kind, dy, x, w, mean, rstd, type(o) == "table" and o or {}
            a[8], a[9], a[10] = R:chance(0.8), R:chance(0.6), R:chance(0.6)
          end }
  -- qlua._pool2d: max (with or without its indices), avg and avg's backward
  entry { name = "_pool2d", kind = "module", ret = "tensor",
          names = { "_pool2d", "max_pool2d", "avg_pool2d", "avg_pool2d_backward" }, weight = 0.5,
          gen = function(a)
            local dt, dev = g_dtype(), tdevice(pool_pick())
            local shape = { R:int(0, 2), R:int(1, 3), R:int(1, 7), R:int(1, 7) }
            if R:chance(0.1) then table.remove(shape, 1) end
            if R:chance(0.05) then table.remove(shape, 1) end
            local x = make_tensor_shaped(shape, dt, dev)
            if not x then return false end
            local o = { kernel_size = g_opt_value("kernel_size") }
            for _, k in ipairs({ "stride", "padding", "dilation" }) do
              if R:chance(0.4) then o[k] = g_opt_value(k) end
            end
            o.ceil_mode, o.count_include_pad = R:chance(0.3), R:chance(0.7)
            if R:chance(0.2) then o.divisor_override = R:pick({ 1, 3, 0, -2, 2.5 }) end
            local mode = R:pick({ "max", "max", "avg", "avg_backward", "min" })
            if mode == "avg_backward" then
              local ok, y = pcall(qlua._pool2d, "avg", x, o)
              local dy = ok and R:chance(0.9) and y or make_tensor_shaped({ small(), small(), small(), small() }, dt, dev)
              if not dy then return false end
              a.n = 4; a[1], a[2], a[3], a[4] = mode, dy, x, o
            else
              a.n = 4; a[1], a[2], a[3], a[4] = mode, x, R:chance(0.95) and o or g_junk(), R:chance(0.5)
            end
          end }
  -- qlua._attention and _attention_backward: q, k, v of 2..4 dims with head, sequence and
  -- feature sizes near agreeing (grouped heads, a dim off by one), masks bool, float, of
  -- another dtype or of a shape that does not broadcast, options in and out of range
  local function g_attention()
    local dt, dev = g_dtype(), tdevice(pool_pick())
    local nd = R:int(2, 4)
    local hk = R:int(1, 2)
    local hq = hk * R:pick({ 1, 1, 2 }) + (R:chance(0.1) and 1 or 0)
    local sq, sk, d, dv = R:int(0, 5), R:int(0, 6), R:int(1, 5), R:int(1, 5)
    local function shape(h, s, e)
      local t = { s, e }
      if nd >= 3 then table.insert(t, 1, h) end
      if nd >= 4 then table.insert(t, 1, 2) end
      return t
    end
    local q = make_tensor_shaped(shape(hq, sq, d), dt, dev)
    local k = make_tensor_shaped(shape(hk, sk, R:chance(0.9) and d or d + 1), R:chance(0.95) and dt or R:pick(DTYPES), dev)
    local v = make_tensor_shaped(shape(hk, R:chance(0.9) and sk or sk + 1, dv), dt, dev)
    if not (q and k and v) then return nil end
    local mask
    if R:chance(0.4) then
      mask = make_tensor_shaped(R:chance(0.8) and { sq, sk } or { R:int(0, 3), sk },
                                R:pick({ "bool", "bool", dt, "float32", "int32" }), dev)
    end
    local o = { is_causal = R:chance(0.3), enable_gqa = R:chance(0.7),
                dropout_p = R:pick({ 0, 0, 0.3, 1, -0.5, 2 }) }
    if R:chance(0.2) then o.scale = R:pick({ 0.5, 0, -1, 1 / 0, "x" }) end
    if R:chance(0.05) then o = g_junk() end
    return q, k, v, mask, o
  end
  entry { name = "_attention", kind = "module", ret = "tensor",
          names = { "_attention", "scaled_dot_product_attention" }, weight = 0.5,
          gen = function(a)
            local q, k, v, mask, o = g_attention()
            if not q then return false end
            a.n = 5; a[1], a[2], a[3], a[4], a[5] = q, k, v, mask, o
          end }
  entry { name = "_attention_backward", kind = "module", ret = "any",
          names = { "_attention_backward", "scaled_dot_product_attention",
                    "scaled_dot_product_attention_backward" }, weight = 0.5,
          gen = function(a)
            local q, k, v, mask, o = g_attention()
            if not q then return false end
            local ok, out, lse = pcall(qlua._attention, q, k, v, mask, o)
            if not ok or R:chance(0.1) then
              out = make_tensor_shaped({ small(), small() }, q:dtype(), tdevice(q))
              lse = make_tensor_shaped({ small() }, R:pick({ "float32", "float64", "int32" }), tdevice(q))
            end
            if not (out and lse) then return false end
            local dout = R:chance(0.9) and make_tensor_shaped(out:shape(), out:dtype(), tdevice(q))
                         or make_tensor_shaped({ small(), small() }, q:dtype(), tdevice(q))
            if not dout then return false end
            a.n = 11
            a[1], a[2], a[3], a[4], a[5], a[6], a[7] = dout, q, k, v, mask, out, lse
            a[8] = type(o) == "table" and o or {}
            a[9], a[10], a[11] = R:chance(0.8), R:chance(0.6), R:chance(0.6)
          end }
  -- qlua._optim_step over tensors of one shape most of the time (it writes them in place:
  -- fresh ones, so the pool's own are not changed under the other entries)
  entry { name = "_optim_step", kind = "module", ret = "none", weight = 0.5,
          gen = function(a)
            local kind = R:pick({ "sgd", "adam", "adamw", "sgd", "lamb" })
            local dt, dev = g_dtype(), tdevice(pool_pick())
            local n = R:int(0, 3)
            local shape = { R:int(0, 5) }
            local function fresh() return qlua.zeros(R:chance(0.9) and shape or { R:int(0, 5) }, { dtype = R:chance(0.9) and dt or R:pick(DTYPES), device = dev }) end
            local ps, gs, s1, s2 = {}, {}, {}, {}
            for k = 1, n do ps[k], gs[k], s1[k], s2[k] = fresh(), fresh(), fresh(), fresh() end
            if R:chance(0.1) and n > 1 then gs[2] = ps[1] end
            local group = { lr = R:pick({ 0.1, 1e-3, -1, 0 }), momentum = R:pick({ 0, 0.9 }),
                            weight_decay = R:pick({ 0, 0.01 }), betas = { 0.9, 0.999 }, amsgrad = R:chance(0.3) }
            local states = kind == "sgd" and (group.momentum ~= 0 and { s1 } or {}) or { s1, s2 }
            if group.amsgrad and kind ~= "sgd" then states[3] = s2 end   -- shares memory: an error
            if R:chance(0.1) then states = g_junk() end
            a.n = 6; a[1], a[2], a[3], a[4], a[5], a[6] = kind, group, ps, gs, states, R:pick({ 1, 2, 0 })
          end }
end
