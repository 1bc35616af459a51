/*
** ops_create.c — creation: empty tensors, tensors from host data, fill and random numbers,
** the *_like functions, range and arange, linspace and logspace, eye and randperm. Every
** function past qt_random_ composes the ones above it (allocation, fill, uploads, views):
** no device code of its own, so each is right on every device by construction.
*/
#include "ops_internal.h"
#include "philox.h"

#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ================================================================== creation */

/* A bool tensor is never left uninitialised: every bool must hold 0 or 1 (reading any
** other byte as a C bool is undefined), so empty() of bool gives false everywhere. */
int qt_empty(qt_ctx *ctx, qt_tensor *out, qt_device *dev, qt_dtype dtype, int ndim,
             const int64_t *size) {
  if (ops_alloc(ctx, "empty", out, dev, dtype, ndim, size)) return -1;
  if (qt_is_bool(dtype) && qt_numel(out) > 0 && qt_fill_(ctx, out, qt_scalar_i(0)) != 0) {
    qt_tensor_release(out);
    return qt_err_rename(&ctx->err, "fill_", "empty");
  }
  return 0;
}

/* Contiguous host bytes into a new tensor through the device's upload slot (the CPU
** device's is a memcpy; a CPU device without one is served by memcpy here). */
int qt_from_host(qt_ctx *ctx, qt_tensor *out, qt_device *dev, qt_dtype dtype, int ndim,
                 const int64_t *size, const void *host_data) {
  const char *op = "tensor";
  qt_tensor res;
  qt_tensor_init(&res);
  if (ops_alloc(ctx, op, &res, dev, dtype, ndim, size)) return -1;
  size_t nbytes = (size_t)qt_numel(&res) * qt_elsize(dtype);
  if (nbytes > 0) {
    int rc;
    if (host_data == NULL) {
      rc = qt_errorf(&ctx->err, "%s: no data", op);
    } else if (ops_refuse_capture(ctx, op, dev)) {
      rc = -1;
    } else if (dev->iface->upload != NULL) {
      rc = dev->iface->upload(dev, res.storage->data, host_data, nbytes, &ctx->err);
    } else if (dev->kind == QT_DEV_CPU) {
      memcpy(res.storage->data, host_data, nbytes);
      rc = 0;
    } else {
      rc = ops_unsupported(ctx, op, dev);
    }
    if (rc) {
      qt_tensor_release(&res);
      return -1;
    }
  }
  *out = res;
  return 0;
}

/* Refused for an expanded view, like every other write (ops_check_writable): its
** elements share memory, so "fill every element" is not what the write would do. */
int qt_fill_(qt_ctx *ctx, qt_tensor *t, qt_scalar value) {
  const char *op = "fill_";
  if (ops_live(ctx, op, t) || ops_check_writable(ctx, op, t)) return -1;
  qt_view v;
  qt_view_of(&v, t);
  return ops_fill_view(ctx, op, ops_device(t), &v, value);
}

/* Philox counters: element k of this call uses counter rng_offset + k, so the offset
** advances by numel whatever the device. A non-contiguous t is generated into a
** contiguous temporary and copied in, so the numbers follow t's row-major order. */
int qt_random_(qt_ctx *ctx, qt_tensor *t, qt_random_kind kind, qt_scalar lo, qt_scalar hi) {
  const char *op = kind == QT_RAND_INT ? "randint" : kind == QT_RAND_NORMAL ? "randn" : "rand";
  if (ops_live(ctx, op, t)) return -1;
  if (kind != QT_RAND_UNIFORM && kind != QT_RAND_NORMAL && kind != QT_RAND_INT)
    return qt_errorf(&ctx->err, "random: unknown distribution %d", (int)kind);
  if (kind == QT_RAND_INT) {
    if (qt_is_float(t->dtype))
      return qt_errorf(&ctx->err, "%s: dtype %s is not an integer dtype", op,
                       qt_dtypes[t->dtype].name);
    if (lo.i > hi.i)
      return qt_errorf(&ctx->err, "%s: lower bound %lld is greater than upper bound %lld", op,
                       (long long)lo.i, (long long)hi.i);
    if (lo.i < qt_dtypes[t->dtype].min || hi.i > qt_dtypes[t->dtype].max)
      return qt_errorf(&ctx->err, "%s: bounds %lld..%lld do not fit %s", op,
                       (long long)lo.i, (long long)hi.i, qt_dtypes[t->dtype].name);
  } else if (!qt_is_float(t->dtype)) {
    return qt_errorf(&ctx->err, "%s: dtype %s is not a float dtype", op,
                     qt_dtypes[t->dtype].name);
  }
  if (ops_check_writable(ctx, op, t)) return -1;
  qt_device *dev = ops_device(t);
  if (dev->iface->random == NULL) return ops_unsupported(ctx, op, dev);
  int64_t numel = qt_numel(t);
  if (numel == 0) return 0;

  int rc = -1;
  qt_tensor tmp;
  qt_tensor_init(&tmp);
  const qt_tensor *target = t;
  if (!qt_is_contiguous(t)) {
    if (ops_alloc_like(ctx, op, &tmp, t, t->dtype)) goto cleanup;
    target = &tmp;
  }
  qt_view v;
  qt_view_of(&v, target);
  if (dev->iface->random(dev, kind, &v, ctx->seed, ctx->rng_offset, lo, hi, &ctx->err))
    goto cleanup;
  ctx->rng_offset += (uint64_t)numel;
  if (target == &tmp) {
    qt_view dv;
    qt_view_of(&dv, t);
    if (ops_copy_views(ctx, op, dev, &dv, &v)) goto cleanup;
  }
  rc = 0;
cleanup:
  qt_tensor_release(&tmp);
  return rc;
}

/* ------------------------------------------------------------------ range */

/* The host tensor range (and arange, linspace, logspace, randperm) fills in place, moved
** to dev at the end (a count too large for memory fails in the allocator, with the op
** named, like every other allocation). The values are made once, on the host, so every
** device holds the same bits. */
static void *ops_host_buffer(qt_ctx *ctx, const char *op, qt_tensor *host, qt_dtype dtype,
                             int64_t n) {
  int64_t size[1] = {n};
  if (qt_empty(ctx, host, qt_cpu_device(), dtype, 1, size) != 0) {
    qt_err_rename(&ctx->err, "empty", op);
    return NULL;
  }
  return (char *)host->storage->data + (size_t)host->offset * qt_elsize(dtype);
}

static int ops_host_finish(qt_ctx *ctx, const char *op, qt_tensor *out, qt_tensor *host,
                           qt_device *dev) {
  if (dev == qt_cpu_device()) {
    *out = *host;
    qt_tensor_init(host);
    return 0;
  }
  int rc = qt_to_device(ctx, out, host, dev);
  qt_tensor_release(host);
  return rc != 0 ? qt_err_rename(&ctx->err, "to", op) : 0;
}

static void *ops_range_buffer(qt_ctx *ctx, qt_tensor *host, qt_dtype dtype, int64_t n) {
  return ops_host_buffer(ctx, "range", host, dtype, n);
}

static int ops_range_finish(qt_ctx *ctx, qt_tensor *out, qt_tensor *host, qt_device *dev) {
  return ops_host_finish(ctx, "range", out, host, dev);
}

/* Lua's forlimit: an integer loop's float limit, floored (ceiled for a negative step) and
** clipped to int64; false when the loop does not run at all (a NaN limit, or one clipped
** past the wrong end). */
static bool ops_range_int_limit(double f, int64_t step, int64_t *last) {
  double r = step > 0 ? floor(f) : ceil(f);
  if (r != r) return false;
  if (r >= 9223372036854775808.0) { *last = INT64_MAX; return step > 0; }
  if (r < -9223372036854775808.0) { *last = INT64_MIN; return step < 0; }
  *last = (int64_t)r;
  return true;
}

static int ops_range_int(qt_ctx *ctx, qt_tensor *out, qt_device *dev, qt_dtype dtype,
                         const qt_scalar *arg, const bool *is_float) {
  int64_t first = arg[0].i, step = arg[2].i, last = arg[1].i;
  if (step == 0) return qt_errorf(&ctx->err, "range: step is zero");
  bool runs = is_float[1] ? ops_range_int_limit(arg[1].f, step, &last) : true;
  int64_t n = 0;
  if (runs && (step > 0 ? first <= last : first >= last)) {
    uint64_t span = step > 0 ? (uint64_t)last - (uint64_t)first : (uint64_t)first - (uint64_t)last;
    uint64_t ustep = step > 0 ? (uint64_t)step : (uint64_t)0 - (uint64_t)step;
    uint64_t count = span / ustep + 1;
    if (count == 0 || count > (uint64_t)INT64_MAX / 8)
      return qt_errorf(&ctx->err, "range: too many elements (%lld to %lld step %lld)",
                       (long long)first, (long long)last, (long long)step);
    n = (int64_t)count;
  }
  qt_tensor host;
  qt_tensor_init(&host);
  void *data = ops_range_buffer(ctx, &host, dtype, n);
  if (data == NULL) return -1;
  const qt_dtype_info *info = &qt_dtypes[dtype];
  for (int64_t k = 0; k < n; k++) {
    int64_t v = (int64_t)((uint64_t)first + (uint64_t)k * (uint64_t)step);  /* exact */
    if (info->is_float ? !ops_float_fits(dtype, (double)v) : v < info->min || v > info->max) {
      qt_tensor_release(&host);
      return qt_errorf(&ctx->err, "range: value %lld out of range for %s", (long long)v,
                       info->name);
    }
    qt_scalar_store(dtype, (char *)data + (size_t)k * info->size, qt_scalar_i(v));
  }
  return ops_range_finish(ctx, out, &host, dev);
}

static int ops_range_float(qt_ctx *ctx, qt_tensor *out, qt_device *dev, qt_dtype dtype,
                           const qt_scalar *arg, const bool *is_float) {
  double first = arg[0].f, last = arg[1].f, step = arg[2].f;
  if (step == 0) return qt_errorf(&ctx->err, "range: step is zero");
  if (!isfinite(first) || !isfinite(last) || !isfinite(step))
    return qt_errorf(&ctx->err, "range: first, last and step must be finite");
  /* Count the loop's turns as it runs them. An estimate bounds the work first, and a step
  ** too small to move i (i + step == i) is an error: Lua's loop would never end. */
  double estimate = floor((last - first) / step) + 1;
  if (estimate > (double)((int64_t)1 << 40))
    return qt_errorf(&ctx->err, "range: too many elements (%.14g to %.14g step %.14g)", first, last,
                     step);
  int64_t n = 0;
  for (double i = first; step > 0 ? i <= last : i >= last; i += step) {
    if (i + step == i)
      return qt_errorf(&ctx->err, "range: step %.14g does not move %.14g (the loop would never end)",
                       step, i);
    n++;
  }
  if (!qt_is_float(dtype))
    for (int a = 0; a < 3; a++)
      if (is_float[a] && arg[a].f != floor(arg[a].f))
        return qt_errorf(&ctx->err, "range: %.14g is not an integer (dtype %s)", arg[a].f,
                         qt_dtypes[dtype].name);
  qt_tensor host;
  qt_tensor_init(&host);
  void *data = ops_range_buffer(ctx, &host, dtype, n);
  if (data == NULL) return -1;
  const qt_dtype_info *info = &qt_dtypes[dtype];
  double v = first;
  for (int64_t k = 0; k < n; k++, v += step) {
    if (info->is_float ? !ops_float_fits(dtype, v)
                       : !(v >= (double)info->min && v < (double)info->max + 1.0)) {
      qt_tensor_release(&host);
      return qt_errorf(&ctx->err, "range: value %.14g out of range for %s", v, info->name);
    }
    qt_scalar_store(dtype, (char *)data + (size_t)k * info->size, qt_scalar_from_double(v));
  }
  return ops_range_finish(ctx, out, &host, dev);
}

int qt_range(qt_ctx *ctx, qt_tensor *out, qt_device *dev, qt_dtype dtype, const qt_scalar *arg,
             const bool *is_float) {
  if (ops_check_dtype(ctx, "range", dtype)) return -1;
  if (dev == NULL) dev = qt_cpu_device();
  /* an integer first and step make an integer loop (lvm.c forprep), whatever last is */
  if (!is_float[0] && !is_float[2]) return ops_range_int(ctx, out, dev, dtype, arg, is_float);
  return ops_range_float(ctx, out, dev, dtype, arg, is_float);
}

/* ------------------------------------------------------------------ *_like */

int qt_empty_like(qt_ctx *ctx, qt_tensor *out, const qt_tensor *t, qt_device *dev,
                  qt_dtype dtype) {
  const char *op = "empty_like";
  if (ops_live(ctx, op, t)) return -1;
  if (dtype == QT_NDTYPES) dtype = t->dtype;
  if (dev == NULL) dev = ops_device(t);
  /* through qt_empty, which gives a bool tensor false everywhere (never garbage bytes) */
  if (qt_empty(ctx, out, dev, dtype, t->ndim, t->size)) return qt_err_rename(&ctx->err, "empty", op);
  return 0;
}

int qt_full_like(qt_ctx *ctx, qt_tensor *out, const qt_tensor *t, qt_device *dev,
                 qt_dtype dtype, qt_scalar value) {
  qt_tensor res;
  qt_tensor_init(&res);
  if (qt_empty_like(ctx, &res, t, dev, dtype)) return qt_err_rename(&ctx->err, "empty_like", "full_like");
  if (qt_fill_(ctx, &res, value)) {
    qt_tensor_release(&res);
    return qt_err_rename(&ctx->err, "fill_", "full_like");
  }
  *out = res;
  return 0;
}

/* ------------------------------------------------------------------ arange */

/* A float argument of an integer arange as an int64, or an error naming it. */
static int ops_arange_integral(qt_ctx *ctx, qt_dtype dtype, double f, int64_t *v) {
  if (!(f == floor(f)) || !(f >= -9223372036854775808.0 && f < 9223372036854775808.0))
    return qt_errorf(&ctx->err, "arange: %g is not an integer (dtype %s)", f,
                     qt_dtypes[dtype].name);
  *v = (int64_t)f;
  return 0;
}

static int ops_arange_int(qt_ctx *ctx, qt_tensor *out, qt_device *dev, qt_dtype dtype,
                          int64_t start, int64_t stop, int64_t step) {
  if (step == 0) return qt_errorf(&ctx->err, "arange: step is zero");
  int64_t n = 0;
  if (step > 0 ? start < stop : start > stop) {
    uint64_t span = step > 0 ? (uint64_t)stop - (uint64_t)start : (uint64_t)start - (uint64_t)stop;
    uint64_t ustep = step > 0 ? (uint64_t)step : (uint64_t)0 - (uint64_t)step;
    uint64_t count = span / ustep + (span % ustep != 0);  /* ceil, exactly */
    if (count > (uint64_t)INT64_MAX / 8)
      return qt_errorf(&ctx->err, "arange: too many elements (%lld to %lld step %lld)",
                       (long long)start, (long long)stop, (long long)step);
    n = (int64_t)count;
  }
  const qt_dtype_info *info = &qt_dtypes[dtype];
  if (n > 0) {  /* monotone: the first and the last bound the rest */
    int64_t last = (int64_t)((uint64_t)start + (uint64_t)(n - 1) * (uint64_t)step);
    bool first_bad = info->is_float ? !ops_float_fits(dtype, (double)start)
                                    : start < info->min || start > info->max;
    bool last_bad = info->is_float ? !ops_float_fits(dtype, (double)last)
                                   : last < info->min || last > info->max;
    if (first_bad || last_bad)
      return qt_errorf(&ctx->err, "arange: value %lld out of range for %s",
                       (long long)(first_bad ? start : last), info->name);
  }
  qt_tensor host;
  qt_tensor_init(&host);
  void *data = ops_host_buffer(ctx, "arange", &host, dtype, n);
  if (data == NULL) return -1;
  for (int64_t k = 0; k < n; k++) {
    int64_t v = (int64_t)((uint64_t)start + (uint64_t)k * (uint64_t)step);  /* exact */
    qt_scalar_store(dtype, (char *)data + (size_t)k * info->size, qt_scalar_i(v));
  }
  return ops_host_finish(ctx, "arange", out, &host, dev);
}

/* Float arguments: element k is start + k * step in double, and n is the number of k >= 0
** for which that is < stop (> for a negative step). ceil((stop - start) / step) is the
** first guess; one rounding of that quotient can put it one off either way, so it is
** moved until the last element is inside and the next one is not. */
static int ops_arange_float(qt_ctx *ctx, qt_tensor *out, qt_device *dev, qt_dtype dtype,
                            double start, double stop, double step) {
  if (step == 0) return qt_errorf(&ctx->err, "arange: step is zero");
  if (!isfinite(start) || !isfinite(stop) || !isfinite(step))
    return qt_errorf(&ctx->err, "arange: start, stop and step must be finite (%g, %g, %g)",
                     start, stop, step);
  double q = (stop - start) / step;
  int64_t n = 0;
  if (q > 0) {
    if (!(q <= (double)((int64_t)1 << 40)))
      return qt_errorf(&ctx->err, "arange: too many elements (%g to %g step %g)", start, stop,
                       step);
    n = (int64_t)ceil(q);
#define OPS_INSIDE(k) (step > 0 ? start + (double)(k) * step < stop : start + (double)(k) * step > stop)
    while (n > 0 && !OPS_INSIDE(n - 1)) n--;
    while (OPS_INSIDE(n)) n++;
#undef OPS_INSIDE
  }
  for (int64_t k = 0; k < n; k += n - 1 > 0 ? n - 1 : 1) {  /* monotone: the ends bound it */
    double v = start + (double)k * step;
    if (!ops_float_fits(dtype, v))
      return qt_errorf(&ctx->err, "arange: value %.14g out of range for %s", v,
                       qt_dtypes[dtype].name);
  }
  qt_tensor host;
  qt_tensor_init(&host);
  void *data = ops_host_buffer(ctx, "arange", &host, dtype, n);
  if (data == NULL) return -1;
  size_t elsize = qt_elsize(dtype);
  for (int64_t k = 0; k < n; k++)
    qt_scalar_store(dtype, (char *)data + (size_t)k * elsize,
                    qt_scalar_from_double(start + (double)k * step));
  return ops_host_finish(ctx, "arange", out, &host, dev);
}

int qt_arange(qt_ctx *ctx, qt_tensor *out, qt_device *dev, qt_dtype dtype, const qt_scalar *arg,
              const bool *is_float) {
  if (ops_check_dtype(ctx, "arange", dtype)) return -1;
  if (dev == NULL) dev = qt_cpu_device();
  if (!qt_is_float(dtype) || (!is_float[0] && !is_float[1] && !is_float[2])) {
    int64_t v[3];
    for (int a = 0; a < 3; a++) {
      if (!is_float[a]) v[a] = arg[a].i;
      else if (ops_arange_integral(ctx, dtype, arg[a].f, &v[a])) return -1;
    }
    return ops_arange_int(ctx, out, dev, dtype, v[0], v[1], v[2]);
  }
  double v[3];
  for (int a = 0; a < 3; a++) v[a] = is_float[a] ? arg[a].f : (double)arg[a].i;
  return ops_arange_float(ctx, out, dev, dtype, v[0], v[1], v[2]);
}

/* ------------------------------------------------------------------ linspace, logspace */

/* PyTorch's formula: step = (end - start) / (n - 1); the first half counts up from start
** (start + k * step), the second half down from end (end - (n - 1 - k) * step), so both
** ends are exact. logspace raises base to each. Integer dtypes take the values truncated
** toward zero; a value the dtype cannot hold is an error. */
static int ops_spaced(qt_ctx *ctx, const char *op, qt_tensor *out, qt_device *dev,
                      qt_dtype dtype, double start, double end, int64_t n, const double *base) {
  if (ops_check_dtype(ctx, op, dtype)) return -1;
  if (dev == NULL) dev = qt_cpu_device();
  if (n < 0) return qt_errorf(&ctx->err, "%s: steps %lld is negative", op, (long long)n);
  if (!isfinite(start) || !isfinite(end))
    return qt_errorf(&ctx->err, "%s: start and end must be finite (%g, %g)", op, start, end);
  if (base != NULL && !isfinite(*base))
    return qt_errorf(&ctx->err, "%s: base %g is not finite", op, *base);
  qt_tensor host;
  qt_tensor_init(&host);
  void *data = ops_host_buffer(ctx, op, &host, dtype, n);
  if (data == NULL) return -1;
  const qt_dtype_info *info = &qt_dtypes[dtype];
  double step = n > 1 ? (end - start) / (double)(n - 1) : 0;
  int64_t half = n / 2;
  for (int64_t k = 0; k < n; k++) {
    double v = n == 1 ? start : k < half ? start + (double)k * step
                                         : end - (double)(n - 1 - k) * step;
    if (base != NULL) v = pow(*base, v);
    qt_scalar s;
    if (info->is_float) {
      if (!ops_float_fits(dtype, v)) {
        qt_tensor_release(&host);
        return qt_errorf(&ctx->err, "%s: value %g out of range for %s", op, v, info->name);
      }
      s = qt_scalar_from_double(v);
    } else {
      double t = trunc(v);
      if (!(t >= (double)info->min && t < (double)info->max + 1.0)) {
        qt_tensor_release(&host);
        return qt_errorf(&ctx->err, "%s: value %g out of range for %s", op, v, info->name);
      }
      s = qt_scalar_i((int64_t)t);
    }
    qt_scalar_store(dtype, (char *)data + (size_t)k * info->size, s);
  }
  return ops_host_finish(ctx, op, out, &host, dev);
}

int qt_linspace(qt_ctx *ctx, qt_tensor *out, qt_device *dev, qt_dtype dtype, double start,
                double end, int64_t n) {
  return ops_spaced(ctx, "linspace", out, dev, dtype, start, end, n, NULL);
}

int qt_logspace(qt_ctx *ctx, qt_tensor *out, qt_device *dev, qt_dtype dtype, double start,
                double end, int64_t n, double base) {
  return ops_spaced(ctx, "logspace", out, dev, dtype, start, end, n, &base);
}

/* ------------------------------------------------------------------ eye */

/* zeros, then ones through a 1-D view of the diagonal: stride m + 1 over the storage. */
int qt_eye(qt_ctx *ctx, qt_tensor *out, qt_device *dev, qt_dtype dtype, int64_t n, int64_t m) {
  const char *op = "eye";
  if (dev == NULL) dev = qt_cpu_device();
  if (n < 0 || m < 0)
    return qt_errorf(&ctx->err, "%s: sizes %lld, %lld must not be negative", op, (long long)n,
                     (long long)m);
  int64_t size[2] = {n, m};
  qt_tensor res;
  qt_tensor_init(&res);
  if (ops_alloc(ctx, op, &res, dev, dtype, 2, size)) return -1;
  int rc = -1;
  if (qt_fill_(ctx, &res, qt_scalar_i(0))) goto fail;
  int64_t k = n < m ? n : m;
  if (k > 0) {
    qt_tensor diag;
    qt_tensor_share(&diag, &res);
    diag.ndim = 1;
    diag.size[0] = k;
    diag.stride[0] = m + 1;
    for (int d = 1; d < QT_MAXDIM; d++) diag.size[d] = 0, diag.stride[d] = 0;
    rc = qt_fill_(ctx, &diag, qt_scalar_i(1));
    qt_tensor_release(&diag);
    if (rc) goto fail;
  }
  *out = res;
  return 0;
fail:
  qt_tensor_release(&res);
  return qt_err_rename(&ctx->err, "fill_", op);
}

/* ------------------------------------------------------------------ randperm */

/* Fisher-Yates on the host over 1..n: step k (0-based) swaps position i = n - 1 - k with a
** position j uniform in 0..i, drawn from Philox counter rng_offset + k (qt_philox_int, as
** randint draws); the offset advances by the n - 1 counters used. The permutation is made
** as int64, converted on the host when dtype differs, and uploaded, so every device gets
** the same one for the same seed. */
int qt_randperm(qt_ctx *ctx, qt_tensor *out, qt_device *dev, qt_dtype dtype, int64_t n) {
  const char *op = "randperm";
  if (ops_check_dtype(ctx, op, dtype)) return -1;
  if (dev == NULL) dev = qt_cpu_device();
  if (n < 0) return qt_errorf(&ctx->err, "%s: n %lld is negative", op, (long long)n);
  const qt_dtype_info *info = &qt_dtypes[dtype];
  int64_t lowest, exact;  /* 1..n must all be exact: n <= 2^digits (PyTorch's rule, 0-based) */
  ops_exact_ints(dtype, &lowest, &exact);
  if (n > exact)
    return qt_errorf(&ctx->err, "%s: n %lld is too large for %s (at most %lld)", op,
                     (long long)n, info->name, (long long)exact);
  qt_tensor host;
  qt_tensor_init(&host);
  int64_t *p = (int64_t *)ops_host_buffer(ctx, op, &host, QT_I64, n);
  if (p == NULL) return -1;
  for (int64_t i = 0; i < n; i++) p[i] = i + 1;
  for (int64_t k = 0; k + 1 < n; k++) {
    int64_t i = n - 1 - k;
    int64_t j = qt_philox_int(qt_philox(ctx->seed, ctx->rng_offset + (uint64_t)k), 0, i);
    int64_t tmp = p[i];
    p[i] = p[j];
    p[j] = tmp;
  }
  if (dtype != QT_I64) {
    qt_tensor cast;
    qt_tensor_init(&cast);
    int rc = qt_to_dtype(ctx, &cast, &host, dtype);
    qt_tensor_release(&host);
    if (rc) return qt_err_rename(&ctx->err, "to", op);
    host = cast;
  }
  if (ops_host_finish(ctx, op, out, &host, dev)) return -1;
  if (n > 1) ctx->rng_offset += (uint64_t)(n - 1);
  return 0;
}
