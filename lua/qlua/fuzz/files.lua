-- qlua.fuzz.files — the files qlua.save / qlua.load and the safetensors functions see: a
-- fresh temporary directory with malformed .npy files made once, a valid .safetensors file,
-- and the mutations of it (st_mutate) that each load_safetensors call writes just before it
-- loads them. Paths outside the directory are never handed to a call.

return function(ctx)
  local R = ctx.R

  -- ------------------------------------------------------------- files for save/load
  local tmpdir = os.tmpname()
  os.remove(tmpdir)
  local made_dir = os.execute("mkdir -p '" .. tmpdir .. "'")
  local function write_file(name, bytes)
    local f = io.open(tmpdir .. "/" .. name, "wb")
    if f then f:write(bytes); f:close() end
  end
  local function npy(descr, fortran, shape_text, data)
    local header = string.format("{'descr': '%s', 'fortran_order': %s, 'shape': %s, }",
                                 descr, fortran and "True" or "False", shape_text)
    local total = 10 + #header + 1
    header = header .. string.rep(" ", (64 - total % 64) % 64) .. "\n"
    local hlen = #header
    return "\x93NUMPY\x01\x00" .. string.char(hlen % 256, hlen // 256) .. header .. (data or "")
  end
  if made_dir then
    write_file("empty.npy", "")
    write_file("garbage.npy", "this is not a numpy file\0\1\2\3")
    write_file("magic_only.npy", "\x93NUMPY")
    write_file("trunc.npy", npy("<f4", false, "(4,)", "\0\0\0\0"))
    write_file("huge_shape.npy", npy("<f4", false, "(1125899906842624,)", ""))
    write_file("overflow_shape.npy", npy("<f8", false, "(4611686018427387904, 4)", ""))
    write_file("neg_shape.npy", npy("<i8", false, "(-1,)", ""))
    write_file("fortran.npy", npy("<f8", true, "(2, 2)", string.rep("\0", 32)))
    write_file("big_endian.npy", npy(">f4", false, "(2,)", string.rep("\0", 8)))
    write_file("bool.npy", npy("|b1", false, "(2,)", "\1\0"))
    write_file("bad_dict.npy", npy("<f4", false, "(2,", ""))
    write_file("short_ok.npy", npy("<i4", false, "(3,)", string.rep("\1\0\0\0", 3)))
    write_file("scalar.npy", npy("<f8", false, "()", string.rep("\0", 8)))
    write_file("zero_len.npy", npy("<f4", false, "(0, 5)", ""))
    write_file("long_header.npy", "\x93NUMPY\x01\x00\xff\xff{'descr'")
  end
  local SAVE_PATHS = { tmpdir .. "/a.npy", tmpdir .. "/b.npy", tmpdir,
                       tmpdir .. "/no/such/dir/x.npy", tmpdir .. "/" .. ("x"):rep(300), "" }
  local LOAD_PATHS = { tmpdir .. "/a.npy", tmpdir .. "/b.npy", tmpdir, tmpdir .. "/missing.npy",
                       "" }
  for _, f in ipairs({ "empty", "garbage", "magic_only", "trunc", "huge_shape",
                       "overflow_shape", "neg_shape", "fortran", "big_endian", "bool",
                       "bad_dict", "short_ok", "scalar", "zero_len", "long_header" }) do
    LOAD_PATHS[#LOAD_PATHS + 1] = tmpdir .. "/" .. f .. ".npy"
  end

  -- .safetensors: a valid file (every 16-bit float, bool, scalar and metadata part of it),
  -- and mutations of it that each load_safetensors call writes just before it loads
  -- ST_MUTATED (left in the directory when the process dies, for the reproducer)
  local function st_file(header, data, len)
    return string.pack("<I8", len or #header) .. header .. (data or "")
  end
  local ST_HEADER = '{"__metadata__":{"format":"pt"},'
    .. '"w":{"dtype":"F32","shape":[2,3],"data_offsets":[0,24]},'
    .. '"b":{"dtype":"I64","shape":[2],"data_offsets":[24,40]},'
    .. '"h":{"dtype":"F16","shape":[3],"data_offsets":[40,46]},'
    .. '"m":{"dtype":"BOOL","shape":[2],"data_offsets":[46,48]},'
    .. '"e":{"dtype":"U8","shape":[0,4],"data_offsets":[48,48]},'
    .. '"s":{"dtype":"BF16","shape":[],"data_offsets":[48,50]}}'
  local ST_DATA = string.rep("\0\0\128\63", 6) .. string.pack("<i8<i8", 7, -3)
    .. "\0\60\0\192\0\56" .. "\1\0" .. "\128\63"
  local ST_VALID = st_file(ST_HEADER, ST_DATA)
  local ST_MUTATED = tmpdir .. "/mut.safetensors"
  local ST_TOKENS = { "-1", "0", "1", "8", "24", "50", "1e3", "2.5", "99999999999999999999",
    "4611686018427387904", "18446744073709551615", "9223372036854775807", "null", "true",
    '"x"', "[]", "{}", "[0,0]", "[1,2,3]", '"F32"', '"I8"', '"BF16"', '"__metadata__"' }
  local ST_DTYPES = { "F32", "F64", "I32", "I64", "U8", "BOOL", "F16", "BF16", "I8", "U16",
    "F8_E4M3", "float32", "", "bogus" }
  local ST_BYTES = { "{", "}", "[", "]", ",", ":", '"', "\\", "\0", "\255", "\192\128", " ",
    "\n", "-", "e", "\\u0000" }
  -- A random header: entries with random dtypes, shapes and offsets (gaps, overlaps,
  -- huge sizes), sometimes metadata, sometimes a duplicate key.
  local function st_random_header()
    local items, offset = {}, 0
    for k = 1, R:int(0, 4) do
      local dt = R:pick(ST_DTYPES)
      local shape = {}
      for d = 1, R:weighted({ { 3, 0 }, { 5, 1 }, { 4, 2 }, { 1, 17 } }) do
        shape[d] = R:chance(0.9) and R:int(0, 4) or R:pick({ 1 << 40, 1 << 62, -1 })
      end
      local n = 1
      for _, v in ipairs(shape) do n = n * v end
      local size = ({ F32 = 4, F64 = 8, I32 = 4, I64 = 8, U8 = 1, BOOL = 1, F16 = 2, BF16 = 2 })[dt] or 1
      local b = R:chance(0.8) and offset or R:int(0, 60)
      local e = R:chance(0.9) and b + n * size or R:int(0, 60)
      offset = e
      local name = R:chance(0.9) and ("t" .. k) or R:pick({ "t1", "", "__metadata__", "a\\u0000" })
      items[#items + 1] = string.format('"%s":{"dtype":"%s","shape":[%s],"data_offsets":[%d,%d]}',
        name, dt, table.concat(shape, ","), b, e)
    end
    if R:chance(0.3) then
      items[#items + 1] = R:pick({ '"__metadata__":{"a":"b"}', '"__metadata__":{"a":1}',
        '"__metadata__":null', '"__metadata__":[]', '"__metadata__":{"a":"b","a":"c"}' })
    end
    return "{" .. table.concat(items, ",") .. "}", offset
  end
  -- The valid file with one to three mutations: bytes, the length field, the header's
  -- text (tokens, dtypes, punctuation), the data's length, or a random header.
  local function st_mutate()
    local header, data, len = ST_HEADER, ST_DATA, nil
    for _ = 1, R:int(1, 3) do
      local r = R:float()
      if r < 0.15 then             -- a random header over random data
        local n
        header, n = st_random_header()
        local fits = math.type(n) == "integer" and n >= 0 and n <= 4096
        data = string.rep("\1", (fits and R:chance(0.7)) and n or R:int(0, 64))
      elseif r < 0.35 then         -- a number, a string or a value replaced by a token
        local spots = {}
        for pos, tok in header:gmatch("()(%-?%d+)") do spots[#spots + 1] = { pos, #tok } end
        for pos, tok in header:gmatch('()("[^"]*")') do spots[#spots + 1] = { pos, #tok } end
        if #spots > 0 then
          local sp = R:pick(spots)
          header = header:sub(1, sp[1] - 1) .. R:pick(ST_TOKENS) .. header:sub(sp[1] + sp[2])
        end
      elseif r < 0.45 then         -- a dtype replaced
        header = header:gsub('"dtype":"%w*"', function(m)
          return R:chance(0.3) and '"dtype":"' .. R:pick(ST_DTYPES) .. '"' or m
        end)
      elseif r < 0.6 then          -- punctuation inserted or a byte deleted
        local at = R:int(1, #header + 1)
        if R:chance(0.5) then header = header:sub(1, at - 1) .. R:pick(ST_BYTES) .. header:sub(at)
        else header = header:sub(1, at - 1) .. header:sub(at + 1) end
      elseif r < 0.64 then         -- an entry duplicated
        local first = header:match('^{("[^"]*":%b{})')
        if first then header = "{" .. first .. "," .. header:sub(2) end
      elseif r < 0.7 then          -- one tensor's offsets moved, its size kept (gaps, overlaps)
        local shift = R:pick({ -8, -2, -1, 1, 2, 8, 24 })
        local k, target = 0, R:int(1, 6)
        header = header:gsub('"data_offsets":%[(%d+),(%d+)%]', function(b, e)
          k = k + 1
          if k ~= target then return nil end
          return string.format('"data_offsets":[%d,%d]', b + shift, e + shift)
        end)
      elseif r < 0.78 then         -- the length field
        len = R:pick({ 0, 1, 7, #header - 1, #header + 1, #header + #data + 1, 100000001,
                       -1, 1 << 62, math.maxinteger, R:int(0, 200) })
      elseif r < 0.9 then          -- the data cut or grown
        if R:chance(0.5) then data = data:sub(1, R:int(0, #data)) else data = data .. string.rep("\0", R:int(1, 9)) end
      else                         -- header padding (valid) or junk after the JSON
        header = header .. R:pick({ "    ", "\t\n", "x", "\0", "}" })
      end
    end
    local bytes = st_file(header, data, len)
    if R:chance(0.1) then          -- raw byte flips over the whole file
      local t = { bytes:byte(1, -1) }
      for _ = 1, R:int(1, 4) do
        if #t > 0 then t[R:int(1, #t)] = R:int(0, 255) end
      end
      bytes = string.char(table.unpack(t))
    end
    if R:chance(0.05) then bytes = bytes:sub(1, R:int(0, 12)) end   -- shorter than a length
    return bytes
  end
  if made_dir then
    write_file("valid.safetensors", ST_VALID)
    write_file("empty.safetensors", "")
  end
  local ST_SAVE_PATHS = { tmpdir .. "/a.safetensors", tmpdir .. "/b.safetensors", tmpdir,
                          tmpdir .. "/no/such/dir/x.safetensors",
                          tmpdir .. "/" .. ("x"):rep(300) .. ".safetensors", "" }
  local ST_LOAD_PATHS = { tmpdir .. "/a.safetensors", tmpdir .. "/b.safetensors",
                          tmpdir .. "/valid.safetensors", tmpdir .. "/empty.safetensors",
                          ST_MUTATED, tmpdir, tmpdir .. "/missing.safetensors",
                          tmpdir .. "/short_ok.npy", "" }
  local function cleanup_files()
    for _, p in ipairs(SAVE_PATHS) do if p ~= tmpdir and p ~= "" then os.remove(p) end end
    for _, p in ipairs(LOAD_PATHS) do if p ~= tmpdir and p ~= "" then os.remove(p) end end
    for _, p in ipairs(ST_SAVE_PATHS) do if p ~= tmpdir and p ~= "" then os.remove(p) end end
    for _, p in ipairs(ST_LOAD_PATHS) do if p ~= tmpdir and p ~= "" then os.remove(p) end end
    os.remove(tmpdir)
  end

  ctx.tmpdir, ctx.write_file, ctx.SAVE_PATHS = tmpdir, write_file, SAVE_PATHS
  ctx.LOAD_PATHS, ctx.ST_MUTATED, ctx.ST_SAVE_PATHS = LOAD_PATHS, ST_MUTATED, ST_SAVE_PATHS
  ctx.ST_LOAD_PATHS, ctx.st_mutate, ctx.cleanup_files = ST_LOAD_PATHS, st_mutate, cleanup_files
end
