/*
** scan_softmax.cu — the softmax slot on the GPU: softmax and log_softmax along a dim, max-
** subtracted. The CPU twin is runtime/cpu/cpu_scan.c (cpu_softmax: the same formula in
** double); the core (runtime/core/ops_scan.c) hands contiguous float32 / float64 views, so
** a view is outer x n x inner in row-major order.
**
** Hand-written, because no library has a fused row softmax and a composition of a max
** reduction, an exp pass, a sum reduction and a divide reads the input three times and
** writes twice (the bench cases softmax_8192 and log_softmax_8192 are the measure). Three
** kernels:
**
**   - rows up to SM_ROW_MAX elements (inner == 1): the row held in registers, 16 elements a
**     thread loaded as 16-byte vectors when the rows are aligned, so the input is read
**     once: the max (NaN wins) by warp shuffles and shared memory, the sum of exp(x - max),
**     then the results written. A warp per row up to 512 elements (four rows per block),
**     else a block of 128..1024 threads per row.
**   - longer rows: a block per row, one pass of the online (max, sum) pairs (the sum rescaled
**     whenever the max grows), merged across the block, then a second pass that writes.
**   - along another dim (inner > 1): a thread per (outer, inner) column, the same two
**     passes; neighbouring threads read neighbouring columns, so loads coalesce.
**
** float32 computes in float32 (expf is within 2 ulp), float64 in double; log_softmax is
** (x - max) - log(sum) in every kernel, so rows far from 0 (1e4 in float32) keep the
** precision of their differences. The special values
** follow the two-pass formula in every kernel: a NaN in a slice, or a +inf (inf - inf), or
** a slice of only -inf makes the whole slice NaN, as PyTorch's.
*/
#include <math.h>
#include <stdint.h>

#include <cmath>

#include "dispatch.cuh"
#include "kernels.h"

#define SM_ITEMS 16                /* elements a thread holds in the register kernel */
#define SM_ROW_MAX (1024 * SM_ITEMS)
#define SM_LONG_THREADS 1024
#define SM_COLUMN_THREADS 256

/* The max with NaN winning: once either is NaN the result is. */
template <typename A>
__device__ __forceinline__ A sm_max(A a, A b) {
  if (a != a) return a;
  return (b > a || b != b) ? b : a;
}

struct sm_max_op {
  template <typename A> __device__ A operator()(A a, A b) const { return sm_max(a, b); }
};
struct sm_sum_op {
  template <typename A> __device__ A operator()(A a, A b) const { return a + b; }
};

/* Reduces x over the TPR threads of a row (TPR a multiple of 32, or 32 rows of a warp):
** shuffles in the warp, then across warps through shared (one slot per warp). Every thread
** gets the result. With TPR > 32, callers alternate two shared arrays so that no slot is
** overwritten before every thread has read it (see softmax_rows_registers). */
template <int TPR, typename A, typename F>
__device__ __forceinline__ A sm_reduce(A x, F f, A *shared) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) x = f(x, __shfl_xor_sync(0xffffffffu, x, o));
  if constexpr (TPR > 32) {
    if ((threadIdx.x & 31) == 0) shared[threadIdx.x >> 5] = x;
    __syncthreads();
    x = shared[0];
#pragma unroll
    for (int k = 1; k < TPR / 32; k++) x = f(x, shared[k]);
  }
  return x;
}

/* VEC elements of T moved as one access. */
template <typename T, int VEC>
struct alignas(sizeof(T) * VEC) sm_vec {
  T v[VEC];
};

/* ------------------------------------------------------------------ rows in registers */

/* TPR threads per row (32: a warp per row, 4 rows a block); VEC elements per load, VEC
** dividing n; each thread holds SM_ITEMS elements: vectors lane, lane + TPR, ... */
template <typename T, int TPR, int VEC, bool LOG>
__global__ void __launch_bounds__(TPR >= 128 ? TPR : 128)
softmax_rows_registers(const T *src, T *dst, int64_t rows, int64_t n) {
  typedef T A;  /* float32 in float, float64 in double */
  constexpr int BLOCK = TPR >= 128 ? TPR : 128, ROWS = BLOCK / TPR, NV = SM_ITEMS / VEC;
  typedef sm_vec<T, VEC> V;
  __shared__ A red_max[32], red_sum[32];
  const int lane = threadIdx.x % TPR, sub = threadIdx.x / TPR;
  const int64_t nvec = n / VEC;
  for (int64_t r = (int64_t)blockIdx.x * ROWS + sub; r < rows; r += (int64_t)gridDim.x * ROWS) {
    const V *x = (const V *)(src + r * n);
    V *y = (V *)(dst + r * n);
    A v[NV][VEC];
    A m = -INFINITY;
#pragma unroll
    for (int j = 0; j < NV; j++) {
      int64_t q = lane + (int64_t)j * TPR;
      if (q < nvec) {
        V in = x[q];
#pragma unroll
        for (int e = 0; e < VEC; e++) v[j][e] = (A)in.v[e], m = sm_max(m, v[j][e]);
      }
    }
    m = sm_reduce<TPR>(m, sm_max_op(), red_max);
    A s = 0;
#pragma unroll
    for (int j = 0; j < NV; j++) {
      if (lane + (int64_t)j * TPR < nvec) {
#pragma unroll
        for (int e = 0; e < VEC; e++) {
          A d = v[j][e] - m;  /* rounded at d's magnitude, exact near m */
          A t = exp(d);
          s += t;
          v[j][e] = LOG ? d : t;
        }
      }
    }
    s = sm_reduce<TPR>(s, sm_sum_op(), red_sum);
    /* (x - m) - log(s), never x - (m + log(s)): m + log(s) rounds at m's magnitude (half
    ** an ulp of 1e4 in float32 is 5e-4), while x - m is exact and log(s) is small */
    A log_s = LOG ? log(s) : (A)0;
#pragma unroll
    for (int j = 0; j < NV; j++) {
      int64_t q = lane + (int64_t)j * TPR;
      if (q < nvec) {
        V out;
#pragma unroll
        for (int e = 0; e < VEC; e++) out.v[e] = (T)(LOG ? v[j][e] - log_s : v[j][e] / s);
        y[q] = out;
      }
    }
  }
}

/* ------------------------------------------------------------------ online (max, sum) */

/* The running max m and sum s of exp(x - m), rescaled when m grows, with the special values
** of the two-pass formula: NaN poisons both, exp(x - x) is NaN for x = +inf, and a -inf
** adds nothing (exp(-inf - m) is 0 for any larger m; when every value is -inf the result is
** NaN either way). */
template <typename A>
__device__ __forceinline__ void sm_update(A &m, A &s, A x) {
  if (x != x) {
    m = x, s = x;
  } else if (m != m) {
  } else if (x > m) {
    s = s * exp(m - x) + exp(x - x);
    m = x;
  } else if (x != -INFINITY) {
    s += exp(x - m);
  }
}

template <typename A>
__device__ __forceinline__ void sm_merge(A &m, A &s, A m2, A s2) {
  if (m != m || m2 != m2) {
    m = m != m ? m : m2;
    s = m;
    return;
  }
  A top = m > m2 ? m : m2;
  if (top == -INFINITY) {
    s += s2;
    return;
  }
  A t1 = m == -INFINITY ? (A)0 : s * exp(m - top);
  A t2 = m2 == -INFINITY ? (A)0 : s2 * exp(m2 - top);
  m = top;
  s = t1 + t2;
}

/* One output of the two-pass kernels; (x - m) first, as in the register kernel. */
template <typename T, bool LOG>
__device__ __forceinline__ T sm_result(T x, T m, T s, T log_s) {
  return LOG ? (x - m) - log_s : exp(x - m) / s;
}

/* A block per row for rows longer than the registers hold: the input is read twice. Each
** row is walked in 16-byte vectors from its first aligned element (rows of odd length, a
** language model's 50257 classes, start anywhere), the few elements before and after one
** by one; the writes are vectors too when the result's rows are aligned as the input's.
** One element a load ran a 50257-wide float32 row at 2.2 TB/s (bench/kprof.c). */
template <typename T>
struct __align__(16) sm_vec16 {
  T v[16 / sizeof(T)];
};

template <typename T, bool LOG>
__global__ void __launch_bounds__(SM_LONG_THREADS)
softmax_rows_long(const T *src, T *dst, int64_t rows, int64_t n) {
  constexpr int V = 16 / sizeof(T);
  __shared__ T red_m[32], red_s[32];
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const T *x = src + r * n;
    T *y = dst + r * n;
    int64_t head = (int64_t)(((16 - ((uintptr_t)x & 15)) & 15) / sizeof(T));
    if (head > n) head = n;
    const int64_t nv = (n - head) / V, body_end = head + nv * V;
    const sm_vec16<T> *xv = (const sm_vec16<T> *)(x + head);
    T m = -INFINITY, s = 0;
    for (int64_t k = threadIdx.x; k < head; k += SM_LONG_THREADS) sm_update(m, s, x[k]);
    for (int64_t j = threadIdx.x; j < nv; j += SM_LONG_THREADS) {
      sm_vec16<T> a = xv[j];
#pragma unroll
      for (int e = 0; e < V; e++) sm_update(m, s, a.v[e]);
    }
    for (int64_t k = body_end + threadIdx.x; k < n; k += SM_LONG_THREADS) sm_update(m, s, x[k]);
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
      T m2 = __shfl_xor_sync(0xffffffffu, m, o), s2 = __shfl_xor_sync(0xffffffffu, s, o);
      sm_merge(m, s, m2, s2);
    }
    if ((threadIdx.x & 31) == 0) red_m[threadIdx.x >> 5] = m, red_s[threadIdx.x >> 5] = s;
    __syncthreads();
    m = red_m[0], s = red_s[0];
    for (int w = 1; w < SM_LONG_THREADS / 32; w++) sm_merge(m, s, red_m[w], red_s[w]);
    __syncthreads();  /* every thread has read the slots before the next row writes them */
    T log_s = log(s);
    for (int64_t k = threadIdx.x; k < head; k += SM_LONG_THREADS) y[k] = sm_result<T, LOG>(x[k], m, s, log_s);
    if ((((uintptr_t)x ^ (uintptr_t)y) & 15) == 0) {
      sm_vec16<T> *yv = (sm_vec16<T> *)(y + head);
      for (int64_t j = threadIdx.x; j < nv; j += SM_LONG_THREADS) {
        sm_vec16<T> a = xv[j];
#pragma unroll
        for (int e = 0; e < V; e++) a.v[e] = sm_result<T, LOG>(a.v[e], m, s, log_s);
        yv[j] = a;
      }
    } else {
      for (int64_t k = head + threadIdx.x; k < body_end; k += SM_LONG_THREADS)
        y[k] = sm_result<T, LOG>(x[k], m, s, log_s);
    }
    for (int64_t k = body_end + threadIdx.x; k < n; k += SM_LONG_THREADS)
      y[k] = sm_result<T, LOG>(x[k], m, s, log_s);
  }
}

/* A thread per column (o, i) of outer x n x inner, inner > 1. */
template <typename T, bool LOG>
__global__ void softmax_columns(const T *src, T *dst, int64_t outer, int64_t n, int64_t inner) {
  int64_t count = outer * inner;
  for (int64_t c = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; c < count;
       c += (int64_t)gridDim.x * blockDim.x) {
    int64_t o = c / inner, i = c - o * inner;
    const T *x = src + o * n * inner + i;
    T *y = dst + o * n * inner + i;
    T m = -INFINITY, s = 0;
    for (int64_t k = 0; k < n; k++) sm_update(m, s, x[k * inner]);
    T log_s = log(s);
    for (int64_t k = 0; k < n; k++) y[k * inner] = sm_result<T, LOG>(x[k * inner], m, s, log_s);
  }
}

/* ------------------------------------------------------------------ launch */

template <typename T, int TPR, int VEC, bool LOG>
static void sm_launch_registers(cudaStream_t stream, const T *src, T *dst, int64_t rows,
                                int64_t n) {
  constexpr int BLOCK = TPR >= 128 ? TPR : 128, ROWS = BLOCK / TPR;
  int64_t blocks = (rows + ROWS - 1) / ROWS;
  if (blocks > ((int64_t)1 << 30)) blocks = (int64_t)1 << 30;
  softmax_rows_registers<T, TPR, VEC, LOG><<<(unsigned)blocks, BLOCK, 0, stream>>>(src, dst,
                                                                                   rows, n);
}

/* The smallest row width (threads per row) whose registers hold n elements. */
template <typename T, int VEC, bool LOG>
static void sm_launch_width(cudaStream_t stream, const T *src, T *dst, int64_t rows,
                            int64_t n) {
  if (n <= 32 * SM_ITEMS) sm_launch_registers<T, 32, VEC, LOG>(stream, src, dst, rows, n);
  else if (n <= 128 * SM_ITEMS) sm_launch_registers<T, 128, VEC, LOG>(stream, src, dst, rows, n);
  else if (n <= 256 * SM_ITEMS) sm_launch_registers<T, 256, VEC, LOG>(stream, src, dst, rows, n);
  else if (n <= 512 * SM_ITEMS) sm_launch_registers<T, 512, VEC, LOG>(stream, src, dst, rows, n);
  else sm_launch_registers<T, 1024, VEC, LOG>(stream, src, dst, rows, n);
}

template <typename T, bool LOG>
static void sm_launch(qt_device *dev, const T *src, T *dst, int64_t outer, int64_t n,
                      int64_t inner) {
  cudaStream_t stream = qt_cuda_context(dev)->stream;
  if (inner > 1) {
    unsigned blocks = qt_cuda_blocks(dev, outer * inner, SM_COLUMN_THREADS);
    softmax_columns<T, LOG><<<blocks, SM_COLUMN_THREADS, 0, stream>>>(src, dst, outer, n, inner);
  } else if (n > SM_ROW_MAX) {
    unsigned blocks = outer < ((int64_t)1 << 30) ? (unsigned)outer : 1u << 30;
    softmax_rows_long<T, LOG><<<blocks, SM_LONG_THREADS, 0, stream>>>(src, dst, outer, n);
  } else {
    /* 16-byte vectors when every row starts 16-byte aligned */
    constexpr int VEC = 16 / sizeof(T);
    bool vector = n % VEC == 0 && ((uintptr_t)src & 15) == 0 && ((uintptr_t)dst & 15) == 0;
    if (vector) sm_launch_width<T, VEC, LOG>(stream, src, dst, outer, n);
    else sm_launch_width<T, 1, LOG>(stream, src, dst, outer, n);
  }
}

extern "C" int qt_cuda_softmax(qt_device *dev, bool log, const qt_view *dst, const qt_view *src,
                               int dim, qt_err *err) {
  const char *name = log ? "log_softmax" : "softmax";
  if ((unsigned)src->dtype >= (unsigned)QT_NDTYPES || !qt_is_float(src->dtype) ||
      dst->dtype != src->dtype || (dim != 0 && (dim < 0 || dim >= src->ndim)))
    return qt_errorf(err, "%s: unsupported operands (a float dtype, dim %d)", name, dim + 1);
  if (qt_cuda_enter(dev, name, err) != 0) return -1;
  if (src->numel == 0) return 0;
  int64_t outer = 1, n = 1, inner = 1;
  for (int k = 0; k < src->ndim; k++) {
    if (k < dim) outer *= src->size[k];
    else if (k == dim) n = src->size[k];
    else inner *= src->size[k];
  }
  if (src->dtype == QT_F32) {
    if (log) sm_launch<float, true>(dev, (const float *)src->data, (float *)dst->data, outer, n, inner);
    else sm_launch<float, false>(dev, (const float *)src->data, (float *)dst->data, outer, n, inner);
  } else {
    if (log) sm_launch<double, true>(dev, (const double *)src->data, (double *)dst->data, outer, n, inner);
    else sm_launch<double, false>(dev, (const double *)src->data, (double *)dst->data, outer, n, inner);
  }
  return qt_cuda_check_launch(dev, name, err);
}
