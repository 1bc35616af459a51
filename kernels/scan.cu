/*
** scan.cu — the scan slot on the GPU: cumsum, cumprod, cummax, cummin, logcumsumexp along a
** dim. The CPU twin is runtime/cpu/cpu_scan.c; the core (runtime/core/ops_scan.c) has cast
** the source to the result's dtype and made it contiguous, so a view here is outer x n x
** inner in row-major order, and there are outer * inner independent scans of length n.
**
** Each op is a small functor (scan_sum, scan_prod, scan_logaddexp, scan_extreme) with a
** value type, load (element -> value), an associative combine and store; every path below
** is written once over it:
**
**   - one scan (outer * inner == 1): CUB's DeviceScan (InclusiveSum on raw pointers for
**     cumsum; InclusiveScan with the functor otherwise). cumsum_64m in bench.lua.
**   - many rows (inner == 1, n >= SCAN_ROW_MIN, at least one row per SM): a block per row,
**     cub::BlockLoad / BlockScan / BlockStore over tiles of SCAN_THREADS x SCAN_ITEMS with
**     the running prefix carried from tile to tile. This is the hand-written part: CUB's
**     segmented scan (InclusiveScanByKey) pays for keys it does not need here and PyTorch
**     itself does a block per row (bench case cumsum_rows_8192).
**   - many columns (inner > 1 or short rows, at least SCAN_COLUMNS_MIN scans): a thread per
**     scan walks its n elements in order; neighbouring threads read neighbouring columns, so
**     loads coalesce when inner is large.
**   - anything else (a few long scans): CUB's InclusiveScanByKey over the row-major order of
**     the scans, keyed by the scan's number, reading and writing through iterators that map
**     a position to its element (so a scan along a middle dim needs no transposed copy).
**
** Accumulation: float32 sums and products accumulate in float32 (CUB's and the block
** scan's accumulator is the value type), where the CPU accumulates in double; the relative
** difference grows like n * 2^-24 in the worst case, about sqrt(n) * 2^-24 typically.
** Integers (int64: the core casts smaller ones) wrap through uint64.
**
** CUB's temporary storage comes from the caching allocator (qt_cuda_scratch), freed in
** stream order right after the launches; every CUB call and launch is checked.
*/
#include <math.h>
#include <stdint.h>

#include <cmath>
#include <type_traits>

#include <cub/block/block_load.cuh>
#include <cub/block/block_scan.cuh>
#include <cub/block/block_store.cuh>
#include <cub/device/device_scan.cuh>
#include <thrust/iterator/counting_iterator.h>
#include <thrust/iterator/tabulate_output_iterator.h>
#include <thrust/iterator/transform_iterator.h>

#include "dispatch.cuh"
#include "kernels.h"

#define SCAN_THREADS 256
#define SCAN_ITEMS 8
#define SCAN_ROW_MIN 512             /* shorter rows take the column or by-key path */
#define SCAN_COLUMNS_MIN 16384       /* scans a thread each: enough threads to hide latency */

/* ------------------------------------------------------------------ the ops */

template <typename T>
__host__ __device__ __forceinline__ bool scan_isnan(T x) {
  if constexpr (qt_is_float_v<T>) return x != x;
  else return false;
}

/* Integers wrap through their unsigned twin; floats are plain arithmetic. */
template <typename T>
__host__ __device__ __forceinline__ T scan_add(T a, T b) {
  if constexpr (qt_is_float_v<T>) return a + b;
  else {
    typedef typename qt_dtype_traits<T>::unsigned_type U;
    return (T)((U)a + (U)b);
  }
}
template <typename T>
__host__ __device__ __forceinline__ T scan_mul(T a, T b) {
  if constexpr (qt_is_float_v<T>) return a * b;
  else {
    typedef typename qt_dtype_traits<T>::unsigned_type U;
    return (T)((U)a * (U)b);
  }
}

/* Every functor: value, load(x, k) with k the 0-based position along the scan, combine
** (operator(), earlier value first), and store(dst, indices, offset, value). */
template <typename T>
struct scan_sum {
  typedef T value;
  static constexpr bool has_index = false;
  __host__ __device__ value load(T x, int64_t) const { return x; }
  __host__ __device__ value operator()(value a, value b) const { return scan_add(a, b); }
  __host__ __device__ void store(T *dst, int64_t *, int64_t off, value v) const { dst[off] = v; }
};

template <typename T>
struct scan_prod {
  typedef T value;
  static constexpr bool has_index = false;
  __host__ __device__ value load(T x, int64_t) const { return x; }
  __host__ __device__ value operator()(value a, value b) const { return scan_mul(a, b); }
  __host__ __device__ void store(T *dst, int64_t *, int64_t off, value v) const { dst[off] = v; }
};

/* PyTorch's log-add-exp: NaN propagates, two equal infinities give that infinity, anything
** else max + log1p(exp(min - max)). Commutative and associative (up to rounding). */
template <typename T>
struct scan_logaddexp {
  typedef T value;
  static constexpr bool has_index = false;
  __host__ __device__ value load(T x, int64_t) const { return x; }
  __host__ __device__ value operator()(value a, value b) const {
    if (a != a || b != b) return a + b;
    value lo = a < b ? a : b, hi = a < b ? b : a;
    if (lo == hi && isinf(lo)) return a;
    return hi + log1p(exp(lo - hi));
  }
  __host__ __device__ void store(T *dst, int64_t *, int64_t off, value v) const { dst[off] = v; }
};

/* cummax / cummin: a value and its 0-based position. The later element wins when it is
** NaN, or when the earlier is not NaN and the later is >= (max) or <= (min) it: PyTorch's
** rule, equal values move to the later position and the latest NaN is kept. This is the
** maximum of the key (is NaN, value, position) in lexicographic order, so it is
** associative, and the scan of pairs gives what the sequential rule gives. */
template <typename T>
struct scan_pair {
  T v;
  int64_t k;
};

template <typename T, bool MAX>
struct scan_extreme {
  typedef scan_pair<T> value;
  static constexpr bool has_index = true;
  __host__ __device__ value load(T x, int64_t k) const {
    value p;
    p.v = x;
    p.k = k;
    return p;
  }
  __host__ __device__ value operator()(value a, value b) const {
    bool later = scan_isnan(b.v) || (!scan_isnan(a.v) && (MAX ? b.v >= a.v : b.v <= a.v));
    return later ? b : a;
  }
  __host__ __device__ void store(T *dst, int64_t *indices, int64_t off, value v) const {
    dst[off] = v.v;
    indices[off] = v.k + 1;
  }
};

/* ------------------------------------------------------------------ the geometry */

/* outer x n x inner, and where scan c's element k lives: c = o * inner + i,
** offset (o * n + k) * inner + i. */
struct scan_shape {
  int64_t outer, n, inner;
  __host__ __device__ int64_t offset(int64_t c, int64_t k) const {
    if (inner == 1) return c * n + k;
    int64_t o = c / inner, i = c - o * inner;
    return (o * n + k) * inner + i;
  }
};

/* ------------------------------------------------------------------ many rows: a block each */

/* Row r (grid-stride over rows) in tiles of THREADS * ITEMS: load (warp-transposed, so the
** loads coalesce), convert, scan with the prefix of the tiles before (the first tile has
** none, so no identity is needed: the pair ops have none that works on both sides), store. */
template <typename T, typename Op>
__global__ void __launch_bounds__(SCAN_THREADS)
scan_rows_kernel(const T *src, T *dst, int64_t *indices, int64_t rows, int64_t n, Op op) {
  typedef typename Op::value V;
  typedef cub::BlockLoad<T, SCAN_THREADS, SCAN_ITEMS, cub::BLOCK_LOAD_WARP_TRANSPOSE> Load;
  typedef cub::BlockScan<V, SCAN_THREADS> Scan;
  typedef cub::BlockStore<T, SCAN_THREADS, SCAN_ITEMS, cub::BLOCK_STORE_WARP_TRANSPOSE> Store;
  typedef cub::BlockStore<int64_t, SCAN_THREADS, SCAN_ITEMS, cub::BLOCK_STORE_WARP_TRANSPOSE>
      StoreIndex;
  __shared__ union {
    typename Load::TempStorage load;
    typename Scan::TempStorage scan;
    typename Store::TempStorage store;
    typename StoreIndex::TempStorage store_index;
  } temp;
  const int64_t tile = (int64_t)SCAN_THREADS * SCAN_ITEMS;
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const T *x = src + r * n;
    T *y = dst + r * n;
    V running{};  /* the combine of every tile before this one */
    for (int64_t base = 0; base < n; base += tile) {
      int valid = (int)(n - base < tile ? n - base : tile);
      T items[SCAN_ITEMS];
      V values[SCAN_ITEMS];
      Load(temp.load).Load(x + base, items, valid, T());
      __syncthreads();
#pragma unroll
      for (int j = 0; j < SCAN_ITEMS; j++)
        values[j] = op.load(items[j], base + (int64_t)threadIdx.x * SCAN_ITEMS + j);
      V aggregate;
      Scan(temp.scan).InclusiveScan(values, values, op, aggregate);
      __syncthreads();
      if (base > 0) {
#pragma unroll
        for (int j = 0; j < SCAN_ITEMS; j++) values[j] = op(running, values[j]);
        running = op(running, aggregate);
      } else {
        running = aggregate;
      }
      if constexpr (Op::has_index) {
        int64_t ks[SCAN_ITEMS];
#pragma unroll
        for (int j = 0; j < SCAN_ITEMS; j++) items[j] = values[j].v, ks[j] = values[j].k + 1;
        Store(temp.store).Store(y + base, items, valid);
        __syncthreads();
        StoreIndex(temp.store_index).Store(indices + r * n + base, ks, valid);
        __syncthreads();
      } else {
#pragma unroll
        for (int j = 0; j < SCAN_ITEMS; j++) items[j] = values[j];
        Store(temp.store).Store(y + base, items, valid);
        __syncthreads();
      }
    }
  }
}

/* ------------------------------------------------------------------ many columns: a thread each */

template <typename T, typename Op>
__global__ void scan_columns_kernel(const T *src, T *dst, int64_t *indices, scan_shape g,
                                    Op op) {
  int64_t count = g.outer * g.inner;
  for (int64_t c = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; c < count;
       c += (int64_t)gridDim.x * blockDim.x) {
    int64_t off = g.offset(c, 0);
    typename Op::value acc = op.load(src[off], 0);
    op.store(dst, indices, off, acc);
    for (int64_t k = 1; k < g.n; k++) {
      off += g.inner;
      acc = op(acc, op.load(src[off], k));
      op.store(dst, indices, off, acc);
    }
  }
}

/* ------------------------------------------------------------------ a few long scans: CUB */

/* Position j of the row-major order of the scans (scan j / n, element j % n). */
template <typename T, typename Op>
struct scan_reader {
  const T *src;
  scan_shape g;
  Op op;
  __host__ __device__ typename Op::value operator()(int64_t j) const {
    int64_t c = j / g.n, k = j - c * g.n;
    return op.load(src[g.offset(c, k)], k);
  }
};

struct scan_key {
  int64_t n;
  __host__ __device__ int64_t operator()(int64_t j) const { return j / n; }
};

template <typename T, typename Op>
struct scan_writer {
  T *dst;
  int64_t *indices;
  scan_shape g;
  Op op;
  __host__ __device__ void operator()(int64_t j, typename Op::value v) const {
    int64_t c = j / g.n, k = j - c * g.n;
    op.store(dst, indices, g.offset(c, k), v);
  }
};

/* Runs a CUB device call twice (size, then run) with scratch from the caching allocator. */
template <typename F>
static int scan_cub(qt_device *dev, const char *op, F &&call, qt_err *err) {
  size_t bytes = 0;
  if (qt_cuda_check(dev, call((void *)NULL, bytes), op, err)) return -1;
  void *temp = NULL;
  if (bytes > 0 && qt_cuda_scratch(dev, bytes, &temp, err)) return -1;
  cudaError_t status = call(temp, bytes);
  if (temp != NULL) qt_cuda_scratch_free(dev, temp, bytes);
  return qt_cuda_check(dev, status, op, err);
}

template <typename T, typename Op>
static int scan_run(qt_device *dev, const char *name, const T *src, T *dst, int64_t *indices,
                    scan_shape g, Op op, qt_err *err) {
  cudaStream_t stream = qt_cuda_context(dev)->stream;
  int sms = qt_cuda_context(dev)->sm_count > 0 ? qt_cuda_context(dev)->sm_count : 1;
  int64_t scans = g.outer * g.inner, total = scans * g.n;
  thrust::counting_iterator<int64_t> positions(0);
  scan_reader<T, Op> reader = { src, g, op };
  scan_writer<T, Op> writer = { dst, indices, g, op };
  auto in = thrust::make_transform_iterator(positions, reader);
  auto out = thrust::make_tabulate_output_iterator(writer);

  if (scans == 1) {
    if constexpr (std::is_same<Op, scan_sum<T>>::value && qt_is_float_v<T>)
      return scan_cub(dev, name, [&](void *temp, size_t &bytes) {
        return cub::DeviceScan::InclusiveSum(temp, bytes, src, dst, total, stream);
      }, err);
    return scan_cub(dev, name, [&](void *temp, size_t &bytes) {
      return cub::DeviceScan::InclusiveScan(temp, bytes, in, out, op, total, stream);
    }, err);
  }
  if (g.inner == 1 && g.n >= SCAN_ROW_MIN && scans >= sms) {
    unsigned blocks = scans < (int64_t)1 << 30 ? (unsigned)scans : 1u << 30;
    scan_rows_kernel<T, Op><<<blocks, SCAN_THREADS, 0, stream>>>(src, dst, indices, scans,
                                                                 g.n, op);
    return qt_cuda_check_launch(dev, name, err);
  }
  if (scans >= SCAN_COLUMNS_MIN || g.n <= 32) {
    unsigned blocks = qt_cuda_blocks(dev, scans, SCAN_THREADS);
    scan_columns_kernel<T, Op><<<blocks, SCAN_THREADS, 0, stream>>>(src, dst, indices, g, op);
    return qt_cuda_check_launch(dev, name, err);
  }
  auto keys = thrust::make_transform_iterator(positions, scan_key{g.n});
  return scan_cub(dev, name, [&](void *temp, size_t &bytes) {
    return cub::DeviceScan::InclusiveScanByKey(temp, bytes, keys, in, out, op, total,
                                               ::cuda::std::equal_to<>(), stream);
  }, err);
}

extern "C" int qt_cuda_scan(qt_device *dev, qt_scanop op, const qt_view *dst,
                            const qt_view *indices, const qt_view *src, int dim, qt_err *err) {
  const char *name = qt_scanop_name(op);
  qt_dtype d = src->dtype;
  bool extreme = op == QT_CUMMAX || op == QT_CUMMIN;
  bool ok = (unsigned)d < (unsigned)QT_NDTYPES && dst->dtype == d &&
            (unsigned)op < (unsigned)QT_NSCANOPS && (dim == 0 || (dim > 0 && dim < src->ndim));
  if (ok && extreme) ok = indices != NULL && indices->dtype == QT_I64;
  else if (ok && op == QT_LOGCUMSUMEXP) ok = qt_is_float(d);
  else if (ok) ok = qt_is_float(d) || d == QT_I64;
  if (!ok)
    return qt_errorf(err, "%s: unsupported operands (dtype %s, dim %d)", name,
                     (unsigned)d < (unsigned)QT_NDTYPES ? qt_dtypes[d].name : "?", dim + 1);
  if (qt_cuda_enter(dev, name, err) != 0) return -1;
  if (src->numel == 0) return 0;
  scan_shape g = { 1, 1, 1 };
  for (int k = 0; k < src->ndim; k++) {
    if (k < dim) g.outer *= src->size[k];
    else if (k == dim) g.n = src->size[k];
    else g.inner *= src->size[k];
  }
  int64_t *ix = extreme ? (int64_t *)indices->data : NULL;
  int rc = -1;
  qt_dtype_switch(d, [&](auto zero) {
    using T = decltype(zero);
    const T *s = (const T *)src->data;
    T *y = (T *)dst->data;
    switch (op) {
      case QT_CUMMAX: rc = scan_run(dev, name, s, y, ix, g, scan_extreme<T, true>(), err); break;
      case QT_CUMMIN: rc = scan_run(dev, name, s, y, ix, g, scan_extreme<T, false>(), err); break;
      default:
        if constexpr (qt_is_float_v<T> || std::is_same<T, int64_t>::value) {
          if (op == QT_CUMSUM) rc = scan_run(dev, name, s, y, ix, g, scan_sum<T>(), err);
          else if (op == QT_CUMPROD) rc = scan_run(dev, name, s, y, ix, g, scan_prod<T>(), err);
          else if constexpr (qt_is_float_v<T>)
            rc = scan_run(dev, name, s, y, ix, g, scan_logaddexp<T>(), err);
        }
    }
  });
  return rc;
}
