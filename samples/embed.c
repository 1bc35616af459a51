/*
** samples/embed.c — qlua inside your own C program.
**
**   make embed            (builds build/embed from this file and the runtime's objects, runs it)
**   build/embed [--threads [N]]
**
** What it shows, in order:
**   1. Opening the runtime in a lua_State of your own: luaL_requiref(L, "qlua",
**      luaopen_qlua, 1). Each state gets its own tensor context (random seed, current GPU,
**      the device-memory accounting that drives that state's garbage collector).
**   2. Two independent states side by side: their tensors, their random streams.
**   3. Reading a tensor that lives in Lua from C (qlua_totensor / qlua_checktensor: a
**      *borrowed* pointer), and keeping it past the state's lifetime with a reference of
**      your own (qt_tensor_share ... qt_tensor_release).
**   4. Handing memory of your own to Lua as a tensor (qlua_pushtensor *moves* a reference
**      in), with a release callback that tells you when Lua is done with it.
**   5. Closing one state: its tensors are freed (lua_close runs every __gc), device
**      memory included, and the other state carries on.
**   With --threads [N], two states also run at the same time on two threads, and then
**   6. References of your own crossing threads: N times, a reference taken with
**      qt_tensor_share is handed to another thread and released there while the state
**      keeps using, freeing and collecting the tensor (embed_cross_thread).
**
** It is also the embedding-safety test (spec/host/embed_spec.lua runs it; make asan and make
** valgrind run it under the sanitizers, make tsan under ThreadSanitizer): every check that fails prints "embed: FAILED:
** ..." and the exit status is 1. On success the last line is "embed: ok".
**
** Ownership rules, as runtime/qlua.h states them:
**   - A tensor pushed to Lua belongs to Lua; qlua_pushtensor leaves the caller's
**     qt_tensor empty. Lua gives the reference back in __gc / __close / t:free().
**   - A pointer from qlua_totensor / qlua_checktensor is borrowed: valid while the
**     userdata is reachable from Lua. Never release it.
**   - To keep a tensor beyond that, take a reference (qt_tensor_share) and drop it with
**     qt_tensor_release. The storage, and the state context it is charged to, stay
**     alive until then, even across lua_close.
**   - A state and its borrowed pointers belong to one thread at a time. A reference of
**     your own may be handed to another thread (with your own synchronisation) and
**     released there; the last release frees, on its thread, and runs a lent block's
**     release callback there (see qlua.h, "Threads").
*/
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <lauxlib.h>
#include <lua.h>
#include <lualib.h>

#include "device.h"
#include "qlua.h"

static int failures = 0;

#define CHECK(cond, ...)                                          \
  do {                                                            \
    if (!(cond)) {                                                \
      fprintf(stderr, "embed: FAILED (line %d): ", __LINE__);     \
      fprintf(stderr, __VA_ARGS__);                               \
      fputc('\n', stderr);                                        \
      failures++;                                                 \
    }                                                             \
  } while (0)

/* ======================================================================== Lua helpers */

/* A state with the standard libraries and the runtime as the global `qlua` (what the
** qlua host does). luaL_requiref runs luaopen_qlua in protected mode only if we are;
** we call it through lua_pcall so an error there is reported, not a panic. */
static int embed_open_protected(lua_State *L) {
  luaL_openlibs(L);
  luaL_requiref(L, "qlua", luaopen_qlua, 1);  /* also sets package.loaded.qlua */
  lua_pop(L, 1);
  return 0;
}

static lua_State *embed_open(const char *name) {
  lua_State *L = luaL_newstate();
  if (L == NULL) {
    fprintf(stderr, "embed: %s: cannot create a Lua state\n", name);
    return NULL;
  }
  lua_pushcfunction(L, embed_open_protected);
  if (lua_pcall(L, 0, 0, 0) != LUA_OK) {
    fprintf(stderr, "embed: %s: opening qlua failed: %s\n", name, lua_tostring(L, -1));
    lua_close(L);
    return NULL;
  }
  return L;
}

/* Runs a chunk; its results (at most one kept) are left on the stack. Returns 0, or -1
** after printing the error with a traceback. */
static int embed_msghandler(lua_State *L) {
  luaL_traceback(L, L, luaL_tolstring(L, 1, NULL), 1);
  return 1;
}

static int embed_run(lua_State *L, const char *what, const char *code) {
  int base = lua_gettop(L);
  lua_pushcfunction(L, embed_msghandler);
  int status = luaL_loadbuffer(L, code, strlen(code), what);
  if (status == LUA_OK) status = lua_pcall(L, 0, 1, base + 1);
  if (status != LUA_OK) {
    fprintf(stderr, "embed: FAILED: %s: %s\n", what, lua_tostring(L, -1));
    failures++;
    lua_settop(L, base);
    return -1;
  }
  lua_remove(L, base + 1);  /* the message handler; the result stays */
  return 0;
}

/* The integer a chunk returns ("return expr"), or -1 on error. */
static lua_Integer embed_integer(lua_State *L, const char *what, const char *code) {
  if (embed_run(L, what, code) != 0) return -1;
  int isint;
  lua_Integer v = lua_tointegerx(L, -1, &isint);
  lua_pop(L, 1);
  if (!isint) {
    fprintf(stderr, "embed: FAILED: %s did not return an integer\n", what);
    failures++;
    return -1;
  }
  return v;
}

/* Live bytes of a device as the runtime counts them, seen from state L. */
static lua_Integer embed_allocated(lua_State *L, const char *device) {
  char code[128];
  snprintf(code, sizeof code, "return qlua.memory('%s').allocated", device);
  return embed_integer(L, "memory", code);
}

/* ======================================================================== host memory */

/* Memory the C program owns, lent to Lua as a float32 tensor. `released` counts calls
** of the release callback: the runtime makes exactly one, when the last reference goes
** (or at t:free()), and never touches the bytes afterwards. */
typedef struct embed_buffer {
  float values[6];
  int released;
} embed_buffer;

static void embed_buffer_release(void *ud, void *data) {
  embed_buffer *buf = (embed_buffer *)ud;
  if (data != buf->values) failures++;  /* the runtime must give back what it was lent */
  buf->released++;
}

/* Wraps buf as a 2x3 float32 CPU tensor and pushes it (moving our one reference in).
** Runs under lua_pcall: qlua_pushtensor can raise (out of memory, or no luaopen_qlua in
** this state), and then it has already released the reference, so nothing leaks. */
static int embed_push_buffer(lua_State *L) {
  embed_buffer *buf = (embed_buffer *)lua_touserdata(L, 1);
  qt_storage *s = qt_storage_wrap(qt_cpu_device(), buf->values, sizeof buf->values,
                                  embed_buffer_release, buf);
  if (s == NULL) return luaL_error(L, "embed: out of memory");
  qt_tensor t;
  qt_tensor_init(&t);
  t.storage = s;                   /* our reference */
  t.dtype = QT_F32;
  t.ndim = 2;
  t.size[0] = 2;
  t.size[1] = 3;
  t.stride[0] = 3;
  t.stride[1] = 1;
  qlua_pushtensor(L, &t);          /* the reference moves into the userdata */
  if (t.storage != NULL) return luaL_error(L, "embed: qlua_pushtensor left the reference");
  return 1;
}

/* Pushes buf as a tensor into L's global `name`; 0 on success, else -1 with the error
** message copied to why. */
static int embed_lend(lua_State *L, embed_buffer *buf, const char *name, char *why, size_t len) {
  lua_pushcfunction(L, embed_push_buffer);
  lua_pushlightuserdata(L, buf);
  if (lua_pcall(L, 1, 1, 0) != LUA_OK) {
    snprintf(why, len, "%s", lua_tostring(L, -1));
    lua_pop(L, 1);
    return -1;
  }
  lua_setglobal(L, name);
  return 0;
}

/* qlua_checktensor on a non-tensor raises the standard "bad argument" error. */
static int embed_check_number(lua_State *L) {
  qlua_checktensor(L, 1);
  return 0;
}

/* ======================================================================== the checks */

/* Two states, tensors in both, independent random streams. */
static void embed_two_states(lua_State *A, lua_State *B) {
  embed_run(A, "A: tensors", "x = qlua.rand(256, 256); v = x:narrow(1, 3, 10):t()\n"
                             "kept = qlua.range(1, 10, {dtype = 'float32'})\n"
                             "assert(#v == 256 and v:dim() == 2)");
  embed_run(B, "B: tensors", "y = qlua.ones(128, 128, {dtype = 'float64'})\n"
                             "assert(y:sum() == 128 * 128)");
  /* The random streams are per state: seeding A does not move B's. */
  embed_run(A, "A: seed", "qlua.seed(7); a1 = qlua.rand(5)");
  embed_run(B, "B: seed", "qlua.seed(7); b1 = qlua.rand(5)");
  embed_run(A, "A: second draw", "a2 = qlua.rand(5):totable()");
  embed_run(B, "B: same draws",
            "local b2 = qlua.rand(5):totable()\n"
            "qlua.seed(7); local c1 = qlua.rand(5); local c2 = qlua.rand(5):totable()\n"
            "assert((b1 - c1):abs():max() == 0, 'B: first draw differs')\n"
            "for i = 1, 5 do assert(b2[i] == c2[i], 'B: second draw differs') end\n"
            "B_second = b2");
  /* the same seed and call sequence in A gives the same numbers as in B */
  lua_getglobal(A, "a2");
  lua_getglobal(B, "B_second");
  for (int i = 1; i <= 5; i++) {
    lua_geti(A, -1, i);
    lua_geti(B, -1, i);
    CHECK(lua_tonumber(A, -1) == lua_tonumber(B, -1), "states A and B drew different numbers "
          "from the same seed at position %d", i);
    lua_pop(A, 1);
    lua_pop(B, 1);
  }
  lua_pop(A, 1);
  lua_pop(B, 1);
}

/* Borrowed pointers, and a reference of our own that outlives the state. */
static void embed_borrow(lua_State *A, qt_tensor *kept) {
  lua_getglobal(A, "kept");
  qt_tensor *t = qlua_totensor(A, -1);          /* borrowed: valid while `kept` is */
  CHECK(t != NULL, "qlua_totensor(kept) is NULL");
  if (t != NULL) {
    CHECK(qt_numel(t) == 10 && t->dtype == QT_F32, "kept has %lld elements",
          (long long)qt_numel(t));
    qt_tensor_share(kept, t);                   /* ours now: released in main */
  }
  lua_pop(A, 1);

  lua_pushinteger(A, 42);
  CHECK(qlua_totensor(A, -1) == NULL, "qlua_totensor(42) is not NULL");
  lua_pop(A, 1);

  lua_pushcfunction(A, embed_check_number);
  lua_pushinteger(A, 42);
  int status = lua_pcall(A, 1, 0, 0);
  CHECK(status == LUA_ERRRUN && strstr(lua_tostring(A, -1), "qlua.Tensor expected") != NULL,
        "qlua_checktensor(42) did not raise a type error (%s)", lua_tostring(A, -1));
  lua_pop(A, 1);
}

/* Memory of our own as a tensor: Lua computes on it in place, then gives it back. */
static void embed_lend_memory(lua_State *B) {
  static embed_buffer buf = { { 1, 2, 3, 4, 5, 6 }, 0 };
  char why[256];
  if (embed_lend(B, &buf, "host", why, sizeof why) != 0) {
    CHECK(0, "lending memory to B: %s", why);
    return;
  }
  embed_run(B, "B: host tensor",
            "assert(host:dtype() == 'float32' and host:size(1) == 2 and host:size(2) == 3)\n"
            "assert(host:sum() == 21, 'sum of the lent memory')\n"
            "host:mul_(2)\n"
            "local col = host:select(2, 1)   -- a view: another reference to the same memory\n"
            "assert(col[2] == 8)\n"
            "host = nil; col = nil; collectgarbage(); collectgarbage()");
  CHECK(buf.values[0] == 2.0f && buf.values[5] == 12.0f, "mul_ did not write the lent memory");
  CHECK(buf.released == 1, "release callback ran %d times after the last reference went "
        "(expected 1)", buf.released);

  /* t:free() gives it back at once; the collector later only drops the struct. */
  static embed_buffer buf2 = { { 0 }, 0 };
  if (embed_lend(B, &buf2, "host2", why, sizeof why) != 0) {
    CHECK(0, "lending memory to B: %s", why);
    return;
  }
  embed_run(B, "B: free lent memory",
            "local view = host2:view(6)\n"
            "host2:free()\n"
            "local ok, err = pcall(function() return view:sum() end)\n"
            "assert(not ok and err:find('sum: tensor has been freed'), err)");
  CHECK(buf2.released == 1, "t:free() on lent memory: release ran %d times (expected 1)",
        buf2.released);
  embed_run(B, "B: collect", "host2 = nil; collectgarbage(); collectgarbage()");
  CHECK(buf2.released == 1, "release ran again after t:free() (%d times)", buf2.released);

  /* A state without the runtime refuses the tensor, and the reference is released. */
  static embed_buffer buf3 = { { 0 }, 0 };
  lua_State *bare = luaL_newstate();
  if (bare != NULL) {
    CHECK(embed_lend(bare, &buf3, "x", why, sizeof why) != 0 &&
          strstr(why, "luaopen_qlua has not been called") != NULL,
          "qlua_pushtensor in a state without qlua: %s", why);
    CHECK(buf3.released == 1, "refused push: release ran %d times (expected 1)", buf3.released);
    lua_close(bare);
  }
}

/* Closing A frees everything A held (device memory too), and B carries on. */
static void embed_close_one(lua_State **A, lua_State *B, qt_tensor *kept, int gpus) {
  lua_Integer a_cpu = embed_integer(*A, "A: bytes",
                                    "return x:numel() * 4 + kept:numel() * 4 + a1:numel() * 4");
  lua_Integer a_gpu = 0;
  if (gpus > 0)
    a_gpu = embed_integer(*A, "A: gpu tensors",
                          "g = qlua.rand(1024, 1024, {device = 'gpu'}); gv = g:t()\n"
                          "return g:numel() * 4");
  if (gpus > 0)
    embed_run(B, "B: gpu tensors", "h = qlua.ones(512, 512, {device = 'gpu'}) * 2\n"
                                   "assert(h:sum() == 2 * 512 * 512)");
  /* A view of freed storage and a <close> variable, to be finalised by lua_close */
  embed_run(*A, "A: freed views", "local w = x:narrow(2, 1, 5); z = w:t(); x:free()\n"
                                  "do local c <close> = qlua.zeros(3) end");

  lua_Integer cpu_before = embed_allocated(B, "cpu");
  lua_Integer gpu_before = gpus > 0 ? embed_allocated(B, "gpu") : 0;
  lua_close(*A);                                 /* runs every __gc of A */
  *A = NULL;
  lua_Integer cpu_after = embed_allocated(B, "cpu");
  /* x was freed already (x:free()); kept is still ours, so A's other bytes come back */
  lua_Integer expect_drop = a_cpu - 256 * 256 * 4 - 10 * 4;
  CHECK(cpu_before - cpu_after >= expect_drop, "closing A gave back %lld CPU bytes, expected "
        "at least %lld", (long long)(cpu_before - cpu_after), (long long)expect_drop);
  if (gpus > 0) {
    lua_Integer gpu_after = embed_allocated(B, "gpu");
    CHECK(gpu_before - gpu_after >= a_gpu, "closing A gave back %lld GPU bytes, expected %lld",
          (long long)(gpu_before - gpu_after), (long long)a_gpu);
  }

  /* Our own reference outlived A: its bytes are intact and still counted. */
  const float *values = (const float *)kept->storage->data + kept->offset;
  float sum = 0;
  for (int i = 0; i < 10; i++) sum += values[i * kept->stride[0]];
  CHECK(sum == 55.0f, "the tensor kept past lua_close sums to %g, not 55", (double)sum);
  cpu_before = embed_allocated(B, "cpu");
  qt_tensor_release(kept);                       /* the last reference: bytes go back */
  cpu_after = embed_allocated(B, "cpu");
  CHECK(cpu_before - cpu_after == 40, "releasing the kept tensor gave back %lld bytes, not 40",
        (long long)(cpu_before - cpu_after));

  /* B is unaffected */
  embed_run(B, "B: after A closed",
            "assert(y:sum() == 128 * 128)\n"
            "local m = qlua.rand(64, 32):matmul(qlua.rand(32, 16))\n"
            "assert(m:size(1) == 64 and m:size(2) == 16)\n"
            "local idx = qlua.randint(1, 100, 1000)\n"
            "assert(qlua.range(1, 100):gather(idx):sum() == idx:sum())");
  if (gpus > 0)
    embed_run(B, "B: gpu after A closed",
              "assert(h:sum() == 2 * 512 * 512); assert((h:cpu() - 2):abs():max() == 0)");
}

/* ======================================================================== threads */

/* --threads, part 1: each thread owns one state from start to end (a lua_State must never
** be used by two threads at once), and both run tensor code at the same time. */
typedef struct embed_thread {
  const char *name;
  int ok;
} embed_thread;

static void *embed_thread_main(void *arg) {
  embed_thread *th = (embed_thread *)arg;
  lua_State *L = embed_open(th->name);
  th->ok = 0;
  if (L == NULL) return NULL;
  int before = failures;
  embed_run(L, th->name,
            "for i = 1, 200 do\n"
            "  local a = qlua.rand(64, 64)\n"
            "  local b = a:t():contiguous() + 1\n"
            "  local i64 = qlua.randint(1, 64 * 64, 500)\n"
            "  assert(a:take(i64):numel() == 500)\n"
            "  assert(a:matmul(b):size(1) == 64)\n"
            "  if i % 50 == 0 then collectgarbage() end\n"
            "end");
  lua_close(L);
  th->ok = failures == before;
  return NULL;
}

static void embed_threads(void) {
  embed_thread th[2] = { { "thread 1", 0 }, { "thread 2", 0 } };
  pthread_t tid[2];
  int started = 0;
  for (int i = 0; i < 2; i++)
    if (pthread_create(&tid[i], NULL, embed_thread_main, &th[i]) == 0) started++;
  for (int i = 0; i < started; i++) pthread_join(tid[i], NULL);
  CHECK(started == 2 && th[0].ok && th[1].ok, "the threaded states did not both succeed");
}

/* --threads, part 2: references kept with qt_tensor_share and released on other threads
** (what qlua.h allows across threads). The main thread owns a state; each iteration it
** makes a tensor in Lua, takes one or two references of its own and hands them through a
** queue to two releaser threads, then keeps using the tensor in Lua: views (a retain on
** this thread), sum, mul_, sometimes t:free(), dropping it and collecting (a release on
** this thread). So the state's releases race the releasers' and either side may drop the
** last reference; every few iterations the tensor is memory lent by us (qt_storage_wrap),
** whose release callback then runs on whichever thread that is. At the end some
** references are still held by the releasers when the state is closed: their storages
** and the state's context are freed by a releaser. Checks: each lent block released
** exactly once, the CPU device's byte count back where it started. make tsan runs this
** under ThreadSanitizer; make asan and make valgrind too. */
#define EMBED_QUEUE 16
#define EMBED_LENT 8      /* lent blocks in flight, reused round-robin */
#define EMBED_KEEP 6      /* references still held when the state closes */
#define EMBED_RELEASERS 2

typedef struct embed_ref {
  qt_tensor t;
  int keep;               /* release only after the state is closed */
} embed_ref;

typedef struct embed_queue {
  pthread_mutex_t lock;
  pthread_cond_t changed;
  embed_ref ring[EMBED_QUEUE];
  int head, count;
  int closed;             /* set after lua_close: the releasers drop what they kept and end */
  int kept_released;      /* references the releasers dropped after the close */
} embed_queue;

typedef struct embed_lent {
  float values[1024];     /* 4 KiB: the size where the core's CPU GC pacing starts */
  atomic_int released;    /* release callbacks run (by any thread) */
  atomic_int off_thread;  /* ... of which on a releaser thread */
  int generation;         /* lends so far (main thread only) */
} embed_lent;

static _Thread_local int embed_is_releaser = 0;

static void embed_lent_release(void *ud, void *data) {
  embed_lent *b = (embed_lent *)ud;
  /* the runtime gives back what it was lent (else the count check below fails) */
  atomic_fetch_add(&b->released, data == b->values ? 1 : 1000);
  if (embed_is_releaser) atomic_fetch_add(&b->off_thread, 1);
}

/* Moves *ref into the queue (waits while it is full); *ref then holds nothing. */
static void embed_queue_put(embed_queue *q, qt_tensor *ref, int keep) {
  pthread_mutex_lock(&q->lock);
  while (q->count == EMBED_QUEUE) pthread_cond_wait(&q->changed, &q->lock);
  embed_ref *slot = &q->ring[(q->head + q->count) % EMBED_QUEUE];
  slot->t = *ref;
  slot->keep = keep;
  q->count++;
  pthread_cond_broadcast(&q->changed);
  pthread_mutex_unlock(&q->lock);
  qt_tensor_init(ref);
}

static void *embed_releaser_main(void *arg) {
  embed_queue *q = (embed_queue *)arg;
  embed_is_releaser = 1;
  qt_tensor kept[EMBED_KEEP];
  int nkept = 0;
  unsigned spin = 0;
  for (;;) {
    pthread_mutex_lock(&q->lock);
    while (q->count == 0 && !q->closed) pthread_cond_wait(&q->changed, &q->lock);
    if (q->count == 0) {
      pthread_mutex_unlock(&q->lock);
      break;
    }
    embed_ref r = q->ring[q->head];
    q->head = (q->head + 1) % EMBED_QUEUE;
    q->count--;
    pthread_cond_broadcast(&q->changed);
    pthread_mutex_unlock(&q->lock);
    if (r.keep && nkept < EMBED_KEEP) {
      kept[nkept++] = r.t;
      continue;
    }
    /* a varying delay, so the release lands before, during or after the state's use */
    for (volatile unsigned k = 0; k < (spin = spin * 1103515245u + 12345u) % 4096u; k++) {
    }
    qt_tensor_release(&r.t);
  }
  for (int i = 0; i < nkept; i++) qt_tensor_release(&kept[i]);  /* the state is closed */
  pthread_mutex_lock(&q->lock);
  q->kept_released += nkept;
  pthread_mutex_unlock(&q->lock);
  return NULL;
}

/* Pushes the tensor passed as a light userdata (moving its reference in); under pcall. */
static int embed_push_tensor(lua_State *L) {
  qt_tensor *t = (qt_tensor *)lua_touserdata(L, 1);
  return qlua_pushtensor(L, t);
}

/* Calls global function `fn`(i) in L; its one result is left on the stack. 0 or -1. */
static int embed_call(lua_State *L, const char *fn, lua_Integer i) {
  lua_pushcfunction(L, embed_msghandler);
  lua_getglobal(L, fn);
  lua_pushinteger(L, i);
  if (lua_pcall(L, 1, 1, -3) != LUA_OK) {
    fprintf(stderr, "embed: FAILED: cross-thread %s(%lld): %s\n", fn, (long long)i,
            lua_tostring(L, -1));
    failures++;
    lua_pop(L, 2);
    return -1;
  }
  lua_remove(L, -2);
  return 0;
}

static void embed_cross_thread(int iterations) {
  static embed_queue q = { PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER,
                           { { { 0 }, 0 } }, 0, 0, 0, 0 };
  static embed_lent lent[EMBED_LENT];
  int64_t cpu_start = qt_cpu_allocated();
  lua_State *L = embed_open("cross-thread");
  if (L == NULL) {
    failures++;
    return;
  }
  pthread_t tid[EMBED_RELEASERS];
  int started = 0;
  for (int i = 0; i < EMBED_RELEASERS; i++)
    if (pthread_create(&tid[i], NULL, embed_releaser_main, &q) == 0) started++;
  CHECK(started == EMBED_RELEASERS, "could not start the releaser threads");

  embed_run(L, "cross-thread: functions",
            "function make(i)  -- the tensor to share: 16 floats to 8 KiB\n"
            "  cur = qlua.rand(16 + (i * 37) % 2000)\n"
            "  return cur\n"
            "end\n"
            "function use(i)   -- what the state does while the releasers release\n"
            "  local t = cur\n"
            "  local v = t:narrow(1, 1, 8)   -- a view: a retain here\n"
            "  local s = v:sum() + t:sum()\n"
            "  t:mul_(2)\n"
            "  if i % 5 == 0 then t:free() end\n"
            "  if i % 3 ~= 0 then cur = nil end\n"
            "  t = nil; v = nil\n"
            "  if i % 7 == 0 then collectgarbage() elseif i % 2 == 0 then collectgarbage('step') end\n"
            "  return s\n"
            "end\n"
            "function use_lent(i)\n"
            "  local w = lent:view(32, 32):t()\n"
            "  lent:add_(1)\n"
            "  local s = w:sum()\n"
            "  lent = nil; w = nil\n"
            "  if i % 2 == 0 then collectgarbage() end\n"
            "  return s\n"
            "end");
  int lends = 0;
  for (int i = 1; i <= iterations + EMBED_KEEP && failures == 0; i++) {
    int keep = i > iterations;  /* the last few: held across lua_close */
    qt_tensor ref;
    qt_tensor_init(&ref);
    /* every 4th a lent block; of the kept ones, half lent and half the runtime's (those
    ** hold references on the state's context, so its last release is a releaser's) */
    if (keep ? i % 2 == 0 : i % 4 == 0) {
      /* memory of our own, lent to Lua; one reference shared out */
      embed_lent *b = &lent[lends++ % EMBED_LENT];
      /* a block lent before is reused once its release has run (Lua collected it and
      ** the releaser dropped its reference, in either order) */
      long waits = 0;
      while (atomic_load(&b->released) != b->generation && waits++ < 200000) {
        lua_gc(L, LUA_GCCOLLECT, 0);
        sched_yield();
      }
      if (atomic_load(&b->released) != b->generation) {
        CHECK(0, "lent block %d: release never ran (%d of %d)", (int)(b - lent),
              atomic_load(&b->released), b->generation);
        break;
      }
      for (int k = 0; k < 1024; k++) b->values[k] = (float)k;
      b->generation++;
      qt_storage *s = qt_storage_wrap(qt_cpu_device(), b->values, sizeof b->values,
                                      embed_lent_release, b);
      if (s == NULL) {
        CHECK(0, "qt_storage_wrap: out of memory");
        break;
      }
      qt_tensor t;
      qt_tensor_init(&t);
      t.storage = s;
      t.dtype = QT_F32;
      t.ndim = 1;
      t.size[0] = 1024;
      t.stride[0] = 1;
      qt_tensor_share(&ref, &t);           /* ours, for a releaser */
      lua_pushcfunction(L, embed_push_tensor);
      lua_pushlightuserdata(L, &t);
      if (lua_pcall(L, 1, 1, 0) != LUA_OK) {  /* t's reference is released either way */
        CHECK(0, "lending memory: %s", lua_tostring(L, -1));
        lua_pop(L, 1);
        qt_tensor_release(&ref);
        break;
      }
      lua_setglobal(L, "lent");
      embed_queue_put(&q, &ref, keep);
      if (embed_call(L, "use_lent", i) == 0) lua_pop(L, 1);
    } else {
      if (embed_call(L, "make", i) != 0) break;
      qt_tensor *t = qlua_totensor(L, -1);  /* borrowed: the value is on the stack */
      CHECK(t != NULL, "make(%d) did not return a tensor", i);
      if (t == NULL) break;
      qt_tensor_share(&ref, t);
      if (i % 3 == 1) {                     /* two references, maybe to both releasers */
        qt_tensor second;
        qt_tensor_share(&second, &ref);
        embed_queue_put(&q, &second, 0);
      }
      lua_pop(L, 1);
      embed_queue_put(&q, &ref, keep);
      if (embed_call(L, "use", i) == 0) lua_pop(L, 1);
    }
  }
  embed_run(L, "cross-thread: drop", "cur = nil; lent = nil; collectgarbage(); collectgarbage()");
  lua_close(L);                             /* the kept references outlive the state */
  CHECK(qt_cpu_allocated() > cpu_start, "cross-thread: the kept references' bytes were "
        "given back at lua_close");

  pthread_mutex_lock(&q.lock);
  q.closed = 1;
  pthread_cond_broadcast(&q.changed);
  pthread_mutex_unlock(&q.lock);
  for (int i = 0; i < started; i++) pthread_join(tid[i], NULL);

  CHECK(q.kept_released == EMBED_KEEP, "the releasers dropped %d references after lua_close, "
        "not %d", q.kept_released, EMBED_KEEP);
  int off_thread = 0;
  for (int k = 0; k < EMBED_LENT; k++) {
    CHECK(atomic_load(&lent[k].released) == lent[k].generation, "lent block %d: %d release "
          "callbacks for %d lends", k, atomic_load(&lent[k].released), lent[k].generation);
    off_thread += atomic_load(&lent[k].off_thread);
  }
  CHECK(off_thread > 0, "no release callback ran on a releaser thread");
  CHECK(qt_cpu_allocated() == cpu_start, "cross-thread: %lld CPU bytes allocated at the end, "
        "%lld at the start", (long long)qt_cpu_allocated(), (long long)cpu_start);
}

/* ======================================================================== main */

int main(int argc, char **argv) {
  int threads = argc > 1 && strcmp(argv[1], "--threads") == 0;
  int iterations = threads && argc > 2 ? atoi(argv[2]) : 2000;
  if (iterations < 1) iterations = 1;

  lua_State *A = embed_open("A");
  lua_State *B = embed_open("B");
  if (A == NULL || B == NULL) return 1;
  int gpus = (int)embed_integer(A, "gpu_count", "return qlua.gpu_count()");
  lua_Integer cpu_start = embed_allocated(B, "cpu");

  qt_tensor kept;
  qt_tensor_init(&kept);
  embed_two_states(A, B);
  embed_borrow(A, &kept);
  embed_lend_memory(B);
  embed_close_one(&A, B, &kept, gpus);

  /* Everything B made is gone once its variables are. */
  embed_run(B, "B: drop", "y = nil; h = nil; b1 = nil; collectgarbage(); collectgarbage()");
  CHECK(embed_allocated(B, "cpu") == cpu_start, "B: %lld CPU bytes still allocated (%lld at "
        "the start)", (long long)embed_allocated(B, "cpu"), (long long)cpu_start);
  lua_close(B);

  if (threads) {
    embed_threads();
    embed_cross_thread(iterations);
  }

  if (failures > 0) {
    fprintf(stderr, "embed: %d check(s) failed\n", failures);
    return 1;
  }
  if (threads)
    printf("embed: ok (two states, %s, threads, %d cross-thread releases)\n",
           gpus > 0 ? "GPU" : "no GPU", iterations);
  else
    printf("embed: ok (two states, %s)\n", gpus > 0 ? "GPU" : "no GPU");
  return 0;
}
