/*
** l_graph.c — qlua.graph: a function's GPU work captured once as a CUDA graph and replayed
** whole (the core's qt_graph_*, ops_graph.c; kernels/cuda_graph.cu), as PyTorch's
** torch.cuda.CUDAGraph and CuPy's cupy.cuda.Graph.
**
**   local g = qlua.graph([opts,] fn, ...)   -- fn(...) runs once under capture
**   local out = g:replay()                   -- (or g()) the same output tensors, rewritten
**
** The graph userdata's user value is a table that holds fn, its arguments and its results,
** so everything the captured kernels read or write that Lua can see stays alive while the
** graph does; g:free() lets go of them. On a device that cannot capture (the CPU), the
** graph runs fn eagerly at each replay instead and copies its results into the tensors
** the first replay returned, so a script runs the same everywhere.
*/
#include "lqlua.h"

#include <string.h>

#define LQ_GRAPH "qlua.Graph"

typedef struct lq_graph {
  qt_graph *g;       /* the captured graph; NULL on an eager device and once freed */
  qt_device *dev;
  bool eager;        /* the device cannot capture: replay runs fn */
  bool freed;
  bool has_outputs;  /* eager: the first replay's results are the outputs */
} lq_graph;

/* qlua.graph's most arguments (the trampoline counts them; uncounted calls take a bound). */
#define LG_MAXARGS 200

/* The user value's fields. */
enum { LG_FN = 1, LG_ARGS = 2, LG_OUTS = 3 };

static lq_graph *lg_check(lua_State *L, int idx, const char *op) {
  lq_graph *ud = (lq_graph *)luaL_checkudata(L, idx, LQ_GRAPH);
  if (ud->freed) luaL_error(L, "%s: the graph has been freed", op);
  return ud;
}

static bool lg_callable(lua_State *L, int idx) {
  if (lua_type(L, idx) == LUA_TFUNCTION) return true;
  if (luaL_getmetafield(L, idx, "__call") == LUA_TNIL) return false;
  lua_pop(L, 1);
  return true;
}

/* Pushes the list field `which` of the graph's user value (at ud) and returns its n. */
static int lg_list(lua_State *L, int ud, int which) {
  lua_getiuservalue(L, ud, 1);
  lua_rawgeti(L, -1, which);
  lua_remove(L, -2);
  lua_getfield(L, -1, "n");
  int n = (int)lua_tointeger(L, -1);
  lua_pop(L, 1);
  return n;
}

/* Pushes the values of the list field `which` (fn's arguments or outputs); their count. */
static int lg_unpack(lua_State *L, int ud, int which) {
  int n = lg_list(L, ud, which);
  int list = lua_gettop(L);
  luaL_checkstack(L, n + 8, "graph");
  for (int i = 1; i <= n; i++) lua_rawgeti(L, list, i);
  lua_remove(L, list);
  return n;
}

/* Pushes fn and its arguments from the user value; returns the argument count. */
static int lg_push_call(lua_State *L, int ud) {
  lua_getiuservalue(L, ud, 1);
  lua_rawgeti(L, -1, LG_FN);
  lua_remove(L, -2);
  return lg_unpack(L, ud, LG_ARGS);
}

/* The graph let go of (a failed capture, free, __gc): the device's graph freed, once. */
static void lg_drop(lq_graph *ud) {
  if (!ud->freed) qt_graph_free(ud->g);
  ud->g = NULL;
  ud->freed = true;
}

/* The values from first to the top as a list {n =, ...} stored as field which. */
static void lg_store(lua_State *L, int ud, int which, int first) {
  int top = lua_gettop(L);
  lua_getiuservalue(L, ud, 1);
  lua_createtable(L, top - first + 1, 1);
  for (int i = first; i <= top; i++) {
    lua_pushvalue(L, i);
    lua_rawseti(L, -2, i - first + 1);
  }
  lua_pushinteger(L, top - first + 1);
  lua_setfield(L, -2, "n");
  lua_rawseti(L, -2, which);
  lua_pop(L, 1);
}

/* opts.key (at opts), pushed; its type. */
static int lg_opt(lua_State *L, int opts, const char *key) {
  if (opts == 0) {
    lua_pushnil(L);
    return LUA_TNIL;
  }
  return lua_getfield(L, opts, key);
}

/* qlua.graph([opts,] fn, ...): opts device (where to capture: default the device of the
** first tensor among the arguments, else the current GPU, else the CPU), pool (a graph
** whose pool this one shares), warmup (eager runs of fn before the capture, default 0). */
static int q_graph(lua_State *L) {
  const char *op = "graph";
  qt_ctx *ctx = lq_ctx(L);
  int opts = 0, fi = 1;
  if (lua_type(L, 1) == LUA_TTABLE && !lg_callable(L, 1)) opts = 1, fi = 2;
  if (!lg_callable(L, fi))
    return luaL_error(L, "%s: expects [opts,] fn, ...: argument %d is a %s, not a function", op,
                      fi, luaL_typename(L, fi));
  if (opts != 0) {
    lua_pushnil(L);
    while (lua_next(L, opts) != 0) {
      const char *key = lq_keystring(L, -2, op);
      if (key == NULL || (strcmp(key, "device") != 0 && strcmp(key, "pool") != 0 &&
                          strcmp(key, "warmup") != 0))
        return luaL_error(L, "%s: unknown option '%s' (it takes device, pool, warmup)", op,
                          key != NULL ? key : luaL_typename(L, -2));
      lua_pop(L, 1);
    }
  }
  int nargs = lua_gettop(L) - fi;

  qt_device *dev = NULL;
  if (lg_opt(L, opts, "device") != LUA_TNIL) dev = lq_checkdevice(L, lua_gettop(L), op);
  lua_pop(L, 1);
  for (int i = fi + 1; dev == NULL && i <= fi + nargs; i++) {
    const qt_tensor *t = qlua_totensor(L, i);
    if (t != NULL && t->storage != NULL) dev = t->storage->device;
  }
  if (dev == NULL) dev = lq_default_device(L, op);

  const qt_graph *share = NULL;
  if (lg_opt(L, opts, "pool") != LUA_TNIL) {
    lq_graph *other = (lq_graph *)luaL_testudata(L, -1, LQ_GRAPH);
    if (other == NULL) return luaL_error(L, "%s: option pool must be a qlua.Graph", op);
    if (other->freed) return luaL_error(L, "%s: the graph given as pool has been freed", op);
    share = other->g;   /* NULL for an eager graph: nothing to share */
  }
  lua_pop(L, 1);
  lua_Integer warmup = 0;
  if (lg_opt(L, opts, "warmup") != LUA_TNIL) {
    if (!lua_isinteger(L, -1) || lua_tointeger(L, -1) < 0)
      return luaL_error(L, "%s: option warmup must be an integer >= 0", op);
    warmup = lua_tointeger(L, -1);
  }
  lua_pop(L, 1);

  /* the userdata first, holding fn and its arguments */
  lq_graph *ud = (lq_graph *)lua_newuserdatauv(L, sizeof *ud, 1);
  memset(ud, 0, sizeof *ud);
  ud->dev = dev;
  int self = lua_gettop(L);
  luaL_setmetatable(L, LQ_GRAPH);
  lua_createtable(L, 3, 0);
  lua_pushvalue(L, fi);
  lua_rawseti(L, -2, LG_FN);
  lua_setiuservalue(L, self, 1);
  for (int i = fi + 1; i <= fi + nargs; i++) lua_pushvalue(L, i);
  lg_store(L, self, LG_ARGS, self + 1);
  lua_settop(L, self);

  for (lua_Integer w = 0; w < warmup; w++) {
    lg_push_call(L, self);
    lua_call(L, nargs, 0);
  }
  if (warmup > 0 && qt_sync(ctx, dev) != 0) return lq_raise(L, ctx);

  if (!qt_graph_supported(dev)) {
    ud->eager = true;
    lua_createtable(L, 0, 1);
    lg_store(L, self, LG_OUTS, lua_gettop(L) + 1);
    lua_pop(L, 1);
    return 1;
  }
  if (qt_graph_begin(ctx, dev, share, &ud->g) != 0) return lq_raise(L, ctx);
  lg_push_call(L, self);
  int base = self + 1;
  if (lua_pcall(L, nargs, LUA_MULTRET, 0) != LUA_OK) {
    lg_drop(ud);   /* ends the capture, discarding it */
    return lua_error(L);
  }
  int top = lua_gettop(L);
  for (int i = base; i <= top; i++) {
    const qt_tensor *t = qlua_totensor(L, i);
    if (t != NULL && t->storage != NULL && t->storage->device != dev) {
      lg_drop(ud);
      return luaL_error(L, "%s: result %d is on %s, but the capture is on %s: work elsewhere "
                        "is not captured (give {device = \"%s\"} to run fn eagerly there)", op,
                        i - base + 1, t->storage->device->name, dev->name,
                        t->storage->device->name);
    }
  }
  lg_store(L, self, LG_OUTS, base);
  lua_settop(L, self);
  if (qt_graph_end(ctx, ud->g, true) != 0) {
    lg_drop(ud);
    return lq_raise(L, ctx);
  }
  return 1;
}

/* The eager form's replay: fn's results copied into the first replay's. */
static int lg_replay_eager(lua_State *L, qt_ctx *ctx, lq_graph *ud) {
  const char *op = "replay";
  int base = lua_gettop(L) + 1;
  int nargs = lg_push_call(L, 1);
  lua_call(L, nargs, LUA_MULTRET);
  int top = lua_gettop(L);
  if (!ud->has_outputs) {
    lg_store(L, 1, LG_OUTS, base);
    ud->has_outputs = true;
    return top - base + 1;
  }
  int n = lg_list(L, 1, LG_OUTS);
  int outs = lua_gettop(L);
  if (n != top - base + 1)
    return luaL_error(L, "%s: fn returned %d values, %d the first time", op, top - base + 1, n);
  for (int i = 1; i <= n; i++) {
    lua_rawgeti(L, outs, i);
    qt_tensor *kept = (qt_tensor *)qlua_totensor(L, -1);
    const qt_tensor *now = qlua_totensor(L, base + i - 1);
    if (kept != NULL && now != NULL) {
      if (qt_copy_(ctx, kept, now) != 0) return lq_raise(L, ctx);
    } else {
      lua_pushvalue(L, base + i - 1);
      lua_rawseti(L, outs, i);
    }
    lua_pop(L, 1);
  }
  lua_settop(L, base - 1);
  return lg_unpack(L, 1, LG_OUTS);
}

/* g:replay() / g(): the captured work queued once more; fn's results. */
static int lg_replay(lua_State *L) {
  qt_ctx *ctx = lq_ctx(L);
  lq_graph *ud = lg_check(L, 1, "replay");
  lua_settop(L, 1);
  if (ud->eager) return lg_replay_eager(L, ctx, ud);
  if (qt_graph_replay(ctx, ud->g) != 0) return lq_raise(L, ctx);
  return lg_unpack(L, 1, LG_OUTS);
}

/* g:free(), __close: the graph, its pool's unused memory and its hold on fn, fn's arguments
** and outputs go now (outputs the script still holds stay valid tensors). */
static int lg_free(lua_State *L) {
  lq_graph *ud = (lq_graph *)luaL_checkudata(L, 1, LQ_GRAPH);
  if (ud->freed) return 0;
  lg_drop(ud);
  lua_createtable(L, 0, 0);
  lua_setiuservalue(L, 1, 1);
  return 0;
}

static int lg_gc(lua_State *L) {
  lg_drop((lq_graph *)luaL_checkudata(L, 1, LQ_GRAPH));
  return 0;
}

static int lg_device(lua_State *L) {
  lq_graph *ud = lg_check(L, 1, "device");
  lua_pushstring(L, ud->dev->name);
  return 1;
}

static int lg_tostring(lua_State *L) {
  lq_graph *ud = (lq_graph *)luaL_checkudata(L, 1, LQ_GRAPH);
  if (ud->freed) lua_pushliteral(L, "qlua.Graph(freed)");
  else if (ud->eager) lua_pushfstring(L, "qlua.Graph(%s, eager)", ud->dev->name);
  else lua_pushfstring(L, "qlua.Graph(%s, captured)", ud->dev->name);
  return 1;
}

/* is_capturing([device]): whether a capture is under way there (default: the current GPU;
** false without one). */
static int q_is_capturing(lua_State *L) {
  lua_pushboolean(L, qt_graph_capturing(lq_optdevice(L, 1, "is_capturing")));
  return 1;
}

static const lq_Reg lg_methods[] = {
  {"replay", lg_replay, 1 | LQ_UNCOUNTED, "()",
   "queues the captured work again (the CPU: runs fn); returns fn's outputs, the same tensors"},
  {"free", lg_free, 1, "()", "frees the graph and lets go of fn, its arguments and outputs"},
  {"device", lg_device, 1, "()", "where the graph was captured (\"gpu:0\", or \"cpu\": eager)"},
  {NULL, NULL, 0, NULL, NULL}
};
static const lq_Reg lg_meta[] = {
  {"__call", lg_replay, 1 | LQ_UNCOUNTED, NULL, NULL},
  {"__gc", lg_gc, 1, NULL, NULL},
  {"__close", lg_free, 2, NULL, NULL},
  {"__tostring", lg_tostring, 1, NULL, NULL},
  {NULL, NULL, 0, NULL, NULL}
};
static const lq_Reg lg_funcs[] = {
  {"graph", q_graph, LG_MAXARGS | LQ_UNCOUNTED, "([opts,] fn, ...)",
   "captures fn(...)'s GPU work as a CUDA graph (opts device, pool, warmup); g:replay() reruns it"},
  {"is_capturing", q_is_capturing, 1, "([device])",
   "whether a CUDA graph capture is under way on the device (default the current GPU)"},
  {NULL, NULL, 0, NULL, NULL}
};

void lq_open_graph(lua_State *L, int box_idx, int module_idx) {
  box_idx = lua_absindex(L, box_idx);
  module_idx = lua_absindex(L, module_idx);
  luaL_newmetatable(L, LQ_GRAPH);
  lq_setfuncs(L, lg_meta, box_idx, true, NULL);
  lua_newtable(L);
  lq_setfuncs(L, lg_methods, box_idx, true, "Graph");
  lua_setfield(L, -2, "__index");
  lua_setfield(L, module_idx, "Graph");        /* qlua.Graph */
  lua_pushvalue(L, module_idx);
  lq_setfuncs(L, lg_funcs, box_idx, false, "qlua");
  lua_pop(L, 1);
}
