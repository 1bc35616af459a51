/*
** ops_matmul.c — matrix products: 1-D, 2-D and batched operands reduced to the devices' batched
** 3-D slot, with strided operands passed through when BLAS can take them.
*/
#include "ops_internal.h"

#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ================================================================== matrix products */

/* One operand of a matmul, seen as a batch of (rows x cols) matrices. */
typedef struct ops_matrix {
  int64_t rows, cols;
  int64_t row_stride, col_stride;
  int nbatch;                   /* t's own batch dims (ndim - 2, or 0) */
} ops_matrix;

/* A 1-D a is a row (1 x K), a 1-D b a column (K x 1). Strides of size-1 matrix dims do
** not matter for the product; they are set to what a packed matrix would have, so a
** BLAS-backed device sees a valid leading dimension. */
static void ops_matrix_of(ops_matrix *m, const qt_tensor *t, bool is_left) {
  if (t->ndim == 1) {
    m->nbatch = 0;
    if (is_left) {
      m->rows = 1, m->cols = t->size[0];
      m->col_stride = t->stride[0], m->row_stride = 0;
    } else {
      m->rows = t->size[0], m->cols = 1;
      m->row_stride = t->stride[0], m->col_stride = 0;
    }
  } else {
    m->nbatch = t->ndim - 2;
    m->rows = t->size[t->ndim - 2], m->cols = t->size[t->ndim - 1];
    m->row_stride = t->stride[t->ndim - 2], m->col_stride = t->stride[t->ndim - 1];
  }
  if (m->rows == 1) m->row_stride = m->cols == 1 ? 1 : m->col_stride * m->cols;
  if (m->cols == 1) m->col_stride = m->rows == 1 ? 1 : m->row_stride * m->rows;
}

/* The batch stride that walks t's broadcast batch dims (nbatch, bsize; t's own dims
** aligned on the right, the rest stride 0) as one dim, or false when one stride cannot. */
static bool ops_batch_stride(const qt_tensor *t, const ops_matrix *m, int nbatch,
                             const int64_t *bsize, int64_t *bstride_all, int64_t *bstride) {
  for (int d = 0; d < nbatch; d++) {
    int td = d - (nbatch - m->nbatch);
    bstride_all[d] = (td >= 0 && t->size[td] == bsize[d]) ? t->stride[td] : 0;
  }
  int64_t inner_stride = 0, inner_size = 1;
  bool have_inner = false;
  for (int d = nbatch - 1; d >= 0; d--) {
    if (bsize[d] == 1) continue;
    if (have_inner && bstride_all[d] != inner_stride * inner_size) return false;
    if (!have_inner) *bstride = bstride_all[d];
    have_inner = true;
    inner_stride = bstride_all[d];
    inner_size = bsize[d];
  }
  if (!have_inner) *bstride = 0;
  return true;
}

/* The 3-D device view (B, rows, cols) of one operand. When its broadcast batch dims
** cannot be walked with one stride, the operand is first copied, expanded, into a
** contiguous temporary (*tmp), whose batch stride is rows * cols. */
static int ops_matmul_operand(qt_ctx *ctx, qt_view *v, qt_tensor *tmp, const qt_tensor *t,
                              bool is_left, int nbatch, const int64_t *bsize, int64_t batch) {
  const char *op = "matmul";
  ops_matrix m;
  ops_matrix_of(&m, t, is_left);
  int64_t bstride_all[QT_MAXDIM], bstride = 0;
  qt_view_of(v, t);
  if (!ops_batch_stride(t, &m, nbatch, bsize, bstride_all, &bstride)) {
    qt_view ev = *v;  /* t expanded to (batch..., rows, cols) */
    int64_t size[QT_MAXDIM];
    ev.ndim = nbatch + 2;
    for (int d = 0; d < nbatch; d++) {
      ev.size[d] = size[d] = bsize[d];
      ev.stride[d] = bstride_all[d];
    }
    ev.size[nbatch] = size[nbatch] = m.rows;
    ev.size[nbatch + 1] = size[nbatch + 1] = m.cols;
    ev.stride[nbatch] = m.row_stride;
    ev.stride[nbatch + 1] = m.col_stride;
    ev.numel = batch * m.rows * m.cols;
    if (ops_alloc(ctx, op, tmp, ops_device(t), t->dtype, nbatch + 2, size)) return -1;
    qt_view tv;
    qt_view_of(&tv, tmp);
    if (ops_copy_views(ctx, op, ops_device(t), &tv, &ev)) return -1;
    qt_view_of(v, tmp);
    ops_matrix_of(&m, tmp, is_left);  /* same rows/cols; packed strides */
    bstride = m.rows * m.cols;
  }
  v->ndim = 3;
  v->size[0] = batch, v->size[1] = m.rows, v->size[2] = m.cols;
  v->stride[0] = bstride, v->stride[1] = m.row_stride, v->stride[2] = m.col_stride;
  for (int d = 3; d < QT_MAXDIM; d++) v->size[d] = 1, v->stride[d] = 0;
  v->numel = batch * m.rows * m.cols;
  return 0;
}

/* Every matmul case becomes the device's (B, M, K) @ (B, K, N): a 1-D a is a 1 x K row
** and a 1-D b a K x 1 column (their unit dims are dropped from the result), batch dims
** broadcast NumPy-style. The result is allocated contiguous in its final shape, which is
** exactly the (B, M, N) packed layout the device writes. */
int qt_matmul(qt_ctx *ctx, qt_tensor *out, const qt_tensor *a, const qt_tensor *b) {
  const char *op = "matmul";
  char s1[OPS_SHAPE_LEN], s2[OPS_SHAPE_LEN];
  if (ops_live(ctx, op, a) || ops_live(ctx, op, b) || ops_same_device(ctx, op, a, b)) return -1;
  const qt_tensor *operands[2] = { a, b };
  for (int i = 0; i < 2; i++) {
    qt_dtype dt = operands[i]->dtype;
    if (dt != QT_F32 && dt != QT_F64)
      return qt_errorf(&ctx->err, "%s: dtype %s is not supported (float32 or float64 only)", op,
                       qt_dtypes[dt].name);
  }
  if (a->dtype != b->dtype)
    return qt_errorf(&ctx->err, "%s: dtypes %s and %s differ", op, qt_dtypes[a->dtype].name,
                     qt_dtypes[b->dtype].name);
  if (a->ndim == 0 || b->ndim == 0)
    return qt_errorf(&ctx->err, "%s: shapes %s and %s: 0-d tensors cannot be multiplied (use mul)",
                     op, ops_shape(a, s1), ops_shape(b, s2));
  qt_device *dev = ops_device(a);
  if (dev->iface->matmul == NULL) return ops_unsupported(ctx, op, dev);

  ops_matrix ma, mb;
  ops_matrix_of(&ma, a, true);
  ops_matrix_of(&mb, b, false);
  if (ma.cols != mb.rows)
    return qt_errorf(&ctx->err, "%s: shapes %s and %s do not match", op, ops_shape(a, s1),
                     ops_shape(b, s2));
  int nbatch = ma.nbatch > mb.nbatch ? ma.nbatch : mb.nbatch;
  int64_t bsize[QT_MAXDIM], size[QT_MAXDIM];
  int64_t batch = 1;
  for (int d = nbatch - 1; d >= 0; d--) {
    int da = d - (nbatch - ma.nbatch), db = d - (nbatch - mb.nbatch);
    int64_t sa = da >= 0 ? a->size[da] : 1, sb = db >= 0 ? b->size[db] : 1;
    if (sa != sb && sa != 1 && sb != 1)
      return qt_errorf(&ctx->err, "%s: shapes %s and %s do not match (batch dims differ)", op,
                       ops_shape(a, s1), ops_shape(b, s2));
    bsize[d] = sa == 1 ? sb : sa;
  }
  int ndim = 0;
  for (int d = 0; d < nbatch; d++) size[ndim++] = bsize[d], batch *= bsize[d];
  if (a->ndim >= 2) size[ndim++] = ma.rows;
  if (b->ndim >= 2) size[ndim++] = mb.cols;

  int rc = -1;
  qt_tensor res, ta, tb;
  qt_tensor_init(&res);
  qt_tensor_init(&ta);
  qt_tensor_init(&tb);
  if (ops_alloc(ctx, op, &res, dev, a->dtype, ndim, size)) goto cleanup;
  if (qt_numel(&res) > 0) {
    qt_view cv;
    qt_view_of(&cv, &res);
    if (ma.cols == 0) {  /* sums of nothing */
      if (ops_fill_view(ctx, op, dev, &cv, qt_scalar_i(0))) goto cleanup;
    } else {
      qt_view av, bv;
      if (ops_matmul_operand(ctx, &av, &ta, a, true, nbatch, bsize, batch) ||
          ops_matmul_operand(ctx, &bv, &tb, b, false, nbatch, bsize, batch))
        goto cleanup;
      cv.ndim = 3;
      cv.size[0] = batch, cv.size[1] = ma.rows, cv.size[2] = mb.cols;
      cv.stride[0] = ma.rows * mb.cols, cv.stride[1] = mb.cols, cv.stride[2] = 1;
      for (int d = 3; d < QT_MAXDIM; d++) cv.size[d] = 1, cv.stride[d] = 0;
      if (dev->iface->matmul(dev, &cv, &av, &bv, ctx->allow_tf32, &ctx->err)) goto cleanup;
    }
  }
  *out = res;
  qt_tensor_init(&res);
  rc = 0;
cleanup:
  qt_tensor_release(&res);
  qt_tensor_release(&ta);
  qt_tensor_release(&tb);
  return rc;
}
