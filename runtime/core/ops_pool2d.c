/*
** ops_pool2d.c — 2-D pooling: max_pool2d (with its indices) and avg_pool2d forward and
** backward, each one call of the device's pool slot (device.h). The core checks the options
** and works out the output's size as PyTorch does (floor, or ceil_mode with the last window
** starting inside the input or its left padding). max_pool2d's backward is a scatter_add of
** the gradient at the indices, which autograd does (lua/qlua/autograd/derivatives.lua).
*/
#include <string.h>

#include "core/ops_internal.h"
#include "device.h"
#include "ops.h"
#include "tensor.h"

/* x (N, C, H, W) or (C, H, W) under o: the slot's geometry. */
static int pool_geometry(qt_ctx *ctx, const char *op, const qt_tensor *x, const qt_pool_opts *o,
                         bool avg, qt_pool_geom *g) {
  char s1[OPS_SHAPE_LEN];
  memset(g, 0, sizeof *g);
  if (ops_live(ctx, op, x)) return -1;
  if (x->ndim != 3 && x->ndim != 4)
    return qt_errorf(&ctx->err, "%s: a 3-D (C, H, W) or 4-D (N, C, H, W) input expected, got %s",
                     op, ops_shape(x, s1));
  if (!qt_is_float(x->dtype))
    return qt_errorf(&ctx->err, "%s: a float input expected, got %s", op, qt_dtypes[x->dtype].name);
  g->planes = 1;
  for (int d = 0; d < x->ndim - 2; d++) g->planes *= x->size[d];
  g->h = x->size[x->ndim - 2];
  g->w = x->size[x->ndim - 1];
  g->divisor_override = o->divisor_override;
  g->count_include_pad = o->count_include_pad;
  if (o->divisor_override < 0)
    return qt_errorf(&ctx->err, "%s: divisor_override must be positive, got %lld", op,
                     (long long)o->divisor_override);
  for (int d = 0; d < 2; d++) {
    int64_t n = d == 0 ? g->h : g->w;
    if (o->kernel[d] < 1 || o->stride[d] < 1 || o->dilation[d] < 1 || o->pad[d] < 0)
      return qt_errorf(&ctx->err, "%s: kernel_size, stride and dilation must be >= 1 and padding "
                       ">= 0, got kernel_size %lld, stride %lld, padding %lld, dilation %lld", op,
                       (long long)o->kernel[d], (long long)o->stride[d], (long long)o->pad[d],
                       (long long)o->dilation[d]);
    if (avg && o->dilation[d] != 1)
      return qt_errorf(&ctx->err, "%s: takes no dilation", op);
    if (2 * o->pad[d] > o->kernel[d])
      return qt_errorf(&ctx->err, "%s: padding %lld must be at most half the kernel size %lld", op,
                       (long long)o->pad[d], (long long)o->kernel[d]);
    int64_t span = o->dilation[d] * (o->kernel[d] - 1) + 1;
    int64_t room = n + 2 * o->pad[d] - span;
    if (room < 0)
      return qt_errorf(&ctx->err, "%s: an input of %s is smaller than the window (%lld) after "
                       "padding", op, ops_shape(x, s1), (long long)span);
    int64_t m = (o->ceil_mode ? (room + o->stride[d] - 1) / o->stride[d] : room / o->stride[d]) + 1;
    if (o->ceil_mode && (m - 1) * o->stride[d] >= n + o->pad[d]) m--;
    if (d == 0) g->p = m;
    else g->q = m;
    g->kernel[d] = o->kernel[d];
    g->stride[d] = o->stride[d];
    g->pad[d] = o->pad[d];
    g->dilation[d] = o->dilation[d];
  }
  return 0;
}

static void pool_out_size(const qt_tensor *x, const qt_pool_geom *g, int64_t *size) {
  for (int d = 0; d < x->ndim - 2; d++) size[d] = x->size[d];
  size[x->ndim - 2] = g->p;
  size[x->ndim - 1] = g->q;
}

static int pool_call(qt_ctx *ctx, const char *op, qt_pool_mode mode, const qt_pool_geom *g,
                     const qt_tensor *x, const qt_tensor *y, const qt_tensor *idx) {
  qt_device *dev = ops_device(x);
  if (dev->iface->pool2d == NULL) return ops_unsupported(ctx, op, dev);
  if (qt_numel(x) == 0 || qt_numel(y) == 0) return 0;
  qt_view xv, yv, iv;
  qt_view_of(&xv, x);
  qt_view_of(&yv, y);
  if (idx != NULL) qt_view_of(&iv, idx);
  if (dev->iface->pool2d(dev, mode, g, &xv, &yv, idx != NULL ? &iv : NULL, &ctx->err))
    return ops_prefix_error(ctx, op);
  return 0;
}

int qt_max_pool2d(qt_ctx *ctx, qt_tensor *y, qt_tensor *indices, const qt_tensor *x,
                  const qt_pool_opts *o) {
  const char *op = "max_pool2d";
  qt_pool_geom g;
  if (pool_geometry(ctx, op, x, o, false, &g)) return -1;
  int64_t size[4];
  pool_out_size(x, &g, size);
  qt_tensor xc, yt, it;
  qt_tensor_init(&xc);
  qt_tensor_init(&yt);
  qt_tensor_init(&it);
  int rc = -1;
  if (qt_contiguous(ctx, &xc, x) || ops_alloc(ctx, op, &yt, ops_device(x), x->dtype, x->ndim, size) ||
      (indices != NULL && ops_alloc(ctx, op, &it, ops_device(x), QT_I64, x->ndim, size)) ||
      pool_call(ctx, op, QT_POOL_MAX, &g, &xc, &yt, indices != NULL ? &it : NULL))
    goto done;
  *y = yt;
  qt_tensor_init(&yt);
  if (indices != NULL) {
    *indices = it;
    qt_tensor_init(&it);
  }
  rc = 0;
done:
  qt_tensor_release(&xc);
  qt_tensor_release(&yt);
  qt_tensor_release(&it);
  return rc;
}

int qt_avg_pool2d(qt_ctx *ctx, qt_tensor *y, const qt_tensor *x, const qt_pool_opts *o) {
  const char *op = "avg_pool2d";
  qt_pool_geom g;
  if (pool_geometry(ctx, op, x, o, true, &g)) return -1;
  int64_t size[4];
  pool_out_size(x, &g, size);
  qt_tensor xc, yt;
  qt_tensor_init(&xc);
  qt_tensor_init(&yt);
  int rc = -1;
  if (qt_contiguous(ctx, &xc, x) || ops_alloc(ctx, op, &yt, ops_device(x), x->dtype, x->ndim, size) ||
      pool_call(ctx, op, QT_POOL_AVG, &g, &xc, &yt, NULL))
    goto done;
  *y = yt;
  qt_tensor_init(&yt);
  rc = 0;
done:
  qt_tensor_release(&xc);
  qt_tensor_release(&yt);
  return rc;
}

int qt_avg_pool2d_backward(qt_ctx *ctx, qt_tensor *dx, const qt_tensor *dy,
                           const qt_tensor *x, const qt_pool_opts *o) {
  const char *op = "avg_pool2d_backward";
  char s1[OPS_SHAPE_LEN], s2[OPS_SHAPE_LEN];
  qt_pool_geom g;
  if (pool_geometry(ctx, op, x, o, true, &g) || ops_live(ctx, op, dy) ||
      ops_same_device(ctx, op, x, dy))
    return -1;
  int64_t size[4];
  pool_out_size(x, &g, size);
  bool ok = dy->ndim == x->ndim && dy->dtype == x->dtype;
  for (int d = 0; ok && d < x->ndim; d++) ok = dy->size[d] == size[d];
  if (!ok) {
    char s3[OPS_SHAPE_LEN];
    return qt_errorf(&ctx->err, "%s: an input of %s gives an output of %s %s, the gradient is "
                     "%s %s", op, ops_shape(x, s1), qt_dtypes[x->dtype].name,
                     qt_shape_str(x->ndim, size, s2, sizeof s2), qt_dtypes[dy->dtype].name,
                     ops_shape(dy, s3));
  }
  qt_tensor dyc, dxt;
  qt_tensor_init(&dyc);
  qt_tensor_init(&dxt);
  int rc = -1;
  if (qt_contiguous(ctx, &dyc, dy) || ops_alloc(ctx, op, &dxt, ops_device(x), x->dtype, x->ndim, x->size) ||
      (qt_numel(dy) == 0 && qt_numel(&dxt) > 0 && qt_fill_(ctx, &dxt, qt_scalar_f(0))) ||
      pool_call(ctx, op, QT_POOL_AVG_BACKWARD, &g, &dxt, &dyc, NULL))
    goto done;
  *dx = dxt;
  qt_tensor_init(&dxt);
  rc = 0;
done:
  qt_tensor_release(&dyc);
  qt_tensor_release(&dxt);
  return rc;
}
