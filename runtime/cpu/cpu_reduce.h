/*
** cpu_reduce.h — what the CPU's reduction files share: the accumulator, the fold functions'
** types, and the folds each file makes (the outer view of a reduction along a dim is
** cpu_internal.h's, made in cpu_walk.c):
** cpu_reduce.c (sums, the drivers, the slot), cpu_reduce_best.c (max, min and the arg
** ops), cpu_reduce_stream.c (prod, var, std, norm, logsumexp).
*/
#ifndef QLUA_CPU_REDUCE_H
#define QLUA_CPU_REDUCE_H

#include <math.h>
#include <stdbool.h>
#include <stdint.h>

#include "cpu/cpu_internal.h"
#include "device.h"
#include "tensor.h"

/* Running state of one reduction. Float sums: f plus a compensation c (Neumaier /
** Kahan); integer sums: u (wrapping); max/min: f or i; arg ops: the best value and its
** 1-based position, pos == 0 meaning "nothing seen yet". */
typedef struct cpu_acc {
  double f, c;
  int64_t i;
  uint64_t u;
  int64_t pos;
} cpu_acc;

/* Adds x to (f, c) without losing the low-order bits of either (Neumaier's variant of
** Kahan summation, correct also when x is larger than the running sum). */
static inline void cpu_neumaier(cpu_acc *acc, double x) {
  double t = acc->f + x;
  if (fabs(acc->f) >= fabs(x)) acc->c += (acc->f - t) + x;
  else acc->c += (x - t) + acc->f;
  acc->f = t;
}

/* A float sum's value: f plus its compensation, or f alone once f is infinite or NaN
** (the compensation of an overflowed sum is inf - inf = NaN, which must not turn
** 1 + inf into NaN: the GPU, summing plainly, gets inf). */
static inline double cpu_acc_sum(const cpu_acc *acc) {
  return isfinite(acc->f) ? acc->f + acc->c : acc->f;
}

typedef struct cpu_columns_acc {
  double *f, *c, *b;     /* float sums */
  uint64_t *u;           /* integer sums */
  void *best;            /* max/min/argmax/argmin: the best value so far, in the source dtype */
  int32_t *at;           /* argmax/argmin: its 1-based row (needs len <= INT32_MAX) */
  int64_t start;         /* the run's first row: the folds of max/min/arg start there */
} cpu_columns_acc;

typedef void (*cpu_strided_fold_fn)(const char *p, int64_t n, int64_t s, int64_t base_pos,
                                    cpu_acc *acc);
typedef void (*cpu_columns_fold_fn)(const char *p, int64_t n, int64_t pos,
                                    const cpu_columns_acc *columns);
/* Four rows (`step` bytes apart; the first at 0-based position pos) at once, so a wide
** block's accumulators are read and written once per four rows instead of once per row:
** the sums, and float32 argmax/argmin with AVX2. (GCC's four-row max, min and arg
** tournaments ran slower than one row at a time: the NaN rule costs three selects a pick.) */
typedef void (*cpu_columns4_fold_fn)(const char *p, int64_t n, int64_t step, int64_t pos,
                                     const cpu_columns_acc *columns);

/* cpu_reduce_best.c: cpu_strided_<op>_<sfx> and cpu_columns_<op>_<sfx> for op max, min,
** argmax, argmin and every dtype but the 16-bit floats (they arrive widened); and, where
** the vector code is built, the four-row float32 argmax/argmin columns fold (NULL for
** another op or without AVX2). */
#define CPU_BEST_PROTOS_(P, E, sfx, name, T, U, size, kind, ...) \
  QT_UNLESS_HALF_##kind(CPU_BEST_PROTO_(max, sfx) CPU_BEST_PROTO_(min, sfx) \
                        CPU_BEST_PROTO_(argmax, sfx) CPU_BEST_PROTO_(argmin, sfx))
#define CPU_BEST_PROTO_(op, sfx)                                                        \
  void cpu_strided_##op##_##sfx(const char *p, int64_t n, int64_t s, int64_t base_pos, \
                                cpu_acc *acc);                                          \
  void cpu_columns_##op##_##sfx(const char *p, int64_t n, int64_t pos,                 \
                                const cpu_columns_acc *columns);
QT_DTYPE_LIST(CPU_BEST_PROTOS_, ~)
#undef CPU_BEST_PROTOS_
#undef CPU_BEST_PROTO_
#if defined(__x86_64__) && defined(__GNUC__)
cpu_columns4_fold_fn cpu_f32_columns4_arg(qt_redop op);
#else
#define cpu_f32_columns4_arg(op) NULL
#endif

/* cpu_reduce_stream.c: whether op is one of the streamed ones, and the reduction. */
bool cpu_redop_streamed(qt_redop op);
int cpu_reduce_streamed(qt_redop op, const qt_view *dst, const qt_view *src, int dim,
                        double arg, qt_err *err);

#endif
