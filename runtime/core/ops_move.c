/*
** ops_move.c — copies and moves: contiguous, clone, dtype conversions, transfers between devices,
** copy_, and reading and writing elements from the host.
*/
#include "ops_internal.h"

#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ================================================================== copies and moves */

int qt_contiguous(qt_ctx *ctx, qt_tensor *out, const qt_tensor *t) {
  if (ops_live(ctx, "contiguous", t)) return -1;
  if (qt_is_contiguous(t)) {
    qt_tensor_share(out, t);
    return 0;
  }
  return ops_copy_new(ctx, "contiguous", out, t, t->dtype);
}

int qt_clone(qt_ctx *ctx, qt_tensor *out, const qt_tensor *t) {
  if (ops_live(ctx, "clone", t)) return -1;
  return ops_copy_new(ctx, "clone", out, t, t->dtype);
}

int qt_to_dtype(qt_ctx *ctx, qt_tensor *out, const qt_tensor *t, qt_dtype dtype) {
  if (ops_live(ctx, "to", t) || ops_check_dtype(ctx, "to", dtype)) return -1;
  return ops_cast(ctx, "to", out, t, dtype);
}

/* Contiguous bytes between a device and host memory, or straight between two views of
** the CPU device. */
static int ops_download(qt_ctx *ctx, const char *op, qt_device *dev, void *host, const void *src,
                        size_t nbytes) {
  if (nbytes == 0) return 0;
  if (ops_refuse_capture(ctx, op, dev)) return -1;
  if (dev->iface->download == NULL) {
    if (dev->kind != QT_DEV_CPU) return ops_unsupported(ctx, op, dev);
    memcpy(host, src, nbytes);
    return 0;
  }
  return dev->iface->download(dev, host, src, nbytes, &ctx->err);
}

static int ops_upload(qt_ctx *ctx, const char *op, qt_device *dev, void *dst, const void *host,
                      size_t nbytes) {
  if (nbytes == 0) return 0;
  if (ops_refuse_capture(ctx, op, dev)) return -1;
  if (dev->iface->upload == NULL) {
    if (dev->kind != QT_DEV_CPU) return ops_unsupported(ctx, op, dev);
    memcpy(dst, host, nbytes);
    return 0;
  }
  return dev->iface->upload(dev, dst, host, nbytes, &ctx->err);
}

static void *ops_data(const qt_tensor *t) {
  qt_view v;
  qt_view_of(&v, t);
  return v.data;
}

static size_t ops_nbytes(const qt_tensor *t) { return (size_t)qt_numel(t) * qt_elsize(t->dtype); }

/* dst = src across two devices (src broadcast to dst's shape, any dtypes). The bytes move
** once, in src's dtype and shape (broadcasting and conversion happen on the receiving
** side, so the wire carries the smallest form): src is made contiguous on its device,
** then downloaded to host memory and/or uploaded to dst's device, or, between two devices
** of one kind with a copy_peer slot (two GPUs), copied device to device (peer to peer where
** the GPUs allow it). When the receiving end is contiguous, of src's dtype and shape, the
** bytes go straight into (or out of) it; otherwise through a temporary and the receiving
** device's copy slot. */
static int ops_copy_across(qt_ctx *ctx, const char *op, qt_tensor *dst, const qt_tensor *src) {
  qt_device *sdev = ops_device(src), *ddev = ops_device(dst);
  qt_device *cpu = qt_cpu_device();
  int rc = -1;
  qt_tensor sc, host, staged;
  qt_tensor_init(&sc);
  qt_tensor_init(&host);
  qt_tensor_init(&staged);
  bool direct = qt_is_contiguous(dst) && dst->dtype == src->dtype && ops_same_shape(dst, src);
  const qt_tensor *from_host;  /* src's elements in host memory, contiguous */
  const qt_tensor *arrived;    /* src's elements on dst's device, contiguous */

  if (qt_numel(dst) == 0) return 0;
  if (qt_contiguous(ctx, &sc, src)) goto cleanup;
  if (sdev->kind == ddev->kind && ddev->iface->copy_peer != NULL) {
    qt_err e;
    if (!direct) {
      if (ops_alloc(ctx, op, &staged, ddev, sc.dtype, sc.ndim, sc.size)) goto cleanup;
    }
    void *to = direct ? ops_data(dst) : ops_data(&staged);
    if (ddev->iface->copy_peer(ddev, to, sdev, ops_data(&sc), ops_nbytes(&sc), &e) != 0) {
      rc = qt_errorf(&ctx->err, "%s: %s -> %s: %s", op, sdev->name, ddev->name, e.msg);
      goto cleanup;
    }
    if (direct) {
      rc = 0;
      goto cleanup;
    }
    arrived = &staged;
    goto convert;
  }
  if (sdev->kind == QT_DEV_CPU) {
    from_host = &sc;
  } else {
    if (ddev->kind == QT_DEV_CPU && direct) {
      rc = ops_download(ctx, op, sdev, ops_data(dst), ops_data(&sc), ops_nbytes(&sc));
      goto cleanup;
    }
    if (ops_alloc(ctx, op, &host, cpu, sc.dtype, sc.ndim, sc.size)) goto cleanup;
    if (ops_download(ctx, op, sdev, ops_data(&host), ops_data(&sc), ops_nbytes(&sc)))
      goto cleanup;
    from_host = &host;
  }

  if (ddev->kind == QT_DEV_CPU) {
    arrived = from_host;
  } else if (direct) {
    rc = ops_upload(ctx, op, ddev, ops_data(dst), ops_data(from_host), ops_nbytes(from_host));
    goto cleanup;
  } else {
    if (ops_alloc(ctx, op, &staged, ddev, from_host->dtype, from_host->ndim, from_host->size))
      goto cleanup;
    if (ops_upload(ctx, op, ddev, ops_data(&staged), ops_data(from_host), ops_nbytes(from_host)))
      goto cleanup;
    arrived = &staged;
  }
convert:;   /* dst's dtype, shape and strides from the contiguous elements on its device */
  qt_view dv, sv;
  qt_view_of(&dv, dst);
  ops_view_expanded(&sv, arrived, dst->ndim, dst->size);
  rc = ops_copy_views(ctx, op, ddev, &dv, &sv);
cleanup:
  qt_tensor_release(&sc);
  qt_tensor_release(&host);
  qt_tensor_release(&staged);
  return rc;
}

int qt_to_device(qt_ctx *ctx, qt_tensor *out, const qt_tensor *t, qt_device *dev) {
  const char *op = "to";
  if (ops_live(ctx, op, t)) return -1;
  if (dev == NULL) return qt_errorf(&ctx->err, "%s: no device", op);
  if (ops_device(t) == dev) {
    qt_tensor_share(out, t);
    return 0;
  }
  qt_tensor res;
  qt_tensor_init(&res);
  if (ops_alloc(ctx, op, &res, dev, t->dtype, t->ndim, t->size)) return -1;
  if (ops_copy_across(ctx, op, &res, t)) {
    qt_tensor_release(&res);
    return -1;
  }
  *out = res;
  return 0;
}

int qt_copy_(qt_ctx *ctx, qt_tensor *dst, const qt_tensor *src) {
  const char *op = "copy_";
  if (ops_live(ctx, op, dst) || ops_live(ctx, op, src) || ops_check_writable(ctx, op, dst))
    return -1;
  int64_t stride[QT_MAXDIM];
  if (!ops_expand_strides(src, dst->ndim, dst->size, stride)) {
    char s1[OPS_SHAPE_LEN], s2[OPS_SHAPE_LEN];
    return qt_errorf(&ctx->err, "%s: shape %s cannot be broadcast to %s", op, ops_shape(src, s1),
                     ops_shape(dst, s2));
  }
  if (ops_device(dst) != ops_device(src)) return ops_copy_across(ctx, op, dst, src);
  if (dst->storage == src->storage && ops_same_geometry(dst, src)) return 0;

  int rc = -1;
  qt_tensor tmp;
  qt_tensor_init(&tmp);
  const qt_tensor *from = src;
  if (ops_may_overlap(dst, src)) {
    if (ops_copy_new(ctx, op, &tmp, src, src->dtype)) goto cleanup;
    from = &tmp;
  }
  qt_view dv, sv;
  qt_view_of(&dv, dst);
  ops_view_expanded(&sv, from, dst->ndim, dst->size);
  rc = ops_copy_views(ctx, op, ops_device(dst), &dv, &sv);
cleanup:
  qt_tensor_release(&tmp);
  return rc;
}

/* ================================================================== element access */

static int ops_element_offset(qt_ctx *ctx, const char *op, const qt_tensor *t, const int64_t *pos,
                              int64_t *offset) {
  int64_t off = t->offset;
  for (int d = 0; d < t->ndim; d++) {
    if (pos[d] < 0 || pos[d] >= t->size[d])
      return qt_errorf(&ctx->err, "%s: index %lld out of range (1..%lld) for dim %d", op,
                       (long long)pos[d] + 1, (long long)t->size[d], d + 1);
    off += pos[d] * t->stride[d];
  }
  *offset = off;
  return 0;
}

int qt_get(qt_ctx *ctx, const qt_tensor *t, const int64_t *pos, qt_scalar *value) {
  const char *op = "get";
  int64_t off;
  if (ops_live(ctx, op, t) || ops_element_offset(ctx, op, t, pos, &off)) return -1;
  size_t es = qt_elsize(t->dtype);
  if (ops_check_dtype(ctx, op, t->dtype)) return -1;
  qt_cell cell;
  const char *src = (const char *)t->storage->data + (size_t)off * es;
  if (ops_download(ctx, op, ops_device(t), &cell, src, es)) return -1;
  *value = qt_scalar_load(t->dtype, &cell);
  return 0;
}

int qt_set(qt_ctx *ctx, qt_tensor *t, const int64_t *pos, qt_scalar value) {
  const char *op = "set";
  int64_t off;
  if (ops_live(ctx, op, t) || ops_check_writable(ctx, op, t) ||  /* as every write */
      ops_element_offset(ctx, op, t, pos, &off))
    return -1;
  size_t es = qt_elsize(t->dtype);
  if (ops_check_dtype(ctx, op, t->dtype)) return -1;
  qt_cell cell;
  qt_scalar_store(t->dtype, &cell, value);  /* integers wrap */
  char *dst = (char *)t->storage->data + (size_t)off * es;
  return ops_upload(ctx, op, ops_device(t), dst, &cell, es);
}

/* Row-major elements into `host`. On the CPU a strided tensor is copied by the copy slot
** straight into a contiguous view of `host` (no temporary); a GPU tensor is made
** contiguous on the GPU and downloaded in one transfer. */
int qt_read_all(qt_ctx *ctx, const qt_tensor *t, void *host) {
  const char *op = "read";
  if (ops_live(ctx, op, t)) return -1;
  if (qt_numel(t) == 0) return 0;
  qt_device *dev = ops_device(t);
  if (dev->kind == QT_DEV_CPU && !qt_is_contiguous(t)) {
    qt_view dv, sv;
    qt_view_of(&sv, t);
    dv = sv;
    dv.data = host;
    qt_contiguous_strides(t->ndim, t->size, dv.stride);
    return ops_copy_views(ctx, op, dev, &dv, &sv);
  }
  qt_tensor sc;
  if (qt_contiguous(ctx, &sc, t)) return -1;
  int rc = ops_download(ctx, op, dev, host, ops_data(&sc), ops_nbytes(&sc));
  qt_tensor_release(&sc);
  return rc;
}

int qt_sync(qt_ctx *ctx, qt_device *dev) {
  if (dev == NULL) return qt_errorf(&ctx->err, "sync: no device");
  if (ops_refuse_capture(ctx, "sync", dev)) return -1;
  if (dev->iface->sync == NULL) return 0;
  return dev->iface->sync(dev, &ctx->err);
}
