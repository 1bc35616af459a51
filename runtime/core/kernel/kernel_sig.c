/*
** kernel_sig.c — a user kernel's parameters, read from its source (the parameter list
** of its __global__ declaration, with template arguments and typedefs substituted), from a
** signature string ("const float *x, int n"), or from an Itanium-mangled C++ name. The
** parameters decide how core/kernel/kernel.c passes each Lua value; nothing here touches a device.
*/
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/ops_internal.h"
#include "core/kernel/kernel_internal.h"
#include "ops.h"

/* ================================================================== signatures */

/* The source with comments, string and character literals blanked (same length, so
** positions still match). */
static char *kernel_strip(const char *src) {
  size_t n = strlen(src);
  char *s = malloc(n + 1);
  if (s == NULL) return NULL;
  memcpy(s, src, n + 1);
  for (size_t i = 0; i < n; i++) {
    if (s[i] == '/' && s[i + 1] == '/') {
      while (i < n && s[i] != '\n') s[i++] = ' ';
    } else if (s[i] == '/' && s[i + 1] == '*') {
      s[i++] = ' ';
      s[i++] = ' ';
      while (i < n && !(s[i] == '*' && s[i + 1] == '/')) {
        if (s[i] != '\n') s[i] = ' ';
        i++;
      }
      if (i < n) s[i++] = ' ';
      if (i < n) s[i] = ' ';
    } else if (s[i] == '"' || (s[i] == '\'' && !(i > 0 && isalnum((unsigned char)s[i - 1])))) {
      char q = s[i++];
      while (i < n && s[i] != q) {
        if (s[i] == '\\' && i + 1 < n) s[i++] = ' ';
        if (s[i] != '\n') s[i] = ' ';
        i++;
      }
    }
  }
  return s;
}

static bool kernel_is_ident(char c) {
  return c == '_' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
}

/* Splits s[0..n) at top-level commas (outside (), <>, [], {}) into at most max pieces. */
static int kernel_split(const char *s, size_t n, const char **start, size_t *len, int max) {
  int count = 0, depth = 0;
  size_t from = 0;
  for (size_t i = 0; i <= n; i++) {
    char c = i < n ? s[i] : ',';
    if (c == '(' || c == '<' || c == '[' || c == '{') depth++;
    else if (c == ')' || c == '>' || c == ']' || c == '}') depth--;
    else if (c == ',' && depth <= 0) {
      if (count == max) return -1;
      start[count] = s + from;
      len[count] = i - from;
      count++;
      from = i + 1;
    }
  }
  return count;
}

/* The words of a declaration: identifiers and '*' / '&' as their own words. */
static int kernel_words(const char *s, size_t n, char words[][40], int max) {
  int count = 0;
  for (size_t i = 0; i < n;) {
    if (kernel_is_ident(s[i])) {
      size_t j = i;
      while (j < n && kernel_is_ident(s[j])) j++;
      if (count == max) return -1;
      snprintf(words[count++], 40, "%.*s", (int)(j - i), s + i);
      i = j;
    } else if (s[i] == '*' || s[i] == '&' || s[i] == '[' || s[i] == '(' || s[i] == ':') {
      if (count == max) return -1;
      snprintf(words[count++], 40, "%c", s[i]);
      i++;
    } else {
      i++;
    }
  }
  return count;
}

/* C type names qlua knows, with what a parameter of that type (or pointing at it) is. */
static const struct {
  const char *spelling;  /* words joined by one space, qualifiers removed */
  qt_param_kind scalar;
  int dtype;
  bool scalar_ok;
} kernel_types[] = {
  /* each dtype's own spelling (kernel_internal.h), then the other spellings */
#define KERNEL_TYPE_ROW_(P, E, sfx, ...) \
  { KERNEL_CTYPE_FIELD(SPELLING, sfx), KERNEL_CTYPE_FIELD(KIND, sfx), E, \
    KERNEL_CTYPE_FIELD(SCALAR_OK, sfx) },
  QT_DTYPE_LIST(KERNEL_TYPE_ROW_, ~)
#undef KERNEL_TYPE_ROW_
  { "signed", QT_PARAM_I32, QT_I32, true },
  { "signed int", QT_PARAM_I32, QT_I32, true },
  { "int32_t", QT_PARAM_I32, QT_I32, true },
  { "unsigned", QT_PARAM_U32, QT_PARAM_NO_DTYPE, true },
  { "unsigned int", QT_PARAM_U32, QT_PARAM_NO_DTYPE, true },
  { "uint32_t", QT_PARAM_U32, QT_PARAM_NO_DTYPE, true },
  { "long long int", QT_PARAM_I64, QT_I64, true },
  { "signed long long", QT_PARAM_I64, QT_I64, true },
  { "long", QT_PARAM_I64, QT_I64, true },
  { "long int", QT_PARAM_I64, QT_I64, true },
  { "int64_t", QT_PARAM_I64, QT_I64, true },
  { "ptrdiff_t", QT_PARAM_I64, QT_I64, true },
  { "unsigned long long", QT_PARAM_U64, QT_PARAM_NO_DTYPE, true },
  { "unsigned long long int", QT_PARAM_U64, QT_PARAM_NO_DTYPE, true },
  { "unsigned long", QT_PARAM_U64, QT_PARAM_NO_DTYPE, true },
  { "uint64_t", QT_PARAM_U64, QT_PARAM_NO_DTYPE, true },
  { "size_t", QT_PARAM_U64, QT_PARAM_NO_DTYPE, true },
  /* cuda_fp16.h's and cuda_bf16.h's typedefs: float16 and bfloat16 tensors, or a Lua
  ** number rounded to the type */
  { "half", QT_PARAM_F16, QT_F16, true },
  { "nv_bfloat16", QT_PARAM_BF16, QT_BF16, true },
  /* pointees only (scalars of these types are not passed) */
  { "uint8_t", QT_PARAM_POINTER, QT_U8, false },
  /* pointees only (no qlua dtype: a launch with such a parameter says so) */
  { "char", QT_PARAM_POINTER, QT_PARAM_NO_DTYPE, false },
  { "void", QT_PARAM_POINTER, QT_PARAM_ANY_DTYPE, false },
};

static bool kernel_is_qualifier(const char *w) {
  return strcmp(w, "const") == 0 || strcmp(w, "volatile") == 0 ||
         strcmp(w, "__restrict__") == 0 || strcmp(w, "__restrict") == 0 ||
         strcmp(w, "restrict") == 0 || strcmp(w, "__grid_constant__") == 0;
}

static bool kernel_is_type_word(const char *w) {
  for (size_t t = 0; t < sizeof kernel_types / sizeof kernel_types[0]; t++) {
    const char *sp = kernel_types[t].spelling;
    size_t n = strlen(w);
    /* any word of a known spelling */
    for (const char *p = sp; (p = strstr(p, w)) != NULL; p += n)
      if ((p == sp || p[-1] == ' ') && (p[n] == '\0' || p[n] == ' ')) return true;
  }
  return false;
}

/* One parameter declaration ("const float *__restrict__ x") into p. `subst` maps
** template parameter names to their arguments. */
static int kernel_parse_param(qt_ctx *ctx, const char *op, int position, const char *decl,
                              size_t n, int nsubst, char subst_from[][40], char subst_to[][40],
                              qt_param *p) {
  char words[24][40];
  int nw = kernel_words(decl, n, words, 24);
  memset(p, 0, sizeof *p);
  if (nw <= 0)
    return qt_errorf(&ctx->err, "%s: parameter %d: cannot read '%.*s'", op, position, (int)n, decl);
  int pointers = 0, last = nw;
  bool is_const_before_star = false, saw_const = false;
  /* the name: a last identifier that is not a type word, after some type */
  if (nw >= 2 && kernel_is_ident(words[nw - 1][0]) && !kernel_is_qualifier(words[nw - 1]) &&
      (!kernel_is_type_word(words[nw - 1]) || strcmp(words[nw - 2], "*") == 0)) {
    bool substituted = false;
    for (int s = 0; s < nsubst; s++) substituted |= strcmp(words[nw - 1], subst_from[s]) == 0;
    if (!substituted) {
      snprintf(p->name, sizeof p->name, "%.39s", words[nw - 1]);
      last = nw - 1;
    }
  }
  char base[80] = "";
  for (int w = 0; w < last; w++) {
    const char *word = words[w];
    for (int s = 0; s < nsubst; s++)
      if (strcmp(word, subst_from[s]) == 0) word = subst_to[s];
    if (strcmp(word, "*") == 0) {
      pointers++;
      is_const_before_star = saw_const;
    } else if (strcmp(word, "&") == 0 || strcmp(word, "[") == 0 || strcmp(word, "(") == 0 ||
               strcmp(word, ":") == 0) {
      return qt_errorf(&ctx->err, "%s: parameter %d (%.*s): references, arrays and "
                       "function pointers cannot be passed from Lua", op, position, (int)n, decl);
    } else if (strcmp(word, "const") == 0) {
      saw_const = true;
    } else if (kernel_is_qualifier(word) || strcmp(word, "struct") == 0) {
      continue;
    } else if (pointers > 0) {
      return qt_errorf(&ctx->err, "%s: parameter %d: cannot read '%.*s'", op, position,
                       (int)n, decl);
    } else {
      size_t used = strlen(base);
      snprintf(base + used, sizeof base - used, "%s%.39s", used ? " " : "", word);
    }
  }
  int known = -1;
  for (size_t t = 0; t < sizeof kernel_types / sizeof kernel_types[0]; t++)
    if (strcmp(base, kernel_types[t].spelling) == 0) known = (int)t;
  if (known < 0 || pointers > 1 || (pointers == 0 && !kernel_types[known].scalar_ok))
    return qt_errorf(&ctx->err, "%s: parameter %d (%.*s): type '%s%s' cannot be passed from "
                     "Lua (pointers to float, double, int, long long, unsigned char, bool, "
                     "__half, __nv_bfloat16 or void, and int, unsigned, long long, float, "
                     "double, bool, __half, __nv_bfloat16 are)", op, position, (int)n, decl, base,
                     pointers == 1 ? " *" : pointers > 1 ? " **" : "");
  if (pointers == 1) {
    p->kind = QT_PARAM_POINTER;
    p->is_const = is_const_before_star;
    p->dtype = kernel_types[known].dtype;
    snprintf(p->type, sizeof p->type, "%s%.30s *", p->is_const ? "const " : "", base);
  } else {
    p->kind = kernel_types[known].scalar;
    p->dtype = QT_PARAM_NO_DTYPE;
    snprintf(p->type, sizeof p->type, "%.39s", base);
  }
  return 0;
}

/* A parameter list ("float *x, int n") into params. */
static int kernel_parse_list(qt_ctx *ctx, const char *op, const char *list, size_t n,
                             int nsubst, char subst_from[][40], char subst_to[][40],
                             qt_param *params, int *nparams) {
  const char *start[QT_KERNEL_MAXPARAMS];
  size_t len[QT_KERNEL_MAXPARAMS];
  size_t k = 0;
  while (k < n && (list[k] == ' ' || list[k] == '\t' || list[k] == '\n' || list[k] == '\r')) k++;
  size_t e = n;
  while (e > k && (list[e - 1] == ' ' || list[e - 1] == '\t' || list[e - 1] == '\n' ||
                   list[e - 1] == '\r'))
    e--;
  if (k == e || (e - k == 4 && strncmp(list + k, "void", 4) == 0)) {
    *nparams = 0;
    return 0;
  }
  int count = kernel_split(list, n, start, len, QT_KERNEL_MAXPARAMS);
  if (count < 0)
    return qt_errorf(&ctx->err, "%s: more than %d parameters", op, QT_KERNEL_MAXPARAMS);
  for (int i = 0; i < count; i++) {
    while (len[i] > 0 && isspace((unsigned char)*start[i])) start[i]++, len[i]--;
    while (len[i] > 0 && isspace((unsigned char)start[i][len[i] - 1])) len[i]--;
    if (kernel_parse_param(ctx, op, i + 1, start[i], len[i], nsubst, subst_from, subst_to,
                           &params[i]))
      return -1;
  }
  *nparams = count;
  return 0;
}

/* "axpy<float, 4>" -> base "axpy" and its template arguments. */
static int kernel_split_expression(const char *name, char *base, size_t base_len,
                                   char args[][40], int max) {
  const char *lt = strchr(name, '<');
  if (lt == NULL) {
    snprintf(base, base_len, "%s", name);
    return 0;
  }
  snprintf(base, base_len, "%.*s", (int)(lt - name), name);
  const char *gt = strrchr(name, '>');
  if (gt == NULL || gt < lt) return -1;
  const char *start[16];
  size_t len[16];
  int count = kernel_split(lt + 1, (size_t)(gt - lt - 1), start, len, max < 16 ? max : 16);
  for (int i = 0; i < count; i++) {
    while (len[i] > 0 && *start[i] == ' ') start[i]++, len[i]--;
    while (len[i] > 0 && start[i][len[i] - 1] == ' ') len[i]--;
    snprintf(args[i], 40, "%.*s", (int)len[i], start[i]);
  }
  return count;
}

/* The parameters of the __global__ function `name` declared in source. */
int ops_kernel_parse_source(qt_ctx *ctx, const char *op, const char *source, const char *name,
                            qt_param *params, int *nparams) {
  char base[128], targs[32][40], tnames[32][40];
  int ntargs = kernel_split_expression(name, base, sizeof base, targs, 16);
  if (ntargs < 0) return qt_errorf(&ctx->err, "%s: cannot read the name '%s'", op, name);
  char *s = kernel_strip(source);
  if (s == NULL) return qt_errorf(&ctx->err, "%s: out of host memory", op);
  size_t blen = strlen(base);
  int rc = -2;
  for (char *g = s; (g = strstr(g, "__global__")) != NULL; g += 10) {
    /* the declared name: the identifier right before the first '(' after __global__
    ** (skipping __launch_bounds__(...) and attributes) */
    char *p = g + 10;
    char *open = NULL;
    for (;;) {
      open = strchr(p, '(');
      if (open == NULL) break;
      char *e = open;
      while (e > p && e[-1] == ' ') e--;
      char *b = e;
      while (b > p && kernel_is_ident(b[-1])) b--;
      if (((size_t)(e - b) == 17 && strncmp(b, "__launch_bounds__", 17) == 0) ||
          ((size_t)(e - b) == 13 && strncmp(b, "__attribute__", 13) == 0) ||
          ((size_t)(e - b) == 8 && strncmp(b, "__align_", 8) == 0)) {
        int depth = 0;
        for (p = open; *p; p++) {
          if (*p == '(') depth++;
          else if (*p == ')' && --depth == 0) { p++; break; }
        }
        continue;
      }
      if ((size_t)(e - b) == blen && strncmp(b, base, blen) == 0) break;
      open = NULL;
      break;
    }
    if (open == NULL) continue;
    int depth = 0;
    char *close = open;
    for (; *close; close++) {
      if (*close == '(') depth++;
      else if (*close == ')' && --depth == 0) break;
    }
    if (*close != ')') continue;
    /* template parameters: "template <typename T, int N>" right before __global__ (or
    ** before extern/static words in between) */
    int nt = 0;
    if (ntargs > 0) {
      char *t = g;
      char *tmpl = NULL;
      for (char *q = s; q < g && (q = strstr(q, "template")) != NULL && q < g; q += 8) tmpl = q;
      if (tmpl != NULL) {
        char *lt = strchr(tmpl, '<'), *gt = lt ? strchr(lt, '>') : NULL;
        if (lt != NULL && gt != NULL && gt < t) {
          const char *start[16];
          size_t len[16];
          int count = kernel_split(lt + 1, (size_t)(gt - lt - 1), start, len, 16);
          for (int i = 0; i < count && i < ntargs; i++) {
            char words[8][40];
            const char *eq = memchr(start[i], '=', len[i]);
            size_t upto = eq != NULL ? (size_t)(eq - start[i]) : len[i];
            int nw = kernel_words(start[i], upto, words, 8);
            if (nw >= 1) snprintf(tnames[nt++], 40, "%s", words[nw - 1]);
          }
        }
      }
    }
    /* typedefs of the source ("typedef float real;") stand for their types; they go
    ** after the template arguments, which keep their slots */
    for (int k = nt; k < ntargs && k < 16; k++) targs[k][0] = '\0';
    int ns = nt;
    for (char *q = s; ns < 32 && (q = strstr(q, "typedef")) != NULL; q += 7) {
      if ((q > s && kernel_is_ident(q[-1])) || kernel_is_ident(q[7])) continue;
      char *semi = strchr(q, ';');
      if (semi == NULL) break;
      char words[12][40];
      int nw = kernel_words(q + 7, (size_t)(semi - q - 7), words, 12);
      if (nw < 2 || !kernel_is_ident(words[nw - 1][0])) continue;
      char joined[40] = "";
      bool simple = true;
      for (int w = 0; w < nw - 1 && simple; w++) {
        if (!kernel_is_ident(words[w][0])) simple = false;
        else if (!kernel_is_qualifier(words[w])) {
          size_t used = strlen(joined);
          snprintf(joined + used, sizeof joined - used, "%s%.30s", used ? " " : "", words[w]);
        }
      }
      if (!simple || joined[0] == '\0') continue;
      snprintf(tnames[ns], 40, "%.39s", words[nw - 1]);
      snprintf(targs[ns], 40, "%.39s", joined);
      ns++;
    }
    rc = kernel_parse_list(ctx, op, open + 1, (size_t)(close - open - 1), ns, tnames, targs,
                           params, nparams);
    break;
  }
  free(s);
  if (rc == -2)
    return qt_errorf(&ctx->err, "%s: no __global__ function '%s' in the source (give its "
                     "parameters with opts.signature when a macro declares it)", op, base);
  return rc;
}

/* ---- Itanium-mangled names (C++ kernels in modules) give their parameter types */

static int kernel_demangle_type(const char **pp, qt_param *p, char subs[][40], int *nsubs) {
  const char *s = *pp;
  bool is_const = false;
  int pointers = 0;
  char code = 0;
  char spelled[40] = "";
  while (*s == 'P' || *s == 'K' || *s == 'V' || *s == 'r') {
    if (*s == 'P') pointers++;
    else if (*s == 'K' && pointers == 1) is_const = true;
    else if (*s == 'K') is_const = true;
    s++;
  }
  if (*s == 'S') {  /* a substitution: S_ is the first, S0_ the second, ... */
    int index = 0;
    s++;
    if (*s == '_') index = 0;
    else {
      int v = 0;
      while ((*s >= '0' && *s <= '9') || (*s >= 'A' && *s <= 'Z')) {
        v = v * 36 + (*s >= 'A' ? *s - 'A' + 10 : *s - '0');
        s++;
      }
      if (*s != '_') return -1;
      index = v + 1;
    }
    s++;
    if (index >= *nsubs) return -1;
    snprintf(spelled, sizeof spelled, "%s", subs[index]);
  } else if (*s >= '1' && *s <= '9') {  /* a source name: 6__half, 13__nv_bfloat16 */
    const char *q = s;
    long len = 0;
    while (*q >= '0' && *q <= '9' && len < 1000) len = len * 10 + (*q++ - '0');
    if (len > 30 || (long)strlen(q) < len) return -1;
    snprintf(spelled, sizeof spelled, "%.*s", (int)(q - s + len), s);
    s = q + len;
    if (*nsubs < 32) snprintf(subs[(*nsubs)++], 40, "%s", spelled);  /* a candidate itself */
  } else {
    code = *s++;
    snprintf(spelled, sizeof spelled, "%c", code);
  }
  /* the whole prefixed type is spelled by its codes: remember it for later S_ */
  size_t consumed = (size_t)(s - *pp);
  char full[40];
  snprintf(full, sizeof full, "%s%.*s", "", (int)consumed, *pp);
  if (pointers > 0 || is_const) {
    /* qualified and pointer types are substitution candidates, innermost first */
    if (*nsubs < 32 && is_const) snprintf(subs[(*nsubs)++], 40, "K%.38s", spelled);
    if (*nsubs < 32 && pointers > 0) snprintf(subs[(*nsubs)++], 40, "%s", full);
  }
  /* decode the element (spelled after any P/K: one letter, or a source name) */
  const char *e = spelled;
  while (*e == 'P' || *e == 'K' || *e == 'V' || *e == 'r') {
    if (*e == 'P') pointers++;
    if (*e == 'K') is_const = true;
    e++;
  }
  static const struct { const char *name; qt_param_kind kind; int dtype; } names[] = {
    {"6__half", QT_PARAM_F16, QT_F16}, {"13__nv_bfloat16", QT_PARAM_BF16, QT_BF16},
  };
  for (size_t c = 0; c < sizeof names / sizeof names[0]; c++) {
    if (strcmp(e, names[c].name) != 0 || pointers > 1) continue;
    const char *type = names[c].name + (names[c].name[1] == '_' ? 1 : 2);
    memset(p, 0, sizeof *p);
    p->kind = pointers == 1 ? QT_PARAM_POINTER : names[c].kind;
    p->dtype = pointers == 1 ? names[c].dtype : QT_PARAM_NO_DTYPE;
    p->is_const = pointers == 1 && is_const;
    snprintf(p->type, sizeof p->type, "%s%s%s", p->is_const ? "const " : "", type,
             pointers == 1 ? " *" : "");
    *pp = s;
    return 0;
  }
  /* each dtype's own code (kernel_internal.h; 0 for the named 16-bit types), then others */
#define KERNEL_CODE_ROW_(P, E, sfx, ...) \
  { KERNEL_CTYPE_FIELD(CODE, sfx), KERNEL_CTYPE_FIELD(SPELLING, sfx), \
    KERNEL_CTYPE_FIELD(KIND, sfx), E },
  static const struct { char code; const char *type; qt_param_kind kind; int dtype; } codes[] = {
    QT_DTYPE_LIST(KERNEL_CODE_ROW_, ~)
    {'j', "unsigned", QT_PARAM_U32, QT_PARAM_NO_DTYPE},
    {'l', "long", QT_PARAM_I64, QT_I64},
    {'m', "unsigned long", QT_PARAM_U64, QT_PARAM_NO_DTYPE},
    {'y', "unsigned long long", QT_PARAM_U64, QT_PARAM_NO_DTYPE},
    {'c', "char", QT_PARAM_POINTER, QT_PARAM_NO_DTYPE},
    {'v', "void", QT_PARAM_POINTER, QT_PARAM_ANY_DTYPE},
  };
  for (size_t c = 0; c < sizeof codes / sizeof codes[0]; c++) {
    if (codes[c].code == 0 || codes[c].code != *e || e[1] != '\0') continue;
    memset(p, 0, sizeof *p);
    if (pointers == 1) {
      p->kind = QT_PARAM_POINTER;
      p->dtype = codes[c].dtype;
      p->is_const = is_const;
      snprintf(p->type, sizeof p->type, "%s%s *", is_const ? "const " : "", codes[c].type);
    } else if (pointers == 0 && codes[c].kind != QT_PARAM_POINTER) {
      p->kind = codes[c].kind;
      p->dtype = QT_PARAM_NO_DTYPE;
      snprintf(p->type, sizeof p->type, "%s", codes[c].type);
    } else {
      return -1;
    }
    *pp = s;
    return 0;
  }
  return -1;
}

/* _Z<len><name><types>: the parameters, or -1 for a name that is not a plain function. */
int ops_kernel_demangle(const char *mangled, qt_param *params, int *nparams) {
  if (strncmp(mangled, "_Z", 2) != 0) return -1;
  const char *s = mangled + 2;
  long len = 0;
  while (*s >= '0' && *s <= '9') len = len * 10 + (*s++ - '0');
  if (len <= 0 || (long)strlen(s) < len) return -1;
  s += len;
  if (*s == 'I') return -1;  /* template instantiations: give a signature */
  char subs[32][40];
  int nsubs = 0, n = 0;
  if (strcmp(s, "v") == 0) {
    *nparams = 0;
    return 0;
  }
  while (*s != '\0') {
    if (n == QT_KERNEL_MAXPARAMS || kernel_demangle_type(&s, &params[n], subs, &nsubs) != 0)
      return -1;
    n++;
  }
  *nparams = n;
  return 0;
}

int ops_kernel_parse_list(qt_ctx *ctx, const char *op, const char *list, qt_param *params,
                          int *nparams) {
  return kernel_parse_list(ctx, op, list, strlen(list), 0, NULL, NULL, params, nparams);
}
