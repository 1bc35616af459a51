/* l_autograd.c — the hot path of qlua.autograd's recording (lua/qlua/autograd.lua), in C.
**
** qlua._autograd_recorder(Node, views) returns rec, a closure over the two:
**
**   rec(name, def, fin, fn, ...)
**
** calls fn(...) (a tensor op) and, when it returns one floating tensor o, makes o's node
** exactly as autograd.lua's record() would: a table with metatable Node holding name,
** def, args (the call's arguments, packed with n), node (itself: a node is the state of
** its first output), ne and, in its array part, four slots per operand that requires grad
** (the node that made it or the leaf itself, its output position or 0, the argument
** position, false); versions (tensor, storage version pairs) of what def.saves names
** (nil: every tensor argument; false: none) and, with def.out, of o (then outs = {o}); vv,
** o's storage version, when views[name] (o shares its input's storage). Then o's state
** (its userdata's user value 1, where autograd.lua keeps every tensor's) is the node. An error of fn goes to fin(false, err), which raises it under the op's name.
** Anything else (several results, a non-floating one) is returned as it came.
**
** autograd.lua sends only single-result ops without a list argument here; every other
** case (in place, several results, cat's list, custom functions) stays in Lua, as does
** the meaning of every field. Written in C because these table stores are most of what
** recording costs in Lua.
*/
#include <stdbool.h>
#include "lqlua.h"

#define AG_NODE lua_upvalueindex(1)
#define AG_VIEWS lua_upvalueindex(2)

static bool ag_float(const qt_tensor *t) {
  return t->dtype == QT_F32 || t->dtype == QT_F64 || t->dtype == QT_F16 || t->dtype == QT_BF16;
}

static lua_Integer ag_version(const qt_tensor *t) {
  return t->storage != NULL ? (lua_Integer)t->storage->version : 0;
}

/* appends (t, its version) to the list at idx (made when 0); returns the list's index */
static int ag_keep(lua_State *L, int list, int *n, int arg, const qt_tensor *t) {
  if (list == 0) {
    lua_createtable(L, 4, 0);
    list = lua_gettop(L);
  }
  lua_pushvalue(L, arg);
  lua_rawseti(L, list, ++*n);
  lua_pushinteger(L, ag_version(t));
  lua_rawseti(L, list, ++*n);
  return list;
}

static int ag_record(lua_State *L) {
  int nargs = lua_gettop(L) - 4;               /* the op's arguments: 5 .. 4 + nargs */
  luaL_checkstack(L, nargs + 16, "autograd");
  lua_createtable(L, nargs, 1);
  int args = lua_gettop(L);
  for (int i = 1; i <= nargs; i++) {
    lua_pushvalue(L, 4 + i);
    lua_rawseti(L, args, i);
  }
  lua_pushinteger(L, nargs);
  lua_setfield(L, args, "n");
  int base = args + 1;
  lua_pushvalue(L, 4);
  for (int i = 1; i <= nargs; i++) lua_pushvalue(L, 4 + i);
  if (lua_pcall(L, nargs, LUA_MULTRET, 0) != LUA_OK) {
    lua_pushvalue(L, 3);                        /* fin(false, err) raises, renamed */
    lua_pushboolean(L, 0);
    lua_pushvalue(L, -3);
    lua_call(L, 2, 0);
    return lua_error(L);
  }
  int nres = lua_gettop(L) - base + 1;
  if (nres != 1) return nres;
  const qt_tensor *o = qlua_totensor(L, base);
  if (o == NULL || !ag_float(o)) return 1;

  lua_createtable(L, 8, 8);
  int node = lua_gettop(L);
  lua_pushvalue(L, AG_NODE);
  lua_setmetatable(L, node);
  lua_pushvalue(L, 1);
  lua_setfield(L, node, "name");
  lua_pushvalue(L, 2);
  lua_setfield(L, node, "def");
  lua_pushvalue(L, args);
  lua_setfield(L, node, "args");
  lua_pushvalue(L, node);
  lua_setfield(L, node, "node");

  int saves_type = lua_getfield(L, 2, "saves");  /* nil: all; false: none; a set */
  int saves = lua_gettop(L);
  int versions = 0, nv = 0, ne = 0;
  for (int i = 1; i <= nargs; i++) {
    int a = 4 + i;
    if (lua_type(L, a) != LUA_TUSERDATA) continue;
    if (lua_getiuservalue(L, a, 1) == LUA_TTABLE) {  /* s: its state */
      int s = lua_gettop(L);
      lua_getfield(L, s, "req");
      bool req = lua_toboolean(L, -1);
      lua_pop(L, 1);
      if (req) {
        if (lua_getfield(L, s, "node") == LUA_TTABLE) {    /* the node that made it */
          int maker = lua_gettop(L);
          if (lua_getfield(L, maker, "vv") == LUA_TNUMBER) {
            const qt_tensor *v = qlua_totensor(L, a);
            if (v != NULL && ag_version(v) != lua_tointeger(L, -1)) {
              lua_getfield(L, maker, "name");
              lua_pushfstring(L, "autograd: this tensor is a view (made by %s) of a tensor "
                              "that was changed in place after the view was taken; take "
                              "the view again", lua_tostring(L, -1));
              return lua_error(L);
            }
          }
          lua_pop(L, 1);
          lua_rawseti(L, node, ne + 1);
          lua_getfield(L, s, "idx");
          lua_rawseti(L, node, ne + 2);
        } else {                                            /* a leaf */
          lua_pop(L, 1);
          lua_pushvalue(L, a);
          lua_rawseti(L, node, ne + 1);
          lua_pushinteger(L, 0);
          lua_rawseti(L, node, ne + 2);
        }
        lua_pushinteger(L, i);
        lua_rawseti(L, node, ne + 3);
        lua_pushboolean(L, 0);
        lua_rawseti(L, node, ne + 4);
        ne += 4;
      }
    }
    lua_pop(L, 1);
    bool keep = saves_type == LUA_TNIL;
    if (saves_type == LUA_TTABLE) {
      keep = lua_rawgeti(L, saves, i) != LUA_TNIL && lua_toboolean(L, -1);
      lua_pop(L, 1);
    }
    const qt_tensor *v = keep ? qlua_totensor(L, a) : NULL;
    if (v != NULL) versions = ag_keep(L, versions, &nv, a, v);
  }
  lua_pushinteger(L, ne);
  lua_setfield(L, node, "ne");
  lua_getfield(L, 2, "out");
  bool out = lua_toboolean(L, -1);
  lua_pop(L, 1);
  if (out) {
    lua_createtable(L, 1, 0);
    lua_pushvalue(L, base);
    lua_rawseti(L, -2, 1);
    lua_setfield(L, node, "outs");
    versions = ag_keep(L, versions, &nv, base, o);
  }
  if (versions != 0) {
    lua_pushvalue(L, versions);
    lua_setfield(L, node, "versions");
  }
  lua_pushvalue(L, 1);
  if (lua_rawget(L, AG_VIEWS) != LUA_TNIL) {
    lua_pushinteger(L, ag_version(o));
    lua_setfield(L, node, "vv");
  }
  lua_pop(L, 1);
  lua_pushvalue(L, node);                       /* o's state */
  lua_setiuservalue(L, base, 1);
  lua_pushvalue(L, base);
  return 1;
}

static int ag_recorder(lua_State *L) {
  luaL_checktype(L, 1, LUA_TTABLE);
  luaL_checktype(L, 2, LUA_TTABLE);
  lua_settop(L, 2);
  lua_pushcclosure(L, ag_record, 2);
  return 1;
}

const lq_Reg lq_autograd_functions[] = {
  {"_autograd_recorder", ag_recorder, 2, "(Node, views)",
   "qlua.autograd's recording of a one-result op, in C (internal: lua/qlua/autograd.lua "
   "builds its recorder with it)"},
  {NULL, NULL, 0, NULL, NULL}
};
