/*
** cpu_matmul.c — the CPU device's matmul slot: batched c = alpha * a @ b + beta * c through
** cblas_?gemm (OpenBLAS, loaded by cpu_matmul_blas.c), with strided operands handed over as they are or packed, and the
** address space OpenBLAS needs checked first where running out of it would hang it.
*/
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/resource.h>

#include "cpu/cpu_internal.h"
#include "device.h"
#include "tensor.h"

/* ====================================================================== matmul */

/* How one (rows x cols) operand with strides (s0, s1) is handed to BLAS (row-major):
** as is with leading dimension s0 when its elements are contiguous along rows, as its
** transpose with leading dimension s1 when contiguous along columns, or not at all
** (the caller copies it). A dimension of size 1 never steps, so its stride is free and
** the leading dimension only has to satisfy BLAS's ld >= max(1, cols). */
typedef struct cpu_blas_operand {
  bool usable;
  bool transposed;
  int64_t ld;
} cpu_blas_operand;

static cpu_blas_operand cpu_blas_layout(int64_t rows, int64_t cols, int64_t s0, int64_t s1) {
  cpu_blas_operand o = { false, false, 0 };
  int64_t min_ld_plain = cols > 1 ? cols : 1, min_ld_trans = rows > 1 ? rows : 1;
  if (s1 == 1 || cols <= 1) {  /* row-major as is */
    int64_t ld = rows <= 1 ? min_ld_plain : s0;
    if (ld >= min_ld_plain && ld <= INT_MAX) {
      o.usable = true;
      o.ld = ld;
      return o;
    }
  }
  if (s0 == 1 || rows <= 1) {  /* its transpose is row-major */
    int64_t ld = cols <= 1 ? min_ld_trans : s1;
    if (ld >= min_ld_trans && ld <= INT_MAX) {
      o.usable = true;
      o.transposed = true;
      o.ld = ld;
      return o;
    }
  }
  return o;
}

/* Copies a strided (rows x cols) matrix into a contiguous buffer. */
#define CPU_PACK(NAME, T)                                                                 \
  static void NAME(T *out, const T *in, int64_t rows, int64_t cols, int64_t s0, int64_t s1) { \
    for (int64_t i = 0; i < rows; i++)                                                    \
      for (int64_t j = 0; j < cols; j++) out[i * cols + j] = in[i * s0 + j * s1];         \
  }
CPU_PACK(cpu_pack_f32, float)
CPU_PACK(cpu_pack_f64, double)

/* c = beta * c over a (B, M, N) box (K == 0, where BLAS is not called); beta == 0 writes
** zeros without reading c, as GEMM does. */
#define CPU_SCALE(NAME, T)                                                                \
  static void NAME(const qt_view *c, double beta) {                                       \
    T *base = (T *)c->data;                                                               \
    for (int64_t b = 0; b < c->size[0]; b++)                                              \
      for (int64_t i = 0; i < c->size[1]; i++) {                                          \
        T *row = base + b * c->stride[0] + i * c->stride[1];                              \
        for (int64_t j = 0; j < c->size[2]; j++)                                          \
          row[j * c->stride[2]] = beta == 0 ? (T)0 : (T)(beta * row[j * c->stride[2]]);   \
      }                                                                                   \
  }
CPU_SCALE(cpu_scale_f32, float)
CPU_SCALE(cpu_scale_f64, double)

/* OpenBLAS takes a work buffer (128 MiB on Debian's x86-64 build) for the calling thread
** and each worker it wakes, on first need, with mmap or malloc, and keeps them. When
** neither call succeeds it tries again, forever (0.3.21 memory.c): with the address space
** used up, the first product would hang. Where an allocation can fail for want of address
** space or commit charge (a finite RLIMIT_AS, or vm.overcommit_memory = 2), the room for
** every thread's buffer is checked first with a mapping of that size, unmapped at once:
** no room is an error, never a hang. Elsewhere (the usual case) nothing is checked. */
#define CPU_BLAS_BUFFER ((size_t)128 << 20)
#define CPU_BLAS_BUFFER_SLACK ((size_t)1 << 20)

static int cpu_overcommit_strict = -1;  /* -1: not read yet; the setting rarely changes */

static int cpu_blas_room(qt_err *err) {
  struct rlimit lim;
  bool bounded = getrlimit(RLIMIT_AS, &lim) == 0 && lim.rlim_cur != RLIM_INFINITY;
  int strict = __atomic_load_n(&cpu_overcommit_strict, __ATOMIC_RELAXED);
  if (strict < 0) {
    FILE *f = fopen("/proc/sys/vm/overcommit_memory", "r");
    int mode = 0;
    if (f != NULL) {
      if (fscanf(f, "%d", &mode) != 1) mode = 0;
      fclose(f);
    }
    strict = mode == 2;
    __atomic_store_n(&cpu_overcommit_strict, strict, __ATOMIC_RELAXED);
  }
  if (!bounded && !strict) return 0;
  /* OpenBLAS's threads, or (not loaded yet) the ones it will start with (cpu_matmul_blas.c) */
  const cpu_blas_api *blas = cpu_blas_loaded();
  int threads = blas != NULL ? (blas->get_num_threads != NULL ? blas->get_num_threads() : 1)
                             : cpu_threads();
  if (threads < 1) threads = 1;
  size_t need = (size_t)threads * (CPU_BLAS_BUFFER + CPU_BLAS_BUFFER_SLACK);
  void *p = mmap(NULL, need, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) {  /* the block cache may hold the room: give it back, try again */
    cpu_cache_release();
    p = mmap(NULL, need, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  }
  if (p != MAP_FAILED) {
    munmap(p, need);
    return 0;
  }
  return qt_errorf(err, "matmul: out of memory: OpenBLAS needs %zu MiB of address space for "
                   "its work buffers (%d thread%s x %zu MiB), and the process has no room "
                   "for them (%s); free tensors, or set OPENBLAS_NUM_THREADS=1",
                   need >> 20, threads, threads == 1 ? "" : "s", CPU_BLAS_BUFFER >> 20,
                   bounded ? "its address space is limited: ulimit -v" : "vm.overcommit_memory is 2");
}

/* c[b] = alpha * a[b] @ b[b] + beta * c[b] through cblas_?gemm, one call per batch.
** Operands BLAS cannot take as they are (a stride-0 or otherwise non-unit inner stride)
** are packed into a temporary, once per distinct batch pointer (a broadcast batch is
** packed once). */
int cpu_matmul(qt_device *dev, const qt_view *c, const qt_view *a, const qt_view *b,
               double alpha, double beta, bool allow_tf32, qt_err *err) {
  (void)dev;
  (void)allow_tf32;  /* no TF32 on the CPU */
  if (a->ndim != 3 || b->ndim != 3 || c->ndim != 3)
    return qt_errorf(err, "matmul: the device needs 3-D operands");
  qt_dtype dt = c->dtype;
  if ((dt != QT_F32 && dt != QT_F64) || a->dtype != dt || b->dtype != dt)
    return qt_errorf(err, "matmul: operands must be float32 or float64, of one dtype");
  int64_t batches = c->size[0], M = c->size[1], N = c->size[2], K = a->size[2];
  if (a->size[0] != batches || b->size[0] != batches || a->size[1] != M || b->size[1] != K ||
      b->size[2] != N)
    return qt_errorf(err, "matmul: operand shapes do not match");
  if (batches == 0 || M == 0 || N == 0) return 0;
  size_t es = qt_elsize(dt);
  if (K == 0) {  /* an empty sum: c = beta * c */
    if (beta == 1) return 0;
    if (dt == QT_F32) cpu_scale_f32(c, beta);
    else cpu_scale_f64(c, beta);
    return 0;
  }
  if (M > INT_MAX || N > INT_MAX || K > INT_MAX)
    return qt_errorf(err, "matmul: dimensions %lldx%lld @ %lldx%lld too large for BLAS",
                     (long long)M, (long long)K, (long long)K, (long long)N);
  cpu_blas_operand la = cpu_blas_layout(M, K, a->stride[1], a->stride[2]);
  cpu_blas_operand lb = cpu_blas_layout(K, N, b->stride[1], b->stride[2]);
  cpu_blas_operand lc = cpu_blas_layout(M, N, c->stride[1], c->stride[2]);
  if (!lc.usable || lc.transposed)
    return qt_errorf(err, "matmul: the result must be contiguous");
  bool need_a = !la.usable, need_b = !lb.usable;
  size_t bytes_a = 0, bytes_b = 0;
  if (__builtin_mul_overflow((size_t)M * (size_t)K, es, &bytes_a) ||
      __builtin_mul_overflow((size_t)K * (size_t)N, es, &bytes_b))
    return qt_errorf(err, "matmul: operands too large to pack");
  void *pack_a = need_a ? malloc(bytes_a) : NULL;
  void *pack_b = need_b ? malloc(bytes_b) : NULL;
  if ((need_a && pack_a == NULL) || (need_b && pack_b == NULL)) {
    free(pack_a);
    free(pack_b);
    return qt_errorf(err, "matmul: out of memory packing an operand (%zu bytes)",
                     need_a ? bytes_a : bytes_b);
  }
  /* the room first: loading OpenBLAS with no room left would hang in its start-up */
  const cpu_blas_api *blas = NULL;
  if (cpu_blas_room(err) != 0 || (blas = cpu_blas_get(err)) == NULL) {
    free(pack_a);
    free(pack_b);
    return -1;
  }
  if (need_a) la.usable = true, la.transposed = false, la.ld = K;
  if (need_b) lb.usable = true, lb.transposed = false, lb.ld = N;
  const char *packed_a_from = NULL, *packed_b_from = NULL;
  int restore = cpu_blas_enter((double)M * (double)N * (double)K);
  for (int64_t i = 0; i < batches; i++) {
    const char *pa = (const char *)a->data + (size_t)(i * a->stride[0]) * es;
    const char *pb = (const char *)b->data + (size_t)(i * b->stride[0]) * es;
    char *pc = (char *)c->data + (size_t)(i * c->stride[0]) * es;
    if (pack_a != NULL && pa != packed_a_from) {
      if (dt == QT_F32) cpu_pack_f32(pack_a, (const float *)pa, M, K, a->stride[1], a->stride[2]);
      else cpu_pack_f64(pack_a, (const double *)pa, M, K, a->stride[1], a->stride[2]);
      packed_a_from = pa;
    }
    if (pack_b != NULL && pb != packed_b_from) {
      if (dt == QT_F32) cpu_pack_f32(pack_b, (const float *)pb, K, N, b->stride[1], b->stride[2]);
      else cpu_pack_f64(pack_b, (const double *)pb, K, N, b->stride[1], b->stride[2]);
      packed_b_from = pb;
    }
    const void *ua = pack_a != NULL ? pack_a : pa, *ub = pack_b != NULL ? pack_b : pb;
    int ta = la.transposed ? CPU_CBLAS_TRANS : CPU_CBLAS_NO_TRANS;
    int tb = lb.transposed ? CPU_CBLAS_TRANS : CPU_CBLAS_NO_TRANS;
    if (dt == QT_F32)
      blas->sgemm(CPU_CBLAS_ROW_MAJOR, ta, tb, (int)M, (int)N, (int)K, (float)alpha,
                  (const float *)ua, (int)la.ld, (const float *)ub, (int)lb.ld, (float)beta,
                  (float *)pc, (int)lc.ld);
    else
      blas->dgemm(CPU_CBLAS_ROW_MAJOR, ta, tb, (int)M, (int)N, (int)K, alpha, (const double *)ua,
                  (int)la.ld, (const double *)ub, (int)lb.ld, beta, (double *)pc, (int)lc.ld);
  }
  cpu_blas_leave(restore);
  free(pack_a);
  free(pack_b);
  return 0;
}

