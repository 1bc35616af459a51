/*
** cpu_elementwise.c — the CPU device's elementwise slots: copy (with every dtype
** conversion), fill, binary ops (arithmetic, comparisons, maximum/minimum) and unary ops.
**
** Each op is a row function per dtype, generated from the dtype list (tensor.h) and the
** op's expression in scalar.h's op lists, with fast paths for contiguous rows and for a
** broadcast (stride 0) operand; cpu_walk (cpu_internal.h) calls it once per innermost
** row. The CUDA device (kernels/elementwise.cu) expands the same expressions, so the two
** agree element for element. Row functions are named cpu_<family>_<OP>_<dtype sfx>
** (cpu_binary_QT_ADD_f32), and the tables below are indexed [dtype][op].
*/
#include <stdint.h>
#include <string.h>
#include <tgmath.h> /* scalar.h's float expressions use the type-generic names */

#include "cpu/cpu_internal.h"
#include "device.h"
#include "scalar.h"
#include "tensor.h"

/* ====================================================================== conversions */

/* The elementwise row functions below are simple loops that GCC vectorizes only with
** its dynamic cost model (at -O2, GCC 12 refuses any loop that needs a runtime alias
** check or a remainder loop, which is all of them here: dst may alias a). Turning it
** on for the row functions (up to the pops after the unary rows) doubles the in-cache
** speed of add/mul/compare/copy/fill; other compilers (clang vectorizes at -O2) ignore
** the pragmas. */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC push_options
#pragma GCC optimize("tree-vectorize", "vect-cost-model=dynamic")
#endif

/* A copy row from TS to TD, converting by the pair's kinds: QT_CONVERT_<KD>_<KS>. */
#define CPU_COPY_ROW(NAME, TD, UD, KD, TS, KS)                                           \
  CPU_MULTIVERSION static void NAME(char **p, const int64_t *s, int64_t n, const cpu_args *args) {        \
    (void)args;                                                                          \
    TD *d = (TD *)p[0];                                                                  \
    const TS *a = (const TS *)p[1];                                                      \
    int64_t sd = s[0], sa = s[1];                                                        \
    if (sd == 1 && sa == 1) {                                                            \
      for (int64_t i = 0; i < n; i++) d[i] = QT_CONVERT_##KD##_##KS(TD, UD, a[i]);       \
    } else if (sd == 1 && sa == 0) {                                                     \
      TD x = QT_CONVERT_##KD##_##KS(TD, UD, a[0]);                                       \
      for (int64_t i = 0; i < n; i++) d[i] = x;                                          \
    } else {                                                                             \
      for (int64_t i = 0; i < n; i++) d[i * sd] = QT_CONVERT_##KD##_##KS(TD, UD, a[i * sa]); \
    }                                                                                    \
  }

/* One copy row per (dst, src) pair of dtypes. */
#define CPU_COPY_PAIR_(E, sfx, name, T, U, size, kind, digits, emax, shortname, E2, sfx2, name2, T2, \
                       U2, size2, kind2, ...)                                         \
  CPU_COPY_ROW(cpu_copy_##sfx##_##sfx2, T, U, kind, T2, kind2)
QT_DTYPE_PAIRS(CPU_COPY_PAIR_)

/* [dst dtype][src dtype] */
#define CPU_COPY_ENTRY_(E, sfx, name, T, U, size, kind, digits, emax, shortname, E2, sfx2, ...) \
  [E][E2] = cpu_copy_##sfx##_##sfx2,
static const cpu_row_fn cpu_copy_rows[QT_NDTYPES][QT_NDTYPES] = { QT_DTYPE_PAIRS(CPU_COPY_ENTRY_) };

/* A contiguous copy of `numel` elements on the pool: bytes, or a conversion between
** float32 and a 16-bit float (cpu_half.c's vector code), in pieces of CPU_PAR_GRAIN
** elements and up. */
typedef struct cpu_dense_copy {
  qt_dtype dd, sd;
  char *dst;
  const char *src;
  int64_t numel, piece;
} cpu_dense_copy;

static void cpu_dense_copy_chunk(void *arg, int64_t chunk) {
  const cpu_dense_copy *j = (const cpu_dense_copy *)arg;
  int64_t begin = chunk * j->piece;
  int64_t n = j->numel - begin < j->piece ? j->numel - begin : j->piece;
  char *d = j->dst + begin * (int64_t)qt_elsize(j->dd);
  const char *s = j->src + begin * (int64_t)qt_elsize(j->sd);
  if (j->dd == j->sd) memcpy(d, s, (size_t)n * qt_elsize(j->dd));
  else if (j->dd == QT_F16) cpu_f16_store((qt_f16 *)d, 1, n, (const float *)s);
  else if (j->dd == QT_BF16) cpu_bf16_store((qt_bf16 *)d, 1, n, (const float *)s);
  else if (j->sd == QT_F16) cpu_f16_load((const qt_f16 *)s, 1, n, (float *)d);
  else cpu_bf16_load((const qt_bf16 *)s, 1, n, (float *)d);
}

static void cpu_dense_copy_run(qt_dtype dd, void *dst, qt_dtype sd, const void *src,
                               int64_t numel) {
  cpu_dense_copy j = { dd, sd, (char *)dst, (const char *)src, numel, 0 };
  int64_t pieces = cpu_par_pieces(numel, &j.piece);
  cpu_parallel(pieces, cpu_dense_copy_chunk, &j);
}

/* dst = src with dtype conversion. Same dtype and both contiguous: memcpy in pieces on the
** pool, or one memmove where the two blocks overlap. */
int cpu_copy(qt_device *dev, const qt_view *dst, const qt_view *src, qt_err *err) {
  (void)dev;
  if (!cpu_dtype_ok(dst->dtype) || !cpu_dtype_ok(src->dtype))
    return qt_errorf(err, "copy: unsupported dtype");
  int64_t numel = cpu_view_numel(dst);
  if (numel == 0) return 0;
  bool contiguous = cpu_view_contiguous(dst) && cpu_view_contiguous(src);
  if (dst->dtype == src->dtype && contiguous) {
    size_t bytes = (size_t)numel * qt_elsize(dst->dtype);
    const char *d = (const char *)dst->data, *s = (const char *)src->data;
    if (d == s) return 0;
    if (d < s + bytes && s < d + bytes) memmove(dst->data, src->data, bytes);
    else cpu_dense_copy_run(dst->dtype, dst->data, src->dtype, src->data, numel);
    return 0;
  }
  /* float32 <-> float16/bfloat16, contiguous: the vector conversions (cpu_half.c) */
  if (contiguous && (dst->dtype == QT_F32) != (src->dtype == QT_F32) &&
      (qt_is_half(dst->dtype) || qt_is_half(src->dtype))) {
    cpu_dense_copy_run(dst->dtype, dst->data, src->dtype, src->data, numel);
    return 0;
  }
  const qt_view *views[2] = { dst, src };
  cpu_walk_par(views, 2, cpu_copy_rows[dst->dtype][src->dtype], NULL);
  return 0;
}

/* fill: the value sits in a stride-0 view and goes through the copy rows. */
int cpu_fill(qt_device *dev, const qt_view *dst, qt_scalar value, qt_err *err) {
  (void)dev;
  if (!cpu_dtype_ok(dst->dtype)) return qt_errorf(err, "fill: unsupported dtype");
  cpu_value v;
  cpu_value_set(&v, dst->dtype, value);
  qt_view scalar;
  cpu_view_make(&scalar, dst, &v, dst->dtype, NULL);
  const qt_view *views[2] = { dst, &scalar };
  cpu_walk_par(views, 2, cpu_copy_rows[dst->dtype][dst->dtype], NULL);
  return 0;
}

/* ====================================================================== binary ops */

/* T and U are typedefs in the row, because the op's expression names them; R is the
** result's type (T, or bool for comparisons and the logical ops). */
#define CPU_BINARY_ROW(NAME, ET, EU, ER, EXPR)                                           \
  CPU_MULTIVERSION static void NAME(char **p, const int64_t *s, int64_t n, const cpu_args *args) {        \
    typedef ET T;                                                                        \
    typedef EU U;                                                                        \
    typedef ER R;                                                                        \
    (void)args; (void)sizeof(U);                                                         \
    R *d = (R *)p[0];                                                                    \
    const T *pa = (const T *)p[1], *pb = (const T *)p[2];                                \
    int64_t sd = s[0], sa = s[1], sb = s[2];                                             \
    if (sd == 1 && sa == 1 && sb == 1) {                                                 \
      for (int64_t i = 0; i < n; i++) { T x = pa[i], y = pb[i]; d[i] = (R)(EXPR); }      \
    } else if (sd == 1 && sa == 1 && sb == 0) {                                          \
      const T y = pb[0];                                                                 \
      for (int64_t i = 0; i < n; i++) { T x = pa[i]; d[i] = (R)(EXPR); }                 \
    } else if (sd == 1 && sa == 0 && sb == 1) {                                          \
      const T x = pa[0];                                                                 \
      for (int64_t i = 0; i < n; i++) { T y = pb[i]; d[i] = (R)(EXPR); }                 \
    } else {                                                                             \
      for (int64_t i = 0; i < n; i++) {                                                  \
        T x = pa[i * sa], y = pb[i * sb];                                                \
        d[i * sd] = (R)(EXPR);                                                           \
      }                                                                                  \
    }                                                                                    \
  }

/* Every (dtype, op): the op list inside the dtype list, the dtype's C types and kind
** passed down in P. */
#define CPU_BINARY_FNS_(P, E, sfx, name, T, U, size, kind, ...) \
  QT_BINOP_LIST(CPU_BINARY_FN_, (sfx, T, U, kind))
#define CPU_BINARY_FN_(P, OP, name, ints, result, fexpr, iexpr, ...) \
  QT_PP_CALL(CPU_BINARY_FN_AT_, QT_PP_UNPAREN P, OP, ints, result, fexpr, iexpr)
#define CPU_BINARY_FN_AT_(sfx, T, U, kind, OP, ints, result, fexpr, iexpr)           \
  CPU_BINARY_GEN_##kind##ints(cpu_binary_##OP##_##sfx, T, U, QT_BINOP_TYPE_##result(T), \
                              QT_PICK_##kind(fexpr, iexpr))
/* Integer and bool dtypes skip the float-only ops (the core computes those in float64). */
#define CPU_BINARY_GEN_FLOAT0(NAME, T, U, R, expr) CPU_BINARY_ROW(NAME, T, U, R, expr)
#define CPU_BINARY_GEN_FLOAT1(NAME, T, U, R, expr) CPU_BINARY_ROW(NAME, T, U, R, expr)
#define CPU_BINARY_GEN_INT0(NAME, T, U, R, expr)
#define CPU_BINARY_GEN_INT1(NAME, T, U, R, expr) CPU_BINARY_ROW(NAME, T, U, R, expr)
#define CPU_BINARY_GEN_BOOL0(NAME, T, U, R, expr)
#define CPU_BINARY_GEN_BOOL1(NAME, T, U, R, expr) CPU_BINARY_ROW(NAME, T, U, R, expr)
#define CPU_BINARY_GEN_HALF0(NAME, T, U, R, expr) CPU_HALF_BINARY_ROW(NAME, T, R, expr)
#define CPU_BINARY_GEN_HALF1(NAME, T, U, R, expr) CPU_HALF_BINARY_ROW(NAME, T, R, expr)

/* A 16-bit row (kind HALF) works a block at a time: the operands converted to float32
** (cpu_half.c, vector instructions), the float expression computed on them with T
** float, the block rounded into the result (or stored as bool). With args->scalar_side
** set, that operand is the float32 param_f[0] (binary_scalar: PyTorch computes a
** 16-bit tensor with a number in float32, the number not rounded to 16 bits first). */
#define CPU_HALF_BLOCK 256
#define CPU_HALF_BINARY_ROW(NAME, TH, ER, EXPR)                                          \
  static void NAME(char **p, const int64_t *s, int64_t n, const cpu_args *args) {        \
    typedef float T;                                                                     \
    typedef ER R;                                                                        \
    float xa[CPU_HALF_BLOCK], xb[CPU_HALF_BLOCK], r[CPU_HALF_BLOCK];                     \
    int side = args != NULL ? args->scalar_side : 0;                                     \
    for (int64_t i0 = 0; i0 < n; i0 += CPU_HALF_BLOCK) {                                 \
      int64_t m = n - i0 < CPU_HALF_BLOCK ? n - i0 : CPU_HALF_BLOCK;                     \
      if (side == 1) for (int64_t k = 0; k < m; k++) xa[k] = (float)args->param_f[0];    \
      else CPU_HALF_LOAD((const TH *)p[1] + i0 * s[1], s[1], m, xa);                     \
      if (side == 2) for (int64_t k = 0; k < m; k++) xb[k] = (float)args->param_f[0];    \
      else CPU_HALF_LOAD((const TH *)p[2] + i0 * s[2], s[2], m, xb);                     \
      for (int64_t k = 0; k < m; k++) { T x = xa[k], y = xb[k]; r[k] = (float)(EXPR); }  \
      CPU_HALF_STORE((R *)p[0] + i0 * s[0], s[0], m, r);                                 \
    }                                                                                    \
  }
QT_DTYPE_LIST(CPU_BINARY_FNS_, ~)

/* [dtype][op]; NULL: a float-only op on an integer dtype. */
#define CPU_BINARY_TABLE_ROW_(P, E, sfx, name, T, U, size, kind, ...) \
  [E] = { QT_BINOP_LIST(CPU_BINARY_ENTRY_, (sfx, kind)) },
#define CPU_BINARY_ENTRY_(P, OP, name, ints, ...) \
  QT_PP_CALL(CPU_BINARY_ENTRY_AT_, QT_PP_UNPAREN P, OP, ints)
#define CPU_BINARY_ENTRY_AT_(sfx, kind, OP, ints) [OP] = CPU_BINARY_ENTRY_##kind##ints(OP, sfx),
#define CPU_BINARY_ENTRY_FLOAT0(OP, sfx) cpu_binary_##OP##_##sfx
#define CPU_BINARY_ENTRY_FLOAT1(OP, sfx) cpu_binary_##OP##_##sfx
#define CPU_BINARY_ENTRY_INT0(OP, sfx) NULL
#define CPU_BINARY_ENTRY_INT1(OP, sfx) cpu_binary_##OP##_##sfx
#define CPU_BINARY_ENTRY_BOOL0(OP, sfx) NULL
#define CPU_BINARY_ENTRY_BOOL1(OP, sfx) cpu_binary_##OP##_##sfx
#define CPU_BINARY_ENTRY_HALF0(OP, sfx) cpu_binary_##OP##_##sfx
#define CPU_BINARY_ENTRY_HALF1(OP, sfx) cpu_binary_##OP##_##sfx
static const cpu_row_fn cpu_binary_rows[QT_NDTYPES][QT_NBINOPS] = {
  QT_DTYPE_LIST(CPU_BINARY_TABLE_ROW_, ~)
};

static int cpu_binary_walk(qt_binop op, const qt_view *dst, const qt_view *a,
                           const qt_view *b, const cpu_args *args, qt_err *err);

int cpu_binary(qt_device *dev, qt_binop op, const qt_view *dst, const qt_view *a,
               const qt_view *b, qt_err *err) {
  (void)dev;
  return cpu_binary_walk(op, dst, a, b, NULL, err);
}

static int cpu_binary_walk(qt_binop op, const qt_view *dst, const qt_view *a,
                           const qt_view *b, const cpu_args *args, qt_err *err) {
  if ((unsigned)op >= (unsigned)QT_NBINOPS) return qt_errorf(err, "binary: unknown op %d", (int)op);
  qt_dtype result = qt_binop_gives_bool(op) ? QT_BOOL : a->dtype;
  if (!cpu_dtype_ok(a->dtype) || b->dtype != a->dtype || dst->dtype != result)
    return qt_errorf(err, "%s: operands must have one dtype and the result %s",
                     qt_binop_name(op), qt_binop_gives_bool(op) ? "bool" : "theirs");
  cpu_row_fn row = cpu_binary_rows[a->dtype][op];
  if (row == NULL)
    return qt_errorf(err, "%s: not defined for %s tensors (cast to a float dtype first)",
                     qt_binop_name(op), qt_dtypes[a->dtype].name);
  const qt_view *views[3] = { dst, a, b };
  cpu_walk_par(views, 3, row, args);
  return 0;
}

/* The scalar becomes a stride-0 view in a's dtype, on the side it belongs to. */
int cpu_binary_scalar(qt_device *dev, qt_binop op, const qt_view *dst, const qt_view *a,
                      qt_scalar s, bool scalar_first, qt_err *err) {
  if (!cpu_dtype_ok(a->dtype))
    return qt_errorf(err, "binary: unsupported dtype");
  cpu_value v;
  cpu_value_set(&v, a->dtype, s);
  qt_view scalar;
  cpu_view_make(&scalar, dst, &v, a->dtype, NULL);
  if (qt_is_half(a->dtype)) {
    /* the number stays float32: the row reads it from args (CPU_HALF_BINARY_ROW) */
    cpu_args args;
    memset(&args, 0, sizeof args);
    args.param_f[0] = (float)s.f;
    args.scalar_side = scalar_first ? 1 : 2;
    return cpu_binary_walk(op, dst, scalar_first ? &scalar : a, scalar_first ? a : &scalar,
                           &args, err);
  }
  return scalar_first ? cpu_binary(dev, op, dst, &scalar, a, err)
                      : cpu_binary(dev, op, dst, a, &scalar, err);
}

/* ====================================================================== unary ops */

/* Without math-errno GCC vectorizes sqrt rows (sqrtps: correctly rounded, the same bits
** as the scalar sqrt); nothing here reads errno. */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC push_options
#pragma GCC optimize("no-math-errno")
#endif

#define CPU_UNARY_ROW(NAME, ET, EU, ER, EXPR)                                            \
  CPU_MULTIVERSION static void NAME(char **p, const int64_t *s, int64_t n, const cpu_args *args) {        \
    typedef ET T;                                                                        \
    typedef EU U;                                                                        \
    typedef ER R;                                                                        \
    (void)sizeof(U);                                                                     \
    R *d = (R *)p[0];                                                                    \
    const T *pa = (const T *)p[1];                                                       \
    int64_t sd = s[0], sa = s[1];                                                        \
    const T p0 = (T)args->param_f[0], p1 = (T)args->param_f[1], p2 = (T)args->param_f[2]; \
    const int64_t p0_i = args->param_i[0], p1_i = args->param_i[1],                      \
                  p2_i = args->param_i[2];                                               \
    (void)p0; (void)p1; (void)p2; (void)p0_i; (void)p1_i; (void)p2_i;                    \
    if (sd == 1 && sa == 1) {                                                            \
      for (int64_t i = 0; i < n; i++) { T x = pa[i]; (void)x; d[i] = (R)(EXPR); }        \
    } else {                                                                             \
      for (int64_t i = 0; i < n; i++) {                                                  \
        T x = pa[i * sa]; (void)x;                                                       \
        d[i * sd] = (R)(EXPR);                                                           \
      }                                                                                  \
    }                                                                                    \
  }

/* Every (dtype, op) the op is defined for: CPU_UNARY_GEN_<kind><ints> makes the row
** (integer and bool dtypes skip the float-only ops), CPU_UNARY_ENTRY_<kind><ints> its
** table entry. */
#define CPU_UNARY_FNS_(P, E, sfx, name, T, U, size, kind, ...) \
  QT_UNOP_LIST(CPU_UNARY_FN_, (sfx, T, U, kind))
#define CPU_UNARY_FN_(P, OP, name, ints, result, fexpr, iexpr, ...) \
  QT_PP_CALL(CPU_UNARY_FN_AT_, QT_PP_UNPAREN P, OP, ints, result, fexpr, iexpr)
#define CPU_UNARY_FN_AT_(sfx, T, U, kind, OP, ints, result, fexpr, iexpr)              \
  CPU_UNARY_GEN_##kind##ints(cpu_unary_##OP##_##sfx, T, U, QT_BINOP_TYPE_##result(T),  \
                             QT_PICK_##kind(fexpr, iexpr))
#define CPU_UNARY_GEN_FLOAT0(NAME, T, U, R, expr) CPU_UNARY_ROW(NAME, T, U, R, expr)
#define CPU_UNARY_GEN_FLOAT1(NAME, T, U, R, expr) CPU_UNARY_ROW(NAME, T, U, R, expr)
#define CPU_UNARY_GEN_INT0(NAME, T, U, R, expr)
#define CPU_UNARY_GEN_INT1(NAME, T, U, R, expr) CPU_UNARY_ROW(NAME, T, U, R, expr)
#define CPU_UNARY_GEN_BOOL0(NAME, T, U, R, expr)
#define CPU_UNARY_GEN_BOOL1(NAME, T, U, R, expr) CPU_UNARY_ROW(NAME, T, U, R, expr)
#define CPU_UNARY_GEN_HALF0(NAME, T, U, R, expr) CPU_HALF_UNARY_ROW(NAME, T, R, expr)
#define CPU_UNARY_GEN_HALF1(NAME, T, U, R, expr) CPU_HALF_UNARY_ROW(NAME, T, R, expr)
/* As CPU_HALF_BINARY_ROW, with the parameters as floats. */
#define CPU_HALF_UNARY_ROW(NAME, TH, ER, EXPR)                                           \
  static void NAME(char **p, const int64_t *s, int64_t n, const cpu_args *args) {        \
    typedef float T;                                                                     \
    typedef ER R;                                                                        \
    float xa[CPU_HALF_BLOCK], r[CPU_HALF_BLOCK];                                         \
    const T p0 = (T)args->param_f[0], p1 = (T)args->param_f[1], p2 = (T)args->param_f[2]; \
    (void)p0; (void)p1; (void)p2;                                                        \
    for (int64_t i0 = 0; i0 < n; i0 += CPU_HALF_BLOCK) {                                 \
      int64_t m = n - i0 < CPU_HALF_BLOCK ? n - i0 : CPU_HALF_BLOCK;                     \
      CPU_HALF_LOAD((const TH *)p[1] + i0 * s[1], s[1], m, xa);                          \
      for (int64_t k = 0; k < m; k++) { T x = xa[k]; (void)x; r[k] = (float)(EXPR); }    \
      CPU_HALF_STORE((R *)p[0] + i0 * s[0], s[0], m, r);                                 \
    }                                                                                    \
  }
QT_DTYPE_LIST(CPU_UNARY_FNS_, ~)

/* exp, log, tanh and sigmoid through glibc's libmvec (x86-64; the Makefile defines
** QLUA_LIBMVEC when -lmvec links): its SSE2-ABI functions take 4 floats or 2 doubles at a
** time, about 3x faster than the scalar calls (documented error within 4 ulp). Every
** element goes through the vector function, strided lanes gathered and the tail padded,
** so a result does not depend on the layout of its input (a transposed tensor gives the
** bits its contiguous copy gives); each lane is computed on its own. */
#if defined(QLUA_LIBMVEC) && defined(__x86_64__)
#include <emmintrin.h>
__m128 _ZGVbN4v_expf(__m128);
__m128 _ZGVbN4v_logf(__m128);
__m128 _ZGVbN4v_tanhf(__m128);
__m128d _ZGVbN2v_exp(__m128d);
__m128d _ZGVbN2v_log(__m128d);
__m128d _ZGVbN2v_tanh(__m128d);

#define CPU_VPRE_ID(x) (x)
#define CPU_VPRE_NEG(x) (-(x))
#define CPU_VPOST_ID(T, e) (e)
#define CPU_VPOST_SIGMOID(T, e) ((T)1 / ((T)1 + (e)))

/* W lanes from x with stride s, as one vector (no round trip through memory: a vector
** load of values just stored one by one stalls on store forwarding). */
#define CPU_VLOADS_4(x, s) _mm_setr_ps((x)[0], (x)[(s)], (x)[2 * (s)], (x)[3 * (s)])
#define CPU_VLOADS_2(x, s) _mm_setr_pd((x)[0], (x)[(s)])

#define CPU_VMATH_ROW(NAME, T, W, VT, VFN, LOADU, STOREU, PRE, POST)                    \
  static void NAME(char **p, const int64_t *s, int64_t n, const cpu_args *args) {        \
    (void)args;                                                                          \
    T *d = (T *)p[0];                                                                    \
    const T *pa = (const T *)p[1];                                                       \
    int64_t sd = s[0], sa = s[1];                                                        \
    T in[W], out[W];                                                                     \
    int64_t i = 0;                                                                       \
    if (sa == 1 && sd == 1) {                                                            \
      for (; i + W <= n; i += W) {                                                       \
        STOREU(out, VFN(PRE(LOADU(pa + i))));                                            \
        for (int k = 0; k < W; k++) d[i + k] = POST(T, out[k]);                          \
      }                                                                                  \
    } else {                                                                             \
      for (; i + W <= n; i += W) {                                                       \
        STOREU(out, VFN(PRE(CPU_VLOADS_##W(pa + i * sa, sa))));                          \
        for (int k = 0; k < W; k++) d[(i + k) * sd] = POST(T, out[k]);                   \
      }                                                                                  \
    }                                                                                    \
    for (; i < n; i += W) {                                                              \
      int64_t m = n - i < W ? n - i : W;                                                 \
      for (int k = 0; k < W; k++) in[k] = k < m ? PRE(pa[(i + k) * sa]) : (T)0;         \
      VT r = VFN(LOADU(in));                                                             \
      STOREU(out, r);                                                                    \
      for (int k = 0; k < m; k++) d[(i + k) * sd] = POST(T, out[k]);                     \
    }                                                                                    \
  }
CPU_VMATH_ROW(cpu_vmath_exp_f32, float, 4, __m128, _ZGVbN4v_expf, _mm_loadu_ps, _mm_storeu_ps,
              CPU_VPRE_ID, CPU_VPOST_ID)
CPU_VMATH_ROW(cpu_vmath_log_f32, float, 4, __m128, _ZGVbN4v_logf, _mm_loadu_ps, _mm_storeu_ps,
              CPU_VPRE_ID, CPU_VPOST_ID)
CPU_VMATH_ROW(cpu_vmath_tanh_f32, float, 4, __m128, _ZGVbN4v_tanhf, _mm_loadu_ps, _mm_storeu_ps,
              CPU_VPRE_ID, CPU_VPOST_ID)
CPU_VMATH_ROW(cpu_vmath_sigmoid_f32, float, 4, __m128, _ZGVbN4v_expf, _mm_loadu_ps, _mm_storeu_ps,
              CPU_VPRE_NEG, CPU_VPOST_SIGMOID)
CPU_VMATH_ROW(cpu_vmath_exp_f64, double, 2, __m128d, _ZGVbN2v_exp, _mm_loadu_pd, _mm_storeu_pd,
              CPU_VPRE_ID, CPU_VPOST_ID)
CPU_VMATH_ROW(cpu_vmath_log_f64, double, 2, __m128d, _ZGVbN2v_log, _mm_loadu_pd, _mm_storeu_pd,
              CPU_VPRE_ID, CPU_VPOST_ID)
CPU_VMATH_ROW(cpu_vmath_tanh_f64, double, 2, __m128d, _ZGVbN2v_tanh, _mm_loadu_pd, _mm_storeu_pd,
              CPU_VPRE_ID, CPU_VPOST_ID)
CPU_VMATH_ROW(cpu_vmath_sigmoid_f64, double, 2, __m128d, _ZGVbN2v_exp, _mm_loadu_pd, _mm_storeu_pd,
              CPU_VPRE_NEG, CPU_VPOST_SIGMOID)
/* These take the place of the generated rows (they are the float dtypes' own code). */
static const cpu_row_fn cpu_unary_vmath_rows[QT_NDTYPES][QT_NUNOPS] = {
  [QT_F32] = { [QT_EXP] = cpu_vmath_exp_f32, [QT_LOG] = cpu_vmath_log_f32,
               [QT_TANH] = cpu_vmath_tanh_f32, [QT_SIGMOID] = cpu_vmath_sigmoid_f32 },
  [QT_F64] = { [QT_EXP] = cpu_vmath_exp_f64, [QT_LOG] = cpu_vmath_log_f64,
               [QT_TANH] = cpu_vmath_tanh_f64, [QT_SIGMOID] = cpu_vmath_sigmoid_f64 },
};
#endif

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC pop_options  /* ends "no-math-errno" (the unary rows, above) */
#pragma GCC pop_options  /* ends "tree-vectorize" (every row function of this file) */
#endif

/* [dtype][op]; NULL: not for this dtype (the core casts integers to float64 first). */
#define CPU_UNARY_TABLE_ROW_(P, E, sfx, name, T, U, size, kind, ...) \
  [E] = { QT_UNOP_LIST(CPU_UNARY_ENTRY_, (sfx, kind)) },
#define CPU_UNARY_ENTRY_(P, OP, name, ints, ...) \
  QT_PP_CALL(CPU_UNARY_ENTRY_AT_, QT_PP_UNPAREN P, OP, ints)
#define CPU_UNARY_ENTRY_AT_(sfx, kind, OP, ints) [OP] = CPU_UNARY_ENTRY_##kind##ints(OP, sfx),
#define CPU_UNARY_ENTRY_FLOAT0(OP, sfx) cpu_unary_##OP##_##sfx
#define CPU_UNARY_ENTRY_FLOAT1(OP, sfx) cpu_unary_##OP##_##sfx
#define CPU_UNARY_ENTRY_INT0(OP, sfx) NULL
#define CPU_UNARY_ENTRY_INT1(OP, sfx) cpu_unary_##OP##_##sfx
#define CPU_UNARY_ENTRY_BOOL0(OP, sfx) NULL
#define CPU_UNARY_ENTRY_BOOL1(OP, sfx) cpu_unary_##OP##_##sfx
#define CPU_UNARY_ENTRY_HALF0(OP, sfx) cpu_unary_##OP##_##sfx
#define CPU_UNARY_ENTRY_HALF1(OP, sfx) cpu_unary_##OP##_##sfx
static const cpu_row_fn cpu_unary_rows[QT_NDTYPES][QT_NUNOPS] = {
  QT_DTYPE_LIST(CPU_UNARY_TABLE_ROW_, ~)
};

int cpu_unary(qt_device *dev, qt_unop op, const qt_view *dst, const qt_view *src,
              const qt_unop_params *params, qt_err *err) {
  (void)dev;
  if ((unsigned)op >= (unsigned)QT_NUNOPS) return qt_errorf(err, "unary: unknown op %d", (int)op);
  qt_dtype result = qt_unop_gives_bool(op) ? QT_BOOL : src->dtype;
  if (!cpu_dtype_ok(src->dtype) || dst->dtype != result)
    return qt_errorf(err, "%s: the result must be %s", qt_unop_name(op),
                     qt_unop_gives_bool(op) ? "bool" : "of the source's dtype");
  cpu_row_fn row = cpu_unary_rows[src->dtype][op];
#if defined(QLUA_LIBMVEC) && defined(__x86_64__)
  if (cpu_unary_vmath_rows[src->dtype][op] != NULL) row = cpu_unary_vmath_rows[src->dtype][op];
#endif
  if (row == NULL)
    return qt_errorf(err, "%s: not defined for %s tensors (cast to a float dtype first)",
                     qt_unop_name(op), qt_dtypes[src->dtype].name);
  cpu_args args;
  memset(&args, 0, sizeof args);
  for (int k = 0; k < 3 && params != NULL; k++) {
    args.param_f[k] = params->v[k].f;
    args.param_i[k] = params->v[k].i;
  }
  const qt_view *views[2] = { dst, src };
  cpu_walk_par(views, 2, row, &args);
  return 0;
}
