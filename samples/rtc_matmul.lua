-- rtc_matmul.lua — a CUDA kernel written in the script: the classic naive matrix product
-- (one thread per output element, a loop over k), compiled at run time by qlua.kernel
-- (NVRTC), checked against qlua.matmul (cuBLAS) and timed next to it.
--   qlua samples/rtc_matmul.lua [n]          (n x n float32, default 1024)
-- Needs a GPU; without one it says so and exits.

if qlua.gpu_count() == 0 then
  print("rtc_matmul: needs a GPU (qlua.gpu_count() == 0 here); nothing to run")
  return
end

local n = math.tointeger(tonumber(arg[1]) or 1024)
assert(n and n > 0, "usage: qlua samples/rtc_matmul.lua [n]")

-- The kernel's source is a string; its parameter list tells qlua how to pass each argument
-- (a float32 GPU tensor for each float pointer, a range-checked int for n).
local matmul_naive = qlua.kernel([[
extern "C" __global__ void matmul_naive(const float *a, const float *b, float *c, int n) {
  int row = blockIdx.y * blockDim.y + threadIdx.y;
  int col = blockIdx.x * blockDim.x + threadIdx.x;
  if (row < n && col < n) {
    float sum = 0.0f;
    for (int k = 0; k < n; k++) sum += a[row * n + k] * b[k * n + col];
    c[row * n + col] = sum;
  }
}
]], "matmul_naive")
print(("kernel %s: %d registers, up to %d threads a block"):format(matmul_naive:signature(),
  matmul_naive:attributes().registers, matmul_naive:attributes().max_threads))

qlua.seed(1)
local a = qlua.randn(n, n, {device = "gpu"})
local b = qlua.randn(n, n, {device = "gpu"})
local c = qlua.empty(n, n, {device = "gpu"})
local block = 16
local grid = {(n + block - 1) // block, (n + block - 1) // block}

local function naive() matmul_naive(grid, {block, block}, a, b, c, n) end
local function cublas() return qlua.matmul(a, b) end

-- Checked against cuBLAS: both sum n float32 products, in different orders.
naive()
local want = cublas()
local err = (c - want):abs():max() / want:abs():max()
assert(err < 1e-4, ("the kernel differs from qlua.matmul: max relative error %g"):format(err))
print(("%dx%d float32: the kernel matches qlua.matmul (max error %.2g of the largest entry)"):format(n, n, err))

-- Each timed the same way: 10 calls back to back, one sync, the median of 7 batches.
local t_naive = qlua.bench(naive, {calls = 10, runs = 7}).median
local t_blas = qlua.bench(cublas, {calls = 10, runs = 7}).median
local flops = 2 * n ^ 3
print(("naive kernel: %8.3f ms  (%7.1f GFLOP/s)"):format(t_naive * 1e3, flops / t_naive / 1e9))
print(("qlua.matmul:  %8.3f ms  (%7.1f GFLOP/s, cuBLAS)"):format(t_blas * 1e3, flops / t_blas / 1e9))
print(("the naive kernel takes %.1fx cuBLAS's time"):format(t_naive / t_blas))
