/*
** mask.cu — the mask slots on the GPU: where (one ternary elementwise kernel; masked_fill_
** and masked_fill run through it too), masked_select and nonzero (compaction by CUB's
** DeviceSelect::Flagged). The CPU twins are in runtime/cpu/cpu_mask.c; the core
** (runtime/core/ops_mask.c) makes every mask bool and counts it first.
**
** Values are moved, never converted, so every kernel is per element size (1, 2, 4 or 8
** bytes: every dtype of the list is one of those), not per dtype.
**
** where: the views (dst, cond, a, b) are collapsed together on the host; a or b missing is
** its value passed by value (no device memory, no fill). Dense views take a grid-stride
** loop that moves 16 bytes of dst, a and b per thread per step (with the matching run of
** cond bytes) when every pointer is aligned for it; any other layout (broadcasting with
** stride 0, transposes) computes each view's offset from the row-major index, in 32-bit
** arithmetic below 2^32 elements.
**
** masked_select and nonzero: the core has read the number of true elements and allocated
** the result exactly; DeviceSelect::Flagged writes the selected elements (or, for nonzero,
** the selected row-major positions from a counting iterator) in order. Strided sources and
** masks are read through thrust's transform iterators over the row-major index. CUB's
** temporary storage and its count output come from the caching allocator (qt_cuda_scratch),
** freed in stream order right after the launches; the count CUB writes is not read back
** (the core's count is the same number, from the same mask on the same stream).
*/
#include <stdint.h>
#include <string.h>

#include <cub/device/device_select.cuh>
#include <thrust/iterator/counting_iterator.h>
#include <thrust/iterator/transform_iterator.h>

#include "kernels.h"

#define MASK_THREADS 256

/* The word of an element size: the type the kernels move. */
template <int BYTES> struct mask_word;
template <> struct mask_word<1> { typedef uint8_t type; };
template <> struct mask_word<4> { typedef uint32_t type; };
template <> struct mask_word<8> { typedef uint64_t type; };
template <> struct mask_word<2> { typedef uint16_t type; };

/* Calls f(W()) with the word type of dtype d's size; false for another size. */
template <typename F>
static bool mask_width_switch(qt_dtype d, F &&f) {
  switch (qt_elsize(d)) {
    case 1: f(mask_word<1>::type()); return true;
    case 2: f(mask_word<2>::type()); return true;
    case 4: f(mask_word<4>::type()); return true;
    case 8: f(mask_word<8>::type()); return true;
    default: return false;
  }
}

__device__ __forceinline__ int64_t mask_thread_index() {
  return (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
}
__device__ __forceinline__ int64_t mask_thread_count() {
  return (int64_t)gridDim.x * blockDim.x;
}

/* ------------------------------------------------------------------ where */

/* a and b: pointers, or (pointer NULL) one value each. */
template <typename W>
struct where_operands {
  const W *a, *b;
  W a_value, b_value;
};

/* V words moved at once (16 bytes), and the V condition bytes that go with them. */
template <typename W, int V>
struct alignas(sizeof(W) * V) where_words {
  W v[V];
};
template <int V>
struct alignas(V) where_flags {
  uint8_t v[V];
};

/* PACKED: dst, a and b 16-byte aligned and cond V-byte aligned; packs, then the tail. The
** branches on x.a / x.b are uniform across the grid. */
template <typename W, bool PACKED>
__global__ void where_contiguous(W *dst, const uint8_t *cond, where_operands<W> x, int64_t n) {
  int64_t start = mask_thread_index(), step = mask_thread_count(), done = 0;
  if constexpr (PACKED) {
    constexpr int V = 16 / sizeof(W);
    typedef where_words<W, V> words;
    int64_t packs = n / V;
    words av, bv;
#pragma unroll
    for (int j = 0; j < V; j++) av.v[j] = x.a_value, bv.v[j] = x.b_value;
    for (int64_t k = start; k < packs; k += step) {
      where_flags<V> c = ((const where_flags<V> *)cond)[k];
      words a = x.a != NULL ? ((const words *)x.a)[k] : av;
      words b = x.b != NULL ? ((const words *)x.b)[k] : bv;
      words r;
#pragma unroll
      for (int j = 0; j < V; j++) r.v[j] = c.v[j] ? a.v[j] : b.v[j];
      ((words *)dst)[k] = r;
    }
    done = packs * V;
  }
  for (int64_t i = done + start; i < n; i += step) {
    W a = x.a != NULL ? x.a[i] : x.a_value;
    W b = x.b != NULL ? x.b[i] : x.b_value;
    dst[i] = cond[i] ? a : b;
  }
}

/* The collapsed sizes and the strides of dst, cond, a, b (0 for a missing a or b). */
struct where_geometry {
  int ndim;
  int64_t size[QT_MAXDIM];
  int64_t stride[4][QT_MAXDIM];
};

template <typename IndexT, typename W>
__global__ void where_strided(W *dst, const uint8_t *cond, where_operands<W> x, where_geometry g,
                              int64_t n) {
  for (int64_t linear = mask_thread_index(); linear < n; linear += mask_thread_count()) {
    int64_t off[4] = {0, 0, 0, 0};
    IndexT i = (IndexT)linear;
    for (int d = g.ndim - 1; d > 0; d--) {
      IndexT s = (IndexT)g.size[d];
      IndexT q = i / s;
      IndexT r = i - q * s;
#pragma unroll
      for (int v = 0; v < 4; v++) off[v] += (int64_t)r * g.stride[v][d];
      i = q;
    }
#pragma unroll
    for (int v = 0; v < 4; v++) off[v] += (int64_t)i * g.stride[v][0];
    W a = x.a != NULL ? x.a[off[2]] : x.a_value;
    W b = x.b != NULL ? x.b[off[3]] : x.b_value;
    dst[off[0]] = cond[off[1]] ? a : b;
  }
}

/* The raw bits of value as dtype d, in W. */
template <typename W>
static W where_bits(qt_dtype d, qt_scalar value) {
  qt_cell cell;
  memset(&cell, 0, sizeof cell);
  qt_scalar_store(d, &cell, value);
  W w;
  memcpy(&w, cell.bytes, sizeof w);
  return w;
}

template <typename W>
static void where_launch(qt_device *dev, qt_view *const *v, const where_operands<W> &x,
                         bool has_a, bool has_b) {
  cudaStream_t stream = qt_cuda_context(dev)->stream;
  int64_t n = v[0]->numel;
  W *dst = (W *)v[0]->data;
  const uint8_t *cond = (const uint8_t *)v[1]->data;
  bool contiguous = v[0]->ndim == 1 && v[0]->stride[0] == 1 && v[1]->stride[0] == 1 &&
                    (!has_a || v[2]->stride[0] == 1) && (!has_b || v[3]->stride[0] == 1);
  if (contiguous) {
    constexpr int V = 16 / sizeof(W);
    bool packed = ((uintptr_t)dst & 15) == 0 && ((uintptr_t)cond & (V - 1)) == 0 &&
                  (!has_a || ((uintptr_t)x.a & 15) == 0) && (!has_b || ((uintptr_t)x.b & 15) == 0);
    unsigned blocks = qt_cuda_blocks(dev, packed ? (n + V - 1) / V : n, MASK_THREADS);
    if (packed)
      where_contiguous<W, true><<<blocks, MASK_THREADS, 0, stream>>>(dst, cond, x, n);
    else
      where_contiguous<W, false><<<blocks, MASK_THREADS, 0, stream>>>(dst, cond, x, n);
    return;
  }
  where_geometry g;
  g.ndim = v[0]->ndim;
  for (int d = 0; d < QT_MAXDIM; d++) {
    g.size[d] = v[0]->size[d];
    for (int k = 0; k < 4; k++) g.stride[k][d] = v[k]->stride[d];
  }
  unsigned blocks = qt_cuda_blocks(dev, n, MASK_THREADS);
  if (n < ((int64_t)1 << 32))
    where_strided<uint32_t, W><<<blocks, MASK_THREADS, 0, stream>>>(dst, cond, x, g, n);
  else
    where_strided<int64_t, W><<<blocks, MASK_THREADS, 0, stream>>>(dst, cond, x, g, n);
}

extern "C" int qt_cuda_where(qt_device *dev, const qt_view *dst, const qt_view *cond,
                             const qt_view *a, qt_scalar a_value, const qt_view *b,
                             qt_scalar b_value, qt_err *err) {
  if ((unsigned)dst->dtype >= (unsigned)QT_NDTYPES || cond->dtype != QT_BOOL ||
      (a != NULL && a->dtype != dst->dtype) || (b != NULL && b->dtype != dst->dtype))
    return qt_errorf(err, "where: the condition must be bool and the values of the result's "
                     "dtype");
  if (qt_cuda_enter(dev, "where", err) != 0) return -1;
  if (dst->numel == 0) return 0;
  /* a missing operand is a view of dst's shape with stride 0 everywhere: it collapses with
  ** the others and its pointer stays NULL, which the kernels read as "use the value" */
  qt_view views[4] = { *dst, *cond, *dst, *dst };
  for (int k = 2; k < 4; k++) {
    const qt_view *given = k == 2 ? a : b;
    if (given != NULL) {
      views[k] = *given;
    } else {
      views[k].data = NULL;
      for (int d = 0; d < QT_MAXDIM; d++) views[k].stride[d] = 0;
    }
  }
  qt_view *ptrs[4] = { &views[0], &views[1], &views[2], &views[3] };
  qt_views_collapse(ptrs, 4);
  mask_width_switch(dst->dtype, [&](auto zero) {
    using W = decltype(zero);
    where_operands<W> x;
    x.a = (const W *)views[2].data;
    x.b = (const W *)views[3].data;
    x.a_value = where_bits<W>(dst->dtype, a_value);
    x.b_value = where_bits<W>(dst->dtype, b_value);
    where_launch<W>(dev, ptrs, x, a != NULL, b != NULL);
  });
  return qt_cuda_check_launch(dev, "where", err);
}

/* ------------------------------------------------------------------ compaction */

/* A view's element at row-major index i, for thrust's transform iterator: strided sources
** and masks (broadcast ones included) as CUB reads them. */
template <typename T>
struct mask_strided_read {
  const T *data;
  int ndim;
  int64_t size[QT_MAXDIM];
  int64_t stride[QT_MAXDIM];
  __host__ __device__ T operator()(int64_t i) const {
    int64_t off = 0;
    for (int d = ndim - 1; d > 0; d--) {
      int64_t q = i / size[d];
      off += (i - q * size[d]) * stride[d];
      i = q;
    }
    return data[off + i * stride[0]];
  }
};

template <typename T>
static mask_strided_read<T> mask_reader(const qt_view &v) {
  mask_strided_read<T> r;
  r.data = (const T *)v.data;
  r.ndim = v.ndim;
  for (int d = 0; d < QT_MAXDIM; d++) r.size[d] = v.size[d], r.stride[d] = v.stride[d];
  return r;
}

template <typename T>
static thrust::transform_iterator<mask_strided_read<T>, thrust::counting_iterator<int64_t>>
mask_strided(const qt_view &v) {
  return thrust::make_transform_iterator(thrust::counting_iterator<int64_t>(0), mask_reader<T>(v));
}

/* Where CUB's count output goes (the first 256 bytes) and its temporary storage after it. */
#define MASK_SCRATCH_HEAD 256

/* DeviceSelect::Flagged of n items from in (flags by flags) into out, on dev's stream:
** sizes the temporary storage, takes it from the caching allocator, runs, gives it back. */
template <typename In, typename Flags, typename Out>
static int mask_select(qt_device *dev, const char *op, In in, Flags flags, Out out, int64_t n,
                       qt_err *err) {
  cudaStream_t stream = qt_cuda_context(dev)->stream;
  size_t temp_bytes = 0;
  if (qt_cuda_check(dev, cub::DeviceSelect::Flagged(NULL, temp_bytes, in, flags, out,
                                                    (int64_t *)NULL, n, stream), op, err))
    return -1;
  size_t total = MASK_SCRATCH_HEAD + temp_bytes;
  void *scratch = NULL;
  if (qt_cuda_scratch(dev, total, &scratch, err)) return -1;
  int64_t *selected = (int64_t *)scratch;
  void *temp = (char *)scratch + MASK_SCRATCH_HEAD;
  cudaError_t status = cub::DeviceSelect::Flagged(temp, temp_bytes, in, flags, out, selected, n,
                                                  stream);
  qt_cuda_scratch_free(dev, scratch, total);
  return qt_cuda_check(dev, status, op, err);
}

template <typename W>
static int masked_select_run(qt_device *dev, qt_view *const *v, W *out, qt_err *err) {
  const char *op = "masked_select";
  const qt_view &src = *v[0], &mask = *v[1];
  int64_t n = src.numel;
  if (src.ndim == 1 && src.stride[0] == 1 && mask.stride[0] == 1)
    return mask_select(dev, op, (const W *)src.data, (const bool *)mask.data, out, n, err);
  return mask_select(dev, op, mask_strided<W>(src), mask_strided<bool>(mask), out, n, err);
}

extern "C" int qt_cuda_masked_select(qt_device *dev, const qt_view *dst, const qt_view *src,
                                     const qt_view *mask, qt_err *err) {
  if ((unsigned)src->dtype >= (unsigned)QT_NDTYPES || mask->dtype != QT_BOOL ||
      dst->dtype != src->dtype || dst->ndim != 1 || (dst->size[0] > 1 && dst->stride[0] != 1))
    return qt_errorf(err, "masked_select: the mask must be bool and the result 1-D, "
                     "contiguous, of the source's dtype");
  if (qt_cuda_enter(dev, "masked_select", err) != 0) return -1;
  if (dst->numel == 0 || src->numel == 0) return 0;
  qt_view views[2] = { *src, *mask };
  qt_view *ptrs[2] = { &views[0], &views[1] };
  qt_views_collapse(ptrs, 2);
  int rc = -1;
  mask_width_switch(src->dtype, [&](auto zero) {
    using W = decltype(zero);
    rc = masked_select_run<W>(dev, ptrs, (W *)dst->data, err);
  });
  return rc;
}

/* Row k of dst = the 1-based position of row-major index linear[k] in a tensor of nd dims
** of these sizes. */
struct mask_shape {
  int64_t size[QT_MAXDIM];
};

template <typename IndexT>
__global__ void nonzero_unravel(int64_t *dst, const int64_t *linear, int64_t n, int nd,
                                mask_shape shape) {
  for (int64_t k = mask_thread_index(); k < n; k += mask_thread_count()) {
    IndexT i = (IndexT)linear[k];
    int64_t *row = dst + k * nd;
    for (int d = nd - 1; d > 0; d--) {
      IndexT s = (IndexT)shape.size[d];
      IndexT q = i / s;
      row[d] = (int64_t)(i - q * s) + 1;
      i = q;
    }
    row[0] = (int64_t)i + 1;
  }
}

/* The selected row-major positions from a counting iterator: a 1-D mask's start at 1 and
** are the result itself; with more dims they go, 0-based, to scratch and are unravelled
** into rows by a second kernel. The mask is collapsed alone for reading (row-major order is
** kept), its own sizes are what positions are unravelled by. */
extern "C" int qt_cuda_nonzero(qt_device *dev, const qt_view *dst, const qt_view *mask,
                               qt_err *err) {
  const char *op = "nonzero";
  int nd = mask->ndim;
  if (mask->dtype != QT_BOOL || dst->dtype != QT_I64 || dst->ndim != 2 || nd < 1 ||
      dst->size[1] != nd)
    return qt_errorf(err, "nonzero: the mask must be bool with dims and the result n x ndim "
                     "int64");
  if (qt_cuda_enter(dev, op, err) != 0) return -1;
  int64_t count = dst->size[0], n = mask->numel;
  if (count == 0 || n == 0) return 0;
  qt_view m = *mask;
  qt_view *mp = &m;
  qt_views_collapse(&mp, 1);
  bool dense = m.ndim == 1 && m.stride[0] == 1;
  int64_t *out = (int64_t *)dst->data, *linear = out;
  size_t linear_bytes = 0;
  if (nd > 1) {
    linear_bytes = (size_t)count * sizeof(int64_t);
    if (qt_cuda_scratch(dev, linear_bytes, (void **)&linear, err)) return -1;
  }
  thrust::counting_iterator<int64_t> positions(nd > 1 ? 0 : 1);
  int rc = dense ? mask_select(dev, op, positions, (const bool *)m.data, linear, n, err)
                 : mask_select(dev, op, positions, mask_strided<bool>(m), linear, n, err);
  if (rc == 0 && nd > 1) {
    mask_shape shape;
    for (int d = 0; d < QT_MAXDIM; d++) shape.size[d] = d < nd ? mask->size[d] : 1;
    cudaStream_t stream = qt_cuda_context(dev)->stream;
    unsigned blocks = qt_cuda_blocks(dev, count, MASK_THREADS);
    if (n < ((int64_t)1 << 32))
      nonzero_unravel<uint32_t><<<blocks, MASK_THREADS, 0, stream>>>(out, linear, count, nd, shape);
    else
      nonzero_unravel<int64_t><<<blocks, MASK_THREADS, 0, stream>>>(out, linear, count, nd, shape);
    rc = qt_cuda_check_launch(dev, op, err);
  }
  if (nd > 1) qt_cuda_scratch_free(dev, linear, linear_bytes);
  return rc;
}
