-- bench.lua — `make bench`: qlua against raw CUDA / cuBLAS (bench/baseline.cu) and, on
-- the CPU, against NumPy, measured in the same run.
--
--   qlua bench/bench.lua [--baseline build/bench-baseline] [--csv build/bench.csv]
--                        [--python PATH] [--list] [--help] [case ...]
--
-- With no case names every case this machine can run is run (the GPU cases need a GPU);
-- --list prints the cases with their sizes and targets and exits.
--
-- Every case is timed the same way on both sides: `calls` back-to-back calls, one
-- synchronisation, wall-clock time / calls; the median of `runs` such batches after a
-- warm-up (qlua.bench does this for qlua; baseline.cu and numpy_baseline.py mirror it).
-- ratio = qlua time / baseline time: below 1 qlua is faster.
--
-- User kernels: kernel_launch_16 (a qlua.kernel launched from Lua, vs the same
-- kernel launched with <<<>>> from C), elementwise_64m (qlua.elementwise vs a raw kernel),
-- compile_memory (qlua.kernel of a source this process already compiled), and two cases
-- measured in child qlua processes with their own XDG_CACHE_HOME, since a process can find
-- an entry on disk only once: compile_cold (an empty cache: NVRTC's compile, vs NVRTC
-- called directly in baseline.cu) and compile_disk (a fresh process whose entry is on
-- disk: the time of its first qlua.kernel, what a script that uses one kernel pays).

local USAGE = [[
usage: qlua bench/bench.lua [options] [case ...]
  --baseline PATH  the raw CUDA / cuBLAS baseline program (default build/bench-baseline)
  --csv PATH       where to write the table as CSV (default build/bench.csv)
  --python PATH    the Python that runs bench/numpy_baseline.py (default: the first of
                   python3, /usr/bin/python3, python that imports numpy)
  --list           print the cases (name, size, target) and exit
  --help           print this and exit
With no case names, every case this machine can run is run.]]

local args = {baseline = "build/bench-baseline", csv = "build/bench.csv", only = {}}
do
  local i = 1
  while i <= #arg do
    local a = arg[i]
    if a == "--baseline" or a == "--csv" or a == "--python" then
      if arg[i + 1] == nil then io.stderr:write("bench: " .. a .. " needs a value\n", USAGE, "\n"); os.exit(2) end
      args[a:sub(3)] = arg[i + 1]; i = i + 2
    elseif a == "--help" or a == "-h" then
      print(USAGE); os.exit(0)
    elseif a == "--list" then
      args.list = true; i = i + 1
    elseif a:sub(1, 1) == "-" then
      io.stderr:write("bench: unknown option " .. a .. "\n", USAGE, "\n"); os.exit(2)
    else
      args.only[a] = true; i = i + 1
    end
  end
end
local function wanted(name) return next(args.only) == nil or args.only[name] end

local has_gpu = qlua.gpu_count() > 0
local MiB = 1024 * 1024

-- ---------------------------------------------------------------- baselines

-- Runs a baseline program and reads its `case,seconds` lines.
local function read_baseline(cmd)
  local result = {}
  local pipe = io.popen(cmd .. " 2>/dev/null")
  if not pipe then return result end
  for line in pipe:lines() do
    local name, secs = line:match("^([%w_:]+),([%d%.eE+-]+)$")
    if name then result[name] = tonumber(secs) end
  end
  pipe:close()
  return result
end

local function shell_quote(s) return "'" .. s:gsub("'", "'\\''") .. "'" end

local function selected_names(list)
  local names = {}
  for _, n in ipairs(list) do if wanted(n) then names[#names + 1] = n end end
  return table.concat(names, " ")
end

-- ---------------------------------------------------------------- the cases

-- kind: "ratio" (qlua time / baseline time <= target), "max_seconds" (qlua time <= target),
-- "min_rate" (achieved GB/s >= target), "numpy" (qlua time / NumPy time <= target).
local cases = {}
local function case(c) cases[#cases + 1] = c end

local gsrc, gidx1, gidx64, g2src, g2idx
local function gpu_setup()
  qlua.seed(7)
  local n = 128 * MiB
  gsrc = qlua.rand(n, {device = "gpu"})
  gidx1 = qlua.randint(1, n, MiB, {dtype = "int32", device = "gpu"})
  gidx64 = qlua.randint(1, n, 64 * MiB, {dtype = "int32", device = "gpu"})
  g2src = qlua.rand(8192, 8192, {device = "gpu"})
  g2idx = qlua.randint(1, 8192, {8192, 1024}, {dtype = "int64", device = "gpu"})
end

-- The GPU cases (every kind but "numpy"): listed everywhere, run only where there is a GPU.
-- Nothing here touches the GPU until gpu_setup() or a case's setup/fn runs.
do
  case {name = "gather_1m", size = "1Mi int32 idx from 128Mi f32", kind = "ratio", target = 1.10,
        bytes = MiB * 12, calls = 200, runs = 15,
        fn = function() return gsrc:gather(gidx1) end}
  case {name = "gather_64m", size = "64Mi int32 idx from 128Mi f32", kind = "ratio", target = 1.05,
        bytes = 64 * MiB * 12, calls = 20, runs = 9,
        fn = function() return gsrc:gather(gidx64) end}
  case {name = "gather_dim2", size = "8192x8192 f32, 8192x1024 i64 idx", kind = "max_seconds",
        target = 0.156e-3, bytes = 8192 * 1024 * 16, calls = 50, runs = 11,
        fn = function() return g2src:gather(2, g2idx) end}
  local mats = {}
  local function mat(n) mats[n] = mats[n] or {qlua.rand(n, n, {device = "gpu"}), qlua.rand(n, n, {device = "gpu"})}; return mats[n] end
  case {name = "matmul_4096", size = "4096^3 f32", kind = "ratio", target = 1 / 0.97,
        flops = 2 * 4096 ^ 3, calls = 5, runs = 7,
        fn = function() local m = mat(4096); return m[1]:matmul(m[2]) end}
  case {name = "matmul_8192", size = "8192^3 f32", kind = "ratio", target = 1 / 0.97,
        flops = 2 * 8192 ^ 3, calls = 3, runs = 5,
        fn = function() local m = mat(8192); return m[1]:matmul(m[2]) end}
  case {name = "matmul_tf32_8192", size = "8192^3 tf32", kind = "ratio", target = 1 / 0.97,
        flops = 2 * 8192 ^ 3, calls = 5, runs = 7, tf32 = true,
        fn = function() local m = mat(8192); return m[1]:matmul(m[2]) end}
  -- 16-bit products on the tensor cores, against cublasGemmEx with the same
  -- types (PyTorch on the H200: bfloat16 8192^3 770 TFLOP/s, float16 720; 4096^3 689 and 642).
  local mats16 = {}
  local function mat16(n, dtype)
    local key = dtype .. n
    if not mats16[key] then
      local a, b = qlua.rand(n, n, {device = "gpu"}), qlua.rand(n, n, {device = "gpu"})
      mats16[key] = {a:to(dtype), b:to(dtype)}
      a:free(); b:free()
    end
    return mats16[key]
  end
  for _, m16 in ipairs({{"bf16", "bfloat16"}, {"f16", "float16"}}) do
    for _, n in ipairs({4096, 8192}) do
      case {name = "matmul_" .. m16[1] .. "_" .. n, size = n .. "^3 " .. m16[2], kind = "ratio",
            target = 1 / 0.97, flops = 2 * n ^ 3, calls = n == 4096 and 10 or 5, runs = 9,
            fn = function() local m = mat16(n, m16[2]); return m[1]:matmul(m[2]) end}
    end
  end
  case {name = "matmul_64", size = "64^3 f32, from Lua", kind = "max_seconds", target = 10e-6,
        flops = 2 * 64 ^ 3, calls = 2000, runs = 9,
        fn = function() local m = mat(64); return m[1]:matmul(m[2]) end}
  local host256, dev256
  case {name = "h2d_256m", size = "256 MiB f32 :gpu()", kind = "min_rate", target = 40,
        bytes = 256 * MiB, calls = 3, runs = 7,
        setup = function() host256 = host256 or qlua.rand(64 * MiB) end,
        fn = function() host256:gpu():free() end}
  case {name = "d2h_256m", size = "256 MiB f32 :cpu()", kind = "min_rate", target = 40,
        bytes = 256 * MiB, calls = 3, runs = 7,
        setup = function() dev256 = dev256 or qlua.rand(64 * MiB, {device = "gpu"}) end,
        fn = function() dev256:cpu():free() end}
  local a16, b16
  case {name = "add_16", size = "16 f32, 100k in a row", kind = "ratio", target = 1.5,
        calls = 100000, runs = 5,
        setup = function()
          a16 = a16 or qlua.rand(16, {device = "gpu"}); b16 = b16 or qlua.rand(16, {device = "gpu"})
        end,
        fn = function() return a16 + b16 end}
  case {name = "alloc_1m", size = "create+free 1 MiB gpu", kind = "max_seconds", target = 2e-6,
        calls = 20000, runs = 9,
        fn = function() qlua.empty(262144, {device = "gpu"}):free() end}
  -- joining: PyTorch's torch.cat((a, b), dim=1) of two 8192x8192 float32 takes 0.283 ms on
  -- the H200; the target is 1.1x that. bytes: both pieces read, the result written.
  local cat_a, cat_b
  case {name = "cat_8192", size = "2x 8192x8192 f32 along dim 2", kind = "max_seconds",
        target = 1.1 * 0.283e-3, bytes = 4 * 8192 * 8192 * 4, calls = 20, runs = 9,
        setup = function()
          cat_a = cat_a or qlua.rand(8192, 8192, {device = "gpu"})
          cat_b = cat_b or qlua.rand(8192, 8192, {device = "gpu"})
        end,
        fn = function() qlua.cat({cat_a, cat_b}, 2):free() end}
  -- masks, on 64Mi float32 from rand (so v:gt(0.5) is about half true). PyTorch on
  -- the H200: torch.where(v > 0.5, v, 0) 0.366 ms, v[v > 0.5] 0.550 ms, both with the
  -- comparison; the targets are 1.1x those. Each call frees its mask and result, so the
  -- cache reuses the blocks instead of waiting for the collector. bytes: what the
  -- comparison, the count and the selection read and write (masked_select's output counted
  -- as half of v).
  local N64M = 64 * MiB
  local mask_v, mask_copy
  local function mask_input() mask_v = mask_v or qlua.rand(N64M, {device = "gpu"}) end
  case {name = "where_64m", size = "64Mi f32 where(v:gt(0.5), v, 0)", kind = "max_seconds",
        target = 1.1 * 0.366e-3, bytes = N64M * (5 + 9), calls = 20, runs = 9, setup = mask_input,
        fn = function()
          local m = mask_v:gt(0.5)
          qlua.where(m, mask_v, 0):free()
          m:free()
        end}
  case {name = "masked_select_64m", size = "64Mi f32 v:masked_select(v:gt(0.5))",
        kind = "max_seconds", target = 1.1 * 0.550e-3, bytes = N64M * (5 + 1 + 5 + 2),
        calls = 20, runs = 9, setup = mask_input,
        fn = function()
          local m = mask_v:gt(0.5)
          mask_v:masked_select(m):free()
          m:free()
        end}
  -- compare_64m: v:gt(0.5), 4 bytes read and 1 written per element, as a share of the copy
  -- bandwidth (qlua's copy_ of v into another 64Mi float32, the copy engine's memcpy, as a
  -- raw cudaMemcpyAsync: baseline.cu has no copy case). setup measures the copy and sets the
  -- target to 0.9x its GB/s; the listed target assumes 4 TB/s of copy.
  local compare_case = {name = "compare_64m", size = "64Mi f32 v:gt(0.5) -> bool, vs copy",
                        kind = "min_rate", target = 0.9 * 4000, bytes = N64M * 5, calls = 20,
                        runs = 9}
  compare_case.setup = function()
    mask_input()
    mask_copy = mask_copy or qlua.empty(N64M, {device = "gpu"})
    local copy = qlua.bench(function() mask_copy:copy_(mask_v) end, {calls = 20, runs = 9, warmup = 1})
    compare_case.target = 0.9 * (N64M * 8) / copy.median / 1e9
  end
  compare_case.fn = function() mask_v:gt(0.5):free() end
  case(compare_case)
  -- float32 -> bfloat16 of 64Mi (PyTorch's v.to(torch.bfloat16) on the H200:
  -- 0.109 ms; the target is 1.1x that), and a + b on 64Mi bfloat16 as a share of the copy
  -- bandwidth (measured in setup as compare_64m does; 6 bytes an element: two read, one
  -- written).
  local bf_a, bf_b
  case {name = "to_bf16_64m", size = "64Mi f32 :to('bfloat16')", kind = "max_seconds",
        target = 1.1 * 0.109e-3, bytes = N64M * 6, calls = 20, runs = 9, setup = mask_input,
        fn = function() mask_v:to("bfloat16"):free() end}
  local add_bf16_case = {name = "add_bf16_64m", size = "64Mi bfloat16 a + b, vs copy",
                         kind = "min_rate", target = 0.9 * 4000, bytes = N64M * 6, calls = 20,
                         runs = 9}
  add_bf16_case.setup = function()
    mask_input()
    mask_copy = mask_copy or qlua.empty(N64M, {device = "gpu"})
    bf_a = bf_a or mask_v:to("bfloat16")
    bf_b = bf_b or (mask_v * 0.5):to("bfloat16")
    local copy = qlua.bench(function() mask_copy:copy_(mask_v) end, {calls = 20, runs = 9, warmup = 1})
    add_bf16_case.target = 0.9 * (N64M * 8) / copy.median / 1e9
  end
  add_bf16_case.fn = function() (bf_a + bf_b):free() end
  case(add_bf16_case)
  -- sorting and selection, float32 from rand (PyTorch on the H200: torch.sort of
  -- 64Mi 3.03 ms, sort of each row of 8192x8192 5.06 ms, topk(5) of each row 0.951 ms,
  -- topk(100) of 64Mi 1.36 ms; the targets are 1.1x those). bytes: the input read once and
  -- the results written (values and int64 indices), the floor a perfect kernel pays. setup
  -- checks each result once: sorted order by differences of neighbours, the indices by
  -- gathering the input at them, topk against the first k of a descending sort.
  local sort_v, sort_x
  local function sort_inputs()
    sort_v = sort_v or qlua.rand(64 * MiB, {device = "gpu"})
    sort_x = sort_x or qlua.rand(8192, 8192, {device = "gpu"})
  end
  local function sort_check(name, src, dim, values, indices)
    local n = values:size(dim)
    local step = (values:narrow(dim, 2, n - 1) - values:narrow(dim, 1, n - 1)):min()
    if not (step >= 0) then error(name .. ": not sorted (a step of " .. step .. ")") end
    local off = (src:gather(dim, indices) - values):abs():max()
    if off ~= 0 then error(name .. ": the indices do not give the values") end
  end
  local function topk_check(name, src, k, dim)
    local v, i = src:topk(k, dim)
    local want = src:sort(dim, true):narrow(dim, 1, k)
    if (v - want):abs():max() ~= 0 then error(name .. ": values differ from the sort's") end
    if (src:gather(dim, i) - v):abs():max() ~= 0 then error(name .. ": wrong indices") end
  end
  case {name = "sort_64m", size = "64Mi f32 v:sort()", kind = "max_seconds",
        target = 1.1 * 3.03e-3, bytes = 64 * MiB * 16, calls = 10, runs = 9,
        setup = function()
          sort_inputs()
          local y, i = sort_v:sort()
          sort_check("sort_64m", sort_v, 1, y, i)
          y:free(); i:free()
        end,
        fn = function() local y, i = sort_v:sort(); y:free(); i:free() end}
  case {name = "sort_rows_8192", size = "8192x8192 f32 x:sort(2)", kind = "max_seconds",
        target = 1.1 * 5.06e-3, bytes = 8192 * 8192 * 16, calls = 10, runs = 9,
        setup = function()
          sort_inputs()
          local y, i = sort_x:sort(2)
          sort_check("sort_rows_8192", sort_x, 2, y, i)
          y:free(); i:free()
        end,
        fn = function() local y, i = sort_x:sort(2); y:free(); i:free() end}
  case {name = "topk5_rows_8192", size = "8192x8192 f32 x:topk(5, 2)", kind = "max_seconds",
        target = 1.1 * 0.951e-3, bytes = 8192 * 8192 * 4, calls = 20, runs = 9,
        setup = function() sort_inputs(); topk_check("topk5_rows_8192", sort_x, 5, 2) end,
        fn = function() local v, i = sort_x:topk(5, 2); v:free(); i:free() end}
  case {name = "topk100_64m", size = "64Mi f32 v:topk(100)", kind = "max_seconds",
        target = 1.1 * 1.36e-3, bytes = 64 * MiB * 4, calls = 20, runs = 9,
        setup = function() sort_inputs(); topk_check("topk100_64m", sort_v, 100, 1) end,
        fn = function() local v, i = sort_v:topk(100); v:free(); i:free() end}
  -- scans and softmax, float32 (PyTorch on the H200: torch.cumsum of 64Mi 0.225 ms,
  -- along the rows of 8192x8192 0.413 ms, softmax and log_softmax of 8192x8192 along dim 2
  -- 0.284 and 0.248 ms; the targets are 1.1x those). bytes: the input read once and the
  -- result written. setup checks each result once against float64 references made of
  -- other ops (sums of prefixes, and max / exp / sum) before the timing.
  local scan_v, scan_x
  local function scan_inputs()
    scan_v = scan_v or qlua.rand(64 * MiB, {device = "gpu"})
    scan_x = scan_x or qlua.rand(8192, 8192, {device = "gpu"})
  end
  local function scan_check(name, got, want)
    local err = (got:to("float64") - want):abs():max() / want:abs():max()
    if not (err < 1e-5) then error(string.format("%s: relative error %g", name, err)) end
  end
  case {name = "cumsum_64m", size = "64Mi f32 v:cumsum(1)", kind = "max_seconds",
        target = 1.1 * 0.225e-3, bytes = 64 * MiB * 8, calls = 20, runs = 9,
        setup = function()
          scan_inputs()
          local y = scan_v:cumsum(1)
          for _, k in ipairs({1, 1000, 12345678, 64 * MiB}) do
            local want = scan_v:narrow(1, 1, k):to("float64"):sum()
            local got = y:narrow(1, k, 1):item()
            if not (math.abs(got - want) <= 1e-5 * want) then
              error(string.format("cumsum_64m: element %d is %.9g, expected %.9g", k, got, want))
            end
          end
          y:free()
        end,
        fn = function() scan_v:cumsum(1):free() end}
  case {name = "cumsum_rows_8192", size = "8192x8192 f32 x:cumsum(2)", kind = "max_seconds",
        target = 1.1 * 0.413e-3, bytes = 8192 * 8192 * 8, calls = 20, runs = 9,
        setup = function()
          scan_inputs()
          local y = scan_x:cumsum(2)
          for _, k in ipairs({1, 2049, 8192}) do
            scan_check("cumsum_rows_8192", y:select(2, k),
                       scan_x:narrow(2, 1, k):to("float64"):sum(2))
          end
          y:free()
        end,
        fn = function() scan_x:cumsum(2):free() end}
  local function softmax_reference(log)
    local x64 = scan_x:to("float64")
    local shifted = x64 - (x64:max(2)):view(8192, 1)
    local sums = shifted:exp():sum(2):view(8192, 1)
    if log then return shifted - sums:log() end
    return shifted:exp() / sums
  end
  case {name = "softmax_8192", size = "8192x8192 f32 x:softmax(2)", kind = "max_seconds",
        target = 1.1 * 0.284e-3, bytes = 8192 * 8192 * 8, calls = 20, runs = 9,
        setup = function()
          scan_inputs()
          scan_check("softmax_8192", scan_x:softmax(2), softmax_reference(false))
        end,
        fn = function() scan_x:softmax(2):free() end}
  case {name = "log_softmax_8192", size = "8192x8192 f32 x:log_softmax(2)", kind = "max_seconds",
        target = 1.1 * 0.248e-3, bytes = 8192 * 8192 * 8, calls = 20, runs = 9,
        setup = function()
          scan_inputs()
          scan_check("log_softmax_8192", scan_x:log_softmax(2), softmax_reference(true))
        end,
        fn = function() scan_x:log_softmax(2):free() end}
  -- reductions along the rows of 8192x8192 float32 (PyTorch's x.var(dim=1) and
  -- x.sum(dim=1, keepdim=True) on the H200: 0.137 ms and 0.087 ms; the targets are 1.1x
  -- those). var is one pass (shifted sums per thread, merged by Chan's formula). setup checks
  -- each result once against a float64 two-pass computation before the timing.
  local red_x
  local function red_input()
    red_x = red_x or qlua.rand(8192, 8192, {device = "gpu"})
    return red_x
  end
  local function red_check(name, got, want)
    local err = (got:to("float64") - want):abs():max() / want:abs():max()
    if not (err < 1e-6) then error(string.format("%s: relative error %g", name, err)) end
  end
  case {name = "var_rows_8192", size = "8192x8192 f32 x:var(2)", kind = "max_seconds",
        target = 1.1 * 0.137e-3, bytes = 8192 * 8192 * 4, calls = 20, runs = 9,
        setup = function()
          local x64 = red_input():to("float64")
          local d = x64 - x64:mean(2, true)
          red_check("var_rows_8192", red_x:var(2), (d * d):sum(2) / 8191)
        end,
        fn = function() red_x:var(2):free() end}
  case {name = "sum_rows_keepdim_8192", size = "8192x8192 f32 x:sum(2, true)",
        kind = "max_seconds", target = 1.1 * 0.087e-3, bytes = 8192 * 8192 * 4, calls = 20,
        runs = 9,
        setup = function()
          local got = red_input():sum(2, true)
          assert(got:size(1) == 8192 and got:size(2) == 1, "sum_rows_keepdim_8192: shape")
          red_check("sum_rows_keepdim_8192", got, red_x:to("float64"):sum(2, true))
        end,
        fn = function() red_x:sum(2, true):free() end}
end

-- ---------------------------------------------------------------- user kernels

-- baseline.cu holds the same text (ADD16_SRC), for NVRTC's own compile time.
local ADD16 = [[
extern "C" __global__ void add16(float *y, const float *x, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] += x[i];
}
]]

-- compile_cold and compile_disk: child qlua processes sharing a fresh XDG_CACHE_HOME. One
-- child compiles COMPILE_VARIANTS sources (ADD16 under distinct first lines, so no cache
-- holds them) into the empty cache; then COMPILE_CHILDREN children each ask for the same
-- sources again, now on disk. Each child brings its GPU up before the clock starts, and
-- prints `variant,seconds` for each qlua.kernel call.
local COMPILE_VARIANTS, COMPILE_CHILDREN = 6, 5
local CHILD = [[
local source, count = %q, %d
qlua.zeros(1, {device = "gpu"}); qlua.sync()   -- the GPU's context, before any timing
for v = 1, count do
  local src = ("// qlua bench variant %%d\n"):format(v) .. source
  local t0 = qlua.clock()
  local k = qlua.kernel(src, "add16")
  local t = qlua.clock() - t0
  print(("%%d,%%.9g"):format(v, t))
end
]]

-- The interpreter running this script: the lowest index of arg (argv[0]).
local function interpreter()
  local i = 0
  while arg[i - 1] ~= nil do i = i - 1 end
  return arg[i]
end

-- Runs a child; returns its times by variant, or nil and why.
local function run_child(script, cache_dir)
  local cmd = ("env -u QLUA_KERNEL_CACHE XDG_CACHE_HOME=%s %s %s 2>&1"):format(
    shell_quote(cache_dir), shell_quote(interpreter()), shell_quote(script))
  local pipe = io.popen(cmd)
  if not pipe then return nil, "cannot start " .. cmd end
  local times, other = {}, {}
  for line in pipe:lines() do
    local v, secs = line:match("^(%d+),([%d%.eE+-]+)$")
    if v then times[tonumber(v)] = tonumber(secs) else other[#other + 1] = line end
  end
  local ok = pipe:close()
  if not ok or #times ~= COMPILE_VARIANTS then
    return nil, "child qlua failed: " .. (other[1] and table.concat(other, " | ", 1, math.min(#other, 4)) or "no output")
  end
  return times
end

local function stats_of(list)
  local t = {}
  for i, v in ipairs(list) do t[i] = v end
  table.sort(t)
  local n = #t
  local median = n % 2 == 1 and t[(n + 1) // 2] or (t[n // 2] + t[n // 2 + 1]) / 2
  return {median = median, min = t[1], max = t[n]}
end

-- Both compile cases come from one set of children, run on the first case that needs it.
local compile_result
local function compile_children()
  if compile_result then return compile_result end
  local r = {}
  compile_result = r
  local pipe = io.popen("mktemp -d 2>/dev/null")
  local dir = pipe and pipe:read("l")
  if pipe then pipe:close() end
  if not dir or dir == "" then r.err = "cannot make a temporary directory (mktemp -d)"; return r end
  local script = dir .. "/child.lua"
  local f = io.open(script, "w")
  if not f then r.err = "cannot write " .. script; return r end
  f:write(CHILD:format(ADD16, COMPILE_VARIANTS))
  f:close()
  local cache = dir .. "/cache"
  local cold, err = run_child(script, cache)
  if cold then
    r.cold_first = cold[1]                                  -- loads NVRTC, first compile
    -- NVRTC loaded: its compiles. One process's NVRTC time differs from the next one's by
    -- up to 30%, so the cold time is the median over COMPILE_CHILDREN fresh children (each
    -- with an empty cache of its own) of each one's median after its first compile, as
    -- baseline.cu measures NVRTC alone.
    local medians = {stats_of({table.unpack(cold, 2)}).median}
    for c = 2, COMPILE_CHILDREN do
      local more = run_child(script, dir .. "/cold" .. c)
      if more then medians[#medians + 1] = stats_of({table.unpack(more, 2)}).median end
    end
    r.cold = stats_of(medians)
    local firsts, later = {}, {}
    for c = 1, COMPILE_CHILDREN do
      local disk
      disk, err = run_child(script, cache)
      if not disk then break end
      firsts[c] = disk[1]
      for v = 2, #disk do later[#later + 1] = disk[v] end
    end
    if #firsts == COMPILE_CHILDREN then
      r.disk = stats_of(firsts)                             -- the first qlua.kernel of a process
      r.disk_later = stats_of(later)                        -- more entries read in that process
      err = nil
    end
  end
  r.err = err
  os.execute("rm -rf " .. shell_quote(dir))
  return r
end

do
  local k16, y16, x16
  case {name = "kernel_launch_16", size = "16 f32 qlua.kernel, 100k in a row", kind = "max_seconds",
        target = 5e-6, calls = 100000, runs = 5,
        setup = function()
          k16 = k16 or qlua.kernel(ADD16, "add16")
          y16 = y16 or qlua.zeros(16, {device = "gpu"}); x16 = x16 or qlua.rand(16, {device = "gpu"})
        end,
        fn = function() k16(1, 32, y16, x16, 16) end}
  local N64 = 64 * MiB
  local square_add, ex, ey, ez
  case {name = "elementwise_64m", size = "64Mi f32 elementwise z = x*x + y", kind = "ratio",
        target = 1 / 0.95, bytes = N64 * 12, calls = 20, runs = 9,
        setup = function()
          if square_add then return end
          square_add = qlua.elementwise("T x, T y", "T z", "z = x * x + y", "square_add")
          ex, ey = qlua.rand(N64, {device = "gpu"}), qlua.rand(N64, {device = "gpu"})
          ez = qlua.empty(N64, {device = "gpu"})
          square_add(ex, ey, ez)                              -- compiles the float32 variant
          local want = ex * ex + ey
          local diff = (ez - want):abs():max()
          want:free()
          assert(diff <= 1e-6, "elementwise_64m: qlua.elementwise differs from x*x + y by " .. diff)
        end,
        -- into a given z, as the raw kernel writes into its own buffer
        fn = function() square_add(ex, ey, ez) end}
  case {name = "compile_cold", size = "add16, empty disk cache (children)", kind = "ratio",
        target = 1.10, calls = 1, runs = COMPILE_CHILDREN,
        measure = function()
          local r = compile_children()
          if r.err then return nil, r.err end
          return r.cold
        end}
  case {name = "compile_disk", size = "add16, on disk, new process", kind = "max_seconds",
        target = 5e-3, calls = 1, runs = COMPILE_CHILDREN,
        measure = function()
          local r = compile_children()
          if r.err then return nil, r.err end
          return r.disk
        end}
  case {name = "compile_memory", size = "add16, in this process's cache", kind = "max_seconds",
        target = 20e-6, calls = 2000, runs = 9,
        setup = function() qlua.kernel(ADD16, "add16") end,
        fn = function() qlua.kernel(ADD16, "add16") end}
end

-- The CPU cases run twice: as written (the result freed inside the call, as
-- NumPy's reference counting frees it) and as "<name>_gc", the result left to the garbage
-- collector, the natural way to write Lua; both against the same NumPy line, with the
-- target 1.0. Where the Python has torch, numpy_baseline.py also times PyTorch's CPU
-- backend on all cores and on one ("torch:<name>", "torch1:<name>"), and the report lists
-- qlua against both (the target on many cores: 1.2x PyTorch on all of them).
local function cpu_pair(c, gc_fn)
  c.kind, c.target, c.numpy_name = "numpy", 1.0, c.name
  case(c)
  local g = {}
  for k, v in pairs(c) do g[k] = v end
  g.name, g.fn, g.size = c.name .. "_gc", gc_fn, c.size .. ", GC"
  case(g)
end

local csrc, cidx, cma, cmb
cpu_pair({name = "cpu_matmul_1024", size = "1024^3 f32 (cpu)",
      flops = 2 * 1024 ^ 3, calls = 5, runs = 9,
      setup = function() qlua.seed(3); cma = cma or qlua.rand(1024, 1024); cmb = cmb or qlua.rand(1024, 1024) end,
      fn = function() cma:matmul(cmb):free() end},
      function() local c = cma:matmul(cmb) end)
cpu_pair({name = "cpu_gather_1m", size = "1Mi idx from 16Mi f32 (cpu)",
      bytes = MiB * 16, calls = 20, runs = 9,
      setup = function()
        qlua.seed(4)
        csrc = csrc or qlua.rand(16 * MiB); cidx = cidx or qlua.randint(1, 16 * MiB, MiB, {dtype = "int64"})
      end,
      fn = function() csrc:gather(cidx):free() end},
      function() local g = csrc:gather(cidx) end)

-- Common CPU ops on 4096x4096 float32 (64 MiB), against the NumPy line in the size column
-- (numpy_baseline.py runs exactly that; [brackets]: the qlua call where it differs).
-- qlua dims are 1-based: sum(1) is NumPy's sum(0).
-- Each call frees its result before returning, as NumPy's reference counting frees its
-- result when the call's value is dropped, so both sides pay allocation, first touch of
-- fresh pages and release every call, and neither lets garbage pile up between batches.
-- bytes = bytes read + written (for the GB/s column). qlua's max(dim) also returns the
-- int64 indices, more work than NumPy's a.max(0); it is still the call a user makes for
-- the values, so that is what is compared.
local ca, cb, cv, crow
local function cpu_inputs()
  if ca then return end
  qlua.seed(5)
  ca, cb, cv = qlua.rand(4096, 4096), qlua.rand(4096, 4096), qlua.rand(4096)
  crow = qlua.randint(1, 4096, 4096, {dtype = "int64"})
end
local M64 = 64 * MiB
-- op() makes the call's result(s); the freed variant frees them in the call.
local function cpu_case(name, size, bytes, calls, op)
  cpu_pair({name = name, size = size, bytes = bytes, calls = calls, runs = 7, setup = cpu_inputs,
            fn = function()
              local r1, r2 = op()
              if type(r1) == "userdata" then r1:free() end
              if type(r2) == "userdata" then r2:free() end
            end},
           function() local r1, r2 = op() end)
end
cpu_case("cpu_sum_all", "4096^2 f32 a.sum()", M64, 10, function() return ca:sum() end)
cpu_case("cpu_sum_dim1", "4096^2 f32 a.sum(0) [sum(1)]", M64, 10, function() return ca:sum(1) end)
cpu_case("cpu_sum_dim2", "4096^2 f32 a.sum(1) [sum(2)]", M64, 10, function() return ca:sum(2) end)
cpu_case("cpu_max_dim1", "4096^2 f32 a.max(0) [max(1)]", M64, 10, function() return ca:max(1) end)
cpu_case("cpu_max_dim2", "4096^2 f32 a.max(1) [max(2)]", M64, 10, function() return ca:max(2) end)
cpu_case("cpu_argmax_dim2", "4096^2 f32 a.argmax(1) [argmax(2)]", M64, 10,
  function() return ca:argmax(2) end)
cpu_case("cpu_add", "4096^2 f32 a + b", 3 * M64, 3, function() return ca + cb end)
cpu_case("cpu_mul_bcast", "4096^2 f32 a * v (v: 4096)", 2 * M64, 3, function() return ca * cv end)
cpu_case("cpu_exp", "4096^2 f32 np.exp(a)", 2 * M64, 2, function() return ca:exp() end)
-- a 4096x4096 view is never contiguous after t(), so contiguous() always copies here
cpu_case("cpu_transpose_copy", "4096^2 f32 ascontiguousarray(a.T)", 2 * M64, 1,
  function() return ca:t():contiguous() end)
cpu_case("cpu_index_select", "4096^2 f32 a.take(4096 i64, 0)", 2 * M64, 3,
  function() return ca:index_select(1, crow) end)
cpu_case("cpu_to_f64", "4096^2 f32 a.astype(float64)", 3 * M64, 3, function() return ca:to("float64") end)
cpu_case("cpu_clone", "4096^2 f32 a.copy()", 2 * M64, 3, function() return ca:clone() end)

-- ---------------------------------------------------------------- run

local function target_text(c)
  if c.kind == "ratio" or c.kind == "numpy" then return ("ratio <= %.2f"):format(c.target)
  elseif c.kind == "max_seconds" and c.target >= 1e-3 then return ("<= %.3g ms"):format(c.target * 1e3)
  elseif c.kind == "max_seconds" then return ("<= %.3g us"):format(c.target * 1e6)
  else return (">= %g GB/s"):format(c.target) end
end

if args.list then
  local line = "%-20s %-5s %-34s %s"
  print(line:format("case", "on", "size", "target"))
  for _, c in ipairs(cases) do
    local on = c.kind == "numpy" and "cpu" or "gpu"
    print(line:format(c.name, on, c.size, target_text(c) .. (c.kind == "numpy" and " vs NumPy" or "")))
  end
  os.exit(0)
end

local gpu_names, known = {}, {}
for _, c in ipairs(cases) do
  known[c.name] = true
  if c.kind == "numpy" and c.numpy_name == c.name then
    -- name:calls:runs, so numpy_baseline.py times each case exactly as qlua.bench does
    c.numpy_arg = ("%s:%d:%d"):format(c.name, c.calls, c.runs)
  else
    gpu_names[#gpu_names + 1] = c.name
  end
end
for name in pairs(args.only) do
  if not known[name] then
    io.stderr:write("bench: no case named " .. name .. " (--list shows them)\n"); os.exit(2)
  end
end

local baseline = {}
if not has_gpu then
  print("bench: no GPU here (qlua.gpu_count() == 0): running the CPU cases only")
elseif selected_names(gpu_names) ~= "" then
  local f = io.open(args.baseline, "r")
  if f then
    f:close()
    baseline = read_baseline(shell_quote(args.baseline) .. " " .. selected_names(gpu_names))
  else
    print("bench: no baseline program at " .. args.baseline .. " (built by make bench when nvcc is there)")
  end
end
-- The Python for the NumPy baseline: --python, else the first candidate that imports
-- numpy (the first python3 on PATH is often a bare one: a virtualenv, pyenv's shim). With
-- none, the CPU cases have no baseline, and that is said where it cannot be missed: a
-- banner before the table and after it, and the rows' status.
local PYTHONS = {"python3", "/usr/bin/python3", "python"}
local function imports_numpy(py)
  local ok = os.execute(py .. " -c 'import numpy' >/dev/null 2>&1")
  return ok == true
end
local no_numpy  -- the banner's text when the CPU cases have no NumPy to compare with
local function loud(text)
  local bar = ("!"):rep(78)
  print("bench: " .. bar)
  for line in text:gmatch("[^\n]+") do print("bench: !!! " .. line) end
  print("bench: " .. bar)
end
do
  local script = arg[0]:gsub("[^/]*$", "") .. "numpy_baseline.py"
  local names = {}
  for _, c in ipairs(cases) do
    if c.numpy_arg and (wanted(c.name) or wanted(c.name .. "_gc")) then names[#names + 1] = c.numpy_arg end
  end
  names = table.concat(names, " ")
  if names ~= "" then
    local py = args.python
    if py then
      if not imports_numpy(py) then py = nil end
    else
      for _, candidate in ipairs(PYTHONS) do
        if imports_numpy(candidate) then py = candidate; break end
      end
    end
    if py then
      local numpy = read_baseline(py .. " " .. shell_quote(script) .. " " .. names)
      for k, v in pairs(numpy) do baseline[k] = v end
      if next(numpy) == nil then
        no_numpy = ("NO NUMPY BASELINE: %s imports numpy, but numpy_baseline.py printed no times\n"
          .. "(run it by hand: %s %s)"):format(py, py, script)
      else
        print("bench: NumPy baseline run by " .. py)
      end
    else
      no_numpy = (args.python and ("NO NUMPY: --python %s does not import numpy"):format(args.python)
        or ("NO NUMPY: none of %s imports numpy"):format(table.concat(PYTHONS, ", ")))
        .. ", so the CPU cases have NO BASELINE\n(install NumPy, or pass --python PATH)"
    end
    if no_numpy then loud(no_numpy) end
  end
end

if has_gpu then gpu_setup() end

local rows = {}
for _, c in ipairs(cases) do
  if wanted(c.name) and (has_gpu or c.kind == "numpy") and
     not (c.kind ~= "numpy" and c.numpy_name) then
    if c.setup then c.setup() end
    if c.tf32 then qlua.set_tf32(true) end
    local stats, why
    if c.measure then stats, why = c.measure(c)    -- cases timed outside this process
    else stats = qlua.bench(c.fn, {calls = c.calls, runs = c.runs, warmup = 1}) end
    if c.tf32 then qlua.set_tf32(false) end
    if not stats then
      rows[#rows + 1] = {case = c, target = target_text(c), status = "failed", why = why}
      goto next_case
    end
    local t, base = stats.median, baseline[c.numpy_name or c.name]
    local row = {case = c, time = t, spread = (stats.max - stats.min) / t, base = base}
    row.ratio = base and t / base or nil
    if c.flops then
      row.rate = ("%.1f TFLOP/s"):format(c.flops / t / 1e12)
      if base then row.base_rate = ("%.1f TFLOP/s"):format(c.flops / base / 1e12) end
    elseif c.bytes then
      row.rate = ("%.1f GB/s"):format(c.bytes / t / 1e9)
      if base then row.base_rate = ("%.1f GB/s"):format(c.bytes / base / 1e9) end
    end
    local ok
    row.target = target_text(c)
    if c.kind == "ratio" or c.kind == "numpy" then
      ok = row.ratio and row.ratio <= c.target
    elseif c.kind == "max_seconds" then
      ok = t <= c.target
    elseif c.kind == "min_rate" then
      ok = c.bytes / t / 1e9 >= c.target
    end
    row.status = ok and "met" or (ok == nil and "n/a" or "MISSED")
    if (c.kind == "ratio" or c.kind == "numpy") and not base then
      row.status = (c.kind == "numpy" and no_numpy) and "NO BASELINE (no NumPy)" or "no baseline"
    end
    rows[#rows + 1] = row
    collectgarbage()
  end
  ::next_case::
end

-- ---------------------------------------------------------------- report

local function us(s) return s and ("%.2f"):format(s * 1e6) or "-" end
local function ms(s) return s and ("%.2f ms"):format(s * 1e3) or "-" end
local header = ("%-20s %-34s %12s %12s %7s %16s %16s %8s %16s %s")
print(header:format("case", "size", "qlua us", "base us", "ratio", "rate", "base rate", "spread",
  "target", "status"))
local by_name = {}
for _, r in ipairs(rows) do
  by_name[r.case.name] = r
  print(header:format(r.case.name, r.case.size, us(r.time), us(r.base),
    r.ratio and ("%.3f"):format(r.ratio) or "-", r.rate or "-", r.base_rate or "-",
    r.spread and ("%.1f%%"):format(r.spread * 100) or "-", r.target, r.status))
end
print("base = raw CUDA/cuBLAS (bench/baseline.cu) on the GPU, NumPy on the CPU; ratio = qlua / base")
if no_numpy then loud(no_numpy) end
-- the CPU cases against PyTorch's CPU backend, where numpy_baseline.py found torch
do
  local any = false
  for _, r in ipairs(rows) do
    local n = r.case.numpy_name
    if n and r.time and baseline["torch:" .. n] then
      if not any then
        print(("%-22s %12s %14s %8s %14s %8s  %s"):format("vs PyTorch CPU", "qlua us",
          "torch all us", "ratio", "torch 1 us", "ratio", "target (all cores)"))
        any = true
      end
      local all, one = baseline["torch:" .. n], baseline["torch1:" .. n]
      local ratio = r.time / all
      print(("%-22s %12s %14s %8.3f %14s %8s  <= 1.20 %s"):format(r.case.name, us(r.time), us(all),
        ratio, us(one), one and ("%.3f"):format(r.time / one) or "-", ratio <= 1.2 and "met" or "MISSED"))
    end
  end
  if not any then print("bench: no PyTorch in this Python: the CPU cases are against NumPy only") end
end
for _, r in ipairs(rows) do
  if r.why then print(("%s: failed: %s"):format(r.case.name, r.why)) end
end
-- user kernels: what the rows above leave out
do
  local k, add = by_name.kernel_launch_16, by_name.add_16
  if k and k.time then
    print(("kernel_launch_16: %s us per qlua.kernel launch; raw CUDA <<<>>> %s us%s"):format(
      us(k.time), us(k.base), add and add.time and (", built-in a + b (add_16) " .. us(add.time) .. " us") or ""))
  end
  local r = compile_result
  if r and not r.err then
    print(("compile: cold %s per qlua.kernel (median of %d processes; NVRTC alone in baseline.cu: %s), "
      .. "the first in a process %s (it loads NVRTC)"):format(ms(r.cold.median), COMPILE_CHILDREN,
      ms(baseline.compile_cold), ms(r.cold_first)))
    print(("compile: from disk %s for a process's first qlua.kernel (median of %d processes), "
      .. "%s for later ones in it"):format(ms(r.disk.median), COMPILE_CHILDREN, ms(r.disk_later.median)))
  end
  local m = by_name.compile_memory
  if m and m.time then print(("compile: in-memory hit %s us"):format(us(m.time))) end
end

local csv = io.open(args.csv, "w")
if csv then
  csv:write("case,size,qlua_seconds,baseline_seconds,ratio,rate,spread,target,status,base_rate\n")
  for _, r in ipairs(rows) do
    csv:write(("%s,%q,%s,%s,%s,%q,%s,%q,%s,%q\n"):format(r.case.name, r.case.size,
      r.time and ("%.9g"):format(r.time) or "",
      r.base and ("%.9g"):format(r.base) or "", r.ratio and ("%.4f"):format(r.ratio) or "",
      r.rate or "", r.spread and ("%.4f"):format(r.spread) or "", r.target, r.status,
      r.base_rate or ""))
  end
  csv:close()
  print("bench: table written to " .. args.csv)
end
