/*
** kernel_codegen.c — kernels written from a few expressions: qlua.elementwise and
** qlua.reduction (CuPy's ElementwiseKernel and ReductionKernel).
**
** The user gives typed parameters ("float32 x, float32 y", or type variables "T x, T y")
** and a body; this file writes the CUDA source of a kernel around it, once per binding
** of the type variables and per layout, and hands it to core/kernel/kernel.c (which compiles and
** caches it). A call broadcasts its tensors to one shape, collapses the views together
** (qt_views_collapse, as the built-in ops do), and picks a layout:
**   - dense: every operand is one contiguous run: element i is x[i];
**   - strided: any strides (views, broadcast operands with stride 0): the offsets come
**     from i by division over the collapsed sizes, in 32 bits when the tensor has fewer
**     than 2^32 elements.
** A reduction is two launches: blocks fold slices of each output's elements into
** partials (map, then reduce, with the identity as the start), then one block per output
** folds its partials and applies the post-map.
*/
#include <ctype.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/ops_internal.h"
#include "core/kernel/kernel_internal.h"
#include "device.h"
#include "ops.h"

#define CG_MAXPARAMS 32
#define CG_MAXVARIANTS 16
#define CG_THREADS 256

/* What the generated kernels take as their _qgeom parameter: sizes and each operand's
** strides. A kernel declares stride[number of its operands]; launches pass this larger
** struct, whose prefix has the same layout (the runtime copies the declared size). */
typedef struct cg_geom {
  int ndim;
  long long size[QT_MAXDIM];
  long long stride[CG_MAXPARAMS][QT_MAXDIM];
} cg_geom;

/* One kernel parameter's bytes: a device pointer, or a number as its dtype stores it. */
typedef union cg_value {
  void *p;
  qt_cell cell;
} cg_value;

typedef struct cg_param {
  char name[40];
  int dtype;          /* a fixed dtype, or -1: the type variable `var` */
  char var[40];
} cg_param;

typedef struct cg_variant {
  int dtypes[CG_MAXPARAMS];  /* the binding of every parameter (its dtype) */
  int layout;                /* 0 dense, 1 strided 32-bit, 2 strided 64-bit */
  int arg_kinds;             /* bit k: input k was a number */
  qt_kernel *kernels[2];     /* elementwise: [0]; reduction: pass 1, pass 2 */
} cg_variant;

struct qt_codegen {
  qt_refcount refcount;
  bool reduction;
  char name[64];
  int nin, nout;
  cg_param params[CG_MAXPARAMS];  /* inputs, then outputs */
  char *body;                     /* elementwise: the operation; reduction: the map */
  char *reduce, *post, *identity, *preamble;
  cg_param reduce_type;           /* name unused */
  int nvariants;
  cg_variant variants[CG_MAXVARIANTS];
};

/* ================================================================== parameters */

static bool cg_is_ident(const char *s) {
  if (!(isalpha((unsigned char)s[0]) || s[0] == '_')) return false;
  for (const char *p = s; *p; p++)
    if (!(isalnum((unsigned char)*p) || *p == '_')) return false;
  return true;
}

/* "float32" -> dtype, else -1. */
static int cg_dtype(const char *name) { return qt_dtype_from_name(name); }

/* The C type a dtype's elements are stored as in the kernel. */
#define CG_CTYPE_ROW_(P, E, sfx, ...) [E] = KERNEL_CTYPE_FIELD(SPELLING, sfx),
static const char *const cg_ctypes[QT_NDTYPES] = {QT_DTYPE_LIST(CG_CTYPE_ROW_, ~)};
#undef CG_CTYPE_ROW_
static const char *cg_ctype(int dtype) {
  return dtype >= 0 && dtype < QT_NDTYPES ? cg_ctypes[dtype] : NULL;
}

/* The C type the body computes a dtype in: the 16-bit floats compute in float32 and round
** once when stored, as every op of qlua does (a number for one is passed as a float). */
static const char *cg_compute_type(int dtype) {
  return dtype == QT_F16 || dtype == QT_BF16 ? "float" : cg_ctype(dtype);
}

static bool cg_is_half(int dtype) { return dtype == QT_F16 || dtype == QT_BF16; }

/* What a kernel with 16-bit operands adds to its source: the CUDA types (NVRTC finds the
** headers on the toolkit's include path, kernel.cu), a load and a store with half.h's rules
** (the hardware's round-to-nearest-even for every non-NaN; a NaN kept as NumPy's float16
** and ml_dtypes' bfloat16 keep it), and _qref, what an output parameter is in the body: it
** reads the element (as float) only where the body reads it and rounds what is assigned. */
static const char CG_HALF_HELPERS[] =
  "#include <cuda_fp16.h>\n"
  "#include <cuda_bf16.h>\n"
  "static __device__ __forceinline__ float _qload(__half h) {\n"
  "  unsigned short u = __half_as_ushort(h);\n"
  "  if ((u & 0x7fff) <= 0x7c00) return __half2float(h);\n"
  "  return __uint_as_float(((unsigned)(u & 0x8000) << 16) | 0x7f800000u | ((unsigned)(u & 0x3ff) << 13));\n"
  "}\n"
  "static __device__ __forceinline__ float _qload(__nv_bfloat16 b) {\n"
  "  return __uint_as_float((unsigned)__bfloat16_as_ushort(b) << 16);\n"
  "}\n"
  "static __device__ __forceinline__ void _qstore(__half &d, float f) {\n"
  "  if (f == f) { d = __float2half_rn(f); return; }\n"
  "  unsigned u = __float_as_uint(f), p = (u >> 13) & 0x3ff;\n"
  "  d = __ushort_as_half((unsigned short)(((u >> 16) & 0x8000) | 0x7c00 | (p ? p : 1)));\n"
  "}\n"
  "static __device__ __forceinline__ void _qstore(__nv_bfloat16 &d, float f) {\n"
  "  unsigned u = __float_as_uint(f);\n"
  "  d = __ushort_as_bfloat16((unsigned short)((u & 0x7fffffffu) > 0x7f800000u\n"
  "      ? ((u >> 16) & 0x8000) | 0x7fc0 : (u + 0x7fffu + ((u >> 16) & 1)) >> 16));\n"
  "}\n"
  "template <typename S> struct _qref {\n"
  "  S *p;\n"
  "  __device__ operator float() const { return _qload(*p); }\n"
  "  __device__ _qref &operator=(float v) { _qstore(*p, v); return *this; }\n"
  "  __device__ _qref &operator=(const _qref &o) { return *this = (float)o; }\n"
  "  __device__ _qref &operator+=(float v) { return *this = (float)*this + v; }\n"
  "  __device__ _qref &operator-=(float v) { return *this = (float)*this - v; }\n"
  "  __device__ _qref &operator*=(float v) { return *this = (float)*this * v; }\n"
  "  __device__ _qref &operator/=(float v) { return *this = (float)*this / v; }\n"
  "};\n";

/* How the body sees operand k of dtype at index expression `at`: an input by value, an
** output by reference (a _qref for the 16-bit floats). */
static void cg_operand(ops_buf *s, const char *indent, int dtype, const char *name, bool input,
                       const char *at) {
  if (input && cg_is_half(dtype))
    ops_buf_printf(s, "%sconst float %s = _qload(_qp_%s[%s]);\n", indent, name, name, at);
  else if (input)
    ops_buf_printf(s, "%sconst %s %s = _qp_%s[%s];\n", indent, cg_ctype(dtype), name, name, at);
  else if (cg_is_half(dtype))
    ops_buf_printf(s, "%s_qref<%s> %s = { &_qp_%s[%s] };\n", indent, cg_ctype(dtype), name, name,
                   at);
  else
    ops_buf_printf(s, "%s%s &%s = _qp_%s[%s];\n", indent, cg_ctype(dtype), name, name, at);
}

/* One "type name" into p. */
static int cg_parse_one(qt_ctx *ctx, const char *op, const char *text, cg_param *p) {
  char type[40], name[40], extra[2];
  memset(p, 0, sizeof *p);
  if (sscanf(text, " %39s %39s %1s", type, name, extra) != 2 || !cg_is_ident(name) ||
      !cg_is_ident(type))
    return qt_errorf(&ctx->err, "%s: cannot read the parameter '%s' (want \"dtype name\" or "
                     "\"T name\", e.g. \"float32 x\")", op, text);
  if (name[0] == '_' && name[1] == 'q')
    return qt_errorf(&ctx->err, "%s: parameter names starting with _q are qlua's own", op);
  if (strcmp(name, "i") == 0 || strcmp(name, "n") == 0)
    return qt_errorf(&ctx->err, "%s: 'i' and 'n' are the element's index and the count; "
                     "name the parameter otherwise", op);
  snprintf(p->name, sizeof p->name, "%s", name);
  p->dtype = cg_dtype(type);
  if (p->dtype < 0) {
    if (strcmp(type, "float") == 0 || strcmp(type, "double") == 0 || strcmp(type, "int") == 0)
      return qt_errorf(&ctx->err, "%s: parameter '%s': use qlua's dtype names (float32, "
                       "float64, int32, int64) or a type variable, not the C type '%s'",
                       op, name, type);
    snprintf(p->var, sizeof p->var, "%s", type);
  }
  return 0;
}

static int cg_parse_list(qt_ctx *ctx, const char *op, const char *list, cg_param *params,
                         int max, int *count) {
  *count = 0;
  const char *p = list;
  while (*p) {
    const char *comma = strchr(p, ',');
    size_t n = comma ? (size_t)(comma - p) : strlen(p);
    char one[100];
    if (n >= sizeof one) return qt_errorf(&ctx->err, "%s: parameter '%.40s...' too long", op, p);
    memcpy(one, p, n);
    one[n] = '\0';
    bool blank = true;
    for (size_t k = 0; k < n; k++) blank &= isspace((unsigned char)one[k]) != 0;
    if (blank) {
      if (comma || *count > 0) return qt_errorf(&ctx->err, "%s: an empty parameter in '%s'", op, list);
    } else {
      if (*count == max) return qt_errorf(&ctx->err, "%s: more than %d parameters", op, max);
      if (cg_parse_one(ctx, op, one, &params[*count])) return -1;
      for (int k = 0; k < *count; k++)
        if (strcmp(params[k].name, params[*count].name) == 0)
          return qt_errorf(&ctx->err, "%s: parameter '%s' is named twice", op, params[k].name);
      (*count)++;
    }
    if (comma == NULL) break;
    p = comma + 1;
  }
  return 0;
}

static char *cg_strdup(const char *s) { return s ? strdup(s) : NULL; }

void qt_codegen_release(qt_codegen *g) {
  if (g == NULL || atomic_fetch_sub_explicit(&g->refcount, 1, memory_order_acq_rel) != 1) return;
  for (int v = 0; v < g->nvariants; v++) {
    qt_kernel_release(g->variants[v].kernels[0]);
    qt_kernel_release(g->variants[v].kernels[1]);
  }
  free(g->body);
  free(g->reduce);
  free(g->post);
  free(g->identity);
  free(g->preamble);
  free(g);
}

static int cg_new(qt_ctx *ctx, const char *op, qt_codegen **out, const char *in_params,
                  const char *out_params, const char *name) {
  *out = NULL;
  qt_codegen *g = calloc(1, sizeof *g);
  if (g == NULL) return qt_errorf(&ctx->err, "%s: out of host memory", op);
  atomic_init(&g->refcount, 1);
  if (name == NULL) name = "qlua_kernel";
  if (!cg_is_ident(name) || strlen(name) >= sizeof g->name - 4) {
    free(g);
    return qt_errorf(&ctx->err, "%s: the name '%s' is not a C identifier", op, name);
  }
  snprintf(g->name, sizeof g->name, "%s", name);
  int nin = 0, nout = 0;
  if (cg_parse_list(ctx, op, in_params, g->params, CG_MAXPARAMS, &nin) ||
      cg_parse_list(ctx, op, out_params, g->params + nin, CG_MAXPARAMS - nin, &nout)) {
    free(g);
    return -1;
  }
  for (int o = nin; o < nin + nout; o++)
    for (int k = 0; k < nin; k++)
      if (strcmp(g->params[k].name, g->params[o].name) == 0) {
        qt_errorf(&ctx->err, "%s: '%s' is both an input and an output", op, g->params[o].name);
        free(g);
        return -1;
      }
  if (nout == 0) {
    free(g);
    return qt_errorf(&ctx->err, "%s: no output parameter", op);
  }
  g->nin = nin;
  g->nout = nout;
  *out = g;
  return 0;
}

int qt_elementwise_new(qt_ctx *ctx, qt_codegen **out, const char *in_params,
                       const char *out_params, const char *body, const char *name,
                       const char *preamble) {
  qt_codegen *g;
  if (cg_new(ctx, "elementwise", &g, in_params, out_params, name ? name : "qlua_elementwise"))
    return -1;
  g->body = cg_strdup(body);
  g->preamble = cg_strdup(preamble ? preamble : "");
  if (g->body == NULL || g->preamble == NULL) {
    qt_codegen_release(g);
    return qt_errorf(&ctx->err, "elementwise: out of host memory");
  }
  *out = g;
  return 0;
}

int qt_reduction_new(qt_ctx *ctx, qt_codegen **out, const qt_reduction_spec *spec) {
  qt_codegen *g;
  const char *op = "reduction";
  if (spec->map_expr == NULL || spec->reduce_expr == NULL || spec->identity == NULL)
    return qt_errorf(&ctx->err, "%s: map_expr, reduce_expr and identity are needed", op);
  if (cg_new(ctx, op, &g, spec->in_params ? spec->in_params : "",
             spec->out_params ? spec->out_params : "", spec->name ? spec->name : "qlua_reduction"))
    return -1;
  g->reduction = true;
  if (g->nout != 1 || g->nin == 0) {
    if (g->nout != 1) qt_errorf(&ctx->err, "%s: one output parameter, not %d", op, g->nout);
    else qt_errorf(&ctx->err, "%s: no input parameter", op);
    qt_codegen_release(g);
    return -1;
  }
  char post[200];
  snprintf(post, sizeof post, "%s = a", g->params[g->nin].name);
  g->body = cg_strdup(spec->map_expr);
  g->reduce = cg_strdup(spec->reduce_expr);
  g->identity = cg_strdup(spec->identity);
  g->post = cg_strdup(spec->post_map_expr ? spec->post_map_expr : post);
  g->preamble = cg_strdup(spec->preamble ? spec->preamble : "");
  if (!g->body || !g->reduce || !g->identity || !g->post || !g->preamble) {
    qt_codegen_release(g);
    return qt_errorf(&ctx->err, "%s: out of host memory", op);
  }
  /* the type partials are kept in: a dtype, a type variable, or the output's type */
  const char *rt = spec->reduce_type ? spec->reduce_type : "";
  if (rt[0] == '\0') {
    g->reduce_type = g->params[g->nin];
  } else {
    if (!cg_is_ident(rt)) {
      qt_codegen_release(g);
      return qt_errorf(&ctx->err, "%s: reduce_type '%s' is not a dtype or type variable", op, rt);
    }
    g->reduce_type.dtype = cg_dtype(rt);
    if (g->reduce_type.dtype < 0) snprintf(g->reduce_type.var, sizeof g->reduce_type.var, "%s", rt);
  }
  *out = g;
  return 0;
}

int qt_codegen_nin(const qt_codegen *g) { return g->nin; }
int qt_codegen_nout(const qt_codegen *g) { return g->nout; }

/* ================================================================== binding a call */

/* The dtype of every parameter for this call: fixed ones as declared, type variables
** from the first tensor that uses them (then numbers: a float is float64, an integer
** int64, as NumPy types Python scalars). */
static int cg_bind(qt_ctx *ctx, const char *op, const qt_codegen *g, int nargs,
                   const qt_kernel_arg *args, int *dtypes, int *rdtype) {
  int nparams = g->nin + g->nout;
  for (int pass = 0; pass < 2; pass++)
    for (int k = 0; k < nparams; k++) {
      const cg_param *p = &g->params[k];
      if (p->dtype >= 0) {
        dtypes[k] = p->dtype;
        continue;
      }
      if (pass == 0) dtypes[k] = -1;
      if (dtypes[k] >= 0) continue;
      int found = -1;
      for (int j = 0; j < nparams && found < 0; j++) {
        if (strcmp(g->params[j].var, p->var) != 0 || j >= nargs) continue;
        const qt_kernel_arg *a = &args[j];
        if (a->tensor != NULL) found = a->tensor->dtype;
        else if (pass == 1 && !a->is_bool) found = a->is_float ? QT_F64 : QT_I64;
      }
      dtypes[k] = found;
    }
  for (int k = 0; k < nparams; k++) {
    if (dtypes[k] >= 0) continue;
    return qt_errorf(&ctx->err, "%s '%s': the type %s of '%s' is not known from the arguments "
                     "(give a tensor for it, or an output tensor)", op, g->name,
                     g->params[k].var, g->params[k].name);
  }
  /* a type variable must mean one dtype in a call */
  for (int k = 0; k < nparams; k++)
    for (int j = 0; j < k; j++)
      if (g->params[k].var[0] && strcmp(g->params[k].var, g->params[j].var) == 0 &&
          j < nargs && k < nargs && args[j].tensor && args[k].tensor &&
          args[j].tensor->dtype != args[k].tensor->dtype)
        return qt_errorf(&ctx->err, "%s '%s': %s is %s for '%s' but %s for '%s'", op, g->name,
                         g->params[k].var, qt_dtypes[args[j].tensor->dtype].name,
                         g->params[j].name, qt_dtypes[args[k].tensor->dtype].name,
                         g->params[k].name);
  /* tensors must be of their parameter's dtype */
  for (int k = 0; k < nargs && k < nparams; k++)
    if (args[k].tensor != NULL && (int)args[k].tensor->dtype != dtypes[k])
      return qt_errorf(&ctx->err, "%s '%s': argument %d, '%s', wants a %s tensor, got %s", op,
                       g->name, k + 1, g->params[k].name, qt_dtypes[dtypes[k]].name,
                       qt_dtypes[args[k].tensor->dtype].name);
  /* generated code computes in the parameters' C types (every dtype has one) */
  for (int k = 0; k < nparams; k++)
    if (dtypes[k] >= 0 && cg_ctype(dtypes[k]) == NULL)
      return qt_errorf(&ctx->err, "%s '%s': parameter '%s' is %s, which generated kernels do "
                       "not take", op, g->name, g->params[k].name, qt_dtypes[dtypes[k]].name);
  if (rdtype != NULL) {
    if (g->reduce_type.dtype >= 0) {
      *rdtype = g->reduce_type.dtype;
    } else {
      *rdtype = -1;
      for (int k = 0; k < nparams; k++)
        if (strcmp(g->params[k].var, g->reduce_type.var) == 0) *rdtype = dtypes[k];
      if (*rdtype < 0)
        return qt_errorf(&ctx->err, "%s '%s': reduce_type %s is not a parameter's type", op,
                         g->name, g->reduce_type.var);
    }
  }
  return 0;
}

/* ================================================================== sources */

/* The 16-bit helpers when a dtype of the binding (or the reduce type) needs them,
** typedefs of the type variables (to the type they compute in), the preamble, and the
** geometry struct. */
static void cg_head(ops_buf *s, const qt_codegen *g, const int *dtypes, int rdtype,
                    int ntensors) {
  ops_buf_printf(s, "// qlua %s '%s'\n", g->reduction ? "reduction" : "elementwise", g->name);
  int nparams = g->nin + g->nout;
  bool half = cg_is_half(rdtype);
  for (int k = 0; k < nparams; k++) half |= cg_is_half(dtypes[k]);
  if (half) ops_buf_add(s, CG_HALF_HELPERS, sizeof CG_HALF_HELPERS - 1);
  for (int k = 0; k < nparams; k++) {
    if (!g->params[k].var[0]) continue;
    bool first = true;
    for (int j = 0; j < k; j++) first &= strcmp(g->params[j].var, g->params[k].var) != 0;
    if (first) ops_buf_printf(s, "typedef %s %s;\n", cg_compute_type(dtypes[k]), g->params[k].var);
  }
  ops_buf_printf(s, "%s\n", g->preamble);
  ops_buf_printf(s, "struct _qgeom { int ndim; long long size[%d]; long long stride[%d][%d]; };\n",
         QT_MAXDIM, ntensors > 0 ? ntensors : 1, QT_MAXDIM);
}

/* Offsets _qo<k> of the operands for the row-major index _qr (IDX arithmetic). */
static void cg_offsets(ops_buf *s, int ntensors, const char *index, const char *idx_type) {
  ops_buf_printf(s, "    %s _qr = (%s)(%s);\n", idx_type, idx_type, index);
  for (int t = 0; t < ntensors; t++) ops_buf_printf(s, "    long long _qo%d = 0;\n", t);
  ops_buf_printf(s, "    for (int _qd = _qg.ndim - 1; _qd > 0; _qd--) {\n"
            "      %s _qs = (%s)_qg.size[_qd], _qq = _qr / _qs, _qm = _qr - _qq * _qs;\n",
         idx_type, idx_type);
  for (int t = 0; t < ntensors; t++)
    ops_buf_printf(s, "      _qo%d += (long long)_qm * _qg.stride[%d][_qd];\n", t, t);
  ops_buf_printf(s, "      _qr = _qq;\n    }\n");
  for (int t = 0; t < ntensors; t++)
    ops_buf_printf(s, "    _qo%d += (long long)_qr * _qg.stride[%d][0];\n", t, t);
}

/* The kernel's parameters: a pointer per tensor operand, the value of each number. */
static void cg_params(ops_buf *s, const qt_codegen *g, const int *dtypes, int nargs_numbers,
                      int nparams) {
  bool first = true;
  for (int k = 0; k < nparams; k++) {
    bool number = (nargs_numbers >> k) & 1;
    bool input = k < g->nin;
    ops_buf_printf(s, "%s", first ? "" : ", ");
    first = false;
    if (number) ops_buf_printf(s, "%s %s", cg_compute_type(dtypes[k]), g->params[k].name);
    else ops_buf_printf(s, "%s%s *_qp_%s", input ? "const " : "", cg_ctype(dtypes[k]), g->params[k].name);
  }
}

static char *cg_elementwise_source(const qt_codegen *g, const int *dtypes, int numbers,
                                   int layout) {
  ops_buf s = {0};
  int nparams = g->nin + g->nout, ntensors = 0;
  for (int k = 0; k < nparams; k++) ntensors += !((numbers >> k) & 1);
  cg_head(&s, g, dtypes, -1, ntensors);
  ops_buf_printf(&s, "extern \"C\" __global__ void %s(", g->name);
  cg_params(&s, g, dtypes, numbers, nparams);
  ops_buf_printf(&s, ", const long long n%s) {\n", layout ? ", const _qgeom _qg" : "");
  if (layout == 0)  /* dense: one element per thread (the grid covers n), no loop */
    ops_buf_printf(&s, "  {\n    const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;\n"
               "    if (i >= n) return;\n");
  else
    ops_buf_printf(&s, "  for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n;\n"
               "       i += (long long)gridDim.x * blockDim.x) {\n");
  if (layout) cg_offsets(&s, ntensors, "i", layout == 1 ? "unsigned int" : "long long");
  int t = 0;
  for (int k = 0; k < nparams; k++) {
    if ((numbers >> k) & 1) continue;
    char off[16];
    snprintf(off, sizeof off, "_qo%d", t++);
    cg_operand(&s, "    ", dtypes[k], g->params[k].name, k < g->nin, layout ? off : "i");
  }
  ops_buf_printf(&s, "    (void)n;\n    {\n%s\n;\n    }\n  }\n}\n", g->body);
  if (s.failed) {
    free(s.data);
    return NULL;
  }
  return s.data;
}

/* Pass 1: blocks (x: slices, y: rows) fold map(elements) into partials[row][slice].
** Pass 2: a block per row folds its partials and writes the output by the post-map. */
static char *cg_reduction_source(const qt_codegen *g, const int *dtypes, int numbers, int rdtype,
                                 int layout) {
  ops_buf s = {0};
  int nparams = g->nin + g->nout, ntensors = 0;
  for (int k = 0; k < g->nin; k++) ntensors += !((numbers >> k) & 1);
  const char *R = cg_compute_type(rdtype);  /* partials of a 16-bit reduce type: float32 */
  const char *idx = layout == 2 ? "long long" : "unsigned int";
  cg_head(&s, g, dtypes, rdtype, ntensors);
  ops_buf_printf(&s, "typedef %s _qR;\n", R);
  ops_buf_printf(&s, "#define _QREDUCE(_qx, _qy) ([&]() { _qR a = (_qx), b = (_qy); (void)a; (void)b; "
             "return (_qR)(%s); }())\n", g->reduce);
  /* pass 1 */
  ops_buf_printf(&s, "extern \"C\" __global__ void %s_p1(", g->name);
  cg_params(&s, g, dtypes, numbers, g->nin);
  ops_buf_printf(&s, ", _qR *_qpart, const long long _qrows, const long long _qlen, const int _qbpr, "
             "const _qgeom _qg, const _qgeom _ql) {\n"
             "  extern __shared__ unsigned char _qsm[];\n"
             "  _qR *_qsh = (_qR *)_qsm;\n"
             "  for (long long _qrow = blockIdx.y; _qrow < _qrows; _qrow += gridDim.y) {\n");
  cg_offsets(&s, ntensors, "_qrow", idx);
  ops_buf_printf(&s, "    _qR _qacc = (_qR)(%s);\n"
             "    for (long long _qj = (long long)blockIdx.x * blockDim.x + threadIdx.x; _qj < _qlen;\n"
             "         _qj += (long long)_qbpr * blockDim.x) {\n"
             "      const long long i = _qj; (void)i;\n", g->identity);
  int t = 0;
  for (int k = 0; k < g->nin; k++) {
    if ((numbers >> k) & 1) continue;
    char at[64];
    snprintf(at, sizeof at, "_qo%d + _qj * _ql.stride[%d][0]", t, t);
    cg_operand(&s, "      ", dtypes[k], g->params[k].name, true, at);
    t++;
  }
  ops_buf_printf(&s, "      _qacc = _QREDUCE(_qacc, (_qR)(%s));\n"
             "    }\n"
             "    _qsh[threadIdx.x] = _qacc;\n"
             "    __syncthreads();\n"
             "    for (unsigned _qw = blockDim.x / 2; _qw > 0; _qw >>= 1) {\n"
             "      if (threadIdx.x < _qw) _qsh[threadIdx.x] = _QREDUCE(_qsh[threadIdx.x], _qsh[threadIdx.x + _qw]);\n"
             "      __syncthreads();\n"
             "    }\n"
             "    if (threadIdx.x == 0) _qpart[_qrow * _qbpr + blockIdx.x] = _qsh[0];\n"
             "    __syncthreads();\n"
             "  }\n}\n", g->body);
  /* pass 2 */
  ops_buf_printf(&s, "extern \"C\" __global__ void %s_p2(const _qR *_qpart, ", g->name);
  cg_params(&s, g, dtypes, numbers, nparams);
  ops_buf_printf(&s, ", const long long _qrows, const int _qbpr) {\n"
             "  extern __shared__ unsigned char _qsm[];\n"
             "  _qR *_qsh = (_qR *)_qsm;\n"
             "  for (long long _qrow = blockIdx.x; _qrow < _qrows; _qrow += gridDim.x) {\n"
             "    _qR _qacc = (_qR)(%s);\n"
             "    for (int _qj = threadIdx.x; _qj < _qbpr; _qj += blockDim.x)\n"
             "      _qacc = _QREDUCE(_qacc, _qpart[_qrow * _qbpr + _qj]);\n"
             "    _qsh[threadIdx.x] = _qacc;\n"
             "    __syncthreads();\n"
             "    for (unsigned _qw = blockDim.x / 2; _qw > 0; _qw >>= 1) {\n"
             "      if (threadIdx.x < _qw) _qsh[threadIdx.x] = _QREDUCE(_qsh[threadIdx.x], _qsh[threadIdx.x + _qw]);\n"
             "      __syncthreads();\n"
             "    }\n"
             "    if (threadIdx.x == 0) {\n"
             "      const _qR a = _qsh[0]; (void)a;\n", g->identity);
  cg_operand(&s, "      ", dtypes[g->nin], g->params[g->nin].name, false, "_qrow");
  ops_buf_printf(&s, "      %s;\n"
             "    }\n"
             "    __syncthreads();\n"
             "  }\n}\n", g->post);
  if (s.failed) {
    free(s.data);
    return NULL;
  }
  return s.data;
}

/* The variant for this binding and layout, compiled on first use. */
static int cg_variant_get(qt_ctx *ctx, const char *op, qt_codegen *g, qt_device *dev,
                          const int *dtypes, int numbers, int rdtype, int layout,
                          cg_variant **out) {
  int nparams = g->nin + g->nout;
  for (int v = 0; v < g->nvariants; v++) {
    cg_variant *c = &g->variants[v];
    if (c->layout != layout || c->arg_kinds != numbers ||
        qt_kernel_device(c->kernels[0]) != dev ||
        memcmp(c->dtypes, dtypes, sizeof(int) * (size_t)nparams) != 0 ||
        (g->reduction && c->dtypes[CG_MAXPARAMS - 1] != rdtype))
      continue;
    *out = c;
    return 0;
  }
  char *src = g->reduction ? cg_reduction_source(g, dtypes, numbers, rdtype, layout)
                           : cg_elementwise_source(g, dtypes, numbers, layout);
  if (src == NULL) return qt_errorf(&ctx->err, "%s: out of host memory", op);
  cg_variant fresh;
  memset(&fresh, 0, sizeof fresh);
  memcpy(fresh.dtypes, dtypes, sizeof(int) * (size_t)nparams);
  if (g->reduction) fresh.dtypes[CG_MAXPARAMS - 1] = rdtype;
  fresh.layout = layout;
  fresh.arg_kinds = numbers;
  char name[80];
  int rc = 0;
  for (int pass = 0; pass < (g->reduction ? 2 : 1) && rc == 0; pass++) {
    if (g->reduction) snprintf(name, sizeof name, "%s_p%d", g->name, pass + 1);
    else snprintf(name, sizeof name, "%s", g->name);
    qt_kernel_opts opts;
    memset(&opts, 0, sizeof opts);
    opts.packed = true;  /* this file packs the arguments; the parameters hold a struct */
    rc = qt_kernel_compile(ctx, &fresh.kernels[pass], dev, src, name, &opts);
  }
  free(src);
  if (rc != 0) {
    qt_kernel_release(fresh.kernels[0]);
    qt_kernel_release(fresh.kernels[1]);
    qt_err_rename(&ctx->err, "kernel", op);
    return -1;
  }
  if (g->nvariants == CG_MAXVARIANTS) {  /* forget the oldest */
    qt_kernel_release(g->variants[0].kernels[0]);
    qt_kernel_release(g->variants[0].kernels[1]);
    memmove(g->variants, g->variants + 1, sizeof g->variants[0] * (CG_MAXVARIANTS - 1));
    g->nvariants--;
  }
  g->variants[g->nvariants] = fresh;
  *out = &g->variants[g->nvariants++];
  return 0;
}

/* ================================================================== calls */

/* The broadcast shape of the tensor arguments (a number broadcasts). */
static int cg_shape(qt_ctx *ctx, const char *op, const qt_codegen *g, int nargs,
                    const qt_kernel_arg *args, int *ndim, int64_t *size, qt_device **dev) {
  *ndim = 0;
  *dev = NULL;
  for (int k = 0; k < nargs; k++) {
    const qt_tensor *t = args[k].tensor;
    if (t == NULL) continue;
    if (ops_live(ctx, op, t)) return -1;
    if (*dev == NULL) *dev = t->storage->device;
    else if (t->storage->device != *dev)
      return qt_errorf(&ctx->err, "%s '%s': tensors on %s and %s", op, g->name, (*dev)->name,
                       t->storage->device->name);
    int nd = t->ndim > *ndim ? t->ndim : *ndim;
    int64_t merged[QT_MAXDIM];
    for (int d = 0; d < nd; d++) {
      int da = d - (nd - *ndim), dt = d - (nd - t->ndim);
      int64_t a = da >= 0 ? size[da] : 1, b = dt >= 0 ? t->size[dt] : 1;
      if (a != b && a != 1 && b != 1) {
        char sa[64], sb[64];
        return qt_errorf(&ctx->err, "%s '%s': argument %d, '%s', of shape %s does not "
                         "broadcast with %s", op, g->name, k + 1, g->params[k].name,
                         qt_shape_str(t->ndim, t->size, sb, sizeof sb),
                         qt_shape_str(*ndim, size, sa, sizeof sa));
      }
      merged[d] = a == 1 ? b : a;
    }
    memcpy(size, merged, sizeof(int64_t) * (size_t)nd);
    *ndim = nd;
  }
  if (*dev == NULL)
    return qt_errorf(&ctx->err, "%s '%s': no tensor among the arguments (the kernel's device "
                     "and shape come from them)", op, g->name);
  if (dev[0]->iface->launch == NULL)
    return qt_errorf(&ctx->err, "%s '%s': user kernels run on a GPU; the tensors are on %s", op,
                     g->name, (*dev)->name);
  return 0;
}

/* The element count of a shape: 0 when a size is 0 (the others may then multiply past
** int64: 0 x 2^40 x 2^40), -1 when a shape without zeros has more than INT64_MAX. */
static int64_t cg_numel(int ndim, const int64_t *size) {
  for (int d = 0; d < ndim; d++)
    if (size[d] == 0) return 0;
  int64_t n = 1;
  for (int d = 0; d < ndim; d++)
    if (__builtin_mul_overflow(n, size[d], &n)) return -1;
  return n;
}

/* t as a view of shape (ndim, size), broadcast (stride 0 where t has size 1 or no dim). */
static void cg_view(qt_view *v, const qt_tensor *t, int ndim, const int64_t *size) {
  qt_view_of(v, t);
  qt_view b = *v;
  b.ndim = ndim;
  for (int d = 0; d < ndim; d++) {
    int dt = d - (ndim - t->ndim);
    b.size[d] = size[d];
    b.stride[d] = dt >= 0 && t->size[dt] == size[d] ? t->stride[dt] : 0;
  }
  b.numel = cg_numel(ndim, size);  /* the caller checked it fits */
  *v = b;
}

static void cg_geometry(cg_geom *geo, qt_view *const *views, int n) {
  memset(geo, 0, sizeof *geo);
  geo->ndim = views[0]->ndim;
  for (int d = 0; d < geo->ndim; d++) geo->size[d] = views[0]->size[d];
  for (int t = 0; t < n; t++)
    for (int d = 0; d < geo->ndim; d++) geo->stride[t][d] = views[t]->stride[d];
}

/* Outputs: the given tensors, checked, or new ones of the shape. results[k] gets a
** reference either way. */
static int cg_outputs(qt_ctx *ctx, const char *op, const qt_codegen *g, int nargs,
                      const qt_kernel_arg *args, const int *dtypes, qt_device *dev, int ndim,
                      const int64_t *size, qt_tensor *results) {
  for (int o = 0; o < g->nout; o++) {
    int k = g->nin + o;
    qt_tensor_init(&results[o]);
    if (k < nargs && args[k].tensor != NULL) {
      const qt_tensor *t = args[k].tensor;
      bool same = t->ndim == ndim;
      for (int d = 0; same && d < ndim; d++) same = t->size[d] == size[d];
      if (!same) {
        char sa[64], sb[64];
        return qt_errorf(&ctx->err, "%s '%s': output '%s' has shape %s, the arguments give %s",
                         op, g->name, g->params[k].name,
                         qt_shape_str(t->ndim, t->size, sa, sizeof sa),
                         qt_shape_str(ndim, size, sb, sizeof sb));
      }
      for (int d = 0; d < ndim; d++)
        if (t->stride[d] == 0 && t->size[d] > 1)
          return qt_errorf(&ctx->err, "%s '%s': output '%s' is an expanded view (stride 0): "
                           "its elements would be written by several threads", op, g->name,
                           g->params[k].name);
      qt_tensor_share(&results[o], t);
    } else if (k < nargs && args[k].tensor == NULL) {
      return qt_errorf(&ctx->err, "%s '%s': output '%s' must be a tensor (or left out)", op,
                       g->name, g->params[k].name);
    } else if (qt_empty(ctx, &results[o], dev, (qt_dtype)dtypes[k], ndim, size) != 0) {
      qt_err_rename(&ctx->err, "empty", op);
      return -1;
    }
  }
  return 0;
}

static void *cg_address(const qt_tensor *t) {
  return (char *)t->storage->data + t->offset * qt_elsize(t->dtype);
}

int qt_codegen_call(qt_ctx *ctx, qt_codegen *g, int nargs, const qt_kernel_arg *args, int dim,
                    qt_tensor *results) {
  const char *op = g->reduction ? "reduction" : "elementwise";
  int nparams = g->nin + g->nout;
  for (int o = 0; o < g->nout; o++) qt_tensor_init(&results[o]);
  if (nargs < g->nin || nargs > nparams)
    return qt_errorf(&ctx->err, "%s '%s': takes %d input%s and up to %d output%s, got %d "
                     "arguments", op, g->name, g->nin, g->nin == 1 ? "" : "s", g->nout,
                     g->nout == 1 ? "" : "s", nargs);
  int numbers = 0;
  for (int k = 0; k < nargs; k++) {
    if (args[k].tensor == NULL && args[k].is_bool)
      return qt_errorf(&ctx->err, "%s '%s': argument %d, '%s', is a boolean", op, g->name,
                       k + 1, g->params[k].name);
    if (args[k].tensor == NULL && k < g->nin) numbers |= 1 << k;
  }
  int dtypes[CG_MAXPARAMS], rdtype = -1;
  if (cg_bind(ctx, op, g, nargs, args, dtypes, g->reduction ? &rdtype : NULL)) return -1;
  /* numbers must fit their parameter's dtype */
  for (int k = 0; k < g->nin; k++) {
    if (!((numbers >> k) & 1) || qt_is_float((qt_dtype)dtypes[k])) continue;
    const qt_dtype_info *in = &qt_dtypes[dtypes[k]];
    if (args[k].is_float || args[k].value.i < in->min || args[k].value.i > in->max)
      return qt_errorf(&ctx->err, "%s '%s': argument %d, '%s': %g is not a %s", op, g->name,
                       k + 1, g->params[k].name, args[k].value.f, in->name);
  }
  int ndim;
  int64_t size[QT_MAXDIM];
  qt_device *dev;
  if (cg_shape(ctx, op, g, nargs < g->nin ? nargs : g->nin, args, &ndim, size, &dev)) return -1;
  for (int k = g->nin; k < nargs; k++)
    if (args[k].tensor && args[k].tensor->storage->device != dev)
      return qt_errorf(&ctx->err, "%s '%s': output '%s' is on %s, the inputs on %s", op, g->name,
                       g->params[k].name, args[k].tensor->storage->device->name, dev->name);

  /* the output shape: the broadcast shape, without dim for a reduction */
  int out_ndim = ndim;
  int64_t out_size[QT_MAXDIM];
  memcpy(out_size, size, sizeof size);
  if (g->reduction) {
    if (dim >= ndim && !(dim == 0 && ndim == 0))
      return qt_errorf(&ctx->err, "%s '%s': dim %d out of range (1..%d)", op, g->name, dim + 1, ndim);
    if (dim >= 0 && ndim > 0) {
      for (int d = dim; d + 1 < ndim; d++) out_size[d] = size[d + 1];
      out_ndim = ndim - 1;
    } else {
      out_ndim = 0;
    }
  }
  if (cg_outputs(ctx, op, g, nargs, args, dtypes, dev, out_ndim, out_size, results)) goto fail;

  int64_t numel = cg_numel(ndim, size);
  if (numel < 0) {
    char s1[OPS_SHAPE_LEN];
    qt_errorf(&ctx->err, "%s '%s': the arguments' shape %s is too large", op, g->name,
              qt_shape_str(ndim, size, s1, sizeof s1));
    goto fail;
  }

  /* operand views over the iteration shape */
  qt_view views[CG_MAXPARAMS], *vp[CG_MAXPARAMS];
  int nviews = 0;
  void *addresses[CG_MAXPARAMS];
  if (!g->reduction) {
    if (numel == 0) return 0;
    for (int k = 0; k < nparams; k++) {
      if ((numbers >> k) & 1) continue;
      const qt_tensor *t = k < g->nin ? args[k].tensor : &results[k - g->nin];
      cg_view(&views[nviews], t, ndim, size);
      addresses[k] = cg_address(t);
      vp[nviews] = &views[nviews];
      nviews++;
    }
    qt_views_collapse(vp, nviews);
    bool dense = vp[0]->ndim == 1 && (numel + CG_THREADS - 1) / CG_THREADS <= 0x7fffffff;
    for (int v = 0; dense && v < nviews; v++) dense = vp[v]->stride[0] == 1;
    int layout = dense ? 0 : numel < ((int64_t)1 << 32) ? 1 : 2;
    cg_variant *variant;
    if (cg_variant_get(ctx, op, g, dev, dtypes, numbers, -1, layout, &variant)) goto fail;
    cg_geom geo;
    cg_geometry(&geo, vp, nviews);
    cg_value values[CG_MAXPARAMS];
    void *kargs[CG_MAXPARAMS + 2];
    for (int k = 0; k < nparams; k++) {
      if ((numbers >> k) & 1) {
        qt_scalar_store(cg_is_half(dtypes[k]) ? QT_F32 : (qt_dtype)dtypes[k], &values[k].cell,
                        args[k].value);
      } else {
        values[k].p = addresses[k];
      }
      kargs[k] = &values[k];
    }
    long long n = (long long)numel;
    kargs[nparams] = &n;
    kargs[nparams + 1] = &geo;
    qt_launch_cfg cfg;
    memset(&cfg, 0, sizeof cfg);
    int64_t blocks = (numel + CG_THREADS - 1) / CG_THREADS;
    if (layout != 0 && blocks > 4096) blocks = 4096;  /* division-heavy: fewer, longer threads */
    if (blocks > 0x7fffffff) blocks = 0x7fffffff;
    cfg.grid[0] = (unsigned)blocks;
    cfg.grid[1] = cfg.grid[2] = 1;
    cfg.block[0] = CG_THREADS;
    cfg.block[1] = cfg.block[2] = 1;
    if (qt_kernel_launch_packed(ctx, variant->kernels[0], &cfg, kargs) != 0) goto fail_rename;
    return 0;
  }

  /* a reduction: rows (the kept dims) x len (the reduced dim, or everything) */
  {
    int64_t len = dim >= 0 && ndim > 0 ? size[dim] : numel;
    int64_t rows = len > 0 ? numel / len : 1;
    if (ndim > 0 && dim >= 0) {  /* the output's shape: it exists, so its count fits */
      int64_t kept[QT_MAXDIM];
      int nkept = 0;
      for (int d = 0; d < ndim; d++) if (d != dim) kept[nkept++] = size[d];
      rows = cg_numel(nkept, kept);
    }
    /* outer geometry (kept dims) and the stride along the reduced elements, per input */
    cg_geom outer, inner;
    memset(&outer, 0, sizeof outer);
    memset(&inner, 0, sizeof inner);
    qt_tensor work[CG_MAXPARAMS];
    int nwork = 0;
    int t = 0;
    for (int k = 0; k < g->nin; k++) {
      if ((numbers >> k) & 1) continue;
      const qt_tensor *src = args[k].tensor;
      if (dim < 0 && ndim > 0) {
        /* everything: a contiguous copy when the view is not one run (then len is numel) */
        qt_view v;
        cg_view(&v, src, ndim, size);
        bool dense = true;
        int64_t expect = 1;
        for (int d = ndim - 1; d >= 0; d--) {
          if (v.size[d] != 1 && v.stride[d] != expect) dense = false;
          if (__builtin_mul_overflow(expect, v.size[d], &expect)) expect = INT64_MAX;  /* empty */
        }
        if (!dense) {
          qt_tensor_init(&work[nwork]);
          if (qt_empty(ctx, &work[nwork], dev, src->dtype, ndim, size) != 0 ||
              qt_copy_(ctx, &work[nwork], src) != 0) {
            qt_tensor_release(&work[nwork]);
            for (int w = 0; w < nwork; w++) qt_tensor_release(&work[w]);
            goto fail_rename;
          }
          src = &work[nwork++];
        }
        addresses[k] = cg_address(src);
        outer.ndim = 1;
        outer.size[0] = 1;
        outer.stride[t][0] = 0;
        inner.stride[t][0] = 1;
      } else {
        qt_view v;
        cg_view(&v, src, ndim, size);
        addresses[k] = cg_address(src);
        int od = 0;
        for (int d = 0; d < ndim; d++) {
          if (d == dim) continue;
          outer.size[od] = size[d];
          outer.stride[t][od] = v.stride[d];
          od++;
        }
        if (od == 0) {
          outer.size[0] = 1;
          od = 1;
        }
        outer.ndim = od;
        inner.stride[t][0] = ndim > 0 ? v.stride[dim] : 0;
      }
      t++;
    }
    int layout = numel < ((int64_t)1 << 32) ? 1 : 2;
    cg_variant *variant;
    if (cg_variant_get(ctx, op, g, dev, dtypes, numbers, rdtype, layout, &variant)) {
      for (int w = 0; w < nwork; w++) qt_tensor_release(&work[w]);
      goto fail;
    }
    if (rows == 0) {
      for (int w = 0; w < nwork; w++) qt_tensor_release(&work[w]);
      return 0;
    }
    int bpr = (int)((len + CG_THREADS * 8 - 1) / (CG_THREADS * 8));
    int64_t most = rows >= 1024 ? 1 : 1024 / rows;
    if (bpr > most) bpr = (int)most;
    if (bpr < 1) bpr = 1;
    qt_dtype pdtype = cg_is_half(rdtype) ? QT_F32 : (qt_dtype)rdtype;  /* the partials' */
    size_t rsize = qt_elsize(pdtype);
    void *partial = NULL;
    qt_tensor part;
    qt_tensor_init(&part);
    int64_t nparts = rows * bpr;
    if (qt_empty(ctx, &part, dev, pdtype, 1, &nparts) != 0) {
      for (int w = 0; w < nwork; w++) qt_tensor_release(&work[w]);
      goto fail_rename;
    }
    partial = cg_address(&part);
    cg_value values[CG_MAXPARAMS];
    void *kargs[CG_MAXPARAMS + 8];
    int na = 0;
    for (int k = 0; k < g->nin; k++) {
      if ((numbers >> k) & 1) {
        qt_scalar_store(cg_is_half(dtypes[k]) ? QT_F32 : (qt_dtype)dtypes[k], &values[k].cell,
                        args[k].value);
      } else {
        values[k].p = addresses[k];
      }
      kargs[na++] = &values[k];
    }
    long long lrows = rows, llen = len;
    int ibpr = bpr;
    kargs[na++] = &partial;
    kargs[na++] = &lrows;
    kargs[na++] = &llen;
    kargs[na++] = &ibpr;
    kargs[na++] = &outer;
    kargs[na++] = &inner;
    qt_launch_cfg cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.grid[0] = (unsigned)bpr;
    cfg.grid[1] = (unsigned)(rows < 65535 ? rows : 65535);
    cfg.grid[2] = 1;
    cfg.block[0] = CG_THREADS;
    cfg.block[1] = cfg.block[2] = 1;
    cfg.shared = CG_THREADS * rsize;
    int rc = qt_kernel_launch_packed(ctx, variant->kernels[0], &cfg, kargs);
    if (rc == 0) {
      na = 0;
      kargs[na++] = &partial;
      for (int k = 0; k < nparams; k++) {
        if (k >= g->nin) values[k].p = cg_address(&results[k - g->nin]);
        kargs[na++] = &values[k];
      }
      kargs[na++] = &lrows;
      kargs[na++] = &ibpr;
      cfg.grid[0] = (unsigned)(rows < 65535 ? rows : 65535);
      cfg.grid[1] = 1;
      rc = qt_kernel_launch_packed(ctx, variant->kernels[1], &cfg, kargs);
    }
    qt_tensor_release(&part);  /* stream-ordered: reused only by later work */
    for (int w = 0; w < nwork; w++) qt_tensor_release(&work[w]);
    if (rc != 0) goto fail_rename;
    return 0;
  }

fail_rename:
  qt_err_rename(&ctx->err, "launch", op);
fail:
  for (int o = 0; o < g->nout; o++) qt_tensor_release(&results[o]);
  return -1;
}
