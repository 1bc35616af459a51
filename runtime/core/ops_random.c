/*
** ops_random.c — sampling beyond rand/randn/randint: the in-place fills
** uniform_, normal_, random_ and exponential_, and bernoulli and multinomial.
**
** Everything here composes qt_random_ (Philox: element k of a call draws from counter
** offset + k on every device) with the elementwise ops, so a seed gives the same draws on
** the CPU and the GPU; the transforms after the draw (a scale, a log) agree to the last
** few bits of the two devices' math libraries.
*/
#include "ops_internal.h"

#include <math.h>
#include <string.h>

static int ops_check_float_target(qt_ctx *ctx, const char *op, const qt_tensor *t) {
  if (ops_live(ctx, op, t)) return -1;
  if (!qt_is_float(t->dtype))
    return qt_errorf(&ctx->err, "%s: needs a float tensor, got %s", op, qt_dtypes[t->dtype].name);
  return ops_check_writable(ctx, op, t);
}

/* The core op names of a failed composition step, as the user's op. */
static int ops_random_rename(qt_ctx *ctx, const char *op) { return qt_err_as(&ctx->err, op); }

/* t = lo + (hi - lo) u, u uniform in [0, 1), computed in t's dtype (16-bit: float32).
** lo and hi must fit the dtype (PyTorch's rule), but hi - lo need not: (-3e38, 3e38) in
** float32, (-1.7e308, 1.7e308) in float64. Then the width would be inf, so the draw is
** 2 (lo/2 + (hi/2 - lo/2) u) instead, whose every step stays within [lo, hi]; halving and
** doubling are exact (short of subnormals, far from such bounds), so it is the same
** number, rounded the same way as far as the dtype allows. */
int qt_uniform_(qt_ctx *ctx, qt_tensor *t, double lo, double hi) {
  const char *op = "uniform_";
  if (ops_check_float_target(ctx, op, t)) return -1;
  if (!(lo <= hi) || !isfinite(lo) || !isfinite(hi))
    return qt_errorf(&ctx->err, "%s: bounds %g and %g must be finite with lo <= hi", op, lo, hi);
  if (!ops_float_fits(t->dtype, lo) || !ops_float_fits(t->dtype, hi))
    return qt_errorf(&ctx->err, "%s: bounds %g and %g do not fit %s", op, lo, hi,
                     qt_dtypes[t->dtype].name);
  bool wide = !isfinite(hi - lo) || !ops_float_fits(t->dtype, hi - lo);  /* inf in double or t's dtype */
  double half = wide ? 0.5 : 1.0;
  if (qt_random_(ctx, t, QT_RAND_UNIFORM, qt_scalar_i(0), qt_scalar_i(0)) ||
      qt_binary_scalar_(ctx, QT_MUL, t, qt_scalar_from_double(hi * half - lo * half), true) ||
      qt_binary_scalar_(ctx, QT_ADD, t, qt_scalar_from_double(lo * half), true) ||
      (wide && qt_binary_scalar_(ctx, QT_MUL, t, qt_scalar_from_double(2.0), true)))
    return ops_random_rename(ctx, op);
  return 0;
}

/* t = mean + sd z, z standard normal. */
int qt_normal_(qt_ctx *ctx, qt_tensor *t, double mean, double sd) {
  const char *op = "normal_";
  if (ops_check_float_target(ctx, op, t)) return -1;
  if (!(sd >= 0) || !isfinite(sd) || !isfinite(mean))
    return qt_errorf(&ctx->err, "%s: mean %g and sd %g must be finite, sd >= 0", op, mean, sd);
  if (qt_random_(ctx, t, QT_RAND_NORMAL, qt_scalar_i(0), qt_scalar_i(0)) ||
      qt_binary_scalar_(ctx, QT_MUL, t, qt_scalar_from_double(sd), true) ||
      qt_binary_scalar_(ctx, QT_ADD, t, qt_scalar_from_double(mean), true))
    return ops_random_rename(ctx, op);
  return 0;
}

/* t = integers uniform in lo..hi (inclusive, as qlua.randint and math.random); a float
** or bool tensor gets them through an int64 draw converted on the device. Every integer of
** lo..hi must be one the dtype holds exactly: a float's integers past 2^digits (float16's
** past 2048) are rounded to their neighbours, or to inf, and would not be uniform. */
int qt_random_int_(qt_ctx *ctx, qt_tensor *t, int64_t lo, int64_t hi) {
  const char *op = "random_";
  if (ops_live(ctx, op, t) || ops_check_writable(ctx, op, t)) return -1;
  if (lo > hi)
    return qt_errorf(&ctx->err, "%s: empty range %lld..%lld", op, (long long)lo, (long long)hi);
  int64_t exact_lo, exact_hi;
  ops_exact_ints(t->dtype, &exact_lo, &exact_hi);
  if (lo < exact_lo || hi > exact_hi)
    return qt_errorf(&ctx->err, "%s: bounds %lld..%lld do not fit %s%s", op, (long long)lo,
                     (long long)hi, qt_dtypes[t->dtype].name,
                     qt_is_float(t->dtype) ? " (its integers are exact up to magnitude 2^digits)"
                                           : "");
  if (!qt_is_float(t->dtype) && !qt_is_bool(t->dtype)) {
    if (qt_random_(ctx, t, QT_RAND_INT, qt_scalar_i(lo), qt_scalar_i(hi))) return ops_random_rename(ctx, op);
    return 0;
  }
  qt_tensor draw;
  qt_tensor_init(&draw);
  int rc = qt_empty(ctx, &draw, ops_device(t), QT_I64, t->ndim, t->size);
  if (rc == 0) rc = qt_random_(ctx, &draw, QT_RAND_INT, qt_scalar_i(lo), qt_scalar_i(hi));
  if (rc == 0) rc = qt_copy_(ctx, t, &draw);
  qt_tensor_release(&draw);
  return rc ? ops_random_rename(ctx, op) : 0;
}

/* t = -log(1 - u) / lambda (log1p for the small u), u uniform in [0, 1). */
int qt_exponential_(qt_ctx *ctx, qt_tensor *t, double lambda) {
  const char *op = "exponential_";
  if (ops_check_float_target(ctx, op, t)) return -1;
  if (!(lambda > 0) || !isfinite(lambda))
    return qt_errorf(&ctx->err, "%s: lambda %g must be positive and finite", op, lambda);
  if (qt_random_(ctx, t, QT_RAND_UNIFORM, qt_scalar_i(0), qt_scalar_i(0)) ||
      qt_unary_(ctx, QT_NEG, t, NULL) || qt_unary_(ctx, QT_LOG1P, t, NULL) ||
      qt_binary_scalar_(ctx, QT_MUL, t, qt_scalar_from_double(-1.0 / lambda), true))
    return ops_random_rename(ctx, op);
  return 0;
}

/* A probability tensor's values, checked on its device: all in [0, 1] (NaN is refused). */
static int ops_check_probabilities(qt_ctx *ctx, const char *op, const qt_tensor *p) {
  if (qt_numel(p) == 0) return 0;
  qt_tensor lo, hi, bad;
  qt_tensor_init(&lo);
  qt_tensor_init(&hi);
  qt_tensor_init(&bad);
  int64_t pos[QT_MAXDIM] = {0};
  qt_scalar vlo, vhi, nans;
  int rc = qt_binary(ctx, &bad, QT_NE, p, p);  /* NaN is unequal to itself */
  if (rc == 0) rc = qt_reduce(ctx, &lo, QT_MIN, p, -1);
  if (rc == 0) rc = qt_reduce(ctx, &hi, QT_MAX, p, -1);
  if (rc == 0) rc = qt_get(ctx, &lo, pos, &vlo);
  if (rc == 0) rc = qt_get(ctx, &hi, pos, &vhi);
  qt_tensor any;
  qt_tensor_init(&any);
  if (rc == 0) rc = qt_reduce(ctx, &any, QT_MAX, &bad, -1);
  if (rc == 0) rc = qt_get(ctx, &any, pos, &nans);
  qt_tensor_release(&lo);
  qt_tensor_release(&hi);
  qt_tensor_release(&bad);
  qt_tensor_release(&any);
  if (rc != 0) return ops_random_rename(ctx, op);
  if (nans.i != 0) return qt_errorf(&ctx->err, "%s: a probability is NaN", op);
  if (vlo.f < 0 || vhi.f > 1)
    return qt_errorf(&ctx->err, "%s: probabilities must be in [0, 1], found %g", op,
                     vlo.f < 0 ? vlo.f : vhi.f);
  return 0;
}

/* out (p's shape; p's dtype, float32 for a non-float p) = 1 with probability p, else 0:
** u < p for u uniform in [0, 1). */
int qt_bernoulli(qt_ctx *ctx, qt_tensor *out, const qt_tensor *p) {
  const char *op = "bernoulli";
  if (ops_live(ctx, op, p)) return -1;
  qt_dtype dtype = qt_is_float(p->dtype) ? p->dtype : QT_F32;
  qt_tensor fp, u, hit, res;
  qt_tensor_init(&fp);
  qt_tensor_init(&u);
  qt_tensor_init(&hit);
  qt_tensor_init(&res);
  int rc = ops_cast(ctx, op, &fp, p, dtype);
  if (rc == 0) rc = ops_check_probabilities(ctx, op, &fp);
  if (rc == 0) rc = qt_empty(ctx, &u, ops_device(p), dtype, p->ndim, p->size);
  if (rc == 0) rc = qt_random_(ctx, &u, QT_RAND_UNIFORM, qt_scalar_i(0), qt_scalar_i(0));
  if (rc == 0) rc = qt_binary(ctx, &hit, QT_LT, &u, &fp);
  if (rc == 0) rc = qt_empty(ctx, &res, ops_device(p), dtype, p->ndim, p->size);
  if (rc == 0) rc = qt_copy_(ctx, &res, &hit);
  qt_tensor_release(&fp);
  qt_tensor_release(&u);
  qt_tensor_release(&hit);
  if (rc != 0) {
    qt_tensor_release(&res);
    return ops_random_rename(ctx, op);
  }
  *out = res;
  return 0;
}

/* A scalar read back from a 0-d reduction of t (the one wait of a check). */
static int ops_reduce_value(qt_ctx *ctx, qt_redop op, const qt_tensor *t, int dim,
                            qt_tensor *keep, qt_scalar *v) {
  qt_tensor r;
  qt_tensor_init(&r);
  int64_t pos[QT_MAXDIM] = {0};
  int rc = qt_reduce(ctx, &r, op, t, dim);
  if (rc == 0 && keep == NULL) rc = qt_get(ctx, &r, pos, v);
  if (rc == 0 && keep != NULL) *keep = r;
  else qt_tensor_release(&r);
  return rc;
}

/* out (n, or rows x n; int64, 1-based) = category draws from each row of probs (k weights,
** not necessarily normalised; 1-D or 2-D). With replacement: inverse transform sampling,
** the 1-based position of u * total in the cumulative sums of the row divided by its
** largest weight (searchsorted): those are in [0, 1], so the sums cannot overflow, where
** finite float64 weights near 1e308 sum to inf and every draw would be the last category.
** Without: the n smallest of e_j / p_j, e_j exponential, which draws without replacement
** with probabilities proportional to p (the "exponential race"), through topk; compared as
** log(e_j) - log(p_j), the same order, because the quotient overflows to inf for a
** subnormal p_j and would tie with a zero weight's e_j / 0. A zero weight's key is +inf
** (where), never among the n smallest: every row has n nonzero weights (checked). */
int qt_multinomial(qt_ctx *ctx, qt_tensor *out, const qt_tensor *probs, int64_t n,
                   bool replacement) {
  const char *op = "multinomial";
  if (ops_live(ctx, op, probs)) return -1;
  if (probs->ndim != 1 && probs->ndim != 2)
    return qt_errorf(&ctx->err, "%s: probs must be 1-D or 2-D, got %d-D", op, probs->ndim);
  int last = probs->ndim - 1;
  int64_t k = probs->size[last], rows = probs->ndim == 2 ? probs->size[0] : 1;
  if (k == 0) return qt_errorf(&ctx->err, "%s: probs has no categories", op);
  if (n < 0) return qt_errorf(&ctx->err, "%s: %lld samples", op, (long long)n);
  if (!replacement && n > k)
    return qt_errorf(&ctx->err, "%s: cannot draw %lld samples without replacement from %lld "
                     "categories", op, (long long)n, (long long)k);
  qt_device *dev = ops_device(probs);
  int rc = -1;
  qt_tensor p, bad, top, u, keys, res, cdf, total, scaled, counts, vals, pn, logp, diff, pos;
  qt_tensor *all[] = { &p, &bad, &top, &u, &keys, &res, &cdf, &total, &scaled, &counts, &vals,
                       &pn, &logp, &diff, &pos };
  for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) qt_tensor_init(all[i]);
  qt_scalar v;
  /* weights: finite, >= 0, each row's largest > 0 (computed in float64) */
  if (ops_cast(ctx, op, &p, probs, QT_F64)) goto cleanup;
  if (qt_unary(ctx, &bad, QT_ISFINITE, &p, NULL) || ops_reduce_value(ctx, QT_MIN, &bad, -1, NULL, &v))
    goto cleanup;
  if (rows * k > 0 && v.i == 0) {
    qt_errorf(&ctx->err, "%s: a probability is NaN or infinite", op);
    goto cleanup;
  }
  if (ops_reduce_value(ctx, QT_MIN, &p, -1, NULL, &v)) goto cleanup;
  if (v.f < 0) {
    qt_errorf(&ctx->err, "%s: probabilities must be >= 0, found %g", op, v.f);
    goto cleanup;
  }
  if (qt_reduce_dims(ctx, &top, QT_MAX, &p, 1, &last, true, 0) ||
      ops_reduce_value(ctx, QT_MIN, &top, -1, NULL, &v))
    goto cleanup;
  if (!(v.f > 0)) {
    qt_errorf(&ctx->err, "%s: a row of probabilities sums to 0", op);
    goto cleanup;
  }
  int64_t shape[2] = { rows, n };
  int nd = probs->ndim;
  const int64_t *out_size = nd == 2 ? shape : shape + 1;
  if (replacement) {
    /* u * total in 0..total, positions in the cumulative sums, at most k */
    if (qt_binary(ctx, &pn, QT_DIV, &p, &top) || qt_scan(ctx, &cdf, NULL, QT_CUMSUM, &pn, last) ||
        qt_narrow(ctx, &total, &cdf, last, k - 1, 1) ||
        qt_empty(ctx, &u, dev, QT_F64, nd, out_size) ||
        qt_random_(ctx, &u, QT_RAND_UNIFORM, qt_scalar_i(0), qt_scalar_i(0)))
      goto cleanup;
    if (qt_binary(ctx, &scaled, QT_MUL, &u, &total) ||
        qt_searchsorted(ctx, &keys, &cdf, &scaled, true) ||
        qt_clamp(ctx, &res, &keys, qt_scalar_i(1), qt_scalar_i(k), false))
      goto cleanup;
  } else {
    /* every row needs n categories of nonzero weight */
    if (qt_count_nonzero(ctx, &counts, &p, last) ||
        ops_reduce_value(ctx, QT_MIN, &counts, -1, NULL, &v))
      goto cleanup;
    if (v.i < n) {
      qt_errorf(&ctx->err, "%s: cannot draw %lld samples without replacement from %lld "
                "categories of nonzero probability", op, (long long)n, (long long)v.i);
      goto cleanup;
    }
    qt_where_arg key = { &diff, qt_scalar_i(0), false, false };
    qt_where_arg never = { NULL, qt_scalar_from_double(INFINITY), true, false };
    if (qt_empty(ctx, &u, dev, QT_F64, nd, probs->size) || qt_exponential_(ctx, &u, 1.0) ||
        qt_unary_(ctx, QT_LOG, &u, NULL) || qt_unary(ctx, &logp, QT_LOG, &p, NULL) ||
        qt_binary(ctx, &diff, QT_SUB, &u, &logp) ||
        qt_binary_scalar(ctx, &pos, QT_GT, &p, qt_scalar_i(0), false, false) ||
        qt_where(ctx, &keys, &pos, &key, &never) ||
        qt_topk(ctx, &vals, &res, &keys, n, last, false, true))
      goto cleanup;
  }
  *out = res;
  qt_tensor_init(&res);
  rc = 0;
cleanup:
  for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) qt_tensor_release(all[i]);
  if (rc != 0) qt_err_as(&ctx->err, op);
  return rc;
}
