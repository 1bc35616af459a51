/*
** repl.c — the host's interactive side: the read-eval-print loop qlua runs for -i, or
** when it is started on a terminal with nothing to run (main and the command line are
** in qlua.c; host.h is what the two share).
**
** When stdin is a terminal the REPL reads lines with GNU readline (readline() with a
** key reader of our own, so Ctrl-C at the prompt clears the line instead of killing
** the process), completes globals, keywords, `a.b.c` field chains and `obj:method`
** names (through metatable __index tables and the `__methods` table the Tensor
** metatable provides), and keeps a persistent history in ~/.qlua_history with
** multi-line statements stored as one entry. When stdin is not a terminal it reads
** plain lines and prints exactly what Debian's lua5.4 prints (prompt, echo of the
** line), so piped sessions stay scriptable and comparable. Loading a line follows
** lua.c: "return <line>" first, then the line as a statement, reading more lines
** while the error ends in <eof>. Results print as lua.c prints them (tab separated),
** except that several results with a tensor among them print one per line: a tensor's
** tostring is a block of lines, which tabs would tear apart.
**
** Three sections, each using only those above it: tab completion; reading lines
** (readline setup, Ctrl-C at the prompt, history); the loop itself (qh_repl, the one
** entry point). Statements run through qh_docall and errors are shown through
** qh_report and qh_message, which call.c provides.
*/

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/select.h>
#include <unistd.h>

#include <readline/readline.h>
#include <readline/history.h>

#include "lua.h"
#include "lauxlib.h"

#include "qlua.h"   /* QLUA_TENSOR, the tensor's metatable name */
#include "host.h"

#define QH_PROMPT           "> "
#define QH_PROMPT2          ">> "
#define QH_HISTORY_NAME     ".qlua_history"
#define QH_HISTORY_MAX      1000
#define QH_EOFMARK          "<eof>"

/* what pushline-style readers return besides "got a line" */
#define QH_LINE_OK        1
#define QH_LINE_EOF       0
#define QH_LINE_CANCELLED (-2)   /* Ctrl-C at a continuation prompt (not a LUA_* status) */
#define QH_REPL_EOF       (-1)   /* qh_loadline: no more input */

/* flags set by signal handlers while the terminal REPL waits for input */
static volatile sig_atomic_t qh_sigint_at_prompt = 0;
static volatile sig_atomic_t qh_sigwinch_at_prompt = 0;


/* {======================================================================
** Tab completion (terminal REPL only)
**
** The word under the cursor is split at its last '.' or ':'; the part before is a
** path of identifiers walked from _G with protected gets (an __index function that
** errors just ends the walk), and the candidates are the keys of the value reached,
** of its metatable's __index tables (followed a few levels) and of its metatable's
** __methods table. Without a separator the candidates are globals and keywords.
** ======================================================================= */

static lua_State *qh_completion_L = NULL;

typedef struct qh_wordlist {
  char **words;
  size_t count, capacity, next;
} qh_wordlist;

static qh_wordlist qh_candidates = { NULL, 0, 0, 0 };

static const char *const qh_keywords[] = {
  "and", "break", "do", "else", "elseif", "end", "false", "for", "function", "goto",
  "if", "in", "local", "nil", "not", "or", "repeat", "return", "then", "true",
  "until", "while", NULL
};

static void qh_wordlist_clear (qh_wordlist *list) {
  size_t i;
  for (i = 0; i < list->count; i++) free(list->words[i]);
  free(list->words);
  list->words = NULL;
  list->count = list->capacity = list->next = 0;
}

static void qh_wordlist_add (qh_wordlist *list, const char *prefix, size_t prefixlen,
                             const char *word) {
  size_t wordlen = strlen(word);
  char *entry;
  if (list->count == list->capacity) {
    size_t newcap = list->capacity ? 2 * list->capacity : 32;
    char **grown = realloc(list->words, newcap * sizeof *grown);
    if (grown == NULL) return;
    list->words = grown;
    list->capacity = newcap;
  }
  entry = malloc(prefixlen + wordlen + 1);
  if (entry == NULL) return;
  memcpy(entry, prefix, prefixlen);
  memcpy(entry + prefixlen, word, wordlen + 1);
  list->words[list->count++] = entry;
}

static int qh_is_keyword (const char *s) {
  int i;
  for (i = 0; qh_keywords[i] != NULL; i++)
    if (strcmp(s, qh_keywords[i]) == 0) return 1;
  return 0;
}

/* A name usable after '.' or ':' (an identifier that is not a keyword). */
static int qh_is_name (const char *s, size_t len) {
  size_t i;
  if (len == 0 || !(s[0] == '_' || (s[0] >= 'a' && s[0] <= 'z') ||
                    (s[0] >= 'A' && s[0] <= 'Z')))
    return 0;
  for (i = 1; i < len; i++) {
    char c = s[i];
    if (!(c == '_' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
          (c >= '0' && c <= '9')))
      return 0;
  }
  return !qh_is_keyword(s);
}

/* lua_gettable(obj, key) as a C function, so the walk can run it protected */
static int qh_gettable_unprotected (lua_State *L) {
  lua_gettable(L, 1);
  return 1;
}

/* Stops an __index function that runs away while we complete (it would hang the
   prompt, where Ctrl-C only clears the line). */
static void qh_completion_budget_hook (lua_State *L, lua_Debug *ar) {
  (void)ar;
  luaL_error(L, "completion: __index ran too long");
}

/*
** Replace the value on top with value[key], or nil if that raised or ran for more than
** a million instructions. No error escapes into readline; a debug hook the user set is
** put back afterwards.
*/
static void qh_safe_field (lua_State *L, const char *key, size_t keylen) {
  lua_Hook user_hook = lua_gethook(L);
  int user_mask = lua_gethookmask(L), user_count = lua_gethookcount(L);
  lua_pushcfunction(L, qh_gettable_unprotected);
  lua_insert(L, -2);
  lua_pushlstring(L, key, keylen);
  lua_sethook(L, qh_completion_budget_hook, LUA_MASKCOUNT, 1000000);
  if (lua_pcall(L, 2, 1, 0) != LUA_OK) {
    lua_pop(L, 1);
    lua_pushnil(L);
  }
  lua_sethook(L, user_hook, user_mask, user_count);
}

/* A function, or a table/userdata with __call: something `obj:name()` can call. */
static int qh_is_callable (lua_State *L, int idx) {
  int type = lua_type(L, idx);
  if (type == LUA_TFUNCTION) return 1;
  if ((type == LUA_TTABLE || type == LUA_TUSERDATA) &&
      luaL_getmetafield(L, idx, "__call") != LUA_TNIL) {
    lua_pop(L, 1);
    return 1;
  }
  return 0;
}

/*
** Add the matching string keys of the table at idx. With methods_only, only keys
** whose value is a function or a callable table/userdata (something `obj:name()`
** could call). With names_in_values (the __methods table), an array of names also
** counts: integer keys whose values are strings.
*/
static void qh_add_table_keys (lua_State *L, int idx, const char *prefix, size_t prefixlen,
                               const char *partial, int methods_only, int names_in_values) {
  size_t partiallen = strlen(partial);
  idx = lua_absindex(L, idx);
  lua_pushnil(L);
  while (lua_next(L, idx) != 0) {
    const char *name = NULL;
    size_t namelen = 0;
    if (lua_type(L, -2) == LUA_TSTRING) {
      if (!methods_only || names_in_values || qh_is_callable(L, -1))
        name = lua_tolstring(L, -2, &namelen);
    }
    else if (names_in_values && lua_type(L, -2) == LUA_TNUMBER &&
             lua_type(L, -1) == LUA_TSTRING) {
      name = lua_tolstring(L, -1, &namelen);
    }
    if (name != NULL && qh_is_name(name, namelen) &&
        strncmp(name, partial, partiallen) == 0)
      qh_wordlist_add(&qh_candidates, prefix, prefixlen, name);
    lua_pop(L, 1);
  }
}

/* Candidates from the value on top of the stack (left there): its own keys when it
   is a table, then its metatable's __methods and __index (recursively, a few levels). */
static void qh_add_value_keys (lua_State *L, const char *prefix, size_t prefixlen,
                               const char *partial, int methods_only, int depth) {
  if (depth > 8 || !lua_checkstack(L, 8)) return;
  if (lua_type(L, -1) == LUA_TTABLE)
    qh_add_table_keys(L, -1, prefix, prefixlen, partial, methods_only, 0);
  if (lua_getmetatable(L, -1)) {
    if (lua_getfield(L, -1, "__methods") == LUA_TTABLE)
      qh_add_table_keys(L, -1, prefix, prefixlen, partial, methods_only, 1);
    lua_pop(L, 1);
    if (lua_getfield(L, -1, "__index") == LUA_TTABLE)
      qh_add_value_keys(L, prefix, prefixlen, partial, methods_only, depth + 1);
    lua_pop(L, 2);
  }
}

/* Fill qh_candidates with every completion of text. */
static void qh_collect_candidates (lua_State *L, const char *text) {
  int top = lua_gettop(L);
  const char *sep = NULL;
  const char *p;
  qh_wordlist_clear(&qh_candidates);
  for (p = text; *p != '\0'; p++)
    if (*p == '.' || *p == ':') sep = p;
  if (!lua_checkstack(L, 20)) return;
  if (sep == NULL) {
    int i;
    size_t textlen = strlen(text);
    for (i = 0; qh_keywords[i] != NULL; i++)
      if (strncmp(qh_keywords[i], text, textlen) == 0)
        qh_wordlist_add(&qh_candidates, "", 0, qh_keywords[i]);
    lua_pushglobaltable(L);
    qh_add_value_keys(L, "", 0, text, 0, 0);
  }
  else if (sep > text) {                          /* "a.b.c:partial" */
    const char *segment = text;
    lua_pushglobaltable(L);
    while (segment < sep) {
      const char *end = segment;
      while (end < sep && *end != '.' && *end != ':') end++;
      if (*end == ':' && end != sep) goto done;   /* ':' only before the last name */
      lua_pushlstring(L, segment, (size_t)(end - segment));
      if (!qh_is_name(lua_tostring(L, -1), (size_t)(end - segment))) goto done;
      lua_pop(L, 1);
      qh_safe_field(L, segment, (size_t)(end - segment));
      if (lua_isnil(L, -1)) goto done;
      segment = end + 1;
    }
    qh_add_value_keys(L, text, (size_t)(sep + 1 - text), sep + 1, *sep == ':', 0);
  }
done:
  lua_settop(L, top);
}

/* readline generator: state 0 collects, later calls hand the words out one by one */
static char *qh_completion_generator (const char *text, int state) {
  if (state == 0) {
    if (qh_completion_L == NULL) return NULL;
    qh_collect_candidates(qh_completion_L, text);
  }
  if (qh_candidates.next < qh_candidates.count) {
    char *word = qh_candidates.words[qh_candidates.next];
    qh_candidates.words[qh_candidates.next++] = NULL;   /* readline frees it */
    return word;
  }
  qh_wordlist_clear(&qh_candidates);
  return NULL;
}

static char **qh_attempt_completion (const char *text, int start, int end) {
  (void)start; (void)end;
  rl_attempted_completion_over = 1;         /* never fall back to file names */
  rl_completion_append_character = '\0';    /* "string.format" not "string.format " */
  return rl_completion_matches(text, qh_completion_generator);
}

/* }====================================================================== */


/* {======================================================================
** Reading lines: readline on a terminal, plain lines otherwise
** ======================================================================= */

static int qh_use_readline = 0;
static char qh_history_path[4096];          /* "" when there is no history file */

/*
** SIGINT at the prompt only sets a flag, which qh_rl_getc acts on. A second one while
** the first is still unanswered means readline is stuck outside its reads (readline
** 8.2's vi-mode "e" spins forever on some invalid UTF-8, as it does in lua5.4): like
** lua.c with a statement stuck in C, fall back to the default action and end qlua.
*/
static void qh_on_sigint_prompt (int sig) {
  if (qh_sigint_at_prompt) {
    signal(sig, SIG_DFL);
    raise(sig);
  }
  qh_sigint_at_prompt = 1;
}
static void qh_on_sigwinch (int sig) { (void)sig; qh_sigwinch_at_prompt = 1; }

/* A Ctrl-C at the prompt, as qh_rl_getc carries it out; reset for each readline(). */
static struct {
  int ended;         /* the line is over: what readline() returns is not the user's */
  int declined;      /* a completion question got its 'n' */
  size_t unwound;    /* how many of qh_rl_unwind_keys nested reads got */
} qh_rl_cancel;

/* Ctrl-G, then the end of a bracketed paste (readline 8.2's paste reader stops at EOF
   without ending its string, and the text is then read past its end) */
static const char qh_rl_unwind_keys[] = "\a\033[201~";

/* readline's redisplay once a Ctrl-C has ended the line: unwinding out of a search or
   a key sequence would otherwise redraw the line over the ^C */
static void qh_rl_redisplay_nothing (void) {
}

/*
** The Ctrl-C has been seen: echo ^C and give the terminal back now, while readline
** still counts the line as going on (after an end of input readline 8.2 adds a newline
** when it turns bracketed paste off, and qh_readline_tty prints its own). From here on
** readline must draw nothing and ring no bell while it unwinds.
*/
static void qh_rl_cancel_begin (void) {
  qh_rl_cancel.ended = 1;
  rl_echo_signal_char(SIGINT);
  rl_eof_found = 0;
  if (rl_deprep_term_function != NULL) (*rl_deprep_term_function)();
  rl_redisplay_function = qh_rl_redisplay_nothing;
  rl_variable_bind("bell-style", "none");
}

/*
** What a read gets once the line is over. At the top-level read (RL_STATE_READCMD):
** READERR, which makes readline() return NULL at once (how readline itself ends a line
** on SIGHUP or SIGTERM), after dropping the line's undo list, keyboard macro and numeric
** argument. A nested read (the rest of a key sequence, a search, the typeahead that
** self-insert batches, a completion question) must first be left the way a user
** leaves it, because readline 8.2 cleans up after a key but not always after EOF: 'n'
** to a completion question (Ctrl-G there leaks the matches), else Ctrl-G, the abort
** key of every other one, then the end of a paste. After that EOF, as from a hung-up
** terminal, which ends every read.
*/
static int qh_rl_cancel_key (int readcmd) {
  if (readcmd) {
    rl_free_line_state();
    return READERR;
  }
  if (RL_ISSTATE(RL_STATE_COMPLETING) && !qh_rl_cancel.declined) {
    qh_rl_cancel.declined = 1;
    return 'n';
  }
  if (qh_rl_unwind_keys[qh_rl_cancel.unwound] != '\0')
    return (unsigned char)qh_rl_unwind_keys[qh_rl_cancel.unwound++];
  return EOF;
}

/* qh_rl_getc's work, with SIGINT and SIGWINCH blocked; waitmask lets them through */
static int qh_rl_getc_blocked (FILE *stream, const sigset_t *waitmask) {
  int fd = fileno(stream);
  int readcmd = RL_ISSTATE(RL_STATE_READCMD);
  for (;;) {
    fd_set readable;
    int ready;
    if (qh_sigint_at_prompt && !qh_rl_cancel.ended) {
      qh_sigint_at_prompt = 0;
      qh_rl_cancel_begin();
    }
    if (qh_rl_cancel.ended) return qh_rl_cancel_key(readcmd);
    if (qh_sigwinch_at_prompt) {
      qh_sigwinch_at_prompt = 0;
      rl_resize_terminal();
    }
    FD_ZERO(&readable);
    FD_SET(fd, &readable);
    ready = pselect(fd + 1, &readable, NULL, NULL, NULL, waitmask);
    if (ready > 0) {
      unsigned char c;
      ssize_t n = read(fd, &c, 1);
      if (n == 1) return c;
      if (n == 0) return EOF;                     /* the terminal hung up */
      if (errno != EINTR && errno != EAGAIN) return readcmd ? READERR : EOF;
    }
    else if (ready < 0 && errno != EINTR)         /* input is gone */
      return readcmd ? READERR : EOF;
  }
}

/*
** readline's key reader (rl_getc_function): one byte from the terminal. readline()
** blocks with its own signal handling off (rl_catch_signals 0), so this is the one
** place where a Ctrl-C at the prompt can act: it ends the line (qh_rl_cancel_begin),
** then answers every read until readline() returns (qh_rl_cancel_key). SIGINT and
** SIGWINCH are blocked from the flag checks to the wait and let through only inside
** pselect(), so neither can slip in between; outside this function they arrive at
** once, so a second Ctrl-C reaches a readline that is stuck.
**
** The REPL used to drive readline's callback interface (rl_callback_read_char) from a
** pselect loop of its own, but readline 8.2's callback code crashes on byte sequences
** that readline() survives: Ctrl-R Esc Ctrl-G "M=" on an xterm is one, and random bytes
** found others (spec/host/repl_spec.lua types both).
*/
static int qh_rl_getc (FILE *stream) {
  sigset_t blocked, original;
  int c;
  sigemptyset(&blocked);
  sigaddset(&blocked, SIGINT);
  sigaddset(&blocked, SIGWINCH);
  sigprocmask(SIG_BLOCK, &blocked, &original);
  c = qh_rl_getc_blocked(stream, &original);
  sigprocmask(SIG_SETMASK, &original, NULL);
  return c;
}

/*
** One line from readline. A Ctrl-C (see qh_rl_getc) at the first prompt clears the line
** and prompts again; at a continuation prompt it gives up the whole statement
** (QH_LINE_CANCELLED). readline() normally returns NULL then; it returns a line only if
** a nested read turned the EOF into an accepted line, and then it has ended the line
** on the screen itself.
*/
static int qh_readline_tty (const char *prompt, int firstline, char **line) {
  char *text;
  qh_sigint_at_prompt = 0;
  for (;;) {
    rl_voidfunc_t *redisplay = rl_redisplay_function;
    char *bell = rl_variable_value("bell-style");     /* a constant string */
    memset(&qh_rl_cancel, 0, sizeof qh_rl_cancel);
    text = readline(prompt);
    if (!qh_rl_cancel.ended) break;
    /* A search or a message may still hold a saved prompt, which each new prompt would
       leak: put it back while redisplay does nothing (with nothing saved this only
       clears what readline() rebuilds from the next prompt). */
    rl_clear_message();
    rl_restore_prompt();
    rl_redisplay_function = redisplay;
    if (bell != NULL) rl_variable_bind("bell-style", bell);
    if (text == NULL && !qh_rl_cancel.declined) {   /* a declined question ends its line */
      FILE *out = rl_outstream ? rl_outstream : stdout;
      fputc('\n', out);
      fflush(out);
    }
    free(text);
    text = NULL;
    if (!firstline) break;
  }
  if (qh_rl_cancel.ended) return QH_LINE_CANCELLED;
  if (text == NULL) return QH_LINE_EOF;
  *line = text;
  return QH_LINE_OK;
}

/*
** One line from a stdin that is not a terminal: print the prompt and echo the line,
** exactly as Debian's readline-built lua5.4 does with piped input, so transcripts
** compare equal. The newline is not part of the returned line.
*/
static int qh_readline_plain (const char *prompt, char **line) {
  char *buffer = NULL;
  size_t capacity = 0;
  ssize_t len;
  fputs(prompt, stdout);
  fflush(stdout);
  len = getline(&buffer, &capacity, stdin);
  if (len < 0) {
    free(buffer);
    return QH_LINE_EOF;
  }
  if (len > 0 && buffer[len - 1] == '\n') buffer[--len] = '\0';
  fwrite(buffer, 1, (size_t)len, stdout);
  fputc('\n', stdout);
  fflush(stdout);
  *line = buffer;
  return QH_LINE_OK;
}

static int qh_tostring_unprotected (lua_State *L) {
  luaL_tolstring(L, 1, NULL);
  return 1;
}

/*
** The prompt to show: tostring(_PROMPT or _PROMPT2), or the default; left on the
** stack. The conversion runs protected: a __tostring that raises gives the default
** prompt rather than ending the session (lua.c would exit there).
*/
static const char *qh_get_prompt (lua_State *L, int firstline) {
  const char *fallback = firstline ? QH_PROMPT : QH_PROMPT2;
  if (lua_getglobal(L, firstline ? "_PROMPT" : "_PROMPT2") == LUA_TNIL) {
    lua_pop(L, 1);
    lua_pushstring(L, fallback);
  }
  else {
    lua_pushcfunction(L, qh_tostring_unprotected);
    lua_insert(L, -2);
    if (lua_pcall(L, 1, 1, 0) != LUA_OK || !lua_isstring(L, -1)) {
      lua_pop(L, 1);
      lua_pushstring(L, fallback);
    }
  }
  return lua_tostring(L, -1);
}

/*
** Read one line and push it. The first line of a statement may start with '=' (Lua
** 5.2's "=expr"), which means "return expr".
*/
static int qh_pushline (lua_State *L, int firstline) {
  char *line = NULL;
  const char *prompt = qh_get_prompt(L, firstline);
  int status = qh_use_readline ? qh_readline_tty(prompt, firstline, &line)
                               : qh_readline_plain(prompt, &line);
  lua_pop(L, 1);                   /* the prompt */
  if (status != QH_LINE_OK) return status;
  if (firstline && line[0] == '=')
    lua_pushfstring(L, "return %s", line + 1);
  else
    lua_pushstring(L, line);
  free(line);
  return QH_LINE_OK;
}

/* Make sure the history file exists (append_history does not create it). */
static void qh_history_touch (void) {
  int fd = open(qh_history_path, O_WRONLY | O_CREAT | O_APPEND, 0600);
  if (fd >= 0) close(fd);
}

/*
** Remember a complete statement (possibly several lines, kept as one entry). It is
** appended to the file at once, so a session that is killed loses nothing; the file is
** trimmed when the REPL starts and ends. Plain (piped) sessions keep no history.
*/
static void qh_saveline (const char *line) {
  HIST_ENTRY *last;
  if (!qh_use_readline || line[0] == '\0') return;
  last = history_get(history_base + history_length - 1);
  if (last != NULL && strcmp(last->line, line) == 0) return;
  add_history(line);
  if (qh_history_path[0] != '\0') {
    qh_history_touch();
    append_history(1, qh_history_path);
  }
}

static void qh_history_open (void) {
  const char *home = getenv("HOME");
  qh_history_path[0] = '\0';
  history_comment_char = '#';        /* timestamps are written as "#<seconds>"... */
  history_write_timestamps = 1;      /* ...and delimit multi-line entries... */
  history_multiline_entries = 1;     /* ...so they read back as one entry */
  stifle_history(QH_HISTORY_MAX);
  if (home == NULL || home[0] == '\0') return;
  if ((size_t)snprintf(qh_history_path, sizeof qh_history_path, "%s/%s", home,
                       QH_HISTORY_NAME) >= sizeof qh_history_path) {
    qh_history_path[0] = '\0';
    return;
  }
  read_history(qh_history_path);
  if (access(qh_history_path, F_OK) == 0)
    history_truncate_file(qh_history_path, QH_HISTORY_MAX);
}

static void qh_history_close (void) {
  if (qh_history_path[0] != '\0' && access(qh_history_path, F_OK) == 0)
    history_truncate_file(qh_history_path, QH_HISTORY_MAX);
}

/* }====================================================================== */


/* {======================================================================
** The REPL
** ======================================================================= */

/* A syntax error ending in <eof> means "the statement is not finished yet". */
static int qh_incomplete (lua_State *L, int status) {
  if (status == LUA_ERRSYNTAX) {
    size_t len;
    const char *msg = lua_tolstring(L, -1, &len);
    size_t marklen = sizeof(QH_EOFMARK) - 1;
    if (len >= marklen && strcmp(msg + len - marklen, QH_EOFMARK) == 0) {
      lua_pop(L, 1);
      return 1;
    }
  }
  return 0;
}

/* Try the line as "return <line>;" so expressions print their values. */
static int qh_try_return (lua_State *L) {
  const char *line = lua_tostring(L, -1);
  const char *retline = lua_pushfstring(L, "return %s;", line);
  int status = luaL_loadbuffer(L, retline, strlen(retline), "=stdin");
  if (status == LUA_OK) {
    lua_remove(L, -2);
    qh_saveline(line);
  }
  else
    lua_pop(L, 2);
  return status;
}

/*
** The line as a statement, reading continuation lines while the only problem is that
** it ends too early. Returns a load status, or QH_LINE_CANCELLED after a Ctrl-C at
** the continuation prompt.
*/
static int qh_load_statement (lua_State *L) {
  for (;;) {
    size_t len;
    int more;
    const char *line = lua_tolstring(L, 1, &len);
    int status = luaL_loadbuffer(L, line, len, "=stdin");
    if (!qh_incomplete(L, status)) {
      qh_saveline(line);
      return status;
    }
    more = qh_pushline(L, 0);
    if (more == QH_LINE_CANCELLED) {
      qh_saveline(line);
      return QH_LINE_CANCELLED;
    }
    if (more == QH_LINE_EOF) {   /* report the <eof> error as lua.c does */
      qh_saveline(line);
      return luaL_loadbuffer(L, line, len, "=stdin");
    }
    lua_pushliteral(L, "\n");
    lua_insert(L, -2);
    lua_concat(L, 3);
  }
}

/*
** Read and compile one statement; leaves the chunk (or an error message) as the only
** stack value. Returns QH_REPL_EOF at end of input, QH_LINE_CANCELLED when Ctrl-C
** dropped it.
*/
static int qh_loadline (lua_State *L) {
  int status;
  lua_settop(L, 0);
  status = qh_pushline(L, 1);
  if (status == QH_LINE_EOF) return QH_REPL_EOF;
  if ((status = qh_try_return(L)) != LUA_OK)
    status = qh_load_statement(L);
  if (status == QH_LINE_CANCELLED) {
    lua_settop(L, 0);
    return QH_LINE_CANCELLED;
  }
  lua_remove(L, 1);
  return status;
}

/* Is any of the n values on the stack a qlua.Tensor? */
static int qh_has_tensor (lua_State *L, int n) {
  for (int i = 1; i <= n; i++)
    if (luaL_testudata(L, i, QLUA_TENSOR) != NULL) return 1;
  return 0;
}

/*
** Print the statement's results with the global print: tab separated in one call, as
** lua.c does, unless a tensor is among several of them; a tensor prints as a block of
** lines, so then each result gets a print call (its own line or lines) of its own. An
** error in print ends the printing.
*/
static void qh_print_results (lua_State *L) {
  int n = lua_gettop(L);
  if (n > 0) {
    luaL_checkstack(L, LUA_MINSTACK, "too many results to print");
    int status;
    if (n > 1 && qh_has_tensor(L, n)) {
      status = LUA_OK;
      for (int i = 1; i <= n && status == LUA_OK; i++) {
        lua_getglobal(L, "print");
        lua_pushvalue(L, i);
        status = lua_pcall(L, 1, 0, 0);
      }
    } else {
      lua_getglobal(L, "print");
      lua_insert(L, 1);
      status = lua_pcall(L, n, 0, 0);
    }
    if (status != LUA_OK)
      qh_message(qh_progname, lua_pushfstring(L, "error calling 'print' (%s)",
                                             lua_tostring(L, -1)));
  }
}

/*
** The read-eval-print loop. On a terminal: readline with completion and history, and
** Ctrl-C at the prompt handled by qh_rl_getc and qh_readline_tty; otherwise plain
** lines. Errors are reported without the program name (as lua.c does) and never end
** the session.
*/
void qh_repl (lua_State *L) {
  int status;
  const char *saved_progname = qh_progname;
  struct sigaction saved_sigint, saved_sigwinch;
  qh_progname = NULL;
  qh_use_readline = isatty(STDIN_FILENO);
  if (qh_use_readline) {
    rl_readline_name = "qlua";
    rl_catch_signals = 0;                 /* we own SIGINT and SIGWINCH */
    rl_catch_sigwinch = 0;
    rl_getc_function = qh_rl_getc;        /* where Ctrl-C ends a line */
    rl_attempted_completion_function = qh_attempt_completion;
    rl_completer_word_break_characters = " \t\n\"\\'`><=;+-*/%^~#&|,{}()[]";
    qh_completion_L = L;
    qh_history_open();
    qh_setsignal(SIGINT, qh_on_sigint_prompt, &saved_sigint);
    qh_setsignal(SIGWINCH, qh_on_sigwinch, &saved_sigwinch);
  }
  while ((status = qh_loadline(L)) != QH_REPL_EOF) {
    if (status == QH_LINE_CANCELLED) continue;
    if (status == LUA_OK)
      status = qh_docall(L, 0, LUA_MULTRET);
    if (status == LUA_OK) qh_print_results(L);
    else qh_report(L, status);
  }
  lua_settop(L, 0);
  lua_writeline();
  if (qh_use_readline) {
    sigaction(SIGINT, &saved_sigint, NULL);
    sigaction(SIGWINCH, &saved_sigwinch, NULL);
    qh_history_close();
    qh_wordlist_clear(&qh_candidates);
    qh_completion_L = NULL;
    rl_getc_function = rl_getc;
  }
  qh_progname = saved_progname;
}

/* }====================================================================== */
