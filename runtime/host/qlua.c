/*
** qlua.c — the qlua host program: a stand-alone Lua 5.4 interpreter with the qlua
** runtime preloaded as the global `qlua`. This file is main() and the command line,
** the part that follows Lua 5.4's lua.c; the interactive side is repl.c, and both run
** statements and report errors through call.c (host.h).
**
** The command line is exactly lua5.4's (`qlua [options] [script [args]]`, -e -l -i -v
** -E -W -- -, LUA_INIT_5_4 / LUA_INIT, the `arg` table, _PROMPT / _PROMPT2, exit
** statuses, "progname: message" plus a traceback on errors), so scripts and shell
** habits written for lua5.4 carry over unchanged; the behaviour follows Lua 5.4's
** lua.c (all work inside one protected call, a message handler that adds the
** traceback, SIGINT turned into a debug hook), written afresh here.
**
** What qlua adds is the interactive side (repl.c): when stdin is a terminal the REPL
** reads lines with GNU readline, completes names and keeps a persistent history; when
** stdin is not a terminal, `-i` reads plain lines and prints exactly what Debian's
** lua5.4 prints.
**
** Owner: the host program (runtime/host/). The runtime itself comes from luaopen_qlua
** (runtime/qlua.h); nothing here knows about tensors or devices.
*/

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "lua.h"
#include "lauxlib.h"
#include "lualib.h"

#include "qlua.h"
#include "host.h"
#include "ops.h"   /* qt_dist_spawn: --nproc */

#ifndef QLUA_VERSION
#define QLUA_VERSION "0.1.0"
#endif

#define QH_INIT_VAR         "LUA_INIT"
#define QH_INIT_VAR_VERSION "LUA_INIT_5_4"

/* {======================================================================
** The command line
** ======================================================================= */

#define QH_ARGS_ERROR 1   /* bad option: the whole value is just this */
#define QH_ARGS_I     2
#define QH_ARGS_V     4
#define QH_ARGS_E     8   /* at least one -e */
#define QH_ARGS_NOENV 16  /* -E */

/* -v and the REPL's banner: lua5.4's line, LUA_COPYRIGHT, with qlua's name and version
   in front, so whatever reads the end of lua's banner reads ours the same */
#define QH_BANNER "qlua " QLUA_VERSION "  " LUA_COPYRIGHT

static void qh_print_version (void) {
  lua_writestring(QH_BANNER, strlen(QH_BANNER));
  lua_writeline();
}

static void qh_print_usage (const char *badoption) {
  lua_writestringerror("%s: ", qh_progname);
  if (badoption[1] == 'e' || badoption[1] == 'l')
    lua_writestringerror("'%s' needs argument\n", badoption);
  else
    lua_writestringerror("unrecognized option '%s'\n", badoption);
  lua_writestringerror(
    "usage: %s [options] [script [args]]\n"
    "Available options are:\n"
    "  -e stat   execute string 'stat'\n"
    "  -i        enter interactive mode after executing 'script'\n"
    "  -l mod    require library 'mod' into global 'mod'\n"
    "  -l g=mod  require library 'mod' into global 'g'\n"
    "  -v        show version information\n"
    "  -E        ignore environment variables\n"
    "  -W        turn warnings on\n"
    "  --        stop handling options\n"
    "  -         stop handling options and execute stdin\n",
    qh_progname);
}

/*
** First pass over argv: validate the options and find the script. Returns a set of
** QH_ARGS_* flags; *script gets the index of the script (argc when there is none), or
** of the offending option when the result is QH_ARGS_ERROR. Nothing runs here: -e and
** -l are executed in order by qh_run_options once the state is ready.
*/
static int qh_collect_args (char **argv, int *script) {
  int flags = 0;
  int i;
  if (argv[0] == NULL) {      /* no program name at all */
    *script = -1;
    return 0;
  }
  if (argv[0][0] != '\0') qh_progname = argv[0];
  for (i = 1; argv[i] != NULL; i++) {
    *script = i;
    if (argv[i][0] != '-') return flags;            /* the script */
    switch (argv[i][1]) {
      case '-':                                       /* "--" */
        if (argv[i][2] != '\0') return QH_ARGS_ERROR;
        *script = i + 1;
        return flags;
      case '\0':                                      /* "-": stdin is the script */
        return flags;
      case 'E':
        if (argv[i][2] != '\0') return QH_ARGS_ERROR;
        flags |= QH_ARGS_NOENV;
        break;
      case 'W':
        if (argv[i][2] != '\0') return QH_ARGS_ERROR;
        break;
      case 'i':
        if (argv[i][2] != '\0') return QH_ARGS_ERROR;
        flags |= QH_ARGS_I | QH_ARGS_V;               /* -i implies -v */
        break;
      case 'v':
        if (argv[i][2] != '\0') return QH_ARGS_ERROR;
        flags |= QH_ARGS_V;
        break;
      case 'e':
        flags |= QH_ARGS_E;
        /* FALLTHROUGH */
      case 'l':                                       /* both take an argument */
        if (argv[i][2] == '\0') {
          i++;
          if (argv[i] == NULL || argv[i][0] == '-') return QH_ARGS_ERROR;
        }
        break;
      default:
        return QH_ARGS_ERROR;
    }
  }
  *script = i;                                        /* no script */
  return flags;
}

/*
** The global `arg`: the script at 0, its arguments at 1.., the interpreter and its
** options at negative indices. Without a script everything is shifted so argv[0] is
** at 0 (lua.c does the same).
*/
static void qh_create_arg_table (lua_State *L, char **argv, int argc, int script) {
  int i;
  if (script == argc) script = 0;
  lua_createtable(L, argc - (script + 1), script + 1);
  for (i = 0; i < argc; i++) {
    lua_pushstring(L, argv[i]);
    lua_rawseti(L, -2, i - script);
  }
  lua_setglobal(L, "arg");
}

static int qh_dochunk (lua_State *L, int status) {
  if (status == LUA_OK) status = qh_docall(L, 0, 0);
  return qh_report(L, status);
}

static int qh_dofile (lua_State *L, const char *name) {
  return qh_dochunk(L, luaL_loadfile(L, name));
}

static int qh_dostring (lua_State *L, const char *s, const char *chunkname) {
  return qh_dochunk(L, luaL_loadbuffer(L, s, strlen(s), chunkname));
}

/* -l mod / -l g=mod: g = require("mod") */
static int qh_dolibrary (lua_State *L, const char *spec) {
  int status;
  const char *eq = strchr(spec, '=');
  const char *modname = (eq != NULL) ? eq + 1 : spec;
  lua_getglobal(L, "require");
  lua_pushstring(L, modname);
  status = qh_docall(L, 1, 1);
  if (status == LUA_OK) {
    if (eq != NULL) lua_pushlstring(L, spec, (size_t)(eq - spec));
    else lua_pushstring(L, spec);
    lua_insert(L, -2);
    lua_setglobal(L, lua_tostring(L, -2));
    lua_pop(L, 1);
  }
  return qh_report(L, status);
}

/* Run -e, -l and -W in command-line order (options before the script only). */
static int qh_run_options (lua_State *L, char **argv, int optlimit) {
  int i;
  for (i = 1; i < optlimit; i++) {
    int option = argv[i][1];
    switch (option) {
      case 'e':
      case 'l': {
        int status;
        const char *value = argv[i] + 2;
        if (*value == '\0') value = argv[++i];
        status = (option == 'e') ? qh_dostring(L, value, "=(command line)")
                                 : qh_dolibrary(L, value);
        if (status != LUA_OK) return 0;
        break;
      }
      case 'W':
        lua_warning(L, "@on", 0);
        break;
      default:
        break;
    }
  }
  return 1;
}

/* LUA_INIT_5_4, else LUA_INIT: a chunk, or "@file" to run a file. */
static int qh_handle_luainit (lua_State *L) {
  const char *chunkname = "=" QH_INIT_VAR_VERSION;
  const char *init = getenv(chunkname + 1);
  if (init == NULL) {
    chunkname = "=" QH_INIT_VAR;
    init = getenv(chunkname + 1);
  }
  if (init == NULL) return LUA_OK;
  if (init[0] == '@') return qh_dofile(L, init + 1);
  return qh_dostring(L, init, chunkname);
}

/* Push arg[1..#arg] (the script's arguments) and return how many. */
static int qh_push_script_args (lua_State *L) {
  int i, n;
  if (lua_getglobal(L, "arg") != LUA_TTABLE)
    luaL_error(L, "'arg' is not a table");
  n = (int)luaL_len(L, -1);
  luaL_checkstack(L, n + 3, "too many arguments to script");
  for (i = 1; i <= n; i++)
    lua_rawgeti(L, -i, i);
  lua_remove(L, -i);
  return n;
}

/* Load and run the script; "-" is stdin unless it came right after "--". */
static int qh_handle_script (lua_State *L, char **argv) {
  int status;
  const char *fname = argv[0];
  if (strcmp(fname, "-") == 0 && strcmp(argv[-1], "--") != 0)
    fname = NULL;
  status = luaL_loadfile(L, fname);
  if (status == LUA_OK) {
    int n = qh_push_script_args(L);
    status = qh_docall(L, n, LUA_MULTRET);
  }
  return qh_report(L, status);
}

/* }====================================================================== */


/* {======================================================================
** main
** ======================================================================= */

/* qlua's own Lua libraries (qlua.autograd, qlua.testing, ...) are found next to the
** binary: <exe>/../share/lua/5.4 where `make install` puts them, <exe>/../lua in a
** checkout (build/qlua). A searcher of its own, after the standard ones, so package.path
** stays lua5.4's and a module that is found nowhere reads as it does in lua5.4 (the
** searcher adds nothing to the message). Upvalue 1: the path template. */
static int qh_search_own (lua_State *L) {
  const char *name = luaL_checkstring(L, 1);
  if (strncmp(name, "qlua.", 5) != 0) return 0;
  lua_getglobal(L, "package");
  lua_getfield(L, -1, "searchpath");
  if (!lua_isfunction(L, -1)) return 0;
  lua_pushvalue(L, 1);
  lua_pushvalue(L, lua_upvalueindex(1));
  lua_call(L, 2, 1);
  const char *file = lua_tostring(L, -1);
  if (file == NULL) return 0;
  if (luaL_loadfile(L, file) != LUA_OK)
    return luaL_error(L, "error loading module '%s' from file '%s':\n\t%s", name, file,
                      lua_tostring(L, -1));
  lua_pushstring(L, file);
  return 2;
}

static void qh_add_lua_dirs (lua_State *L, const char *argv0) {
  char exe[4096];
  ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
  if (n > 0) exe[n] = '\0';
  else if (argv0 != NULL && strchr(argv0, '/') != NULL && realpath(argv0, exe) != NULL) n = 1;
  if (n <= 0) return;                 /* (no /proc: argv[0] when it names a path) */
  char *slash = strrchr(exe, '/');
  if (slash == NULL) return;
  *slash = '\0';
  lua_getglobal(L, "package");
  if (lua_istable(L, -1) && lua_getfield(L, -1, "searchers") == LUA_TTABLE) {
    lua_pushfstring(L, "%s/../share/lua/5.4/?.lua;%s/../share/lua/5.4/?/init.lua;"
                    "%s/../lua/?.lua;%s/../lua/?/init.lua", exe, exe, exe, exe);
    lua_pushcclosure(L, qh_search_own, 1);
    lua_rawseti(L, -2, (lua_Integer)luaL_len(L, -2) + 1);
  }
  lua_pop(L, 2);
}

/*
** Everything runs here, inside lua_pcall, so even a memory error while opening the
** libraries is reported instead of aborting. Order (as lua.c): validate options,
** -v, -E, libraries (+ qlua), arg, LUA_INIT, -e/-l/-W, the script, then the REPL or
** stdin. Returns true on success.
*/
static int qh_pmain (lua_State *L) {
  int argc = (int)lua_tointeger(L, 1);
  char **argv = (char **)lua_touserdata(L, 2);
  int script = argc;
  int flags = qh_collect_args(argv, &script);
  int optlimit = (script > 0) ? script : argc;
  luaL_checkversion(L);
  if (flags == QH_ARGS_ERROR) {
    qh_print_usage(argv[script]);
    return 0;
  }
  if (script < 0) script = argc;              /* empty argv */
  if (flags & QH_ARGS_V) qh_print_version();
  if (flags & QH_ARGS_NOENV) {                /* libraries ignore LUA_PATH & co */
    lua_pushboolean(L, 1);
    lua_setfield(L, LUA_REGISTRYINDEX, "LUA_NOENV");
  }
  luaL_openlibs(L);
  qh_add_lua_dirs(L, argc > 0 ? argv[0] : NULL);
  lua_pushboolean(L, 1);                      /* qlua.dist.launch runs this host again */
  lua_setfield(L, LUA_REGISTRYINDEX, "qlua.host");
  luaL_requiref(L, "qlua", luaopen_qlua, 1);
  lua_pop(L, 1);
  /* also in package.preload, so require "qlua" finds it even after package.loaded.qlua
  ** was cleared (luaopen_qlua returns the same module table again) */
  luaL_getsubtable(L, LUA_REGISTRYINDEX, LUA_PRELOAD_TABLE);
  lua_pushcfunction(L, luaopen_qlua);
  lua_setfield(L, -2, "qlua");
  lua_pop(L, 1);
  qh_create_arg_table(L, argv, argc, script);
  lua_gc(L, LUA_GCRESTART);
  lua_gc(L, LUA_GCGEN, 0, 0);
  if (!(flags & QH_ARGS_NOENV) && qh_handle_luainit(L) != LUA_OK)
    return 0;
  if (!qh_run_options(L, argv, optlimit))
    return 0;
  if (script < argc && qh_handle_script(L, argv + script) != LUA_OK)
    return 0;
  if (flags & QH_ARGS_I)
    qh_repl(L);
  else if (script == argc && !(flags & (QH_ARGS_E | QH_ARGS_V))) {
    if (isatty(STDIN_FILENO)) {
      qh_print_version();
      qh_repl(L);
    }
    else
      qh_dofile(L, NULL);                     /* stdin as a script */
  }
  lua_pushboolean(L, 1);
  return 1;
}

/*
** qlua --nproc N [options] [script [args]]: the rest of the command line, N times, as the
** local ranks of one job (qt_dist_spawn sets torchrun's variables); the exit status is the
** first failing rank's.
*/
static int qh_launch (int argc, char **argv) {
  const char *count = argv[1][7] == '=' ? argv[1] + 8 : argc > 2 ? argv[2] : "";
  int rest = argv[1][7] == '=' ? 2 : 3;
  char *end;
  long n = strtol(count, &end, 10);
  if (argv[1][7] != '=' && argv[1][7] != '\0') {
    qh_print_usage(argv[1]);   /* lua5.4's usage, as for any unknown option */
    return EXIT_FAILURE;
  }
  if (*count == '\0' || *end != '\0' || n < 1 || n > 1024) {
    qh_message(argv[0], "--nproc needs a number of processes (1 to 1024): qlua --nproc N script.lua [args]");
    return EXIT_FAILURE;
  }
  char exe[4096];
  ssize_t len = readlink("/proc/self/exe", exe, sizeof exe - 1);
  if (len > 0) exe[len] = '\0';
  else snprintf(exe, sizeof exe, "%s", argv[0]);
  char **args = (char **)calloc((size_t)(argc - rest + 2), sizeof *args);
  if (args == NULL) {
    qh_message(argv[0], "not enough memory");
    return EXIT_FAILURE;
  }
  args[0] = exe;
  for (int i = rest; i < argc; i++) args[i - rest + 1] = argv[i];
  qt_err err;
  int status = 0;
  int rc = qt_dist_spawn((int)n, args, 10.0, &status, &err);
  free(args);
  if (rc != 0) {
    qh_message(argv[0], err.msg);
    return status != 0 ? status : EXIT_FAILURE;
  }
  return status;
}

int main (int argc, char **argv) {
  int status, ok;
  if (argc >= 2 && strncmp(argv[1], "--nproc", 7) == 0) return qh_launch(argc, argv);
  lua_State *L = luaL_newstate();
  if (L == NULL) {
    qh_message(argv[0], "cannot create state: not enough memory");
    return EXIT_FAILURE;
  }
  lua_gc(L, LUA_GCSTOP);                      /* no collections while setting up */
  lua_pushcfunction(L, qh_pmain);
  lua_pushinteger(L, argc);
  lua_pushlightuserdata(L, argv);
  status = lua_pcall(L, 2, 1, 0);
  ok = lua_toboolean(L, -1);
  qh_report(L, status);
  lua_close(L);
  return (ok && status == LUA_OK) ? EXIT_SUCCESS : EXIT_FAILURE;
}

/* }====================================================================== */
