/*
** ops_scan.c — scans and the softmax family: cumsum, cumprod, cummax, cummin, logcumsumexp
** (the scan slot), softmax and log_softmax (the softmax slot), and qlua.cross_entropy, which
** composes log_softmax with gather, arithmetic and a sum (no device code of its own).
**
** The slots see one dtype and contiguous views (device.h): the core casts to the result's
** dtype first (integers to int64 for cumsum and cumprod, to float64 for the float-only ops)
** and copies a strided source to a contiguous one, so each device has one layout to scan,
** outer x n x inner around dim. That copy costs one pass for views; a scan reads its source
** once more anyway, so it at most doubles the reads of a strided call.
*/
#include "ops_internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* dim is 0-based; a 0-d tensor takes dim 0 (PyTorch's dim 0 / -1 of a scalar). */
static int ops_scan_dim(qt_ctx *ctx, const char *op, int dim, const qt_tensor *t) {
  if (t->ndim == 0) {
    if (dim == 0) return 0;
    return qt_errorf(&ctx->err, "%s: dim %d out of range (a 0-d tensor takes dim 1)", op,
                     dim + 1);
  }
  return ops_check_dim(ctx, op, dim, t->ndim);
}

/* *out = t as dtype, contiguous (t itself, shared, when it already is both). */
static int ops_scan_source(qt_ctx *ctx, const char *op, qt_tensor *out, const qt_tensor *t,
                           qt_dtype dtype) {
  if (t->dtype != dtype || !qt_is_contiguous(t)) return ops_copy_new(ctx, op, out, t, dtype);
  qt_tensor_share(out, t);
  return 0;
}

/* The dtype the scan computes in and gives (ops.h). */
static qt_dtype ops_scan_dtype(qt_scanop op, qt_dtype d) {
  switch (op) {
    case QT_CUMSUM: case QT_CUMPROD: return qt_is_float(d) ? d : QT_I64;
    case QT_LOGCUMSUMEXP: return qt_is_float(d) ? d : QT_F64;
    default: return d;
  }
}

int qt_scan(qt_ctx *ctx, qt_tensor *out, qt_tensor *indices, qt_scanop op, const qt_tensor *t,
            int dim) {
  if ((unsigned)op >= (unsigned)QT_NSCANOPS)
    return qt_errorf(&ctx->err, "scan: unknown op %d", (int)op);
  const char *name = qt_scanop_name(op);
  bool extreme = op == QT_CUMMAX || op == QT_CUMMIN;
  if (extreme && indices == NULL)
    return qt_errorf(&ctx->err, "%s: no tensor for the indices", name);
  if (ops_live(ctx, name, t) || ops_scan_dim(ctx, name, dim, t)) return -1;
  qt_device *dev = ops_device(t);
  if (dev->iface->scan == NULL) return ops_unsupported(ctx, name, dev);
  qt_dtype dtype = ops_scan_dtype(op, t->dtype);

  int rc = -1;
  qt_tensor src, res, pos;
  qt_tensor_init(&src);
  qt_tensor_init(&res);
  qt_tensor_init(&pos);
  if (ops_alloc(ctx, name, &res, dev, dtype, t->ndim, t->size)) goto cleanup;
  if (extreme && ops_alloc(ctx, name, &pos, dev, QT_I64, t->ndim, t->size)) goto cleanup;
  if (qt_numel(t) > 0) {
    if (ops_scan_source(ctx, name, &src, t, dtype)) goto cleanup;
    qt_view dv, iv, sv;
    qt_view_of(&dv, &res);
    qt_view_of(&sv, &src);
    if (extreme) qt_view_of(&iv, &pos);
    if (dev->iface->scan(dev, op, &dv, extreme ? &iv : NULL, &sv, dim, &ctx->err)) goto cleanup;
  }
  *out = res;
  qt_tensor_init(&res);
  if (extreme) {
    *indices = pos;
    qt_tensor_init(&pos);
  }
  rc = 0;
cleanup:
  qt_tensor_release(&src);
  qt_tensor_release(&res);
  qt_tensor_release(&pos);
  return rc;
}

/* ================================================================== softmax */

int qt_softmax(qt_ctx *ctx, qt_tensor *out, const qt_tensor *t, int dim, bool log) {
  const char *name = log ? "log_softmax" : "softmax";
  if (ops_live(ctx, name, t) || ops_scan_dim(ctx, name, dim, t)) return -1;
  qt_device *dev = ops_device(t);
  if (dev->iface->softmax == NULL) return ops_unsupported(ctx, name, dev);
  qt_dtype dtype = qt_is_float(t->dtype) ? t->dtype : QT_F64;
  int rc = -1;
  qt_tensor src, res;
  qt_tensor_init(&src);
  qt_tensor_init(&res);
  if (ops_alloc(ctx, name, &res, dev, dtype, t->ndim, t->size)) goto cleanup;
  if (qt_numel(t) > 0) {
    if (ops_scan_source(ctx, name, &src, t, dtype)) goto cleanup;
    qt_view dv, sv;
    qt_view_of(&dv, &res);
    qt_view_of(&sv, &src);
    if (dev->iface->softmax(dev, log, &dv, &sv, dim, &ctx->err)) goto cleanup;
  }
  *out = res;
  qt_tensor_init(&res);
  rc = 0;
cleanup:
  qt_tensor_release(&src);
  qt_tensor_release(&res);
  return rc;
}

/* ================================================================== cross_entropy */

/* The class-index path's host side: the targets read back (the one wait), each checked in
** 1..C unless it is the ignore_index; *count is how many are not ignored. When some are
** ignored, *safe gets the targets with 1 in their place (so gather reads a real class) and
** *ignored their 1-based positions (index_fill_'s index), both uploaded to dev; otherwise both stay empty. */
static int ops_ce_targets(qt_ctx *ctx, const char *op, const qt_tensor *tgt, int64_t C,
                          const qt_cross_entropy_opts *opts, int64_t *count, qt_tensor *safe,
                          qt_tensor *ignored) {
  int64_t n = qt_numel(tgt);
  *count = n;
  if (n == 0) return 0;
  qt_device *on = ops_device(tgt);
  if (on->capture != NULL) {
    /* A CUDA graph capture cannot read the targets back: without ignore_index, gather
    ** checks the classes on the device (an error shows at the next sync, as gather's) */
    if (!opts->has_ignore_index) return 0;
    return qt_errorf(&ctx->err, "%s: ignore_index cannot run while a CUDA graph is being "
                     "captured on %s: the ignored targets are counted on the host "
                     "(qlua.graph)", op, on->name);
  }
  int64_t *host = malloc((size_t)n * 2 * sizeof *host);
  if (host == NULL) return qt_errorf(&ctx->err, "%s: out of memory (%lld targets)", op, (long long)n);
  int64_t *skip = host + n, nskip = 0;
  int rc = qt_read_all(ctx, tgt, host);
  if (rc != 0) qt_err_rename(&ctx->err, "read", op);
  for (int64_t k = 0; rc == 0 && k < n; k++) {
    if (opts->has_ignore_index && host[k] == opts->ignore_index) {
      skip[nskip++] = k + 1;  /* index values are 1-based */
      host[k] = 1;
    } else if (host[k] < 1 || host[k] > C) {
      rc = qt_errorf(&ctx->err, "%s: class %lld out of range (1..%lld) at position %lld", op,
                     (long long)host[k], (long long)C, (long long)k + 1);
    }
  }
  if (rc == 0 && nskip > 0) {
    qt_device *dev = ops_device(tgt);
    rc = qt_from_host(ctx, safe, dev, QT_I64, 1, &n, host);
    if (rc == 0) rc = qt_from_host(ctx, ignored, dev, QT_I64, 1, &nskip, skip);
    if (rc != 0) qt_err_rename(&ctx->err, "tensor", op);
  }
  *count = n - nskip;
  free(host);
  return rc;
}

/* Messages of the ops composed here are renamed to cross_entropy's. */
static int ops_ce_rename(qt_ctx *ctx, const char *op) { return qt_err_as(&ctx->err, op); }

int qt_cross_entropy(qt_ctx *ctx, qt_tensor *out, const qt_tensor *logits,
                     const qt_tensor *target, const qt_cross_entropy_opts *opts) {
  const char *op = "cross_entropy";
  char s1[OPS_SHAPE_LEN], s2[OPS_SHAPE_LEN], s3[32];
  if (ops_live(ctx, op, logits) || ops_live(ctx, op, target) ||
      ops_same_device(ctx, op, logits, target))
    return -1;
  if (logits->ndim != 1 && logits->ndim != 2)
    return qt_errorf(&ctx->err, "%s: logits must be C or N x C, got shape %s", op,
                     ops_shape(logits, s1));
  int64_t C = logits->size[logits->ndim - 1];
  int64_t N = logits->ndim == 2 ? logits->size[0] : 1;
  if (C == 0)
    return qt_errorf(&ctx->err, "%s: no classes (logits of shape %s)", op, ops_shape(logits, s1));
  double eps = opts->label_smoothing;
  if (!(eps >= 0 && eps <= 1))
    return qt_errorf(&ctx->err, "%s: label_smoothing %g is not in [0, 1]", op, eps);
  if ((unsigned)opts->reduction > (unsigned)QT_REDUCE_NONE)
    return qt_errorf(&ctx->err, "%s: unknown reduction %d", op, (int)opts->reduction);
  bool probs = qt_is_float(target->dtype);
  if (probs) {
    if (!ops_same_shape(logits, target))
      return qt_errorf(&ctx->err, "%s: probabilities of shape %s for logits of shape %s", op,
                       ops_shape(target, s1), ops_shape(logits, s2));
    if (opts->has_ignore_index)
      return qt_errorf(&ctx->err, "%s: ignore_index needs class indices, not probabilities", op);
  } else {
    if (qt_is_bool(target->dtype))
      return qt_errorf(&ctx->err, "%s: target must be class indices (an integer dtype) or "
                       "probabilities (a float dtype), got bool", op);
    if (target->ndim != logits->ndim - 1 || (logits->ndim == 2 && target->size[0] != N))
      return qt_errorf(&ctx->err, "%s: class indices of shape %s for logits of shape %s "
                       "(expected %s)", op, ops_shape(target, s1), ops_shape(logits, s2),
                       logits->ndim == 2 ? qt_shape_str(1, &N, s3, sizeof s3) : "scalar");
  }

  int rc = -1;
  int64_t rows2[2] = { N, C }, rows1[2] = { N, 1 }, count = N;
  qt_tensor lp, tgt, safe, ignored, idx, picked, loss, tmp, res;
  qt_tensor *all[] = { &lp, &tgt, &safe, &ignored, &idx, &picked, &loss, &tmp, &res };
  for (size_t k = 0; k < sizeof all / sizeof all[0]; k++) qt_tensor_init(all[k]);

  /* every sample a row of lp (N x C), loss one entry per sample (N) */
  if (qt_reshape(ctx, &tmp, logits, 2, rows2)) goto fail;
  rc = qt_softmax(ctx, &lp, &tmp, 1, true);
  qt_tensor_release(&tmp);
  if (rc != 0) goto fail;
  rc = -1;
  if (probs) {
    /* loss = -sum(lp * ((1 - eps) q + eps / C)) along the classes */
    if (qt_reshape(ctx, &tmp, target, 2, rows2) || ops_cast(ctx, op, &tgt, &tmp, lp.dtype))
      goto fail;
    qt_tensor_release(&tmp);
    if (eps > 0) {
      if (qt_binary_scalar(ctx, &tmp, QT_MUL, &tgt, qt_scalar_f(1 - eps), true, false)) goto fail;
      qt_tensor_release(&tgt);
      if (qt_binary_scalar(ctx, &tgt, QT_ADD, &tmp, qt_scalar_f(eps / (double)C), true, false))
        goto fail;
      qt_tensor_release(&tmp);
    }
    if (qt_binary(ctx, &tmp, QT_MUL, &lp, &tgt)) goto fail;
    if (qt_reduce(ctx, &picked, QT_SUM, &tmp, 1)) goto fail;
    qt_tensor_release(&tmp);
    if (qt_binary_scalar(ctx, &loss, QT_MUL, &picked, qt_scalar_f(-1), true, false)) goto fail;
  } else {
    /* loss = -(1 - eps) lp[target] - eps / C sum(lp) along the classes */
    if (ops_cast(ctx, op, &tgt, target, QT_I64)) goto fail;
    if (ops_ce_targets(ctx, op, &tgt, C, opts, &count, &safe, &ignored)) goto fail;
    const qt_tensor *chosen = safe.storage != NULL ? &safe : &tgt;
    if (qt_reshape(ctx, &idx, chosen, 2, rows1)) goto fail;
    if (qt_gather(ctx, &tmp, &lp, 1, &idx)) goto fail;
    if (qt_view_as(ctx, &picked, &tmp, 1, &N)) goto fail;
    qt_tensor_release(&tmp);
    if (qt_binary_scalar(ctx, &loss, QT_MUL, &picked, qt_scalar_f(-(1 - eps)), true, false))
      goto fail;
    if (eps > 0) {
      qt_tensor sum, smooth;
      qt_tensor_init(&sum);
      qt_tensor_init(&smooth);
      int r = qt_reduce(ctx, &sum, QT_SUM, &lp, 1);
      if (r == 0) r = qt_binary_scalar(ctx, &smooth, QT_MUL, &sum, qt_scalar_f(eps / (double)C),
                                       true, false);
      if (r == 0) r = qt_binary(ctx, &tmp, QT_SUB, &loss, &smooth);
      qt_tensor_release(&sum);
      qt_tensor_release(&smooth);
      if (r != 0) goto fail;
      qt_tensor_release(&loss);
      loss = tmp;
      qt_tensor_init(&tmp);
    }
    if (ignored.storage != NULL &&
        qt_index_fill_(ctx, &loss, 0, &ignored, qt_scalar_i(0)))
      goto fail;
  }

  switch (opts->reduction) {
    case QT_REDUCE_NONE:
      if (logits->ndim == 1) {
        int64_t none[1] = { 0 };
        if (qt_view_as(ctx, &res, &loss, 0, none)) goto fail;
      } else {
        res = loss;
        qt_tensor_init(&loss);
      }
      break;
    case QT_REDUCE_SUM:
      if (qt_reduce(ctx, &res, QT_SUM, &loss, -1)) goto fail;
      break;
    case QT_REDUCE_MEAN:
      if (qt_reduce(ctx, &tmp, QT_SUM, &loss, -1)) goto fail;
      if (qt_binary_scalar(ctx, &res, QT_DIV, &tmp, qt_scalar_f((double)count), true, false))
        goto fail;
      break;
  }
  *out = res;
  qt_tensor_init(&res);
  rc = 0;
  goto cleanup;
fail:
  ops_ce_rename(ctx, op);
  rc = -1;
cleanup:
  for (size_t k = 0; k < sizeof all / sizeof all[0]; k++) qt_tensor_release(all[k]);
  return rc;
}
