-- Convolutions, padding and pooling (docs/API.md "Neural networks"): qlua.conv2d,
-- conv_transpose2d and conv2d's two gradients against a direct convolution written in plain
-- Lua over the tensors' numbers (strides, padding, "same", dilation, groups, bias; every
-- float dtype; strided inputs), on both devices; their gradients by gradcheck and
-- gradgradcheck; on the GPU both through cuDNN and through im2col + cuBLAS (cuDNN disabled);
-- the pad modes and the poolings against plain-Lua references; the layers against their
-- functional forms; and the errors.
local T, qlua, test, gtest, both = require("qlua.testing").spec(_ENV)
local nn = require("qlua.nn")
local A = require("qlua.autograd")
local F = nn.functional
local F64 = "float64"

local function rnd(shape, dev, dt) return qlua.randn(shape, { dtype = dt or F64, device = dev }) end
local function errmsg(f, ...)
  local ok, e = pcall(f, ...)
  assert.is_false(ok)
  return tostring(e)
end
local function pair(v) return type(v) == "table" and v or { v, v } end

-- a plain N x C x P x Q table of f(n, c, i, j), indices 1-based
local function plane_table(N, C, P, Q, f)
  local out = {}
  for n = 1, N do
    out[n] = {}
    for c = 1, C do
      out[n][c] = {}
      for i = 1, P do
        out[n][c][i] = {}
        for j = 1, Q do out[n][c][i][j] = f(n, c, i, j) end
      end
    end
  end
  return out
end

-- y[n][k][i][j] = b[k] + sum over c, r, s of x[n][g*cg + c][i*st - pad + r*dil][...] w[k][c][r][s]
-- (pads: {top, bottom, left, right} zeros around x, to test "same" with an even filter)
local function conv_ref(X, Wt, B, o)
  local N, C, H, Wd = #X, #X[1], #X[1][1], #X[1][1][1]
  local K, Cg, R, S = #Wt, #Wt[1], #Wt[1][1], #Wt[1][1][1]
  local st, dl, groups = pair(o.stride or 1), pair(o.dilation or 1), o.groups or 1
  local pads = o.pads or { pair(o.padding or 0)[1], pair(o.padding or 0)[1], pair(o.padding or 0)[2], pair(o.padding or 0)[2] }
  local P = (H + pads[1] + pads[2] - dl[1] * (R - 1) - 1) // st[1] + 1
  local Q = (Wd + pads[3] + pads[4] - dl[2] * (S - 1) - 1) // st[2] + 1
  local Kg = K // groups
  local Y = {}
  for n = 1, N do
    Y[n] = {}
    for k = 1, K do
      Y[n][k] = {}
      local g = (k - 1) // Kg
      for i = 1, P do
        Y[n][k][i] = {}
        for j = 1, Q do
          local acc = B and B[k] or 0
          for c = 1, Cg do
            for r = 1, R do
              for s = 1, S do
                local ih = (i - 1) * st[1] - pads[1] + (r - 1) * dl[1] + 1
                local iw = (j - 1) * st[2] - pads[3] + (s - 1) * dl[2] + 1
                if ih >= 1 and ih <= H and iw >= 1 and iw <= Wd then
                  acc = acc + X[n][g * Cg + c][ih][iw] * Wt[k][c][r][s]
                end
              end
            end
          end
          Y[n][k][i][j] = acc
        end
      end
    end
  end
  return Y
end

-- conv_transpose2d as the scatter it is: each input element adds w times itself into the
-- window it reaches (weight (in, out / groups, kh, kw))
local function conv_transpose_ref(X, Wt, B, o)
  local N, Cin, H, Wd = #X, #X[1], #X[1][1], #X[1][1][1]
  local Cog, R, S = #Wt[1], #Wt[1][1], #Wt[1][1][1]
  local st, dl, pd, op = pair(o.stride or 1), pair(o.dilation or 1), pair(o.padding or 0), pair(o.output_padding or 0)
  local groups = o.groups or 1
  local Cout, Cig = Cog * groups, Cin // groups
  local P = (H - 1) * st[1] - 2 * pd[1] + dl[1] * (R - 1) + op[1] + 1
  local Q = (Wd - 1) * st[2] - 2 * pd[2] + dl[2] * (S - 1) + op[2] + 1
  local Y = {}
  for n = 1, N do
    Y[n] = {}
    for c = 1, Cout do
      Y[n][c] = {}
      for i = 1, P do Y[n][c][i] = {}; for j = 1, Q do Y[n][c][i][j] = B and B[c] or 0 end end
    end
    for ci = 1, Cin do
      local g = (ci - 1) // Cig
      for h = 1, H do
        for w = 1, Wd do
          for co = 1, Cog do
            for r = 1, R do
              for s = 1, S do
                local i = (h - 1) * st[1] - pd[1] + (r - 1) * dl[1] + 1
                local j = (w - 1) * st[2] - pd[2] + (s - 1) * dl[2] + 1
                if i >= 1 and i <= P and j >= 1 and j <= Q then
                  local row = Y[n][g * Cog + co][i]
                  row[j] = row[j] + X[n][ci][h][w] * Wt[ci][co][r][s]
                end
              end
            end
          end
        end
      end
    end
  end
  return Y
end

local function numbers(t) return t:detach():cpu():double():totable() end

-- both(name, fn), and on the GPU fn once more with cuDNN disabled: the im2col + cuBLAS path
-- (the one a GPU without cuDNN takes), which qlua.backend names
local function both_paths(name, fn)
  both(name, fn)
  gtest(name .. " (gpu, without cuDNN: im2col + cuBLAS)", function()
    qlua.set_cudnn_enabled(false)
    assert.are.equal("im2col + cuBLAS (cuDNN disabled by qlua.set_cudnn_enabled)", qlua.backend("conv", "gpu"))
    local ok, e = pcall(fn, "gpu")
    qlua.set_cudnn_enabled(true)
    if not ok then error(e, 0) end
    assert.truthy(qlua.backend("conv", "gpu"):match("^cuDNN 9%.%d+%.%d+$"))
  end)
end

local CONVS = {
  { "plain 3x3", { 2, 3, 6, 5 }, { 4, 3, 3, 3 }, {} },
  { "stride, padding, dilation per dim", { 2, 2, 9, 8 }, { 3, 2, 3, 2 },
    { stride = { 2, 1 }, padding = { 1, 2 }, dilation = { 1, 2 } } },
  { "groups 2 with bias", { 1, 4, 5, 5 }, { 6, 2, 3, 3 }, { groups = 2, padding = 1 }, true },
  { "depthwise 1x1", { 2, 3, 4, 4 }, { 3, 1, 1, 1 }, { groups = 3 }, true },
  { "1x1 stride 1 (no columns)", { 2, 5, 3, 4 }, { 2, 5, 1, 1 }, {}, true },
}
local TOL = { float64 = 1e-12, float32 = 1e-5, float16 = 3e-3, bfloat16 = 2e-2 }

test("qlua.backend names what runs the convolutions: im2col + OpenBLAS on the CPU", function()
  assert.are.equal("im2col + OpenBLAS", qlua.backend("conv", "cpu"))
  assert.truthy(errmsg(qlua.backend, "attention", "cpu"):match("^backend: no op family attention %(known: conv, dist%)"))
  assert.truthy(errmsg(qlua.set_cudnn_enabled, 1):match("boolean expected"))
end)

both_paths("conv2d against the direct convolution, in every float dtype and on strided inputs", function(dev)
  local tf32 = qlua.set_cudnn_tf32
  tf32(false)   -- exact float32 on the GPU for this comparison (TF32 is checked below)
  for _, c in ipairs(CONVS) do
    for _, dt in ipairs({ "float64", "float32", "float16", "bfloat16" }) do
      qlua.seed(11)
      local x, w = rnd(c[2], dev, dt), rnd(c[3], dev, dt)
      local b = c[5] and rnd({ c[3][1] }, dev, dt) or nil
      local y = qlua.conv2d(x, w, b, c[4])
      T.assert_close(numbers(y), conv_ref(numbers(x), numbers(w), b and numbers(b), c[4]), TOL[dt], c[1] .. " " .. dt)
      assert.are.equal(dt, y:dtype())
    end
    -- a strided input: x's last two dims swapped twice is a non-contiguous view of the same values
    local x = rnd({ c[2][1], c[2][2], c[2][4], c[2][3] }, dev):transpose(3, 4)
    local w = rnd(c[3], dev)
    T.assert_close(numbers(qlua.conv2d(x, w, nil, c[4])), conv_ref(numbers(x), numbers(w), nil, c[4]), 1e-12, c[1] .. " strided")
  end
  tf32(true)
end)

both("conv2d padding 'same' (an even filter pads one more after, as PyTorch) and 'valid'", function(dev)
  local x, w = rnd({ 1, 2, 5, 6 }, dev), rnd({ 3, 2, 2, 4 }, dev)
  local y = qlua.conv2d(x, w, { padding = "same", dilation = { 1, 1 } })
  assert.are.same({ 1, 3, 5, 6 }, y:shape())
  -- total padding 1 (rows) and 3 (columns): 0 before, 1 after; 1 before, 2 after
  T.assert_close(numbers(y), conv_ref(numbers(x), numbers(w), nil, { pads = { 0, 1, 1, 2 } }), 1e-12)
  local v = qlua.conv2d(x, w, { padding = "valid" })
  assert.are.same({ 1, 3, 4, 3 }, v:shape())
  assert.is_true(A.gradcheck(function(a, b) return qlua.conv2d(a, b, { padding = "same" }) end,
    { x:requires_grad_(), w:requires_grad_() }))
end)

both("an uneven 'same' padding (its explicit pad and cut) leaves no memory behind, forward and backward", function(dev)
  local function run()
    local x, w = rnd({ 1, 2, 5, 6 }, dev):requires_grad_(), rnd({ 3, 2, 2, 4 }, dev):requires_grad_()
    qlua.conv2d(x, w, { padding = "same" }):sum():backward()
  end
  run()
  collectgarbage(); collectgarbage()
  local before = qlua.memory(dev).allocated
  for _ = 1, 3 do run() end
  collectgarbage(); collectgarbage()
  assert.are.equal(before, qlua.memory(dev).allocated)
end)

both_paths("conv_transpose2d against the scatter it is, with stride, padding, output_padding, groups and bias", function(dev)
  local cases = {
    { { 2, 3, 4, 5 }, { 3, 2, 3, 3 }, { stride = 2, padding = 1, output_padding = 1 } },
    { { 1, 4, 3, 3 }, { 4, 1, 2, 3 }, { groups = 2, dilation = { 2, 1 }, stride = { 1, 2 } } },
  }
  for _, c in ipairs(cases) do
    local x, w = rnd(c[1], dev), rnd(c[2], dev)
    local b = rnd({ c[2][2] * (c[3].groups or 1) }, dev)
    local y = qlua.conv_transpose2d(x, w, b, c[3])
    T.assert_close(numbers(y), conv_transpose_ref(numbers(x), numbers(w), numbers(b), c[3]), 1e-12)
  end
end)

both_paths("conv2d_input and conv2d_weight are conv2d's gradients (torch.nn.grad's), against sums over the reference", function(dev)
  local o = { stride = 2, padding = 1, groups = 2 }
  local x, w = rnd({ 2, 4, 5, 6 }, dev), rnd({ 6, 2, 3, 3 }, dev)
  local y = qlua.conv2d(x, w, nil, o)
  local dy = rnd(y:shape(), dev)
  -- <dy, conv(x, w)> is bilinear: its derivative along x is conv2d_input, along w conv2d_weight,
  -- so <conv2d_input(dy), e> = <dy, conv(e, w)> for any e, and the same for the weight
  local function dot(a, b) return (a:double() * b:double()):sum() end
  local e, f = rnd(x:shape(), dev), rnd(w:shape(), dev)
  local gx = qlua.conv2d_input(x:shape(), w, dy, o)
  local gw = qlua.conv2d_weight(x, w:shape(), dy, o)
  local ref_x = 0
  local ce = conv_ref(numbers(e), numbers(w), nil, o)
  local cf = conv_ref(numbers(x), numbers(f), nil, o)
  local D = numbers(dy)
  local ref_w = 0
  for n = 1, #D do for k = 1, #D[1] do for i = 1, #D[1][1] do for j = 1, #D[1][1][1] do
    ref_x = ref_x + D[n][k][i][j] * ce[n][k][i][j]
    ref_w = ref_w + D[n][k][i][j] * cf[n][k][i][j]
  end end end end
  T.assert_close({ dot(gx, e) }, { ref_x }, 1e-12)
  T.assert_close({ dot(gw, f) }, { ref_w }, 1e-12)
end)

-- dw[k][c][r][s] = sum over n, i, j of dy[n][k][i][j] x[n][g*cg + c][ih][iw]: conv2d_weight's reference
local function conv_weight_ref(X, D, wshape, o)
  local K, Cg, R, S = table.unpack(wshape)
  local H, Wd = #X[1][1], #X[1][1][1]
  local st, dl, pd, groups = pair(o.stride or 1), pair(o.dilation or 1), pair(o.padding or 0), o.groups or 1
  local Kg = K // groups
  local out = {}
  for k = 1, K do
    out[k] = {}
    local g = (k - 1) // Kg
    for c = 1, Cg do
      out[k][c] = {}
      for r = 1, R do
        out[k][c][r] = {}
        for s = 1, S do
          local acc = 0
          for n = 1, #D do
            local Dn, Xc = D[n][k], X[n][g * Cg + c]
            for i = 1, #Dn do
              local ih = (i - 1) * st[1] - pd[1] + (r - 1) * dl[1] + 1
              if ih >= 1 and ih <= H then
                local Di, Xr = Dn[i], Xc[ih]
                for j = 1, #Di do
                  local iw = (j - 1) * st[2] - pd[2] + (s - 1) * dl[2] + 1
                  if iw >= 1 and iw <= Wd then acc = acc + Di[j] * Xr[iw] end
                end
              end
            end
          end
          out[k][c][r][s] = acc
        end
      end
    end
  end
  return out
end

-- The CPU lowers a convolution tile by tile: a band of output rows of one image and group whose
-- columns fit a core's cache (cpu_conv.c), the input's gradient adding even bands, then odd ones,
-- and the filters' gradient summing chunks of tiles. Many channels make an image several bands,
-- and nine images more tiles than partial sums, so every one of those paths runs here.
test("conv2d and its two gradients when the CPU splits images into bands of rows (strides, dilation, groups)", function()
  local cases = {
    { "3x3 pad 1", { 9, 512, 8, 8 }, { 2, 512, 3, 3 }, { padding = 1 } },
    { "stride 2, dilation 2", { 3, 512, 17, 17 }, { 2, 512, 3, 3 }, { stride = 2, padding = 2, dilation = 2 } },
    { "groups 2, stride (1, 2)", { 2, 1024, 9, 12 }, { 4, 512, 3, 2 }, { groups = 2, stride = { 1, 2 }, padding = { 1, 0 } } },
    { "groups 4, dilation (2, 1), stride 1", { 2, 1024, 10, 9 }, { 4, 256, 3, 3 }, { groups = 4, padding = { 2, 1 }, dilation = { 2, 1 } } },
    { "a pad past the filter's reach", { 2, 512, 6, 7 }, { 2, 512, 3, 3 }, { padding = 3 } },
  }
  for _, c in ipairs(cases) do
    qlua.seed(23)
    local o = c[4]
    local x, w = rnd(c[2], "cpu"), rnd(c[3], "cpu")
    local X, Wn = numbers(x), numbers(w)
    local Y = conv_ref(X, Wn, nil, o)
    local dy = rnd({ #Y, #Y[1], #Y[1][1], #Y[1][1][1] }, "cpu")
    local D = numbers(dy)
    -- conv2d_input is the transposed convolution of dy, cut to x's size
    local P = conv_transpose_ref(D, Wn, nil, { stride = o.stride, padding = o.padding, dilation = o.dilation, groups = o.groups })
    local GX = plane_table(c[2][1], c[2][2], c[2][3], c[2][4], function(n, ch, i, j) return P[n][ch][i] and P[n][ch][i][j] or 0 end)
    local GW = conv_weight_ref(X, D, c[3], o)
    for _, dt in ipairs({ "float64", "float32" }) do
      local xd, wd, dyd = x:to(dt), w:to(dt), dy:to(dt)
      local tol = dt == "float64" and 1e-10 or 2e-4
      T.assert_close(numbers(qlua.conv2d(xd, wd, nil, o)), Y, tol, c[1] .. " forward " .. dt)
      T.assert_close(numbers(qlua.conv2d_input(x:shape(), wd, dyd, o)), GX, tol, c[1] .. " input gradient " .. dt)
      T.assert_close(numbers(qlua.conv2d_weight(xd, w:shape(), dyd, o)), GW, tol * 10, c[1] .. " filter gradient " .. dt)
    end
    -- the tiles and the partial sums depend on the shape only: one thread gives the same bits
    local function all() return { qlua.conv2d(x, w, nil, o), qlua.conv2d_input(x:shape(), w, dy, o), qlua.conv2d_weight(x, w:shape(), dy, o) } end
    local many, threads = all(), qlua.get_num_threads()
    qlua.set_num_threads(1)
    local one = all()
    qlua.set_num_threads(threads)
    for i = 1, 3 do assert.is_true(many[i]:equal(one[i]), c[1] .. " result " .. i .. " with one thread") end
  end
end)

both_paths("the convolutions' gradients by gradcheck (float64, views, bias), and conv2d's second order", function(dev)
  local x = rnd({ 2, 4, 6, 5 }, dev):requires_grad_()
  local w = rnd({ 6, 2, 3, 2 }, dev):requires_grad_()
  local b = rnd({ 6 }, dev):requires_grad_()
  local o = { stride = { 2, 1 }, padding = { 1, 0 }, dilation = { 1, 2 }, groups = 2 }
  assert.is_true(A.gradcheck(function(a, c, d) return qlua.conv2d(a, c, d, o) end, { x, w, b }))
  -- through a transposed view of the input
  local xt = rnd({ 2, 4, 5, 6 }, dev):requires_grad_()
  assert.is_true(A.gradcheck(function(a, c) return qlua.conv2d(a:transpose(3, 4), c, nil, o) end, { xt, w }))
  local wt = rnd({ 4, 3, 3, 3 }, dev):requires_grad_()
  assert.is_true(A.gradcheck(function(a, c, d) return qlua.conv_transpose2d(a, c, d, { stride = 2, padding = 1, output_padding = 1 }) end,
    { x, wt, rnd({ 3 }, dev):requires_grad_() }))
  assert.is_true(A.gradcheck(function(a, c) return F.conv1d(a, c, nil, { stride = 2, padding = 1, dilation = 2 }) end,
    { rnd({ 2, 4, 9 }, dev):requires_grad_(), rnd({ 3, 4, 3 }, dev):requires_grad_() }))
  assert.is_true(A.gradgradcheck(function(a, c) return qlua.conv2d(a, c, nil, o) end, { x, w }))
end)

gtest("conv2d in float32 on TF32 (the default, as PyTorch's cudnn.allow_tf32) stays within TF32's rounding", function()
  local x, w = rnd({ 2, 8, 7, 7 }, "gpu", "float32"), rnd({ 4, 8, 3, 3 }, "gpu", "float32")
  T.assert_close(numbers(qlua.conv2d(x, w)), conv_ref(numbers(x), numbers(w), nil, {}), 3e-3)
end)

both("conv errors name the op and the values, and leave the process alive", function(dev)
  local x, w = rnd({ 1, 4, 5, 5 }, dev), rnd({ 2, 4, 3, 3 }, dev)
  assert.truthy(errmsg(qlua.conv2d, rnd({ 4, 5, 5 }, dev), w):match("^conv2d: the input must be 4%-D"))
  assert.truthy(errmsg(qlua.conv2d, x, rnd({ 2, 3, 3, 3 }, dev)):match("^conv2d: an input of 4 channels in 1 group needs filters of 4 channels"))
  assert.truthy(errmsg(qlua.conv2d, x, rnd({ 3, 2, 3, 3 }, dev), { groups = 2 }):match("must both divide by groups = 2"))
  assert.truthy(errmsg(qlua.conv2d, x, w, rnd({ 3 }, dev)):match("^conv2d: the bias must be 1%-D of 2"))
  assert.truthy(errmsg(qlua.conv2d, x, w:float()):match("one dtype"))
  assert.truthy(errmsg(qlua.conv2d, x:long(), w:long()):match("float tensors"))
  assert.truthy(errmsg(qlua.conv2d, x, w, { padding = "same", stride = 2 }):match("'same' needs stride 1"))
  assert.truthy(errmsg(qlua.conv2d, x, w, { padding = "full" }):match("padding 'full'"))
  assert.truthy(errmsg(qlua.conv2d, x, w, { strides = 2 }):match("unknown option 'strides'"))
  assert.truthy(errmsg(qlua.conv2d, x, w, { stride = 0 }):match("stride and dilation must be >= 1"))
  assert.truthy(errmsg(qlua.conv2d, x, rnd({ 2, 4, 7, 7 }, dev)):match("smaller than the dilated filter"))
  assert.truthy(errmsg(qlua.conv_transpose2d, x, rnd({ 3, 2, 3, 3 }, dev)):match("^conv_transpose2d: an input of 4 channels"))
  assert.truthy(errmsg(qlua.conv_transpose2d, x, rnd({ 4, 2, 3, 3 }, dev), { output_padding = 1 }):match("output_padding 1 must be below"))
  assert.truthy(errmsg(qlua.conv2d_input, { 1, 4, 6, 6 }, w, rnd({ 1, 2, 3, 3 }, dev)):match("gives an output of 1x2x4x4"))
  if dev ~= "cpu" then assert.truthy(errmsg(qlua.conv2d, x, w:cpu()):match("tensors on gpu:%d+ and cpu")) end
  assert.are.same({ 1, 2, 3, 3 }, qlua.conv2d(x, w):shape())   -- still working
end)

-- ------------------------------------------------------------- pad and pooling
both("pad: constant, reflect and replicate against their index rules; negative pads crop", function(dev)
  local x = rnd({ 2, 3, 4 }, dev)
  local X = numbers(x)
  local function ref(mode, l, r, t, b, value)
    local out = {}
    for n = 1, 2 do
      out[n] = {}
      for i = 1 - t, 3 + b do
        local row = {}
        for j = 1 - l, 4 + r do
          local ii, jj = i, j
          if mode == "reflect" then
            if ii < 1 then ii = 2 - ii elseif ii > 3 then ii = 6 - ii end
            if jj < 1 then jj = 2 - jj elseif jj > 4 then jj = 8 - jj end
          elseif mode == "replicate" then
            ii, jj = math.min(math.max(ii, 1), 3), math.min(math.max(jj, 1), 4)
          end
          row[#row + 1] = (ii >= 1 and ii <= 3 and jj >= 1 and jj <= 4) and X[n][ii][jj] or value
        end
        out[n][#out[n] + 1] = row
      end
    end
    return out
  end
  T.assert_close(numbers(F.pad(x, { 1, 2, 2, 1 }, "constant", 7)), ref("constant", 1, 2, 2, 1, 7), 0)
  T.assert_close(numbers(F.pad(x, { 3, 2, 2, 1 }, "reflect")), ref("reflect", 3, 2, 2, 1), 0)
  T.assert_close(numbers(F.pad(x, { 2, 3, 1, 2 }, "replicate")), ref("replicate", 2, 3, 1, 2), 0)
  assert.are.same({ 2, 3, 3 }, F.pad(x, { -1, 0 }):shape())
  assert.truthy(errmsg(F.pad, x, { 4, 0 }, "reflect"):match("must be below dim 3's size 4"))
  assert.truthy(errmsg(F.pad, x, { 1 }):match("list of pairs"))
  local xr = x:clone():requires_grad_()
  assert.is_true(A.gradcheck(function(a) return F.pad(a, { 1, 2, 2, 1 }, "reflect") end, { xr }))
  assert.is_true(A.gradcheck(function(a) return F.pad(a, { 2, 1, 0, 2 }, "replicate") end, { xr }))
end)

-- the windows of a pool, in plain Lua: fn(values) over each window's in-range elements
-- (count: how many padded positions it also covers)
local function pool_ref(X, k, s, p, d, ceil, fn)
  local N, C, H, W = #X, #X[1], #X[1][1], #X[1][1][1]
  local function size(n, a)
    local room = n + 2 * p[a] - d[a] * (k[a] - 1) - 1
    local m = (ceil and -((-room) // s[a]) or room // s[a]) + 1
    if ceil and (m - 1) * s[a] >= n + p[a] then m = m - 1 end
    return m
  end
  local P, Q = size(H, 1), size(W, 2)
  return plane_table(N, C, P, Q, function(n, c, i, j)
    local vals, pos, padded = {}, {}, 0
    for a = 0, k[1] - 1 do
      for b = 0, k[2] - 1 do
        local ih, iw = (i - 1) * s[1] - p[1] + a * d[1], (j - 1) * s[2] - p[2] + b * d[2]
        if ih >= 0 and ih < H and iw >= 0 and iw < W then
          vals[#vals + 1], pos[#pos + 1] = X[n][c][ih + 1][iw + 1], ih * W + iw + 1
        elseif ih < H + p[1] and iw < W + p[2] then
          padded = padded + 1
        end
      end
    end
    return fn(vals, pos, padded)
  end)
end
local function maxv(v) local m = -math.huge; for _, x in ipairs(v) do m = math.max(m, x) end; return m end
local function argmaxv(v, pos) local m, at = -math.huge, nil; for i, x in ipairs(v) do if x > m then m, at = x, pos[i] end end; return at end
local function mean_incl(v, _, padded) local s = 0; for _, x in ipairs(v) do s = s + x end; return s / (#v + padded) end
local function mean_excl(v) local s = 0; for _, x in ipairs(v) do s = s + x end; return s / #v end

both("max_pool2d: values and 1-based indices against the window rule (padding, dilation, ceil_mode)", function(dev)
  local x = rnd({ 2, 3, 7, 8 }, dev)
  local X = numbers(x)
  for _, c in ipairs({ { 2, 2, 0, 1, false }, { 3, 2, 1, 1, false }, { 3, 2, 1, 2, false }, { 3, 2, 0, 1, true } }) do
    local k, s, p, d, ceil = { c[1], c[1] }, { c[2], c[2] }, { c[3], c[3] }, { c[4], c[4] }, c[5]
    local v, i = F.max_pool2d(x, c[1], { stride = c[2], padding = c[3], dilation = c[4], ceil_mode = ceil, return_indices = true })
    T.assert_close(numbers(v), pool_ref(X, k, s, p, d, ceil, maxv), 0)
    assert.are.same(pool_ref(X, k, s, p, d, ceil, argmaxv), i:cpu():totable())
  end
  -- a NaN in a window is its maximum, at the NaN's position, wherever larger values are
  local xn = qlua.tensor({ { { { 1, 0 / 0, 5, 2 }, { 9, 3, 4, 8 } } } }, { dtype = F64, device = dev })
  local vn, in_ = F.max_pool2d(xn, 2, { return_indices = true })
  local vals = numbers(vn)[1][1][1]
  assert.is_true(vals[1] ~= vals[1])
  assert.are.equal(8, vals[2])
  assert.are.same({ { { { 2, 8 } } } }, in_:cpu():totable())
  local xr = x:clone():requires_grad_()
  assert.is_true(A.gradcheck(function(a) return F.max_pool2d(a, 3, { stride = 2, padding = 1 }) end, { xr }))
  local m = nn.MaxPool2d(2)
  assert.are.same({ 2, 3, 3, 4 }, m(x):shape())
  assert.truthy(errmsg(F.max_pool2d, x, 3, { padding = 2 }):match("at most half the kernel size"))
  assert.truthy(errmsg(F.max_pool2d, rnd({ 7, 8 }, dev), 2):match("3%-D .* or 4%-D"))
  assert.truthy(errmsg(nn.MaxPool2d, 2, { strides = 1 }):match("MaxPool2d: unknown option 'strides'"))
end)

both("avg_pool2d (with and without count_include_pad) and adaptive_avg_pool2d against the window means", function(dev)
  local x = rnd({ 2, 3, 7, 8 }, dev)
  local X = numbers(x)
  local k, s, p, one = { 3, 3 }, { 2, 2 }, { 1, 1 }, { 1, 1 }
  T.assert_close(numbers(F.avg_pool2d(x, 3, { stride = 2, padding = 1 })), pool_ref(X, k, s, p, one, false, mean_incl), 1e-12)
  T.assert_close(numbers(F.avg_pool2d(x, 3, { stride = 2, padding = 1, count_include_pad = false })),
                 pool_ref(X, k, s, p, one, false, mean_excl), 1e-12)
  -- adaptive: rows floor(i H / P) .. ceil((i + 1) H / P) - 1, the same for the columns
  local function adaptive_ref(P, Q)
    return plane_table(2, 3, P, Q, function(n, c, i, j)
      local r0, r1 = ((i - 1) * 7) // P, -((-i * 7) // P)
      local c0, c1 = ((j - 1) * 8) // Q, -((-j * 8) // Q)
      local sum, cnt = 0, 0
      for a = r0, r1 - 1 do for b = c0, c1 - 1 do sum, cnt = sum + X[n][c][a + 1][b + 1], cnt + 1 end end
      return sum / cnt
    end)
  end
  T.assert_close(numbers(F.adaptive_avg_pool2d(x, { 3, 5 })), adaptive_ref(3, 5), 1e-12)
  T.assert_close(numbers(F.adaptive_avg_pool2d(x, { 7, 4 })), adaptive_ref(7, 4), 1e-12)
  T.assert_close(numbers(nn.AdaptiveAvgPool2d(1)(x)), adaptive_ref(1, 1), 1e-12)
  local xr = x:clone():requires_grad_()
  assert.is_true(A.gradcheck(function(a) return F.avg_pool2d(a, 3, { stride = 2, padding = 1, count_include_pad = false }) end, { xr }))
  assert.is_true(A.gradcheck(function(a) return F.adaptive_avg_pool2d(a, { 3, 5 }) end, { xr }))
end)

both("interpolate: nearest and bilinear (with and without align_corners) against PyTorch's source coordinates", function(dev)
  local x = rnd({ 2, 3, 4, 5 }, dev)
  local X = numbers(x)
  local function src_index(j, n, m, mode, align, scale)
    if mode == "nearest" then return math.min(math.floor(j * (scale or n / m)), n - 1), 0 end
    local s = align and (m > 1 and j * (n - 1) / (m - 1) or 0) or math.max((j + 0.5) * (scale or n / m) - 0.5, 0)
    local lo = math.min(math.floor(s), n - 1)
    return lo, s - lo
  end
  local function ref(P, Q, mode, align, sh, sw)
    return plane_table(2, 3, P, Q, function(n, c, i, j)
      local r, wr = src_index(i - 1, 4, P, mode, align, sh)
      local q, wq = src_index(j - 1, 5, Q, mode, align, sw)
      local r1, q1 = math.min(r + 1, 3), math.min(q + 1, 4)
      local v = function(a, b) return X[n][c][a + 1][b + 1] end
      return (1 - wr) * ((1 - wq) * v(r, q) + wq * v(r, q1)) + wr * ((1 - wq) * v(r1, q) + wq * v(r1, q1))
    end)
  end
  T.assert_close(numbers(F.interpolate(x, { size = { 7, 3 } })), ref(7, 3, "nearest"), 0)
  T.assert_close(numbers(F.interpolate(x, { scale_factor = 2 })), ref(8, 10, "nearest", false, 0.5, 0.5), 0)
  T.assert_close(numbers(F.interpolate(x, { size = { 7, 9 }, mode = "bilinear" })), ref(7, 9, "bilinear"), 1e-12)
  T.assert_close(numbers(F.interpolate(x, { size = { 7, 9 }, mode = "bilinear", align_corners = true })),
                 ref(7, 9, "bilinear", true), 1e-12)
  assert.is_true(A.gradcheck(function(a) return F.interpolate(a, { size = { 6, 7 }, mode = "bilinear" }) end,
    { x:clone():requires_grad_() }))
  assert.truthy(errmsg(F.interpolate, x, { size = 3, scale_factor = 2 }):match("exactly one of size and scale_factor"))
  assert.truthy(errmsg(F.interpolate, x, { size = 3, mode = "bicubic" }):match("mode must be"))
end)

-- ------------------------------------------------------------- layers
both("Conv1d, Conv2d and ConvTranspose2d: their functional forms, PyTorch's shapes, init bounds and names", function(dev)
  local c = nn.Conv2d(4, 6, { 3, 2 }, { stride = 2, padding = 1, groups = 2, dtype = F64, device = dev })
  assert.are.same({ 6, 2, 3, 2 }, c.weight:shape())
  local x = rnd({ 2, 4, 7, 6 }, dev)
  T.assert_close(numbers(c(x)), numbers(F.conv2d(x, c.weight, c.bias, { stride = 2, padding = 1, groups = 2 })), 0)
  -- kaiming_uniform_ with a = sqrt(5): bound 1 / sqrt(fan_in), fan_in = 2 * 3 * 2 = 12; the bias too
  local bound = 1 / math.sqrt(12)
  assert.truthy(c.weight:abs():max():item() <= bound and c.bias:abs():max():item() <= bound)
  local names = {}
  for _, p in ipairs(c:named_parameters()) do names[#names + 1] = p[1] end
  assert.are.same({ "weight", "bias" }, names)
  local ct = nn.ConvTranspose2d(4, 3, 3, { stride = 2, padding = 1, output_padding = 1, dtype = F64, device = dev })
  assert.are.same({ 4, 3, 3, 3 }, ct.weight:shape())
  assert.are.same({ 2, 3, 14, 12 }, ct(x):shape())
  local c1 = nn.Conv1d(4, 2, 3, { padding = 1, padding_mode = "reflect", bias = false, dtype = F64, device = dev })
  local x1 = rnd({ 2, 4, 9 }, dev)
  assert.is_nil(c1.bias)
  T.assert_close(numbers(c1(x1)), numbers(F.conv1d(F.pad(x1, { 1, 1 }, "reflect"), c1.weight)), 0)
  -- a small CNN trains a step through every layer here
  local net = nn.Sequential(nn.Conv2d(1, 4, 3, { padding = 1, dtype = F64, device = dev }), nn.ReLU(),
                            nn.MaxPool2d(2), nn.Flatten(), nn.Linear(4 * 4 * 4, 3, { dtype = F64, device = dev }))
  local loss = F.cross_entropy(net(rnd({ 5, 1, 8, 8 }, dev)), qlua.tensor({ 1, 2, 3, 1, 2 }, { device = dev }))
  loss:backward()
  assert.are.same({ 4, 1, 3, 3 }, net:get(1).weight.grad:shape())
  assert.truthy(errmsg(nn.Conv2d, 4, 6, 3, { groups = 4 }):match("^Conv2d: groups must divide"))
  assert.truthy(errmsg(nn.Conv2d, 4, 6, 3, { padding_mode = "circular" }):match("padding_mode"))
  assert.truthy(errmsg(function() return c(rnd({ 2, 3, 7, 6 }, dev)) end):match("^Conv2d: expected an input %(N, 4, H, W%) of 4 channels, got 2x3x7x6"))
  assert.truthy(errmsg(function() return c1(rnd({ 2, 4, 9, 1 }, dev)) end):match("^Conv1d: expected an input %(N, 4, L%)"))
end)
