-- classifier.lua — a small classifier trained end to end on the GPU: a two-layer network
-- (qlua.nn: Linear, ReLU, Linear) learns to tell 10 overlapping Gaussian clusters apart, by
-- minibatch SGD with momentum (qlua.optim.SGD), batches shuffled by qlua.randperm each
-- epoch, cross_entropy as the loss and its gradients from qlua.autograd (loss:backward()).
--   qlua samples/classifier.lua [--graph] [train_samples] [epochs]
-- --graph captures the whole training step (forward, backward, update) once as a CUDA graph
-- (qlua.graph) after one eager warm-up step, and replays it for every batch, which is picked
-- by copy_ into the graph's index input; it then also checks that the weights after the
-- first steps equal those of the same steps run eagerly on the GPU.
-- Without a GPU it trains on the CPU (smaller defaults). It checks itself, and fails loudly:
--   * the backward pass written out by hand (six products) against central differences of
--     cross_entropy (float64), and autograd's gradients against the hand-written ones;
--   * the loss falls, and the test accuracy comes within 3 points of the nearest-centre
--     rule that knows the true centres (the best a classifier can do here, near enough);
--   * with a GPU, the first 20 steps again on the CPU from the same start: the weights agree.

-- qlua's Lua libraries live in the checkout's lua/ (the qlua binary finds them there, or
-- where make install put them); this line also serves a stock lua5.4 -l qlua
package.path = (arg[0]:match("^(.*)/[^/]*$") or ".") .. "/../lua/?.lua;" .. package.path
local nn, optim = require "qlua.nn", require "qlua.optim"
local F = nn.functional

local has_gpu = qlua.gpu_count() > 0
local dev = has_gpu and "gpu" or "cpu"
local argv = { table.unpack(arg) }
local use_graph = argv[1] == "--graph"
if use_graph then table.remove(argv, 1) end
local n_train = math.tointeger(tonumber(argv[1]) or (has_gpu and 200000 or 20000))
local epochs = math.tointeger(tonumber(argv[2]) or (has_gpu and 8 or 4))
local n_test = math.max(1000, n_train // 5)
local D, H, C, B = 32, 128, 10, 256                -- features, hidden units, classes, batch
local lr, momentum = 0.05, 0.9
assert(n_train >= B, ("classifier: needs at least %d training samples (one batch), got %d"):format(B, n_train))
local replay_steps = math.min(20, n_train // B)     -- check 3 replays these on the CPU

qlua.seed(7)
math.randomseed(7)
local centres = qlua.randn({C, D}) * 0.55             -- close enough that clusters overlap

local function make_data(n)
  local y = qlua.randint(1, C, n)                     -- int64 class labels, 1-based
  local x = centres:index_select(1, y) + qlua.randn({n, D})
  return x, y
end
local x_train, y_train = make_data(n_train)
local x_test, y_test = make_data(n_test)

-- the nearest-centre rule with the true centres: |x - c|^2 = |x|^2 - 2 x.c + |c|^2
local function nearest_centre_accuracy(x, y)
  local d = (centres * centres):sum(2):view(1, C) - x:matmul(centres:t()) * 2
  return d:argmin(2):eq(y):sum() / y:numel()
end

-- the parameters: leaves that require grad
-- the network: weights out x in, as PyTorch's (fc1 32 -> 128, fc2 128 -> 10)
local function new_model(opts)
  return nn.Sequential(nn.Linear(D, H, opts), nn.ReLU(), nn.Linear(H, C, opts))
end
local names = {"0.weight", "0.bias", "2.weight", "2.bias"}
local function params_of(model)
  local sd = {}
  for _, np in ipairs(model:named_parameters()) do sd[np[1]] = np[2] end
  return sd
end

-- 1. the backward pass by hand: z1 = x W1^T + b1, h = relu(z1), logits = h W2^T + b2
local function hand_gradients(model, x, y)
  local p = params_of(model)
  local n = x:size(1)
  local z1 = x:matmul(p["0.weight"]:t()) + p["0.bias"]
  local h = z1:relu()
  local logits = h:matmul(p["2.weight"]:t()) + p["2.bias"]
  local onehot = qlua.zeros({n, C}, {dtype = logits:dtype(), device = logits:device()})
  onehot:scatter_(2, y:view(n, 1), 1)
  local dlogits = (logits:softmax(2) - onehot) / n
  local dh = dlogits:matmul(p["2.weight"])
  dh:masked_fill_(z1:le(0), 0)
  return {
    ["0.weight"] = dh:t():matmul(x), ["0.bias"] = dh:sum(1),
    ["2.weight"] = dlogits:t():matmul(h), ["2.bias"] = dlogits:sum(1),
  }
end

-- autograd's gradients of the same loss
local function gradients(model, x, y)
  model:zero_grad()
  F.cross_entropy(model(x), y):backward()
  local g = {}
  for name, t in pairs(params_of(model)) do g[name] = t.grad end
  return g
end

do
  local model = new_model({dtype = "float64"})
  local p = params_of(model)
  local x, y = x_train:narrow(1, 1, 16):to("float64"), y_train:narrow(1, 1, 16)
  local g = qlua.no_grad(hand_gradients, model, x, y)
  local auto = gradients(model, x, y)
  local apart = 0
  for _, name in ipairs(names) do
    apart = math.max(apart, (auto[name] - g[name]):abs():max() / math.max(1e-12, g[name]:abs():max()))
  end
  assert(apart < 1e-10, ("autograd and the hand-written gradient differ: %.3g"):format(apart))
  print(("autograd against the hand-written gradient: agree to %.2g"):format(apart))
  local function loss() return F.cross_entropy(model(x), y):item() end
  local eps, worst = 1e-6, 0
  qlua.no_grad(function()
    for _, name in ipairs(names) do
      local flat = p[name]:detach():view(-1)
      local gflat = g[name]:view(-1)
      for _ = 1, 6 do
        local i = math.random(flat:numel())
        local v = flat[i]
        flat[i] = v + eps; local up = loss()
        flat[i] = v - eps; local down = loss()
        flat[i] = v
        local numeric, analytic = (up - down) / (2 * eps), gflat[i]
        worst = math.max(worst, math.abs(numeric - analytic) / math.max(1e-3, math.abs(numeric)))
      end
    end
  end)
  assert(worst < 1e-5, ("gradient check: relative error %.3g"):format(worst))
  print(("gradient check: 24 entries, worst relative error %.2g"):format(worst))
end

-- 2. training: one step is forward, backward, and the optimizer's momentum update
local function step(model, opt, x, y, idx)
  opt:zero_grad()
  local logits = model(x:index_select(1, idx))
  F.cross_entropy(logits, y:index_select(1, idx)):backward()
  opt:step()
  return logits
end

local function evaluate(model, x, y)
  return qlua.no_grad(function()
    local logits = model(x)
    return F.cross_entropy(logits, y):item(), logits:argmax(2):eq(y):sum() / y:numel()
  end)
end

local start = new_model():state_dict()               -- float32 on the CPU: both runs' start
local function model_from(sd, device)
  local m = new_model({device = device})
  m:load_state_dict(sd)
  return m
end
local function new_optimizer(model) return optim.SGD(model:parameters(), {lr = lr, momentum = momentum}) end

-- train on dev
local model = model_from(start, dev)
local opt = new_optimizer(model)
local xd, yd = x_train:to(dev), y_train:to(dev)
local xt, yt = x_test:to(dev), y_test:to(dev)
local loss0, acc0 = evaluate(model, xt, yt)
print(("%s%s: %d training samples, %d test, %d -> %d -> %d, batch %d"):format(
  dev, use_graph and (has_gpu and " (the step as a CUDA graph)" or " (qlua.graph: eager on the CPU)") or "",
  n_train, n_test, D, H, C, B))

-- --graph: the step as a graph, captured at its first call after one eager step
local graph, graph_idx
local function train_step(idx)
  if not use_graph then return step(model, opt, xd, yd, idx) end
  if graph_idx == nil then
    step(model, opt, xd, yd, idx)           -- warm-up: the momentum buffers exist from here
    graph_idx = idx:clone()
    graph = qlua.graph(function(i) step(model, opt, xd, yd, i) end, graph_idx)
    return
  end
  graph_idx:copy_(idx)
  graph:replay()
end
print(("epoch 0: test loss %.4f, accuracy %.2f%%"):format(loss0, 100 * acc0))

local first_batches = {}                              -- replayed on the CPU in check 3
qlua.sync()
local t0 = qlua.clock()
local loss, acc
for epoch = 1, epochs do
  local e0 = qlua.clock()
  local order = qlua.randperm(n_train):to(dev)
  for first = 1, n_train - B + 1, B do
    local idx = order:narrow(1, first, B)
    if epoch == 1 and #first_batches < replay_steps then first_batches[#first_batches + 1] = idx:cpu() end
    train_step(idx)
    if epoch == 1 and #first_batches == replay_steps and not first_batches.weights then
      first_batches.weights = model_from(model:state_dict(), "cpu"):state_dict()
    end
  end
  loss, acc = evaluate(model, xt, yt)
  qlua.sync()
  print(("epoch %d: test loss %.4f, accuracy %.2f%%, %.0f ms (%.2f M samples/s)"):format(
    epoch, loss, 100 * acc, (qlua.clock() - e0) * 1e3, n_train / (qlua.clock() - e0) / 1e6))
end
local elapsed = qlua.clock() - t0

local reference = nearest_centre_accuracy(x_test, y_test)
print(("nearest true centre: accuracy %.2f%%"):format(100 * reference))
assert(loss < 0.8 * loss0, ("the loss did not fall: %.4f -> %.4f"):format(loss0, loss))
assert(acc > reference - 0.03, ("test accuracy %.2f%% is more than 3 points below the " ..
  "nearest-centre rule's %.2f%%"):format(100 * acc, 100 * reference))

-- 3a. --graph: the same first steps run eagerly on the same device from the same start give
-- the same weights as the captured step's replays
if use_graph then
  local q = model_from(start, dev)
  local o = new_optimizer(q)
  for _, idx in ipairs(first_batches) do step(q, o, xd, yd, idx:to(dev)) end
  local worst = 0
  local got = model_from(q:state_dict(), "cpu"):state_dict()
  for _, name in ipairs(names) do
    local a, b = got[name], first_batches.weights[name]
    worst = math.max(worst, (a - b):abs():max() / math.max(1e-6, a:abs():max()))
  end
  assert(worst < 1e-5, ("the graph's replays and eager steps differ after %d steps: %.3g"):format(
    replay_steps, worst))
  print(("eager run of the first %d steps: weights agree with the graph's to %.2g (relative)"):format(
    replay_steps, worst))
  graph:free()
end

-- 3. with a GPU: the same first steps (20, or fewer with few batches) on the CPU from the
-- same start give the same weights
if has_gpu then
  local q = model_from(start, "cpu")
  local o = new_optimizer(q)
  for _, idx in ipairs(first_batches) do step(q, o, x_train, y_train, idx) end
  local worst = 0
  local got = q:state_dict()
  for _, name in ipairs(names) do
    local a, b = got[name], first_batches.weights[name]
    worst = math.max(worst, (a - b):abs():max() / math.max(1e-6, a:abs():max()))
  end
  assert(worst < 1e-3, ("GPU and CPU training differ after %d steps: %.3g"):format(replay_steps, worst))
  print(("cpu replay of the first %d steps: weights agree to %.2g (relative)"):format(replay_steps, worst))
end

print(("classifier ok: %.2f%% test accuracy in %d epochs, %.2f s"):format(100 * acc, epochs,
  elapsed))
