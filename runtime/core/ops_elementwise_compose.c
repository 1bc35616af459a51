/*
** ops_elementwise_compose.c — elementwise ops made of other ops: lerp (arithmetic and where) and
** addcmul_/addcdiv_. Apart from ops_elementwise.c so that the arithmetic does not depend on the
** masks (ops_mask.c), which depend on it.
*/
#include "ops_internal.h"

#include <math.h>
#include <string.h>

/* ================================================================== compositions */

/* The ops below are compositions of the elementwise ops above, so each device runs them
** with the kernels it already has (a few passes where one fused kernel could do; none of
** them is on a hot path of the training samples measured). A 16-bit float computes the
** whole composition in float32 and rounds once at the end, as PyTorch's fused kernels
** do (each step rounding to 16 bits would differ in the last bit in a fair share of
** elements). */

/* lerp: PyTorch's formula, exact at both ends: a + w (b - a) for |w| < 0.5, else
** b - (b - a)(1 - w). a, b and a tensor w broadcast together; float dtypes only (integer
** inputs compute in float64, as the float-only ops do). */
int qt_lerp(qt_ctx *ctx, qt_tensor *out, const qt_tensor *a, const qt_tensor *b,
            const qt_tensor *w_tensor, double w) {
  if (ops_live(ctx, "lerp", a) || ops_live(ctx, "lerp", b) ||
      ops_same_device(ctx, "lerp", a, b) ||
      (w_tensor != NULL && (ops_live(ctx, "lerp", w_tensor) ||
                            ops_same_device(ctx, "lerp", a, w_tensor))))
    return -1;
  qt_dtype dtype = qt_promote(a->dtype, b->dtype);
  if (w_tensor != NULL) dtype = qt_promote(dtype, w_tensor->dtype);
  if (!qt_is_float(dtype)) dtype = QT_F64;
  qt_dtype result_dtype = dtype;
  if (qt_is_half(dtype)) dtype = QT_F32;
  int rc = -1;
  /* d = b - a; near_a = a + w d; near_b = b - (1 - w) d; the result picks by |w| < 0.5 */
  qt_tensor fa, fb, fw, d, wd, omw, omwd, near_a, near_b, absw, mask, res;
  qt_tensor *all[] = { &fa, &fb, &fw, &d, &wd, &omw, &omwd, &near_a, &near_b, &absw, &mask,
                       &res };
  for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) qt_tensor_init(all[i]);
  if (ops_cast(ctx, "lerp", &fa, a, dtype) || ops_cast(ctx, "lerp", &fb, b, dtype) ||
      qt_binary(ctx, &d, QT_SUB, &fb, &fa))
    goto cleanup;
  if (w_tensor == NULL) {
    bool low = w != w || fabs(w) < 0.5;
    if (qt_binary_scalar(ctx, &wd, QT_MUL, &d, qt_scalar_from_double(low ? w : 1 - w), true,
                         false) ||
        qt_binary(ctx, &res, low ? QT_ADD : QT_SUB, low ? &fa : &fb, &wd))
      goto cleanup;
  } else {
    qt_where_arg pick_a = { &near_a, qt_scalar_i(0), false, false };
    qt_where_arg pick_b = { &near_b, qt_scalar_i(0), false, false };
    if (ops_cast(ctx, "lerp", &fw, w_tensor, dtype) || qt_binary(ctx, &wd, QT_MUL, &d, &fw) ||
        qt_binary(ctx, &near_a, QT_ADD, &fa, &wd) ||
        qt_binary_scalar(ctx, &omw, QT_SUB, &fw, qt_scalar_i(1), false, true) ||
        qt_binary(ctx, &omwd, QT_MUL, &d, &omw) || qt_binary(ctx, &near_b, QT_SUB, &fb, &omwd) ||
        qt_unary(ctx, &absw, QT_ABS, &fw, NULL) ||
        qt_binary_scalar(ctx, &mask, QT_LT, &absw, qt_scalar_from_double(0.5), true, false) ||
        qt_where(ctx, &res, &mask, &pick_a, &pick_b))
      goto cleanup;
  }
  if (result_dtype != dtype) {  /* a 16-bit result: rounded once from float32 */
    if (ops_cast(ctx, "lerp", out, &res, result_dtype)) goto cleanup;
  } else {
    *out = res;
    qt_tensor_init(&res);
  }
  rc = 0;
cleanup:
  for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) qt_tensor_release(all[i]);
  if (rc != 0) qt_err_as(&ctx->err, "lerp");
  return rc;
}

/* a:lerp_(b, w): lerp's result stored into a, which must be a float tensor of the
** broadcast shape (b and w broadcast to a, a itself does not grow), as PyTorch's lerp_. The
** result is computed whole before a is written, so b or w may overlap a. */
int qt_lerp_(qt_ctx *ctx, qt_tensor *a, const qt_tensor *b, const qt_tensor *w_tensor,
             double w) {
  if (ops_live(ctx, "lerp_", a) || ops_live(ctx, "lerp_", b) ||
      (w_tensor != NULL && ops_live(ctx, "lerp_", w_tensor)))
    return -1;
  if (!qt_is_float(a->dtype))
    return qt_errorf(&ctx->err, "lerp_: cannot store a float result in %s tensor",
                     qt_dtypes[a->dtype].name);
  int64_t stride[QT_MAXDIM];
  const qt_tensor *others[] = { b, w_tensor };
  for (int i = 0; i < 2; i++) {
    if (others[i] != NULL && !ops_expand_strides(others[i], a->ndim, a->size, stride)) {
      char s1[OPS_SHAPE_LEN], s2[OPS_SHAPE_LEN];
      return qt_errorf(&ctx->err, "lerp_: shape %s cannot be broadcast to %s",
                       ops_shape(others[i], s1), ops_shape(a, s2));
    }
  }
  if (ops_check_writable(ctx, "lerp_", a)) return -1;
  qt_tensor res;
  qt_tensor_init(&res);
  int rc = qt_lerp(ctx, &res, a, b, w_tensor, w);
  if (rc == 0) rc = qt_copy_(ctx, a, &res);
  qt_tensor_release(&res);
  if (rc != 0) qt_err_as(&ctx->err, "lerp_");
  return rc;
}

/* t += value * (a op b), op mul (addcmul_) or div (addcdiv_), a and b broadcast to t. */
int qt_addc_(qt_ctx *ctx, qt_tensor *t, qt_binop op, const qt_tensor *a, const qt_tensor *b,
             qt_scalar value, bool value_is_float) {
  const char *name = op == QT_MUL ? "addcmul_" : "addcdiv_";
  if (ops_live(ctx, name, t) || ops_live(ctx, name, a) || ops_live(ctx, name, b)) return -1;
  int rc = -1;
  qt_tensor prod, scaled, ft, fa, fb;
  qt_tensor_init(&prod);
  qt_tensor_init(&scaled);
  qt_tensor_init(&ft);
  qt_tensor_init(&fa);
  qt_tensor_init(&fb);
  if (qt_is_half(t->dtype)) {
    /* in float32: t's value, a and b widened; the sum rounded once into t */
    if (ops_cast(ctx, name, &ft, t, QT_F32) == 0 && ops_cast(ctx, name, &fa, a, QT_F32) == 0 &&
        ops_cast(ctx, name, &fb, b, QT_F32) == 0 && qt_binary(ctx, &prod, op, &fa, &fb) == 0 &&
        qt_binary_scalar(ctx, &scaled, QT_MUL, &prod, value, value_is_float, false) == 0 &&
        qt_binary_(ctx, QT_ADD, &ft, &scaled) == 0 && qt_copy_(ctx, t, &ft) == 0)
      rc = 0;
  } else if (qt_binary(ctx, &prod, op, a, b) == 0 &&
             qt_binary_scalar(ctx, &scaled, QT_MUL, &prod, value, value_is_float, false) == 0 &&
             qt_binary_(ctx, QT_ADD, t, &scaled) == 0) {
    rc = 0;
  }
  if (rc != 0) qt_err_as(&ctx->err, name);
  qt_tensor_release(&prod);
  qt_tensor_release(&scaled);
  qt_tensor_release(&ft);
  qt_tensor_release(&fa);
  qt_tensor_release(&fb);
  return rc;
}
