/*
** ops_norm.c — the fused normalisations: layer_norm, rms_norm, group_norm and batch_norm,
** forward and backward, each one call of the device's norm slot (device.h says the
** geometry and the formulas). The core checks the shapes, makes the operands contiguous,
** works out (n, c, inner) and allocates what the slot writes. qlua.nn.functional's norms
** call these through qlua._norm and qlua._norm_backward, and autograd's derivative of
** _norm is _norm_backward.
*/
#include <math.h>
#include <string.h>

#include "core/ops_internal.h"
#include "device.h"
#include "ops.h"
#include "tensor.h"

static const char *const norm_names[] = {"layer_norm", "rms_norm", "group_norm", "batch_norm"};

static const char *norm_name(const qt_norm_args *a) {
  return (unsigned)a->op < 4u ? norm_names[a->op] : "norm";
}

static qt_dtype norm_stats_dtype(qt_dtype x) { return x == QT_F64 ? QT_F64 : QT_F32; }

/* The slot's geometry for x under a, with the statistics' count; checks the shapes. */
static int norm_geometry(qt_ctx *ctx, const qt_norm_args *a, const qt_tensor *x,
                         qt_norm_opts *o, int64_t *count) {
  const char *op = norm_name(a);
  char s1[OPS_SHAPE_LEN];
  memset(o, 0, sizeof *o);
  if ((unsigned)a->op >= 4u) return qt_errorf(&ctx->err, "norm: unknown kind %d", (int)a->op);
  if (!isfinite(a->eps) || a->eps < 0)
    return qt_errorf(&ctx->err, "%s: eps must be a finite number >= 0, got %g", op, a->eps);
  if (!qt_is_float(x->dtype))
    return qt_errorf(&ctx->err, "%s: a float input expected, got %s", op, qt_dtypes[x->dtype].name);
  o->eps = a->eps;
  o->groups = 1;
  o->inner = 1;
  if (a->op == QT_LAYER_NORM || a->op == QT_RMS_NORM) {
    if (a->normalized < 1 || a->normalized > x->ndim)
      return qt_errorf(&ctx->err, "%s: %d normalized dims for an input of %s", op, a->normalized,
                       ops_shape(x, s1));
    o->kind = a->op == QT_RMS_NORM ? QT_NORM_RMS : QT_NORM_GROUP;
    o->n = o->c = 1;
    for (int d = 0; d < x->ndim; d++) {
      if (d < x->ndim - a->normalized) o->n *= x->size[d];
      else o->c *= x->size[d];
    }
    *count = o->n;
    return 0;
  }
  if (x->ndim < 2)
    return qt_errorf(&ctx->err, "%s: an input of (N, C, ...) expected, got %s", op, ops_shape(x, s1));
  o->n = x->size[0];
  o->c = x->size[1];
  for (int d = 2; d < x->ndim; d++) o->inner *= x->size[d];
  if (a->op == QT_GROUP_NORM) {
    if (a->groups < 1 || o->c % a->groups != 0)
      return qt_errorf(&ctx->err, "%s: %lld channels do not split into %lld groups", op,
                       (long long)o->c, (long long)a->groups);
    o->kind = QT_NORM_GROUP;
    o->groups = a->groups;
    *count = o->n * o->groups;
    return 0;
  }
  o->kind = QT_NORM_BATCH;
  o->given_stats = a->given_stats;
  if (!a->given_stats && o->n * o->inner == 1)
    return qt_errorf(&ctx->err, "%s: training needs more than one value per channel, got an "
                     "input of %s", op, ops_shape(x, s1));
  *count = o->c;
  return 0;
}

/* weight or bias (may be NULL) against x: the normalized shape (LAYER/RMS) or 1-D of C. */
static int norm_check_param(qt_ctx *ctx, const qt_norm_args *a, const char *what,
                            const qt_tensor *x, const qt_tensor *p) {
  const char *op = norm_name(a);
  char s1[OPS_SHAPE_LEN], s2[OPS_SHAPE_LEN];
  if (p == NULL) return 0;
  if (ops_live(ctx, op, p) || ops_same_device(ctx, op, x, p)) return -1;
  if (p->dtype != x->dtype)
    return qt_errorf(&ctx->err, "%s: the %s is %s, the input %s", op, what,
                     qt_dtypes[p->dtype].name, qt_dtypes[x->dtype].name);
  bool ok;
  if (a->op == QT_LAYER_NORM || a->op == QT_RMS_NORM) {
    ok = p->ndim == a->normalized;
    for (int d = 0; ok && d < p->ndim; d++) ok = p->size[d] == x->size[x->ndim - p->ndim + d];
  } else {
    ok = p->ndim == 1 && p->size[0] == x->size[1];
  }
  if (!ok)
    return qt_errorf(&ctx->err, "%s: the %s is %s, an input of %s needs %s", op, what,
                     ops_shape(p, s1), ops_shape(x, s2),
                     a->op == QT_LAYER_NORM || a->op == QT_RMS_NORM ? "the normalized shape"
                                                                    : "1-D of its channels");
  return 0;
}

/* A statistics tensor given back (or running ones): 1-D of count; *out a contiguous copy in
** the statistics' dtype (shared when it is one already). */
static int norm_take_stats(qt_ctx *ctx, const qt_norm_args *a, const char *what,
                           const qt_tensor *x, const qt_tensor *t, int64_t count, qt_tensor *out) {
  const char *op = norm_name(a);
  char s1[OPS_SHAPE_LEN];
  if (t == NULL) return qt_errorf(&ctx->err, "%s: the %s is missing", op, what);
  if (ops_live(ctx, op, t) || ops_same_device(ctx, op, x, t)) return -1;
  if (t->ndim != 1 || t->size[0] != count)
    return qt_errorf(&ctx->err, "%s: the %s must be 1-D of %lld, got %s", op, what,
                     (long long)count, ops_shape(t, s1));
  if (!qt_is_float(t->dtype))
    return qt_errorf(&ctx->err, "%s: the %s must be float, got %s", op, what, qt_dtypes[t->dtype].name);
  qt_tensor c;
  qt_tensor_init(&c);
  int rc = t->dtype == norm_stats_dtype(x->dtype) ? qt_contiguous(ctx, &c, t)
                                                  : qt_to_dtype(ctx, &c, t, norm_stats_dtype(x->dtype));
  if (rc) return ops_prefix_error(ctx, op);
  *out = c;
  return 0;
}

static int norm_call(qt_ctx *ctx, const char *op, qt_device *dev, qt_norm_opts *o,
                     const qt_tensor *const *t) {
  if (dev->iface->norm == NULL) return ops_unsupported(ctx, op, dev);
  qt_view v[QT_NORM_NVIEWS];
  memset(v, 0, sizeof v);
  o->has = 0;
  for (int k = 0; k < QT_NORM_NVIEWS; k++)
    if (t[k] != NULL) {
      qt_view_of(&v[k], t[k]);
      o->has |= 1u << k;
    }
  if (dev->iface->norm(dev, o, v, &ctx->err)) return ops_prefix_error(ctx, op);
  return 0;
}

int qt_norm(qt_ctx *ctx, const qt_norm_args *a, const qt_tensor *x, const qt_tensor *weight,
            const qt_tensor *bias, const qt_tensor *running_mean, const qt_tensor *running_var,
            qt_tensor *y, qt_tensor *mean, qt_tensor *rstd) {
  const char *op = norm_name(a);
  if (ops_live(ctx, op, x)) return -1;
  qt_norm_opts o;
  int64_t count;
  if (norm_geometry(ctx, a, x, &o, &count) || norm_check_param(ctx, a, "weight", x, weight) ||
      (a->op != QT_RMS_NORM && norm_check_param(ctx, a, "bias", x, bias)))
    return -1;
  if (a->op == QT_RMS_NORM && bias != NULL)
    return qt_errorf(&ctx->err, "%s: takes no bias", op);
  qt_device *dev = ops_device(x);
  qt_dtype sd = norm_stats_dtype(x->dtype);
  qt_tensor xc, wc, bc, yt, mt, rt;
  qt_tensor *all[] = {&xc, &wc, &bc, &yt, &mt, &rt};
  for (size_t k = 0; k < sizeof all / sizeof *all; k++) qt_tensor_init(all[k]);
  int rc = -1;
  if (qt_contiguous(ctx, &xc, x) || (weight != NULL && qt_contiguous(ctx, &wc, weight)) ||
      (bias != NULL && qt_contiguous(ctx, &bc, bias)) ||
      ops_alloc(ctx, op, &yt, dev, x->dtype, x->ndim, x->size))
    goto done;
  if (o.given_stats) {
    if (norm_take_stats(ctx, a, "running_mean", x, running_mean, count, &mt) ||
        norm_take_stats(ctx, a, "running_var", x, running_var, count, &rt))
      goto done;
    qt_tensor r;   /* rstd = 1 / sqrt(var + eps), a fresh tensor (rt may be the caller's) */
    qt_tensor_init(&r);
    if (qt_binary_scalar(ctx, &r, QT_ADD, &rt, qt_scalar_f(a->eps), true, false) ||
        qt_unary_(ctx, QT_RSQRT, &r, NULL)) {
      qt_tensor_release(&r);
      goto done;
    }
    qt_tensor_release(&rt);
    rt = r;
  } else if ((a->op != QT_RMS_NORM && ops_alloc(ctx, op, &mt, dev, sd, 1, &count)) ||
             ops_alloc(ctx, op, &rt, dev, sd, 1, &count)) {
    goto done;
  }
  if (qt_numel(x) > 0) {
    const qt_tensor *t[QT_NORM_NVIEWS] = {0};
    t[QT_NORM_X] = &xc;
    t[QT_NORM_WEIGHT] = weight != NULL ? &wc : NULL;
    t[QT_NORM_BIAS] = bias != NULL ? &bc : NULL;
    t[QT_NORM_MEAN] = a->op != QT_RMS_NORM ? &mt : NULL;
    t[QT_NORM_RSTD] = &rt;
    t[QT_NORM_Y] = &yt;
    if (norm_call(ctx, op, dev, &o, t)) goto done;
  } else if (!o.given_stats && count > 0) {   /* statistics of nothing */
    if ((a->op != QT_RMS_NORM && qt_fill_(ctx, &mt, qt_scalar_f(NAN))) ||
        qt_fill_(ctx, &rt, qt_scalar_f(NAN)))
      goto done;
  }
  *y = yt;
  qt_tensor_init(&yt);
  *mean = mt;
  qt_tensor_init(&mt);
  *rstd = rt;
  qt_tensor_init(&rt);
  rc = 0;
done:
  for (size_t k = 0; k < sizeof all / sizeof *all; k++) qt_tensor_release(all[k]);
  return rc;
}

int qt_norm_backward(qt_ctx *ctx, const qt_norm_args *a, const qt_tensor *dy,
                     const qt_tensor *x, const qt_tensor *weight, const qt_tensor *mean,
                     const qt_tensor *rstd, qt_tensor *dx, qt_tensor *dweight,
                     qt_tensor *dbias) {
  const char *op = norm_name(a);
  char s1[OPS_SHAPE_LEN], s2[OPS_SHAPE_LEN];
  if (ops_live(ctx, op, x) || ops_live(ctx, op, dy) || ops_same_device(ctx, op, x, dy)) return -1;
  qt_norm_opts o;
  int64_t count;
  if (norm_geometry(ctx, a, x, &o, &count) || norm_check_param(ctx, a, "weight", x, weight))
    return -1;
  if (!ops_same_shape(dy, x) || dy->dtype != x->dtype)
    return qt_errorf(&ctx->err, "%s: the gradient is %s %s, the input %s %s", op,
                     qt_dtypes[dy->dtype].name, ops_shape(dy, s1), qt_dtypes[x->dtype].name,
                     ops_shape(x, s2));
  if (dweight != NULL && weight == NULL)
    return qt_errorf(&ctx->err, "%s: a weight's gradient without a weight", op);
  o.backward = true;
  qt_device *dev = ops_device(x);
  const qt_tensor *pshape = weight;   /* dweight and dbias: the weight's shape */
  int64_t c1 = o.c;
  qt_tensor xc, dyc, wc, mt, rt, dxt, dwt, dbt;
  qt_tensor *all[] = {&xc, &dyc, &wc, &mt, &rt, &dxt, &dwt, &dbt};
  for (size_t k = 0; k < sizeof all / sizeof *all; k++) qt_tensor_init(all[k]);
  int rc = -1;
  if (qt_contiguous(ctx, &xc, x) || qt_contiguous(ctx, &dyc, dy) ||
      (weight != NULL && qt_contiguous(ctx, &wc, weight)) ||
      (a->op != QT_RMS_NORM && norm_take_stats(ctx, a, "mean", x, mean, count, &mt)) ||
      norm_take_stats(ctx, a, "rstd", x, rstd, count, &rt) ||
      (dx != NULL && ops_alloc(ctx, op, &dxt, dev, x->dtype, x->ndim, x->size)) ||
      (dweight != NULL &&
       ops_alloc(ctx, op, &dwt, dev, x->dtype, pshape->ndim, pshape->size)) ||
      (dbias != NULL && (pshape != NULL ? ops_alloc(ctx, op, &dbt, dev, x->dtype, pshape->ndim, pshape->size)
                                        : ops_alloc(ctx, op, &dbt, dev, x->dtype, 1, &c1))))
    goto done;
  if (qt_numel(x) > 0) {
    const qt_tensor *t[QT_NORM_NVIEWS] = {0};
    t[QT_NORM_X] = &xc;
    t[QT_NORM_WEIGHT] = weight != NULL ? &wc : NULL;
    t[QT_NORM_MEAN] = a->op != QT_RMS_NORM ? &mt : NULL;
    t[QT_NORM_RSTD] = &rt;
    t[QT_NORM_DY] = &dyc;
    t[QT_NORM_DX] = dx != NULL ? &dxt : NULL;
    t[QT_NORM_DWEIGHT] = dweight != NULL ? &dwt : NULL;
    t[QT_NORM_DBIAS] = dbias != NULL ? &dbt : NULL;
    if ((dx != NULL || dweight != NULL || dbias != NULL) && norm_call(ctx, op, dev, &o, t))
      goto done;
  } else if ((dweight != NULL && qt_fill_(ctx, &dwt, qt_scalar_f(0))) ||
             (dbias != NULL && qt_fill_(ctx, &dbt, qt_scalar_f(0)))) {
    goto done;
  }
  if (dx != NULL) {
    *dx = dxt;
    qt_tensor_init(&dxt);
  }
  if (dweight != NULL) {
    *dweight = dwt;
    qt_tensor_init(&dwt);
  }
  if (dbias != NULL) {
    *dbias = dbt;
    qt_tensor_init(&dbt);
  }
  rc = 0;
done:
  for (size_t k = 0; k < sizeof all / sizeof *all; k++) qt_tensor_release(all[k]);
  return rc;
}
