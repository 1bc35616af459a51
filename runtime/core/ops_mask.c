/*
** ops_mask.c — masks: where, masked_fill_ and masked_fill, masked_select, nonzero, and the
** reductions any, all and count_nonzero.
**
** Every device slot takes bool masks (device.h). A mask or condition of another dtype is
** made bool by ne(x, 0) on its device first, which is what "read through nonzero" means
** (NaN is true, -0.0 false): one more elementwise pass, and a bool mask (what comparisons
** give, the usual case) costs none. where and masked_fill are one pass of the where slot.
** masked_select and nonzero make a result whose size depends on the data: the true elements
** of the mask are counted by the sum reduction, that one number is read back to the host
** (the only wait), the result is allocated exactly, and the slot compacts into it. any, all
** and count_nonzero are the max, min and sum reductions of the bool mask.
*/
#include "ops_internal.h"

#include <stdio.h>
#include <string.h>

/* ================================================================== shared steps */

/* *out = m read through nonzero as bool: m itself (shared) when it is bool, else ne(m, 0).
** Messages of the ne name op instead. */
static int ops_mask_bool(qt_ctx *ctx, const char *op, qt_tensor *out, const qt_tensor *m) {
  if (qt_is_bool(m->dtype)) {
    qt_tensor_share(out, m);
    return 0;
  }
  if (qt_binary_scalar(ctx, out, QT_NE, m, qt_scalar_i(0), false, false) != 0)
    return qt_err_rename(&ctx->err, "ne", op);
  return 0;
}

/* The number of true elements of the bool tensor m (any strides, stride 0 included): a sum
** reduction on m's device, read back. This is the wait of masked_select and nonzero, and it
** also reports an earlier op's deferred GPU error, under that op's name (API.md). */
static int ops_mask_count(qt_ctx *ctx, const char *op, const qt_tensor *m, int64_t *count) {
  *count = 0;
  if (qt_numel(m) == 0) return 0;
  qt_tensor sum;
  qt_tensor_init(&sum);
  int64_t pos[QT_MAXDIM] = {0};
  qt_scalar v;
  int rc = qt_reduce(ctx, &sum, QT_SUM, m, -1);
  if (rc == 0) rc = qt_get(ctx, &sum, pos, &v);
  qt_tensor_release(&sum);
  if (rc != 0) {
    qt_err_rename(&ctx->err, "sum", op);
    return qt_err_rename(&ctx->err, "get", op);
  }
  *count = v.i;
  return 0;
}

/* NumPy's broadcast shape of n tensors, pairwise from the left; the message names the
** shape so far and the tensor that does not fit. */
static int ops_broadcast_all(qt_ctx *ctx, const char *op, const qt_tensor *const *ts, int n,
                             int *ndim, int64_t *size) {
  qt_tensor acc;
  qt_tensor_init(&acc);
  acc.ndim = ts[0]->ndim;
  for (int d = 0; d < acc.ndim; d++) acc.size[d] = ts[0]->size[d];
  for (int k = 1; k < n; k++) {
    int nd;
    int64_t s[QT_MAXDIM];
    if (ops_broadcast_shape(ctx, op, &acc, ts[k], &nd, s)) return -1;
    acc.ndim = nd;
    for (int d = 0; d < nd; d++) acc.size[d] = s[d];
  }
  *ndim = acc.ndim;
  for (int d = 0; d < acc.ndim; d++) size[d] = acc.size[d];
  return 0;
}

/* A number as a device reads it for dtype d: both fields agreeing (the caller has checked
** that d holds it). */
static qt_scalar ops_mask_value(qt_dtype d, qt_scalar v, bool is_float) {
  if (qt_is_bool(d)) return qt_scalar_i(is_float ? v.f != 0 : v.i != 0);
  if (qt_is_float(d)) return qt_scalar_from_double(is_float ? v.f : (double)v.i);
  return qt_scalar_i(v.i);
}

static bool ops_is_int(qt_dtype d) { return !qt_is_float(d) && !qt_is_bool(d); }

/* ================================================================== where */

/* The dtype a number takes next to a tensor of dtype t, as in arithmetic (ops_elementwise.c's
** ops_scalar_dtypes, NumPy 2's weak Python scalars): a boolean is the weakest and takes t;
** an integer keeps t unless t is bool (int64); a float keeps a float t, else float64. */
static qt_dtype ops_where_number_dtype(const qt_where_arg *n, qt_dtype t) {
  if (n->is_bool) return t;
  if (n->is_float) return qt_is_float(t) ? t : QT_F64;
  return qt_is_bool(t) ? QT_I64 : t;
}

/* where's result dtype (see ops.h); an integer number the dtype cannot hold is an error,
** as in arithmetic (NumPy 2 raises too), never a wrap. */
static int ops_where_dtype(qt_ctx *ctx, const qt_where_arg *a, const qt_where_arg *b,
                           qt_dtype *out) {
  qt_dtype d;
  if (a->tensor != NULL && b->tensor != NULL) {
    d = qt_promote(a->tensor->dtype, b->tensor->dtype);
  } else if (a->tensor != NULL) {
    d = ops_where_number_dtype(b, a->tensor->dtype);
  } else if (b->tensor != NULL) {
    d = ops_where_number_dtype(a, b->tensor->dtype);
  } else if (a->is_bool && b->is_bool) {
    d = QT_BOOL;
  } else if (a->is_float || b->is_float) {
    d = QT_F32;  /* PyTorch's default float dtype, qlua.tensor's for Lua floats */
  } else {
    d = QT_I64;
  }
  const qt_where_arg *nums[2] = { a, b };
  for (int k = 0; k < 2; k++) {
    const qt_where_arg *n = nums[k];
    if (n->tensor != NULL || n->is_float || n->is_bool || qt_is_float(d) || qt_is_bool(d))
      continue;
    if (n->value.i < qt_dtypes[d].min || n->value.i > qt_dtypes[d].max)
      return qt_errorf(&ctx->err, "where: %lld is out of range for %s %s tensor (convert it "
                       "with :to(\"int64\") first)", (long long)n->value.i,
                       qt_dtypes[d].name[0] == 'i' ? "an" : "a", qt_dtypes[d].name);
  }
  *out = d;
  return 0;
}

int qt_where(qt_ctx *ctx, qt_tensor *out, const qt_tensor *cond, const qt_where_arg *a,
             const qt_where_arg *b) {
  const char *op = "where";
  if (ops_live(ctx, op, cond)) return -1;
  const qt_tensor *ts[3] = { cond };
  int n = 1;
  const qt_where_arg *args[2] = { a, b };
  for (int k = 0; k < 2; k++) {
    const qt_tensor *t = args[k]->tensor;
    if (t == NULL) continue;
    if (ops_live(ctx, op, t) || ops_same_device(ctx, op, cond, t)) return -1;
    ts[n++] = t;
  }
  qt_dtype dtype = QT_F32;
  int ndim;
  int64_t size[QT_MAXDIM];
  if (ops_where_dtype(ctx, a, b, &dtype) || ops_broadcast_all(ctx, op, ts, n, &ndim, size))
    return -1;
  qt_device *dev = ops_device(cond);
  if (dev->iface->where == NULL) return ops_unsupported(ctx, op, dev);

  int rc = -1;
  qt_tensor mask, ca, cb, res;
  qt_tensor_init(&mask);
  qt_tensor_init(&ca);
  qt_tensor_init(&cb);
  qt_tensor_init(&res);
  if (ops_alloc(ctx, op, &res, dev, dtype, ndim, size)) goto cleanup;
  if (qt_numel(&res) > 0) {
    if (ops_mask_bool(ctx, op, &mask, cond)) goto cleanup;
    if (a->tensor != NULL && ops_cast(ctx, op, &ca, a->tensor, dtype)) goto cleanup;
    if (b->tensor != NULL && ops_cast(ctx, op, &cb, b->tensor, dtype)) goto cleanup;
    qt_view dv, mv, av, bv;
    qt_view_of(&dv, &res);
    ops_view_expanded(&mv, &mask, ndim, size);
    if (a->tensor != NULL) ops_view_expanded(&av, &ca, ndim, size);
    if (b->tensor != NULL) ops_view_expanded(&bv, &cb, ndim, size);
    qt_scalar as = ops_mask_value(dtype, a->value, a->is_float);
    qt_scalar bs = ops_mask_value(dtype, b->value, b->is_float);
    if (dev->iface->where(dev, &dv, &mv, a->tensor != NULL ? &av : NULL, as,
                          b->tensor != NULL ? &bv : NULL, bs, &ctx->err))
      goto cleanup;
  }
  *out = res;
  qt_tensor_init(&res);
  rc = 0;
cleanup:
  qt_tensor_release(&mask);
  qt_tensor_release(&ca);
  qt_tensor_release(&cb);
  qt_tensor_release(&res);
  return rc;
}

/* ================================================================== masked_fill */

/* The checks both masked_fills share: live operands on t's device, and a value tensor that
** is 0-d (a tensor of one element with dims is refused, as in PyTorch). */
static int ops_check_fill_args(qt_ctx *ctx, const char *op, const qt_tensor *t,
                               const qt_tensor *mask, const qt_tensor *value_tensor) {
  if (ops_live(ctx, op, t) || ops_live(ctx, op, mask) || ops_same_device(ctx, op, t, mask))
    return -1;
  if (value_tensor == NULL) return 0;
  if (ops_live(ctx, op, value_tensor) || ops_same_device(ctx, op, t, value_tensor)) return -1;
  if (value_tensor->ndim != 0) {
    char s[OPS_SHAPE_LEN];
    return qt_errorf(&ctx->err, "%s: the value must be a number or a 0-d tensor, got a tensor "
                     "of shape %s", op, ops_shape(value_tensor, s));
  }
  return 0;
}

/* dst[mask] = value through the where slot: dst = mask ? value : base. value is checked
** storable by the binding (lq_checkstorable: .f is the number for float and bool dtypes,
** .i for integer ones). base is dst itself
** for masked_fill_ (then the mask and the value tensor are read from copies when they share
** dst's storage, so no write changes what is still to be read). */
static int ops_fill_masked(qt_ctx *ctx, const char *op, const qt_tensor *dst,
                           const qt_tensor *base, const qt_tensor *mask,
                           const qt_tensor *value_tensor, qt_scalar value) {
  qt_device *dev = ops_device(dst);
  int ndim = dst->ndim;
  const int64_t *size = dst->size;
  int rc = -1;
  qt_tensor m, own, cv;
  qt_tensor_init(&m);
  qt_tensor_init(&own);
  qt_tensor_init(&cv);
  if (ops_mask_bool(ctx, op, &m, mask)) goto cleanup;
  if (m.storage == dst->storage) {
    if (ops_copy_new(ctx, op, &own, &m, QT_BOOL)) goto cleanup;
    qt_tensor_release(&m);
    m = own;
    qt_tensor_init(&own);
  }
  if (value_tensor != NULL) {
    if (value_tensor->storage == dst->storage) {
      if (ops_copy_new(ctx, op, &cv, value_tensor, dst->dtype)) goto cleanup;
    } else if (ops_cast(ctx, op, &cv, value_tensor, dst->dtype)) {
      goto cleanup;
    }
  }
  qt_view dv, mv, vv, bv;
  qt_view_of(&dv, dst);
  ops_view_expanded(&mv, &m, ndim, size);
  if (value_tensor != NULL) ops_view_expanded(&vv, &cv, ndim, size);
  ops_view_expanded(&bv, base, ndim, size);
  rc = dev->iface->where(dev, &dv, &mv, value_tensor != NULL ? &vv : NULL,
                         ops_mask_value(dst->dtype, value, !ops_is_int(dst->dtype)), &bv,
                         qt_scalar_i(0), &ctx->err);
  if (rc) qt_err_rename(&ctx->err, "where", op);
cleanup:
  qt_tensor_release(&m);
  qt_tensor_release(&own);
  qt_tensor_release(&cv);
  return rc;
}

int qt_masked_fill_(qt_ctx *ctx, qt_tensor *t, const qt_tensor *mask,
                    const qt_tensor *value_tensor, qt_scalar value) {
  const char *op = "masked_fill_";
  if (ops_check_fill_args(ctx, op, t, mask, value_tensor)) return -1;
  int64_t stride[QT_MAXDIM];
  if (!ops_expand_strides(mask, t->ndim, t->size, stride)) {
    char s1[OPS_SHAPE_LEN], s2[OPS_SHAPE_LEN];
    return qt_errorf(&ctx->err, "%s: mask shape %s cannot be broadcast to %s", op,
                     ops_shape(mask, s1), ops_shape(t, s2));
  }
  if (ops_check_writable(ctx, op, t)) return -1;
  qt_device *dev = ops_device(t);
  if (dev->iface->where == NULL) return ops_unsupported(ctx, op, dev);
  if (qt_numel(t) == 0) return 0;
  return ops_fill_masked(ctx, op, t, t, mask, value_tensor, value);
}

int qt_masked_fill(qt_ctx *ctx, qt_tensor *out, const qt_tensor *t, const qt_tensor *mask,
                   const qt_tensor *value_tensor, qt_scalar value) {
  const char *op = "masked_fill";
  if (ops_check_fill_args(ctx, op, t, mask, value_tensor)) return -1;
  const qt_tensor *ts[2] = { t, mask };
  int ndim;
  int64_t size[QT_MAXDIM];
  if (ops_broadcast_all(ctx, op, ts, 2, &ndim, size)) return -1;
  qt_device *dev = ops_device(t);
  if (dev->iface->where == NULL) return ops_unsupported(ctx, op, dev);
  qt_tensor res;
  qt_tensor_init(&res);
  if (ops_alloc(ctx, op, &res, dev, t->dtype, ndim, size)) return -1;
  if (qt_numel(&res) > 0 && ops_fill_masked(ctx, op, &res, t, mask, value_tensor, value)) {
    qt_tensor_release(&res);
    return -1;
  }
  *out = res;
  return 0;
}

/* ================================================================== compaction */

int qt_masked_select(qt_ctx *ctx, qt_tensor *out, const qt_tensor *t, const qt_tensor *mask) {
  const char *op = "masked_select";
  if (ops_live(ctx, op, t) || ops_live(ctx, op, mask) || ops_same_device(ctx, op, t, mask))
    return -1;
  const qt_tensor *ts[2] = { t, mask };
  int ndim;
  int64_t size[QT_MAXDIM];
  if (ops_broadcast_all(ctx, op, ts, 2, &ndim, size)) return -1;
  qt_device *dev = ops_device(t);
  if (dev->iface->masked_select == NULL) return ops_unsupported(ctx, op, dev);

  int rc = -1;
  qt_tensor m, me, res;
  qt_tensor_init(&m);
  qt_tensor_init(&me);
  qt_tensor_init(&res);
  int64_t count = 0;
  bool empty = false;  /* a zero size, not a product: the other sizes may overflow int64 */
  for (int d = 0; d < ndim; d++) empty = empty || size[d] == 0;
  if (!empty) {
    /* the mask as the slot sees it: bool, broadcast to the common shape (stride 0), which
    ** is also what is counted */
    if (ops_mask_bool(ctx, op, &m, mask)) goto cleanup;
    if (qt_expand(ctx, &me, &m, ndim, size)) {
      qt_err_rename(&ctx->err, "expand", op);
      goto cleanup;
    }
    if (ops_mask_count(ctx, op, &me, &count)) goto cleanup;
  }
  if (ops_alloc(ctx, op, &res, dev, t->dtype, 1, &count)) goto cleanup;
  if (count > 0) {
    qt_view dv, sv, mv;
    qt_view_of(&dv, &res);
    ops_view_expanded(&sv, t, ndim, size);
    qt_view_of(&mv, &me);
    if (dev->iface->masked_select(dev, &dv, &sv, &mv, &ctx->err)) goto cleanup;
  }
  *out = res;
  qt_tensor_init(&res);
  rc = 0;
cleanup:
  qt_tensor_release(&m);
  qt_tensor_release(&me);
  qt_tensor_release(&res);
  return rc;
}

int qt_nonzero(qt_ctx *ctx, qt_tensor *out, const qt_tensor *t) {
  const char *op = "nonzero";
  if (ops_live(ctx, op, t)) return -1;
  qt_device *dev = ops_device(t);
  if (dev->iface->nonzero == NULL) return ops_unsupported(ctx, op, dev);
  int rc = -1;
  qt_tensor m, res;
  qt_tensor_init(&m);
  qt_tensor_init(&res);
  int64_t count = 0;
  if (qt_numel(t) > 0 && (ops_mask_bool(ctx, op, &m, t) || ops_mask_count(ctx, op, &m, &count)))
    goto cleanup;
  int64_t size[2] = { count, t->ndim };  /* a 0-d t: n x 0, as PyTorch */
  if (ops_alloc(ctx, op, &res, dev, QT_I64, 2, size)) goto cleanup;
  if (count > 0 && t->ndim > 0) {
    qt_view dv, mv;
    qt_view_of(&dv, &res);
    qt_view_of(&mv, &m);
    if (dev->iface->nonzero(dev, &dv, &mv, &ctx->err)) goto cleanup;
  }
  *out = res;
  qt_tensor_init(&res);
  rc = 0;
cleanup:
  qt_tensor_release(&m);
  qt_tensor_release(&res);
  return rc;
}

/* ================================================================== any, all, count_nonzero */

/* The reduction redop of t read as bool, along dim or over everything (-1). Over nothing,
** max and min have no answer in the reduce slot (an error there), so any and all are
** answered here: a result filled with empty_value. */
static int ops_mask_reduce(qt_ctx *ctx, qt_tensor *out, const char *op, qt_redop redop,
                           const qt_tensor *t, int dim, bool empty_value) {
  if (ops_live(ctx, op, t)) return -1;
  if (dim != -1 && ops_check_dim(ctx, op, dim, t->ndim)) return -1;
  qt_device *dev = ops_device(t);
  int64_t extent = dim >= 0 ? t->size[dim] : qt_numel(t);
  int rc = -1;
  qt_tensor m, res;
  qt_tensor_init(&m);
  qt_tensor_init(&res);
  if (extent == 0 && redop != QT_SUM) {
    int ndim = 0;
    int64_t size[QT_MAXDIM];
    for (int d = 0; dim >= 0 && d < t->ndim; d++)
      if (d != dim) size[ndim++] = t->size[d];
    if (ops_alloc(ctx, op, &res, dev, QT_BOOL, ndim, size)) goto cleanup;
    qt_view dv;
    qt_view_of(&dv, &res);
    if (ops_fill_view(ctx, op, dev, &dv, qt_scalar_i(empty_value))) goto cleanup;
  } else {
    if (ops_mask_bool(ctx, op, &m, t)) goto cleanup;
    if (qt_reduce(ctx, &res, redop, &m, dim)) {
      qt_err_rename(&ctx->err, qt_redop_name(redop), op);
      goto cleanup;
    }
  }
  *out = res;
  qt_tensor_init(&res);
  rc = 0;
cleanup:
  qt_tensor_release(&m);
  qt_tensor_release(&res);
  return rc;
}

int qt_any(qt_ctx *ctx, qt_tensor *out, const qt_tensor *t, int dim) {
  return ops_mask_reduce(ctx, out, "any", QT_MAX, t, dim, false);
}

int qt_all(qt_ctx *ctx, qt_tensor *out, const qt_tensor *t, int dim) {
  return ops_mask_reduce(ctx, out, "all", QT_MIN, t, dim, true);
}

int qt_count_nonzero(qt_ctx *ctx, qt_tensor *out, const qt_tensor *t, int dim) {
  return ops_mask_reduce(ctx, out, "count_nonzero", QT_SUM, t, dim, false);
}
