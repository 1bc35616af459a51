/*
** ops_index.c — indexing ops: gather, index_select, take, scatter_, index_add_,
** scatter_add_, index_fill_, index_copy_ (index values are checked by the devices, or here
** when there is nothing to compute).
*/
#include "ops_internal.h"

#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ================================================================== indexing */

/* Shared checks of the index operand: live, on the data's device, int32 or int64. */
static int ops_check_index(qt_ctx *ctx, const char *op, const qt_tensor *data,
                           const qt_tensor *index) {
  if (ops_live(ctx, op, index) || ops_same_device(ctx, op, data, index)) return -1;
  return ops_check_index_dtype(ctx, op, index);
}

/* torch.gather's shape rule: same ndim, and index.size(d) <= other.size(d) for every d
** (d != dim unless all_dims). `what` names the other operand in the message. */
static int ops_check_gather_shape(qt_ctx *ctx, const char *op, const qt_tensor *index,
                                  const qt_tensor *other, const char *what, int dim,
                                  bool all_dims) {
  char s1[OPS_SHAPE_LEN], s2[OPS_SHAPE_LEN];
  if (index->ndim != other->ndim)
    return qt_errorf(&ctx->err, "%s: index shape %s and %s shape %s differ in dims (%d and %d)",
                     op, ops_shape(index, s1), what, ops_shape(other, s2), index->ndim,
                     other->ndim);
  for (int d = 0; d < index->ndim; d++) {
    if ((all_dims || d != dim) && index->size[d] > other->size[d])
      return qt_errorf(&ctx->err,
                       "%s: index shape %s does not fit %s shape %s (dim %d: %lld > %lld)", op,
                       ops_shape(index, s1), what, ops_shape(other, s2), d + 1,
                       (long long)index->size[d], (long long)other->size[d]);
  }
  return 0;
}

/* Index values checked on the host, for the calls whose result (or source) is empty: the
** device is not called then (there is nothing to compute), but a bad index is an error
** whatever the shapes, with the message the devices give. */
static int ops_check_index_values(qt_ctx *ctx, const char *op, const qt_tensor *index,
                                  int64_t bound) {
  int64_t n = qt_numel(index);
  if (n == 0) return 0;
  void *host = malloc((size_t)n * qt_elsize(index->dtype));
  if (host == NULL)
    return qt_errorf(&ctx->err, "%s: out of memory reading %lld index values", op, (long long)n);
  int rc = qt_read_all(ctx, index, host);
  for (int64_t k = 0; rc == 0 && k < n; k++) {
    int64_t v = index->dtype == QT_I32 ? ((const int32_t *)host)[k] : ((const int64_t *)host)[k];
    if (v < 1 || v > bound)
      rc = qt_errorf(&ctx->err, "%s: index %lld out of range (1..%lld) at position %lld", op,
                     (long long)v, (long long)bound, (long long)(k + 1));
  }
  free(host);
  return rc;
}

static int ops_check_1d_index(qt_ctx *ctx, const char *op, const qt_tensor *index) {
  char s1[OPS_SHAPE_LEN];
  if (index->ndim != 1)
    return qt_errorf(&ctx->err, "%s: index must be 1-D, got shape %s", op, ops_shape(index, s1));
  return 0;
}

int qt_gather(qt_ctx *ctx, qt_tensor *out, const qt_tensor *src, int dim, const qt_tensor *index) {
  const char *op = "gather";
  if (ops_live(ctx, op, src) || ops_check_index(ctx, op, src, index) ||
      ops_check_dim(ctx, op, dim, src->ndim) ||
      ops_check_gather_shape(ctx, op, index, src, "src", dim, false))
    return -1;
  qt_device *dev = ops_device(src);
  if (dev->iface->gather == NULL) return ops_unsupported(ctx, op, dev);
  qt_tensor res;
  qt_tensor_init(&res);
  if (ops_alloc(ctx, op, &res, dev, src->dtype, index->ndim, index->size)) return -1;
  if (qt_numel(&res) > 0) {
    qt_view dv, sv, iv;
    qt_view_of(&dv, &res);
    qt_view_of(&sv, src);
    qt_view_of(&iv, index);
    if (dev->iface->gather(dev, &dv, &sv, dim, &iv, &ctx->err)) {
      qt_tensor_release(&res);
      return -1;
    }
  }
  *out = res;
  return 0;
}

int qt_index_select(qt_ctx *ctx, qt_tensor *out, const qt_tensor *src, int dim,
                    const qt_tensor *index) {
  const char *op = "index_select";
  if (ops_live(ctx, op, src) || ops_check_index(ctx, op, src, index) ||
      ops_check_dim(ctx, op, dim, src->ndim) || ops_check_1d_index(ctx, op, index))
    return -1;
  qt_device *dev = ops_device(src);
  if (dev->iface->index_select == NULL) return ops_unsupported(ctx, op, dev);
  int64_t size[QT_MAXDIM];
  for (int d = 0; d < src->ndim; d++) size[d] = src->size[d];
  size[dim] = index->size[0];
  qt_tensor res;
  qt_tensor_init(&res);
  if (ops_alloc(ctx, op, &res, dev, src->dtype, src->ndim, size)) return -1;
  if (qt_numel(&res) > 0) {
    qt_view dv, sv, iv;
    qt_view_of(&dv, &res);
    qt_view_of(&sv, src);
    qt_view_of(&iv, index);
    if (dev->iface->index_select(dev, &dv, &sv, dim, &iv, &ctx->err)) {
      qt_tensor_release(&res);
      return -1;
    }
  } else if (ops_check_index_values(ctx, op, index, src->size[dim])) {
    qt_tensor_release(&res);
    return -1;
  }
  *out = res;
  return 0;
}

int qt_take(qt_ctx *ctx, qt_tensor *out, const qt_tensor *src, const qt_tensor *index) {
  const char *op = "take";
  if (ops_live(ctx, op, src) || ops_check_index(ctx, op, src, index)) return -1;
  qt_device *dev = ops_device(src);
  if (dev->iface->take == NULL) return ops_unsupported(ctx, op, dev);
  qt_tensor res;
  qt_tensor_init(&res);
  if (ops_alloc(ctx, op, &res, dev, src->dtype, index->ndim, index->size)) return -1;
  if (qt_numel(&res) > 0) {
    qt_view dv, sv, iv;
    qt_view_of(&dv, &res);
    qt_view_of(&sv, src);
    qt_view_of(&iv, index);
    if (dev->iface->take(dev, &dv, &sv, &iv, &ctx->err)) {
      qt_tensor_release(&res);
      return -1;
    }
  }
  *out = res;
  return 0;
}

/* Devices name their index-value errors after the slot ("scatter: index 0 out of range
** ..."); the user called the in-place method, so the message is made to say "scatter_:".
** A message that already starts with the method's name is left alone. */
static int ops_slot_error_as(qt_ctx *ctx, const char *slot, const char *method) {
  return qt_err_rename(&ctx->err, slot, method);
}

/* The source operand of scatter_/index_add_ as the device wants it: dst's dtype, and
** never sharing memory with dst (a copy when it does). */
static int ops_source_for(qt_ctx *ctx, const char *op, qt_tensor *out, const qt_tensor *dst,
                          const qt_tensor *src) {
  if (src->dtype == dst->dtype && src->storage == dst->storage)
    return ops_copy_new(ctx, op, out, src, src->dtype);
  return ops_cast(ctx, op, out, src, dst->dtype);
}

/* The index operand of an in-place op: a copy when it lives in dst's own storage (an
** int64 tensor scattering into itself), so the writes never change indices still to be
** read. */
static int ops_index_for(qt_ctx *ctx, const char *op, qt_tensor *out, const qt_tensor *dst,
                         const qt_tensor *index) {
  if (index->storage == dst->storage) return ops_copy_new(ctx, op, out, index, index->dtype);
  qt_tensor_share(out, index);
  return 0;
}

/* The number a scatter_ or index_fill_ writes, as the device reads it for dst's dtype: both
** fields agreeing (the caller has checked that the value fits). A bool is the number's
** nonzero (0.5 is true), whichever field carried it. */
static qt_scalar ops_index_value(qt_dtype dtype, qt_scalar value) {
  if (qt_is_bool(dtype)) return qt_scalar_i(value.f != 0 || value.i != 0);
  if (!qt_is_float(dtype)) return qt_scalar_i(value.i);
  return qt_scalar_from_double(value.f);
}

int qt_scatter_(qt_ctx *ctx, qt_tensor *dst, int dim, const qt_tensor *index,
                const qt_tensor *src, qt_scalar value) {
  const char *op = "scatter_";
  if (ops_live(ctx, op, dst) || ops_check_index(ctx, op, dst, index) ||
      ops_check_dim(ctx, op, dim, dst->ndim))
    return -1;
  if (src != NULL) {
    if (ops_live(ctx, op, src) || ops_same_device(ctx, op, dst, src) ||
        ops_check_gather_shape(ctx, op, index, src, "src", dim, true))
      return -1;
  }
  if (ops_check_gather_shape(ctx, op, index, dst, "dst", dim, false) ||
      ops_check_writable(ctx, op, dst))
    return -1;
  qt_device *dev = ops_device(dst);
  if (dev->iface->scatter == NULL) return ops_unsupported(ctx, op, dev);
  if (qt_numel(index) == 0) return 0;
  /* nothing to write: the device is not called, but every index is still checked (into a
  ** dim of size 0, every one is out of range), here and now rather than at a later sync */
  if (qt_numel(dst) == 0) return ops_check_index_values(ctx, op, index, dst->size[dim]);

  if (src == NULL) value = ops_index_value(dst->dtype, value);
  int rc = -1;
  qt_tensor cs, ci;
  qt_tensor_init(&cs);
  qt_tensor_init(&ci);
  qt_view dv, iv, sv;
  if (ops_index_for(ctx, op, &ci, dst, index)) goto cleanup;
  qt_view_of(&dv, dst);
  qt_view_of(&iv, &ci);
  if (src != NULL) {
    if (ops_source_for(ctx, op, &cs, dst, src)) goto cleanup;
    qt_view_of(&sv, &cs);
  }
  rc = dev->iface->scatter(dev, &dv, dim, &iv, src != NULL ? &sv : NULL, value, &ctx->err);
  if (rc) ops_slot_error_as(ctx, "scatter", op);
cleanup:
  qt_tensor_release(&cs);
  qt_tensor_release(&ci);
  return rc;
}

/* index_add_'s and index_copy_'s shape rule: src is dst's shape with #index along dim. */
static int ops_check_slices_shape(qt_ctx *ctx, const char *op, const qt_tensor *dst, int dim,
                                  const qt_tensor *index, const qt_tensor *src) {
  bool fits = src->ndim == dst->ndim;
  for (int d = 0; fits && d < dst->ndim; d++)
    fits = src->size[d] == (d == dim ? index->size[0] : dst->size[d]);
  if (fits) return 0;
  char s1[OPS_SHAPE_LEN], s2[OPS_SHAPE_LEN];
  return qt_errorf(&ctx->err,
                   "%s: src shape %s does not fit dst shape %s with %lld indices along dim %d",
                   op, ops_shape(src, s1), ops_shape(dst, s2), (long long)index->size[0],
                   dim + 1);
}

/* A slot that puts src's elements into dst at index (index_add, scatter_add, index_copy). */
typedef int (*ops_put_slot)(qt_device *dev, const qt_view *dst, int dim, const qt_view *index,
                            const qt_view *src, qt_err *err);

/* The call every put op ends in: src as the slot wants it (dst's dtype, not sharing dst's
** memory), the index not in dst's storage, the slot, and its message said as the method's
** ("index_add: ..." -> "index_add_: ..."). */
static int ops_put(qt_ctx *ctx, const char *op, const char *slot_name, ops_put_slot slot,
                   qt_tensor *dst, int dim, const qt_tensor *index, const qt_tensor *src) {
  qt_device *dev = ops_device(dst);
  int rc = -1;
  qt_tensor cs, ci;
  qt_tensor_init(&cs);
  qt_tensor_init(&ci);
  if (ops_source_for(ctx, op, &cs, dst, src) || ops_index_for(ctx, op, &ci, dst, index))
    goto cleanup;
  qt_view dv, iv, sv;
  qt_view_of(&dv, dst);
  qt_view_of(&iv, &ci);
  qt_view_of(&sv, &cs);
  rc = slot(dev, &dv, dim, &iv, &sv, &ctx->err);
  if (rc) ops_slot_error_as(ctx, slot_name, op);
cleanup:
  qt_tensor_release(&cs);
  qt_tensor_release(&ci);
  return rc;
}

/* index_add_ and index_copy_: whole slices of src along dim put at the 1-D index's
** positions; the checks, the empty cases (the indices still count), then ops_put. */
static int ops_put_slices(qt_ctx *ctx, const char *op, const char *slot_name, qt_tensor *dst,
                          int dim, const qt_tensor *index, const qt_tensor *src, bool add) {
  if (ops_live(ctx, op, dst) || ops_check_index(ctx, op, dst, index) || ops_live(ctx, op, src) ||
      ops_same_device(ctx, op, dst, src) || ops_check_dim(ctx, op, dim, dst->ndim) ||
      ops_check_1d_index(ctx, op, index) ||
      ops_check_slices_shape(ctx, op, dst, dim, index, src) || ops_check_writable(ctx, op, dst))
    return -1;
  qt_device *dev = ops_device(dst);
  ops_put_slot slot = add ? dev->iface->index_add : dev->iface->index_copy;
  if (slot == NULL) return ops_unsupported(ctx, op, dev);
  if (qt_numel(src) == 0 || qt_numel(dst) == 0)  /* nothing to put: the indices still count */
    return ops_check_index_values(ctx, op, index, dst->size[dim]);
  return ops_put(ctx, op, slot_name, slot, dst, dim, index, src);
}

int qt_index_add_(qt_ctx *ctx, qt_tensor *dst, int dim, const qt_tensor *index,
                  const qt_tensor *src) {
  return ops_put_slices(ctx, "index_add_", "index_add", dst, dim, index, src, true);
}

int qt_index_copy_(qt_ctx *ctx, qt_tensor *dst, int dim, const qt_tensor *index,
                   const qt_tensor *src) {
  return ops_put_slices(ctx, "index_copy_", "index_copy", dst, dim, index, src, false);
}

int qt_scatter_add_(qt_ctx *ctx, qt_tensor *dst, int dim, const qt_tensor *index,
                    const qt_tensor *src) {
  const char *op = "scatter_add_";
  if (ops_live(ctx, op, dst) || ops_check_index(ctx, op, dst, index) || ops_live(ctx, op, src) ||
      ops_same_device(ctx, op, dst, src) || ops_check_dim(ctx, op, dim, dst->ndim) ||
      ops_check_gather_shape(ctx, op, index, src, "src", dim, true) ||
      ops_check_gather_shape(ctx, op, index, dst, "dst", dim, false) ||
      ops_check_writable(ctx, op, dst))
    return -1;
  qt_device *dev = ops_device(dst);
  if (dev->iface->scatter_add == NULL) return ops_unsupported(ctx, op, dev);
  if (qt_numel(index) == 0) return 0;
  /* nothing to add to: the indices still count (scatter_'s rule) */
  if (qt_numel(dst) == 0) return ops_check_index_values(ctx, op, index, dst->size[dim]);
  return ops_put(ctx, op, "scatter_add", dev->iface->scatter_add, dst, dim, index, src);
}

int qt_index_fill_(qt_ctx *ctx, qt_tensor *dst, int dim, const qt_tensor *index,
                   qt_scalar value) {
  const char *op = "index_fill_";
  if (ops_live(ctx, op, dst) || ops_check_index(ctx, op, dst, index) ||
      ops_check_dim(ctx, op, dim, dst->ndim) || ops_check_1d_index(ctx, op, index) ||
      ops_check_writable(ctx, op, dst))
    return -1;
  qt_device *dev = ops_device(dst);
  if (dev->iface->index_fill == NULL) return ops_unsupported(ctx, op, dev);
  /* slices with no elements (another dim of size 0): the indices still count */
  if (qt_numel(index) == 0) return 0;
  if (qt_numel(dst) == 0) return ops_check_index_values(ctx, op, index, dst->size[dim]);

  int rc = -1;
  qt_tensor ci;
  qt_tensor_init(&ci);
  if (ops_index_for(ctx, op, &ci, dst, index) == 0) {
    qt_view dv, iv;
    qt_view_of(&dv, dst);
    qt_view_of(&iv, &ci);
    rc = dev->iface->index_fill(dev, &dv, dim, &iv, ops_index_value(dst->dtype, value),
                                &ctx->err);
    if (rc) ops_slot_error_as(ctx, "index_fill", op);
  }
  qt_tensor_release(&ci);
  return rc;
}

