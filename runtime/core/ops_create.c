/*
** ops_create.c — creation: empty tensors, tensors from host data, fill and random numbers.
*/
#include "ops_internal.h"

#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ================================================================== creation */

int qt_empty(qt_ctx *ctx, qt_tensor *out, qt_device *dev, qt_dtype dtype, int ndim,
             const int64_t *size) {
  return ops_alloc(ctx, "empty", out, dev, dtype, ndim, size);
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

int qt_fill_(qt_ctx *ctx, qt_tensor *t, qt_scalar value) {
  const char *op = "fill_";
  if (ops_live(ctx, op, t)) return -1;
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
    if (t->dtype == QT_I32 && (lo.i < INT32_MIN || hi.i > INT32_MAX))
      return qt_errorf(&ctx->err, "%s: bounds %lld..%lld do not fit int32", op,
                       (long long)lo.i, (long long)hi.i);
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

/* The host tensor range fills in place, moved to dev at the end (a count too large for
** memory fails in the allocator, with the op named, like every other allocation). */
static void *ops_range_buffer(qt_ctx *ctx, qt_tensor *host, qt_dtype dtype, int64_t n) {
  int64_t size[1] = {n};
  if (qt_empty(ctx, host, qt_cpu_device(), dtype, 1, size) != 0) {
    qt_err_rename(&ctx->err, "empty", "range");
    return NULL;
  }
  return (char *)host->storage->data + (size_t)host->offset * qt_elsize(dtype);
}

static int ops_range_finish(qt_ctx *ctx, qt_tensor *out, qt_tensor *host, qt_device *dev) {
  if (dev == qt_cpu_device()) {
    *out = *host;
    qt_tensor_init(host);
    return 0;
  }
  int rc = qt_to_device(ctx, out, host, dev);
  qt_tensor_release(host);
  return rc != 0 ? qt_err_rename(&ctx->err, "to", "range") : 0;
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
    if (!info->is_float && (v < info->min || v > info->max)) {
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
    return qt_errorf(&ctx->err, "range: too many elements (%f to %f step %f)", first, last, step);
  int64_t n = 0;
  for (double i = first; step > 0 ? i <= last : i >= last; i += step) {
    if (i + step == i)
      return qt_errorf(&ctx->err, "range: step %f does not move %f (the loop would never end)",
                       step, i);
    n++;
  }
  if (!qt_is_float(dtype))
    for (int a = 0; a < 3; a++)
      if (is_float[a] && arg[a].f != floor(arg[a].f))
        return qt_errorf(&ctx->err, "range: %f is not an integer (dtype %s)", arg[a].f,
                         qt_dtypes[dtype].name);
  qt_tensor host;
  qt_tensor_init(&host);
  void *data = ops_range_buffer(ctx, &host, dtype, n);
  if (data == NULL) return -1;
  const qt_dtype_info *info = &qt_dtypes[dtype];
  double v = first;
  for (int64_t k = 0; k < n; k++, v += step) {
    if (!info->is_float && !(v >= (double)info->min && v < (double)info->max + 1.0)) {
      qt_tensor_release(&host);
      return qt_errorf(&ctx->err, "range: value %f out of range for %s", v, info->name);
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
