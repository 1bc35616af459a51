/*
** ops_sort.c — sorting and selection: sort, argsort, topk, kthvalue, median, unique,
** bincount, histc and searchsorted.
**
** The order (device.h, "sorting"): numbers compare as numbers (-0.0 equals 0.0), every NaN
** is above every number and all NaNs are equal to each other, and equal elements keep their
** order (stable). Descending is the reverse order, ties still in their original order.
**
** The slots see rows: a contiguous (rows, n) tensor whose rows are the lines along the dim.
** The core moves the dim last (a permute that keeps the other dims in order) and makes that
** contiguous (a copy unless the dim is already last and t contiguous); the results are made
** in the moved shape and permuted back (a copy again). Reductions (kthvalue, median) drop
** the last dim of the moved shape, which is then t's shape without dim, already in order.
** kthvalue is the last column of topk's k smallest; median is composed of the sort slot and
** the committed elementwise, reduce and gather ops (a NaN anywhere in a line makes that
** line's median its first NaN, PyTorch's rule). unique sorts the flattened tensor and lets
** the unique slot find the runs; bincount and histc read the data's range first (one wait,
** like masked_select's count) to size or place the result.
*/
#include "ops_internal.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

/* ================================================================== rows along a dim */

/* perm moves dim last, the others keeping their order; inv undoes it. */
static void sort_perms(int ndim, int dim, int *perm, int *inv) {
  int k = 0;
  for (int d = 0; d < ndim; d++)
    if (d != dim) perm[k++] = d;
  perm[k] = dim;
  for (int d = 0; d < ndim; d++) inv[perm[d]] = d;
}

/* *out = t with dim moved last, contiguous (t itself when it already is). */
static int sort_moved(qt_ctx *ctx, const char *op, qt_tensor *out, const qt_tensor *t, int dim) {
  int perm[QT_MAXDIM], inv[QT_MAXDIM];
  qt_tensor p;
  qt_tensor_init(&p);
  int rc;
  if (t->ndim <= 1 || dim == t->ndim - 1) {
    rc = qt_contiguous(ctx, out, t);
  } else {
    sort_perms(t->ndim, dim, perm, inv);
    rc = qt_permute(ctx, &p, t, t->ndim, perm);
    if (rc == 0) rc = qt_contiguous(ctx, out, &p);
  }
  qt_tensor_release(&p);
  if (rc) qt_err_as(&ctx->err, op);
  return rc;
}

/* The shape of t with dim moved last and its size there replaced by last (ndim >= 1). */
static void sort_moved_shape(const qt_tensor *t, int dim, int64_t last, int64_t *size) {
  int k = 0;
  for (int d = 0; d < t->ndim; d++)
    if (d != dim) size[k++] = t->size[d];
  size[k] = last;
}

/* *out = r (made in the moved shape) in t's order of dims: a contiguous copy, or r itself
** when dim is last. */
static int sort_unmoved(qt_ctx *ctx, const char *op, qt_tensor *out, qt_tensor *r,
                        const qt_tensor *t, int dim) {
  if (t->ndim <= 1 || dim == t->ndim - 1) {
    *out = *r;
    qt_tensor_init(r);
    return 0;
  }
  int perm[QT_MAXDIM], inv[QT_MAXDIM];
  sort_perms(t->ndim, dim, perm, inv);
  qt_tensor p;
  qt_tensor_init(&p);
  int rc = qt_permute(ctx, &p, r, t->ndim, inv);
  if (rc == 0) rc = qt_clone(ctx, out, &p);
  qt_tensor_release(&p);
  if (rc) qt_err_as(&ctx->err, op);
  return rc;
}

/* A contiguous tensor as the slots see it: (rows, n). */
static void sort_view_rows(qt_view *v, const qt_tensor *t, int64_t n) {
  qt_view_of(v, t);
  int64_t numel = v->numel;
  v->ndim = 2;
  v->size[0] = n > 0 ? numel / n : 0;
  v->size[1] = n;
  v->stride[0] = n;
  v->stride[1] = 1;
}

/* The checks every op along a dim shares: a live t, a dim of it (0 for a 0-d t, which is one
** line of one element), a device with the slot. */
static int sort_check(qt_ctx *ctx, const char *op, const qt_tensor *t, int dim, bool has_slot) {
  if (ops_live(ctx, op, t)) return -1;
  if (t->ndim == 0 ? dim != 0 : ops_check_dim(ctx, op, dim, t->ndim)) {
    if (t->ndim == 0)
      return qt_errorf(&ctx->err, "%s: dim %d out of range (the tensor is 0-d)", op, dim + 1);
    return -1;
  }
  if (!has_slot) return ops_unsupported(ctx, op, ops_device(t));
  return 0;
}

/* A 0-d t is taken as 1-D of one element for the slots; its results are 0-d again. */
static void sort_as_1d(qt_tensor *one, const qt_tensor *t) {
  *one = *t;
  if (t->ndim == 0) {
    one->ndim = 1;
    one->size[0] = 1;
    one->stride[0] = 1;
  }
}

/* ================================================================== sort, topk */

/* The k best of every line in the moved shape (rows..., k), not yet moved back: by the sort
** slot (k == n, descending: best) or the topk slot (largest: best). */
static int sort_best_moved(qt_ctx *ctx, const char *op, qt_tensor *v, qt_tensor *i,
                           const qt_tensor *one, int dim, int64_t k, bool by_sort, bool best) {
  qt_device *dev = ops_device(one);
  int64_t n = one->size[dim];
  int64_t size[QT_MAXDIM];
  sort_moved_shape(one, dim, k, size);
  if (ops_alloc(ctx, op, v, dev, one->dtype, one->ndim, size) ||
      ops_alloc(ctx, op, i, dev, QT_I64, one->ndim, size))
    return -1;
  if (qt_numel(v) == 0) return 0;
  qt_tensor src;
  qt_tensor_init(&src);
  int rc = sort_moved(ctx, op, &src, one, dim);
  if (rc == 0) {
    qt_view sv, vv, iv;
    sort_view_rows(&sv, &src, n);
    sort_view_rows(&vv, v, k);
    sort_view_rows(&iv, i, k);
    rc = by_sort ? dev->iface->sort(dev, &vv, &iv, &sv, best, &ctx->err)
                 : dev->iface->topk(dev, &vv, &iv, &sv, k, best, &ctx->err);
    /* a device's selection that reads counts back says so as a download (a CUDA graph
    ** capture refuses it): the message names the op */
    if (rc != 0) qt_err_rename(&ctx->err, "download", op);
  }
  qt_tensor_release(&src);
  return rc;
}

/* sort and topk: the k best of each line along dim, values and positions in t's order of
** dims (0-d again for a 0-d t); values or indices may be NULL when not wanted. */
static int sort_best(qt_ctx *ctx, const char *op, qt_tensor *values, qt_tensor *indices,
                     const qt_tensor *t, const qt_tensor *one, int dim, int64_t k, bool by_sort,
                     bool best) {
  int rc = -1;
  qt_tensor v, i, vo, io;
  qt_tensor_init(&v);
  qt_tensor_init(&i);
  qt_tensor_init(&vo);
  qt_tensor_init(&io);
  if (sort_best_moved(ctx, op, &v, &i, one, dim, k, by_sort, best) ||
      sort_unmoved(ctx, op, &vo, &v, one, dim) || sort_unmoved(ctx, op, &io, &i, one, dim))
    goto cleanup;
  if (t->ndim == 0 && k == 1) vo.ndim = io.ndim = 0;   /* topk(0) of a 0-d t: empty, (0) */
  if (values != NULL) {
    *values = vo;
    qt_tensor_init(&vo);
  }
  if (indices != NULL) {
    *indices = io;
    qt_tensor_init(&io);
  }
  rc = 0;
cleanup:
  qt_tensor_release(&v);
  qt_tensor_release(&i);
  qt_tensor_release(&vo);
  qt_tensor_release(&io);
  return rc;
}

int qt_sort(qt_ctx *ctx, qt_tensor *values, qt_tensor *indices, const qt_tensor *t, int dim,
            bool descending) {
  const char *op = "sort";
  if (sort_check(ctx, op, t, dim, ops_device(t) && ops_device(t)->iface->sort != NULL))
    return -1;
  qt_tensor one;
  sort_as_1d(&one, t);
  return sort_best(ctx, op, values, indices, t, &one, dim, one.size[dim], true, descending);
}

int qt_topk(qt_ctx *ctx, qt_tensor *values, qt_tensor *indices, const qt_tensor *t, int64_t k,
            int dim, bool largest, bool sorted) {
  const char *op = "topk";
  (void)sorted;  /* the slot always gives the k best in order (ops.h) */
  if (sort_check(ctx, op, t, dim, ops_device(t) && ops_device(t)->iface->topk != NULL))
    return -1;
  qt_tensor one;
  sort_as_1d(&one, t);
  int64_t n = one.size[dim];
  if (k < 0 || k > n)
    return qt_errorf(&ctx->err, "topk: k %lld out of range (0..%lld) for dim %d of size %lld",
                     (long long)k, (long long)n, dim + 1, (long long)n);
  return sort_best(ctx, op, values, indices, t, &one, dim, k, false, largest);
}

/* Column col of a moved-shape result r, as a contiguous tensor without the last dim (t's
** shape without dim); a 0-d result for a 1-D (or 0-d) t. */
static int sort_column(qt_ctx *ctx, const char *op, qt_tensor *out, const qt_tensor *r,
                       int64_t col) {
  qt_tensor s;
  qt_tensor_init(&s);
  int rc = qt_select(ctx, &s, r, r->ndim - 1, col);
  if (rc == 0) rc = qt_clone(ctx, out, &s);
  qt_tensor_release(&s);
  if (rc) qt_err_as(&ctx->err, op);
  return rc;
}

int qt_kthvalue(qt_ctx *ctx, qt_tensor *values, qt_tensor *indices, const qt_tensor *t,
                int64_t k, int dim) {
  const char *op = "kthvalue";
  if (sort_check(ctx, op, t, dim, ops_device(t) && ops_device(t)->iface->topk != NULL))
    return -1;
  qt_tensor one;
  sort_as_1d(&one, t);
  int64_t n = one.size[dim];
  if (k < 1 || k > n)
    return qt_errorf(&ctx->err, "kthvalue: k %lld out of range (1..%lld) for dim %d of size "
                     "%lld", (long long)k, (long long)n, dim + 1, (long long)n);
  int rc = -1;
  qt_tensor v, i, vo, io;
  qt_tensor_init(&v);
  qt_tensor_init(&i);
  qt_tensor_init(&vo);
  qt_tensor_init(&io);
  if (sort_best_moved(ctx, op, &v, &i, &one, dim, k, false, false) ||
      sort_column(ctx, op, &vo, &v, k - 1) || sort_column(ctx, op, &io, &i, k - 1))
    goto cleanup;
  *values = vo;
  *indices = io;
  qt_tensor_init(&vo);
  qt_tensor_init(&io);
  rc = 0;
cleanup:
  qt_tensor_release(&v);
  qt_tensor_release(&i);
  qt_tensor_release(&vo);
  qt_tensor_release(&io);
  return rc;
}

/* ================================================================== median */

/* Float lines with NaN: the line is sorted (NaN last), and its median is at the 0-based
** position p = (count < n) ? count : k - 1, count being the line's numbers (x == x); the
** first NaN in sorted order is the line's first NaN by position (stable). p is made by
** int64 arithmetic, then both results are gathered at p + 1. */
static int sort_median_float(qt_ctx *ctx, const char *op, qt_tensor *vo, qt_tensor *io,
                             const qt_tensor *one, int dim) {
  int64_t n = one->size[dim], k = (n + 1) / 2;
  int rc = -1;
  qt_tensor sv, si, src, eq, cnt, has, hasi, diff, p, pos, pos2, gv, gi;
  qt_tensor *all[] = { &sv, &si, &src, &eq, &cnt, &has, &hasi, &diff, &p, &pos, &pos2,
                       &gv, &gi };
  for (size_t j = 0; j < sizeof all / sizeof all[0]; j++) qt_tensor_init(all[j]);
  int last = one->ndim - 1;
  int64_t size[QT_MAXDIM];
  sort_moved_shape(one, dim, 1, size);
  if (qt_sort(ctx, &sv, &si, one, dim, false)) goto cleanup;
  /* sv, si are in one's order; the median is taken along dim */
  (void)last;
  if (qt_binary(ctx, &eq, QT_EQ, one, one) ||
      qt_reduce(ctx, &cnt, QT_SUM, &eq, dim) ||                         /* int64 numbers */
      qt_binary_scalar(ctx, &has, QT_LT, &cnt, qt_scalar_i(n), false, false) ||
      qt_to_dtype(ctx, &hasi, &has, QT_I64) ||
      qt_binary_scalar(ctx, &diff, QT_SUB, &cnt, qt_scalar_i(k - 1), false, false) ||
      qt_binary(ctx, &p, QT_MUL, &hasi, &diff) ||
      qt_binary_scalar(ctx, &pos, QT_ADD, &p, qt_scalar_i(k), false, false))  /* 1-based */
    goto cleanup;
  {
    int64_t gsize[QT_MAXDIM];
    for (int d = 0; d < one->ndim; d++) gsize[d] = d == dim ? 1 : one->size[d];
    if (qt_view_as(ctx, &pos2, &pos, one->ndim, gsize) ||
        qt_gather(ctx, &gv, &sv, dim, &pos2) || qt_gather(ctx, &gi, &si, dim, &pos2))
      goto cleanup;
    int64_t rsize[QT_MAXDIM];
    int rn = 0;
    for (int d = 0; d < one->ndim; d++)
      if (d != dim) rsize[rn++] = one->size[d];
    if (qt_view_as(ctx, vo, &gv, rn, rsize)) goto cleanup;
    if (qt_view_as(ctx, io, &gi, rn, rsize)) {
      qt_tensor_release(vo);
      goto cleanup;
    }
  }
  rc = 0;
cleanup:
  if (rc) qt_err_as(&ctx->err, op);
  for (size_t j = 0; j < sizeof all / sizeof all[0]; j++) qt_tensor_release(all[j]);
  return rc;
}

int qt_median(qt_ctx *ctx, qt_tensor *values, qt_tensor *indices, const qt_tensor *t, int dim) {
  const char *op = "median";
  if (ops_live(ctx, op, t)) return -1;
  qt_tensor one, flat;
  qt_tensor_init(&flat);
  if (dim == -1) {
    int64_t n = qt_numel(t);
    if (qt_reshape(ctx, &flat, t, 1, &n)) return qt_err_as(&ctx->err, op);
    one = flat;
    dim = 0;
  } else {
    if (sort_check(ctx, op, t, dim, true)) return -1;
    sort_as_1d(&one, t);
  }
  qt_device *dev = ops_device(t);
  int rc = -1;
  qt_tensor vo, io;
  qt_tensor_init(&vo);
  qt_tensor_init(&io);
  int64_t n = one.size[dim];
  if (dev->iface->sort == NULL || dev->iface->topk == NULL) {
    rc = ops_unsupported(ctx, op, dev);
    goto cleanup;
  }
  if (n == 0) {
    rc = qt_errorf(&ctx->err, "median: %s is empty", flat.storage != NULL ? "the tensor"
                   : "the dim");
    goto cleanup;
  }
  if (qt_is_float(t->dtype)) {
    if (sort_median_float(ctx, op, &vo, &io, &one, dim)) goto cleanup;
  } else if (qt_kthvalue(ctx, &vo, &io, &one, (n + 1) / 2, dim)) {
    qt_err_as(&ctx->err, op);
    goto cleanup;
  }
  *values = vo;
  qt_tensor_init(&vo);
  if (indices != NULL) {
    *indices = io;
    qt_tensor_init(&io);
  }
  rc = 0;
cleanup:
  qt_tensor_release(&flat);
  qt_tensor_release(&vo);
  qt_tensor_release(&io);
  return rc;
}

/* ================================================================== unique */

/* A prefix of r (its first count elements along dim 0) as a tensor of its own: a copy,
** so the unused tail of r's storage goes back with r. */
static int sort_prefix(qt_ctx *ctx, const char *op, qt_tensor *out, const qt_tensor *r,
                       int64_t count) {
  qt_tensor s;
  qt_tensor_init(&s);
  int rc = qt_narrow(ctx, &s, r, 0, 0, count);
  if (rc == 0) rc = qt_clone(ctx, out, &s);
  qt_tensor_release(&s);
  if (rc) {
    qt_err_as(&ctx->err, op);
  }
  return rc;
}

int qt_unique(qt_ctx *ctx, qt_tensor *uniques, qt_tensor *inverse, qt_tensor *counts,
              const qt_tensor *t) {
  const char *op = "unique";
  if (ops_live(ctx, op, t)) return -1;
  qt_device *dev = ops_device(t);
  if (dev->iface->sort == NULL || dev->iface->unique == NULL) return ops_unsupported(ctx, op, dev);
  if (ops_refuse_capture(ctx, op, dev)) return -1;   /* the run count is read back */
  int64_t n = qt_numel(t);
  int rc = -1;
  qt_tensor flat, sv, si, u, inv, cnt, uo, co, invo;
  qt_tensor *all[] = { &flat, &sv, &si, &u, &inv, &cnt, &uo, &co, &invo };
  for (size_t j = 0; j < sizeof all / sizeof all[0]; j++) qt_tensor_init(all[j]);
  int64_t count = 0;
  if (qt_reshape(ctx, &flat, t, 1, &n)) {
    qt_err_as(&ctx->err, op);
    goto cleanup;
  }
  if (ops_alloc(ctx, op, &u, dev, t->dtype, 1, &n) ||
      ops_alloc(ctx, op, &inv, dev, QT_I64, 1, &n) ||
      (counts != NULL && ops_alloc(ctx, op, &cnt, dev, QT_I64, 1, &n)))
    goto cleanup;
  if (n > 0) {
    if (qt_sort(ctx, &sv, &si, &flat, 0, false)) {
      qt_err_as(&ctx->err, op);
      goto cleanup;
    }
    qt_view svv, siv, uv, iv, cv;
    qt_view_of(&svv, &sv);
    qt_view_of(&siv, &si);
    qt_view_of(&uv, &u);
    qt_view_of(&iv, &inv);
    if (counts != NULL) qt_view_of(&cv, &cnt);
    if (dev->iface->unique(dev, &uv, inverse != NULL ? &iv : NULL,
                           counts != NULL ? &cv : NULL, &svv, &siv, &count, &ctx->err))
      goto cleanup;
  }
  if (sort_prefix(ctx, op, &uo, &u, count)) goto cleanup;
  if (counts != NULL && sort_prefix(ctx, op, &co, &cnt, count)) goto cleanup;
  if (inverse != NULL && qt_view_as(ctx, &invo, &inv, t->ndim, t->size)) {
    qt_err_as(&ctx->err, op);
    goto cleanup;
  }
  *uniques = uo;
  qt_tensor_init(&uo);
  if (counts != NULL) {
    *counts = co;
    qt_tensor_init(&co);
  }
  if (inverse != NULL) {
    *inverse = invo;
    qt_tensor_init(&invo);
  }
  rc = 0;
cleanup:
  for (size_t j = 0; j < sizeof all / sizeof all[0]; j++) qt_tensor_release(all[j]);
  return rc;
}

/* ================================================================== bincount, histc */

/* The value of a reduction of t over everything, read back (the op's one wait). */
static int sort_read_reduce(qt_ctx *ctx, const char *op, qt_redop redop, const qt_tensor *t,
                            qt_scalar *v) {
  qt_tensor r;
  qt_tensor_init(&r);
  int64_t pos[QT_MAXDIM] = {0};
  int rc = qt_reduce(ctx, &r, redop, t, -1);
  if (rc == 0) rc = qt_get(ctx, &r, pos, v);
  qt_tensor_release(&r);
  if (rc) {
    qt_err_as(&ctx->err, op);
  }
  return rc;
}

int qt_bincount(qt_ctx *ctx, qt_tensor *out, const qt_tensor *t, const qt_tensor *weights,
                int64_t minlength) {
  const char *op = "bincount";
  char s1[OPS_SHAPE_LEN], s2[OPS_SHAPE_LEN];
  if (ops_live(ctx, op, t)) return -1;
  if (t->ndim != 1)
    return qt_errorf(&ctx->err, "bincount: the input must be 1-D, got shape %s",
                     ops_shape(t, s1));
  if (qt_is_float(t->dtype))
    return qt_errorf(&ctx->err, "bincount: the input must be of an integer dtype, got %s",
                     qt_dtypes[t->dtype].name);
  if (minlength < 0)
    return qt_errorf(&ctx->err, "bincount: minlength %lld is negative", (long long)minlength);
  if (weights != NULL) {
    if (ops_live(ctx, op, weights) || ops_same_device(ctx, op, t, weights)) return -1;
    if (weights->ndim != 1 || weights->size[0] != t->size[0])
      return qt_errorf(&ctx->err, "bincount: weights of shape %s for an input of shape %s "
                       "(they must be 1-D of one length)", ops_shape(weights, s1),
                       ops_shape(t, s2));
  }
  qt_device *dev = ops_device(t);
  if (dev->iface->bincount == NULL) return ops_unsupported(ctx, op, dev);
  /* PyTorch's dtypes: counts are int64; float32 weights give float32, others float64 */
  qt_dtype dtype = weights == NULL ? QT_I64 : weights->dtype == QT_F32 ? QT_F32 : QT_F64;
  int64_t n = t->size[0], len = minlength;
  if (n > 0) {
    qt_scalar lo, hi;
    if (sort_read_reduce(ctx, op, QT_MIN, t, &lo) || sort_read_reduce(ctx, op, QT_MAX, t, &hi))
      return -1;
    if (lo.i < 0)
      return qt_errorf(&ctx->err, "bincount: the input holds the negative value %lld (values "
                       "must be >= 0)", (long long)lo.i);
    if (hi.i == INT64_MAX)  /* its bin would be the 2^63-th: no size holds that */
      return qt_errorf(&ctx->err, "bincount: the input holds the value %lld, which needs %llu "
                       "bins (more than a tensor can have)", (long long)hi.i,
                       (unsigned long long)hi.i + 1);
    if (hi.i + 1 > len) len = hi.i + 1;
  }
  int rc = -1;
  qt_tensor res, src, w;
  qt_tensor_init(&res);
  qt_tensor_init(&src);
  qt_tensor_init(&w);
  if (ops_alloc(ctx, op, &res, dev, dtype, 1, &len)) goto cleanup;
  qt_view dv;
  qt_view_of(&dv, &res);
  if (len > 0 && ops_fill_view(ctx, op, dev, &dv, qt_scalar_i(0))) goto cleanup;
  if (n > 0) {
    if (qt_contiguous(ctx, &src, t)) goto cleanup;
    if (weights != NULL) {
      qt_tensor wc;
      qt_tensor_init(&wc);
      int wrc = ops_cast(ctx, op, &wc, weights, dtype);
      if (wrc == 0) wrc = qt_contiguous(ctx, &w, &wc);
      qt_tensor_release(&wc);
      if (wrc) goto cleanup;
    }
    qt_view sv, wv;
    qt_view_of(&sv, &src);
    if (weights != NULL) qt_view_of(&wv, &w);
    if (dev->iface->bincount(dev, &dv, &sv, weights != NULL ? &wv : NULL, &ctx->err))
      goto cleanup;
  }
  *out = res;
  qt_tensor_init(&res);
  rc = 0;
cleanup:
  if (rc) qt_err_as(&ctx->err, op);
  qt_tensor_release(&res);
  qt_tensor_release(&src);
  qt_tensor_release(&w);
  return rc;
}

int qt_histc(qt_ctx *ctx, qt_tensor *out, const qt_tensor *t, int64_t bins, double lo,
             double hi) {
  const char *op = "histc";
  if (ops_live(ctx, op, t)) return -1;
  if (qt_is_bool(t->dtype))
    return qt_errorf(&ctx->err, "histc: bool tensors have no histogram (convert with :to)");
  if (bins < 1) return qt_errorf(&ctx->err, "histc: bins %lld must be >= 1", (long long)bins);
  if (isnan(lo) || isnan(hi) || isinf(lo) || isinf(hi))
    return qt_errorf(&ctx->err, "histc: the range [%g, %g] is not finite", lo, hi);
  if (lo > hi)
    return qt_errorf(&ctx->err, "histc: min %g is greater than max %g", lo, hi);
  qt_device *dev = ops_device(t);
  if (dev->iface->histc == NULL) return ops_unsupported(ctx, op, dev);
  int64_t n = qt_numel(t);
  if (lo == 0 && hi == 0 && n > 0) {  /* PyTorch: the data's own range */
    qt_scalar a, b;
    if (sort_read_reduce(ctx, op, QT_MIN, t, &a) || sort_read_reduce(ctx, op, QT_MAX, t, &b))
      return -1;
    lo = qt_is_float(t->dtype) ? a.f : (double)a.i;
    hi = qt_is_float(t->dtype) ? b.f : (double)b.i;
    if (isnan(lo) || isnan(hi) || isinf(lo) || isinf(hi))
      return qt_errorf(&ctx->err, "histc: the data's range [%g, %g] is not finite (give min "
                       "and max)", lo, hi);
  }
  if (lo == hi) {  /* PyTorch widens an empty range by one each side */
    lo -= 1;
    hi += 1;
  }
  qt_dtype dtype = qt_is_float(t->dtype) ? t->dtype : QT_F32;
  int rc = -1;
  qt_tensor counts, src, res;
  qt_tensor_init(&counts);
  qt_tensor_init(&src);
  qt_tensor_init(&res);
  if (ops_alloc(ctx, op, &counts, dev, QT_I64, 1, &bins)) goto cleanup;
  qt_view cv;
  qt_view_of(&cv, &counts);
  if (ops_fill_view(ctx, op, dev, &cv, qt_scalar_i(0))) goto cleanup;
  if (n > 0) {
    if (qt_contiguous(ctx, &src, t)) {
      qt_err_as(&ctx->err, op);
      goto cleanup;
    }
    qt_view sv;
    qt_view_of(&sv, &src);
    if (dev->iface->histc(dev, &cv, &sv, lo, hi, &ctx->err)) goto cleanup;
  }
  if (ops_cast(ctx, op, &res, &counts, dtype)) goto cleanup;
  *out = res;
  qt_tensor_init(&res);
  rc = 0;
cleanup:
  qt_tensor_release(&counts);
  qt_tensor_release(&src);
  qt_tensor_release(&res);
  return rc;
}

/* ================================================================== searchsorted */

int qt_searchsorted(qt_ctx *ctx, qt_tensor *out, const qt_tensor *sorted, const qt_tensor *values,
                    bool right) {
  const char *op = "searchsorted";
  char s1[OPS_SHAPE_LEN], s2[OPS_SHAPE_LEN];
  if (ops_live(ctx, op, sorted) || ops_live(ctx, op, values) ||
      ops_same_device(ctx, op, sorted, values))
    return -1;
  if (sorted->ndim == 0)
    return qt_errorf(&ctx->err, "searchsorted: the sorted sequence must have dims, got a 0-d "
                     "tensor");
  bool rows_match = sorted->ndim == 1;
  if (!rows_match && values->ndim == sorted->ndim) {
    rows_match = true;
    for (int d = 0; d + 1 < sorted->ndim; d++)
      if (sorted->size[d] != values->size[d]) rows_match = false;
  }
  if (!rows_match)
    return qt_errorf(&ctx->err, "searchsorted: a sorted sequence of shape %s needs values of "
                     "its leading dims (%s given)", ops_shape(sorted, s1), ops_shape(values, s2));
  qt_device *dev = ops_device(sorted);
  if (dev->iface->searchsorted == NULL) return ops_unsupported(ctx, op, dev);
  qt_dtype dtype = qt_promote(sorted->dtype, values->dtype);
  int rc = -1;
  qt_tensor sc, vc, s, v, res;
  qt_tensor_init(&sc);
  qt_tensor_init(&vc);
  qt_tensor_init(&s);
  qt_tensor_init(&v);
  qt_tensor_init(&res);
  if (ops_alloc(ctx, op, &res, dev, QT_I64, values->ndim, values->size)) goto cleanup;
  int64_t m = qt_numel(values);
  if (m > 0) {
    if (ops_cast(ctx, op, &sc, sorted, dtype) || ops_cast(ctx, op, &vc, values, dtype) ||
        qt_contiguous(ctx, &s, &sc) || qt_contiguous(ctx, &v, &vc)) {
      qt_err_as(&ctx->err, op);
      goto cleanup;
    }
    int64_t n = sorted->size[sorted->ndim - 1];
    int64_t rows = sorted->ndim == 1 ? 1 : qt_numel(sorted) / (n > 0 ? n : 1);
    if (sorted->ndim > 1 && n == 0) {
      rows = 1;
      for (int d = 0; d + 1 < sorted->ndim; d++) rows *= sorted->size[d];
    }
    qt_view sv, vv, dv;
    qt_view_of(&sv, &s);
    qt_view_of(&vv, &v);
    qt_view_of(&dv, &res);
    int64_t per = m / rows;
    sv.ndim = vv.ndim = dv.ndim = 2;
    sv.size[0] = vv.size[0] = dv.size[0] = rows;
    sv.size[1] = n;
    vv.size[1] = dv.size[1] = per;
    sv.stride[0] = n;
    vv.stride[0] = dv.stride[0] = per;
    sv.stride[1] = vv.stride[1] = dv.stride[1] = 1;
    if (dev->iface->searchsorted(dev, &dv, &sv, &vv, right, &ctx->err)) goto cleanup;
  }
  *out = res;
  qt_tensor_init(&res);
  rc = 0;
cleanup:
  qt_tensor_release(&sc);
  qt_tensor_release(&vc);
  qt_tensor_release(&s);
  qt_tensor_release(&v);
  qt_tensor_release(&res);
  return rc;
}
