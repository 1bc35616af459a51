/*
** ops_reduce.c — reductions over all elements or along a set of dims.
**
** The device slot reduces one dim (or everything), so a set of dims is made one dim here:
** the kept dims go first, the reduced ones last, and the reduced ones are merged into one
** run when their strides chain (dims 2 and 3 of a contiguous tensor do). When they do not
** (dims 1 and 3), the tensor is first copied with the reduced dims innermost: one extra
** pass over the data, and the reduction then sees every reduced element as one run, which
** is what var and std need (they are not a reduction of reductions).
*/
#include "ops_internal.h"

#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ================================================================== reductions */

/* Whether op computes in a float dtype only (integers and bools are cast to float64 first,
** as NumPy and PyTorch do for mean). */
static bool ops_redop_float_only(qt_redop op) {
  return op == QT_MEAN || op == QT_VAR || op == QT_STD || op == QT_NORM || op == QT_LOGSUMEXP;
}

/* The result dtype of op over a source of dtype src (after the float-only cast): device.h's
** table. */
static qt_dtype ops_redop_dtype(qt_redop op, qt_dtype src) {
  switch (op) {
    case QT_SUM: case QT_PROD: return qt_is_float(src) ? src : QT_I64;
    case QT_ARGMAX: case QT_ARGMIN: return QT_I64;
    default: return src;
  }
}

/* The value of a reduction over nothing, or false when it has none (max, min, their
** positions, and the +-inf norms, as in NumPy and PyTorch; an error even when the result
** would be empty). var and std of nothing are 0/0. */
static bool ops_redop_empty_value(qt_redop op, double arg, qt_scalar *value) {
  switch (op) {
    case QT_SUM: *value = qt_scalar_i(0); return true;
    case QT_PROD: *value = qt_scalar_i(1); return true;
    case QT_MEAN: case QT_VAR: case QT_STD: *value = qt_scalar_from_double(NAN); return true;
    case QT_LOGSUMEXP: *value = qt_scalar_from_double(-INFINITY); return true;
    case QT_NORM:
      *value = qt_scalar_from_double(0);
      return !isinf(arg);
    default: return false;
  }
}

/* The device view of a reduction's result: res without the reduced dims (they are size 1
** in res when keepdim), so the slot always sees the shape of src without its dim. */
static void ops_reduce_dst_view(qt_view *dv, const qt_tensor *res, const bool *reduced,
                                bool keepdim) {
  qt_view_of(dv, res);
  if (!keepdim) return;
  int k = 0;
  for (int d = 0; d < res->ndim; d++) {
    if (reduced[d]) continue;
    dv->size[k] = dv->size[d];
    dv->stride[k] = dv->stride[d];
    k++;
  }
  for (int d = k; d < QT_MAXDIM; d++) dv->size[d] = 1, dv->stride[d] = 0;
  dv->ndim = k;
}

/* src seen as (kept dims..., one reduced run): sv gets that geometry and *dim the run's
** place. When the reduced dims do not merge into one run, src is copied into *tmp with
** them innermost (a plain row-major layout of the permuted shape), and sv views *tmp. */
static int ops_reduce_src_view(qt_ctx *ctx, const char *name, qt_view *sv, int *dim,
                               qt_tensor *tmp, const qt_tensor *src, const bool *reduced) {
  qt_view full;
  qt_view_of(&full, src);
  int kept = 0, nred = 0;
  int64_t extent = 1;
  int red[QT_MAXDIM];
  memset(sv, 0, sizeof *sv);
  sv->data = full.data;
  sv->dtype = full.dtype;
  for (int d = 0; d < src->ndim; d++) {
    if (reduced[d]) {
      extent *= src->size[d];
      if (src->size[d] != 1) red[nred++] = d;
      continue;
    }
    sv->size[kept] = src->size[d];
    sv->stride[kept] = full.stride[d];
    kept++;
  }
  /* the reduced dims by decreasing stride (insertion sort, stable), then chained */
  for (int a = 1; a < nred; a++) {
    int v = red[a], b = a - 1;
    while (b >= 0 && full.stride[red[b]] < full.stride[v]) { red[b + 1] = red[b]; b--; }
    red[b + 1] = v;
  }
  bool chained = true;
  for (int a = 0; a + 1 < nred; a++)
    if (full.stride[red[a]] != full.stride[red[a + 1]] * src->size[red[a + 1]]) chained = false;
  sv->ndim = kept + 1;
  sv->size[kept] = extent;
  sv->stride[kept] = nred > 0 ? full.stride[red[nred - 1]] : 1;
  *dim = kept;
  if (!chained) {
    /* copy with the reduced dims innermost: the permuted view of src into a fresh tensor */
    int64_t size[QT_MAXDIM];
    qt_view perm;
    memset(&perm, 0, sizeof perm);
    perm.data = full.data;
    perm.dtype = full.dtype;
    perm.numel = full.numel;
    int k = 0;
    for (int d = 0; d < src->ndim; d++)
      if (!reduced[d]) size[k] = src->size[d], perm.size[k] = src->size[d], perm.stride[k++] = full.stride[d];
    for (int a = 0; a < nred; a++)
      size[k] = src->size[red[a]], perm.size[k] = src->size[red[a]], perm.stride[k++] = full.stride[red[a]];
    perm.ndim = k;
    for (int d = k; d < QT_MAXDIM; d++) perm.size[d] = 1, perm.stride[d] = 0;
    qt_device *dev = ops_device(src);
    if (ops_alloc(ctx, name, tmp, dev, src->dtype, k, size)) return -1;
    qt_view tv;
    qt_view_of(&tv, tmp);
    if (ops_copy_views(ctx, name, dev, &tv, &perm)) return -1;
    sv->data = tv.data;
    int64_t step = extent;
    sv->stride[kept] = 1;
    for (int d = kept - 1; d >= 0; d--) {
      sv->stride[d] = step;
      step *= sv->size[d];
    }
  }
  sv->numel = 1;
  for (int d = 0; d < sv->ndim; d++) sv->numel *= sv->size[d];
  for (int d = sv->ndim; d < QT_MAXDIM; d++) sv->size[d] = 1, sv->stride[d] = 0;
  return 0;
}

/* Result dtypes per device.h; float-only ops (MEAN, VAR, STD, NORM, LOGSUMEXP) compute on a float64 copy of integer
** input. dims[0..ndims) are 0-based and distinct; ndims == 0 means every dim. A reduction
** over nothing is answered here without the device. */
int qt_reduce_dims(qt_ctx *ctx, qt_tensor *out, qt_redop op, const qt_tensor *t, int ndims,
                   const int *dims, bool keepdim, double arg) {
  if ((int)op < 0 || (int)op >= QT_NREDOPS)
    return qt_errorf(&ctx->err, "reduce: unknown op %d", (int)op);
  const char *name = qt_redop_name(op);
  if (ops_live(ctx, name, t)) return -1;
  if (ndims < 0 || ndims > t->ndim)
    return qt_errorf(&ctx->err, "%s: %d dims given for a %d-d tensor", name, ndims, t->ndim);
  bool reduced[QT_MAXDIM] = {false};
  for (int i = 0; i < ndims; i++) {
    if (ops_check_dim(ctx, name, dims[i], t->ndim)) return -1;
    if (reduced[dims[i]])
      return qt_errorf(&ctx->err, "%s: dim %d appears twice in the dim list", name, dims[i] + 1);
    reduced[dims[i]] = true;
  }
  if (ndims == 0)
    for (int d = 0; d < t->ndim; d++) reduced[d] = true;
  int nred = ndims == 0 ? t->ndim : ndims;
  bool is_arg = op == QT_ARGMAX || op == QT_ARGMIN;
  if (is_arg && nred > 1 && nred < t->ndim)
    return qt_errorf(&ctx->err, "%s: takes one dim, got %d", name, nred);
  if (op == QT_NORM && !(arg >= 0))  /* NaN and negative p (but -inf) */
    if (arg != -INFINITY) return qt_errorf(&ctx->err, "norm: p must be >= 0 or +-inf, got %g", arg);
  if ((op == QT_VAR || op == QT_STD) && !isfinite(arg))
    return qt_errorf(&ctx->err, "%s: correction must be a finite number, got %g", name, arg);
  qt_device *dev = ops_device(t);
  qt_dtype src_dtype = ops_redop_float_only(op) && !qt_is_float(t->dtype) ? QT_F64 : t->dtype;
  qt_dtype dtype = ops_redop_dtype(op, src_dtype);

  int ndim = 0, one_dim = -1;
  int64_t size[QT_MAXDIM];
  int64_t extent = 1;  /* saturated: an empty t's other sizes may multiply past int64, and
                       ** then the result is empty too and extent only tells 0 from not 0 */
  for (int d = 0; d < t->ndim; d++) {
    if (reduced[d]) {
      if (t->size[d] == 0 || extent == 0) extent = 0;
      else if (__builtin_mul_overflow(extent, t->size[d], &extent)) extent = INT64_MAX;
      one_dim = d;
      if (keepdim) size[ndim++] = 1;
    } else {
      size[ndim++] = t->size[d];
    }
  }

  qt_scalar empty_value;
  if (extent == 0 && !ops_redop_empty_value(op, arg, &empty_value)) {
    if (nred == 1 && ndims == 1)
      return qt_errorf(&ctx->err, "%s: empty tensor (dim %d has size 0)", name, one_dim + 1);
    return qt_errorf(&ctx->err, "%s: empty tensor", name);
  }

  int rc = -1;
  qt_tensor src, res, tmp;
  qt_tensor_init(&src);
  qt_tensor_init(&res);
  qt_tensor_init(&tmp);
  if (ops_alloc(ctx, name, &res, dev, dtype, ndim, size)) goto cleanup;
  if (qt_numel(&res) > 0) {
    qt_view dv;
    ops_reduce_dst_view(&dv, &res, reduced, keepdim);
    if (extent == 0) {
      if (ops_fill_view(ctx, name, dev, &dv, empty_value)) goto cleanup;
    } else {
      if (dev->iface->reduce == NULL) {
        ops_unsupported(ctx, name, dev);
        goto cleanup;
      }
      if (ops_cast(ctx, name, &src, t, src_dtype)) goto cleanup;
      qt_view sv;
      int dim = -1;
      if (nred == t->ndim) {  /* everything: the slot's own walk, row-major positions */
        qt_view_of(&sv, &src);
      } else if (nred == 1) {
        qt_view_of(&sv, &src);
        dim = one_dim;
      } else if (ops_reduce_src_view(ctx, name, &sv, &dim, &tmp, &src, reduced)) {
        goto cleanup;
      }
      if (dev->iface->reduce(dev, op, &dv, &sv, dim, arg, &ctx->err)) goto cleanup;
    }
  }
  *out = res;
  qt_tensor_init(&res);
  rc = 0;
cleanup:
  qt_tensor_release(&tmp);
  qt_tensor_release(&src);
  qt_tensor_release(&res);
  return rc;
}

int qt_reduce(qt_ctx *ctx, qt_tensor *out, qt_redop op, const qt_tensor *t, int dim) {
  return qt_reduce_dims(ctx, out, op, t, dim < 0 ? 0 : 1, &dim, false, 0);
}
