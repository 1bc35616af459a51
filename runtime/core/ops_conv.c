/*
** ops_conv.c — 2-D convolution: conv2d, its two gradients conv2d_input and conv2d_weight
** (PyTorch's torch.nn.grad names), and conv_transpose2d, which is conv2d_input with the
** output size worked out from the input's. Each checks the shapes and options, makes its
** operands contiguous, and makes one call of the device's conv slot (device.h).
**
** Padding "same" whose total is odd (an even filter) pads one more element after than
** before, as PyTorch's: the slot takes symmetric pads only, so the input is padded by that
** element explicitly (a zero-filled copy) and a gradient of the input is cut back to size.
*/
#include <string.h>

#include "core/ops_internal.h"
#include "device.h"
#include "ops.h"
#include "tensor.h"

/* The geometry of x (n, c, h, w) against filters (k, c / groups, r, s) under o; extra[d]:
** the padding after the input beyond the symmetric pad (0 or 1, "same" only). */
static int conv_geometry(qt_ctx *ctx, const char *op, const int64_t *xs, const int64_t *ws,
                         const qt_conv_opts *o, qt_conv_geom *g, int64_t *extra) {
  char s1[64], s2[64];
  memset(g, 0, sizeof *g);
  g->n = xs[0], g->c = xs[1], g->h = xs[2], g->w = xs[3];
  g->k = ws[0], g->r = ws[2], g->s = ws[3];
  g->groups = o->groups;
  if (o->groups < 1) return qt_errorf(&ctx->err, "%s: groups must be >= 1, got %lld", op, (long long)o->groups);
  for (int d = 0; d < 2; d++) {
    if (o->stride[d] < 1 || o->dilation[d] < 1 || (!o->same && o->pad[d] < 0))
      return qt_errorf(&ctx->err, "%s: stride and dilation must be >= 1 and padding >= 0, got "
                       "stride %lld, padding %lld, dilation %lld", op, (long long)o->stride[d],
                       (long long)o->pad[d], (long long)o->dilation[d]);
    g->stride[d] = o->stride[d];
    g->dilation[d] = o->dilation[d];
    extra[d] = 0;
    int64_t k = d == 0 ? g->r : g->s;
    if (o->same) {
      if (o->stride[d] != 1)
        return qt_errorf(&ctx->err, "%s: padding 'same' needs stride 1, got %lld", op,
                         (long long)o->stride[d]);
      int64_t total = o->dilation[d] * (k - 1);
      g->pad[d] = total / 2;
      extra[d] = total - 2 * g->pad[d];
    } else {
      g->pad[d] = o->pad[d];
    }
  }
  if (g->c % g->groups != 0 || g->k % g->groups != 0)
    return qt_errorf(&ctx->err, "%s: %lld input channels and %lld filters must both divide by "
                     "groups = %lld", op, (long long)g->c, (long long)g->k, (long long)g->groups);
  if (ws[1] != g->c / g->groups)
    return qt_errorf(&ctx->err, "%s: an input of %lld channels in %lld group%s needs filters of "
                     "%lld channels, the weight %s has %lld", op, (long long)g->c,
                     (long long)g->groups, g->groups == 1 ? "" : "s",
                     (long long)(g->c / g->groups), qt_shape_str(4, ws, s2, sizeof s2),
                     (long long)ws[1]);
  int64_t span_h = g->dilation[0] * (g->r - 1) + 1, span_w = g->dilation[1] * (g->s - 1) + 1;
  int64_t hp = g->h + 2 * g->pad[0] + extra[0], wp = g->w + 2 * g->pad[1] + extra[1];
  if (hp < span_h || wp < span_w)
    return qt_errorf(&ctx->err, "%s: an input of %s padded to %lldx%lld is smaller than the "
                     "dilated filter (%lldx%lld)", op, qt_shape_str(4, xs, s1, sizeof s1),
                     (long long)hp, (long long)wp, (long long)span_h, (long long)span_w);
  g->p = (hp - span_h) / g->stride[0] + 1;
  g->q = (wp - span_w) / g->stride[1] + 1;
  g->h += extra[0];   /* the slot sees the explicitly padded input */
  g->w += extra[1];
  g->allow_tf32 = ctx->allow_tf32_conv;
  g->use_cudnn = ctx->cudnn_enabled;
  return 0;
}

static int conv_check4(qt_ctx *ctx, const char *op, const char *what, const qt_tensor *t) {
  char s[64];
  if (t->ndim != 4)
    return qt_errorf(&ctx->err, "%s: the %s must be 4-D (%s), got %s", op, what,
                     strcmp(what, "weight") == 0 ? "out, in / groups, kh, kw" : "N, C, H, W",
                     qt_shape_str(t->ndim, t->size, s, sizeof s));
  return 0;
}

static int conv_check_pair(qt_ctx *ctx, const char *op, const qt_tensor *a, const qt_tensor *b) {
  if (ops_live(ctx, op, a) || ops_live(ctx, op, b) || ops_same_device(ctx, op, a, b)) return -1;
  if (!qt_is_float(a->dtype))
    return qt_errorf(&ctx->err, "%s: float tensors expected, got %s", op, qt_dtypes[a->dtype].name);
  if (a->dtype != b->dtype)
    return qt_errorf(&ctx->err, "%s: operands of one dtype expected, got %s and %s", op,
                     qt_dtypes[a->dtype].name, qt_dtypes[b->dtype].name);
  return 0;
}

/* t, contiguous, with `extra` zeros after its last two dims (a copy when any). */
static int conv_padded(qt_ctx *ctx, const char *op, qt_tensor *out, const qt_tensor *t,
                       const int64_t *extra) {
  if (extra[0] == 0 && extra[1] == 0) return qt_contiguous(ctx, out, t);
  int64_t size[4] = {t->size[0], t->size[1], t->size[2] + extra[0], t->size[3] + extra[1]};
  qt_tensor rows, inner;   /* out's top-left corner of t's size */
  qt_tensor_init(&rows);
  qt_tensor_init(&inner);
  int rc = -1;
  if (ops_alloc(ctx, op, out, ops_device(t), t->dtype, 4, size) || qt_fill_(ctx, out, qt_scalar_f(0)) ||
      qt_narrow(ctx, &rows, out, 2, 0, t->size[2]) || qt_narrow(ctx, &inner, &rows, 3, 0, t->size[3]) ||
      qt_copy_(ctx, &inner, t))
    goto done;
  rc = 0;
done:
  qt_tensor_release(&rows);
  qt_tensor_release(&inner);
  return rc;
}

/* Calls the slot; mode's output is `out`, allocated here of its shape. */
static int conv_call(qt_ctx *ctx, const char *op, qt_conv_mode mode, const qt_conv_geom *g,
                     const qt_tensor *x, const qt_tensor *w, const qt_tensor *y) {
  qt_device *dev = ops_device(x != NULL && x->storage != NULL ? x : w);
  if (dev->iface->conv == NULL) return ops_unsupported(ctx, op, dev);
  qt_view xv, wv, yv;
  qt_view_of(&xv, x);
  qt_view_of(&wv, w);
  qt_view_of(&yv, y);
  if (dev->iface->conv(dev, mode, g, &xv, &wv, &yv, &ctx->err)) return ops_prefix_error(ctx, op);
  return 0;
}

/* y += bias viewed as (1, k, 1, 1). */
static int conv_add_bias(qt_ctx *ctx, const char *op, qt_tensor *y, const qt_tensor *bias) {
  char s[64];
  if (ops_live(ctx, op, bias) || ops_same_device(ctx, op, y, bias)) return -1;
  if (bias->ndim != 1 || bias->size[0] != y->size[1])
    return qt_errorf(&ctx->err, "%s: the bias must be 1-D of %lld (the output channels), got %s",
                     op, (long long)y->size[1], qt_shape_str(bias->ndim, bias->size, s, sizeof s));
  if (bias->dtype != y->dtype)
    return qt_errorf(&ctx->err, "%s: the bias is %s, the output %s", op,
                     qt_dtypes[bias->dtype].name, qt_dtypes[y->dtype].name);
  int64_t size[4] = {1, bias->size[0], 1, 1};
  qt_tensor b4;
  qt_tensor_init(&b4);
  int rc = qt_reshape(ctx, &b4, bias, 4, size) || qt_binary_(ctx, QT_ADD, y, &b4) ? -1 : 0;
  qt_tensor_release(&b4);
  if (rc) ops_prefix_error(ctx, op);
  return rc;
}

int qt_conv2d(qt_ctx *ctx, qt_tensor *out, const qt_tensor *x, const qt_tensor *w,
              const qt_tensor *bias, const qt_conv_opts *o) {
  const char *op = "conv2d";
  if (conv_check_pair(ctx, op, x, w) || conv_check4(ctx, op, "input", x) ||
      conv_check4(ctx, op, "weight", w))
    return -1;
  qt_conv_geom g;
  int64_t extra[2];
  if (conv_geometry(ctx, op, x->size, w->size, o, &g, extra)) return -1;
  int rc = -1;
  qt_tensor xc, wc, y;
  qt_tensor_init(&xc);
  qt_tensor_init(&wc);
  qt_tensor_init(&y);
  int64_t ys[4] = {g.n, g.k, g.p, g.q};
  if (conv_padded(ctx, op, &xc, x, extra) || qt_contiguous(ctx, &wc, w) ||
      ops_alloc(ctx, op, &y, ops_device(x), x->dtype, 4, ys) ||
      conv_call(ctx, op, QT_CONV_FORWARD, &g, &xc, &wc, &y) ||
      (bias != NULL && conv_add_bias(ctx, op, &y, bias)))
    goto done;
  *out = y;
  qt_tensor_init(&y);
  rc = 0;
done:
  qt_tensor_release(&xc);
  qt_tensor_release(&wc);
  qt_tensor_release(&y);
  return rc;
}

/* The input's gradient for an input of input_size (4 numbers): dy's shape must be the
** output that size gives. */
static int conv_input(qt_ctx *ctx, const char *op, qt_tensor *out, const int64_t *input_size,
                      const qt_tensor *w, const qt_tensor *dy, const qt_conv_opts *o) {
  char s1[64], s2[64], s3[64];
  if (conv_check_pair(ctx, op, dy, w) || conv_check4(ctx, op, "weight", w) ||
      conv_check4(ctx, op, "gradient of the output", dy))
    return -1;
  for (int d = 0; d < 4; d++)
    if (input_size[d] < 0)
      return qt_errorf(&ctx->err, "%s: a negative input size %lld", op, (long long)input_size[d]);
  qt_conv_geom g;
  int64_t extra[2];
  if (conv_geometry(ctx, op, input_size, w->size, o, &g, extra)) return -1;
  int64_t ys[4] = {g.n, g.k, g.p, g.q};
  for (int d = 0; d < 4; d++)
    if (dy->size[d] != ys[d])
      return qt_errorf(&ctx->err, "%s: an input of %s gives an output of %s, the gradient is %s",
                       op, qt_shape_str(4, input_size, s1, sizeof s1),
                       qt_shape_str(4, ys, s2, sizeof s2),
                       qt_shape_str(dy->ndim, dy->size, s3, sizeof s3));
  int rc = -1;
  qt_tensor dyc, wc, dx, rows, cut;
  qt_tensor_init(&dyc);
  qt_tensor_init(&wc);
  qt_tensor_init(&dx);
  qt_tensor_init(&rows);
  qt_tensor_init(&cut);
  int64_t xs[4] = {g.n, g.c, g.h, g.w};   /* the padded input's */
  if (qt_contiguous(ctx, &dyc, dy) || qt_contiguous(ctx, &wc, w) ||
      ops_alloc(ctx, op, &dx, ops_device(w), w->dtype, 4, xs) ||
      conv_call(ctx, op, QT_CONV_BACKWARD_DATA, &g, &dx, &wc, &dyc))
    goto done;
  if (extra[0] != 0 || extra[1] != 0) {   /* cut the explicit padding back off */
    if (qt_narrow(ctx, &rows, &dx, 2, 0, input_size[2]) || qt_narrow(ctx, &cut, &rows, 3, 0, input_size[3]) ||
        qt_contiguous(ctx, out, &cut))
      goto done;
  } else {
    *out = dx;
    qt_tensor_init(&dx);
  }
  rc = 0;
done:
  qt_tensor_release(&dyc);
  qt_tensor_release(&wc);
  qt_tensor_release(&dx);
  qt_tensor_release(&rows);
  qt_tensor_release(&cut);
  return rc;
}

int qt_conv2d_input(qt_ctx *ctx, qt_tensor *out, const int64_t *input_size, const qt_tensor *w,
                    const qt_tensor *dy, const qt_conv_opts *o) {
  return conv_input(ctx, "conv2d_input", out, input_size, w, dy, o);
}

int qt_conv2d_weight(qt_ctx *ctx, qt_tensor *out, const qt_tensor *x, const int64_t *weight_size,
                     const qt_tensor *dy, const qt_conv_opts *o) {
  const char *op = "conv2d_weight";
  char s1[64], s2[64], s3[64];
  if (conv_check_pair(ctx, op, x, dy) || conv_check4(ctx, op, "input", x) ||
      conv_check4(ctx, op, "gradient of the output", dy))
    return -1;
  for (int d = 0; d < 4; d++)
    if (weight_size[d] < 0)
      return qt_errorf(&ctx->err, "%s: a negative weight size %lld", op, (long long)weight_size[d]);
  qt_conv_geom g;
  int64_t extra[2];
  if (conv_geometry(ctx, op, x->size, weight_size, o, &g, extra)) return -1;
  int64_t ys[4] = {g.n, g.k, g.p, g.q};
  for (int d = 0; d < 4; d++)
    if (dy->size[d] != ys[d])
      return qt_errorf(&ctx->err, "%s: an input of %s gives an output of %s, the gradient is %s",
                       op, qt_shape_str(4, x->size, s1, sizeof s1), qt_shape_str(4, ys, s2, sizeof s2),
                       qt_shape_str(dy->ndim, dy->size, s3, sizeof s3));
  int rc = -1;
  qt_tensor xc, dyc, dw;
  qt_tensor_init(&xc);
  qt_tensor_init(&dyc);
  qt_tensor_init(&dw);
  if (conv_padded(ctx, op, &xc, x, extra) || qt_contiguous(ctx, &dyc, dy) ||
      ops_alloc(ctx, op, &dw, ops_device(x), x->dtype, 4, weight_size) ||
      conv_call(ctx, op, QT_CONV_BACKWARD_FILTER, &g, &xc, &dw, &dyc))
    goto done;
  *out = dw;
  qt_tensor_init(&dw);
  rc = 0;
done:
  qt_tensor_release(&xc);
  qt_tensor_release(&dyc);
  qt_tensor_release(&dw);
  return rc;
}

int qt_conv_transpose2d(qt_ctx *ctx, qt_tensor *out, const qt_tensor *x, const qt_tensor *w,
                        const qt_tensor *bias, const qt_conv_opts *o) {
  const char *op = "conv_transpose2d";
  if (conv_check_pair(ctx, op, x, w) || conv_check4(ctx, op, "input", x) ||
      conv_check4(ctx, op, "weight", w))
    return -1;
  if (o->same) return qt_errorf(&ctx->err, "%s: padding must be numbers, not 'same'", op);
  if (x->size[1] != w->size[0])
    return qt_errorf(&ctx->err, "%s: an input of %lld channels needs a weight of %lld input "
                     "channels (in, out / groups, kh, kw), the weight has %lld", op,
                     (long long)x->size[1], (long long)x->size[1], (long long)w->size[0]);
  /* the forward convolution whose input gradient this is: filters (in, out / groups) */
  int64_t size[4] = {x->size[0], w->size[1] * o->groups, 0, 0};
  for (int d = 0; d < 2; d++) {
    int64_t k = w->size[2 + d];
    if (o->output_padding[d] < 0 ||
        (o->output_padding[d] >= o->stride[d] && o->output_padding[d] >= o->dilation[d]))
      return qt_errorf(&ctx->err, "%s: output_padding %lld must be below the stride (%lld) or "
                       "the dilation (%lld)", op, (long long)o->output_padding[d],
                       (long long)o->stride[d], (long long)o->dilation[d]);
    size[2 + d] = (x->size[2 + d] - 1) * o->stride[d] - 2 * o->pad[d] +
                  o->dilation[d] * (k - 1) + o->output_padding[d] + 1;
    if (size[2 + d] < 1)
      return qt_errorf(&ctx->err, "%s: the output would have size %lld along dim %d", op,
                       (long long)size[2 + d], 3 + d);
  }
  qt_tensor y;
  qt_tensor_init(&y);
  if (conv_input(ctx, op, &y, size, w, x, o) || (bias != NULL && conv_add_bias(ctx, op, &y, bias))) {
    qt_tensor_release(&y);
    return -1;
  }
  *out = y;
  return 0;
}
