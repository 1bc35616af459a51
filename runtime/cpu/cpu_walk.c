/*
** cpu_walk.c — the CPU device's row walker: every elementwise and indexing slot hands its
** collapsed views here, and gets one call of its typed row function per innermost row.
** The part that copies and collapses the views (cpu_walk) is static inline in
** cpu_internal.h; the loop over rows is here, once.
*/
#include <stdint.h>

#include "cpu/cpu_internal.h"
#include "tensor.h"

/* Visits every row of views that were collapsed together (same ndim and sizes), in
** row-major order, keeping one pointer per view up to date with additions only. */
void cpu_walk_collapsed(qt_view *const *v, int nviews, cpu_row_fn row, const cpu_args *args) {
  int nd = v[0]->ndim;
  int64_t numel = 1;
  for (int d = 0; d < nd; d++) numel *= v[0]->size[d];
  if (numel == 0) return;
  int64_t n = nd > 0 ? v[0]->size[nd - 1] : 1;
  char *p[CPU_MAXVIEWS];
  int64_t inner[CPU_MAXVIEWS];
  int64_t step[CPU_MAXVIEWS][QT_MAXDIM];  /* bytes per step along each outer dim */
  for (int k = 0; k < nviews; k++) {
    int64_t es = (int64_t)qt_elsize(v[k]->dtype);
    p[k] = (char *)v[k]->data;
    inner[k] = nd > 0 ? v[k]->stride[nd - 1] : 0;
    for (int d = 0; d < nd; d++) step[k][d] = v[k]->stride[d] * es;
  }
  int64_t rows = numel / n;
  int64_t idx[QT_MAXDIM] = {0};
  for (int64_t r = 0; r < rows; r++) {
    row(p, inner, n, args);
    for (int d = nd - 2; d >= 0; d--) {
      for (int k = 0; k < nviews; k++) p[k] += step[k][d];
      if (++idx[d] < v[0]->size[d]) break;
      idx[d] = 0;
      for (int k = 0; k < nviews; k++) p[k] -= step[k][d] * v[0]->size[d];
    }
  }
}
