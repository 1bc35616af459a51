/*
** ops_elementwise.c — elementwise arithmetic: binary ops with broadcasting and NumPy promotion,
** tensor-scalar ops, unary ops and clamp, in place or not.
*/
#include "ops_internal.h"

#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ================================================================== arithmetic */

/* What bool operands may not do, as in PyTorch: subtract (use logical_xor) and negate
** (use logical_not). Add is logical or, mul logical and, as in NumPy. */
static int ops_bool_refused(qt_ctx *ctx, const char *name, qt_binop op) {
  if (op == QT_SUB)
    return qt_errorf(&ctx->err, "%s: cannot subtract bool tensors (use logical_xor, or convert "
                     "with :to(\"int64\") first)", name);
  return 0;
}

/* The dtype a binary op computes in, for two tensors (its result is that, or bool for
** the ops that give bool: qt_binop_gives_bool). */
static int ops_binary_dtype(qt_ctx *ctx, const char *name, qt_binop op, qt_dtype a, qt_dtype b,
                            qt_dtype *compute) {
  qt_dtype d = qt_promote(a, b);
  if (!qt_binop_takes_ints(op) && !qt_is_float(d)) d = QT_F64;
  if (qt_is_bool(d) && ops_bool_refused(ctx, name, op)) return -1;
  *compute = d;
  return 0;
}

static qt_dtype ops_result_dtype(qt_binop op, qt_dtype compute) {
  return qt_binop_gives_bool(op) ? QT_BOOL : compute;
}

/* For a tensor and a Lua number: the dtype the device computes in (*compute) and the
** result's dtype (*result), and the scalar as the device should see it (NumPy 2's rules
** for a Python number, which takes the tensor's dtype where it can):
**   - a float number with a non-float tensor, and `/` of a non-float tensor: float64;
**   - an integer number with a bool tensor: int64 (bool cannot hold it), except for the
**     logical ops, which read any number through nonzero;
**   - otherwise the tensor's dtype;
**   - an integer tensor with an integer outside its dtype's range: comparisons (and the
**     logical ops) are computed in int64 (exact, as NumPy 2 compares out-of-bounds Python
**     integers); any other op is an error, as in NumPy 2, since the dtype cannot hold the
**     number (it never wraps);
**   - an integer raised to a negative integer power is an error, as in NumPy (the
**     answer is not an integer).
** Comparisons and the logical ops return bool. scalar_first: the number is the left
** operand (2 ^ t: then t holds the exponents, and the caller checks them). Returns 0, or
** -1 with the message. */
static int ops_scalar_dtypes(qt_ctx *ctx, const char *name, qt_binop op, qt_dtype a,
                             qt_scalar *s, bool s_is_float, bool scalar_first,
                             qt_dtype *compute, qt_dtype *result) {
  qt_dtype d = a;
  bool gives_bool = qt_binop_gives_bool(op);
  bool logical = op == QT_LOGICAL_AND || op == QT_LOGICAL_OR || op == QT_LOGICAL_XOR;
  if (logical) {
    /* any number is read through nonzero, in the tensor's own dtype */
  } else if (!qt_is_float(a) && (s_is_float || !qt_binop_takes_ints(op))) {
    d = QT_F64;
  } else if (qt_is_bool(a) && !(gives_bool && (s->i == 0 || s->i == 1))) {
    d = QT_I64;  /* a comparison with 0 or 1 stays in bool */
  }
  if (s_is_float) *s = qt_scalar_from_double(s->f);
  else *s = qt_scalar_i(s->i);
  if (!qt_is_float(d) && !qt_is_bool(d) &&
      (s->i < qt_dtypes[d].min || s->i > qt_dtypes[d].max)) {
    if (!gives_bool)
      return qt_errorf(&ctx->err, "%s: %lld is out of range for %s %s tensor (convert it "
                       "with :to(\"int64\") first)", name, (long long)s->i,
                       qt_dtypes[d].name[0] == 'i' ? "an" : "a", qt_dtypes[d].name);
    d = QT_I64;
  }
  *compute = d;
  *result = ops_result_dtype(op, d);
  if (op == QT_POW && !qt_is_float(d) && !scalar_first && s->i < 0)
    return qt_errorf(&ctx->err, "%s: integers to negative integer powers are not allowed "
                     "(exponent %lld)", name, (long long)s->i);
  return 0;
}

/* An integer power's exponents, when they come from a tensor: all >= 0 (one min
** reduction, on the exponents' device). */
static int ops_check_exponents(qt_ctx *ctx, const char *name, const qt_tensor *e) {
  if (qt_is_float(e->dtype) || qt_numel(e) == 0) return 0;
  qt_tensor m;
  qt_tensor_init(&m);
  int64_t pos[QT_MAXDIM] = {0};
  qt_scalar v;
  int rc = qt_reduce(ctx, &m, QT_MIN, e, -1);
  if (rc == 0) rc = qt_get(ctx, &m, pos, &v);
  qt_tensor_release(&m);
  if (rc != 0) return qt_err_rename(&ctx->err, "min", name);
  if (v.i < 0)
    return qt_errorf(&ctx->err, "%s: integers to negative integer powers are not allowed "
                     "(exponent %lld)", name, (long long)v.i);
  return 0;
}

static int ops_check_binop(qt_ctx *ctx, qt_binop op) {
  if ((int)op < 0 || (int)op >= QT_NBINOPS)
    return qt_errorf(&ctx->err, "binary: unknown op %d", (int)op);
  return 0;
}

/* The in-place name of an op ("add" -> "add_"), for messages. */
static const char *ops_inplace_name(const char *name, char *buf, size_t len) {
  snprintf(buf, len, "%s_", name);
  return buf;
}

/* An in-place op may store a wider result of its own kind (float64 into float32, int64
** into int32, by conversion), an integer into a float tensor and a bool anywhere, but not
** a float into an integer or bool tensor, nor an integer into a bool tensor. */
static int ops_check_storable(qt_ctx *ctx, const char *op, qt_dtype result, qt_dtype target) {
  bool refused = qt_is_float(result) ? !qt_is_float(target)
                                     : !qt_is_bool(result) && qt_is_bool(target);
  if (refused)
    return qt_errorf(&ctx->err, "%s: cannot store %s result in %s tensor", op,
                     qt_dtypes[result].name, qt_dtypes[target].name);
  return 0;
}

int qt_binary(qt_ctx *ctx, qt_tensor *out, qt_binop op, const qt_tensor *a, const qt_tensor *b) {
  if (ops_check_binop(ctx, op)) return -1;
  const char *name = qt_binop_name(op);
  if (ops_live(ctx, name, a) || ops_live(ctx, name, b) || ops_same_device(ctx, name, a, b))
    return -1;
  qt_device *dev = ops_device(a);
  if (dev->iface->binary == NULL) return ops_unsupported(ctx, name, dev);
  int ndim = 0;
  int64_t size[QT_MAXDIM];
  qt_dtype dtype;
  if (ops_broadcast_shape(ctx, name, a, b, &ndim, size) ||
      ops_binary_dtype(ctx, name, op, a->dtype, b->dtype, &dtype))
    return -1;
  if (op == QT_POW && !qt_is_float(dtype) && ops_check_exponents(ctx, name, b)) return -1;

  int rc = -1;
  qt_tensor ca, cb, res;
  qt_tensor_init(&ca);
  qt_tensor_init(&cb);
  qt_tensor_init(&res);
  if (ops_cast(ctx, name, &ca, a, dtype) || ops_cast(ctx, name, &cb, b, dtype)) goto cleanup;
  if (ops_alloc(ctx, name, &res, dev, ops_result_dtype(op, dtype), ndim, size)) goto cleanup;
  if (qt_numel(&res) > 0) {
    qt_view dv, av, bv;
    qt_view_of(&dv, &res);
    ops_view_expanded(&av, &ca, ndim, size);
    ops_view_expanded(&bv, &cb, ndim, size);
    if (dev->iface->binary(dev, op, &dv, &av, &bv, &ctx->err)) goto cleanup;
  }
  *out = res;
  qt_tensor_init(&res);
  rc = 0;
cleanup:
  qt_tensor_release(&ca);
  qt_tensor_release(&cb);
  qt_tensor_release(&res);
  return rc;
}

/* a = a op b. When a's dtype is the result dtype and the compute dtype, the device writes
** into a directly (b is read from a copy if it shares a's storage with another geometry);
** otherwise the op runs into a temporary of the result dtype, converted into a at the end. */
int qt_binary_(qt_ctx *ctx, qt_binop op, qt_tensor *a, const qt_tensor *b) {
  if (ops_check_binop(ctx, op)) return -1;
  char name[24];
  ops_inplace_name(qt_binop_name(op), name, sizeof name);
  if (ops_live(ctx, name, a) || ops_live(ctx, name, b) || ops_same_device(ctx, name, a, b))
    return -1;
  qt_device *dev = ops_device(a);
  if (dev->iface->binary == NULL) return ops_unsupported(ctx, name, dev);
  qt_dtype dtype;
  if (ops_binary_dtype(ctx, name, op, a->dtype, b->dtype, &dtype)) return -1;
  qt_dtype result = ops_result_dtype(op, dtype);
  if (ops_check_storable(ctx, name, result, a->dtype)) return -1;
  if (op == QT_POW && !qt_is_float(dtype) && ops_check_exponents(ctx, name, b)) return -1;
  int64_t stride[QT_MAXDIM];
  if (!ops_expand_strides(b, a->ndim, a->size, stride)) {
    char s1[OPS_SHAPE_LEN], s2[OPS_SHAPE_LEN];
    return qt_errorf(&ctx->err, "%s: shape %s cannot be broadcast to %s", name, ops_shape(b, s1),
                     ops_shape(a, s2));
  }
  if (ops_check_writable(ctx, name, a)) return -1;
  if (qt_numel(a) == 0) return 0;

  int rc = -1;
  qt_tensor ca, cb, work;
  qt_tensor_init(&ca);
  qt_tensor_init(&cb);
  qt_tensor_init(&work);
  bool direct = a->dtype == dtype && result == dtype;
  if (direct && ops_may_overlap(a, b) && b->dtype == dtype) {
    if (ops_copy_new(ctx, name, &cb, b, dtype)) goto cleanup;
  } else if (ops_cast(ctx, name, &cb, b, dtype)) {
    goto cleanup;
  }
  qt_view dv, av, bv;
  qt_view_of(&dv, a);
  av = dv;
  if (!direct) {
    if (ops_cast(ctx, name, &ca, a, dtype) || ops_alloc_like(ctx, name, &work, a, result))
      goto cleanup;
    qt_view_of(&av, &ca);
    qt_view_of(&dv, &work);
  }
  ops_view_expanded(&bv, &cb, a->ndim, a->size);
  if (dev->iface->binary(dev, op, &dv, &av, &bv, &ctx->err)) goto cleanup;
  if (!direct) {
    qt_view tv;
    qt_view_of(&tv, a);
    if (ops_copy_views(ctx, name, dev, &tv, &dv)) goto cleanup;
  }
  rc = 0;
cleanup:
  qt_tensor_release(&ca);
  qt_tensor_release(&cb);
  qt_tensor_release(&work);
  return rc;
}

int qt_binary_scalar(qt_ctx *ctx, qt_tensor *out, qt_binop op, const qt_tensor *a, qt_scalar s,
                     bool s_is_float, bool scalar_first) {
  if (ops_check_binop(ctx, op)) return -1;
  const char *name = qt_binop_name(op);
  if (ops_live(ctx, name, a)) return -1;
  qt_device *dev = ops_device(a);
  if (dev->iface->binary_scalar == NULL) return ops_unsupported(ctx, name, dev);
  qt_dtype compute, result;
  if (ops_scalar_dtypes(ctx, name, op, a->dtype, &s, s_is_float, scalar_first, &compute,
                        &result))
    return -1;
  if (op == QT_POW && scalar_first && !qt_is_float(compute) && ops_check_exponents(ctx, name, a))
    return -1;

  int rc = -1;
  qt_tensor ca, res;
  qt_tensor_init(&ca);
  qt_tensor_init(&res);
  if (ops_cast(ctx, name, &ca, a, compute)) goto cleanup;
  if (ops_alloc_like(ctx, name, &res, a, result)) goto cleanup;
  if (qt_numel(&res) > 0) {
    qt_view dv, av;
    qt_view_of(&dv, &res);
    qt_view_of(&av, &ca);
    if (dev->iface->binary_scalar(dev, op, &dv, &av, s, scalar_first, &ctx->err)) goto cleanup;
  }
  *out = res;
  qt_tensor_init(&res);
  rc = 0;
cleanup:
  qt_tensor_release(&ca);
  qt_tensor_release(&res);
  return rc;
}

int qt_binary_scalar_(qt_ctx *ctx, qt_binop op, qt_tensor *a, qt_scalar s, bool s_is_float) {
  if (ops_check_binop(ctx, op)) return -1;
  char name[24];
  ops_inplace_name(qt_binop_name(op), name, sizeof name);
  if (ops_live(ctx, name, a)) return -1;
  qt_device *dev = ops_device(a);
  if (dev->iface->binary_scalar == NULL) return ops_unsupported(ctx, name, dev);
  qt_dtype compute, result;
  if (ops_scalar_dtypes(ctx, name, op, a->dtype, &s, s_is_float, false, &compute, &result))
    return -1;
  if (ops_check_storable(ctx, name, result, a->dtype) || ops_check_writable(ctx, name, a))
    return -1;
  if (qt_numel(a) == 0) return 0;

  int rc = -1;
  qt_tensor ca, work;
  qt_tensor_init(&ca);
  qt_tensor_init(&work);
  bool direct = a->dtype == compute && result == compute;
  qt_view dv, av;
  qt_view_of(&dv, a);
  av = dv;
  if (!direct) {
    if (ops_cast(ctx, name, &ca, a, compute) || ops_alloc_like(ctx, name, &work, a, result))
      goto cleanup;
    qt_view_of(&av, &ca);
    qt_view_of(&dv, &work);
  }
  if (dev->iface->binary_scalar(dev, op, &dv, &av, s, false, &ctx->err)) goto cleanup;
  if (!direct) {
    qt_view tv;
    qt_view_of(&tv, a);
    if (ops_copy_views(ctx, name, dev, &tv, &dv)) goto cleanup;
  }
  rc = 0;
cleanup:
  qt_tensor_release(&ca);
  qt_tensor_release(&work);
  return rc;
}

/* The slot's clamp bounds for dtype: the binding passes INT64_MIN/INT64_MAX for a missing
** integer bound, which a narrower device type would truncate to garbage; bounds beyond
** the dtype's range clamp nothing, so they are saturated to it. */
static int64_t ops_saturate(int64_t v, int64_t lo, int64_t hi) {
  return v < lo ? lo : v > hi ? hi : v;
}

static qt_unop_params ops_unop_params(qt_unop op, qt_dtype dtype, const qt_unop_params *given) {
  qt_unop_params p;
  memset(&p, 0, sizeof p);
  if (given != NULL) p = *given;
  if (op == QT_CLAMP && !qt_is_float(dtype)) {
    int64_t min = qt_dtypes[dtype].min, max = qt_dtypes[dtype].max;
    p.v[0].i = ops_saturate(p.v[0].i, min, max);
    p.v[1].i = ops_saturate(p.v[1].i, min, max);
  }
  return p;
}

static int ops_check_unop(qt_ctx *ctx, qt_unop op) {
  if ((int)op < 0 || (int)op >= QT_NUNOPS)
    return qt_errorf(&ctx->err, "unary: unknown op %d", (int)op);
  return 0;
}

/* As in PyTorch, a bool tensor is not negated (logical_not is what was meant). */
static int ops_check_unop_dtype(qt_ctx *ctx, const char *name, qt_unop op, qt_dtype d) {
  if (op == QT_NEG && qt_is_bool(d))
    return qt_errorf(&ctx->err, "%s: cannot negate a bool tensor (use logical_not)", name);
  return 0;
}

/* float_params: the parameters are float numbers (clamp bounds), so an integer tensor
** computes in float64, as with a float scalar in a binary op. */
static int ops_unary(qt_ctx *ctx, qt_tensor *out, qt_unop op, const qt_tensor *a,
                     const qt_unop_params *given, bool float_params) {
  if (ops_check_unop(ctx, op)) return -1;
  const char *name = qt_unop_name(op);
  if (ops_live(ctx, name, a) || ops_check_unop_dtype(ctx, name, op, a->dtype)) return -1;
  qt_device *dev = ops_device(a);
  if (dev->iface->unary == NULL) return ops_unsupported(ctx, name, dev);
  bool wants_float = !qt_unop_takes_ints(op) || float_params;
  qt_dtype dtype = (wants_float && !qt_is_float(a->dtype)) ? QT_F64 : a->dtype;
  qt_dtype result = qt_unop_gives_bool(op) ? QT_BOOL : dtype;
  qt_unop_params params = ops_unop_params(op, dtype, given);

  int rc = -1;
  qt_tensor ca, res;
  qt_tensor_init(&ca);
  qt_tensor_init(&res);
  if (ops_cast(ctx, name, &ca, a, dtype) || ops_alloc_like(ctx, name, &res, a, result))
    goto cleanup;
  if (qt_numel(&res) > 0) {
    qt_view dv, sv;
    qt_view_of(&dv, &res);
    qt_view_of(&sv, &ca);
    if (dev->iface->unary(dev, op, &dv, &sv, &params, &ctx->err)) goto cleanup;
  }
  *out = res;
  qt_tensor_init(&res);
  rc = 0;
cleanup:
  qt_tensor_release(&ca);
  qt_tensor_release(&res);
  return rc;
}

int qt_unary(qt_ctx *ctx, qt_tensor *out, qt_unop op, const qt_tensor *a,
             const qt_unop_params *params) {
  return ops_unary(ctx, out, op, a, params, false);
}

static int ops_unary_(qt_ctx *ctx, qt_unop op, qt_tensor *a, const qt_unop_params *given,
                      bool float_params) {
  if (ops_check_unop(ctx, op)) return -1;
  char name[24];
  ops_inplace_name(qt_unop_name(op), name, sizeof name);
  if (ops_live(ctx, name, a) || ops_check_unop_dtype(ctx, name, op, a->dtype)) return -1;
  qt_device *dev = ops_device(a);
  if (dev->iface->unary == NULL) return ops_unsupported(ctx, name, dev);
  if (qt_unop_gives_bool(op))
    return qt_errorf(&ctx->err, "%s: has no in-place form (its result is bool)", name);
  if ((!qt_unop_takes_ints(op) || float_params) && !qt_is_float(a->dtype))
    return ops_check_storable(ctx, name, QT_F64, a->dtype);
  if (ops_check_writable(ctx, name, a)) return -1;
  if (qt_numel(a) == 0) return 0;
  qt_unop_params params = ops_unop_params(op, a->dtype, given);
  qt_view v;
  qt_view_of(&v, a);
  return dev->iface->unary(dev, op, &v, &v, &params, &ctx->err);
}

int qt_unary_(qt_ctx *ctx, qt_unop op, qt_tensor *a, const qt_unop_params *params) {
  return ops_unary_(ctx, op, a, params, false);
}

static qt_unop_params ops_clamp_params(qt_scalar lo, qt_scalar hi) {
  qt_unop_params p;
  memset(&p, 0, sizeof p);
  p.v[0] = lo;
  p.v[1] = hi;
  return p;
}

int qt_clamp(qt_ctx *ctx, qt_tensor *out, const qt_tensor *a, qt_scalar lo, qt_scalar hi,
             bool float_bounds) {
  qt_unop_params p = ops_clamp_params(lo, hi);
  return ops_unary(ctx, out, QT_CLAMP, a, &p, float_bounds);
}

int qt_clamp_(qt_ctx *ctx, qt_tensor *a, qt_scalar lo, qt_scalar hi, bool float_bounds) {
  qt_unop_params p = ops_clamp_params(lo, hi);
  return ops_unary_(ctx, QT_CLAMP, a, &p, float_bounds);
}
