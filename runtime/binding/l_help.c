/*
** l_help.c — what makes qlua readable at the REPL: qlua.help, one line of documentation
** (signature and purpose) for every module function and method, and the metatable of
** the tables t:shape() returns, whose __tostring shows them as {2, 3}.
**
** The one-liners are not written here: each binding function's row carries its
** signature and purpose (lq_Reg's args and help, in the file that implements it; the
** elementwise ops' come from their rows in scalar.h's op lists), lq_setfuncs records the
** documented rows in the registry's LQ_API list, and qlua.help reads that list.
** spec/host/help_spec.lua lists qlua and the Tensor methods at run time and fails when a
** function has no entry, so no function goes undocumented silently.
**
** help holds no tensor and calls Lua's print, so it is registered uncounted (as bench):
** ops run by a replaced print do not search the stack for calls below them.
*/
#include <string.h>

#include "lqlua.h"

/* ================================================================ shape tables */

#define LH_SHAPE "qlua.Shape"

/* __tostring of a shape table: its entries as they are now (the table is the caller's
** to change), "{2, 3}", "{}" for a 0-d tensor's. */
static int lh_shape_tostring(lua_State *L) {
  luaL_checktype(L, 1, LUA_TTABLE);
  lua_Integer n = (lua_Integer)lua_rawlen(L, 1);
  luaL_Buffer b;
  luaL_buffinit(L, &b);
  luaL_addchar(&b, '{');
  for (lua_Integer i = 1; i <= n; i++) {
    if (i > 1) luaL_addstring(&b, ", ");
    lua_rawgeti(L, 1, i);
    luaL_tolstring(L, -1, NULL);
    lua_remove(L, -2);            /* the entry; its string stays on top for addvalue */
    luaL_addvalue(&b);
  }
  luaL_addchar(&b, '}');
  luaL_pushresult(&b);
  return 1;
}

/* A plain table of the n sizes at keys 1..n, so indexing, # and ipairs are a table's;
** only tostring differs. No __eq: == stays identity, which callers use to tell a fresh
** table from another (the fuzzer does). The metatable is made on first use and kept in
** the registry under LH_SHAPE. */
void lq_pushshape(lua_State *L, int n, const int64_t *size) {
  lua_createtable(L, n, 0);
  for (int d = 0; d < n; d++) {
    lua_pushinteger(L, (lua_Integer)size[d]);
    lua_rawseti(L, -2, d + 1);
  }
  if (luaL_newmetatable(L, LH_SHAPE)) {   /* sets __name */
    lua_pushcfunction(L, lh_shape_tostring);
    lua_setfield(L, -2, "__tostring");
  }
  lua_setmetatable(L, -2);
}

/* ================================================================ qlua.help */

/* The topics, and how their entries are written: "qlua.cat(list [, dim])", "t:slice(...)",
** "k:launch(...)", "m:kernel(...)". A name may be asked with the prefix or the others. */
#define LH_NKINDS 4
static const struct lh_kindinfo {
  const char *topic;        /* qlua.help(topic) lists the kind's entries */
  const char *signature;    /* the prefix of its entries' signatures */
  const char *names[3];     /* more prefixes a name may be asked with */
} lh_kinds[LH_NKINDS] = {
  {"qlua", "qlua.", {NULL, NULL, NULL}},
  {"Tensor", "t:", {"Tensor.", "Tensor:", "t."}},
  {"Kernel", "k:", {"Kernel.", "Kernel:", "k."}},
  {"Module", "m:", {"Module.", "Module:", "m."}},
};

static int lh_kind_of(const char *topic) {
  for (int k = 0; k < LH_NKINDS; k++)
    if (strcmp(topic, lh_kinds[k].topic) == 0) return k;
  return -1;
}

/* Pushes the registry's API list (every documented row, lq_setfuncs) and returns its length. */
static lua_Integer lh_api(lua_State *L) {
  if (lua_getfield(L, LUA_REGISTRYINDEX, LQ_API) != LUA_TTABLE) {
    lua_pop(L, 1);
    lua_newtable(L);
  }
  return (lua_Integer)lua_rawlen(L, -1);
}

/* Pushes field `key` of entry i of the list at `api`. */
static int lh_field(lua_State *L, int api, lua_Integer i, const char *key) {
  lua_rawgeti(L, api, i);
  int type = lua_getfield(L, -1, key);
  lua_remove(L, -2);
  return type;
}

/* Whether entry i (of the list at api) is what `s` asks for: a topic lists its entries, a
** prefixed name ("qlua.cat", "Tensor.slice", "t:slice") one kind's, a bare name ("matmul")
** every kind's; or, with s NULL, the entry whose function is the value at fn_idx. */
static bool lh_matches(lua_State *L, int api, lua_Integer i, const char *s, int fn_idx) {
  if (s == NULL) {
    lh_field(L, api, i, "fn");
    bool same = lua_rawequal(L, -1, fn_idx);
    lua_pop(L, 1);
    return same;
  }
  lh_field(L, api, i, "topic");
  int kind = lh_kind_of(lua_tostring(L, -1));
  lua_pop(L, 1);
  if (kind < 0) return false;
  const struct lh_kindinfo *ki = &lh_kinds[kind];
  if (strcmp(s, ki->topic) == 0) return true;
  const char *want = s;
  for (int k = 0; k < LH_NKINDS; k++) {      /* a prefix of another kind: not this entry */
    const struct lh_kindinfo *o = &lh_kinds[k];
    const char *prefixes[4] = {o->signature, o->names[0], o->names[1], o->names[2]};
    for (int p = 0; p < 4; p++)
      if (prefixes[p] != NULL && strncmp(s, prefixes[p], strlen(prefixes[p])) == 0) {
        if (k != kind) return false;
        want = s + strlen(prefixes[p]);
      }
  }
  lh_field(L, api, i, "name");
  bool same = strcmp(lua_tostring(L, -1), want) == 0;
  lua_pop(L, 1);
  return same;
}

/* qlua.help([name | function]): prints, through the global print (so a replaced print
** captures it), one line per entry found: "signature -- purpose", topic by topic (qlua's,
** Tensor's, Kernel's, Module's), each in registration order.
** Returns nothing, so the REPL does not print it twice. */
int lq_help(lua_State *L) {
  if (lua_isnoneornil(L, 1)) {
    lua_getglobal(L, "print");
    lua_pushliteral(L, "usage: qlua.help(\"cat\" | \"slice\" | \"Tensor.slice\" | "
                    "qlua.cat) prints a function's signature and purpose; "
                    "qlua.help(\"qlua\"), qlua.help(\"Tensor\") list them all");
    lua_call(L, 1, 0);
    return 0;
  }
  const char *name = NULL;
  if (lua_type(L, 1) == LUA_TSTRING) name = lq_tocstring(L, 1, "help", "the name");
  else if (!lua_isfunction(L, 1)) return luaL_typeerror(L, 1, "string or function");
  lua_settop(L, 1);
  lua_Integer n = lh_api(L);
  int api = lua_gettop(L);
  lua_getglobal(L, "print");
  luaL_Buffer b;
  luaL_buffinit(L, &b);
  int found = 0;
  for (int kind = 0; kind < LH_NKINDS; kind++)    /* qlua's entries first, then Tensor's ... */
  for (lua_Integer i = 1; i <= n; i++) {
    lh_field(L, api, i, "topic");
    bool of_kind = lh_kind_of(lua_tostring(L, -1)) == kind;
    lua_pop(L, 1);
    if (!of_kind || !lh_matches(L, api, i, name, 1)) continue;
    const char *prefix = lh_kinds[kind].signature;
    if (found++ > 0) luaL_addchar(&b, '\n');
    luaL_addstring(&b, prefix);
    lh_field(L, api, i, "name");
    luaL_addvalue(&b);
    lh_field(L, api, i, "args");
    luaL_addvalue(&b);
    luaL_addstring(&b, " -- ");
    lh_field(L, api, i, "help");
    luaL_addvalue(&b);
  }
  if (found == 0) {
    if (name != NULL) return luaL_error(L, "help: no documentation for '%s'", name);
    return luaL_error(L, "help: no documentation for this function (not a qlua "
                      "function or method)");
  }
  luaL_pushresult(&b);
  lua_call(L, 1, 0);
  return 0;
}
