/*
** cpu_walk.c — the CPU device's row walker: every elementwise and indexing slot hands its
** collapsed views here, and gets one call of its typed row function per innermost row.
** The part that copies and collapses the views (cpu_walk) is static inline in
** cpu_internal.h; the loop over rows is here, once, with the reductions' outer view.
*/
#include <stdint.h>
#include <string.h>

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

void cpu_walk_range(qt_view *const *v, int nviews, cpu_row_fn row, const cpu_args *args,
                    int64_t begin, int64_t end) {
  int nd = v[0]->ndim;
  if (begin >= end) return;
  int64_t n = nd > 0 ? v[0]->size[nd - 1] : 1;
  char *p[CPU_MAXVIEWS];
  int64_t inner[CPU_MAXVIEWS], es[CPU_MAXVIEWS];
  int64_t idx[QT_MAXDIM] = {0};
  /* the position of element `begin`: its row's index along each outer dim, its column */
  int64_t r = begin / n, col = begin % n;
  for (int d = nd - 2; d >= 0; d--) {
    idx[d] = r % v[0]->size[d];
    r /= v[0]->size[d];
  }
  for (int k = 0; k < nviews; k++) {
    es[k] = (int64_t)qt_elsize(v[k]->dtype);
    inner[k] = nd > 0 ? v[k]->stride[nd - 1] : 0;
    int64_t off = col * inner[k];
    for (int d = 0; d < nd - 1; d++) off += idx[d] * v[k]->stride[d];
    p[k] = (char *)v[k]->data + off * es[k];
  }
  int64_t at = begin;
  while (at < end) {
    int64_t len = n - col < end - at ? n - col : end - at;
    row(p, inner, len, args);
    at += len;
    if (at >= end) break;
    /* to the start of the next row */
    for (int k = 0; k < nviews; k++) p[k] -= col * inner[k] * es[k];
    col = 0;
    for (int d = nd - 2; d >= 0; d--) {
      for (int k = 0; k < nviews; k++) p[k] += v[k]->stride[d] * es[k];
      if (++idx[d] < v[0]->size[d]) break;
      idx[d] = 0;
      for (int k = 0; k < nviews; k++) p[k] -= v[k]->stride[d] * es[k] * v[0]->size[d];
    }
  }
}

typedef struct cpu_par_walk {
  qt_view *const *v;
  int nviews;
  cpu_row_fn row;
  const cpu_args *args;
  int64_t numel, piece;
} cpu_par_walk;

static void cpu_par_walk_chunk(void *arg, int64_t chunk) {
  const cpu_par_walk *w = (const cpu_par_walk *)arg;
  int64_t begin = chunk * w->piece, end = begin + w->piece < w->numel ? begin + w->piece : w->numel;
  cpu_walk_range(w->v, w->nviews, w->row, w->args, begin, end);
}

int64_t cpu_par_pieces(int64_t numel, int64_t *piece) {
  int threads = cpu_threads();
  /* a few pieces per thread, so that uneven ones balance; a piece a multiple of 64
  ** elements, so that every row function's vector body sees whole vectors */
  int64_t pieces = threads > 1 ? (int64_t)threads * 4 : 1;
  if (pieces > numel / CPU_PAR_GRAIN) pieces = numel / CPU_PAR_GRAIN;
  if (pieces < 1) pieces = 1;
  *piece = ((numel + pieces - 1) / pieces + 63) / 64 * 64;
  return (numel + *piece - 1) / *piece;
}

void cpu_walk_collapsed_par(qt_view *const *v, int nviews, cpu_row_fn row, const cpu_args *args) {
  int nd = v[0]->ndim;
  int64_t numel = 1;
  for (int d = 0; d < nd; d++) numel *= v[0]->size[d];
  if (numel < 2 * CPU_PAR_GRAIN || cpu_threads() <= 1) {
    cpu_walk_collapsed(v, nviews, row, args);
    return;
  }
  cpu_par_walk w = { v, nviews, row, args, numel, 0 };
  int64_t pieces = cpu_par_pieces(numel, &w.piece);
  cpu_parallel(pieces, cpu_par_walk_chunk, &w);
}

/* ====================================================================== outer views */

bool cpu_outer_make(cpu_outer *o, const qt_view *dst, const qt_view *src, int dim) {
  o->len = src->size[dim];
  o->rstride = src->stride[dim];
  memset(&o->src, 0, sizeof o->src);
  int k = 0;
  for (int d = 0; d < src->ndim; d++) {
    if (d == dim) continue;
    o->src.size[k] = src->size[d];
    o->src.stride[k] = src->stride[d];
    k++;
  }
  o->src.ndim = k;
  o->src.dtype = src->dtype;
  o->src.data = src->data;
  o->src.numel = cpu_view_numel(&o->src);
  for (int d = k; d < QT_MAXDIM; d++) o->src.size[d] = 1, o->src.stride[d] = 0;
  cpu_view_make(&o->dst, &o->src, dst->data, dst->dtype, dst->stride);
  if (o->src.numel == 0) return false;
  qt_view *views[2] = { &o->dst, &o->src };
  qt_views_collapse(views, 2);
  o->nd = o->src.ndim;
  o->n = o->src.size[o->nd - 1];
  o->rows = o->src.numel / o->n;
  o->s_in = o->src.stride[o->nd - 1];
  o->d_in = o->dst.stride[o->nd - 1];
  return true;
}

/* The byte offsets of outer row r's first element in src and dst. */
void cpu_outer_row(const cpu_outer *o, int64_t r, int64_t *src_off, int64_t *dst_off) {
  int64_t so = 0, dof = 0;
  for (int d = o->nd - 2; d >= 0; d--) {
    int64_t i = r % o->src.size[d];
    r /= o->src.size[d];
    so += i * o->src.stride[d];
    dof += i * o->dst.stride[d];
  }
  *src_off = so * (int64_t)qt_elsize(o->src.dtype);
  *dst_off = dof * (int64_t)qt_elsize(o->dst.dtype);
}
