/*
** ops_matmul_einsum.c — qlua.einsum: NumPy's subscript notation reduced to views, sums and GEMMs.
**
** The spec is parsed into one label per dim of every operand (letters, and one label per
** broadcast dim of "..."). Each operand is then made a view with unique labels: a letter
** repeated within one operand is its diagonal (one dim whose stride is the sum of the
** repeated dims' strides) and a size-1 "..." dim is expanded (stride 0) to the broadcast
** size. Operands are contracted left to right: before each pair, a label that only one side
** has and that no later operand and not the output needs is summed away (a reduction), so
** the pair's labels fall into batch (both sides, still needed), contracted (both sides,
** not needed), left-only and right-only. Each side is permuted to (batch, rows, inner) and
** reshaped (a view when the strides allow, else one copy) into a 3-D operand of one
** qt_matmul call: the contracted dims are never looped over here. What is left at the end
** is summed where the output does not name it and permuted into the output's order.
*/
#include "ops_internal.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Labels: 'A'..'Z' are 0..25 and 'a'..'z' 26..51 (so sorting labels sorts letters as
** NumPy's implicit output does), the dims of "..." 52 and up, right-aligned across
** operands as broadcasting aligns them. */
#define ES_LETTERS 52
#define ES_NLABELS (ES_LETTERS + QT_MAXDIM)
#define ES_SPEC_SHOWN 120  /* the longest spec quoted whole in a message */

typedef struct es_term {
  int nletters;
  int letter[QT_MAXDIM + 1];  /* labels, in order; ES_ELLIPSIS where "..." stands */
  int ellipsis_at;            /* index in letter[] of "...", or -1 */
} es_term;
#define ES_ELLIPSIS (-1)

/* One operand while it is worked on: a tensor (a reference held) and each dim's label. */
typedef struct es_operand {
  qt_tensor t;
  int label[QT_MAXDIM];
} es_operand;

typedef struct es_state {
  qt_ctx *ctx;
  const char *spec;
  char shown[ES_SPEC_SHOWN + 8];  /* the spec as messages quote it */
  int n;
  es_term term[QT_EINSUM_MAX];
  es_term output;
  bool explicit_output;
  int ell_rank;                   /* the broadcast rank of "..." */
  int64_t label_size[ES_NLABELS];
  bool label_seen[ES_NLABELS];
  int nout;
  int out_label[QT_MAXDIM];
  es_operand op[QT_EINSUM_MAX];
} es_state;

static char es_letter_char(int label) {
  return label < 26 ? (char)('A' + label) : (char)('a' + label - 26);
}

static int es_error(es_state *s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int es_error(es_state *s, const char *fmt, ...) {
  char what[320];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(what, sizeof what, fmt, ap);
  va_end(ap);
  return qt_errorf(&s->ctx->err, "einsum: '%s': %s", s->shown, what);
}

/* ================================================================== parsing */

/* One term from *p up to ',', "->" or the end. Spaces are skipped. */
static int es_parse_term(es_state *s, const char **p, es_term *t, int which) {
  t->nletters = 0;
  t->ellipsis_at = -1;
  const char *c = *p;
  for (;;) {
    char ch = *c;
    if (ch == '\0' || ch == ',' || (ch == '-' && c[1] == '>')) break;
    if (ch == ' ') {
      c++;
      continue;
    }
    int label;
    if (ch >= 'A' && ch <= 'Z') label = ch - 'A';
    else if (ch >= 'a' && ch <= 'z') label = 26 + ch - 'a';
    else if (ch == '.') {
      if (c[1] != '.' || c[2] != '.')
        return es_error(s, "a '.' that is not part of '...'");
      if (t->ellipsis_at >= 0)
        return es_error(s, "'...' appears twice in %s", which < 0 ? "the output" : "one operand");
      label = ES_ELLIPSIS;
      t->ellipsis_at = t->nletters;
      c += 2;
    } else if (ch == '-') {
      return es_error(s, "a '-' that is not part of '->'");
    } else {
      return es_error(s, "character '%c' is not a letter, ',', '...' or '->'", ch);
    }
    if (t->nletters >= QT_MAXDIM + (t->ellipsis_at >= 0 ? 1 : 0))
      return es_error(s, "more than %d subscripts in one term", QT_MAXDIM);
    t->letter[t->nletters++] = label;
    c++;
  }
  *p = c;
  return 0;
}

static int es_parse(es_state *s) {
  const char *p = s->spec;
  int terms = 0;
  for (;;) {
    if (terms == QT_EINSUM_MAX) return es_error(s, "more than %d operands", QT_EINSUM_MAX);
    es_term scratch;
    es_term *t = terms < s->n ? &s->term[terms] : &scratch;
    if (es_parse_term(s, &p, t, terms)) return -1;
    terms++;
    if (*p == ',') {
      p++;
      continue;
    }
    break;
  }
  if (terms != s->n)
    return es_error(s, "the spec has %d operand%s, got %d tensor%s", terms, terms == 1 ? "" : "s",
                    s->n, s->n == 1 ? "" : "s");
  s->explicit_output = false;
  if (*p == '-') {
    p += 2;
    s->explicit_output = true;
    if (es_parse_term(s, &p, &s->output, -1)) return -1;
    if (*p == ',') return es_error(s, "the output has a ','");
    if (*p == '-') return es_error(s, "'->' appears twice");
  }
  return 0;
}

/* ================================================================== labels and sizes */

/* Gives every operand's dims their labels and checks the sizes they agree on. */
static int es_label(es_state *s, const qt_tensor *const *operands) {
  memset(s->label_seen, 0, sizeof s->label_seen);
  s->ell_rank = 0;
  for (int k = 0; k < s->n; k++) {
    const es_term *t = &s->term[k];
    int nl = t->nletters - (t->ellipsis_at >= 0 ? 1 : 0);
    int nd = operands[k]->ndim;
    if (t->ellipsis_at < 0 ? nd != nl : nd < nl)
      return es_error(s, "operand %d has %d dim%s but its subscripts name %s%d", k + 1, nd,
                      nd == 1 ? "" : "s", t->ellipsis_at < 0 ? "" : "at least ", nl);
    if (t->ellipsis_at >= 0 && nd - nl > s->ell_rank) s->ell_rank = nd - nl;
  }
  for (int k = 0; k < s->n; k++) {
    const es_term *t = &s->term[k];
    const qt_tensor *x = operands[k];
    int r = x->ndim - (t->nletters - (t->ellipsis_at >= 0 ? 1 : 0));
    int d = 0;
    for (int i = 0; i < t->nletters; i++) {
      if (t->letter[i] != ES_ELLIPSIS) {
        int l = t->letter[i];
        if (s->label_seen[l] && s->label_size[l] != x->size[d])
          return es_error(s, "letter '%c' has sizes %lld and %lld", es_letter_char(l),
                          (long long)s->label_size[l], (long long)x->size[d]);
        s->label_seen[l] = true;
        s->label_size[l] = x->size[d];
        s->op[k].label[d++] = l;
        continue;
      }
      for (int j = 0; j < r; j++, d++) {
        int l = ES_LETTERS + (s->ell_rank - r) + j;
        int64_t sz = x->size[d];
        if (s->label_seen[l]) {
          int64_t g = s->label_size[l];
          if (sz != g && sz != 1 && g != 1)
            return es_error(s, "the '...' dims do not broadcast (sizes %lld and %lld)",
                            (long long)g, (long long)sz);
          if (g == 1) s->label_size[l] = sz;
        } else {
          s->label_size[l] = sz;
        }
        s->label_seen[l] = true;
        s->op[k].label[d] = l;
      }
    }
  }
  /* The output: as written, or "..." then the letters seen exactly once, sorted. */
  s->nout = 0;
  if (s->explicit_output) {
    bool used[ES_NLABELS] = {false};
    for (int i = 0; i < s->output.nletters; i++) {
      int l = s->output.letter[i];
      if (l == ES_ELLIPSIS) {
        if (s->nout + s->ell_rank > QT_MAXDIM)
          return es_error(s, "the output has more than %d dims", QT_MAXDIM);
        for (int j = 0; j < s->ell_rank; j++) s->out_label[s->nout++] = ES_LETTERS + j;
        continue;
      }
      if (used[l]) return es_error(s, "output letter '%c' appears twice", es_letter_char(l));
      if (!s->label_seen[l])
        return es_error(s, "output letter '%c' is in no operand", es_letter_char(l));
      used[l] = true;
      if (s->nout >= QT_MAXDIM) return es_error(s, "the output has more than %d dims", QT_MAXDIM);
      s->out_label[s->nout++] = l;
    }
  } else {
    int count[ES_LETTERS] = {0};
    for (int k = 0; k < s->n; k++)
      for (int i = 0; i < s->term[k].nletters; i++)
        if (s->term[k].letter[i] != ES_ELLIPSIS) count[s->term[k].letter[i]]++;
    for (int j = 0; j < s->ell_rank; j++) s->out_label[s->nout++] = ES_LETTERS + j;
    for (int l = 0; l < ES_LETTERS; l++)
      if (count[l] == 1) {
        if (s->nout >= QT_MAXDIM)
          return es_error(s, "the output has more than %d dims", QT_MAXDIM);
        s->out_label[s->nout++] = l;
      }
  }
  return 0;
}

/* ================================================================== operand views */

/* Operand k as a view with one dim per distinct label: a repeated letter becomes one dim
** (the diagonal: the strides add up), a size-1 "..." dim takes the broadcast size with
** stride 0. A reference to the input's storage is held. */
static void es_view(es_state *s, int k, const qt_tensor *x) {
  es_operand *o = &s->op[k];
  qt_tensor_share(&o->t, x);
  int nd = 0;
  int label[QT_MAXDIM];
  for (int d = 0; d < x->ndim; d++) {
    int l = o->label[d], at = -1;
    for (int e = 0; e < nd; e++)
      if (label[e] == l) at = e;
    if (at >= 0) {
      o->t.stride[at] += x->stride[d];
      continue;
    }
    label[nd] = l;
    o->t.size[nd] = x->size[d];
    o->t.stride[nd] = x->stride[d];
    if (l >= ES_LETTERS && x->size[d] == 1 && s->label_size[l] != 1) {
      o->t.size[nd] = s->label_size[l];
      o->t.stride[nd] = 0;
    }
    nd++;
  }
  for (int d = nd; d < QT_MAXDIM; d++) o->t.size[d] = 0, o->t.stride[d] = 0;
  o->t.ndim = nd;
  for (int d = 0; d < nd; d++) o->label[d] = label[d];
}

static int es_find(const es_operand *o, int label) {
  for (int d = 0; d < o->t.ndim; d++)
    if (o->label[d] == label) return d;
  return -1;
}

/* Replaces o->t by `next`, dropping the old reference. */
static void es_replace(es_operand *o, qt_tensor *next) {
  qt_tensor_release(&o->t);
  o->t = *next;
  qt_tensor_init(next);
}

/* Sums the dims of o whose labels `drop` marks; everything at once into a 0-d tensor when
** every dim goes. */
static int es_sum(es_state *s, es_operand *o, const bool *drop) {
  int ndrop = 0;
  for (int d = 0; d < o->t.ndim; d++) ndrop += drop[o->label[d]];
  if (ndrop == 0) return 0;
  qt_tensor next;
  qt_tensor_init(&next);
  if (ndrop == o->t.ndim) {
    if (qt_reduce(s->ctx, &next, QT_SUM, &o->t, -1)) return -1;
    es_replace(o, &next);
    return 0;
  }
  for (int d = o->t.ndim - 1; d >= 0; d--) {
    if (!drop[o->label[d]]) continue;
    if (qt_reduce(s->ctx, &next, QT_SUM, &o->t, d)) return -1;
    es_replace(o, &next);
    for (int e = d; e < o->t.ndim; e++) o->label[e] = o->label[e + 1];
  }
  return 0;
}

/* ================================================================== one contraction */

/* o as the 3-D (prod sizes of group 1, of group 2, of group 3) tensor whose dims are
** o's dims listed in dims[], in that order: a permute, then a reshape (a view when the
** strides allow). */
static int es_as_3d(es_state *s, const es_operand *o, const int *dims, const int *count,
                    qt_tensor *out) {
  int perm[QT_MAXDIM];
  int64_t size3[3] = {1, 1, 1};
  int at = 0;
  for (int g = 0; g < 3; g++)
    for (int i = 0; i < count[g]; i++, at++) {
      perm[at] = dims[at];
      size3[g] *= o->t.size[dims[at]];
    }
  qt_tensor permuted;
  qt_tensor_init(&permuted);
  if (qt_permute(s->ctx, &permuted, &o->t, o->t.ndim, perm)) return -1;
  int rc = qt_reshape(s->ctx, out, &permuted, 3, size3);
  qt_tensor_release(&permuted);
  return rc;
}

/* a = a * b contracted: labels of both that `keep` marks are batch dims, those of both
** that it does not are contracted, the rest (one side only; the caller summed the unneeded
** ones) stay. The result's labels: batch, a's own, b's own. */
static int es_contract(es_state *s, es_operand *a, const es_operand *b, const bool *keep) {
  int batch[QT_MAXDIM], inner[QT_MAXDIM], a_only[QT_MAXDIM], b_only[QT_MAXDIM];
  int nbatch = 0, ninner = 0, na = 0, nb = 0;
  for (int d = 0; d < a->t.ndim; d++) {
    int l = a->label[d];
    if (es_find(b, l) < 0) a_only[na++] = l;
    else if (keep[l]) batch[nbatch++] = l;
    else inner[ninner++] = l;
  }
  for (int d = 0; d < b->t.ndim; d++)
    if (es_find(a, b->label[d]) < 0) b_only[nb++] = b->label[d];
  if (nbatch + na + nb > QT_MAXDIM)
    return es_error(s, "an intermediate product would have %d dims (at most %d)",
                    nbatch + na + nb, QT_MAXDIM);
  int dims_a[QT_MAXDIM], dims_b[QT_MAXDIM], at = 0;
  for (int i = 0; i < nbatch; i++) dims_a[at++] = es_find(a, batch[i]);
  for (int i = 0; i < na; i++) dims_a[at++] = es_find(a, a_only[i]);
  for (int i = 0; i < ninner; i++) dims_a[at++] = es_find(a, inner[i]);
  at = 0;
  for (int i = 0; i < nbatch; i++) dims_b[at++] = es_find(b, batch[i]);
  for (int i = 0; i < ninner; i++) dims_b[at++] = es_find(b, inner[i]);
  for (int i = 0; i < nb; i++) dims_b[at++] = es_find(b, b_only[i]);
  int count_a[3] = {nbatch, na, ninner}, count_b[3] = {nbatch, ninner, nb};

  int rc = -1;
  qt_tensor a3, b3, prod, next;
  qt_tensor_init(&a3);
  qt_tensor_init(&b3);
  qt_tensor_init(&prod);
  qt_tensor_init(&next);
  if (es_as_3d(s, a, dims_a, count_a, &a3) || es_as_3d(s, b, dims_b, count_b, &b3) ||
      qt_matmul(s->ctx, &prod, &a3, &b3))
    goto cleanup;
  int64_t size[QT_MAXDIM];
  int label[QT_MAXDIM], nd = 0;
  for (int i = 0; i < nbatch; i++) label[nd] = batch[i], size[nd++] = s->label_size[batch[i]];
  for (int i = 0; i < na; i++) label[nd] = a_only[i], size[nd++] = s->label_size[a_only[i]];
  for (int i = 0; i < nb; i++) label[nd] = b_only[i], size[nd++] = s->label_size[b_only[i]];
  if (qt_view_as(s->ctx, &next, &prod, nd, size)) goto cleanup;
  es_replace(a, &next);
  for (int d = 0; d < nd; d++) a->label[d] = label[d];
  rc = 0;
cleanup:
  qt_tensor_release(&a3);
  qt_tensor_release(&b3);
  qt_tensor_release(&prod);
  qt_tensor_release(&next);
  return rc;
}

/* ================================================================== einsum */

static int es_check_operands(es_state *s, const qt_tensor *const *operands) {
  const char *op = "einsum";
  for (int k = 0; k < s->n; k++) {
    if (ops_live(s->ctx, op, operands[k])) return -1;
    qt_dtype dt = operands[k]->dtype;
    if (!qt_is_float(dt))
      return es_error(s, "operand %d: dtype %s is not supported (a float dtype only)",
                      k + 1, qt_dtypes[dt].name);
    if (k > 0 && dt != operands[0]->dtype)
      return es_error(s, "operands 1 and %d have dtypes %s and %s", k + 1,
                      qt_dtypes[operands[0]->dtype].name, qt_dtypes[dt].name);
    if (k > 0 && ops_same_device(s->ctx, op, operands[0], operands[k])) return -1;
  }
  return 0;
}

int qt_einsum(qt_ctx *ctx, qt_tensor *out, const char *spec, int n,
              const qt_tensor *const *operands) {
  es_state *s = calloc(1, sizeof *s);  /* ~20 KiB of labels and terms: not on the stack */
  if (s == NULL) return qt_errorf(&ctx->err, "einsum: out of memory");
  s->ctx = ctx;
  s->spec = spec;
  size_t len = strlen(spec);
  if (len <= ES_SPEC_SHOWN) snprintf(s->shown, sizeof s->shown, "%s", spec);
  else snprintf(s->shown, sizeof s->shown, "%.*s...", ES_SPEC_SHOWN, spec);
  s->n = n;
  for (int k = 0; k < QT_EINSUM_MAX; k++) qt_tensor_init(&s->op[k].t);
  int rc = -1;
  qt_tensor res;
  qt_tensor_init(&res);
  if (n < 1 || n > QT_EINSUM_MAX) {
    es_error(s, "takes 1 to %d operands, got %d", QT_EINSUM_MAX, n);
    goto cleanup;
  }
  if (es_parse(s) || es_check_operands(s, operands) || es_label(s, operands)) goto cleanup;
  /* A letter (or a "..." dim) of size 0: each output element is a sum over nothing, 0, or
  ** there is none. Answered here, as the views and 3-D shapes below would multiply the
  ** other sizes, which may overflow int64 (0 x 2^40 x 2^40). */
  bool empty = false;
  for (int l = 0; l < ES_NLABELS; l++) empty = empty || (s->label_seen[l] && s->label_size[l] == 0);
  if (empty) {
    int64_t size[QT_MAXDIM];
    for (int i = 0; i < s->nout; i++) size[i] = s->label_size[s->out_label[i]];
    if (ops_alloc(ctx, "einsum", &res, ops_device(operands[0]), operands[0]->dtype, s->nout, size) == 0 &&
        (qt_numel(&res) == 0 || qt_fill_(ctx, &res, qt_scalar_i(0)) == 0)) {
      *out = res;
      qt_tensor_init(&res);
      rc = 0;
    }
    goto cleanup;
  }
  for (int k = 0; k < n; k++) es_view(s, k, operands[k]);

  bool in_output[ES_NLABELS] = {false};
  for (int i = 0; i < s->nout; i++) in_output[s->out_label[i]] = true;
  es_operand *cur = &s->op[0];
  for (int k = 1; k < n; k++) {
    /* What is still needed after this pair: the output and the operands after it. */
    bool keep[ES_NLABELS];
    memcpy(keep, in_output, sizeof keep);
    for (int j = k + 1; j < n; j++)
      for (int d = 0; d < s->op[j].t.ndim; d++) keep[s->op[j].label[d]] = true;
    es_operand *next = &s->op[k];
    bool drop_cur[ES_NLABELS], drop_next[ES_NLABELS];
    for (int l = 0; l < ES_NLABELS; l++) drop_cur[l] = drop_next[l] = false;
    for (int d = 0; d < cur->t.ndim; d++)
      if (!keep[cur->label[d]] && es_find(next, cur->label[d]) < 0) drop_cur[cur->label[d]] = true;
    for (int d = 0; d < next->t.ndim; d++)
      if (!keep[next->label[d]] && es_find(cur, next->label[d]) < 0)
        drop_next[next->label[d]] = true;
    if (es_sum(s, cur, drop_cur) || es_sum(s, next, drop_next) || es_contract(s, cur, next, keep))
      goto cleanup;
    qt_tensor_release(&next->t);
  }
  bool drop[ES_NLABELS];
  for (int l = 0; l < ES_NLABELS; l++) drop[l] = !in_output[l];
  if (es_sum(s, cur, drop)) goto cleanup;

  /* Into the output's order, as a new contiguous tensor (a copy when it is still a view of
  ** an operand: a permutation or a diagonal). */
  int perm[QT_MAXDIM];
  for (int i = 0; i < s->nout; i++) perm[i] = es_find(cur, s->out_label[i]);
  qt_tensor permuted;
  qt_tensor_init(&permuted);
  if (qt_permute(ctx, &permuted, &cur->t, s->nout, perm)) goto cleanup;
  bool is_input = false;
  for (int k = 0; k < n; k++) is_input |= permuted.storage == operands[k]->storage;
  rc = is_input ? qt_clone(ctx, &res, &permuted) : qt_contiguous(ctx, &res, &permuted);
  qt_tensor_release(&permuted);
  if (rc == 0) {
    *out = res;
    qt_tensor_init(&res);
  }
cleanup:
  for (int k = 0; k < QT_EINSUM_MAX; k++) qt_tensor_release(&s->op[k].t);
  qt_tensor_release(&res);
  free(s);
  if (rc != 0) qt_err_as(&ctx->err, "einsum");  /* a step's message (matmul's, sum's...) */
  return rc;
}
