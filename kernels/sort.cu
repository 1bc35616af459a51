/*
** sort.cu — the sorting slots on the GPU (device.h, "sorting and selection"): sort, topk,
** unique, bincount, histc, searchsorted. The CPU twins, and the reference, are in
** runtime/cpu/cpu_sort.c; the core (runtime/core/ops_sort.c) gives every slot contiguous
** (rows, n) views.
**
** Keys. Every element becomes an unsigned key (32 bits for 4-byte dtypes, 64 for 8-byte ones,
** 8 for bool and uint8) whose unsigned order is device.h's order: floats flip their sign bit
** (negative ones every bit) after -0.0 became 0.0 and every NaN the all-ones key; signed
** integers flip the sign bit. Descending sorts the complement. cpu_sort.c makes the same keys
** in 64 bits, so both devices agree on order and equality. Sorting unsigned keys is what
** CUB's radix sorts do, and they are stable, which gives the stable sort.
**
** Built in parts (kernels/dispatch.cuh): sort_run and topk_run_views per dtype.
**
** sort: a prepare kernel writes keys and the 0-based positions in the row (32-bit when a
** row fits, which halves the bytes CUB moves); one row is cub::DeviceRadixSort::SortPairs,
** several rows cub::DeviceSegmentedSort::StableSortPairs (segments at multiples of n); a
** finish kernel decodes the values from the keys and writes the 1-based int64 indices. Only
** the two keys that stand for several bit patterns (0.0 for +-0.0, and NaN) read the value
** back from src at its index, so -0.0 and NaN payloads come back exactly; sorted runs of
** equal keys have increasing indices, so those reads are near each other.
**
** topk, k <= 32: one block per row (or per chunk of a long row) where each thread keeps its
** best KM (>= k) in registers, sorted, by insertion (after the first few elements almost
** every element costs one comparison), then k rounds of a block-wide arg-best of the
** threads' heads pick the k best in order. A long row with few rows is split in chunks so
** the GPU is full; each chunk's k best are candidates, and a second launch of the same
** kernel picks the k best of the candidates. The work is one read of the data (bench case
** topk5_rows_8192).
** topk, larger k: one row (a long one) is a radix select: histograms of 11-bit digits of the
** key (cub::DeviceHistogram over the elements whose higher digits match the prefix found so
** far; each read back, ~8 KiB) narrow down the digit of the k-th best until its bin is small,
** then cub::DeviceSelect::Flagged takes every element at or above that bin's threshold (in
** order), CUB sorts those few thousand candidates (stable), and the first k are the answer:
** three or four reads of the data instead of a full sort's ~10. Several rows with large k
** sort their rows (as sort) and keep the first k columns.
**
** unique: flags of "differs from the previous key" summed by cub::DeviceScan::InclusiveSum
** give each sorted element its run number; one kernel writes the runs' first elements, their
** starts (hence counts) and the inverse through the sort's permutation. bincount and histc
** are atomics on global memory; searchsorted is a binary search of keys per value.
**
** Scratch memory (keys, positions, CUB's temporary storage) comes from the caching allocator
** (qt_cuda_scratch) and goes back in stream order right after the launches that use it.
*/
#include <stdint.h>
#include <string.h>

#include <type_traits>

#include <cub/device/device_histogram.cuh>
#include <cub/device/device_radix_sort.cuh>
#include <cub/device/device_scan.cuh>
#include <cub/device/device_segmented_sort.cuh>
#include <cub/device/device_select.cuh>
#include <thrust/iterator/counting_iterator.h>
#include <thrust/iterator/transform_iterator.h>

#include "dispatch.cuh"
#include "kernels.h"

#define SORT_THREADS 256

__device__ __forceinline__ int64_t sort_thread_index() {
  return (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
}
__device__ __forceinline__ int64_t sort_thread_count() {
  return (int64_t)gridDim.x * blockDim.x;
}

/* ------------------------------------------------------------------ keys */

template <typename T>
struct sort_key_of {
  typedef typename std::conditional<
      sizeof(T) == 8, uint64_t,
      typename std::conditional<sizeof(T) == 4, uint32_t, uint8_t>::type>::type type;
};

/* The bits the radix sorts look at: bool's keys are 0 and 1 (their complements differ in
** bit 0 too). */
template <typename T>
static int sort_key_bits() {
  if (qt_is_bool_v<T>) return 1;
  return (int)sizeof(typename sort_key_of<T>::type) * 8;
}

template <typename K>
__host__ __device__ __forceinline__ K sort_sign() { return (K)((K)1 << (sizeof(K) * 8 - 1)); }

template <typename T, typename K>
__device__ __forceinline__ K sort_encode(T x) {
  if constexpr (qt_is_float_v<T>) {
    if (x != x) return (K)~(K)0;
    if (x == 0) x = 0;  /* -0.0 equals 0.0 */
    K bits;
    memcpy(&bits, &x, sizeof bits);
    return (bits & sort_sign<K>()) ? (K)~bits : (K)(bits | sort_sign<K>());
  } else if constexpr (std::is_signed<T>::value) {
    return (K)((K)x ^ sort_sign<K>());
  } else {
    return (K)x;
  }
}

template <typename T, typename K>
__device__ __forceinline__ T sort_decode(K k) {
  if constexpr (qt_is_float_v<T>) {
    K bits = (k & sort_sign<K>()) ? (K)(k ^ sort_sign<K>()) : (K)~k;
    T x;
    memcpy(&x, &bits, sizeof x);
    return x;
  } else if constexpr (qt_is_bool_v<T>) {
    return k != 0;
  } else if constexpr (std::is_signed<T>::value) {
    return (T)(K)(k ^ sort_sign<K>());
  } else {
    return (T)k;
  }
}

/* Whether a float key stands for more than one bit pattern (0.0 and -0.0; the NaNs). */
template <typename T, typename K>
__device__ __forceinline__ bool sort_key_ambiguous(K k) {
  if constexpr (qt_is_float_v<T>) return k == (K)~(K)0 || k == sort_sign<K>();
  else return false;
}

/* ------------------------------------------------------------------ scratch */

/* One scratch block cut in parts, each 256-byte aligned. */
struct sort_scratch {
  size_t offset[8];
  size_t total;
  int nparts;
  char *base;
};

inline void sort_scratch_plan(sort_scratch *s, const size_t *bytes, int nparts) {
  s->total = 0;
  s->nparts = nparts;
  s->base = NULL;
  for (int k = 0; k < nparts; k++) {
    s->offset[k] = s->total;
    s->total += (bytes[k] + 255) / 256 * 256;
  }
  if (s->total == 0) s->total = 256;
}

inline int sort_scratch_take(qt_device *dev, sort_scratch *s, qt_err *err) {
  void *p = NULL;
  if (qt_cuda_scratch(dev, s->total, &p, err)) return -1;
  s->base = (char *)p;
  return 0;
}

inline void *sort_part(const sort_scratch *s, int k) { return s->base + s->offset[k]; }

inline void sort_scratch_give(qt_device *dev, sort_scratch *s) {
  if (s->base != NULL) qt_cuda_scratch_free(dev, s->base, s->total);
  s->base = NULL;
}

/* ------------------------------------------------------------------ sort */

template <typename T, typename K, typename I>
__global__ void sort_prepare(const T *src, K *keys, I *pos, int64_t total, int64_t n,
                             bool descending) {
  for (int64_t i = sort_thread_index(); i < total; i += sort_thread_count()) {
    K k = sort_encode<T, K>(src[i]);
    keys[i] = descending ? (K)~k : k;
    pos[i] = (I)(n == total ? i : i % n);
  }
}

/* values, indices (rows, width) = the first width of each sorted row (rows, n). */
template <typename T, typename K, typename I>
__global__ void sort_finish(const T *src, const K *keys, const I *pos, T *values,
                            int64_t *indices, int64_t rows, int64_t n, int64_t width,
                            bool descending) {
  int64_t total = rows * width;
  for (int64_t o = sort_thread_index(); o < total; o += sort_thread_count()) {
    int64_t r = rows == 1 ? 0 : o / width;
    int64_t i = r * n + (o - r * width);
    K k = keys[i];
    if (descending) k = (K)~k;
    I j = pos[i];
    values[o] = sort_key_ambiguous<T, K>(k) ? src[r * n + (int64_t)j] : sort_decode<T, K>(k);
    indices[o] = (int64_t)j + 1;
  }
}

struct sort_row_offset {
  int64_t n;
  __host__ __device__ int64_t operator()(int64_t r) const { return r * n; }
};

/* Sorts the rows (rows, n) of src and writes the first width columns of each to values and
** indices, on dev's stream. */
template <typename T, typename K, typename I>
static int sort_rows(qt_device *dev, const char *op, const T *src, T *values, int64_t *indices,
                     int64_t rows, int64_t n, int64_t width, bool descending, qt_err *err) {
  cudaStream_t stream = qt_cuda_context(dev)->stream;
  int64_t total = rows * n;
  int bits = sort_key_bits<T>();
  cub::DoubleBuffer<K> kb(NULL, NULL);
  cub::DoubleBuffer<I> pb(NULL, NULL);
  auto begin = thrust::make_transform_iterator(thrust::counting_iterator<int64_t>(0),
                                               sort_row_offset{n});
  size_t temp_bytes = 0;
  cudaError_t status;
  if (rows == 1)
    status = cub::DeviceRadixSort::SortPairs(NULL, temp_bytes, kb, pb, total, 0, bits, stream);
  else
    status = cub::DeviceSegmentedSort::StableSortPairs(NULL, temp_bytes, kb, pb, total, rows,
                                                       begin, begin + 1, stream);
  if (qt_cuda_check(dev, status, op, err)) return -1;
  size_t bytes[5] = { total * sizeof(K), total * sizeof(K), total * sizeof(I),
                      total * sizeof(I), temp_bytes };
  sort_scratch s;
  sort_scratch_plan(&s, bytes, 5);
  if (sort_scratch_take(dev, &s, err)) return -1;
  kb = cub::DoubleBuffer<K>((K *)sort_part(&s, 0), (K *)sort_part(&s, 1));
  pb = cub::DoubleBuffer<I>((I *)sort_part(&s, 2), (I *)sort_part(&s, 3));
  unsigned blocks = qt_cuda_blocks(dev, total, SORT_THREADS);
  sort_prepare<T, K, I><<<blocks, SORT_THREADS, 0, stream>>>(src, kb.Current(), pb.Current(),
                                                              total, n, descending);
  int rc = qt_cuda_check_launch(dev, op, err);
  if (rc == 0) {
    if (rows == 1)
      status = cub::DeviceRadixSort::SortPairs(sort_part(&s, 4), temp_bytes, kb, pb, total, 0,
                                               bits, stream);
    else
      status = cub::DeviceSegmentedSort::StableSortPairs(sort_part(&s, 4), temp_bytes, kb, pb,
                                                         total, rows, begin, begin + 1, stream);
    rc = qt_cuda_check(dev, status, op, err);
  }
  if (rc == 0) {
    blocks = qt_cuda_blocks(dev, rows * width, SORT_THREADS);
    sort_finish<T, K, I><<<blocks, SORT_THREADS, 0, stream>>>(
        src, kb.Current(), pb.Current(), values, indices, rows, n, width, descending);
    rc = qt_cuda_check_launch(dev, op, err);
  }
  sort_scratch_give(dev, &s);
  return rc;
}

template <typename T>
static int sort_rows_any(qt_device *dev, const char *op, const T *src, T *values,
                         int64_t *indices, int64_t rows, int64_t n, int64_t width,
                         bool descending, qt_err *err) {
  typedef typename sort_key_of<T>::type K;
  if (n <= (int64_t)UINT32_MAX)
    return sort_rows<T, K, uint32_t>(dev, op, src, values, indices, rows, n, width, descending,
                                     err);
  return sort_rows<T, K, int64_t>(dev, op, src, values, indices, rows, n, width, descending,
                                  err);
}

inline bool sort_rows_ok(const qt_view *v) {
  return v->ndim == 2 && (v->size[0] <= 1 || v->stride[0] == v->size[1]) &&
         (v->size[1] <= 1 || v->stride[1] == 1);
}

/* Each row of src sorted, for src's C type T. */
template <typename T>
int sort_run(qt_device *dev, const qt_view *values, const qt_view *indices, const qt_view *src,
             bool descending, qt_err *err) {
  int64_t rows = src->size[0], n = src->size[1];
  return sort_rows_any<T>(dev, "sort", (const T *)src->data, (T *)values->data,
                          (int64_t *)indices->data, rows, n, n, descending, err);
}
QT_PARTS_UNLESS_HALF(int, sort_run, (qt_device *, const qt_view *, const qt_view *,
                                     const qt_view *, bool, qt_err *))

#ifndef QT_PART
extern "C" int qt_cuda_sort(qt_device *dev, const qt_view *values, const qt_view *indices,
                            const qt_view *src, bool descending, qt_err *err) {
  const char *op = "sort";
  if (!sort_rows_ok(src) || !sort_rows_ok(values) || !sort_rows_ok(indices) ||
      values->dtype != src->dtype || indices->dtype != QT_I64)
    return qt_errorf(err, "sort: the views must be contiguous rows, values of src's dtype and "
                     "int64 indices");
  if (qt_cuda_enter(dev, op, err) != 0) return -1;
  int64_t rows = src->size[0], n = src->size[1];
  if (rows == 0 || n == 0) return 0;
  int rc = -1;
  if (!qt_dtype_switch(src->dtype, [&](auto zero) {
        rc = sort_run<decltype(zero)>(dev, values, indices, src, descending, err);
      }))
    return qt_errorf(err, "sort: dtype %d cannot be sorted", (int)src->dtype);
  return rc;
}
#endif

/* ------------------------------------------------------------------ topk, small k */

/* a is better than b: a larger goodness, or an equal one earlier. */
template <typename K>
__device__ __forceinline__ bool topk_better(K ka, int64_t ia, K kb, int64_t ib) {
  return ka > kb || (ka == kb && ia < ib);
}

#define TOPK_SENTINEL INT64_MAX

/* __shfl_down_sync for every key width (CUDA has no 8-bit overload) and for int64. */
template <typename K>
__device__ __forceinline__ K topk_shfl(K v, int off) {
  if constexpr (sizeof(K) == 8)
    return (K)__shfl_down_sync(0xffffffffu, (unsigned long long)v, off);
  else
    return (K)__shfl_down_sync(0xffffffffu, (unsigned)v, off);
}

/* Block b takes chunk b % chunks of row b / chunks, of the row's seg elements: from src
** (goodness from the key, positions 0-based in the row) or, when cand_key is set, from
** candidates (goodness, position). FINAL writes values (read from src at the position) and
** 1-based indices at (row, k); otherwise candidates at (row, chunk, k). */
template <typename T, typename K, int KM, bool FINAL>
__global__ void topk_block(const T *src, int64_t n, const K *cand_key, const int64_t *cand_idx,
                           int64_t seg, int64_t chunk, int chunks, int k, bool largest,
                           K *out_key, int64_t *out_idx, T *values, int64_t *indices) {
  __shared__ K s_key[32];
  __shared__ int64_t s_idx[32];
  __shared__ int s_tid[32];
  __shared__ K w_key;
  __shared__ int64_t w_idx;
  __shared__ int w_tid;
  int64_t row = blockIdx.x / chunks;
  int64_t c = blockIdx.x % chunks;
  int64_t begin = c * chunk, end = begin + chunk < seg ? begin + chunk : seg;
  K lk[KM];
  int64_t li[KM];
#pragma unroll
  for (int t = 0; t < KM; t++) lk[t] = 0, li[t] = TOPK_SENTINEL;
  for (int64_t j = begin + threadIdx.x; j < end; j += blockDim.x) {
    K g;
    int64_t idx;
    if (cand_key != NULL) {
      g = cand_key[row * seg + j];
      idx = cand_idx[row * seg + j];
    } else {
      K key = sort_encode<T, K>(src[row * n + j]);
      g = largest ? key : (K)~key;
      idx = j;
    }
    if (topk_better(g, idx, lk[KM - 1], li[KM - 1])) {
      lk[KM - 1] = g;
      li[KM - 1] = idx;
#pragma unroll
      for (int t = KM - 1; t > 0; t--) {
        if (topk_better(lk[t], li[t], lk[t - 1], li[t - 1])) {
          K tk = lk[t]; lk[t] = lk[t - 1]; lk[t - 1] = tk;
          int64_t ti = li[t]; li[t] = li[t - 1]; li[t - 1] = ti;
        }
      }
    }
  }
  int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = (blockDim.x + 31) >> 5;
  for (int r = 0; r < k; r++) {
    K hk = lk[0];
    int64_t hi = li[0];
    int ht = threadIdx.x;
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) {
      K ok = topk_shfl(hk, off);
      int64_t oi = topk_shfl(hi, off);
      int ot = __shfl_down_sync(0xffffffffu, ht, off);
      if (topk_better(ok, oi, hk, hi)) hk = ok, hi = oi, ht = ot;
    }
    if (lane == 0) s_key[warp] = hk, s_idx[warp] = hi, s_tid[warp] = ht;
    __syncthreads();
    if (warp == 0) {
      hk = lane < nwarps ? s_key[lane] : (K)0;
      hi = lane < nwarps ? s_idx[lane] : TOPK_SENTINEL;
      ht = lane < nwarps ? s_tid[lane] : 0;
#pragma unroll
      for (int off = 16; off > 0; off >>= 1) {
        K ok = topk_shfl(hk, off);
        int64_t oi = topk_shfl(hi, off);
        int ot = __shfl_down_sync(0xffffffffu, ht, off);
        if (topk_better(ok, oi, hk, hi)) hk = ok, hi = oi, ht = ot;
      }
      if (lane == 0) w_key = hk, w_idx = hi, w_tid = ht;
    }
    __syncthreads();
    if (threadIdx.x == 0) {
      if (FINAL) {
        values[row * k + r] = src[row * n + w_idx];
        indices[row * k + r] = w_idx + 1;
      } else {
        out_key[(row * chunks + c) * k + r] = w_key;
        out_idx[(row * chunks + c) * k + r] = w_idx;
      }
    }
    if (threadIdx.x == w_tid) {
#pragma unroll
      for (int t = 0; t < KM - 1; t++) lk[t] = lk[t + 1], li[t] = li[t + 1];
      lk[KM - 1] = 0;
      li[KM - 1] = TOPK_SENTINEL;
    }
  }
}

template <typename T, int KM>
static int topk_small_km(qt_device *dev, const char *op, const T *src, T *values,
                         int64_t *indices, int64_t rows, int64_t n, int k, bool largest,
                         qt_err *err) {
  typedef typename sort_key_of<T>::type K;
  cudaStream_t stream = qt_cuda_context(dev)->stream;
  const int threads = KM <= 16 ? SORT_THREADS : 128;
  int sms = qt_cuda_context(dev)->sm_count > 0 ? qt_cuda_context(dev)->sm_count : 1;
  /* chunks: enough blocks for the GPU (4 per SM) when rows are few, each >= 8192 elements */
  int64_t chunks = 1;
  if (rows < 4 * (int64_t)sms) {
    int64_t want = (4 * (int64_t)sms + rows - 1) / rows, most = (n + 8191) / 8192;
    chunks = want < most ? want : most;
    if (chunks < 1) chunks = 1;
  }
  if (rows * chunks > (int64_t)INT32_MAX)
    return qt_errorf(err, "%s: %lld rows are more than one launch takes", op, (long long)rows);
  if (chunks == 1) {
    topk_block<T, K, KM, true><<<(unsigned)rows, threads, 0, stream>>>(
        src, n, NULL, NULL, n, n, 1, k, largest, NULL, NULL, values, indices);
    return qt_cuda_check_launch(dev, op, err);
  }
  int64_t chunk = (n + chunks - 1) / chunks;
  chunks = (n + chunk - 1) / chunk;
  int64_t ncand = rows * chunks * k;
  size_t bytes[2] = { ncand * sizeof(K), ncand * sizeof(int64_t) };
  sort_scratch s;
  sort_scratch_plan(&s, bytes, 2);
  if (sort_scratch_take(dev, &s, err)) return -1;
  K *ck = (K *)sort_part(&s, 0);
  int64_t *ci = (int64_t *)sort_part(&s, 1);
  topk_block<T, K, KM, false><<<(unsigned)(rows * chunks), threads, 0, stream>>>(
      src, n, NULL, NULL, n, chunk, (int)chunks, k, largest, ck, ci, NULL, NULL);
  int rc = qt_cuda_check_launch(dev, op, err);
  if (rc == 0) {
    int64_t seg = chunks * k;
    topk_block<T, K, KM, true><<<(unsigned)rows, threads, 0, stream>>>(
        src, n, ck, ci, seg, seg, 1, k, largest, NULL, NULL, values, indices);
    rc = qt_cuda_check_launch(dev, op, err);
  }
  sort_scratch_give(dev, &s);
  return rc;
}

/* ------------------------------------------------------------------ topk, one long row */

#define SELECT_DIGIT_BITS 11
#define SELECT_BINS (1 << SELECT_DIGIT_BITS)
#define SELECT_SMALL_BIN 8192  /* a bin this small ends the narrowing */

/* The digit of an element's goodness at shift, or -1 (no bin) when its higher bits are not
** the prefix. */
template <typename T, typename K>
struct select_digit {
  const T *src;
  bool largest;
  int shift, digit_bits, prefix_bits;
  K prefix;
  __host__ __device__ int operator()(int64_t i) const {
#ifdef __CUDA_ARCH__
    K key = sort_encode<T, K>(src[i]);
    K g = largest ? key : (K)~key;
    int high = shift + digit_bits;
    if (prefix_bits > 0 && (K)(g >> high) != prefix) return -1;
    return (int)((g >> shift) & (K)(SELECT_BINS - 1));
#else
    (void)i;
    return -1;
#endif
  }
};

/* Whether an element's goodness is at or above the threshold. */
template <typename T, typename K>
struct select_flag {
  const T *src;
  bool largest;
  K threshold;
  __host__ __device__ bool operator()(int64_t i) const {
#ifdef __CUDA_ARCH__
    K key = sort_encode<T, K>(src[i]);
    K g = largest ? key : (K)~key;
    return g >= threshold;
#else
    (void)i;
    return false;
#endif
  }
};

/* Candidates' sort keys: the complement of the goodness (best first in ascending order). */
template <typename T, typename K>
__global__ void select_keys(const T *src, const int64_t *pos, K *keys, int64_t count,
                            bool largest) {
  for (int64_t i = sort_thread_index(); i < count; i += sort_thread_count()) {
    K key = sort_encode<T, K>(src[pos[i]]);
    K g = largest ? key : (K)~key;
    keys[i] = (K)~g;
  }
}

template <typename T>
__global__ void select_finish(const T *src, const int64_t *pos, T *values, int64_t *indices,
                              int64_t k) {
  for (int64_t i = sort_thread_index(); i < k; i += sort_thread_count()) {
    values[i] = src[pos[i]];
    indices[i] = pos[i] + 1;
  }
}

template <typename T>
static int topk_select(qt_device *dev, const char *op, const T *src, T *values,
                       int64_t *indices, int64_t n, int64_t k, bool largest, qt_err *err) {
  typedef typename sort_key_of<T>::type K;
  cudaStream_t stream = qt_cuda_context(dev)->stream;
  const int key_bits = (int)sizeof(K) * 8;
  thrust::counting_iterator<int64_t> positions(0);
  int rc = 0;
  /* ---- narrow down the bin of the k-th best */
  K prefix = 0;
  int prefix_bits = 0;
  int64_t remaining = k, count = n;
  K threshold = 0;
  size_t hist_temp = 0;
  {
    select_digit<T, K> d = { src, largest, 0, SELECT_DIGIT_BITS, 0, 0 };
    auto samples = thrust::make_transform_iterator(positions, d);
    if (qt_cuda_check(dev, cub::DeviceHistogram::HistogramEven(
                               NULL, hist_temp, samples, (int *)NULL, SELECT_BINS + 1, 0,
                               SELECT_BINS, n, stream), op, err))
      return -1;
  }
  size_t hbytes[2] = { SELECT_BINS * sizeof(int), hist_temp };
  sort_scratch hs;
  sort_scratch_plan(&hs, hbytes, 2);
  if (sort_scratch_take(dev, &hs, err)) return -1;
  int *hist = (int *)sort_part(&hs, 0);
  static thread_local int host_hist[SELECT_BINS];
  for (;;) {
    int digit_bits = key_bits - prefix_bits < SELECT_DIGIT_BITS ? key_bits - prefix_bits
                                                                 : SELECT_DIGIT_BITS;
    int shift = key_bits - prefix_bits - digit_bits;
    select_digit<T, K> d = { src, largest, shift, digit_bits, prefix_bits, prefix };
    auto samples = thrust::make_transform_iterator(positions, d);
    size_t temp = hist_temp;
    rc = qt_cuda_check(dev, cub::DeviceHistogram::HistogramEven(
                                sort_part(&hs, 1), temp, samples, hist, SELECT_BINS + 1, 0,
                                SELECT_BINS, n, stream), op, err);
    if (rc == 0) rc = qt_cuda_download(dev, host_hist, hist, SELECT_BINS * sizeof(int), err);
    if (rc) break;
    int64_t above = 0;
    int digit = (1 << digit_bits) - 1;
    for (; digit > 0; digit--) {
      if (above + host_hist[digit] >= remaining) break;
      above += host_hist[digit];
    }
    K here = (K)((prefix << digit_bits) | (K)digit);
    if (host_hist[digit] <= SELECT_SMALL_BIN || shift == 0) {
      threshold = (K)(here << shift);
      count = (k - remaining) + above + host_hist[digit];
      break;
    }
    prefix = here;
    prefix_bits += digit_bits;
    remaining -= above;
  }
  sort_scratch_give(dev, &hs);
  if (rc) return -1;
  /* ---- the candidates, in order, then a stable sort of them by goodness */
  select_flag<T, K> f = { src, largest, threshold };
  auto flags = thrust::make_transform_iterator(positions, f);
  size_t sel_temp = 0, sort_temp = 0;
  cub::DoubleBuffer<K> kb(NULL, NULL);
  cub::DoubleBuffer<int64_t> pb(NULL, NULL);
  if (qt_cuda_check(dev, cub::DeviceSelect::Flagged(NULL, sel_temp, positions, flags,
                                                    (int64_t *)NULL, (int64_t *)NULL, n,
                                                    stream), op, err) ||
      qt_cuda_check(dev, cub::DeviceRadixSort::SortPairs(NULL, sort_temp, kb, pb, count, 0,
                                                         key_bits, stream), op, err))
    return -1;
  size_t bytes[6] = { sizeof(int64_t), count * sizeof(K), count * sizeof(K),
                      count * sizeof(int64_t), count * sizeof(int64_t),
                      sel_temp > sort_temp ? sel_temp : sort_temp };
  sort_scratch s;
  sort_scratch_plan(&s, bytes, 6);
  if (sort_scratch_take(dev, &s, err)) return -1;
  kb = cub::DoubleBuffer<K>((K *)sort_part(&s, 1), (K *)sort_part(&s, 2));
  pb = cub::DoubleBuffer<int64_t>((int64_t *)sort_part(&s, 3), (int64_t *)sort_part(&s, 4));
  rc = qt_cuda_check(dev, cub::DeviceSelect::Flagged(sort_part(&s, 5), sel_temp, positions,
                                                     flags, pb.Current(),
                                                     (int64_t *)sort_part(&s, 0), n, stream),
                     op, err);
  if (rc == 0) {
    unsigned blocks = qt_cuda_blocks(dev, count, SORT_THREADS);
    select_keys<T, K><<<blocks, SORT_THREADS, 0, stream>>>(src, pb.Current(), kb.Current(),
                                                           count, largest);
    rc = qt_cuda_check_launch(dev, op, err);
  }
  if (rc == 0)
    rc = qt_cuda_check(dev, cub::DeviceRadixSort::SortPairs(sort_part(&s, 5), sort_temp, kb, pb,
                                                            count, 0, key_bits, stream), op, err);
  if (rc == 0) {
    unsigned blocks = qt_cuda_blocks(dev, k, SORT_THREADS);
    select_finish<T><<<blocks, SORT_THREADS, 0, stream>>>(src, pb.Current(), values, indices, k);
    rc = qt_cuda_check_launch(dev, op, err);
  }
  sort_scratch_give(dev, &s);
  return rc;
}

/* ------------------------------------------------------------------ topk */

template <typename T>
static int topk_run(qt_device *dev, const char *op, const T *src, T *values, int64_t *indices,
                    int64_t rows, int64_t n, int64_t k, bool largest, qt_err *err) {
  if (k <= 4) return topk_small_km<T, 4>(dev, op, src, values, indices, rows, n, (int)k, largest, err);
  if (k <= 8) return topk_small_km<T, 8>(dev, op, src, values, indices, rows, n, (int)k, largest, err);
  if (k <= 16) return topk_small_km<T, 16>(dev, op, src, values, indices, rows, n, (int)k, largest, err);
  if (k <= 32) return topk_small_km<T, 32>(dev, op, src, values, indices, rows, n, (int)k, largest, err);
  /* one long row: the radix select reads the data 3-4 times, a sort ~10 */
  if (rows == 1 && n >= (1 << 16) && n <= INT32_MAX)
    return topk_select<T>(dev, op, src, values, indices, n, k, largest, err);
  return sort_rows_any<T>(dev, op, src, values, indices, rows, n, k, largest, err);
}

template <typename T>
int topk_run_views(qt_device *dev, const qt_view *values, const qt_view *indices,
                   const qt_view *src, int64_t k, bool largest, qt_err *err) {
  return topk_run<T>(dev, "topk", (const T *)src->data, (T *)values->data,
                     (int64_t *)indices->data, src->size[0], src->size[1], k, largest, err);
}
QT_PARTS_UNLESS_HALF(int, topk_run_views, (qt_device *, const qt_view *, const qt_view *, const qt_view *,
                               int64_t, bool, qt_err *))

#ifndef QT_PART
extern "C" int qt_cuda_topk(qt_device *dev, const qt_view *values, const qt_view *indices,
                            const qt_view *src, int64_t k, bool largest, qt_err *err) {
  const char *op = "topk";
  if (!sort_rows_ok(src) || !sort_rows_ok(values) || !sort_rows_ok(indices) ||
      values->dtype != src->dtype || indices->dtype != QT_I64 || k < 0 || k > src->size[1])
    return qt_errorf(err, "topk: the views must be contiguous rows, values of src's dtype, "
                     "int64 indices and k <= n");
  if (qt_cuda_enter(dev, op, err) != 0) return -1;
  int64_t rows = src->size[0], n = src->size[1];
  if (rows == 0 || n == 0 || k == 0) return 0;
  int rc = -1;
  if (!qt_dtype_switch(src->dtype, [&](auto zero) {
        rc = topk_run_views<decltype(zero)>(dev, values, indices, src, k, largest, err);
      }))
    return qt_errorf(err, "topk: dtype %d cannot be sorted", (int)src->dtype);
  return rc;
}

/* ------------------------------------------------------------------ unique */
/* unique, bincount, histc and searchsorted are light: all of them live in the entry. */

template <typename T>
__global__ void unique_flags(const T *sorted, int64_t *flags, int64_t n) {
  typedef typename sort_key_of<T>::type K;
  for (int64_t i = sort_thread_index(); i < n; i += sort_thread_count())
    flags[i] = i == 0 || sort_encode<T, K>(sorted[i]) != sort_encode<T, K>(sorted[i - 1]);
}

/* run[i]: element i's 1-based run number (the scan of the flags). */
template <typename T>
__global__ void unique_write(const T *sorted, const int64_t *run, const int64_t *perm,
                             T *uniques, int64_t *starts, int64_t *inverse, int64_t n) {
  for (int64_t i = sort_thread_index(); i < n; i += sort_thread_count()) {
    int64_t r = run[i];
    if (i == 0 || run[i - 1] != r) {
      uniques[r - 1] = sorted[i];
      if (starts != NULL) starts[r - 1] = i;
    }
    if (inverse != NULL) {
      int64_t at = perm[i] - 1;
      if (at >= 0 && at < n) inverse[at] = r;
    }
  }
}

__global__ void unique_lengths(const int64_t *starts, int64_t *counts, int64_t runs, int64_t n) {
  for (int64_t j = sort_thread_index(); j < runs; j += sort_thread_count())
    counts[j] = (j + 1 < runs ? starts[j + 1] : n) - starts[j];
}

extern "C" int qt_cuda_unique(qt_device *dev, const qt_view *uniques, const qt_view *inverse,
                              const qt_view *counts, const qt_view *sorted, const qt_view *perm,
                              int64_t *count, qt_err *err) {
  const char *op = "unique";
  *count = 0;
  if (uniques->dtype != sorted->dtype || perm->dtype != QT_I64)
    return qt_errorf(err, "unique: uniques of the sorted values' dtype and an int64 "
                     "permutation expected");
  if (qt_cuda_enter(dev, op, err) != 0) return -1;
  int64_t n = sorted->numel;
  if (n == 0) return 0;
  cudaStream_t stream = qt_cuda_context(dev)->stream;
  size_t scan_temp = 0;
  if (qt_cuda_check(dev, cub::DeviceScan::InclusiveSum(NULL, scan_temp, (int64_t *)NULL,
                                                       (int64_t *)NULL, n, stream), op, err))
    return -1;
  size_t bytes[4] = { n * sizeof(int64_t), n * sizeof(int64_t),
                      counts != NULL ? n * sizeof(int64_t) : 0, scan_temp };
  sort_scratch s;
  sort_scratch_plan(&s, bytes, 4);
  if (sort_scratch_take(dev, &s, err)) return -1;
  int64_t *flags = (int64_t *)sort_part(&s, 0), *run = (int64_t *)sort_part(&s, 1);
  int64_t *starts = counts != NULL ? (int64_t *)sort_part(&s, 2) : NULL;
  unsigned blocks = qt_cuda_blocks(dev, n, SORT_THREADS);
  int rc = -1;
  qt_dtype_switch(sorted->dtype, [&](auto zero) {
    using T = decltype(zero);
    unique_flags<T><<<blocks, SORT_THREADS, 0, stream>>>((const T *)sorted->data, flags, n);
    rc = qt_cuda_check_launch(dev, op, err);
    if (rc == 0)
      rc = qt_cuda_check(dev, cub::DeviceScan::InclusiveSum(sort_part(&s, 3), scan_temp, flags,
                                                            run, n, stream), op, err);
    if (rc == 0) {
      unique_write<T><<<blocks, SORT_THREADS, 0, stream>>>(
          (const T *)sorted->data, run, (const int64_t *)perm->data, (T *)uniques->data, starts,
          inverse != NULL ? (int64_t *)inverse->data : NULL, n);
      rc = qt_cuda_check_launch(dev, op, err);
    }
  });
  if (rc == 0) rc = qt_cuda_download(dev, count, run + (n - 1), sizeof(int64_t), err);
  if (rc == 0 && counts != NULL && *count > 0) {
    unsigned b = qt_cuda_blocks(dev, *count, SORT_THREADS);
    unique_lengths<<<b, SORT_THREADS, 0, stream>>>(starts, (int64_t *)counts->data, *count, n);
    rc = qt_cuda_check_launch(dev, op, err);
  }
  sort_scratch_give(dev, &s);
  return rc;
}

/* ------------------------------------------------------------------ bincount, histc */

template <typename S, typename W>
__global__ void bincount_kernel(const S *src, const W *weights, W *dst, int64_t n, int64_t len) {
  for (int64_t i = sort_thread_index(); i < n; i += sort_thread_count()) {
    int64_t v = (int64_t)src[i];
    if (v < 0 || v >= len) continue;  /* the core checked the range */
    if constexpr (std::is_same<W, int64_t>::value)
      atomicAdd((unsigned long long *)&dst[v], 1ull);
    else
      atomicAdd(&dst[v], weights[i]);
  }
}

extern "C" int qt_cuda_bincount(qt_device *dev, const qt_view *dst, const qt_view *src,
                                const qt_view *weights, qt_err *err) {
  const char *op = "bincount";
  if (qt_is_float(src->dtype) || (weights == NULL && dst->dtype != QT_I64) ||
      (weights != NULL && (weights->dtype != dst->dtype || !qt_is_float(dst->dtype))))
    return qt_errorf(err, "bincount: integer input and int64 counts or weights of the "
                     "result's float dtype expected");
  if (qt_cuda_enter(dev, op, err) != 0) return -1;
  int64_t n = src->numel, len = dst->numel;
  if (n == 0 || len == 0) return 0;
  cudaStream_t stream = qt_cuda_context(dev)->stream;
  unsigned blocks = qt_cuda_blocks(dev, n, SORT_THREADS);
  qt_dtype_switch(src->dtype, [&](auto zero) {
    using S = decltype(zero);
    if constexpr (!qt_is_float_v<S>) {
      if (weights == NULL)
        bincount_kernel<S, int64_t><<<blocks, SORT_THREADS, 0, stream>>>(
            (const S *)src->data, (const int64_t *)NULL, (int64_t *)dst->data, n, len);
      else if (dst->dtype == QT_F32)
        bincount_kernel<S, float><<<blocks, SORT_THREADS, 0, stream>>>(
            (const S *)src->data, (const float *)weights->data, (float *)dst->data, n, len);
      else
        bincount_kernel<S, double><<<blocks, SORT_THREADS, 0, stream>>>(
            (const S *)src->data, (const double *)weights->data, (double *)dst->data, n, len);
    }
  });
  return qt_cuda_check_launch(dev, op, err);
}

template <typename T>
__global__ void histc_kernel(const T *src, unsigned long long *counts, int64_t n, int64_t bins,
                             double lo, double hi) {
  for (int64_t i = sort_thread_index(); i < n; i += sort_thread_count()) {
    double x = (double)src[i];
    if (!(x >= lo && x <= hi)) continue;  /* NaN fails both */
    atomicAdd(&counts[qt_histc_bin(x, lo, hi, bins)], 1ull);  /* scalar.h: as the CPU */
  }
}

extern "C" int qt_cuda_histc(qt_device *dev, const qt_view *dst, const qt_view *src, double lo,
                             double hi, qt_err *err) {
  const char *op = "histc";
  if (dst->dtype != QT_I64 || qt_is_bool(src->dtype) || !(lo < hi))
    return qt_errorf(err, "histc: int64 counts, a non-bool input and min < max expected");
  if (qt_cuda_enter(dev, op, err) != 0) return -1;
  int64_t n = src->numel, bins = dst->numel;
  if (n == 0 || bins == 0) return 0;
  cudaStream_t stream = qt_cuda_context(dev)->stream;
  unsigned blocks = qt_cuda_blocks(dev, n, SORT_THREADS);
  qt_dtype_switch(src->dtype, [&](auto zero) {
    using T = decltype(zero);
    histc_kernel<T><<<blocks, SORT_THREADS, 0, stream>>>(
        (const T *)src->data, (unsigned long long *)dst->data, n, bins, lo, hi);
  });
  return qt_cuda_check_launch(dev, op, err);
}

/* ------------------------------------------------------------------ searchsorted */

template <typename T>
__global__ void searchsorted_kernel(const T *sorted, const T *values, int64_t *dst,
                                    int64_t rows, int64_t n, int64_t m, bool right) {
  typedef typename sort_key_of<T>::type K;
  int64_t total = rows * m;
  for (int64_t o = sort_thread_index(); o < total; o += sort_thread_count()) {
    int64_t r = o / m;
    const T *row = sorted + r * n;
    K key = sort_encode<T, K>(values[o]);
    int64_t lo = 0, hi = n;
    while (lo < hi) {
      int64_t mid = lo + (hi - lo) / 2;
      K k = sort_encode<T, K>(row[mid]);
      if (right ? k <= key : k < key) lo = mid + 1;
      else hi = mid;
    }
    dst[o] = lo + 1;
  }
}

extern "C" int qt_cuda_searchsorted(qt_device *dev, const qt_view *dst, const qt_view *sorted,
                                    const qt_view *values, bool right, qt_err *err) {
  const char *op = "searchsorted";
  if (sorted->dtype != values->dtype || dst->dtype != QT_I64)
    return qt_errorf(err, "searchsorted: sorted and values of one dtype, int64 result expected");
  if (qt_cuda_enter(dev, op, err) != 0) return -1;
  int64_t rows = dst->size[0], m = dst->size[1], n = sorted->size[1];
  if (rows * m == 0) return 0;
  cudaStream_t stream = qt_cuda_context(dev)->stream;
  unsigned blocks = qt_cuda_blocks(dev, rows * m, SORT_THREADS);
  qt_dtype_switch(sorted->dtype, [&](auto zero) {
    using T = decltype(zero);
    searchsorted_kernel<T><<<blocks, SORT_THREADS, 0, stream>>>(
        (const T *)sorted->data, (const T *)values->data, (int64_t *)dst->data, rows, n, m,
        right);
  });
  return qt_cuda_check_launch(dev, op, err);
}
#endif
