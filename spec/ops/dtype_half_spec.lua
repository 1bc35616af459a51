--[[
The 16-bit float dtypes float16 and bfloat16 (runtime/half.h's header comment is
the contract of their bits). Everything is judged against plain-Lua references written
from that contract (lua/qlua/testing.lua, "16-bit floats"):

  1. conversions, bit for bit: all 65,536 patterns of each type to float32 and back (and
     to float64, to the other 16-bit type), every rounding tie of each type as a float32
     with its neighbours, subnormal and overflow boundaries, random float32 patterns, NaN
     payloads (signaling ones too), and float64 inputs that going through float32 would
     round twice; on the contiguous (vector) and strided (scalar) paths, and through
     tensor, full, fill_, t[i] = v, masked_fill, index_fill_, scatter_ and where;
  2. arithmetic computed in float32 and rounded once: + - * / bit for bit against
     round16(float32(a op b)), with Lua numbers (kept in float32) on either side, on views
     and broadcast; pow and the unary math within one 16-bit step; comparisons (bool);
  3. promotion (PyTorch's) and conversions to and from every other dtype;
  4. reductions accumulating in float32 (4096 ones sum to 4096; a float16 accumulator
     stalls at 2048), against float64 references rounded;
  5. matmul (2-D, batched, broadcast, transposed and strided operands) against float64,
     with the relative error printed;
  6. the other op families on 16-bit inputs against the same ops on float32;
  7. printing;
  8. every case again on the GPU (pending without one), plus GPU-vs-CPU bit comparisons;
  9. the CPU's conversion builds (QLUA_CPU_ISA=generic|avx2, default) giving one set of
     bits, through qlua subprocesses.
]]
local T, qlua, _, gtest, both = require("qlua.testing").spec(_ENV)
local P = require "spec.helpers.process"

local HALF = T.half_dtypes
local NAN, INF = 0 / 0, math.huge
local OTHER = { float16 = "bfloat16", bfloat16 = "float16" }

local function map(list, f)
  local out = {}
  for i = 1, #list do out[i] = f(list[i], i) end
  return out
end

-- a (a dt tensor) holds exactly the bits of b (a float32 result) rounded to dt
local function same_as_rounded(dt, a, b, what)
  assert.equal(dt, a:dtype(), what .. ": dtype")
  T.assert_bits_equal(T.tensor_bits(a), T.tensor_bits(b:to(dt)), dt .. " " .. what)
end

local function range_list(n, f)
  local out = {}
  for i = 1, n do out[i] = f(i) end
  return out
end

local function hex(x, w) return string.format("0x%0" .. (w or 4) .. "x", x) end

-- The 16-bit bits of a result against expected values (Lua numbers the dtype holds):
-- exact bits, signed zeros included; an expected NaN takes any NaN (the sign and payload
-- of a NaN made by an invalid operation differ between CPUs and GPUs).
local function assert_half_bits(result, expected, dtype, what, describe_input)
  assert.equal(dtype, result:dtype(), what .. ": dtype")
  local got = T.tensor_bits(result)
  assert(#got == #expected, string.format("%s: %d elements, expected %d", what, #got, #expected))
  local bad, shown = 0, {}
  for i = 1, #expected do
    local e = expected[i]
    local ok
    if e ~= e then ok = T.half_is_nan_bits(got[i], dtype)
    else ok = got[i] == T.half_bits_of(e, dtype) end
    if not ok then
      bad = bad + 1
      if #shown < 6 then
        shown[#shown + 1] = string.format("element %d%s: %s (%s), expected %s (%.9g)", i,
          describe_input and (" " .. describe_input(i)) or "", hex(got[i]),
          string.format("%.9g", T.half_value(got[i], dtype)),
          e ~= e and "a NaN" or hex(T.half_bits_of(e, dtype)), e)
      end
    end
  end
  if bad > 0 then
    error(string.format("%s: %d of %d elements wrong; %s", what, bad, #expected, table.concat(shown, "; ")), 2)
  end
end

-- The same with the expected results as 16-bit patterns (a NaN pattern takes any NaN).
local function assert_op_bits(result, expected, dtype, what, describe_input)
  assert.equal(dtype, result:dtype(), what .. ": dtype")
  local got = T.tensor_bits(result)
  assert(#got == #expected, string.format("%s: %d elements, expected %d", what, #got, #expected))
  local bad, shown = 0, {}
  for i = 1, #expected do
    local e, g = expected[i], got[i]
    if g ~= e and not (T.half_is_nan_bits(e, dtype) and T.half_is_nan_bits(g, dtype)) then
      bad = bad + 1
      if #shown < 6 then
        shown[#shown + 1] = string.format("element %d%s: %s (%.9g), expected %s (%.9g)", i,
          describe_input and (" " .. describe_input(i)) or "", hex(g), T.half_value(g, dtype), hex(e), T.half_value(e, dtype))
      end
    end
  end
  if bad > 0 then
    error(string.format("%s: %d of %d elements wrong; %s", what, bad, #expected, table.concat(shown, "; ")), 2)
  end
end

-- n random values a 16-bit dtype holds: a share of them from random bit patterns (every
-- class: zeros, subnormals, normals, infinities, NaNs), the rest of moderate size.
local function random_half_values(n, dtype, pattern_share, lo_exp, hi_exp)
  pattern_share = pattern_share or 0.25
  lo_exp, hi_exp = lo_exp or -6, hi_exp or 6
  local out = {}
  for i = 1, n do
    if math.random() < pattern_share then
      out[i] = T.half_value(math.random(0, 0xffff), dtype)
    else
      local v = (math.random() * 2 - 1) * 2.0 ^ math.random(lo_exp, hi_exp)
      out[i] = T.round_half(v, dtype)
    end
  end
  return out
end

-- Random values in [lo, hi] rounded to the dtype.
local function random_in(n, lo, hi, dtype)
  return range_list(n, function() return T.round_half(lo + (hi - lo) * math.random(), dtype) end)
end

local function half_tensor(values, dtype, dev, shape)
  local t = qlua.tensor(values, { dtype = dtype, device = dev })
  if shape then t = t:view(shape) end
  return t
end

local function flat(t) return (T.flatten(t:totable())) end

-- T.assert_close_half with the expected values as a flat row-major list.
local function close16(t, want, dt, steps, what, abs_tol)
  T.assert_close_half(t, T.unflatten(want, t:shape()), dt, steps, what, abs_tol)
end

------------------------------------------------------------------------ the bit patterns

local ALL16 = range_list(65536, function(i) return i - 1 end)

-- float32 patterns around every rounding tie of a 16-bit dtype: for each finite
-- non-negative value v and the next one up (2^(emax+1) after the largest), the midpoint,
-- one float32 ulp either side of it, and one ulp either side of v; both signs.
local TIE_CACHE = {}
local function f32_tie_patterns(dtype)
  if TIE_CACHE[dtype] then return TIE_CACHE[dtype] end
  local out = {}
  local function add(u) out[#out + 1] = u; out[#out + 1] = u | 0x80000000 end
  local inf = T.half_inf_bits(dtype)
  for h = 0, inf - 1 do
    local v = T.half_value(h, dtype)
    local nxt = (h + 1 == inf) and 2.0 ^ (T.half_format[dtype].bias + 1) or T.half_value(h + 1, dtype)
    local um = T.f32_bits((v + nxt) / 2)
    local uv = T.f32_bits(v)
    add(um - 1); add(um); add(um + 1); add(uv + 1)
    if uv > 0 then add(uv - 1) end
  end
  TIE_CACHE[dtype] = out
  return out
end

-- Named float32 patterns: zeros, float32 subnormals, the largest float32, infinities,
-- the overflow boundaries of both 16-bit types, and NaNs with many payloads (quiet and
-- signaling, both signs), then random patterns and random NaNs.
local SPECIAL32 = {
  0x00000000, 0x80000000, 0x00000001, 0x80000001, 0x00000fff, 0x00008000, 0x00018000,
  0x007fffff, 0x807fffff, 0x00800000, 0x7f7fffff, 0xff7fffff, 0x7f800000, 0xff800000,
  0x477fe000, 0x477fefff, 0x477ff000, 0x477ff001, 0x477fffff, 0x47800000, -- around 65504 .. 65536
  0xc77fefff, 0xc77ff000,
  0x7f7f7fff, 0x7f7f8000, 0x7f7f8001, 0x7f7effff, 0x7f7e8000, 0xff7f8000, -- around bfloat16's max
  0x33000000, 0x33000001, 0x33800000, 0x32ffffff, 0x33c00000, 0x33400000, -- float16's smallest subnormal
  0x38800000, 0x387fc000, 0x387fe000, 0x387ff000, 0x387fffff,            -- float16's smallest normal
  0x7f800001, 0x7f801fff, 0x7f802000, 0x7f803fff, 0x7f804000, 0x7fa00000, 0x7fbfffff,
  0x7fc00000, 0x7fc00001, 0x7fc01fff, 0x7fc02000, 0x7fd55555, 0x7fffe000, 0x7fffffff,
  0xff800001, 0xff802000, 0xffa00000, 0xffc00000, 0xffffffff, 0xffc00001, 0x7f80ffff,
}
local RANDOM32
local function f32_random_patterns()
  if RANDOM32 then return RANDOM32 end
  math.randomseed(1414)
  local out = {}
  for i = 1, #SPECIAL32 do out[i] = SPECIAL32[i] end
  for _ = 1, 30000 do out[#out + 1] = math.random(0, 0xffffffff) end
  for _ = 1, 3000 do  -- NaNs: every exponent bit set, a random nonzero fraction
    local frac = math.random(1, 0x7fffff)
    if math.random() < 0.5 then frac = frac & 0x1fff; if frac == 0 then frac = 1 end end  -- payloads float16 drops
    out[#out + 1] = (math.random(0, 1) << 31) | 0x7f800000 | frac
  end
  RANDOM32 = out
  return out
end

-- float64 inputs around every tie of a 16-bit dtype: the midpoint and the midpoint moved
-- by a relative 2^-40 either way (float32 rounds both back to the midpoint, where going
-- through float32 would then round to even instead of up or down), both signs.
local TIE64_CACHE = {}
local function f64_tie_values(dtype)
  if TIE64_CACHE[dtype] then return TIE64_CACHE[dtype] end
  local out = {}
  local inf = T.half_inf_bits(dtype)
  for h = 0, inf - 1 do
    local v = T.half_value(h, dtype)
    local nxt = (h + 1 == inf) and 2.0 ^ (T.half_format[dtype].bias + 1) or T.half_value(h + 1, dtype)
    local m = (v + nxt) / 2
    for _, x in ipairs({ m, m * (1 + 2.0 ^ -40), m * (1 - 2.0 ^ -40) }) do
      out[#out + 1] = x; out[#out + 1] = -x
    end
  end
  TIE64_CACHE[dtype] = out
  return out
end

-- Named float64 inputs: beyond float32's range both ways, float64 subnormals, NaNs.
local SPECIAL64 = {
  0.0, -0.0, 1e300, -1e300, 1e-300, -1e-300, 5e-324, -5e-324, 2.2250738585072014e-308,
  3.4028234663852886e38, 3.5e38, 1e39, -1e39, 65504.0, 65519.999999, 65520.0, 65520.000001,
  2.0 ^ -25, 2.0 ^ -25 * (1 + 2.0 ^ -40), 2.0 ^ -25 * (1 - 2.0 ^ -40), 2.0 ^ -26,
  2.0 ^ -133, 2.0 ^ -134, 2.0 ^ -134 * (1 + 2.0 ^ -45), 2.0 ^ -135, 1e-45, 1e-46,
  1 + 2.0 ^ -11 + 2.0 ^ -40, 1 + 2.0 ^ -8 + 2.0 ^ -40, 1 + 3 * 2.0 ^ -11 - 2.0 ^ -40,
  (2 - 2.0 ^ -8) * 2.0 ^ 127 * (1 - 2.0 ^ -40), (2 - 2.0 ^ -8) * 2.0 ^ 127, 0.1, -0.1, 1 / 3,
}
local NAN64_BITS = {
  0x7ff8000000000000, 0x7ff0000000000001, 0x7ff0000003ffffff, 0x7ff0040000000000,
  0x7ff4000000000000, 0x7fffffffffffffff, math.mininteger | 0x7ff8000000000000,
  math.mininteger | 0x7ff0000000000001, 0x7ff8000000000001, 0x7ffffc0000000000,
}

------------------------------------------------------------------------ 1. conversions

describe("float16 and bfloat16: conversions, bit for bit", function()
  it("the plain-Lua references agree with each other (bits from float64, from float32, by arithmetic)", function()
    math.randomseed(7)
    for _, dt in ipairs(HALF) do
      local function same(a, b) return a == b and (a ~= 0 or 1 / a == 1 / b) end
      for _ = 1, 10000 do
        local u = math.random(0, 0xffffffff)
        local v = T.f32_from_bits(u)
        if v == v then
          local b32 = T.half_from_f32_bits(u, dt)
          assert(b32 == T.half_from_f64_bits(T.f64_bits(v), dt), string.format("%s: float32 0x%08x", dt, u))
          assert(same(T.half_value(b32, dt), T.round_half_fast(v, dt)), string.format("%s: float32 0x%08x by arithmetic", dt, u))
        end
        local x = (math.random() - 0.5) * 2.0 ^ math.random(-140, 130)
        assert(same(T.round_half(x, dt), T.round_half_fast(x, dt)), string.format("%s: %.17g", dt, x))
        assert(same(T.half_op(x, dt), T.half_value(T.half_op_bits(x, dt), dt)), string.format("%s: half_op %.17g", dt, x))
      end
      for h = 0, 0xffff do
        if not T.half_is_nan_bits(h, dt) then
          local v = T.half_value(h, dt)
          assert(T.half_bits_of(v, dt) == h and T.half_from_f32_bits(T.half_to_f32_bits(h, dt), dt) == h, dt .. " " .. hex(h))
          assert(T.f32_from_bits(T.half_to_f32_bits(h, dt)) == v, dt .. " widening " .. hex(h))
        end
      end
    end
    -- a few values by hand
    assert.equal(0x3c00, T.half_bits_of(1.0, "float16"))
    assert.equal(0x7bff, T.half_bits_of(65519.99, "float16"))
    assert.equal(0x7c00, T.half_bits_of(65520, "float16"))
    assert.equal(0x0001, T.half_bits_of(2.0 ^ -24, "float16"))
    assert.equal(0x0000, T.half_bits_of(2.0 ^ -25, "float16"))
    assert.equal(0x0002, T.half_bits_of(3 * 2.0 ^ -25, "float16"))
    assert.equal(0x3f80, T.half_bits_of(1.0, "bfloat16"))
    assert.equal(0x7f7f, T.half_bits_of(T.half_max("bfloat16"), "bfloat16"))
    assert.equal(0x7f80, T.half_bits_of(3.4e38, "bfloat16"))
    assert.equal(0x7c01, T.half_from_f32_bits(0x7f800001, "float16"))
    assert.equal(0xffc0, T.half_from_f32_bits(0xff800001, "bfloat16"))
    assert.equal(0x7f802000, T.half_to_f32_bits(0x7c01, "float16"))
  end)

  both("float16: all 65536 patterns to float32 and back, contiguous and strided", function(dev)
    local h = T.tensor_from_bits(ALL16, "float16", dev)
    assert.equal("float16", h:dtype())
    local want32 = map(ALL16, function(b) return T.half_to_f32_bits(b, "float16") end)
    local f = h:to("float32")
    T.assert_bits_equal(T.tensor_bits(f), want32, "float16 -> float32 (contiguous)", ALL16, 8, 4)
    T.assert_bits_equal(T.tensor_bits(f:to("float16")), ALL16, "float32 -> float16 of each widened pattern (contiguous)", want32, 4, 8)
    -- strided: the 256 x 256 view transposed goes element by element
    local ht = h:view(256, 256):t()
    local order = {}
    for i = 1, 256 do for j = 1, 256 do order[#order + 1] = (j - 1) * 256 + (i - 1) end end
    local ft = ht:to("float32")
    T.assert_bits_equal(T.tensor_bits(ft), map(order, function(b) return want32[b + 1] end),
      "float16 -> float32 (transposed view)", order, 8, 4)
    T.assert_bits_equal(T.tensor_bits(ft:t():to("float16")), ALL16, "float32 -> float16 (transposed view)", want32, 4, 8)
    local dst = qlua.zeros({ 65536, 2 }, { dtype = "float16", device = dev })
    dst:select(2, 2):copy_(f)
    T.assert_bits_equal(T.tensor_bits(dst:select(2, 2)), ALL16, "copy_ float32 -> strided float16", want32, 4, 8)
    T.assert_bits_equal(T.tensor_bits(dst:select(2, 1)), map(ALL16, function() return 0 end), "copy_ left the other column")
    local back = qlua.zeros({ 65536, 3 }, { device = dev })
    back:select(2, 3):copy_(h)
    T.assert_bits_equal(T.tensor_bits(back:select(2, 3)), want32, "copy_ float16 -> strided float32", ALL16, 8, 4)
    -- float64: the exact value both ways; a NaN stays a NaN of its sign
    local d = h:to("float64")
    local dbits = T.tensor_bits(d)
    local back16 = T.tensor_bits(d:to("float16"))
    for i, b in ipairs(ALL16) do
      if T.half_is_nan_bits(b, "float16") then
        local u = dbits[i]
        assert(((u >> 52) & 0x7ff) == 0x7ff and (u & 0xfffffffffffff) ~= 0 and ((u < 0) == (b >= 0x8000)),
          string.format("float16 %s -> float64 gave %x, expected a NaN of its sign", hex(b), u))
        assert(T.half_is_nan_bits(back16[i], "float16") and (back16[i] & 0x8000) == (b & 0x8000),
          string.format("float16 NaN %s -> float64 -> float16 gave %s", hex(b), hex(back16[i])))
      else
        assert(dbits[i] == T.f64_bits(T.half_value(b, "float16")),
          string.format("float16 %s -> float64 gave %x, expected %x", hex(b), dbits[i], T.f64_bits(T.half_value(b, "float16"))))
        assert(back16[i] == b, string.format("float16 %s -> float64 -> float16 gave %s", hex(b), hex(back16[i])))
      end
    end
    -- to bfloat16: the exact value rounded once
    T.assert_bits_equal(T.tensor_bits(h:to("bfloat16")),
      map(want32, function(u) return T.half_from_f32_bits(u, "bfloat16") end), "float16 -> bfloat16", ALL16)
    T.assert_bits_equal(T.tensor_bits(ht:to("bfloat16")),
      map(order, function(b) return T.half_from_f32_bits(want32[b + 1], "bfloat16") end), "float16 -> bfloat16 (transposed view)", order)
  end)

  both("bfloat16: all 65536 patterns to float32 and back, contiguous and strided", function(dev)
    -- any pattern goes in through a .safetensors file (.npy has no bfloat16 code)
    local bf = T.tensor_from_bits(ALL16, "bfloat16", dev)
    assert.equal("bfloat16", bf:dtype())
    T.assert_bits_equal(T.tensor_bits(bf), ALL16, "bfloat16 patterns load and save as they are")
    -- widening is the bits shifted up by 16, NaN payloads kept; narrowing that back is
    -- exact, except that every NaN becomes 0x7fc0 with its sign
    local want32 = map(ALL16, function(b) return T.half_to_f32_bits(b, "bfloat16") end)
    local narrow = map(want32, function(u) return T.half_from_f32_bits(u, "bfloat16") end)
    for i, b in ipairs(ALL16) do
      assert(want32[i] == b << 16, "reference: bfloat16 widening is bits << 16")
      assert(narrow[i] == (T.half_is_nan_bits(b, "bfloat16") and ((b & 0x8000) | 0x7fc0) or b), "reference: narrowing back")
    end
    local f = bf:to("float32")
    T.assert_bits_equal(T.tensor_bits(f), want32, "bfloat16 -> float32 (contiguous)", ALL16, 8, 4)
    T.assert_bits_equal(T.tensor_bits(f:to("bfloat16")), narrow, "float32 -> bfloat16 of each widened pattern (contiguous)", want32, 4, 8)
    -- strided, both directions
    local order = {}
    for i = 1, 256 do for j = 1, 256 do order[#order + 1] = (j - 1) * 256 + (i - 1) end end
    local bt = bf:view(256, 256):t()
    local ft = bt:to("float32")
    T.assert_bits_equal(T.tensor_bits(ft), map(order, function(b) return want32[b + 1] end),
      "bfloat16 -> float32 (transposed view)", order, 8, 4)
    T.assert_bits_equal(T.tensor_bits(ft:t():to("bfloat16")), narrow, "float32 -> bfloat16 (transposed view)", want32, 4, 8)
    local dst = qlua.zeros({ 65536, 2 }, { dtype = "bfloat16", device = dev })
    dst:select(2, 1):copy_(f)
    T.assert_bits_equal(T.tensor_bits(dst:select(2, 1)), narrow, "copy_ float32 -> strided bfloat16", want32, 4, 8)
    local back = qlua.zeros({ 65536, 3 }, { device = dev })
    back:select(2, 2):copy_(bf)
    T.assert_bits_equal(T.tensor_bits(back:select(2, 2)), want32, "copy_ bfloat16 -> strided float32", ALL16, 8, 4)
    -- the same float32 patterns read from a float32 file
    local x = T.tensor_from_bits(want32, "float32", dev)
    T.assert_bits_equal(T.tensor_bits(x:to("bfloat16")), narrow, "float32 (b << 16) -> bfloat16", want32, 4, 8)
    -- float64: exact values, NaN stays NaN; back through float64 as through float32
    local dbits = T.tensor_bits(bf:to("float64"))
    for i, b in ipairs(ALL16) do
      if not T.half_is_nan_bits(b, "bfloat16") then
        assert(dbits[i] == T.f64_bits(T.half_value(b, "bfloat16")),
          string.format("bfloat16 %s -> float64 gave %x", hex(b), dbits[i]))
      else
        assert(((dbits[i] >> 52) & 0x7ff) == 0x7ff and (dbits[i] & 0xfffffffffffff) ~= 0 and ((dbits[i] < 0) == (b >= 0x8000)),
          string.format("bfloat16 NaN %s -> float64 gave %x, expected a NaN of its sign", hex(b), dbits[i]))
      end
    end
    T.assert_bits_equal(T.tensor_bits(bf:to("float64"):to("bfloat16")), narrow, "bfloat16 -> float64 -> bfloat16", ALL16)
    -- to float16: the exact value rounded once (a NaN keeps the top of its payload)
    T.assert_bits_equal(T.tensor_bits(bf:to("float16")),
      map(want32, function(u) return T.half_from_f32_bits(u, "float16") end), "bfloat16 -> float16", ALL16)
    T.assert_bits_equal(T.tensor_bits(bt:to("float16")),
      map(order, function(b) return T.half_from_f32_bits(want32[b + 1], "float16") end), "bfloat16 -> float16 (transposed view)", order)
  end)

  both("float32 -> 16-bit: every tie and its neighbours, boundaries, random patterns, NaN payloads", function(dev)
    for _, dt in ipairs(HALF) do
      local sets = { { "ties", f32_tie_patterns(dt) }, { "named and random", f32_random_patterns() } }
      for _, set in ipairs(sets) do
        local name, pats = set[1], set[2]
        local want = map(pats, function(u) return T.half_from_f32_bits(u, dt) end)
        local x = T.tensor_from_bits(pats, "float32", dev)
        local what = string.format("float32 -> %s (%s, %d patterns)", dt, name, #pats)
        T.assert_bits_equal(T.tensor_bits(x:to(dt)), want, what .. ", contiguous", pats, 4, 8)
        T.assert_bits_equal(T.tensor_bits(T.relayout(x, "stepped"):to(dt)), want, what .. ", strided source", pats, 4, 8)
        local dst = qlua.empty({ #pats, 2 }, { dtype = dt, device = dev })
        dst:select(2, 2):copy_(x)
        T.assert_bits_equal(T.tensor_bits(dst:select(2, 2)), want, what .. ", copy_ into a strided view", pats, 4, 8)
      end
    end
    -- the rules, one by one, on named inputs
    local x = T.tensor_from_bits({ 0x7f800001, 0xff802000, 0x7fa00000, 0x477ff000, 0x477fefff, 0x33000000,
      0x33000001, 0x7f7f8000, 0x7f7f7fff, 0x00018000, 0x00008000 }, "float32", dev)
    T.assert_bits_equal(T.tensor_bits(x:to("float16")), { 0x7c01, 0xfc01, 0x7d00, 0x7c00, 0x7bff, 0x0000,
      0x0001, 0x7c00, 0x7c00, 0x0000, 0x0000 }, "float32 -> float16, named cases")
    T.assert_bits_equal(T.tensor_bits(x:to("bfloat16")), { 0x7fc0, 0xffc0, 0x7fc0, 0x4780, 0x4780, 0x3300,
      0x3300, 0x7f80, 0x7f7f, 0x0002, 0x0000 }, "float32 -> bfloat16, named cases")
  end)

  both("float64 -> 16-bit rounds once, never through float32", function(dev)
    for _, dt in ipairs(HALF) do
      local vals = f64_tie_values(dt)
      local bits64 = map(vals, T.f64_bits)
      for _, v in ipairs(SPECIAL64) do bits64[#bits64 + 1] = T.f64_bits(v); bits64[#bits64 + 1] = T.f64_bits(-v) end
      for _, u in ipairs(NAN64_BITS) do bits64[#bits64 + 1] = u end
      local want = map(bits64, function(u) return T.half_from_f64_bits(u, dt) end)
      -- the inputs do hold double-rounding traps: through float32 many would round otherwise
      local traps = 0
      for i, u in ipairs(bits64) do
        local v = T.f64_from_bits(u)
        if v == v and T.half_from_f32_bits(T.f32_bits(v), dt) ~= want[i] then traps = traps + 1 end
      end
      assert(traps > 1000, dt .. ": the float64 inputs should include double-rounding traps, found " .. traps)
      local x = T.tensor_from_bits(bits64, "float64", dev)
      local what = string.format("float64 -> %s (%d inputs, %d where float32 would round twice)", dt, #bits64, traps)
      T.assert_bits_equal(T.tensor_bits(x:to(dt)), want, what .. ", contiguous", bits64, 4, 16)
      T.assert_bits_equal(T.tensor_bits(T.relayout(x, "stepped"):to(dt)), want, what .. ", strided", bits64, 4, 16)
      local dst = qlua.empty({ #bits64, 2 }, { dtype = dt, device = dev })
      dst:select(2, 1):copy_(x)
      T.assert_bits_equal(T.tensor_bits(dst:select(2, 1)), want, what .. ", copy_ into a strided view", bits64, 4, 16)
    end
    local x = qlua.tensor({ 1 + 2.0 ^ -11 + 2.0 ^ -40, 1 + 3 * 2.0 ^ -11 - 2.0 ^ -40, 1 + 2.0 ^ -8 + 2.0 ^ -40 },
      { dtype = "float64", device = dev })
    T.assert_bits_equal(T.tensor_bits(x:to("float16")), { 0x3c01, 0x3c01, 0x3c04 }, "float64 -> float16, named double-rounding traps")
    T.assert_bits_equal(T.tensor_bits(x:to("bfloat16")), { 0x3f80, 0x3f80, 0x3f81 }, "float64 -> bfloat16, named double-rounding traps")
  end)

  both("Lua numbers are rounded once into 16-bit tensors by every path that stores one", function(dev)
    local traps = {
      float16 = { 1 + 2.0 ^ -11 + 2.0 ^ -40, 1 + 3 * 2.0 ^ -11 - 2.0 ^ -40, -(2048 + 1 + 2.0 ^ -30), 65519.99999, 65520.0,
        2.0 ^ -25 * (1 + 2.0 ^ -40), 0.1, -1e-9, 1e9 },
      bfloat16 = { 1 + 2.0 ^ -8 + 2.0 ^ -40, 1 + 3 * 2.0 ^ -8 - 2.0 ^ -40, -(256 + 1 + 2.0 ^ -30),
        (2 - 2.0 ^ -8) * 2.0 ^ 127 * (1 - 2.0 ^ -40), (2 - 2.0 ^ -8) * 2.0 ^ 127, 2.0 ^ -134 * (1 + 2.0 ^ -40), 0.1, 1e39 },
    }
    for _, dt in ipairs(HALF) do
      for _, v in ipairs(traps[dt]) do
        local want = T.half_bits_of(v, dt)
        local what = string.format("%s %.17g -> %s", dt, v, hex(want))
        local opts = { dtype = dt, device = dev }
        local function check(t, how) T.assert_bits_equal(T.tensor_bits(t), { want }, what .. " via " .. how) end
        check(qlua.tensor({ v }, opts), "qlua.tensor")
        check(qlua.tensor(v, opts):view(1), "qlua.tensor (0-d)")
        check(qlua.full({ 1 }, v, opts), "qlua.full")
        check(qlua.zeros(1, opts):fill_(v), "fill_")
        local s = qlua.zeros(2, opts); s[2] = v
        check(s:narrow(1, 2, 1), "t[i] = v")
        check(qlua.zeros(1, opts):masked_fill(qlua.tensor({ true }, { device = dev }), v), "masked_fill")
        check(qlua.zeros(1, opts):index_fill_(1, { 1 }, v), "index_fill_")
        check(qlua.zeros(1, opts):scatter_(1, { 1 }, v), "scatter_ (number)")
        check(qlua.where(qlua.tensor({ false }, { device = dev }), qlua.zeros(1, opts), v), "qlua.where (number)")
        local z = qlua.zeros(3, opts); z[{ { 2, 3 } }] = v
        check(z:narrow(1, 3, 1), "t[{...}] = v")
      end
    end
  end)
end)

------------------------------------------------------------------------ 2. arithmetic

-- + - * / as {operator, reference on numbers, the op on tensors}: the Lua operator is both
local BINOPS = {}
for _, name in ipairs({ "add", "sub", "mul", "div" }) do
  local op = T.ref.binary[name]
  BINOPS[#BINOPS + 1] = { op.op, op.f, op.f }
end

-- The C library's rounding functions, with their signed zeros
local trunc, rint, floor = T.ref.trunc, T.ref.rint, T.ref.floor

-- The unary ops this spec tests, in the order their inputs are drawn: name, reference,
-- input range and steps allowed, from T.ref.unary's `half`
local UNARY = {}
for _, name in ipairs({ "neg", "abs", "relu", "square", "sqrt", "floor", "ceil", "trunc", "round",
                        "frac", "reciprocal", "exp", "log", "sin", "cos", "tanh", "sigmoid", "gelu", "gelu_tanh",
                        "silu", "softplus", "erf", "atan", "log1p", "expm1", "log2", "exp2",
                        "rsqrt" }) do
  local u = T.ref.unary[name]
  UNARY[#UNARY + 1] = { name, u.f, { u.half[1], u.half[2] }, u.half[3] }
end

describe("float16 and bfloat16: arithmetic in float32, rounded once", function()
  both("+ - * / of two tensors are round16(float32(a op b)), bit for bit, on views", function(dev)
    local shape = { 48, 40 }
    for _, dt in ipairs(HALF) do
      local a = random_half_values(48 * 40, dt, 0.3)
      local b = random_half_values(48 * 40, dt, 0.3)
      local ta = T.relayout(half_tensor(a, dt, dev, shape), "transposed")
      local tb = T.relayout(half_tensor(b, dt, dev, shape), "stepped")
      for _, op in ipairs(BINOPS) do
        local name, lua_op, t_op = op[1], op[2], op[3]
        local want = map(a, function(x, i) return T.half_op(lua_op(x, b[i]), dt) end)
        local function input(i) return string.format("(%.9g %s %.9g)", a[i], name, b[i]) end
        assert_half_bits(t_op(ta, tb), want, dt, dt .. " " .. name, input)
        -- in place into a view
        local c = T.relayout(half_tensor(a, dt, dev, shape), "narrowed")
        local method = ({ ["+"] = "add_", ["-"] = "sub_", ["*"] = "mul_", ["/"] = "div_" })[name]
        assert.is_true(rawequal(c, c[method](c, tb)))
        assert_half_bits(c, want, dt, dt .. " " .. method .. " on a view", input)
      end
    end
  end)

  both("every pattern against a shuffled one: + - * / and unary minus, bit for bit", function(dev)
    for _, dt in ipairs(HALF) do
      local a = map(ALL16, function(b) return T.half_value(b, dt) end)
      local perm = T.permutation(65536)
      local b = map(perm, function(k) return a[k] end)
      local ta = T.tensor_from_bits(ALL16, dt, dev)
      local tb = ta:index_select(1, qlua.tensor(perm, { device = dev }))
      for _, op in ipairs(BINOPS) do
        local name, lua_op, t_op = op[1], op[2], op[3]
        assert_op_bits(t_op(ta, tb), map(a, function(x, i) return T.half_op_bits(lua_op(x, b[i]), dt) end), dt,
          dt .. " every pattern " .. name .. " a shuffled pattern",
          function(i) return string.format("(%s %s %s)", hex(ALL16[i]), name, hex(ALL16[perm[i]])) end)
      end
      assert_op_bits(-ta, map(a, function(x) return T.half_op_bits(-x, dt) end), dt, dt .. " unary minus of every pattern")
      for _, u in ipairs({ { "sqrt", math.sqrt }, { "floor", floor }, { "round", rint }, { "square", function(x) return x * x end },
                           { "abs", math.abs } }) do
        assert_op_bits(ta[u[1]](ta), map(a, function(x) return T.half_op_bits(u[2](x), dt) end), dt, dt .. " " .. u[1] .. " of every pattern",
          function(i) return "of " .. hex(ALL16[i]) end)
      end
    end
  end)

  both("% and // are Lua's floor modulo and division, in float32", function(dev)
    for _, dt in ipairs(HALF) do
      local a = range_list(200, function() return math.random(-100, 100) + 0.0 end)
      local b = range_list(200, function() local v repeat v = math.random(-12, 12) until v ~= 0 return v + 0.0 end)
      local ta = T.relayout(half_tensor(a, dt, dev, { 10, 20 }), "transposed")
      local tb = half_tensor(b, dt, dev, { 10, 20 })
      assert_half_bits(ta % tb, map(a, function(x, i) return T.half_op(x % b[i], dt) end), dt, dt .. " %")
      assert_half_bits(ta // tb, map(a, function(x, i) return T.half_op(x // b[i], dt) end), dt, dt .. " //")
      assert_half_bits(ta % 7, map(a, function(x) return T.half_op(x % 7.0, dt) end), dt, dt .. " % 7")
      assert_half_bits(-30 // tb, map(b, function(y) return T.half_op(-30.0 // y, dt) end), dt, dt .. " -30 // t")
      assert_half_bits(ta:fmod(tb), map(a, function(x, i) return T.half_op(math.fmod(x, b[i]), dt) end), dt, dt .. " fmod")
    end
  end)

  both("a Lua number stays float32 in the computation, on either side", function(dev)
    local numbers = { 0.1, -2.5, 3, 1 / 3, 1e-3, 1000.7, 1 + 2.0 ^ -12 }
    for _, dt in ipairs(HALF) do
      local a = random_half_values(600, dt, 0.2)
      local ta = T.relayout(half_tensor(a, dt, dev, { 20, 30 }), "stepped")
      local differs = 0
      for _, x in ipairs(numbers) do
        local x32 = T.f32(x)
        for _, op in ipairs(BINOPS) do
          local name, lua_op, t_op = op[1], op[2], op[3]
          local right = map(a, function(v) return T.half_op(lua_op(v, x32), dt) end)
          local left = map(a, function(v) return T.half_op(lua_op(x32, v), dt) end)
          assert_half_bits(t_op(ta, x), right, dt, string.format("%s t %s %.17g", dt, name, x),
            function(i) return string.format("(%.9g)", a[i]) end)
          assert_half_bits(t_op(x, ta), left, dt, string.format("%s %.17g %s t", dt, x, name),
            function(i) return string.format("(%.9g)", a[i]) end)
          -- had the number been rounded to the 16-bit type first, some results would differ
          local x16 = T.round_half(x, dt)
          for i, v in ipairs(a) do
            local pre = T.half_op(lua_op(v, x16), dt)
            if pre == pre and right[i] == right[i] and pre ~= right[i] then differs = differs + 1 end
          end
        end
      end
      assert(differs > 0, dt .. ": the numbers chosen should tell float32 from 16-bit rounding of the number")
      -- methods take numbers the same way
      local want = map(a, function(v) return T.half_op(v * T.f32(0.1), dt) end)
      assert_half_bits(ta:mul(0.1), want, dt, dt .. " t:mul(0.1)")
      local c = ta:clone()
      c:mul_(0.1)
      assert_half_bits(c, want, dt, dt .. " t:mul_(0.1)")
    end
  end)

  both("broadcasting: rows, columns and 0-d tensors", function(dev)
    for _, dt in ipairs(HALF) do
      local a = random_half_values(12 * 9, dt, 0.1)
      local r = random_half_values(9, dt, 0.1)
      local c = random_half_values(12, dt, 0.1)
      local ta = half_tensor(a, dt, dev, { 12, 9 })
      local tr = half_tensor(r, dt, dev, { 1, 9 })
      local tc = T.relayout(half_tensor(c, dt, dev, { 12, 1 }), "stepped")
      local s = qlua.tensor(r[3], { dtype = dt, device = dev })
      for _, op in ipairs(BINOPS) do
        local name, lua_op, t_op = op[1], op[2], op[3]
        assert_half_bits(t_op(ta, tr), map(a, function(v, i) return T.half_op(lua_op(v, r[(i - 1) % 9 + 1]), dt) end),
          dt, dt .. " 12x9 " .. name .. " 1x9")
        assert_half_bits(t_op(tc, ta), map(a, function(v, i) return T.half_op(lua_op(c[(i - 1) // 9 + 1], v), dt) end),
          dt, dt .. " 12x1 " .. name .. " 12x9")
        assert_half_bits(t_op(tc, tr), range_list(108, function(i)
          return T.half_op(lua_op(c[(i - 1) // 9 + 1], r[(i - 1) % 9 + 1]), dt) end), dt, dt .. " 12x1 " .. name .. " 1x9")
        assert_half_bits(t_op(ta, s), map(a, function(v) return T.half_op(lua_op(v, r[3]), dt) end), dt, dt .. " " .. name .. " 0-d")
      end
    end
  end)

  both("pow: tensors, numbers on either side, within one 16-bit step of round16(float32)", function(dev)
    for _, dt in ipairs(HALF) do
      local a = random_in(400, 0.05, 8, dt)
      local b = random_in(400, -3, 3, dt)
      local ta = T.relayout(half_tensor(a, dt, dev, { 20, 20 }), "transposed")
      local tb = half_tensor(b, dt, dev, { 20, 20 })
      local r = ta ^ tb
      assert.equal(dt, r:dtype())
      close16(r, map(a, function(x, i) return T.half_op(x ^ b[i], dt) end), dt, 1, dt .. " a ^ b")
      close16(ta:pow(tb), map(a, function(x, i) return T.half_op(x ^ b[i], dt) end), dt, 1, dt .. " a:pow(b)")
      for _, e in ipairs({ 2, 0.5, -1, 3, 1.7 }) do
        close16(ta ^ e, map(a, function(x) return T.half_op(x ^ T.f32(e), dt) end), dt, 1,
          string.format("%s a ^ %g", dt, e))
      end
      close16(2 ^ tb, map(b, function(y) return T.half_op(2 ^ y, dt) end), dt, 1, dt .. " 2 ^ b")
      close16(1.1 ^ tb, map(b, function(y) return T.half_op(T.f32(1.1) ^ y, dt) end), dt, 1, dt .. " 1.1 ^ b")
      -- squares are exact in float32, so exact after one rounding
      local sq = ta ^ 2
      close16(sq, map(a, function(x) return T.half_op(x * x, dt) end), dt, 0, dt .. " a ^ 2 exactly")
    end
  end)

  both("unary math: exact ops bit for bit, the others within one 16-bit step, in place too", function(dev)
    for _, dt in ipairs(HALF) do
      for _, u in ipairs(UNARY) do
        local name, f, dom, steps = u[1], u[2], u[3], u[4]
        local a = random_in(16 * 12, dom[1], dom[2], dt)
        local t = T.relayout(half_tensor(a, dt, dev, { 16, 12 }), "narrowed")
        local want = map(a, function(x) return T.half_op(f(x), dt) end)
        local r = t[name](t)
        local what = dt .. " " .. name
        assert.equal(dt, r:dtype(), what .. ": dtype")
        if steps == 0 then
          assert_half_bits(r, want, dt, what, function(i) return string.format("of %.9g", a[i]) end)
        else
          close16(r, want, dt, steps, what)
        end
        local c = T.relayout(half_tensor(a, dt, dev, { 16, 12 }), "stepped")
        assert.is_true(rawequal(c, c[name .. "_"](c)), what .. "_ returns self")
        T.assert_bits_equal(T.tensor_bits(c), T.tensor_bits(r), what .. "_ in place gives the same bits")
      end
      -- special values
      local s = half_tensor({ NAN, INF, -INF, 0.0, -0.0 }, dt, dev)
      assert_half_bits(s:neg(), { NAN, -INF, INF, -0.0, 0.0 }, dt, dt .. " neg of specials")
      assert_half_bits(s:abs(), { NAN, INF, INF, 0.0, 0.0 }, dt, dt .. " abs of specials")
      assert_half_bits(s:exp(), { NAN, INF, 0.0, 1.0, 1.0 }, dt, dt .. " exp of specials")
      assert_half_bits(s:sqrt(), { NAN, INF, NAN, 0.0, -0.0 }, dt, dt .. " sqrt of specials")
      assert_half_bits(s:tanh(), { NAN, 1.0, -1.0, 0.0, -0.0 }, dt, dt .. " tanh of specials")
      assert_half_bits(s:sigmoid(), { NAN, 1.0, 0.0, 0.5, 0.5 }, dt, dt .. " sigmoid of specials")
      T.assert_equal(s:isnan(), { true, false, false, false, false })
      T.assert_equal(s:isinf(), { false, true, true, false, false })
      T.assert_equal(s:isfinite(), { false, false, false, true, true })
      local big = T.half_max(dt)
      assert_half_bits(s:nan_to_num(), { 0.0, big, -big, 0.0, -0.0 }, dt, dt .. " nan_to_num")
      -- results that overflow the 16-bit type become inf, those below its range 0
      local o = half_tensor({ 12, -20, 100 }, dt, dev)
      assert_half_bits(o:exp(), map({ 12, -20, 100 }, function(x) return T.half_op(math.exp(x), dt) end), dt, dt .. " exp overflow and underflow")
    end
  end)

  both("comparisons give bool; numbers on either side compare in float32", function(dev)
    local CMPS = {
      { "eq", function(x, y) return x == y end }, { "ne", function(x, y) return x ~= y end },
      { "lt", function(x, y) return x < y end }, { "le", function(x, y) return x <= y end },
      { "gt", function(x, y) return x > y end }, { "ge", function(x, y) return x >= y end },
    }
    local MIRROR = { eq = "eq", ne = "ne", lt = "gt", le = "ge", gt = "lt", ge = "le" }
    for _, dt in ipairs(HALF) do
      local pool = { NAN, INF, -INF, 0.0, -0.0, 1.0, -1.0, 0.5, T.round_half(0.1, dt), 2.0 }
      local a, b = {}, {}
      for i = 1, 30 * 8 do
        a[i] = math.random() < 0.5 and pool[math.random(#pool)] or T.round_half(math.random(-3, 3) * 0.5, dt)
        b[i] = math.random() < 0.5 and pool[math.random(#pool)] or T.round_half(math.random(-3, 3) * 0.5, dt)
      end
      local ta = T.relayout(half_tensor(a, dt, dev, { 30, 8 }), "transposed")
      local tb = T.relayout(half_tensor(b, dt, dev, { 30, 8 }), "stepped")
      for _, c in ipairs(CMPS) do
        local name, f = c[1], c[2]
        local r = ta[name](ta, tb)
        assert.equal("bool", r:dtype(), dt .. " " .. name)
        T.assert_equal(r, T.unflatten(map(a, function(x, i) return f(x, b[i]) end), { 30, 8 }), dt .. " " .. name)
        -- against a row, broadcast
        local row = tb:narrow(1, 1, 1)
        T.assert_equal(ta[name](ta, row), T.unflatten(map(a, function(x, i) return f(x, b[(i - 1) % 8 + 1]) end), { 30, 8 }),
          dt .. " " .. name .. " broadcast")
        for _, x in ipairs({ 0.1, 1 + 2.0 ^ -12, 1 + 2.0 ^ -30, -0.0, 0.5, INF, 7 }) do
          local x32 = T.f32(x)
          T.assert_equal(ta[name](ta, x), T.unflatten(map(a, function(v) return f(v, x32) end), { 30, 8 }),
            string.format("%s t:%s(%.17g)", dt, name, x))
          local m = ta[MIRROR[name]](ta, x)  -- x name t is t mirror x
          T.assert_equal(m, T.unflatten(map(a, function(v) return f(x32, v) end), { 30, 8 }),
            string.format("%s %.17g %s t", dt, x, name))
        end
      end
      -- the number is float32, not rounded to the 16-bit type, and not float64
      local one = half_tensor({ 1.0 }, dt, dev)
      T.assert_equal(one:lt(1 + 2.0 ^ -12), { true }, dt .. ": 1 < 1 + 2^-12 in float32")
      T.assert_equal(one:eq(1 + 2.0 ^ -30), { true }, dt .. ": 1 == float32(1 + 2^-30)")
      T.assert_equal(one:ne(1 + 2.0 ^ -12), { true }, dt .. ": 1 ~= 1 + 2^-12 in float32")
    end
    -- float16 against bfloat16 compares in float32, against float64 in float64
    local h = qlua.tensor({ 0.1, 1, 256.5 }, { dtype = "float16", device = dev })
    local bh = qlua.tensor({ 0.1, 1, 256.5 }, { dtype = "bfloat16", device = dev })
    T.assert_equal(h:eq(bh), { false, true, false })
    T.assert_equal(h:eq(qlua.tensor({ T.round_half(0.1, "float16"), 1, 256.5 }, { dtype = "float64", device = dev })), { true, true, true })
    T.assert_equal(h:eq(qlua.tensor({ 0.1, 1, 256.5 }, { dtype = "float64", device = dev })), { false, true, true })
  end)
end)

------------------------------------------------------------------------ 3. promotion and .to

local ALL_DTYPES = { "float32", "float64", "int32", "int64", "bool", "uint8", "float16", "bfloat16" }

describe("float16 and bfloat16: promotion and conversions to every dtype", function()
  both("promotion follows PyTorch, for tensors and numbers; values are computed in float32", function(dev)
    assert.equal("float32", T.promote_half("float16", "bfloat16"))
    local small = { 1, 2, 3, 0, 5, 7 }
    for _, dt in ipairs(HALF) do
      local hv = { 0.5, T.round_half(0.1, dt), -3.25, 2, 1000, -0.0 }
      local h = half_tensor(hv, dt, dev)
      for _, other in ipairs(ALL_DTYPES) do
        local o
        if other == "bool" then o = qlua.tensor({ true, false, true, true, false, true }, { device = dev })
        else o = qlua.tensor(small, { dtype = other, device = dev }) end
        local ov = other == "bool" and { 1, 0, 1, 1, 0, 1 } or
          (T.is_half_dtype(other) and map(small, function(v) return T.round_half(v, other) end) or small)
        local want_dt = T.promote_half(dt, other)
        for _, pair in ipairs({ { h, o, "+" }, { o, h, "+" }, { h, o, "*" }, { o, h, "-" } }) do
          local x, y, name = pair[1], pair[2], pair[3]
          local r = ({ ["+"] = function() return x + y end, ["*"] = function() return x * y end,
            ["-"] = function() return x - y end })[name]()
          local what = string.format("%s %s %s", x:dtype(), name, y:dtype())
          assert.equal(want_dt, r:dtype(), what)
          local xv = rawequal(x, h) and hv or ov
          local yv = rawequal(y, h) and hv or ov
          local f = ({ ["+"] = function(p, q) return p + q end, ["*"] = function(p, q) return p * q end,
            ["-"] = function(p, q) return p - q end })[name]
          local want = map(xv, function(p, i)
            local q = yv[i]
            if want_dt == "float64" then return f(p, q) end
            return T.half_op(f(T.f32(p), T.f32(q)), want_dt)
          end)
          T.assert_equal(r, want, what .. " values")
        end
        -- comparisons give bool whatever the promotion
        assert.equal("bool", h:lt(o):dtype())
        -- where and cat promote the same way
        assert.equal(want_dt, qlua.where(qlua.tensor({ true, false, true, false, true, false }, { device = dev }), h, o):dtype(),
          "where " .. dt .. " " .. other)
        assert.equal(want_dt, qlua.cat({ h, o }):dtype(), "cat " .. dt .. " " .. other)
        assert.equal(want_dt, qlua.stack({ o, h }):dtype(), "stack " .. other .. " " .. dt)
      end
      -- a Lua number keeps the 16-bit type: integers, floats and booleans
      for _, x in ipairs({ 1, 2.5, -7, 1e-3, 1e30, true }) do
        assert.equal(dt, (h + x):dtype(), dt .. " + " .. tostring(x))
        assert.equal(dt, (x * h):dtype(), tostring(x) .. " * " .. dt)
        if type(x) == "number" then assert.equal(dt, h:maximum(x):dtype(), dt .. " maximum " .. tostring(x)) end
      end
      assert_half_bits(h + 1e30, map(hv, function(v) return T.half_op(v + T.f32(1e30), dt) end), dt, dt .. " + 1e30 (float32, then inf or not)")
      -- in place: a float32 or float64 result is stored rounded; a float into an integer is an error
      local c = half_tensor(hv, dt, dev)
      c:add_(qlua.tensor({ 0.1, 0.1, 0.1, 0.1, 0.1, 0.1 }, { device = dev }))
      assert.equal(dt, c:dtype())
      T.assert_equal(c, map(hv, function(v) return T.half_op(v + T.f32(0.1), dt) end), dt .. " add_ float32")
      local c64 = half_tensor(hv, dt, dev)
      c64:add_(qlua.tensor({ 0.1, 0.1, 0.1, 0.1, 0.1, 0.1 }, { dtype = "float64", device = dev }))
      T.assert_close_half(c64, map(hv, function(v) return T.round_half(v + 0.1, dt) end), dt, 0, dt .. " add_ float64")
      local i = qlua.tensor(small, { dtype = "int32", device = dev })
      T.assert_error(function() i:add_(h) end, "add_")
      local c2 = half_tensor(hv, dt, dev)
      c2:add_(qlua.tensor(small, { dtype = "int64", device = dev }))
      T.assert_equal(c2, map(hv, function(v, k) return T.half_op(v + small[k], dt) end), dt .. " add_ int64")
    end
    -- float16 with bfloat16: float32, each exact value added in float32
    local a = qlua.tensor({ 0.1, 1000.3, 3e4 }, { dtype = "float16", device = dev })
    local b = qlua.tensor({ 0.1, 1000.3, 3e38 }, { dtype = "bfloat16", device = dev })
    local r = a + b
    assert.equal("float32", r:dtype())
    T.assert_equal(r, { T.f32(T.round_half(0.1, "float16") + T.round_half(0.1, "bfloat16")),
      T.f32(T.round_half(1000.3, "float16") + T.round_half(1000.3, "bfloat16")),
      T.f32(30000 + T.round_half(3e38, "bfloat16")) })
  end)

  both("16-bit to integer and bool: truncation, saturation and NaN as the other float casts", function(dev)
    local vals = { 0.0, -0.0, 0.5, -0.5, 1.75, -2.5, 127.9, 128, 200.5, 255.9, 256, 300, -300, 1000.5, 65504, -65504,
      1e9, -1e9, 3e9, -3e9, 1e19, -1e19, INF, -INF, NAN }
    local function sat(x, lo, hi)
      if x ~= x then return 0 end
      if x <= lo then return lo end
      if x >= hi + 1.0 then return hi end
      return math.tointeger(trunc(x))
    end
    local RANGE = { int32 = { -2147483648, 2147483647 }, int64 = { math.mininteger, math.maxinteger }, uint8 = { 0, 255 } }
    for _, dt in ipairs(HALF) do
      local hv = map(vals, function(x) return T.round_half(x, dt) end)
      local h = T.relayout(half_tensor(hv, dt, dev), "stepped")
      local f32 = h:to("float32")
      for _, target in ipairs({ "int32", "int64", "uint8" }) do
        local r = h:to(target)
        assert.equal(target, r:dtype())
        local lo, hi = RANGE[target][1], RANGE[target][2]
        T.assert_equal(r, map(hv, function(x) return sat(x, lo, hi) end), dt .. " -> " .. target)
        T.assert_equal(r, f32:to(target), dt .. " -> " .. target .. " as float32 -> " .. target)
        local dst = qlua.zeros({ #hv, 2 }, { dtype = target, device = dev })
        dst:select(2, 2):copy_(h)
        T.assert_equal(dst:select(2, 2), r, dt .. " copy_ into " .. target)
      end
      T.assert_equal(h:to("bool"), map(hv, function(x) return x ~= 0 end), dt .. " -> bool (NaN is true)")
    end
  end)

  both("integer and bool to 16-bit: the value rounded once, overflow to inf", function(dev)
    local cases = {
      int32 = { 0, 1, -1, 255, 256, 257, 259, 2049, 2051, 4097, 65504, 65519, 65520, 65536, 70000, -70000,
        16777217, 2147483647, -2147483648 },
      int64 = { 0, 3, -2049, 2051, 65519, 65520, 1 << 40, (1 << 40) + (1 << 32) + 1, -(1 << 50), 1 << 62 },
      uint8 = { 0, 1, 127, 128, 255, 254, 253 },
    }
    for _, dt in ipairs(HALF) do
      for src, list in pairs(cases) do
        local t = T.relayout(qlua.tensor(list, { dtype = src, device = dev }), "stepped")
        local want = map(list, function(v) return T.round_half(v + 0.0, dt) end)
        assert_half_bits(t:to(dt), want, dt, src .. " -> " .. dt)
        local dst = qlua.zeros({ #list, 3 }, { dtype = dt, device = dev })
        dst:select(2, 3):copy_(t)
        assert_half_bits(dst:select(2, 3), want, dt, src .. " copy_ into " .. dt)
      end
      local b = qlua.tensor({ true, false, true }, { device = dev })
      assert_half_bits(b:to(dt), { 1.0, 0.0, 1.0 }, dt, "bool -> " .. dt)
      -- and back: an integer that fits converts back exactly
      local ints = qlua.tensor({ -2048, -3, 0, 7, 2048 }, { dtype = "int32", device = dev })
      T.assert_equal(ints:to(dt):to("int64"), { -2048, -3, 0, 7, 2048 })
    end
    -- 16-bit to 16-bit through the exact float32 value, one rounding; a conversion to the
    -- same dtype is the tensor itself
    local h = qlua.tensor({ 65504, 1e-7, 3.140625, 0.1 }, { dtype = "float16", device = dev })
    assert_half_bits(h:to("bfloat16"), map({ 65504, 1e-7, 3.140625, 0.1 }, function(v)
      return T.round_half(T.round_half(v, "float16"), "bfloat16") end), "bfloat16", "float16 -> bfloat16")
    local bh = qlua.tensor({ 1e10, 1e-20, 3.140625, -70000 }, { dtype = "bfloat16", device = dev })
    assert_half_bits(bh:to("float16"), map({ 1e10, 1e-20, 3.140625, -70000 }, function(v)
      return T.round_half(T.round_half(v, "bfloat16"), "float16") end), "float16", "bfloat16 -> float16")
    assert.is_true(rawequal(h, h:to("float16")))
  end)
end)

------------------------------------------------------------------------ 4. reductions

describe("float16 and bfloat16: reductions accumulate in float32", function()
  both("4096 ones: sum, mean, norm, logsumexp, softmax and cumsum see every one", function(dev)
    for _, dt in ipairs(HALF) do
      local opts = { dtype = dt, device = dev }
      local ones = qlua.ones(4096, opts)
      assert.equal(4096, ones:sum(), dt .. " sum of 4096 ones (a 16-bit accumulator stalls at 2048 or 256)")
      local s = ones:sum(1)
      assert.equal(dt, s:dtype())
      assert.equal(4096, s:item())
      T.assert_equal(qlua.ones(3, 4096, opts):sum(2), { 4096, 4096, 4096 }, dt .. " sum along dim 2")
      T.assert_equal(qlua.ones(4096, 3, opts):t():sum(2), { 4096, 4096, 4096 }, dt .. " sum of a transposed view")
      assert.equal(4096, ones:sum({ 1 }):item())
      assert.equal(1, ones:mean(), dt .. " mean of 4096 ones")
      assert.equal(64, ones:norm(), dt .. " norm of 4096 ones")
      local z = qlua.zeros(4096, opts)
      assert.equal(T.round_half(math.log(4096), dt), z:logsumexp(1):item(), dt .. " logsumexp of 4096 zeros")
      local sm = z:softmax(1)
      assert.equal(dt, sm:dtype())
      assert.equal(1 / 4096, sm:max())
      assert.equal(1 / 4096, sm:min(), dt .. " softmax of 4096 zeros")
      T.assert_equal(ones:cumsum(1), range_list(4096, function(k) return T.round_half(k, dt) end), dt .. " cumsum of 4096 ones")
      -- large values: a float32 accumulator does not overflow where the 16-bit type would
      local big = qlua.full({ 4096 }, 1000, opts)
      assert.equal(1000, big:mean(), dt .. " mean of 4096 x 1000")
      assert.equal(T.round_half(4096000, dt), big:sum(), dt .. " sum of 4096 x 1000")
      -- a reduction to a Lua number gives the value rounded to the 16-bit type
      local v = half_tensor({ T.round_half(0.1, dt), T.round_half(0.2, dt), T.round_half(0.3, dt) }, dt, dev)
      local exact = T.round_half(0.1, dt) + T.round_half(0.2, dt) + T.round_half(0.3, dt)
      assert.equal(T.half_op(exact, dt), v:sum(), dt .. " sum() of three values is rounded once")
      assert.equal(T.half_op(exact, dt), v:sum(1):item(), dt .. " sum(1)")
      local rv = half_tensor(random_in(1000, -3, 3, dt), dt, dev)
      for _, name in ipairs({ "sum", "mean", "prod", "var", "std", "norm", "max", "min", "median" }) do
        local val = rv[name](rv)
        assert(T.round_half(val, dt) == val, string.format("%s %s() gave %.17g, not a %s value", dt, name, val, dt))
      end
      -- a product of 1024 (1 + ulp) factors, within a step of the exact one
      local eps = 2.0 ^ -T.half_format[dt].mbits
      local p = qlua.full({ 1024 }, 1 + eps, opts):prod()
      assert(T.half_steps(p, T.round_half((1 + eps) ^ 1024, dt), dt) <= 1,
        string.format("%s prod of 1024 x (1 + 2^-%d) is %.9g, expected %.9g", dt, T.half_format[dt].mbits, p,
          T.round_half((1 + eps) ^ 1024, dt)))
    end
  end)

  both("reductions along dims of views: the float64 result rounded, within a 16-bit step", function(dev)
    for _, dt in ipairs(HALF) do
      local shape = { 9, 33 }
      local v = random_in(9 * 33, -4, 4, dt)
      for _, layout in ipairs({ "contiguous", "transposed", "stepped" }) do
        local x = T.relayout(half_tensor(v, dt, dev, shape), layout)
        local x64 = x:to("float64")
        local what = dt .. " " .. layout .. " "
        local function close(r, r64, name, steps, abs_tol)
          assert.equal(dt, r:dtype(), what .. name .. ": dtype")
          T.assert_close_half(r, T.ref.map(r64:totable(), function(y) return T.round_half(y, dt) end), dt, steps or 1,
            what .. name, abs_tol)
        end
        for _, dim in ipairs({ 1, 2 }) do
          close(x:sum(dim), x64:sum(dim), "sum(" .. dim .. ")")
          close(x:mean(dim), x64:mean(dim), "mean(" .. dim .. ")")
          close(x:var(dim), x64:var(dim), "var(" .. dim .. ")")
          close(x:std(dim), x64:std(dim), "std(" .. dim .. ")")
          close(x:norm(2, dim), x64:norm(2, dim), "norm(2, " .. dim .. ")")
          close(x:norm(1, dim), x64:norm(1, dim), "norm(1, " .. dim .. ")")
          close(x:logsumexp(dim), x64:logsumexp(dim), "logsumexp(" .. dim .. ")")
          close(x:cumsum(dim), x64:cumsum(dim), "cumsum(" .. dim .. ")", 1, 1e-4)
          close(x:softmax(dim), x64:softmax(dim), "softmax(" .. dim .. ")", 1, 1e-6)
          close(x:log_softmax(dim), x64:log_softmax(dim), "log_softmax(" .. dim .. ")", 1, 2e-6)
          close(x:logcumsumexp(dim), x64:logcumsumexp(dim), "logcumsumexp(" .. dim .. ")", 1, 2e-6)
          local p16 = x / 4 + 1  -- factors near 1, as the 16-bit type holds them
          local p64 = p16:to("float64")
          close(p16:prod(dim), p64:prod(dim), "prod(" .. dim .. ")", 1, 1e-6)
          close(p16:cumprod(dim), p64:cumprod(dim), "cumprod(" .. dim .. ")", 1, 1e-6)
          local mv, mi = x:max(dim)
          local ev, ei = x64:max(dim)
          close(mv, ev, "max(" .. dim .. ") values", 0)
          T.assert_equal(mi, ei, what .. "max(" .. dim .. ") indices")
          local nv, ni = x:min(dim)
          local env, eni = x64:min(dim)
          close(nv, env, "min(" .. dim .. ") values", 0)
          T.assert_equal(ni, eni, what .. "min(" .. dim .. ") indices")
          T.assert_equal(x:argmax(dim), x64:argmax(dim), what .. "argmax")
          T.assert_equal(x:argmin(dim), x64:argmin(dim), what .. "argmin")
          close(x:amax(dim), x64:amax(dim), "amax", 0)
          close(x:amin(dim), x64:amin(dim), "amin", 0)
          local k = x:sum(dim, true)
          assert.equal(2, k:dim())
          assert.equal(1, k:size(dim))
        end
        close(x:sum({ 1, 2 }), x64:sum({ 1, 2 }), "sum({1, 2})")
        assert(T.half_steps(x:sum(), T.round_half(x64:sum(), dt), dt) <= 1, what .. "sum()")
        assert(T.half_steps(x:mean(), T.round_half(x64:mean(), dt), dt) <= 1, what .. "mean()")
        assert.equal(x64:max(), x:max(), what .. "max()")
        assert.equal(x64:min(), x:min(), what .. "min()")
        assert.equal(x64:argmax(), x:argmax(), what .. "argmax()")
        local lo, hi = x:aminmax()
        T.assert_equal(lo, x64:amin(), what .. "aminmax lo")
        T.assert_equal(hi, x64:amax(), what .. "aminmax hi")
      end
      -- NaN propagates; ties go to the first position
      local n = half_tensor({ 1, NAN, 3, 3 }, dt, dev)
      assert.is_true(n:max() ~= n:max())
      assert.is_true(n:sum() ~= n:sum())
      assert.equal(2, half_tensor({ 1, 3, 3, 2 }, dt, dev):argmax())
    end
  end)
end)

------------------------------------------------------------------------ 5. matmul

-- ‖c − ref‖ / ‖ref‖ with c and ref tensors (any dtype), computed in float64.
local function rel_err(c, ref)
  local c64, r64 = c:to("float64"), ref:to("float64")
  return (c64 - r64):norm() / r64:norm()
end

local MM_BOUND = { float16 = 1e-3, bfloat16 = 8e-3 }

describe("float16 and bfloat16: matmul in float32, rounded once", function()
  both("2-D 256x256x256 against float64, relative error printed and bounded", function(dev)
    for _, dt in ipairs(HALF) do
      local a = half_tensor(random_in(256 * 256, -1, 1, dt), dt, dev, { 256, 256 })
      local b = half_tensor(random_in(256 * 256, -1, 1, dt), dt, dev, { 256, 256 })
      local c = a:matmul(b)
      assert.equal(dt, c:dtype())
      local ref = a:to("float64"):matmul(b:to("float64"))
      local err = rel_err(c, ref)
      print(string.format("matmul %s 256x256x256 (%s) rel err %.2g", dt, dev, err))
      assert(err < MM_BOUND[dt], string.format("matmul %s rel err %.3g >= %.3g", dt, err, MM_BOUND[dt]))
      -- every element is the float32 sum rounded once: within a step of the float64 one rounded
      T.assert_close_half(c, T.ref.map(ref:totable(), function(y) return T.round_half(y, dt) end), dt, 1,
        "matmul " .. dt .. " elementwise", 1e-4)
      -- ones(1, 4096) @ ones(4096, 1): a 16-bit accumulator would stop at 2048 (256)
      local o = qlua.ones(1, 4096, { dtype = dt, device = dev }):matmul(qlua.ones(4096, 1, { dtype = dt, device = dev }))
      assert.equal(4096, o:item(), dt .. " ones(1, 4096) @ ones(4096, 1)")
    end
  end)

  both("batched, broadcast, transposed and strided operands against Lua", function(dev)
    for _, dt in ipairs(HALF) do
      local function mk(shape, layout)
        local n = T.numel(shape)
        local vals = random_in(n, -2, 2, dt)
        return T.relayout(half_tensor(vals, dt, dev, shape), layout), T.unflatten(vals, shape)
      end
      local cases = {
        { { 17, 24 }, "contiguous", { 24, 9 }, "stepped" },
        { { 3, 17, 24 }, "narrowed", { 3, 24, 9 }, "transposed" },
        { { 2, 1, 5, 7 }, "stepped", { 3, 7, 4 }, "contiguous" },
        { { 24 }, "stepped", { 24, 6 }, "narrowed" },
        { { 6, 24 }, "transposed", { 24 }, "contiguous" },
      }
      for _, cs in ipairs(cases) do
        local a, av = mk(cs[1], cs[2])
        local b, bv = mk(cs[3], cs[4])
        local what = string.format("matmul %s %s (%s) @ %s (%s)", dt, T.shape_str(cs[1]), cs[2], T.shape_str(cs[3]), cs[4])
        local c = a:matmul(b)
        assert.equal(dt, c:dtype(), what)
        local ref = T.ref.matmul(av, bv)
        T.assert_close_half(c, T.ref.map(ref, function(y) return T.round_half(y, dt) end), dt, 1, what, 1e-5)
        local r64 = qlua.tensor(ref, { dtype = "float64", device = dev })
        print(string.format("%s rel err %.2g", what, rel_err(c, r64)))
      end
      -- the transpose of a matrix as an operand: (a^T)^T @ b^T
      local a, av = mk({ 20, 12 }, "contiguous")
      local b, bv = mk({ 16, 20 }, "contiguous")
      local c = a:t():matmul(b:t())
      T.assert_close_half(c, T.ref.map(T.ref.matmul(T.ref.transpose(av, 1, 2), T.ref.transpose(bv, 1, 2)),
        function(y) return T.round_half(y, dt) end), dt, 1, "matmul " .. dt .. " a:t() @ b:t()", 1e-5)
      -- the other products
      local x, xv = mk({ 30 }, "stepped")
      local y, yv = mk({ 30 }, "contiguous")
      local d = x:dot(y)
      assert.equal(dt, d:dtype())
      T.assert_close_half(d:item(), T.round_half(T.ref.matmul(xv, yv), dt), dt, 1, "dot " .. dt, 1e-5)
      local m, mvv = mk({ 7, 30 }, "transposed")
      T.assert_close_half(m:mv(x), T.ref.map(T.ref.matmul(mvv, xv), function(v) return T.round_half(v, dt) end), dt, 1, "mv " .. dt, 1e-5)
      T.assert_close_half(x:outer(y:narrow(1, 1, 5)), T.ref.map(T.ref.matmul(T.unflatten(xv, { 30, 1 }),
        T.unflatten({ yv[1], yv[2], yv[3], yv[4], yv[5] }, { 1, 5 })), function(v) return T.half_op(v, dt) end), dt, 0, "outer " .. dt)
      local p, pv = mk({ 2, 5, 30 }, "contiguous")
      local q, qv = mk({ 2, 30, 3 }, "stepped")
      T.assert_close_half(p:bmm(q), T.ref.map(T.ref.matmul(pv, qv), function(v) return T.round_half(v, dt) end), dt, 1, "bmm " .. dt, 1e-5)
      T.assert_close_half(qlua.einsum("bij,bjk->bik", p, q), T.ref.map(T.ref.matmul(pv, qv), function(v) return T.round_half(v, dt) end),
        dt, 1, "einsum " .. dt, 1e-5)
      local cc, ccv = mk({ 5, 3 }, "contiguous")
      local pm, qm = p:select(1, 1), q:select(1, 2)
      local ref = T.ref.map2(T.ref.matmul(pv[1], qv[2]), ccv, function(s, e) return T.round_half(2 * s + 0.5 * e, dt) end)
      T.assert_close_half(qlua.addmm(cc, pm, qm, { alpha = 2, beta = 0.5 }), ref, dt, 1, "addmm " .. dt, 1e-5)
    end
  end)
end)

------------------------------------------------------------------------ 6. other op families

-- values with ties, both zeros, NaN and infinities (exact in both 16-bit types)
local function tie_values(n)
  local pool = { NAN, INF, -INF, 0.0, -0.0 }
  return range_list(n, function()
    if math.random() < 0.15 then return pool[math.random(#pool)] end
    return math.random(-12, 12) * 0.25
  end)
end

describe("float16 and bfloat16: every other op family, against float32", function()
  both("sort, argsort, topk, kthvalue, median, unique, cummax, searchsorted", function(dev)
    for _, dt in ipairs(HALF) do
      local v = tie_values(7 * 19)
      local x = T.relayout(half_tensor(v, dt, dev, { 7, 19 }), "transposed")
      local f = x:to("float32")
      local function same(a, b, what)
        if qlua.is_tensor(a) and T.is_half_dtype(a:dtype()) then
          assert.equal(dt, a:dtype(), what .. ": dtype")
          T.assert_equal(a:to("float32"), b, what)
        else
          T.assert_equal(a, b, what)
        end
      end
      for _, dim in ipairs({ 1, 2 }) do
        for _, desc in ipairs({ false, true }) do
          local sv, si = x:sort(dim, desc)
          local fv, fi = f:sort(dim, desc)
          same(sv, fv, dt .. " sort values")
          same(si, fi, dt .. " sort indices")
          same(x:argsort(dim, desc), f:argsort(dim, desc), dt .. " argsort")
        end
        for _, largest in ipairs({ true, false }) do
          local tv, ti = x:topk(4, dim, largest)
          local fv, fi = f:topk(4, dim, largest)
          same(tv, fv, dt .. " topk values")
          same(ti, fi, dt .. " topk indices")
        end
        local kv, ki = x:kthvalue(3, dim)
        local fkv, fki = f:kthvalue(3, dim)
        same(kv, fkv, dt .. " kthvalue")
        same(ki, fki, dt .. " kthvalue indices")
        local mv, mi = x:median(dim)
        local fmv, fmi = f:median(dim)
        same(mv, fmv, dt .. " median")
        same(mi, fmi, dt .. " median indices")
        local cv, ci = x:cummax(dim)
        local fcv, fci = f:cummax(dim)
        same(cv, fcv, dt .. " cummax")
        same(ci, fci, dt .. " cummax indices")
        local nv, ni = x:cummin(dim)
        local fnv, fni = f:cummin(dim)
        same(nv, fnv, dt .. " cummin")
        same(ni, fni, dt .. " cummin indices")
      end
      local u, inv, cnt = x:unique({ return_inverse = true, return_counts = true })
      local fu, finv, fcnt = f:unique({ return_inverse = true, return_counts = true })
      same(u, fu, dt .. " unique")
      same(inv, finv, dt .. " unique inverse")
      same(cnt, fcnt, dt .. " unique counts")
      local sorted = half_tensor({ -2, -0.5, 0, 0.25, 1, 1, 3 }, dt, dev)
      local q = half_tensor({ -3, -0.5, 0.1, 1, 2.75, 5 }, dt, dev)
      same(qlua.searchsorted(sorted, q), qlua.searchsorted(sorted:to("float32"), q:to("float32")), dt .. " searchsorted")
      same(qlua.searchsorted(sorted, q, true), qlua.searchsorted(sorted:to("float32"), q:to("float32"), true), dt .. " searchsorted right")
      local hv = half_tensor({ 0.1, 0.5, 0.9, 0.3, 0.3, 2 }, dt, dev)
      same(hv:histc(4, 0, 1), hv:to("float32"):histc(4, 0, 1), dt .. " histc")
      -- multinomial: 16-bit weights widen exactly, so the same seed draws the same positions
      local probs = half_tensor({ 0.1, 0.2, 0.05, 0.4, 0.25 }, dt, dev)
      qlua.seed(11)
      local m16 = qlua.multinomial(probs, 200, true)
      qlua.seed(11)
      local m32 = qlua.multinomial(probs:to("float32"), 200, true)
      T.assert_equal(m16, m32, dt .. " multinomial with replacement")
      qlua.seed(12)
      local n16 = qlua.multinomial(probs, 4)
      qlua.seed(12)
      T.assert_equal(n16, qlua.multinomial(probs:to("float32"), 4), dt .. " multinomial without replacement")
    end
  end)

  both("bincount with 16-bit weights: float64, as PyTorch (docs/API.md)", function(dev)
    for _, dt in ipairs(HALF) do
      local bins = qlua.tensor({ 0, 3, 3, 1, 0, 3, 5 }, { device = dev })
      local wv = { 0.25, 1.5, -0.75, 2, 0.5, 0.125, 3 }
      local w = half_tensor(wv, dt, dev)
      local bc = bins:bincount(w)
      T.assert_equal(bc, { 0.75, 2, 0, 0.875, 0, 3 }, dt .. " bincount with weights: values")
      assert.equal("float64", bc:dtype(), dt .. " bincount with " .. dt .. " weights gives float64")
    end
  end)

  both("gather, index_select, take, scatter_, scatter_add_, index_add_, index_fill_, index_copy_", function(dev)
    for _, dt in ipairs(HALF) do
      local v = tie_values(6 * 8)
      local x = T.relayout(half_tensor(v, dt, dev, { 6, 8 }), "stepped")
      local f = x:to("float32")
      local function same(a, b, what) same_as_rounded(dt, a, b, what) end
      local idx = T.random_index({ 6, 5 }, 8)
      same(x:gather(2, idx), f:gather(2, idx), "gather")
      same(x:index_select(1, { 6, 1, 3, 3 }), f:index_select(1, { 6, 1, 3, 3 }), "index_select")
      same(x:index_select(2, { 8, 2 }), f:index_select(2, { 8, 2 }), "index_select dim 2")
      same(x:take({ { 1, 48 }, { 17, 2 } }), f:take({ { 1, 48 }, { 17, 2 } }), "take")
      -- writes: sums of quarters are exact in float32 and in both 16-bit types, in any order
      local src = half_tensor(range_list(6 * 8, function() return math.random(-8, 8) * 0.25 end), dt, dev, { 6, 8 })
      local base = half_tensor(range_list(6 * 8, function() return math.random(-8, 8) * 0.5 end), dt, dev, { 6, 8 })
      local perm = {}
      for i = 1, 6 do perm[i] = T.permutation(8) end
      local sidx = qlua.tensor(perm, { device = dev }):narrow(2, 1, 5)
      same(base:clone():scatter_(2, sidx, src), base:to("float32"):scatter_(2, sidx, src:to("float32")), "scatter_ tensor")
      same(base:clone():scatter_(2, sidx, 0.1), base:to("float32"):scatter_(2, sidx, T.round_half(0.1, dt)), "scatter_ number")
      local dup = qlua.tensor(T.random_index({ 6, 8 }, 6), { device = dev })
      same(base:clone():scatter_add_(1, dup, src), base:to("float32"):scatter_add_(1, dup, src:to("float32")), "scatter_add_")
      same(T.relayout(base, "transposed"):index_add_(1, { 2, 2, 5, 1, 6, 2 }, src), base:to("float32"):index_add_(1, { 2, 2, 5, 1, 6, 2 }, src:to("float32")), "index_add_")
      same(base:clone():index_fill_(2, { 1, 8 }, -0.75), base:to("float32"):index_fill_(2, { 1, 8 }, -0.75), "index_fill_")
      same(base:clone():index_copy_(1, { 4, 2 }, src:narrow(1, 1, 2)), base:to("float32"):index_copy_(1, { 4, 2 }, src:narrow(1, 1, 2):to("float32")), "index_copy_")
      -- a float32 src into a 16-bit dst is converted (rounded) once
      local s32 = qlua.tensor(range_list(6 * 8, function() return 0.1 * math.random(-9, 9) end), { device = dev }):view(6, 8)
      same(base:clone():scatter_(2, sidx, s32:to(dt)), base:to("float32"):scatter_(2, sidx, s32):to(dt):to("float32"), "scatter_ of a rounded float32 src")
      same(base:clone():index_copy_(1, { 4, 2 }, s32:narrow(1, 1, 2)), base:to("float32"):index_copy_(1, { 4, 2 }, s32:narrow(1, 1, 2)), "index_copy_ float32 src")
    end
  end)

  both("masks, where, nonzero, any/all, cat, stack and the shape ops", function(dev)
    for _, dt in ipairs(HALF) do
      local v = tie_values(5 * 9)
      local x = T.relayout(half_tensor(v, dt, dev, { 5, 9 }), "narrowed")
      local f = x:to("float32")
      local function same(a, b, what) same_as_rounded(dt, a, b, what) end
      local mask = x:gt(0)
      T.assert_equal(mask, f:gt(0), dt .. " gt")
      same(x:masked_fill(mask, -1.5), f:masked_fill(mask, -1.5), "masked_fill")
      same(x:masked_fill(mask:narrow(1, 1, 1), NAN), f:masked_fill(mask:narrow(1, 1, 1), NAN), "masked_fill broadcast NaN")
      same(x:clone():masked_fill_(mask, qlua.tensor(2.5, { dtype = dt, device = dev })), f:masked_fill(mask, 2.5), "masked_fill_ 0-d tensor")
      same(x:masked_select(mask), f:masked_select(mask), "masked_select")
      same(x[mask], f[mask], "t[mask]")
      local y = x:clone(); y[mask] = 7
      same(y, f:masked_fill(mask, 7), "t[mask] = 7")
      local other = half_tensor(tie_values(9), dt, dev, { 1, 9 })
      same(qlua.where(mask, x, other), qlua.where(mask, f, other:to("float32")), "where")
      same(qlua.where(x, x, 0.25), qlua.where(f, f, 0.25), "where (condition through nonzero)")
      T.assert_equal(x:nonzero(), f:nonzero(), dt .. " nonzero")
      assert.equal(f:any(), x:any())
      assert.equal(f:all(), x:all())
      T.assert_equal(x:count_nonzero(2), f:count_nonzero(2), dt .. " count_nonzero")
      T.assert_equal(x:any(1), f:any(1), dt .. " any(1)")
      T.assert_equal(x:logical_not(), f:logical_not(), dt .. " logical_not")
      same(qlua.cat({ x, x:narrow(1, 2, 3), x:t():narrow(2, 1, 5):t() }, 1), qlua.cat({ f, f:narrow(1, 2, 3), f:t():narrow(2, 1, 5):t() }, 1), "cat")
      same(qlua.cat({ x, qlua.tensor({ { 1, 2, 3, 4, 5, 6, 7, 8, 9 } }, { dtype = "int32", device = dev }) }, 1),
        qlua.cat({ f, qlua.tensor({ { 1, 2, 3, 4, 5, 6, 7, 8, 9 } }, { device = dev }) }, 1), "cat with int32")
      same(qlua.stack({ x, x:flip(1) }, 2), qlua.stack({ f, f:flip(1) }, 2), "stack")
      same(x:flip({ 1, 2 }), f:flip({ 1, 2 }), "flip")
      same(x:roll(3, 2), f:roll(3, 2), "roll")
      same(x:repeat_tensor({ 2, 1, 2 }), f:repeat_tensor({ 2, 1, 2 }), "repeat_tensor")
      same(x:clamp(-1, 1), f:clamp(-1, 1), "clamp")
      same(x:maximum(other), f:maximum(other:to("float32")), "maximum")
      same(x:minimum(0.5), f:minimum(0.5), "minimum")
      same(x:contiguous(), f, "contiguous")
      same(x:t():reshape(45), f:t():reshape(45), "reshape of a transposed view")
    end
  end)

  both("lerp, addcmul_, addcdiv_ and cross_entropy: computed in float32, rounded once", function(dev)
    for _, dt in ipairs(HALF) do
      local function same(a, b, what) same_as_rounded(dt, a, b, what) end
      local x = T.relayout(half_tensor(random_in(45, -4, 4, dt), dt, dev, { 5, 9 }), "narrowed")
      local f = x:to("float32")
      local l = half_tensor(random_in(45, -2, 2, dt), dt, dev, { 5, 9 })
      local lf = l:to("float32")
      -- each is the float32 op on the same values, rounded once into the 16-bit type
      local l2 = half_tensor(random_in(45, 0.5, 2, dt), dt, dev, { 5, 9 })
      same(l:clone():addcmul_(l2, l, 0.3), lf:clone():addcmul_(l2:to("float32"), lf, 0.3), "addcmul_")
      same(l:clone():addcdiv_(l, l2, -0.7), lf:clone():addcdiv_(lf, l2:to("float32"), -0.7), "addcdiv_")
      for _, w in ipairs({ 0.25, 0.75 }) do
        same(x:lerp(l, w), f:lerp(lf, w), "lerp(l, " .. w .. ")")
      end
      local wt = half_tensor(random_in(9, 0, 1, dt), dt, dev, { 1, 9 })
      same(x:lerp(l, wt), f:lerp(lf, wt:to("float32")), "lerp with a tensor weight")
      T.assert_close_half(qlua.cross_entropy(l, { 1, 9, 4, 4, 2 }):item(), T.round_half(qlua.cross_entropy(lf:to("float64"), { 1, 9, 4, 4, 2 }):item(), dt),
        dt, 1, dt .. " cross_entropy")
    end
  end)

  both("random fills: 16-bit values in range, reproducible from the seed", function(dev)
    for _, dt in ipairs(HALF) do
      local opts = { dtype = dt, device = dev }
      qlua.seed(77)
      local r = qlua.rand(20000, opts)
      assert.equal(dt, r:dtype())
      qlua.seed(77)
      T.assert_bits_equal(T.tensor_bits(qlua.rand(20000, opts)), T.tensor_bits(r), dt .. " rand: the same seed, the same bits")
      local m = r:to("float64"):mean()
      assert(math.abs(m - 0.5) < 0.02, dt .. " rand mean " .. m)
      assert(r:min() >= 0, dt .. " rand min")
      qlua.seed(5)
      local n = qlua.randn(20000, opts)
      local n64 = n:to("float64")
      assert(math.abs(n64:mean()) < 0.05 and math.abs(n64:std() - 1) < 0.05, dt .. " randn moments")
      qlua.seed(5)
      T.assert_bits_equal(T.tensor_bits(qlua.randn(20000, opts)), T.tensor_bits(n), dt .. " randn: the same seed, the same bits")
      local u = qlua.empty(3000, opts):uniform_(-2, 3)
      assert(u:min() >= -2 and u:max() <= 3, dt .. " uniform_ range")
      local nm = qlua.empty({ 40, 50 }, opts):t():normal_(10, 2)
      assert(math.abs(nm:to("float64"):mean() - 10) < 0.3, dt .. " normal_ on a view")
      local e = qlua.empty(3000, opts):exponential_(2)
      assert(e:min() >= 0, dt .. " exponential_ min")
      local ri = qlua.empty(2000, opts):random_(1, 6)
      T.assert_equal(ri:unique(), { 1, 2, 3, 4, 5, 6 }, dt .. " random_(1, 6)")
      local p = qlua.full({ 4000 }, 0.25, opts)
      local bern = qlua.bernoulli(p)
      assert.equal(dt, bern:dtype())
      assert(math.abs(bern:to("float64"):mean() - 0.25) < 0.03, dt .. " bernoulli")
      T.assert_equal(qlua.randperm(200, opts):sort(), range_list(200, function(i) return i end), dt .. " randperm")
      qlua.seed(9)
      local rl = qlua.rand_like(qlua.zeros(100, opts))
      assert.equal(dt, rl:dtype())
      T.assert_error(function() return qlua.randint(0, 5, 3, opts) end, "randint")
      -- every value is a 16-bit value (a stored float32 would show in the widening)
      for _, val in ipairs(flat(n)) do
        assert(T.round_half(val, dt) == val, dt .. " randn value " .. val .. " is not a " .. dt)
      end
    end
  end)

  both("rand, uniform_ and exponential_ stay in their ranges after rounding", function(dev)
    -- docs/API.md: rand is uniform in [0, 1), uniform_ in [lo, hi), exponential_ is
    -- -log1p(-u) / lambda of such a u: a float32 draw just below 1 must not round up to
    -- 1.0 in the 16-bit type (and then give an infinite exponential)
    local problems = {}
    for _, dt in ipairs(HALF) do
      local opts = { dtype = dt, device = dev }
      qlua.seed(123)
      local r = qlua.rand(200000, opts)
      if not (r:max() < 1) then problems[#problems + 1] = string.format("%s rand(200000) reached %.9g", dt, r:max()) end
      local u = qlua.empty(200000, opts):uniform_(0, 2)
      if not (u:max() < 2) then problems[#problems + 1] = string.format("%s uniform_(0, 2) reached %.9g", dt, u:max()) end
      local e = qlua.empty(200000, opts):exponential_(2)
      if not (e:max() < INF) then
        problems[#problems + 1] = string.format("%s exponential_(2) gave %d infinities in 200000", dt, e:isinf():count_nonzero())
      else
        local m = e:to("float64"):mean()
        if math.abs(m - 0.5) > 0.01 then problems[#problems + 1] = string.format("%s exponential_(2) mean %.4g", dt, m) end
      end
    end
    assert(#problems == 0, table.concat(problems, "; "))
  end)
end)

------------------------------------------------------------------------ 7. printing and elements

describe("float16 and bfloat16: printing and element access", function()
  local function body(t) return (tostring(t):gsub("qlua%.Tensor %S+", "qlua.Tensor DTYPE")) end

  both("tostring shows the stored values as float32 of them would, with the dtype", function(dev)
    for _, dt in ipairs(HALF) do
      local opts = { dtype = dt, device = dev }
      local cases = {
        qlua.tensor({ 1, 2.5, -0.1, 65504, 1e-6 }, opts),
        qlua.tensor({ { 1, 2, 3 }, { 4, 5, 6 } }, opts),
        qlua.tensor({ NAN, INF, -INF, -0.0, 0.0 }, opts),
        qlua.tensor(0.1, opts),
        qlua.tensor({ 1000, 0.001, 3.14159 }, opts):t(),
        qlua.zeros({ 0 }, opts),
        qlua.arange(0, 3000, opts),
        qlua.ones(40, 30, opts):t(),
      }
      for _, t in ipairs(cases) do
        local s = tostring(t)
        assert.is_truthy(s:find("qlua.Tensor " .. dt, 1, true), s)
        assert.is_truthy(s:find(dev == "cpu" and "cpu" or "gpu", 1, true), s)
        assert.equal(body(t:to("float32")), body(t), dt .. " prints as float32 of its values")
      end
      assert.is_truthy(tostring(qlua.arange(0, 3000, opts)):find("...", 1, true), "summarised")
      assert.is_truthy(tostring(qlua.zeros(2, 3, opts)):find("2x3", 1, true))
    end
  end)

  both("elements read as the exact stored numbers; writes round once", function(dev)
    for _, dt in ipairs(HALF) do
      local t = qlua.tensor({ 0.1, 1 / 3, 1e5 }, { dtype = dt, device = dev })
      assert.equal(T.round_half(0.1, dt), t[1])
      assert.equal("float", math.type(t[1]))
      assert.equal(T.round_half(1 / 3, dt), t:totable()[2])
      assert.equal(T.round_half(1e5, dt), t:narrow(1, 3, 1):item())
      t[2] = 2049.5
      assert.equal(T.round_half(2049.5, dt), t[2])
      local m = qlua.zeros(2, 2, { dtype = dt, device = dev })
      m[{ 1, 2 }] = 0.3
      assert.equal(T.round_half(0.3, dt), m[1][2])
      T.assert_equal(m, { { 0, T.round_half(0.3, dt) }, { 0, 0 } })
      assert.equal(dt, m:dtype())
    end
  end)
end)

------------------------------------------------------------------------ 8. GPU against CPU

describe("float16 and bfloat16: the GPU gives the CPU's bits", function()
  gtest("conversions and exact ops, bit for bit", function()
    local function on(dev, fn) return T.tensor_bits(fn(dev)) end
    for _, dt in ipairs(HALF) do
      local pats = f32_random_patterns()
      local function conv(dev) return T.tensor_from_bits(pats, "float32", dev):to(dt) end
      T.assert_bits_equal(on("gpu", conv), on("cpu", conv), "float32 -> " .. dt .. " gpu vs cpu", pats, 4, 8)
      local ties = f32_tie_patterns(dt)
      local function tconv(dev) return T.tensor_from_bits(ties, "float32", dev):to(dt) end
      T.assert_bits_equal(on("gpu", tconv), on("cpu", tconv), "float32 ties -> " .. dt .. " gpu vs cpu", ties, 4, 8)
      local b64 = map(f64_tie_values(dt), T.f64_bits)
      local function dconv(dev) return T.tensor_from_bits(b64, "float64", dev):to(dt) end
      T.assert_bits_equal(on("gpu", dconv), on("cpu", dconv), "float64 -> " .. dt .. " gpu vs cpu")
      local src = dt == "float16" and T.tensor_from_bits(ALL16, "float16", "cpu")
        or T.tensor_from_bits(map(ALL16, function(b) return b << 16 end), "float32", "cpu"):to("bfloat16")
      T.assert_bits_equal(T.tensor_bits(src:gpu():to("float32")), T.tensor_bits(src:to("float32")), dt .. " -> float32 gpu vs cpu")
      T.assert_bits_equal(T.tensor_bits(src:gpu():to("float64")), T.tensor_bits(src:to("float64")), dt .. " -> float64 gpu vs cpu")
      T.assert_bits_equal(T.tensor_bits(src:gpu():to(OTHER[dt])), T.tensor_bits(src:to(OTHER[dt])), dt .. " -> " .. OTHER[dt] .. " gpu vs cpu")
      T.assert_bits_equal(T.tensor_bits(src:gpu():to("int32")), T.tensor_bits(src:to("int32")), dt .. " -> int32 gpu vs cpu")
      -- exact arithmetic on every pattern against a shuffled copy, with NaN results compared as NaNs
      local a = src
      local b = src:index_select(1, qlua.tensor(T.permutation(65536)))
      for _, op in ipairs(BINOPS) do
        local c, g = op[3](a, b), op[3](a:gpu(), b:gpu())
        local cb, gb = T.tensor_bits(c), T.tensor_bits(g)
        for i = 1, #cb do
          if T.half_is_nan_bits(cb[i], dt) then assert(T.half_is_nan_bits(gb[i], dt), dt .. " " .. op[1] .. " NaN at " .. i)
          else assert(cb[i] == gb[i], string.format("%s %s element %d: gpu %s, cpu %s", dt, op[1], i, hex(gb[i]), hex(cb[i]))) end
        end
      end
      -- sorting and the same seed
      local s = qlua.tensor(tie_values(999), { dtype = dt })
      local sv, si = s:sort()
      local gv, gi = s:gpu():sort()
      T.assert_bits_equal(T.tensor_bits(gv), T.tensor_bits(sv), dt .. " sort gpu vs cpu")
      T.assert_equal(gi:cpu(), si, dt .. " sort indices gpu vs cpu")
      qlua.seed(31)
      local rc = qlua.rand(5000, { dtype = dt, device = "cpu" })
      qlua.seed(31)
      local rg = qlua.rand(5000, { dtype = dt, device = "gpu" })
      T.assert_bits_equal(T.tensor_bits(rg), T.tensor_bits(rc), dt .. " rand: the same seed on both devices")
      qlua.seed(32)
      local nc = qlua.randn(5000, { dtype = dt, device = "cpu" })
      qlua.seed(32)
      local ng = qlua.randn(5000, { dtype = dt, device = "gpu" })
      T.assert_close_half(ng:cpu(), nc, dt, 1, dt .. " randn: the same seed on both devices (the two math libraries)")
      local function fills(dev)
        local opts = { dtype = dt, device = dev }
        qlua.seed(33)
        local u = qlua.empty(4000, opts):uniform_(-1, 3)
        local n = qlua.empty({ 50, 80 }, opts):t():normal_(2, 0.5)
        local e = qlua.empty(4000, opts):exponential_(1.5)
        local b = qlua.bernoulli(qlua.full({ 4000 }, 0.3, opts))
        local p = qlua.randperm(200, opts)
        return u:cpu(), n:cpu(), e:cpu(), b:cpu(), p:cpu()
      end
      local cu, cn, ce, cb, cp = fills("cpu")
      local gu, gn, ge, gb, gp = fills("gpu")
      T.assert_bits_equal(T.tensor_bits(gu), T.tensor_bits(cu), dt .. " uniform_: the same seed on both devices")
      T.assert_close_half(gn, cn, dt, 1, dt .. " normal_ on a view: the same seed on both devices")
      T.assert_close_half(ge, ce, dt, 1, dt .. " exponential_: the same seed on both devices")
      T.assert_bits_equal(T.tensor_bits(gb), T.tensor_bits(cb), dt .. " bernoulli: the same seed on both devices")
      T.assert_bits_equal(T.tensor_bits(gp), T.tensor_bits(cp), dt .. " randperm: the same seed on both devices")
    end
  end)
end)

------------------------------------------------------------------------ 9. the CPU's conversion builds

-- A qlua script that loads the inputs, converts and computes on the CPU, and saves every
-- result as .npy into its output directory (bfloat16 results widened to float32).
local CHILD = [[
local dir = arg[1]
local function save(name, t)
  if t:dtype() == "bfloat16" then qlua.save_safetensors(dir .. "/" .. name .. ".safetensors", { x = t })
  else qlua.save(dir .. "/" .. name .. ".npy", t:contiguous()) end
end
local h = qlua.load(dir .. "/in_all16.npy")
local bf = qlua.load_safetensors(dir .. "/in_allbf16.safetensors").x
local ties16 = qlua.load(dir .. "/in_ties16.npy")
local tiesbf = qlua.load(dir .. "/in_tiesbf.npy")
local rnd = qlua.load(dir .. "/in_random32.npy")
save("f16_to_f32", h:to("float32"))
save("f16_roundtrip", h:to("float32"):to("float16"))
save("bf16_to_f32", bf:to("float32"))
save("bf16_roundtrip", bf:to("float32"):to("bfloat16"))
save("ties16", ties16:to("float16"))
save("tiesbf", tiesbf:to("bfloat16"))
save("random_f16", rnd:to("float16"))
save("random_bf16", rnd:to("bfloat16"))
local perm = qlua.load(dir .. "/in_perm.npy")
for _, pair in ipairs({ { "f16", h }, { "bf16", bf } }) do
  local name, a = pair[1], pair[2]
  local b = a:index_select(1, perm)
  save(name .. "_add", a + b); save(name .. "_mul", a * b); save(name .. "_div", a / b)
  save(name .. "_neg", a:neg()); save(name .. "_abs", a:abs()); save(name .. "_exp", a:exp())
  save(name .. "_sqrt", a:sqrt()); save(name .. "_plus_tenth", a + 0.1)
  save(name .. "_sum", a:view(256, 256):sum(2)); save(name .. "_strided", a:view(256, 256):t() * 3)
end
print("ok")
]]

local CHILD_OUTPUTS = { "f16_to_f32", "f16_roundtrip", "bf16_to_f32", "bf16_roundtrip", "ties16", "tiesbf", "random_f16", "random_bf16" }
for _, name in ipairs({ "f16", "bf16" }) do
  for _, op in ipairs({ "add", "mul", "div", "neg", "abs", "exp", "sqrt", "plus_tenth", "sum", "strided" }) do
    CHILD_OUTPUTS[#CHILD_OUTPUTS + 1] = name .. "_" .. op
  end
end

describe("float16 and bfloat16: the CPU's conversion builds agree", function()
  it("QLUA_CPU_ISA=generic, avx2 and the default give the same bits, the reference's for conversions", function()
    local QLUA = P.qlua()
    finally(function() P.cleanup() end)
    local dir = P.tempdir()
    T.write_npy_bits(dir .. "/in_all16.npy", "<f2", ALL16)
    T.write_safetensors_bits(dir .. "/in_allbf16.safetensors", "x", "BF16", ALL16)
    local ties16, tiesbf, rnd = f32_tie_patterns("float16"), f32_tie_patterns("bfloat16"), f32_random_patterns()
    T.write_npy_bits(dir .. "/in_ties16.npy", "<f4", ties16)
    T.write_npy_bits(dir .. "/in_tiesbf.npy", "<f4", tiesbf)
    T.write_npy_bits(dir .. "/in_random32.npy", "<f4", rnd)
    math.randomseed(99)
    T.write_npy_bits(dir .. "/in_perm.npy", "<i8", T.permutation(65536))
    local script = P.write(dir .. "/child.lua", CHILD)
    local runs = {}
    for _, isa in ipairs({ "generic", "avx2", "default" }) do
      local out = dir .. "/" .. isa
      os.execute("mkdir -p " .. P.quote(out))
      for _, f in ipairs({ "in_all16.npy", "in_allbf16.safetensors", "in_ties16.npy", "in_tiesbf.npy", "in_random32.npy", "in_perm.npy" }) do
        os.execute("cp " .. P.quote(dir .. "/" .. f) .. " " .. P.quote(out))
      end
      local env = { QLUA_CPU_ISA = isa == "default" and false or isa }
      local r = P.run({ QLUA, script, out }, { env = env, timeout = 120 })
      assert(r.status == 0 and r.stdout:find("ok"), string.format("QLUA_CPU_ISA=%s child failed (%d): %s %s", isa, r.status, r.stdout, r.stderr))
      runs[isa] = out
    end
    -- an output's file (.npy, or .safetensors for bfloat16) and its bits
    local function output(isa, name)
      local npy = runs[isa] .. "/" .. name .. ".npy"
      local bytes = P.read(npy)
      if bytes then return bytes, T.read_npy_bits(npy) end
      local st = runs[isa] .. "/" .. name .. ".safetensors"
      bytes = P.read(st)
      assert(bytes, string.format("QLUA_CPU_ISA=%s wrote no output %s", isa, name))
      return bytes, T.read_safetensors_bits(st, "x")
    end
    -- every build matches the reference on the conversions
    local nan_bf = function(b) return (b & 0x8000) | 0x7fc0 end
    local expect = {
      f16_to_f32 = map(ALL16, function(b) return T.half_to_f32_bits(b, "float16") end),
      f16_roundtrip = ALL16,
      bf16_to_f32 = map(ALL16, function(b) return b << 16 end),
      bf16_roundtrip = map(ALL16, function(b) return T.half_is_nan_bits(b, "bfloat16") and nan_bf(b) or b end),
      ties16 = map(ties16, function(u) return T.half_from_f32_bits(u, "float16") end),
      tiesbf = map(tiesbf, function(u) return T.half_from_f32_bits(u, "bfloat16") end),
      random_f16 = map(rnd, function(u) return T.half_from_f32_bits(u, "float16") end),
      random_bf16 = map(rnd, function(u) return T.half_from_f32_bits(u, "bfloat16") end),
    }
    for _, isa in ipairs({ "generic", "avx2", "default" }) do
      for name, want in pairs(expect) do
        local _, bits = output(isa, name)
        T.assert_bits_equal(bits, want, string.format("QLUA_CPU_ISA=%s %s", isa, name), nil, 8)
      end
    end
    -- and the three builds agree on every output, byte for byte
    for _, name in ipairs(CHILD_OUTPUTS) do
      local g, gbits = output("generic", name)
      for _, isa in ipairs({ "avx2", "default" }) do
        local o, obits = output(isa, name)
        if o ~= g then
          T.assert_bits_equal(obits, gbits, string.format("%s: QLUA_CPU_ISA=%s against generic", name, isa))
          error(name .. ": the files differ outside the data")
        end
      end
    end
  end)
end)
