--[[
The GPU caching allocator without a GPU: spec/gpu/cuda_alloc_harness.cc
links the CUDA device's compiled objects (obj/kernels/cuda_alloc.o, the allocator, with
cuda_device.o, cuda_context.o and cuda_transfer.o, which open the device, check its CUDA
calls and complete its slot table, of
the build under test, unchanged) against a model of the CUDA runtime and checks the
allocator's stats, its cache bound, its out-of-memory path, and samples/soak.lua replayed
(reserved memory within 2x the peak of allocated). See the harness for what each part
checks.

Pending when the build has no CUDA objects (a CPU-only build), or there is no C++
compiler or CUDA headers ($CUDA_HOME/include, else /usr/local/cuda/include).
]]

local P = require("spec.helpers.process")

local QLUA = P.qlua()
local BUILD = QLUA:match("^(.*)/[^/]*$") or "."
-- The allocator, and what it needs to be opened and called (the context, the slot table,
-- the staging that empty_cache gives back).
local OBJECTS = {}
for _, name in ipairs({ "cuda_alloc", "cuda_device", "cuda_context", "cuda_transfer" }) do
  OBJECTS[#OBJECTS + 1] = BUILD .. "/obj/kernels/" .. name .. ".o"
end

local function exists(path)
  local f = io.open(path, "rb")
  if f then f:close() end
  return f ~= nil
end

-- The compiler and the CUDA include directory, or nil and why not.
local function toolchain()
  for _, object in ipairs(OBJECTS) do
    if not exists(object) then return nil, "no " .. object .. " (a build without CUDA)" end
  end
  local cxx = P.have("c++") and "c++" or (P.have("g++") and "g++" or nil)
  if not cxx then return nil, "no C++ compiler (c++ or g++)" end
  local include = (os.getenv("CUDA_HOME") or "/usr/local/cuda") .. "/include"
  if not exists(include .. "/cuda_runtime_api.h") then
    include = "/usr/local/cuda/include"
    if not exists(include .. "/cuda_runtime_api.h") then return nil, "no CUDA headers" end
  end
  return cxx, include
end

describe("the GPU caching allocator, against a model of the CUDA runtime", function()
  it("keeps its stats exact, bounds its cache and holds the soak within 2x", function()
    local cxx, include = toolchain()
    if not cxx then pending(include); return end
    local binary = P.tempdir() .. "/cuda_alloc_harness"
    local argv = { cxx, "-std=c++17", "-O2", "-Wall", "-Wextra", "-Iruntime", "-I" .. include,
                   "spec/gpu/cuda_alloc_harness.cc" }
    for _, object in ipairs(OBJECTS) do argv[#argv + 1] = object end
    for _, arg in ipairs({ "-lpthread", "-o", binary }) do argv[#argv + 1] = arg end
    local build = P.run(argv, { timeout = 300 })
    if build.status ~= 0 then P.cleanup() end
    assert(build.status == 0, "building the harness failed:\n" .. build.stdout .. build.stderr)
    assert(build.stderr == "", "the harness built with warnings:\n" .. build.stderr)
    local r = P.run({ binary }, { timeout = 300 })
    P.cleanup()
    assert(r.status == 0, "the harness failed with status " .. r.status .. ":\n" .. r.stdout .. r.stderr)
    assert.truthy(r.stdout:find("cuda_alloc_harness: ok", 1, true), r.stdout)
  end)
end)
