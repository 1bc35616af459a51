/*
** ops_reduce.c — reductions over all elements or along a dim.
*/
#include "ops_internal.h"

#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ================================================================== reductions */

/* Result dtypes per device.h: SUM of ints gives int64, MEAN of ints is computed on a
** float64 copy, ARGMAX/ARGMIN give int64, MAX/MIN keep the dtype. An empty reduction is
** answered here without the device: SUM 0, MEAN NaN, the others an error. */
int qt_reduce(qt_ctx *ctx, qt_tensor *out, qt_redop op, const qt_tensor *t, int dim) {
  if ((int)op < 0 || (int)op >= QT_NREDOPS)
    return qt_errorf(&ctx->err, "reduce: unknown op %d", (int)op);
  const char *name = qt_redop_name(op);
  if (ops_live(ctx, name, t)) return -1;
  if (dim != -1 && ops_check_dim(ctx, name, dim, t->ndim)) return -1;
  qt_device *dev = ops_device(t);
  bool is_int = !qt_is_float(t->dtype);
  qt_dtype src_dtype = (op == QT_MEAN && is_int) ? QT_F64 : t->dtype;
  qt_dtype dtype = src_dtype;
  if (op == QT_SUM && is_int) dtype = QT_I64;
  if (op == QT_ARGMAX || op == QT_ARGMIN) dtype = QT_I64;

  int ndim = 0;
  int64_t size[QT_MAXDIM];
  int64_t extent = qt_numel(t);
  if (dim >= 0) {
    extent = t->size[dim];
    for (int d = 0; d < t->ndim; d++)
      if (d != dim) size[ndim++] = t->size[d];
  }

  /* max, min and their positions have no answer over nothing, whatever the other dims
  ** (an empty result included: zeros(0, 0):argmax(1) too), as in NumPy */
  if (extent == 0 && op != QT_SUM && op != QT_MEAN) {
    if (dim >= 0) return qt_errorf(&ctx->err, "%s: empty tensor (dim %d has size 0)", name, dim + 1);
    return qt_errorf(&ctx->err, "%s: empty tensor", name);
  }

  int rc = -1;
  qt_tensor src, res;
  qt_tensor_init(&src);
  qt_tensor_init(&res);
  if (ops_alloc(ctx, name, &res, dev, dtype, ndim, size)) goto cleanup;
  if (qt_numel(&res) > 0) {
    qt_view dv;
    qt_view_of(&dv, &res);
    if (extent == 0) {
      if (op == QT_SUM) {
        if (ops_fill_view(ctx, name, dev, &dv, qt_scalar_i(0))) goto cleanup;
      } else {
        if (ops_fill_view(ctx, name, dev, &dv, qt_scalar_from_double(NAN))) goto cleanup;
      }
    } else {
      if (dev->iface->reduce == NULL) {
        ops_unsupported(ctx, name, dev);
        goto cleanup;
      }
      if (ops_cast(ctx, name, &src, t, src_dtype)) goto cleanup;
      qt_view sv;
      qt_view_of(&sv, &src);
      if (dev->iface->reduce(dev, op, &dv, &sv, dim, &ctx->err)) goto cleanup;
    }
  }
  *out = res;
  qt_tensor_init(&res);
  rc = 0;
cleanup:
  qt_tensor_release(&src);
  qt_tensor_release(&res);
  return rc;
}
