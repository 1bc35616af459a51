/*
** cpu_matmul_blas.c — the CPU's BLAS, loaded on the first product that needs it.
**
** Debian's OpenBLAS is built for every x86-64 kernel set (DYNAMIC_ARCH) and picks one from
** the CPU it finds when it loads; for CPUs newer than the build (0.3.21 does not know the
** Xeons of this machine or of the GPU host) it falls back to the Prescott kernels, SSE3
** only, several times slower than the AVX-512 ones. It reads OPENBLAS_CORETYPE when it
** loads, so qlua loads it itself (dlopen, as kernels/matmul.cu loads cuBLAS) after
** choosing the kernel set from cpuid, unless the user has set OPENBLAS_CORETYPE:
**   AVX-512 (F, BW, VL, DQ) with BF16   COOPERLAKE
**   AVX-512 (F, BW, VL, DQ)             SKYLAKEX
**   AVX2 and FMA                        HASWELL (Intel) or ZEN (AMD)
** and nothing otherwise (OpenBLAS's own choice). The variable is set for the load only and
** removed after it. QLUA_BLAS names the library to load (a path or a soname); by default
** libopenblas.so.0, then libblas.so.3 (any CBLAS). Loading also keeps the library's own
** start-up cost (its thread pool) out of processes that never multiply.
**
** Threads: OpenBLAS's pool is sized to qlua's (OPENBLAS_NUM_THREADS for the load, then
** cpu_blas_set_threads, from qlua.set_num_threads), so the two never ask for more threads
** than cores between them; a user's OPENBLAS_NUM_THREADS or OMP_NUM_THREADS wins.
*/
#include <dlfcn.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cpu/cpu_internal.h"

static cpu_blas_api cpu_blas;
static pthread_once_t cpu_blas_once = PTHREAD_ONCE_INIT;
static char cpu_blas_error[256];
static const char *cpu_blas_core = NULL;  /* the kernel set asked for, or NULL */
static bool cpu_blas_user_threads = false;  /* OPENBLAS_NUM_THREADS/OMP_NUM_THREADS given */

/* OpenBLAS's name for this CPU's best kernel set that 0.3.21 has, or NULL. */
static const char *cpu_blas_coretype(void) {
#if defined(__x86_64__) && defined(__GNUC__)
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
      __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq"))
    return __builtin_cpu_supports("avx512bf16") ? "COOPERLAKE" : "SKYLAKEX";
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
    return __builtin_cpu_is("amd") ? "ZEN" : "HASWELL";
#endif
  return NULL;
}

static void cpu_blas_load(void) {
  const char *user = getenv("QLUA_BLAS");
  const char *names[3] = { user, "libopenblas.so.0", "libblas.so.3" };
  bool set_core = getenv("OPENBLAS_CORETYPE") == NULL && (cpu_blas_core = cpu_blas_coretype()) != NULL;
  if (set_core) setenv("OPENBLAS_CORETYPE", cpu_blas_core, 0);
  /* OpenBLAS starts its pool at load: with qlua's size (unless the user sized it) */
  cpu_blas_user_threads = getenv("OPENBLAS_NUM_THREADS") != NULL || getenv("OMP_NUM_THREADS") != NULL;
  bool set_threads = !cpu_blas_user_threads;
  if (set_threads) {
    char n[16];
    snprintf(n, sizeof n, "%d", cpu_threads());
    setenv("OPENBLAS_NUM_THREADS", n, 0);
  }
  void *lib = NULL;
  const char *tried = NULL;
  for (int k = 0; k < 3 && lib == NULL; k++) {
    if (names[k] == NULL || names[k][0] == '\0') continue;
    tried = names[k];
    lib = dlopen(names[k], RTLD_NOW | RTLD_LOCAL);
    if (user != NULL && user[0] != '\0') break;  /* the user's choice, or nothing */
  }
  if (set_core) unsetenv("OPENBLAS_CORETYPE");
  if (set_threads) unsetenv("OPENBLAS_NUM_THREADS");
  if (lib == NULL) {
    const char *why = dlerror();
    snprintf(cpu_blas_error, sizeof cpu_blas_error,
             "cannot load a BLAS library (%s: %s; QLUA_BLAS may name one)",
             tried != NULL ? tried : "none", why != NULL ? why : "not found");
    return;
  }
  cpu_blas.sgemm = (cpu_sgemm_fn)dlsym(lib, "cblas_sgemm");
  cpu_blas.dgemm = (cpu_dgemm_fn)dlsym(lib, "cblas_dgemm");
  cpu_blas.get_num_threads = (int (*)(void))dlsym(lib, "openblas_get_num_threads");
  cpu_blas.set_num_threads = (void (*)(int))dlsym(lib, "openblas_set_num_threads");
  cpu_blas.corename = (char *(*)(void))dlsym(lib, "openblas_get_corename");
  if (cpu_blas.sgemm == NULL || cpu_blas.dgemm == NULL) {
    snprintf(cpu_blas_error, sizeof cpu_blas_error, "%s has no cblas_sgemm/cblas_dgemm", tried);
    memset(&cpu_blas, 0, sizeof cpu_blas);
    return;
  }
}

static _Atomic int cpu_blas_done = 0;

const cpu_blas_api *cpu_blas_loaded(void) {
  return atomic_load(&cpu_blas_done) && cpu_blas.sgemm != NULL ? &cpu_blas : NULL;
}

const cpu_blas_api *cpu_blas_get(qt_err *err) {
  pthread_once(&cpu_blas_once, cpu_blas_load);
  atomic_store(&cpu_blas_done, 1);
  if (cpu_blas.sgemm == NULL) {
    qt_errorf(err, "matmul: %s", cpu_blas_error);
    return NULL;
  }
  return &cpu_blas;
}

/* Who may change OpenBLAS's thread count: it is one number for the process, read as each
** call starts, so a product takes the lock shared and a change takes it alone. */
static pthread_rwlock_t cpu_blas_threads_lock = PTHREAD_RWLOCK_INITIALIZER;

/* Sizes OpenBLAS's pool to n when it is loaded (else the load does, from cpu_threads),
** unless the user sized it with OPENBLAS_NUM_THREADS or OMP_NUM_THREADS. */
void cpu_blas_set_threads(int n) {
  if (cpu_blas.set_num_threads == NULL || cpu_blas_user_threads) return;
  pthread_rwlock_wrlock(&cpu_blas_threads_lock);
  cpu_blas.set_num_threads(n);
  pthread_rwlock_unlock(&cpu_blas_threads_lock);
}

/* Small products on one thread: OpenBLAS 0.3.21 splits every call above 2^18 multiply-adds
** over its whole pool, and for the products of a small network's training step (a few
** 2^20) waking and parking 16 threads costs more than the product: on the GPU host's 16
** cores, one OpenBLAS thread took samples/classifier.lua's CPU step from 709 to 543 us,
** its threads having spent a quarter of the time in sched_yield. So a call of mnk
** multiply-adds gets one thread per 2^20 of them (at least one, at most the pool), set for
** the call when no other product is running (a product running elsewhere keeps the
** count; the call then runs with it). Returns the count to restore after, or 0. */
int cpu_blas_enter(double mnk) {
  if (cpu_blas.set_num_threads != NULL && cpu_blas.get_num_threads != NULL &&
      !cpu_blas_user_threads && pthread_rwlock_trywrlock(&cpu_blas_threads_lock) == 0) {
    int have = cpu_blas.get_num_threads();
    double want = mnk / (double)(1 << 20);
    if (want < 1) want = 1;
    if (want < (double)have) {
      cpu_blas.set_num_threads((int)want);
      return have;
    }
    return 0;   /* held alone all the same: cpu_blas_leave unlocks either way */
  }
  pthread_rwlock_rdlock(&cpu_blas_threads_lock);
  return 0;
}

void cpu_blas_leave(int restore) {
  if (restore > 0) cpu_blas.set_num_threads(restore);
  pthread_rwlock_unlock(&cpu_blas_threads_lock);
}

const char *cpu_blas_corename(void) {
  if (cpu_blas.corename != NULL) return cpu_blas.corename();
  if (cpu_blas_core == NULL && getenv("OPENBLAS_CORETYPE") == NULL) return cpu_blas_coretype();
  return cpu_blas_core;
}

const char *qt_cpu_blas_name(void) { return cpu_blas_corename(); }
