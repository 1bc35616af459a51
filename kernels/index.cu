/*
** index.cu — the indexing slots of the CUDA device: gather, index_select, take, scatter,
** index_add, scatter_add, index_fill, index_copy (semantics in runtime/device.h). The last
** three are walks of the general kernel: scatter_add is scatter's walk with index_add's
** atomic sums, index_fill and index_copy index_add's walk with scatter's plain stores.
**
** Index values are 1-based int32 or int64 and are validated inside the kernels, in the same
** pass that uses them: a value outside 1..bound is recorded with qt_cuda_report_index (the
** first one wins; cuda_device.cu turns it into the error at the next sync) and its element is
** skipped: gather/index_select/take write 0 there, the writing slots write nothing. No extra
** pass, no host sync, no trap, and nothing outside a tensor is ever touched.
**
** Kernels that only move elements (everything but index_add) work on raw bits: one unsigned
** type per element size (1, 2, 4 or 8 bytes) covers every dtype of that size with one
** instantiation. index_add adds, so it is typed (gat_atomic_add): float/double atomicAdd, int
** atomicAdd, int64 through unsigned long long atomicAdd (two's complement makes the
** wrap-around the same as signed addition), 1- and 2-byte integers by atomicCAS on the aligned
** 32-bit word holding them (CUDA has no narrower atomic add), bool as a logical or (PyTorch's
** index_add_ on bool: true + anything is true) by atomicOr on that word.
**
** Paths, fastest first:
**   - rows:    out[r][c] = src[r][idx[r][c]-1] with idx and out unit-stride along c; covers the
**              1-D gather, take of a contiguous source, and gather along the last dim (leading
**              dims collapsed). 4 indices per thread with 16-byte index loads and one
**              4-element store (4 to 32 bytes) when aligned.
**   - slices:  index_select of contiguous tensors: every selected slice is a contiguous run,
**              copied by a group of threads with 16-byte accesses.
**   - general: one thread per element of the iteration shape with arbitrary strides.
*/
#include <string.h>

#include <type_traits>

#include "dispatch.cuh"
#include "kernels.h"

#define GAT_THREADS 256

typedef unsigned char gat_u8;
typedef unsigned short gat_u16;
typedef unsigned int gat_u32;
typedef unsigned long long gat_u64;

/* ------------------------------------------------------------------ device helpers */

/* 1 <= v <= bound, as one unsigned compare: v - 1 is taken in unsigned arithmetic, so
** v = 0 and negative v (INT64_MIN included, where a signed v - 1 would overflow) wrap to
** huge values and fail. */
template <typename I>
__device__ __forceinline__ bool gat_in_range(I v, int64_t bound) {
  return (gat_u64)(long long)v - 1ull < (gat_u64)bound;
}

/* Four consecutive indices from a 16-byte aligned address. */
__device__ __forceinline__ void gat_load4(const int *p, int *v) {
  int4 q = *reinterpret_cast<const int4 *>(p);
  v[0] = q.x; v[1] = q.y; v[2] = q.z; v[3] = q.w;
}
__device__ __forceinline__ void gat_load4(const long long *p, long long *v) {
  longlong2 a = reinterpret_cast<const longlong2 *>(p)[0];
  longlong2 b = reinterpret_cast<const longlong2 *>(p)[1];
  v[0] = a.x; v[1] = a.y; v[2] = b.x; v[3] = b.y;
}
/* Four consecutive elements to an address aligned to their 4 * sizeof(E) bytes (the rows
** kernel's VEC case: out and its row starts 16-byte aligned, units of 4 elements). */
__device__ __forceinline__ void gat_store4(gat_u8 *p, const gat_u8 *x) {
  *reinterpret_cast<uchar4 *>(p) = make_uchar4(x[0], x[1], x[2], x[3]);
}
__device__ __forceinline__ void gat_store4(gat_u16 *p, const gat_u16 *x) {
  *reinterpret_cast<ushort4 *>(p) = make_ushort4(x[0], x[1], x[2], x[3]);
}
__device__ __forceinline__ void gat_store4(gat_u32 *p, const gat_u32 *x) {
  *reinterpret_cast<uint4 *>(p) = make_uint4(x[0], x[1], x[2], x[3]);
}
__device__ __forceinline__ void gat_store4(gat_u64 *p, const gat_u64 *x) {
  reinterpret_cast<ulonglong2 *>(p)[0] = make_ulonglong2(x[0], x[1]);
  reinterpret_cast<ulonglong2 *>(p)[1] = make_ulonglong2(x[2], x[3]);
}

/* *p += v for an element narrower than 4 bytes, through the aligned 32-bit word holding it
** (an element of 1 or 2 bytes never straddles one): read the word, replace the element's
** bytes by the wrapped sum, compare-and-swap, retry when another thread changed the word in
** between. The word's other bytes are written back unchanged, atomically, so neighbours
** updated by other threads at the same time are never lost; the word lies inside the
** allocation (device allocations are at least 256-byte aligned). Little-endian: the element
** at byte offset k of the word is bits 8k up. */
template <typename T>
__device__ __forceinline__ void gat_atomic_add_narrow(T *p, T v) {
  static_assert(sizeof(T) == 1 || sizeof(T) == 2, "gat_atomic_add_narrow: 1 or 2 bytes");
  unsigned int *word = reinterpret_cast<unsigned int *>((uintptr_t)p & ~(uintptr_t)3);
  const unsigned shift = (unsigned)((uintptr_t)p & 3) * 8u;
  const unsigned mask = (sizeof(T) == 1 ? 0xffu : 0xffffu) << shift;
  unsigned add = 0;
  memcpy(&add, &v, sizeof v);  /* the element's bits in the low bytes, zero above */
  unsigned old = *word, assumed;
  do {
    assumed = old;
    const unsigned sum = (((assumed & mask) >> shift) + add) << shift;
    old = atomicCAS(word, assumed, (assumed & ~mask) | (sum & mask));
  } while (old != assumed);
}

/* *p += v, atomically, for the element type T of an index_add (qt_cuda_word's: int64 is
** long long). bool: true when either is (setting the byte to 1 is an atomicOr on its word;
** adding false changes nothing). */
template <typename T>
__device__ __forceinline__ void gat_atomic_add(T *p, T v) {
  if constexpr (std::is_same_v<T, bool>) {
    if (v) {
      unsigned int *word = reinterpret_cast<unsigned int *>((uintptr_t)p & ~(uintptr_t)3);
      atomicOr(word, 1u << ((unsigned)((uintptr_t)p & 3) * 8u));
    }
  } else if constexpr (std::is_integral_v<T> && sizeof(T) < 4) {
    gat_atomic_add_narrow(p, v);
  } else if constexpr (std::is_same_v<T, long long>) {
    atomicAdd(reinterpret_cast<gat_u64 *>(p), (gat_u64)v);
  } else {
    atomicAdd(p, v);  /* float, double, int (and the 16-bit floats' own overloads) */
  }
}

/* ------------------------------------------------------------------ rows kernel */

/* out[r*os + c] = src[r*ss + (idx[r*is + c] - 1)*sc] for r < rows, c < cols.
** Work comes in units of 4 consecutive columns of one row; with VEC (every row start of idx
** and out 16-byte aligned) a full unit is one or two 16-byte index loads, four independent
** source loads and one 16-byte store: the loads in flight are what a random gather needs.
** The position reported for a bad value is the row-major one over (rows, cols). */
template <typename E, typename I, bool VEC, bool FLAT>
__global__ void __launch_bounds__(GAT_THREADS) gat_rows_kernel(E *__restrict__ out, const E *__restrict__ src,
                                const I *__restrict__ idx, int64_t rows, int64_t cols,
                                int64_t os, int64_t is, int64_t ss, int64_t sc, int64_t bound,
                                qt_cuda_index_error *rec, int op) {
  const int64_t units = (cols + 3) / 4;
  const int64_t total = rows * units;
  const int64_t step = (int64_t)gridDim.x * blockDim.x;
  for (int64_t t = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; t < total; t += step) {
    int64_t r, u;
    if (FLAT) {
      r = 0; u = t;
    } else if (total <= 0xffffffffLL) {
      r = (gat_u32)t / (gat_u32)units; u = t - r * units;
    } else {
      r = t / units; u = t - r * units;
    }
    const int64_t c0 = u * 4;
    const I *irow = idx + r * is + c0;
    E *orow = out + r * os + c0;
    const E *srow = src + r * ss;
    const int64_t pos = r * cols + c0 + 1;
    if (VEC && c0 + 4 <= cols) {
      I v[4];
      gat_load4(irow, v);
      E x[4];
#pragma unroll
      for (int k = 0; k < 4; k++) {
        if (gat_in_range(v[k], bound)) {
          x[k] = srow[((int64_t)v[k] - 1) * sc];
        } else {
          x[k] = 0;
          qt_cuda_report_index(rec, op, v[k], bound, pos + k);
        }
      }
      gat_store4(orow, x);
    } else {
      const int n = (int)(cols - c0 < 4 ? cols - c0 : 4);
      for (int k = 0; k < n; k++) {
        I v = irow[k];
        E x = 0;
        if (gat_in_range(v, bound)) x = srow[((int64_t)v - 1) * sc];
        else qt_cuda_report_index(rec, op, v, bound, pos + k);
        orow[k] = x;
      }
    }
  }
}

/* ------------------------------------------------------------------ slices kernel */

/* index_select of contiguous tensors seen as (outer, n_src, inner) -> (outer, n_idx, inner),
** in units U (16 bytes when aligned, else the element itself): task (o, k) copies `inner`
** units from src row o*n_src + idx[k]-1 to dst row o*n_idx + k. threadIdx.y picks the task
** within the block, threadIdx.x walks the row; a bad index zeroes the dst row. */
template <typename U, typename I>
__global__ void gat_slices_kernel(U *__restrict__ dst, const U *__restrict__ src,
                                  const I *__restrict__ idx, int64_t is, int64_t outer,
                                  int64_t n_src, int64_t n_idx, int64_t inner,
                                  qt_cuda_index_error *rec, int op) {
  const int64_t tasks = outer * n_idx;
  for (int64_t t = (int64_t)blockIdx.y * blockDim.y + threadIdx.y; t < tasks;
       t += (int64_t)gridDim.y * blockDim.y) {
    const int64_t o = t / n_idx, k = t - o * n_idx;
    const I v = idx[k * is];
    U *drow = dst + t * inner;
    const bool ok = gat_in_range(v, n_src);
    if (!ok && blockIdx.x == 0 && threadIdx.x == 0) qt_cuda_report_index(rec, op, v, n_src, k + 1);
    const U *srow = src + (o * n_src + (ok ? (int64_t)v - 1 : 0)) * inner;
    for (int64_t j = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; j < inner;
         j += (int64_t)gridDim.x * blockDim.x) {
      drow[j] = ok ? srow[j] : U{};
    }
  }
}

/* ------------------------------------------------------------------ general kernel */

/* The walk of the general kernel: one thread per element of the iteration shape `size`.
** `at` strides address the tensor read or written at the iteration coordinates, `sel` strides
** the tensor whose coordinate `dim` is replaced by the index value (sel[dim] steps along it),
** `idx` strides the index: all coordinates (element mode: gather, scatter) or only
** coordinate `dim` (slice mode: index_select, index_add; 1-D index, stride idx[dim]). */
typedef struct gat_geom {
  int ndim;
  int dim;
  int64_t size[QT_MAXDIM];
  int64_t at[QT_MAXDIM];
  int64_t sel[QT_MAXDIM];
  int64_t idx[QT_MAXDIM];
} gat_geom;

enum { GAT_READ, GAT_WRITE, GAT_ADD };

/* READ:  at[.] = sel[. with dim = v-1]   (gather, index_select; 0 for a bad index)
** WRITE: sel[. with dim = v-1] = at[.]   (scatter; `value` when at_ptr is NULL)
** ADD:   sel[. with dim = v-1] += at[.]  (index_add, atomically)
** Positions: element mode the linear iteration index + 1, slice mode coordinate dim + 1. */
template <typename E, typename I, int ACTION, bool SLICE>
__global__ void gat_general_kernel(gat_geom g, E *at_ptr, E *sel_ptr, const I *__restrict__ idx,
                                   int64_t n, int64_t bound, E value, qt_cuda_index_error *rec,
                                   int op) {
  const int64_t step = (int64_t)gridDim.x * blockDim.x;
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += step) {
    int64_t rem = i, o_at = 0, o_sel = 0, o_idx = 0, c_dim = 0;
    for (int d = g.ndim - 1; d >= 0; d--) {
      const int64_t s = g.size[d];
      const int64_t c = rem % s;
      rem /= s;
      o_at += c * g.at[d];
      if (d == g.dim) c_dim = c;
      else o_sel += c * g.sel[d];
      if (!SLICE) o_idx += c * g.idx[d];
    }
    if (SLICE) o_idx = c_dim * g.idx[g.dim];
    const I v = idx[o_idx];
    if (!gat_in_range(v, bound)) {
      qt_cuda_report_index(rec, op, v, bound, SLICE ? c_dim + 1 : i + 1);
      if (ACTION == GAT_READ) at_ptr[o_at] = 0;
      continue;
    }
    o_sel += ((int64_t)v - 1) * g.sel[g.dim];
    if constexpr (ACTION == GAT_READ) at_ptr[o_at] = sel_ptr[o_sel];
    else if constexpr (ACTION == GAT_WRITE) sel_ptr[o_sel] = at_ptr ? at_ptr[o_at] : value;
    else gat_atomic_add(&sel_ptr[o_sel], at_ptr[o_at]);
  }
}

/* take over a non-contiguous source: the walk is over index's shape (at = dst strides, idx =
** index strides, element mode), the source element is found from its row-major position. */
template <typename E, typename I>
__global__ void gat_take_kernel(gat_geom g, E *__restrict__ dst, const E *__restrict__ src,
                                qt_view src_view, const I *__restrict__ idx, int64_t n,
                                qt_cuda_index_error *rec, int op) {
  const int64_t step = (int64_t)gridDim.x * blockDim.x;
  const int64_t bound = src_view.numel;
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += step) {
    int64_t rem = i, o_at = 0, o_idx = 0;
    for (int d = g.ndim - 1; d >= 0; d--) {
      const int64_t s = g.size[d];
      const int64_t c = rem % s;
      rem /= s;
      o_at += c * g.at[d];
      o_idx += c * g.idx[d];
    }
    const I v = idx[o_idx];
    E x = 0;
    if (gat_in_range(v, bound)) x = src[qt_cuda_offset(src_view, (int64_t)v - 1)];
    else qt_cuda_report_index(rec, op, v, bound, i + 1);
    dst[o_at] = x;
  }
}

/* ------------------------------------------------------------------ host helpers */

/* Blocks for `work` items of one thread each: enough for every SM several times over,
** grid-stride loops beyond. */
static unsigned gat_blocks(const qt_cuda_ctx *c, int64_t work, unsigned threads) {
  int64_t blocks = (work + threads - 1) / threads;
  int64_t cap = (int64_t)(c->sm_count > 0 ? c->sm_count : 1) * 32;
  if (blocks > cap) blocks = cap;
  return (unsigned)(blocks < 1 ? 1 : blocks);
}

static bool gat_aligned16(const void *p) { return ((uintptr_t)p & 15) == 0; }

/* These slots check only what only they can see (device.h): the index values, in the
** kernels. The core has checked dims, dtypes and shapes; every element size the dtype list
** has is one gat_dispatch moves. */
#define GAT_ELSIZE_OK_(P, E, sfx, name, T, U, size, ...) \
  static_assert(size == 1 || size == 2 || size == 4 || size == 8, "index.cu: element size");
QT_DTYPE_LIST(GAT_ELSIZE_OK_, ~)
#undef GAT_ELSIZE_OK_

/* The raw bits of `value` in dtype d (scatter of a number). */
static gat_u64 gat_value_bits(qt_dtype d, qt_scalar value) {
  gat_u64 bits = 0;  /* the low bytes hold the element (little-endian) */
  qt_dtype_switch_all(d, [&](auto zero) {
    auto v = qt_scalar_as<decltype(zero)>(value);
    memcpy(&bits, &v, sizeof v);
  });
  return bits;
}

/* A view's dims as `count` (dims of size 1 keep whatever stride: they are never stepped). */
static int64_t gat_numel(const qt_view *v) {
  int64_t n = 1;
  for (int d = 0; d < v->ndim; d++) n *= v->size[d];
  return n;
}

static bool gat_contiguous(const qt_view *v) {
  int64_t expect = 1;
  for (int d = v->ndim - 1; d >= 0; d--) {
    if (v->size[d] != 1 && v->stride[d] != expect) return false;
    expect *= v->size[d];
  }
  return true;
}

/* ------------------------------------------------------------------ launchers */

template <typename E, typename I>
static int gat_launch_rows(qt_device *dev, const char *op_name, int op, void *out,
                           const void *src, const void *idx, int64_t rows, int64_t cols,
                           int64_t os, int64_t is, int64_t ss, int64_t sc, int64_t bound,
                           qt_err *err) {
  qt_cuda_ctx *c = qt_cuda_context(dev);
  const bool vec = gat_aligned16(out) && gat_aligned16(idx) &&
                   (rows == 1 || (((os * (int64_t)sizeof(E)) & 15) == 0 &&
                                  ((is * (int64_t)sizeof(I)) & 15) == 0));
  const int64_t work = rows * ((cols + 3) / 4);
  const unsigned blocks = gat_blocks(c, work, GAT_THREADS);
  E *o = (E *)out;
  const E *s = (const E *)src;
  const I *i = (const I *)idx;
  qt_cuda_index_error *rec = c->index_error_dev;
  if (rows == 1) {
    if (vec)
      gat_rows_kernel<E, I, true, true><<<blocks, GAT_THREADS, 0, c->stream>>>(
          o, s, i, 1, cols, 0, 0, 0, sc, bound, rec, op);
    else
      gat_rows_kernel<E, I, false, true><<<blocks, GAT_THREADS, 0, c->stream>>>(
          o, s, i, 1, cols, 0, 0, 0, sc, bound, rec, op);
  } else if (vec) {
    gat_rows_kernel<E, I, true, false><<<blocks, GAT_THREADS, 0, c->stream>>>(
        o, s, i, rows, cols, os, is, ss, sc, bound, rec, op);
  } else {
    gat_rows_kernel<E, I, false, false><<<blocks, GAT_THREADS, 0, c->stream>>>(
        o, s, i, rows, cols, os, is, ss, sc, bound, rec, op);
  }
  return qt_cuda_check_launch(dev, op_name, err);
}

template <typename E, typename I, int ACTION, bool SLICE>
static int gat_launch_general(qt_device *dev, const char *op_name, int op, const gat_geom *g,
                              void *at_ptr, void *sel_ptr, const void *idx, int64_t n,
                              int64_t bound, gat_u64 value_bits, qt_err *err) {
  qt_cuda_ctx *c = qt_cuda_context(dev);
  E value;
  memset(&value, 0, sizeof value);
  /* the element is the low sizeof(E) bytes of value_bits (little-endian) */
  if (ACTION == GAT_WRITE) memcpy(&value, &value_bits, sizeof value);
  gat_general_kernel<E, I, ACTION, SLICE><<<gat_blocks(c, n, GAT_THREADS), GAT_THREADS, 0,
                                            c->stream>>>(*g, (E *)at_ptr, (E *)sel_ptr,
                                                         (const I *)idx, n, bound, value,
                                                         c->index_error_dev, op);
  return qt_cuda_check_launch(dev, op_name, err);
}

/* Calls body(E(), I()) with E the raw element type for `elsize` bytes (1, 2, 4 or 8;
** gat_check_elsize has refused any other) and I the index type: the one switch every slot
** but index_add goes through. */
template <typename Body>
static int gat_dispatch(size_t elsize, qt_dtype idx_dtype, Body body) {
  auto by_index = [&](auto e) {
    return idx_dtype == QT_I32 ? body(e, int()) : body(e, 0LL);
  };
  switch (elsize) {
    case 1: return by_index(gat_u8());
    case 2: return by_index(gat_u16());
    case 4: return by_index(gat_u32());
    default: return by_index(gat_u64());
  }
}

/* ------------------------------------------------------------------ gather */

/* The rows path applies when the gather is along the last dim, idx and dst step by one along
** it (or it has size 1), and the leading dims of all three views collapse into one row index
** with idx's leading sizes. Fills rows/cols and the row strides on success. */
static bool gat_rows_shape(const qt_view *dst, const qt_view *src, const qt_view *index, int dim,
                           int64_t *rows, int64_t *cols, int64_t *os, int64_t *is,
                           int64_t *ss) {
  const int nd = index->ndim;
  if (nd < 1 || dim != nd - 1) return false;
  const int64_t k = index->size[nd - 1];
  if (k != 1 && (index->stride[nd - 1] != 1 || dst->stride[nd - 1] != 1)) return false;
  /* Fold the leading dims d = 0 .. nd-2 from the inside out: each must step by
  ** (stride of the next one) * (idx size of the next one), in all three views. */
  int64_t r = 1, o_s = 0, i_s = 0, s_s = 0;
  bool have = false;
  for (int d = nd - 2; d >= 0; d--) {
    const int64_t n = index->size[d];
    if (n == 1) continue;
    if (!have) {
      o_s = dst->stride[d]; i_s = index->stride[d]; s_s = src->stride[d];
      have = true;
    } else if (dst->stride[d] != o_s * r || index->stride[d] != i_s * r ||
               src->stride[d] != s_s * r) {
      return false;
    }
    r *= n;
  }
  *rows = r;
  *cols = k;
  *os = o_s;
  *is = i_s;
  *ss = s_s;
  return true;
}

/* ---- typed bodies, one per (element size, index dtype) */

template <typename E, typename I>
static int gat_gather_typed(qt_device *dev, const qt_view *dst, const qt_view *src, int dim,
                            const qt_view *index, int64_t n, qt_err *err) {
  const int64_t bound = src->size[dim];
  int64_t rows, cols, os, is, ss;
  if (gat_rows_shape(dst, src, index, dim, &rows, &cols, &os, &is, &ss))
    return gat_launch_rows<E, I>(dev, "gather", QT_CUDA_OP_GATHER, dst->data, src->data,
                                 index->data, rows, cols, os, is, ss, src->stride[dim], bound,
                                 err);
  gat_geom g;
  memset(&g, 0, sizeof g);
  g.ndim = index->ndim;
  g.dim = dim;
  for (int d = 0; d < g.ndim; d++) {
    g.size[d] = index->size[d];
    g.at[d] = dst->stride[d];
    g.sel[d] = src->stride[d];
    g.idx[d] = index->stride[d];
  }
  return gat_launch_general<E, I, GAT_READ, false>(dev, "gather", QT_CUDA_OP_GATHER, &g,
                                                   dst->data, src->data, index->data, n,
                                                   bound, 0, err);
}

/* dst[i][j] = src[index[i][j]][j] (dim 0), dst of index's shape. */
extern "C" int qt_cuda_gather(qt_device *dev, const qt_view *dst, const qt_view *src, int dim,
                              const qt_view *index, qt_err *err) {
  if (qt_cuda_enter(dev, "gather", err)) return -1;
  const int64_t n = gat_numel(index);
  if (n == 0) return 0;
  return gat_dispatch(qt_elsize(src->dtype), index->dtype, [&](auto e, auto i) {
    return gat_gather_typed<decltype(e), decltype(i)>(dev, dst, src, dim, index, n, err);
  });
}

/* ------------------------------------------------------------------ take */

template <typename E, typename I>
static int gat_take_typed(qt_device *dev, const qt_view *dst, const qt_view *src,
                          const qt_view *index, int64_t n, qt_err *err) {
  qt_cuda_ctx *c = qt_cuda_context(dev);
  qt_view s = *src;
  qt_view *sv = &s;
  qt_views_collapse(&sv, 1);
  const int64_t bound = gat_numel(src);
  s.numel = bound;
  /* A source that is one strided run plus an index and dst that are contiguous: rows path. */
  if (s.ndim == 1 && gat_contiguous(index) && gat_contiguous(dst))
    return gat_launch_rows<E, I>(dev, "take", QT_CUDA_OP_TAKE, dst->data, src->data,
                                 index->data, 1, n, 0, 0, 0, s.stride[0], bound, err);
  gat_geom g;
  memset(&g, 0, sizeof g);
  g.ndim = index->ndim;
  g.dim = -1;
  for (int d = 0; d < g.ndim; d++) {
    g.size[d] = index->size[d];
    g.at[d] = dst->stride[d];
    g.idx[d] = index->stride[d];
  }
  gat_take_kernel<E, I><<<gat_blocks(c, n, GAT_THREADS), GAT_THREADS, 0, c->stream>>>(
      g, (E *)dst->data, (const E *)src->data, s, (const I *)index->data, n,
      c->index_error_dev, QT_CUDA_OP_TAKE);
  return qt_cuda_check_launch(dev, "take", err);
}

/* dst[k] = flat(src)[index[k]] over src's row-major order; dst has index's shape. */
extern "C" int qt_cuda_take(qt_device *dev, const qt_view *dst, const qt_view *src,
                            const qt_view *index, qt_err *err) {
  if (qt_cuda_enter(dev, "take", err)) return -1;
  const int64_t n = gat_numel(index);
  if (n == 0) return 0;
  return gat_dispatch(qt_elsize(src->dtype), index->dtype, [&](auto e, auto i) {
    return gat_take_typed<decltype(e), decltype(i)>(dev, dst, src, index, n, err);
  });
}

/* ------------------------------------------------------------------ index_select */

/* The slices path: src and dst contiguous, runs of `inner` elements of at least 128 bytes
** (shorter runs waste most of a warp: the general kernel does those). */
template <typename U, typename I>
static int gat_launch_slices(qt_device *dev, const qt_view *dst, const qt_view *src,
                             const qt_view *index, int64_t is, int64_t outer, int64_t n_src,
                             int64_t n_idx, int64_t inner_units, qt_err *err) {
  qt_cuda_ctx *c = qt_cuda_context(dev);
  unsigned bx = 32;
  while (bx < 256 && (int64_t)bx < inner_units) bx *= 2;
  const unsigned by = 256 / bx;
  const int64_t tasks = outer * n_idx;
  int64_t gy = (tasks + by - 1) / by;
  if (gy > 65535) gy = 65535;
  /* Few long slices: spread each one over several blocks too. */
  const int64_t want = (int64_t)(c->sm_count > 0 ? c->sm_count : 1) * 8;
  int64_t gx = 1;
  if (gy < want) {
    gx = (want + gy - 1) / gy;
    const int64_t most = (inner_units + bx - 1) / bx;
    if (gx > most) gx = most;
    if (gx < 1) gx = 1;
  }
  dim3 grid((unsigned)gx, (unsigned)gy), block(bx, by);
  gat_slices_kernel<U, I><<<grid, block, 0, c->stream>>>(
      (U *)dst->data, (const U *)src->data, (const I *)index->data, is, outer, n_src, n_idx,
      inner_units, c->index_error_dev, QT_CUDA_OP_INDEX_SELECT);
  return qt_cuda_check_launch(dev, "index_select", err);
}

template <typename E, typename I>
static int gat_index_select_typed(qt_device *dev, const qt_view *dst, const qt_view *src,
                                  int dim, const qt_view *index, int64_t n, qt_err *err) {
  const int64_t bound = src->size[dim];
  const int64_t is = index->ndim > 0 ? index->stride[0] : 0;
  const int64_t n_idx = dst->size[dim];
  if (gat_contiguous(src) && gat_contiguous(dst)) {
    int64_t outer = 1, inner = 1;
    for (int d = 0; d < dim; d++) outer *= src->size[d];
    for (int d = dim + 1; d < src->ndim; d++) inner *= src->size[d];
    const int64_t run_bytes = inner * (int64_t)sizeof(E);
    if (run_bytes >= 128) {
      if ((run_bytes & 15) == 0 && gat_aligned16(src->data) && gat_aligned16(dst->data))
        return gat_launch_slices<uint4, I>(dev, dst, src, index, is, outer, bound, n_idx,
                                           run_bytes / 16, err);
      return gat_launch_slices<E, I>(dev, dst, src, index, is, outer, bound, n_idx, inner, err);
    }
  }
  gat_geom g;
  memset(&g, 0, sizeof g);
  g.ndim = dst->ndim;
  g.dim = dim;
  for (int d = 0; d < g.ndim; d++) {
    g.size[d] = dst->size[d];
    g.at[d] = dst->stride[d];
    g.sel[d] = src->stride[d];
  }
  g.idx[dim] = is;
  return gat_launch_general<E, I, GAT_READ, true>(dev, "index_select", QT_CUDA_OP_INDEX_SELECT,
                                                  &g, dst->data, src->data, index->data, n,
                                                  bound, 0, err);
}

/* dst = src with slices index[k] along dim; index is 1-D. */
extern "C" int qt_cuda_index_select(qt_device *dev, const qt_view *dst, const qt_view *src,
                                    int dim, const qt_view *index, qt_err *err) {
  if (qt_cuda_enter(dev, "index_select", err)) return -1;
  const int64_t n = gat_numel(dst);
  if (n == 0) return 0;
  return gat_dispatch(qt_elsize(src->dtype), index->dtype, [&](auto e, auto i) {
    return gat_index_select_typed<decltype(e), decltype(i)>(dev, dst, src, dim, index, n, err);
  });
}

/* ------------------------------------------------------------------ the writing walks' geometry */

/* The geometry of the slice-mode walks (index_add, index_copy, index_fill): the iteration
** shape `size` (src's, or dst's with #index along dim), dst stepped by sel with the index
** value along dim, src (at) by its own strides (NULL: none, a value is written). */
static void gat_slices_geom(gat_geom *g, const qt_view *dst, int dim, const qt_view *index,
                            const int64_t *size, const qt_view *src) {
  memset(g, 0, sizeof *g);
  g->ndim = dst->ndim;
  g->dim = dim;
  for (int d = 0; d < g->ndim; d++) {
    g->size[d] = size[d];
    g->at[d] = src ? src->stride[d] : 0;
    g->sel[d] = dst->stride[d];
  }
  g->idx[dim] = index->ndim > 0 ? index->stride[0] : 0;
}

/* scatter's geometry (element mode: the walk is over index's shape). */
static void gat_scatter_geom(gat_geom *g, const qt_view *dst, int dim, const qt_view *index,
                             const qt_view *src) {
  memset(g, 0, sizeof *g);
  g->ndim = index->ndim;
  g->dim = dim;
  for (int d = 0; d < g->ndim; d++) {
    g->size[d] = index->size[d];
    g->at[d] = src ? src->stride[d] : 0;
    g->sel[d] = dst->stride[d];
    g->idx[d] = index->stride[d];
  }
}

/* ------------------------------------------------------------------ scatter */

template <typename E, typename I>
static int gat_scatter_typed(qt_device *dev, const qt_view *dst, int dim, const qt_view *index,
                             const qt_view *src, gat_u64 value_bits, int64_t n, qt_err *err) {
  gat_geom g;
  gat_scatter_geom(&g, dst, dim, index, src);
  return gat_launch_general<E, I, GAT_WRITE, false>(dev, "scatter", QT_CUDA_OP_SCATTER, &g,
                                                    src ? src->data : NULL, dst->data,
                                                    index->data, n, dst->size[dim], value_bits,
                                                    err);
}

/* dst[index[i][j]][j] = src[i][j] (dim 0), or `value` when src is NULL. Duplicate targets:
** plain stores, any one of the writers wins. */
extern "C" int qt_cuda_scatter(qt_device *dev, const qt_view *dst, int dim, const qt_view *index,
                               const qt_view *src, qt_scalar value, qt_err *err) {
  if (qt_cuda_enter(dev, "scatter", err)) return -1;
  const int64_t n = gat_numel(index);
  if (n == 0) return 0;
  const gat_u64 bits = gat_value_bits(dst->dtype, value);
  return gat_dispatch(qt_elsize(dst->dtype), index->dtype, [&](auto e, auto i) {
    return gat_scatter_typed<decltype(e), decltype(i)>(dev, dst, dim, index, src, bits, n, err);
  });
}

/* ------------------------------------------------------------------ index_add, scatter_add */

/* The adding walk, typed by dst's dtype (the sums need it: gat_atomic_add). */
template <bool SLICE>
static int gat_add_by_dtype(qt_device *dev, const char *op_name, int op, const gat_geom *g,
                            const qt_view *dst, int dim, const qt_view *index,
                            const qt_view *src, int64_t n, qt_err *err) {
  int rc = -1;
  if (!qt_dtype_switch(dst->dtype, [&](auto zero) {
        using T = typename qt_cuda_word<decltype(zero)>::type;
        if (index->dtype == QT_I32)
          rc = gat_launch_general<T, int, GAT_ADD, SLICE>(dev, op_name, op, g, src->data,
                                                         dst->data, index->data, n,
                                                         dst->size[dim], 0, err);
        else
          rc = gat_launch_general<T, long long, GAT_ADD, SLICE>(dev, op_name, op, g, src->data,
                                                               dst->data, index->data, n,
                                                               dst->size[dim], 0, err);
      }))
    return qt_errorf(err, "%s: unsupported dtype %s", op_name, qt_dtypes[dst->dtype].name);
  return rc;
}

/* dst.select(dim, index[k]) += src.select(dim, k); duplicates accumulate (atomics: the order
** of float additions to one element is not fixed). */
extern "C" int qt_cuda_index_add(qt_device *dev, const qt_view *dst, int dim,
                                 const qt_view *index, const qt_view *src, qt_err *err) {
  if (qt_cuda_enter(dev, "index_add", err)) return -1;
  const int64_t n = gat_numel(src);
  if (n == 0) return 0;
  gat_geom g;
  gat_slices_geom(&g, dst, dim, index, src->size, src);
  return gat_add_by_dtype<true>(dev, "index_add", QT_CUDA_OP_INDEX_ADD, &g, dst, dim, index, src,
                                n, err);
}

/* dst[index[i][j]][j] += src[i][j] (dim 0): scatter's walk, index_add's atomic sums. */
extern "C" int qt_cuda_scatter_add(qt_device *dev, const qt_view *dst, int dim,
                                   const qt_view *index, const qt_view *src, qt_err *err) {
  if (qt_cuda_enter(dev, "scatter_add", err)) return -1;
  const int64_t n = gat_numel(index);
  if (n == 0) return 0;
  gat_geom g;
  gat_scatter_geom(&g, dst, dim, index, src);
  return gat_add_by_dtype<false>(dev, "scatter_add", QT_CUDA_OP_SCATTER_ADD, &g, dst, dim, index,
                                 src, n, err);
}

/* ------------------------------------------------------------------ index_fill, index_copy */

/* dst.select(dim, index[k]) = value: the slice-mode write over dst's shape with #index along
** dim, every thread storing the value's raw bits. */
extern "C" int qt_cuda_index_fill(qt_device *dev, const qt_view *dst, int dim,
                                  const qt_view *index, qt_scalar value, qt_err *err) {
  if (qt_cuda_enter(dev, "index_fill", err)) return -1;
  int64_t size[QT_MAXDIM];
  int64_t n = 1;
  for (int d = 0; d < dst->ndim; d++) {
    size[d] = d == dim ? index->size[0] : dst->size[d];
    n *= size[d];
  }
  if (n == 0) return 0;
  gat_geom g;
  gat_slices_geom(&g, dst, dim, index, size, NULL);
  const gat_u64 bits = gat_value_bits(dst->dtype, value);
  return gat_dispatch(qt_elsize(dst->dtype), index->dtype, [&](auto e, auto i) {
    return gat_launch_general<decltype(e), decltype(i), GAT_WRITE, true>(
        dev, "index_fill", QT_CUDA_OP_INDEX_FILL, &g, NULL, dst->data, index->data, n,
        dst->size[dim], bits, err);
  });
}

/* dst.select(dim, index[k]) = src.select(dim, k): the slice-mode write over src's shape, raw
** bits. Duplicate targets: plain stores, any one of the writers wins. */
extern "C" int qt_cuda_index_copy(qt_device *dev, const qt_view *dst, int dim,
                                  const qt_view *index, const qt_view *src, qt_err *err) {
  if (qt_cuda_enter(dev, "index_copy", err)) return -1;
  const int64_t n = gat_numel(src);
  if (n == 0) return 0;
  gat_geom g;
  gat_slices_geom(&g, dst, dim, index, src->size, src);
  return gat_dispatch(qt_elsize(dst->dtype), index->dtype, [&](auto e, auto i) {
    return gat_launch_general<decltype(e), decltype(i), GAT_WRITE, true>(
        dev, "index_copy", QT_CUDA_OP_INDEX_COPY, &g, src->data, dst->data, index->data, n,
        dst->size[dim], 0, err);
  });
}
