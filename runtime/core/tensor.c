/*
** tensor.c — dtypes, errors, tensors and shape/stride math.
**
** The plain-C foundation every other layer links against (see tensor.h for the
** ownership rules). Nothing here touches Lua or CUDA, devices or contexts: storages are
** made and given back by storage.c.
*/
#include "tensor.h"
#include "scalar.h"

#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>


/* ------------------------------------------------------------------ dtypes */

#define TENSOR_MIN_FLOAT(T, U) 0
#define TENSOR_MAX_FLOAT(T, U) 0
#define TENSOR_MIN_INT(T, U) QT_INT_MIN(T, U)
#define TENSOR_MAX_INT(T, U) QT_INT_MAX(T, U)
#define TENSOR_MIN_BOOL(T, U) 0
#define TENSOR_MAX_BOOL(T, U) 1
#define TENSOR_MIN_HALF(T, U) 0
#define TENSOR_MAX_HALF(T, U) 0
#define TENSOR_DTYPE_INFO(P, E, sfx, name, T, U, size, kind, ...)                            \
  [E] = { name, size, QT_KIND_IS_FLOAT_##kind, QT_KIND_IS_BOOL_##kind,                  \
          QT_KIND_IS_HALF_##kind, TENSOR_MIN_##kind(T, U), TENSOR_MAX_##kind(T, U) },
const qt_dtype_info qt_dtypes[QT_NDTYPES] = { QT_DTYPE_LIST(TENSOR_DTYPE_INFO, ~) };
#undef TENSOR_DTYPE_INFO
#define TENSOR_DTYPE_SIZE(P, E, sfx, name, T, U, size, kind, ...)                      \
  _Static_assert(sizeof(T) == size && sizeof(U) == size && size <= sizeof(qt_cell), \
                 "QT_DTYPE_LIST: wrong size for " name);
QT_DTYPE_LIST(TENSOR_DTYPE_SIZE, ~)
#undef TENSOR_DTYPE_SIZE

qt_scalar qt_scalar_from_double(double f) {
  qt_scalar s;
  s.f = f;
  s.i = qt_sat_int(f, INT64_MIN, INT64_MAX);
  return s;
}

static qt_scalar tensor_load_FLOAT(double f) { return qt_scalar_from_double(f); }
static qt_scalar tensor_load_INT(int64_t i) { return qt_scalar_i(i); }
static qt_scalar tensor_load_BOOL(bool b) { return qt_scalar_i(b ? 1 : 0); }
#define tensor_load_HALF(h) qt_scalar_from_double(qt_half_to_f32(h))
#define TENSOR_STORE_FLOAT(T, U, s) ((T)(s).f)
#define TENSOR_STORE_INT(T, U, s) ((T)(U)(uint64_t)(s).i)
/* Nonzero is true; .f is the one field that is nonzero for every nonzero number (a
** fraction has .i == 0) and it is NaN for NaN, which is true as in NumPy. */
#define TENSOR_STORE_BOOL(T, U, s) ((T)((s).f != 0))
/* A 16-bit float rounds the double once (half.h). */
#define TENSOR_STORE_HALF(T, U, s) QT_HALF_FROM(T, (s).f)

qt_scalar qt_scalar_load(qt_dtype d, const void *src) {
  switch (d) {
#define TENSOR_LOAD_(P, E, sfx, name, T, U, size, kind, ...) \
    case E: return tensor_load_##kind(*(const T *)src);
    QT_DTYPE_LIST(TENSOR_LOAD_, ~)
#undef TENSOR_LOAD_
    default: return qt_scalar_i(0);
  }
}

void qt_scalar_store(qt_dtype d, void *dst, qt_scalar s) {
  switch (d) {
#define TENSOR_STORE_(P, E, sfx, name, T, U, size, kind, ...) \
    case E: *(T *)dst = TENSOR_STORE_##kind(T, U, s); break;
    QT_DTYPE_LIST(TENSOR_STORE_, ~)
#undef TENSOR_STORE_
    default: break;
  }
}

int qt_dtype_from_name(const char *name) {
  if (name == NULL) return -1;
  for (int d = 0; d < QT_NDTYPES; d++)
    if (strcmp(qt_dtypes[d].name, name) == 0) return d;
  return -1;
}

/* NumPy's table: a float with an integer of any width goes to float64 (float32 cannot
** hold every int32), two floats to the wider, two integers to the wider. The 16-bit
** floats take PyTorch's rules (tensor.h). */
qt_dtype qt_promote(qt_dtype a, qt_dtype b) {
  if (a == b || qt_is_bool(b)) return a;
  if (qt_is_bool(a)) return b;
  if (qt_is_half(a) || qt_is_half(b)) {
    if (qt_is_half(a) && qt_is_half(b)) return QT_F32;  /* float16 with bfloat16 */
    qt_dtype h = qt_is_half(a) ? a : b, o = qt_is_half(a) ? b : a;
    return qt_is_float(o) ? o : h;                       /* float32/64 win; integers don't */
  }
  bool fa = qt_is_float(a), fb = qt_is_float(b);
  if (fa == fb) return qt_elsize(a) >= qt_elsize(b) ? a : b;  /* two floats, two integers */
  qt_dtype f = fa ? a : b, i = fa ? b : a;
  /* A float holds every integer of at most half its width exactly (float32's significand
  ** has 24 bits: uint8 fits, int32 does not). */
  return qt_elsize(i) * 2 <= qt_elsize(f) ? f : QT_F64;
}

/* ------------------------------------------------------------------ errors */

int qt_errorf(qt_err *err, const char *fmt, ...) {
  if (err != NULL) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err->msg, sizeof err->msg, fmt, ap);
    va_end(ap);
  }
  return -1;
}

int qt_err_rename(qt_err *err, const char *from, const char *to) {
  size_t n = strlen(from);
  if (err != NULL && strcmp(from, to) != 0 && strncmp(err->msg, from, n) == 0 &&
      err->msg[n] == ':') {
    char rest[QT_ERRLEN];
    snprintf(rest, sizeof rest, "%s", err->msg + n);
    qt_errorf(err, "%s%s", to, rest);
  }
  return -1;
}

/* An op name is lowercase letters, digits and underscores ("save_safetensors",
** "index_fill_", "log1p_"), followed by ": ". "cpu" and "gpu" lead device messages, and a
** device's name is kept ("gpu:0: ..." is not an op name at all: no space after the colon). */
int qt_err_as(qt_err *err, const char *op) {
  if (err == NULL) return -1;
  size_t n = 0;
  while ((err->msg[n] >= 'a' && err->msg[n] <= 'z') || (err->msg[n] >= '0' && err->msg[n] <= '9') ||
         err->msg[n] == '_')
    n++;
  bool named = n > 0 && err->msg[n] == ':' && err->msg[n + 1] == ' ';
  if (named && strlen(op) == n && strncmp(err->msg, op, n) == 0) return -1;
  bool device = named && ((n == 3 && strncmp(err->msg, "cpu", 3) == 0) ||
                          (n == 3 && strncmp(err->msg, "gpu", 3) == 0));
  char rest[QT_ERRLEN];
  snprintf(rest, sizeof rest, "%s", named && !device ? err->msg + n + 2 : err->msg);
  qt_errorf(err, "%s: %s", op, rest);
  return -1;
}

/* ------------------------------------------------------------------ tensor */

int qt_tensor_check(const qt_tensor *t, const char *op, qt_err *err) {
  if (t == NULL || t->storage == NULL || t->storage->freed)
    return qt_errorf(err, "%s: tensor has been freed", op);
  return 0;
}

int64_t qt_numel(const qt_tensor *t) {
  /* A zero anywhere makes the product 0 even when the other sizes multiply past int64
  ** (an expanded empty tensor may have sizes like 2^62 x 2^62 x 0). */
  for (int d = 0; d < t->ndim; d++)
    if (t->size[d] == 0) return 0;
  int64_t n = 1;
  for (int d = 0; d < t->ndim; d++) n *= t->size[d];
  return n;
}

/* Row-major contiguity; size-1 dimensions may have any stride, and an empty tensor is
** contiguous whatever its strides. */
bool qt_is_contiguous(const qt_tensor *t) {
  int64_t expected = 1;
  for (int d = t->ndim - 1; d >= 0; d--) {
    if (t->size[d] == 0) return true;
  }
  for (int d = t->ndim - 1; d >= 0; d--) {
    if (t->size[d] != 1 && t->stride[d] != expected) return false;
    expected *= t->size[d];
  }
  return true;
}

/* Also guards the byte count: the product times the largest element size (8) must fit
** int64, so callers can multiply by qt_elsize without another check. */
int64_t qt_contiguous_strides(int ndim, const int64_t *size, int64_t *stride) {
  int64_t n = 1;
  bool overflow = false;
  for (int d = ndim - 1; d >= 0; d--) {
    if (size[d] < 0) return -1;
    if (stride != NULL) stride[d] = n;
    int64_t next;
    if (__builtin_mul_overflow(n, size[d], &next)) overflow = true;
    else n = next;
  }
  /* A zero anywhere makes the count 0 even if a partial product overflowed. */
  for (int d = 0; d < ndim; d++)
    if (size[d] == 0) n = 0, overflow = false;
  if (overflow) return -1;
  int64_t bytes;
  if (__builtin_mul_overflow(n, (int64_t)8, &bytes)) return -1;
  if (stride != NULL && n == 0) {
    /* Strides of an empty tensor: still the row-major ones, computed without
    ** overflow concerns (clamp sizes of 0 to 1 so the pattern stays meaningful). */
    int64_t s = 1;
    for (int d = ndim - 1; d >= 0; d--) {
      stride[d] = s;
      int64_t sz = size[d] > 0 ? size[d] : 1;
      if (__builtin_mul_overflow(s, sz, &s)) s = INT64_MAX;
    }
  }
  return n;
}

void qt_view_of(qt_view *v, const qt_tensor *t) {
  const qt_storage *s = t->storage;
  size_t es = qt_elsize(t->dtype);
  v->data = (s != NULL && s->data != NULL) ? (char *)s->data + (size_t)t->offset * es : NULL;
  v->dtype = t->dtype;
  v->ndim = t->ndim;
  v->numel = qt_numel(t);
  for (int d = 0; d < t->ndim; d++) {
    v->size[d] = t->size[d];
    v->stride[d] = t->stride[d];
  }
  for (int d = t->ndim; d < QT_MAXDIM; d++) {
    v->size[d] = 1;
    v->stride[d] = 0;
  }
}

const char *qt_shape_str(int ndim, const int64_t *size, char *buf, size_t len) {
  if (buf == NULL || len == 0) return buf;
  if (ndim == 0) {
    snprintf(buf, len, "scalar");
    return buf;
  }
  size_t used = 0;
  buf[0] = '\0';
  for (int d = 0; d < ndim && used < len; d++) {
    int n = snprintf(buf + used, len - used, d ? "x%lld" : "%lld", (long long)size[d]);
    if (n < 0) break;
    used += (size_t)n;
  }
  return buf;
}

/* Two passes: drop size-1 dims (their stride never matters), then fold dim d into d+1
** (the inner one) when every view has stride[d] == stride[d+1] * size[d+1]; the folded
** dim keeps the inner stride, so the element order of a row-major walk is unchanged.
** An empty set collapses to one dim of size 0; a one-element set to one dim of size 1. */
void qt_views_collapse(qt_view **views, int nviews) {
  if (nviews <= 0 || nviews > 64) return;  /* > 64: left as is, still a valid walk */
  int ndim = views[0]->ndim;
  int64_t numel = 1;  /* a zero first: an empty view's other sizes may multiply past int64 */
  for (int d = 0; d < ndim && numel != 0; d++)
    if (views[0]->size[d] == 0) numel = 0;
  for (int d = 0; d < ndim && numel != 0; d++) numel *= views[0]->size[d];

  if (numel == 0 || numel == 1) {
    for (int v = 0; v < nviews; v++) {
      qt_view *w = views[v];
      w->ndim = 1;
      w->size[0] = numel;
      w->stride[0] = 1;  /* never stepped: at most one element */
      for (int d = 1; d < QT_MAXDIM; d++) w->size[d] = 1, w->stride[d] = 0;
      w->numel = numel;
    }
    return;
  }

  /* Pass 1: keep dims of size > 1 (same decision for every view: sizes agree). */
  int kept = 0;
  int64_t size[QT_MAXDIM];
  int64_t stride[64][QT_MAXDIM];
  int nv = nviews;  /* callers pass a handful of views */
  for (int d = 0; d < ndim; d++) {
    if (views[0]->size[d] == 1) continue;
    size[kept] = views[0]->size[d];
    for (int v = 0; v < nv; v++) stride[v][kept] = views[v]->stride[d];
    kept++;
  }

  /* Pass 2: fold from the innermost outwards into out[] (built back to front). */
  int64_t out_size[QT_MAXDIM];
  int64_t out_stride[64][QT_MAXDIM];
  int n = 0;  /* dims written so far, innermost first */
  for (int d = kept - 1; d >= 0; d--) {
    if (n > 0) {
      bool mergeable = true;
      for (int v = 0; v < nv && mergeable; v++)
        if (stride[v][d] != out_stride[v][n - 1] * out_size[n - 1]) mergeable = false;
      if (mergeable) {
        out_size[n - 1] *= size[d];
        continue;
      }
    }
    out_size[n] = size[d];
    for (int v = 0; v < nv; v++) out_stride[v][n] = stride[v][d];
    n++;
  }

  for (int v = 0; v < nv; v++) {
    qt_view *w = views[v];
    w->ndim = n;
    for (int d = 0; d < n; d++) {
      w->size[d] = out_size[n - 1 - d];
      w->stride[d] = out_stride[v][n - 1 - d];
    }
    for (int d = n; d < QT_MAXDIM; d++) w->size[d] = 1, w->stride[d] = 0;
    w->numel = numel;
  }
}
