-- qlua as a LuaRocks rock: the Lua C module qlua.so, for a stock Lua 5.4
-- (`lua5.4 -e 'require "qlua"'`). The qlua interpreter itself is not part of the rock;
-- `make install` installs both.
--
--   luarocks --lua-version 5.4 make qlua-0.1.0-1.rockspec     (in the checkout)
--
-- The project Makefile builds the module's C objects in build/rock/ (apart from build/,
-- so a developer's own C build is not clobbered), with the CFLAGS and compiler LuaRocks
-- gives and the headers of the Lua it targets. The CUDA objects depend on nvcc's flags
-- alone, so they are build/'s (KERNEL_BUILD): compiled once for both, and rebuilt only
-- when those flags change. CUDA is left to the Makefile's own detection: with nvcc and a
-- GPU the module has the CUDA device; `CUDA=1 luarocks make ...` builds it without a
-- GPU too (it then loads and runs on the CPU), `CUDA=0` never (the Makefile reads CUDA
-- from the environment). OpenBLAS (libopenblas-dev) and jansson
-- (libjansson-dev, for .safetensors headers) are needed; the Makefile links both.
rockspec_format = "3.0"
package = "qlua"
version = "0.1.0-1"

source = {
   -- luarocks make builds the checkout it is run in and ignores this; set the
   -- project's repository URL here before packing or uploading a source rock
   url = "."
}

description = {
   summary = "Tensors on the CPU and CUDA GPUs for Lua 5.4",
   detailed = [[
qlua's runtime as a Lua C module: require "qlua" gives Tensor (float32, float64,
int32, int64) on the CPU or a CUDA GPU, with gather, matmul (OpenBLAS / cuBLAS),
broadcasting arithmetic, reductions, .npy and .safetensors files.
]]
}

dependencies = {
   "lua >= 5.4, < 5.5"
}

build = {
   type = "make",
   build_target = "build/rock/qlua.so",
   build_variables = {
      BUILD = "build/rock",
      KERNEL_BUILD = "build",
      CC = "$(CC)",
      CFLAGS = "$(CFLAGS)",
      LUA_CFLAGS = "-I$(LUA_INCDIR)"
   },
   -- the Makefile's install target also installs the interpreter, into PREFIX
   install_pass = false,
   install = {
      lib = { qlua = "build/rock/qlua.so" },
      -- qlua's Lua libraries (spec/host/rock_spec.lua checks this list against lua/)
      lua = {
         ["qlua.amp"] = "lua/qlua/amp.lua",
         ["qlua.autograd"] = "lua/qlua/autograd.lua",
         ["qlua.autograd.derivatives"] = "lua/qlua/autograd/derivatives.lua",
         ["qlua.dist"] = "lua/qlua/dist.lua",
         ["qlua.fuzz"] = "lua/qlua/fuzz.lua",
         ["qlua.fuzz.entries.conveniences"] = "lua/qlua/fuzz/entries/conveniences.lua",
         ["qlua.fuzz.entries.dist"] = "lua/qlua/fuzz/entries/dist.lua",
         ["qlua.fuzz.entries.elementwise"] = "lua/qlua/fuzz/entries/elementwise.lua",
         ["qlua.fuzz.entries.formats"] = "lua/qlua/fuzz/entries/formats.lua",
         ["qlua.fuzz.entries.functions"] = "lua/qlua/fuzz/entries/functions.lua",
         ["qlua.fuzz.entries.index"] = "lua/qlua/fuzz/entries/index.lua",
         ["qlua.fuzz.entries.inspect"] = "lua/qlua/fuzz/entries/inspect.lua",
         ["qlua.fuzz.entries.mask"] = "lua/qlua/fuzz/entries/mask.lua",
         ["qlua.fuzz.entries.matmul"] = "lua/qlua/fuzz/entries/matmul.lua",
         ["qlua.fuzz.entries.meta"] = "lua/qlua/fuzz/entries/meta.lua",
         ["qlua.fuzz.entries.nn"] = "lua/qlua/fuzz/entries/nn.lua",
         ["qlua.fuzz.entries.move"] = "lua/qlua/fuzz/entries/move.lua",
         ["qlua.fuzz.entries.operators"] = "lua/qlua/fuzz/entries/operators.lua",
         ["qlua.fuzz.entries.reduce"] = "lua/qlua/fuzz/entries/reduce.lua",
         ["qlua.fuzz.entries.scan"] = "lua/qlua/fuzz/entries/scan.lua",
         ["qlua.fuzz.entries.shape"] = "lua/qlua/fuzz/entries/shape.lua",
         ["qlua.fuzz.entries.sort"] = "lua/qlua/fuzz/entries/sort.lua",
         ["qlua.fuzz.entries.view"] = "lua/qlua/fuzz/entries/view.lua",
         ["qlua.fuzz.files"] = "lua/qlua/fuzz/files.lua",
         ["qlua.fuzz.gen"] = "lua/qlua/fuzz/gen.lua",
         ["qlua.fuzz.record"] = "lua/qlua/fuzz/record.lua",
         ["qlua.nn"] = "lua/qlua/nn.lua",
         ["qlua.nn.attention"] = "lua/qlua/nn/attention.lua",
         ["qlua.nn.functional"] = "lua/qlua/nn/functional.lua",
         ["qlua.nn.initializers"] = "lua/qlua/nn/initializers.lua",
         ["qlua.nn.layers"] = "lua/qlua/nn/layers.lua",
         ["qlua.nn.parallel"] = "lua/qlua/nn/parallel.lua",
         ["qlua.nn.utils"] = "lua/qlua/nn/utils.lua",
         ["qlua.optim"] = "lua/qlua/optim.lua",
         ["qlua.optim.schedules"] = "lua/qlua/optim/schedules.lua",
         ["qlua.testing"] = "lua/qlua/testing.lua",
         ["qlua.testing.half"] = "lua/qlua/testing/half.lua",
         ["qlua.testing.ref"] = "lua/qlua/testing/ref.lua",
      }
   }
}
