/*
** ops_shape.c — shape ops composed of the views (ops_view.c) and the copies (ops_move.c,
** ops_index.c): flatten, unflatten, movedim (views, or a copy as reshape makes one), and
** flip, roll, repeat (new tensors). Nothing here calls a device slot itself, so every op
** is right on every device by construction.
*/
#include "ops_internal.h"

#include <stdlib.h>
#include <string.h>

/* ================================================================== views */

/* Dims first..last (inclusive) merged into one; a 0-d tensor gives one element in 1-D. A
** view when the strides allow it, else a copy (as reshape). */
int qt_flatten(qt_ctx *ctx, qt_tensor *out, const qt_tensor *t, int first, int last) {
  const char *op = "flatten";
  if (ops_live(ctx, op, t)) return -1;
  if (t->ndim == 0) {
    int64_t one = 1;
    return qt_reshape(ctx, out, t, 1, &one);
  }
  if (ops_check_dim(ctx, op, first, t->ndim) || ops_check_dim(ctx, op, last, t->ndim)) return -1;
  if (first > last)
    return qt_errorf(&ctx->err, "%s: first dim %d is after last dim %d", op, first + 1, last + 1);
  int64_t size[QT_MAXDIM];
  int n = 0;
  for (int d = 0; d < first; d++) size[n++] = t->size[d];
  /* The product fits when t has elements (numel does); an empty t may have sizes whose
  ** product does not (0 x 2^40 x 2^40 merging the last two): that shape cannot exist. */
  int64_t merged = 1;
  bool zero = false, overflow = false;
  for (int d = first; d <= last; d++) {
    zero |= t->size[d] == 0;
    if (!overflow && __builtin_mul_overflow(merged, t->size[d], &merged)) overflow = true;
  }
  if (zero) {
    merged = 0;
  } else if (overflow) {
    char s1[OPS_SHAPE_LEN];
    return qt_errorf(&ctx->err, "%s: dims %d..%d of shape %s merge into a size past int64", op,
                     first + 1, last + 1, ops_shape(t, s1));
  }
  size[n++] = merged;
  for (int d = last + 1; d < t->ndim; d++) size[n++] = t->size[d];
  if (qt_reshape(ctx, out, t, n, size) != 0) return ops_prefix_error(ctx, op);
  return 0;
}

/* Dim dim split into sizes (one may be -1); always a view. */
int qt_unflatten(qt_ctx *ctx, qt_tensor *out, const qt_tensor *t, int dim, int n,
                 const int64_t *sizes) {
  const char *op = "unflatten";
  char s1[OPS_SHAPE_LEN];
  if (ops_live(ctx, op, t) || ops_check_dim(ctx, op, dim, t->ndim)) return -1;
  if (n < 1) return qt_errorf(&ctx->err, "%s: no sizes given", op);
  if (t->ndim - 1 + n > QT_MAXDIM)
    return qt_errorf(&ctx->err, "%s: %d dimensions (at most %d)", op, t->ndim - 1 + n, QT_MAXDIM);
  int64_t shape[QT_MAXDIM];
  int infer = -1;
  int64_t known = 1;
  bool zero = false, overflow = false;
  for (int k = 0; k < n; k++) {
    if (sizes[k] == -1) {
      if (infer >= 0)
        return qt_errorf(&ctx->err, "%s: only one size may be -1 (sizes %s)", op,
                         qt_shape_str(n, sizes, s1, sizeof s1));
      infer = k;
    } else if (sizes[k] < 0) {
      return qt_errorf(&ctx->err, "%s: negative size %lld in sizes %s", op, (long long)sizes[k],
                       qt_shape_str(n, sizes, s1, sizeof s1));
    } else if (sizes[k] == 0) {
      zero = true;
    } else if (__builtin_mul_overflow(known, sizes[k], &known)) {
      overflow = true;
    }
  }
  int64_t m = t->size[dim];
  if (zero) known = 0, overflow = false;
  bool ok = !overflow && (infer >= 0 ? (known != 0 && m % known == 0) : known == m);
  if (infer >= 0 && known == 0 && m == 0)
    return qt_errorf(&ctx->err, "%s: sizes %s are ambiguous (-1 could be any size)", op,
                     qt_shape_str(n, sizes, s1, sizeof s1));
  if (!ok)
    return qt_errorf(&ctx->err, "%s: sizes %s do not multiply to %lld (the size of dim %d)", op,
                     qt_shape_str(n, sizes, s1, sizeof s1), (long long)m, dim + 1);
  int nd = 0;
  for (int d = 0; d < dim; d++) shape[nd++] = t->size[d];
  for (int k = 0; k < n; k++) shape[nd++] = k == infer ? m / known : sizes[k];
  for (int d = dim + 1; d < t->ndim; d++) shape[nd++] = t->size[d];
  if (qt_view_as(ctx, out, t, nd, shape) != 0) return ops_prefix_error(ctx, op);
  return 0;
}

/* PyTorch's movedim: source dim from[k] goes to position to[k]; the other dims keep their
** order in the places left. */
int qt_movedim(qt_ctx *ctx, qt_tensor *out, const qt_tensor *t, int n, const int *from,
               const int *to) {
  const char *op = "movedim";
  if (ops_live(ctx, op, t)) return -1;
  if (n > t->ndim)
    return qt_errorf(&ctx->err, "%s: %d dims given for a %d-d tensor", op, n, t->ndim);
  int perm[QT_MAXDIM];
  bool src_used[QT_MAXDIM] = {false}, dst_used[QT_MAXDIM] = {false};
  for (int k = 0; k < n; k++) {
    if (ops_check_dim(ctx, op, from[k], t->ndim) || ops_check_dim(ctx, op, to[k], t->ndim))
      return -1;
    if (src_used[from[k]])
      return qt_errorf(&ctx->err, "%s: source dim %d appears twice", op, from[k] + 1);
    if (dst_used[to[k]])
      return qt_errorf(&ctx->err, "%s: destination dim %d appears twice", op, to[k] + 1);
    src_used[from[k]] = dst_used[to[k]] = true;
    perm[to[k]] = from[k];
  }
  for (int d = 0, s = 0; d < t->ndim; d++) {
    if (dst_used[d]) continue;
    while (src_used[s]) s++;
    perm[d] = s++;
  }
  if (qt_permute(ctx, out, t, t->ndim, perm) != 0) return ops_prefix_error(ctx, op);
  return 0;
}

/* ================================================================== new tensors */

/* dims: each at most once and in range. */
static int ops_check_dims(qt_ctx *ctx, const char *op, const qt_tensor *t, int n,
                          const int *dims) {
  bool seen[QT_MAXDIM] = {false};
  if (n > QT_MAXDIM) return qt_errorf(&ctx->err, "%s: %d dims given", op, n);
  for (int k = 0; k < n; k++) {
    if (ops_check_dim(ctx, op, dims[k], t->ndim)) return -1;
    if (seen[dims[k]]) return qt_errorf(&ctx->err, "%s: dim %d appears twice", op, dims[k] + 1);
    seen[dims[k]] = true;
  }
  return 0;
}

/* Reverses dims: one index_select per dim with the index n, n-1, ..., 1 on t's device. */
int qt_flip(qt_ctx *ctx, qt_tensor *out, const qt_tensor *t, int n, const int *dims) {
  const char *op = "flip";
  if (ops_live(ctx, op, t) || ops_check_dims(ctx, op, t, n, dims)) return -1;
  qt_tensor cur, next, index;
  qt_tensor_init(&cur);
  qt_tensor_init(&next);
  qt_tensor_init(&index);
  qt_tensor_share(&cur, t);
  bool copied = false;
  int64_t *host = NULL;
  int rc = 0;
  for (int k = 0; k < n && qt_numel(t) > 0; k++) {
    int64_t m = t->size[dims[k]];
    if (m <= 1) continue;
    free(host);
    host = malloc((size_t)m * sizeof *host);
    if (host == NULL) {
      rc = qt_errorf(&ctx->err, "%s: out of host memory", op);
      goto cleanup;
    }
    for (int64_t i = 0; i < m; i++) host[i] = m - i;
    if ((rc = qt_from_host(ctx, &index, ops_device(t), QT_I64, 1, &m, host)) != 0 ||
        (rc = qt_index_select(ctx, &next, &cur, dims[k], &index)) != 0) {
      ops_prefix_error(ctx, op);
      goto cleanup;
    }
    qt_tensor_release(&index);
    qt_tensor_release(&cur);
    cur = next;
    qt_tensor_init(&next);
    copied = true;
  }
  if (copied) {
    *out = cur;
    qt_tensor_init(&cur);
  } else if ((rc = qt_clone(ctx, out, t)) != 0) {
    ops_prefix_error(ctx, op);
  }
cleanup:
  free(host);
  qt_tensor_release(&index);
  qt_tensor_release(&next);
  qt_tensor_release(&cur);
  return rc;
}

/* dst = src; errors named by op. */
static int ops_copy_named(qt_ctx *ctx, const char *op, qt_tensor *dst, const qt_tensor *src) {
  if (qt_copy_(ctx, dst, src) != 0) return ops_prefix_error(ctx, op);
  return 0;
}

/* One roll of a contiguous result `dst` from `src` along dim by s (0 < s < size): the last
** s elements come first. */
static int ops_roll_dim(qt_ctx *ctx, const char *op, qt_tensor *dst, const qt_tensor *src,
                        int dim, int64_t s) {
  int64_t m = src->size[dim];
  qt_tensor a, b;
  qt_tensor_init(&a);
  qt_tensor_init(&b);
  int rc = qt_narrow(ctx, &a, dst, dim, s, m - s);
  if (rc == 0) rc = qt_narrow(ctx, &b, src, dim, 0, m - s);
  if (rc == 0) rc = ops_copy_named(ctx, op, &a, &b);
  qt_tensor_release(&a);
  qt_tensor_release(&b);
  if (rc == 0) rc = qt_narrow(ctx, &a, dst, dim, 0, s);
  if (rc == 0) rc = qt_narrow(ctx, &b, src, dim, m - s, s);
  if (rc == 0) rc = ops_copy_named(ctx, op, &a, &b);
  qt_tensor_release(&a);
  qt_tensor_release(&b);
  return rc;
}

/* torch.roll: element i of dims[k] moves to i + shifts[k] (mod the size); n == 0 with
** dims NULL rolls the flattened tensor by shifts[0], keeping the shape. */
int qt_roll(qt_ctx *ctx, qt_tensor *out, const qt_tensor *t, int n, const int64_t *shifts,
            const int *dims) {
  const char *op = "roll";
  if (ops_live(ctx, op, t)) return -1;
  if (dims == NULL) {  /* flattened */
    int64_t numel = qt_numel(t);
    int zero = 0;
    qt_tensor flat, rolled;
    qt_tensor_init(&flat);
    qt_tensor_init(&rolled);
    int rc = qt_reshape(ctx, &flat, t, 1, &numel);
    if (rc != 0) ops_prefix_error(ctx, op);
    if (rc == 0) rc = qt_roll(ctx, &rolled, &flat, 1, shifts, &zero);
    if (rc == 0 && (rc = qt_view_as(ctx, out, &rolled, t->ndim, t->size)) != 0)
      ops_prefix_error(ctx, op);
    qt_tensor_release(&flat);
    qt_tensor_release(&rolled);
    return rc;
  }
  if (ops_check_dims(ctx, op, t, n, dims)) return -1;
  qt_tensor cur, next;
  qt_tensor_init(&cur);
  qt_tensor_init(&next);
  qt_tensor_share(&cur, t);
  bool copied = false;
  int rc = 0;
  for (int k = 0; k < n && qt_numel(t) > 0; k++) {
    int64_t m = t->size[dims[k]];
    int64_t s = shifts[k] % m;
    if (s < 0) s += m;
    if (s == 0) continue;
    if ((rc = ops_alloc_like(ctx, op, &next, t, t->dtype)) != 0 ||
        (rc = ops_roll_dim(ctx, op, &next, &cur, dims[k], s)) != 0)
      goto cleanup;
    qt_tensor_release(&cur);
    cur = next;
    qt_tensor_init(&next);
    copied = true;
  }
  if (copied) {
    *out = cur;
    qt_tensor_init(&cur);
  } else if ((rc = qt_clone(ctx, out, t)) != 0) {
    ops_prefix_error(ctx, op);
  }
cleanup:
  qt_tensor_release(&next);
  qt_tensor_release(&cur);
  return rc;
}

/* PyTorch's repeat (Torch7's repeatTensor): n >= ndim sizes; t is taken with leading
** size-1 dims to n dims and tiled sizes[d] times along each. One pass per repeated dim:
** the result so far, viewed as (before, 1, size, after), is copied broadcast into the
** next result viewed as (before, times, size, after). */
int qt_repeat(qt_ctx *ctx, qt_tensor *out, const qt_tensor *t, int n, const int64_t *sizes) {
  const char *op = "repeat_tensor";
  char s1[OPS_SHAPE_LEN], s2[OPS_SHAPE_LEN];
  if (ops_live(ctx, op, t)) return -1;
  if (n < t->ndim || n > QT_MAXDIM)
    return qt_errorf(&ctx->err, "%s: %d sizes for a %d-d tensor (%d..%d expected)", op, n,
                     t->ndim, t->ndim, QT_MAXDIM);
  int64_t padded[QT_MAXDIM], final[QT_MAXDIM], unused[QT_MAXDIM];
  bool empty = false;
  for (int d = 0; d < n; d++) {
    int td = d - (n - t->ndim);
    padded[d] = td >= 0 ? t->size[td] : 1;
    if (sizes[d] < 0)
      return qt_errorf(&ctx->err, "%s: negative size %lld in sizes %s", op, (long long)sizes[d],
                       qt_shape_str(n, sizes, s1, sizeof s1));
    if (__builtin_mul_overflow(padded[d], sizes[d], &final[d]))
      return qt_errorf(&ctx->err, "%s: %s repeated %s is too large", op, ops_shape(t, s1),
                       qt_shape_str(n, sizes, s2, sizeof s2));
    empty = empty || final[d] == 0;
  }
  if (!empty && qt_contiguous_strides(n, final, unused) < 0)
    return qt_errorf(&ctx->err, "%s: %s repeated %s is too large", op, ops_shape(t, s1),
                     qt_shape_str(n, sizes, s2, sizeof s2));
  if (empty) return ops_alloc(ctx, op, out, ops_device(t), t->dtype, n, final);
  qt_tensor cur, next, dst4, src4;
  qt_tensor_init(&cur);
  qt_tensor_init(&next);
  qt_tensor_init(&dst4);
  qt_tensor_init(&src4);
  int rc = qt_reshape(ctx, &cur, t, n, padded);
  if (rc != 0) {
    ops_prefix_error(ctx, op);
    goto cleanup;
  }
  bool copied = false;
  for (int d = 0; d < n; d++) {
    if (sizes[d] == 1) continue;
    int64_t shape[QT_MAXDIM], before = 1, after = 1;
    for (int e = 0; e < n; e++) shape[e] = cur.size[e];
    for (int e = 0; e < d; e++) before *= shape[e];
    for (int e = d + 1; e < n; e++) after *= shape[e];
    shape[d] *= sizes[d];
    int64_t s4[4] = {before, sizes[d], cur.size[d], after};
    int64_t r4[4] = {before, 1, cur.size[d], after};
    if ((rc = ops_alloc(ctx, op, &next, ops_device(t), t->dtype, n, shape)) != 0) goto cleanup;
    if ((rc = qt_view_as(ctx, &dst4, &next, 4, s4)) != 0 ||
        (rc = qt_reshape(ctx, &src4, &cur, 4, r4)) != 0) {
      ops_prefix_error(ctx, op);
      goto cleanup;
    }
    if ((rc = ops_copy_named(ctx, op, &dst4, &src4)) != 0) goto cleanup;
    qt_tensor_release(&dst4);
    qt_tensor_release(&src4);
    qt_tensor_release(&cur);
    cur = next;
    qt_tensor_init(&next);
    copied = true;
  }
  if (copied) {
    *out = cur;
    qt_tensor_init(&cur);
  } else if ((rc = qt_clone(ctx, out, &cur)) != 0) {
    ops_prefix_error(ctx, op);
  }
cleanup:
  qt_tensor_release(&dst4);
  qt_tensor_release(&src4);
  qt_tensor_release(&next);
  qt_tensor_release(&cur);
  return rc;
}

/* ================================================================== triangles and diagonals */

/* tril/triu and their in-place forms: a (rows x cols) bool mask of the kept elements, built
** on t's device from two aranges and one comparison (col <= row + k for the lower
** triangle, col >= row + k for the upper), broadcast over the batch dims; then where(mask,
** t, 0) into a new tensor, or masked_fill_ of the complement in place. k is clamped to
** [-rows, cols] first (the same triangles), so row + k cannot overflow. */
static int ops_tri(qt_ctx *ctx, const char *op, qt_tensor *out, const qt_tensor *t,
                   qt_tensor *self, int64_t k, bool upper) {
  if (ops_live(ctx, op, t)) return -1;
  if (t->ndim < 2)
    return qt_errorf(&ctx->err, "%s: a %d-d tensor has no triangle (at least 2 dims)", op,
                     t->ndim);
  int64_t rows = t->size[t->ndim - 2], cols = t->size[t->ndim - 1];
  if (k > cols) k = cols;
  if (k < -rows) k = -rows;
  qt_device *dev = ops_device(t);
  int rc = -1;
  qt_tensor r, c, r2, c2, rk, mask;
  qt_tensor *all[] = { &r, &c, &r2, &c2, &rk, &mask };
  for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) qt_tensor_init(all[i]);
  if (qt_numel(t) == 0) {  /* nothing to zero */
    if (out == NULL) return 0;
    if (qt_clone(ctx, out, t) != 0) return ops_prefix_error(ctx, op);
    return 0;
  }
  qt_scalar rarg[3] = { qt_scalar_i(0), qt_scalar_i(rows), qt_scalar_i(1) };
  qt_scalar carg[3] = { qt_scalar_i(0), qt_scalar_i(cols), qt_scalar_i(1) };
  bool ints[3] = { false, false, false };
  /* in place, the mask is where t is zeroed: the complement of the kept elements */
  qt_binop cmp = out != NULL ? (upper ? QT_GE : QT_LE) : (upper ? QT_LT : QT_GT);
  if (qt_arange(ctx, &r, dev, QT_I64, rarg, ints) || qt_arange(ctx, &c, dev, QT_I64, carg, ints) ||
      qt_unsqueeze(ctx, &r2, &r, 1) || qt_unsqueeze(ctx, &c2, &c, 0) ||
      qt_binary_scalar(ctx, &rk, QT_ADD, &r2, qt_scalar_i(k), false, false) ||
      qt_binary(ctx, &mask, cmp, &c2, &rk)) {
    ops_prefix_error(ctx, op);
    goto cleanup;
  }
  if (out != NULL) {
    qt_where_arg keep = { t, qt_scalar_i(0), false, false };
    qt_where_arg zero = { NULL, qt_scalar_i(0), false, true };  /* false: any dtype's zero */
    if (qt_where(ctx, out, &mask, &keep, &zero)) {
      ops_prefix_error(ctx, op);
      goto cleanup;
    }
  } else if (qt_masked_fill_(ctx, self, &mask, NULL, qt_scalar_i(0))) {
    qt_err_rename(&ctx->err, "masked_fill_", op);
    goto cleanup;
  }
  rc = 0;
cleanup:
  for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) qt_tensor_release(all[i]);
  return rc;
}

int qt_tril(qt_ctx *ctx, qt_tensor *out, const qt_tensor *t, int64_t k) {
  return ops_tri(ctx, "tril", out, t, NULL, k, false);
}

int qt_triu(qt_ctx *ctx, qt_tensor *out, const qt_tensor *t, int64_t k) {
  return ops_tri(ctx, "triu", out, t, NULL, k, true);
}

int qt_tril_(qt_ctx *ctx, qt_tensor *t, int64_t k) {
  return ops_tri(ctx, "tril_", NULL, t, t, k, false);
}

int qt_triu_(qt_ctx *ctx, qt_tensor *t, int64_t k) {
  return ops_tri(ctx, "triu_", NULL, t, t, k, true);
}

/* torch.diag: 1-D -> the (n + |k|)-square matrix, zeros with t copied into its diagonal k
** (a strided view, as eye fills its ones); 2-D -> a copy of diagonal k (qt_diagonal). */
int qt_diag(qt_ctx *ctx, qt_tensor *out, const qt_tensor *t, int64_t k) {
  const char *op = "diag";
  if (ops_live(ctx, op, t)) return -1;
  if (t->ndim == 2) {
    qt_tensor d;
    qt_tensor_init(&d);
    int rc = qt_diagonal(ctx, &d, t, k, 0, 1);
    if (rc == 0) rc = qt_clone(ctx, out, &d);
    qt_tensor_release(&d);
    return rc != 0 ? ops_prefix_error(ctx, op) : 0;
  }
  if (t->ndim != 1)
    return qt_errorf(&ctx->err, "%s: expects a 1-D or 2-D tensor, got %d-d", op, t->ndim);
  int64_t n = t->size[0];
  if (k > INT64_MAX - n || k < -(INT64_MAX - n))
    return qt_errorf(&ctx->err, "%s: offset %lld is too large for %lld elements", op,
                     (long long)k, (long long)n);
  int64_t side = n + (k < 0 ? -k : k);
  int64_t size[2] = { side, side };
  qt_tensor res, d;
  qt_tensor_init(&res);
  qt_tensor_init(&d);
  int rc = ops_alloc(ctx, op, &res, ops_device(t), t->dtype, 2, size);
  if (rc == 0 && (qt_fill_(ctx, &res, qt_scalar_i(0)) || qt_diagonal(ctx, &d, &res, k, 0, 1) ||
                  qt_copy_(ctx, &d, t)))
    rc = ops_prefix_error(ctx, op);
  qt_tensor_release(&d);
  if (rc == 0) *out = res;
  else qt_tensor_release(&res);
  return rc;
}
