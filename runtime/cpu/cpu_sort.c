/*
** cpu_sort.c — the sorting slots on the CPU (device.h, "sorting and selection"): sort, topk,
** unique, bincount, histc, searchsorted. The reference for kernels/sort.cu.
**
** Every element is first made a 64-bit unsigned key whose unsigned order is the order of
** device.h: a float becomes its IEEE bits with the sign flipped (negative numbers: every bit
** flipped), after -0.0 became 0.0 and every NaN the one key above all (UINT64_MAX); a signed
** integer has its sign bit flipped; bool and uint8 are their value. Descending is the
** complement of the key. The GPU uses the same keys (32-bit for 4-byte and smaller dtypes),
** so both devices order, and find equal, exactly the same elements.
**
** A row is sorted as (key, index) pairs by qsort with the index as the tie-break, which is a
** total order, so the result is the stable sort's. Values are then copied from src at the
** sorted indices (the exact bits: -0.0 and NaN payloads survive).
*/
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cpu_internal.h"
#include "scalar.h"

#define SORT_SIGN64 ((uint64_t)1 << 63)

/* The key of a double (device.h's order). */
static uint64_t sort_key_double(double x) {
  if (x != x) return UINT64_MAX;
  if (x == 0) x = 0.0;  /* -0.0 equals 0.0 */
  uint64_t bits;
  memcpy(&bits, &x, sizeof bits);
  return (bits & SORT_SIGN64) ? ~bits : bits | SORT_SIGN64;
}

/* The key of the element at p of dtype d; *ok = false for a dtype without one (the 16-bit
** floats, which reach this device's sort slots as float32 copies). The cases come from the
** dtype list, by kind: floats by their double's key, integers offset by the sign bit when
** signed, bool as 0 < 1. */
#define SORT_KEY_FLOAT(T, x) sort_key_double((double)(x))
#define SORT_KEY_INT(T, x) ((T)-1 < (T)0 ? (uint64_t)(int64_t)(x) ^ SORT_SIGN64 : (uint64_t)(x))
#define SORT_KEY_BOOL(T, x) ((uint64_t)(x))
#define SORT_KEY_CASE_(P, E, sfx, name, T, U, size, kind, ...) \
  QT_UNLESS_HALF_##kind(case E: { T x; memcpy(&x, p, sizeof x); return SORT_KEY_##kind(T, x); })
static uint64_t sort_key(qt_dtype d, const char *p, bool *ok) {
  switch (d) {
    QT_DTYPE_LIST(SORT_KEY_CASE_, ~)
    default: *ok = false; return 0;
  }
}
#undef SORT_KEY_CASE_

typedef struct sort_pair {
  uint64_t key;
  int64_t index;  /* 0-based */
} sort_pair;

static int sort_pair_cmp(const void *a, const void *b) {
  const sort_pair *x = (const sort_pair *)a, *y = (const sort_pair *)b;
  if (x->key != y->key) return x->key < y->key ? -1 : 1;
  return x->index < y->index ? -1 : x->index > y->index;
}

static bool sort_rows_ok(const qt_view *v) {
  return v->ndim == 2 && (v->size[0] <= 1 || v->stride[0] == v->size[1]) &&
         (v->size[1] <= 1 || v->stride[1] == 1);
}

/* Sorts row r of src (rows, n) into pairs (n of them), descending by the key's complement. */
static int sort_row(const qt_view *src, int64_t r, bool descending, sort_pair *pairs,
                    const char *op, qt_err *err) {
  int64_t n = src->size[1];
  size_t es = qt_elsize(src->dtype);
  const char *row = (const char *)src->data + (size_t)(r * n) * es;
  bool ok = true;
  for (int64_t j = 0; j < n; j++) {
    uint64_t key = sort_key(src->dtype, row + (size_t)j * es, &ok);
    pairs[j].key = descending ? ~key : key;
    pairs[j].index = j;
  }
  if (!ok) return qt_errorf(err, "%s: dtype %s cannot be sorted", op, qt_dtypes[src->dtype].name);
  qsort(pairs, (size_t)n, sizeof *pairs, sort_pair_cmp);
  return 0;
}

/* The first k of the sorted rows of src into values and indices (rows, k): sort and topk. */
static int sort_first_k(const qt_view *values, const qt_view *indices, const qt_view *src,
                        int64_t k, bool descending, const char *op, qt_err *err) {
  if (!sort_rows_ok(src) || !sort_rows_ok(values) || !sort_rows_ok(indices) ||
      values->dtype != src->dtype || indices->dtype != QT_I64 || k > src->size[1])
    return qt_errorf(err, "%s: the views must be contiguous rows, values of src's dtype and "
                     "int64 indices", op);
  int64_t rows = src->size[0], n = src->size[1];
  if (rows == 0 || n == 0 || k == 0) return 0;
  sort_pair *pairs = (sort_pair *)malloc((size_t)n * sizeof *pairs);
  if (pairs == NULL) return qt_errorf(err, "%s: out of host memory for %lld pairs", op,
                                      (long long)n);
  size_t es = qt_elsize(src->dtype);
  int rc = 0;
  for (int64_t r = 0; r < rows && rc == 0; r++) {
    rc = sort_row(src, r, descending, pairs, op, err);
    const char *srow = (const char *)src->data + (size_t)(r * n) * es;
    char *vrow = (char *)values->data + (size_t)(r * k) * es;
    int64_t *irow = (int64_t *)indices->data + r * k;
    for (int64_t j = 0; rc == 0 && j < k; j++) {
      memcpy(vrow + (size_t)j * es, srow + (size_t)pairs[j].index * es, es);
      irow[j] = pairs[j].index + 1;
    }
  }
  free(pairs);
  return rc;
}

int cpu_sort(qt_device *dev, const qt_view *values, const qt_view *indices, const qt_view *src,
             bool descending, qt_err *err) {
  (void)dev;
  return sort_first_k(values, indices, src, src->size[1], descending, "sort", err);
}

int cpu_topk(qt_device *dev, const qt_view *values, const qt_view *indices, const qt_view *src,
             int64_t k, bool largest, qt_err *err) {
  (void)dev;
  return sort_first_k(values, indices, src, k, largest, "topk", err);
}

int cpu_unique(qt_device *dev, const qt_view *uniques, const qt_view *inverse,
               const qt_view *counts, const qt_view *sorted, const qt_view *perm,
               int64_t *count, qt_err *err) {
  (void)dev;
  int64_t n = sorted->numel;
  size_t es = qt_elsize(sorted->dtype);
  const char *s = (const char *)sorted->data;
  char *u = (char *)uniques->data;
  const int64_t *p = (const int64_t *)perm->data;
  int64_t *inv = inverse != NULL ? (int64_t *)inverse->data : NULL;
  int64_t *cnt = counts != NULL ? (int64_t *)counts->data : NULL;
  bool ok = true;
  int64_t runs = 0;
  uint64_t prev = 0;
  for (int64_t i = 0; i < n; i++) {
    uint64_t key = sort_key(sorted->dtype, s + (size_t)i * es, &ok);
    if (i == 0 || key != prev) {
      memcpy(u + (size_t)runs * es, s + (size_t)i * es, es);
      if (cnt != NULL) cnt[runs] = 0;
      runs++;
      prev = key;
    }
    if (cnt != NULL) cnt[runs - 1]++;
    if (inv != NULL) {
      int64_t at = p[i] - 1;
      if (at < 0 || at >= n) return qt_errorf(err, "unique: permutation value %lld out of "
                                              "range (1..%lld)", (long long)p[i], (long long)n);
      inv[at] = runs;
    }
  }
  if (!ok) return qt_errorf(err, "unique: dtype %s cannot be sorted", qt_dtypes[sorted->dtype].name);
  *count = runs;
  return 0;
}

/* An integer or bool element as int64 (*v), or false for a dtype without integer values:
** the cases come from the dtype list (kinds INT and BOOL), so no dtype is read as another. */
#define SORT_INT_FLOAT(...)
#define SORT_INT_HALF(...)
#define SORT_INT_INT(...) __VA_ARGS__
#define SORT_INT_BOOL(...) __VA_ARGS__
#define SORT_INT_CASE_(P, E, sfx, name, T, U, size, kind, ...) \
  SORT_INT_##kind(case E: { T x; memcpy(&x, p, sizeof x); *v = (int64_t)x; return true; })
static bool sort_int_at(qt_dtype d, const char *p, int64_t *v) {
  switch (d) {
    QT_DTYPE_LIST(SORT_INT_CASE_, ~)
    default: return false;
  }
}
#undef SORT_INT_CASE_

int cpu_bincount(qt_device *dev, const qt_view *dst, const qt_view *src, const qt_view *weights,
                 qt_err *err) {
  (void)dev;
  if (qt_is_float(src->dtype) || (weights == NULL && dst->dtype != QT_I64) ||
      (weights != NULL && weights->dtype != dst->dtype))
    return qt_errorf(err, "bincount: integer input and int64 counts or weights of the "
                     "result's dtype expected");
  int64_t n = src->numel, len = dst->numel;
  size_t es = qt_elsize(src->dtype);
  for (int64_t i = 0; i < n; i++) {
    int64_t v = 0;
    if (!sort_int_at(src->dtype, (const char *)src->data + (size_t)i * es, &v))
      return qt_errorf(err, "bincount: dtype %s has no integer values", qt_dtypes[src->dtype].name);
    if (v < 0 || v >= len)
      return qt_errorf(err, "bincount: value %lld out of range (0..%lld) at position %lld",
                       (long long)v, (long long)(len - 1), (long long)(i + 1));
    if (weights == NULL) ((int64_t *)dst->data)[v] += 1;
    else if (dst->dtype == QT_F32) ((float *)dst->data)[v] += ((const float *)weights->data)[i];
    else ((double *)dst->data)[v] += ((const double *)weights->data)[i];
  }
  return 0;
}

int cpu_histc(qt_device *dev, const qt_view *dst, const qt_view *src, double lo, double hi,
              qt_err *err) {
  (void)dev;
  if (dst->dtype != QT_I64 || qt_is_bool(src->dtype) || !(lo < hi))
    return qt_errorf(err, "histc: int64 counts, a non-bool input and min < max expected");
  int64_t bins = dst->numel, n = src->numel;
  size_t es = qt_elsize(src->dtype);
  int64_t *c = (int64_t *)dst->data;
  for (int64_t i = 0; i < n; i++) {
    double x = qt_scalar_load(src->dtype, (const char *)src->data + (size_t)i * es).f;
    if (!(x >= lo && x <= hi)) continue;  /* NaN fails both */
    c[qt_histc_bin(x, lo, hi, bins)]++;
  }
  return 0;
}

int cpu_searchsorted(qt_device *dev, const qt_view *dst, const qt_view *sorted,
                     const qt_view *values, bool right, qt_err *err) {
  (void)dev;
  if (sorted->dtype != values->dtype || dst->dtype != QT_I64)
    return qt_errorf(err, "searchsorted: sorted and values of one dtype, int64 result expected");
  int64_t rows = dst->size[0], m = dst->size[1], n = sorted->size[1];
  size_t es = qt_elsize(sorted->dtype);
  bool ok = true;
  for (int64_t r = 0; r < rows; r++) {
    const char *srow = (const char *)sorted->data + (size_t)(r * n) * es;
    const char *vrow = (const char *)values->data + (size_t)(r * m) * es;
    int64_t *drow = (int64_t *)dst->data + r * m;
    for (int64_t j = 0; j < m; j++) {
      uint64_t key = sort_key(values->dtype, vrow + (size_t)j * es, &ok);
      int64_t lo = 0, hi = n;  /* the answer is in lo..hi */
      while (lo < hi) {
        int64_t mid = lo + (hi - lo) / 2;
        uint64_t k = sort_key(sorted->dtype, srow + (size_t)mid * es, &ok);
        if (right ? k <= key : k < key) lo = mid + 1;
        else hi = mid;
      }
      drow[j] = lo + 1;
    }
  }
  if (!ok) return qt_errorf(err, "searchsorted: dtype %s cannot be compared",
                            qt_dtypes[sorted->dtype].name);
  return 0;
}
