/*
** l_state.c — the binding's state and the tensor userdata's life: the per-lua_State
** box and its context, raising, the binding calls in progress (the trampoline every
** registered function runs through), the garbage collector driving, and the userdata's
** creation, checks and release (__gc, __close, t:free() and the releases that wait).
** Every other file of the binding builds on this one; it calls none of them.
**
** State: luaopen_qlua makes one lq_state box (lqlua.h) holding a qt_ctx reference.
** The box is anchored in the registry (so the context lives until lua_close even if
** the module table is dropped) and is upvalue 1 of every binding function. Its __gc
** drops the context reference; storages still alive hold their own (ops.h), so the
** order in which lua_close finalises things does not matter.
**
** GC driving: the Lua collector sees a tensor as a ~300-byte userdata, whatever device
** memory it holds. The core counts this state's device bytes (ctx->gpu_live_bytes)
** and calls s_gc_callback when an allocation would pass ctx->gpu_gc_limit, or after an
** out-of-memory. The callback runs a full collection (finalising unreachable tensors,
** which gives their device memory back) and then re-paces (s_repace), with live = the
** bytes still held after the collection:
**     limit = live + max(LQ_GC_FLOOR, min(live, room))
**     room  = (device memory of the GPUs this state uses - live) / 2
** so the garbage allowed before the next collection is as large as the working set (a
** program that keeps N bytes alive collects once per N bytes allocated: amortised, like
** Lua's own 200% pause, and the limit doubles while the working set grows, as cutorch's
** heap tracking did), but never more than half the memory the working set leaves free
** (so a big working set does not turn every collection into an out-of-memory), and
** never less than LQ_GC_FLOOR (256 MiB: small programs do not collect at every
** allocation). qlua.empty_cache() collects and re-paces too, so a limit raised by a big
** working set that is gone now comes back down there. Host bytes have a soft limit of
** the same shape (storage.c) and, ahead of it, step Lua's own incremental collector as
** they grow (s_gc_step), so CPU results left to the collector are reused warm.
**
** The userdata: a tensor userdata is a bare qt_tensor (tensor.h) with the "qlua.Tensor"
** metatable. Results are created first, empty (lq_newtensor), then filled by the core,
** as liolib pushes a closed file before opening it: when the core fails it leaves the
** output empty, the binding raises, and the collector reclaims an empty userdata. No
** owned resource is ever held in a C local across a call that may raise.
*/
#include <stdint.h>
#include <string.h>

#include "lqlua.h"

/* ================================================================ state and context */

lq_state *lq_state_of(lua_State *L) {
  return (lq_state *)lua_touserdata(L, lua_upvalueindex(1));
}

static void s_free_deferred(lua_State *L, lq_state *st);  /* the releases that wait, below */

qt_ctx *lq_ctx(lua_State *L) {
  lq_state *st = lq_state_of(L);
  if (st == NULL || st->ctx == NULL) {
    luaL_error(L, "qlua: the runtime of this Lua state has been closed");
    return NULL;
  }
  st->running = L;
  if (st->deferred && st->calls <= 1) s_free_deferred(L, st);  /* none below this one */
  return st->ctx;
}

int lq_raise(lua_State *L, qt_ctx *ctx) {
  return luaL_error(L, "%s", ctx->err.msg);
}

int lq_raise_as(lua_State *L, qt_ctx *ctx, const char *core_op, const char *op) {
  qt_err_rename(&ctx->err, core_op, op);
  return luaL_error(L, "%s", ctx->err.msg);
}

/* ---------------------------------------------------------------- arguments too many */

/* The extra argument as a message shows it: numbers, booleans and short strings by value. */
static const char *s_argdesc(lua_State *L, int arg) {
  switch (lua_type(L, arg)) {
    case LUA_TNUMBER: case LUA_TBOOLEAN:
      return lua_pushfstring(L, "%s %s", luaL_typename(L, arg), luaL_tolstring(L, arg, NULL));
    case LUA_TSTRING:
      if (lua_rawlen(L, arg) <= 40) return lua_pushfstring(L, "string '%s'", lua_tostring(L, arg));
      /* fall through */
    default:
      return luaL_typename(L, arg);
  }
}

static void s_extra_argument(lua_State *L, int arg, const char *op, bool method, int takes) {
  int top = lua_gettop(L);
  while (top >= arg && lua_isnil(L, top)) top--;  /* trailing nils are absent arguments */
  if (top < arg) return;
  while (lua_isnil(L, arg)) arg++;                /* name the first one given */
  int shown = method ? arg - 1 : arg;             /* as the user counts: after self */
  const char *what = s_argdesc(L, arg);
  if (takes < 0) luaL_error(L, "%s: unexpected argument #%d (%s)", op, shown, what);
  if (method) takes--;
  luaL_error(L, "%s: unexpected argument #%d (%s): %s takes at most %d argument%s", op, shown,
             what, op, takes, takes == 1 ? "" : "s");
}

void lq_checkend(lua_State *L, int arg, const char *op, bool method) {
  s_extra_argument(L, arg, op, method, -1);
}

/* ---------------------------------------------------------------- calls in progress */

/* Walks T's frames from `level` up (at level 0, only the slots up to `top`) and returns
** how many are binding calls of state st; *held is set when one of them holds, on its
** stack, the userdata ud or (s not NULL) a tensor whose storage is s. T may be another
** thread than the running one. */
static int s_binding_frames(lua_State *T, lq_state *st, int level, int top,
                            const void *ud, const qt_storage *s, bool *held) {
  lua_Debug ar;
  int frames = 0;
  if (!lua_checkstack(T, 3)) {  /* no room to look: count the worst case */
    if (held != NULL) *held = true;
    return 1;
  }
  for (; lua_getstack(T, level, &ar); level++) {
    lua_getinfo(T, "f", &ar);                     /* the frame's function */
    bool ours = lua_iscfunction(T, -1) && lua_getupvalue(T, -1, 1) != NULL;
    if (ours) {
      ours = lua_touserdata(T, -1) == (void *)st;
      lua_pop(T, 1);
    }
    lua_pop(T, 1);
    if (!ours) continue;
    frames++;
    if (held == NULL || *held) continue;
    int limit = level == 0 ? top : INT32_MAX;
    for (int n = 1; n <= limit && lua_getlocal(T, &ar, n) != NULL; n++) {
      const void *p = lua_touserdata(T, -1);
      if (p != NULL && (p == ud || (s != NULL && luaL_testudata(T, -1, QLUA_TENSOR) != NULL &&
                                    ((const qt_tensor *)p)->storage == s)))
        *held = true;
      lua_pop(T, 1);
      if (*held) break;
    }
  }
  return frames;
}

static void s_enter(lua_State *L, lq_state *st) {
  if (st->calls > 0) {
    /* a call below this one, or one that raised and never left: the outermost thread's
    ** stack tells (the current frame, level 0 on L, is this call itself) */
    lua_State *T = st->outer != NULL ? st->outer : L;
    if (s_binding_frames(T, st, T == L ? 1 : 0, 0, NULL, NULL, NULL) == 0) st->calls = 0;
  }
  if (st->calls++ == 0) {
    st->outer = L;
    if (L != st->main) {  /* a coroutine: anchored while it may be looked at */
      lua_pushthread(L);
      lua_rawsetp(L, LUA_REGISTRYINDEX, &st->outer);
    }
  }
}

void lq_enter(lua_State *L) {
  lq_state *st = lq_state_of(L);
  if (st != NULL) s_enter(L, st);
}

void lq_leave(lua_State *L) {
  lq_state *st = lq_state_of(L);
  if (st != NULL && st->calls > 0) st->calls--;
}

/* Every registered function runs through here: upvalue 2 is its lq_Reg entry, and the
** function is called directly, in this same frame, so its upvalue 1 is the box. */
static int s_trampoline(lua_State *L) {
  const lq_Reg *r = (const lq_Reg *)lua_touserdata(L, lua_upvalueindex(2));
  int nargs = r->nargs;
  bool uncounted = nargs != LQ_VARARGS && (nargs & LQ_UNCOUNTED);
  if (uncounted) nargs &= ~LQ_UNCOUNTED;
  if (nargs != LQ_VARARGS && lua_gettop(L) > nargs)
    s_extra_argument(L, nargs + 1, r->name, lua_toboolean(L, lua_upvalueindex(3)), nargs);
  if (uncounted) return r->func(L);
  lq_state *st = lq_state_of(L);
  s_enter(L, st);
  int n = r->func(L);
  if (st->calls > 0) st->calls--;
  return n;
}

void lq_document(lua_State *L, const char *topic, const char *name, const char *args,
                 const char *help) {
  if (lua_getfield(L, LUA_REGISTRYINDEX, LQ_API) != LUA_TTABLE) {
    lua_pop(L, 1);
    lua_newtable(L);
    lua_pushvalue(L, -1);
    lua_setfield(L, LUA_REGISTRYINDEX, LQ_API);
  }
  lua_createtable(L, 0, 5);
  lua_pushstring(L, topic);
  lua_setfield(L, -2, "topic");
  lua_pushstring(L, name);
  lua_setfield(L, -2, "name");
  lua_pushstring(L, args != NULL ? args : "");
  lua_setfield(L, -2, "args");
  lua_pushstring(L, help);
  lua_setfield(L, -2, "help");
  lua_pushvalue(L, -3);                         /* the value documented */
  lua_setfield(L, -2, "fn");
  lua_rawseti(L, -2, (lua_Integer)lua_rawlen(L, -2) + 1);
  lua_pop(L, 1);                                /* the list */
}

void lq_setfuncs(lua_State *L, const lq_Reg *regs, int box_idx, bool method,
                 const char *topic) {
  box_idx = lua_absindex(L, box_idx);
  for (const lq_Reg *r = regs; r->name != NULL; r++) {
    lua_pushvalue(L, box_idx);
    lua_pushlightuserdata(L, (void *)r);
    lua_pushboolean(L, method);
    lua_pushcclosure(L, s_trampoline, 3);
    if (topic != NULL && r->help != NULL) lq_document(L, topic, r->name, r->args, r->help);
    lua_setfield(L, -2, r->name);
  }
}

int lq_call_named(lua_State *L, lua_CFunction fn, int nargs, int nresults, const char *op,
                  const char *what) {
  lua_pushvalue(L, lua_upvalueindex(1));
  lua_pushcclosure(L, fn, 1);
  lua_insert(L, -(nargs + 1));
  int rc = lua_pcall(L, nargs, nresults, 0);
  if (rc == LUA_ERRMEM) {
    lua_pop(L, 1);
    return luaL_error(L, "%s: not enough memory (%s)", op, what);
  }
  if (rc != LUA_OK) return lua_error(L);
  return nresults;
}

/* The GC limit the bytes live now call for (see the header). The GPUs' memory sizes
** are summed once per set of GPUs used, so this is cheap enough for every t:free(). */
static int64_t s_pace(lq_state *st) {
  int64_t live = atomic_load(&st->ctx->gpu_live_bytes);
  if (st->total_of != st->gpus_used) {
    int64_t total = 0;
    for (int g = 0; g < 64; g++) {
      if (!(st->gpus_used & ((uint64_t)1 << g))) continue;
      qt_err err;
      qt_memory_stats stats;
      qt_device *dev = qt_gpu_device(g, &err);
      if (dev != NULL && dev->iface->memory != NULL && dev->iface->memory(dev, &stats, &err) == 0)
        total += stats.total;
    }
    st->total_bytes = total;
    st->total_of = st->gpus_used;
  }
  int64_t allowance = live;
  if (st->total_bytes > 0) {
    int64_t room = st->total_bytes > live ? (st->total_bytes - live) / 2 : 0;
    if (allowance > room) allowance = room;
  }
  if (allowance < LQ_GC_FLOOR) allowance = LQ_GC_FLOOR;
  return live > INT64_MAX - allowance ? INT64_MAX : live + allowance;
}

static void s_repace(lq_state *st) {
  st->ctx->gpu_gc_limit = s_pace(st);
}

void lq_gc_collect(lua_State *L) {
  lua_gc(L, LUA_GCCOLLECT);
  s_repace(lq_state_of(L));
}

void lq_gc_relax(lua_State *L) {
  lq_state *st = lq_state_of(L);
  if (st == NULL || st->ctx == NULL) return;
  int64_t limit = s_pace(st);
  if (limit < st->ctx->gpu_gc_limit) st->ctx->gpu_gc_limit = limit;
}

/* ctx->gc: called by the core from inside a binding call, on the thread that made it.
** After an out-of-memory the core has emptied the failing device's cache *before*
** asking for this collection, so the blocks the collection frees would only go back
** to the caches; they are handed to the driver here too, so the core's retry can use
** them whatever their sizes. */
static void s_gc_callback(void *ud, int out_of_memory) {
  lq_state *st = (lq_state *)ud;
  if (st->ctx == NULL || st->running == NULL) return;
  lua_gc(st->running, LUA_GCCOLLECT);  /* finalizers cannot release our operands (below) */
  if (out_of_memory) {
    for (int g = 0; g < 64; g++) {
      if (!(st->gpus_used & ((uint64_t)1 << g))) continue;
      qt_err err;
      qt_device *dev = qt_gpu_device(g, &err);
      if (dev != NULL && dev->iface->empty_cache != NULL) dev->iface->empty_cache(dev);
    }
  }
  s_repace(st);
}

/* ctx->gc_step: this state's host bytes grew by `bytes` since the last step (storage.c),
** so that much garbage may be waiting behind ~300-byte userdata. It is handed to Lua's
** own collector as debt, as if Lua had allocated it, weighted so that a cycle comes about
** once per
**     G = max(LQ_GC_STEP_GARBAGE, LQ_GC_STEP_HEAPS x heap)
** of host garbage (heap: Lua's own bytes; at the default pause Lua starts a cycle once its
** debt reaches about the heap, and finishes it soon after). A cycle costs about one
** traversal of the heap, so the floor keeps a small program's dropped results a few
** blocks apart (they come back to the block cache warm, where a fresh block costs page
** faults and zeroing), and the multiple holds a big heap's collector to a thirty-second
** of what the same bytes would cost it as Lua memory. In the generational mode (the qlua
** host's default, as lua5.4's) the same debt brings minor collections, which take the
** results that died young. Lua runs the steps itself: its pause and step multiplier still
** apply, finalizers run in its order, and nothing runs while collectgarbage("stop") holds
** (LUA_GCSTEP would run even then, so the state is asked first). A finalizer run here is
** one of a collection, as in s_gc_callback: real garbage is on no call's stack, and what
** a finalizer does to a call's operands waits (the releases that wait, below). */
static void s_gc_step(void *ud, int64_t bytes) {
  lq_state *st = (lq_state *)ud;
  lua_State *L = st->running;
  if (st->ctx == NULL || L == NULL || lua_gc(L, LUA_GCISRUNNING) != 1) return;
  double heap = (double)lua_gc(L, LUA_GCCOUNT) * 1024.0 + (double)lua_gc(L, LUA_GCCOUNTB);
  double weight = heap / LQ_GC_STEP_GARBAGE;
  if (weight > 1.0 / LQ_GC_STEP_HEAPS) weight = 1.0 / LQ_GC_STEP_HEAPS;
  st->step_carry += (double)bytes * weight;
  if (st->step_carry < 1024.0) return;
  double kb = st->step_carry / 1024.0;
  if (kb > (double)(INT32_MAX / 2)) kb = (double)(INT32_MAX / 2);
  int whole = (int)kb;
  st->step_carry -= (double)whole * 1024.0;
  if (st->step_carry > 1024.0) st->step_carry = 0;  /* beyond what one call takes */
  lua_gc(L, LUA_GCSTEP, whole);
}

/* The box's __gc: at lua_close (or never before). */
static int s_state_gc(lua_State *L) {
  lq_state *st = (lq_state *)lua_touserdata(L, 1);
  if (st != NULL && st->ctx != NULL) {
    st->ctx->gc = NULL;
    st->ctx->gc_step = NULL;
    st->ctx->gc_ud = NULL;
    qt_ctx_release(st->ctx);
    st->ctx = NULL;
  }
  return 0;
}

/* ================================================================ the userdata */

/* The one accessor every binding function goes through (so that tensor access stays
** behind one function, which the embedding API shares). Borrowed pointer. */
qt_tensor *qlua_checktensor(lua_State *L, int idx) {
  return (qt_tensor *)luaL_checkudata(L, idx, QLUA_TENSOR);
}

qt_tensor *qlua_totensor(lua_State *L, int idx) {
  return (qt_tensor *)luaL_testudata(L, idx, QLUA_TENSOR);
}

qt_tensor *lq_newtensor(lua_State *L) {
  qt_tensor *t = (qt_tensor *)lua_newuserdatauv(L, sizeof *t, 1);  /* 1: qlua.autograd's state */
  qt_tensor_init(t);
  luaL_setmetatable(L, QLUA_TENSOR);
  return t;
}

/* Runs under lua_pcall for qlua_pushtensor: everything that can raise (the userdata's
** allocation, a missing metatable) happens before the reference moves. */
static int s_pushtensor_protected(lua_State *L) {
  qt_tensor *src = (qt_tensor *)lua_touserdata(L, 1);
  qt_tensor *t = (qt_tensor *)lua_newuserdatauv(L, sizeof *t, 1);  /* 1: qlua.autograd's state */
  qt_tensor_init(t);
  if (luaL_getmetatable(L, QLUA_TENSOR) != LUA_TTABLE)
    return luaL_error(L, "qlua_pushtensor: luaopen_qlua has not been called in this state");
  lua_setmetatable(L, -2);
  *t = *src;               /* the reference moves: nothing can raise from here on */
  qt_tensor_init(src);
  return 1;
}

int qlua_pushtensor(lua_State *L, qt_tensor *t) {
  lua_pushcfunction(L, s_pushtensor_protected);
  lua_pushlightuserdata(L, t);
  if (lua_pcall(L, 1, 1, 0) != LUA_OK) {
    qt_tensor_release(t);  /* ownership passed to us; nobody else can give it back now */
    return lua_error(L);
  }
  return 1;
}

qt_tensor *lq_checklive(lua_State *L, int idx, const char *op) {
  qt_tensor *t = qlua_checktensor(L, idx);
  if (t->storage == NULL || t->storage->freed)
    luaL_error(L, "%s: tensor has been freed", op);
  return t;
}

/* ---------------------------------------------------------------- releases that must wait
** A binding call holds C pointers to its operands (the tensor structs inside their
** userdata) for as long as it runs, and Lua code can run in the middle of it: a
** collection the call starts (an allocation past the GC limit, s_gc_callback) or one Lua
** starts by itself (any allocation) runs finalizers, and a finalizer may close, collect
** by hand (getmetatable(t).__gc(t)) or free a tensor that is one of those operands. So a
** release of a tensor that a binding call in progress holds on its stack waits: it is
** queued, and the first binding call made once no call holds it carries it out
** (s_free_deferred). Everything else is released at once, which keeps a collection's
** purpose: real garbage is never on a call's stack, so it always goes now. */

/* The registry table of waiting releases: tensor userdata -> true for t:free() (the bytes
** go back for every view), false for __gc/__close (this userdata's reference only). */
static const char s_deferred_key = 0;

/* Whether a binding call still running holds the tensor at idx on its stack, or (when s
** is not NULL) any tensor whose storage is s: t:free() gives the bytes back for every
** view, so a view held by the call counts too. The running thread's frames are searched
** from `level` up (1 skips the function doing the release, which holds the tensor as its
** argument; 0 searches the current call's stack too, up to slot `top`, where its own work
** begins), then, when the outermost call in progress runs on another thread (a finalizer
** or callback resumed a coroutine), that thread's frames. */
static bool s_held_by_call(lua_State *L, int idx, const qt_storage *s, int level, int top) {
  lq_state *st = lq_state_of(L);
  if (st == NULL) return false;
  const void *ud = lua_touserdata(L, idx);
  bool held = false;
  s_binding_frames(L, st, level, top, ud, s, &held);
  if (!held && st->calls > 0 && st->outer != NULL && st->outer != L)
    s_binding_frames(st->outer, st, 0, INT32_MAX, ud, s, &held);
  return held;
}

/* Queues the release of the tensor at idx; `free_data` as for t:free(). Returns false
** (nothing queued) when the queue cannot grow: the caller then releases at once. */
static int s_queue_protected(lua_State *L) {
  bool free_data = lua_toboolean(L, 2);
  /* made once by lq_state_new: making it here could run a finalizer that queues too,
  ** into a table this call would then replace */
  if (lua_rawgetp(L, LUA_REGISTRYINDEX, &s_deferred_key) != LUA_TTABLE)
    return luaL_error(L, "qlua: the release queue is missing");
  lua_pushvalue(L, 1);
  if (lua_rawget(L, -2) == LUA_TBOOLEAN && lua_toboolean(L, -1)) return 0;  /* free wins */
  lua_pop(L, 1);
  lua_pushvalue(L, 1);
  lua_pushboolean(L, free_data);
  lua_rawset(L, -3);
  return 0;
}

static bool s_defer(lua_State *L, int idx, bool free_data) {
  lq_state *st = lq_state_of(L);
  if (st == NULL) return false;
  lua_pushvalue(L, lua_upvalueindex(1));     /* the closure keeps upvalue 1 for the check */
  lua_pushcclosure(L, s_queue_protected, 1);
  lua_pushvalue(L, idx);
  lua_pushboolean(L, free_data);
  if (lua_pcall(L, 2, 0, 0) != LUA_OK) {     /* out of memory growing the queue */
    lua_pop(L, 1);
    return false;
  }
  st->deferred = 1;
  return true;
}

static void s_release_now(lua_State *L, qt_tensor *t, bool free_data) {
  if (t->storage == NULL) return;
  bool gpu = t->storage->device != NULL && t->storage->device->kind == QT_DEV_CUDA;
  if (free_data) qt_storage_free_data(t->storage);
  qt_tensor_release(t);
  if (gpu) lq_gc_relax(L);
}

/* Whether this C function was called by the collector as a finalizer (Lua 5.4 names
** such calls "__gc" metamethods), not by Lua code. */
static bool s_called_as_finalizer(lua_State *L) {
  lua_Debug ar;
  if (!lua_getstack(L, 0, &ar) || !lua_getinfo(L, "n", &ar)) return false;
  return ar.namewhat != NULL && strcmp(ar.namewhat, "metamethod") == 0 && ar.name != NULL &&
         strcmp(ar.name, "__gc") == 0;
}

/* __gc and __close: drop this userdata's reference. Never raises, whatever it is given,
** and may run any number of times. A real finalization goes at once (garbage is held by
** no call); an explicit call waits while a binding call holds the tensor. */
int lq_tensor_gc(lua_State *L) {
  qt_tensor *t = qlua_totensor(L, 1);
  if (t == NULL || t->storage == NULL) return 0;
  lq_state *st = lq_state_of(L);
  /* no call in progress (the usual case: a scope's end, a plain collection): no search */
  if (st != NULL && st->calls > 0 && !s_called_as_finalizer(L) &&
      s_held_by_call(L, 1, NULL, 1, 0) && s_defer(L, 1, false))
    return 0;
  s_release_now(L, t, false);
  return 0;
}

/* t:free(): the storage's bytes go back now, for every view sharing them, unless a
** binding call in progress holds this tensor or a view of its storage. */
int lq_tensor_free(lua_State *L) {
  qt_tensor *t = qlua_checktensor(L, 1);
  if (t->storage == NULL) return 0;
  lq_state *st = lq_state_of(L);
  /* calls counts this one (the trampoline): more means a call below it */
  if (st != NULL && st->calls > 1 && s_held_by_call(L, 1, t->storage, 1, 0) &&
      s_defer(L, 1, true))
    return 0;
  s_release_now(L, t, true);
  return 0;
}

/* Carries out the queued releases of tensors no binding call holds any more (lq_state). */
static void s_free_deferred(lua_State *L, lq_state *st) {
  int top = lua_gettop(L);  /* the calling function's own slots end here */
  if (lua_rawgetp(L, LUA_REGISTRYINDEX, &s_deferred_key) != LUA_TTABLE) {
    lua_pop(L, 1);
    st->deferred = 0;
    return;
  }
  int queue = lua_gettop(L);
  bool waiting = false;
  lua_pushnil(L);
  while (lua_next(L, queue) != 0) {
    bool free_data = lua_toboolean(L, -1);
    lua_pop(L, 1);                                /* the key stays for lua_next */
    qt_tensor *t = qlua_totensor(L, -1);
    /* level 0 too: the call draining the queue may already hold pointers into it */
    if (t != NULL && s_held_by_call(L, -1, free_data ? t->storage : NULL, 0, top)) {
      waiting = true;                             /* still held: a later call does it */
      continue;
    }
    if (t != NULL) s_release_now(L, t, free_data);
    lua_pushvalue(L, -1);
    lua_pushnil(L);
    lua_rawset(L, queue);                         /* clearing a field is allowed mid-walk */
  }
  st->deferred = waiting;
  lua_pop(L, 1);
}

/* The box of a new state (lqlua.h), pushed: the context, the GC callback, the queue of
** releases that wait, all anchored in the registry until lua_close. */
lq_state *lq_state_new(lua_State *L) {
  lq_state *st = (lq_state *)lua_newuserdatauv(L, sizeof *st, 0);
  st->ctx = NULL;
  st->running = L;
  st->gpus_used = 0;
  st->total_of = 0;
  st->total_bytes = 0;
  st->deferred = 0;
  st->calls = 0;
  st->outer = NULL;
  st->step_carry = 0;
  lua_rawgeti(L, LUA_REGISTRYINDEX, LUA_RIDX_MAINTHREAD);
  st->main = lua_tothread(L, -1);
  lua_pop(L, 1);
  lua_createtable(L, 0, 2);
  lua_pushcfunction(L, s_state_gc);
  lua_setfield(L, -2, "__gc");
  lua_pushliteral(L, "qlua.state");
  lua_setfield(L, -2, "__name");
  lua_setmetatable(L, -2);
  st->ctx = qt_ctx_new();
  if (st->ctx == NULL) {
    luaL_error(L, "qlua: out of memory creating the tensor context");
    return NULL;  /* not reached */
  }
  st->ctx->gc = s_gc_callback;
  st->ctx->gc_step = s_gc_step;
  st->ctx->gc_ud = st;
  st->ctx->gpu_gc_limit = LQ_GC_FLOOR;
  lua_pushvalue(L, -1);
  lua_rawsetp(L, LUA_REGISTRYINDEX, st);   /* anchored until lua_close */
  lua_newtable(L);                              /* the queue of releases that wait */
  lua_rawsetp(L, LUA_REGISTRYINDEX, &s_deferred_key);
  return st;
}
