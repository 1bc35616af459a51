/*
** ops_join.c — joining: cat and stack. Both allocate the result once and copy each piece
** into a view of it (narrow for cat, select for stack) with qt_copy_, which converts
** dtypes: no device code of their own, so they are right on every device by construction.
*/
#include "ops_internal.h"

#include <stdio.h>
#include <string.h>

/* Every piece live, all on one device; *dtype: the promotion of all their dtypes.
** Positions in messages are 1-based list positions. */
static int ops_join_check(qt_ctx *ctx, const char *op, int n, const qt_tensor *const *ts,
                          qt_dtype *dtype) {
  if (n <= 0 || ts == NULL)
    return qt_errorf(&ctx->err, "%s: expected a non-empty list of tensors", op);
  for (int i = 0; i < n; i++)
    if (ts[i] == NULL || ts[i]->storage == NULL || ts[i]->storage->freed)
      return qt_errorf(&ctx->err, "%s: tensor has been freed (list position %d)", op, i + 1);
  qt_device *dev = ops_device(ts[0]);
  *dtype = ts[0]->dtype;
  for (int i = 1; i < n; i++) {
    if (ops_device(ts[i]) != dev)
      return qt_errorf(&ctx->err, "%s: tensors on %s (list position 1) and %s (list position %d)",
                       op, dev->name, ops_device(ts[i])->name, i + 1);
    *dtype = qt_promote(*dtype, ts[i]->dtype);
  }
  return 0;
}

/* PyTorch's legacy rule: a 1-D tensor of size 0 joins anything (it is skipped). */
static bool ops_cat_skipped(const qt_tensor *t) { return t->ndim == 1 && t->size[0] == 0; }

int qt_cat(qt_ctx *ctx, qt_tensor *out, int n, const qt_tensor *const *ts, int dim) {
  const char *op = "cat";
  qt_dtype dtype;
  if (ops_join_check(ctx, op, n, ts, &dtype)) return -1;
  char s1[OPS_SHAPE_LEN], s2[OPS_SHAPE_LEN];
  int ref = -1;  /* the first piece that is not skipped: its shape is the one to match */
  for (int i = 0; i < n; i++) {
    if (ts[i]->ndim == 0)
      return qt_errorf(&ctx->err, "%s: the tensor at list position %d is 0-d (cat joins "
                       "tensors of at least 1 dim; stack joins 0-d ones)", op, i + 1);
    if (ref < 0 && !ops_cat_skipped(ts[i])) ref = i;
  }
  int64_t size[QT_MAXDIM];
  int ndim;
  if (ref < 0) {  /* every piece is a 1-D empty: the result is one too */
    if (ops_check_dim(ctx, op, dim, 1)) return -1;
    ndim = 1;
    size[0] = 0;
  } else {
    const qt_tensor *r = ts[ref];
    if (ops_check_dim(ctx, op, dim, r->ndim)) return -1;
    ndim = r->ndim;
    for (int d = 0; d < ndim; d++) size[d] = r->size[d];
    size[dim] = 0;
    for (int i = 0; i < n; i++) {
      const qt_tensor *t = ts[i];
      if (ops_cat_skipped(t)) continue;
      bool same = t->ndim == ndim;
      for (int d = 0; same && d < ndim; d++) same = d == dim || t->size[d] == r->size[d];
      if (!same)
        return qt_errorf(&ctx->err,
                         "%s: shape %s at list position %d does not match %s at list position "
                         "%d (sizes must agree except along dim %d)",
                         op, ops_shape(t, s1), i + 1, ops_shape(r, s2), ref + 1, dim + 1);
      if (__builtin_add_overflow(size[dim], t->size[dim], &size[dim]))
        return qt_errorf(&ctx->err, "%s: the result is too large along dim %d", op, dim + 1);
    }
  }
  qt_tensor res;
  qt_tensor_init(&res);
  if (ops_alloc(ctx, op, &res, ops_device(ts[0]), dtype, ndim, size)) return -1;
  int64_t at = 0;
  for (int i = 0; ref >= 0 && i < n; i++) {
    const qt_tensor *t = ts[i];
    if (ops_cat_skipped(t) || t->size[dim] == 0) continue;
    qt_tensor part;
    qt_tensor_init(&part);
    int rc = qt_narrow(ctx, &part, &res, dim, at, t->size[dim]);
    if (rc == 0 && qt_numel(t) > 0) rc = qt_copy_(ctx, &part, t);
    qt_tensor_release(&part);
    if (rc) {
      qt_tensor_release(&res);
      qt_err_rename(&ctx->err, "narrow", op);
      return qt_err_rename(&ctx->err, "copy_", op);
    }
    at += t->size[dim];
  }
  *out = res;
  return 0;
}

int qt_stack(qt_ctx *ctx, qt_tensor *out, int n, const qt_tensor *const *ts, int dim) {
  const char *op = "stack";
  qt_dtype dtype;
  if (ops_join_check(ctx, op, n, ts, &dtype)) return -1;
  char s1[OPS_SHAPE_LEN], s2[OPS_SHAPE_LEN];
  const qt_tensor *r = ts[0];
  for (int i = 1; i < n; i++)
    if (!ops_same_shape(ts[i], r))
      return qt_errorf(&ctx->err,
                       "%s: shape %s at list position %d does not match %s at list position 1 "
                       "(stack joins tensors of one shape)",
                       op, ops_shape(ts[i], s1), i + 1, ops_shape(r, s2));
  if (r->ndim + 1 > QT_MAXDIM)
    return qt_errorf(&ctx->err, "%s: the result would have %d dims (at most %d)", op,
                     r->ndim + 1, QT_MAXDIM);
  if (ops_check_dim(ctx, op, dim, r->ndim + 1)) return -1;
  int64_t size[QT_MAXDIM];
  for (int d = 0, s = 0; d < r->ndim + 1; d++) size[d] = d == dim ? (int64_t)n : r->size[s++];
  qt_tensor res;
  qt_tensor_init(&res);
  if (ops_alloc(ctx, op, &res, ops_device(r), dtype, r->ndim + 1, size)) return -1;
  if (qt_numel(r) > 0) {
    for (int i = 0; i < n; i++) {
      qt_tensor part;
      qt_tensor_init(&part);
      int rc = qt_select(ctx, &part, &res, dim, i);
      if (rc == 0) rc = qt_copy_(ctx, &part, ts[i]);
      qt_tensor_release(&part);
      if (rc) {
        qt_tensor_release(&res);
        qt_err_rename(&ctx->err, "select", op);
        return qt_err_rename(&ctx->err, "copy_", op);
      }
    }
  }
  *out = res;
  return 0;
}
