/*
** cpu_index.c — the CPU device's indexing slots: gather, index_select, take, scatter,
** index_add, scatter_add, index_fill and index_copy (device.h: dims 0-based, index values
** 1-based, int32 or int64).
**
** Every slot first checks all index values (cpu_index_check), so a bad one is reported
** before anything is written and the row functions never check. gather, take and scatter
** (and index_fill, index_copy, which reuse scatter's rows) move elements as raw 8-, 16-, 32-
** or 64-bit words, never converting them, so their rows are per element size and index
** dtype; index_add (and scatter_add) adds, so its rows are per dtype.
*/
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cpu/cpu_internal.h"
#include "device.h"
#include "tensor.h"

/* ====================================================================== indexing */

/* Checks every value of an index view against 1..bound before anything is written, and
** names the first bad one with its 1-based row-major position. Large indexes are checked
** on the pool (the check was a serial pass beside the pooled gather: a third of a 1Mi
** gather on 16 cores): each piece finds its own first bad value, and the first piece with
** one names it, so the message is the one a serial scan gives. A run is scanned without
** branches (so it vectorizes) and searched only when it holds a bad value. */
typedef struct cpu_check_walk {
  uint64_t ubound;
  int64_t pos;         /* the 0-based row-major position of the next run */
  int64_t bad_pos;     /* the first bad one's, or -1 */
  int64_t bad_value;
} cpu_check_walk;

#define CPU_CHECK_ROW(NAME, T)                                                             \
  static void NAME(char **p, const int64_t *s, int64_t n, const cpu_args *args) {          \
    cpu_check_walk *w = (cpu_check_walk *)args->state;                                     \
    const T *x = (const T *)p[0];                                                          \
    int64_t st = s[0];                                                                     \
    uint64_t ub = w->ubound;                                                               \
    if (w->bad_pos < 0) {                                                                  \
      int bad = 0;                                                                         \
      if (st == 1) for (int64_t i = 0; i < n; i++) bad |= (uint64_t)(int64_t)x[i] - 1u >= ub; \
      else for (int64_t i = 0; i < n; i++) bad |= (uint64_t)(int64_t)x[i * st] - 1u >= ub; \
      if (bad) {                                                                           \
        for (int64_t i = 0; i < n; i++)                                                    \
          if ((uint64_t)(int64_t)x[i * st] - 1u >= ub) {                                  \
            w->bad_pos = w->pos + i;                                                       \
            w->bad_value = (int64_t)x[i * st];                                             \
            break;                                                                         \
          }                                                                                \
      }                                                                                    \
    }                                                                                      \
    w->pos += n;                                                                           \
  }
CPU_CHECK_ROW(cpu_check_row_i32, int32_t)
CPU_CHECK_ROW(cpu_check_row_i64, int64_t)

typedef struct cpu_check_job {
  qt_view *v;
  cpu_row_fn row;
  int64_t piece;
  cpu_check_walk *walks;
} cpu_check_job;

static void cpu_check_range(qt_view *v, cpu_row_fn row, cpu_check_walk *w, int64_t begin,
                            int64_t end) {
  cpu_args args;
  memset(&args, 0, sizeof args);
  args.state = w;
  w->pos = begin;
  cpu_walk_range(&v, 1, row, &args, begin, end);
}

static void cpu_check_chunk(void *arg, int64_t chunk) {
  const cpu_check_job *j = (const cpu_check_job *)arg;
  int64_t begin = chunk * j->piece;
  int64_t end = begin + j->piece < j->v->numel ? begin + j->piece : j->v->numel;
  cpu_check_range(j->v, j->row, &j->walks[chunk], begin, end);
}

/* The one check of this file (device.h: a device checks only what only it can see): the
** index values, against 1..bound; the core has checked dims, dtypes and shapes. */
static int cpu_index_check(const qt_view *index, int64_t bound, const char *op, qt_err *err) {
  qt_view v = *index;
  qt_view *vp = &v;
  qt_views_collapse(&vp, 1);
  v.numel = cpu_view_numel(&v);
  if (v.numel == 0) return 0;
  cpu_row_fn row = v.dtype == QT_I32 ? cpu_check_row_i32 : cpu_check_row_i64;
  cpu_check_walk one = { (uint64_t)bound, 0, -1, 0 }, *found = &one;
  cpu_check_walk *walks = NULL;
  int64_t piece = v.numel, pieces = 1;
  if (v.numel >= 2 * CPU_PAR_GRAIN && cpu_threads() > 1) pieces = cpu_par_pieces(v.numel, &piece);
  if (pieces > 1) walks = malloc((size_t)pieces * sizeof *walks);
  if (walks == NULL) {
    cpu_check_range(&v, row, &one, 0, v.numel);
  } else {
    for (int64_t k = 0; k < pieces; k++) walks[k] = one;
    cpu_check_job job = { &v, row, piece, walks };
    cpu_parallel(pieces, cpu_check_chunk, &job);
    for (int64_t k = 0; k < pieces; k++)
      if (walks[k].bad_pos >= 0) { found = &walks[k]; break; }
  }
  int rc = 0;
  if (found->bad_pos >= 0)
    rc = qt_errorf(err, "%s: index %lld out of range (1..%lld) at position %lld", op,
                   (long long)found->bad_value, (long long)bound,
                   (long long)(found->bad_pos + 1));
  free(walks);
  return rc;
}

/* Random reads from a large source are latency-bound; asking for the element needed
** CPU_PREFETCH iterations ahead keeps more cache misses in flight (about 25% faster
** for 1Mi random indices into 64 MiB here). Indices are validated, so the address is. */
#define CPU_PREFETCH 32

/* Data moves as raw 1-, 2-, 4- or 8-byte words (gather, take, scatter copy values, never
** convert them), so these rows are per element size, not per dtype: cpu_gather_32bit_by_i64
** moves 32-bit elements (float32, int32) picked by an int64 index. The widths: X(P, w, TD). */
#define CPU_INDEX_WIDTHS(X, P) \
  X(P, 8bit, uint8_t) X(P, 16bit, uint16_t) X(P, 32bit, uint32_t) X(P, 64bit, uint64_t)

/* Row tables are [width][index is int64], the width slot of a dtype from its size (every
** dtype of the list is 1, 2, 4 or 8 bytes). */
#define CPU_WIDTH_ROWS_(OP, w, TD) { cpu_##OP##_##w##_by_i32, cpu_##OP##_##w##_by_i64 },
static int cpu_width_slot(qt_dtype d) {
  switch (qt_elsize(d)) {
    case 1: return 0;
    case 2: return 1;
    case 4: return 2;
    default: return 3;
  }
}

/* gather rows: p = { dst, src with stride 0 along dim, index }; the index value picks
** the position along dim (args->dim_stride). */
#define CPU_GATHER_ROW(NAME, TD, TI)                                                      \
  static void NAME(char **p, const int64_t *s, int64_t n, const cpu_args *args) {         \
    TD *dst = (TD *)p[0];                                                                 \
    const TD *src = (const TD *)p[1];                                                     \
    const TI *idx = (const TI *)p[2];                                                     \
    int64_t sd = s[0], ss = s[1], si = s[2], sdim = args->dim_stride;                     \
    if (sd == 1 && ss == 0 && si == 1 && sdim == 1) {                                     \
      int64_t i = 0;                                                                      \
      for (; i + CPU_PREFETCH < n; i++) {                                                 \
        __builtin_prefetch(&src[idx[i + CPU_PREFETCH] - 1]);                              \
        dst[i] = src[idx[i] - 1];                                                         \
      }                                                                                   \
      for (; i < n; i++) dst[i] = src[idx[i] - 1];                                        \
    } else if (sd == 1 && ss == 0 && si == 1) {                                           \
      for (int64_t i = 0; i < n; i++) dst[i] = src[((int64_t)idx[i] - 1) * sdim];         \
    } else {                                                                              \
      for (int64_t i = 0; i < n; i++)                                                     \
        dst[i * sd] = src[i * ss + ((int64_t)idx[i * si] - 1) * sdim];                    \
    }                                                                                     \
  }
#define CPU_GATHER_FNS_(P, w, TD)                          \
  CPU_GATHER_ROW(cpu_gather_##w##_by_i32, TD, int32_t)     \
  CPU_GATHER_ROW(cpu_gather_##w##_by_i64, TD, int64_t)
CPU_INDEX_WIDTHS(CPU_GATHER_FNS_, ~)
static const cpu_row_fn cpu_gather_rows[4][2] = { CPU_INDEX_WIDTHS(CPU_WIDTH_ROWS_, gather) };

static cpu_row_fn cpu_gather_row(qt_dtype data, qt_dtype index) {
  return cpu_gather_rows[cpu_width_slot(data)][index == QT_I64];
}

/* dst[p] = src[p with p[dim] = index[p]] over index's shape: src is seen through a view
** of index's shape whose stride along dim is 0, and the row adds the index offset. */
int cpu_gather(qt_device *dev, const qt_view *dst, const qt_view *src, int dim,
               const qt_view *index, qt_err *err) {
  (void)dev;
  if (cpu_index_check(index, src->size[dim], "gather", err)) return -1;
  qt_view src_walk;
  cpu_view_make(&src_walk, index, src->data, src->dtype, src->stride);
  src_walk.stride[dim] = 0;
  cpu_args args;
  memset(&args, 0, sizeof args);
  args.dim_stride = src->stride[dim];
  const qt_view *views[3] = { dst, &src_walk, index };
  cpu_walk_par(views, 3, cpu_gather_row(src->dtype, index->dtype), &args);
  return 0;
}

/* index_select's whole slices: slice q = (o, k) of dst is slice index[k] of src's outer
** row o, one memcpy each, runs of per_chunk of them a pool chunk. */
typedef struct cpu_slices_job {
  const char *src;
  char *dst;
  const qt_view *index;
  size_t row;              /* bytes a slice */
  int64_t count, len;      /* index entries; src's size along dim */
  int64_t slices;          /* outer * count */
  int64_t per_chunk;
} cpu_slices_job;

static void cpu_slices_chunk(void *arg, int64_t chunk) {
  const cpu_slices_job *j = (const cpu_slices_job *)arg;
  int64_t q0 = chunk * j->per_chunk;
  int64_t q1 = q0 + j->per_chunk < j->slices ? q0 + j->per_chunk : j->slices;
  const qt_view *index = j->index;
  for (int64_t q = q0; q < q1; q++) {
    int64_t o = q / j->count, k = q % j->count;
    int64_t at = index->dtype == QT_I32
                     ? (int64_t)((const int32_t *)index->data)[k * index->stride[0]]
                     : ((const int64_t *)index->data)[k * index->stride[0]];
    memcpy(j->dst + (size_t)q * j->row, j->src + (size_t)(o * j->len + at - 1) * j->row, j->row);
  }
}

/* Slices along dim. Contiguous src and dst with slices of at least a cache line: one
** memcpy per (outer, k). Otherwise a gather whose index is the 1-D index broadcast over
** dst's shape (stride 0 except along dim). */
int cpu_index_select(qt_device *dev, const qt_view *dst, const qt_view *src, int dim,
                     const qt_view *index, qt_err *err) {
  (void)dev;
  if (cpu_index_check(index, src->size[dim], "index_select", err)) return -1;
  if (cpu_view_numel(dst) == 0) return 0;

  size_t es = qt_elsize(src->dtype);
  int64_t inner = 1, outer = 1;
  for (int d = dim + 1; d < src->ndim; d++) inner *= src->size[d];
  for (int d = 0; d < dim; d++) outer *= src->size[d];
  int64_t count = index->size[0], len = src->size[dim];
  if (cpu_view_contiguous(src) && cpu_view_contiguous(dst) && inner * (int64_t)es >= 64) {
    int64_t slices = outer * count;
    cpu_slices_job j = { (const char *)src->data, (char *)dst->data, index, (size_t)inner * es,
                         count, len, slices, 1 };
    /* pieces of about CPU_PAR_GRAIN elements' bytes, a few per thread */
    int64_t per = (CPU_PAR_GRAIN * 4 + (int64_t)j.row - 1) / (int64_t)j.row;
    int64_t want = (int64_t)cpu_threads() * 4;
    if (per * want < slices) per = (slices + want - 1) / want;
    j.per_chunk = per;
    cpu_parallel((slices + per - 1) / per, cpu_slices_chunk, &j);
    return 0;
  }
  qt_view src_walk, index_walk;
  cpu_view_make(&src_walk, dst, src->data, src->dtype, src->stride);
  src_walk.stride[dim] = 0;
  cpu_view_make(&index_walk, dst, index->data, index->dtype, NULL);
  index_walk.stride[dim] = index->stride[0];
  cpu_args args;
  memset(&args, 0, sizeof args);
  args.dim_stride = src->stride[dim];
  const qt_view *views[3] = { dst, &src_walk, &index_walk };
  cpu_walk_par(views, 3, cpu_gather_row(src->dtype, index->dtype), &args);
  return 0;
}

/* take rows: p = { dst, index }; the source (collapsed alone, so a contiguous or simply
** strided one is 1-D) is in args. Row-major flat position -> element by unravelling. */
#define CPU_TAKE_ROW(NAME, TD, TI)                                                        \
  static void NAME(char **p, const int64_t *s, int64_t n, const cpu_args *args) {         \
    TD *dst = (TD *)p[0];                                                                 \
    const TI *idx = (const TI *)p[1];                                                     \
    const qt_view *sv = args->take_src;                                                   \
    const TD *src = (const TD *)sv->data;                                                 \
    int64_t sd = s[0], si = s[1];                                                         \
    if (sv->ndim == 1) {                                                                  \
      int64_t st = sv->stride[0];                                                         \
      if (sd == 1 && si == 1 && st == 1) {                                                \
        int64_t i = 0;                                                                    \
        for (; i + CPU_PREFETCH < n; i++) {                                               \
          __builtin_prefetch(&src[idx[i + CPU_PREFETCH] - 1]);                            \
          dst[i] = src[idx[i] - 1];                                                       \
        }                                                                                 \
        for (; i < n; i++) dst[i] = src[idx[i] - 1];                                      \
      } else {                                                                            \
        for (int64_t i = 0; i < n; i++) dst[i * sd] = src[((int64_t)idx[i * si] - 1) * st]; \
      }                                                                                   \
      return;                                                                             \
    }                                                                                     \
    for (int64_t i = 0; i < n; i++) {                                                     \
      int64_t flat = (int64_t)idx[i * si] - 1, off = 0;                                   \
      for (int d = sv->ndim - 1; d >= 0; d--) {                                           \
        off += (flat % sv->size[d]) * sv->stride[d];                                      \
        flat /= sv->size[d];                                                              \
      }                                                                                   \
      dst[i * sd] = src[off];                                                             \
    }                                                                                     \
  }
#define CPU_TAKE_FNS_(P, w, TD)                        \
  CPU_TAKE_ROW(cpu_take_##w##_by_i32, TD, int32_t)     \
  CPU_TAKE_ROW(cpu_take_##w##_by_i64, TD, int64_t)
CPU_INDEX_WIDTHS(CPU_TAKE_FNS_, ~)
static const cpu_row_fn cpu_take_rows[4][2] = { CPU_INDEX_WIDTHS(CPU_WIDTH_ROWS_, take) };

int cpu_take(qt_device *dev, const qt_view *dst, const qt_view *src, const qt_view *index,
             qt_err *err) {
  (void)dev;
  int64_t numel = cpu_view_numel(src);
  if (cpu_index_check(index, numel, "take", err)) return -1;
  if (cpu_view_numel(index) == 0) return 0;
  qt_view sv = *src;
  qt_view *svp = &sv;
  qt_views_collapse(&svp, 1);
  cpu_args args;
  memset(&args, 0, sizeof args);
  args.take_src = &sv;
  cpu_row_fn row = cpu_take_rows[cpu_width_slot(src->dtype)][index->dtype == QT_I64];
  const qt_view *views[2] = { dst, index };
  cpu_walk_par(views, 2, row, &args);
  return 0;
}

/* scatter rows: p = { dst with stride 0 along dim, index, src (or a stride-0 value) }. */
#define CPU_SCATTER_ROW(NAME, TD, TI)                                                     \
  static void NAME(char **p, const int64_t *s, int64_t n, const cpu_args *args) {         \
    TD *dst = (TD *)p[0];                                                                 \
    const TI *idx = (const TI *)p[1];                                                     \
    const TD *src = (const TD *)p[2];                                                     \
    int64_t sd = s[0], si = s[1], ss = s[2], sdim = args->dim_stride;                     \
    for (int64_t i = 0; i < n; i++)                                                       \
      dst[i * sd + ((int64_t)idx[i * si] - 1) * sdim] = src[i * ss];                      \
  }
#define CPU_SCATTER_FNS_(P, w, TD)                           \
  CPU_SCATTER_ROW(cpu_scatter_##w##_by_i32, TD, int32_t)     \
  CPU_SCATTER_ROW(cpu_scatter_##w##_by_i64, TD, int64_t)
CPU_INDEX_WIDTHS(CPU_SCATTER_FNS_, ~)
static const cpu_row_fn cpu_scatter_rows[4][2] = { CPU_INDEX_WIDTHS(CPU_WIDTH_ROWS_, scatter) };

/* dst[p with p[dim] = index[p]] = src[p] over index's shape; with duplicates the last in
** row-major order wins (the API leaves it unspecified). */
int cpu_scatter(qt_device *dev, const qt_view *dst, int dim, const qt_view *index,
                const qt_view *src, qt_scalar value, qt_err *err) {
  (void)dev;
  if (cpu_index_check(index, dst->size[dim], "scatter", err)) return -1;
  cpu_value v;
  cpu_value_set(&v, dst->dtype, value);
  qt_view dst_walk, src_walk;
  cpu_view_make(&dst_walk, index, dst->data, dst->dtype, dst->stride);
  dst_walk.stride[dim] = 0;
  if (src != NULL) cpu_view_make(&src_walk, index, src->data, src->dtype, src->stride);
  else cpu_view_make(&src_walk, index, &v, dst->dtype, NULL);
  cpu_args args;
  memset(&args, 0, sizeof args);
  args.dim_stride = dst->stride[dim];
  cpu_row_fn row = cpu_scatter_rows[cpu_width_slot(dst->dtype)][index->dtype == QT_I64];
  const qt_view *views[3] = { &dst_walk, index, &src_walk };
  cpu_walk(views, 3, row, &args);
  return 0;
}

/* a + b in one element type, by the dtype's kind: integer sums wrap (computed unsigned and
** narrowed back), bool is a logical or (PyTorch's index_add_ on bool: true + x is true). */
#define CPU_INDEX_SUM_FLOAT(U, a, b) ((a) + (b))
#define CPU_INDEX_SUM_INT(U, a, b) ((U)(a) + (U)(b))
#define CPU_INDEX_SUM_BOOL(U, a, b) ((a) || (b))

/* index_add rows: p = { dst with stride 0 along dim, index broadcast, src }. */
#define CPU_INDEX_ADD_ROW(NAME, T, U, TI, KIND)                                           \
  static void NAME(char **p, const int64_t *s, int64_t n, const cpu_args *args) {         \
    T *dst = (T *)p[0];                                                                   \
    const TI *idx = (const TI *)p[1];                                                     \
    const T *src = (const T *)p[2];                                                       \
    int64_t sd = s[0], si = s[1], ss = s[2], sdim = args->dim_stride;                     \
    for (int64_t i = 0; i < n; i++) {                                                     \
      T *at = &dst[i * sd + ((int64_t)idx[i * si] - 1) * sdim];                           \
      T v = src[i * ss];                                                                  \
      *at = (T)CPU_INDEX_SUM_##KIND(U, *at, v);                                           \
    }                                                                                     \
  }
#define CPU_INDEX_ADD_FNS_(P, E, sfx, name, T, U, size, kind, ...)                        \
  QT_UNLESS_HALF_##kind(CPU_INDEX_ADD_ROW(cpu_index_add_##sfx##_i32, T, U, int32_t, kind) \
                        CPU_INDEX_ADD_ROW(cpu_index_add_##sfx##_i64, T, U, int64_t, kind))
QT_DTYPE_LIST(CPU_INDEX_ADD_FNS_, ~)

/* [data dtype][index is int64] (none for the 16-bit floats: widened, device.h) */
#define CPU_INDEX_ADD_ENTRY_(P, E, sfx, name, T, U, size, kind, ...) \
  QT_UNLESS_HALF_##kind([E] = { cpu_index_add_##sfx##_i32, cpu_index_add_##sfx##_i64 },)
static const cpu_row_fn cpu_index_add_rows[QT_NDTYPES][2] = { QT_DTYPE_LIST(CPU_INDEX_ADD_ENTRY_, ~) };

/* The walk of index_add, index_fill and index_copy: the shape of `like` (src, or dst with
** #index along dim), dst with stride 0 along dim (the row adds the index offset) and the
** 1-D index broadcast along dim. */
static void cpu_slices_walk(qt_view *dst_walk, qt_view *index_walk, const qt_view *like,
                            const qt_view *dst, int dim, const qt_view *index) {
  cpu_view_make(dst_walk, like, dst->data, dst->dtype, dst->stride);
  dst_walk->stride[dim] = 0;
  cpu_view_make(index_walk, like, index->data, index->dtype, NULL);
  index_walk->stride[dim] = index->stride[0];
}

/* index_add and index_copy: src's slices along dim put into dst's at the 1-D index's
** positions by `row` (a sum or a copy), walking src's shape in row-major order, so
** duplicates accumulate in a fixed order (deterministic sums; the last copy wins). */
static int cpu_put_slices(const qt_view *dst, int dim, const qt_view *index, const qt_view *src,
                          cpu_row_fn row, const char *op, qt_err *err) {
  if (cpu_index_check(index, dst->size[dim], op, err)) return -1;
  qt_view dst_walk, index_walk;
  cpu_slices_walk(&dst_walk, &index_walk, src, dst, dim, index);
  cpu_args args;
  memset(&args, 0, sizeof args);
  args.dim_stride = dst->stride[dim];
  const qt_view *views[3] = { &dst_walk, &index_walk, src };
  cpu_walk(views, 3, row, &args);
  return 0;
}

int cpu_index_add(qt_device *dev, const qt_view *dst, int dim, const qt_view *index,
                  const qt_view *src, qt_err *err) {
  (void)dev;
  return cpu_put_slices(dst, dim, index, src,
                        cpu_index_add_rows[dst->dtype][index->dtype == QT_I64], "index_add", err);
}

/* dst[p with p[dim] = index[p]] += src[p] over index's shape: scatter's walk with
** index_add's sums, in row-major order of index, so duplicates accumulate in a fixed order
** (deterministic results). */
int cpu_scatter_add(qt_device *dev, const qt_view *dst, int dim, const qt_view *index,
                    const qt_view *src, qt_err *err) {
  (void)dev;
  if (cpu_index_check(index, dst->size[dim], "scatter_add", err)) return -1;
  qt_view dst_walk, src_walk;
  cpu_view_make(&dst_walk, index, dst->data, dst->dtype, dst->stride);
  dst_walk.stride[dim] = 0;
  cpu_view_make(&src_walk, index, src->data, src->dtype, src->stride);
  cpu_args args;
  memset(&args, 0, sizeof args);
  args.dim_stride = dst->stride[dim];
  const qt_view *views[3] = { &dst_walk, index, &src_walk };
  cpu_walk(views, 3, cpu_index_add_rows[dst->dtype][index->dtype == QT_I64], &args);
  return 0;
}

/* dst.select(dim, index[k]) = value: scatter's rows over dst's shape with #index along
** dim, the value a stride-0 view. */
int cpu_index_fill(qt_device *dev, const qt_view *dst, int dim, const qt_view *index,
                   qt_scalar value, qt_err *err) {
  (void)dev;
  if (cpu_index_check(index, dst->size[dim], "index_fill", err)) return -1;
  qt_view shape = *dst;
  shape.size[dim] = index->size[0];
  shape.numel = cpu_view_numel(&shape);
  if (shape.numel == 0) return 0;
  cpu_value v;
  cpu_value_set(&v, dst->dtype, value);
  qt_view dst_walk, index_walk, value_walk;
  cpu_slices_walk(&dst_walk, &index_walk, &shape, dst, dim, index);
  cpu_view_make(&value_walk, &shape, &v, dst->dtype, NULL);
  cpu_args args;
  memset(&args, 0, sizeof args);
  args.dim_stride = dst->stride[dim];
  const qt_view *views[3] = { &dst_walk, &index_walk, &value_walk };
  cpu_walk(views, 3, cpu_scatter_rows[cpu_width_slot(dst->dtype)][index->dtype == QT_I64],
           &args);
  return 0;
}

/* dst.select(dim, index[k]) = src.select(dim, k): scatter's rows (raw words) over src's
** shape; with duplicates the last in src's row-major order wins (the API leaves it
** unspecified). */
int cpu_index_copy(qt_device *dev, const qt_view *dst, int dim, const qt_view *index,
                   const qt_view *src, qt_err *err) {
  (void)dev;
  return cpu_put_slices(dst, dim, index, src,
                        cpu_scatter_rows[cpu_width_slot(dst->dtype)][index->dtype == QT_I64],
                        "index_copy", err);
}
