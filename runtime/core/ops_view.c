/*
** ops_view.c — views without copies: view/reshape, narrow, select, transpose, permute, expand,
** slice, squeeze, unsqueeze.
*/
#include "ops_internal.h"

#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ================================================================== views */

/* Strides that let (nndim, nsize) walk the same elements, in the same row-major order, as
** (ondim, osize, ostride), or false when no strides can. The old dims are split into
** runs that are contiguous with each other in memory (size-1 dims never break a run);
** each run must be covered exactly by consecutive new dims, which then step through it
** with the run's innermost stride. This is what makes a view of a contiguous chunk work
** even when the tensor as a whole is not contiguous. */
static bool ops_view_strides(int ondim, const int64_t *osize, const int64_t *ostride, int nndim,
                             const int64_t *nsize, int64_t *nstride) {
  bool empty = false;  /* checked for a zero, not multiplied: the other sizes may overflow */
  for (int d = 0; d < ondim; d++) empty = empty || osize[d] == 0;
  if (empty) {
    qt_contiguous_strides(nndim, nsize, nstride);
    return true;
  }
  int nd = nndim - 1;  /* next new dim to place, innermost first */
  int64_t run_stride = ondim > 0 ? ostride[ondim - 1] : 1;
  int64_t run_numel = 1, placed_numel = 1;
  for (int od = ondim - 1; od >= 0; od--) {
    run_numel *= osize[od];
    bool run_ends = od == 0 || (osize[od - 1] != 1 && ostride[od - 1] != run_numel * run_stride);
    if (!run_ends) continue;
    while (nd >= 0 && (placed_numel < run_numel || nsize[nd] == 1)) {
      nstride[nd] = placed_numel * run_stride;
      placed_numel *= nsize[nd];
      nd--;
    }
    if (placed_numel != run_numel) return false;
    if (od > 0) {
      run_stride = ostride[od - 1];
      run_numel = 1;
      placed_numel = 1;
    }
  }
  for (; nd >= 0; nd--) {  /* only size-1 dims can be left (numel already matched) */
    if (nsize[nd] != 1) return false;
    nstride[nd] = 1;
  }
  return true;
}

/* The shape asked for, with its -1 inferred; checks it has t's element count. */
static int ops_infer_shape(qt_ctx *ctx, const char *op, const qt_tensor *t, int ndim,
                           const int64_t *size, int64_t *shape) {
  char s1[OPS_SHAPE_LEN];
  if (ndim < 0 || ndim > QT_MAXDIM)
    return qt_errorf(&ctx->err, "%s: %d dimensions (at most %d)", op, ndim, QT_MAXDIM);
  int infer = -1;
  int64_t known = 1;
  bool overflow = false;
  for (int d = 0; d < ndim; d++) {
    shape[d] = size[d];
    if (size[d] == -1) {
      if (infer >= 0)
        return qt_errorf(&ctx->err, "%s: only one size may be -1 (shape %s)", op,
                         qt_shape_str(ndim, size, s1, sizeof s1));
      infer = d;
    } else if (size[d] < 0) {
      return qt_errorf(&ctx->err, "%s: negative size %lld in shape %s", op, (long long)size[d],
                       qt_shape_str(ndim, size, s1, sizeof s1));
    } else if (__builtin_mul_overflow(known, size[d], &known)) {
      overflow = true;
    }
  }
  for (int d = 0; d < ndim; d++)
    if (size[d] == 0) known = 0, overflow = false;
  int64_t numel = qt_numel(t);
  if (infer >= 0) {
    if (known == 0 && !overflow)
      return qt_errorf(&ctx->err, "%s: shape %s is ambiguous (-1 could be any size)", op,
                       qt_shape_str(ndim, size, s1, sizeof s1));
    if (overflow || numel % known != 0)
      return qt_errorf(&ctx->err, "%s: shape %s does not match %lld elements", op,
                       qt_shape_str(ndim, size, s1, sizeof s1), (long long)numel);
    shape[infer] = numel / known;
  } else if (overflow || known != numel) {
    return qt_errorf(&ctx->err, "%s: shape %s does not match %lld elements", op,
                     qt_shape_str(ndim, size, s1, sizeof s1), (long long)numel);
  }
  return 0;
}

static void ops_share_with_shape(qt_tensor *out, const qt_tensor *t, int ndim,
                                 const int64_t *size, const int64_t *stride) {
  qt_tensor_share(out, t);
  out->ndim = ndim;
  for (int d = 0; d < ndim; d++) out->size[d] = size[d], out->stride[d] = stride[d];
  for (int d = ndim; d < QT_MAXDIM; d++) out->size[d] = 0, out->stride[d] = 0;
}

static int ops_view(qt_ctx *ctx, const char *op, qt_tensor *out, const qt_tensor *t, int ndim,
                    const int64_t *size, bool copy_if_needed) {
  if (ops_live(ctx, op, t)) return -1;
  int64_t shape[QT_MAXDIM], stride[QT_MAXDIM];
  if (ops_infer_shape(ctx, op, t, ndim, size, shape)) return -1;
  if (ops_view_strides(t->ndim, t->size, t->stride, ndim, shape, stride)) {
    ops_share_with_shape(out, t, ndim, shape, stride);
    return 0;
  }
  if (!copy_if_needed) {
    char s1[OPS_SHAPE_LEN], s2[OPS_SHAPE_LEN];
    return qt_errorf(&ctx->err,
                     "%s: shape %s is not compatible with the strides of %s tensor (use reshape)",
                     op, qt_shape_str(ndim, shape, s1, sizeof s1), ops_shape(t, s2));
  }
  qt_tensor copy;
  if (ops_copy_new(ctx, op, &copy, t, t->dtype)) return -1;
  qt_contiguous_strides(ndim, shape, stride);
  ops_share_with_shape(out, &copy, ndim, shape, stride);
  qt_tensor_release(&copy);
  return 0;
}

int qt_view_as(qt_ctx *ctx, qt_tensor *out, const qt_tensor *t, int ndim,
               const int64_t *size) {
  return ops_view(ctx, "view", out, t, ndim, size, false);
}

int qt_reshape(qt_ctx *ctx, qt_tensor *out, const qt_tensor *t, int ndim, const int64_t *size) {
  return ops_view(ctx, "reshape", out, t, ndim, size, true);
}

/* a * b for a view's offset or stride: an empty t's strides come from sizes that may
** multiply past int64 (0 x 2^40 x 2^40), and its offset and strides are never used, so
** an overflow there gives `fallback` instead of undefined behaviour. A t with elements
** never overflows: its positions are in its storage. */
static int64_t ops_view_mul(int64_t a, int64_t b, int64_t fallback) {
  int64_t r;
  return __builtin_mul_overflow(a, b, &r) ? fallback : r;
}

int qt_narrow(qt_ctx *ctx, qt_tensor *out, const qt_tensor *t, int dim, int64_t start,
              int64_t length) {
  const char *op = "narrow";
  if (ops_live(ctx, op, t) || ops_check_dim(ctx, op, dim, t->ndim)) return -1;
  int64_t n = t->size[dim];
  if (start < 0 || start > n || length < 0 || length > n - start)
    return qt_errorf(&ctx->err,
                     "%s: start %lld with length %lld out of range for dim %d of size %lld", op,
                     (long long)start + 1, (long long)length, dim + 1, (long long)n);
  qt_tensor_share(out, t);
  if (length > 0) out->offset += ops_view_mul(start, t->stride[dim], 0);
  out->size[dim] = length;
  return 0;
}

int qt_select(qt_ctx *ctx, qt_tensor *out, const qt_tensor *t, int dim, int64_t i) {
  const char *op = "select";
  if (ops_live(ctx, op, t) || ops_check_dim(ctx, op, dim, t->ndim)) return -1;
  if (i < 0 || i >= t->size[dim])
    return qt_errorf(&ctx->err, "%s: index %lld out of range (1..%lld) for dim %d", op,
                     (long long)i + 1, (long long)t->size[dim], dim + 1);
  qt_tensor_share(out, t);
  out->offset += ops_view_mul(i, t->stride[dim], 0);
  for (int d = dim; d + 1 < t->ndim; d++) {
    out->size[d] = t->size[d + 1];
    out->stride[d] = t->stride[d + 1];
  }
  out->ndim = t->ndim - 1;
  out->size[out->ndim] = 0;
  out->stride[out->ndim] = 0;
  return 0;
}

int qt_transpose(qt_ctx *ctx, qt_tensor *out, const qt_tensor *t, int d1, int d2) {
  const char *op = "transpose";
  if (ops_live(ctx, op, t) || ops_check_dim(ctx, op, d1, t->ndim) ||
      ops_check_dim(ctx, op, d2, t->ndim))
    return -1;
  qt_tensor_share(out, t);
  out->size[d1] = t->size[d2], out->stride[d1] = t->stride[d2];
  out->size[d2] = t->size[d1], out->stride[d2] = t->stride[d1];
  return 0;
}

int qt_permute(qt_ctx *ctx, qt_tensor *out, const qt_tensor *t, int n, const int *perm) {
  const char *op = "permute";
  if (ops_live(ctx, op, t)) return -1;
  if (n != t->ndim)
    return qt_errorf(&ctx->err, "%s: %d dims given for a %d-d tensor", op, n, t->ndim);
  bool seen[QT_MAXDIM] = { false };
  for (int d = 0; d < n; d++) {
    if (ops_check_dim(ctx, op, perm[d], t->ndim)) return -1;
    if (seen[perm[d]])
      return qt_errorf(&ctx->err, "%s: dim %d appears twice", op, perm[d] + 1);
    seen[perm[d]] = true;
  }
  qt_tensor_share(out, t);
  for (int d = 0; d < n; d++) {
    out->size[d] = t->size[perm[d]];
    out->stride[d] = t->stride[perm[d]];
  }
  return 0;
}

/* torch.expand: new leading dims and size-1 dims broadcast with stride 0; a -1 keeps an
** existing dim's size. */
int qt_expand(qt_ctx *ctx, qt_tensor *out, const qt_tensor *t, int ndim, const int64_t *size) {
  const char *op = "expand";
  char s1[OPS_SHAPE_LEN], s2[OPS_SHAPE_LEN];
  if (ops_live(ctx, op, t)) return -1;
  if (ndim < 0 || ndim > QT_MAXDIM)
    return qt_errorf(&ctx->err, "%s: %d dimensions (at most %d)", op, ndim, QT_MAXDIM);
  int64_t shape[QT_MAXDIM], stride[QT_MAXDIM];
  for (int d = 0; d < ndim; d++) {
    int td = d - (ndim - t->ndim);
    shape[d] = (size[d] == -1 && td >= 0) ? t->size[td] : size[d];
  }
  if (!ops_expand_strides(t, ndim, shape, stride))
    return qt_errorf(&ctx->err, "%s: cannot expand shape %s to %s", op, ops_shape(t, s1),
                     qt_shape_str(ndim, size, s2, sizeof s2));
  int64_t unused[QT_MAXDIM];
  if (qt_contiguous_strides(ndim, shape, unused) < 0)  /* the element count must fit */
    return qt_errorf(&ctx->err, "%s: shape %s is too large", op,
                     qt_shape_str(ndim, shape, s2, sizeof s2));
  ops_share_with_shape(out, t, ndim, shape, stride);
  return 0;
}

/* ================================================================== slices and size-1 dims */

/* A position as the user wrote it (0-based p >= 0 is p + 1; negatives as they are). */
static long long ops_user_pos(int64_t p) { return p >= 0 ? (long long)p + 1 : (long long)p; }

/* first and last inclusive, 0-based, negatives from the end (-1 is the last); an empty
** view at first when first > last after normalising. */
int qt_slice(qt_ctx *ctx, qt_tensor *out, const qt_tensor *t, int dim, int64_t first,
             int64_t last, int64_t step) {
  const char *op = "slice";
  if (ops_live(ctx, op, t) || ops_check_dim(ctx, op, dim, t->ndim)) return -1;
  int64_t n = t->size[dim];
  int64_t pos[2] = {first, last};
  for (int k = 0; k < 2; k++) {
    if (n == 0)
      return qt_errorf(&ctx->err, "%s: position %lld out of range for dim %d of size 0 (it has "
                       "no positions; narrow(dim, 1, 0) is an empty view)", op,
                       ops_user_pos(pos[k]), dim + 1);
    if (pos[k] < -n || pos[k] >= n)
      return qt_errorf(&ctx->err, "%s: position %lld out of range (-%lld..%lld) for dim %d of size %lld",
                       op, ops_user_pos(pos[k]), (long long)n, (long long)n, dim + 1, (long long)n);
    if (pos[k] < 0) pos[k] += n;
  }
  if (step < 1) return qt_errorf(&ctx->err, "%s: step %lld must be >= 1", op, (long long)step);
  int64_t length = pos[0] > pos[1] ? 0 : (pos[1] - pos[0]) / step + 1;
  qt_tensor_share(out, t);
  out->offset += ops_view_mul(pos[0], t->stride[dim], 0);
  out->size[dim] = length;
  out->stride[dim] = length > 1 ? ops_view_mul(t->stride[dim], step, t->stride[dim]) : t->stride[dim];
  return 0;
}

/* dim -1: every size-1 dim; otherwise dim, which stays when its size is not 1. */
int qt_squeeze(qt_ctx *ctx, qt_tensor *out, const qt_tensor *t, int dim) {
  const char *op = "squeeze";
  if (ops_live(ctx, op, t)) return -1;
  if (dim != -1 && ops_check_dim(ctx, op, dim, t->ndim)) return -1;
  int64_t size[QT_MAXDIM], stride[QT_MAXDIM];
  int n = 0;
  for (int d = 0; d < t->ndim; d++) {
    if (t->size[d] == 1 && (dim == -1 || d == dim)) continue;
    size[n] = t->size[d], stride[n] = t->stride[d], n++;
  }
  ops_share_with_shape(out, t, n, size, stride);
  return 0;
}

/* A new size-1 dim at dim (0..ndim). */
int qt_unsqueeze(qt_ctx *ctx, qt_tensor *out, const qt_tensor *t, int dim) {
  const char *op = "unsqueeze";
  if (ops_live(ctx, op, t)) return -1;
  if (dim < 0 || dim > t->ndim)
    return qt_errorf(&ctx->err, "%s: dim %d out of range (1..%d)", op, dim + 1, t->ndim + 1);
  if (t->ndim == QT_MAXDIM)
    return qt_errorf(&ctx->err, "%s: the tensor already has %d dims (at most %d)", op, t->ndim,
                     QT_MAXDIM);
  int64_t size[QT_MAXDIM], stride[QT_MAXDIM];
  for (int d = 0, k = 0; d <= t->ndim; d++) {
    if (d == dim) {
      size[d] = 1;
      /* any stride serves a size-1 dim; the product may overflow for an empty t */
      if (dim == t->ndim ||
          __builtin_mul_overflow(t->size[dim], t->stride[dim], &stride[d]) || stride[d] == 0)
        stride[d] = 1;
    } else {
      size[d] = t->size[k], stride[d] = t->stride[k], k++;
    }
  }
  ops_share_with_shape(out, t, t->ndim + 1, size, stride);
  return 0;
}

/* ================================================================== diagonals */

/* torch.diagonal: d1 and d2 leave the shape and their diagonal `offset` (> 0 above the
** main one, along d2; < 0 below it, along d1) becomes the last dim, stepping both at once
** (stride[d1] + stride[d2]). An offset past either end gives an empty diagonal. */
int qt_diagonal(qt_ctx *ctx, qt_tensor *out, const qt_tensor *t, int64_t offset, int d1,
                int d2) {
  const char *op = "diagonal";
  if (ops_live(ctx, op, t)) return -1;
  if (t->ndim < 2)
    return qt_errorf(&ctx->err, "%s: a %d-d tensor has no diagonal (at least 2 dims)", op,
                     t->ndim);
  if (ops_check_dim(ctx, op, d1, t->ndim) || ops_check_dim(ctx, op, d2, t->ndim)) return -1;
  if (d1 == d2)
    return qt_errorf(&ctx->err, "%s: dim1 and dim2 are both %d (they must differ)", op, d1 + 1);
  int64_t n1 = t->size[d1], n2 = t->size[d2], length = 0, start = 0;
  if (offset >= 0 && offset < n2) {  /* offset < n2 first: n2 - offset cannot overflow */
    length = n1 < n2 - offset ? n1 : n2 - offset;
    start = ops_view_mul(offset, t->stride[d2], 0);
  } else if (offset < 0 && offset > -n1) {
    length = n1 + offset < n2 ? n1 + offset : n2;
    start = ops_view_mul(-offset, t->stride[d1], 0);
  }
  int64_t size[QT_MAXDIM], stride[QT_MAXDIM];
  int n = 0;
  for (int d = 0; d < t->ndim; d++) {
    if (d == d1 || d == d2) continue;
    size[n] = t->size[d], stride[n] = t->stride[d], n++;
  }
  size[n] = length;
  if (__builtin_add_overflow(t->stride[d1], t->stride[d2], &stride[n])) stride[n] = 1;  /* empty t */
  n++;
  ops_share_with_shape(out, t, n, size, stride);
  bool empty = false;  /* an empty view keeps t's offset, as narrow's does */
  for (int d = 0; d < n; d++) empty = empty || size[d] == 0;
  if (!empty) out->offset += start;
  return 0;
}
