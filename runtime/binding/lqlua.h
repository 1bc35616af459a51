/*
** lqlua.h — internal header shared by the Lua binding's files. Not installed; embedders
** use qlua.h. The files build on each other one way, each using only those above it:
**
**     l_state.c   the state box and its context, raising, the binding calls in progress
**                 (the trampoline, lq_setfuncs), the GC driving, and the tensor
**                 userdata's life: creation, checks, __gc/__close/free and the
**                 releases that wait
**     l_args.c    Lua values to tensors and back: shapes, opts, devices, dtypes,
**                 numbers, nested tables (lq_fromtable) and totable
**     l_print.c   tostring(t)
**     l_tensor.c  the methods and metamethods; lq_open_tensor wires the metatable
**     l_qlua.c    the module functions and luaopen_qlua
**
** Who holds what: the state box (l_state.c) holds one reference to the qt_ctx and the
** bookkeeping below; the registry anchors the box and the queue of releases that wait
** (l_state.c); each tensor userdata holds one reference to its storage (tensor.h), given
** back by its __gc/__close or by t:free() (l_state.c).
**
** Every C function of the binding is a closure whose upvalue 1 is the state box (an
** lq_state userdata, also anchored in the registry), so finding this lua_State's tensor
** context costs one upvalue read. lq_ctx() also records which thread is running, which
** is the lua_State the core's GC callback collects on.
**
** Raising: the core (ops.h) returns -1 with ctx->err.msg; lq_raise turns that into a Lua
** error. Nothing owned is held across a call that may raise: results are pushed as
** empty tensor userdata first (lq_newtensor) and filled by the core afterwards.
*/
#ifndef QLUA_LQLUA_H
#define QLUA_LQLUA_H

#include <lauxlib.h>
#include <stdbool.h>
#include <lua.h>

#include "device.h"
#include "qlua.h"
#include "tensor.h"

#include "ops.h"

/* The per-lua_State state of the binding; a full userdata anchored in the registry and
** captured as upvalue 1 of every binding function. Its __gc drops the context. */
typedef struct lq_state {
  qt_ctx *ctx;          /* one reference held */
  lua_State *running;   /* the thread of the latest binding call: where the GC runs */
  uint64_t gpus_used;   /* bit n: gpu:n was handed out to this state (sync, empty_cache) */
  uint64_t total_of;    /* the gpus_used mask total_bytes was summed for */
  int64_t total_bytes;  /* device memory of those GPUs (GC pacing) */
  /* Releases that wait (l_state.c): a finalizer run in the middle of a binding call
  ** (by a collection the call or Lua started) closed, collected or freed a tensor that
  ** a call in progress holds. Set while the queue may be non-empty; lq_ctx drains it. */
  int deferred;
  /* Binding calls in progress, on any thread (lq_enter/lq_leave), and the thread of the
  ** outermost one. A finalizer or a callback may run Lua code in the middle of a call,
  ** even in another coroutine, and a release or a drain there must see the calls below
  ** it on that other thread too. A call that raises never leaves, so a count above 0 is
  ** checked against the outermost thread's stack at the next entry. */
  int calls;
  lua_State *outer;
  lua_State *main;      /* the state's main thread (always alive: never anchored) */
  double step_carry;    /* host bytes' collector debt not yet handed to Lua (under 1 KiB) */
} lq_state;

/* The GC driving policy (l_state.c): at least this much garbage between collections. */
#define LQ_GC_FLOOR ((int64_t)256 << 20)
/* Host bytes stepping the collector (l_state.c, s_gc_step): a cycle per about
** max(LQ_GC_STEP_GARBAGE, LQ_GC_STEP_HEAPS x the Lua heap) of host garbage. */
#define LQ_GC_STEP_GARBAGE ((double)(16 << 20))
#define LQ_GC_STEP_HEAPS 32.0

/* ---- l_state.c: the state */
/* Pushes the box of a new state (the context, the GC callback, the release queue),
** anchored in the registry until lua_close; luaopen_qlua makes it once per state. */
lq_state *lq_state_new(lua_State *L);
/* A binding call begins / ends on L (the trampoline does this for every registered
** function; metamethods that run ops call them by hand). Cheap when no other call is in
** progress; never raise. */
void lq_enter(lua_State *L);
void lq_leave(lua_State *L);
lq_state *lq_state_of(lua_State *L);        /* upvalue 1 */
qt_ctx *lq_ctx(lua_State *L);               /* upvalue 1's context; records L as running */
int lq_raise(lua_State *L, qt_ctx *ctx);    /* luaL_error(L, "%s", ctx->err.msg) */
/* The same, for a core function serving a differently named Lua function: a message
** that starts with "<core_op>: " is raised as "<op>: ..." (zeros, built on qt_empty,
** says "zeros: shape ... is too large", not "empty: ..."). */
int lq_raise_as(lua_State *L, qt_ctx *ctx, const char *core_op, const char *op);
/* After device memory was given back outside a collection (t:free(), a finalizer run by
** Lua's own collector): lowers the GC limit if the live bytes now call for a lower one.
** Never raises; a no-op once the state is closing. */
void lq_gc_relax(lua_State *L);
/* A full collection, then the GC limit re-paced from what is left (qlua.empty_cache). */
void lq_gc_collect(lua_State *L);

/* A binding function with the most arguments it takes (a method counts self), so an
** argument too many is an error naming the function instead of silently ignored:
** t:add(1, 2, 3), or t:sub(1, 3) read as Torch7's slice. LQ_VARARGS: the function
** checks its own tail with lq_checkend (shapes given as numbers: zeros(2, 3, opts)). */
/* A binding function's row: what it is called, its C function, how many arguments it takes,
** and what qlua.help says of it (the signature after the name, "(dim, index)", and one line
** of purpose): the one place an API function is described. Rows without help (args and
** help NULL: metamethods) are not documented. */
typedef struct lq_Reg {
  const char *name;
  lua_CFunction func;
  int nargs;            /* or LQ_VARARGS; | LQ_UNCOUNTED */
  const char *args;     /* "(dim, index)", "()", or NULL */
  const char *help;
} lq_Reg;
#define LQ_VARARGS (-1)
/* Not a call in progress while it runs (qlua.bench: it holds no tensor, and the ops its
** Lua function makes must see no call below them, or each would search the stack). */
#define LQ_UNCOUNTED 0x10000
/* Like luaL_setfuncs into the table on top, with the box at box_idx as upvalue 1 of
** every function; method: self is argument 1 (messages count the arguments after it).
** topic ("qlua", "Tensor", "Kernel", "Module", or NULL): the help topic the documented
** rows are recorded under, in the registry's LQ_API list (qlua.help reads it, and so
** can specs and the fuzzer: {topic =, name =, args =, help =, fn =} per row, in
** registration order). */
void lq_setfuncs(lua_State *L, const lq_Reg *regs, int box_idx, bool method,
                 const char *topic);
#define LQ_API "qlua.api"
/* Records the value on top of the stack (left there) in the LQ_API list, for a documented
** value that is no lq_Reg row (qlua.version). */
void lq_document(lua_State *L, const char *topic, const char *name, const char *args,
                 const char *help);
/* Raises "<op>: unexpected argument #n (...)" when any argument from `arg` on is not nil
** (nargs arguments are expected before it). */
void lq_checkend(lua_State *L, int arg, const char *op, bool method);

/* Runs fn (a C function taking nargs arguments from the top of the stack, upvalue 1 the
** box, as every binding function) protected, and turns an out-of-memory error of Lua's
** allocator into "<op>: not enough memory (<what>)"; other errors pass through. Returns
** fn's nresults results. For the calls that build large Lua values (tables, buffers). */
int lq_call_named(lua_State *L, lua_CFunction fn, int nargs, int nresults, const char *op,
                  const char *what);

/* ---- l_state.c: the tensor userdata */
/* (qlua_checktensor, qlua_totensor and qlua_pushtensor, qlua.h, are defined there too.) */
/* Pushes a new userdata holding an empty tensor, metatable set; the core fills it. */
qt_tensor *lq_newtensor(lua_State *L);
/* The tensor at idx, live (not freed) or "<op>: tensor has been freed". */
qt_tensor *lq_checklive(lua_State *L, int idx, const char *op);
/* __gc and __close (one idempotent function that never raises), and t:free(): the
** releases, which wait while a binding call in progress holds the tensor. */
int lq_tensor_gc(lua_State *L);
int lq_tensor_free(lua_State *L);

/* ---- l_args.c: argument parsing shared by the module functions and the methods */
/* Parses a shape starting at argument `arg`: either one table {2, 3} or consecutive
** numbers 2, 3 (sizes: integers >= 0, at most QT_MAXDIM). Returns the index of the
** first argument after the shape. Flags: */
#define LQ_SHAPE_INFER 1  /* -1 entries are allowed (view, reshape, expand check how many) */
#define LQ_SHAPE_ONE   2  /* one number or one table only (full(shape, value)) */
int lq_checkshape(lua_State *L, int arg, const char *op, int flags, int *ndim, int64_t *size);
/* Reads the optional opts table at arg ({dtype=, device=}); fields left nil keep the
** values already in *dtype / *dev. Unknown keys are an error. */
void lq_checkopts(lua_State *L, int arg, const char *op, qt_dtype *dtype, qt_device **dev);
/* opts.key (opts a table's index, 0: none) as a pair {h, w} of integers (a number is both),
** def when nil: conv's and pooling's stride, padding, dilation ... */
void lq_opt_pair(lua_State *L, int opts, const char *op, const char *key, int64_t def,
                 int64_t *out);
/* Strings for the core, which reads C strings up to their first NUL: a Lua string with a
** NUL inside would reach it cut short ("ij\0..." read as "ij"), so one is refused, naming
** op and what the string is ("einsum: spec contains a NUL byte (at byte 3)"). Every string
** argument, option and option key of the binding goes through one of these.
**   lq_checkcstring: argument arg, a string (or a number, as luaL_checkstring converts it);
**   lq_tocstring: the string (or number) at idx, which the caller checked is one;
**   lq_keystring: a table key during lua_next: the key when it is a string (checked as
**   above), NULL when it is not one (never converted: that would confuse lua_next). */
const char *lq_checkcstring(lua_State *L, int arg, const char *op, const char *what);
const char *lq_tocstring(lua_State *L, int idx, const char *op, const char *what);
const char *lq_keystring(lua_State *L, int idx, const char *op);
/* A device by name: "cpu", "gpu" (the current GPU), "gpu:N". */
qt_device *lq_device_by_name(lua_State *L, const char *op, const char *name);
/* The same, or NULL when name is not a device name at all (so `to` can try dtypes first). */
qt_device *lq_device_by_name_or_null(lua_State *L, const char *op, const char *name);
/* A device from a Lua value: a name, or an integer GPU ordinal. */
qt_device *lq_checkdevice(lua_State *L, int arg, const char *op);
/* The default device: the current GPU, or the CPU without one (qlua.memory, qlua.backend,
** qlua.is_capturing, qlua.graph); optdevice: arg's device, or the default when it is none
** or nil. */
qt_device *lq_default_device(lua_State *L, const char *op);
qt_device *lq_optdevice(lua_State *L, int arg, const char *op);
/* The GPU with that ordinal, opened on first use; raises "<op>: <registry message>". */
qt_device *lq_gpu(lua_State *L, const char *op, int ordinal);
/* A 1-based dim argument as a 0-based dim of t ("<op>: dim 3 out of range (1..2)"). */
int lq_checkdim(lua_State *L, int arg, const qt_tensor *t, const char *op);
/* A dtype by name, or "<op>: unknown dtype 'x' (float32, float64, int32, int64)". */
qt_dtype lq_dtype_by_name(lua_State *L, const char *op, const char *name);
/* The Lua number at idx as a qt_scalar; *is_float says which subtype it was (the int
** field of a float is its truncation when that fits int64, else 0). */
qt_scalar lq_toscalar(lua_State *L, int idx, bool *is_float);
/* The number at idx as a qt_scalar that dtype can hold exactly: an integer in range for
** int dtypes (an integral float is accepted), any number for float dtypes. */
qt_scalar lq_checkstorable(lua_State *L, int idx, const char *op, qt_dtype dtype);
/* Pushes an element read from a tensor: an integer for int dtypes, a float otherwise. */
void lq_pushscalar(lua_State *L, qt_dtype dtype, qt_scalar v);
/* Builds a tensor from the number or (nested) table at idx and pushes it. dtype -1:
** inferred (any float -> float32, else int64). as_index: the values are index values
** ("<op>: index 2.5 is not an integer"). */
qt_tensor *lq_fromtable(lua_State *L, int idx, const char *op, int dtype, qt_device *dev,
                        bool as_index);
/* The totable method: nested tables of the tensor's values (a number for a 0-d one). */
int lq_totable(lua_State *L);

/* ---- l_kernel.c: qlua.kernel, qlua.module, qlua.elementwise, qlua.reduction */
/* Makes the qlua.Kernel and qlua.Module metatables and puts the module functions into
** the table at module_idx. */
void lq_open_kernel(lua_State *L, int box_idx, int module_idx);
/* l_graph.c: qlua.graph, qlua.is_capturing and the qlua.Graph userdata, into the module at
** module_idx. */
void lq_open_graph(lua_State *L, int box_idx, int module_idx);
/* l_dist.c: qlua._dist (process groups, collectives, work handles, the launcher's spawn),
** which lua/qlua/dist.lua wraps as qlua.dist, into the module at module_idx. */
void lq_open_dist(lua_State *L, int box_idx, int module_idx);

/* ---- l_elementwise.c: elementwise arithmetic methods and the operator metamethods,
** registered by l_tensor.c */
extern const lq_Reg lq_elementwise_methods[];
extern const lq_Reg lq_elementwise_metamethods[];
/* Sets the registry's LQ_OPS table's fields unary, unary_bool and binary: the names of the
** elementwise ops the binding makes from scalar.h's lists, in list order (unary: those with
** an in-place form), for the specs and the fuzzer (qlua.testing's T.op_list). */
void lq_elementwise_lists(lua_State *L);
/* The registry table of what the lists make: {unary =, unary_bool =, binary =, dtypes =}. */
#define LQ_OPS "qlua.ops"
/* ---- l_random.c: sampling methods (uniform_ ...), registered by l_tensor.c, and
** qlua.bernoulli and qlua.multinomial, registered by l_qlua.c */
extern const lq_Reg lq_random_methods[];
extern const lq_Reg lq_random_functions[];
/* ---- l_shape.c: slicing and shape methods, registered by l_tensor.c */
extern const lq_Reg lq_shape_methods[];
/* ---- l_index.c: the indexing methods (gather ... index_add_), registered by l_tensor.c */
extern const lq_Reg lq_index_methods[];
/* ---- l_mask.c: the mask methods (masked_fill_ ... count_nonzero), registered by l_tensor.c,
** and qlua.where, registered by l_qlua.c */
extern const lq_Reg lq_mask_methods[];
extern const lq_Reg lq_mask_functions[];
/* ---- l_reduce.c: the reductions (sum ... argmin), registered by l_tensor.c */
extern const lq_Reg lq_reduce_methods[];
/* keepdim at arg: none or nil (false), or a boolean ("<op>: keepdim must be a boolean"). */
bool lq_optkeepdim(lua_State *L, int arg, const char *op);
/* keepdim for the reductions whose core op drops the dim (median, kthvalue, any, all): the
** n results on top of the stack, each t reduced over dim (t has ndim dims), become views
** with dim back at size 1. A 0-d t's results stay 0-d, as PyTorch's. Returns n. */
int lq_keepdim(lua_State *L, qt_ctx *ctx, int n, int dim, int ndim, const char *op);
/* ---- l_matmul.c: the product methods (matmul ...), registered by l_tensor.c, and
** qlua.matmul ..., registered by l_qlua.c */
extern const lq_Reg lq_matmul_methods[];
extern const lq_Reg lq_matmul_functions[];

/* ---- l_scan.c: the scan and softmax methods (cumsum ... log_softmax), registered by
** l_tensor.c, and qlua.cross_entropy, registered by l_qlua.c */
extern const lq_Reg lq_scan_methods[];
extern const lq_Reg lq_scan_functions[];
/* l_autograd.c: qlua._autograd_recorder, the C half of lua/qlua/autograd.lua's recording */
extern const lq_Reg lq_autograd_functions[];

/* ---- l_sort.c: sort ... histc, registered by l_tensor.c, and qlua.searchsorted, registered
** by l_qlua.c */
extern const lq_Reg lq_sort_methods[];
extern const lq_Reg lq_sort_functions[];
/* l_conv.c: qlua.conv2d, conv_transpose2d, conv2d_input, conv2d_weight, set_cudnn_tf32,
** registered by l_qlua.c */
extern const lq_Reg lq_conv_functions[];
/* l_optim.c: qlua._optim_step, qlua.optim's fused update, registered by l_qlua.c */
extern const lq_Reg lq_optim_functions[];
/* l_norm.c: qlua._norm and qlua._norm_backward, qlua.nn's fused normalisations, and
** l_pool2d.c: qlua._pool2d, its pooling; both registered by l_qlua.c */
extern const lq_Reg lq_norm_functions[];
extern const lq_Reg lq_pool2d_functions[];
/* l_attention.c: qlua._attention, _attention_backward and _attention_path, qlua.nn's
** scaled dot-product attention; registered by l_qlua.c */
extern const lq_Reg lq_attention_functions[];

/* ---- l_print.c */
int lq_tostring(lua_State *L);              /* __tostring */

/* ---- l_tensor.c */
/* Creates the methods table and the "qlua.Tensor" metatable; upvalue 1 of every
** function is the value at box_idx (the state box). Leaves the stack as it was. */
void lq_open_tensor(lua_State *L, int box_idx);

/* ---- l_help.c: what the REPL shows */
/* Pushes a table of the n sizes at keys 1..n whose tostring is "{2, 3}" (t:shape()). */
void lq_pushshape(lua_State *L, int n, const int64_t *size);
int lq_help(lua_State *L);                  /* qlua.help */

#endif
