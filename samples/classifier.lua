-- classifier.lua — a small classifier trained end to end on the GPU: a two-layer network
-- (ReLU hidden layer) learns to tell 10 overlapping Gaussian clusters apart, by minibatch
-- SGD with momentum, batches shuffled by qlua.randperm each epoch and qlua.cross_entropy as
-- the loss, its gradients from qlua.autograd (loss:backward()).
--   qlua samples/classifier.lua [train_samples] [epochs]
-- Without a GPU it trains on the CPU (smaller defaults). It checks itself, and fails loudly:
--   * the backward pass written out by hand (six products) against central differences of
--     cross_entropy (float64), and autograd's gradients against the hand-written ones;
--   * the loss falls, and the test accuracy comes within 3 points of the nearest-centre
--     rule that knows the true centres (the best a classifier can do here, near enough);
--   * with a GPU, the first 20 steps again on the CPU from the same start: the weights agree.

-- qlua.autograd lives in the checkout's lua/ (docs/API.md), next to this script's folder
package.path = (arg[0]:match("^(.*)/[^/]*$") or ".") .. "/../lua/?.lua;" .. package.path
local autograd = require "qlua.autograd"

local has_gpu = qlua.gpu_count() > 0
local dev = has_gpu and "gpu" or "cpu"
local n_train = math.tointeger(tonumber(arg[1]) or (has_gpu and 200000 or 20000))
local epochs = math.tointeger(tonumber(arg[2]) or (has_gpu and 8 or 4))
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
local function new_params(opts)
  local p = {
    w1 = qlua.randn({D, H}, opts) * math.sqrt(2 / D), b1 = qlua.zeros({H}, opts),
    w2 = qlua.randn({H, C}, opts) * math.sqrt(1 / H), b2 = qlua.zeros({C}, opts),
  }
  for _, t in pairs(p) do t:requires_grad_() end
  return p
end
local names = {"w1", "b1", "w2", "b2"}

local function forward(p, x)
  local z1 = x:matmul(p.w1) + p.b1
  local h = z1:relu()
  return h:matmul(p.w2) + p.b2, z1, h
end

-- d(mean cross-entropy)/d(params) for one batch, derived by hand (the check of autograd)
local function hand_gradients(p, x, y)
  local n = x:size(1)
  local logits, z1, h = forward(p, x)
  local onehot = qlua.zeros({n, C}, {dtype = logits:dtype(), device = logits:device()})
  onehot:scatter_(2, y:view(n, 1), 1)
  local dlogits = (logits:softmax(2) - onehot) / n
  local dh = dlogits:matmul(p.w2:t())
  dh:masked_fill_(z1:le(0), 0)
  return {
    w1 = x:t():matmul(dh), b1 = dh:sum(1),
    w2 = h:t():matmul(dlogits), b2 = dlogits:sum(1),
  }, logits
end

-- the same by autograd: the mean cross-entropy's backward, into each parameter's .grad
local function gradients(p, x, y)
  local logits = forward(p, x)
  for _, name in ipairs(names) do p[name].grad = nil end
  qlua.cross_entropy(logits, y):backward()
  local g = {}
  for _, name in ipairs(names) do g[name] = p[name].grad end
  return g, logits
end

-- 1. the hand-written backward pass against central differences, and autograd's against
-- it, in float64 on the CPU
do
  local p = new_params({dtype = "float64"})
  local x, y = x_train:narrow(1, 1, 16):to("float64"), y_train:narrow(1, 1, 16)
  local g = qlua.no_grad(hand_gradients, p, x, y)
  local auto = gradients(p, x, y)
  local apart = 0
  for _, name in ipairs(names) do
    apart = math.max(apart, (auto[name] - g[name]):abs():max() / math.max(1e-12, g[name]:abs():max()))
  end
  assert(apart < 1e-10, ("autograd and the hand-written gradient differ: %.3g"):format(apart))
  print(("autograd against the hand-written gradient: agree to %.2g"):format(apart))
  local function loss() return qlua.cross_entropy((forward(p, x)), y):item() end
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

-- one SGD-with-momentum step on the batch at positions idx (int64, 1-based)
local function step(p, v, x, y, idx)
  local g, logits = gradients(p, x:index_select(1, idx), y:index_select(1, idx))
  qlua.no_grad(function()
    for _, name in ipairs(names) do
      v[name]:mul_(momentum):add_(g[name])
      p[name]:sub_(v[name] * lr)
    end
  end)
  return logits
end

local function evaluate(p, x, y)
  return qlua.no_grad(function()
    local logits = forward(p, x)
    return qlua.cross_entropy(logits, y):item(), logits:argmax(2):eq(y):sum() / y:numel()
  end)
end

local start = new_params()                            -- float32 on the CPU
local function copy_params(p, device)
  local q = {}
  for _, name in ipairs(names) do q[name] = p[name]:detach():to(device):clone():requires_grad_() end
  return q
end
local function zero_like_params(p)
  local v = {}
  for _, name in ipairs(names) do v[name] = qlua.zeros_like(p[name]) end
  return v
end

-- 2. train on dev
local p, v = copy_params(start, dev), zero_like_params(start)
for _, name in ipairs(names) do v[name] = v[name]:to(dev) end
local xd, yd = x_train:to(dev), y_train:to(dev)
local xt, yt = x_test:to(dev), y_test:to(dev)
local loss0, acc0 = evaluate(p, xt, yt)
print(("%s: %d training samples, %d test, %d -> %d -> %d, batch %d"):format(
  dev, n_train, n_test, D, H, C, B))
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
    step(p, v, xd, yd, idx)
    if epoch == 1 and #first_batches == replay_steps and not first_batches.weights then
      first_batches.weights = copy_params(p, "cpu")
    end
  end
  loss, acc = evaluate(p, xt, yt)
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

-- 3. with a GPU: the same first steps (20, or fewer with few batches) on the CPU from the
-- same start give the same weights
if has_gpu then
  local q, w = copy_params(start, "cpu"), zero_like_params(start)
  for _, idx in ipairs(first_batches) do step(q, w, x_train, y_train, idx) end
  local worst = 0
  for _, name in ipairs(names) do
    local a, b = q[name]:detach(), first_batches.weights[name]:detach()
    worst = math.max(worst, (a - b):abs():max() / math.max(1e-6, a:abs():max()))
  end
  assert(worst < 1e-3, ("GPU and CPU training differ after %d steps: %.3g"):format(replay_steps, worst))
  print(("cpu replay of the first %d steps: weights agree to %.2g (relative)"):format(replay_steps, worst))
end

print(("classifier ok: %.2f%% test accuracy in %d epochs, %.2f s"):format(100 * acc, epochs,
  elapsed))
