/*
** ops_optim.c — the fused optimizer update: qt_optim_step checks a group's tensors and
** hands them to the device's optim_step slot in one call (device.h says the formulas).
** qlua.optim's SGD, Adam and AdamW call it through qlua._optim_step.
*/
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/ops_internal.h"
#include "device.h"
#include "ops.h"
#include "tensor.h"

static const char *const optim_roles[2][5] = {
  {"parameter", "gradient", "momentum buffer", "", ""},
  {"parameter", "gradient", "exp_avg", "exp_avg_sq", "max_exp_avg_sq"},
};

/* A written (or read) byte range of one tensor, for the overlap check. */
typedef struct optim_span {
  const qt_storage *storage;
  size_t lo, hi;
  int64_t index;    /* k * nviews + j */
} optim_span;

static int optim_span_cmp(const void *a, const void *b) {
  const optim_span *x = a, *y = b;
  if (x->storage != y->storage) return (uintptr_t)x->storage < (uintptr_t)y->storage ? -1 : 1;
  if (x->lo != y->lo) return x->lo < y->lo ? -1 : 1;
  return 0;
}

static int optim_check_step(qt_ctx *ctx, const char *op, const qt_optim_opts *s) {
  int want = s->kind == QT_OPTIM_SGD ? (s->momentum != 0 ? 3 : 2) : (s->amsgrad ? 5 : 4);
  if (s->kind != QT_OPTIM_SGD && s->kind != QT_OPTIM_ADAM)
    return qt_errorf(&ctx->err, "%s: unknown update kind %d", op, (int)s->kind);
  if (s->nviews != want)
    return qt_errorf(&ctx->err, "%s: %d tensors per parameter given, %d expected", op,
                     s->nviews, want);
  if (!isfinite(s->lr) || !isfinite(s->weight_decay) || !isfinite(s->momentum) ||
      !isfinite(s->dampening) || !isfinite(s->beta1) || !isfinite(s->beta2) ||
      !isfinite(s->eps))
    return qt_errorf(&ctx->err, "%s: the options must be finite numbers", op);
  if (s->kind == QT_OPTIM_ADAM && !(s->bias_correction1 > 0 && s->bias_correction2 > 0))
    return qt_errorf(&ctx->err, "%s: bias corrections %g and %g (step >= 1 and betas in "
                     "[0, 1) give them in (0, 1])", op, s->bias_correction1,
                     s->bias_correction2);
  return 0;
}

/* The step count in device memory (Adam's capturable state): a one-element float64 tensor
** of dev. On a device whose memory the host reads (the CPU), the count is read now and
** turned into bias corrections; elsewhere s->step_count points at it. */
static int optim_step_count(qt_ctx *ctx, const char *op, qt_optim_opts *s, qt_device *dev,
                            const qt_tensor *count) {
  if (ops_live(ctx, op, count)) return -1;
  if (s->kind != QT_OPTIM_ADAM)
    return qt_errorf(&ctx->err, "%s: a step count tensor is for Adam only", op);
  if (count->dtype != QT_F64 || qt_numel(count) != 1)
    return qt_errorf(&ctx->err, "%s: the step count must be one float64 element, got %lld of %s",
                     op, (long long)qt_numel(count), qt_dtypes[count->dtype].name);
  if (ops_device(count) != dev)
    return qt_errorf(&ctx->err, "%s: the step count is on %s, the parameters on %s", op,
                     ops_device(count)->name, dev->name);
  qt_view cv;
  qt_view_of(&cv, count);
  const double *at = (const double *)cv.data;
  if (dev->kind == QT_DEV_CPU) {
    double t = *at;
    if (!(t >= 1))
      return qt_errorf(&ctx->err, "%s: Adam's step %g (from 1)", op, t);
    s->bias_correction1 = 1 - pow(s->beta1, t);
    s->bias_correction2 = 1 - pow(s->beta2, t);
    s->step_count = NULL;
  } else {
    s->bias_correction1 = s->bias_correction2 = 1;   /* unused: the device reads the count */
    s->step_count = at;
  }
  return 0;
}

int qt_optim_step(qt_ctx *ctx, const qt_optim_opts *step_in, const qt_tensor *step_count,
                  int64_t n, const qt_tensor *const *tensors) {
  const char *op = "_optim_step";   /* as Lua calls it: qlua._optim_step */
  char s1[OPS_SHAPE_LEN], s2[OPS_SHAPE_LEN];
  qt_optim_opts s_local = *step_in;
  qt_optim_opts *step = &s_local;
  step->step_count = NULL;
  if (n > 0 && step_count != NULL) {
    if (ops_live(ctx, op, tensors[0])) return -1;
    if (optim_step_count(ctx, op, step, ops_device(tensors[0]), step_count)) return -1;
  }
  if (optim_check_step(ctx, op, step)) return -1;
  if (n < 0) return qt_errorf(&ctx->err, "%s: %lld parameters", op, (long long)n);
  if (n == 0) return 0;
  int nv = step->nviews;
  const char *const *role = optim_roles[step->kind == QT_OPTIM_SGD ? 0 : 1];
  const qt_tensor *first = tensors[0];
  if (ops_live(ctx, op, first)) return -1;
  qt_device *dev = ops_device(first);
  qt_dtype dt = first->dtype;
  if (!qt_is_float(dt))
    return qt_errorf(&ctx->err, "%s: parameter 1 is %s; the update takes float tensors", op,
                     qt_dtypes[dt].name);
  for (int64_t k = 0; k < n; k++) {
    const qt_tensor *p = tensors[k * nv];
    for (int j = 0; j < nv; j++) {
      const qt_tensor *t = tensors[k * nv + j];
      if (ops_live(ctx, op, t) || ops_same_device(ctx, op, first, t)) return -1;
      if (t->dtype != dt)
        return qt_errorf(&ctx->err, "%s: parameter %lld's %s is %s, parameter 1 is %s (one "
                         "dtype per call)", op, (long long)k + 1, role[j],
                         qt_dtypes[t->dtype].name, qt_dtypes[dt].name);
      if (!ops_same_shape(t, p))
        return qt_errorf(&ctx->err, "%s: parameter %lld is %s but its %s is %s", op,
                         (long long)k + 1, ops_shape(p, s1), role[j], ops_shape(t, s2));
      if (!qt_is_contiguous(t))
        return qt_errorf(&ctx->err, "%s: parameter %lld's %s is not contiguous", op,
                         (long long)k + 1, role[j]);
    }
  }
  if (dev->iface->optim_step == NULL) return ops_unsupported(ctx, op, dev);
  int rc = -1;
  size_t count = (size_t)n * (size_t)nv, es = qt_elsize(dt);
  optim_span *spans = malloc(count * sizeof *spans);
  qt_view *views = malloc(count * sizeof *views);
  if (spans == NULL || views == NULL) {
    qt_errorf(&ctx->err, "%s: out of host memory for %lld parameters", op, (long long)n);
    goto cleanup;
  }
  /* No two tensors may share bytes: the device updates them all at once. */
  size_t nspans = 0;
  for (size_t i = 0; i < count; i++) {
    const qt_tensor *t = tensors[i];
    size_t numel = (size_t)qt_numel(t);
    if (numel == 0) continue;
    spans[nspans].storage = t->storage;
    spans[nspans].lo = (size_t)t->offset * es;
    spans[nspans].hi = spans[nspans].lo + numel * es;
    spans[nspans].index = (int64_t)i;
    nspans++;
  }
  qsort(spans, nspans, sizeof *spans, optim_span_cmp);
  for (size_t i = 1; i < nspans; i++)
    if (spans[i].storage == spans[i - 1].storage && spans[i].lo < spans[i - 1].hi) {
      int64_t a = spans[i - 1].index, b = spans[i].index;
      if (a > b) { int64_t x = a; a = b; b = x; }
      qt_errorf(&ctx->err, "%s: parameter %lld's %s and parameter %lld's %s share memory",
                op, (long long)(a / nv) + 1, role[a % nv], (long long)(b / nv) + 1,
                role[b % nv]);
      goto cleanup;
    }
  for (size_t i = 0; i < count; i++) {
    if (i % (size_t)nv != 1 && ops_check_writable(ctx, op, tensors[i])) goto cleanup;
    qt_view_of(&views[i], tensors[i]);
  }
  if (dev->iface->optim_step(dev, step, n, views, &ctx->err)) {
    ops_prefix_error(ctx, op);
    goto cleanup;
  }
  rc = 0;
cleanup:
  free(spans);
  free(views);
  return rc;
}
