/*
** call.c — the host program's messages and protected calls, as in Lua's lua.c: the
** "progname: message" report, the traceback message handler, and SIGINT turned into a
** debug hook while Lua code runs. The command line (qlua.c) and the REPL (repl.c) both
** run statements through qh_docall; with these here, below both, the two depend on
** call.c and qlua.c on repl.c (qh_repl), never the other way.
*/
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lua.h"
#include "lauxlib.h"

#include "host.h"

/* program name for messages: argv[0] like lua.c, NULL inside the REPL (qh_repl) */
const char *qh_progname = "qlua";

/* the state a signal handler may touch (only through lua_sethook) */
static lua_State *volatile qh_signal_L = NULL;


/* {======================================================================
** Messages and protected calls
** ======================================================================= */

/* "progname: msg" on stderr; the REPL passes a NULL progname (as lua.c does) */
void qh_message (const char *progname, const char *msg) {
  if (progname != NULL) lua_writestringerror("%s: ", progname);
  lua_writestringerror("%s\n", msg);
}

/* Print the error message on top of the stack (if status is an error) and pop it. */
int qh_report (lua_State *L, int status) {
  if (status != LUA_OK) {
    const char *msg = lua_tostring(L, -1);
    if (msg == NULL) msg = "(error object is not a string)";
    qh_message(qh_progname, msg);
    lua_pop(L, 1);
  }
  return status;
}

/*
** Message handler for every protected call: a string error gets a traceback; an
** object with __tostring becomes its string (no traceback, like lua.c); anything else
** is described by its type.
*/
static int qh_msghandler (lua_State *L) {
  const char *msg = lua_tostring(L, 1);
  if (msg == NULL) {
    if (luaL_callmeta(L, 1, "__tostring") && lua_type(L, -1) == LUA_TSTRING)
      return 1;
    msg = lua_pushfstring(L, "(error object is a %s value)", luaL_typename(L, 1));
  }
  luaL_traceback(L, L, msg, 1);
  return 1;
}

/* The hook a SIGINT installs: it runs at the next Lua instruction and raises. */
static void qh_interrupt_hook (lua_State *L, lua_Debug *ar) {
  (void)ar;
  lua_sethook(L, NULL, 0, 0);
  luaL_error(L, "interrupted!");
}

void qh_setsignal (int sig, void (*handler)(int), struct sigaction *saved) {
  struct sigaction sa;
  sa.sa_handler = handler;
  sa.sa_flags = 0;            /* no SA_RESTART: blocking reads see EINTR */
  sigemptyset(&sa.sa_mask);
  sigaction(sig, &sa, saved);
}

/*
** SIGINT while Lua code runs: only set a hook (the one thing that is safe from a
** handler) and fall back to the default action, so a second Ctrl-C kills a process
** stuck in C code.
*/
static void qh_on_sigint_running (int sig) {
  int mask = LUA_MASKCALL | LUA_MASKRET | LUA_MASKLINE | LUA_MASKCOUNT;
  qh_setsignal(sig, SIG_DFL, NULL);
  if (qh_signal_L != NULL) lua_sethook(qh_signal_L, qh_interrupt_hook, mask, 1);
}

/*
** Call the function below its narg arguments with the message handler under it and
** SIGINT turned into an interrupt; whatever SIGINT did before (default, or the REPL's
** prompt handler) is restored afterwards, and a hook left by a late Ctrl-C is removed.
*/
int qh_docall (lua_State *L, int narg, int nres) {
  int status;
  int base = lua_gettop(L) - narg;
  struct sigaction saved;
  lua_pushcfunction(L, qh_msghandler);
  lua_insert(L, base);
  qh_signal_L = L;
  qh_setsignal(SIGINT, qh_on_sigint_running, &saved);
  status = lua_pcall(L, narg, nres, base);
  sigaction(SIGINT, &saved, NULL);
  if (lua_gethook(L) == qh_interrupt_hook) lua_sethook(L, NULL, 0, 0);
  lua_remove(L, base);
  return status;
}

/* }====================================================================== */
