--[[
lua/qlua/autograd.lua — reverse-mode automatic differentiation over qlua's tensors.

  local autograd = require "qlua.autograd"     -- also qlua.autograd, qlua.no_grad, ...
  local w = qlua.randn({3, 2}, {dtype = "float64", requires_grad = true})
  local loss = (x:matmul(w)):tanh():sum()        -- a 0-d tensor while it records
  loss:backward()                                -- w.grad now holds d loss / d w

PyTorch's model: tensors that require grad record the ops made on them (a node per op,
holding what its derivative needs); backward walks the nodes from the output in reverse
order and accumulates into the leaves' .grad. Every derivative is written here once, in
terms of qlua's own ops, so it runs on every device and dtype, and with
create_graph = true the backward itself records (double backward).

The derivatives are in lua/qlua/autograd/derivatives.lua. Loading the module wraps qlua.Tensor's methods (and qlua's module functions that take
tensors) with a check that costs one table lookup per tensor argument: only a call with
an operand that requires grad, while recording is on, goes through the recorder. A method
with no derivative here raises when an operand requires grad (never a silent zero); one
whose result is not floating (comparisons, argmax) records nothing.
]]

local qlua = rawget(_G, "qlua") or require("qlua")
if qlua.autograd then return qlua.autograd end

local Tensor = qlua.Tensor
local METHODS = rawget(Tensor, "__methods")
local is_tensor = qlua.is_tensor
local pack, unpack, select, type, pairs, ipairs, error = table.pack, table.unpack, select,
  type, pairs, ipairs, error

local A = {}

-- ------------------------------------------------------------- per-tensor state
-- A tensor's state is its userdata's first user value (qlua makes every tensor with one):
-- { req = true, grad = tensor|nil, node = node|nil, idx = output position }, or, for the
-- first result of a recorded op, that op's node itself (a node reads as such a state: its
-- node field is itself, req and idx come from Node: one table fewer per op). The state
-- goes with its tensor, and a graph whose outputs are unreachable is garbage as a whole
-- (no table outside the tensors keeps anything: a weak table's upkeep was a third of what
-- recording cost).
local state, set_state = debug.getuservalue, debug.setuservalue
local enabled = true

local FLOAT = { float32 = true, float64 = true, float16 = true, bfloat16 = true }

local function requires(t)
  local s = state(t, 1)
  return s ~= nil and s.req
end

-- the raw (C) functions, as they were before any wrapping
local raw = {}
for k, v in pairs(METHODS) do raw[k] = v end
local raw_index, raw_newindex = rawget(Tensor, "__index"), rawget(Tensor, "__newindex")
local OPERATORS = { "__add", "__sub", "__mul", "__div", "__unm", "__pow", "__mod", "__idiv" }
for _, k in ipairs(OPERATORS) do raw[k] = rawget(Tensor, k) end
local rawq = {}
for k, v in pairs(qlua) do rawq[k] = v end

-- ------------------------------------------------------------- grad mode
local function with_mode(mode, fn, ...)
  local saved = enabled
  enabled = mode
  local res = pack(pcall(fn, ...))
  enabled = saved
  if not res[1] then error(res[2], 0) end
  return unpack(res, 2, res.n)
end
function A.no_grad(fn, ...) return with_mode(false, fn, ...) end
function A.enable_grad(fn, ...) return with_mode(true, fn, ...) end
function A.set_grad_enabled(flag) enabled = flag and true or false end
function A.is_grad_enabled() return enabled end

-- ------------------------------------------------------------- helpers used by derivatives

-- g summed down to shape (broadcasting's reverse: leading dims and the size-1 dims)
local function sum_to(g, shape)
  local gs = g:shape()
  local nd, ns = #gs, #shape
  local same = nd == ns
  if same then for d = 1, ns do if gs[d] ~= shape[d] then same = false; break end end end
  if same then return g end
  local lead, dims = nd - ns, {}
  for d = 1, lead do dims[#dims + 1] = d end
  for d = 1, ns do
    if shape[d] == 1 and gs[d + lead] ~= 1 then dims[#dims + 1] = d + lead end
  end
  if #dims > 0 then g = g:sum(dims, true) end
  return g:reshape(shape)
end
A.sum_to = sum_to

-- ------------------------------------------------------------- the derivatives
local D = {}
A.derivatives = D
require("qlua.autograd.derivatives")(A, D, { qlua = qlua, is_tensor = is_tensor,
  requires = requires, FLOAT = FLOAT, raw_newindex = raw_newindex })
-- ------------------------------------------------------------- recording
-- A node: { name, def, args (the call's, packed), versions, outs, nout, shapes, ne } whose
-- array part holds its edges (ne slots used), four slots per edge: the target (the node that made the operand, or the
-- leaf tensor itself), the operand's output position in that node, the argument position
-- the operand came in, and its index in a list argument (or false). versions is flat too:
-- a tensor the derivative reads, then its storage version when the op ran. Few tables per
-- op is what keeps the recording cost near the op's own.
local Node = { req = true, idx = 1, nout = 1 }
Node.__index = Node
local r_version, r_dtype, r_clone, r_shape = raw._version, raw.dtype, raw.clone, raw.shape
local r_contiguous = raw.is_contiguous
local r_numel, r_dim = raw.numel, raw.dim

-- ops whose result shares its input's storage: an in-place op on their result is an error
-- (the base's graph would not see it), and using their result after the base was changed
-- in place is one too
local VIEWS = { view = true, view_as = true, reshape = true, flatten = true, unflatten = true,
                squeeze = true, unsqueeze = true, transpose = true, t = true, permute = true,
                expand = true, expand_as = true, narrow = true, select = true, slice = true,
                diagonal = true, movedim = true, index = true, split = true, chunk = true,
                contiguous = true }

-- a node with room for two edges made with it (an array part grown slot by slot costs
-- more than the rest of the recording)
-- (the nil fields size the hash part for what a node may get later)
local function new_node(name, def, args)
  local node = setmetatable({ false, false, false, false, false, false, false, false,
                              name = name, def = def, args = args, ne = 0, node = false,
                              outs = nil, versions = nil, vv = nil }, Node)
  node.node = node
  return node
end

-- appends t's edge to node when t requires grad (false: it does not)
local function add_edge(node, t, pos, j)
  local s = state(t, 1)
  if s == nil or not s.req then return false end
  local n, maker = node.ne, s.node
  if maker then
    if maker.vv and r_version(t) ~= maker.vv then
      error(string.format("%s: this tensor is a view (made by %s) of a tensor that was changed in "
                          .. "place after the view was taken; take the view again", "autograd", maker.name), 0)
    end
    node[n + 1], node[n + 2] = maker, s.idx
  else
    node[n + 1], node[n + 2] = t, 0
  end
  node[n + 3], node[n + 4] = pos, j or false
  node.ne = n + 4
  return true
end

local function no_derivative(name)
  error(name .. ": no derivative in qlua.autograd yet (an operand requires grad); "
          .. "run it under qlua.no_grad or on t:detach()", 0)
end

-- a result without a derivative entry: fine unless it is floating (then it would need one)
local function check_nodef(name, ...)
  for k = 1, select("#", ...) do
    local o = select(k, ...)
    local list = (type(o) == "table" and not is_tensor(o)) and o or nil
    if list then
      for _, v in ipairs(list) do
        if is_tensor(v) and FLOAT[r_dtype(v)] then no_derivative(name) end
      end
    elseif is_tensor(o) and FLOAT[r_dtype(o)] then no_derivative(name)
    end
  end
  return ...
end

-- the node's edges and the versions of what its derivative reads (def.saves: the argument
-- positions it reads, false for none; nil: every tensor argument)
-- (in_place: argument 1's edge is made by the caller; its version is not kept when it is
-- the live tensor the op writes, whose derivative then reads its shape only)
local function link(node, def, args, in_place)
  local versions
  local saves = def.saves
  for i = 1, args.n do
    local v = args[i]
    if type(v) == "userdata" then
      -- add_edge, written out: this loop is most of what recording costs
      local s = state(v, 1)
      if s ~= nil and s.req and not (in_place and i == 1) then
        local n, maker = node.ne, s.node
        if maker then
          local vv = maker.vv
          if vv and r_version(v) ~= vv then add_edge(node, v, i) end   -- raises
          node[n + 1], node[n + 2] = maker, s.idx
        else
          node[n + 1], node[n + 2] = v, 0
        end
        node[n + 3], node[n + 4] = i, false
        node.ne = n + 4
      end
      if saves ~= false and (saves == nil or saves[i]) and not (in_place and i == 1 and def.self_free)
         and is_tensor(v) then
        versions = versions or {}
        versions[#versions + 1] = v; versions[#versions + 1] = r_version(v)
      end
    elseif def.list and i == (def.list == true and 1 or def.list) and type(v) == "table" then
      for j, t in ipairs(v) do if is_tensor(t) then add_edge(node, t, i, j) end end
    end
  end
  node.versions = versions
end

-- a one-result node whose derivative reads the result: it is kept, with its version
local function keep_result(node, o)
  node.outs = { o }
  local vs = node.versions or {}
  vs[#vs + 1] = o; vs[#vs + 1] = r_version(o)
  node.versions = vs
end

-- the results: floating tensors become the node's outputs
local function bind_outputs(node, def, outs, n)
  local kept
  node.nout = n
  if def.multi then node.shapes = {} end
  for k = 1, n do
    local o = outs[k]
    if is_tensor(o) then
      if FLOAT[r_dtype(o)] then
        set_state(o, k == 1 and node or { req = true, node = node, idx = k }, 1)
        if def.multi then node.shapes[k] = { r_shape(o), r_dtype(o), raw.device(o) } end
      end
      if def.out then              -- every result, the indices of max(dim) and sort too
        kept = kept or {}
        kept[k] = o
        local vs = node.versions or {}
        vs[#vs + 1] = o; vs[#vs + 1] = r_version(o)
        node.versions = vs
      end
    end
  end
  node.outs = kept
  if VIEWS[node.name] and n == 1 and is_tensor(outs[1]) then node.vv = r_version(outs[1]) end
end

local function record_multi(name, def, args, ...)
  local node = new_node(name, def, args)
  link(node, def, args)
  if def.multi == "list" then
    local list = ...
    bind_outputs(node, def, list, #list)
  else
    bind_outputs(node, def, pack(...), select("#", ...))
  end
  return ...
end

-- The one-result case made in C (runtime/binding/l_autograd.c), field for field what the
-- Lua below makes: recording is mostly table stores, cheaper there. The Lua path stays for
-- the one-result ops with a list argument (cat, stack, einsum's list form).
if rawq._autograd_recorder == nil then
  error("qlua.autograd: this qlua has no _autograd_recorder (its binary is older than its "
        .. "Lua libraries)", 0)
end
local crecord = rawq._autograd_recorder(Node, VIEWS)

-- fin: the op's finisher (argument errors as without autograd); fn: the C function
local function record(name, fin, fn, ...)
  local def = D[name]
  if def == nil then return check_nodef(name, fin(pcall(fn, ...))) end
  if not def.multi and not def.list then return crecord(name, def, fin, fn, ...) end
  local args = pack(...)
  if def.multi then return record_multi(name, def, args, fin(pcall(fn, ...))) end
  local o = fin(pcall(fn, ...))
  if not (type(o) == "userdata" and FLOAT[r_dtype(o)]) then return o end
  local node = new_node(name, def, args)
  link(node, def, args)
  set_state(o, node, 1)
  if def.out then keep_result(node, o) end
  if VIEWS[name] then node.vv = r_version(o) end
  return o
end

-- An in-place op t:name_(...) (or the write t[k] = v, name "index_put") where t or an
-- operand requires grad. t's new value gets a node whose edge for t goes to what made t's
-- old value; a derivative that reads t's old value (def.self_free not set) gets a copy
-- made before the write. A leaf that requires grad, and a view of a tensor in a graph,
-- cannot be changed in place (PyTorch's rules); t's other saved uses see the version
-- counter move.
local function record_inplace(name, fin, fn, self, ...)
  local s = state(self, 1)
  if s and s.req then
    if s.node == nil then
      error(name .. ": a leaf tensor that requires grad cannot be changed in place "
              .. "(do it under qlua.no_grad, or on t:detach())", 0)
    end
    if VIEWS[s.node.name] then
      error(name .. ": in-place change of a view (made by " .. s.node.name .. ") of a tensor "
              .. "that requires grad is not recorded; clone() the view first, or change the "
              .. "base tensor", 0)
    end
  end
  local def = D[name] or D[name:sub(1, -2)]
  if def == nil then no_derivative(name) end
  if not FLOAT[r_dtype(self)] then return fin(pcall(fn, self, ...)) end
  if not (s and s.node) and select(2, r_version(self)) then
    -- a view of a tensor outside the graph: its base would not know of the write
    error(name .. ": an operand requires grad and this tensor is a view of part of another "
            .. "one, whose graph would miss the change; write through the base (base[k] = v, "
            .. "base:index_copy_, ...) or clone() the view first", 0)
  end
  local args = pack(self, ...)
  local node = new_node(name, def, args)
  -- the edge for self goes to its old value's maker, found before the write rebinds it
  add_edge(node, self, 1)
  local old = self
  -- the copy records (clone), so that a double backward sees through it to self's maker
  if not def.self_free then old = METHODS.clone(self) end
  args[1] = old
  link(node, def, args, true)
  fin(pcall(fn, self, ...))
  set_state(self, node, 1)
  if def.out then keep_result(node, self) end
  return self
end

-- a keyed read already made (t[k] is r): recorded as the op "index"
local function record_read(t, k, r)
  local node = new_node("index", D.index, pack(t, k))
  link(node, D.index, node.args)
  r = raw.expand(r, r_shape(r))        -- its own userdata: the view may be shared
  set_state(r, node, 1)
  node.vv = r_version(r)
  return r
end

-- is any operand (or a tensor in a list operand: cat's, einsum's) one that requires grad?
local function needs(...)
  local n = select("#", ...)
  for i = 1, n do
    local v = select(i, ...)
    local s = state(v, 1)
    if s ~= nil and s.req then return true end
    if type(v) == "table" then
      for _, t in ipairs(v) do
        local st = state(t, 1)
        if st ~= nil and st.req then return true end
      end
    end
  end
  return false
end

-- The wrappers call the C function through pcall, so that an argument error says what
-- it said unwrapped: luaL_argerror names the function from its caller's frame, which is
-- now the wrapper's ("bad argument #3 to '?'"); the op's name and, for a method, the
-- position counted without self are put back.
local function finisher(name, method)
  local function fix(n)
    n = tonumber(n)
    if method then n = n - 1 end
    if n == 0 then return "calling '" .. name .. "' on bad self" end
    return "bad argument #" .. n .. " to '" .. name .. "'"
  end
  return function(ok, ...)
    if ok then return ... end
    local e = ...
    if type(e) == "string" then e = e:gsub("^bad argument #(%d+) to '%?'", fix, 1) end
    error(e, 0)
  end
end

local function wrap_method(name, fn)
  local fin = finisher(name, true)
  local rec = name:sub(-1) == "_" and record_inplace or record     -- in place, or not
  return function(self, ...)
    if enabled then
      local s = state(self, 1)
      if (s ~= nil and s.req) or needs(...) then return rec(name, fin, fn, self, ...) end
    end
    return fin(pcall(fn, self, ...))
  end
end

-- the full reductions return a 0-d tensor while recording, so that backward has
-- something to start from (a Lua number when nothing records, as always). whole(t, ...)
-- makes that 0-d result from the C functions; the node is recorded under name with the
-- dims argument nil, which every such derivative reads as "all dims".
local function all_dims(t)
  local all = {}
  for d = 1, t:dim() do all[d] = d end
  return all
end
-- (a 0-d t is read as its one-element 1-D view)
local function one_d(t) if t:dim() == 0 then return raw.reshape(t, { 1 }) end return t end
local WHOLE = {
  sum = function(t) t = one_d(t); return raw.sum(t, all_dims(t)) end,
  mean = function(t) t = one_d(t); return raw.mean(t, all_dims(t)) end,
  amax = function(t) t = one_d(t); return raw.amax(t, all_dims(t)) end,
  amin = function(t) t = one_d(t); return raw.amin(t, all_dims(t)) end,
  prod = function(t) return raw.prod(raw.reshape(t, { -1 }), 1) end,
  -- var/std(nil, opts), norm(p): the same with every dim
  var = function(t, _, opts) t = one_d(t); return raw.var(t, all_dims(t), opts) end,
  std = function(t, _, opts) t = one_d(t); return raw.std(t, all_dims(t), opts) end,
  norm = function(t, p) t = one_d(t); return raw.norm(t, p == nil and 2 or p, all_dims(t)) end,
}
-- max(), min() and median() without a dim record as the ties-share rule of amax
local WHOLE_AS = { max = "amax", min = "amin", median = "median_all" }
WHOLE.max, WHOLE.min = WHOLE.amax, WHOLE.amin
WHOLE.median = function(t) return (raw.median(raw.reshape(t, { -1 }), 1)) end

local function full_reduction(name, fn)
  local fin = finisher(name, true)
  local whole, as = WHOLE[name], WHOLE_AS[name] or name
  local dimpos = name == "norm" and 2 or 1      -- the argument that is the dims
  return function(self, ...)
    if enabled then
      local s = state(self, 1)
      if s ~= nil and s.req then
        local n = select("#", ...)
        local dims = select(dimpos, ...)
        if dims == nil and n <= dimpos + 1 and (n < dimpos + 1 or name == "var" or name == "std") then
          return record(as, fin, whole, self, ...)
        end
        return record(name, fin, fn, self, ...)
      elseif needs(...) then
        return record(name, fin, fn, self, ...)
      end
    end
    return fin(pcall(fn, self, ...))
  end
end

-- ------------------------------------------------------------- the engine
local function accumulate(buf, key, g)
  local old = buf[key]
  buf[key] = old and old + g or g
end

local function check_versions(node)
  local vs = node.versions
  if vs == nil then return end
  for i = 1, #vs, 2 do
    local now = r_version(vs[i])
    if now ~= vs[i + 1] then
      error(string.format("backward: a tensor that %s saved was changed in place since " ..
                          "(version %d, now %d)", node.name, vs[i + 1], now), 0)
    end
  end
end

local function is_node(x) return getmetatable(x) == Node end

-- Hooks on leaves (t:register_post_accumulate_grad_hook): how many are registered (a pass
-- counts its leaves' edges only when some are), and the callbacks of the pass under way
-- (autograd.queue_callback), run once its last node has.
local hook_count = 0
local callbacks

local function fire_hooks(t)
  local s = state(t, 1)
  local hooks = s and s.hooks
  if hooks then
    for i = 1, #hooks do hooks[i].fn(t) end
  end
end

-- roots: list of {tensor, gradient}; capture: tensor -> slot (autograd.grad's inputs)
local function run(roots, retain, create, capture)
  -- topological order of the reachable nodes (iterative depth-first post-order)
  local order, seen = {}, {}
  local stack, at = {}, {}
  for _, r in ipairs(roots) do
    local s = state(r[1], 1)
    if s and s.node and not seen[s.node] then
      stack[#stack + 1] = s.node; at[#stack] = 1
      seen[s.node] = true
    end
  end
  while #stack > 0 do
    local top = #stack
    local node, i = stack[top], at[top]
    local e = i <= node.ne and node[i] or nil
    if e ~= nil then
      at[top] = i + 4
      if type(e) == "table" and not seen[e] then
        seen[e] = true
        stack[top + 1] = e; at[top + 1] = 1
      end
    else
      stack[top] = nil
      order[#order + 1] = node
    end
  end
  -- A leaf's hooks fire once its last edge in this pass has been walked (its .grad is then
  -- final for the pass): pending counts the edges still to come, got says it had a gradient.
  local pending, got
  if hook_count > 0 and not capture then
    pending, got = {}, {}
    for _, node in ipairs(order) do
      for i = 1, node.ne, 4 do
        local e = node[i]
        if type(e) ~= "table" then
          local s = state(e, 1)
          if s and s.hooks and #s.hooks > 0 then pending[e] = (pending[e] or 0) + 1 end
        end
      end
    end
  end
  -- autograd.grad: only the nodes that lead to an input run (the graph past an input
  -- that is itself a result is left as it is)
  local needed
  if capture then
    needed = {}
    local makes = {}
    for t in pairs(capture) do
      local s = state(t, 1)
      if s and s.node then makes[s.node] = true end
    end
    for _, node in ipairs(order) do     -- children before parents
      for i = 1, node.ne, 4 do
        local e = node[i]
        if (type(e) == "table" and (needed[e] or makes[e])) or (type(e) ~= "table" and capture[e]) then
          needed[node] = true
          break
        end
      end
    end
  end
  local bufs = {}
  local captured = {}
  -- A leaf's first gradient becomes its .grad as it is when nothing else can see its memory
  -- (PyTorch's AccumulateGrad steals it so too): a dense tensor over a whole storage that no
  -- other leaf took in this pass and that is no root's gradient (the caller's); otherwise a
  -- copy. A stolen gradient may still be a node's input later in the pass (add passes one
  -- tensor to both sides), so what the leaf gets after it in this pass adds out of place.
  local owned, stolen = {}, {}
  for _, r in ipairs(roots) do
    if is_tensor(r[2]) then owned[select(3, r_version(r[2]))] = true end
  end
  local function first_grad(s, g)
    if not is_tensor(g) then return r_clone(g) end
    local _, partial, key = r_version(g)
    if partial or key == nil or owned[key] or not r_contiguous(g) then return r_clone(g) end
    owned[key], stolen[s] = true, true
    return g
  end
  local function give_leaf(t, g)
    if capture then
      local slot = capture[t]
      if slot then accumulate(captured, slot, g) end
      return
    end
    local s = state(t, 1)
    if s.grad == nil then
      s.grad = create and g or first_grad(s, g)     -- (the C functions: nothing records)
    elseif create or stolen[s] then
      s.grad, stolen[s] = s.grad + g, nil
    else
      raw.add_(s.grad, g)
    end
    if got and s.hooks then got[t] = true end
  end
  local saved, saved_callbacks = enabled, callbacks
  enabled = create and true or false
  callbacks = {}
  local ok, err = pcall(function()
  for _, r in ipairs(roots) do
    local s = state(r[1], 1)
    if s and s.node then
      bufs[s.node] = bufs[s.node] or {}
      accumulate(bufs[s.node], s.idx, r[2])
    elseif s and s.req then
      give_leaf(r[1], r[2])
      if pending and got[r[1]] and not pending[r[1]] then fire_hooks(r[1]) end
    end
  end
    for k = #order, 1, -1 do
      local node = order[k]
      local gs = bufs[node]
      if gs then
        bufs[node] = nil
        if capture then
          for t, slot in pairs(capture) do
            local s = state(t, 1)
            if s and s.node == node and gs[s.idx] then accumulate(captured, slot, gs[s.idx]) end
          end
        end
        if needed and not needed[node] then goto continue end
        if node.freed then
          error("backward: the graph was already freed by an earlier backward (" .. node.name
                  .. "); pass retain_graph = true to the first one to go through it again", 0)
        end
        check_versions(node)
        local def = node.def
        local g, out
        local outs = node.outs
        if def.multi then g, out = gs, outs
        else g, out = gs[1], outs and outs[1] end
        local grads = def.backward(g, node.args, out, node)
        local edges = node
        for i = 1, node.ne, 4 do
          local target, pos, j = edges[i], edges[i + 2], edges[i + 3]
          local gi = grads[pos]
          if j then gi = gi and gi[j] end
          if gi ~= nil then
            local t = node.args[pos]
            if j then t = t[j] end
            -- summed back to t's shape when it came broadcast (as many elements and dims:
            -- it is t's shape, and no shape table is made)
            if is_tensor(gi) and (r_numel(gi) ~= r_numel(t) or r_dim(gi) ~= r_dim(t)) then
              gi = sum_to(gi, r_shape(t))
            end
            -- in t's dtype (an op whose operands promoted gives the wider type back, as
            -- PyTorch's engine casts it)
            if is_tensor(gi) and is_tensor(t) and r_dtype(gi) ~= r_dtype(t) then gi = gi:to(r_dtype(t)) end
            if type(target) == "table" then
              local b = bufs[target]
              if b == nil then b = {}; bufs[target] = b end
              accumulate(b, edges[i + 1], gi)
            else
              give_leaf(target, gi)
            end
          end
          local left = pending and type(target) ~= "table" and pending[target]
          if left then
            if left > 1 then pending[target] = left - 1
            else
              pending[target] = nil
              if got[target] then fire_hooks(target) end
            end
          end
        end
        if not retain then node.args, node.outs, node.versions, node.freed = nil, nil, nil, true end
      end
      ::continue::
    end
    -- leaves whose remaining edges lay on nodes that got no gradient
    if pending then
      for t in pairs(pending) do
        if got[t] then fire_hooks(t) end
      end
    end
    local i = 1
    while callbacks[i] do
      callbacks[i]()
      i = i + 1
    end
  end)
  enabled, callbacks = saved, saved_callbacks
  if not ok then error(err, 0) end
  return captured
end

local function check_gradient(y, g, who)
  if g == nil then
    if y:numel() ~= 1 then
      error(who .. ": a gradient is needed for a tensor of " .. y:numel() ..
              " elements (only a one-element output has an implicit gradient of 1)", 0)
    end
    return qlua.ones_like(y)
  end
  if type(g) == "number" then return qlua.full_like(y, g) end
  if not is_tensor(g) then error(who .. ": the gradient must be a tensor, got a " .. type(g), 0) end
  local ys, gs = table.concat(y:shape(), "x"), table.concat(g:shape(), "x")
  if ys ~= gs then error(who .. ": gradient of shape " .. gs .. " for a tensor of shape " .. ys, 0) end
  return g
end

function A.backward(y, gradient, opts)
  if type(gradient) == "table" and not is_tensor(gradient) then gradient, opts = nil, gradient end
  opts = opts or {}
  if not requires(y) then
    error("backward: the tensor does not require grad (no recorded op made it)", 0)
  end
  local g = check_gradient(y, gradient, "backward")
  local create = opts.create_graph and true or false
  run({ { y, g } }, opts.retain_graph or create, create, nil)
end

function A.grad(outputs, inputs, opts)
  opts = opts or {}
  local single_in = is_tensor(inputs)
  if is_tensor(outputs) then outputs = { outputs } end
  if single_in then inputs = { inputs } end
  local gouts = opts.grad_outputs
  if is_tensor(gouts) then gouts = { gouts } end
  local roots = {}
  for i, y in ipairs(outputs) do
    if not requires(y) then error("autograd.grad: output " .. i .. " does not require grad", 0) end
    roots[i] = { y, check_gradient(y, gouts and gouts[i], "autograd.grad") }
  end
  local capture = {}
  for i, x in ipairs(inputs) do
    if not requires(x) then error("autograd.grad: input " .. i .. " does not require grad", 0) end
    capture[x] = i
  end
  local create = opts.create_graph and true or false
  local retain = opts.retain_graph
  if retain == nil then retain = create end
  local got = run(roots, retain, create, capture)
  local res = {}
  for i, x in ipairs(inputs) do
    local g = got[i]
    if g == nil and not opts.allow_unused then
      error("autograd.grad: input " .. i .. " was not used to compute the outputs "
              .. "(allow_unused = true gives nil for it)", 0)
    end
    if g ~= nil then g = sum_to(g, x:shape()) end
    res[i] = g
  end
  return res
end

-- ------------------------------------------------------------- custom functions
--   local Cube = qlua.autograd.Function{
--     forward = function(ctx, x) ctx:save_for_backward(x); return x ^ 3 end,
--     backward = function(ctx, g) local x = ctx.saved_tensors[1]; return g * 3 * x ^ 2 end }
--   local y = Cube(x)            -- or Cube.apply(x)
function A.Function(spec)
  if type(spec) ~= "table" or type(spec.forward) ~= "function" or type(spec.backward) ~= "function" then
    error("autograd.Function: expects {forward = function(ctx, ...), backward = function(ctx, grad, ...)}", 0)
  end
  local F = {}
  local def = { multi = true }
  def.backward = function(gs, args, _)
    local ctx = args.ctx
    local g = {}
    for k = 1, ctx.nout do
      g[k] = gs[k] or qlua.zeros(ctx.shapes[k][1], { dtype = ctx.shapes[k][2], device = ctx.shapes[k][3] })
    end
    local r = pack(spec.backward(ctx, unpack(g, 1, ctx.nout)))
    local grads = {}
    for i = 1, args.n do grads[i] = r[i] end
    return grads
  end
  function F.apply(...)
    local args = pack(...)
    local ctx = { needs_input_grad = {}, saved_tensors = {}, nondiff = {} }
    function ctx.save_for_backward(c, ...) c.saved_tensors = { ... } end
    function ctx.mark_non_differentiable(c, ...) for _, t in ipairs({ ... }) do c.nondiff[t] = true end end
    local any = false
    for i = 1, args.n do
      ctx.needs_input_grad[i] = is_tensor(args[i]) and requires(args[i]) or false
      any = any or ctx.needs_input_grad[i]
    end
    local res = pack(A.no_grad(spec.forward, ctx, ...))
    if not (enabled and any) then return unpack(res, 1, res.n) end
    local node = new_node(spec.name or "Function", def, args)
    args.ctx = ctx
    local versions = {}
    for i = 1, args.n do
      if is_tensor(args[i]) then add_edge(node, args[i], i) end
    end
    for _, t in ipairs(ctx.saved_tensors) do
      if is_tensor(t) then versions[#versions + 1] = t; versions[#versions + 1] = r_version(t) end
    end
    node.versions = versions
    ctx.shapes, ctx.nout = {}, res.n
    node.outs, node.shapes = {}, {}
    for k = 1, res.n do
      local o = res[k]
      if is_tensor(o) then
        ctx.shapes[k] = { o:shape(), o:dtype(), o:device() }
        if FLOAT[o:dtype()] and not ctx.nondiff[o] then
          -- a result that is an input as it was (forward returned x) gets its own view
          if state(o, 1) then o = raw.expand(o, o:shape()); res[k] = o end
          set_state(o, k == 1 and node or { req = true, node = node, idx = k }, 1)
        end
      end
    end
    node.nout = res.n
    return unpack(res, 1, res.n)
  end
  return setmetatable(F, { __call = function(_, ...) return F.apply(...) end })
end

-- ------------------------------------------------------------- checking against differences
local function elements(t)
  -- the positions of t's elements in row-major order, as 0-d views
  local shape, list = t:shape(), {}
  local function walk(v, d)
    if d > #shape then list[#list + 1] = v; return end
    for i = 1, shape[d] do walk(v:select(1, i), d + 1) end
  end
  walk(t, 1)
  return list
end

local function flat_values(t)
  local v = t:double():cpu():contiguous():reshape({ t:numel() })
  local out = {}
  for i = 1, t:numel() do out[i] = v[i] end
  return out
end

-- fn(inputs...) returns a tensor; inputs: a list of tensors (float64 to be meaningful).
-- Compares the analytic Jacobian (autograd.grad) with central differences.
function A.gradcheck(fn, inputs, opts)
  opts = opts or {}
  local eps, atol, rtol = opts.eps or 1e-6, opts.atol or 1e-5, opts.rtol or 1e-3
  local raise = opts.raise_exception ~= false
  local function fail(msg)
    if raise then error("gradcheck: " .. msg, 0) end
    return false, msg
  end
  local diff = {}
  for i, x in ipairs(inputs) do if is_tensor(x) and requires(x) then diff[#diff + 1] = i end end
  local function call()
    local y = fn(unpack(inputs))
    -- a full reduction is a number when nothing records (the differences' calls)
    if type(y) == "number" then return qlua.tensor(y, { dtype = "float64" }) end
    if not is_tensor(y) then error("gradcheck: fn must return a tensor", 0) end
    return y
  end
  -- analytic first (the differences below write into the inputs the graph saved): row k
  -- of the Jacobian from the output's element k, for every input at once, off one graph
  local wrt = {}
  for w, i in ipairs(diff) do wrt[w] = inputs[i] end
  local y = call()
  local m = y:numel()
  local rows = {}
  for k = 1, m do
    local gout = qlua.zeros_like(y)
    A.no_grad(function() elements(gout)[k]:fill_(1) end)
    local gs = A.grad(y, wrt, { grad_outputs = { gout }, retain_graph = k < m, allow_unused = true })
    rows[k] = {}
    for w = 1, #wrt do rows[k][w] = gs[w] and flat_values(gs[w]) or {} end
  end
  -- numerical: column j of the Jacobian from input element j, by central differences
  for w, i in ipairs(diff) do
    local elems = A.no_grad(elements, inputs[i])
    for j, e in ipairs(elems) do
      local orig = e:item()
      local plus = A.no_grad(function() e:fill_(orig + eps); return flat_values(call()) end)
      local minus = A.no_grad(function() e:fill_(orig - eps); return flat_values(call()) end)
      A.no_grad(function() e:fill_(orig) end)
      for k = 1, m do
        local a, b = rows[k][w][j] or 0, (plus[k] - minus[k]) / (2 * eps)
        if math.abs(a - b) > atol + rtol * math.abs(b) or a ~= a then
          return fail(string.format("input %d element %d, output element %d: analytic %.10g, " ..
                                    "numerical %.10g", i, j, k, a, b))
        end
      end
    end
  end
  return true
end

-- The gradient's gradient: gradcheck of (inputs..., v) -> autograd.grad(fn, inputs, v)
-- with create_graph, v a random gradient of fn's output.
function A.gradgradcheck(fn, inputs, opts)
  opts = opts or {}
  local y = A.no_grad(function() return fn(unpack(inputs)) end)
  local v = qlua.randn(y:shape(), { dtype = y:dtype(), device = y:device() })
  A.requires_grad_(v, true)
  local diff = {}
  for _, x in ipairs(inputs) do if is_tensor(x) and requires(x) then diff[#diff + 1] = x end end
  local all = { unpack(inputs) }
  all[#all + 1] = v
  local gfn_body
  local function gfn(...)
    return A.enable_grad(gfn_body, ...)
  end
  function gfn_body(...)
    local args = { ... }
    local out = fn(unpack(args, 1, #inputs))
    local gs = A.grad(out, diff, { grad_outputs = { args[#args] }, create_graph = true,
                                   allow_unused = true })
    local flat = {}
    for i, g in ipairs(gs) do flat[#flat + 1] = (g or diff[i] * 0):reshape({ -1 }) end
    return #flat == 1 and flat[1] or qlua.cat(flat, 1)
  end
  return A.gradcheck(gfn, all, opts)
end

-- ------------------------------------------------------------- the tensor API
function A.requires_grad_(t, flag)
  if flag == nil then flag = true end
  if flag then
    if not FLOAT[t:dtype()] then
      error("requires_grad_: only floating tensors can require grad (this one is " .. t:dtype() .. ")", 0)
    end
    local s = state(t, 1)
    if s == nil then set_state(t, { req = true }, 1) else s.req = true end
  else
    local s = state(t, 1)
    if s and s.node then
      error("requires_grad_: a non-leaf tensor cannot stop requiring grad (use t:detach())", 0)
    end
    if s then s.req = false end
  end
  return t
end

local extra = {}
extra.requires_grad_ = A.requires_grad_
function extra.requires_grad(t) return requires(t) end
function extra.is_leaf(t) local s = state(t, 1); return s == nil or s.node == nil end
function extra.grad_fn(t) local s = state(t, 1); return s and s.node and s.node.name or nil end
function extra.detach(t) return raw.expand(t, t:shape()) end
function extra.detach_(t)
  if state(t, 1) then set_state(t, { req = false }, 1) end
  return t
end
extra.backward = A.backward

-- t:register_post_accumulate_grad_hook(fn): fn(t) runs in each backward pass once t's .grad
-- holds all of that pass's gradient (PyTorch 2.1's name), while the rest of the pass is still
-- to run: where DistributedDataParallel starts reducing a bucket. Returns a handle whose
-- remove() takes it off. Only leaves that require grad take hooks.
function extra.register_post_accumulate_grad_hook(t, fn)
  local who = "register_post_accumulate_grad_hook"
  if type(fn) ~= "function" and not (getmetatable(fn) or {}).__call then
    error(who .. ": a function expected, got a " .. type(fn), 0)
  end
  local s = state(t, 1)
  if not (s and s.req) or s.node then error(who .. ": only a leaf that requires grad takes one", 0) end
  s.hooks = s.hooks or {}
  local h = { fn = fn }
  s.hooks[#s.hooks + 1] = h
  hook_count = hook_count + 1
  return { remove = function()
    for i, x in ipairs(s.hooks) do
      if x == h then
        table.remove(s.hooks, i)
        hook_count = hook_count - 1
        return
      end
    end
  end }
end

-- autograd.queue_callback(fn): fn() runs once the backward pass under way has run its last
-- node (PyTorch's engine.queue_callback); an error outside a backward pass.
function A.queue_callback(fn)
  if callbacks == nil then error("queue_callback: only during a backward pass (from a hook)", 0) end
  if type(fn) ~= "function" then error("queue_callback: a function expected, got a " .. type(fn), 0) end
  callbacks[#callbacks + 1] = fn
end

local function getfield(t, key)
  if key == "grad" then local s = state(t, 1); return s and s.grad or nil end
  return nil
end
local function setfield(t, key, v)
  if key ~= "grad" then error("index: cannot assign to key '" .. tostring(key) .. "' of a qlua.Tensor", 0) end
  if v ~= nil then
    if not is_tensor(v) then error("grad: a tensor or nil expected, got a " .. type(v), 0) end
    local ts, vs = table.concat(t:shape(), "x"), table.concat(v:shape(), "x")
    if ts ~= vs or t:device() ~= v:device() or t:dtype() ~= v:dtype() then
      error(string.format("grad: a gradient of %s %s on %s for a tensor of %s %s on %s",
                          v:dtype(), vs, v:device(), t:dtype(), ts, t:device()), 0)
    end
  end
  local s = state(t, 1)
  if s == nil then
    if v == nil then return end
    s = { req = false }; set_state(t, s, 1)
  end
  s.grad = v
end

-- ------------------------------------------------------------- installing
local FULL = { sum = true, mean = true, prod = true, amax = true, amin = true, max = true,
               min = true, median = true, var = true, std = true, norm = true }
for name, fn in pairs(raw) do
  if type(fn) == "function" and name:sub(1, 2) ~= "__" and not extra[name] then
    METHODS[name] = FULL[name] and full_reduction(name, fn) or wrap_method(name, fn)
  end
end
for name, fn in pairs(extra) do METHODS[name] = fn end
for _, k in ipairs(OPERATORS) do
  local fn = raw[k]
  if fn then
    local fin = finisher(k, false)
    rawset(Tensor, k, function(a, b)
      if enabled then
        local sa, sb = state(a, 1), state(b, 1)
        if (sa ~= nil and sa.req) or (sb ~= nil and sb.req) then return record(k, fin, fn, a, b) end
      end
      return fin(pcall(fn, a, b))
    end)
  end
end
rawset(Tensor, "__getfield", getfield)
rawset(Tensor, "__setfield", setfield)
-- reads t[i], t[{...}], t[mask] (l_tensor.c calls __keyed with the read's result)
rawset(Tensor, "__keyed", function(t, k, r)
  if enabled and is_tensor(r) and needs(t) then return record_read(t, k, r) end
  return r
end)
-- writes t[k] = v: recorded as the in-place op "index_put" when t or v requires grad
do
  local fin = finisher("index", false)
  rawset(Tensor, "__newindex", function(t, k, v)
    if type(k) ~= "string" and enabled and (needs(t) or needs(v)) then
      record_inplace("index_put", fin, raw_newindex, t, k, v)
      return
    end
    return raw_newindex(t, k, v)
  end)
end

-- module functions: the ones that take tensors record; creation takes requires_grad
local MODULE_OPS = { "matmul", "where", "cat", "stack", "cross_entropy", "einsum", "addmm", "conv2d",
                     "conv_transpose2d", "conv2d_input", "conv2d_weight", "_norm", "_pool2d",
                     "_attention" }
for _, name in ipairs(MODULE_OPS) do
  local fn = rawq[name]
  if fn then
    local fin = finisher(name, false)
    qlua[name] = function(...)
      if enabled and needs(...) then return record(name, fin, fn, ...) end
      return fin(pcall(fn, ...))
    end
  end
end
-- where(cond, a, b): cond is never differentiable; its first operand is not a list
do
  local fn, fin = rawq.where, finisher("where", false)
  qlua.where = function(...)
    local cond, a, b = ...
    if enabled and (needs(a) or needs(b)) then return record("where", fin, fn, ...) end
    return fin(pcall(fn, ...))
  end
end
local CREATION = { "tensor", "zeros", "ones", "empty", "full", "rand", "randn", "arange",
                   "range", "linspace", "logspace", "eye", "zeros_like", "ones_like",
                   "empty_like", "full_like", "rand_like", "randn_like", "randint" }
for _, name in ipairs(CREATION) do
  local fn = rawq[name]
  if fn then
    local fin = finisher(name, false)
    qlua[name] = function(...)
      local n = select("#", ...)
      local last = n > 0 and select(n, ...) or nil
      if type(last) == "table" and not is_tensor(last) and last.requires_grad ~= nil then
        local opts = {}
        for k, v in pairs(last) do if k ~= "requires_grad" then opts[k] = v end end
        local args = pack(...)
        args[n] = opts
        local t = fin(pcall(fn, unpack(args, 1, n)))
        if last.requires_grad then A.requires_grad_(t, true) end
        return t
      end
      return fin(pcall(fn, ...))
    end
  end
end

qlua.no_grad, qlua.enable_grad, qlua.is_grad_enabled = A.no_grad, A.enable_grad, A.is_grad_enabled
qlua.set_grad_enabled = A.set_grad_enabled

-- qlua.help: its entries (the registry's list that the binding's rows make) name the
-- wrappers now, and gain autograd's functions and methods
do
  local api = debug.getregistry()["qlua.api"]
  if type(api) == "table" then
    for _, e in ipairs(api) do
      if e.topic == "Tensor" and raw[e.name] == e.fn and METHODS[e.name] then e.fn = METHODS[e.name] end
      if e.topic == "qlua" and rawq[e.name] == e.fn and qlua[e.name] then e.fn = qlua[e.name] end
    end
    local function add(topic, name, fn, args, help)
      api[#api + 1] = { topic = topic, name = name, fn = fn, args = args, help = help }
    end
    add("Tensor", "requires_grad_", extra.requires_grad_, "([flag])",
        "marks t (a floating leaf) as requiring grad (flag false: not); returns t")
    add("Tensor", "requires_grad", extra.requires_grad, "()", "whether t requires grad")
    add("Tensor", "is_leaf", extra.is_leaf, "()", "true unless a recorded op made t")
    add("Tensor", "grad_fn", extra.grad_fn, "()", "the name of the recorded op that made t, or nil")
    add("Tensor", "detach", extra.detach, "()", "a view of t's storage outside the graph")
    add("Tensor", "detach_", extra.detach_, "()", "takes t out of the graph, in place; returns t")
    add("Tensor", "backward", extra.backward, "([gradient] [, {retain_graph =, create_graph =}])",
        "accumulates d t / d leaf into every leaf's .grad (gradient: needed unless t has one element)")
    add("Tensor", "register_post_accumulate_grad_hook", extra.register_post_accumulate_grad_hook, "(fn)",
        "fn(t) runs in each backward pass once t's .grad is complete for it; returns {remove = ...}")
    add("qlua", "no_grad", A.no_grad, "(fn, ...)", "fn(...) with recording off; returns its results")
    add("qlua", "enable_grad", A.enable_grad, "(fn, ...)", "fn(...) with recording on; returns its results")
    add("qlua", "is_grad_enabled", A.is_grad_enabled, "()", "whether ops on tensors that require grad record")
    add("qlua", "set_grad_enabled", A.set_grad_enabled, "(flag)", "turns recording on or off")
  end
end
qlua.autograd = A
return A
