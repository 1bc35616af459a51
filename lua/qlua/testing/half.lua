--[[
qlua.testing.half — the 16-bit float helpers of qlua.testing, installed by qlua.testing
(require that; this file returns the installer).

float16 and bfloat16 in plain Lua from the contract (runtime/half.h's header
comment): the formats' bits, rounding to nearest even (with subnormals and overflow to
inf) from any float32 or float64, the NaN rules (float16: NumPy's; bfloat16: ml_dtypes'),
and comparisons on the 16-bit grid. These are kept apart from T.dtypes / T.all_dtypes,
which the exact per-dtype specs loop over.

Bits are Lua integers (a 16-bit pattern 0..0xffff, a float32 one 0..0xffffffff, a float64
one as a signed int64); values are Lua numbers (every 16-bit value is exact in a double).

Raw bits travel through files: .npy (float16, float32, float64) and .safetensors (bfloat16,
which .npy has no code for), so a spec can put any pattern, NaN payloads included, into a
tensor and read back the patterns a tensor holds.
]]

-- shared: qlua.testing's own comparison internals (values_of, check_shapes, fmt).
return function(T, shared)
  local qlua = T.qlua
  local floor, huge = math.floor, math.huge
  local values_of, check_shapes, fmt = shared.values_of, shared.check_shapes, shared.fmt

  T.half_dtypes = { "float16", "bfloat16" }
  -- fraction bits, exponent bits, exponent bias
  local HALF_FMT = {
    float16 = { mbits = 10, ebits = 5, bias = 15 },
    bfloat16 = { mbits = 7, ebits = 8, bias = 127 },
  }
  T.half_format = HALF_FMT
  function T.is_half_dtype(dtype) return HALF_FMT[dtype] ~= nil end

  function T.f32_bits(x) return (string.unpack("<I4", string.pack("<f", x))) end
  function T.f32_from_bits(u) return (string.unpack("<f", string.pack("<I4", u))) end
  function T.f64_bits(x) return (string.unpack("<i8", string.pack("<d", x))) end
  function T.f64_from_bits(u) return (string.unpack("<d", string.pack("<i8", u))) end

  local function half_fmt(dtype)
    return HALF_FMT[dtype] or error("not a 16-bit float dtype: " .. tostring(dtype), 3)
  end

  -- The bits of +inf, and the largest finite value, of a 16-bit dtype.
  function T.half_inf_bits(dtype)
    local f = half_fmt(dtype)
    return ((1 << f.ebits) - 1) << f.mbits
  end
  function T.half_max(dtype)
    local f = half_fmt(dtype)
    return (2 - 2.0 ^ -f.mbits) * 2.0 ^ f.bias
  end

  function T.half_is_nan_bits(h, dtype)
    local inf = T.half_inf_bits(dtype)
    return (h & 0x7fff) > inf
  end

  -- The value of 16-bit pattern h (a Lua number; NaN patterns give a NaN).
  function T.half_value(h, dtype)
    local f = half_fmt(dtype)
    local e = (h >> f.mbits) & ((1 << f.ebits) - 1)
    local m = h & ((1 << f.mbits) - 1)
    local v
    if e == (1 << f.ebits) - 1 then
      v = m == 0 and huge or (0 / 0)
    elseif e == 0 then
      v = m * 2.0 ^ (1 - f.bias - f.mbits)
    else
      v = (m + (1 << f.mbits)) * 2.0 ^ (e - f.bias - f.mbits)
    end
    if h & 0x8000 ~= 0 then v = -v end
    return v
  end

  -- The magnitude |x| (a finite Lua number, exact) rounded to nearest, ties to even, into
  -- format f: the magnitude's bits, the inf pattern when it overflows. Written as "the
  -- nearest multiple q of the binade's quantum", which carries into the exponent by itself.
  local function half_round_magnitude(ax, f)
    local inf = ((1 << f.ebits) - 1) << f.mbits
    if ax == 0 then return 0 end
    local u = T.f64_bits(ax)
    local e64 = (u >> 52) & 0x7ff
    local sig, k, E
    if e64 == 0 then  -- a float64 subnormal: far below half the smallest 16-bit subnormal
      return 0
    end
    sig, k, E = (u & 0xfffffffffffff) | (1 << 52), e64 - 1075, e64 - 1023  -- ax = sig * 2^k
    if E > f.bias then return inf end
    local emin = 1 - f.bias
    local qe = math.max(E, emin) - f.mbits  -- the quantum of ax's binade is 2^qe
    local shift = qe - k                    -- >= 52 - mbits > 0
    local q
    if shift > 54 then
      q = 0                                 -- below half a quantum
    else
      q = sig >> shift
      local rest, half = sig - (q << shift), 1 << (shift - 1)
      if rest > half or (rest == half and q & 1 == 1) then q = q + 1 end
    end
    local r = ((math.max(E, emin) - emin) << f.mbits) + q
    if r > inf then r = inf end
    return r
  end

  -- The same rounding for a finite float32 magnitude given as its bits (sign bit clear),
  -- in integer arithmetic only: float32's significand and exponent read off the bits.
  local function half_round_f32_magnitude(u, f)
    local inf = ((1 << f.ebits) - 1) << f.mbits
    local e, m = u >> 23, u & 0x7fffff
    local sig, k, E
    if e == 0 then
      if m == 0 then return 0 end
      sig, k, E = m, -149, -127  -- a float32 subnormal: below every 16-bit normal binade
    else
      sig, k, E = m | 0x800000, e - 150, e - 127
    end
    if E > f.bias then return inf end
    local emin = 1 - f.bias
    local qe = math.max(E, emin) - f.mbits
    local shift = qe - k
    local q
    if shift <= 0 then
      q = sig << -shift
    elseif shift > 25 then
      q = 0
    else
      q = sig >> shift
      local rest, half = sig - (q << shift), 1 << (shift - 1)
      if rest > half or (rest == half and q & 1 == 1) then q = q + 1 end
    end
    local r = ((math.max(E, emin) - emin) << f.mbits) + q
    if r > inf then r = inf end
    return r
  end

  -- An infinity (is_inf) or a NaN whose top 10 fraction bits are payload, as 16-bit bits:
  -- float16 keeps the sign and the payload (1 when it is 0, NumPy); bfloat16 makes it
  -- 0x7fc0 with its sign (ml_dtypes).
  local function half_nonfinite(sign, is_inf, payload, dtype)
    if is_inf then return sign | T.half_inf_bits(dtype) end
    if dtype == "bfloat16" then return sign | 0x7fc0 end
    return sign | 0x7c00 | (payload == 0 and 1 or payload)
  end

  -- float32 bits -> 16-bit bits (NaN and infinities as half_nonfinite says).
  function T.half_from_f32_bits(u, dtype)
    local f = half_fmt(dtype)
    local sign = (u >> 16) & 0x8000
    local e, m = (u >> 23) & 0xff, u & 0x7fffff
    if e == 0xff then return half_nonfinite(sign, m == 0, m >> 13, dtype) end
    return sign | half_round_f32_magnitude(u & 0x7fffffff, f)
  end

  -- The bits of x, the result of a float32 computation, rounded into the 16-bit dtype:
  -- float32's rounding (string.pack's), then the 16-bit one on the bits.
  function T.half_op_bits(x, dtype) return T.half_from_f32_bits(T.f32_bits(x), dtype) end

  -- float64 bits -> 16-bit bits, rounded once (float64 converts directly).
  function T.half_from_f64_bits(u, dtype)
    local f = half_fmt(dtype)
    local sign = (u >> 48) & 0x8000
    local e, m = (u >> 52) & 0x7ff, u & 0xfffffffffffff
    if e == 0x7ff then return half_nonfinite(sign, m == 0, m >> 42, dtype) end
    return sign | half_round_magnitude(math.abs(T.f64_from_bits(u)), f)
  end

  -- A Lua number -> 16-bit bits (one rounding from float64).
  function T.half_bits_of(x, dtype) return T.half_from_f64_bits(T.f64_bits(x), dtype) end

  -- 16-bit bits -> float32 bits: float16 NaNs shift their fraction up by 13; bfloat16 is
  -- the bits shifted up by 16; every other value is exact.
  function T.half_to_f32_bits(h, dtype)
    if dtype == "bfloat16" then return h << 16 end
    half_fmt(dtype)
    local sign = (h & 0x8000) << 16
    local e, m = (h >> 10) & 0x1f, h & 0x3ff
    if e == 0x1f then return sign | 0x7f800000 | (m << 13) end
    if e == 0 and m == 0 then return sign end
    return sign | T.f32_bits(math.abs(T.half_value(h, dtype)))
  end

  -- x (a Lua number) as the 16-bit dtype stores it: rounded once from float64.
  function T.round_half(x, dtype)
    if x ~= x then return x end
    return T.half_value(T.half_bits_of(x, dtype), dtype)
  end

  -- x rounded to nearest, ties to even, into a binary format with `mbits` fraction bits
  -- and exponent bias `bias` (subnormals, overflow to inf), by plain arithmetic on the
  -- value: the nearest multiple of the quantum 2^(max(e, emin) - mbits) of x's binade.
  -- A second, independent way to the rounding of T.half_bits_of (which works on bits),
  -- and much faster; the spec checks that the two agree.
  local FMT32 = { mbits = 23, bias = 127 }
  local function round_format(x, f)
    if x ~= x or x == 0 or x == huge or x == -huge then return x end
    local ax = math.abs(x)
    local e = floor(math.log(ax, 2))
    if 2.0 ^ e > ax then e = e - 1 elseif 2.0 ^ (e + 1) <= ax then e = e + 1 end
    local qe = math.max(e, 1 - f.bias) - f.mbits
    local r = ax * 2.0 ^ -qe  -- exact: a scaling by a power of two
    local n = floor(r)
    local d = r - n
    if d > 0.5 or (d == 0.5 and n % 2 == 1) then n = n + 1 end
    local v = n * 2.0 ^ qe
    if v > (2 - 2.0 ^ -f.mbits) * 2.0 ^ f.bias then v = huge end
    if x < 0 then return -v end
    return v
  end
  function T.round_format(x, mbits, bias) return round_format(x, { mbits = mbits, bias = bias }) end

  -- The result of a float32 computation rounded into the 16-bit dtype: x (the exact or
  -- double result) rounded to float32 first, then to the 16-bit type (PyTorch's opmath).
  -- A 16-bit dtype may also be "float32"/"float64" (then float32's rounding / x itself).
  function T.half_op(x, dtype)
    if dtype == "float64" then return x end
    local r = round_format(x, FMT32)
    if dtype == "float32" then return r end
    return round_format(r, half_fmt(dtype))
  end

  -- x rounded once into the 16-bit dtype by round_format (T.round_half's value, faster).
  function T.round_half_fast(x, dtype) return round_format(x, half_fmt(dtype)) end

  -- The position of a 16-bit pattern on the ordered grid of values: consecutive values
  -- differ by 1, -0 and +0 are both 0, +inf is one above the largest finite value.
  function T.half_grid(h)
    if h & 0x8000 ~= 0 then return -(h & 0x7fff) end
    return h
  end

  -- The distance, in 16-bit steps, between two Lua numbers that the dtype holds exactly
  -- (0 for equal values or two NaNs, huge when one is NaN and the other not).
  function T.half_steps(a, b, dtype)
    if a ~= a or b ~= b then return (a ~= a and b ~= b) and 0 or huge end
    return math.abs(T.half_grid(T.half_bits_of(a, dtype)) - T.half_grid(T.half_bits_of(b, dtype)))
  end

  -- Elementwise: actual (a tensor, a nested table or a number) within `steps` 16-bit steps
  -- of expected (values the dtype holds: pass them through T.round_half / T.half_op), or
  -- within abs_tol of it when given (for results near 0 of a cancellation); NaN must match
  -- NaN. steps 0 is exact equality (with -0 == 0; use T.assert_bits_equal for the signs of
  -- zeros and the NaN bits).
  function T.assert_close_half(actual, expected, dtype, steps, what, abs_tol)
    what = what or "values"
    steps = steps or 1
    local a, ashape = values_of(actual)
    local e, eshape = values_of(expected)
    check_shapes(ashape, eshape, #e, what)
    if #a ~= #e then error(string.format("%s: %d elements, expected %d", what, #a, #e), 2) end
    for i = 1, #e do
      local x, y = a[i], e[i]
      if type(x) ~= "number" then
        error(string.format("%s: element %d is %s, expected %s", what, i, tostring(x), fmt(y)), 2)
      end
      local d = T.half_steps(x, y, dtype)
      if d > steps and not (abs_tol and x == x and y == y and math.abs(x - y) <= abs_tol) then
        error(string.format("%s: element %d (row-major) is %s, expected %s (%s steps of %s apart, at most %d)",
          what, i, fmt(x), fmt(y), d == huge and "inf" or tostring(d), dtype, steps), 2)
      end
    end
    return true
  end

  ------------------------------------------------------------------------ raw bits through .npy

  -- A .npy file (format 1.0, little-endian, C order, 1-D) holding the integers in `bits`
  -- as elements of `descr` ('<f2', '<f4', '<f8', '<u2' ...): the patterns exactly, NaN
  -- payloads included. size: bytes per element.
  local NPY_SIZE = { ["<f2"] = 2, ["<f4"] = 4, ["<f8"] = 8, ["<u2"] = 2, ["<i4"] = 4, ["<i8"] = 8 }
  function T.write_npy_bits(path, descr, bits)
    local size = NPY_SIZE[descr] or error("write_npy_bits: unknown descr " .. tostring(descr))
    local header = string.format("{'descr': '%s', 'fortran_order': False, 'shape': (%d,), }", descr, #bits)
    local pad = (64 - (10 + #header + 1) % 64) % 64
    header = header .. string.rep(" ", pad) .. "\n"
    local fmt1 = "<I" .. size
    if size == 8 then fmt1 = "<i8" end
    local parts, chunk = {}, {}
    for i = 1, #bits do
      chunk[#chunk + 1] = string.pack(fmt1, bits[i])
      if #chunk == 4096 then parts[#parts + 1] = table.concat(chunk); chunk = {} end
    end
    parts[#parts + 1] = table.concat(chunk)
    local file = assert(io.open(path, "wb"))
    file:write("\x93NUMPY\1\0", string.pack("<I2", #header), header, table.concat(parts))
    file:close()
    return path
  end

  -- The elements of a .npy file as unsigned integers of its element size (8-byte ones as
  -- Lua's int64, whose bits they are), and its descr.
  function T.read_npy_bits(path)
    local file = assert(io.open(path, "rb"))
    local s = file:read("a")
    file:close()
    assert(s:sub(1, 6) == "\x93NUMPY", "read_npy_bits: not a .npy file: " .. path)
    local major = s:byte(7)
    local hlen, start
    if major == 1 then hlen, start = string.unpack("<I2", s, 9), 11
    else hlen, start = string.unpack("<I4", s, 9), 13 end
    local header = s:sub(start, start + hlen - 1)
    local descr = header:match("'descr':%s*'([^']+)'") or error("read_npy_bits: no descr in " .. header)
    local size = tonumber(descr:match("(%d+)$"))
    local fmt1 = size == 8 and "<i8" or ("<I" .. size)
    local out, pos = {}, start + hlen
    local n = (#s - pos + 1) // size
    for i = 1, n do out[i], pos = string.unpack(fmt1, s, pos) end
    return out, descr
  end

  -- A .safetensors file holding one 1-D tensor `name` of the 16-bit patterns in `bits`
  -- (code "BF16" or "F16"): the 8-byte header length, the JSON header padded with spaces
  -- to 8 bytes, the little-endian data. The way to put any bfloat16 pattern (NaN payloads
  -- included) into a tensor, since .npy has no code for bfloat16.
  function T.write_safetensors_bits(path, name, code, bits)
    local header = string.format('{"%s":{"dtype":"%s","shape":[%d],"data_offsets":[0,%d]}}', name, code, #bits, 2 * #bits)
    header = header .. string.rep(" ", (8 - #header % 8) % 8)
    local parts, chunk = {}, {}
    for i = 1, #bits do
      chunk[#chunk + 1] = string.pack("<I2", bits[i])
      if #chunk == 4096 then parts[#parts + 1] = table.concat(chunk); chunk = {} end
    end
    parts[#parts + 1] = table.concat(chunk)
    local file = assert(io.open(path, "wb"))
    file:write(string.pack("<I8", #header), header, table.concat(parts))
    file:close()
    return path
  end

  -- The 16-bit patterns of tensor `name` in a .safetensors file (F16 or BF16), row-major.
  function T.read_safetensors_bits(path, name)
    local file = assert(io.open(path, "rb"))
    local s = file:read("a")
    file:close()
    local hlen = string.unpack("<I8", s)
    local header = s:sub(9, 8 + hlen)
    local entry = header:match('"' .. name .. '"%s*:%s*(%b{})') or error("read_safetensors_bits: no tensor " .. name)
    local code = entry:match('"dtype"%s*:%s*"(%w+)"')
    assert(code == "BF16" or code == "F16", "read_safetensors_bits: dtype " .. tostring(code))
    local a, b = entry:match('"data_offsets"%s*:%s*%[%s*(%d+)%s*,%s*(%d+)%s*%]')
    a, b = tonumber(a), tonumber(b)
    local out, pos = {}, 9 + hlen + a
    for i = 1, (b - a) // 2 do out[i], pos = string.unpack("<I2", s, pos) end
    return out, code
  end

  -- The bit patterns of a tensor's elements in row-major order (any device, any layout):
  -- through a saved .npy, or for bfloat16, which has no .npy code, a .safetensors file.
  function T.tensor_bits(t)
    local path = os.tmpname()
    local c = t:cpu()
    local bits
    if c:dtype() == "bfloat16" then
      qlua.save_safetensors(path, { x = c })
      bits = T.read_safetensors_bits(path, "x")
    else
      qlua.save(path, c:contiguous())
      bits = T.read_npy_bits(path)
    end
    os.remove(path)
    return bits
  end

  -- A 1-D tensor holding the bit patterns `bits` as dtype ("float16", "bfloat16",
  -- "float32", "float64"), loaded from a file that holds them (.npy, or .safetensors for
  -- bfloat16), on device.
  local NPY_OF = { float16 = "<f2", float32 = "<f4", float64 = "<f8" }
  function T.tensor_from_bits(bits, dtype, device)
    local path = os.tmpname()
    local t
    if dtype == "bfloat16" then
      T.write_safetensors_bits(path, "x", "BF16", bits)
      t = qlua.load_safetensors(path, { device = device or "cpu" }).x
    else
      T.write_npy_bits(path, NPY_OF[dtype] or error("tensor_from_bits: dtype " .. tostring(dtype)), bits)
      t = qlua.load(path, { device = device or "cpu" })
    end
    os.remove(path)
    assert(t:dtype() == dtype, "tensor_from_bits: loaded " .. t:dtype() .. ", expected " .. dtype)
    return t
  end

  -- Compares two lists of bit patterns; the message names the first few differences, with
  -- the input each came from when `inputs` is given (hex, `width` digits).
  function T.assert_bits_equal(actual, expected, what, inputs, width, in_width)
    what = what or "bits"
    width = width or 4
    if #actual ~= #expected then
      error(string.format("%s: %d elements, expected %d", what, #actual, #expected), 2)
    end
    local bad, shown = 0, {}
    for i = 1, #expected do
      if actual[i] ~= expected[i] then
        bad = bad + 1
        if #shown < 8 then
          local input = inputs and string.format(" from input 0x%0" .. (in_width or width) .. "x", inputs[i]) or ""
          shown[#shown + 1] = string.format("element %d%s: 0x%0" .. width .. "x, expected 0x%0" .. width .. "x",
            i, input, actual[i], expected[i])
        end
      end
    end
    if bad > 0 then
      error(string.format("%s: %d of %d elements differ; %s", what, bad, #expected, table.concat(shown, "; ")), 2)
    end
    return true
  end

  -- The promoted dtype of two dtypes when either may be 16-bit (PyTorch's rules):
  -- float16 with bfloat16 gives float32; a 16-bit type with float32 or float64 gives that;
  -- with any integer or bool the 16-bit type stays. Otherwise T.promote.
  function T.promote_half(a, b)
    local ha, hb = HALF_FMT[a] ~= nil, HALF_FMT[b] ~= nil
    if not ha and not hb then return T.promote(a, b) end
    if a == b then return a end
    if ha and hb then return "float32" end
    local h, other = ha and a or b, ha and b or a
    if other == "float32" or other == "float64" then return other end
    return h
  end
end
