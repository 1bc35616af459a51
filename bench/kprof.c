/* bench/kprof.c — a kernel-level profiler for benchmarks, as a Lua C module over CUPTI's
 * activity API (the GPU machine has no Nsight). It records every kernel, copy, memset and
 * CUDA runtime call between start() and stop(), and stop() returns a report: the window's
 * wall time, the time the GPU was busy (the union of the intervals), the kernels by total
 * time, the copies and the runtime calls by count. A gap between the wall time and the busy
 * time is host overhead; the kernel table says where the device time goes.
 *
 *   make CUDA=1 build/kprof.so        (links libcupti from the CUDA Toolkit)
 *   local kprof = package.loadlib("build/kprof.so", "luaopen_kprof")()
 *   kprof.start(); step(); qlua.sync(); print(kprof.stop({top = 40}))
 *
 * A tool for finding where time goes, not a timer: CUPTI's tracing adds a little to each
 * launch, so the benchmarks' numbers come from the bench scripts without it. */
#define _GNU_SOURCE
#include <cupti.h>
#include <dlfcn.h>
#include <lauxlib.h>
#include <lua.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
  char *name;
  uint64_t count, total, min, max;
} kp_entry;

typedef struct {
  kp_entry *e;
  size_t n, cap;
} kp_table;

typedef struct {
  uint64_t start, end;
} kp_span;

static kp_table kp_kernels, kp_copies, kp_api;
static kp_span *kp_spans;
static size_t kp_nspans, kp_capspans;
static uint64_t kp_t0;
static int kp_on;

static void kp_add(kp_table *t, const char *name, uint64_t dur) {
  for (size_t i = 0; i < t->n; i++) {
    kp_entry *x = &t->e[i];
    if (strcmp(x->name, name) == 0) {
      x->count++, x->total += dur;
      if (dur < x->min) x->min = dur;
      if (dur > x->max) x->max = dur;
      return;
    }
  }
  if (t->n == t->cap) {
    size_t cap = t->cap ? 2 * t->cap : 256;
    kp_entry *e = realloc(t->e, cap * sizeof *e);
    if (e == NULL) return;
    t->e = e, t->cap = cap;
  }
  char *copy = strdup(name);
  if (copy == NULL) return;
  t->e[t->n++] = (kp_entry){ copy, 1, dur, dur, dur };
}

static void kp_span_add(uint64_t s, uint64_t e) {
  if (kp_nspans == kp_capspans) {
    size_t cap = kp_capspans ? 2 * kp_capspans : 4096;
    kp_span *p = realloc(kp_spans, cap * sizeof *p);
    if (p == NULL) return;
    kp_spans = p, kp_capspans = cap;
  }
  kp_spans[kp_nspans++] = (kp_span){ s, e };
}

static void kp_clear(kp_table *t) {
  for (size_t i = 0; i < t->n; i++) free(t->e[i].name);
  t->n = 0;
}

static void CUPTIAPI kp_buffer_requested(uint8_t **buf, size_t *size, size_t *max_records) {
  *size = 8u << 20;
  *buf = aligned_alloc(ACTIVITY_RECORD_ALIGNMENT, *size);
  *max_records = 0;
}

static const char *kp_copy_kind(uint8_t kind) {
  switch (kind) {
  case CUPTI_ACTIVITY_MEMCPY_KIND_HTOD: return "copy HtoD";
  case CUPTI_ACTIVITY_MEMCPY_KIND_DTOH: return "copy DtoH";
  case CUPTI_ACTIVITY_MEMCPY_KIND_DTOD: return "copy DtoD";
  case CUPTI_ACTIVITY_MEMCPY_KIND_PTOP: return "copy PtoP";
  default: return "copy other";
  }
}

static void CUPTIAPI kp_buffer_completed(CUcontext ctx, uint32_t stream, uint8_t *buf, size_t size,
                                         size_t valid) {
  (void)ctx, (void)stream, (void)size;
  CUpti_Activity *rec = NULL;
  while (cuptiActivityGetNextRecord(buf, valid, &rec) == CUPTI_SUCCESS) {
    if (!kp_on) continue;
    switch (rec->kind) {
    case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL:
    case CUPTI_ACTIVITY_KIND_KERNEL: {
      CUpti_ActivityKernel10 *k = (CUpti_ActivityKernel10 *)rec;
      if (k->start < kp_t0) break;
      kp_add(&kp_kernels, k->name ? k->name : "?", k->end - k->start);
      kp_span_add(k->start, k->end);
      break;
    }
    case CUPTI_ACTIVITY_KIND_MEMCPY: {
      CUpti_ActivityMemcpy6 *m = (CUpti_ActivityMemcpy6 *)rec;
      if (m->start < kp_t0) break;
      kp_add(&kp_copies, kp_copy_kind(m->copyKind), m->end - m->start);
      kp_span_add(m->start, m->end);
      break;
    }
    case CUPTI_ACTIVITY_KIND_MEMSET: {
      CUpti_ActivityMemset4 *m = (CUpti_ActivityMemset4 *)rec;
      if (m->start < kp_t0) break;
      kp_add(&kp_copies, "memset", m->end - m->start);
      kp_span_add(m->start, m->end);
      break;
    }
    case CUPTI_ACTIVITY_KIND_RUNTIME:
    case CUPTI_ACTIVITY_KIND_DRIVER: {
      CUpti_ActivityAPI *a = (CUpti_ActivityAPI *)rec;
      if (a->start < kp_t0) break;
      const char *name = NULL;
      CUpti_CallbackDomain dom = rec->kind == CUPTI_ACTIVITY_KIND_RUNTIME ? CUPTI_CB_DOMAIN_RUNTIME_API
                                                                         : CUPTI_CB_DOMAIN_DRIVER_API;
      if (cuptiGetCallbackName(dom, a->cbid, &name) != CUPTI_SUCCESS || name == NULL) name = "?";
      kp_add(&kp_api, name, a->end - a->start);
      break;
    }
    default: break;
    }
  }
  free(buf);
}

static int kp_check(lua_State *L, CUptiResult r, const char *what) {
  if (r == CUPTI_SUCCESS) return 0;
  const char *msg = NULL;
  cuptiGetResultString(r, &msg);
  return luaL_error(L, "kprof: %s: %s", what, msg ? msg : "?");
}

static const CUpti_ActivityKind kp_kinds[] = { CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL, CUPTI_ACTIVITY_KIND_MEMCPY,
                                               CUPTI_ACTIVITY_KIND_MEMSET, CUPTI_ACTIVITY_KIND_RUNTIME,
                                               CUPTI_ACTIVITY_KIND_DRIVER };
static int kp_registered;

/* kprof.start(): forget what was recorded, and record from now */
static int kp_start(lua_State *L) {
  if (!kp_registered) {
    kp_check(L, cuptiActivityRegisterCallbacks(kp_buffer_requested, kp_buffer_completed), "register");
    for (size_t i = 0; i < sizeof kp_kinds / sizeof kp_kinds[0]; i++)
      kp_check(L, cuptiActivityEnable(kp_kinds[i]), "enable");
    kp_registered = 1;
    /* CUPTI calls back into this library until the process ends, after Lua's state has
    ** closed and unloaded it (package.loadlib's libraries go at lua_close): keep it mapped */
    Dl_info self;
    if (dladdr((void *)kp_start, &self) != 0 && self.dli_fname != NULL)
      (void)dlopen(self.dli_fname, RTLD_LAZY | RTLD_NODELETE);
  }
  kp_on = 0;
  cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
  kp_clear(&kp_kernels), kp_clear(&kp_copies), kp_clear(&kp_api);
  kp_nspans = 0;
  kp_check(L, cuptiGetTimestamp(&kp_t0), "timestamp");
  kp_on = 1;
  return 0;
}

static int kp_by_total(const void *a, const void *b) {
  const kp_entry *x = a, *y = b;
  return x->total < y->total ? 1 : x->total > y->total ? -1 : 0;
}
static int kp_by_start(const void *a, const void *b) {
  const kp_span *x = a, *y = b;
  return x->start < y->start ? -1 : x->start > y->start ? 1 : 0;
}

static void kp_table_report(luaL_Buffer *B, kp_table *t, const char *title, int top, double per) {
  char line[512];
  qsort(t->e, t->n, sizeof t->e[0], kp_by_total);
  snprintf(line, sizeof line, "%-12s %10s %10s %10s  %s\n", title, "total us", "count", "avg us", "name");
  luaL_addstring(B, line);
  for (size_t i = 0; i < t->n && (int)i < top; i++) {
    kp_entry *x = &t->e[i];
    snprintf(line, sizeof line, "%12s %10.1f %10.1f %10.2f  %.180s\n", "", x->total / 1e3 / per, x->count / per,
             x->total / 1e3 / (double)x->count, x->name);
    luaL_addstring(B, line);
  }
}

/* kprof.stop([{top = 30, per = 1}]) -> report: stops recording; per divides totals and counts
 * (the number of steps in the window) */
static int kp_stop(lua_State *L) {
  if (!kp_on) return luaL_error(L, "kprof.stop: start() was not called");
  int top = 30;
  double per = 1;
  if (lua_istable(L, 1)) {
    lua_getfield(L, 1, "top");
    if (lua_isinteger(L, -1)) top = (int)lua_tointeger(L, -1);
    lua_getfield(L, 1, "per");
    if (lua_isnumber(L, -1) && lua_tonumber(L, -1) > 0) per = lua_tonumber(L, -1);
    lua_pop(L, 2);
  }
  uint64_t t1 = 0;
  kp_check(L, cuptiGetTimestamp(&t1), "timestamp");
  cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
  kp_on = 0;
  qsort(kp_spans, kp_nspans, sizeof kp_spans[0], kp_by_start);
  uint64_t busy = 0, cur_s = 0, cur_e = 0;
  for (size_t i = 0; i < kp_nspans; i++) {
    kp_span s = kp_spans[i];
    if (i == 0 || s.start > cur_e) {
      busy += cur_e - cur_s;
      cur_s = s.start, cur_e = s.end;
    } else if (s.end > cur_e) cur_e = s.end;
  }
  busy += cur_e - cur_s;
  uint64_t launches = 0;
  for (size_t i = 0; i < kp_kernels.n; i++) launches += kp_kernels.e[i].count;
  luaL_Buffer B;
  luaL_buffinit(L, &B);
  char line[256];
  snprintf(line, sizeof line, "window %.1f us, GPU busy %.1f us (%.0f%%), %.1f kernels (per %g)\n",
           (t1 - kp_t0) / 1e3 / per, busy / 1e3 / per, 100.0 * busy / (double)(t1 - kp_t0 ? t1 - kp_t0 : 1),
           launches / per, per);
  luaL_addstring(&B, line);
  kp_table_report(&B, &kp_kernels, "kernels", top, per);
  kp_table_report(&B, &kp_copies, "copies", top, per);
  kp_table_report(&B, &kp_api, "api", top, per);
  luaL_pushresult(&B);
  return 1;
}

int luaopen_kprof(lua_State *L) {
  static const luaL_Reg fns[] = { { "start", kp_start }, { "stop", kp_stop }, { NULL, NULL } };
  luaL_newlib(L, fns);
  return 1;
}
