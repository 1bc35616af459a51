/*
** l_help.c — what makes qlua readable at the REPL: qlua.help, one line of documentation
** (signature and purpose) for every module function and method, and the metatable of
** the tables t:shape() returns, whose __tostring shows them as {2, 3}.
**
** The one-liners are written in one place, lh_entries below, as signature/purpose
** pairs; the signature's prefix says what it documents ("qlua.cat(...)" the module
** function cat, "t:slice(...)" the Tensor method slice, "k:" a qlua.Kernel's method,
** "m:" a qlua.Module's), so a name is never written twice. spec/host/help_spec.lua lists
** qlua and the Tensor methods at run time and fails when a function has no entry or an
** entry names nothing that exists, so the table cannot go stale silently.
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

/* ================================================================ the one-liners */

typedef struct lh_entry {
  const char *signature;  /* its prefix names the kind, then the name (lh_parse) */
  const char *purpose;
} lh_entry;

static const lh_entry lh_entries[] = {
  /* ---- module functions: creation */
  {"qlua.tensor(data [, opts])", "a tensor from a number (0-d) or a nested table; dtype "
   "inferred (any float: float32, all integers: int64) unless opts.dtype says"},
  {"qlua.empty(shape [, opts])", "an uninitialised tensor (shape: 2, 3 or {2, 3}; opts: "
   "{dtype =, device =})"},
  {"qlua.zeros(shape [, opts])", "a tensor of zeros"},
  {"qlua.ones(shape [, opts])", "a tensor of ones"},
  {"qlua.full(shape, value [, opts])", "a tensor filled with value"},
  {"qlua.range(first, last [, step] [, opts])", "the values of Lua's "
   "`for i = first, last, step` (last included); int64 for integers, else float32"},
  {"qlua.arange([start,] stop [, step] [, opts])", "half-open, as PyTorch's: "
   "arange(1, 4) is 1, 2, 3 and arange(n) is 0 .. n-1"},
  {"qlua.linspace(start, end, n [, opts])", "n evenly spaced values from start to end, "
   "both included; float32 by default"},
  {"qlua.logspace(start, end, n [, base] [, opts])", "base ^ v (base 10 by default) for "
   "each v of linspace(start, end, n)"},
  {"qlua.eye(n [, m] [, opts])", "n x m (default n x n) with ones on the diagonal, zeros "
   "elsewhere"},
  {"qlua.empty_like(t [, opts])", "uninitialised, with t's shape, dtype and device"},
  {"qlua.zeros_like(t [, opts])", "zeros with t's shape, dtype and device"},
  {"qlua.ones_like(t [, opts])", "ones with t's shape, dtype and device"},
  {"qlua.full_like(t, value [, opts])", "value with t's shape, dtype and device"},
  {"qlua.rand_like(t [, opts])", "uniform in [0, 1) with t's shape (a float dtype)"},
  {"qlua.randn_like(t [, opts])", "normal (mean 0, sd 1) with t's shape (a float dtype)"},
  {"qlua.rand(shape [, opts])", "uniform in [0, 1), float32 by default"},
  {"qlua.randn(shape [, opts])", "normal, mean 0, sd 1, float32 by default"},
  {"qlua.bernoulli(p)", "1 with probability p, else 0, elementwise (p's float dtype)"},
  {"qlua.multinomial(probs, n [, replacement])", "n 1-based category draws per row of "
   "weights probs (int64), without replacement unless replacement is true"},
  {"qlua.randint(lo, hi, shape [, opts])", "uniform integers in [lo, hi] (both "
   "included), int64 by default"},
  {"qlua.randperm(n [, opts])", "a random permutation of 1 .. n, int64 by default"},
  {"qlua.seed(n)", "makes the random functions reproducible: one seed, the same "
   "numbers on every device"},
  /* ---- module functions: joining, products, selection */
  {"qlua.cat(list [, dim])", "the tensors of list joined along dim (default 1); sizes "
   "must agree except along dim"},
  {"qlua.stack(list [, dim])", "tensors of one shape joined along a new dim inserted at "
   "dim (default 1)"},
  {"qlua.matmul(a, b)", "matrix product: 1-D, 2-D and batched (batch dims broadcast); "
   "any float dtype (float16/bfloat16 on the GPU's tensor cores)"},
  {"qlua.addmm(c, a, b [, {beta =, alpha =}])", "beta * c + alpha * (a @ b) for 2-D a and b, "
   "c broadcast to the product (beta and alpha 1 by default; beta 0 ignores c)"},
  {"qlua.einsum(spec, a [, b, ...])", "NumPy's einsum: \"ij,jk->ik\", implicit output, "
   "\"...\" broadcasting, repeated letters as diagonals; operands also as one list"},
  {"qlua.set_tf32(on)", "true allows TF32 tensor cores for float32 products on the GPU "
   "(off by default)"},
  {"qlua.set_num_threads(n)", "threads for large CPU ops, the caller included (default: "
   "QLUA_NUM_THREADS or the cores; OpenBLAS follows; 1: all on the calling thread)"},
  {"qlua.get_num_threads()", "the CPU threads set_num_threads set"},
  {"qlua.cpu_info()", "{threads =, simd =, blas =}: the CPU threads, the vector build "
   "picked (avx512, avx2, generic) and OpenBLAS's kernel set"},
  {"qlua.searchsorted(sorted, values [, right])", "1-based insertion positions of values "
   "in the sorted last dim (PyTorch's + 1); right: after equal elements"},
  {"qlua.where(cond, a, b)", "a where cond is nonzero, else b (tensors or numbers, "
   "broadcast)"},
  /* ---- module functions: losses */
  {"qlua.cross_entropy(logits, target [, opts])", "the cross-entropy of N x C (or C) logits "
   "with 1-based class indices or probabilities, from log_softmax; opts {reduction = "
   "\"mean\" | \"sum\" | \"none\", ignore_index =, label_smoothing =}"},
  /* ---- module functions: devices, memory, files, timing */
  {"qlua.gpu_count()", "the number of GPUs this qlua sees (0 in a CPU-only build)"},
  {"qlua.device_name(ordinal)", "the name of GPU ordinal (0-based, as CUDA's); "
   "\"cpu\" for \"cpu\""},
  {"qlua.set_device(ordinal)", "makes gpu:ordinal the current GPU, the one \"gpu\" means"},
  {"qlua.sync([device])", "waits for the work queued on device (default: every device "
   "this state used)"},
  {"qlua.memory([device])", "{allocated =, reserved =, peak =, total =, free =} in "
   "bytes (default: the current GPU, or the CPU)"},
  {"qlua.empty_cache()", "collects garbage, then gives back every cached block that "
   "holds no live tensor"},
  {"qlua.save(path, t)", "writes t to a NumPy .npy file, all or nothing"},
  {"qlua.load(path [, opts])", "reads a NumPy .npy file; a CPU tensor unless "
   "opts.device says"},
  {"qlua.save_safetensors(path, tensors [, metadata])", "writes a table of name = tensor "
   "(and string metadata) to a .safetensors file, all or nothing"},
  {"qlua.load_safetensors(path [, opts])", "reads a .safetensors file: a table of name = "
   "tensor (CPU unless opts.device says) and the metadata table"},
  {"qlua.clock()", "monotonic time in seconds (a float)"},
  {"qlua.bench(fn [, {calls =, runs =, warmup =}])", "times fn as make bench does: "
   "{median =, min =, max =, mean =, runs =, calls =}, seconds per call"},
  {"qlua.is_tensor(x)", "true when x is a qlua.Tensor"},
  {"qlua.help([name | function])", "prints the signature and purpose of a qlua function "
   "or method (\"cat\", \"slice\", \"Tensor.slice\", qlua.cat); \"qlua\", \"Tensor\" "
   "list them all"},
  {"qlua.version", "the qlua version string"},
  /* ---- module functions: user CUDA kernels */
  {"qlua.kernel(source, name [, opts])", "compiles CUDA C++ with NVRTC into a "
   "qlua.Kernel; k(grid, block, args...) launches it"},
  {"qlua.module(path_or_bytes [, opts])", "loads PTX, cubin or fatbin as a qlua.Module; "
   "m.name or m:kernel(name) gives its kernels"},
  {"qlua.elementwise(in_params, out_params, body [, name | opts])", "a callable GPU "
   "kernel running body once per element, as CuPy's ElementwiseKernel"},
  {"qlua.reduction{in_params =, out_params =, map_expr =, reduce_expr =, identity =, ...}",
   "a callable GPU reduction f(x [, {dim = d}]), as CuPy's ReductionKernel"},
  {"qlua.kernel_cache_clear()", "empties the user kernels' memory and disk caches"},

  /* ---- Tensor: inspection */
  {"t:shape()", "the sizes, {2, 3} ({} for 0-d): a fresh table whose tostring is {2, 3}"},
  {"t:size([dim])", "the sizes as t:shape(), or the size of dim"},
  {"t:stride([dim])", "the strides in elements, or the stride of dim"},
  {"t:dim()", "the number of dims"},
  {"t:numel()", "the number of elements"},
  {"t:dtype()", "the dtype's name: \"float32\", \"int64\", ..."},
  {"t:device()", "the device's name: \"cpu\", \"gpu:0\", ..."},
  {"t:is_contiguous()", "true when the elements are dense in row-major order"},
  {"t:item()", "the value of a one-element tensor (an integer for integer dtypes)"},
  {"t:totable()", "nested Lua tables of the values (a number for 0-d)"},
  /* ---- Tensor: views */
  {"t:view(shape)", "a view with another shape over the same storage (one size may be -1)"},
  {"t:reshape(shape)", "as view, copying only when the strides cannot express it"},
  {"t:narrow(dim, start, length)", "a view of length elements of dim from start"},
  {"t:select(dim, i)", "the view of position i of dim, that dim removed"},
  {"t:transpose(d1, d2)", "a view with dims d1 and d2 swapped"},
  {"t:t()", "the transpose of a 2-D tensor (1-D and 0-d as they are)"},
  {"t:permute(d1, d2, ...)", "a view with the dims in that order (or one table of them)"},
  {"t:expand(shape)", "a view broadcasting size-1 dims to shape (stride 0)"},
  {"t:contiguous()", "t itself when contiguous, else a contiguous copy"},
  {"t:clone()", "a copy, always"},
  {"t:expand_as(other)", "t:expand(other:size()): a view of t broadcast to other's shape"},
  {"t:view_as(other)", "t:view(other:size()): a view of t with other's shape"},
  /* ---- Tensor: slicing, shape and splitting */
  {"t:slice(dim, first, last [, step])", "a view of positions first..last (inclusive; -1 "
   "is the last) of dim, every step-th"},
  {"t:squeeze([dim])", "a view without the size-1 dims (or without dim, if its size is 1)"},
  {"t:unsqueeze(dim)", "a view with a size-1 dim inserted at dim"},
  {"t:flatten([first [, last]])", "dims first..last (default all) merged into one"},
  {"t:unflatten(dim, sizes)", "a view with dim split into the table sizes (one may be -1)"},
  {"t:movedim(from, to)", "a view with dim from moved to position to (numbers or tables)"},
  {"t:flip(dims)", "a new tensor with the dims (a number or a table) reversed"},
  {"t:roll(shifts [, dims])", "a new tensor with elements shifted along dims, wrapping "
   "(without dims: the flattened tensor)"},
  {"t:repeat_tensor(sizes)", "t tiled sizes[d] times along each dim d (PyTorch's repeat)"},
  {"t:split(size | {s1, s2, ...} [, dim])", "a Lua list of views along dim (default 1) "
   "of size elements each, or of those sizes"},
  {"t:chunk(n [, dim])", "a Lua list of up to n views along dim (default 1) of "
   "ceil(size / n) elements each"},
  {"t:tril([k])", "a copy with the elements above diagonal k (default 0, the main one; "
   "k > 0 above it) of the last two dims zeroed"},
  {"t:triu([k])", "a copy with the elements below diagonal k of the last two dims zeroed"},
  {"t:tril_([k])", "tril in place; returns t"},
  {"t:triu_([k])", "triu in place; returns t"},
  {"t:diag([k])", "1-D: the square matrix with t on diagonal k (default 0); 2-D: a 1-D "
   "copy of diagonal k"},
  {"t:diagonal([offset] [, dim1] [, dim2])", "a view of diagonal offset (default 0) of "
   "dims dim1 and dim2 (default 1 and 2), as the new last dim"},
  /* ---- Tensor: moving and converting */
  {"t:gpu([ordinal])", "t on a GPU (default: the current one); t itself if already there"},
  {"t:cpu()", "t on the CPU; t itself if already there"},
  {"t:to(name)", "t converted to a dtype or moved to a device, by name"},
  {"t:copy_(src)", "copies src into t (broadcast, across dtypes and devices)"},
  {"t:float()", "t:to(\"float32\")"},
  {"t:double()", "t:to(\"float64\")"},
  {"t:half()", "t:to(\"float16\")"},
  {"t:bfloat16()", "t:to(\"bfloat16\")"},
  {"t:long()", "t:to(\"int64\")"},
  {"t:int()", "t:to(\"int32\")"},
  {"t:bool()", "t:to(\"bool\") (nonzero is true)"},
  {"t:byte()", "t:to(\"uint8\")"},
  /* ---- Tensor: indexing */
  {"t:gather(dim, index)", "torch.gather: out[i][j] = t[index[i][j]][j] for dim 1; "
   "index's shape"},
  {"t:index_select(dim, index)", "the whole slices along dim at the 1-D index's "
   "positions"},
  {"t:take(index)", "the elements at index's positions in the flattened t; index's shape"},
  {"t:scatter_(dim, index, src)", "t[index[i][j]][j] = src[i][j] for dim 1 (src a "
   "tensor or number)"},
  {"t:scatter_add_(dim, index, src)", "t[index[i][j]][j] += src[i][j] for dim 1; "
   "duplicates accumulate"},
  {"t:index_add_(dim, index, src)", "t:select(dim, index[k]) += src:select(dim, k); "
   "duplicates accumulate"},
  {"t:index_fill_(dim, index, v)", "fills the slices of dim at the 1-D index's "
   "positions with the number v"},
  {"t:index_copy_(dim, index, src)", "t:select(dim, index[k]) = src:select(dim, k)"},
  {"t:masked_fill_(mask, v)", "sets the elements where mask is nonzero to v "
   "(mask broadcast)"},
  {"t:masked_fill(mask, v)", "a copy of t with the elements where mask is nonzero set "
   "to v"},
  {"t:masked_select(mask)", "a 1-D tensor of the elements where mask is nonzero, in "
   "row-major order"},
  {"t:nonzero()", "an n x dim int64 tensor of the 1-based positions of the nonzero "
   "elements"},
  /* ---- Tensor: arithmetic (x: a tensor, broadcast, or a number) */
  {"t:add(x)", "t + x"},
  {"t:sub(x)", "t - x"},
  {"t:mul(x)", "t * x, elementwise"},
  {"t:div(x)", "t / x (float64 for integer tensors)"},
  {"t:pow(x)", "t ^ x"},
  {"t:maximum(x)", "the elementwise larger of t and x"},
  {"t:minimum(x)", "the elementwise smaller of t and x"},
  {"t:eq(x)", "elementwise t == x"},
  {"t:ne(x)", "elementwise t ~= x"},
  {"t:lt(x)", "elementwise t < x"},
  {"t:le(x)", "elementwise t <= x"},
  {"t:gt(x)", "elementwise t > x"},
  {"t:ge(x)", "elementwise t >= x"},
  {"t:isclose(other [, rtol] [, atol] [, equal_nan])", "bool tensor: |t - other| <= atol + "
   "|rtol * other| (1e-05, 1e-08 by default), or equal; also with {rtol =, atol =, equal_nan =}"},
  {"t:allclose(other [, rtol] [, atol] [, equal_nan])", "true when isclose holds for every "
   "element (a Lua boolean)"},
  {"t:equal(other)", "true when other has t's shape and equal values (a Lua boolean)"},
  {"t:add_(x)", "t + x in place"},
  {"t:sub_(x)", "t - x in place"},
  {"t:mul_(x)", "t * x in place"},
  {"t:div_(x)", "t / x in place (a float tensor)"},
  {"t:pow_(x)", "t ^ x in place"},
  {"t:maximum_(x)", "maximum(t, x) in place"},
  {"t:minimum_(x)", "minimum(t, x) in place"},
  {"t:eq_(x)", "t == x in place"},
  {"t:ne_(x)", "t ~= x in place"},
  {"t:lt_(x)", "t < x in place"},
  {"t:le_(x)", "t <= x in place"},
  {"t:gt_(x)", "t > x in place"},
  {"t:ge_(x)", "t >= x in place"},
  {"t:logical_and(x)", "elementwise t and x (nonzero is true)"},
  {"t:logical_or(x)", "elementwise t or x (nonzero is true)"},
  {"t:logical_xor(x)", "elementwise: exactly one of t, x nonzero"},
  {"t:logical_not()", "elementwise not t (true where t is 0)"},
  {"t:logical_and_(x)", "t and x in place"},
  {"t:logical_or_(x)", "t or x in place"},
  {"t:logical_xor_(x)", "t xor x in place"},
  {"t:logical_not_()", "not t in place"},
  {"t:neg()", "-t"},
  {"t:abs()", "|t|"},
  {"t:exp()", "e ^ t (float64 for integer tensors)"},
  {"t:log()", "the natural logarithm (float64 for integer tensors)"},
  {"t:sqrt()", "the square root (float64 for integer tensors)"},
  {"t:tanh()", "the hyperbolic tangent (float64 for integer tensors)"},
  {"t:sigmoid()", "1 / (1 + e ^ -t) (float64 for integer tensors)"},
  {"t:relu()", "max(t, 0)"},
  {"t:clamp(lo, hi)", "t limited to [lo, hi] (nil: no bound)"},
  {"t:neg_()", "-t in place"},
  {"t:abs_()", "|t| in place"},
  {"t:exp_()", "e ^ t in place (a float tensor)"},
  {"t:log_()", "log(t) in place (a float tensor)"},
  {"t:sqrt_()", "sqrt(t) in place (a float tensor)"},
  {"t:tanh_()", "tanh(t) in place (a float tensor)"},
  {"t:sigmoid_()", "sigmoid(t) in place (a float tensor)"},
  {"t:relu_()", "max(t, 0) in place"},
  {"t:clamp_(lo, hi)", "clamp(t, lo, hi) in place"},
  {"t:atan2(x)", "the angle of (x, t): atan2(t, x) elementwise (float64 for integers)"},
  {"t:atan2_(x)", "t:atan2(x) in place"},
  {"t:hypot(x)", "sqrt(t^2 + x^2) without overflow (float64 for integers)"},
  {"t:hypot_(x)", "t:hypot(x) in place"},
  {"t:fmod(x)", "C's remainder: the sign of t (integer x 0 gives 0)"},
  {"t:fmod_(x)", "t:fmod(x) in place"},
  {"t:remainder(x)", "Lua's t % x: floor modulo, the sign of x"},
  {"t:remainder_(x)", "t:remainder(x) in place"},
  {"t:floor_divide(x)", "Lua's t // x: floor division"},
  {"t:floor_divide_(x)", "t:floor_divide(x) in place"},
  {"t:sin()", "the sine (float64 for integer tensors)"},
  {"t:sin_()", "sin(t) in place (a float tensor)"},
  {"t:cos()", "the cosine (float64 for integer tensors)"},
  {"t:cos_()", "cos(t) in place (a float tensor)"},
  {"t:tan()", "the tangent (float64 for integer tensors)"},
  {"t:tan_()", "tan(t) in place (a float tensor)"},
  {"t:asin()", "the arcsine (float64 for integer tensors)"},
  {"t:asin_()", "asin(t) in place (a float tensor)"},
  {"t:acos()", "the arccosine (float64 for integer tensors)"},
  {"t:acos_()", "acos(t) in place (a float tensor)"},
  {"t:atan()", "the arctangent (float64 for integer tensors)"},
  {"t:atan_()", "atan(t) in place (a float tensor)"},
  {"t:sinh()", "the hyperbolic sine (float64 for integer tensors)"},
  {"t:sinh_()", "sinh(t) in place (a float tensor)"},
  {"t:cosh()", "the hyperbolic cosine (float64 for integer tensors)"},
  {"t:cosh_()", "cosh(t) in place (a float tensor)"},
  {"t:asinh()", "the inverse hyperbolic sine (float64 for integer tensors)"},
  {"t:asinh_()", "asinh(t) in place (a float tensor)"},
  {"t:acosh()", "the inverse hyperbolic cosine (float64 for integer tensors)"},
  {"t:acosh_()", "acosh(t) in place (a float tensor)"},
  {"t:atanh()", "the inverse hyperbolic tangent (float64 for integer tensors)"},
  {"t:atanh_()", "atanh(t) in place (a float tensor)"},
  {"t:log1p()", "log(1 + t), exact for small t (float64 for integer tensors)"},
  {"t:log1p_()", "log1p(t) in place (a float tensor)"},
  {"t:expm1()", "e ^ t - 1, exact for small t (float64 for integer tensors)"},
  {"t:expm1_()", "expm1(t) in place (a float tensor)"},
  {"t:log2()", "the base-2 logarithm (float64 for integer tensors)"},
  {"t:log2_()", "log2(t) in place (a float tensor)"},
  {"t:log10()", "the base-10 logarithm (float64 for integer tensors)"},
  {"t:log10_()", "log10(t) in place (a float tensor)"},
  {"t:exp2()", "2 ^ t (float64 for integer tensors)"},
  {"t:exp2_()", "exp2(t) in place (a float tensor)"},
  {"t:rsqrt()", "1 / sqrt(t) (float64 for integer tensors)"},
  {"t:rsqrt_()", "rsqrt(t) in place (a float tensor)"},
  {"t:reciprocal()", "1 / t (float64 for integer tensors)"},
  {"t:reciprocal_()", "reciprocal(t) in place (a float tensor)"},
  {"t:frac()", "t - trunc(t) (float64 for integer tensors)"},
  {"t:frac_()", "frac(t) in place (a float tensor)"},
  {"t:erf()", "the error function (float64 for integer tensors)"},
  {"t:erf_()", "erf(t) in place (a float tensor)"},
  {"t:erfc()", "1 - erf(t), exact in the tail (float64 for integer tensors)"},
  {"t:erfc_()", "erfc(t) in place (a float tensor)"},
  {"t:erfinv()", "the inverse of erf (float64 for integer tensors)"},
  {"t:erfinv_()", "erfinv(t) in place (a float tensor)"},
  {"t:lgamma()", "log |gamma(t)| (float64 for integer tensors)"},
  {"t:lgamma_()", "lgamma(t) in place (a float tensor)"},
  {"t:softplus()", "log(1 + e ^ t) (t itself above 20) (float64 for integer tensors)"},
  {"t:softplus_()", "softplus(t) in place (a float tensor)"},
  {"t:gelu()", "0.5 t (1 + erf(t / sqrt 2)) (float64 for integer tensors)"},
  {"t:gelu_()", "gelu(t) in place (a float tensor)"},
  {"t:silu()", "t * sigmoid(t) (float64 for integer tensors)"},
  {"t:silu_()", "silu(t) in place (a float tensor)"},
  {"t:floor()", "rounded down (integers: as they are)"},
  {"t:floor_()", "floor(t) in place"},
  {"t:ceil()", "rounded up (integers: as they are)"},
  {"t:ceil_()", "ceil(t) in place"},
  {"t:round()", "rounded to nearest, ties to even (integers: as they are)"},
  {"t:round_()", "round(t) in place"},
  {"t:trunc()", "rounded toward zero (integers: as they are)"},
  {"t:trunc_()", "trunc(t) in place"},
  {"t:sign()", "-1, 0 or 1 (NaN stays NaN)"},
  {"t:sign_()", "sign(t) in place"},
  {"t:square()", "t * t"},
  {"t:square_()", "square(t) in place"},
  {"t:isnan()", "a bool tensor: true where t is NaN"},
  {"t:isinf()", "a bool tensor: true where t is +inf or -inf"},
  {"t:isfinite()", "a bool tensor: true where t is neither NaN nor infinite"},
  {"t:nan_to_num([nan] [, posinf] [, neginf])", "NaN, +inf, -inf replaced (by 0 and the dtype's largest and lowest finite values)"},
  {"t:nan_to_num_([nan] [, posinf] [, neginf])", "nan_to_num in place"},
  {"t:lerp(b, w)", "t + w (b - t), exact at w = 0 and 1 (w a number or a tensor)"},
  {"t:lerp_(b, w)", "lerp in place (t a float tensor; b and w broadcast to it)"},
  {"t:addcmul_(a, b [, value])", "t += value * a * b (value 1 by default)"},
  {"t:addcdiv_(a, b [, value])", "t += value * a / b (value 1 by default)"},
  {"t:uniform_([lo] [, hi])", "fills t with uniform numbers in [lo, hi) (0 and 1 by default)"},
  {"t:normal_([mean] [, sd])", "fills t with normal numbers (mean 0, sd 1 by default)"},
  {"t:random_([lo,] hi)", "fills t with integers uniform in lo..hi, inclusive (lo 1 by default)"},
  {"t:exponential_([lambda])", "fills t with exponential numbers of rate lambda (1 by default)"},
  {"t:fill_(v)", "sets every element to the number v"},
  {"t:zero_()", "sets every element to 0"},
  /* ---- Tensor: reductions and products */
  {"t:sum([dim] [, keepdim])", "the sum: a number, or over dim (or a list of dims) a tensor "
   "without them (keepdim: kept as size 1)"},
  {"t:mean([dim] [, keepdim])", "the mean: a number, or over dim (or a list) a tensor"},
  {"t:prod([dim] [, keepdim])", "the product (integers and bool give int64, wrapping)"},
  {"t:max([dim] [, keepdim])", "the largest value; along dim, the values and their int64 "
   "positions"},
  {"t:min([dim] [, keepdim])", "the smallest value; along dim, the values and their int64 "
   "positions"},
  {"t:amax([dim] [, keepdim])", "the largest value over dim or a list of dims (no positions; "
   "NaN propagates)"},
  {"t:amin([dim] [, keepdim])", "the smallest value over dim or a list of dims"},
  {"t:aminmax([dim] [, keepdim])", "the smallest and the largest value: two results"},
  {"t:argmax([dim] [, keepdim])", "the 1-based position of the largest value (flat, or along "
   "dim)"},
  {"t:argmin([dim] [, keepdim])", "the 1-based position of the smallest value (flat, or along "
   "dim)"},
  {"t:var([dim] [, opts])", "the variance over dim or a list; opts: keepdim (a boolean), the "
   "correction (a number, default 1) or {correction =, keepdim =}"},
  {"t:std([dim] [, opts])", "the standard deviation, sqrt(var), with var's opts"},
  {"t:norm([p] [, dim] [, keepdim])", "the p-norm (p = 2 by default; 1, 0, math.huge, "
   "-math.huge, any p > 0) over everything, dim or a list"},
  {"t:logsumexp(dim [, keepdim])", "log(sum(exp(t))) over dim or a list, max-subtracted (no "
   "overflow)"},
  {"t:any([dim] [, keepdim])", "whether any element is nonzero (along dim: a tensor "
   "without it, or with it at size 1)"},
  {"t:all([dim] [, keepdim])", "whether every element is nonzero (along dim: a tensor "
   "without it, or with it at size 1)"},
  {"t:count_nonzero([dim])", "the number of nonzero elements (along dim: a tensor "
   "without it)"},
  /* ---- Tensor: sorting and selection (l_sort.c) */
  {"t:sort([dim] [, descending])", "values and int64 positions sorted along dim (the last), "
   "stable, NaN last (first when descending)"},
  {"t:argsort([dim] [, descending])", "the int64 positions that sort t along dim, as sort's"},
  {"t:topk(k [, dim] [, largest] [, sorted])", "the k largest (or smallest) along dim and "
   "their positions, best first, ties by position"},
  {"t:kthvalue(k [, dim] [, keepdim])", "the k-th smallest along dim and its position (dim "
   "removed, or kept at size 1)"},
  {"t:median([dim] [, keepdim])", "the lower median: a number, or along dim values and "
   "positions; NaN if the line holds one"},
  {"t:unique([{return_inverse =, return_counts =}])", "the sorted distinct values, and the "
   "inverse (t's shape) and counts when asked"},
  {"t:bincount([weights] [, minlength])", "result[v + 1] counts (sums weights of) the "
   "values v of a 1-D non-negative integer t"},
  {"t:histc([bins] [, min] [, max])", "a float histogram of bins (100) equal bins over "
   "[min, max] (0, 0: the data's range)"},
  {"t:matmul(b)", "the matrix product t @ b, as qlua.matmul"},
  {"t:dot(b)", "the inner product of two 1-D tensors of one size, as a 0-d tensor"},
  {"t:outer(b)", "the outer product of two 1-D tensors: #t x #b"},
  {"t:mv(v)", "the product of the 2-D t and the 1-D v"},
  {"t:bmm(b)", "batched products of 3-D tensors with equal batch sizes (no broadcasting)"},
  {"t:addmm(a, b [, opts])", "beta * t + alpha * (a @ b) in a new tensor, as qlua.addmm"},
  {"t:addmm_(a, b [, opts])", "t = beta * t + alpha * (a @ b) in place; t has the "
   "product's shape"},
  /* ---- Tensor: scans and softmax (dim: 1-based; a 0-d tensor takes dim 1) */
  {"t:cumsum(dim)", "running sums along dim (integers and bool give int64)"},
  {"t:cumprod(dim)", "running products along dim (integers and bool give int64)"},
  {"t:cummax(dim)", "running maxima along dim and their int64 positions (ties: the later, "
   "NaN sticks)"},
  {"t:cummin(dim)", "running minima along dim and their int64 positions (ties: the later, "
   "NaN sticks)"},
  {"t:logcumsumexp(dim)", "log(cumsum(exp(t))) along dim, computed stably (float64 for "
   "integer tensors)"},
  {"t:softmax(dim)", "exp(t - max) / sum(exp(t - max)) along dim (float64 for integer "
   "tensors)"},
  {"t:log_softmax(dim)", "t - max - log(sum(exp(t - max))) along dim (float64 for integer "
   "tensors)"},
  /* ---- Tensor: memory */
  {"t:free()", "gives the storage's memory back now; t and its views become freed"},

  /* ---- qlua.Kernel and qlua.Module methods */
  {"k:launch{grid =, block =, shared =, args = {...}}", "launches the kernel with "
   "dynamic shared memory (k(grid, block, ...) without)"},
  {"k:attributes()", "{registers =, max_threads =, static_shared =, "
   "max_dynamic_shared =, params =, device =}"},
  {"k:signature()", "the kernel's parameters as a string: \"const float *x, int n\""},
  {"m:kernel(name [, signature])", "the module's kernel name as a qlua.Kernel"},
  {"m:kernels()", "the names of the module's kernels"},
};

#define LH_NENTRIES ((int)(sizeof lh_entries / sizeof lh_entries[0]))

/* What an entry documents: a kind and where its values are found at run time. */
typedef enum { LH_QLUA, LH_TENSOR, LH_KERNEL, LH_MODULE, LH_NKINDS } lh_kind;

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

/* The kind of an entry and its name (pointer into the signature, length *len). */
static lh_kind lh_parse(const lh_entry *e, const char **name, size_t *len) {
  lh_kind k = LH_QLUA;
  for (int i = 0; i < LH_NKINDS; i++)
    if (strncmp(e->signature, lh_kinds[i].signature, strlen(lh_kinds[i].signature)) == 0)
      k = (lh_kind)i;
  *name = e->signature + strlen(lh_kinds[k].signature);
  *len = strspn(*name, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_");
  return k;
}

/* Pushes the table where the functions of kind k live (nil when there is none). */
static void lh_pushplace(lua_State *L, lh_kind k) {
  switch (k) {
    case LH_QLUA:
      lua_getfield(L, LUA_REGISTRYINDEX, "qlua.module");
      return;
    case LH_TENSOR:
      luaL_getmetatable(L, QLUA_TENSOR);
      if (lua_istable(L, -1)) lua_getfield(L, -1, "__methods");
      else lua_pushnil(L);
      break;
    case LH_KERNEL:
      luaL_getmetatable(L, "qlua.Kernel");
      if (lua_istable(L, -1)) lua_getfield(L, -1, "__index");
      else lua_pushnil(L);
      break;
    default:  /* a Module's methods sit behind its __index function: found by name only */
      lua_pushnil(L);
      return;
  }
  lua_remove(L, -2);  /* the metatable */
}

/* Finds the entries that document the function at idx (by identity); returns their count. */
static int lh_find_function(lua_State *L, int idx, int *found) {
  int n = 0;
  for (int i = 0; i < LH_NENTRIES; i++) {
    const char *name;
    size_t len;
    lh_kind k = lh_parse(&lh_entries[i], &name, &len);
    lh_pushplace(L, k);
    if (lua_istable(L, -1)) {
      lua_pushlstring(L, name, len);
      lua_rawget(L, -2);
      if (lua_rawequal(L, -1, idx)) found[n++] = i;
      lua_pop(L, 1);
    }
    lua_pop(L, 1);
  }
  return n;
}

/* Finds the entries named s: "cat", "qlua.cat", "slice", "Tensor.slice", "t:slice",
** ... (a bare name matches every kind: "matmul" is qlua.matmul and t:matmul), or a
** kind's topic ("Tensor"), which lists them all. Returns their count. */
static int lh_find_name(const char *s, int *found) {
  int topic = -1, kind = -1;
  const char *want = s;
  for (int k = 0; k < LH_NKINDS && kind < 0; k++) {
    const struct lh_kindinfo *ki = &lh_kinds[k];
    if (strcmp(s, ki->topic) == 0) topic = kind = k;
    const char *prefixes[4] = {ki->signature, ki->names[0], ki->names[1], ki->names[2]};
    for (int p = 0; p < 4 && kind < 0; p++)
      if (prefixes[p] != NULL && strncmp(s, prefixes[p], strlen(prefixes[p])) == 0) {
        kind = k;
        want = s + strlen(prefixes[p]);
      }
  }
  int n = 0;
  for (int i = 0; i < LH_NENTRIES; i++) {
    const char *name;
    size_t len;
    lh_kind k = lh_parse(&lh_entries[i], &name, &len);
    if (kind >= 0 && (int)k != kind) continue;
    if (topic >= 0 || (strlen(want) == len && strncmp(want, name, len) == 0)) found[n++] = i;
  }
  return n;
}

/* qlua.help([name | function]): prints, through the global print (so a replaced print
** captures it), one line per entry found: "signature -- purpose". Returns nothing, so
** the REPL does not print it twice. */
int lq_help(lua_State *L) {
  int found[LH_NENTRIES];
  int n;
  if (lua_isnoneornil(L, 1)) {
    lua_getglobal(L, "print");
    lua_pushliteral(L, "usage: qlua.help(\"cat\" | \"slice\" | \"Tensor.slice\" | "
                    "qlua.cat) prints a function's signature and purpose; "
                    "qlua.help(\"qlua\"), qlua.help(\"Tensor\") list them all");
    lua_call(L, 1, 0);
    return 0;
  }
  if (lua_type(L, 1) == LUA_TSTRING) {
    const char *name = lq_tocstring(L, 1, "help", "the name");
    n = lh_find_name(name, found);
    if (n == 0) return luaL_error(L, "help: no documentation for '%s'", name);
  } else if (lua_isfunction(L, 1)) {
    n = lh_find_function(L, 1, found);
    if (n == 0)
      return luaL_error(L, "help: no documentation for this function (not a qlua "
                        "function or method)");
  } else {
    return luaL_typeerror(L, 1, "string or function");
  }
  lua_getglobal(L, "print");
  luaL_Buffer b;
  luaL_buffinit(L, &b);
  for (int i = 0; i < n; i++) {
    if (i > 0) luaL_addchar(&b, '\n');
    luaL_addstring(&b, lh_entries[found[i]].signature);
    luaL_addstring(&b, " -- ");
    luaL_addstring(&b, lh_entries[found[i]].purpose);
  }
  luaL_pushresult(&b);
  lua_call(L, 1, 0);
  return 0;
}
