/*
** cpu_optim.c — the CPU device's fused optimizer update (the optim_step slot, device.h):
** SGD and Adam/AdamW over every tensor of a parameter group in one pass.
**
** The tensors are cut into blocks of CPU_OPTIM_BLOCK elements, numbered across all of
** them, and the pool runs the blocks (cpu_parallel): a block's boundaries depend on the
** sizes alone. The update itself is written once per accumulating type (float for the
** 32- and 16-bit dtypes, double for float64), in the order qt_optim_opts's comment gives,
** which is PyTorch's; 16-bit blocks are widened into float rows on the stack first and
** rounded back after.
*/
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cpu/cpu_internal.h"
#include "device.h"
#include "tensor.h"

enum { CPU_OPTIM_BLOCK = 4096, CPU_OPTIM_MAXVIEWS = 5 };

/* One update over n elements; v[0] the parameter, v[1] the gradient, v[2..] the state. */
#define CPU_OPTIM_UPDATE(NAME, A, SQRT)                                                        \
  static void NAME(const qt_optim_opts *s, A *const *v, int64_t n) {                       \
    A *p = v[0];                                                                           \
    const A *gr = v[1];                                                                    \
    const A lr = (A)s->lr, wd = (A)s->weight_decay;                                        \
    if (s->kind == QT_OPTIM_SGD) {                                                         \
      A *buf = s->nviews > 2 ? v[2] : NULL;                                                \
      const A mom = (A)s->momentum, damp = (A)(1 - s->dampening);                          \
      for (int64_t i = 0; i < n; i++) {                                                    \
        A g = s->maximize ? -gr[i] : gr[i];                                                \
        if (wd != 0) g += wd * p[i];                                                       \
        if (buf != NULL) {                                                                 \
          A b = s->first ? g : mom * buf[i] + damp * g;                                    \
          buf[i] = b;                                                                      \
          g = s->nesterov ? g + mom * b : b;                                               \
        }                                                                                  \
        p[i] -= lr * g;                                                                    \
      }                                                                                    \
      return;                                                                              \
    }                                                                                      \
    A *m = v[2], *sq = v[3], *mx = s->amsgrad ? v[4] : NULL;                               \
    const A b1 = (A)s->beta1, b2 = (A)s->beta2, eps = (A)s->eps;                           \
    const A step = (A)(s->lr / s->bias_correction1);                                       \
    const A bc2 = (A)sqrt(s->bias_correction2), decay = (A)(1 - s->lr * s->weight_decay);  \
    for (int64_t i = 0; i < n; i++) {                                                      \
      A g = s->maximize ? -gr[i] : gr[i];                                                  \
      A pi = p[i];                                                                         \
      if (wd != 0) {                                                                       \
        if (s->decoupled) pi *= decay;                                                     \
        else g += wd * pi;                                                                 \
      }                                                                                    \
      A w = 1 - b1, mi = w < (A)0.5 ? m[i] + w * (g - m[i]) : g - (g - m[i]) * (1 - w); /* lerp */ \
      A vi = b2 * sq[i] + (1 - b2) * g * g;                                                \
      m[i] = mi;                                                                           \
      sq[i] = vi;                                                                          \
      if (mx != NULL) {                                                                    \
        if (!(mx[i] >= vi)) mx[i] = vi; /* NaN propagates, as maximum's */                \
        vi = mx[i];                                                                        \
      }                                                                                    \
      p[i] = pi - step * (mi / (SQRT(vi) / bc2 + eps));                                   \
    }                                                                                      \
  }
CPU_OPTIM_UPDATE(cpu_optim_update_f32, float, sqrtf)
CPU_OPTIM_UPDATE(cpu_optim_update_f64, double, sqrt)
#undef CPU_OPTIM_UPDATE

typedef struct cpu_optim_job {
  const qt_optim_opts *step;
  int64_t n;                 /* tensors */
  const qt_view *views;
  const int64_t *first;      /* first[k]: tensor k's first block; first[n]: every block */
} cpu_optim_job;

static void cpu_optim_block(void *arg, int64_t b) {
  const cpu_optim_job *job = arg;
  int64_t lo = 0, hi = job->n;       /* the tensor k with first[k] <= b < first[k + 1] */
  while (hi - lo > 1) {
    int64_t mid = lo + (hi - lo) / 2;
    if (job->first[mid] <= b) lo = mid;
    else hi = mid;
  }
  int nv = job->step->nviews;
  const qt_view *v = job->views + lo * nv;
  int64_t start = (b - job->first[lo]) * CPU_OPTIM_BLOCK;
  int64_t len = v[0].numel - start < CPU_OPTIM_BLOCK ? v[0].numel - start : CPU_OPTIM_BLOCK;
  qt_dtype dt = v[0].dtype;
  size_t es = qt_elsize(dt);
  if (dt == QT_F32 || dt == QT_F64) {
    void *ptr[CPU_OPTIM_MAXVIEWS];
    for (int j = 0; j < nv; j++) ptr[j] = (char *)v[j].data + (size_t)start * es;
    if (dt == QT_F32) cpu_optim_update_f32(job->step, (float *const *)ptr, len);
    else cpu_optim_update_f64(job->step, (double *const *)ptr, len);
    return;
  }
  float rows[CPU_OPTIM_MAXVIEWS][CPU_OPTIM_BLOCK];   /* 80 KiB: the 16-bit block widened */
  float *ptr[CPU_OPTIM_MAXVIEWS] = {NULL};
  for (int j = 0; j < nv; j++) {
    const void *src = (const char *)v[j].data + (size_t)start * es;
    if (dt == QT_F16) cpu_f16_load(src, 1, len, rows[j]);
    else cpu_bf16_load(src, 1, len, rows[j]);
    ptr[j] = rows[j];
  }
  cpu_optim_update_f32(job->step, ptr, len);
  for (int j = 0; j < nv; j++) {
    if (j == 1) continue;                             /* the gradient is only read */
    void *dst = (char *)v[j].data + (size_t)start * es;
    if (dt == QT_F16) cpu_f16_store(dst, 1, len, rows[j]);
    else cpu_bf16_store(dst, 1, len, rows[j]);
  }
}

int cpu_optim_step(qt_device *dev, const qt_optim_opts *step, int64_t n, const qt_view *views,
                   qt_err *err) {
  (void)dev;
  int nv = step->nviews;
  if (nv < 2 || nv > CPU_OPTIM_MAXVIEWS || n < 0)
    return qt_errorf(err, "optim_step: %d views per tensor (2 to %d expected)", nv,
                     CPU_OPTIM_MAXVIEWS);
  if (n == 0) return 0;
  qt_dtype dt = views[0].dtype;
  if (dt != QT_F32 && dt != QT_F64 && dt != QT_F16 && dt != QT_BF16)
    return qt_errorf(err, "optim_step: a float dtype expected, got %s", qt_dtypes[dt].name);
  int64_t stack_first[65];
  int64_t *first = n < 65 ? stack_first : malloc((size_t)(n + 1) * sizeof *first);
  if (first == NULL) return qt_errorf(err, "optim_step: out of host memory");
  first[0] = 0;
  for (int64_t k = 0; k < n; k++)
    first[k + 1] = first[k] + (views[k * nv].numel + CPU_OPTIM_BLOCK - 1) / CPU_OPTIM_BLOCK;
  cpu_optim_job job = {step, n, views, first};
  if (first[n] == 1) cpu_optim_block(&job, 0);        /* one block: no pool round trip */
  else if (first[n] > 0) cpu_parallel(first[n], cpu_optim_block, &job);
  if (first != stack_first) free(first);
  return 0;
}
