/*
** qlua.h — the public C API for programs that embed the qlua runtime, and for C
** extension modules that run their own (CUDA) code on its tensors ("C extensions", below).
**
** A host program opens the runtime in its own lua_State with luaopen_qlua (directly, or
** through luaL_requiref(L, "qlua", luaopen_qlua, 1)), then moves tensors between C and
** Lua with the functions below. The Lua binding itself (runtime/l_*.c) reaches tensor
** userdata only through qlua_checktensor / qlua_totensor / qlua_pushtensor, so what an
** embedder sees is exactly what scripts see.
**
** Ownership, in one paragraph: a tensor pushed to Lua belongs to Lua. qlua_pushtensor
** *moves* the caller's storage reference into a new userdata (the caller's qt_tensor is
** left holding nothing); the userdata's __gc, __close or t:free() gives it back.
** Pointers returned by qlua_checktensor / qlua_totensor are *borrowed*: valid while the
** userdata is reachable from Lua (keep it on the stack or in a table), never to be
** released by the caller. To keep a tensor beyond that, take your own reference with
** qt_tensor_share (tensor.h) and release it with qt_tensor_release when done.
**
** Threads, exactly:
**   - A lua_State, and everything reached through it, is single-threaded: one thread at a
**     time runs it (luaopen_qlua, qlua_* calls, scripts, lua_close), with the host's own
**     synchronisation when that thread changes. Borrowed pointers (qlua_checktensor /
**     qlua_totensor) are used only on that thread, and only there may qt_tensor_share
**     take a reference from one. Independent states may run on different threads at once
**     (devices, the device registry and the CPU and GPU allocators are process-wide and
**     thread-safe).
**   - A reference of your own (from qt_tensor_share, or the qt_tensor you built around
**     qt_storage_wrap) may cross threads: hand the qt_tensor struct over with your own
**     synchronisation (a mutex, a queue), then any thread that holds it may release it
**     (qt_tensor_release), or share it further (qt_tensor_share from that reference),
**     while the state keeps using, freeing and collecting its own references, or after
**     lua_close. The reference counts of storages and of the state's context are atomic;
**     the release that drops the last reference is the only one that frees, and does so on
**     its own thread: the bytes go back to the device (the CPU allocator's byte counters
**     are atomic), the context is freed if this was its last storage, and a
**     qt_storage_wrap release callback runs there too. So such a callback must be safe to
**     run on any thread that releases references, including the state's (t:free(),
**     __gc, lua_close) and yours.
**     The GPU bytes a state is charged for (qt_ctx's gpu_live_bytes, which paces its
**     collector) are an atomic count too, so GPU references cross threads the same way.
**   - The bytes themselves are not synchronised: reading a tensor's memory on another
**     thread while the state writes it (in-place ops, t:free(), which gives the bytes back
**     for every reference at once) is the host's race to prevent. Checking a reference
**     for "freed" (qt_tensor_check) reads a flag the state's t:free() writes: same rule.
**   - samples/embed.c --threads does all of this; make tsan runs it under ThreadSanitizer.
*/
#ifndef QLUA_H
#define QLUA_H

/* Lua's headers have no extern "C" of their own (C++ code includes lua.hpp): wrapped
** here, so a C++ or CUDA extension can include qlua.h first. */
#ifdef __cplusplus
extern "C" {
#endif
#include <lua.h>
#include <lauxlib.h>
#ifdef __cplusplus
}
#endif

#include "tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

#define QLUA_VERSION_MAJOR 0
#define QLUA_VERSION_MINOR 1
#define QLUA_VERSION_PATCH 0
#define QLUA_VERSION "0.1.0"
#define QLUA_VERSION_NUM (QLUA_VERSION_MAJOR * 10000 + QLUA_VERSION_MINOR * 100 + \
                          QLUA_VERSION_PATCH)

/* The name of the tensor metatable (its __name, as error messages print it). */
#define QLUA_TENSOR "qlua.Tensor"

/* Opens the runtime in L and pushes the module table (what `require "qlua"` returns).
** Creates this state's tensor context (random seed, current GPU, device-memory
** accounting that drives L's garbage collector) and the "qlua.Tensor" metatable.
** One context per lua_State: a second call in the same state returns the same module
** table (independent contexts come from independent states). */
LUAMOD_API int luaopen_qlua(lua_State *L);

/* The tensor at stack index idx, or a Lua error ("bad argument #idx to 'f'
** (qlua.Tensor expected, got number)"). Borrowed (see above). The tensor may have been
** freed (t:free()); the core's functions report that as "<op>: tensor has been freed",
** and qt_tensor_check tells beforehand. */
qt_tensor *qlua_checktensor(lua_State *L, int idx);

/* Like qlua_checktensor, but NULL (no error) when the value is not a tensor. */
qt_tensor *qlua_totensor(lua_State *L, int idx);

/* Pushes a new tensor userdata that takes over t's storage reference and geometry, and
** returns 1 (values pushed). Ownership always passes: on return *t holds nothing
** (qt_tensor_init). If it raises (a Lua memory error, or luaopen_qlua never ran in this
** state) t's reference has been released first, so nothing leaks either way. Needs two
** free stack slots. t may hold nothing; the tensor then reads as freed. */
int qlua_pushtensor(lua_State *L, qt_tensor *t);

/* ---------------------------------------------------------------------------------------
** C extensions: a module of your own (a .so loaded by require) that runs its own code,
** CUDA kernels included, on qlua's tensors. samples/extension/ is one (the seed's
** Gather); docs/API.md, "C extensions", says the same with an example.
**
** What a tensor is, for your code: the qt_tensor fields (tensor.h) are its geometry:
** t->dtype, t->ndim, t->size[d], t->stride[d] (in elements, >= 0, 0 for a broadcast dim),
** and qlua_data(t) is the address of element 0 on its device, so element (i0, i1, ...)
** is at ((T *)qlua_data(t))[i0 * stride[0] + i1 * stride[1] + ...]. tensor.h's
** qt_numel, qt_is_contiguous, qt_elsize and qt_dtypes[d].name (the Lua spelling) help.
** Index values stay 1-based as everywhere in qlua.
**
** Streams, the one rule: every op of qlua on a GPU is queued on that GPU's one stream
** (qlua_cuda_stream), and the memory of a tensor that is freed or collected goes back to
** a cache that hands it out again only to work queued later on that same stream. So:
**   - launch on qlua's stream, and your kernel is ordered with qlua's ops (after the ops
**     that made its inputs, before the ops that read its outputs) with no sync, and the
**     tensors it reads or writes may be dropped as soon as the launch is queued: their
**     memory is reused only by work behind your kernel;
**   - work queued on a stream of your own is ordered with nothing of qlua's: make it wait
**     for qlua's stream first and make qlua's stream wait for it before you return (a
**     cudaEvent recorded on one and cudaStreamWaitEvent on the other), or synchronise it
**     before you return; a tensor must stay reachable while such work may run.
**   - qlua keeps a record of each thread's current CUDA device and skips cudaSetDevice
**     when it matches: if your launch needs another current device (cudaGetDevice is not
**     qlua_gpu_index(t)), set it, and set the previous one back before returning.
** A kernel that faults (an illegal address) poisons the GPU's CUDA context as a faulting
** built-in op would: the next op of qlua on that GPU reports the error and refuses further
** work there; the process and the CPU work on.
**
** Errors: the functions below that take a lua_State raise Lua errors (they do not
** return on error), and their messages name `op`, the Lua function your module exports
** ("gather: argument #1 is on cpu, expected a GPU tensor"), as qlua's own do. op NULL
** keeps the core's name ("empty: ...", "stream: ..."). They need luaopen_qlua to have run
** in the state ("qlua: luaopen_qlua has not been called in this state" otherwise).
*/

/* Registers the functions of l (a luaL_Reg list ending in {NULL, NULL}) into the table
** on top of the stack, as luaL_setfuncs(L, l, 0) does, but each one runs as qlua's own
** functions do: counted as a qlua call in progress while it runs, so a tensor it holds
** on its stack (its arguments, and tensors it pushed) is not released under it, even
** when a finalizer run by an allocation (qlua_newtensor can collect garbage) frees it
** or closes it: that release waits until the function returns. A function registered
** any other way may use every function below too, but has no such protection: call
** qlua_data and qlua_checkgpu after your last qlua_newtensor then. A NULL func makes the
** field false, as luaL_setfuncs does. */
void qlua_setfuncs(lua_State *L, const luaL_Reg *l);

/* The address of t's element 0 on its device (a GPU address for a GPU tensor): the
** storage's bytes plus t->offset elements. NULL when t holds nothing or has been freed
** (t:free()), and possibly for a tensor with no elements. Never raises. */
void *qlua_data(const qt_tensor *t);

/* The CUDA ordinal of t's GPU (0, 1, ...), or -1 for a CPU tensor and for one that holds
** nothing (t:free() empties the tensor it is called on; views of the freed storage keep
** its device). Never raises. */
int qlua_gpu_index(const qt_tensor *t);

/* The cudaStream_t that qlua queues all its work for t's GPU on, as a void * (cast it:
** (cudaStream_t)qlua_cuda_stream(L, t, "gather")). The same stream for every tensor of
** that GPU, for the life of the process; never NULL. Raises "<op>: cpu has no stream
** (only GPUs do)" for a CPU tensor and "<op>: tensor has been freed" for one that holds
** nothing. It does not make t's GPU the current CUDA device (see the rule above). */
void *qlua_cuda_stream(lua_State *L, const qt_tensor *t, const char *op);

/* A new contiguous tensor of dtype and shape size[0..ndim) (ndim 0..QT_MAXDIM; sizes may
** be 0; size may be NULL when ndim is 0), uninitialised, on the device of like (NULL:
** the CPU), allocated through qlua's allocator as qlua's own results are (counted
** against this state's GPU memory, collecting garbage and retrying once when the device
** is out of memory). Pushes the tensor userdata on the stack and returns a borrowed
** pointer to it (valid while the userdata is reachable; return it to Lua by leaving it
** on the stack). Raises "<op>: ..." when the allocation fails (out of memory, a shape too
** large, a bad dtype or ndim), or when like holds nothing. On a GPU the memory is usable at once by work queued on qlua's stream. */
qt_tensor *qlua_newtensor(lua_State *L, qt_dtype dtype, int ndim, const int64_t *size,
                          const qt_tensor *like, const char *op);

/* Any dtype, for qlua_checkgpu. */
#define QLUA_ANY_DTYPE (-1)

/* The tensor at stack index idx, which must be a live (not freed) tensor on a GPU, of
** dtype (a qt_dtype, or QLUA_ANY_DTYPE). Borrowed, as qlua_checktensor's. Raises:
**   "<op>: argument #<idx> must be a tensor, got number"
**   "<op>: tensor has been freed"
**   "<op>: argument #<idx> is on cpu, expected a GPU tensor"
**   "<op>: argument #<idx> is float64, expected float32"
** (idx as the caller's argument number: a negative idx is made absolute first). */
qt_tensor *qlua_checkgpu(lua_State *L, int idx, int dtype, const char *op);

/* Raises a Lua error "<op>: <message>" (just the message when op is NULL), the message
** made by vsnprintf from fmt (printf's formats: %lld, %zu, %s ...), at most QT_ERRLEN - 1
** bytes in all. Never returns; declared int so you can write
** `return qlua_error(L, "gather", "index must be int32 or int64, got %s", name);`. */
int qlua_error(lua_State *L, const char *op, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;

#ifdef __cplusplus
}
#endif
#endif
