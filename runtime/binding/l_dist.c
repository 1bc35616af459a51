/*
** l_dist.c — qlua._dist, the C half of qlua.dist (lua/qlua/dist.lua has the API: options,
** environment variables, list forms): process groups and local groups as userdata over the
** core's qt_dist_* (ops_dist.c), collectives on tensors, work handles, and starting a job's
** local ranks (qt_dist_spawn).
**
** A group userdata frees its group when collected or destroyed. A work userdata keeps its
** group and its tensors alive in its user value until it is waited for or collected (a
** collected one is let go in stream order: the device's queue still waits for it, so its
** memory is only reused after). Destroying a group first lets go of its pending works.
*/
#include "lqlua.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define LQ_DIST_GROUP "qlua.DistGroup"
#define LQ_DIST_WORK "qlua.DistWork"

typedef struct lq_dist_group {
  qt_dist_group *g;   /* NULL once destroyed */
} lq_dist_group;

typedef struct lq_dist_work {
  qt_dist_work *w;    /* NULL once waited for or let go */
} lq_dist_work;

static const char *const dd_kinds[] = {"all_reduce", "broadcast", "reduce", "all_gather",
                                      "reduce_scatter", "all_to_all", NULL};
static const char *const dd_ops[] = {"sum", "prod", "max", "min", "avg", NULL};

static lq_dist_group *dd_group(lua_State *L, int idx, const char *op) {
  lq_dist_group *ud = (lq_dist_group *)luaL_checkudata(L, idx, LQ_DIST_GROUP);
  if (ud->g == NULL) luaL_error(L, "%s: the process group was destroyed", op);
  return ud;
}

/* The group's user value: a weak-keyed table of its pending works. */
static void dd_newgroup(lua_State *L, qt_dist_group *g) {
  lq_dist_group *ud = (lq_dist_group *)lua_newuserdatauv(L, sizeof *ud, 1);
  ud->g = g;
  luaL_setmetatable(L, LQ_DIST_GROUP);
  lua_newtable(L);
  lua_createtable(L, 0, 1);
  lua_pushliteral(L, "k");
  lua_setfield(L, -2, "__mode");
  lua_setmetatable(L, -2);
  lua_setiuservalue(L, -2, 1);
}

/* init(rank, world, addr, port, timeout) -> group */
static int dd_init(lua_State *L) {
  qt_ctx *ctx = lq_ctx(L);
  int rank = (int)luaL_checkinteger(L, 1), world = (int)luaL_checkinteger(L, 2);
  const char *addr = lua_isnoneornil(L, 3) ? NULL : lq_checkcstring(L, 3, "init_process_group", "master_addr");
  int port = (int)luaL_optinteger(L, 4, 0);
  double timeout = luaL_checknumber(L, 5);
  qt_dist_group *g;
  if (qt_dist_init(ctx, rank, world, addr, port, timeout, &g) != 0) return lq_raise(L, ctx);
  dd_newgroup(L, g);
  return 1;
}

/* local_group({tensor or device, ...}) -> group: rank r is the r-th entry's device */
static int dd_local_group(lua_State *L) {
  qt_ctx *ctx = lq_ctx(L);
  const char *op = "local_group";
  luaL_checktype(L, 1, LUA_TTABLE);
  int n = (int)luaL_len(L, 1);
  if (n < 1 || n > 64) return luaL_error(L, "%s: %d devices given (1 to 64)", op, n);
  qt_device *devs[64];
  for (int i = 0; i < n; i++) {
    lua_rawgeti(L, 1, i + 1);
    qt_tensor *t = qlua_totensor(L, -1);
    if (t != NULL && t->storage == NULL) luaL_error(L, "%s: tensor %d has been freed", op, i + 1);
    devs[i] = t != NULL ? t->storage->device : lq_checkdevice(L, lua_gettop(L), op);
    lua_pop(L, 1);
  }
  qt_dist_group *g;
  if (qt_dist_local(ctx, devs, n, &g) != 0) return lq_raise(L, ctx);
  dd_newgroup(L, g);
  return 1;
}

/* Lets go of every pending work of the group at idx. */
static void dd_release_works(lua_State *L, int idx) {
  lua_getiuservalue(L, idx, 1);
  lua_pushnil(L);
  while (lua_next(L, -2) != 0) {
    lua_pop(L, 1);
    lq_dist_work *w = (lq_dist_work *)luaL_testudata(L, -1, LQ_DIST_WORK);
    if (w != NULL && w->w != NULL) {
      qt_dist_release(w->w);
      w->w = NULL;
    }
  }
  lua_pop(L, 1);
}

/* group:destroy() and __gc: never raise */
static int dd_destroy(lua_State *L) {
  lq_dist_group *ud = (lq_dist_group *)luaL_checkudata(L, 1, LQ_DIST_GROUP);
  if (ud->g == NULL) return 0;
  dd_release_works(L, 1);
  qt_dist_free(ud->g, false);
  ud->g = NULL;
  return 0;
}

static int dd_rank(lua_State *L) {
  lua_pushinteger(L, qt_dist_rank(dd_group(L, 1, "get_rank")->g));
  return 1;
}

static int dd_world(lua_State *L) {
  lua_pushinteger(L, qt_dist_world(dd_group(L, 1, "get_world_size")->g));
  return 1;
}

static int dd_barrier(lua_State *L) {
  qt_ctx *ctx = lq_ctx(L);
  if (qt_dist_barrier(ctx, dd_group(L, 1, "barrier")->g) != 0) return lq_raise(L, ctx);
  return 0;
}

/* The arguments both collective forms start with: (group, kind, op, root). */
typedef struct dd_call {
  lq_dist_group *gd;
  int kind, rop, root;
  const char *op;
} dd_call;

static dd_call dd_args(lua_State *L) {
  dd_call c;
  c.gd = dd_group(L, 1, "dist");
  c.kind = luaL_checkoption(L, 2, NULL, dd_kinds);
  c.rop = luaL_checkoption(L, 3, "sum", dd_ops);
  c.root = (int)luaL_optinteger(L, 4, 0);
  c.op = dd_kinds[c.kind];
  return c;
}

/* collective(group, kind, op, root, in, out, async [, send, recv]) -> work or nothing;
** send and recv: all_to_all's element counts per rank */
static int dd_collective(lua_State *L) {
  qt_ctx *ctx = lq_ctx(L);
  dd_call c = dd_args(L);
  lq_dist_group *gd = c.gd;
  int kind = c.kind, rop = c.rop, root = c.root;
  const char *op = c.op;
  qt_tensor *in = lq_checklive(L, 5, op), *out = lq_checklive(L, 6, op);
  bool async = lua_toboolean(L, 7);
  qt_dist_work *w = NULL;
  int rc;
  if (kind == QT_COLL_ALL_TO_ALL && !lua_isnoneornil(L, 8)) {
    /* the counts per rank: send (arg 8) and receive (arg 9) lists of world integers */
    int world = qt_dist_world(gd->g);
    int64_t *counts = (int64_t *)lua_newuserdatauv(L, sizeof(int64_t) * 2 * (size_t)world, 0);
    for (int which = 0; which < 2; which++) {
      int arg = 8 + which;
      luaL_checktype(L, arg, LUA_TTABLE);
      if (luaL_len(L, arg) != world)
        return luaL_error(L, "%s: %d %s counts for a world of %d", op, (int)luaL_len(L, arg),
                          which == 0 ? "send" : "receive", world);
      for (int r = 0; r < world; r++) {
        lua_rawgeti(L, arg, r + 1);
        if (!lua_isinteger(L, -1))
          return luaL_error(L, "%s: %s count %d is not an integer", op, which == 0 ? "send" : "receive", r + 1);
        counts[which * world + r] = (int64_t)lua_tointeger(L, -1);
        lua_pop(L, 1);
      }
    }
    rc = qt_dist_all_to_all(ctx, gd->g, in, out, counts, counts + world, async ? &w : NULL);
    lua_pop(L, 1);
  } else {
    rc = qt_dist_collective(ctx, gd->g, (qt_coll_kind)kind, (qt_dist_op)rop, root, in, out,
                            async ? &w : NULL);
  }
  if (rc != 0) return lq_raise(L, ctx);
  if (!async) return 0;
  lq_dist_work *wd = (lq_dist_work *)lua_newuserdatauv(L, sizeof *wd, 1);
  wd->w = w;
  luaL_setmetatable(L, LQ_DIST_WORK);
  lua_createtable(L, 3, 0);   /* what the work holds: its group and tensors */
  lua_pushvalue(L, 1);
  lua_rawseti(L, -2, 1);
  lua_pushvalue(L, 5);
  lua_rawseti(L, -2, 2);
  lua_pushvalue(L, 6);
  lua_rawseti(L, -2, 3);
  lua_setiuservalue(L, -2, 1);
  if (w != NULL) {            /* the group lists it, to let it go when destroyed */
    lua_getiuservalue(L, 1, 1);
    lua_pushvalue(L, -2);
    lua_pushboolean(L, 1);
    lua_rawset(L, -3);
    lua_pop(L, 1);
  }
  return 1;
}

/* collective_local(group, kind, op, root, ins, outs) */
static int dd_collective_local(lua_State *L) {
  qt_ctx *ctx = lq_ctx(L);
  dd_call c = dd_args(L);
  lq_dist_group *gd = c.gd;
  int kind = c.kind, rop = c.rop, root = c.root;
  const char *op = c.op;
  luaL_checktype(L, 5, LUA_TTABLE);
  luaL_checktype(L, 6, LUA_TTABLE);
  int n = qt_dist_world(gd->g);
  if (luaL_len(L, 5) != n || luaL_len(L, 6) != n)
    return luaL_error(L, "%s: the local group has %d GPUs: one tensor each expected, got %d and %d",
                      op, n, (int)luaL_len(L, 5), (int)luaL_len(L, 6));
  const qt_tensor *ins[64], *outs[64];
  for (int r = 0; r < n; r++) {
    lua_rawgeti(L, 5, r + 1);
    ins[r] = lq_checklive(L, -1, op);
    lua_rawgeti(L, 6, r + 1);
    outs[r] = lq_checklive(L, -1, op);
    lua_pop(L, 2);   /* the tables keep them alive */
  }
  if (qt_dist_collective_local(ctx, gd->g, (qt_coll_kind)kind, (qt_dist_op)rop, root, ins, outs) != 0)
    return lq_raise(L, ctx);
  return 0;
}

/* work:wait(): returns true; a second wait does nothing */
static int dd_wait(lua_State *L) {
  qt_ctx *ctx = lq_ctx(L);
  lq_dist_work *wd = (lq_dist_work *)luaL_checkudata(L, 1, LQ_DIST_WORK);
  qt_dist_work *w = wd->w;
  wd->w = NULL;
  if (w != NULL && qt_dist_wait(ctx, w) != 0) return lq_raise(L, ctx);
  lua_pushboolean(L, 1);
  return 1;
}

static int dd_work_gc(lua_State *L) {
  lq_dist_work *wd = (lq_dist_work *)luaL_checkudata(L, 1, LQ_DIST_WORK);
  if (wd->w != NULL) qt_dist_release(wd->w);
  wd->w = NULL;
  return 0;
}

static int dd_is_completed(lua_State *L) {
  lq_dist_work *wd = (lq_dist_work *)luaL_checkudata(L, 1, LQ_DIST_WORK);
  lua_pushboolean(L, wd->w == NULL);
  return 1;
}

/* spawn(n, {argv...}, grace) -> the first failure's exit status, 0 when every rank succeeds */
static int dd_spawn(lua_State *L) {
  const char *op = "launch";
  int n = (int)luaL_checkinteger(L, 1);
  luaL_checktype(L, 2, LUA_TTABLE);
  double grace = luaL_optnumber(L, 3, 10);
  if (n < 1 || n > 1024) return luaL_error(L, "%s: %d processes (1 to 1024)", op, n);
  int argc = (int)luaL_len(L, 2);
  if (argc < 1 || argc > 4096) return luaL_error(L, "%s: no command to run", op);
  char **argv = (char **)lua_newuserdatauv(L, sizeof(char *) * (size_t)(argc + 1), 0);
  for (int i = 0; i < argc; i++) {
    lua_rawgeti(L, 2, i + 1);
    if (!lua_isstring(L, -1)) return luaL_error(L, "%s: argument %d is not a string", op, i + 1);
    argv[i] = (char *)lq_tocstring(L, -1, op, "an argument");
    lua_pop(L, 1);   /* the table keeps the string */
  }
  argv[argc] = NULL;
  qt_err err;
  int status = 0;
  if (qt_dist_spawn(n, argv, grace, &status, &err) != 0) return luaL_error(L, "%s: %s", op, err.msg);
  lua_pushinteger(L, status);
  return 1;
}

/* exe() -> the running program's path (/proc/self/exe, or nil), and whether it is the qlua
** host (else a Lua interpreter that loaded qlua.so: its ranks need -l qlua) */
static int dd_exe(lua_State *L) {
  char buf[4096];
  ssize_t n = readlink("/proc/self/exe", buf, sizeof buf - 1);
  if (n <= 0) lua_pushnil(L);
  else {
    buf[n] = '\0';
    lua_pushstring(L, buf);
  }
  lua_getfield(L, LUA_REGISTRYINDEX, "qlua.host");
  lua_pushboolean(L, lua_toboolean(L, -1));
  lua_remove(L, -2);
  return 2;
}

static int dd_free_port(lua_State *L) {
  qt_err err;
  int p = qt_dist_free_port(&err);
  if (p < 0) return luaL_error(L, "dist: %s", err.msg);
  lua_pushinteger(L, p);
  return 1;
}

static const lq_Reg dd_funcs[] = {
  {"init", dd_init, 5, NULL, NULL},
  {"local_group", dd_local_group, 1, NULL, NULL},
  {"destroy", dd_destroy, 1, NULL, NULL},
  {"rank", dd_rank, 1, NULL, NULL},
  {"world", dd_world, 1, NULL, NULL},
  {"barrier", dd_barrier, 1, NULL, NULL},
  {"collective", dd_collective, 9, NULL, NULL},
  {"collective_local", dd_collective_local, 6, NULL, NULL},
  {"spawn", dd_spawn, 3, NULL, NULL},
  {"exe", dd_exe, 0, NULL, NULL},
  {"free_port", dd_free_port, 0, NULL, NULL},
  {NULL, NULL, 0, NULL, NULL}
};
static const lq_Reg dd_group_meta[] = {
  {"__gc", dd_destroy, 1, NULL, NULL},
  {NULL, NULL, 0, NULL, NULL}
};
static const lq_Reg dd_work_methods[] = {
  {"wait", dd_wait, 1, "()", "waits for the collective (a GPU's on the host, polling the ranks)"},
  {"is_completed", dd_is_completed, 1, "()", "whether wait has returned (or the work was done when made)"},
  {NULL, NULL, 0, NULL, NULL}
};
static const lq_Reg dd_work_meta[] = {
  {"__gc", dd_work_gc, 1, NULL, NULL},
  {NULL, NULL, 0, NULL, NULL}
};

void lq_open_dist(lua_State *L, int box_idx, int module_idx) {
  box_idx = lua_absindex(L, box_idx);
  module_idx = lua_absindex(L, module_idx);
  luaL_newmetatable(L, LQ_DIST_GROUP);
  lq_setfuncs(L, dd_group_meta, box_idx, true, NULL);
  lua_pop(L, 1);
  luaL_newmetatable(L, LQ_DIST_WORK);
  lq_setfuncs(L, dd_work_meta, box_idx, true, NULL);
  lua_newtable(L);
  lq_setfuncs(L, dd_work_methods, box_idx, true, NULL);   /* documented in API.md, as qlua.dist */
  lua_setfield(L, -2, "__index");
  lua_pop(L, 1);
  lua_newtable(L);
  lq_setfuncs(L, dd_funcs, box_idx, false, NULL);
  lua_setfield(L, module_idx, "_dist");
}
