/*
** cpu_reduce.c — the CPU device's reduction slot: sum and mean here, with the drivers that
** run every reduction over one dimension or over everything on the thread pool; max, min,
** argmax and argmin fold in cpu_reduce_best.c, and prod, var, std, norm and logsumexp
** stream in cpu_reduce_stream.c (cpu_reduce.h is what the three share).
**
** Two ways to fold, chosen per call (cpu_reduce_dim): a strided fold reduces one run of
** elements (a row, or a column read with its stride) into one accumulator; a columns fold
** takes one contiguous row of the source and folds element j into the accumulator of
** reduction j, for when the reduced dimension is the outer one (sum over the rows of a
** matrix), so memory is read in order. Float sums are pairwise and compensated, so the
** result does not depend on which fold ran.
*/
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cpu/cpu_internal.h"
#include "cpu/cpu_reduce.h"
#include "device.h"
#include "tensor.h"

/* ====================================================================== reductions */

/* Pairwise summation of a strided run in double: error grows with log(n) instead of n.
** The leaves sum 128 elements with 8 independent accumulators (also what keeps the
** floating-point pipeline busy). */
#define CPU_PAIRWISE(NAME, T)                                                     \
  CPU_MULTIVERSION static double NAME(const T *x, int64_t n, int64_t s) {                          \
    if (n <= 128) {                                                               \
      double p0 = 0, p1 = 0, p2 = 0, p3 = 0, p4 = 0, p5 = 0, p6 = 0, p7 = 0;      \
      int64_t i = 0;                                                              \
      if (s == 1) {                                                               \
        for (; i + 8 <= n; i += 8) {                                              \
          p0 += x[i]; p1 += x[i + 1]; p2 += x[i + 2]; p3 += x[i + 3];             \
          p4 += x[i + 4]; p5 += x[i + 5]; p6 += x[i + 6]; p7 += x[i + 7];         \
        }                                                                         \
      } else {                                                                    \
        for (; i + 8 <= n; i += 8) {                                              \
          p0 += x[i * s]; p1 += x[(i + 1) * s]; p2 += x[(i + 2) * s];             \
          p3 += x[(i + 3) * s]; p4 += x[(i + 4) * s]; p5 += x[(i + 5) * s];       \
          p6 += x[(i + 6) * s]; p7 += x[(i + 7) * s];                             \
        }                                                                         \
      }                                                                           \
      for (; i < n; i++) p0 += x[i * s];                                          \
      return ((p0 + p1) + (p2 + p3)) + ((p4 + p5) + (p6 + p7));                   \
    }                                                                             \
    int64_t half = (n / 2 + 7) / 8 * 8;                                           \
    return NAME(x, half, s) + NAME(x + half * s, n - half, s);                    \
  }


/* A strided fold (cpu_strided_<op>_<dtype>) folds one run (n elements, stride s) into
** *acc; base_pos is the 0-based position of the run's first element in the reduction.
** A columns fold (cpu_columns_<op>_<dtype>) folds one contiguous row of n independent
** reductions at once: column j's accumulator gets element j, which sits at 0-based
** position pos of every reduction. It is used when the reduced dimension is the outer one
** (sum over rows of a matrix), so the memory is read in order instead of one column at a
** time. Its accumulators are a struct of arrays (cpu_columns_acc), so that the per-column
** loops below vectorize. (Handing it columns in L1-sized blocks was tried and measured
** 2x slower: short runs of each row defeat the hardware prefetcher.) */
/* The section's loops are the kind GCC vectorizes only with its dynamic cost model (see
** the elementwise section); and only without -ftrapping-math will it turn the selects
** on float comparisons into branch-free code (nothing here reads the FP exception flags,
** and the values computed are the same). */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC push_options
#pragma GCC optimize("tree-vectorize", "vect-cost-model=dynamic", "no-trapping-math")
#endif

/* ---- sums */
/* Columns float sums add each row into b plainly (a loop that vectorizes), four rows at a
** time where there are four (their sum in double first: b, 32 KiB for a block of 4096
** columns, then does not cap the loop at L2's speed); every CPU_COLUMNS_SUM_BLOCK rows,
** and after the last, cpu_dim_task folds b into the compensated (f, c) with
** cpu_columns_sum_flush. Plain double sums of at most 128 values are as exact as the
** leaves of the strided pairwise sum. */
#define CPU_COLUMNS_SUM_BLOCK 128
#define CPU_SUM_FLOAT(SFX, T)                                                            \
  static void cpu_strided_sum_##SFX(const char *p, int64_t n, int64_t s,                 \
                                    int64_t base_pos, cpu_acc *acc) {                    \
    (void)base_pos;                                                                      \
    cpu_neumaier(acc, cpu_pairwise_##SFX((const T *)p, n, s));                           \
  }                                                                                      \
  CPU_MULTIVERSION static void cpu_columns_sum_##SFX(const char *p, int64_t n, int64_t pos, \
                                    const cpu_columns_acc *columns) {                    \
    (void)pos;                                                                           \
    const T *x = (const T *)p;                                                           \
    double *restrict b = columns->b;                                                     \
    for (int64_t j = 0; j < n; j++) b[j] += (double)x[j];                                \
  }                                                                                      \
  CPU_MULTIVERSION static void cpu_columns4_sum_##SFX(const char *p, int64_t n, int64_t step, \
                                          int64_t pos, const cpu_columns_acc *columns) { \
    (void)pos;                                                                           \
    const T *restrict x0 = (const T *)p;                                                 \
    const T *restrict x1 = (const T *)(p + step);                                        \
    const T *restrict x2 = (const T *)(p + 2 * step);                                    \
    const T *restrict x3 = (const T *)(p + 3 * step);                                    \
    double *restrict b = columns->b;                                                     \
    for (int64_t j = 0; j < n; j++)                                                      \
      b[j] += ((double)x0[j] + (double)x1[j]) + ((double)x2[j] + (double)x3[j]);         \
  }

/* Folds the block sums b into (f, c) by Kahan's rule and clears b. An infinite sum has
** nothing to compensate (inf - inf would turn it NaN). Kahan's c is subtracted,
** Neumaier's added: cpu_reduce_dim hands -c to cpu_reduce_finish, which reads f + c. */
static void cpu_columns_sum_flush(const cpu_columns_acc *columns, int64_t n) {
  for (int64_t j = 0; j < n; j++) {
    double y = columns->b[j] - columns->c[j];
    double t = columns->f[j] + y;
    columns->c[j] = isfinite(t) ? (t - columns->f[j]) - y : 0.0;
    columns->f[j] = t;
    columns->b[j] = 0;
  }
}

#define CPU_SUM_INT(SFX, T)                                                              \
  static void cpu_strided_sum_##SFX(const char *p, int64_t n, int64_t s,                 \
                                    int64_t base_pos, cpu_acc *acc) {                    \
    (void)base_pos;                                                                      \
    const T *x = (const T *)p;                                                           \
    uint64_t u = acc->u;                                                                 \
    if (s == 1) for (int64_t i = 0; i < n; i++) u += (uint64_t)(int64_t)x[i];            \
    else for (int64_t i = 0; i < n; i++) u += (uint64_t)(int64_t)x[i * s];               \
    acc->u = u;                                                                          \
  }                                                                                      \
  static void cpu_columns_sum_##SFX(const char *p, int64_t n, int64_t pos,               \
                                    const cpu_columns_acc *columns) {                    \
    (void)pos;                                                                           \
    const T *x = (const T *)p;                                                           \
    uint64_t *restrict u = columns->u;                                                   \
    for (int64_t j = 0; j < n; j++) u[j] += (uint64_t)(int64_t)x[j];                     \
  }                                                                                      \
  static void cpu_columns4_sum_##SFX(const char *p, int64_t n, int64_t step, int64_t pos, \
                                     const cpu_columns_acc *columns) {                   \
    (void)pos;                                                                           \
    const T *restrict x0 = (const T *)p;                                                 \
    const T *restrict x1 = (const T *)(p + step);                                        \
    const T *restrict x2 = (const T *)(p + 2 * step);                                    \
    const T *restrict x3 = (const T *)(p + 3 * step);                                    \
    uint64_t *restrict u = columns->u;                                                   \
    for (int64_t j = 0; j < n; j++)                                                      \
      u[j] += (uint64_t)(int64_t)x0[j] + (uint64_t)(int64_t)x1[j] +                      \
              (uint64_t)(int64_t)x2[j] + (uint64_t)(int64_t)x3[j];                       \
  }

/* ---- max / min: NaN wins (the first NaN met is kept) */
/* ---- every reducer of every dtype, by the dtype's kind (QT_DTYPE_LIST) */
#define CPU_REDUCERS_FLOAT(SFX, T)                                                       \
  CPU_PAIRWISE(cpu_pairwise_##SFX, T)                                                    \
  CPU_SUM_FLOAT(SFX, T)
#define CPU_REDUCERS_INT(SFX, T) CPU_SUM_INT(SFX, T)
#define CPU_REDUCERS_BOOL CPU_REDUCERS_INT  /* 0 and 1, summed as integers */
#define CPU_REDUCERS_HALF(SFX, T)          /* float16/bfloat16 arrive widened (device.h) */
#define CPU_REDUCERS_(P, E, sfx, name, T, U, size, kind, ...) CPU_REDUCERS_##kind(sfx, T)
QT_DTYPE_LIST(CPU_REDUCERS_, ~)

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC pop_options  /* ends "tree-vectorize" (every sum above) */
#endif

/* [dtype][op]; MEAN shares SUM's reducers. */
#define CPU_RED_TABLE_ROW_(P, E, sfx, name, T, U, size, kind, ...)                            \
  QT_UNLESS_HALF_##kind(                                                                 \
  [E] = { cpu_##P##sum_##sfx, cpu_##P##sum_##sfx, cpu_##P##max_##sfx, cpu_##P##min_##sfx, \
          cpu_##P##argmax_##sfx, cpu_##P##argmin_##sfx },)
static const cpu_strided_fold_fn cpu_strided_folds[QT_NDTYPES][QT_NREDOPS] = {
  QT_DTYPE_LIST(CPU_RED_TABLE_ROW_, strided_)
};
static const cpu_columns_fold_fn cpu_columns_folds[QT_NDTYPES][QT_NREDOPS] = {
  QT_DTYPE_LIST(CPU_RED_TABLE_ROW_, columns_)
};
#define CPU_RED4_TABLE_ROW_(P, E, sfx, name, T, U, size, kind, ...)                           \
  QT_UNLESS_HALF_##kind([E] = { cpu_columns4_sum_##sfx, cpu_columns4_sum_##sfx },)
static const cpu_columns4_fold_fn cpu_columns4_folds[QT_NDTYPES][QT_NREDOPS] = {
  QT_DTYPE_LIST(CPU_RED4_TABLE_ROW_, ~)
};

static void cpu_acc_init(cpu_acc *acc, qt_redop op) {
  memset(acc, 0, sizeof *acc);
  if (op == QT_MAX) acc->f = -INFINITY, acc->i = INT64_MIN;
  if (op == QT_MIN) acc->f = INFINITY, acc->i = INT64_MAX;
}

/* The dtype the result must have (device.h's table). */
static qt_dtype cpu_reduce_dtype(qt_redop op, qt_dtype src) {
  switch (op) {
    case QT_SUM: case QT_PROD: return qt_is_float(src) ? src : QT_I64;
    case QT_ARGMAX: case QT_ARGMIN: return QT_I64;
    default: return src;
  }
}

/* Writes a finished reduction of `count` elements to out (the result dtype). */
static void cpu_reduce_finish(const cpu_acc *acc, qt_redop op, qt_dtype src, int64_t count,
                              char *out) {
  switch (op) {
    case QT_SUM:
      if (qt_is_float(src)) qt_scalar_store(src, out, qt_scalar_from_double(cpu_acc_sum(acc)));
      else *(int64_t *)out = (int64_t)acc->u;
      break;
    case QT_MEAN: {
      double m = count > 0 ? cpu_acc_sum(acc) / (double)count : NAN;
      qt_scalar_store(src, out, qt_scalar_from_double(m));
      break;
    }
    case QT_MAX: case QT_MIN:  /* the source's dtype: floats kept in f, integers in i */
      qt_scalar_store(src, out, qt_is_float(src) ? qt_scalar_from_double(acc->f)
                                                 : qt_scalar_i(acc->i));
      break;
    default:
      *(int64_t *)out = acc->pos;
      break;
  }
}

/* Merges part (a later run of the same reduction) into acc, as folding part's elements
** after acc's would: sums add (compensated), max/min keep the first best, NaN wins. */
static void cpu_acc_merge(cpu_acc *acc, const cpu_acc *part, qt_redop op, qt_dtype dtype) {
  bool fl = qt_is_float(dtype);
  switch (op) {
    case QT_SUM: case QT_MEAN:
      if (fl) {
        cpu_neumaier(acc, part->f);
        acc->c += part->c;
      } else {
        acc->u += part->u;
      }
      break;
    case QT_MAX: case QT_MIN: case QT_ARGMAX: case QT_ARGMIN: {
      bool is_max = op == QT_MAX || op == QT_ARGMAX, arg = op == QT_ARGMAX || op == QT_ARGMIN;
      if (arg && part->pos == 0) break;
      if (arg && acc->pos == 0) { *acc = *part; break; }
      bool take;
      if (fl) {
        if (acc->f != acc->f) take = false;          /* the first NaN stays */
        else if (part->f != part->f) take = true;
        else take = is_max ? part->f > acc->f : part->f < acc->f;
      } else {
        take = is_max ? part->i > acc->i : part->i < acc->i;
      }
      if (take) { acc->f = part->f; acc->i = part->i; acc->pos = part->pos; }
      break;
    }
    default: break;
  }
}

/* Folds elements [begin, end) of the collapsed view v (row-major positions) into acc:
** cpu_walk_range visits the rows (cut at the ends), and a run's 0-based position counts
** up with them, as they come in order. */
typedef struct cpu_fold_walk {
  cpu_strided_fold_fn fold;
  cpu_acc *acc;
  int64_t pos;
} cpu_fold_walk;

static void cpu_fold_row(char **p, const int64_t *s, int64_t n, const cpu_args *args) {
  cpu_fold_walk *w = (cpu_fold_walk *)args->state;
  w->fold(p[0], n, s[0], w->pos, w->acc);
  w->pos += n;
}

static void cpu_fold_range(qt_view *v, cpu_strided_fold_fn fold, int64_t begin, int64_t end,
                           cpu_acc *acc) {
  cpu_fold_walk w = { fold, acc, begin };
  cpu_args args;
  memset(&args, 0, sizeof args);
  args.state = &w;
  cpu_walk_range(&v, 1, cpu_fold_row, &args, begin, end);
}

/* Full reductions are folded in pieces of CPU_REDUCE_PIECE elements, on the pool, and the
** pieces merged in order: the pieces are the same for every thread count, so the result
** is too. (Below one piece, one fold, as before the pool.) */
#define CPU_REDUCE_PIECE ((int64_t)1 << 16)

typedef struct cpu_all_job {
  qt_view *v;
  cpu_strided_fold_fn fold;
  qt_redop op;
  cpu_acc *parts;
} cpu_all_job;

static void cpu_all_chunk(void *arg, int64_t chunk) {
  const cpu_all_job *j = (const cpu_all_job *)arg;
  int64_t begin = chunk * CPU_REDUCE_PIECE;
  int64_t end = begin + CPU_REDUCE_PIECE < j->v->numel ? begin + CPU_REDUCE_PIECE : j->v->numel;
  cpu_acc_init(&j->parts[chunk], j->op);
  cpu_fold_range(j->v, j->fold, begin, end, &j->parts[chunk]);
}

/* Everything into one element: rows of the collapsed source in row-major order, so
** positions count up across rows. */
static int cpu_reduce_all(qt_redop op, const qt_view *dst, const qt_view *src, qt_err *err) {
  qt_view v = *src;
  qt_view *vp = &v;
  qt_views_collapse(&vp, 1);
  v.numel = cpu_view_numel(&v);
  cpu_acc acc;
  cpu_acc_init(&acc, op);
  cpu_strided_fold_fn fold = cpu_strided_folds[src->dtype][op];
  int64_t pieces = (v.numel + CPU_REDUCE_PIECE - 1) / CPU_REDUCE_PIECE;
  if (pieces <= 1) {
    cpu_fold_range(&v, fold, 0, v.numel, &acc);
  } else {
    cpu_acc *parts = malloc((size_t)pieces * sizeof *parts);
    if (parts == NULL) return qt_errorf(err, "%s: out of host memory", qt_redop_name(op));
    cpu_all_job job = { &v, fold, op, parts };
    cpu_parallel(pieces, cpu_all_chunk, &job);
    acc = parts[0];
    for (int64_t k = 1; k < pieces; k++) cpu_acc_merge(&acc, &parts[k], op, src->dtype);
    free(parts);
  }
  cpu_reduce_finish(&acc, op, src->dtype, v.numel, (char *)dst->data);
  return 0;
}

/* Reductions along a dim run on the pool by tasks. A task is (outer row, a block of at
** most CPU_REDUCE_COLS columns, and, for a columns fold, a segment of the reduced dim's
** rows); a chunk is a run of tasks of about CPU_PAR_GRAIN elements of input. The blocks
** narrow (to CPU_REDUCE_MIN_COLS for columns folds, and to one output otherwise) until
** there are a few tasks per thread, which changes nothing in what each output computes.
**
** A columns fold reads every row of its block as one run, so the block is wide (16 KiB
** of float32 a row: shorter runs starve the hardware prefetcher), and the reduced dim is
** cut into segments of cpu_dim_segment rows, so that even one block has tasks for every
** thread.
** Each segment's result goes to a partial (cpu_part), and a second pass merges an
** output's partials in segment order (cpu_acc_merge): as the segments depend on the shape
** alone, never on the thread count, so does every result. Max, min and the arg ops merge
** to exactly what one run gives (the first best, NaN as it wins); a float sum is the
** segments' compensated sums added by Neumaier's rule. */
#define CPU_REDUCE_COLS 4096
#define CPU_REDUCE_MIN_COLS 128
#define CPU_REDUCE_SEGMENT 256   /* rows; a multiple of CPU_COLUMNS_SUM_BLOCK */
#define CPU_REDUCE_MAX_SEGMENTS 64

/* The segment length for a reduced dim of len rows: CPU_REDUCE_SEGMENT, or longer (a
** multiple of CPU_COLUMNS_SUM_BLOCK) so that there are at most CPU_REDUCE_MAX_SEGMENTS,
** which bounds the partials to 1 KiB an output. */
static int64_t cpu_dim_segment(int64_t len) {
  int64_t seg = (len + CPU_REDUCE_MAX_SEGMENTS - 1) / CPU_REDUCE_MAX_SEGMENTS;
  seg = (seg + CPU_COLUMNS_SUM_BLOCK - 1) / CPU_COLUMNS_SUM_BLOCK * CPU_COLUMNS_SUM_BLOCK;
  return seg > CPU_REDUCE_SEGMENT ? seg : CPU_REDUCE_SEGMENT;
}

/* One segment's result for one output: a float sum's (f, c), an integer sum's u, a best
** value (f for floats, i for integers) and, for the arg ops, its 1-based position. */
typedef struct cpu_part {
  union { double f; int64_t i; uint64_t u; } v;
  union { double c; int64_t pos; } w;
} cpu_part;

static void cpu_part_pack(cpu_part *p, const cpu_acc *acc, qt_redop op, qt_dtype dt) {
  bool fl = qt_is_float(dt);
  if (op == QT_SUM || op == QT_MEAN) {
    if (fl) p->v.f = acc->f, p->w.c = acc->c;
    else p->v.u = acc->u, p->w.pos = 0;
  } else {
    if (fl) p->v.f = acc->f;
    else p->v.i = acc->i;
    p->w.pos = acc->pos;
  }
}

static void cpu_part_unpack(cpu_acc *acc, const cpu_part *p, qt_redop op, qt_dtype dt) {
  bool fl = qt_is_float(dt);
  memset(acc, 0, sizeof *acc);
  if (op == QT_SUM || op == QT_MEAN) {
    if (fl) acc->f = p->v.f, acc->c = p->w.c;
    else acc->u = p->v.u;
  } else {
    if (fl) acc->f = p->v.f;
    else acc->i = p->v.i;
    acc->pos = p->w.pos;
  }
}

typedef struct cpu_dim_job {
  const cpu_outer *o;
  qt_redop op;
  cpu_strided_fold_fn fold_strided;
  cpu_columns_fold_fn fold_columns;
  cpu_columns4_fold_fn fold_columns4;  /* four rows at once, or NULL */
  bool by_columns;
  int64_t width;           /* columns a block (at most CPU_REDUCE_COLS) */
  int64_t blocks;          /* column blocks per row */
  int64_t seg_len;         /* rows a segment (the whole len for strided folds) */
  int64_t segs;            /* segments a block */
  cpu_part *parts;         /* segs > 1: [output][segment], output = outer row * n + column */
  int64_t tasks_per_chunk;
  int64_t tasks;
  int64_t outputs_per_chunk;  /* the merge pass */
  bool oom;
} cpu_dim_job;

/* Columns [j0, j1) of outer row r, rows [i0, i1) of the reduced dim (segment k): into
** dst when the segment is the whole dim, else into the partials. cols: accumulators for
** CPU_REDUCE_COLS columns. */
static void cpu_dim_task(const cpu_dim_job *jb, int64_t r, int64_t j0, int64_t j1, int64_t k,
                         cpu_columns_acc *cols) {
  const cpu_outer *o = jb->o;
  qt_redop op = jb->op;
  qt_dtype dt = o->src.dtype;
  int64_t es = (int64_t)qt_elsize(dt), des = (int64_t)qt_elsize(o->dst.dtype);
  int64_t so, dof;
  cpu_outer_row(o, r, &so, &dof);
  const char *ps = (const char *)o->src.data + so;
  char *pd = (char *)o->dst.data + dof;
  int64_t n = j1 - j0, len = o->len;
  if (cols != NULL) {
    int64_t i0 = k * jb->seg_len, i1 = i0 + jb->seg_len < len ? i0 + jb->seg_len : len;
    bool float_sum = (op == QT_SUM || op == QT_MEAN) && qt_is_float(dt);
    for (int64_t j = 0; j < n; j++) cols->f[j] = 0, cols->c[j] = 0, cols->b[j] = 0, cols->u[j] = 0;
    cols->start = i0;
    int64_t step = o->rstride * es, i = i0;
    if (!(op == QT_SUM || op == QT_MEAN)) {  /* the first row starts the bests */
      jb->fold_columns(ps + i * step + j0 * es, n, i, cols);
      i++;
    }
    while (i < i1) {
      /* to the end of the block of CPU_COLUMNS_SUM_BLOCK rows (segments start on one) */
      int64_t end = (i / CPU_COLUMNS_SUM_BLOCK + 1) * CPU_COLUMNS_SUM_BLOCK;
      if (end > i1) end = i1;
      if (jb->fold_columns4 != NULL)
        for (; i + 4 <= end; i += 4) jb->fold_columns4(ps + i * step + j0 * es, n, step, i, cols);
      for (; i < end; i++) jb->fold_columns(ps + i * step + j0 * es, n, i, cols);
      if (float_sum) cpu_columns_sum_flush(cols, n);
    }
    for (int64_t j = 0; j < n; j++) {
      cpu_acc acc;
      memset(&acc, 0, sizeof acc);
      if (op == QT_SUM || op == QT_MEAN) {
        /* Kahan's -c -> f + c */
        acc.f = cols->f[j], acc.c = -cols->c[j], acc.u = cols->u[j];
      } else {
        /* floats into f, integers into i, as the strided folds */
        qt_scalar best = qt_scalar_load(dt, (const char *)cols->best + j * qt_elsize(dt));
        if (qt_is_float(dt)) acc.f = best.f;
        else acc.i = best.i;
        acc.pos = cols->at[j];
      }
      if (jb->segs == 1) cpu_reduce_finish(&acc, op, dt, len, pd + (j0 + j) * o->d_in * des);
      else cpu_part_pack(&jb->parts[(r * o->n + j0 + j) * jb->segs + k], &acc, op, dt);
    }
  } else {
    for (int64_t j = j0; j < j1; j++) {
      cpu_acc acc;
      cpu_acc_init(&acc, op);
      if (len > 0) jb->fold_strided(ps + j * o->s_in * es, len, o->rstride, 0, &acc);
      cpu_reduce_finish(&acc, op, dt, len, pd + j * o->d_in * des);
    }
  }
}

static void cpu_dim_chunk(void *arg, int64_t chunk) {
  cpu_dim_job *jb = (cpu_dim_job *)arg;
  cpu_columns_acc cols, *colsp = NULL;
  void *mem = NULL;
  if (jb->by_columns) {
    /* 44 bytes a column: f, c, b (doubles), u (uint64), best (8 bytes), at (int32) */
    mem = malloc((size_t)CPU_REDUCE_COLS * 44);
    if (mem == NULL) {
      __atomic_store_n(&jb->oom, true, __ATOMIC_RELAXED);
      return;
    }
    cols.f = (double *)mem;
    cols.c = cols.f + CPU_REDUCE_COLS;
    cols.b = cols.c + CPU_REDUCE_COLS;
    cols.u = (uint64_t *)(cols.b + CPU_REDUCE_COLS);
    cols.best = cols.u + CPU_REDUCE_COLS;
    cols.at = (int32_t *)((char *)cols.best + (size_t)CPU_REDUCE_COLS * 8);
    colsp = &cols;
  }
  int64_t t0 = chunk * jb->tasks_per_chunk;
  int64_t t1 = t0 + jb->tasks_per_chunk < jb->tasks ? t0 + jb->tasks_per_chunk : jb->tasks;
  for (int64_t t = t0; t < t1; t++) {
    int64_t r = t / (jb->blocks * jb->segs), rest = t % (jb->blocks * jb->segs);
    int64_t b = rest / jb->segs, k = rest % jb->segs;
    int64_t j0 = b * jb->width;
    int64_t j1 = j0 + jb->width < jb->o->n ? j0 + jb->width : jb->o->n;
    cpu_dim_task(jb, r, j0, j1, k, colsp);
  }
  free(mem);
}

/* The merge pass: every output's partials, in segment order, into dst. */
static void cpu_dim_merge_chunk(void *arg, int64_t chunk) {
  const cpu_dim_job *jb = (const cpu_dim_job *)arg;
  const cpu_outer *o = jb->o;
  qt_dtype dt = o->src.dtype;
  int64_t des = (int64_t)qt_elsize(o->dst.dtype), outputs = o->rows * o->n;
  int64_t q0 = chunk * jb->outputs_per_chunk;
  int64_t q1 = q0 + jb->outputs_per_chunk < outputs ? q0 + jb->outputs_per_chunk : outputs;
  for (int64_t q = q0; q < q1; q++) {
    const cpu_part *p = jb->parts + q * jb->segs;
    cpu_acc acc, part;
    cpu_part_unpack(&acc, &p[0], jb->op, dt);
    for (int64_t k = 1; k < jb->segs; k++) {
      cpu_part_unpack(&part, &p[k], jb->op, dt);
      cpu_acc_merge(&acc, &part, jb->op, dt);
    }
    int64_t r = q / o->n, j = q % o->n, so, dof;
    cpu_outer_row(o, r, &so, &dof);
    cpu_reduce_finish(&acc, jb->op, dt, o->len, (char *)o->dst.data + dof + j * o->d_in * des);
  }
}

/* Along dim. When the outer innermost dimension is contiguous in src and the reduced
** dimension is not, whole rows are folded at once into an array of accumulators (a
** columns fold). */
static int cpu_reduce_dim(qt_redop op, const qt_view *dst, const qt_view *src, int dim,
                          qt_err *err) {
  cpu_outer o;
  if (!cpu_outer_make(&o, dst, src, dim)) return 0;
  cpu_dim_job jb;
  memset(&jb, 0, sizeof jb);
  jb.o = &o;
  jb.op = op;
  jb.fold_strided = cpu_strided_folds[src->dtype][op];
  jb.fold_columns = cpu_columns_folds[src->dtype][op];
  jb.fold_columns4 = cpu_columns4_folds[src->dtype][op];
  if (jb.fold_columns4 == NULL && src->dtype == QT_F32) jb.fold_columns4 = cpu_f32_columns4_arg(op);
  jb.by_columns = o.len > 1 && o.n > 1 && o.s_in == 1 && o.rstride != 1 && o.len <= INT32_MAX;
  int64_t len1 = o.len > 0 ? o.len : 1;
  jb.seg_len = jb.by_columns ? cpu_dim_segment(o.len) : len1;
  jb.segs = (len1 + jb.seg_len - 1) / jb.seg_len;
  int64_t piece;
  int64_t want = cpu_par_pieces(o.rows * o.n * len1, &piece);  /* tasks: the pool's cut */
  int64_t min_width = jb.by_columns ? CPU_REDUCE_MIN_COLS : 1;
  jb.width = jb.by_columns ? CPU_REDUCE_COLS : 1024;
  while (jb.width > min_width && o.rows * ((o.n + jb.width - 1) / jb.width) * jb.segs < want)
    jb.width /= 2;
  if (jb.width < min_width) jb.width = min_width;
  jb.blocks = (o.n + jb.width - 1) / jb.width;
  jb.tasks = o.rows * jb.blocks * jb.segs;
  int64_t per_task = (o.n < jb.width ? o.n : jb.width) * (jb.segs > 1 ? jb.seg_len : len1);
  jb.tasks_per_chunk = CPU_PAR_GRAIN / per_task + 1;
  int64_t outputs = o.rows * o.n;
  if (jb.segs > 1) {
    jb.parts = malloc((size_t)outputs * (size_t)jb.segs * sizeof *jb.parts);
    if (jb.parts == NULL) return qt_errorf(err, "%s: out of host memory", qt_redop_name(op));
  }
  cpu_parallel((jb.tasks + jb.tasks_per_chunk - 1) / jb.tasks_per_chunk, cpu_dim_chunk, &jb);
  if (jb.segs > 1 && !jb.oom) {
    jb.outputs_per_chunk = CPU_PAR_GRAIN / (4 * jb.segs) + 1;
    cpu_parallel((outputs + jb.outputs_per_chunk - 1) / jb.outputs_per_chunk,
                 cpu_dim_merge_chunk, &jb);
  }
  free(jb.parts);
  if (jb.oom) return qt_errorf(err, "%s: out of host memory", qt_redop_name(op));
  return 0;
}

int cpu_reduce(qt_device *dev, qt_redop op, const qt_view *dst, const qt_view *src, int dim,
               double arg, qt_err *err) {
  (void)dev;
  if ((unsigned)op >= (unsigned)QT_NREDOPS) return qt_errorf(err, "reduce: unknown op %d", (int)op);
  const char *name = qt_redop_name(op);
  if (!cpu_dtype_ok(src->dtype)) return qt_errorf(err, "%s: unsupported dtype", name);
  bool float_only = op != QT_SUM && op != QT_PROD && op != QT_MAX && op != QT_MIN &&
                    op != QT_ARGMAX && op != QT_ARGMIN;
  if (float_only && !qt_is_float(src->dtype))
    return qt_errorf(err, "%s: not defined for %s tensors (cast to a float dtype first)", name,
                     qt_dtypes[src->dtype].name);
  qt_dtype want = cpu_reduce_dtype(op, src->dtype);
  if (dst->dtype != want)
    return qt_errorf(err, "%s: result must be %s, got %s", name, qt_dtypes[want].name,
                     qt_dtypes[dst->dtype].name);
  if (dim < -1 || dim >= src->ndim)
    return qt_errorf(err, "%s: dimension %d out of range for a %d-d tensor", name, dim, src->ndim);
  int64_t len = dim == -1 ? cpu_view_numel(src) : src->size[dim];
  if (cpu_redop_streamed(op)) {
    if (len == 0) return qt_errorf(err, "%s: empty reductions are the core's", name);
    return cpu_reduce_streamed(op, dst, src, dim, arg, err);
  }
  if (len == 0 && op != QT_SUM && op != QT_MEAN)
    return qt_errorf(err, "%s: empty tensor", name);
  if (dim == -1) {
    if (len == 0) {
      cpu_acc acc;
      cpu_acc_init(&acc, op);
      cpu_reduce_finish(&acc, op, src->dtype, 0, (char *)dst->data);
      return 0;
    }
    return cpu_reduce_all(op, dst, src, err);
  }
  return cpu_reduce_dim(op, dst, src, dim, err);
}

