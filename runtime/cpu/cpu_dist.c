/*
** cpu_dist.c — the CPU device's collectives (device.h's comm_* rows): the link the core
** made is the communicator, and every collective goes through rank 0, which combines the
** ranks' parts in rank order (the same numbers on every run) and sends the result on.
** A star moves each byte twice through rank 0: it is the transport of the CPU's tests, of
** small jobs and of a world of one, not of bandwidth (the GPUs' NCCL is that).
*/
#include <stdlib.h>
#include <string.h>

#include "cpu/cpu_internal.h"
#include "device.h"
#include "half.h"
#include "tensor.h"

int cpu_comm_open(qt_device *dev, qt_dist_link *link, void **comm, qt_err *err) {
  (void)dev;
  (void)err;
  *comm = link;
  return 0;
}

void cpu_comm_close(qt_device *dev, void *comm, bool abort) {
  (void)dev;
  (void)comm;
  (void)abort;
}

/* acc[i] = acc[i] op b[i] for n elements of dt; AVG sums (the caller divides once). */
#define CPU_DIST_COMBINE(T, LOAD, STORE)                                              \
  for (size_t i = 0; i < n; i++) {                                                    \
    T x = LOAD(((const STORE_T *)acc)[i]), y = LOAD(((const STORE_T *)b)[i]);         \
    T r = op == QT_DIST_PROD ? x * y : op == QT_DIST_MAX ? (x > y || x != x ? x : y)  \
        : op == QT_DIST_MIN ? (x < y || x != x ? x : y) : x + y;                      \
    ((STORE_T *)acc)[i] = STORE(r);                                                   \
  }
#define ID(v) (v)
static void cpu_dist_combine(qt_dtype dt, qt_dist_op op, void *acc, const void *b, size_t n) {
  switch (dt) {
#define STORE_T float
    case QT_F32: CPU_DIST_COMBINE(float, ID, ID) break;
#undef STORE_T
#define STORE_T double
    case QT_F64: CPU_DIST_COMBINE(double, ID, ID) break;
#undef STORE_T
#define STORE_T int32_t
    case QT_I32: CPU_DIST_COMBINE(int64_t, ID, (int32_t)) break;   /* wraps as NCCL's */
#undef STORE_T
    case QT_I64:   /* sums and products wrap (unsigned arithmetic, as NCCL's) */
      for (size_t i = 0; i < n; i++) {
        int64_t x = ((int64_t *)acc)[i], y = ((const int64_t *)b)[i];
        uint64_t ux = (uint64_t)x, uy = (uint64_t)y;
        ((int64_t *)acc)[i] = op == QT_DIST_PROD ? (int64_t)(ux * uy) : op == QT_DIST_MAX ? (x > y ? x : y)
                            : op == QT_DIST_MIN ? (x < y ? x : y) : (int64_t)(ux + uy);
      }
      break;
#define STORE_T uint8_t
    case QT_U8: CPU_DIST_COMBINE(unsigned, ID, (uint8_t)) break;
#undef STORE_T
#define STORE_T uint16_t
    case QT_F16: CPU_DIST_COMBINE(float, qt_f16_bits_to_f32, qt_f32_to_f16_bits) break;
    case QT_BF16: CPU_DIST_COMBINE(float, qt_bf16_bits_to_f32, qt_f32_to_bf16_bits) break;
#undef STORE_T
    case QT_BOOL:   /* sum is or, prod is and (as uint8: max and min) */
      for (size_t i = 0; i < n; i++) {
        uint8_t x = ((uint8_t *)acc)[i] != 0, y = ((const uint8_t *)b)[i] != 0;
        ((uint8_t *)acc)[i] = op == QT_DIST_PROD || op == QT_DIST_MIN ? (x && y) : (x || y);
      }
      break;
    default: break;
  }
}
#undef ID
#undef CPU_DIST_COMBINE

/* AVG's last step: the sum over world (integers truncate, as NCCL's average does). */
static void cpu_dist_average(qt_dtype dt, void *acc, size_t n, int world) {
  switch (dt) {
    case QT_F32: for (size_t i = 0; i < n; i++) ((float *)acc)[i] /= (float)world; break;
    case QT_F64: for (size_t i = 0; i < n; i++) ((double *)acc)[i] /= (double)world; break;
    case QT_I32: for (size_t i = 0; i < n; i++) ((int32_t *)acc)[i] /= world; break;
    case QT_I64: for (size_t i = 0; i < n; i++) ((int64_t *)acc)[i] /= world; break;
    case QT_U8: for (size_t i = 0; i < n; i++) ((uint8_t *)acc)[i] /= (uint8_t)world; break;
    case QT_F16:
      for (size_t i = 0; i < n; i++) {
        uint16_t *h = (uint16_t *)acc + i;
        *h = qt_f32_to_f16_bits(qt_f16_bits_to_f32(*h) / (float)world);
      }
      break;
    case QT_BF16:
      for (size_t i = 0; i < n; i++) {
        uint16_t *h = (uint16_t *)acc + i;
        *h = qt_f32_to_bf16_bits(qt_bf16_bits_to_f32(*h) / (float)world);
      }
      break;
    default: break;
  }
}

/* Rank 0: acc = in_0 op in_1 op ... (acc holds in_0 already), each rank's part received in
** turn into tmp. */
static int cpu_dist_gather_reduce(qt_dist_link *l, const qt_coll *c, void *acc, size_t bytes,
                                  qt_err *err) {
  size_t n = bytes / qt_elsize(c->in->dtype);
  void *tmp = malloc(bytes > 0 ? bytes : 1);
  if (tmp == NULL) return qt_errorf(err, "out of host memory for %zu bytes", bytes);
  for (int r = 1; r < l->world; r++) {
    if (l->recv(l, r, tmp, bytes, err) != 0) {
      free(tmp);
      return -1;
    }
    cpu_dist_combine(c->in->dtype, c->op, acc, tmp, n);
  }
  free(tmp);
  if (c->op == QT_DIST_AVG && c->in->dtype != QT_BOOL) cpu_dist_average(c->in->dtype, acc, n, l->world);
  return 0;
}

static int cpu_dist_send_all(qt_dist_link *l, const void *buf, size_t bytes, int skip, qt_err *err) {
  for (int r = 1; r < l->world; r++)
    if (r != skip && l->send(l, r, buf, bytes, err) != 0) return -1;
  return 0;
}

/* A rank other than 0 in a collective rank 0 computes: its input there, the result back. */
static int cpu_dist_via_root(qt_dist_link *l, const void *in, size_t in_bytes, void *out,
                             size_t out_bytes, qt_err *err) {
  return l->send(l, 0, in, in_bytes, err) || l->recv(l, 0, out, out_bytes, err) ? -1 : 0;
}

int cpu_collective(qt_device *dev, void *comm, const qt_coll *c, void **work, qt_err *err) {
  (void)dev;
  qt_dist_link *l = comm;
  *work = NULL;
  size_t es = qt_elsize(c->in->dtype);
  size_t in_bytes = (size_t)c->in->numel * es, out_bytes = (size_t)c->out->numel * es;
  char *in = c->in->data, *out = c->out->data;
  int rank = l->rank, W = l->world;
  switch (c->kind) {
    case QT_COLL_ALL_REDUCE:
      if (rank != 0) return cpu_dist_via_root(l, in, in_bytes, out, out_bytes, err);
      if (out != in) memcpy(out, in, in_bytes);
      if (cpu_dist_gather_reduce(l, c, out, in_bytes, err) != 0) return -1;
      return cpu_dist_send_all(l, out, out_bytes, -1, err);
    case QT_COLL_BROADCAST:
      if (rank == c->root) {
        if (out != in) memcpy(out, in, in_bytes);
        if (rank != 0) return l->send(l, 0, in, in_bytes, err);
        return cpu_dist_send_all(l, in, in_bytes, -1, err);
      }
      if (rank != 0) return l->recv(l, 0, out, out_bytes, err);
      if (l->recv(l, c->root, out, out_bytes, err) != 0) return -1;
      return cpu_dist_send_all(l, out, out_bytes, c->root, err);
    case QT_COLL_REDUCE: {
      if (rank != 0) {
        if (l->send(l, 0, in, in_bytes, err) != 0) return -1;
        return rank == c->root ? l->recv(l, 0, out, out_bytes, err) : 0;
      }
      /* rank 0 sums into out only when it is the destination */
      char *acc = c->root == 0 ? out : malloc(in_bytes > 0 ? in_bytes : 1);
      if (acc == NULL) return qt_errorf(err, "out of host memory for %zu bytes", in_bytes);
      if (acc != in) memcpy(acc, in, in_bytes);
      int rc = cpu_dist_gather_reduce(l, c, acc, in_bytes, err);
      if (rc == 0 && c->root != 0) rc = l->send(l, c->root, acc, in_bytes, err);
      if (acc != out) free(acc);
      return rc;
    }
    case QT_COLL_ALL_GATHER:
      if (rank != 0) return cpu_dist_via_root(l, in, in_bytes, out, out_bytes, err);
      memmove(out, in, in_bytes);
      for (int r = 1; r < W; r++)
        if (l->recv(l, r, out + (size_t)r * in_bytes, in_bytes, err) != 0) return -1;
      return cpu_dist_send_all(l, out, out_bytes, -1, err);
    case QT_COLL_REDUCE_SCATTER: {
      if (rank != 0) return cpu_dist_via_root(l, in, in_bytes, out, out_bytes, err);
      char *acc = malloc(in_bytes > 0 ? in_bytes : 1);
      if (acc == NULL) return qt_errorf(err, "out of host memory for %zu bytes", in_bytes);
      memcpy(acc, in, in_bytes);
      int rc = cpu_dist_gather_reduce(l, c, acc, in_bytes, err);
      for (int r = 1; r < W && rc == 0; r++) rc = l->send(l, r, acc + (size_t)r * out_bytes, out_bytes, err);
      if (rc == 0) memcpy(out, acc, out_bytes);
      free(acc);
      return rc;
    }
    case QT_COLL_ALL_TO_ALL: {
      /* every rank's send and receive counts, then its whole input, to rank 0, which checks
      ** that they agree and sends each destination its parts from every source, in rank
      ** order; counts[r] holds rank r's W send counts, then its W receive counts */
      size_t W2 = 2 * (size_t)W;
      int64_t *counts = malloc((size_t)W * W2 * sizeof *counts + 1);
      if (counts == NULL) return qt_errorf(err, "out of host memory");
      int64_t *mine = counts + (size_t)rank * W2;
      for (int j = 0; j < W; j++) {
        mine[j] = c->send != NULL ? c->send[j] : c->in->numel / W;
        mine[W + j] = c->recv != NULL ? c->recv[j] : c->out->numel / W;
      }
      int rc = 0;
      if (rank != 0) {
        rc = l->send(l, 0, mine, W2 * sizeof *mine, err);
        if (rc == 0) rc = l->send(l, 0, in, in_bytes, err);
        if (rc == 0) rc = l->recv(l, 0, out, out_bytes, err);
        free(counts);
        return rc;
      }
      for (int r = 1; r < W && rc == 0; r++)
        rc = l->recv(l, r, counts + (size_t)r * W2, W2 * sizeof *counts, err);
      for (int s = 0; s < W && rc == 0; s++)
        for (int d = 0; d < W && rc == 0; d++) {
          int64_t sent = counts[(size_t)s * W2 + d], want = counts[(size_t)d * W2 + W + s];
          if (sent != want) {
            rc = qt_errorf(err, "rank %d sends rank %d %lld elements, rank %d expects %lld",
                           s, d, (long long)sent, d, (long long)want);
            qt_err e2;
            for (int r = 1; r < W; r++) (void)l->send(l, r, "", 0, &e2);   /* they fail on its size */
          }
        }
      if (rc != 0) {
        free(counts);
        return rc;
      }
      size_t total = in_bytes;   /* every rank's input, end to end */
      for (int r = 1; r < W; r++)
        for (int j = 0; j < W; j++) total += (size_t)counts[(size_t)r * W2 + j] * es;
      char *all = rc == 0 ? malloc(total + 1) : NULL;
      if (rc == 0 && all == NULL) rc = qt_errorf(err, "out of host memory for %zu bytes", total);
      size_t *start = rc == 0 ? malloc((size_t)W * sizeof *start) : NULL;   /* rank r's input in all */
      if (rc == 0 && start == NULL) rc = qt_errorf(err, "out of host memory");
      if (rc == 0) {
        memcpy(all, in, in_bytes);
        start[0] = 0;
        size_t at = in_bytes;
        for (int r = 1; r < W && rc == 0; r++) {
          size_t len = 0;
          for (int j = 0; j < W; j++) len += (size_t)counts[(size_t)r * W2 + j] * es;
          start[r] = at;
          rc = l->recv(l, r, all + at, len, err);
          at += len;
        }
      }
      char *send = NULL;
      for (int d = W - 1; d >= 0 && rc == 0; d--) {
        size_t len = 0;
        for (int s = 0; s < W; s++) len += (size_t)counts[(size_t)s * W2 + d] * es;
        char *buf = d == 0 ? NULL : realloc(send, len + 1);
        if (d != 0 && buf == NULL) {
          rc = qt_errorf(err, "out of host memory for %zu bytes", len);
          break;
        }
        if (d != 0) send = buf;
        char *to = d == 0 ? out : send;
        if (d == 0 && len != out_bytes) {
          rc = qt_errorf(err, "the ranks send rank 0 %zu bytes, its output holds %zu",
                         len, out_bytes);
          break;
        }
        size_t o = 0;
        for (int s = 0; s < W; s++) {
          size_t skip = 0;
          for (int j = 0; j < d; j++) skip += (size_t)counts[(size_t)s * W2 + j] * es;
          size_t n = (size_t)counts[(size_t)s * W2 + d] * es;
          memcpy(to + o, all + start[s] + skip, n);
          o += n;
        }
        if (d != 0) rc = l->send(l, d, send, len, err);
      }
      free(send);
      free(start);
      free(all);
      free(counts);
      return rc;
    }
  }
  return qt_errorf(err, "unknown collective %d", (int)c->kind);
}

int cpu_work_wait(qt_device *dev, void *comm, void *work, qt_dist_link *link, qt_err *err) {
  (void)dev;
  (void)comm;
  (void)work;
  (void)link;
  (void)err;
  return 0;   /* the CPU's collectives are done when they return */
}
