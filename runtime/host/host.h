/*
** host.h — what the host program's files share: call.c (messages and protected calls,
** as in Lua's lua.c), used by qlua.c (main, the command line) and repl.c (the loop).
** Nothing outside runtime/host/ includes it; none of it is in qlua.so.
**
** Ownership: call.c owns qh_progname and the SIGINT-to-hook machinery behind
** qh_docall; repl.c owns readline, completion and history, and sets qh_progname to
** NULL while the REPL runs (errors there are reported without a program name, like
** lua.c's).
*/

#ifndef QLUA_HOST_H
#define QLUA_HOST_H

#include <signal.h>

#include "lua.h"

/* ---- call.c */
/* program name for messages: argv[0], or NULL inside the REPL */
extern const char *qh_progname;

/* "progname: msg" on stderr (no prefix when progname is NULL) */
void qh_message (const char *progname, const char *msg);

/* print and pop the error message on top of the stack if status is an error; returns status */
int qh_report (lua_State *L, int status);

/* install handler for sig without SA_RESTART, saving the old action in saved (may be NULL) */
void qh_setsignal (int sig, void (*handler)(int), struct sigaction *saved);

/* lua_pcall with a traceback message handler and SIGINT turned into an interrupt */
int qh_docall (lua_State *L, int narg, int nres);

/* ---- repl.c: the read-eval-print loop, until end of input */
void qh_repl (lua_State *L);

#endif
