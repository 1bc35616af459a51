-- qlua as a LuaRocks rock: the Lua C module qlua.so, for a stock Lua 5.4
-- (`lua5.4 -e 'require "qlua"'`). The qlua interpreter itself is not part of the rock;
-- `make install` installs both.
--
--   luarocks --lua-version 5.4 make qlua-0.1.0-1.rockspec     (in the checkout)
--
-- The project Makefile builds the module in build/rock/ (apart from build/, so a
-- developer's own build is neither reused nor clobbered), with the CFLAGS and compiler
-- LuaRocks gives and the headers of the Lua it targets. CUDA is left to the Makefile's
-- own detection: with nvcc (on PATH or in /usr/local/cuda) the module has the CUDA
-- device, and still loads and runs on the CPU on a machine without a GPU or driver;
-- without nvcc it is CPU-only. `CUDA=0 luarocks make ...` forces a CPU-only build
-- (the Makefile reads CUDA from the environment). OpenBLAS (libopenblas-dev) and jansson
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
      CC = "$(CC)",
      CFLAGS = "$(CFLAGS)",
      LUA_CFLAGS = "-I$(LUA_INCDIR)"
   },
   -- the Makefile's install target also installs the interpreter, into PREFIX
   install_pass = false,
   install = {
      lib = { qlua = "build/rock/qlua.so" }
   }
}
