/*
** ops_common.c — the helpers every op of the tensor core shares (ops_internal.h):
** operand checks, the allocation of results, casts and copies through the device slots,
** and NumPy broadcasting.
*/
#include "ops_internal.h"

#include <stdarg.h>

#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ================================================================== small helpers */


qt_device *ops_device(const qt_tensor *t) { return t->storage->device; }

const char *ops_shape(const qt_tensor *t, char *buf) {
  return qt_shape_str(t->ndim, t->size, buf, OPS_SHAPE_LEN);
}

int ops_live(qt_ctx *ctx, const char *op, const qt_tensor *t) {
  return qt_tensor_check(t, op, &ctx->err);
}

int ops_same_device(qt_ctx *ctx, const char *op, const qt_tensor *a, const qt_tensor *b) {
  if (ops_device(a) != ops_device(b))
    return qt_errorf(&ctx->err, "%s: tensors on %s and %s", op, ops_device(a)->name,
                     ops_device(b)->name);
  return 0;
}

int ops_unsupported(qt_ctx *ctx, const char *op, const qt_device *dev) {
  return qt_errorf(&ctx->err, "%s: not supported on %s", op, dev->name);
}

/* A 0-based dim against a tensor of ndim dims; the message is 1-based. */
int ops_check_dim(qt_ctx *ctx, const char *op, int dim, int ndim) {
  if (dim >= 0 && dim < ndim) return 0;
  if (ndim == 0)
    return qt_errorf(&ctx->err, "%s: dim %d out of range (the tensor is 0-d)", op, dim + 1);
  return qt_errorf(&ctx->err, "%s: dim %d out of range (1..%d)", op, dim + 1, ndim);
}

int ops_check_dtype(qt_ctx *ctx, const char *op, qt_dtype dtype) {
  if ((int)dtype < 0 || (int)dtype >= QT_NDTYPES)
    return qt_errorf(&ctx->err, "%s: unknown dtype %d", op, (int)dtype);
  return 0;
}

int ops_check_index_dtype(qt_ctx *ctx, const char *op, const qt_tensor *index) {
  if (index->dtype != QT_I32 && index->dtype != QT_I64)
    return qt_errorf(&ctx->err, "%s: index must be int32 or int64, got %s", op,
                     qt_dtypes[index->dtype].name);
  return 0;
}

/* ================================================================== values a dtype holds */

/* Significand bits (the implicit one included): every integer of magnitude up to
** 2^digits is exact, 2^digits + 1 is not. */

void ops_exact_ints(qt_dtype d, int64_t *lo, int64_t *hi) {
  if (qt_is_float(d)) {
    *hi = (int64_t)1 << qt_dtype_digits(d);
    *lo = -*hi;
  } else {
    *lo = qt_dtypes[d].min;
    *hi = qt_dtypes[d].max;
  }
}

/* Stored and read back, so the dtype's own rounding decides (65519 rounds to float16's
** 65504 and fits; 65520 rounds to inf). */
bool ops_float_fits(qt_dtype d, double v) {
  if (!isfinite(v)) return true;  /* stored as itself: not a value that failed to fit */
  qt_cell cell;
  qt_scalar_store(d, &cell, qt_scalar_from_double(v));
  return isfinite(qt_scalar_load(d, &cell).f);
}

/* In-place targets: a dimension of stride 0 and size > 1 (an expanded view) would make
** several elements one memory location, and a parallel device would race on it. */
/* Every in-place write asks here first, so this is also where the storage's version
** counter moves (counted when the write is allowed, whether or not it then succeeds). */
int ops_check_writable(qt_ctx *ctx, const char *op, const qt_tensor *t) {
  for (int d = 0; d < t->ndim; d++)
    if (t->stride[d] == 0 && t->size[d] > 1)
      return qt_errorf(&ctx->err,
                       "%s: cannot write into an expanded tensor (dim %d has stride 0)", op,
                       d + 1);
  if (t->storage != NULL) t->storage->version++;
  return 0;
}

int qt_check_writable(qt_ctx *ctx, const char *op, const qt_tensor *t) {
  return ops_check_writable(ctx, op, t);
}

bool ops_same_geometry(const qt_tensor *a, const qt_tensor *b) {
  if (a->dtype != b->dtype || a->ndim != b->ndim || a->offset != b->offset) return false;
  for (int d = 0; d < a->ndim; d++)
    if (a->size[d] != b->size[d] || a->stride[d] != b->stride[d]) return false;
  return true;
}

/* Conservative aliasing test for a write into dst while reading src: sharing a storage
** with any other geometry counts as overlapping (the caller then reads from a copy). */
bool ops_may_overlap(const qt_tensor *dst, const qt_tensor *src) {
  return dst->storage == src->storage && !ops_same_geometry(dst, src);
}

bool ops_same_shape(const qt_tensor *a, const qt_tensor *b) {
  if (a->ndim != b->ndim) return false;
  for (int d = 0; d < a->ndim; d++)
    if (a->size[d] != b->size[d]) return false;
  return true;
}

/* A new contiguous tensor; `op` names the operation in messages. */
int ops_alloc(qt_ctx *ctx, const char *op, qt_tensor *out, qt_device *dev, qt_dtype dtype,
                     int ndim, const int64_t *size) {
  char shape[OPS_SHAPE_LEN];
  if (dev == NULL || dev->iface == NULL) return qt_errorf(&ctx->err, "%s: no device", op);
  if (ops_check_dtype(ctx, op, dtype)) return -1;
  if (ndim < 0 || ndim > QT_MAXDIM)
    return qt_errorf(&ctx->err, "%s: %d dimensions (at most %d)", op, ndim, QT_MAXDIM);
  for (int d = 0; d < ndim; d++)
    if (size[d] < 0)
      return qt_errorf(&ctx->err, "%s: negative size %lld in shape %s", op, (long long)size[d],
                       qt_shape_str(ndim, size, shape, sizeof shape));
  int64_t stride[QT_MAXDIM];
  int64_t numel = qt_contiguous_strides(ndim, size, stride);
  if (numel < 0)
    return qt_errorf(&ctx->err, "%s: shape %s is too large", op,
                     qt_shape_str(ndim, size, shape, sizeof shape));
  qt_storage *s;
  if (ops_storage_new(ctx, op, dev, (size_t)numel * qt_elsize(dtype), &s)) return -1;
  qt_tensor_init(out);
  out->storage = s;
  out->dtype = dtype;
  out->ndim = ndim;
  out->offset = 0;
  for (int d = 0; d < ndim; d++) {
    out->size[d] = size[d];
    out->stride[d] = stride[d];
  }
  return 0;
}

int ops_alloc_like(qt_ctx *ctx, const char *op, qt_tensor *out, const qt_tensor *t,
                          qt_dtype dtype) {
  return ops_alloc(ctx, op, out, ops_device(t), dtype, t->ndim, t->size);
}

/* ================================================================== device slot wrappers */

/* dst = src (converting dtype) on one device; nothing to do for no elements. */
int ops_copy_views(qt_ctx *ctx, const char *op, qt_device *dev, const qt_view *dst,
                          const qt_view *src) {
  if (dev->iface->copy == NULL) return ops_unsupported(ctx, op, dev);
  if (dst->numel == 0) return 0;
  return dev->iface->copy(dev, dst, src, &ctx->err);
}

int ops_fill_view(qt_ctx *ctx, const char *op, qt_device *dev, const qt_view *dst,
                         qt_scalar value) {
  if (dev->iface->fill == NULL) return ops_unsupported(ctx, op, dev);
  if (dst->numel == 0) return 0;
  return dev->iface->fill(dev, dst, value, &ctx->err);
}

/* A new contiguous copy of t in `dtype` on t's device. */
int ops_copy_new(qt_ctx *ctx, const char *op, qt_tensor *out, const qt_tensor *t,
                        qt_dtype dtype) {
  qt_tensor res;
  qt_tensor_init(&res);
  if (ops_alloc_like(ctx, op, &res, t, dtype)) return -1;
  qt_view dv, sv;
  qt_view_of(&dv, &res);
  qt_view_of(&sv, t);
  if (ops_copy_views(ctx, op, ops_device(t), &dv, &sv)) {
    qt_tensor_release(&res);
    return -1;
  }
  *out = res;
  return 0;
}

/* *out = t as `dtype`: a share of t when it already is, else a contiguous copy. For
** operands that are only read. */
int ops_cast(qt_ctx *ctx, const char *op, qt_tensor *out, const qt_tensor *t,
                    qt_dtype dtype) {
  if (t->dtype == dtype) {
    qt_tensor_share(out, t);
    return 0;
  }
  return ops_copy_new(ctx, op, out, t, dtype);
}

/* ================================================================== broadcasting */

/* NumPy's rule: align shapes on the right; each pair equal, or one of them 1. */
int ops_broadcast_shape(qt_ctx *ctx, const char *op, const qt_tensor *a,
                               const qt_tensor *b, int *ndim, int64_t *size) {
  int n = a->ndim > b->ndim ? a->ndim : b->ndim;
  for (int d = n - 1; d >= 0; d--) {
    int da = d - (n - a->ndim), db = d - (n - b->ndim);
    int64_t sa = da >= 0 ? a->size[da] : 1, sb = db >= 0 ? b->size[db] : 1;
    if (sa != sb && sa != 1 && sb != 1) {
      char s1[OPS_SHAPE_LEN], s2[OPS_SHAPE_LEN];
      return qt_errorf(&ctx->err, "%s: shapes %s and %s cannot be broadcast", op,
                       ops_shape(a, s1), ops_shape(b, s2));
    }
    size[d] = sa == 1 ? sb : sa;
  }
  *ndim = n;
  return 0;
}

/* Strides of t viewed with shape (ndim, size): t's dims aligned on the right, size-1
** dims and missing dims broadcast with stride 0. False when t does not fit. */
bool ops_expand_strides(const qt_tensor *t, int ndim, const int64_t *size,
                               int64_t *stride) {
  if (ndim < t->ndim) return false;
  for (int d = ndim - 1; d >= 0; d--) {
    int td = d - (ndim - t->ndim);
    if (td < 0) {
      if (size[d] < 0) return false;
      stride[d] = 0;
    } else if (t->size[td] == size[d]) {
      stride[d] = t->stride[td];
    } else if (t->size[td] == 1 && size[d] >= 0) {
      stride[d] = 0;
    } else {
      return false;
    }
  }
  return true;
}

/* The device view of t broadcast to (ndim, size); the caller checked it fits. */
void ops_view_expanded(qt_view *v, const qt_tensor *t, int ndim, const int64_t *size) {
  qt_view_of(v, t);
  int64_t stride[QT_MAXDIM];
  ops_expand_strides(t, ndim, size, stride);
  int64_t numel = 1;
  bool empty = false;  /* then the other sizes may multiply past int64: not multiplied */
  for (int d = 0; d < ndim; d++) {
    v->size[d] = size[d];
    v->stride[d] = stride[d];
    empty = empty || size[d] == 0;
  }
  for (int d = 0; d < ndim && !empty; d++) numel *= size[d];
  if (empty) numel = 0;
  for (int d = ndim; d < QT_MAXDIM; d++) v->size[d] = 1, v->stride[d] = 0;
  v->ndim = ndim;
  v->numel = numel;
}

/* ================================================================== ops_buf */

static bool ops_buf_reserve(ops_buf *b, size_t more) {
  if (b->failed) return false;
  if (b->len + more + 1 <= b->cap) return true;
  size_t cap = b->cap ? b->cap : 256;
  while (cap < b->len + more + 1) cap *= 2;
  char *grown = realloc(b->data, cap);
  if (grown == NULL) {
    b->failed = true;
    return false;
  }
  b->data = grown;
  b->cap = cap;
  return true;
}

void ops_buf_add(ops_buf *b, const void *data, size_t n) {
  if (!ops_buf_reserve(b, n)) return;
  memcpy(b->data + b->len, data, n);
  b->len += n;
  b->data[b->len] = '\0';
}

void ops_buf_printf(ops_buf *b, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(NULL, 0, fmt, ap);
  va_end(ap);
  if (n < 0) b->failed = true;
  if (n < 0 || !ops_buf_reserve(b, (size_t)n)) return;
  va_start(ap, fmt);
  vsnprintf(b->data + b->len, b->cap - b->len, fmt, ap);
  va_end(ap);
  b->len += (size_t)n;
}

/* qlua.backend's answer: what runs `family` on dev (device.h's describe). */
int qt_describe(qt_ctx *ctx, qt_device *dev, const char *family, char *buf, size_t len) {
  if (len > 0) buf[0] = '\0';
  if (dev->iface->describe(dev, family, ctx->cudnn_enabled, buf, len, &ctx->err))
    return ops_prefix_error(ctx, "backend");
  return 0;
}
