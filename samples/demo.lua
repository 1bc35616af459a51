-- demo.lua — a first tour of qlua: tensors, arithmetic, views, indexing, matmul,
-- on the GPU when there is one and on the CPU otherwise.
--   qlua samples/demo.lua

local device = qlua.gpu_count() > 0 and "gpu" or "cpu"
print(("qlua %s — running on %s%s"):format(qlua.version, device,
  device == "gpu" and (" (" .. qlua.device_name(0) .. ")") or ""))

-- Creating: from tables (dtype inferred), or filled, or random.
local a = qlua.tensor({{1, 2, 3}, {4, 5, 6}})       -- int64, 2x3
local x = qlua.tensor({{0.5, -1.5, 2.0}, {1.0, 0.25, -3.0}}):to(device)
print(a)
print(x)

-- Arithmetic broadcasts, mixes tensors and numbers, and keeps NumPy's dtype rules.
local y = (x * 2 + 1):relu()
print("relu(2x+1) =", y)
print("sum =", y:sum(), "row max =", y:max(2))

-- Views share storage: writing through a narrowed view changes the original.
local row = x:narrow(1, 2, 1)
row:fill_(7)
print("after filling row 2 through a view:", x)

-- Indexing ops take 1-based indices, as Lua does.
local src = qlua.range(10, 100, 10):to(device)      -- 10, 20, ..., 100
local idx = qlua.tensor({3, 1, 10}, {dtype = "int32"}):to(device)
print("gather", src:gather(idx))                    -- 30, 10, 100

-- Matrix products go through BLAS on the CPU and cuBLAS on the GPU.
qlua.seed(42)
local m = qlua.randn(128, 64, {device = device})
local n = qlua.randn(64, 32, {device = device})
local p = m:matmul(n)
print(("matmul %s @ %s -> %s on %s"):format(
  table.concat(m:shape(), "x"), table.concat(n:shape(), "x"), table.concat(p:shape(), "x"), p:device()))

-- Memory comes back when a tensor is freed, closed, or collected.
do
  local big <close> = qlua.zeros(1024, 1024, {device = device})
  print("a 4 MiB tensor lives in this block:", big:numel() * 4, "bytes")
end
if device == "gpu" then
  local mem = qlua.memory()
  print(("gpu memory: %d bytes allocated, %d reserved"):format(mem.allocated, mem.reserved))
end
print("demo done")
