/*
** ops_elementwise_compare.c — comparisons of whole tensors, PyTorch's: isclose (elementwise, a bool
** tensor), allclose and equal (one answer). Compositions of the elementwise ops, where
** and the reductions, so every device runs them with the kernels it already has.
*/
#include "ops_internal.h"

#include <string.h>

/* The names of the ops isclose is made of, so a failure in one says "isclose: ...". */
static void ops_isclose_rename(qt_ctx *ctx, const char *op) {
  static const char *const parts[] = { "eq", "isnan", "logical_and", "logical_or_",
                                       "logical_and_", "mul", "abs_", "add_", "sub", "le",
                                       "isfinite", "copy" };
  for (size_t i = 0; i < sizeof parts / sizeof parts[0]; i++)
    qt_err_rename(&ctx->err, parts[i], op);
}

/* PyTorch's isclose (NumPy's formula, which is not symmetric in a and b):
**   close = (a == b) | (equal_nan & isnan(a) & isnan(b))
**         | (isfinite(|a - b|) & (|a - b| <= atol + |rtol * b|)).
** The error terms are computed in a's float dtype (float32 for the 16-bit ones, whose
** differences are then exact; float64 for integers and bool, which PyTorch widens to its
** default float32: the same answer wherever float32 holds the values exactly). With
** rtol = atol = 0 the answer is the equality alone, as PyTorch's. */
static int ops_isclose(qt_ctx *ctx, const char *op, qt_tensor *out, const qt_tensor *a,
                       const qt_tensor *b, double rtol, double atol, bool equal_nan) {
  if (ops_live(ctx, op, a) || ops_live(ctx, op, b) || ops_same_device(ctx, op, a, b)) return -1;
  if (a->dtype != b->dtype)
    return qt_errorf(&ctx->err, "%s: dtypes %s and %s differ (convert one with :to, as "
                     "PyTorch asks)", op, qt_dtypes[a->dtype].name, qt_dtypes[b->dtype].name);
  if (!(rtol >= 0) || !(atol >= 0))
    return qt_errorf(&ctx->err, "%s: rtol %g and atol %g must be >= 0", op, rtol, atol);
  int rc = -1;
  qt_tensor close, na, nb, both, fa, fb, scaled, diff, within, finite;
  qt_tensor *all[] = { &close, &na, &nb, &both, &fa, &fb, &scaled, &diff, &within, &finite };
  for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) qt_tensor_init(all[i]);
  bool is_float = qt_is_float(a->dtype);  /* the 16-bit floats included */
  if (qt_binary(ctx, &close, QT_EQ, a, b)) goto cleanup;
  if (equal_nan && is_float &&
      (qt_unary(ctx, &na, QT_ISNAN, a, NULL) || qt_unary(ctx, &nb, QT_ISNAN, b, NULL) ||
       qt_binary(ctx, &both, QT_LOGICAL_AND, &na, &nb) ||
       qt_binary_(ctx, QT_LOGICAL_OR, &close, &both)))
    goto cleanup;
  if (rtol != 0 || atol != 0) {
    qt_dtype work = !is_float ? QT_F64 : qt_is_half(a->dtype) ? QT_F32 : a->dtype;
    if (ops_cast(ctx, op, &fa, a, work) || ops_cast(ctx, op, &fb, b, work) ||
        qt_binary_scalar(ctx, &scaled, QT_MUL, &fb, qt_scalar_from_double(rtol), true, false) ||
        qt_unary_(ctx, QT_ABS, &scaled, NULL) ||
        qt_binary_scalar_(ctx, QT_ADD, &scaled, qt_scalar_from_double(atol), true) ||
        qt_binary(ctx, &diff, QT_SUB, &fa, &fb) || qt_unary_(ctx, QT_ABS, &diff, NULL) ||
        qt_binary(ctx, &within, QT_LE, &diff, &scaled) ||
        qt_unary(ctx, &finite, QT_ISFINITE, &diff, NULL) ||
        qt_binary_(ctx, QT_LOGICAL_AND, &within, &finite) ||
        qt_binary_(ctx, QT_LOGICAL_OR, &close, &within))
      goto cleanup;
  }
  *out = close;
  qt_tensor_init(&close);
  rc = 0;
cleanup:
  for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) qt_tensor_release(all[i]);
  if (rc != 0) ops_isclose_rename(ctx, op);
  return rc;
}

int qt_isclose(qt_ctx *ctx, qt_tensor *out, const qt_tensor *a, const qt_tensor *b,
               double rtol, double atol, bool equal_nan) {
  return ops_isclose(ctx, "isclose", out, a, b, rtol, atol, equal_nan);
}

/* Whether the bool tensor t is true everywhere (one read back: the wait). */
static int ops_all_true(qt_ctx *ctx, const char *op, const qt_tensor *t, bool *result) {
  qt_tensor every;
  qt_tensor_init(&every);
  qt_scalar v;
  int64_t pos[1] = { 0 };
  int rc = qt_all(ctx, &every, t, -1);
  if (rc == 0) rc = qt_get(ctx, &every, pos, &v);
  qt_tensor_release(&every);
  if (rc != 0) {
    qt_err_rename(&ctx->err, "all", op);
    qt_err_rename(&ctx->err, "get", op);
    return ops_prefix_error(ctx, op);
  }
  *result = v.i != 0;
  return 0;
}

int qt_allclose(qt_ctx *ctx, const qt_tensor *a, const qt_tensor *b, double rtol, double atol,
                bool equal_nan, bool *result) {
  const char *op = "allclose";
  qt_tensor close;
  qt_tensor_init(&close);
  if (ops_isclose(ctx, op, &close, a, b, rtol, atol, equal_nan)) return -1;
  int rc = ops_all_true(ctx, op, &close, result);
  qt_tensor_release(&close);
  return rc;
}

/* torch.equal: one shape (no broadcasting) and equal values, compared by eq (promoted
** dtypes, so an int32 1 equals a float32 1.0; NaN equals nothing). Empty tensors of one
** shape are equal. */
int qt_equal(qt_ctx *ctx, const qt_tensor *a, const qt_tensor *b, bool *result) {
  const char *op = "equal";
  if (ops_live(ctx, op, a) || ops_live(ctx, op, b) || ops_same_device(ctx, op, a, b)) return -1;
  *result = false;
  if (!ops_same_shape(a, b)) return 0;
  if (qt_numel(a) == 0) {
    *result = true;
    return 0;
  }
  qt_tensor eq;
  qt_tensor_init(&eq);
  if (qt_binary(ctx, &eq, QT_EQ, a, b)) {
    qt_err_rename(&ctx->err, "eq", op);
    return -1;
  }
  int rc = ops_all_true(ctx, op, &eq, result);
  qt_tensor_release(&eq);
  return rc;
}
