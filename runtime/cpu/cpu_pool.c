/*
** cpu_pool.c — the CPU device's threads: one pool, sized to the cores, that runs the
** chunks of a large op (cpu_parallel) while the calling thread works too.
**
** Our own pthread pool rather than OpenMP: the pool must be safe to call from any thread
** of an embedding program (two lua_States on two threads may both run ops: the second
** finds the pool busy and runs its chunks itself, rather than queueing behind or
** nesting), it must survive fork (a child starts with no workers and makes its own), and
** libgomp's spinning workers would compete with OpenBLAS's between ops. The pool takes
** chunks by an atomic counter, so uneven chunks balance; which thread runs a chunk never
** changes what it computes (callers choose chunk boundaries that do not depend on the
** thread count: results are the same for 1 and N threads).
**
** The size: QLUA_NUM_THREADS, else the CPUs this process may run on (sched_getaffinity),
** at most CPU_MAX_THREADS; qlua.set_num_threads(n) changes it (1: every op on the calling
** thread, as before the pool; OpenBLAS follows, cpu_device.c). Workers start on the first
** parallel op and sleep on a condition variable between ops.
*/
#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cpu/cpu.h"
#include "cpu/cpu_internal.h"

#define CPU_MAX_THREADS 256

typedef struct cpu_job {
  void (*fn)(void *arg, int64_t chunk);
  void *arg;
  int64_t nchunks;
  _Atomic int64_t next;      /* the next chunk to take */
  _Atomic int64_t finished;  /* chunks done */
  int joined;                /* workers inside the job (under the pool lock) */
} cpu_job;

static struct {
  pthread_mutex_t lock;
  pthread_cond_t wake;       /* a job is posted (or quit) */
  pthread_cond_t done;       /* a job's last chunk ended, or a worker left it */
  pthread_mutex_t submit;    /* one job at a time; others run their chunks inline */
  int threads;               /* wanted, the caller included; 0: not read yet */
  int started;               /* workers running */
  bool quit;                 /* the process is exiting: workers return */
  uint64_t generation;       /* bumped per job */
  cpu_job *job;              /* the posted job, or NULL */
  pthread_t workers[CPU_MAX_THREADS];
} cpu_pool = { PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, PTHREAD_COND_INITIALIZER,
               PTHREAD_MUTEX_INITIALIZER, 0, 0, false, 0, NULL, { 0 } };

static _Thread_local bool cpu_pool_inside = false;  /* this thread runs a chunk now */
static pthread_once_t cpu_pool_once = PTHREAD_ONCE_INIT;

static int cpu_pool_cores(void) {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof set, &set) == 0) {
    int n = CPU_COUNT(&set);
    if (n > 0) return n;
  }
  long n = sysconf(_SC_NPROCESSORS_ONLN);
  return n > 0 ? (int)n : 1;
}

static int cpu_pool_clamp(long n) {
  return n < 1 ? 1 : n > CPU_MAX_THREADS ? CPU_MAX_THREADS : (int)n;
}

/* fork: the child has no workers (only the forking thread survives), and a lock held by
** another thread at the fork would never be released; start the pool afresh. */
static void cpu_pool_after_fork(void) {
  pthread_mutex_init(&cpu_pool.lock, NULL);
  pthread_mutex_init(&cpu_pool.submit, NULL);
  pthread_cond_init(&cpu_pool.wake, NULL);
  pthread_cond_init(&cpu_pool.done, NULL);
  cpu_pool.started = 0;
  cpu_pool.job = NULL;
}

/* At exit the workers are told to return and are joined, so that no thread is left
** running (valgrind counts a live thread's bookkeeping as possibly lost). */
static void cpu_pool_stop(void) {
  pthread_mutex_lock(&cpu_pool.lock);
  cpu_pool.quit = true;
  int started = cpu_pool.started;
  pthread_cond_broadcast(&cpu_pool.wake);
  pthread_mutex_unlock(&cpu_pool.lock);
  for (int k = 0; k < started; k++) pthread_join(cpu_pool.workers[k], NULL);
  pthread_mutex_lock(&cpu_pool.lock);
  cpu_pool.started = 0;
  pthread_mutex_unlock(&cpu_pool.lock);
}

static void cpu_pool_init(void) {
  int n = cpu_pool_cores();
  const char *env = getenv("QLUA_NUM_THREADS");
  if (env != NULL && *env != '\0') {
    char *end = NULL;
    long v = strtol(env, &end, 10);
    if (end != NULL && *end == '\0' && v > 0) n = (int)v;
  }
  cpu_pool.threads = cpu_pool_clamp(n);
  pthread_atfork(NULL, NULL, cpu_pool_after_fork);
  atexit(cpu_pool_stop);
}

int cpu_threads(void) {
  pthread_once(&cpu_pool_once, cpu_pool_init);
  return __atomic_load_n(&cpu_pool.threads, __ATOMIC_RELAXED);
}

int cpu_pool_set_threads(int n) {
  pthread_once(&cpu_pool_once, cpu_pool_init);
  n = cpu_pool_clamp(n);
  __atomic_store_n(&cpu_pool.threads, n, __ATOMIC_RELAXED);
  return n;
}

int qt_cpu_threads(void) { return cpu_threads(); }

/* Runs chunks of job until none is left. */
static void cpu_job_work(cpu_job *job) {
  bool was_inside = cpu_pool_inside;
  cpu_pool_inside = true;
  for (;;) {
    int64_t c = atomic_fetch_add(&job->next, 1);
    if (c >= job->nchunks) break;
    job->fn(job->arg, c);
    if (atomic_fetch_add(&job->finished, 1) + 1 == job->nchunks) {
      pthread_mutex_lock(&cpu_pool.lock);
      pthread_cond_broadcast(&cpu_pool.done);
      pthread_mutex_unlock(&cpu_pool.lock);
    }
  }
  cpu_pool_inside = was_inside;
}

static void *cpu_worker(void *arg) {
  int index = (int)(intptr_t)arg;  /* 1 .. started: the caller is 0 */
  uint64_t seen = 0;
  pthread_mutex_lock(&cpu_pool.lock);
  for (;;) {
    while (!cpu_pool.quit && (cpu_pool.generation == seen || cpu_pool.job == NULL ||
                              index >= __atomic_load_n(&cpu_pool.threads, __ATOMIC_RELAXED))) {
      if (cpu_pool.generation != seen && cpu_pool.job == NULL) seen = cpu_pool.generation;
      pthread_cond_wait(&cpu_pool.wake, &cpu_pool.lock);
    }
    if (cpu_pool.quit) break;
    seen = cpu_pool.generation;
    cpu_job *job = cpu_pool.job;
    job->joined++;
    pthread_mutex_unlock(&cpu_pool.lock);
    cpu_job_work(job);
    pthread_mutex_lock(&cpu_pool.lock);
    job->joined--;
    pthread_cond_broadcast(&cpu_pool.done);
  }
  pthread_mutex_unlock(&cpu_pool.lock);
  return NULL;
}

/* Starts workers up to threads - 1 (lock held). Fewer when the system refuses. */
static void cpu_pool_grow(int threads) {
  while (cpu_pool.started < threads - 1) {
    if (cpu_pool.quit) break;
    int rc = pthread_create(&cpu_pool.workers[cpu_pool.started], NULL, cpu_worker,
                            (void *)(intptr_t)(cpu_pool.started + 1));
    if (rc != 0) break;
    cpu_pool.started++;
  }
}

void cpu_parallel(int64_t nchunks, void (*fn)(void *arg, int64_t chunk), void *arg) {
  int threads = cpu_threads();
  if (nchunks <= 0) return;
  /* one chunk, one thread, a chunk of a running job (no nesting), or the pool busy with
  ** another thread's job: the chunks run here, in order */
  if (nchunks == 1 || threads <= 1 || cpu_pool_inside ||
      pthread_mutex_trylock(&cpu_pool.submit) != 0) {
    for (int64_t c = 0; c < nchunks; c++) fn(arg, c);
    return;
  }
  cpu_job job;
  job.fn = fn;
  job.arg = arg;
  job.nchunks = nchunks;
  atomic_init(&job.next, 0);
  atomic_init(&job.finished, 0);
  job.joined = 0;
  pthread_mutex_lock(&cpu_pool.lock);
  cpu_pool_grow(threads);
  cpu_pool.job = &job;
  cpu_pool.generation++;
  pthread_cond_broadcast(&cpu_pool.wake);
  pthread_mutex_unlock(&cpu_pool.lock);

  cpu_job_work(&job);

  pthread_mutex_lock(&cpu_pool.lock);
  while (atomic_load(&job.finished) < nchunks || job.joined > 0)
    pthread_cond_wait(&cpu_pool.done, &cpu_pool.lock);
  cpu_pool.job = NULL;  /* a worker waking late finds no job */
  pthread_mutex_unlock(&cpu_pool.lock);
  pthread_mutex_unlock(&cpu_pool.submit);
}
