/*
** cpu_reduce_stream.c — the CPU's streamed reductions (cpu_reduce.h): prod, var, std,
** norm and logsumexp, over one dim or everything, each through blocks of float64 (int64
** for integer products) folded into a running state, on the thread pool.
*/
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cpu/cpu_internal.h"
#include "cpu/cpu_reduce.h"
#include "device.h"
#include "tensor.h"

/* ====================================================== prod, var, std, norm, logsumexp */
/* These stream each reduction's elements through a block of CPU_STREAM_BLOCK values in
** float64 (int64 for integer products), and fold each block into the running state: var
** and std take the block's two-pass mean and sum of squared deviations and merge them by
** Chan's formula (never the naive sum of squares, which loses everything for values like
** 1e8 + noise); logsumexp the block's max and sum of exp(x - max), rescaled on merging.
** The accumulators are float64 for every float dtype (a float16 would fold the same way). */

#define CPU_STREAM_BLOCK 256

/* Loads n elements at stride s (in elements) as float64, or as int64 for integer products. */
typedef void (*cpu_load_f64_fn)(const char *p, int64_t n, int64_t s, double *out);
typedef void (*cpu_load_i64_fn)(const char *p, int64_t n, int64_t s, int64_t *out);
#define CPU_LOADERS_(P, E, sfx, name, T, U, size, kind, ...) QT_UNLESS_HALF_##kind(CPU_LOADERS_AT_(sfx, T))
#define CPU_LOADERS_AT_(sfx, T)                                                          \
  static void cpu_load_f64_##sfx(const char *p, int64_t n, int64_t s, double *out) {     \
    const T *x = (const T *)p;                                                           \
    for (int64_t i = 0; i < n; i++) out[i] = (double)x[i * s];                           \
  }                                                                                      \
  static void cpu_load_i64_##sfx(const char *p, int64_t n, int64_t s, int64_t *out) {    \
    const T *x = (const T *)p;                                                           \
    for (int64_t i = 0; i < n; i++) out[i] = (int64_t)x[i * s];                          \
  }  /* (the int64 loader of a float dtype is never called: float products stay in f64) */
QT_DTYPE_LIST(CPU_LOADERS_, ~)
#define CPU_LOADER_ROW_(P, E, sfx, name, T, U, size, kind, ...) \
  QT_UNLESS_HALF_##kind([E] = cpu_load_##P##_##sfx,)
static const cpu_load_f64_fn cpu_load_f64[QT_NDTYPES] = { QT_DTYPE_LIST(CPU_LOADER_ROW_, f64) };
static const cpu_load_i64_fn cpu_load_i64[QT_NDTYPES] = { QT_DTYPE_LIST(CPU_LOADER_ROW_, i64) };

/* What norm computes for its p. */
enum { CPU_NORM_1, CPU_NORM_2, CPU_NORM_INF, CPU_NORM_NEG_INF, CPU_NORM_0, CPU_NORM_P };
static int cpu_norm_mode(double p) {
  if (p == 1) return CPU_NORM_1;
  if (p == 2) return CPU_NORM_2;
  if (p == INFINITY) return CPU_NORM_INF;
  if (p == -INFINITY) return CPU_NORM_NEG_INF;
  if (p == 0) return CPU_NORM_0;
  return CPU_NORM_P;
}

/* The running state of one streamed reduction. */
typedef struct cpu_stream {
  qt_redop op;
  double arg;
  int norm_mode;
  bool int_prod;        /* PROD of an integer or bool source: wrapping int64 */
  double n, mean, m2;   /* VAR, STD: count, mean (less shift), sum of squared deviations */
  double shift;         /* VAR, STD: the run's first element, taken off every element */
  cpu_acc sum;          /* PROD (f: the product), NORM (sums: f + c; extremes: f) */
  uint64_t u;           /* integer PROD */
  double m, s;          /* LOGSUMEXP: the max so far and sum of exp(x - m) */
  union { double f[CPU_STREAM_BLOCK]; int64_t i[CPU_STREAM_BLOCK]; } buf;
} cpu_stream;

static void cpu_stream_init(cpu_stream *st, qt_redop op, double arg, qt_dtype src) {
  memset(&st->sum, 0, sizeof st->sum);
  st->op = op;
  st->arg = arg;
  st->norm_mode = cpu_norm_mode(arg);
  st->int_prod = op == QT_PROD && !qt_is_float(src);
  st->n = st->mean = st->m2 = st->shift = 0;
  st->u = 1;
  st->m = -INFINITY;
  st->s = 0;
  if (op == QT_PROD) st->sum.f = 1;
  if (op == QT_NORM && st->norm_mode == CPU_NORM_NEG_INF) st->sum.f = INFINITY;
}

/* Folds the k >= 1 float64 values in st->buf.f into the state. */
static void cpu_stream_block(cpu_stream *st, int64_t k) {
  const double *x = st->buf.f;
  switch (st->op) {
    case QT_PROD: {
      double p = st->sum.f;
      for (int64_t i = 0; i < k; i++) p *= x[i];
      st->sum.f = p;
      break;
    }
    case QT_VAR: case QT_STD: {
      /* Every value less the run's first: the block means are then small, so merging
      ** them loses nothing to a mean of 1e9's magnitude (x - shift is exact for close x). */
      if (st->n == 0) st->shift = x[0];
      double b = 0, bm2 = 0;
      for (int64_t i = 0; i < k; i++) b += x[i] - st->shift;
      b /= (double)k;
      for (int64_t i = 0; i < k; i++) {
        double d = (x[i] - st->shift) - b;
        bm2 += d * d;
      }
      if (st->n == 0) {
        st->n = (double)k, st->mean = b, st->m2 = bm2;
      } else {  /* Chan, Golub and LeVeque: merging two (n, mean, m2) */
        double n = st->n + (double)k, delta = b - st->mean;
        st->mean += delta * ((double)k / n);
        st->m2 += bm2 + delta * delta * (st->n * (double)k / n);
        st->n = n;
      }
      break;
    }
    case QT_NORM: {
      double acc = 0;
      switch (st->norm_mode) {
        case CPU_NORM_1: for (int64_t i = 0; i < k; i++) acc += fabs(x[i]); break;
        case CPU_NORM_2: for (int64_t i = 0; i < k; i++) acc += x[i] * x[i]; break;
        case CPU_NORM_0: for (int64_t i = 0; i < k; i++) acc += x[i] != 0; break;
        case CPU_NORM_P: for (int64_t i = 0; i < k; i++) acc += pow(fabs(x[i]), st->arg); break;
        default: {  /* the largest or smallest magnitude; NaN wins */
          bool max = st->norm_mode == CPU_NORM_INF;
          double best = st->sum.f;
          for (int64_t i = 0; i < k && best == best; i++) {
            double a = fabs(x[i]);
            if (a != a || (max ? a > best : a < best)) best = a;
          }
          st->sum.f = best;
          return;
        }
      }
      cpu_neumaier(&st->sum, acc);
      break;
    }
    case QT_LOGSUMEXP: {
      if (st->m != st->m) return;  /* NaN seen: stays NaN */
      double bm = -INFINITY;
      for (int64_t i = 0; i < k; i++) {
        if (x[i] != x[i]) { st->m = NAN; return; }
        if (x[i] > bm) bm = x[i];
      }
      if (bm == -INFINITY) return;  /* nothing but -inf adds nothing */
      if (bm == INFINITY || st->m == INFINITY) { st->m = INFINITY; st->s = 1; return; }
      double bs = 0;
      for (int64_t i = 0; i < k; i++) bs += exp(x[i] - bm);
      if (bm > st->m) {
        st->s = st->s * exp(st->m - bm) + bs;  /* exp(-inf) = 0 on the first block */
        st->m = bm;
      } else {
        st->s += bs * exp(bm - st->m);
      }
      break;
    }
    default: break;
  }
}

/* Feeds n elements of a run (stride s, in elements) into the state. */
static void cpu_stream_feed(cpu_stream *st, const char *p, int64_t n, int64_t s, qt_dtype dtype) {
  int64_t es = (int64_t)qt_elsize(dtype);
  for (int64_t at = 0; at < n; at += CPU_STREAM_BLOCK) {
    int64_t k = n - at < CPU_STREAM_BLOCK ? n - at : CPU_STREAM_BLOCK;
    const char *q = p + at * s * es;
    if (st->int_prod) {
      cpu_load_i64[dtype](q, k, s, st->buf.i);
      uint64_t u = st->u;
      for (int64_t i = 0; i < k; i++) u *= (uint64_t)st->buf.i[i];
      st->u = u;
    } else {
      cpu_load_f64[dtype](q, k, s, st->buf.f);
      cpu_stream_block(st, k);
    }
  }
}

/* Writes the finished reduction to out (dst's dtype). */
static void cpu_stream_finish(const cpu_stream *st, qt_dtype dtype, char *out) {
  double v = 0;
  switch (st->op) {
    case QT_PROD:
      if (st->int_prod) { *(int64_t *)out = (int64_t)st->u; return; }
      v = st->sum.f;
      break;
    case QT_VAR: case QT_STD: {
      double divisor = st->n - st->arg > 0 ? st->n - st->arg : 0;
      v = st->m2 / divisor;
      if (st->op == QT_STD) v = sqrt(v);
      break;
    }
    case QT_NORM:
      switch (st->norm_mode) {
        case CPU_NORM_INF: case CPU_NORM_NEG_INF: v = st->sum.f; break;
        case CPU_NORM_2: v = sqrt(cpu_acc_sum(&st->sum)); break;
        case CPU_NORM_P: v = pow(cpu_acc_sum(&st->sum), 1.0 / st->arg); break;
        default: v = cpu_acc_sum(&st->sum); break;
      }
      break;
    case QT_LOGSUMEXP:
      v = (st->m != st->m || st->m == -INFINITY || st->m == INFINITY) ? st->m : st->m + log(st->s);
      break;
    default: break;
  }
  qt_scalar_store(dtype, out, qt_scalar_from_double(v));
}

bool cpu_redop_streamed(qt_redop op) {
  return op == QT_PROD || op == QT_VAR || op == QT_STD || op == QT_NORM || op == QT_LOGSUMEXP;
}

/* The streamed ops along dim, or over everything (dim == -1), as cpu_reduce_dim and
** cpu_reduce_all walk them (each output's run read at its stride). */
/* A walked row into the stream of args->state. */
typedef struct cpu_stream_walk {
  cpu_stream *st;
  qt_dtype dtype;  /* the source's */
} cpu_stream_walk;

static void cpu_stream_row(char **p, const int64_t *s, int64_t n, const cpu_args *args) {
  const cpu_stream_walk *w = (const cpu_stream_walk *)args->state;
  cpu_stream_feed(w->st, p[0], n, s[0], w->dtype);
}

/* Along a dim, the outputs are streamed on the pool, a run of them per chunk; each is
** computed as on one thread. */
typedef struct cpu_stream_job {
  const cpu_outer *o;
  qt_redop op;
  double arg;
  int64_t per_chunk;  /* outputs */
  bool oom;
} cpu_stream_job;

static void cpu_stream_chunk(void *argp, int64_t chunk) {
  cpu_stream_job *jb = (cpu_stream_job *)argp;
  const cpu_outer *o = jb->o;
  cpu_stream *st = malloc(sizeof *st);
  if (st == NULL) {
    __atomic_store_n(&jb->oom, true, __ATOMIC_RELAXED);
    return;
  }
  int64_t es = (int64_t)qt_elsize(o->src.dtype), des = (int64_t)qt_elsize(o->dst.dtype);
  int64_t outputs = o->rows * o->n;
  int64_t k0 = chunk * jb->per_chunk, k1 = k0 + jb->per_chunk < outputs ? k0 + jb->per_chunk : outputs;
  for (int64_t k = k0; k < k1; k++) {
    int64_t r = k / o->n, j = k % o->n, so, dof;
    cpu_outer_row(o, r, &so, &dof);
    cpu_stream_init(st, jb->op, jb->arg, o->src.dtype);
    cpu_stream_feed(st, (const char *)o->src.data + so + j * o->s_in * es, o->len, o->rstride,
                    o->src.dtype);
    cpu_stream_finish(st, o->dst.dtype, (char *)o->dst.data + dof + j * o->d_in * des);
  }
  free(st);
}

int cpu_reduce_streamed(qt_redop op, const qt_view *dst, const qt_view *src, int dim,
                               double arg, qt_err *err) {
  if (dim == -1) {  /* everything, on the calling thread: the rows in order into one stream */
    cpu_stream *st = malloc(sizeof *st);
    if (st == NULL) return qt_errorf(err, "%s: out of host memory", qt_redop_name(op));
    qt_view v = *src;
    qt_view *vp = &v;
    qt_views_collapse(&vp, 1);
    cpu_stream_init(st, op, arg, src->dtype);
    cpu_stream_walk w = { st, src->dtype };
    cpu_args args;
    memset(&args, 0, sizeof args);
    args.state = &w;
    cpu_walk_collapsed(&vp, 1, cpu_stream_row, &args);
    cpu_stream_finish(st, dst->dtype, (char *)dst->data);
    free(st);
    return 0;
  }
  cpu_outer o;
  if (!cpu_outer_make(&o, dst, src, dim)) return 0;
  cpu_stream_job jb = { &o, op, arg, 0, false };
  int64_t outputs = o.rows * o.n;
  jb.per_chunk = CPU_PAR_GRAIN / (o.len > 0 ? o.len : 1) + 1;
  cpu_parallel((outputs + jb.per_chunk - 1) / jb.per_chunk, cpu_stream_chunk, &jb);
  if (jb.oom) return qt_errorf(err, "%s: out of host memory", qt_redop_name(op));
  return 0;
}
